//! The wire shapes of the reasoning, image and file parts: every seed of
//! the message fuzz targets decodes and re-encodes byte for byte, old
//! messages decode unchanged, and each decoding rule reports its JSON path.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use keel_message::*;
use proptest::prelude::*;
use std::path::Path;

fn seeds(target: &str) -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/seeds")
        .join(target);
    let mut out: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| {
            let path = e.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&path).unwrap())
        })
        .collect();
    out.sort();
    out
}

/// Every seed is a valid value whose encoding is a fixed point, and
/// serde's `Deserialize` agrees with `from_json_with`.
#[test]
fn fuzz_seeds_decode_and_reencode() {
    let limits = Limits::default();
    for (name, json) in seeds("message_json") {
        let m = Message::from_json_with(&json, &limits).unwrap_or_else(|e| panic!("{name}: {e}"));
        let out = serde_json::to_string(&m).unwrap();
        let back = Message::from_json_with(&out, &limits).unwrap();
        assert_eq!(back, m, "{name}");
        assert_eq!(serde_json::to_string(&back).unwrap(), out, "{name}");
        let via_serde: Message = serde_json::from_str(&out).unwrap();
        assert_eq!(via_serde, m, "{name}");
    }
    for (name, json) in seeds("model_request_json") {
        if name == "orphan_result" {
            continue;
        }
        let r =
            ModelRequest::from_json_with(&json, &limits).unwrap_or_else(|e| panic!("{name}: {e}"));
        let out = serde_json::to_string(&r).unwrap();
        assert_eq!(
            ModelRequest::from_json_with(&out, &limits).unwrap(),
            r,
            "{name}"
        );
    }
}

