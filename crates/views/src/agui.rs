//! AG-UI: a run's log as AG-UI events (the `@ag-ui/core` 1.0 schema).
//!
//! [`AguiMapper`] takes a run's events one by one, in seq order, and
//! returns the AG-UI events each maps to (at least one per Keel event,
//! each a [`Stamped`] [`AguiEvent`] carrying the Keel line as `rawEvent`;
//! [`Stamped::to_json`] is the wire text). [`prelude`] is what a
//! client joining at a cursor > 0 gets first: `RUN_STARTED`, a
//! `MESSAGES_SNAPSHOT` rebuilt from the log (`history::HistoryFold`), and
//! the re-opened starts of the scopes still open at the cursor (the turn's
//! step, the model call's text message with its text so far, its tool
//! calls with their arguments); the tail then maps normally. A daemon
//! builds it a page at a time and writes the snapshot a message at a time
//! ([`PreludeFold`], [`SnapshotWriter`]), never holding the run. The mapping,
//! event by event, is `docs/rfc/implemented/2026-12-02-ag-ui-view.md`.
//!
//! ```
//! use keel_eventlog::Event;
//! use keel_views::agui::{AguiEvent, AguiMapper};
//! let line = r#"{"kind":"run.started","payload":{"model":"m"},"run_id":"run_1","seq":1,"ts":5000}"#;
//! let event = Event::decode(line).expect("a canonical line");
//! let mapped = AguiMapper::new().map(&event).expect("a run's first event");
//! assert!(matches!(mapped[0].event(), AguiEvent::RunStarted { .. }));
//! assert_eq!(
//!     mapped[0].to_json(),
//!     format!(r#"{{"rawEvent":{line},"runId":"run_1","threadId":"run_1","timestamp":5,"type":"RUN_STARTED"}}"#)
//! );
//! ```
//!
//! Reasoning parts are AG-UI reasoning spans and messages, their
//! signature or redacted value a `REASONING_ENCRYPTED_VALUE`; a join
//! inside one re-opens it (the mapping is `agui/reasoning.rs`). A tool's
//! images and a user's images and files are AG-UI content parts
//! (`image` with a `data` or `url` source, `document` with the file's
//! name in `metadata`) in `TOOL_CALL_RESULT` and `MESSAGES_SNAPSHOT`.
//!
//! Bounds: the mapper holds one open step, one open text message and one
//! open reasoning message (each's text kept up to [`MAX_TEXT_BYTES`] for a
//! later prelude; what is beyond is counted, not kept, and the prelude
//! says so in a `keel.text_elided` event), the ids of the open model
//! call's reasoning messages (for `keel.discarded`) and at most [`MAX_OPEN_CALLS`] open tool calls (one more is the
//! typed error [`AguiError::TooManyOpenCalls`]). Each event is mapped on
//! its own: nothing is buffered across events beyond that state.
//!
//! Compaction: a model call with a `purpose` (a compaction call) is not
//! an assistant message, so its stream (text, reasoning, tool calls) maps
//! to the default `CUSTOM keel.model.*` events, never `TEXT_MESSAGE_*`;
//! `context.compacted` is `CUSTOM keel.compacted` and
//! `context.compaction_failed` `CUSTOM keel.compaction_failed`, each
//! carrying the payload as logged. The `MESSAGES_SNAPSHOT` is the
//! transcript ([`HistoryFold::take_completed`](keel_eventlog::history::HistoryFold::take_completed)):
//! every message that happened, the compacted ones too, never the summary.
//!
//! Values a newer version added to an extensible wire enum (a finish
//! reason, problem kind, retry position, tool outcome or retry) need no
//! mapping here: they reach the client verbatim inside the `keel.*`
//! `CUSTOM` events, which carry the payload as it is in the log.
//!
//! Files: this one is the mapper; `agui/reasoning.rs` its reasoning
//! events; `agui/event.rs` the typed events and their encoding, `agui/message.rs` the snapshot's typed messages,
//! `agui/prelude.rs` a join's prelude, `agui/check.rs` the view's own
//! schema and stream checks ([`check_event`], [`check_stream`]).
//!
//! A run tree (the run and its sub-runs, interleaved) maps through
//! [`AguiTree`]: each sub-run is a subagent of the root's run
//! (`SUBAGENT_STARTED` … `SUBAGENT_FINISHED`/`SUBAGENT_ERROR`, its events
//! carrying `subagentRunId`); a sub-run followed on its own names its
//! parent as `RUN_STARTED.parentRunId` (`agui/tree.rs`).
//!
//! The agent endpoint (`POST /v1/agui`, a client driving a run rather
//! than following one): [`input`] reads the client's `RunAgentInput`,
//! [`drive`] is the response's stream ([`drive::AgentStream`]: the
//! client's ids, this mapping, and the pauses at approvals and frontend
//! tool calls).

