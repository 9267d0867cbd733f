//! The shared event generator: a small vocabulary of decodable event lines
//! (every lifecycle kind, deltas, tool calls, inputs and interactions over
//! two turns, three operation ids, three call ids and two interaction ids),
//! picked two bytes at a time from the fuzz input.
//!
//! [`events`] keeps every decodable pick in any order (for views, which must
//! survive anything); [`lifecycle_valid`] keeps only what a [`RunLog`] commits
//! (for stores, which only ever hold what a log accepted).
#![allow(dead_code)] // not every target uses every helper

use keel_eventlog::{Event, LogConfig, Payload, RunLog, SystemClock};
use keel_message::RunId;
use serde_json::{Value, json};
use std::sync::Arc;

/// How many pairs of input bytes one sequence reads at most.
pub const MAX_EVENTS: usize = 256;

/// The event kind and payload picked by `pick`, varied by `arg`. Picks
/// 0–21 are the original `agui_view` vocabulary (its seeds use them);
/// picks from [`MEDIA_PICKS`] are reasoning and images (#34).
pub fn payload(pick: u8, arg: u8) -> (&'static str, Value) {
    let turn = u64::from(arg % 2) + 1;
    let op = format!("op_{}", arg % 3);
    let call = format!("c{}", (arg / 3) % 3);
    if pick >= MEDIA_PICKS {
        return media_payload(pick - MEDIA_PICKS, arg, turn, op, call);
    }
    let problem = json!({"kind": "unavailable", "message": "x", "retryable": arg % 2 == 0});
    match pick % 30 {
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
        21 => ("turn.cancelled", json!({"turn": turn})),
        _ => extra_payload(pick % 30, arg, turn, op, call),
    }
}

/// Picks 22–29: the kinds and variants the original vocabulary lacked.
fn extra_payload(pick: u8, arg: u8, turn: u64, op: String, call: String) -> (&'static str, Value) {
    let interaction = format!("i{}", arg % 2 + 1);
    match pick {
        22 => (
            "interaction.failed",
            json!({"turn": turn, "interaction_id": interaction, "error": "timed out"}),
        ),
        23 => (
            "interaction.cancelled",
            json!({"turn": turn, "interaction_id": interaction}),
        ),
        24 => (
            "model.failed",
            json!({"turn": turn, "operation_id": op, "problem": {"kind": "rate_limited", "message": "y", "retryable": true}, "position": "pristine"}),
        ),
        25 => (
            "tool.failed",
            json!({"turn": turn, "call_id": call, "tool": "t", "error": "no"}),
        ),
        26 => ("run.cancelled", json!({"reason": "stop"})),
        27 => {
            let finish = ["tool_calls", "length", "content_filter"][usize::from(arg % 3)];
            (
                "model.completed",
                json!({"turn": turn, "operation_id": op, "finish": finish}),
            )
        }
        28 => (
            "interaction.started",
            json!({"turn": turn, "interaction_id": interaction, "request": "which?"}),
        ),
        _ => (
            "interaction.completed",
            json!({"turn": turn, "interaction_id": interaction, "decision": "approved"}),
        ),
    }
}

/// The first pick of the reasoning and image vocabulary: picks below it
/// map as they did before it existed (`pick % 30`), so the older seeds
/// decode to the same events.
pub const MEDIA_PICKS: u8 = 240;

/// A one-pixel PNG, base64.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