/// Messages in the shapes written before #34 decode, and encode again
/// byte for byte: the new members are additive (`images` is omitted when
/// empty).
#[test]
fn old_format_messages_decode_unchanged() {
    let limits = Limits::default();
    for json in [
        r#"{"id":"m1","role":"user","parts":[{"type":"text","text":"Weather in Oslo?"}]}"#,
        r#"{"id":"m2","role":"assistant","parts":[{"type":"text","text":"Checking."},{"type":"tool_call","call_id":"c1","name":"get_weather","arguments":{"city":"Oslo"}}]}"#,
        r#"{"id":"m3","role":"tool","parts":[{"type":"tool_result","call_id":"c1","content":"{\"temp_c\":3}","is_error":false}]}"#,
        r#"{"id":"m4","role":"tool","parts":[{"type":"tool_result","call_id":"c2","content":"","is_error":true}]}"#,
        r#"{"id":"s","role":"system","parts":[{"type":"text","text":"Be brief."}]}"#,
    ] {
        let m = Message::from_json_with(json, &limits).unwrap_or_else(|e| panic!("{json}: {e}"));
        assert_eq!(serde_json::to_string(&m).unwrap(), json);
        for part in m.parts() {
            if let Part::ToolResult(r) = part {
                assert!(r.images().is_empty());
            }
        }
    }
    // An explicit empty list is the same message as none.
    let with = r#"{"id":"m","role":"tool","parts":[{"type":"tool_result","call_id":"c","content":"","is_error":false,"images":[]}]}"#;
    let without = with.replace(r#","images":[]"#, "");
    assert_eq!(
        Message::from_json_with(with, &limits).unwrap(),
        Message::from_json_with(&without, &limits).unwrap()
    );
}

fn b64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn image() -> impl Strategy<Value = ImagePart> {
    let heads: [&[u8]; 5] = [
        b"\x89PNG\r\n\x1a\n",
        &[0xFF, 0xD8, 0xFF],
        b"GIF87a",
        b"GIF89a",
        b"RIFF\x10\0\0\0WEBP",
    ];
    let types = [
        ImageMediaType::Png,
        ImageMediaType::Jpeg,
        ImageMediaType::Gif,
        ImageMediaType::Gif,
        ImageMediaType::Webp,
    ];
    let inline =
        (0..5usize, prop::collection::vec(any::<u8>(), 0..40)).prop_map(move |(k, tail)| {
            let mut bytes = heads[k].to_vec();
            bytes.extend(tail);
            ImagePart::from_bytes_with(types[k], &bytes, &Limits::default()).unwrap()
        });
    let url = ("[a-z]{1,10}", "[!-~]{0,30}", prop::option::of(0..4usize)).prop_map(
        move |(host, path, t)| {
            let url = HttpsUrl::parse(&format!("https://{host}.example/{path}")).unwrap();
            ImagePart::from_url(
                url,
                t.map(|k| {
                    [
                        ImageMediaType::Png,
                        ImageMediaType::Jpeg,
                        ImageMediaType::Gif,
                        ImageMediaType::Webp,
                    ][k]
                }),
            )
        },
    );
    prop_oneof![inline, url]
}

fn file() -> impl Strategy<Value = Part> {
    let text = ("\\PC{0,40}", 1..5usize).prop_map(|(text, k)| {
        let media_type = [
            FileMediaType::Pdf,
            FileMediaType::PlainText,
            FileMediaType::Markdown,
            FileMediaType::Csv,
            FileMediaType::Json,
        ][k];
        Part::file(media_type, "notes é.txt", text.as_bytes()).unwrap()
    });
    let pdf = prop::collection::vec(any::<u8>(), 0..40).prop_map(|tail| {
        let mut bytes = b"%PDF-".to_vec();
        bytes.extend(tail);
        Part::file(FileMediaType::Pdf, "a.pdf", &bytes).unwrap()
    });
    prop_oneof![text, pdf]
}

fn opaque() -> impl Strategy<Value = OpaqueValue> {
    "[!-~]{1,40}".prop_map(|s| OpaqueValue::new(&s).unwrap())
}

fn reasoning() -> impl Strategy<Value = Part> {
    let tag = "[a-z][a-z0-9._-]{0,20}".prop_map(|t| ProviderTag::parse(&t).unwrap());
    let readable = (tag.clone(), "\\PC{0,40}", prop::option::of(opaque()))
        .prop_filter("text or signature", |(_, t, s)| {
            !t.is_empty() || s.is_some()
        })
        .prop_map(|(tag, text, sig)| Part::reasoning(tag, &text, sig).unwrap());
    let redacted = (tag, opaque()).prop_map(|(tag, v)| Part::redacted_reasoning(tag, v));
    prop_oneof![readable, redacted]
}

fn message() -> impl Strategy<Value = Message> {
    let text = "\\PC{1,20}".prop_map(|t| Part::text(&t).unwrap());
    let user_part = prop_oneof![text.clone(), image().prop_map(Part::image), file()];
    let user = prop::collection::vec(user_part, 1..6)
        .prop_map(|parts| Message::new(MessageId::parse("u").unwrap(), Role::User, parts).unwrap());
    let assistant_part = prop_oneof![text, reasoning()];
    let assistant = prop::collection::vec(assistant_part, 1..6).prop_map(|parts| {
        Message::new(MessageId::parse("a").unwrap(), Role::Assistant, parts).unwrap()
    });
    let tool = (
        prop::collection::vec(image(), 0..4),
        "\\PC{0,20}",
        any::<bool>(),
    )
        .prop_map(|(images, content, is_error)| {
            let part = Part::tool_result_with_images(
                CallId::parse("c1").unwrap(),
                &content,
                is_error,
                images,
                &Limits::default(),
            )
            .unwrap();
            Message::new(MessageId::parse("t").unwrap(), Role::Tool, vec![part]).unwrap()
        });
    prop_oneof![user, assistant, tool]
}

proptest! {
    /// Canonical base64: any bytes encode to text that decodes back to
    /// them, and any accepted text is the encoding of what it decodes to.
    #[test]
    fn base64_round_trips(bytes in prop::collection::vec(any::<u8>(), 0..100), text in "[A-Za-z0-9+/]{0,12}={0,2}") {
        let limits = Limits::default();
        let decoded = MediaBytes::from_base64(&b64(&bytes), Bound::FileBytes, &limits).unwrap();
        prop_assert_eq!(decoded.as_bytes(), &bytes[..]);
        prop_assert_eq!(decoded.to_base64(), b64(&bytes));
        if let Ok(decoded) = MediaBytes::from_base64(&text, Bound::FileBytes, &limits) {
            prop_assert_eq!(decoded.to_base64(), text);
        }
    }

    /// Messages with the new parts: JSON encode → decode is the identity,
    /// re-encoding is byte-identical, and the canonical form is stable.
    #[test]
    fn new_parts_round_trip(m in message()) {
        let json = serde_json::to_string(&m).unwrap();
        let back = Message::from_json_with(&json, &Limits::default()).unwrap();
        prop_assert_eq!(&back, &m);
        prop_assert_eq!(serde_json::to_string(&back).unwrap(), json.clone());
        let via_serde: Message = serde_json::from_str(&json).unwrap();
        prop_assert_eq!(&via_serde, &m);
        let canonical = CanonicalJson::from_value(&serde_json::to_value(&m).unwrap()).unwrap();
        let again = CanonicalJson::parse(canonical.as_str()).unwrap();
        prop_assert_eq!(again.as_str(), canonical.as_str());
        let back = Message::from_json_with(canonical.as_str(), &Limits::default()).unwrap();
        let recanonical = CanonicalJson::from_value(&serde_json::to_value(&back).unwrap()).unwrap();
        prop_assert_eq!(recanonical.as_str(), canonical.as_str());
        prop_assert_eq!(back, m);
    }
}