use keel_eventlog::{Event, Payload};
use serde_json::Value;

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
    /// An approval about a tool call the run's turn did not make (an
    /// agent stream names the tool in its interrupt).
    #[error("event {seq} asks about a tool call the turn did not make (rule agui.known_call)")]
    UnknownCall {
        /// The event.
        seq: u64,
    },
    /// A prelude asked for at or after the run's terminal (nothing follows).
    #[error("the run ended at or before the cursor (rule agui.prelude_before_terminal)")]
    Ended,
    /// A tree stream's event of a run that is not the root and was not
    /// started as a sub-run of a run of the tree.
    #[error("event {seq} of run {run_id} is not of a sub-run of the tree (rule agui.tree_linked)")]
    Unlinked {
        /// The run.
        run_id: String,
        /// The event.
        seq: u64,
    },
    /// A tree stream's run event out of its seq order.
    #[error("run {run_id}: seq {found} does not follow {last} (rule agui.tree_in_order)")]
    OutOfOrder {
        /// The run.
        run_id: String,
        /// The last seq of that run mapped.
        last: u64,
        /// The seq offered.
        found: u64,
    },
    /// More runs in one tree stream than the bound.
    #[error("the tree has more than {max} runs (rule agui.tree_runs_bound)")]
    TooManyRuns {
        /// The bound.
        max: usize,
    },
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
    /// The run that started this one (a sub-run's `run.started.parent`).
    parent_run_id: Option<String>,
    ended: bool,
    last_seq: u64,
    step: Option<u64>,
    text: Option<OpenText>,
    /// The open reasoning message (kept as a text message is).
    reasoning: Option<OpenText>,
    /// The reasoning messages of the open model call, in order.
    attempt_reasoning: Vec<String>,
    calls: Vec<OpenCall>,
    /// The open model call when it has a `purpose` (a compaction call):
    /// its stream is not an assistant message, so it maps to `CUSTOM`.
    purposed: Option<String>,
}

fn custom(name: &str, value: Value) -> AguiEvent {
    AguiEvent::Custom {
        name: name.to_owned(),
        value: CustomValue::Logged(value),
    }
}

fn step_name(turn: u64) -> String {
    format!("turn {turn}")
}

impl AguiMapper {
    /// A mapper for a stream that starts at seq 1.
    pub fn new() -> AguiMapper {
        AguiMapper::default()
    }

    /// Maps the next event: the AG-UI events it stands for, in order, each
    /// stamped with the event's line as `rawEvent` (at least one per event).
    pub fn map(&mut self, event: &Event) -> Result<Vec<Stamped>, AguiError> {
        let raw: Value =
            serde_json::from_str(event.line()).map_err(|e| AguiError::Undecodable {
                seq: event.seq(),
                detail: e.to_string(),
            })?;
        let out = self.step(event, raw.get("payload"))?;
        let stamp = Stamp::of(raw);
        Ok(out
            .into_iter()
            .map(|e| Stamped::new(e, stamp.clone()))
            .collect())
    }

    /// Takes the next event as [`AguiMapper::map`] does (the same state,
    /// the same refusals) without building what it maps to: for folding a
    /// prefix of the run (a join's prelude) at the cost of decoding it.
    pub fn advance(&mut self, event: &Event) -> Result<(), AguiError> {
        self.step(event, None).map(drop)
    }

