#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The `messages` of a scenario file through the loader: the `parts`
//! form's text, image, file and reasoning parts, and each refusal naming
//! the member and the rule or bound.
use keel_message::{Part, Role};
use keel_scenario::file::{ScenarioError, parse};
use std::path::Path;

/// The PNG signature and the start of its header chunk.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUg==";
/// `%PDF-1.4` and a binary comment line.
const PDF: &str = "JVBERi0xLjQKJeLjz9MK";
/// A JPEG's first four bytes.
const JPEG: &str = "/9j/4A==";
/// Shaped like a key: never echoed.
const SECRET: &str = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789";

/// A scenario whose `messages` are `messages` (JSON).
fn scenario(messages: &str) -> String {
    format!(
        r#"{{"model":"m","messages":{messages},
        "provider":{{"type":"scripted","calls":[[{{"text":"a"}},{{"complete":{{"finish":"stop"}}}}]]}}}}"#
    )
}

/// What loading a scenario's messages gives.
enum Expect<'a> {
    /// Accepted: each message's role and part kinds.
    Parts(&'a [(Role, &'a [&'a str])]),
    /// Refused at this JSON path, naming this rule.
    Refused { path: &'a str, rule: &'a str },
}

/// Loads a scenario with `messages` through the loader and compares.
fn check(messages: &str, expect: Expect<'_>) {
    let text = scenario(messages);
    let got = parse(Path::new("s.json"), &text);
    match (got, expect) {
        (Ok(s), Expect::Parts(want)) => {
            let got: Vec<(Role, Vec<&str>)> = s
                .messages
                .iter()
                .map(|m| (m.role(), m.parts().iter().map(Part::kind).collect()))
                .collect();
            let want: Vec<(Role, Vec<&str>)> = want.iter().map(|(r, k)| (*r, k.to_vec())).collect();
            assert_eq!(got, want, "{messages}");
        }
        (Err(ScenarioError::Invalid { path, message, .. }), Expect::Refused { path: p, rule }) => {
            assert_eq!(path, p, "{messages}: {message}");
            assert!(message.contains(rule), "{messages}: {message} lacks {rule}");
            assert!(!message.contains("sk-proj"), "{message}");
        }
        (Err(ScenarioError::Shape { path, message, .. }), Expect::Refused { path: p, rule }) => {
            assert_eq!(path, p, "{messages}: {message}");
            assert!(message.contains(rule), "{messages}: {message} lacks {rule}");
        }
        (got, _) => panic!("{messages}: {got:?}"),
    }
}

fn user(parts: &str) -> String {
    format!(r#"[{{"role":"user","parts":[{parts}]}}]"#)
}

fn image(members: &str) -> String {
    format!(r#"{{"image":{{{members}}}}}"#)
}

fn refused<'a>(path: &'a str, rule: &'a str) -> Expect<'a> {
    Expect::Refused { path, rule }
}

#[test]
fn the_parts_form_carries_text_images_files_and_reasoning() {
    let all = user(&format!(
        r#"{{"text":"look"}},{png},{{"image":{{"url":"https://example.com/a.png"}}}},
        {{"image":{{"url":"https://example.com/b","media_type":"image/jpeg"}}}},
        {{"file":{{"media_type":"application/pdf","name":"a.pdf","base64":"{PDF}"}}}}"#,
        png = image(&format!(r#""media_type":"image/png","base64":"{PNG}""#)),
    ));
    check(
        &all,
        Expect::Parts(&[(Role::User, &["text", "image", "image", "image", "file"])]),
    );
    let assistant = r#"[{"role":"user","text":"hi"},{"role":"assistant","parts":[
        {"reasoning":{"provider":"anthropic","text":"think","signature":"c2ln+/="}},
        {"redacted_reasoning":{"provider":"anthropic","data":"EmwKAhgB"}},
        {"reasoning":{"provider":"anthropic","signature":"only-a-signature"}},
        {"text":"answer"}]},{"role":"user","text":"more"}]"#;
    check(
        assistant,
        Expect::Parts(&[
            (Role::User, &["text"]),
            (
                Role::Assistant,
                &["reasoning", "reasoning", "reasoning", "text"],
            ),
            (Role::User, &["text"]),
        ]),
    );
    // The original form reads unchanged, beside the new one.
    check(
        r#"[{"role":"system","text":"be brief"},{"role":"user","parts":[{"text":"hi"}]}]"#,
        Expect::Parts(&[(Role::System, &["text"]), (Role::User, &["text"])]),
    );
}

/// Loads each row's messages and expects a refusal at
/// `messages[0].parts[0]` + the row's member (or at `messages[0]` for a
/// member starting with `^`), naming the row's rule.
fn check_refusals(rows: &[(String, &str, &str)]) {
    for (messages, member, rule) in rows {
        let path = match member.strip_prefix('^') {
            Some(rest) => format!("messages[0]{rest}"),
            None => format!("messages[0].parts[0]{member}"),
        };
        check(messages, refused(&path, rule));
    }
}

fn assistant(parts: &str) -> String {
    format!(r#"[{{"role":"assistant","parts":[{parts}]}}]"#)
}

fn file(media_type: &str, name: &str, base64: &str) -> String {
    format!(r#"{{"file":{{"media_type":"{media_type}","name":"{name}","base64":"{base64}"}}}}"#)
}

#[test]
fn message_and_part_forms_are_refused_at_their_member() {
    check_refusals(&[
        (
            r#"[{"role":"user","text":"a","parts":[{"text":"b"}]}]"#.into(),
            "^",
            "scenario.message_form",
        ),
        (r#"[{"role":"user"}]"#.into(), "^", "scenario.message_form"),
        (
            user(r#"{"text":"a","file":null,"image":{"url":"https://a.b/c"}}"#),
            "",
            "scenario.part_form",
        ),
        (user("{}"), "", "scenario.part_form"),
        (user(r#"{"text":""}"#), ".text", "part.text_nonempty"),
        (
            user(r#"{"reasoning":{"provider":"anthropic","text":"t"}}"#),
            "",
            "message.role_parts",
        ),
        (
            assistant(&image(r#""url":"https://a.b/c""#)),
            "",
            "message.role_parts",
        ),
        (
            assistant(&file("text/plain", "a.txt", "YQ==")),
            "",
            "message.role_parts",
        ),
        // A shape error names the member too.
        (
            user(&image(r#""url":"https://a.b/c","width":3"#)),
            ".image.width",
            "unknown field",
        ),
    ]);
}

#[test]
fn image_refusals_name_the_member_and_the_rule() {
    let png = |extra: &str| image(&format!(r#""media_type":"image/png","base64":{extra}"#));
    check_refusals(&[
        (
            user(&image(&format!(
                r#""media_type":"image/svg+xml","base64":"{PNG}""#
            ))),
            ".image.media_type",
            "message.image_media_type",
        ),
        (
            user(&image(&format!(r#""base64":"{PNG}""#))),
            ".image.media_type",
            "message.image_media_type",
        ),
        (
            user(&png(r#""not base64!""#)),
            ".image.base64",
            "message.base64",
        ),
        // Non-zero trailing bits: not canonical.
        (
            user(&png(r#""iVBORw0KGgoAAAANSUhEUh==""#)),
            ".image.base64",
            "message.base64",
        ),
        (
            user(&png(&format!(r#""{JPEG}""#))),
            ".image.base64",
            "message.image_signature",
        ),
        (
            user(&png(&format!(r#""{PNG}","url":"https://a.b/c""#))),
            ".image",
            "scenario.image_source",
        ),
        (
            user(&image(r#""media_type":"image/png""#)),
            ".image",
            "scenario.image_source",
        ),
        (
            user(&image(r#""url":"http://example.com/a.png""#)),
            ".image.url",
            "message.image_url",
        ),
    ]);
}

#[test]
fn file_and_reasoning_refusals_name_the_member_and_the_rule() {
    let reasoning = |members: &str| assistant(&format!(r#"{{"reasoning":{{{members}}}}}"#));
    let redacted = |members: &str| assistant(&format!(r#"{{"redacted_reasoning":{{{members}}}}}"#));
    check_refusals(&[
        (
            user(&file("application/zip", "a.zip", PDF)),
            ".file.media_type",
            "message.file_media_type",
        ),
        (
            user(&file("application/pdf", "../a.pdf", PDF)),
            ".file.name",
            "message.file_name",
        ),
        (
            user(&file("application/pdf", "a.pdf", PNG)),
            ".file.base64",
            "message.file_signature",
        ),
        (
            user(&file("text/plain", "a.txt", "/w==")),
            ".file.base64",
            "message.file_signature",
        ),
        (
            user(&file("text/plain", "a.txt", "YQ")),
            ".file.base64",
            "message.base64",
        ),
        (
            reasoning(r#""provider":"Anthropic","text":"t""#),
            ".reasoning.provider",
            "message.provider_tag",
        ),
        (
            reasoning(r#""provider":"anthropic""#),
            ".reasoning.text",
            "message.empty_reasoning",
        ),
        (
            reasoning(&format!(
                r#""provider":"anthropic","text":"t","signature":"{SECRET} x""#
            )),
            ".reasoning.signature",
            "message.opaque_value",
        ),
        (
            redacted(&format!(r#""provider":"anthropic","data":"{SECRET}\n""#)),
            ".redacted_reasoning.data",
            "message.opaque_value",
        ),
        (
            redacted(r#""provider":"","data":"x""#),
            ".redacted_reasoning.provider",
            "message.provider_tag",
        ),
    ]);
}

/// Each media bound: the decoded bytes of one image and one file, and the
/// images and files of one message, at the bound and one past it.
#[test]
fn media_bounds_are_refused_past_the_bound() {
    let limits = keel_message::Limits::default();
    let png_of = |len: usize| {
        let mut bytes = b"\x89PNG\r\n\x1a\n".to_vec();
        bytes.resize(len, 0);
        base64_of(&bytes)
    };
    let at = "messages[0].parts[0]";
    let at_bound = png_of(limits.image_bytes);
    check(
        &user(&image(&format!(
            r#""media_type":"image/png","base64":"{at_bound}""#
        ))),
        Expect::Parts(&[(Role::User, &["image"])]),
    );
    let over = png_of(limits.image_bytes + 1);
    check(
        &user(&image(&format!(
            r#""media_type":"image/png","base64":"{over}""#
        ))),
        refused(&format!("{at}.image.base64"), "limits.image_bytes"),
    );
    let mut pdf = b"%PDF-".to_vec();
    pdf.resize(limits.file_bytes + 1, b' ');
    let pdf = base64_of(&pdf);
    check(
        &user(&format!(
            r#"{{"file":{{"media_type":"application/pdf","name":"a.pdf","base64":"{pdf}"}}}}"#
        )),
        refused(&format!("{at}.file.base64"), "limits.file_bytes"),
    );
    let one = image(&format!(r#""media_type":"image/png","base64":"{PNG}""#));
    let many = |n: usize| vec![one.as_str(); n].join(",");
    let kinds = vec!["image"; limits.media_parts_per_message];
    check(
        &user(&many(limits.media_parts_per_message)),
        Expect::Parts(&[(Role::User, &kinds)]),
    );
    match parse(
        Path::new("s.json"),
        &scenario(&user(&many(limits.media_parts_per_message + 1))),
    ) {
        Err(ScenarioError::Invalid { path, message, .. }) => {
            assert!(path.starts_with("messages[0]"), "{path}");
            assert!(
                message.contains("limits.media_parts_per_message"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
}

/// `bytes` as canonical base64, whatever their size.
fn base64_of(bytes: &[u8]) -> String {
    let unbounded = keel_message::Limits {
        image_bytes: usize::MAX,
        ..Default::default()
    };
    keel_message::MediaBytes::copy_from(bytes, keel_message::Bound::ImageBytes, &unbounded)
        .unwrap()
        .to_base64()
}

/// The bytes and opaque values are kept exactly: an accepted message's
/// JSON round trip (the fuzz target's property) holds.
#[test]
fn accepted_parts_keep_their_bytes() {
    let text = scenario(&format!(
        r#"[{{"role":"user","parts":[{}]}},{{"role":"assistant","parts":[{{"reasoning":{{"provider":"anthropic","text":"t","signature":"c2ln"}}}},{{"text":"a"}}]}}]"#,
        image(&format!(r#""media_type":"image/png","base64":"{PNG}""#))
    ));
    let s = parse(Path::new("s.json"), &text).unwrap();
    let Part::Image(image) = &s.messages[0].parts()[0] else {
        panic!("{:?}", s.messages[0]);
    };
    assert_eq!(image.bytes().unwrap().to_base64(), PNG);
    let Part::Reasoning(reasoning) = &s.messages[1].parts()[0] else {
        panic!("{:?}", s.messages[1]);
    };
    assert_eq!(reasoning.signature().unwrap().as_str(), "c2ln");
    assert_eq!(reasoning.provider().as_str(), "anthropic");
    for m in &s.messages {
        let json = serde_json::to_string(m).unwrap();
        let back =
            keel_message::Message::from_json_with(&json, &keel_message::Limits::default()).unwrap();
        assert_eq!(&back, m);
    }
}