/// Picks from [`MEDIA_PICKS`]: reasoning deltas, the three forms of
/// `model.reasoning_end`, a tool result with images and a user input
/// with an image and a file.
fn media_payload(pick: u8, arg: u8, turn: u64, op: String, call: String) -> (&'static str, Value) {
    let end = |extra: Value| {
        let mut p = json!({"turn": turn, "operation_id": op, "provider": "anthropic"});
        if let (Some(p), Some(extra)) = (p.as_object_mut(), extra.as_object()) {
            p.extend(extra.clone());
        }
        ("model.reasoning_end", p)
    };
    match pick % 8 {
        0 | 1 => (
            "model.reasoning_delta",
            json!({"turn": turn, "operation_id": op, "text": "hm"}),
        ),
        2 => end(json!({"signature": "sig"})),
        3 => end(json!({})),
        4 => end(json!({"redacted": "opaque"})),
        5 => (
            "tool.completed",
            json!({"turn": turn, "call_id": call, "tool": "t", "output": "img",
                   "images": [{"media_type": "image/png", "base64": PNG},
                              {"url": "https://example.com/a.gif"}]}),
        ),
        6 => (
            "run.input",
            json!({"message": {"id": "m1", "role": "user", "parts": [
                {"type": "text", "text": "see"},
                {"type": "image", "media_type": "image/png", "base64": PNG},
                {"type": "file", "media_type": "text/plain", "name": "<i>.txt", "base64": "aGk="}]}}),
        ),
        _ => (
            "model.reasoning_delta",
            json!({"turn": turn, "operation_id": format!("op_{}", (u16::from(arg) + 1) % 3), "text": "x"}),
        ),
    }
}

/// The line of `kind`/`payload` at `seq` of `run_id`.
pub fn line(run_id: &str, seq: u64, kind: &str, payload: Value) -> String {
    json!({"kind": kind, "payload": payload, "run_id": run_id, "seq": seq, "ts": seq}).to_string()
}

/// Every decodable pick of `data` (pairs of bytes, at most [`MAX_EVENTS`]),
/// in the order picked, numbered from seq 1 in run `run_f`.
pub fn events(data: &[u8]) -> Vec<Event> {
    let mut out = Vec::new();
    for pair in data.chunks_exact(2).take(MAX_EVENTS) {
        let (kind, payload) = payload(pair[0], pair[1]);
        let seq = out.len() as u64 + 1;
        if let Ok(event) = Event::decode(&line("run_f", seq, kind, payload)) {
            out.push(event);
        }
    }
    out
}

/// `events` renumbered behind a `run.started` at seq 1 (unless they start
/// with one already): how every real run begins.
pub fn started(events: Vec<Event>) -> Vec<Event> {
    if events
        .first()
        .is_some_and(|e| e.kind().name() == "run.started")
    {
        return events;
    }
    let mut out = Vec::with_capacity(events.len() + 1);
    let first = line("run_f", 1, "run.started", json!({}));
    out.extend(Event::decode(&first));
    for e in &events {
        let mut v: Value = serde_json::from_str(e.line()).expect("a decoded line is JSON");
        v["seq"] = json!(out.len() as u64 + 1);
        if let Ok(event) = Event::decode(&v.to_string()) {
            out.push(event);
        }
    }
    out
}

/// A run the log accepted event by event.
pub struct ValidRun {
    /// The log, to ask what is open.
    pub log: RunLog,
    /// The committed events, in order, as the log encoded them.
    pub events: Vec<Arc<Event>>,
}

/// The picks of `data` that a fresh [`RunLog`] of `run_id` commits: a
/// lifecycle-valid run (a prefix of one, unless a terminal was picked).
/// `keep` sees the events committed so far and the next payload, and may
/// leave it out (for runs narrower than the lifecycle allows).
pub fn lifecycle_valid(
    run_id: &str,
    data: &[u8],
    mut keep: impl FnMut(&[Arc<Event>], &Payload) -> bool,
) -> ValidRun {
    let id = RunId::parse(run_id).expect("the harness's run ids are valid");
    let log = RunLog::new(id, LogConfig::default(), Arc::new(SystemClock))
        .expect("the default config is valid");
    let mut out = Vec::new();
    for pair in data.chunks_exact(2).take(MAX_EVENTS) {
        let (kind, payload) = payload(pair[0], pair[1]);
        let Ok(event) = Event::decode(&line(run_id, 1, kind, payload)) else {
            continue;
        };
        let Ok(payload) = event.payload() else {
            continue;
        };
        if !keep(&out, &payload) {
            continue;
        }
        if let Ok(committed) = log.commit(&payload) {
            out.push(committed);
        }
    }
    ValidRun { log, events: out }
}