    /// The state change of the next event, and (with the payload's JSON
    /// `body`, for the `CUSTOM` events that carry it) what it maps to.
    fn step(&mut self, event: &Event, body: Option<&Value>) -> Result<Vec<AguiEvent>, AguiError> {
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
        out: &mut Vec<AguiEvent>,
    ) -> Result<(), AguiError> {
        match payload {
            Payload::RunStarted(p) => {
                self.started = Some(line.to_owned());
                self.parent_run_id = p.parent.as_ref().map(|l| l.run_id.as_str().to_owned());
                out.push(self.run_started());
            }
            Payload::TurnStarted(p) => {
                self.close_step(out);
                self.step = Some(p.turn);
                out.push(AguiEvent::StepStarted {
                    step_name: step_name(p.turn),
                });
            }
            Payload::TurnCompleted(_) => self.close_step(out),
            Payload::TurnFailed(_) | Payload::TurnCancelled(_) => {
                self.close_step(out);
                out.push(custom(kind, body.clone()));
            }
            Payload::ModelStarted(p) => {
                self.attempt_reasoning.clear();
                self.purposed = p
                    .purpose
                    .as_ref()
                    .map(|_| p.operation_id.as_str().to_owned());
            }
            _ if self.compaction(payload, body, out) => {}
            Payload::ReasoningDelta(p) => {
                self.reasoning_delta(p.operation_id.as_str(), &p.text, line, out);
            }
            Payload::ReasoningEnd(p) => self.reasoning_end(p, line, out),
            Payload::TextDelta(p) => self.text_delta(p.operation_id.as_str(), &p.text, line, out),
            Payload::ToolCall(p) => self.tool_call(p, line, out)?,
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
                    out.push(AguiEvent::Custom {
                        name: "keel.discarded".to_owned(),
                        value: CustomValue::Discarded(discarded),
                    });
                }
            }
            Payload::ToolCompleted(p) => {
                let id = p.call_id.as_str();
                self.close_call(id, out);
                let content = message::tool_content(&p.output, &p.images);
                out.push(self.tool_result(id, content, None));
            }
            Payload::ToolFailed(p) => {
                let id = p.call_id.as_str();
                self.close_call(id, out);
                let content = Content::Text(p.error.as_str().to_owned());
                out.push(self.tool_result(id, content, Some(p.error.as_str())));
                out.push(custom(kind, body.clone()));
            }
            Payload::RunCompleted(_) | Payload::RunCancelled(_) | Payload::RunFailed(_) => {
                self.run_terminal(payload, body, kind, out);
            }
            _ => {}
        }
        Ok(())
    }

    /// Maps a compaction's events, and says whether `payload` was one: a
    /// compaction call's stream (its text is the summary, shown by
    /// `keel.compacted`) stays `CUSTOM` (the default), never an assistant
    /// message; its outcome is `keel.compacted` or `keel.compaction_failed`.
    fn compaction(&self, payload: &Payload, body: &Value, out: &mut Vec<AguiEvent>) -> bool {
        let operation_id = match payload {
            Payload::ContextCompacted(_) => {
                out.push(custom("keel.compacted", body.clone()));
                return true;
            }
            Payload::ContextCompactionFailed(_) => {
                out.push(custom("keel.compaction_failed", body.clone()));
                return true;
            }
            Payload::ReasoningDelta(p) => &p.operation_id,
            Payload::ReasoningEnd(p) => &p.operation_id,
            Payload::TextDelta(p) => &p.operation_id,
            Payload::ToolCall(p) => &p.operation_id,
            _ => return false,
        };
        self.purposed.as_deref() == Some(operation_id.as_str())
    }

    fn run_started(&self) -> AguiEvent {
        AguiEvent::RunStarted {
            thread_id: self.run_id.clone(),
            run_id: self.run_id.clone(),
            parent_run_id: self.parent_run_id.clone(),
        }
    }

    fn run_finished(&self, outcome: RunOutcome, usage: Option<&Value>) -> AguiEvent {
        AguiEvent::RunFinished {
            thread_id: self.run_id.clone(),
            run_id: self.run_id.clone(),
            outcome,
            usage: usage.map(|u| vec![TokenUsage::of(u)]),
        }
    }

    fn run_terminal(
        &mut self,
        payload: &Payload,
        body: &Value,
        kind: &str,
        out: &mut Vec<AguiEvent>,
    ) {
        self.close_model(out);
        self.close_step(out);
        self.ended = true;
        match payload {
            Payload::RunFailed(p) => {
                out.push(custom(kind, body.clone()));
                out.push(AguiEvent::RunError {
                    message: p.error.as_str().to_owned(),
                    code: "keel.run.failed".to_owned(),
                });
            }
            Payload::RunCancelled(_) => {
                out.push(custom(kind, body.clone()));
                out.push(self.run_finished(RunOutcome::Cancelled, None));
            }
            _ => {
                let usage = body.get("usage");
                if let Some(usage) = usage {
                    out.push(custom("keel.usage", usage.clone()));
                }
                out.push(self.run_finished(RunOutcome::Success, usage));
            }
        }
    }

    fn text_delta(&mut self, operation_id: &str, text: &str, line: &str, out: &mut Vec<AguiEvent>) {
        self.close_reasoning(None, out);
        if self
            .text
            .as_ref()
            .is_some_and(|t| t.operation_id != operation_id)
        {
            self.close_text(out);
        }
        let open = self.text.get_or_insert_with(|| {
            let message_id = format!("{}.{operation_id}", self.run_id);
            out.push(AguiEvent::TextMessageStart {
                message_id: message_id.clone(),
                role: TextRole::Assistant,
            });
            OpenText {
                message_id,
                operation_id: operation_id.to_owned(),
                line: line.to_owned(),
                text: String::new(),
                elided: 0,
            }
        });
        open.keep(text);
        out.push(AguiEvent::TextMessageContent {
            message_id: open.message_id.clone(),
            delta: text.to_owned(),
        });
    }

    fn tool_call(
        &mut self,
        p: &keel_eventlog::ToolCall,
        line: &str,
        out: &mut Vec<AguiEvent>,
    ) -> Result<(), AguiError> {
        if self.calls.len() >= MAX_OPEN_CALLS {
            return Err(AguiError::TooManyOpenCalls {
                seq: self.last_seq,
                max: MAX_OPEN_CALLS,
            });
        }
        self.close_reasoning(None, out);
        let call = OpenCall {
            call_id: p.call_id.as_str().to_owned(),
            name: p.name.as_str().to_owned(),
            arguments: p.arguments.as_str().to_owned(),
            parent: self.text.as_ref().map(|t| t.message_id.clone()),
            line: line.to_owned(),
        };
        self.close_call(&call.call_id, out);
        out.extend(call.start());
        self.calls.push(call);
        Ok(())
    }

    /// What a failed or cancelled model call leaves behind: its text
    /// message and tool calls, no longer part of the answer.
    fn discarded(&self) -> Option<Discarded> {
        if self.text.is_none() && self.calls.is_empty() && self.attempt_reasoning.is_empty() {
            return None;
        }
        Some(Discarded {
            message_id: self.text.as_ref().map(|t| t.message_id.clone()),
            tool_call_ids: self.calls.iter().map(|c| c.call_id.clone()).collect(),
            reasoning_message_ids: self.attempt_reasoning.clone(),
        })
    }

    fn tool_result(&self, call_id: &str, content: Content, error: Option<&str>) -> AguiEvent {
        AguiEvent::ToolCallResult {
            message_id: format!("{}.{call_id}.result", self.run_id),
            tool_call_id: call_id.to_owned(),
            content,
            role: ToolRole::Tool,
            error: error.map(str::to_owned),
        }
    }

    fn close_text(&mut self, out: &mut Vec<AguiEvent>) {
        if let Some(t) = self.text.take() {
            out.push(AguiEvent::TextMessageEnd {
                message_id: t.message_id,
            });
        }
    }

    fn close_call(&mut self, call_id: &str, out: &mut Vec<AguiEvent>) {
        if let Some(i) = self.calls.iter().position(|c| c.call_id == call_id) {
            let call = self.calls.remove(i);
            out.push(AguiEvent::ToolCallEnd {
                tool_call_id: call.call_id,
            });
        }
    }

    fn close_model(&mut self, out: &mut Vec<AguiEvent>) {
        self.close_reasoning(None, out);
        self.close_text(out);
        for call in std::mem::take(&mut self.calls) {
            out.push(AguiEvent::ToolCallEnd {
                tool_call_id: call.call_id,
            });
        }
    }

    fn close_step(&mut self, out: &mut Vec<AguiEvent>) {
        self.close_model(out);
        if let Some(turn) = self.step.take() {
            out.push(AguiEvent::StepFinished {
                step_name: step_name(turn),
            });
        }
    }

    /// The re-opened starts of the scopes open now: the step (stamped
    /// `at`), the text message with its text so far, the tool calls with
    /// their arguments (each stamped with the line that opened it).
    fn reopen(&self, at: &Stamp) -> Vec<Stamped> {
        self.reopen_scopes(at, true)
    }

    /// The scopes open now re-opened, `with_content` (a join's prelude:
    /// the text and arguments so far) or without (a client that has the
    /// content and needs only the starts again: an agent stream resumed
    /// after a cut).
    fn reopen_scopes(&self, at: &Stamp, with_content: bool) -> Vec<Stamped> {
        let mut out = Vec::new();
        if let Some(turn) = self.step {
            let step = AguiEvent::StepStarted {
                step_name: step_name(turn),
            };
            out.push(Stamped::new(step, at.clone()));
        }
        if let Some(r) = &self.reasoning {
            let stamp = Stamp::of_line(&r.line);
            let events: Vec<AguiEvent> = match with_content {
                true => r.reopen_reasoning().collect(),
                false => r.reasoning_starts().into(),
            };
            out.extend(events.into_iter().map(|e| Stamped::new(e, stamp.clone())));
        }
        if let Some(t) = &self.text {
            let stamp = Stamp::of_line(&t.line);
            let mut events = vec![AguiEvent::TextMessageStart {
                message_id: t.message_id.clone(),
                role: TextRole::Assistant,
            }];
            if with_content {
                events.push(AguiEvent::TextMessageContent {
                    message_id: t.message_id.clone(),
                    delta: t.text.clone(),
                });
                events.extend(t.elided_event());
            }
            out.extend(events.into_iter().map(|e| Stamped::new(e, stamp.clone())));
        }
        for call in &self.calls {
            let stamp = Stamp::of_line(&call.line);
            let [start, arguments] = call.start();
            out.push(Stamped::new(start, stamp.clone()));
            if with_content {
                out.push(Stamped::new(arguments, stamp));
            }
        }
        out
    }
}

