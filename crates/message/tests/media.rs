//! Every rule and bound of the reasoning, image and file parts (#34), one
//! row each, through one `check` helper: a row names the rule or bound it
//! expects and the JSON path of the offending value, and a refusal must
//! name both, show the offending size for a bound, and never echo the
//! input (every refused value below holds the word `SECRET` where it can).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use keel_message::*;
use std::sync::Arc;

/// What a row expects: `Ok(())`, or the rule name and path of the error.
type Expect = Result<(), (&'static str, &'static str)>;
const OK: Expect = Ok(());

/// A refusal as the rows see it: rule, path and the text shown to people.
struct Refusal {
    rule: String,
    path: String,
    shown: String,
    limit: Option<LimitExceeded>,
}

impl From<MessageError> for Refusal {
    fn from(e: MessageError) -> Self {
        let limit = match e.kind() {
            MessageErrorKind::Limit(l) => Some(*l),
            _ => None,
        };
        Refusal {
            rule: e.kind().rule().to_owned(),
            path: e.path().to_owned(),
            shown: format!("{e} {e:?}"),
            limit,
        }
    }
}

impl From<DecodeError> for Refusal {
    fn from(e: DecodeError) -> Self {
        match e {
            DecodeError::Invalid(e) => e.into(),
            other => Refusal {
                rule: "shape".to_owned(),
                path: "$".to_owned(),
                shown: other.to_string(),
                limit: None,
            },
        }
    }
}

fn check<T: std::fmt::Debug, E: Into<Refusal>>(row: &str, got: Result<T, E>, want: Expect) {
    match (got.map_err(Into::into), want) {
        (Ok(_), Ok(())) => {}
        (Err(e), Err((rule, path))) => {
            assert_eq!(e.rule, rule, "row {row}: wrong rule in {}", e.shown);
            assert_eq!(e.path, path, "row {row}: wrong path in {}", e.shown);
            if rule != "shape" {
                assert!(e.shown.contains(rule), "row {row}: {}", e.shown);
                assert!(e.shown.contains(path), "row {row}: {}", e.shown);
            }
            if let Some(limit) = e.limit {
                assert_eq!(limit.bound.rule(), rule, "row {row}");
                let size = format!("{} > {}", limit.actual, limit.max);
                assert!(e.shown.contains(&size), "row {row}: {}", e.shown);
            }
            assert!(!e.shown.contains("SECRET"), "row {row} echoes: {}", e.shown);
        }
        (Ok(v), Err(w)) => panic!("row {row}: accepted {v:?}, wanted {w:?}"),
        (Err(e), Ok(())) => panic!("row {row}: rejected with {}", e.shown),
    }
}

/// Bound of one image, one file and one opaque value: 16 bytes; of
/// text: 32; of a message: 64; three media parts per message.
fn small() -> Limits {
    Limits {
        part_bytes: 32,
        message_bytes: 64,
        history_bytes: 100,
        opaque_bytes: 16,
        image_bytes: 16,
        file_bytes: 16,
        media_parts_per_message: 3,
        ..Limits::default()
    }
}

const PNG: &[u8] = b"\x89PNG\r\n\x1a\n";

/// `head` padded with zeros to `len` bytes.
fn padded(head: &[u8], len: usize) -> Vec<u8> {
    let mut bytes = head.to_vec();
    bytes.resize(len.max(head.len()), 0);
    bytes
}

fn b64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn png(len: usize) -> ImagePart {
    ImagePart::from_bytes_with(ImageMediaType::Png, &padded(PNG, len), &Limits::default()).unwrap()
}

fn cid(s: &str) -> CallId {
    CallId::parse(s).unwrap()
}

fn opaque(s: &str) -> OpaqueValue {
    OpaqueValue::new(s).unwrap()
}

#[test]
fn opaque_values() {
    let at_bound = "x".repeat(16);
    let over = "x".repeat(17);
    let rows: &[(&str, Expect)] = &[
        ("EqQBCkgIARAB+/=", OK),
        ("!~", OK),
        (&at_bound, OK),
        ("", Err(("message.opaque_value", "$"))),
        ("SECRET VALUE", Err(("message.opaque_value", "$"))),
        ("SECRET\n", Err(("message.opaque_value", "$"))),
        ("SECRET\u{7f}", Err(("message.opaque_value", "$"))),
        ("SECRETé", Err(("message.opaque_value", "$"))),
        (&over, Err(("limits.opaque_bytes", "$"))),
    ];
    for (input, want) in rows {
        check(input, OpaqueValue::new_with(input, &small()), *want);
    }
    let value = opaque("SECRETsignature");
    assert_eq!(format!("{value:?}"), "OpaqueValue(15 bytes)");
    assert_eq!(value.as_str(), "SECRETsignature");
    assert_eq!(value.len(), 15);
    assert!(!value.is_empty());
}

#[test]
fn provider_tags() {
    let n64 = format!("a{}", "b".repeat(63));
    let n65 = format!("a{}", "b".repeat(64));
    let rows: &[(&str, Expect)] = &[
        ("anthropic", OK),
        ("openai-compatible", OK),
        ("my.provider_2-x", OK),
        ("a", OK),
        (&n64, OK),
        ("", Err(("message.provider_tag", "$"))),
        (&n65, Err(("message.provider_tag", "$"))),
        ("Anthropic", Err(("message.provider_tag", "$"))),
        ("2anthropic", Err(("message.provider_tag", "$"))),
        ("-a", Err(("message.provider_tag", "$"))),
        ("aSECRET", Err(("message.provider_tag", "$"))),
        ("a b", Err(("message.provider_tag", "$"))),
        ("a/b", Err(("message.provider_tag", "$"))),
    ];
    for (input, want) in rows {
        check(input, ProviderTag::parse(input), *want);
    }
    for (tag, name) in [
        (ProviderTag::anthropic(), "anthropic"),
        (ProviderTag::openai_compatible(), "openai-compatible"),
        (ProviderTag::scripted(), "scripted"),
        (ProviderTag::custom(), "custom"),
    ] {
        assert_eq!(tag.as_str(), name);
        assert_eq!(ProviderTag::parse(name).unwrap(), tag);
    }
}

