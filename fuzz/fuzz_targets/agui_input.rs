//! Fuzzes the body parser of `POST /v1/agui` (AG-UI's `RunAgentInput`:
//! `threadId`, `runId`, `messages`, `tools`, `context`, `resume`,
//! `state`, `forwardedProps`, …) on arbitrary text, through
//! `keel_views::agui::input::RunAgentInput::parse` under the default
//! bounds, the function the handler calls.
//!
//! Properties:
//! - no panic, and the verdict is deterministic;
//! - a body the one strict reader (`keel_message::strict_json`) refuses, a
//!   repeated member anywhere above all, is refused at the path it names;
//! - a refusal names a path that starts with a member the parser reads
//!   (`$` for the whole body) and its rule (`(rule …)` in the text);
//! - the verdict does not change when the letters and digits of content
//!   and id members (`text`, `description`, `error`, `payload`, `state`,
//!   `forwardedProps`, `filename`, `name`, `id`, `threadId`, `runId`,
//!   `toolCallId`, `interruptId`, `parentRunId`, `protocolVersion`) are
//!   rotated: a refusal names paths, rules and sizes, never content, and
//!   no rule reads a letter or digit of those members;
//! - an accepted body obeys the documented bounds: a `threadId` of 1 to 64
//!   bytes of `[A-Za-z0-9_-]`, a `runId` of 1 to 128 bytes without control
//!   characters, at most 128 tools with unique names and object schemas
//!   of at most 64 KiB; a user message of text, image and file parts with
//!   some content beyond the context part, its media parts at most
//!   `media_parts_per_message`, each within its byte bound and valid for
//!   its type; or answers (tool results and resume entries, not both
//!   empty, each call and interrupt once, each result within `part_bytes`).
#![no_main]

use keel_message::Part;
use keel_views::agui::input::{AGUI_ID_MAX_BYTES, InputLimits, NewInput, RunAgentInput};
use libfuzzer_sys::fuzz_target;
use std::collections::BTreeSet;

mod common;

const CONTENT: &[&str] = &[
    "text",
    "description",
    "error",
    "payload",
    "state",
    "forwardedProps",
    "filename",
    "name",
    "id",
    "threadId",
    "runId",
    "toolCallId",
    "interruptId",
    "parentRunId",
    "protocolVersion",
];
const ROOTS: &[&str] = &[
    "$",
    "threadId",
    "runId",
    "messages",
    "tools",
    "context",
    "resume",
    "state",
    "forwardedProps",
    "parentRunId",
    "protocolVersion",
];

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let limits = InputLimits::default();
    let verdict = RunAgentInput::parse(text, &limits);
    assert_eq!(verdict, RunAgentInput::parse(text, &limits), "deterministic");
    if let Err(strict) = keel_message::strict_json::parse(text) {
        let path = keel_message::strict_json::path(&strict);
        assert!(
            matches!(&verdict, Err(e) if e.path() == path),
            "the strict reader refuses at {path}: {verdict:?}"
        );
    }
    let rotated = common::rotate_string_values(text, Some(CONTENT));
    let again = RunAgentInput::parse(&rotated, &limits);
    match &verdict {
        Ok(input) => {
            assert!(again.is_ok(), "rotation refused: {again:?}\ninput: {text:?}");
            accepted(input, &limits);
        }
        Err(e) => {
            assert!(ROOTS.iter().any(|r| e.path().starts_with(r)), "path {:?}", e.path());
            assert!(e.to_string().ends_with(&format!("(rule {})", e.rule())), "{e}");
            assert_eq!(
                Err(e.clone()),
                again,
                "the refusal depends on content (echo)\ninput: {text:?}\nrotated: {rotated:?}"
            );
        }
    }
});

/// An accepted body's documented bounds.
fn accepted(input: &RunAgentInput, limits: &InputLimits) {
    let thread = input.thread_id().as_str();
    assert!(!thread.is_empty() && thread.len() <= 64);
    assert!(thread.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'));
    let run = input.run_id().as_str();
    assert!(!run.is_empty() && run.len() <= AGUI_ID_MAX_BYTES);
    assert!(!run.chars().any(char::is_control));
    assert!(input.tools().len() <= limits.max_tools);
    let names: BTreeSet<&str> = input.tools().iter().map(|t| t.name().as_str()).collect();
    assert_eq!(names.len(), input.tools().len(), "tool names repeat");
    for tool in input.tools() {
        assert!(tool.parameters().is_object());
        assert!(tool.parameters().len() <= limits.max_opaque_bytes);
    }
    match input.new_input() {
        NewInput::User { parts } => user(parts, limits),
        NewInput::Answers {
            tool_results,
            resume,
        } => {
            assert!(!tool_results.is_empty() || !resume.is_empty());
            assert!(resume.len() <= limits.max_resume);
            let calls: BTreeSet<_> = tool_results.iter().map(|r| r.call_id()).collect();
            assert_eq!(calls.len(), tool_results.len(), "a call answered twice");
            let interrupts: BTreeSet<_> = resume.iter().map(|a| a.interrupt_id()).collect();
            assert_eq!(interrupts.len(), resume.len(), "an interrupt answered twice");
            for r in tool_results {
                assert!(r.content().len() <= limits.message.part_bytes);
            }
        }
    }
}

/// A user message: text, image and file parts, valid and bounded, and
/// more than a context part.
fn user(parts: &[Part], limits: &InputLimits) {
    let l = &limits.message;
    let context = matches!(parts.first(), Some(Part::Text(t)) if t.text().starts_with("Context:\n"));
    assert!(parts.len() > usize::from(context), "nothing beyond the context");
    let mut media = 0;
    for part in parts {
        match part {
            Part::Text(t) => assert!(!t.text().is_empty() && t.text().len() <= l.part_bytes),
            Part::Image(image) => {
                media += 1;
                if let Some(bytes) = image.bytes() {
                    assert!(bytes.len() <= l.image_bytes);
                    let media_type = image.media_type().expect("inline bytes have a type");
                    assert!(media_type.signature_matches(bytes.as_bytes()));
                } else {
                    assert!(image.url().is_some(), "an image with neither bytes nor url");
                }
            }
            Part::File(file) => {
                media += 1;
                assert!(file.bytes().len() <= l.file_bytes);
                assert!(file.media_type().check_content(file.bytes().as_bytes()).is_ok());
            }
            other => panic!("a {} part in a user message", other.kind()),
        }
    }
    assert!(media <= l.media_parts_per_message, "{media} media parts");
}
