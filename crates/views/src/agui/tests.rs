//! The mapping, event by event, through one `check` helper: events in,
//! AG-UI types out.

use super::*;
use keel_message::Limits;
use serde_json::json;

const RUN: &str = "run_1";

/// The canonical line of event `seq` of kind `kind`, decoded.
fn ev(seq: u64, kind: &str, payload: Value) -> Event {
    let line =
        json!({"kind": kind, "payload": payload, "run_id": RUN, "seq": seq, "ts": 1000 + seq});
    Event::decode(&serde_json::to_string(&line).expect("json")).expect("a valid line")
}

/// A run's events from a compact script: `(kind, payload)` in seq order.
fn run(script: &[(&str, Value)]) -> Vec<Event> {
    script
        .iter()
        .enumerate()
        .map(|(i, (kind, payload))| ev(i as u64 + 1, kind, payload.clone()))
        .collect()
}

/// Events as their wire JSON, to read as the client does.
fn values(events: Vec<Stamped>) -> Vec<Value> {
    events.iter().map(Stamped::to_value).collect()
}

fn types(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| match e["type"].as_str() {
            Some("CUSTOM") => format!("CUSTOM {}", e["name"].as_str().unwrap_or_default()),
            Some(t) => t.to_owned(),
            None => "?".to_owned(),
        })
        .collect()
}

/// Maps `events` from the start and checks the AG-UI types of the whole
/// stream, that it checks out, and that every Keel line is some rawEvent.
fn check(events: &[Event], expected: &[&str]) -> Vec<Value> {
    let mut mapper = AguiMapper::new();
    let mut out = Vec::new();
    for event in events {
        let mapped = values(mapper.map(event).expect("maps"));
        assert!(!mapped.is_empty(), "seq {} maps to nothing", event.seq());
        let raw: Value = serde_json::from_str(event.line()).expect("json");
        assert!(
            mapped.iter().all(|e| e["rawEvent"] == raw),
            "seq {}",
            event.seq()
        );
        out.extend(mapped);
    }
    assert_eq!(types(&out), expected);
    check_stream(&out).expect("the stream checks out");
    out
}

fn started() -> (&'static str, Value) {
    ("run.started", json!({"model": "m"}))
}
fn input() -> (&'static str, Value) {
    (
        "run.input",
        json!({"message": {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "Hi"}]}}),
    )
}
fn turn(kind: &'static str, n: u64) -> (&'static str, Value) {
    (kind, json!({"turn": n}))
}
fn model_started(op: &str) -> (&'static str, Value) {
    (
        "model.started",
        json!({"turn": 1, "operation_id": op, "model": "m", "attempt": 1}),
    )
}
fn delta(op: &str, text: &str) -> (&'static str, Value) {
    (
        "model.text_delta",
        json!({"turn": 1, "operation_id": op, "text": text}),
    )
}
fn model_completed(op: &str, finish: &str) -> (&'static str, Value) {
    (
        "model.completed",
        json!({"turn": 1, "operation_id": op, "finish": finish,
        "usage": {"input_tokens": 3, "output_tokens": 2}}),
    )
}
fn tool_call(op: &str, call: &str) -> (&'static str, Value) {
    (
        "model.tool_call",
        json!({"turn": 1, "operation_id": op, "call_id": call,
        "name": "get_weather", "arguments": {"city": "Oslo"}}),
    )
}
fn tool(kind: &'static str, call: &str, extra: Value) -> (&'static str, Value) {
    let mut p = json!({"turn": 1, "call_id": call, "tool": "get_weather"});
    if let (Some(p), Some(extra)) = (p.as_object_mut(), extra.as_object()) {
        p.extend(extra.clone());
    }
    (kind, p)
}

#[test]
fn a_plain_answer() {
    check(
        &run(&[
            started(),
            input(),
            turn("turn.started", 1),
            model_started("op_1"),
            delta("op_1", "Hel"),
            delta("op_1", "lo"),
            model_completed("op_1", "stop"),
            turn("turn.completed", 1),
            (
                "run.completed",
                json!({"usage": {"input_tokens": 3, "output_tokens": 2}}),
            ),
        ]),
        &[
            "RUN_STARTED",
            "CUSTOM keel.run.input",
            "STEP_STARTED",
            "CUSTOM keel.model.started",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "CUSTOM keel.model.completed",
            "CUSTOM keel.usage",
            "STEP_FINISHED",
            "CUSTOM keel.usage",
            "RUN_FINISHED",
        ],
    );
}

