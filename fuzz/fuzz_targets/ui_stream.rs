//! Event sequences from the shared vocabulary (`common/events.rs`) through
//! the AI SDK UI message stream view (`views::ui_stream::UiStream`): half
//! of them arbitrary (any order, optionally behind a `run.started`), half
//! lifecycle-valid and engine-shaped (what a `RunLog` commits, with a tool
//! or an approval only for a call the model made in the turn), optionally
//! with one event left out so the view meets a gap.
//!
//! Never a panic; deterministic; a refusal is `OutOfOrder` exactly at the
//! gap, naming both seqs, and the view stays where it was (the stream ends
//! there); `last_seq` follows every accepted event; every chunk's JSON is
//! an object of a type the protocol has, with exactly the members that type
//! allows (`uiMessageChunkSchema` is strict); text parts pair by id
//! (`text-start` fresh, deltas and `text-end` only while open). On
//! engine-shaped runs also: steps pair, tool outputs, errors, denials and
//! approval requests name a call whose input was sent, no text part is
//! open at a step's end, at the finish or at a pause, nothing follows the
//! finish (or abort), and once `ended()` the view emits nothing more.
//! Resuming (the view replays a run from its first event, the way `POST
//! /v1/chat` and `GET /v1/chat/{id}/stream` do): a fresh view fed the
//! first `k` events and then the rest emits exactly the whole stream's
//! chunks after those of the first `k` events, with the same `paused`,
//! `ended` and `last_seq` at every step.
#![no_main]

mod common;

use common::events::{events, lifecycle_valid, started};
use keel_views::ui_stream::{UiStream, ViewError};
use keel_eventlog::{Event, Payload};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use std::collections::BTreeSet;
use std::sync::Arc;

/// The members a chunk type carries besides `type`.
struct Members {
    required: &'static [&'static str],
    optional: &'static [&'static str],
}

/// The chunk types the view may emit and their members (the SDK's
/// `uiMessageChunkSchema`, the subset the RFC maps to).
fn members(kind: &str) -> Option<Members> {
    let m = |required, optional| Some(Members { required, optional });
    match kind {
        "start" => m(&["messageId"], &[]),
        "start-step" | "finish-step" => m(&[], &[]),
        "text-start" | "text-end" => m(&["id"], &[]),
        "text-delta" => m(&["id", "delta"], &[]),
        "reasoning-start" => m(&["id"], &[]),
        "reasoning-end" => m(&["id"], &["providerMetadata"]),
        "reasoning-delta" => m(&["id", "delta"], &[]),
        "file" => m(&["url", "mediaType"], &[]),
        "tool-input-available" => m(&["toolCallId", "toolName", "input"], &[]),
        "tool-approval-request" => m(&["approvalId", "toolCallId"], &[]),
        "tool-output-available" => m(&["toolCallId", "output"], &[]),
        "tool-output-error" => m(&["toolCallId", "errorText"], &[]),
        "tool-output-denied" => m(&["toolCallId"], &[]),
        "data-keel-discarded" | "data-keel-tool-failed" => m(&["id", "data"], &[]),
        "finish" => m(&[], &["finishReason", "messageMetadata"]),
        "abort" => m(&[], &["reason"]),
        "error" => m(&["errorText"], &[]),
        _ => None,
    }
}

/// Members that are strings wherever they appear.
const STRINGS: &[&str] = &[
    "messageId",
    "id",
    "delta",
    "toolCallId",
    "toolName",
    "approvalId",
    "errorText",
    "reason",
    "url",
    "mediaType",
];

const FINISH_REASONS: &[&str] = &[
    "stop",
    "length",
    "content-filter",
    "tool-calls",
    "error",
    "other",
];

/// A chunk's JSON, checked against its type's members.
fn checked(json: &str) -> Value {
    let v: Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"));
    let object = v
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {json}"));
    let kind = object["type"]
        .as_str()
        .unwrap_or_else(|| panic!("no type: {json}"));
    let shape = members(kind).unwrap_or_else(|| panic!("a type the protocol lacks: {json}"));
    for name in shape.required {
        assert!(object.contains_key(*name), "{kind} without {name}: {json}");
    }
    for (name, value) in object {
        let allowed = name == "type"
            || shape.required.contains(&name.as_str())
            || shape.optional.contains(&name.as_str());
        assert!(
            allowed,
            "{kind} with a member the schema refuses ({name}): {json}"
        );
        if STRINGS.contains(&name.as_str()) {
            assert!(value.is_string(), "{name} is not a string: {json}");
        }
    }
    if let Some(reason) = object.get("finishReason") {
        assert!(
            reason.as_str().is_some_and(|r| FINISH_REASONS.contains(&r)),
            "finishReason outside the SDK's vocabulary: {json}"
        );
    }
    for name in ["data", "messageMetadata", "providerMetadata"] {
        if let Some(value) = object.get(name) {
            assert!(value.is_object(), "{name} is not an object: {json}");
        }
    }
    v
}

