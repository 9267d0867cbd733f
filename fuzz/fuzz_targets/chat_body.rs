//! Fuzzes the body parser of `POST /v1/chat` (what the AI SDK's `useChat`
//! sends: `id`, `messages`, `trigger`, …) on arbitrary text, through
//! `keel_serve::chat::parse_body`, the function the handler calls.
//!
//! Properties:
//! - no panic, and the verdict is deterministic;
//! - a refusal names a non-empty JSON path (`$` for the whole body) that
//!   starts with a member the parser reads;
//! - a refusal does not change when the letters and digits of content
//!   members (`text`, `data`, `input`, `output`, `reason`, `errorText`)
//!   are rotated: it names paths and rules, never content;
//! - a body the one strict reader (`keel_message::strict_json`) refuses, a
//!   repeated member anywhere above all, is refused at the path it names:
//!   no member is read last-wins;
//! - an accepted body obeys the documented bounds: an `id` of 1 to 64
//!   bytes of `[A-Za-z0-9_-]`, and a user message with some text or a
//!   file, or at least one answered approval (and no files); a user
//!   message's files are image and file parts, at most
//!   `media_parts_per_message`, each within its byte bound and valid for
//!   its media type (an image's signature, a text file's UTF-8).
#![no_main]

use keel_message::{Limits, Part};
use keel_serve::chat::{Ask, MAX_CHAT_ID_BYTES, parse_body};
use libfuzzer_sys::fuzz_target;

mod common;

const CONTENT: &[&str] = &["text", "data", "input", "output", "reason", "errorText"];
const ROOTS: &[&str] = &[
    "$",
    "id",
    "trigger",
    "messageId",
    "model",
    "provider",
    "messages",
];

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let verdict = parse_body(text);
    assert_eq!(verdict, parse_body(text), "deterministic");
    if let Err(strict) = keel_message::strict_json::parse(text) {
        let path = keel_message::strict_json::path(&strict);
        assert!(
            matches!(&verdict, Err(e) if e.path == path),
            "the strict reader refuses at {path}: {verdict:?}"
        );
    }
    match verdict {
        Ok(body) => {
            let id = body.id.as_str();
            assert!(!id.is_empty() && id.len() <= MAX_CHAT_ID_BYTES);
            assert!(
                id.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            );
            match &body.ask {
                Ask::User(texts) => {
                    assert!(texts.iter().any(|t| !t.is_empty()) || !body.files.is_empty());
                    files(&body.files);
                }
                Ask::Approvals(answers) => {
                    assert!(!answers.is_empty());
                    assert!(body.files.is_empty(), "files beside approvals");
                }
            }
        }
        Err(e) => {
            assert!(
                ROOTS.iter().any(|r| e.path.starts_with(r)),
                "path {:?}",
                e.path
            );
            let rotated = common::rotate_string_values(text, Some(CONTENT));
            assert_eq!(
                Err(e.clone()),
                parse_body(&rotated),
                "the refusal depends on content (echo)\ninput: {text:?}\nrotated: {rotated:?}"
            );
            assert!(!e.to_string().is_empty());
        }
    }
});

/// A user message's files are image and file parts within the default
/// message limits, each valid for its type.
fn files(files: &[Part]) {
    let limits = Limits::default();
    assert!(files.len() <= limits.media_parts_per_message, "{} files", files.len());
    for part in files {
        match part {
            Part::Image(image) => {
                if let Some(bytes) = image.bytes() {
                    assert!(bytes.len() <= limits.image_bytes);
                    let media_type = image.media_type().expect("inline bytes have a type");
                    assert!(media_type.signature_matches(bytes.as_bytes()));
                } else {
                    assert!(image.url().is_some(), "an image with neither bytes nor url");
                }
            }
            Part::File(file) => {
                assert!(file.bytes().len() <= limits.file_bytes);
                assert!(file.media_type().check_content(file.bytes().as_bytes()).is_ok());
            }
            other => panic!("a {} part among the files", other.kind()),
        }
    }
}
