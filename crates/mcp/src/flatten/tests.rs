use super::*;
use serde_json::json;

/// Flattens `result` under `max` and compares the text and the cut.
fn check(result: Value, max: usize, text: &str, original: Option<u64>) {
    let flat = flatten(&result, max).unwrap_or_else(|e| panic!("{result}: {e}"));
    assert_eq!(flat.text(), text, "{result}");
    assert_eq!(flat.original_bytes(), original, "{result}");
    assert!(
        flat.text().len() <= max,
        "{result}: {} > {max}",
        flat.text().len()
    );
}

#[test]
fn content_items_follow_the_stated_rules() {
    let cases = [
        (
            json!({"content": [{"type": "text", "text": "hello"}]}),
            "hello",
        ),
        (
            json!({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}),
            "a\nb",
        ),
        (
            // 8 base64 chars, one padding: 5 bytes.
            json!({"content": [{"type": "image", "data": "aGVsbG8=", "mimeType": "image/png"}]}),
            "[image: image/png, 5 bytes]",
        ),
        (
            json!({"content": [{"type": "audio", "data": "AAAA", "mimeType": "audio/wav"}]}),
            "[audio: audio/wav, 3 bytes]",
        ),
        (
            // Unpadded, 7 significant chars (two lines): 5 bytes.
            json!({"content": [{"type": "image", "data": "aGVs\nbG8", "mimeType": "image/gif"}]}),
            "[image: image/gif, 5 bytes]",
        ),
        (
            json!({"content": [{"type": "resource", "resource": {"uri": "file:///a.txt", "mimeType": "text/plain", "text": "hello world"}}]}),
            "[resource: text/plain, 11 bytes, file:///a.txt]",
        ),
        (
            json!({"content": [{"type": "resource", "resource": {"uri": "file:///b.bin", "blob": "AAAAAA=="}}]}),
            "[resource: unknown type, 4 bytes, file:///b.bin]",
        ),
        (
            json!({"content": [{"type": "resource_link", "uri": "file:///c", "name": "c", "mimeType": "text/csv"}]}),
            "[resource link: file:///c, text/csv]",
        ),
        (
            json!({"content": [{"type": "hologram"}]}),
            "[content: hologram]",
        ),
        (
            json!({"content": [{"text": "no type"}]}),
            "[content: untyped]",
        ),
        (json!({"content": []}), ""),
        (json!({}), ""),
    ];
    for (result, text) in cases {
        check(result, 1024, text, None);
    }
}

#[test]
fn structured_content_is_canonical_json_once() {
    check(
        json!({"content": [], "structuredContent": {"b": 1, "a": [true, null]}}),
        1024,
        r#"{"a":[true,null],"b":1}"#,
        None,
    );
    // A text item holding the same JSON (the spec's backwards-compatible
    // form) is not repeated.
    check(
        json!({"content": [{"type": "text", "text": "{\"a\": 1}"}], "structuredContent": {"a": 1}}),
        1024,
        "{\"a\": 1}",
        None,
    );
    check(
        json!({"content": [{"type": "text", "text": "sum"}], "structuredContent": {"a": 1}}),
        1024,
        "sum\n{\"a\":1}",
        None,
    );
}

#[test]
fn is_error_is_reported() {
    let flat = flatten(
        &json!({"content": [{"type": "text", "text": "boom"}], "isError": true}),
        1024,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(flat.is_error());
    assert_eq!(flat.text(), "boom");
    let fine =
        flatten(&json!({"content": [], "isError": false}), 1024).unwrap_or_else(|e| panic!("{e}"));
    assert!(!fine.is_error());
}

#[test]
fn a_text_over_the_bound_is_cut_and_says_so() {
    let long = "x".repeat(5000);
    let flat = flatten(&json!({"content": [{"type": "text", "text": long}]}), 1024)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(flat.original_bytes(), Some(5000));
    assert!(flat.text().len() <= 1024);
    let kept = flat
        .text()
        .find('\n')
        .unwrap_or_else(|| panic!("no marker: {}", flat.text()));
    assert_eq!(
        &flat.text()[kept..],
        format!("\n[output cut: kept {kept} of 5000 bytes]")
    );
    assert!(flat.text()[..kept].bytes().all(|b| b == b'x'));
}

#[test]
fn cuts_fall_on_char_boundaries() {
    let long = "é".repeat(3000);
    let flat = flatten(&json!({"content": [{"type": "text", "text": long}]}), 1025)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(flat.text().len() <= 1025);
    assert!(flat.text().starts_with('é'));
}

#[test]
fn placeholders_bound_what_they_repeat() {
    let uri = format!("file:///{}", "u".repeat(10_000));
    let flat = flatten(
        &json!({"content": [{"type": "resource_link", "uri": uri, "mimeType": "text/plain\u{7}"}]}),
        1 << 20,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(flat.text().len() < 600, "{}", flat.text().len());
    assert!(!flat.text().contains('\u{7}'));
}

/// A placeholder field cut at its bound backs off to a char boundary:
/// a 2-byte char straddling byte 256 is left out whole.
#[test]
fn placeholder_fields_are_cut_at_char_boundaries() {
    let mime = format!("{}é", "m".repeat(255));
    let flat = flatten(
        &json!({"content": [{"type": "resource_link", "uri": "file:///a", "mimeType": mime}]}),
        1 << 20,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        flat.text(),
        format!("[resource link: file:///a, {}]", "m".repeat(255))
    );
}

/// `into_text` gives the text the model reads.
#[test]
fn into_text_is_the_flattened_text() {
    let flat = flatten(&json!({"content": [{"type": "text", "text": "hi"}]}), 1024)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(flat.into_text(), "hi");
}

#[test]
fn a_result_of_the_wrong_shape_is_a_typed_error() {
    for bad in [
        json!([]),
        json!("text"),
        json!({"content": "text"}),
        json!({"content": {}}),
    ] {
        assert_eq!(flatten(&bad, 1024), Err(FlattenError::Shape), "{bad}");
    }
}

proptest::proptest! {
    #[test]
    fn the_bound_always_holds(texts in proptest::collection::vec(".{0,300}", 0..8), max in 64usize..2048) {
        let content: Vec<Value> = texts.iter().map(|t| json!({"type": "text", "text": t})).collect();
        let flat = flatten(&json!({"content": content}), max).unwrap_or_else(|e| panic!("{e}"));
        proptest::prop_assert!(flat.text().len() <= max);
        let joined = texts.join("\n");
        match flat.original_bytes() {
            None => proptest::prop_assert_eq!(flat.text(), joined.as_str()),
            Some(n) => proptest::prop_assert_eq!(n, joined.len() as u64),
        }
    }
}