#[test]
fn media_types() {
    let rows: &[(&str, Expect)] = &[
        ("image/png", OK),
        ("image/jpeg", OK),
        ("image/gif", OK),
        ("image/webp", OK),
        ("image/svg+xml", Err(("message.image_media_type", "$"))),
        ("IMAGE/PNG", Err(("message.image_media_type", "$"))),
        ("image/png ", Err(("message.image_media_type", "$"))),
        ("SECRET", Err(("message.image_media_type", "$"))),
        ("", Err(("message.image_media_type", "$"))),
    ];
    for (input, want) in rows {
        let got = ImageMediaType::parse(input);
        if let Ok(t) = &got {
            assert_eq!(t.as_str(), *input);
        }
        check(input, got, *want);
    }
    let rows: &[(&str, Expect)] = &[
        ("application/pdf", OK),
        ("text/plain", OK),
        ("text/markdown", OK),
        ("text/csv", OK),
        ("application/json", OK),
        ("text/html", Err(("message.file_media_type", "$"))),
        ("application/zip", Err(("message.file_media_type", "$"))),
        ("image/png", Err(("message.file_media_type", "$"))),
        ("SECRET", Err(("message.file_media_type", "$"))),
    ];
    for (input, want) in rows {
        let got = FileMediaType::parse(input);
        if let Ok(t) = &got {
            assert_eq!(t.as_str(), *input);
        }
        check(input, got, *want);
    }
}

#[test]
fn base64_is_canonical_and_bounded() {
    let sixteen = b64(&[7u8; 16]);
    let seventeen = b64(&[7u8; 17]);
    let rows: &[(&str, &str, Expect)] = &[
        ("empty", "", OK),
        ("one byte", "aA==", OK),
        ("two bytes", "aGk=", OK),
        ("three bytes", "aGlp", OK),
        ("+ and /", "+/+/", OK),
        ("at bound", &sixteen, OK),
        ("over bound", &seventeen, Err(("limits.image_bytes", "$"))),
        ("unpadded", "aGk", Err(("message.base64", "$"))),
        ("trailing bits", "aGl=", Err(("message.base64", "$"))),
        ("trailing bits one", "aB==", Err(("message.base64", "$"))),
        ("space", "aGk= aGk=", Err(("message.base64", "$"))),
        ("newline", "aGlp\naGk=", Err(("message.base64", "$"))),
        ("url-safe", "-_-_", Err(("message.base64", "$"))),
        ("padding inside", "aA==aGlp", Err(("message.base64", "$"))),
        ("three pads", "a===", Err(("message.base64", "$"))),
        ("not base64", "SECRET!!", Err(("message.base64", "$"))),
    ];
    for (row, input, want) in rows {
        check(
            row,
            MediaBytes::from_base64(input, Bound::ImageBytes, &small()),
            *want,
        );
    }
    let file = Limits {
        file_bytes: 1,
        ..small()
    };
    check(
        "file bound",
        MediaBytes::from_base64("aGk=", Bound::FileBytes, &file),
        Err(("limits.file_bytes", "$")),
    );
    check(
        "copy over bound",
        MediaBytes::copy_from(&[0; 17], Bound::ImageBytes, &small()),
        Err(("limits.image_bytes", "$")),
    );
    let bytes = MediaBytes::from_base64("aGk=", Bound::FileBytes, &small()).unwrap();
    assert_eq!((bytes.as_bytes(), bytes.len()), (&b"hi"[..], 2));
    assert_eq!(bytes.to_base64(), "aGk=");
    assert_eq!(format!("{bytes:?}"), "MediaBytes(2 bytes)");
}

#[test]
fn https_urls() {
    let path = |n: usize| format!("https://example.com/{}", "a".repeat(n - 20));
    let (at_bound, over) = (path(HTTPS_URL_MAX_BYTES), path(HTTPS_URL_MAX_BYTES + 1));
    let rows: &[(&str, Expect)] = &[
        ("https://example.com/cat.png", OK),
        ("https://example.com", OK),
        ("https://example.com:8443/a?b=c#d", OK),
        (&at_bound, OK),
        (&over, Err(("message.image_url", "$"))),
        ("http://example.com/SECRET", Err(("message.image_url", "$"))),
        (
            "HTTPS://example.com/SECRET",
            Err(("message.image_url", "$")),
        ),
        (
            "data:image/png;base64,SECRET",
            Err(("message.image_url", "$")),
        ),
        ("https://", Err(("message.image_url", "$"))),
        ("https:///SECRET", Err(("message.image_url", "$"))),
        ("https://?SECRET", Err(("message.image_url", "$"))),
        (
            "https://user:SECRET@example.com/",
            Err(("message.image_url", "$")),
        ),
        (
            "https://example.com/SECRET cat",
            Err(("message.image_url", "$")),
        ),
        (
            "https://example.com/SECRET\t",
            Err(("message.image_url", "$")),
        ),
        (
            "https://example.com/SECRETé",
            Err(("message.image_url", "$")),
        ),
    ];
    for (input, want) in rows {
        check(input, HttpsUrl::parse(input), *want);
    }
    let url = HttpsUrl::parse("https://example.com:8443/a.png?sig=SECRET").unwrap();
    assert_eq!(url.host(), "example.com:8443");
    assert!(!format!("{url:?}").contains("SECRET"), "{url:?}");
}

