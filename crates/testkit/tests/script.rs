//! The scenario-file shapes: script items and tool steps.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use keel_engine::{ToolOutcome, ToolRetry};
use keel_stream::{FinishReason, ProblemKind, RawCompletion, RawItem, RawUsage};
use keel_testkit::*;
use serde_json::json;
use std::time::Duration;

/// The `provider.calls` of the KEEL.md scenario example, verbatim.
const KEEL_MD_CALLS: &str = r#"[
    [{"text": "Checking."},
     {"tool_call": {"call_id": "c1", "name": "get_weather", "arguments": {"city": "Oslo"}}},
     {"complete": {"finish": "tool_calls", "usage": {"input_tokens": 12, "output_tokens": 7},
                   "metadata": {"scripted": {"request_id": "r1"}}}}],
    [{"fail": {"kind": "overloaded", "message": "busy", "retryable": true}}],
    [{"delay_ms": 200}, {"text": "3 °C."}, {"complete": {"finish": "stop"}}]
  ]"#;

#[test]
fn keel_md_example_calls_parse_to_the_expected_items() {
    let calls: Vec<Vec<ScriptItem>> = serde_json::from_str(KEEL_MD_CALLS).unwrap();
    assert_eq!(
        calls,
        vec![
            vec![
                ScriptItem::text("Checking."),
                ScriptItem::tool_call("c1", "get_weather", json!({"city": "Oslo"})),
                ScriptItem::Complete(ScriptComplete {
                    finish: FinishReason::ToolCalls,
                    usage: Some(ScriptUsage {
                        input_tokens: 12,
                        output_tokens: 7
                    }),
                    metadata: Some(json!({"scripted": {"request_id": "r1"}})),
                }),
            ],
            vec![ScriptItem::fail(ProblemKind::Overloaded, "busy", true)],
            vec![
                ScriptItem::DelayMs(200),
                ScriptItem::text("3 °C."),
                ScriptItem::complete(FinishReason::Stop)
            ],
        ]
    );
    assert_eq!(
        calls[0][2].to_raw(),
        Some(RawItem::Completion(RawCompletion {
            finish: FinishReason::ToolCalls,
            usage: Some(RawUsage {
                input_tokens: 12,
                output_tokens: 7
            }),
            metadata: Some(json!({"scripted": {"request_id": "r1"}})),
        }))
    );
}

