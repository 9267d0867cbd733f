use super::*;
use serde_json::json;

/// Flattens `result` under `max` and compares the text and the cut.
fn check(result: Value, max: usize, text: &str, original: Option<u64>) {
    let flat = flatten(&result, max).unwrap_or_else(|e| panic!("{result}: {e}"));
    assert!(flat.images().is_empty(), "{result}");
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
            // 8 base64 chars, one padding: 5 bytes, which are not a PNG.
            json!({"content": [{"type": "image", "data": "aGVsbG8=", "mimeType": "image/png"}]}),
            "[image: image/png, 5 bytes, not shown: rule message.image_signature]",
        ),
        (
            json!({"content": [{"type": "image", "data": "PHN2Zy8+", "mimeType": "image/svg+xml"}]}),
            "[image: image/svg+xml, 6 bytes, not shown: rule message.image_media_type]",
        ),
        (
            json!({"content": [{"type": "image", "data": "PHN2Zy8+"}]}),
            "[image: unknown type, 6 bytes, not shown: rule message.image_media_type]",
        ),
        (
            json!({"content": [{"type": "audio", "data": "AAAA", "mimeType": "audio/wav"}]}),
            "[audio: audio/wav, 3 bytes]",
        ),
        (
            // Unpadded, 7 significant chars (two lines): 5 bytes, and not
            // canonical base64.
            json!({"content": [{"type": "image", "data": "aGVs\nbG8", "mimeType": "image/gif"}]}),
            "[image: image/gif, 5 bytes, not shown: rule message.base64]",
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
            "[content: hologram, 19 bytes]",
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

/// A 1×1 PNG (70 bytes).
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";
const PNG_BYTES: u64 = 70;

fn png() -> Value {
    json!({"type": "image", "data": PNG, "mimeType": "image/png"})
}

/// What a result with images flattens to.
struct Expected<'a> {
    text: &'a str,
    images: usize,
    /// `(kept images, images, kept bytes, bytes)`, spelled out as a cut.
    cut: Option<[u64; 4]>,
}

/// Flattens `content` under `bounds` and compares the text, the images
/// kept and the cut.
fn check_images(content: Vec<Value>, bounds: FlattenBounds, expected: Expected<'_>) {
    let result = json!({ "content": content });
    let flat = flatten_with(&result, &bounds).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(flat.text(), expected.text, "{bounds:?}");
    assert!(flat.text().len() <= bounds.text_bytes);
    assert_eq!(flat.images().len(), expected.images, "{bounds:?}");
    for image in flat.images() {
        assert_eq!(image.media_type().map(|t| t.as_str()), Some("image/png"));
        let bytes = image.bytes().unwrap_or_else(|| panic!("inline bytes"));
        assert_eq!(bytes.to_base64(), PNG);
    }
    let cut = flat.image_cut().map(|c| {
        [
            c.kept_images() as u64,
            c.images() as u64,
            c.kept_bytes(),
            c.bytes(),
        ]
    });
    assert_eq!(cut, expected.cut, "{bounds:?}");
}

fn bounds(images: usize, image_bytes: usize, images_bytes: usize) -> FlattenBounds {
    FlattenBounds {
        text_bytes: 1024,
        images,
        image_bytes,
        images_bytes,
    }
}

const ROOMY: FlattenBounds = FlattenBounds {
    text_bytes: 1024,
    images: 16,
    image_bytes: 1 << 20,
    images_bytes: 1 << 20,
};

fn kept(text: &str, images: usize) -> Expected<'_> {
    Expected {
        text,
        images,
        cut: None,
    }
}