#[test]
fn a_tool_call_and_its_uncertain_failure() {
    let out = check(
        &run(&[
            started(),
            turn("turn.started", 1),
            model_started("op_1"),
            delta("op_1", "Checking."),
            tool_call("op_1", "c1"),
            model_completed("op_1", "tool_calls"),
            tool("tool.started", "c1", json!({})),
            tool(
                "tool.failed",
                "c1",
                json!({"error": "reset", "outcome": "uncertain", "retry": "retryable"}),
            ),
            turn("turn.completed", 1),
        ]),
        &[
            "RUN_STARTED",
            "STEP_STARTED",
            "CUSTOM keel.model.started",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TEXT_MESSAGE_END",
            "TOOL_CALL_END",
            "CUSTOM keel.model.completed",
            "CUSTOM keel.usage",
            "CUSTOM keel.tool.started",
            "TOOL_CALL_RESULT",
            "CUSTOM keel.tool.failed",
            "STEP_FINISHED",
        ],
    );
    assert_eq!(out[5]["parentMessageId"], "run_1.op_1");
    assert_eq!(out[6]["delta"], r#"{"city":"Oslo"}"#);
    assert_eq!(out[13]["value"]["outcome"], "uncertain");
}

#[test]
fn a_partial_answer_that_failed_is_discarded() {
    let out = check(
        &run(&[
            started(),
            turn("turn.started", 1),
            model_started("op_1"),
            delta("op_1", "Look"),
            (
                "model.failed",
                json!({"turn": 1, "operation_id": "op_1", "position": "partial",
                "problem": {"kind": "unavailable", "message": "dropped", "retryable": true}}),
            ),
            model_started("op_2"),
            delta("op_2", "Done."),
            model_completed("op_2", "stop"),
            ("turn.completed", json!({"turn": 1})),
            ("run.failed", json!({"error": "gave up"})),
        ]),
        &[
            "RUN_STARTED",
            "STEP_STARTED",
            "CUSTOM keel.model.started",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "CUSTOM keel.model.failed",
            "CUSTOM keel.discarded",
            "CUSTOM keel.model.started",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "CUSTOM keel.model.completed",
            "CUSTOM keel.usage",
            "STEP_FINISHED",
            "CUSTOM keel.run.failed",
            "RUN_ERROR",
        ],
    );
    assert_eq!(out[7]["value"]["messageId"], "run_1.op_1");
    assert_eq!(out[6]["value"]["position"], "partial");
}

#[test]
fn a_cancelled_run_finishes_cancelled() {
    let out = check(
        &run(&[
            started(),
            turn("turn.started", 1),
            ("turn.cancelled", json!({"turn": 1})),
            ("run.cancelled", json!({})),
        ]),
        &[
            "RUN_STARTED",
            "STEP_STARTED",
            "STEP_FINISHED",
            "CUSTOM keel.turn.cancelled",
            "CUSTOM keel.run.cancelled",
            "RUN_FINISHED",
        ],
    );
    assert_eq!(out[5]["outcome"]["type"], "cancelled");
}

#[test]
fn a_join_reopens_the_open_scopes() {
    let events = run(&[
        started(),
        input(),
        turn("turn.started", 1),
        model_started("op_1"),
        delta("op_1", "Chec"),
        delta("op_1", "king."),
        tool_call("op_1", "c1"),
        model_completed("op_1", "tool_calls"),
        turn("turn.completed", 1),
        ("run.completed", json!({})),
    ]);
    let (mut mapper, out) =
        prelude(&events[..7], Vec::new(), Limits::default()).expect("a prelude");
    let mut out = values(out);
    assert_eq!(
        types(&out),
        [
            "RUN_STARTED",
            "MESSAGES_SNAPSHOT",
            "STEP_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS"
        ]
    );
    assert_eq!(out[1]["messages"][0]["content"], "Hi");
    assert_eq!(out[4]["delta"], "Checking.");
    for event in &events[7..] {
        out.extend(values(mapper.map(event).expect("maps")));
    }
    check_stream(&out).expect("the joined stream checks out");
    assert!(matches!(
        prelude(&events, Vec::new(), Limits::default()),
        Err(AguiError::Ended)
    ));
}

#[test]
fn rules_are_named() {
    let events = run(&[turn("turn.started", 1)]);
    let err = AguiMapper::new().map(&events[0]).expect_err("refused");
    assert!(err.to_string().contains("agui.run_started_first"), "{err}");
    let events = run(&[
        started(),
        ("run.completed", json!({})),
        turn("turn.started", 1),
    ]);
    let mut mapper = AguiMapper::new();
    mapper.map(&events[0]).expect("maps");
    mapper.map(&events[1]).expect("maps");
    let err = mapper.map(&events[2]).expect_err("refused");
    assert!(err.to_string().contains("agui.after_terminal"), "{err}");
}

/// Every Keel event is represented: the recorded example runs, each line
/// appears as some rawEvent (the `check` helper asserts it per event).
#[test]
fn no_event_is_dropped() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let Ok(text) = std::fs::read_to_string(entry.path()) else {
            continue;
        };
        let Ok(events) = text
            .lines()
            .map(Event::decode)
            .collect::<Result<Vec<_>, _>>()
        else {
            continue;
        };
        if events.first().is_none_or(|e| e.seq() != 1) {
            continue;
        }
        let mut mapper = AguiMapper::new();
        let mut raws = Vec::new();
        for event in &events {
            raws.extend(
                mapper
                    .map(event)
                    .expect("maps")
                    .iter()
                    .map(|e| e.raw_event().clone()),
            );
        }
        for event in &events {
            let raw: Value = serde_json::from_str(event.line()).expect("json");
            assert!(raws.contains(&raw), "seq {} dropped", event.seq());
        }
        seen += 1;
    }
    let all = run(&[
        started(),
        input(),
        turn("turn.started", 1),
        model_started("op_1"),
        (
            "model.cancelled",
            json!({"turn": 1, "operation_id": "op_1"}),
        ),
        (
            "interaction.started",
            json!({"turn": 1, "interaction_id": "i1", "request": "ok?"}),
        ),
        (
            "interaction.completed",
            json!({"turn": 1, "interaction_id": "i1", "decision": "approved"}),
        ),
        tool("tool.started", "c1", json!({})),
        tool("tool.completed", "c1", json!({"output": "3"})),
        tool("tool.cancelled", "c2", json!({})),
        ("turn.failed", json!({"turn": 1, "error": "x"})),
    ]);
    let mut mapper = AguiMapper::new();
    for event in &all {
        let raw: Value = serde_json::from_str(event.line()).expect("json");
        let mapped = mapper.map(event).expect("maps");
        assert!(!mapped.is_empty() && mapped.iter().all(|e| e.raw_event() == &raw));
    }
    let _ = seen;
}

