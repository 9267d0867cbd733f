//! Additive wire enums (issue #22): an event carrying a value of an
//! extensible enum that this version does not know decodes, re-encodes
//! byte for byte and reads back unchanged; known values stay known; a
//! malformed value is refused naming its rule; closed enums refuse unknown
//! values.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
use common::*;
use keel_eventlog::*;
use keel_message::Limits;
use keel_stream::{FinishReason, ProblemKind, RetryPosition};
use proptest::prelude::*;

const ENV: &str = r#","run_id":"run_1","seq":3,"ts":1767225600123456}"#;

/// One additivity point: an event kind and its payload with `{}` where
/// the enum value goes (already quoted).
struct Point {
    name: &'static str,
    kind: &'static str,
    payload: &'static str,
}

const POINTS: [Point; 5] = [
    Point {
        name: "finish reason",
        kind: "model.completed",
        payload: r#"{"finish":{},"operation_id":"op_1","turn":1}"#,
    },
    Point {
        name: "problem kind",
        kind: "model.failed",
        payload: r#"{"operation_id":"op_1","position":"pristine","problem":{"kind":{},"message":"m","retryable":false},"turn":1}"#,
    },
    Point {
        name: "retry position",
        kind: "model.failed",
        payload: r#"{"operation_id":"op_1","position":{},"problem":{"kind":"timeout","message":"m","retryable":true},"turn":1}"#,
    },
    Point {
        name: "tool outcome",
        kind: "tool.failed",
        payload: r#"{"call_id":"c1","error":"x","outcome":{},"tool":"t","turn":1}"#,
    },
    Point {
        name: "tool retry",
        kind: "tool.failed",
        payload: r#"{"call_id":"c1","error":"x","retry":{},"tool":"t","turn":1}"#,
    },
];

