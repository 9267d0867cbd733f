//! The Vercel AI SDK's UI message stream (v1) as a view of one run's log.
//!
//! [`UiStream`] is a pure, stateful mapping: it is fed a run's events in
//! seq order and answers each with the chunks it becomes. One run is one
//! assistant `UIMessage` whose id is the run id; each turn is a step. The
//! mapping, event by event (recorded in
//! `docs/rfc/implemented/2026-12-02-ai-sdk-ui-stream.md`):
//!
//! | Keel event | chunks |
//! | --- | --- |
//! | (stream opens) | `start` {messageId} |
//! | `turn.started` | `start-step` |
//! | `model.reasoning_delta` | `text-end` (if open), `reasoning-start` (first delta of a reasoning part), `reasoning-delta` |
//! | `model.reasoning_end` | `reasoning-end` {providerMetadata.keel: provider, signed}; a redacted part: `reasoning-start`, `reasoning-end` {providerMetadata.keel: provider, redacted} |
//! | `model.text_delta` | `reasoning-end` (if open), `text-start` (first delta of a text part), `text-delta` |
//! | `model.tool_call` | `reasoning-end`/`text-end` (if open), `tool-input-available` |
//! | `model.completed` | `reasoning-end`/`text-end` (if open) |
//! | `model.failed` | `reasoning-end`/`text-end` (if open); when the attempt had streamed output (`partial`), `data-keel-discarded` naming its text parts (and `reasoning_ids`, when it had reasoning) and tool calls |
//! | `model.cancelled` | `reasoning-end`/`text-end` (if open) |
//! | `interaction.started` (approval) | `tool-approval-request` {approvalId = interaction id} |
//! | `interaction.completed` denied | `tool-output-denied` |
//! | `interaction.failed` | `tool-output-error` |
//! | `tool.completed` | `tool-output-available` (the output string), then a `file` {mediaType, url} per image the tool returned: a `data:` URL of the bytes, or the image's `https` URL (`image/*` when it names no type) |
//! | `tool.failed` | `tool-output-error`, plus `data-keel-tool-failed` with `outcome`/`retry` when typed |
//! | `context.compacted` | `data-keel-compaction` {id `compaction-<turn>`, data {replaces, tokens_before, tokens_after}, transient false} |
//! | `context.compaction_failed` | `data-keel-compaction-failed` {id `compaction-<turn>`, data {rule, detail, tokens_before}, transient false} |
//! | `turn.completed` / `failed` / `cancelled` | `finish-step` |
//! | `run.completed` | `finish` {finishReason of the last model call, messageMetadata.keel} |
//! | `run.failed` | `error`, `finish` {finishReason `error`} |
//! | `run.cancelled` | `abort` |
//!
//! A model call with a `purpose` (a compaction call) is not part of the
//! assistant message: its `model.*` events (text, reasoning, tool calls,
//! terminal) become nothing; its outcome is the `data-keel-compaction*`
//! part.
//!
//! Everything else (`run.started`, `run.input`, `model.started`,
//! `tool.started`, `tool.cancelled`, `interaction.cancelled`, extension
//! kinds) becomes nothing. After the run's terminal the framing adds
//! `[DONE]`.
//!
//! Values a newer version added (rule `wire_value.syntax`, kept verbatim
//! by the log): an unknown finish reason becomes the SDK's `other`; an
//! unknown retry position reads as `partial` (the attempt's output is
//! marked discarded, `position` carrying the value verbatim); an unknown
//! problem kind, tool `outcome` or `retry` is passed through verbatim in
//! the `data-keel-*` parts.
//!
//! [`UiStream::paused`] says when the run waits only for approvals: every
//! tool call of the turn without a result has a pending approval and no
//! model call is open. The daemon ends a chat response there (the client
//! answers with its next request), as the SDK's own servers do.
//!
//! A run tree (the run and the sub-runs its agent tools started, as a
//! tree follower delivers them) maps through [`UiTree`]: the root as
//! above, each sub-run a `data-keel-sub-run` part nested by `call_id`
//! under the tool part of the call that started it (`ui_stream/tree.rs`).
//!
//! Reasoning parts are ids `reasoning-<n>`, counted across the run as text
//! parts are (`text-<n>`), so each id names one part. A signature or a
//! redacted value is never sent: the SDK client has nothing to do with it
//! (the daemon keeps the history), so `providerMetadata.keel` says only
//! whether there was one. The stream is the run's assistant message, so a
//! user's images and files (in `run.input`) are not in it: the client sent
//! them.

use keel_eventlog::{Event, EventDecodeError, Payload};
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};

mod tree;
pub use tree::UiTree;

/// The response header naming the protocol.
pub const STREAM_HEADER: (&str, &str) = ("x-vercel-ai-ui-message-stream", "v1");
/// The data of the last SSE frame.
pub const DONE: &str = "[DONE]";

