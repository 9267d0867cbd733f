//! Fuzzes the scenario loader (`keel run FILE` and `POST /v1/runs` share
//! it) on arbitrary text.
//!
//! Properties:
//! - no panic, and the verdict is deterministic;
//! - a refusal names the file, and its line and column (when it has them)
//!   point inside the text (line ≤ lines + 1, column ≤ that line's length
//!   + 1); a shape or rule error names a non-empty JSON path;
//! - a refusal does not change when the letters and digits of content
//!   members (`text`, `content`, `description`, `output`, `message`) are
//!   rotated: it never echoes content;
//! - an accepted scenario's history is a valid request history: every
//!   message re-validates through `keel-message` after a JSON round trip.
#![no_main]

use keel_message::{Limits, Message};
use keel_scenario::file::{ProviderSpec, ScenarioError, parse};
use libfuzzer_sys::fuzz_target;
use std::path::Path;

mod common;

const FILE: &str = "fuzz.json";
const CONTENT: &[&str] = &["text", "content", "description", "output", "message"];

fn check_position(text: &str, line: usize, column: usize) {
    let lines: Vec<&str> = text.split('\n').collect();
    assert!(
        line >= 1 && line <= lines.len() + 1,
        "line {line} outside the text"
    );
    let width = lines.get(line - 1).map_or(0, |l| l.len());
    assert!(
        column <= width + 1,
        "column {column} outside line {line} ({width} bytes)"
    );
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let first = parse(Path::new(FILE), text);
    let second = parse(Path::new(FILE), text);
    assert_eq!(
        format!("{first:?}"),
        format!("{second:?}"),
        "not deterministic"
    );
    match first {
        Err(e) => {
            assert!(
                e.to_string().starts_with(FILE),
                "the error does not name the file: {e}"
            );
            match &e {
                ScenarioError::Syntax { line, column, .. } => check_position(text, *line, *column),
                ScenarioError::Shape {
                    line, column, path, ..
                } => {
                    check_position(text, *line, *column);
                    assert!(!path.is_empty());
                }
                ScenarioError::Invalid { path, .. } => assert!(!path.is_empty()),
                ScenarioError::Read { .. } | ScenarioError::TooLarge { .. } => {
                    panic!("parse does not read files")
                }
            }
            let rotated = common::rotate_string_values(text, Some(CONTENT));
            if let Err(twin) = parse(Path::new(FILE), &rotated) {
                assert_eq!(
                    e.to_string(),
                    twin.to_string(),
                    "a refusal depends on content (echo)\n{text:?}\n{rotated:?}"
                );
            }
        }
        Ok(scenario) => {
            for m in &scenario.messages {
                let json = serde_json::to_string(m).expect("a message encodes");
                let back = Message::from_json_with(&json, &Limits::default())
                    .unwrap_or_else(|e| panic!("an accepted message does not re-validate: {e}"));
                assert_eq!(&back, m);
            }
            if let ProviderSpec::Network { api_key_env, .. } = &scenario.provider {
                // The type holds the rule; what was accepted re-parses.
                assert_eq!(
                    keel_message::EnvVarName::parse(api_key_env.as_str()).as_ref(),
                    Ok(api_key_env),
                    "an accepted key variable name does not re-validate"
                );
            }
        }
    }
});
