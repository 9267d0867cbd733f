//! The wire format: canonical lines, decoding rules, byte-identical round
//! trips, unknown members and kinds.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
use common::*;
use keel_eventlog::*;

/// Decodes `line`; expects it to round-trip byte for byte, or to be refused
/// with an error whose text contains `rule`.
fn check(row: &str, line: &str, rule: Option<&str>) {
    match (Event::decode(line), rule) {
        (Ok(e), None) => {
            assert_eq!(e.line(), line, "row {row}: not byte-identical");
            // And the payload re-encodes to the same slice.
            let payload = e.payload().unwrap();
            assert_eq!(
                payload.to_canonical().unwrap(),
                e.payload_json(),
                "row {row}"
            );
        }
        (Ok(e), Some(rule)) => panic!("row {row}: accepted {e}, wanted {rule}"),
        (Err(e), None) => panic!("row {row}: refused: {e}"),
        (Err(e), Some(rule)) => {
            let shown = e.to_string();
            assert!(shown.contains(rule), "row {row}: {shown} lacks {rule}");
            assert!(
                !shown.contains("SECRETVALUE"),
                "row {row}: echoed input: {shown}"
            );
        }
    }
}

const ENV: &str = r#","run_id":"run_1","seq":3,"ts":1767225600123456}"#;