/// One chunk of the UI message stream v1 (the SDK's `uiMessageChunkSchema`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(
    tag = "type",
    rename_all = "kebab-case",
    rename_all_fields = "camelCase"
)]
#[allow(missing_docs)]
pub enum Chunk {
    /// The message begins; its id is the run id.
    Start { message_id: String },
    /// A turn begins.
    StartStep,
    /// A text part begins.
    TextStart { id: String },
    /// Text of an open text part.
    TextDelta { id: String, delta: String },
    /// A text part ends.
    TextEnd { id: String },
    /// A reasoning part begins.
    ReasoningStart { id: String },
    /// Text of an open reasoning part.
    ReasoningDelta { id: String, delta: String },
    /// A reasoning part ends; `provider_metadata.keel` says which provider
    /// it came from and whether it was signed or redacted.
    ReasoningEnd {
        id: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        provider_metadata: Option<Value>,
    },
    /// A file the message holds (a tool's image): `url` is a `data:` URL
    /// of the bytes or an `https` URL.
    File { url: String, media_type: String },
    /// A tool call the model made, with its arguments.
    ToolInputAvailable {
        tool_call_id: String,
        tool_name: String,
        input: Value,
    },
    /// The call waits for approval; `approval_id` is the interaction id.
    ToolApprovalRequest {
        approval_id: String,
        tool_call_id: String,
    },
    /// The tool's output.
    ToolOutputAvailable { tool_call_id: String, output: Value },
    /// The tool (or its approval) failed.
    ToolOutputError {
        tool_call_id: String,
        error_text: String,
    },
    /// The approval was denied; the tool did not run.
    ToolOutputDenied { tool_call_id: String },
    /// A model attempt failed after it had streamed output: that output
    /// is discarded (a retry, if any, starts new parts).
    #[serde(rename = "data-keel-discarded")]
    Discarded { id: String, data: Value },
    /// A typed tool failure's outcome and retry disposition.
    #[serde(rename = "data-keel-tool-failed")]
    ToolFailed { id: String, data: Value },
    /// A compaction replaced a range of the history by a summary:
    /// `{replaces, tokens_before, tokens_after}`; kept in the message
    /// (`transient: false`).
    #[serde(rename = "data-keel-compaction")]
    Compaction {
        id: String,
        data: Value,
        transient: bool,
    },
    /// A sub-run of a tree stream ([`UiTree`]): `{run_id, parent_run_id,
    /// call_id, tool, status, turns, tool_calls}` (and `error`); its id is
    /// the sub-run's, so each update replaces the part.
    #[serde(rename = "data-keel-sub-run")]
    SubRun { id: String, data: Value },
    /// A compaction changed nothing: `{rule, detail, tokens_before}`; kept
    /// in the message (`transient: false`).
    #[serde(rename = "data-keel-compaction-failed")]
    CompactionFailed {
        id: String,
        data: Value,
        transient: bool,
    },
    /// A turn ended.
    FinishStep,
    /// The run ended; `finish_reason` is the SDK's vocabulary.
    Finish {
        #[serde(skip_serializing_if = "Option::is_none")]
        finish_reason: Option<&'static str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        message_metadata: Option<Value>,
    },
    /// The run was cancelled.
    Abort {
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// The run failed (or the stream could not go on).
    Error { error_text: String },
}

impl Chunk {
    /// The chunk's JSON, one SSE `data:` line.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| {
            json!({"type": "error", "errorText": format!("a chunk did not encode: {e}")})
                .to_string()
        })
    }
}

/// Why an event could not be mapped.
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    /// The payload does not decode for its kind.
    #[error("seq {seq}: {source}")]
    Payload {
        /// The event's seq.
        seq: u64,
        /// Why.
        #[source]
        source: EventDecodeError,
    },
    /// Events out of order (not seq + 1).
    #[error("seq {found} does not follow {last} (rule ui_stream.in_order)")]
    OutOfOrder {
        /// The last seq mapped.
        last: u64,
        /// The seq offered.
        found: u64,
    },
    /// An event after the stream's `finish`: nothing follows it.
    #[error("seq {seq} comes after the stream finished (rule ui_stream.after_end)")]
    AfterEnd {
        /// The seq offered.
        seq: u64,
    },
    /// A tree stream's event of a run that is not the root and was not
    /// started as a sub-run of a run of the tree.
    #[error(
        "event {seq} of run {run_id} is not of a sub-run of the tree (rule ui_stream.tree_linked)"
    )]
    Unlinked {
        /// The run.
        run_id: String,
        /// The event.
        seq: u64,
    },
    /// More runs in one tree stream than the bound.
    #[error("the tree has more than {max} runs (rule ui_stream.tree_runs_bound)")]
    TooManyRuns {
        /// The bound.
        max: usize,
    },
}

impl ViewError {
    /// The rule the refusal names.
    pub fn rule(&self) -> &'static str {
        match self {
            ViewError::Payload { .. } => "ui_stream.payload",
            ViewError::OutOfOrder { .. } => "ui_stream.in_order",
            ViewError::AfterEnd { .. } => "ui_stream.after_end",
            ViewError::Unlinked { .. } => "ui_stream.tree_linked",
            ViewError::TooManyRuns { .. } => "ui_stream.tree_runs_bound",
        }
    }
}

/// The mapping's state: open text part, the turn's tool calls and
/// pending approvals, the last finish reason.
#[derive(Debug, Default)]
pub struct UiStream {
    last_seq: u64,
    texts: u64,
    open_text: Option<String>,
    reasonings: u64,
    open_reasoning: Option<String>,
    /// Text and reasoning parts and tool calls of the open model call.
    attempt_texts: Vec<String>,
    attempt_reasonings: Vec<String>,
    attempt_calls: Vec<String>,
    model_open: bool,
    /// Whether the open (or last) model call has a `purpose` (a
    /// compaction call): its stream is not part of the assistant message.
    purposed: bool,
    /// The turn's tool calls without a result.
    unfinished: BTreeSet<String>,
    /// Pending approvals: interaction id → call id.
    awaiting: BTreeMap<String, String>,
    finish: Option<&'static str>,
    ended: bool,
}

/// The SDK's name for a Keel finish reason.
fn finish_reason(wire: &str) -> &'static str {
    match wire {
        "stop" => "stop",
        "tool_calls" => "tool-calls",
        "length" => "length",
        "content_filter" => "content-filter",
        _ => "other",
    }
}

impl UiStream {
    /// A mapping at the start of a run.
    pub fn new() -> UiStream {
        UiStream::default()
    }

    /// The chunk a response opens with: the message is the run.
    pub fn start(run_id: &str) -> Chunk {
        Chunk::Start {
            message_id: run_id.to_owned(),
        }
    }

    /// Whether the run's terminal was mapped.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// Whether the run waits only for approvals (see the module docs).
    pub fn paused(&self) -> bool {
        !self.ended
            && !self.model_open
            && !self.awaiting.is_empty()
            && self
                .unfinished
                .iter()
                .all(|c| self.awaiting.values().any(|a| a == c))
    }