#[test]
fn the_snapshot_is_written_a_message_at_a_time() {
    let events = run(&[
        started(),
        input(),
        turn("turn.started", 1),
        model_started("op_1"),
        delta("op_1", "Checking."),
        tool_call("op_1", "c1"),
        model_completed("op_1", "tool_calls"),
        turn("turn.completed", 1),
        turn("turn.started", 2),
    ]);
    let mut fold = PreludeFold::new();
    for event in &events {
        fold.push(event).expect("folds");
    }
    let prelude = fold.finish().expect("not ended");
    let mut writer = prelude.snapshot(Vec::new(), Limits::default());
    // Each message is written by the event that completes it, and only then.
    let written: Vec<Vec<String>> = events
        .iter()
        .map(|e| writer.push(e).expect("writes"))
        .collect();
    let at: Vec<usize> = written.iter().map(Vec::len).collect();
    assert_eq!(at, [0, 1, 0, 0, 0, 0, 1, 0, 0]);
    assert_eq!(writer.written(), 2);
    let lines: Vec<&String> = written.iter().flatten().collect();
    assert!(lines.iter().all(|l| !l.contains('\n')), "one line each");
    assert!(lines[1].starts_with(','), "separated from the one before");
    // The lines, between the opening and the close, are the snapshot:
    // the messages the history rebuilds, as AG-UI messages.
    let mut text = SNAPSHOT_OPEN.to_owned();
    for line in &lines {
        text.push('\n');
        text.push_str(line);
    }
    text.push('\n');
    text.push_str(&prelude.snapshot_close());
    let snapshot: Value = serde_json::from_str(&text).expect("the text is JSON");
    let rebuilt = keel_eventlog::history::rebuild(&events, &Limits::default()).expect("a history");
    let expected: Vec<Value> = rebuilt
        .iter()
        .flat_map(AguiMessage::of)
        .map(|m| m.to_value())
        .collect();
    assert_eq!(snapshot["messages"], json!(expected));
    assert_eq!(snapshot["type"], "MESSAGES_SNAPSHOT");
    assert_eq!(snapshot["rawEvent"]["seq"], 9);
    assert!(check_event(&snapshot).is_ok());
    // The typed snapshot (`prelude`'s) is the written text's JSON.
    let (_, typed) = super::prelude(&events, Vec::new(), Limits::default()).expect("a prelude");
    assert_eq!(typed[1].to_value(), snapshot);
    // A run that recorded no input has no history: no messages.
    let bare = run(&[started(), turn("turn.started", 1)]);
    let (_, out) = super::prelude(&bare, Vec::new(), Limits::default()).expect("a prelude");
    assert_eq!(out[1].to_value()["messages"], json!([]));
}

