//! AG-UI: a run's log as AG-UI events (the `@ag-ui/core` 1.0 schema).
//!
//! [`AguiMapper`] takes a run's events one by one, in seq order, and
//! returns the AG-UI events each maps to (at least one per Keel event,
//! each carrying the Keel line as `rawEvent`). [`prelude`] is what a
//! client joining at a cursor > 0 gets first: `RUN_STARTED`, a
//! `MESSAGES_SNAPSHOT` rebuilt from the log (`history::HistoryFold`), and
//! the re-opened starts of the scopes still open at the cursor (the turn's
//! step, the model call's text message with its text so far, its tool
//! calls with their arguments); the tail then maps normally. A daemon
//! builds it a page at a time and writes the snapshot a message at a time
//! ([`PreludeFold`], [`SnapshotWriter`]), never holding the run. The mapping,
//! event by event, is `docs/rfc/implemented/2026-12-02-ag-ui-view.md`.
//!
//! Bounds: the mapper holds one open step, one open text message (its
//! text kept up to [`MAX_TEXT_BYTES`] for a later prelude; what is beyond
//! is counted, not kept, and the prelude says so in a `keel.text_elided`
//! event) and at most [`MAX_OPEN_CALLS`] open tool calls (one more is the
//! typed error [`AguiError::TooManyOpenCalls`]). Each event is mapped on
//! its own: nothing is buffered across events beyond that state.
//!
//! Values a newer version added to an extensible wire enum (a finish
//! reason, problem kind, retry position, tool outcome or retry) need no
//! mapping here: they reach the client verbatim inside the `keel.*`
//! `CUSTOM` events, which carry the payload as it is in the log.

use keel_eventlog::{Event, Payload};
use keel_message::{Message, Part, Role};
use serde_json::{Value, json};

/// Most tool calls one model call may have open at once.
pub const MAX_OPEN_CALLS: usize = 1024;
/// Most bytes of an open text message kept for a prelude.
pub const MAX_TEXT_BYTES: usize = 1 << 20;

/// Why events do not map.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AguiError {
    /// An event's line or payload does not decode.
    #[error("event {seq} does not decode: {detail} (rule agui.decodable)")]
    Undecodable {
        /// The event.
        seq: u64,
        /// Why (no content quoted).
        detail: String,
    },
    /// The first event mapped from the start is not `run.started`.
    #[error("event {seq} comes before run.started (rule agui.run_started_first)")]
    NotStarted {
        /// The event.
        seq: u64,
    },
    /// A second `run.started`.
    #[error("event {seq} starts the run again (rule agui.one_run_started)")]
    StartedTwice {
        /// The event.
        seq: u64,
    },
    /// An event after the run's terminal.
    #[error("event {seq} follows the run's terminal (rule agui.after_terminal)")]
    AfterTerminal {
        /// The event.
        seq: u64,
    },
    /// More open tool calls than [`MAX_OPEN_CALLS`].
    #[error("event {seq} opens more than {max} tool calls at once (rule agui.open_calls_bound)")]
    TooManyOpenCalls {
        /// The event.
        seq: u64,
        /// The bound.
        max: usize,
    },
    /// A prelude asked for at or after the run's terminal (nothing follows).
    #[error("the run ended at or before the cursor (rule agui.prelude_before_terminal)")]
    Ended,
}

/// The open text message of a model call.
#[derive(Debug, Clone)]
struct OpenText {
    message_id: String,
    operation_id: String,
    /// The line of the delta that opened it (the prelude's `rawEvent`).
    line: String,
    text: String,
    elided: usize,
}

/// An open tool call.
#[derive(Debug, Clone)]
struct OpenCall {
    call_id: String,
    name: String,
    arguments: String,
    parent: Option<String>,
    line: String,
}

/// The stateful mapping of one run's events, in seq order.
#[derive(Debug, Clone, Default)]
pub struct AguiMapper {
    run_id: String,
    /// The `run.started` line, once seen.
    started: Option<String>,
    ended: bool,
    last_seq: u64,
    step: Option<u64>,
    text: Option<OpenText>,
    calls: Vec<OpenCall>,
}