    /// The pending approvals: (interaction id, call id).
    pub fn awaiting(&self) -> impl Iterator<Item = (&str, &str)> {
        self.awaiting.iter().map(|(i, c)| (i.as_str(), c.as_str()))
    }

    /// The last seq mapped.
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// Closes the open text part and the open reasoning part (a model
    /// call's part ends when another item comes).
    fn close_text(&mut self, out: &mut Vec<Chunk>) {
        if let Some(id) = self.open_text.take() {
            out.push(Chunk::TextEnd { id });
        }
        self.close_reasoning(None, out);
    }

    fn close_reasoning(&mut self, metadata: Option<Value>, out: &mut Vec<Chunk>) {
        if let Some(id) = self.open_reasoning.take() {
            out.push(Chunk::ReasoningEnd {
                id,
                provider_metadata: metadata,
            });
        }
    }

    fn open_reasoning(&mut self, out: &mut Vec<Chunk>) -> String {
        if let Some(id) = &self.open_reasoning {
            return id.clone();
        }
        self.reasonings += 1;
        let id = format!("reasoning-{}", self.reasonings);
        self.attempt_reasonings.push(id.clone());
        self.open_reasoning = Some(id.clone());
        out.push(Chunk::ReasoningStart { id: id.clone() });
        id
    }

    fn reasoning_delta(&mut self, text: String, out: &mut Vec<Chunk>) {
        if let Some(id) = self.open_text.take() {
            out.push(Chunk::TextEnd { id });
        }
        let id = self.open_reasoning(out);
        out.push(Chunk::ReasoningDelta { id, delta: text });
    }

    /// The end of a reasoning part: the open one, or a redacted part
    /// whole (it has no deltas). The opaque value itself is not sent.
    fn reasoning_end(&mut self, p: &keel_eventlog::ReasoningEnd, out: &mut Vec<Chunk>) {
        let provider = p.provider.as_str();
        if p.redacted.is_some() {
            self.close_text(out);
            self.open_reasoning(out);
            let keel = json!({"keel": {"provider": provider, "redacted": true}});
            self.close_reasoning(Some(keel), out);
        } else {
            let keel = json!({"keel": {"provider": provider, "signed": p.signature.is_some()}});
            self.close_reasoning(Some(keel), out);
        }
    }

    /// The chunks of the next event (seq `last_seq() + 1`).
    pub fn feed(&mut self, event: &Event) -> Result<Vec<Chunk>, ViewError> {
        if self.ended() {
            return Err(ViewError::AfterEnd { seq: event.seq() });
        }
        if event.seq() != self.last_seq + 1 {
            return Err(ViewError::OutOfOrder {
                last: self.last_seq,
                found: event.seq(),
            });
        }
        let payload = event.payload().map_err(|source| ViewError::Payload {
            seq: event.seq(),
            source,
        })?;
        self.last_seq = event.seq();
        let mut out = Vec::new();
        if self.purposed_stream(&payload) {
            return Ok(out);
        }
        match payload {
            Payload::TurnStarted(_) => out.push(Chunk::StartStep),
            Payload::TurnCompleted(_) | Payload::TurnCancelled(_) | Payload::TurnFailed(_) => {
                self.close_text(&mut out);
                self.unfinished.clear();
                self.awaiting.clear();
                out.push(Chunk::FinishStep);
            }
            Payload::ModelStarted(p) => {
                self.model_open = true;
                self.purposed = p.purpose.is_some();
                self.attempt_texts.clear();
                self.attempt_reasonings.clear();
                self.attempt_calls.clear();
            }
            Payload::ReasoningDelta(p) => self.reasoning_delta(p.text, &mut out),
            Payload::ReasoningEnd(p) => self.reasoning_end(&p, &mut out),
            Payload::TextDelta(p) => self.text(p.text, &mut out),
            Payload::ToolCall(p) => {
                self.close_text(&mut out);
                let call = p.call_id.as_str().to_owned();
                self.attempt_calls.push(call.clone());
                self.unfinished.insert(call.clone());
                let input = serde_json::from_str(p.arguments.as_str())
                    .unwrap_or_else(|_| Value::String(p.arguments.as_str().to_owned()));
                out.push(Chunk::ToolInputAvailable {
                    tool_call_id: call,
                    tool_name: p.name.as_str().to_owned(),
                    input,
                });
            }
            Payload::ModelCompleted(p) => {
                self.close_text(&mut out);
                self.model_open = false;
                self.finish = Some(finish_reason(p.finish.as_str()));
            }
            Payload::ModelFailed(p) => {
                self.close_text(&mut out);
                self.model_open = false;
                // An unknown position reads as partial: the attempt's
                // output may be incomplete, so it is marked discarded.
                if p.position.may_have_output() {
                    out.push(self.discarded(&p));
                }
            }
            Payload::ModelCancelled(_) => {
                self.close_text(&mut out);
                self.model_open = false;
            }
            other => self.tools_and_run(other, &mut out),
        }
        Ok(out)
    }

    /// Whether `payload` belongs to a compaction call's stream (deltas,
    /// tool calls, its terminal): none of it is the assistant's message,
    /// so it maps to nothing (its outcome is `data-keel-compaction`).
    fn purposed_stream(&mut self, payload: &Payload) -> bool {
        if !self.purposed {
            return false;
        }
        match payload {
            Payload::TextDelta(_)
            | Payload::ReasoningDelta(_)
            | Payload::ReasoningEnd(_)
            | Payload::ToolCall(_) => true,
            Payload::ModelCompleted(_) | Payload::ModelFailed(_) | Payload::ModelCancelled(_) => {
                self.model_open = false;
                self.purposed = false;
                true
            }
            _ => false,
        }
    }