/// A continued run's prelude names the run it inherits (its `run.input`
/// reference), and a run that inherits nothing names none
/// (cargo-mutants, #32).
#[test]
fn the_prelude_names_the_run_a_continued_run_inherits() {
    let reference = (
        "run.input",
        json!({"history": {
            "run_id": "run_0",
            "last_seq": 5,
            "digest": format!("sha256:{}", "0".repeat(64)),
        }}),
    );
    let fold_of = |events: &[Event]| {
        let mut fold = PreludeFold::new();
        for event in events {
            fold.push(event).expect("folds");
        }
        fold.finish().expect("not ended")
    };
    let continued = run(&[
        started(),
        reference.clone(),
        input(),
        turn("turn.started", 1),
    ]);
    let prelude = fold_of(&continued);
    assert_eq!(
        prelude.inherits().map(keel_message::RunId::as_str),
        Some("run_0")
    );
    let fresh = run(&[started(), input(), turn("turn.started", 1)]);
    assert_eq!(fold_of(&fresh).inherits(), None);
    assert_eq!(prelude.forked_at(), None, "a continuation is no fork");
    // A fork names the parent's seq its history runs through.
    let forked = (
        "run.started",
        json!({"forked_from": {"run_id": "run_0", "seq": 5}}),
    );
    let fork = fold_of(&run(&[forked, reference, input(), turn("turn.started", 1)]));
    assert_eq!(
        fork.inherits().map(keel_message::RunId::as_str),
        Some("run_0")
    );
    assert_eq!(fork.forked_at(), Some(5));
}

/// A join mid-message after more than [`MAX_TEXT_BYTES`] of one message:
/// the re-opened content is the text up to the bound (a delta that would
/// cross it is not split), the rest is counted in `keel.text_elided`, and
/// nothing after the first elided delta is kept, however small.
#[test]
fn a_join_after_the_text_bound_says_what_it_elided() {
    // 16 deltas of 64 KiB (the providers' delta bound) fill the bound.
    let chunk = "a".repeat(64 << 10);
    let mut script = vec![started(), turn("turn.started", 1), model_started("op_1")];
    script.extend((0..16).map(|_| delta("op_1", &chunk)));
    assert_eq!(16 * chunk.len(), MAX_TEXT_BYTES);
    script.push(delta("op_1", "x"));
    script.push(delta("op_1", "yz"));
    script.push(model_completed("op_1", "stop"));
    let events = run(&script);
    let reopened = |cursor: usize| {
        let (_, out) =
            prelude(&events[..cursor], Vec::new(), Limits::default()).expect("a prelude");
        values(out)
    };
    // At the bound: all of it kept, nothing elided.
    let out = reopened(19);
    assert_eq!(
        types(&out),
        [
            "RUN_STARTED",
            "MESSAGES_SNAPSHOT",
            "STEP_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT"
        ]
    );
    assert_eq!(out[4]["delta"].as_str().map(str::len), Some(MAX_TEXT_BYTES));
    // One byte over: the byte is counted, not kept.
    let out = reopened(20);
    assert_eq!(out[4]["delta"].as_str().map(str::len), Some(MAX_TEXT_BYTES));
    assert_eq!(types(&out)[5], "CUSTOM keel.text_elided");
    assert_eq!(
        out[5]["value"],
        json!({"messageId": "run_1.op_1", "bytes": 1})
    );
    // Once something is elided, what follows is too (the text stays a
    // prefix), and the counts add up.
    let (mut mapper, out) =
        prelude(&events[..21], Vec::new(), Limits::default()).expect("a prelude");
    let mut out = values(out);
    assert_eq!(out[4]["delta"].as_str().map(str::len), Some(MAX_TEXT_BYTES));
    assert!(
        out[4]["delta"]
            .as_str()
            .is_some_and(|t| t.bytes().all(|b| b == b'a'))
    );
    assert_eq!(
        out[5]["value"],
        json!({"messageId": "run_1.op_1", "bytes": 3})
    );
    assert_eq!(
        out[5]["rawEvent"]["seq"], 4,
        "the line that opened the message"
    );
    assert!(check_event(&out[5]).is_ok());
    // The tail maps on from there.
    out.extend(values(mapper.map(&events[21]).expect("maps")));
    check_stream(&out).expect("the joined stream checks out");
}