fn with_raw(mut event: Value, raw: &Value) -> Value {
    if let Some(object) = event.as_object_mut() {
        // AG-UI's timestamp is in milliseconds; Keel's `ts` in microseconds.
        if let Some(ts) = raw.get("ts").and_then(Value::as_u64) {
            object.insert("timestamp".to_owned(), json!(ts / 1000));
        }
        object.insert("rawEvent".to_owned(), raw.clone());
    }
    event
}

fn custom(name: &str, value: Value) -> Value {
    json!({"type": "CUSTOM", "name": name, "value": value})
}

fn step_name(turn: u64) -> String {
    format!("turn {turn}")
}

fn usage_json(usage: &Value) -> Value {
    let mut out = serde_json::Map::new();
    for (from, to) in [
        ("input_tokens", "inputTokens"),
        ("output_tokens", "outputTokens"),
    ] {
        if let Some(n) = usage.get(from).and_then(Value::as_u64) {
            out.insert(to.to_owned(), json!(n));
        }
    }
    Value::Object(out)
}

impl AguiMapper {
    /// A mapper for a stream that starts at seq 1.
    pub fn new() -> AguiMapper {
        AguiMapper::default()
    }

    /// Maps the next event: the AG-UI events it stands for, in order, each
    /// with `rawEvent` = the event's line (at least one per event).
    pub fn map(&mut self, event: &Event) -> Result<Vec<Value>, AguiError> {
        let raw: Value =
            serde_json::from_str(event.line()).map_err(|e| AguiError::Undecodable {
                seq: event.seq(),
                detail: e.to_string(),
            })?;
        let out = self.step(event, raw.get("payload"))?;
        Ok(out.into_iter().map(|e| with_raw(e, &raw)).collect())
    }

    /// Takes the next event as [`AguiMapper::map`] does (the same state,
    /// the same refusals) without building what it maps to: for folding a
    /// prefix of the run (a join's prelude) at the cost of decoding it.
    pub fn advance(&mut self, event: &Event) -> Result<(), AguiError> {
        self.step(event, None).map(drop)
    }

    /// The state change of the next event, and (with the payload's JSON
    /// `body`, for the `CUSTOM` events that carry it) what it maps to.
    fn step(&mut self, event: &Event, body: Option<&Value>) -> Result<Vec<Value>, AguiError> {
        let seq = event.seq();
        if self.ended {
            return Err(AguiError::AfterTerminal { seq });
        }
        let payload = event.payload().map_err(|e| AguiError::Undecodable {
            seq,
            detail: e.to_string(),
        })?;
        match (&self.started, &payload) {
            (None, Payload::RunStarted(_)) | (Some(_), _) => {}
            (None, _) => return Err(AguiError::NotStarted { seq }),
        }
        if self.started.is_some() && matches!(payload, Payload::RunStarted(_)) {
            return Err(AguiError::StartedTwice { seq });
        }
        if self.run_id != event.run_id().as_str() {
            self.run_id = event.run_id().as_str().to_owned();
        }
        self.last_seq = seq;
        let body = body.cloned().unwrap_or(Value::Null);
        let kind = format!("keel.{}", event.kind().name());
        let mut out = Vec::new();
        self.dispatch(&payload, event.line(), &body, &kind, &mut out)?;
        if out.is_empty() {
            out.push(custom(&kind, body));
        }
        Ok(out)
    }