    fn text(&mut self, text: String, out: &mut Vec<Chunk>) {
        self.close_reasoning(None, out);
        let id = match &self.open_text {
            Some(id) => id.clone(),
            None => {
                self.texts += 1;
                let id = format!("text-{}", self.texts);
                self.attempt_texts.push(id.clone());
                self.open_text = Some(id.clone());
                out.push(Chunk::TextStart { id: id.clone() });
                id
            }
        };
        out.push(Chunk::TextDelta { id, delta: text });
    }

    /// The failed attempt's output, marked discarded; its tool calls get no
    /// result and leave the turn's unfinished set.
    fn discarded(&mut self, p: &keel_eventlog::ModelFailed) -> Chunk {
        for call in &self.attempt_calls {
            self.unfinished.remove(call);
        }
        let mut data = json!({
            "operation_id": p.operation_id.as_str(),
            "text_ids": std::mem::take(&mut self.attempt_texts),
            "tool_call_ids": std::mem::take(&mut self.attempt_calls),
            "problem": {"kind": p.problem.kind.as_str(), "retryable": p.problem.retryable},
            "position": p.position.as_str(),
        });
        // Named only when there was reasoning, so a run without any maps
        // as it did before reasoning existed.
        let reasoning = std::mem::take(&mut self.attempt_reasonings);
        if let (false, Some(members)) = (reasoning.is_empty(), data.as_object_mut()) {
            members.insert("reasoning_ids".to_owned(), json!(reasoning));
        }
        Chunk::Discarded {
            id: p.operation_id.as_str().to_owned(),
            data,
        }
    }

    fn tools_and_run(&mut self, payload: Payload, out: &mut Vec<Chunk>) {
        match payload {
            Payload::InteractionStarted(p) => {
                if let Some(call) = p.call_id {
                    let call = call.as_str().to_owned();
                    self.awaiting
                        .insert(p.interaction_id.as_str().to_owned(), call.clone());
                    out.push(Chunk::ToolApprovalRequest {
                        approval_id: p.interaction_id.as_str().to_owned(),
                        tool_call_id: call,
                    });
                }
            }
            Payload::InteractionCompleted(p) => {
                let call = self.awaiting.remove(p.interaction_id.as_str());
                if let (Some(call), "denied") = (call, p.decision.as_str()) {
                    self.unfinished.remove(&call);
                    out.push(Chunk::ToolOutputDenied { tool_call_id: call });
                }
            }
            Payload::InteractionFailed(p) => {
                if let Some(call) = self.awaiting.remove(p.interaction_id.as_str()) {
                    self.unfinished.remove(&call);
                    out.push(Chunk::ToolOutputError {
                        tool_call_id: call,
                        error_text: p.error.as_str().to_owned(),
                    });
                }
            }
            Payload::InteractionCancelled(p) => {
                self.awaiting.remove(p.interaction_id.as_str());
            }
            Payload::ToolCompleted(p) => {
                self.unfinished.remove(p.call_id.as_str());
                out.push(Chunk::ToolOutputAvailable {
                    tool_call_id: p.call_id.as_str().to_owned(),
                    output: Value::String(p.output),
                });
                out.extend(p.images.iter().map(|image| Chunk::File {
                    url: crate::media::image_url(image),
                    media_type: crate::media::image_media_type(image).to_owned(),
                }));
            }
            Payload::ToolFailed(p) => self.tool_failed(&p, out),
            Payload::ToolCancelled(p) => {
                self.unfinished.remove(p.call_id.as_str());
            }
            Payload::ContextCompacted(p) => out.push(Chunk::Compaction {
                id: format!("compaction-{}", p.turn),
                data: json!({
                    "replaces": p.replaces,
                    "tokens_before": p.tokens_before,
                    "tokens_after": p.tokens_after,
                }),
                transient: false,
            }),
            Payload::ContextCompactionFailed(p) => out.push(Chunk::CompactionFailed {
                id: format!("compaction-{}", p.turn),
                data: json!({
                    "rule": p.rule.rule_name(),
                    "detail": p.detail.as_str(),
                    "tokens_before": p.tokens_before,
                }),
                transient: false,
            }),
            other => self.run_end(other, out),
        }
    }

    fn tool_failed(&mut self, p: &keel_eventlog::ToolFailed, out: &mut Vec<Chunk>) {
        let call = p.call_id.as_str().to_owned();
        self.unfinished.remove(&call);
        out.push(Chunk::ToolOutputError {
            tool_call_id: call.clone(),
            error_text: p.error.as_str().to_owned(),
        });
        if p.outcome.is_some() || p.retry.is_some() {
            out.push(Chunk::ToolFailed {
                id: call.clone(),
                data: json!({
                    "call_id": call,
                    "tool": p.tool.as_str(),
                    "outcome": p.outcome,
                    "retry": p.retry,
                }),
            });
        }
    }