/// The stream as the client assembles it, checked chunk by chunk.
#[derive(Default)]
struct Pairing {
    /// Engine-shaped input: the stricter rules apply.
    strict: bool,
    open_text: Option<String>,
    used_text: BTreeSet<String>,
    open_reasoning: Option<String>,
    calls: BTreeSet<String>,
    step_open: bool,
    finished: bool,
}

impl Pairing {
    fn accept(&mut self, chunk: &Value) {
        let kind = chunk["type"].as_str().unwrap_or_default();
        let id = |name: &str| chunk[name].as_str().unwrap_or_default().to_owned();
        if self.strict {
            assert!(!self.finished, "{chunk} after the finish");
        }
        match kind {
            "text-start" => {
                assert!(
                    self.open_text.is_none(),
                    "{chunk} while a text part is open"
                );
                assert!(self.open_reasoning.is_none(), "{chunk} inside reasoning");
                assert!(self.used_text.insert(id("id")), "{chunk} reuses an id");
                self.open_text = Some(id("id"));
            }
            "reasoning-start" => {
                assert!(self.open_reasoning.is_none(), "{chunk} inside reasoning");
                assert!(self.open_text.is_none(), "{chunk} inside a text part");
                assert!(self.used_text.insert(id("id")), "{chunk} reuses an id");
                self.open_reasoning = Some(id("id"));
            }
            "reasoning-delta" => {
                assert_eq!(self.open_reasoning, Some(id("id")), "{chunk} outside its part")
            }
            "reasoning-end" => {
                assert_eq!(
                    self.open_reasoning.take(),
                    Some(id("id")),
                    "{chunk} of no open part"
                );
            }
            "file" => {
                let url = chunk["url"].as_str().unwrap_or_default();
                let media = chunk["mediaType"].as_str().unwrap_or_default();
                assert!(
                    url.starts_with(&format!("data:{media};base64,")) || url.starts_with("https://"),
                    "{chunk}: a file that is neither its data nor an https URL"
                );
            }
            "text-delta" => assert_eq!(self.open_text, Some(id("id")), "{chunk} outside its part"),
            "text-end" => {
                assert_eq!(
                    self.open_text.take(),
                    Some(id("id")),
                    "{chunk} of no open part"
                );
            }
            _ => self.accept_strict(kind, chunk),
        }
    }

    /// The rules that hold for engine-shaped runs.
    fn accept_strict(&mut self, kind: &str, chunk: &Value) {
        if !self.strict {
            return;
        }
        let call = chunk["toolCallId"].as_str().unwrap_or_default().to_owned();
        match kind {
            "tool-input-available" => {
                self.calls.insert(call);
            }
            "tool-approval-request"
            | "tool-output-available"
            | "tool-output-error"
            | "tool-output-denied" => {
                assert!(self.calls.contains(&call), "{chunk} names no call sent")
            }
            "start-step" => {
                assert!(!self.step_open, "{chunk} inside a step");
                self.step_open = true;
            }
            "finish-step" => {
                assert!(self.step_open, "{chunk} outside a step");
                assert!(self.open_text.is_none(), "a text part open at {chunk}");
                assert!(self.open_reasoning.is_none(), "reasoning open at {chunk}");
                self.step_open = false;
            }
            "finish" | "abort" => {
                assert!(self.open_text.is_none(), "a text part open at {chunk}");
                assert!(self.open_reasoning.is_none(), "reasoning open at {chunk}");
                self.finished = true;
            }
            _ => {}
        }
    }
}

/// The view after one event: what a resumed view must agree with.
#[derive(Debug, PartialEq)]
struct Step {
    chunks: Vec<String>,
    paused: bool,
    ended: bool,
    last_seq: u64,
}

/// Feeds `events` to `view` until the first refusal: the steps, and the
/// refusal with the index of the event refused.
fn feed(view: &mut UiStream, events: &[Arc<Event>]) -> (Vec<Step>, Option<(usize, ViewError)>) {
    let mut steps = Vec::new();
    for (i, event) in events.iter().enumerate() {
        let before = view.last_seq();
        match view.feed(event) {
            Ok(chunks) => {
                assert_eq!(view.last_seq(), event.seq(), "last_seq follows the event");
                assert!(view.last_seq() > before, "last_seq is monotone");
                steps.push(Step {
                    chunks: chunks.iter().map(|c| c.to_json()).collect(),
                    paused: view.paused(),
                    ended: view.ended(),
                    last_seq: view.last_seq(),
                });
            }
            Err(e) => {
                assert_eq!(view.last_seq(), before, "a refusal moves nothing");
                return (steps, Some((i, e)));
            }
        }
    }
    (steps, None)
}

/// What the input asks for.
struct Plan {
    events: Vec<Arc<Event>>,
    strict: bool,
    /// Index of the event left out, if any.
    gap: Option<usize>,
    /// How many events a resumed view replays before the rest.
    resume_at: usize,
}