fn line(kind: &str, payload: &str) -> String {
    format!(r#"{{"kind":"{kind}","payload":{payload}{ENV}"#)
}

#[test]
fn decoding_rules() {
    let rows: Vec<(&str, String, Option<&str>)> = vec![
        ("run.started", line("run.started", "{}"), None),
        (
            "run.started of a chat run, unknown member kept",
            line("run.started", r#"{"chat":{"id":"conv-1","later":true,"n":2},"continues":"chat-conv-1-1","model":"m"}"#),
            None,
        ),
        ("chat run number not a number", line("run.started", r#"{"chat":{"id":"c","n":"SECRETVALUE"}}"#), Some("rule payload.schema")),
        ("chat without its id", line("run.started", r#"{"chat":{"n":1}}"#), Some("rule payload.schema")),
        ("chat id with a slash", line("run.started", r#"{"chat":{"id":"a/b","n":1}}"#), Some("rule chat_id.charset")),
        ("chat id empty", line("run.started", r#"{"chat":{"id":"","n":1}}"#), Some("rule chat_id.length")),
        ("chat id of 65 bytes", line("run.started", &format!(r#"{{"chat":{{"id":"{}","n":1}}}}"#, "c".repeat(65))), Some("rule chat_id.length")),
        ("chat id of 64 bytes", line("run.started", &format!(r#"{{"chat":{{"id":"{}","n":1}}}}"#, "c".repeat(64))), None),
        ("text delta", line("model.text_delta", r#"{"operation_id":"op_1","text":"Hi ✓","turn":1}"#), None),
        (
            "tool call",
            line("model.tool_call", r#"{"arguments":{"city":"Oslo"},"call_id":"c1","name":"get_weather","operation_id":"op_1","turn":1}"#),
            None,
        ),
        (
            "tool.failed with typed outcome",
            line("tool.failed", r#"{"call_id":"c1","error":"timed out","outcome":"uncertain","retry":"retryable","tool":"get_weather","turn":1}"#),
            None,
        ),
        (
            "model.failed",
            line("model.failed", r#"{"operation_id":"op_2","position":"partial","problem":{"kind":"overloaded","message":"busy","retryable":true},"turn":1}"#),
            None,
        ),
        (
            "run.failed with cause",
            line("run.failed", r#"{"cause":{"call_id":"c1","tool":"get_weather"},"error":"tool failed"}"#),
            None,
        ),
        ("unknown optional member kept", line("turn.started", r#"{"future":{"b":[1,2],"a":null},"turn":1}"#.replace(r#"{"b":[1,2],"a":null}"#, r#"{"a":null,"b":[1,2]}"#).as_str()), None),
        ("unknown nested member kept", line("model.failed", r#"{"operation_id":"op_2","position":"pristine","problem":{"kind":"timeout","message":"slow","new_field":7,"retryable":true},"turn":1}"#), None),
        ("extension kind kept", line("model.thinking_delta", r#"{"text":"hmm","turn":1}"#), None),
        ("reasoning delta", line("model.reasoning_delta", r#"{"operation_id":"op_1","text":"hmm ✓","turn":1}"#), None),
        ("reasoning delta, empty", line("model.reasoning_delta", r#"{"operation_id":"op_1","text":"","turn":1}"#), Some("rule payload.reasoning_nonempty")),
        ("reasoning delta without its call", line("model.reasoning_delta", r#"{"text":"hmm","turn":1}"#), Some("rule payload.schema")),
        ("reasoning delta, turn 0", line("model.reasoning_delta", r#"{"operation_id":"op_1","text":"a","turn":0}"#), Some("rule payload.turn_from_1")),
        ("reasoning end, signed", line("model.reasoning_end", r#"{"operation_id":"op_1","provider":"anthropic","signature":"EqQBCgIYAhIM","turn":1}"#), None),
        ("reasoning end, unsigned, unknown member kept", line("model.reasoning_end", r#"{"later":1,"operation_id":"op_1","provider":"openai-compatible","turn":1}"#), None),
        ("reasoning end, redacted", line("model.reasoning_end", r#"{"operation_id":"op_1","provider":"anthropic","redacted":"RWNy","turn":1}"#), None),
        ("reasoning end, both forms", line("model.reasoning_end", r#"{"operation_id":"op_1","provider":"anthropic","redacted":"RWNy","signature":"c2ln","turn":1}"#), Some("rule payload.reasoning_end_one_form")),
        ("reasoning end without a provider", line("model.reasoning_end", r#"{"operation_id":"op_1","turn":1}"#), Some("rule payload.schema")),
        ("reasoning end, bad provider", line("model.reasoning_end", r#"{"operation_id":"op_1","provider":"Anthropic","turn":1}"#), Some("rule message.provider_tag")),
        ("reasoning end, signature not printable ASCII", line("model.reasoning_end", r#"{"operation_id":"op_1","provider":"anthropic","signature":"SECRETVALUE x","turn":1}"#), Some("rule message.opaque_value")),
        ("reasoning end, empty redacted", line("model.reasoning_end", r#"{"operation_id":"op_1","provider":"anthropic","redacted":"","turn":1}"#), Some("message.opaque_value")),
        ("tool result with images", line("tool.completed", r#"{"call_id":"c1","images":[{"base64":"iVBORw0KGgoBAgM=","media_type":"image/png"},{"media_type":"image/jpeg","url":"https://example.com/a.jpg"},{"url":"https://example.com/b"}],"output":"a picture","tool":"camera","turn":1}"#), None),
        ("tool result with an empty image list", line("tool.completed", r#"{"call_id":"c1","images":[],"output":"x","tool":"camera","turn":1}"#), Some("rule event.canonical")),
        ("tool result with an SVG", line("tool.completed", r#"{"call_id":"c1","images":[{"base64":"PHN2Zz4=","media_type":"image/svg+xml"}],"output":"x","tool":"camera","turn":1}"#), Some("message.image_media_type")),
        ("tool result image not a PNG", line("tool.completed", r#"{"call_id":"c1","images":[{"base64":"PHN2Zz4=","media_type":"image/png"}],"output":"x","tool":"camera","turn":1}"#), Some("message.image_signature")),
        ("tool result image, http URL", line("tool.completed", r#"{"call_id":"c1","images":[{"url":"http://example.com/a.png"}],"output":"x","tool":"camera","turn":1}"#), Some("message.image_url")),
        ("run.started of a sub-run, unknown member kept", line("run.started", r#"{"model":"m","parent":{"call_id":"c1","later":1,"run_id":"run_p"}}"#), None),
        ("parent without its call", line("run.started", r#"{"parent":{"run_id":"run_p"}}"#), Some("rule payload.schema")),
        ("parent run id with a space", line("run.started", r#"{"parent":{"call_id":"c1","run_id":"run p"}}"#), Some("ids.charset")),
        ("tool.sub_run", line("tool.sub_run", r#"{"call_id":"c1","run_id":"run_c","turn":1}"#), None),
        ("tool.sub_run, unknown member kept", line("tool.sub_run", r#"{"call_id":"c1","depth":1,"run_id":"run_c","turn":1}"#), None),
        ("tool.sub_run without its child", line("tool.sub_run", r#"{"call_id":"c1","turn":1}"#), Some("rule payload.schema")),
        ("tool.sub_run, turn 0", line("tool.sub_run", r#"{"call_id":"c1","run_id":"run_c","turn":0}"#), Some("rule payload.turn_from_1")),
        ("tool.completed naming its child", line("tool.completed", r#"{"call_id":"c1","output":"done","sub_run":{"run_id":"run_c"},"tool":"researcher","turn":1}"#), None),
        ("tool.failed with the child's cause", line("tool.failed", r#"{"call_id":"c1","error":"sub-run run_c failed: boom","outcome":"uncertain","retry":"not_retryable","sub_run":{"cause":{"kind":"host_lost"},"run_id":"run_c"},"tool":"researcher","turn":1}"#), None),
        ("tool.cancelled naming its child, unknown inner member kept", line("tool.cancelled", r#"{"call_id":"c1","sub_run":{"later":true,"run_id":"run_c"},"tool":"researcher","turn":1}"#), None),
        ("sub_run not an object", line("tool.completed", r#"{"call_id":"c1","output":"x","sub_run":"SECRETVALUE","tool":"researcher","turn":1}"#), Some("rule payload.sub_run")),
        ("sub_run without its run id", line("tool.cancelled", r#"{"call_id":"c1","sub_run":{},"tool":"researcher","turn":1}"#), Some("rule payload.sub_run")),
        ("sub_run with a bad run id", line("tool.failed", r#"{"call_id":"c1","error":"x","sub_run":{"run_id":"SECRETVALUE x"},"tool":"researcher","turn":1}"#), Some("rule payload.sub_run")),
        ("sub_run on tool.started stays unknown", line("tool.started", r#"{"call_id":"c1","sub_run":7,"tool":"researcher","turn":1}"#), None),
        ("unknown lifecycle kind", line("agent.started", "{}"), Some("rule kind.lifecycle_known")),
        ("unknown lifecycle phase of a known scope", line("tool.paused", "{}"), None),
        ("malformed kind", line("Run.Started", "{}"), Some("rule kind.syntax")),
        ("kind without dot", line("started", "{}"), Some("rule kind.syntax")),
        ("not canonical: spaces", line("run.started", "{ }"), Some("rule event.canonical")),
        (
            "not canonical: key order",
            r#"{"payload":{},"kind":"run.started","run_id":"run_1","seq":3,"ts":1}"#.to_string(),
            Some("rule event.canonical"),
        ),
        ("not canonical: number form", line("turn.started", r#"{"turn":1.0}"#), Some("rule payload.schema")),
        ("null optional member", line("run.completed", r#"{"usage":null}"#), Some("rule event.canonical")),
        ("missing payload", r#"{"kind":"run.started","run_id":"run_1","seq":3,"ts":1}"#.into(), Some("payload is missing")),
        ("extra envelope member", r#"{"kind":"run.started","payload":{},"run_id":"run_1","seq":3,"ts":1,"x":1}"#.into(), Some("unknown envelope member")),
        ("seq zero", r#"{"kind":"run.started","payload":{},"run_id":"run_1","seq":0,"ts":1}"#.into(), Some("rule event.seq")),
        // Found by the event_line fuzz target (a ts serde_json reads as u64
        // but I-JSON readers would round).
        ("ts not a safe integer", r#"{"kind":"run.started","payload":{},"run_id":"run_1","seq":1,"ts":9007199254740992}"#.into(), Some("rule event.ts")),
        ("ts of the fuzz finding", r#"{"kind":"model.started","payload":{"attempt":1,"model":"m","operation_id":"op_1","turn":1},"run_id":"run_1","seq":3,"ts":17916025394244158}"#.into(), Some("rule event.ts")),
        ("negative ts", r#"{"kind":"run.started","payload":{},"run_id":"run_1","seq":1,"ts":-1}"#.into(), Some("ts must be")),
        ("bad run id", r#"{"kind":"run.started","payload":{},"run_id":"run 1","seq":1,"ts":1}"#.into(), Some("ids.charset")),
        ("payload not an object", line("run.started", "[]"), Some("rule payload.object")),
        ("missing member", line("turn.started", "{}"), Some("rule payload.schema")),
        ("wrong type does not echo", line("turn.started", r#"{"turn":"SECRETVALUE"}"#), Some("rule payload.schema")),
        ("bad enum does not echo", line("tool.failed", r#"{"call_id":"c1","error":"x","outcome":"SECRETVALUE","tool":"t","turn":1}"#), Some("rule payload.schema")),
        ("empty delta", line("model.text_delta", r#"{"operation_id":"op_1","text":"","turn":1}"#), Some("rule payload.text_nonempty")),
        ("turn zero", line("turn.started", r#"{"turn":0}"#), Some("rule payload.turn_from_1")),
        ("duplicate member", line("turn.started", r#"{"turn":1,"turn":2}"#), Some("rule event.canonical")),
        ("duplicate envelope member", r#"{"kind":"run.started","kind":"run.started","payload":{},"run_id":"run_1","seq":1,"ts":1}"#.into(), Some("rule event.canonical")),
        ("unsafe integer", line("turn.started", r#"{"turn":9007199254740993}"#), Some("outside ±(2^53-1)")),
        (
            "unscreened secret in error text",
            line("tool.failed", r#"{"call_id":"c1","error":"key sk-ant-api03-AAAAAAAAAAAAAAAAAAAAAAAA","tool":"t","turn":1}"#),
            Some("rule event.canonical"),
        ),
        ("not JSON", "{kind".into(), Some("not valid JSON")),
        // run.input's reference form (a continued run's inherited history).
        ("input reference", line("run.input", r#"{"history":{"digest":"sha256:DIGEST","last_seq":9,"run_id":"run_0"}}"#), None),
        ("input reference, unknown member kept", line("run.input", r#"{"history":{"digest":"sha256:DIGEST","future":1,"last_seq":9,"run_id":"run_0"}}"#), None),
        ("input reference beside a message", line("run.input", r#"{"history":{"digest":"sha256:DIGEST","last_seq":9,"run_id":"run_0"},"message":{"id":"m1","parts":[{"text":"Hi","type":"text"}],"role":"user"}}"#), Some("rule payload.input_one_form")),
        ("input reference, last_seq 0", line("run.input", r#"{"history":{"digest":"sha256:DIGEST","last_seq":0,"run_id":"run_0"}}"#), Some("rule payload.reference_seq")),
        ("input reference, last_seq unsafe", line("run.input", r#"{"history":{"digest":"sha256:DIGEST","last_seq":9007199254740992,"run_id":"run_0"}}"#), Some("rule payload.reference_seq")),
        ("input reference, uppercase digest", line("run.input", r#"{"history":{"digest":"sha256:UPPER","last_seq":9,"run_id":"run_0"}}"#), Some("rule payload.schema")),
        ("input reference, short digest", line("run.input", r#"{"history":{"digest":"sha256:abc","last_seq":9,"run_id":"run_0"}}"#), Some("rule payload.schema")),
        ("input reference, other algorithm", line("run.input", r#"{"history":{"digest":"md5:DIGEST","last_seq":9,"run_id":"run_0"}}"#), Some("rule payload.schema")),
        ("input reference, no run id", line("run.input", r#"{"history":{"digest":"sha256:DIGEST","last_seq":9}}"#), Some("rule payload.schema")),
        ("input reference, bad run id", line("run.input", r#"{"history":{"digest":"sha256:DIGEST","last_seq":9,"run_id":"run 0"}}"#), Some("rule payload.schema")),
        ("input reference not an object", line("run.input", r#"{"history":"run_0"}"#), Some("rule payload.schema")),
    ];
    let rows: Vec<(&str, String, Option<&str>)> = rows
        .into_iter()
        .map(|(row, input, rule)| {
            let input = input
                .replace("DIGEST", &"0123456789abcdef".repeat(4))
                .replace("UPPER", &"0123456789ABCDEF".repeat(4));
            (row, input, rule)
        })
        .collect();
    for (row, input, rule) in &rows {
        check(row, input, *rule);
    }
}

#[test]
fn every_committed_kind_round_trips() {
    let log = log();
    let payloads = vec![
        run_started(),
        turn_started(1),
        model_started(1, "op_1"),
        delta(1, "op_1", "Checking \u{2028} \"quotes\" \u{1F600}"),
        Payload::ToolCall(ToolCall {
            turn: 1,
            operation_id: op("op_1"),
            call_id: call("c1"),
            name: tool_name("get_weather"),
            arguments: keel_message::CanonicalJson::parse(r#"{"city":"Oslo","n":1e30}"#).unwrap(),
            extra: Extra::new(),
        }),
        Payload::ReasoningDelta(ReasoningDelta {
            turn: 1,
            operation_id: op("op_1"),
            text: "Thinking \u{2028} \"quotes\"".into(),
            extra: Extra::new(),
        }),
        Payload::ReasoningEnd(ReasoningEnd {
            turn: 1,
            operation_id: op("op_1"),
            provider: keel_message::ProviderTag::anthropic(),
            signature: Some(keel_message::OpaqueValue::new("EqQB/+=").unwrap()),
            redacted: None,
            extra: Extra::new(),
        }),
        Payload::ReasoningEnd(ReasoningEnd {
            turn: 1,
            operation_id: op("op_1"),
            provider: keel_message::ProviderTag::anthropic(),
            signature: None,
            redacted: Some(keel_message::OpaqueValue::new("\"q\"\\").unwrap()),
            extra: Extra::new(),
        }),
        model_completed(1, "op_1"),
        tool_started(1, "c1"),
        Payload::ToolCompleted(ToolCompleted {
            turn: 1,
            call_id: call("c1"),
            tool: tool_name("get_weather"),
            output: "a map".into(),
            images: vec![
                keel_message::ImagePart::from_bytes_with(
                    keel_message::ImageMediaType::Gif,
                    b"GIF89a\x01\x02",
                    &keel_message::Limits::default(),
                )
                .unwrap(),
                keel_message::ImagePart::from_url(
                    keel_message::HttpsUrl::parse("https://example.com/m?a=\"b\"").unwrap(),
                    None,
                ),
            ],
            extra: Extra::new(),
        }),
        tool_started(1, "c9"),
        Payload::ToolFailed(ToolFailed {
            turn: 1,
            call_id: call("c9"),
            tool: tool_name("get_weather"),
            error: ErrorText::new("timed out"),
            outcome: Some(ToolOutcome::Uncertain),
            retry: Some(ToolRetry::Retryable),
            extra: Extra::new(),
        }),
        Payload::InteractionStarted(InteractionStarted {
            turn: 1,
            interaction_id: iid("i1"),
            request: "approval".into(),
            call_id: Some(call("c2")),
            extra: Extra::new(),
        }),
        Payload::InteractionCompleted(InteractionCompleted {
            turn: 1,
            interaction_id: iid("i1"),
            decision: "denied".into(),
            extra: Extra::new(),
        }),
        turn_completed(1),
        note(),
        Payload::RunFailed(RunFailed {
            error: ErrorText::new("tool failed"),
            cause: Some(Cause {
                call_id: Some(call("c1")),
                tool: Some(tool_name("get_weather")),
                ..Cause::default()
            }),
            extra: Extra::new(),
        }),
    ];
    for p in &payloads {
        let e = log.commit(p).unwrap();
        let decoded = Event::decode(e.line()).unwrap();
        assert_eq!(decoded, *e);
        assert_eq!(&decoded.payload().unwrap(), p);
        // The envelope is in canonical order with integers only.
        assert!(
            e.line()
                .starts_with(&format!(r#"{{"kind":"{}","payload":{{"#, p.kind()))
        );
        assert!(e.line().ends_with(&format!(
            r#","run_id":"run_1","seq":{},"ts":{}}}"#,
            e.seq(),
            e.ts()
        )));
        // And equals the generic RFC 8785 encoder's output for the same value.
        let value: serde_json::Value = serde_json::from_str(e.line()).unwrap();
        assert_eq!(
            keel_message::canonical::to_canonical_string(&value).unwrap(),
            e.line()
        );
    }
}

#[test]
fn error_text_is_screened_and_bounded() {
    let key = format!("sk-ant-api03-{}", "Ab1".repeat(20));
    let t = ErrorText::new(&format!("auth failed for {key}\u{0}\u{7}"));
    assert!(!t.as_str().contains(&key), "{t}");
    assert!(t.as_str().contains("[redacted]"));
    assert!(!t.as_str().contains('\u{7}'));
    let long = ErrorText::new(&"é".repeat(5000));
    assert!(long.as_str().len() <= ERROR_TEXT_MAX_BYTES);
}

#[test]
fn payload_size_is_bounded() {
    let (log, _) = log_with(LogConfig {
        max_event_bytes: 1024,
        ..LogConfig::default()
    });
    commit_all(
        &log,
        &[run_started(), turn_started(1), model_started(1, "op_1")],
    );
    let before = log.stats();
    let err = log
        .commit(&delta(1, "op_1", &"x".repeat(2000)))
        .unwrap_err();
    assert!(
        matches!(
            err,
            CommitError::EventTooLarge {
                max: 1024,
                bound: "max_event_bytes",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(log.stats(), before, "a refused commit uses no sequence");
    assert_eq!(log.commit(&delta(1, "op_1", "ok")).unwrap().seq(), 4);
}

proptest::proptest! {
    /// The hand-written text-delta encoding equals the generic RFC 8785
    /// encoding of the same payload, for any text.
    #[test]
    fn text_delta_fast_path_matches_generic(text in "\\PC{1,64}|[\u{0}-\u{1f}\"\\\\\u{2028}\u{fffd}\u{1F600}]{1,16}", turn in 1u64..1_000_000) {
        let p = delta(turn, "op_7", &text);
        let Payload::TextDelta(inner) = &p else { unreachable!() };
        let generic = keel_message::canonical::to_canonical_string(&serde_json::to_value(inner).unwrap()).unwrap();
        proptest::prop_assert_eq!(p.to_canonical().unwrap(), generic);
    }
}