    fn run_end(&mut self, payload: Payload, out: &mut Vec<Chunk>) {
        match payload {
            Payload::RunCompleted(p) => {
                self.ended = true;
                let usage = p.usage.map(|u| {
                    json!({"input_tokens": u.input_tokens(), "output_tokens": u.output_tokens()})
                });
                out.push(Chunk::Finish {
                    finish_reason: Some(self.finish.unwrap_or("stop")),
                    message_metadata: Some(
                        json!({"keel": {"outcome": "completed", "usage": usage}}),
                    ),
                });
            }
            Payload::RunFailed(p) => {
                self.ended = true;
                out.push(Chunk::Error {
                    error_text: p.error.as_str().to_owned(),
                });
                out.push(Chunk::Finish {
                    finish_reason: Some("error"),
                    message_metadata: Some(json!({"keel": {"outcome": "failed"}})),
                });
            }
            Payload::RunCancelled(p) => {
                self.ended = true;
                out.push(Chunk::Abort {
                    reason: p.reason.map(|r| r.as_str().to_owned()),
                });
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_eventlog::EventKind;
    use serde_json::Value;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    /// Events as (kind, payload JSON) in seq order from 1; the chunks
    /// expected, as JSON, one entry per event; whether the stream is
    /// paused after the last one.
    fn check(events: &[(&str, &str)], expected: &[&[&str]], paused: bool) -> TestResult {
        let mut view = UiStream::new();
        for (i, ((kind, payload), want)) in events.iter().zip(expected).enumerate() {
            let seq = i as u64 + 1;
            let line = format!(
                r#"{{"kind":"{kind}","payload":{payload},"run_id":"run_1","seq":{seq},"ts":{seq}}}"#
            );
            let event = Event::decode(&line)?;
            let got: Vec<Value> = view
                .feed(&event)?
                .iter()
                .map(|c| serde_json::from_str(&c.to_json()))
                .collect::<Result<_, _>>()?;
            let want: Vec<Value> = want
                .iter()
                .map(|w| serde_json::from_str(w))
                .collect::<Result<_, _>>()?;
            assert_eq!(got, want, "seq {seq} ({kind})");
        }
        assert_eq!(events.len(), expected.len(), "one expectation per event");
        assert_eq!(view.paused(), paused, "paused");
        let _ = EventKind::RunInput;
        Ok(())
    }

    /// Found by the `ui_stream` fuzz target: an event after the run's end
    /// made a `start-step` after `finish`. It is refused, naming the rule.
    #[test]
    fn nothing_follows_the_finish() -> TestResult {
        let mut view = UiStream::new();
        let line = |seq: u64, kind: &str, payload: &str| {
            Event::decode(&format!(
                r#"{{"kind":"{kind}","payload":{payload},"run_id":"run_1","seq":{seq},"ts":{seq}}}"#
            ))
        };
        view.feed(&line(1, "run.started", r#"{"model":"m"}"#)?)?;
        view.feed(&line(2, "run.completed", "{}")?)?;
        assert!(view.ended());
        let err = view
            .feed(&line(3, "turn.started", r#"{"turn":1}"#)?)
            .err()
            .ok_or("an event after the finish was mapped")?;
        assert_eq!(err.rule(), "ui_stream.after_end");
        assert!(err.to_string().contains("seq 3"), "{err}");
        assert_eq!(view.last_seq(), 2, "nothing moved");
        Ok(())
    }

    #[test]
    fn text_and_tools_become_parts_and_steps() -> TestResult {
        check(
            &[
                ("run.started", r#"{"model":"m"}"#),
                ("turn.started", r#"{"turn":1}"#),
                (
                    "model.started",
                    r#"{"attempt":1,"model":"m","operation_id":"op_1","turn":1}"#,
                ),
                (
                    "model.text_delta",
                    r#"{"operation_id":"op_1","text":"Hi ","turn":1}"#,
                ),
                (
                    "model.text_delta",
                    r#"{"operation_id":"op_1","text":"there","turn":1}"#,
                ),
                (
                    "model.tool_call",
                    r#"{"arguments":{"city":"Oslo"},"call_id":"c1","name":"w","operation_id":"op_1","turn":1}"#,
                ),
                (
                    "model.completed",
                    r#"{"finish":"tool_calls","operation_id":"op_1","turn":1}"#,
                ),
                ("tool.started", r#"{"call_id":"c1","tool":"w","turn":1}"#),
                (
                    "tool.completed",
                    r#"{"call_id":"c1","output":"3","tool":"w","turn":1}"#,
                ),
                ("turn.completed", r#"{"turn":1}"#),
                (
                    "run.completed",
                    r#"{"usage":{"input_tokens":2,"output_tokens":1}}"#,
                ),
            ],
            &[
                &[],
                &[r#"{"type":"start-step"}"#],
                &[],
                &[
                    r#"{"type":"text-start","id":"text-1"}"#,
                    r#"{"type":"text-delta","id":"text-1","delta":"Hi "}"#,
                ],
                &[r#"{"type":"text-delta","id":"text-1","delta":"there"}"#],
                &[
                    r#"{"type":"text-end","id":"text-1"}"#,
                    r#"{"type":"tool-input-available","toolCallId":"c1","toolName":"w","input":{"city":"Oslo"}}"#,
                ],
                &[],
                &[],
                &[r#"{"type":"tool-output-available","toolCallId":"c1","output":"3"}"#],
                &[r#"{"type":"finish-step"}"#],
                &[
                    r#"{"type":"finish","finishReason":"tool-calls","messageMetadata":{"keel":{"outcome":"completed","usage":{"input_tokens":2,"output_tokens":1}}}}"#,
                ],
            ],
            false,
        )
    }

    #[test]
    fn a_partial_failure_is_marked_discarded() -> TestResult {
        check(
            &[
                ("run.started", r#"{}"#),
                ("turn.started", r#"{"turn":1}"#),
                (
                    "model.started",
                    r#"{"attempt":1,"model":"m","operation_id":"op_1","turn":1}"#,
                ),
                (
                    "model.text_delta",
                    r#"{"operation_id":"op_1","text":"Look","turn":1}"#,
                ),
                (
                    "model.failed",
                    r#"{"operation_id":"op_1","position":"partial","problem":{"kind":"unavailable","message":"x","retryable":true},"turn":1}"#,
                ),
                (
                    "model.started",
                    r#"{"attempt":2,"model":"m","operation_id":"op_2","turn":1}"#,
                ),
                (
                    "model.text_delta",
                    r#"{"operation_id":"op_2","text":"Done","turn":1}"#,
                ),
                (
                    "model.completed",
                    r#"{"finish":"stop","operation_id":"op_2","turn":1}"#,
                ),
                ("turn.completed", r#"{"turn":1}"#),
                ("run.failed", r#"{"error":"boom"}"#),
            ],
            &[
                &[],
                &[r#"{"type":"start-step"}"#],
                &[],
                &[
                    r#"{"type":"text-start","id":"text-1"}"#,
                    r#"{"type":"text-delta","id":"text-1","delta":"Look"}"#,
                ],
                &[
                    r#"{"type":"text-end","id":"text-1"}"#,
                    r#"{"type":"data-keel-discarded","id":"op_1","data":{"operation_id":"op_1","position":"partial","problem":{"kind":"unavailable","retryable":true},"text_ids":["text-1"],"tool_call_ids":[]}}"#,
                ],
                &[],
                &[
                    r#"{"type":"text-start","id":"text-2"}"#,
                    r#"{"type":"text-delta","id":"text-2","delta":"Done"}"#,
                ],
                &[r#"{"type":"text-end","id":"text-2"}"#],
                &[r#"{"type":"finish-step"}"#],
                &[
                    r#"{"type":"error","errorText":"boom"}"#,
                    r#"{"type":"finish","finishReason":"error","messageMetadata":{"keel":{"outcome":"failed"}}}"#,
                ],
            ],
            false,
        )
    }

    #[test]
    fn approvals_pause_and_denials_and_cancels_map() -> TestResult {
        let head: [(&str, &str); 5] = [
            ("run.started", r#"{}"#),
            ("turn.started", r#"{"turn":1}"#),
            (
                "model.started",
                r#"{"attempt":1,"model":"m","operation_id":"op_1","turn":1}"#,
            ),
            (
                "model.tool_call",
                r#"{"arguments":{},"call_id":"c1","name":"refund","operation_id":"op_1","turn":1}"#,
            ),
            (
                "model.completed",
                r#"{"finish":"tool_calls","operation_id":"op_1","turn":1}"#,
            ),
        ];
        let head_chunks: [&[&str]; 5] = [
            &[],
            &[r#"{"type":"start-step"}"#],
            &[],
            &[
                r#"{"type":"tool-input-available","toolCallId":"c1","toolName":"refund","input":{}}"#,
            ],
            &[],
        ];
        let asked = (
            "interaction.started",
            r#"{"call_id":"c1","interaction_id":"i_1","request":"approval","turn":1}"#,
        );
        let asked_chunk: &[&str] =
            &[r#"{"type":"tool-approval-request","approvalId":"i_1","toolCallId":"c1"}"#];
        let mut events = head.to_vec();
        events.push(asked);
        let mut chunks = head_chunks.to_vec();
        chunks.push(asked_chunk);
        check(&events, &chunks, true)?;
        events.push((
            "interaction.completed",
            r#"{"decision":"denied","interaction_id":"i_1","turn":1}"#,
        ));
        chunks.push(&[r#"{"type":"tool-output-denied","toolCallId":"c1"}"#]);
        check(&events, &chunks, false)?;
        events.push(("turn.cancelled", r#"{"turn":1}"#));
        chunks.push(&[r#"{"type":"finish-step"}"#]);
        events.push(("run.cancelled", r#"{"reason":"stop"}"#));
        chunks.push(&[r#"{"type":"abort","reason":"stop"}"#]);
        check(&events, &chunks, false)
    }

    /// Values a newer version added: an unknown position reads as partial
    /// (discarded, the value verbatim), an unknown problem kind, tool
    /// outcome and retry pass through verbatim, and an unknown finish
    /// reason becomes the SDK's `other`.
    #[test]
    fn unknown_wire_values_have_documented_fallbacks() -> TestResult {
        check(
            &[
                ("run.started", r#"{}"#),
                ("turn.started", r#"{"turn":1}"#),
                (
                    "model.started",
                    r#"{"attempt":1,"model":"m","operation_id":"op_1","turn":1}"#,
                ),
                (
                    "model.failed",
                    r#"{"operation_id":"op_1","position":"after_tool_calls","problem":{"kind":"quota","message":"x","retryable":true},"turn":1}"#,
                ),
                (
                    "model.started",
                    r#"{"attempt":2,"model":"m","operation_id":"op_2","turn":1}"#,
                ),
                (
                    "model.completed",
                    r#"{"finish":"paused_for_moderation","operation_id":"op_2","turn":1}"#,
                ),
                (
                    "tool.failed",
                    r#"{"call_id":"c1","error":"odd","outcome":"maybe","retry":"later","tool":"t","turn":1}"#,
                ),
                ("turn.completed", r#"{"turn":1}"#),
                ("run.completed", r#"{}"#),
            ],
            &[
                &[],
                &[r#"{"type":"start-step"}"#],
                &[],
                &[
                    r#"{"type":"data-keel-discarded","id":"op_1","data":{"operation_id":"op_1","position":"after_tool_calls","problem":{"kind":"quota","retryable":true},"text_ids":[],"tool_call_ids":[]}}"#,
                ],
                &[],
                &[],
                &[
                    r#"{"type":"tool-output-error","toolCallId":"c1","errorText":"odd"}"#,
                    r#"{"type":"data-keel-tool-failed","id":"c1","data":{"call_id":"c1","outcome":"maybe","retry":"later","tool":"t"}}"#,
                ],
                &[r#"{"type":"finish-step"}"#],
                &[
                    r#"{"type":"finish","finishReason":"other","messageMetadata":{"keel":{"outcome":"completed","usage":null}}}"#,
                ],
            ],
            false,
        )
    }

    #[test]
    fn typed_tool_failures_carry_their_disposition() -> TestResult {
        check(
            &[
                ("run.started", r#"{}"#),
                ("turn.started", r#"{"turn":1}"#),
                (
                    "tool.failed",
                    r#"{"call_id":"c1","error":"reset","outcome":"uncertain","retry":"retryable","tool":"t","turn":1}"#,
                ),
                (
                    "tool.failed",
                    r#"{"call_id":"c2","error":"no","tool":"t","turn":1}"#,
                ),
            ],
            &[
                &[],
                &[r#"{"type":"start-step"}"#],
                &[
                    r#"{"type":"tool-output-error","toolCallId":"c1","errorText":"reset"}"#,
                    r#"{"type":"data-keel-tool-failed","id":"c1","data":{"call_id":"c1","outcome":"uncertain","retry":"retryable","tool":"t"}}"#,
                ],
                &[r#"{"type":"tool-output-error","toolCallId":"c2","errorText":"no"}"#],
            ],
            false,
        )
    }

    /// A failure typed in part (an outcome without a retry, or a retry
    /// without an outcome) still carries what it has, the other `null`.
    #[test]
    fn a_failure_typed_in_part_carries_its_part() -> TestResult {
        check(
            &[
                ("run.started", r#"{}"#),
                ("turn.started", r#"{"turn":1}"#),
                (
                    "tool.failed",
                    r#"{"call_id":"c1","error":"gone","outcome":"definitive","tool":"t","turn":1}"#,
                ),
                (
                    "tool.failed",
                    r#"{"call_id":"c2","error":"busy","retry":"retryable","tool":"t","turn":1}"#,
                ),
            ],
            &[
                &[],
                &[r#"{"type":"start-step"}"#],
                &[
                    r#"{"type":"tool-output-error","toolCallId":"c1","errorText":"gone"}"#,
                    r#"{"type":"data-keel-tool-failed","id":"c1","data":{"call_id":"c1","outcome":"definitive","retry":null,"tool":"t"}}"#,
                ],
                &[
                    r#"{"type":"tool-output-error","toolCallId":"c2","errorText":"busy"}"#,
                    r#"{"type":"data-keel-tool-failed","id":"c2","data":{"call_id":"c2","outcome":null,"retry":"retryable","tool":"t"}}"#,
                ],
            ],
            false,
        )
    }

    /// A one-pixel PNG, base64.
    const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

    /// Reasoning parts (signed, unsigned and redacted) become reasoning
    /// chunks with ids of their own, closed before the text that follows;
    /// a tool's images become `file` chunks after its output.
    #[test]
    fn reasoning_and_tool_images_become_parts() -> TestResult {
        let images = format!(
            r#"{{"call_id":"c1","images":[{{"base64":"{PNG}","media_type":"image/png"}},{{"url":"https://example.com/a.webp"}}],"output":"seen","tool":"w","turn":1}}"#
        );
        check(
            &[
                ("run.started", r#"{}"#),
                ("turn.started", r#"{"turn":1}"#),
                (
                    "model.started",
                    r#"{"attempt":1,"model":"m","operation_id":"op_1","turn":1}"#,
                ),
                (
                    "model.reasoning_delta",
                    r#"{"operation_id":"op_1","text":"Think ","turn":1}"#,
                ),
                (
                    "model.reasoning_delta",
                    r#"{"operation_id":"op_1","text":"more.","turn":1}"#,
                ),
                (
                    "model.reasoning_end",
                    r#"{"operation_id":"op_1","provider":"anthropic","signature":"sig","turn":1}"#,
                ),
                (
                    "model.reasoning_end",
                    r#"{"operation_id":"op_1","provider":"anthropic","redacted":"opaque","turn":1}"#,
                ),
                (
                    "model.reasoning_delta",
                    r#"{"operation_id":"op_1","text":"Again.","turn":1}"#,
                ),
                (
                    "model.text_delta",
                    r#"{"operation_id":"op_1","text":"Hi","turn":1}"#,
                ),
                (
                    "model.tool_call",
                    r#"{"arguments":{},"call_id":"c1","name":"w","operation_id":"op_1","turn":1}"#,
                ),
                (
                    "model.completed",
                    r#"{"finish":"tool_calls","operation_id":"op_1","turn":1}"#,
                ),
                ("tool.completed", &images),
            ],
            &[
                &[],
                &[r#"{"type":"start-step"}"#],
                &[],
                &[
                    r#"{"type":"reasoning-start","id":"reasoning-1"}"#,
                    r#"{"type":"reasoning-delta","id":"reasoning-1","delta":"Think "}"#,
                ],
                &[r#"{"type":"reasoning-delta","id":"reasoning-1","delta":"more."}"#],
                &[
                    r#"{"type":"reasoning-end","id":"reasoning-1","providerMetadata":{"keel":{"provider":"anthropic","signed":true}}}"#,
                ],
                &[
                    r#"{"type":"reasoning-start","id":"reasoning-2"}"#,
                    r#"{"type":"reasoning-end","id":"reasoning-2","providerMetadata":{"keel":{"provider":"anthropic","redacted":true}}}"#,
                ],
                &[
                    r#"{"type":"reasoning-start","id":"reasoning-3"}"#,
                    r#"{"type":"reasoning-delta","id":"reasoning-3","delta":"Again."}"#,
                ],
                &[
                    r#"{"type":"reasoning-end","id":"reasoning-3"}"#,
                    r#"{"type":"text-start","id":"text-1"}"#,
                    r#"{"type":"text-delta","id":"text-1","delta":"Hi"}"#,
                ],
                &[
                    r#"{"type":"text-end","id":"text-1"}"#,
                    r#"{"type":"tool-input-available","toolCallId":"c1","toolName":"w","input":{}}"#,
                ],
                &[],
                &[
                    r#"{"type":"tool-output-available","toolCallId":"c1","output":"seen"}"#,
                    &format!(
                        r#"{{"type":"file","url":"data:image/png;base64,{PNG}","mediaType":"image/png"}}"#
                    ),
                    r#"{"type":"file","url":"https://example.com/a.webp","mediaType":"image/*"}"#,
                ],
            ],
            false,
        )
    }

    /// A failed attempt's reasoning is closed and named discarded; a
    /// model call that ends inside reasoning closes it.
    #[test]
    fn reasoning_of_a_failed_attempt_is_discarded() -> TestResult {
        check(
            &[
                ("run.started", r#"{}"#),
                ("turn.started", r#"{"turn":1}"#),
                (
                    "model.started",
                    r#"{"attempt":1,"model":"m","operation_id":"op_1","turn":1}"#,
                ),
                (
                    "model.reasoning_delta",
                    r#"{"operation_id":"op_1","text":"Hmm","turn":1}"#,
                ),
                (
                    "model.failed",
                    r#"{"operation_id":"op_1","position":"partial","problem":{"kind":"unavailable","message":"x","retryable":true},"turn":1}"#,
                ),
                (
                    "model.started",
                    r#"{"attempt":2,"model":"m","operation_id":"op_2","turn":1}"#,
                ),
                (
                    "model.reasoning_delta",
                    r#"{"operation_id":"op_2","text":"Ok","turn":1}"#,
                ),
                (
                    "model.completed",
                    r#"{"finish":"stop","operation_id":"op_2","turn":1}"#,
                ),
            ],
            &[
                &[],
                &[r#"{"type":"start-step"}"#],
                &[],
                &[
                    r#"{"type":"reasoning-start","id":"reasoning-1"}"#,
                    r#"{"type":"reasoning-delta","id":"reasoning-1","delta":"Hmm"}"#,
                ],
                &[
                    r#"{"type":"reasoning-end","id":"reasoning-1"}"#,
                    r#"{"type":"data-keel-discarded","id":"op_1","data":{"operation_id":"op_1","position":"partial","problem":{"kind":"unavailable","retryable":true},"reasoning_ids":["reasoning-1"],"text_ids":[],"tool_call_ids":[]}}"#,
                ],
                &[],
                &[
                    r#"{"type":"reasoning-start","id":"reasoning-2"}"#,
                    r#"{"type":"reasoning-delta","id":"reasoning-2","delta":"Ok"}"#,
                ],
                &[r#"{"type":"reasoning-end","id":"reasoning-2"}"#],
            ],
            false,
        )
    }

    #[test]
    fn events_out_of_order_are_refused() -> TestResult {
        let mut view = UiStream::new();
        let line = r#"{"kind":"run.started","payload":{},"run_id":"run_1","seq":2,"ts":1}"#;
        let event = Event::decode(line)?;
        assert!(matches!(
            view.feed(&event),
            Err(ViewError::OutOfOrder { last: 0, found: 2 })
        ));
        Ok(())
    }

    /// A compaction call maps to nothing (its text is the summary, not the
    /// answer; its finish reason is not the run's); its outcome is a
    /// `data-keel-compaction` part kept in the message, a failure a
    /// `data-keel-compaction-failed` part.
    #[test]
    fn a_compaction_is_a_data_part_not_text() -> TestResult {
        let compacted = r#"{"estimator":{"bytes_per_token":4,"kind":"bytes"},"operation_id":"k1","replaces":{"count":2,"first":"m1","last":"m2"},"summary":{"id":"run_1.t1.s","parts":[{"text":"so far","type":"text"}],"role":"user"},"tokens_after":20,"tokens_before":90,"turn":1}"#;
        check(
            &[
                ("run.started", r#"{"model":"m"}"#),
                ("turn.started", r#"{"turn":1}"#),
                (
                    "model.started",
                    r#"{"attempt":1,"model":"m","operation_id":"k1","purpose":"compaction","turn":1}"#,
                ),
                (
                    "model.text_delta",
                    r#"{"operation_id":"k1","text":"so far","turn":1}"#,
                ),
                (
                    "model.tool_call",
                    r#"{"arguments":{},"call_id":"c9","name":"w","operation_id":"k1","turn":1}"#,
                ),
                (
                    "model.completed",
                    r#"{"finish":"length","operation_id":"k1","turn":1}"#,
                ),
                ("context.compacted", compacted),
                (
                    "model.started",
                    r#"{"attempt":1,"model":"m","operation_id":"a1","turn":1}"#,
                ),
                (
                    "model.text_delta",
                    r#"{"operation_id":"a1","text":"done","turn":1}"#,
                ),
                (
                    "model.completed",
                    r#"{"finish":"stop","operation_id":"a1","turn":1}"#,
                ),
                ("turn.completed", r#"{"turn":1}"#),
                ("turn.started", r#"{"turn":2}"#),
                (
                    "model.started",
                    r#"{"attempt":1,"model":"m","operation_id":"k2","purpose":"compaction","turn":2}"#,
                ),
                (
                    "model.failed",
                    r#"{"operation_id":"k2","position":"partial","problem":{"kind":"unavailable","message":"down","retryable":false},"turn":2}"#,
                ),
                (
                    "context.compaction_failed",
                    r#"{"detail":"down","operation_id":"k2","rule":"compaction.model_failed","tokens_before":90,"turn":2}"#,
                ),
                ("turn.completed", r#"{"turn":2}"#),
                ("run.completed", "{}"),
            ],
            &[
                &[],
                &[r#"{"type":"start-step"}"#],
                &[],
                &[],
                &[],
                &[],
                &[
                    r#"{"type":"data-keel-compaction","id":"compaction-1","transient":false,"data":{"replaces":{"count":2,"first":"m1","last":"m2"},"tokens_after":20,"tokens_before":90}}"#,
                ],
                &[],
                &[
                    r#"{"type":"text-start","id":"text-1"}"#,
                    r#"{"type":"text-delta","id":"text-1","delta":"done"}"#,
                ],
                &[r#"{"type":"text-end","id":"text-1"}"#],
                &[r#"{"type":"finish-step"}"#],
                &[r#"{"type":"start-step"}"#],
                &[],
                &[],
                &[
                    r#"{"type":"data-keel-compaction-failed","id":"compaction-2","transient":false,"data":{"rule":"compaction.model_failed","detail":"down","tokens_before":90}}"#,
                ],
                &[r#"{"type":"finish-step"}"#],
                &[
                    r#"{"type":"finish","finishReason":"stop","messageMetadata":{"keel":{"outcome":"completed","usage":null}}}"#,
                ],
            ],
            false,
        )
    }
}