fn line(point: &Point, value: &str) -> String {
    let payload = point.payload.replace("{}", value);
    format!(r#"{{"kind":"{}","payload":{payload}{ENV}"#, point.kind)
}

/// The value at `point` in a decoded payload, as its wire string and
/// whether it is known.
fn value_of(point: &Point, payload: &Payload) -> (String, bool) {
    let (text, known) = match (point.name, payload) {
        ("finish reason", Payload::ModelCompleted(p)) => {
            (p.finish.to_string(), p.finish.is_known())
        }
        ("problem kind", Payload::ModelFailed(p)) => {
            (p.problem.kind.to_string(), p.problem.kind.is_known())
        }
        ("retry position", Payload::ModelFailed(p)) => {
            (p.position.to_string(), p.position.is_known())
        }
        ("tool outcome", Payload::ToolFailed(p)) => {
            let o = p.outcome.clone().unwrap();
            (o.to_string(), o.is_known())
        }
        ("tool retry", Payload::ToolFailed(p)) => {
            let r = p.retry.clone().unwrap();
            (r.to_string(), r.is_known())
        }
        other => panic!("unexpected payload {other:?}"),
    };
    (text, known)
}

/// Decodes `line` through the real path, checks that the line and the
/// typed payload re-encode byte for byte, and returns the value read.
fn round_trip(point: &Point, line: &str) -> (String, bool) {
    let event = Event::decode(line).unwrap_or_else(|e| panic!("{}: {e}", point.name));
    assert_eq!(
        event.line(),
        line,
        "{}: line not byte-identical",
        point.name
    );
    let payload = event.payload().unwrap();
    assert_eq!(
        payload.to_canonical().unwrap(),
        event.payload_json(),
        "{}: payload not byte-identical",
        point.name
    );
    // The generic decoder agrees.
    assert_eq!(Event::decode_generic(line).unwrap().line(), line);
    value_of(point, &payload)
}

#[test]
fn unknown_values_decode_and_re_encode_byte_for_byte() {
    let words = [
        "paused_for_moderation",
        "quota",
        "after_tool_calls",
        "maybe",
        "later",
    ];
    for (point, word) in POINTS.iter().zip(words) {
        let got = round_trip(point, &line(point, &format!("\"{word}\"")));
        assert_eq!(got, (word.to_owned(), false), "{}", point.name);
    }
}

#[test]
fn known_values_stay_known() {
    let known = [
        FinishReason::KNOWN
            .iter()
            .map(|v| v.as_str().to_owned())
            .collect::<Vec<_>>(),
        ProblemKind::KNOWN
            .iter()
            .map(|v| v.as_str().to_owned())
            .collect(),
        RetryPosition::KNOWN
            .iter()
            .map(|v| v.as_str().to_owned())
            .collect(),
        ToolOutcome::KNOWN
            .iter()
            .map(|v| v.as_str().to_owned())
            .collect(),
        ToolRetry::KNOWN
            .iter()
            .map(|v| v.as_str().to_owned())
            .collect(),
    ];
    for (point, names) in POINTS.iter().zip(known) {
        assert!(names.len() >= 2, "{}", point.name);
        for name in names {
            let got = round_trip(point, &line(point, &format!("\"{name}\"")));
            assert_eq!(got, (name.clone(), true), "{}: {name}", point.name);
        }
    }
    // And a known name never becomes the unknown variant.
    assert_eq!(FinishReason::from_wire("stop"), Ok(FinishReason::Stop));
    let known = keel_stream::UnknownValue::<ToolRetry>::new("not_retryable");
    assert_eq!(known.map_err(|e| e.rule()), Err("wire_value.unknown_only"));
}

#[test]
fn malformed_values_are_refused_naming_the_rule() {
    let long = format!("\"{}\"", "a".repeat(65));
    let cases = [
        ("\"Stop\"", "rule wire_value.syntax"),
        ("\"SECRETVALUE\"", "rule wire_value.syntax"),
        ("\"9lives\"", "rule wire_value.syntax"),
        ("\"with space\"", "rule wire_value.syntax"),
        ("\"\"", "rule wire_value.length"),
        (long.as_str(), "rule wire_value.length"),
        ("7", "rule wire_value.syntax"),
        ("[\"stop\"]", "rule wire_value.syntax"),
    ];
    for point in &POINTS {
        for (value, rule) in cases {
            let line = line(point, value);
            let shown = match Event::decode(&line) {
                Ok(e) => panic!("{}: accepted {e}", point.name),
                Err(e) => e.to_string(),
            };
            assert!(
                shown.contains("rule payload.schema") && shown.contains(rule),
                "{} {value}: {shown} lacks {rule}",
                point.name
            );
            assert!(!shown.contains("SECRETVALUE"), "echoed input: {shown}");
        }
    }
    // `null` is not a value either (for the optional tool members it means
    // "absent", which canonical form writes by leaving the member out).
    for point in &POINTS {
        let shown = Event::decode(&line(point, "null")).unwrap_err().to_string();
        let rule = match point.kind {
            "tool.failed" => "rule event.canonical",
            _ => "rule wire_value.syntax",
        };
        assert!(shown.contains(rule), "{}: {shown} lacks {rule}", point.name);
    }
    // The longest well-formed word is kept.
    let max = "a".repeat(64);
    let got = round_trip(&POINTS[0], &line(&POINTS[0], &format!("\"{max}\"")));
    assert_eq!(got, (max, false));
}

/// Closed wire enums refuse an unknown value with a named rule: the
/// message `role` and part `type` (a provider request cannot carry what
/// this version does not know) and the lifecycle phase of a known scope's
/// kind.
#[test]
fn closed_enums_refuse_unknown_values() {
    let input =
        |message: &str| format!(r#"{{"kind":"run.input","payload":{{"message":{message}}}{ENV}"#);
    let good = input(r#"{"id":"m1","parts":[{"text":"hi","type":"text"}],"role":"user"}"#);
    assert_eq!(Event::decode(&good).unwrap().line(), good);
    for message in [
        r#"{"id":"m1","parts":[{"text":"hi","type":"text"}],"role":"critic"}"#,
        r#"{"id":"m1","parts":[{"text":"hi","type":"image"}],"role":"user"}"#,
    ] {
        let shown = Event::decode(&input(message)).unwrap_err().to_string();
        assert!(shown.contains("rule payload.schema"), "{shown}");
    }
    let line = format!(r#"{{"kind":"agent.started","payload":{{}}{ENV}"#);
    let shown = Event::decode(&line).unwrap_err().to_string();
    assert!(shown.contains("rule kind.lifecycle_known"), "{shown}");
}

/// A whole run carrying unknown values: import reads it, keeps every line
/// byte for byte, the snapshot round-trips, and history rebuilds.
#[test]
fn import_snapshot_and_history_read_unknown_values() {
    let lines = [
        r#"{"kind":"run.started","payload":{},"run_id":"run_1","seq":1,"ts":1}"#,
        r#"{"kind":"run.input","payload":{"message":{"id":"m1","parts":[{"text":"hi","type":"text"}],"role":"user"}},"run_id":"run_1","seq":2,"ts":2}"#,
        r#"{"kind":"turn.started","payload":{"turn":1},"run_id":"run_1","seq":3,"ts":3}"#,
        r#"{"kind":"model.started","payload":{"attempt":1,"model":"m","operation_id":"op_1","turn":1},"run_id":"run_1","seq":4,"ts":4}"#,
        r#"{"kind":"model.failed","payload":{"operation_id":"op_1","position":"after_tool_calls","problem":{"kind":"quota","message":"m","retryable":false},"turn":1},"run_id":"run_1","seq":5,"ts":5}"#,
        r#"{"kind":"model.started","payload":{"attempt":2,"model":"m","operation_id":"op_2","turn":1},"run_id":"run_1","seq":6,"ts":6}"#,
        r#"{"kind":"model.text_delta","payload":{"operation_id":"op_2","text":"Hello","turn":1},"run_id":"run_1","seq":7,"ts":7}"#,
        r#"{"kind":"model.completed","payload":{"finish":"paused_for_moderation","operation_id":"op_2","turn":1},"run_id":"run_1","seq":8,"ts":8}"#,
        r#"{"kind":"turn.completed","payload":{"turn":1},"run_id":"run_1","seq":9,"ts":9}"#,
        r#"{"kind":"run.completed","payload":{},"run_id":"run_1","seq":10,"ts":10}"#,
    ];
    let log = RunLog::import(
        run_id(),
        lines,
        LogConfig::default(),
        std::sync::Arc::new(SystemClock),
    )
    .unwrap();
    let events = log.retained_after(0);
    let again: Vec<&str> = events.iter().map(|e| e.line()).collect();
    assert_eq!(again, lines);
    for e in &events {
        e.payload().unwrap();
    }
    let text = log.snapshot().to_jsonl();
    assert_eq!(Snapshot::from_jsonl(&text).unwrap().to_jsonl(), text);
    let history = history::rebuild(&events, &Limits::default()).unwrap();
    let texts: Vec<String> = history.iter().map(|m| m.joined_text()).collect();
    assert_eq!(texts, ["hi", "Hello"]);
}

/// A well-formed word that is not a known name of the enum at `point`.
fn is_unknown_at(point: &Point, word: &str) -> bool {
    match point.name {
        "finish reason" => !FinishReason::from_wire(word).unwrap().is_known(),
        "problem kind" => !ProblemKind::from_wire(word).unwrap().is_known(),
        "retry position" => !RetryPosition::from_wire(word).unwrap().is_known(),
        "tool outcome" => !ToolOutcome::from_wire(word).unwrap().is_known(),
        _ => !ToolRetry::from_wire(word).unwrap().is_known(),
    }
}

proptest! {
    /// Any well-formed unknown word, at any additivity point, decodes,
    /// re-encodes to the same bytes and reads back unchanged.
    #[test]
    fn any_unknown_word_round_trips(word in "[a-z][a-z0-9_]{0,63}", at in 0usize..5) {
        let point = &POINTS[at];
        prop_assume!(is_unknown_at(point, &word));
        let got = round_trip(point, &line(point, &format!("\"{word}\"")));
        prop_assert_eq!(got, (word, false));
    }
}