fn plan(data: &[u8]) -> Option<Plan> {
    let (&[mode, cut], rest) = data.split_first_chunk::<2>()?;
    let strict = mode & 1 == 1;
    let events: Vec<Arc<Event>> = if strict {
        lifecycle_valid("run_f", rest, engine_shaped()).events
    } else {
        let picked = events(rest);
        let picked = if mode & 2 == 0 {
            started(picked)
        } else {
            picked
        };
        picked.into_iter().map(Arc::new).collect()
    };
    let len = events.len();
    let gap = (mode & 4 == 4 && len > 1).then(|| usize::from(cut) % len);
    let resume_at = usize::from(cut.rotate_left(4)) % (len + 1);
    Some(Plan {
        events,
        strict,
        gap,
        resume_at,
    })
}

/// Keeps a tool's events and an approval for a call only after the model
/// made that call in the same turn, as the engine does.
fn engine_shaped() -> impl FnMut(&[Arc<Event>], &Payload) -> bool {
    let mut called: BTreeSet<(u64, String)> = BTreeSet::new();
    let mut seen = 0;
    move |committed, payload| {
        for event in &committed[seen..] {
            if let Ok(Payload::ToolCall(p)) = event.payload() {
                called.insert((p.turn, p.call_id.as_str().to_owned()));
            }
        }
        seen = committed.len();
        let made = |turn: u64, call: &str| called.contains(&(turn, call.to_owned()));
        match payload {
            Payload::ToolStarted(p) => made(p.turn, p.call_id.as_str()),
            Payload::InteractionStarted(p) => {
                p.call_id.as_ref().is_none_or(|c| made(p.turn, c.as_str()))
            }
            _ => true,
        }
    }
}

fn check_whole(plan: &Plan) -> Vec<Step> {
    let mut view = UiStream::new();
    let (steps, refusal) = feed(&mut view, &plan.events);
    // A gapless run is refused only after its finish, and at once: the
    // view takes nothing after `ended()` (rule ui_stream.after_end).
    if let Some((i, error)) = &refusal {
        assert!(
            matches!(error, ViewError::AfterEnd { .. })
                && steps.last().is_some_and(|s| s.ended)
                && *i == steps.len(),
            "a gapless run is refused: {refusal:?}"
        );
        assert_eq!(error.rule(), "ui_stream.after_end");
    }
    let mut pairing = Pairing {
        strict: plan.strict,
        ..Pairing::default()
    };
    pairing.accept(&checked(&UiStream::start("run_f").to_json()));
    let mut ended = false;
    for step in &steps {
        if plan.strict && ended {
            assert!(
                step.chunks.is_empty(),
                "chunks after ended(): {:?}",
                step.chunks
            );
        }
        for chunk in &step.chunks {
            pairing.accept(&checked(chunk));
        }
        if plan.strict && step.paused {
            assert!(pairing.open_text.is_none(), "a text part open at a pause");
            assert!(pairing.open_reasoning.is_none(), "reasoning open at a pause");
        }
        ended |= step.ended;
    }
    let mut again = UiStream::new();
    assert_eq!(feed(&mut again, &plan.events).0, steps, "deterministic");
    steps
}

fn check_gap(plan: &Plan, at: usize) {
    let mut fed: Vec<Arc<Event>> = plan.events.clone();
    let left_out = fed.remove(at);
    let mut view = UiStream::new();
    let (steps, refusal) = feed(&mut view, &fed);
    if let Some((i, ViewError::AfterEnd { .. })) = &refusal
        && *i <= at
    {
        // The stream finished before the gap: nothing after it is taken.
        return;
    }
    if at == fed.len() {
        assert!(refusal.is_none(), "the last event left out is no gap");
        return;
    }
    let Some((i, error)) = refusal else {
        panic!("seq {} left out, nothing refused", left_out.seq());
    };
    assert_eq!(i, at, "refused where the gap is");
    assert_eq!(steps.len(), at);
    let found = fed[at].seq();
    match &error {
        ViewError::OutOfOrder { last, found: f } => {
            assert_eq!((*last, *f), (view.last_seq(), found), "{error}")
        }
        other => panic!("a gap refused as {other}"),
    }
    assert!(
        error.to_string().contains(&format!("seq {found}")),
        "{error}"
    );
    // The stream ends there: the view takes nothing but the missing seq.
    assert!(
        view.feed(&fed[at]).is_err(),
        "the refused event is taken on retry"
    );
}

fn check_resume(plan: &Plan, whole: &[Step]) {
    let k = plan.resume_at;
    let mut view = UiStream::new();
    // `whole` stops at the finish (the view refuses what follows it), and
    // so does a replay that reaches it.
    let (mut steps, _) = feed(&mut view, &plan.events[..k]);
    if steps.len() == k {
        let (tail, _) = feed(&mut view, &plan.events[k..]);
        steps.extend(tail);
    }
    assert_eq!(steps.as_slice(), whole, "the resumed stream differs at {k}");
}

fuzz_target!(|data: &[u8]| {
    let Some(plan) = plan(data) else {
        return;
    };
    let whole = check_whole(&plan);
    if let Some(at) = plan.gap {
        check_gap(&plan, at);
    }
    check_resume(&plan, &whole);
});