    fn dispatch(
        &mut self,
        payload: &Payload,
        line: &str,
        body: &Value,
        kind: &str,
        out: &mut Vec<Value>,
    ) -> Result<(), AguiError> {
        match payload {
            Payload::RunStarted(_) => {
                self.started = Some(line.to_owned());
                out.push(self.run_started());
            }
            Payload::TurnStarted(p) => {
                self.close_step(out);
                self.step = Some(p.turn);
                out.push(json!({"type": "STEP_STARTED", "stepName": step_name(p.turn)}));
            }
            Payload::TurnCompleted(_) => self.close_step(out),
            Payload::TurnFailed(_) | Payload::TurnCancelled(_) => {
                self.close_step(out);
                out.push(custom(kind, body.clone()));
            }
            Payload::TextDelta(p) => self.text_delta(p.operation_id.as_str(), &p.text, line, out),
            Payload::ToolCall(p) => {
                if self.calls.len() >= MAX_OPEN_CALLS {
                    return Err(AguiError::TooManyOpenCalls {
                        seq: self.last_seq,
                        max: MAX_OPEN_CALLS,
                    });
                }
                let call = OpenCall {
                    call_id: p.call_id.as_str().to_owned(),
                    name: p.name.as_str().to_owned(),
                    arguments: p.arguments.as_str().to_owned(),
                    parent: self.text.as_ref().map(|t| t.message_id.clone()),
                    line: line.to_owned(),
                };
                self.close_call(&call.call_id, out);
                out.extend(call_start(&call));
                self.calls.push(call);
            }
            Payload::ModelCompleted(_) => {
                self.close_model(out);
                out.push(custom(kind, body.clone()));
                if let Some(usage) = body.get("usage") {
                    out.push(custom("keel.usage", usage.clone()));
                }
            }
            Payload::ModelFailed(_) | Payload::ModelCancelled(_) => {
                let discarded = self.discarded();
                self.close_model(out);
                out.push(custom(kind, body.clone()));
                if let Some(discarded) = discarded {
                    out.push(custom("keel.discarded", discarded));
                }
            }
            Payload::ToolCompleted(p) => {
                let id = p.call_id.as_str();
                self.close_call(id, out);
                out.push(self.tool_result(id, &p.output, None));
            }
            Payload::ToolFailed(p) => {
                let id = p.call_id.as_str();
                self.close_call(id, out);
                out.push(self.tool_result(id, p.error.as_str(), Some(p.error.as_str())));
                out.push(custom(kind, body.clone()));
            }
            Payload::RunCompleted(_) | Payload::RunCancelled(_) | Payload::RunFailed(_) => {
                self.run_terminal(payload, body, kind, out);
            }
            _ => {}
        }
        Ok(())
    }

    fn run_started(&self) -> Value {
        json!({"type": "RUN_STARTED", "threadId": self.run_id, "runId": self.run_id})
    }

    fn run_terminal(&mut self, payload: &Payload, body: &Value, kind: &str, out: &mut Vec<Value>) {
        self.close_model(out);
        self.close_step(out);
        self.ended = true;
        match payload {
            Payload::RunFailed(p) => {
                out.push(custom(kind, body.clone()));
                out.push(json!({"type": "RUN_ERROR", "message": p.error.as_str(), "code": "keel.run.failed"}));
            }
            Payload::RunCancelled(_) => {
                out.push(custom(kind, body.clone()));
                out.push(
                    json!({"type": "RUN_FINISHED", "threadId": self.run_id, "runId": self.run_id,
                    "outcome": {"type": "cancelled"}}),
                );
            }
            _ => {
                let mut finished = json!({"type": "RUN_FINISHED", "threadId": self.run_id,
                    "runId": self.run_id, "outcome": {"type": "success"}});
                if let Some(usage) = body.get("usage") {
                    out.push(custom("keel.usage", usage.clone()));
                    finished["usage"] = json!([usage_json(usage)]);
                }
                out.push(finished);
            }
        }
    }

    fn text_delta(&mut self, operation_id: &str, text: &str, line: &str, out: &mut Vec<Value>) {
        if self
            .text
            .as_ref()
            .is_some_and(|t| t.operation_id != operation_id)
        {
            self.close_text(out);
        }
        let open = self.text.get_or_insert_with(|| {
            let message_id = format!("{}.{operation_id}", self.run_id);
            out.push(
                json!({"type": "TEXT_MESSAGE_START", "messageId": message_id, "role": "assistant"}),
            );
            OpenText {
                message_id,
                operation_id: operation_id.to_owned(),
                line: line.to_owned(),
                text: String::new(),
                elided: 0,
            }
        });
        if open.elided == 0 && open.text.len() + text.len() <= MAX_TEXT_BYTES {
            open.text.push_str(text);
        } else {
            open.elided += text.len();
        }
        out.push(
            json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": open.message_id, "delta": text}),
        );
    }

    /// What a failed or cancelled model call leaves behind: its text
    /// message and tool calls, no longer part of the answer.
    fn discarded(&self) -> Option<Value> {
        if self.text.is_none() && self.calls.is_empty() {
            return None;
        }
        let calls: Vec<&str> = self.calls.iter().map(|c| c.call_id.as_str()).collect();
        Some(json!({
            "messageId": self.text.as_ref().map(|t| t.message_id.clone()),
            "toolCallIds": calls,
        }))
    }