#[test]
fn file_names() {
    let n255 = "n".repeat(255);
    let n256 = "n".repeat(256);
    let rows: &[(&str, Expect)] = &[
        ("report.pdf", OK),
        ("my report (2026).pdf", OK),
        ("résumé.txt", OK),
        ("...", OK),
        (".env", OK),
        (&n255, OK),
        ("", Err(("message.file_name", "$"))),
        (&n256, Err(("message.file_name", "$"))),
        (".", Err(("message.file_name", "$"))),
        ("..", Err(("message.file_name", "$"))),
        ("../SECRET", Err(("message.file_name", "$"))),
        ("SECRET/a", Err(("message.file_name", "$"))),
        ("SECRET\\a", Err(("message.file_name", "$"))),
        ("SECRET\n.txt", Err(("message.file_name", "$"))),
        ("SECRET\u{0}", Err(("message.file_name", "$"))),
        ("SECRET\u{7f}", Err(("message.file_name", "$"))),
        ("SECRET\u{85}", Err(("message.file_name", "$"))),
    ];
    for (input, want) in rows {
        check(input, FileName::parse(input), *want);
    }
}

#[test]
fn image_parts() {
    let l = small();
    let webp = padded(b"RIFF\0\0\0\0WEBP", 12);
    let rows: Vec<(&str, ImageMediaType, Vec<u8>, Expect)> = vec![
        ("png", ImageMediaType::Png, padded(PNG, 16), OK),
        (
            "jpeg",
            ImageMediaType::Jpeg,
            vec![0xFF, 0xD8, 0xFF, 0xE0],
            OK,
        ),
        ("gif87a", ImageMediaType::Gif, b"GIF87a".to_vec(), OK),
        ("gif89a", ImageMediaType::Gif, b"GIF89a;".to_vec(), OK),
        ("webp", ImageMediaType::Webp, webp.clone(), OK),
        (
            "png over bound",
            ImageMediaType::Png,
            padded(PNG, 17),
            Err(("limits.image_bytes", "$.base64")),
        ),
        (
            "empty",
            ImageMediaType::Png,
            vec![],
            Err(("message.image_signature", "$.base64")),
        ),
        (
            "png labelled jpeg",
            ImageMediaType::Jpeg,
            PNG.to_vec(),
            Err(("message.image_signature", "$.base64")),
        ),
        (
            "short png",
            ImageMediaType::Png,
            PNG[..7].to_vec(),
            Err(("message.image_signature", "$.base64")),
        ),
        (
            "svg labelled png",
            ImageMediaType::Png,
            b"<svg>SECRET".to_vec(),
            Err(("message.image_signature", "$.base64")),
        ),
        (
            "gif88a",
            ImageMediaType::Gif,
            b"GIF88a".to_vec(),
            Err(("message.image_signature", "$.base64")),
        ),
        (
            "riff not webp",
            ImageMediaType::Webp,
            padded(b"RIFF\0\0\0\0WAVE", 12),
            Err(("message.image_signature", "$.base64")),
        ),
        (
            "webp without riff",
            ImageMediaType::Webp,
            padded(b"RIFX\0\0\0\0WEBP", 12),
            Err(("message.image_signature", "$.base64")),
        ),
        (
            "riff cut short",
            ImageMediaType::Webp,
            b"RIFF\0\0\0\0WEB".to_vec(),
            Err(("message.image_signature", "$.base64")),
        ),
    ];
    for (row, media_type, bytes, want) in rows {
        let got = ImagePart::from_bytes_with(media_type, &bytes, &l);
        if let Ok(image) = &got {
            assert_eq!(image.media_type(), Some(media_type), "{row}");
            assert_eq!(image.bytes().unwrap().as_bytes(), &bytes[..], "{row}");
            assert_eq!(image.url(), None, "{row}");
            assert_eq!(image.content_bytes(), bytes.len(), "{row}");
        }
        check(row, got.clone(), want);
        let base64 = ImagePart::from_base64_with(media_type, &b64(&bytes), &l);
        assert_eq!(base64, got, "{row}: from base64 agrees");
    }
    let url = HttpsUrl::parse("https://example.com/a.png").unwrap();
    let image = ImagePart::from_url(url.clone(), None);
    assert_eq!((image.url(), image.bytes()), (Some(&url), None));
    assert_eq!(image.data(), &ImageData::Url(url));
    assert_eq!(image.content_bytes(), 25);
}

#[test]
fn file_parts() {
    let l = small();
    let rows: Vec<(&str, FileMediaType, &str, Vec<u8>, Expect)> = vec![
        (
            "pdf",
            FileMediaType::Pdf,
            "a.pdf",
            b"%PDF-1.7\n".to_vec(),
            OK,
        ),
        ("text", FileMediaType::PlainText, "a.txt", "café".into(), OK),
        ("empty text", FileMediaType::PlainText, "a.txt", vec![], OK),
        (
            "markdown",
            FileMediaType::Markdown,
            "a.md",
            b"# h".to_vec(),
            OK,
        ),
        ("csv", FileMediaType::Csv, "a.csv", b"a,b\n1,2".to_vec(), OK),
        ("json", FileMediaType::Json, "a.json", b"{}".to_vec(), OK),
        (
            "at bound",
            FileMediaType::PlainText,
            "a",
            vec![b'x'; 16],
            OK,
        ),
        (
            "over bound",
            FileMediaType::PlainText,
            "a",
            vec![b'x'; 17],
            Err(("limits.file_bytes", "$.base64")),
        ),
        (
            "pdf without signature",
            FileMediaType::Pdf,
            "a.pdf",
            b"SECRET".to_vec(),
            Err(("message.file_signature", "$.base64")),
        ),
        (
            "pdf lowercase",
            FileMediaType::Pdf,
            "a.pdf",
            b"%pdf-1.7".to_vec(),
            Err(("message.file_signature", "$.base64")),
        ),
        (
            "text not utf-8",
            FileMediaType::PlainText,
            "a.txt",
            b"SECRET\xff".to_vec(),
            Err(("message.file_signature", "$.base64")),
        ),
        (
            "json not utf-8",
            FileMediaType::Json,
            "a.json",
            b"\xc3".to_vec(),
            Err(("message.file_signature", "$.base64")),
        ),
        (
            "csv not utf-8",
            FileMediaType::Csv,
            "a.csv",
            b"\x80".to_vec(),
            Err(("message.file_signature", "$.base64")),
        ),
        (
            "markdown not utf-8",
            FileMediaType::Markdown,
            "a.md",
            b"\xed\xa0\x80".to_vec(),
            Err(("message.file_signature", "$.base64")),
        ),
        (
            "bad name",
            FileMediaType::PlainText,
            "../SECRET",
            b"x".to_vec(),
            Err(("message.file_name", "$.name")),
        ),
    ];
    for (row, media_type, name, bytes, want) in rows {
        let got = Part::file_with(media_type, name, &bytes, &l);
        if let Ok(Part::File(file)) = &got {
            assert_eq!(file.media_type(), media_type, "{row}");
            assert_eq!(file.name().as_str(), name, "{row}");
            assert_eq!(file.bytes().as_bytes(), &bytes[..], "{row}");
        }
        check(row, got, want);
    }
    let e = Part::file_with(FileMediaType::PlainText, "a", b"ab\xffc", &l).unwrap_err();
    assert!(e.to_string().contains("byte 2"), "{e}");
}

