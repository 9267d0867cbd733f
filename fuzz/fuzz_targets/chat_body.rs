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
//!   bytes of `[A-Za-z0-9_-]`, and a user message with some text or at
//!   least one answered approval.
#![no_main]

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
                Ask::User(texts) => assert!(texts.iter().any(|t| !t.is_empty())),
                Ask::Approvals(answers) => assert!(!answers.is_empty()),
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