    fn tool_result(&self, call_id: &str, content: &str, error: Option<&str>) -> Value {
        let mut result = json!({"type": "TOOL_CALL_RESULT", "messageId": format!("{}.{call_id}.result", self.run_id),
            "toolCallId": call_id, "content": content, "role": "tool"});
        if let Some(error) = error {
            result["error"] = json!(error);
        }
        result
    }

    fn close_text(&mut self, out: &mut Vec<Value>) {
        if let Some(t) = self.text.take() {
            out.push(json!({"type": "TEXT_MESSAGE_END", "messageId": t.message_id}));
        }
    }

    fn close_call(&mut self, call_id: &str, out: &mut Vec<Value>) {
        if let Some(i) = self.calls.iter().position(|c| c.call_id == call_id) {
            let call = self.calls.remove(i);
            out.push(json!({"type": "TOOL_CALL_END", "toolCallId": call.call_id}));
        }
    }

    fn close_model(&mut self, out: &mut Vec<Value>) {
        self.close_text(out);
        for call in std::mem::take(&mut self.calls) {
            out.push(json!({"type": "TOOL_CALL_END", "toolCallId": call.call_id}));
        }
    }

    fn close_step(&mut self, out: &mut Vec<Value>) {
        self.close_model(out);
        if let Some(turn) = self.step.take() {
            out.push(json!({"type": "STEP_FINISHED", "stepName": step_name(turn)}));
        }
    }

    /// The re-opened starts of the scopes open now: the step, the text
    /// message with its text so far, the tool calls with their arguments.
    fn reopen(&self, raw_at: &Value) -> Vec<Value> {
        let mut out = Vec::new();
        if let Some(turn) = self.step {
            out.push(with_raw(
                json!({"type": "STEP_STARTED", "stepName": step_name(turn)}),
                raw_at,
            ));
        }
        if let Some(t) = &self.text {
            let raw = serde_json::from_str(&t.line).unwrap_or(Value::Null);
            out.push(with_raw(json!({"type": "TEXT_MESSAGE_START", "messageId": t.message_id, "role": "assistant"}), &raw));
            out.push(with_raw(
                json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": t.message_id, "delta": t.text}),
                &raw,
            ));
            if t.elided > 0 {
                let value = json!({"messageId": t.message_id, "bytes": t.elided});
                out.push(with_raw(custom("keel.text_elided", value), &raw));
            }
        }
        for call in &self.calls {
            let raw = serde_json::from_str(&call.line).unwrap_or(Value::Null);
            out.extend(call_start(call).into_iter().map(|e| with_raw(e, &raw)));
        }
        out
    }
}

fn call_start(call: &OpenCall) -> Vec<Value> {
    let mut start =
        json!({"type": "TOOL_CALL_START", "toolCallId": call.call_id, "toolCallName": call.name});
    if let Some(parent) = &call.parent {
        start["parentMessageId"] = json!(parent);
    }
    vec![
        start,
        json!({"type": "TOOL_CALL_ARGS", "toolCallId": call.call_id, "delta": call.arguments}),
    ]
}

/// One Keel message as AG-UI messages (a tool message becomes one AG-UI
/// tool message per result).
fn agui_messages(message: &Message) -> Vec<Value> {
    let id = message.id().as_str();
    let text = message.joined_text();
    match message.role() {
        Role::Tool => message
            .parts()
            .iter()
            .filter_map(|p| match p {
                Part::ToolResult(r) => {
                    let call = r.call_id().as_str();
                    let mut m = json!({"id": format!("{id}.{call}"), "role": "tool",
                        "content": r.content(), "toolCallId": call});
                    if r.is_error() {
                        m["error"] = json!(r.content());
                    }
                    Some(m)
                }
                _ => None,
            })
            .collect(),
        Role::Assistant => {
            let calls: Vec<Value> = message
                .tool_calls()
                .map(|c| {
                    json!({"id": c.call_id().as_str(), "type": "function",
                    "function": {"name": c.name().as_str(), "arguments": c.arguments().as_str()}})
                })
                .collect();
            let mut m = json!({"id": id, "role": "assistant"});
            if !text.is_empty() {
                m["content"] = json!(text);
            }
            if !calls.is_empty() {
                m["toolCalls"] = json!(calls);
            }
            vec![m]
        }
        role => vec![json!({"id": id, "role": role.as_str(), "content": text})],
    }
}