#[test]
fn reasoning_parts() {
    let l = small();
    let anthropic = ProviderTag::anthropic;
    let long_sig = opaque(&"s".repeat(17));
    let rows: Vec<(&str, Result<Part, MessageError>, Expect)> = vec![
        (
            "text",
            Part::reasoning_with(anthropic(), "Hmm.", None, &l),
            OK,
        ),
        (
            "text and signature",
            Part::reasoning_with(anthropic(), "Hmm.", Some(opaque("c2ln")), &l),
            OK,
        ),
        (
            "signature only",
            Part::reasoning_with(anthropic(), "", Some(opaque("c2ln")), &l),
            OK,
        ),
        (
            "text at bound",
            Part::reasoning_with(anthropic(), &"x".repeat(32), None, &l),
            OK,
        ),
        (
            "empty",
            Part::reasoning_with(anthropic(), "", None, &l),
            Err(("message.empty_reasoning", "$.text")),
        ),
        (
            "text over bound",
            Part::reasoning_with(anthropic(), &"x".repeat(33), None, &l),
            Err(("limits.part_bytes", "$.text")),
        ),
        (
            "signature over bound",
            Part::reasoning_with(anthropic(), "Hmm.", Some(long_sig.clone()), &l),
            Err(("limits.opaque_bytes", "$.signature")),
        ),
    ];
    for (row, got, want) in rows {
        check(row, got, want);
    }
    let Part::Reasoning(r) = Part::reasoning(anthropic(), "Hmm.", None).unwrap() else {
        panic!()
    };
    assert_eq!(
        (r.text(), r.signature(), r.redacted()),
        ("Hmm.", None, None)
    );
    let Part::Reasoning(r) = Part::reasoning(anthropic(), "", Some(opaque("c2ln"))).unwrap() else {
        panic!()
    };
    assert_eq!(
        (r.text(), r.signature(), r.redacted()),
        ("", Some(&opaque("c2ln")), None)
    );
    assert!(!r.is_redacted());
    assert_eq!(r.provider(), &anthropic());
    let part = Part::redacted_reasoning(anthropic(), opaque("SECRETredacted"));
    let Part::Reasoning(r) = &part else { panic!() };
    assert_eq!((r.text(), r.signature()), ("", None));
    assert_eq!(r.redacted(), Some(&opaque("SECRETredacted")));
    assert!(r.is_redacted());
    assert!(!format!("{part:?}").contains("SECRET"), "{part:?}");
    // A redacted value built under larger limits is bounded in a message.
    let redacted = Part::redacted_reasoning(anthropic(), long_sig);
    check(
        "redacted over bound",
        Message::new_with(mid("m"), Role::Assistant, vec![redacted], &l),
        Err(("limits.opaque_bytes", "$.parts[0].redacted")),
    );
}

fn mid(s: &str) -> MessageId {
    MessageId::parse(s).unwrap()
}

#[test]
fn tool_result_images() {
    let l = small();
    let url = || ImagePart::from_url(HttpsUrl::parse("https://a.example/x").unwrap(), None);
    let rows: Vec<(&str, Result<Part, MessageError>, Expect)> = vec![
        (
            "no images",
            Part::tool_result_with_images(cid("c1"), "ok", false, vec![], &l),
            OK,
        ),
        (
            "three images",
            Part::tool_result_with_images(cid("c1"), "", false, vec![png(16), url(), png(8)], &l),
            OK,
        ),
        (
            "four images",
            Part::tool_result_with_images(cid("c1"), "", false, vec![url(); 4], &l),
            Err(("limits.media_parts_per_message", "$.images")),
        ),
        (
            "image over bound",
            Part::tool_result_with_images(cid("c1"), "", false, vec![url(), png(17)], &l),
            Err(("limits.image_bytes", "$.images[1].base64")),
        ),
        (
            "content over bound",
            Part::tool_result_with_images(cid("c1"), &"x".repeat(33), false, vec![], &l),
            Err(("limits.part_bytes", "$.content")),
        ),
    ];
    for (row, got, want) in rows {
        check(row, got, want);
    }
    let Part::ToolResult(r) = Part::tool_result(cid("c1"), "ok", false).unwrap() else {
        panic!()
    };
    assert!(r.images().is_empty(), "no images by default");
}