#[test]
fn images_become_parts() {
    let text = |t: &str| json!({"type": "text", "text": t});
    let wrapped = PNG
        .as_bytes()
        .chunks(20)
        .map(|c| std::str::from_utf8(c).unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\r\n");
    let rows: Vec<(Vec<Value>, FlattenBounds, Expected<'_>)> = vec![
        (vec![png()], ROOMY, kept("", 1)),
        (vec![text("a"), png(), text("b")], ROOMY, kept("a\nb", 1)),
        // Line breaks in the base64 are allowed (and dropped).
        (
            vec![json!({"type": "image", "data": wrapped, "mimeType": "image/png"})],
            ROOMY,
            kept("", 1),
        ),
        // An image that is not one is a placeholder, not a cut.
        (
            vec![
                json!({"type": "image", "data": "aGVsbG8=", "mimeType": "image/png"}),
                png(),
            ],
            bounds(1, 1 << 20, 1 << 20),
            kept(
                "[image: image/png, 5 bytes, not shown: rule message.image_signature]",
                1,
            ),
        ),
        // Audio is a placeholder naming its type and size, whatever the
        // image bounds.
        (
            vec![json!({"type": "audio", "data": "UklGRiQAAABXQVZF", "mimeType": "audio/wav"})],
            bounds(0, 0, 0),
            kept("[audio: audio/wav, 12 bytes]", 0),
        ),
    ];
    for (content, bounds, expected) in rows {
        check_images(content, bounds, expected);
    }
}

#[test]
fn images_past_their_bounds_are_cut_and_the_cut_is_said() {
    let cut = |text, images, cut| Expected { text, images, cut };
    let rows: Vec<(Vec<Value>, FlattenBounds, Expected<'_>)> = vec![
        // The count bound.
        (
            vec![png(), png(), png()],
            bounds(2, 1 << 20, 1 << 20),
            cut(
                "[images cut: kept 2 of 3 images, 140 of 210 bytes]",
                2,
                Some([2, 3, 2 * PNG_BYTES, 3 * PNG_BYTES]),
            ),
        ),
        // The bound of one image: exactly at it is kept, one over is cut.
        (
            vec![json!({"type": "text", "text": "x"}), png()],
            bounds(16, 69, 1 << 20),
            cut(
                "x\n[images cut: kept 0 of 1 images, 0 of 70 bytes]",
                0,
                Some([0, 1, 0, PNG_BYTES]),
            ),
        ),
        (vec![png()], bounds(16, 70, 70), kept("", 1)),
        // The bound of all images together.
        (
            vec![png(), png()],
            bounds(16, 1 << 20, 139),
            cut(
                "[images cut: kept 1 of 2 images, 70 of 140 bytes]",
                1,
                Some([1, 2, PNG_BYTES, 2 * PNG_BYTES]),
            ),
        ),
        (vec![png(), png()], bounds(16, 1 << 20, 140), kept("", 2)),
    ];
    for (content, bounds, expected) in rows {
        check_images(content, bounds, expected);
    }
}

/// A text cut and an image cut together: the text keeps room for the
/// images' line, and both are said.
#[test]
fn a_text_cut_keeps_room_for_the_image_cut() {
    let long = "x".repeat(5000);
    let result = json!({"content": [{"type": "text", "text": long}, png()]});
    // A bound whose kept size has as many digits as the original's, so
    // the text cut fills it exactly: the room for the images' line is
    // exact too.
    let bounds = FlattenBounds {
        text_bytes: 2048,
        ..bounds(0, 1 << 20, 1 << 20)
    };
    let flat = flatten_with(&result, &bounds).unwrap_or_else(|e| panic!("{e}"));
    let line = "\n[images cut: kept 0 of 1 images, 0 of 70 bytes]";
    assert_eq!(flat.text().len(), 2048, "{}", flat.text());
    let text = flat
        .text()
        .strip_suffix(line)
        .unwrap_or_else(|| panic!("{}", flat.text()));
    assert!(text.ends_with(" of 5000 bytes]"), "{text}");
    assert_eq!(flat.original_bytes(), Some(5000));
}

/// The defaults: the text's bound for the images together, the message
/// limits for their count and size.
#[test]
fn default_bounds_follow_the_text_bound_and_the_message_limits() {
    let b = FlattenBounds::new(4096);
    let limits = Limits::default();
    assert_eq!(
        b,
        FlattenBounds {
            text_bytes: 4096,
            images: limits.media_parts_per_message,
            image_bytes: limits.image_bytes,
            images_bytes: 4096,
        }
    );
    let flat = flatten(&json!({"content": [png()]}), 4096).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(flat.images().len(), 1);
}