impl OpenText {
    /// Keeps `text` for a later prelude, up to [`MAX_TEXT_BYTES`]; what is
    /// beyond is counted.
    fn keep(&mut self, text: &str) {
        if self.elided == 0 && self.text.len() + text.len() <= MAX_TEXT_BYTES {
            self.text.push_str(text);
        } else {
            self.elided += text.len();
        }
    }

    /// `keel.text_elided`, when part of the text was not kept.
    fn elided_event(&self) -> Option<AguiEvent> {
        (self.elided > 0).then(|| AguiEvent::Custom {
            name: "keel.text_elided".to_owned(),
            value: CustomValue::TextElided(TextElided {
                message_id: self.message_id.clone(),
                bytes: self.elided,
            }),
        })
    }
}

impl OpenCall {
    /// `TOOL_CALL_START` and `TOOL_CALL_ARGS` (the arguments whole).
    fn start(&self) -> [AguiEvent; 2] {
        [
            AguiEvent::ToolCallStart {
                tool_call_id: self.call_id.clone(),
                tool_call_name: self.name.clone(),
                parent_message_id: self.parent.clone(),
            },
            AguiEvent::ToolCallArgs {
                tool_call_id: self.call_id.clone(),
                delta: self.arguments.clone(),
            },
        ]
    }
}

mod check;
pub mod drive;
mod event;
pub mod input;
mod message;
mod prelude;
mod reasoning;
#[cfg(test)]
mod tests;
mod tree;

pub use check::{check_event, check_stream};
pub use event::{
    AguiEvent, Content, CustomValue, Discarded, EncryptedSubtype, Interrupt, ReasoningRole,
    RunOutcome, Stamp, Stamped, SubagentOutcome, TextElided, TextRole, TokenUsage, ToolRole,
};
pub use message::{AguiMessage, AguiToolCall, FunctionCall};
pub use prelude::{Prelude, PreludeFold, SNAPSHOT_OPEN, SnapshotWriter, prelude};
pub use tree::AguiTree;