/// Rule `message.role_parts`: the table of the RFC, every role against
/// every part kind.
#[test]
fn role_parts() {
    let parts = [
        Part::text("hi").unwrap(),
        Part::tool_call(
            cid("c1"),
            ToolName::parse("t").unwrap(),
            CanonicalJson::parse("{}").unwrap(),
        )
        .unwrap(),
        Part::tool_result(cid("c1"), "ok", false).unwrap(),
        Part::reasoning(ProviderTag::anthropic(), "Hmm.", None).unwrap(),
        Part::image(png(8)),
        Part::file(FileMediaType::PlainText, "a.txt", b"x").unwrap(),
    ];
    let kinds = [
        "text",
        "tool_call",
        "tool_result",
        "reasoning",
        "image",
        "file",
    ];
    let allowed: &[(Role, &[&str])] = &[
        (Role::System, &["text"]),
        (Role::User, &["text", "image", "file"]),
        (Role::Assistant, &["text", "tool_call", "reasoning"]),
        (Role::Tool, &["tool_result"]),
    ];
    for (role, kinds_allowed) in allowed {
        for (part, kind) in parts.iter().zip(kinds) {
            assert_eq!(part.kind(), kind);
            let row = format!("{role} {kind}");
            let want = if kinds_allowed.contains(&kind) {
                OK
            } else {
                Err(("message.role_parts", "$.parts[0]"))
            };
            check(
                &row,
                Message::new(mid("m"), *role, vec![part.clone()]),
                want,
            );
        }
    }
}

/// `limits.media_parts_per_message` counts images, files and tool-result
/// images; `message_bytes` and `history_bytes` count decoded media bytes
/// and reasoning text and opaque values.
#[test]
fn message_bounds_count_media() {
    let l = small();
    let file = || Part::file(FileMediaType::PlainText, "a.txt", b"x").unwrap();
    let result = |n: usize| {
        Part::tool_result_with_images(cid("c1"), "", false, vec![png(8); n], &l).unwrap()
    };
    let user = |parts: Vec<Part>| Message::new_with(mid("m"), Role::User, parts, &l);
    let rows: Vec<(&str, Result<Message, MessageError>, Expect)> = vec![
        (
            "three media",
            user(vec![Part::image(png(8)), file(), file()]),
            OK,
        ),
        (
            "four media",
            user(vec![Part::image(png(8)), file(), file(), file()]),
            Err(("limits.media_parts_per_message", "$.parts")),
        ),
        (
            "text is not media",
            user(vec![Part::text("a").unwrap(), file(), file(), file()]),
            OK,
        ),
        (
            "tool-result images count",
            Message::new_with(
                mid("m"),
                Role::Tool,
                vec![
                    result(2),
                    Part::tool_result_with_images(cid("c2"), "", false, vec![png(8); 2], &l)
                        .unwrap(),
                ],
                &l,
            ),
            Err(("limits.media_parts_per_message", "$.parts")),
        ),
        (
            "media bytes count in message_bytes",
            user(vec![
                Part::image(png(16)),
                Part::image(png(16)),
                Part::image(png(16)),
                Part::text(&"x".repeat(17)).unwrap(),
            ]),
            Err(("limits.message_bytes", "$.parts")),
        ),
        (
            "reasoning counts in message_bytes",
            Message::new_with(
                mid("m"),
                Role::Assistant,
                vec![
                    Part::reasoning(ProviderTag::anthropic(), &"r".repeat(32), Some(opaque("s")))
                        .unwrap(),
                    Part::text(&"x".repeat(32)).unwrap(),
                ],
                &l,
            ),
            Err(("limits.message_bytes", "$.parts")),
        ),
    ];
    for (row, got, want) in rows {
        check(row, got, want);
    }
    let m = user(vec![Part::image(png(16)), Part::text("abcd").unwrap()]).unwrap();
    assert_eq!(m.content_bytes(), 20);
    let parts = [
        (Part::image(png(16)), 16, 1),
        (
            Part::file(FileMediaType::PlainText, "a", b"xyz").unwrap(),
            3,
            1,
        ),
        (result(2), 16, 2),
        (
            Part::reasoning(ProviderTag::custom(), "ab", Some(opaque("sig"))).unwrap(),
            5,
            0,
        ),
        (
            Part::redacted_reasoning(ProviderTag::custom(), opaque("abcd")),
            4,
            0,
        ),
        (Part::text("ab").unwrap(), 2, 0),
    ];
    for (part, bytes, media) in parts {
        assert_eq!(
            (part.content_bytes(), part.media_count()),
            (bytes, media),
            "{part:?}"
        );
    }
    // history_bytes: two messages of 60 bytes each.
    let big = |id: &str| {
        let mut parts = vec![Part::image(png(16)); 3];
        parts.push(Part::text(&"x".repeat(12)).unwrap());
        Message::new_with(mid(id), Role::User, parts, &l).unwrap()
    };
    check(
        "media bytes count in history_bytes",
        ModelRequest::new_with(
            OperationId::parse("op_1").unwrap(),
            ModelName::parse("m").unwrap(),
            Arc::from(vec![big("m1"), big("m2")]),
            Arc::from([]),
            &l,
        ),
        Err(("limits.history_bytes", "$.history")),
    );
    // Bounds are re-checked when a message built under larger limits
    // enters a request under smaller ones.
    let wide = Message::new(mid("m"), Role::User, vec![Part::image(png(17))]).unwrap();
    check(
        "image re-checked in a request",
        ModelRequest::new_with(
            OperationId::parse("op_1").unwrap(),
            ModelName::parse("m").unwrap(),
            Arc::from(vec![wide]),
            Arc::from([]),
            &l,
        ),
        Err(("limits.image_bytes", "$.history[0].parts[0].base64")),
    );
    let wide_file = Part::file(FileMediaType::PlainText, "a.txt", &[b'x'; 17]).unwrap();
    check(
        "file re-checked in a message",
        Message::new_with(mid("m"), Role::User, vec![wide_file], &l),
        Err(("limits.file_bytes", "$.parts[0].base64")),
    );
    let many = Message::new(mid("m"), Role::User, vec![Part::image(png(8)); 4]).unwrap();
    check(
        "media count re-checked in a request",
        ModelRequest::new_with(
            OperationId::parse("op_1").unwrap(),
            ModelName::parse("m").unwrap(),
            Arc::from(vec![many]),
            Arc::from([]),
            &l,
        ),
        Err(("limits.media_parts_per_message", "$.history[0].parts")),
    );
}