/// A call id reused while its call is open: the open call ends before the
/// new one starts (AG-UI allows no second START of an open id), and the
/// other open calls are left alone.
#[test]
fn a_reused_call_id_ends_the_open_call_first() {
    let out = check(
        &run(&[
            started(),
            turn("turn.started", 1),
            model_started("op_1"),
            tool_call("op_1", "c1"),
            tool_call("op_1", "c2"),
            tool_call("op_1", "c1"),
            model_completed("op_1", "tool_calls"),
            turn("turn.completed", 1),
        ]),
        &[
            "RUN_STARTED",
            "STEP_STARTED",
            "CUSTOM keel.model.started",
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "TOOL_CALL_END",
            "CUSTOM keel.model.completed",
            "CUSTOM keel.usage",
            "STEP_FINISHED",
        ],
    );
    let ids: Vec<&str> = out
        .iter()
        .filter(|e| e["type"] == "TOOL_CALL_START" || e["type"] == "TOOL_CALL_END")
        .map(|e| e["toolCallId"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(ids, ["c1", "c2", "c1", "c1", "c2", "c1"]);
}

/// The snapshot's messages, pinned as AG-UI messages (not through
/// `AguiMessage::of` itself): an assistant message has `content` only with
/// text and `toolCalls` only with calls; a turn's tool results are one
/// tool message each, an error carrying `error`.
#[test]
fn the_snapshot_has_every_kind_of_message() {
    // Model events of turn `n` (the helpers above are all of turn 1).
    let at = |n: u64, (kind, mut payload): (&'static str, Value)| {
        payload["turn"] = json!(n);
        (kind, payload)
    };
    let events = run(&[
        started(),
        input(),
        turn("turn.started", 1),
        model_started("op_1"),
        delta("op_1", "Checking."),
        tool_call("op_1", "c1"),
        model_completed("op_1", "tool_calls"),
        tool("tool.completed", "c1", json!({"output": "3"})),
        turn("turn.completed", 1),
        turn("turn.started", 2),
        at(2, model_started("op_2")),
        at(2, tool_call("op_2", "c2")),
        at(2, model_completed("op_2", "tool_calls")),
        at(2, tool("tool.failed", "c2", json!({"error": "reset"}))),
        turn("turn.completed", 2),
        turn("turn.started", 3),
        at(3, model_started("op_3")),
        at(3, delta("op_3", "It is 3.")),
        at(3, model_completed("op_3", "stop")),
        turn("turn.completed", 3),
        turn("turn.started", 4),
    ]);
    let (_, out) = prelude(&events, Vec::new(), Limits::default()).expect("a prelude");
    let out = values(out);
    let call = |id: &str| {
        json!({"id": id, "type": "function",
            "function": {"name": "get_weather", "arguments": r#"{"city":"Oslo"}"#}})
    };
    assert_eq!(
        out[1]["messages"],
        json!([
            {"id": "m1", "role": "user", "content": "Hi"},
            {"id": "run_1.t1.a", "role": "assistant", "content": "Checking.",
                "toolCalls": [call("c1")]},
            {"id": "run_1.t1.t.c1", "role": "tool", "content": "3", "toolCallId": "c1"},
            {"id": "run_1.t2.a", "role": "assistant", "toolCalls": [call("c2")]},
            {"id": "run_1.t2.t.c2", "role": "tool", "content": "reset", "toolCallId": "c2",
                "error": "reset"},
            {"id": "run_1.t3.a", "role": "assistant", "content": "It is 3."},
        ]),
        "{:#}",
        out[1]["messages"]
    );
    assert!(check_event(&out[1]).is_ok());
}

/// The snapshot is rebuilt under the caller's limits, not the defaults: a
/// tool result over the caller's `part_bytes` is the history's short error
/// result, as the engine's own history holds it (rule: the engine's
/// limits are passed to the views, #33).
#[test]
fn the_snapshot_is_rebuilt_under_the_callers_limits() {
    let events = run(&[
        started(),
        input(),
        turn("turn.started", 1),
        model_started("op_1"),
        tool_call("op_1", "c1"),
        model_completed("op_1", "tool_calls"),
        tool(
            "tool.completed",
            "c1",
            json!({"output": "a result longer than the forty bytes allowed"}),
        ),
        turn("turn.completed", 1),
        turn("turn.started", 2),
    ]);
    let result = |limits: Limits| {
        let (_, out) = prelude(&events, Vec::new(), limits).expect("a prelude");
        out[1].to_value()["messages"][2]["content"].clone()
    };
    assert_eq!(
        result(Limits::default()),
        "a result longer than the forty bytes allowed"
    );
    let tight = Limits {
        // Room for the short error result (38 bytes), not for the result.
        part_bytes: 40,
        ..Limits::default()
    };
    assert_eq!(result(tight), "tool result exceeded limits.part_bytes");
}

// ------------------------------------------------ reasoning and images

/// A one-pixel PNG, base64.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

fn reasoning(op: &str, text: &str) -> (&'static str, Value) {
    (
        "model.reasoning_delta",
        json!({"turn": 1, "operation_id": op, "text": text}),
    )
}
fn reasoning_end(op: &str, extra: Value) -> (&'static str, Value) {
    let mut p = json!({"turn": 1, "operation_id": op, "provider": "anthropic"});
    if let (Some(p), Some(extra)) = (p.as_object_mut(), extra.as_object()) {
        p.extend(extra.clone());
    }
    ("model.reasoning_end", p)
}

/// A signed part, a redacted part and an unsigned part closed by text,
/// then a tool whose result holds an image.
fn reasoning_run() -> Vec<Event> {
    run(&[
        started(),
        input(),
        turn("turn.started", 1),
        model_started("op_1"),
        reasoning("op_1", "Let me "),
        reasoning("op_1", "think."),
        reasoning_end("op_1", json!({"signature": "sig-1"})),
        reasoning_end("op_1", json!({"redacted": "opaque-1"})),
        reasoning("op_1", "Now a tool."),
        reasoning_end("op_1", json!({})),
        delta("op_1", "Checking."),
        tool_call("op_1", "c1"),
        model_completed("op_1", "tool_calls"),
        tool(
            "tool.completed",
            "c1",
            json!({"output": "a chart", "images": [{"media_type": "image/png", "base64": PNG}]}),
        ),
        turn("turn.completed", 1),
        ("run.completed", json!({})),
    ])
}

#[test]
fn reasoning_parts_are_spans_with_their_opaque_values() {
    let out = check(
        &reasoning_run(),
        &[
            "RUN_STARTED",
            "CUSTOM keel.run.input",
            "STEP_STARTED",
            "CUSTOM keel.model.started",
            "REASONING_START",
            "REASONING_MESSAGE_START",
            "REASONING_MESSAGE_CONTENT",
            "REASONING_MESSAGE_CONTENT",
            "REASONING_ENCRYPTED_VALUE",
            "REASONING_MESSAGE_END",
            "REASONING_END",
            "REASONING_START",
            "REASONING_MESSAGE_START",
            "REASONING_ENCRYPTED_VALUE",
            "REASONING_MESSAGE_END",
            "REASONING_END",
            "REASONING_START",
            "REASONING_MESSAGE_START",
            "REASONING_MESSAGE_CONTENT",
            "REASONING_MESSAGE_END",
            "REASONING_END",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TEXT_MESSAGE_END",
            "TOOL_CALL_END",
            "CUSTOM keel.model.completed",
            "CUSTOM keel.usage",
            "TOOL_CALL_RESULT",
            "STEP_FINISHED",
            "RUN_FINISHED",
        ],
    );
    let ids: Vec<&str> = out
        .iter()
        .filter(|e| e["type"] == "REASONING_START")
        .filter_map(|e| e["messageId"].as_str())
        .collect();
    assert_eq!(
        ids,
        [
            "run_1.op_1.reasoning.1",
            "run_1.op_1.reasoning.2",
            "run_1.op_1.reasoning.3"
        ]
    );
    assert_eq!(out[5]["role"], "reasoning");
    assert_eq!(out[8]["encryptedValue"], "sig-1");
    assert_eq!(out[8]["entityId"], "run_1.op_1.reasoning.1");
    assert_eq!(out[8]["subtype"], "message");
    assert_eq!(out[13]["encryptedValue"], "opaque-1");
    assert_eq!(
        out[29]["content"],
        json!([{"type": "text", "text": "a chart"},
               {"type": "image", "source": {"type": "data", "value": PNG, "mimeType": "image/png"}}])
    );
}

/// A join inside a reasoning part re-opens it with its text so far; the
/// snapshot holds the finished parts as reasoning messages with their
/// opaque values, and tool images as AG-UI image parts.
#[test]
fn a_join_inside_reasoning_reopens_it() {
    let events = reasoning_run();
    let (mut mapper, out) =
        prelude(&events[..6], Vec::new(), Limits::default()).expect("a prelude");
    let mut out = values(out);
    assert_eq!(
        types(&out),
        [
            "RUN_STARTED",
            "MESSAGES_SNAPSHOT",
            "STEP_STARTED",
            "REASONING_START",
            "REASONING_MESSAGE_START",
            "REASONING_MESSAGE_CONTENT"
        ]
    );
    assert_eq!(out[5]["delta"], "Let me think.");
    assert_eq!(out[5]["messageId"], "run_1.op_1.reasoning.1");
    for event in &events[6..] {
        out.extend(values(mapper.map(event).expect("maps")));
    }
    check_stream(&out).expect("the joined stream checks out");

    // A join in turn 2 sees turn 1 whole in the snapshot.
    let mut later = events[..15].to_vec();
    later.push(ev(16, "turn.started", json!({"turn": 2})));
    let (_, out) = prelude(&later, Vec::new(), Limits::default()).expect("a prelude");
    let out = values(out);
    let messages = &out[1]["messages"];
    assert_eq!(
        messages[1],
        json!({"id": "run_1.t1.a.reasoning.1", "role": "reasoning",
               "content": "Let me think.", "encryptedValue": "sig-1"})
    );
    assert_eq!(
        messages[2],
        json!({"id": "run_1.t1.a.reasoning.2", "role": "reasoning",
               "content": "", "encryptedValue": "opaque-1"})
    );
    assert_eq!(
        messages[3],
        json!({"id": "run_1.t1.a.reasoning.3", "role": "reasoning", "content": "Now a tool."})
    );
    assert_eq!(messages[4]["role"], "assistant");
    assert_eq!(messages[5]["content"][1]["source"]["value"], PNG);
}

/// A model call that fails inside reasoning closes the part and names it
/// discarded.
#[test]
fn reasoning_of_a_failed_call_is_closed_and_discarded() {
    let out = check(
        &run(&[
            started(),
            turn("turn.started", 1),
            model_started("op_1"),
            reasoning("op_1", "Hmm"),
            (
                "model.failed",
                json!({"turn": 1, "operation_id": "op_1", "position": "partial",
                       "problem": {"kind": "unavailable", "message": "x", "retryable": true}}),
            ),
            turn("turn.completed", 1),
            ("run.completed", json!({})),
        ]),
        &[
            "RUN_STARTED",
            "STEP_STARTED",
            "CUSTOM keel.model.started",
            "REASONING_START",
            "REASONING_MESSAGE_START",
            "REASONING_MESSAGE_CONTENT",
            "REASONING_MESSAGE_END",
            "REASONING_END",
            "CUSTOM keel.model.failed",
            "CUSTOM keel.discarded",
            "STEP_FINISHED",
            "RUN_FINISHED",
        ],
    );
    assert_eq!(
        out[9]["value"]["reasoningMessageIds"],
        json!(["run_1.op_1.reasoning.1"])
    );
}

/// A user's image and file are AG-UI content parts in the snapshot.
#[test]
fn a_users_image_and_file_are_content_parts() {
    let events = run(&[
        started(),
        (
            "run.input",
            json!({"message": {"id": "m1", "role": "user", "parts": [
                {"type": "text", "text": "See"},
                {"type": "image", "media_type": "image/png", "base64": PNG},
                {"type": "image", "url": "https://example.com/a.gif"},
                {"type": "file", "media_type": "text/plain", "name": "<b>a.txt", "base64": "aGk="}]}}),
        ),
        turn("turn.started", 1),
    ]);
    let (_, out) = prelude(&events, Vec::new(), Limits::default()).expect("a prelude");
    let out = values(out);
    assert_eq!(
        out[1]["messages"][0]["content"],
        json!([
            {"type": "text", "text": "See"},
            {"type": "image", "source": {"type": "data", "value": PNG, "mimeType": "image/png"}},
            {"type": "image", "source": {"type": "url", "value": "https://example.com/a.gif"}},
            {"type": "document", "source": {"type": "data", "value": "aGk=", "mimeType": "text/plain"},
             "metadata": {"filename": "<b>a.txt"}}
        ])
    );
}

/// Reasoning after text in the same model call ends the text message
/// first (so the parts keep their order), and text after it re-opens
/// the call's message; a redacted part does the same.
#[test]
fn reasoning_between_text_ends_the_text_message() {
    check(
        &run(&[
            started(),
            turn("turn.started", 1),
            model_started("op_1"),
            delta("op_1", "A"),
            reasoning("op_1", "R"),
            reasoning_end("op_1", json!({})),
            delta("op_1", "B"),
            reasoning_end("op_1", json!({"redacted": "opaque"})),
            model_completed("op_1", "stop"),
            turn("turn.completed", 1),
            ("run.completed", json!({})),
        ]),
        &[
            "RUN_STARTED",
            "STEP_STARTED",
            "CUSTOM keel.model.started",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "REASONING_START",
            "REASONING_MESSAGE_START",
            "REASONING_MESSAGE_CONTENT",
            "REASONING_MESSAGE_END",
            "REASONING_END",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "REASONING_START",
            "REASONING_MESSAGE_START",
            "REASONING_ENCRYPTED_VALUE",
            "REASONING_MESSAGE_END",
            "REASONING_END",
            "CUSTOM keel.model.completed",
            "CUSTOM keel.usage",
            "STEP_FINISHED",
            "RUN_FINISHED",
        ],
    );
}

/// A run whose turn 2 opens with a compaction call of `m1..=run_1.t1.a`
/// (its text "summary" streamed), then answers "done".
fn compaction_run() -> Vec<Event> {
    let compacted = (
        "context.compacted",
        json!({"turn": 2, "operation_id": "k2",
            "replaces": {"first": "m1", "last": "run_1.t1.a", "count": 2},
            "summary": {"id": "run_1.t2.s", "role": "user", "parts": [{"type": "text", "text": "summary"}]},
            "tokens_before": 90, "tokens_after": 20,
            "estimator": {"kind": "bytes", "bytes_per_token": 4}}),
    );
    let at2 = |(kind, mut p): (&'static str, Value)| {
        p["turn"] = json!(2);
        (kind, p)
    };
    let mut compaction = at2(model_started("k2"));
    compaction.1["purpose"] = json!("compaction");
    run(&[
        started(),
        input(),
        turn("turn.started", 1),
        model_started("op_1"),
        delta("op_1", "Hello"),
        model_completed("op_1", "stop"),
        turn("turn.completed", 1),
        turn("turn.started", 2),
        compaction,
        at2(delta("k2", "summary")),
        at2(model_completed("k2", "stop")),
        compacted,
        at2(model_started("op_2")),
        at2(delta("op_2", "done")),
        at2(model_completed("op_2", "stop")),
        turn("turn.completed", 2),
        ("run.completed", json!({})),
    ])
}

/// A compaction call streams as `CUSTOM` events, never as an assistant
/// message; its result is `CUSTOM keel.compacted` carrying the payload;
/// a failure `CUSTOM keel.compaction_failed`.
#[test]
fn a_compaction_is_a_custom_event_not_a_message() {
    let events = compaction_run();
    let out = check(
        &events,
        &[
            "RUN_STARTED",
            "CUSTOM keel.run.input",
            "STEP_STARTED",
            "CUSTOM keel.model.started",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "CUSTOM keel.model.completed",
            "CUSTOM keel.usage",
            "STEP_FINISHED",
            "STEP_STARTED",
            "CUSTOM keel.model.started",
            "CUSTOM keel.model.text_delta",
            "CUSTOM keel.model.completed",
            "CUSTOM keel.usage",
            "CUSTOM keel.compacted",
            "CUSTOM keel.model.started",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "CUSTOM keel.model.completed",
            "CUSTOM keel.usage",
            "STEP_FINISHED",
            "RUN_FINISHED",
        ],
    );
    let compacted = out
        .iter()
        .find(|e| e["name"] == "keel.compacted")
        .expect("keel.compacted");
    assert_eq!(compacted["value"]["replaces"]["count"], 2);
    assert_eq!(compacted["value"]["summary"]["id"], "run_1.t2.s");
    let failed = ev(
        12,
        "context.compaction_failed",
        json!({"turn": 2, "operation_id": "k2", "rule": "compaction.not_smaller",
            "detail": "larger", "tokens_before": 90}),
    );
    let mut mapper = AguiMapper::new();
    for event in &events[..11] {
        mapper.map(event).expect("maps");
    }
    let mapped = values(mapper.map(&failed).expect("maps"));
    assert_eq!(types(&mapped), ["CUSTOM keel.compaction_failed"]);
    assert_eq!(mapped[0]["value"]["rule"], "compaction.not_smaller");
}

/// The snapshot is the transcript: every message that happened (the
/// compacted ones too), not the summary; a join inside the compaction
/// call re-opens no text message.
#[test]
fn the_snapshot_after_a_compaction_is_the_transcript() {
    let events = compaction_run();
    let (_, out) = prelude(&events[..16], Vec::new(), Limits::default()).expect("a prelude");
    let ids: Vec<Value> = out[1].to_value()["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| m["id"].clone())
        .collect();
    assert_eq!(ids, [json!("m1"), json!("run_1.t1.a"), json!("run_1.t2.a")]);
    let (_, inside) = prelude(&events[..10], Vec::new(), Limits::default()).expect("a prelude");
    assert_eq!(
        types(&values(inside)),
        ["RUN_STARTED", "MESSAGES_SNAPSHOT", "STEP_STARTED"]
    );
}
