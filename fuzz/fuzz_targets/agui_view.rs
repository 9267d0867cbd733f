//! Arbitrary event sequences (decodable lines from a small vocabulary:
//! every lifecycle kind, deltas, tool calls, inputs, with a few turns,
//! operation ids and call ids, in any order) through the AG-UI view: the
//! mapper from the start, and a prelude at a cut followed by the tail.
//! Never a panic; every emitted event passes the view's own schema check
//! (`check_event`: type, required members, rawEvent); START/END pairing,
//! RUN_STARTED first and nothing after the run's end hold for the whole
//! stream (`check_stream`); each accepted Keel event maps to at least one
//! AG-UI event carrying its line.
#![no_main]

use keel_cli::views::agui::{AguiMapper, check_stream, prelude};
use keel_eventlog::Event;
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

fn payload(pick: u8, arg: u8) -> (&'static str, Value) {
    let turn = u64::from(arg % 2) + 1;
    let op = format!("op_{}", arg % 3);
    let call = format!("c{}", (arg / 3) % 3);
    let problem = json!({"kind": "unavailable", "message": "x", "retryable": arg % 2 == 0});
    match pick % 22 {
        0 => ("run.started", json!({})),
        1 => (
            "run.input",
            json!({"message": {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}}),
        ),
        2 => ("turn.started", json!({"turn": turn})),
        3 => ("turn.completed", json!({"turn": turn})),
        4 => ("turn.failed", json!({"turn": turn, "error": "e"})),
        5 => (
            "model.started",
            json!({"turn": turn, "operation_id": op, "model": "m", "attempt": 1}),
        ),
        6 | 7 => (
            "model.text_delta",
            json!({"turn": turn, "operation_id": op, "text": "ab"}),
        ),
        8 => (
            "model.tool_call",
            json!({"turn": turn, "operation_id": op, "call_id": call, "name": "t", "arguments": {"a": 1}}),
        ),
        9 => (
            "model.completed",
            json!({"turn": turn, "operation_id": op, "finish": "stop", "usage": {"input_tokens": 1, "output_tokens": 2}}),
        ),
        10 => (
            "model.failed",
            json!({"turn": turn, "operation_id": op, "problem": problem, "position": "partial"}),
        ),
        11 => ("model.cancelled", json!({"turn": turn, "operation_id": op})),
        12 => (
            "tool.started",
            json!({"turn": turn, "call_id": call, "tool": "t"}),
        ),
        13 => (
            "tool.completed",
            json!({"turn": turn, "call_id": call, "tool": "t", "output": "ok"}),
        ),
        14 => (
            "tool.failed",
            json!({"turn": turn, "call_id": call, "tool": "t", "error": "e", "outcome": "uncertain", "retry": "retryable"}),
        ),
        15 => (
            "tool.cancelled",
            json!({"turn": turn, "call_id": call, "tool": "t"}),
        ),
        16 => (
            "interaction.started",
            json!({"turn": turn, "interaction_id": "i1", "request": "ok?", "call_id": call}),
        ),
        17 => (
            "interaction.completed",
            json!({"turn": turn, "interaction_id": "i1", "decision": "denied"}),
        ),
        18 => (
            "run.completed",
            json!({"usage": {"input_tokens": 1, "output_tokens": 2}}),
        ),
        19 => ("run.failed", json!({"error": "e"})),
        20 => ("run.cancelled", json!({})),
        _ => ("turn.cancelled", json!({"turn": turn})),
    }
}

fn events(data: &[u8]) -> Vec<Event> {
    let mut out = Vec::new();
    for pair in data.chunks_exact(2).take(256) {
        let (kind, payload) = payload(pair[0], pair[1]);
        let seq = out.len() as u64 + 1;
        let line =
            json!({"kind": kind, "payload": payload, "run_id": "run_f", "seq": seq, "ts": seq});
        let Ok(text) = serde_json::to_string(&line) else {
            continue;
        };
        if let Ok(event) = Event::decode(&text) {
            out.push(event);
        }
    }
    out
}

/// Maps `tail` after `mapper` into `out` until the first refusal.
fn map_all(mut mapper: AguiMapper, tail: &[Event], out: &mut Vec<Value>) {
    for event in tail {
        match mapper.map(event) {
            Ok(mapped) => {
                assert!(!mapped.is_empty(), "seq {} maps to nothing", event.seq());
                let raw: Value =
                    serde_json::from_str(event.line()).expect("a decoded line is JSON");
                assert!(mapped.iter().all(|e| e["rawEvent"] == raw));
                out.extend(mapped);
            }
            Err(e) => {
                assert!(e.to_string().contains("(rule agui."), "{e}");
                return;
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&cut, rest)) = data.split_first() else {
        return;
    };
    let mut events = events(rest);
    // Half of the inputs start like a run does.
    if cut % 2 == 0
        && events
            .first()
            .is_none_or(|e| e.kind().name() != "run.started")
    {
        let mut fixed = vec![
            json!({"kind": "run.started", "payload": {}, "run_id": "run_f", "seq": 1, "ts": 1}),
        ];
        for e in &events {
            let mut v: Value = serde_json::from_str(e.line()).expect("json");
            v["seq"] = json!(fixed.len() as u64 + 1);
            fixed.push(v);
        }
        events = fixed
            .iter()
            .filter_map(|v| Event::decode(&serde_json::to_string(v).ok()?).ok())
            .collect();
    }
    let mut whole = Vec::new();
    map_all(AguiMapper::new(), &events, &mut whole);
    if let Err(e) = check_stream(&whole) {
        panic!("the stream breaks a rule: {e}");
    }
    let at = usize::from(cut / 2) % (events.len() + 1);
    if at == 0 {
        return;
    }
    if let Ok((mapper, mut joined)) = prelude(&events[..at]) {
        map_all(mapper, &events[at..], &mut joined);
        if let Err(e) = check_stream(&joined) {
            panic!("the joined stream at {at} breaks a rule: {e}");
        }
    }
});