/// Cloning a part, a message or a request never copies image bytes.
#[test]
fn clones_share_media_bytes() {
    let image = png(1 << 10);
    let m = Message::new(mid("m"), Role::User, vec![Part::image(image.clone())]).unwrap();
    let copy = m.clone();
    let (Part::Image(a), Part::Image(b)) = (&m.parts()[0], &copy.parts()[0]) else {
        panic!()
    };
    assert!(MediaBytes::ptr_eq(a.bytes().unwrap(), b.bytes().unwrap()));
    assert!(MediaBytes::ptr_eq(
        a.bytes().unwrap(),
        image.bytes().unwrap()
    ));
    let part = Part::image(image.clone());
    let Part::Image(c) = part.clone() else {
        panic!()
    };
    assert!(MediaBytes::ptr_eq(
        c.bytes().unwrap(),
        image.bytes().unwrap()
    ));
    // Equal bytes in another allocation are equal, but not shared.
    let other = png(1 << 10);
    assert_eq!(other, image);
    assert!(!MediaBytes::ptr_eq(
        other.bytes().unwrap(),
        image.bytes().unwrap()
    ));
}

/// The JSON decoders name the rule or bound and the JSON path of the
/// offending member.
#[test]
fn wire_decoding() {
    let png8 = b64(&padded(PNG, 8));
    let png17 = b64(&padded(PNG, 17));
    let user = |part: &str| {
        format!(r#"{{"id":"m","role":"user","parts":[{{"type":"text","text":"hi"}},{part}]}}"#)
    };
    let assistant = |part: &str| format!(r#"{{"id":"m","role":"assistant","parts":[{part}]}}"#);
    let tool = |images: &str| {
        format!(
            r#"{{"id":"m","role":"tool","parts":[{{"type":"tool_result","call_id":"c1","content":"","images":[{images}]}}]}}"#
        )
    };
    let image = |members: &str| user(&format!(r#"{{"type":"image",{members}}}"#));
    let file = |members: &str| user(&format!(r#"{{"type":"file",{members}}}"#));
    let png_b64 = format!(r#""media_type":"image/png","base64":"{png8}""#);
    let rows: Vec<(&str, String, Expect)> = vec![
        ("image", image(&png_b64), OK),
        ("image url", image(r#""url":"https://a.example/x.png""#), OK),
        (
            "image url typed",
            image(r#""media_type":"image/gif","url":"https://a.example/x""#),
            OK,
        ),
        (
            "image svg",
            image(&format!(
                r#""media_type":"image/svg+xml","base64":"{png8}""#
            )),
            Err(("message.image_media_type", "$.parts[1].media_type")),
        ),
        (
            "image bytes untyped",
            image(&format!(r#""base64":"{png8}""#)),
            Err(("message.image_media_type", "$.parts[1].media_type")),
        ),
        (
            "image bad base64",
            image(r#""media_type":"image/png","base64":"SECRET==""#),
            Err(("message.base64", "$.parts[1].base64")),
        ),
        (
            "image over bound",
            image(&format!(r#""media_type":"image/png","base64":"{png17}""#)),
            Err(("limits.image_bytes", "$.parts[1].base64")),
        ),
        (
            "image wrong signature",
            image(r#""media_type":"image/jpeg","base64":"U0VDUkVU""#),
            Err(("message.image_signature", "$.parts[1].base64")),
        ),
        (
            "image both",
            image(&format!(r#"{png_b64},"url":"https://a.example/x""#)),
            Err(("message.image_source", "$.parts[1]")),
        ),
        (
            "image neither",
            image(r#""media_type":"image/png""#),
            Err(("message.image_source", "$.parts[1]")),
        ),
        (
            "image http",
            image(r#""url":"http://a.example/SECRET""#),
            Err(("message.image_url", "$.parts[1].url")),
        ),
        (
            "image unknown member",
            image(r#""url":"https://a.example/x","alt":"x""#),
            Err(("shape", "$")),
        ),
        (
            "image not a string",
            image(r#""url":1"#),
            Err(("shape", "$")),
        ),
        (
            "file",
            file(r#""media_type":"application/pdf","name":"a.pdf","base64":"JVBERi0=""#),
            OK,
        ),
        (
            "file type",
            file(r#""media_type":"text/html","name":"a","base64":"""#),
            Err(("message.file_media_type", "$.parts[1].media_type")),
        ),
        (
            "file name",
            file(r#""media_type":"text/plain","name":"a/SECRET","base64":"""#),
            Err(("message.file_name", "$.parts[1].name")),
        ),
        (
            "file base64",
            file(r#""media_type":"text/plain","name":"a","base64":"SECRET""#),
            Err(("message.base64", "$.parts[1].base64")),
        ),
        (
            "file over bound",
            file(&format!(
                r#""media_type":"text/plain","name":"a","base64":"{}""#,
                b64(&[b'x'; 17])
            )),
            Err(("limits.file_bytes", "$.parts[1].base64")),
        ),
        (
            "file signature",
            file(r#""media_type":"application/pdf","name":"a","base64":"U0VDUkVU""#),
            Err(("message.file_signature", "$.parts[1].base64")),
        ),
        (
            "file missing name",
            file(r#""media_type":"text/plain","base64":"""#),
            Err(("shape", "$")),
        ),
        (
            "reasoning",
            assistant(
                r#"{"type":"reasoning","provider":"anthropic","text":"Hmm","signature":"c2ln"}"#,
            ),
            OK,
        ),
        (
            "reasoning signed empty",
            assistant(
                r#"{"type":"reasoning","provider":"anthropic","text":"","signature":"c2ln"}"#,
            ),
            OK,
        ),
        (
            "reasoning redacted",
            assistant(r#"{"type":"reasoning","provider":"anthropic","redacted":"SECRET"}"#),
            OK,
        ),
        (
            "reasoning empty",
            assistant(r#"{"type":"reasoning","provider":"anthropic","text":""}"#),
            Err(("message.empty_reasoning", "$.parts[0].text")),
        ),
        (
            "reasoning no text",
            assistant(r#"{"type":"reasoning","provider":"anthropic","signature":"c2ln"}"#),
            Err(("message.reasoning_shape", "$.parts[0].text")),
        ),
        (
            "reasoning redacted with text",
            assistant(
                r#"{"type":"reasoning","provider":"anthropic","text":"SECRET","redacted":"SECRET"}"#,
            ),
            Err(("message.reasoning_shape", "$.parts[0].redacted")),
        ),
        (
            "reasoning redacted with signature",
            assistant(
                r#"{"type":"reasoning","provider":"anthropic","signature":"SECRET","redacted":"SECRET"}"#,
            ),
            Err(("message.reasoning_shape", "$.parts[0].redacted")),
        ),
        (
            "reasoning provider",
            assistant(r#"{"type":"reasoning","provider":"SECRET","text":"Hmm"}"#),
            Err(("message.provider_tag", "$.parts[0].provider")),
        ),
        (
            "reasoning signature",
            assistant(
                r#"{"type":"reasoning","provider":"a","text":"Hmm","signature":"SECRET SECRET"}"#,
            ),
            Err(("message.opaque_value", "$.parts[0].signature")),
        ),
        (
            "reasoning signature over bound",
            assistant(&format!(
                r#"{{"type":"reasoning","provider":"a","text":"Hmm","signature":"{}"}}"#,
                "s".repeat(17)
            )),
            Err(("limits.opaque_bytes", "$.parts[0].signature")),
        ),
        (
            "reasoning redacted over bound",
            assistant(&format!(
                r#"{{"type":"reasoning","provider":"a","redacted":"{}"}}"#,
                "s".repeat(17)
            )),
            Err(("limits.opaque_bytes", "$.parts[0].redacted")),
        ),
        (
            "reasoning text over bound",
            assistant(&format!(
                r#"{{"type":"reasoning","provider":"a","text":"{}"}}"#,
                "t".repeat(33)
            )),
            Err(("limits.part_bytes", "$.parts[0].text")),
        ),
        (
            "reasoning unknown member",
            assistant(r#"{"type":"reasoning","provider":"a","text":"Hmm","summary":"x"}"#),
            Err(("shape", "$")),
        ),
        (
            "reasoning in a user message",
            user(r#"{"type":"reasoning","provider":"a","text":"Hmm"}"#),
            Err(("message.role_parts", "$.parts[1]")),
        ),
        (
            "tool images",
            tool(&format!(r#"{{{png_b64}}},{{"url":"https://a.example/x"}}"#)),
            OK,
        ),
        ("tool images empty", tool(""), OK),
        (
            "tool image base64",
            tool(r#"{"url":"https://a.example/x"},{"media_type":"image/png","base64":"SECRET"}"#),
            Err(("message.base64", "$.parts[0].images[1].base64")),
        ),
        (
            "tool image media type",
            tool(r#"{"media_type":"image/svg+xml","url":"https://a.example/x"}"#),
            Err((
                "message.image_media_type",
                "$.parts[0].images[0].media_type",
            )),
        ),
        (
            "tool images over count",
            tool(&[r#"{"url":"https://a.example/x"}"#; 4].join(",")),
            // The message-wide count is checked before any part is built.
            Err(("limits.media_parts_per_message", "$.parts")),
        ),
        (
            "tool image with type tag",
            tool(r#"{"type":"image","url":"https://a.example/x"}"#),
            Err(("shape", "$")),
        ),
        (
            "message media count",
            user(&[r#"{"type":"image","url":"https://a.example/x"}"#; 4].join(",")),
            Err(("limits.media_parts_per_message", "$.parts")),
        ),
    ];
    for (row, json, want) in &rows {
        let got = Message::from_json_with(json, &small());
        check(row, got.clone(), *want);
        if let Ok(m) = got {
            // Serde under the default limits agrees with the decoder.
            let plain: Message = serde_json::from_str(json).unwrap();
            assert_eq!(plain, m, "row {row}");
        }
    }
    // Inside a request, the path goes through the history.
    let request = format!(
        r#"{{"operation_id":"op_1","model":"m","history":[{}]}}"#,
        image(r#""media_type":"image/png","base64":"SECRET==""#)
    );
    check(
        "request",
        ModelRequest::from_json_with(&request, &small()),
        Err(("message.base64", "$.history[0].parts[1].base64")),
    );
}

/// The standalone types deserialize through their rules, under the
/// default limits.
#[test]
fn serde_of_the_new_types_enforces_their_rules() {
    fn de<T: serde::de::DeserializeOwned + std::fmt::Debug>(json: &str) -> Result<T, String> {
        serde_json::from_str::<T>(json).map_err(|e| e.to_string())
    }
    assert!(de::<OpaqueValue>(r#""c2ln""#).is_ok());
    assert!(
        de::<OpaqueValue>(r#""a b""#)
            .unwrap_err()
            .contains("message.opaque_value")
    );
    assert!(
        de::<ProviderTag>(r#""A""#)
            .unwrap_err()
            .contains("message.provider_tag")
    );
    assert_eq!(
        de::<ImageMediaType>(r#""image/gif""#),
        Ok(ImageMediaType::Gif)
    );
    assert!(
        de::<ImageMediaType>(r#""image/svg+xml""#)
            .unwrap_err()
            .contains("message.image_media_type")
    );
    assert_eq!(de::<FileMediaType>(r#""text/csv""#), Ok(FileMediaType::Csv));
    assert!(
        de::<FileMediaType>(r#""text/html""#)
            .unwrap_err()
            .contains("message.file_media_type")
    );
    assert!(
        de::<HttpsUrl>(r#""http://a""#)
            .unwrap_err()
            .contains("message.image_url")
    );
    assert!(
        de::<FileName>(r#""..""#)
            .unwrap_err()
            .contains("message.file_name")
    );
    assert!(
        de::<ImagePart>(r#"{"media_type":"image/png","base64":"AAAA"}"#)
            .unwrap_err()
            .contains("message.image_signature")
    );
    // A part decoded on its own counts its images before decoding them.
    let images = [r#"{"url":"https://a.example/x"}"#; 17].join(",");
    let part =
        format!(r#"{{"type":"tool_result","call_id":"c","content":"","images":[{images}]}}"#);
    let e = de::<Part>(&part).unwrap_err();
    assert!(
        e.contains("$.images: limits.media_parts_per_message exceeded: 17 > 16"),
        "{e}"
    );
    let image: ImagePart = de(r#"{"url":"https://a.example/x"}"#).unwrap();
    assert_eq!(
        serde_json::to_string(&image).unwrap(),
        r#"{"url":"https://a.example/x"}"#
    );
    for (value, json) in [
        (
            serde_json::to_string(&ProviderTag::openai_compatible()),
            r#""openai-compatible""#,
        ),
        (serde_json::to_string(&opaque("c2ln")), r#""c2ln""#),
        (
            serde_json::to_string(&ImageMediaType::Webp),
            r#""image/webp""#,
        ),
        (
            serde_json::to_string(&FileMediaType::Pdf),
            r#""application/pdf""#,
        ),
        (
            serde_json::to_string(&FileName::parse("a b").unwrap()),
            r#""a b""#,
        ),
        (
            serde_json::to_string(png(8).bytes().unwrap()),
            r#""iVBORw0KGgo=""#,
        ),
    ] {
        assert_eq!(value.unwrap(), json);
    }
}

/// Each problem's text says what is wrong with the value, by size or
/// offset only (the rows above check the rule and path; this checks the
/// words in between).
#[test]
fn problems_say_what_is_wrong() {
    let l = small();
    let rows: Vec<(&str, Result<(), MessageError>, &str)> = vec![
        (
            "base64 length",
            MediaBytes::from_base64("aGk", Bound::FileBytes, &l).map(drop),
            "base64 is 3 bytes, not a multiple of 4",
        ),
        (
            "base64 byte",
            MediaBytes::from_base64("aG k", Bound::FileBytes, &l).map(drop),
            "base64 has a disallowed byte at 2",
        ),
        (
            "base64 bits",
            MediaBytes::from_base64("aGl=", Bound::FileBytes, &l).map(drop),
            "base64 has non-zero trailing bits at byte 2",
        ),
        (
            "url scheme",
            HttpsUrl::parse("ftp://a").map(drop),
            "image url does not start with https://",
        ),
        (
            "url host",
            HttpsUrl::parse("https:///a").map(drop),
            "image url has an empty host",
        ),
        (
            "url credentials",
            HttpsUrl::parse("https://u@a/").map(drop),
            "image url has credentials before the host",
        ),
        (
            "url length",
            HttpsUrl::parse(&format!("https://a/{}", "x".repeat(2048))).map(drop),
            "image url is 2058 bytes, over 2048",
        ),
        (
            "url byte",
            HttpsUrl::parse("https://a/ b").map(drop),
            "image url has a disallowed byte at 10",
        ),
        (
            "opaque empty",
            OpaqueValue::new("").map(drop),
            "opaque value is empty",
        ),
        (
            "opaque byte",
            OpaqueValue::new("ab c").map(drop),
            "opaque value has a disallowed character at byte 2",
        ),
        (
            "tag length",
            ProviderTag::parse(&"a".repeat(65)).map(drop),
            "provider tag is 65 bytes, over 64",
        ),
        (
            "tag byte",
            ProviderTag::parse("ab_C").map(drop),
            "provider tag has a disallowed character at byte 3",
        ),
        (
            "tag first",
            ProviderTag::parse("_a").map(drop),
            "provider tag has a disallowed character at byte 0",
        ),
        (
            "file name byte",
            FileName::parse("ab/c").map(drop),
            "file name has a disallowed character at byte 2",
        ),
        (
            "file name length",
            FileName::parse(&"n".repeat(256)).map(drop),
            "file name is 256 bytes, over 255",
        ),
        (
            "file name dots",
            FileName::parse("..").map(drop),
            "file name is a dot segment of 2 byte(s)",
        ),
        (
            "image type",
            ImageMediaType::parse("image/svg+xml").map(drop),
            "image media type (13 bytes) is not",
        ),
        (
            "file type",
            FileMediaType::parse("text/html").map(drop),
            "file media type (9 bytes) is not",
        ),
        (
            "image signature",
            ImagePart::from_bytes_with(ImageMediaType::Gif, b"GIF", &l).map(drop),
            "image bytes do not start with the image/gif signature",
        ),
        (
            "pdf signature",
            Part::file_with(FileMediaType::Pdf, "a", b"%PD", &l).map(drop),
            "file bytes do not start with the application/pdf signature",
        ),
        (
            "utf-8",
            Part::file_with(FileMediaType::Csv, "a", b"ab\xffc", &l).map(drop),
            "text/csv file is not UTF-8 at byte 2",
        ),
        (
            "empty reasoning",
            Part::reasoning(ProviderTag::custom(), "", None).map(drop),
            "reasoning part has no text and no signature",
        ),
    ];
    for (row, got, words) in rows {
        let e = got.expect_err(row);
        assert!(e.to_string().contains(words), "row {row}: {e}");
    }
    let url = HttpsUrl::parse("https://example.com:8443/a.png?sig=SECRET").unwrap();
    assert_eq!(
        format!("{url:?}"),
        "HttpsUrl(https://example.com:8443/…, 41 bytes)"
    );
    let empty = MediaBytes::from_base64("", Bound::FileBytes, &l).unwrap();
    assert!(empty.is_empty());
    assert!(!png(8).bytes().unwrap().is_empty());
}