#[test]
fn every_item_shape_round_trips_through_json() {
    let items = [
        r#"{"text":"héllo"}"#,
        r#"{"text":""}"#,
        r#"{"reasoning":"Let me think."}"#,
        r#"{"reasoning_signature":"EqQBCgIYAhIM"}"#,
        r#"{"redacted_reasoning":"RWNyeXB0ZWQ="}"#,
        r#"{"tool_call":{"call_id":"c1","name":"f","arguments":{"a":[1,2]}}}"#,
        r#"{"tool_call":{"call_id":"c1","name":"f","arguments_raw":"{not json"}}"#,
        r#"{"tool_call":{"call_id":"c1","name":"f","arguments":null}}"#,
        r#"{"complete":{"finish":"length"}}"#,
        r#"{"complete":{"finish":"content_filter","usage":{"input_tokens":1,"output_tokens":2},"metadata":{"x":{}}}}"#,
        r#"{"complete":{"finish":"stop","metadata":null}}"#,
        r#"{"fail":{"kind":"rate_limited","message":"m","retryable":true,"retry_after_ms":1500}}"#,
        r#"{"fail":{"kind":"protocol","message":"m","retryable":false}}"#,
        r#"{"delay_ms":0}"#,
        r#"{"disconnect":true}"#,
    ];
    for text in items {
        let item: ScriptItem = serde_json::from_str(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(serde_json::to_string(&item).unwrap(), text);
    }
}

#[test]
fn loader_refuses_shape_errors_but_not_stream_errors() {
    let refused = [
        r#"{"txt": "a"}"#,
        r#"{"text": "a", "delay_ms": 5}"#,
        r#"{"text": 5}"#,
        r#"{"tool_call": {"call_id": "c1", "name": "f"}}"#,
        r#"{"tool_call": {"call_id": "c1", "name": "f", "arguments": {}, "arguments_raw": "{}"}}"#,
        r#"{"tool_call": {"call_id": "c1", "name": "f", "arguments": {}, "id": "x"}}"#,
        r#"{"complete": {"finish": "done"}}"#,
        r#"{"complete": {"finish": "stop", "usage": {"input_tokens": 1}}}"#,
        r#"{"complete": {"finish": "stop", "usage": {"input_tokens": 1, "output_tokens": 1, "total": 2}}}"#,
        r#"{"fail": {"kind": "overloaded", "message": "busy"}}"#,
        r#"{"fail": {"kind": "busy", "message": "busy", "retryable": true}}"#,
        r#"{"delay_ms": -1}"#,
        r#"{"disconnect": false}"#,
        r#"{"reasoning": 5}"#,
        r#"{"reasoning_signature": null}"#,
        r#"{"redacted_reasoning": {"data": "x"}}"#,
        r#"{"reasoning": "a", "text": "b"}"#,
        r#"{}"#,
        r#"[]"#,
    ];
    for text in refused {
        assert!(
            serde_json::from_str::<ScriptItem>(text).is_err(),
            "{text} should be refused"
        );
    }
    // Malformed as a stream, fine as a script: the validator's job.
    let accepted = [
        r#"{"text": ""}"#,
        r#"{"tool_call": {"call_id": "bad id!", "name": "no spaces allowed", "arguments": [1]}}"#,
        r#"{"tool_call": {"call_id": "c1", "name": "f", "arguments_raw": "{\"a\":1,\"a\":2}"}}"#,
        r#"{"complete": {"finish": "tool_calls", "usage": {"input_tokens": 18446744073709551615, "output_tokens": 1}}}"#,
        r#"{"complete": {"finish": "stop", "metadata": "not an object"}}"#,
        r#"{"reasoning": ""}"#,
        r#"{"reasoning_signature": "not printable ASCII: é"}"#,
        r#"{"redacted_reasoning": ""}"#,
    ];
    for text in accepted {
        serde_json::from_str::<ScriptItem>(text).unwrap_or_else(|e| panic!("{text}: {e}"));
    }
}

#[test]
fn the_error_names_the_rule() {
    let e = serde_json::from_str::<ScriptItem>(r#"{"disconnect": false}"#).unwrap_err();
    assert!(e.to_string().contains("`disconnect` must be true"), "{e}");
    let e = serde_json::from_str::<ScriptItem>(r#"{"tool_call": {"call_id": "c", "name": "f"}}"#)
        .unwrap_err();
    assert!(e.to_string().contains("arguments_raw"), "{e}");
}

#[test]
fn raw_items_convert_both_ways() {
    let raws = [
        RawItem::text("a"),
        RawItem::text(""),
        RawItem::tool_call("c1", "f", r#"{"a":1}"#),
        RawItem::tool_call("c1", "f", r#"{ "a": 1 }"#),
        RawItem::tool_call("c1", "f", r#"{"a":1,"a":2}"#),
        RawItem::tool_call("c1", "f", "{not json"),
        RawItem::complete(FinishReason::Stop),
        RawItem::fail(ProblemKind::Timeout, "slow", true),
        RawItem::reasoning("hm"),
        RawItem::reasoning(""),
        RawItem::reasoning_signature("sig"),
        RawItem::redacted_reasoning("opaque"),
    ];
    for raw in raws {
        let item = ScriptItem::from(raw.clone());
        assert_eq!(item.to_raw(), Some(raw.clone()));
        // And through JSON.
        let back: ScriptItem =
            serde_json::from_str(&serde_json::to_string(&item).unwrap()).unwrap();
        assert_eq!(back.to_raw(), Some(raw));
    }
    assert_eq!(ScriptItem::DelayMs(3).to_raw(), None);
    assert_eq!(ScriptItem::Disconnect.to_raw(), None);
    assert_eq!(
        ScriptItem::delay(Duration::from_micros(2500)),
        ScriptItem::DelayMs(2)
    );
    assert!(ScriptItem::fail(ProblemKind::Other, "x", false).is_terminal());
    assert!(!ScriptItem::Disconnect.is_terminal());
}

#[test]
fn tool_steps_follow_the_scenario_shape() {
    let steps: Vec<ToolStep> = serde_json::from_str(
        r#"[{"ok": {"temp_c": 3}},
            {"error": {"message": "timed out", "outcome": "uncertain", "retry": "retryable"}},
            {"delay_ms": 500, "ok": "late"},
            {"delay_ms": 5, "error": {"message": "nope"}},
            {"panic": "boom"},
            {"hang": true},
            {"ok": null}]"#,
    )
    .unwrap();
    assert_eq!(
        steps,
        vec![
            ToolStep::ok(json!({"temp_c": 3})),
            ToolStep::typed_error("timed out", ToolOutcome::Uncertain, ToolRetry::Retryable),
            ToolStep::ok(json!("late")).after_ms(500),
            ToolStep::error("nope").after_ms(5),
            ToolStep::panic("boom"),
            ToolStep::hang(),
            ToolStep::ok(json!(null)),
        ]
    );
    for step in &steps {
        let text = serde_json::to_string(step).unwrap();
        assert_eq!(&serde_json::from_str::<ToolStep>(&text).unwrap(), step);
    }
    for bad in [
        r#"{}"#,
        r#"{"delay_ms": 5}"#,
        r#"{"ok": 1, "error": {"message": "x"}}"#,
        r#"{"hang": false}"#,
        r#"{"ok": 1, "retries": 2}"#,
        r#"{"error": {"message": "x", "outcome": "maybe"}}"#,
        r#"{"error": {"message": "x", "code": 1}}"#,
    ] {
        assert!(serde_json::from_str::<ToolStep>(bad).is_err(), "{bad}");
    }
}

/// `ScriptItem::Panic` is Rust-only: it serializes to an error, no JSON
/// item name loads it, and it yields no raw item.
#[test]
fn a_panic_item_has_no_wire_form() {
    let item = ScriptItem::panic("bug");
    assert_eq!(item, ScriptItem::Panic("bug".into()));
    assert_eq!(item.to_raw(), None);
    assert!(!item.is_terminal());
    let error = serde_json::to_string(&vec![ScriptItem::text("a"), item]).unwrap_err();
    assert!(error.to_string().contains("no scenario form"), "{error}");
    for text in [r#"{"panic": "bug"}"#, r#"{"panic": true}"#] {
        assert!(serde_json::from_str::<ScriptItem>(text).is_err(), "{text}");
    }
}

/// Rule `script.known_value`: a script is the live path, so a finish
/// reason or problem kind this version does not know is refused at load,
/// naming the rule and not the value.
#[test]
fn unknown_enum_values_are_refused_at_load() {
    for text in [
        r#"{"complete": {"finish": "paused_for_moderation"}}"#,
        r#"{"fail": {"kind": "quota", "message": "m", "retryable": false}}"#,
    ] {
        let e = serde_json::from_str::<ScriptItem>(text)
            .unwrap_err()
            .to_string();
        assert!(e.contains("rule script.known_value"), "{e}");
        assert!(!e.contains("quota") && !e.contains("paused"), "{e}");
    }
    let known = r#"{"fail": {"kind": "other", "message": "m", "retryable": false}}"#;
    assert!(serde_json::from_str::<ScriptItem>(known).is_ok());
}