/// Why an AG-UI event breaks this view's own schema.
pub fn check_event(event: &Value) -> Result<(), String> {
    let ty = event.get("type").and_then(Value::as_str).ok_or("no type")?;
    let required: &[&str] = match ty {
        "RUN_STARTED" => &["threadId", "runId"],
        "RUN_FINISHED" => &["threadId", "runId"],
        "RUN_ERROR" => &["message"],
        "STEP_STARTED" | "STEP_FINISHED" => &["stepName"],
        "TEXT_MESSAGE_START" | "TEXT_MESSAGE_END" => &["messageId"],
        "TEXT_MESSAGE_CONTENT" => &["messageId", "delta"],
        "TOOL_CALL_START" => &["toolCallId", "toolCallName"],
        "TOOL_CALL_ARGS" => &["toolCallId", "delta"],
        "TOOL_CALL_END" => &["toolCallId"],
        "TOOL_CALL_RESULT" => &["messageId", "toolCallId", "content"],
        "CUSTOM" => &["name"],
        "MESSAGES_SNAPSHOT" => &[],
        other => return Err(format!("{other} is not a type this view emits")),
    };
    for field in required {
        if !event.get(*field).is_some_and(Value::is_string) {
            return Err(format!("{ty}.{field} is not a string"));
        }
    }
    if ty == "MESSAGES_SNAPSHOT" && !event.get("messages").is_some_and(Value::is_array) {
        return Err("MESSAGES_SNAPSHOT.messages is not an array".to_owned());
    }
    if event.get("rawEvent").is_none_or(Value::is_null) {
        return Err(format!("{ty} has no rawEvent"));
    }
    Ok(())
}

/// Checks a whole stream the way `@ag-ui/client`'s `verifyEvents` does
/// for the types this view emits: `RUN_STARTED` first, nothing after
/// `RUN_FINISHED`/`RUN_ERROR`, every END after its START with no START
/// of an open id, and no open step, message or call at `RUN_FINISHED`.
pub fn check_stream(events: &[Value]) -> Result<(), String> {
    use std::collections::HashSet;
    let mut open: [HashSet<String>; 3] = Default::default();
    let mut ended = false;
    for (i, event) in events.iter().enumerate() {
        check_event(event).map_err(|e| format!("event {i}: {e}"))?;
        let ty = event["type"].as_str().unwrap_or_default();
        if ended || (i == 0) != (ty == "RUN_STARTED") {
            return Err(format!("event {i}: {ty} out of place"));
        }
        let (set, id, opens) = match ty {
            "STEP_STARTED" | "STEP_FINISHED" => (0, "stepName", ty == "STEP_STARTED"),
            "TEXT_MESSAGE_START" | "TEXT_MESSAGE_END" => (1, "messageId", ty.ends_with("START")),
            "TOOL_CALL_START" | "TOOL_CALL_END" => (2, "toolCallId", ty.ends_with("START")),
            "TEXT_MESSAGE_CONTENT" | "TOOL_CALL_ARGS" => {
                let (set, id) = if ty == "TOOL_CALL_ARGS" {
                    (2, "toolCallId")
                } else {
                    (1, "messageId")
                };
                let key = event[id].as_str().unwrap_or_default();
                if !open[set].contains(key) {
                    return Err(format!("event {i}: {ty} of {key}, which is not open"));
                }
                continue;
            }
            "RUN_FINISHED" | "RUN_ERROR" => {
                if ty == "RUN_FINISHED" && open.iter().any(|s| !s.is_empty()) {
                    return Err(format!("event {i}: RUN_FINISHED with scopes open"));
                }
                ended = true;
                continue;
            }
            _ => continue,
        };
        let key = event[id].as_str().unwrap_or_default().to_owned();
        let fine = if opens {
            open[set].insert(key.clone())
        } else {
            open[set].remove(&key)
        };
        if !fine {
            return Err(format!("event {i}: {ty} of {key} does not pair"));
        }
    }
    Ok(())
}

mod prelude;
#[cfg(test)]
mod tests;

pub use prelude::{Prelude, PreludeFold, SNAPSHOT_OPEN, SnapshotWriter, prelude};
