//! Fuzzes `Event::decode` on arbitrary lines.
//!
//! Every line: `Event::decode` (with its text-delta fast path and its
//! envelope shortcut) returns exactly what `Event::decode_generic`, the
//! reference path, returns: the same event, or the same error.
//!
//! Properties, on success (`Ok(e)`):
//! - the line is its own encoding: `e.line()` is the input, byte for byte,
//!   and the independent RFC 8785 canonicalizer agrees that it is
//!   canonical;
//! - the typed payload re-encodes to the same bytes:
//!   `e.payload()?.to_canonical()? == e.payload_json()`, and its kind is
//!   the event's;
//! - decoding `e.line()` again gives an equal event;
//! - the payload names a tool identity (`Payload::tool_name`) exactly
//!   when it is a tool lifecycle event: its line's `tool` member.
//!
//! On failure: no panic, and the error message does not change when the
//! letters and digits of content members (`text`, `output`, `arguments`,
//! `message`, `content`, `description`, and the opaque `signature` and
//! `redacted` values of `model.reasoning_end`) are rotated: it never
//! echoes content.
#![no_main]

use keel_eventlog::Event;
use keel_message::CanonicalJson;
use libfuzzer_sys::fuzz_target;

mod common;

const CONTENT: &[&str] = &[
    "text",
    "output",
    "arguments",
    "message",
    "content",
    "description",
    "signature",
    "redacted",
];

fuzz_target!(|data: &[u8]| {
    let Ok(line) = std::str::from_utf8(data) else {
        return;
    };
    let decoded = Event::decode(line);
    assert_eq!(
        decoded,
        Event::decode_generic(line),
        "the decode shortcuts disagree with the generic path\n{line}"
    );
    match decoded {
        Ok(event) => {
            assert_eq!(event.line(), line, "a decoded line is not its own encoding");
            let canonical = CanonicalJson::parse(line)
                .unwrap_or_else(|e| panic!("a decoded line is not canonical JSON: {e}\n{line}"));
            assert_eq!(
                canonical.as_str(),
                line,
                "a decoded line is not RFC 8785 canonical"
            );
            let payload = event.payload().unwrap_or_else(|e| {
                panic!("a decoded event's payload does not decode: {e}\n{line}")
            });
            assert_eq!(
                &payload.kind(),
                event.kind(),
                "payload kind differs\n{line}"
            );
            let json = payload
                .to_canonical()
                .unwrap_or_else(|e| panic!("a decoded payload does not encode: {e}\n{line}"));
            assert_eq!(
                json,
                event.payload_json(),
                "payload re-encoding differs\n{line}"
            );
            let is_tool = matches!(
                event.kind().lifecycle_parts(),
                Some((keel_eventlog::Scope::Tool, _))
            );
            assert_eq!(
                payload.tool_name().is_some(),
                is_tool,
                "a tool identity for another kind, or none for a tool event\n{line}"
            );
            if let Some(tool) = payload.tool_name() {
                let value: serde_json::Value =
                    serde_json::from_str(event.payload_json()).expect("payload is JSON");
                assert_eq!(value["tool"].as_str(), Some(tool.as_str()), "{line}");
            }
            let again = Event::decode(event.line()).expect("decodes twice");
            assert_eq!(again.line(), event.line());
            assert_eq!((again.seq(), again.ts()), (event.seq(), event.ts()));
        }
        Err(e) => {
            // In `run.input`, `message` is a whole message object (role and
            // part type tags included), not content: its texts are
            // rotated through their own `text`/`content` members.
            let content: Vec<&str> = if line.contains(r#""kind":"run.input""#) {
                CONTENT.iter().copied().filter(|k| *k != "message").collect()
            } else {
                CONTENT.to_vec()
            };
            let rotated = common::rotate_string_values(line, Some(&content));
            if rotated == line {
                return;
            }
            match Event::decode(&rotated) {
                // Content can decide validity (a secret-shaped error text is
                // redacted, so the line is not its own encoding); nothing
                // to compare then.
                Ok(_) => {}
                Err(twin) => assert_eq!(
                    e.to_string(),
                    twin.to_string(),
                    "the decode error depends on content (echo)\n{line}\n{rotated}"
                ),
            }
        }
    }
});
