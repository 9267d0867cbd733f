//! The AG-UI events this view emits, typed: what each one says
//! ([`AguiEvent`], tagged by `type`) and what every one carries
//! ([`Stamp`]: AG-UI's `timestamp` and `rawEvent`), together a
//! [`Stamped`] event, the unit the mapper returns and a daemon sends.
//!
//! Members are camelCase; optional ones are left out when absent. The JSON
//! text has every object's members in sorted order, because it is encoded
//! through a `serde_json::Value` (whose objects are sorted maps): the
//! bytes a client sees do not depend on the order of the declarations
//! here, and are the bytes this view wrote when it built its events as
//! `Value`s.

use super::message::AguiMessage;
use serde::Serialize;
use serde_json::Value;

/// One AG-UI event (an `@ag-ui/core` 1.0 event type) without its
/// [`Stamp`]: exactly the types this view emits.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(
    tag = "type",
    rename_all = "SCREAMING_SNAKE_CASE",
    rename_all_fields = "camelCase"
)]
#[allow(missing_docs)] // the members are AG-UI's, named as AG-UI names them
pub enum AguiEvent {
    /// The run begins; its thread is the run. `parentRunId` is the run
    /// that started it, when it is a sub-run streamed on its own.
    RunStarted {
        thread_id: String,
        run_id: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        parent_run_id: Option<String>,
    },
    /// The run ended (completed or cancelled): no scope is open.
    RunFinished {
        thread_id: String,
        run_id: String,
        outcome: RunOutcome,
        /// The run's token usage (one entry), when `run.completed` has one.
        #[serde(skip_serializing_if = "Option::is_none")]
        usage: Option<Vec<TokenUsage>>,
    },
    /// The run failed; `code` names the Keel event (`keel.run.failed`).
    RunError { message: String, code: String },
    /// A turn begins (`stepName` is `turn <n>`).
    StepStarted { step_name: String },
    /// A turn ends.
    StepFinished { step_name: String },
    /// A model call's text message begins.
    TextMessageStart { message_id: String, role: TextRole },
    /// Text of the open message.
    TextMessageContent { message_id: String, delta: String },
    /// The text message ends.
    TextMessageEnd { message_id: String },
    /// A tool call the model made begins; `parentMessageId` is the text
    /// message open when it was made.
    ToolCallStart {
        tool_call_id: String,
        tool_call_name: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        parent_message_id: Option<String>,
    },
    /// The call's arguments (as one delta: Keel records them whole).
    ToolCallArgs { tool_call_id: String, delta: String },
    /// The tool call ends.
    ToolCallEnd { tool_call_id: String },
    /// A span of reasoning begins (one per reasoning part: its id is the
    /// reasoning message's).
    ReasoningStart { message_id: String },
    /// The span's reasoning message begins.
    ReasoningMessageStart {
        message_id: String,
        role: ReasoningRole,
    },
    /// Text of the open reasoning message.
    ReasoningMessageContent { message_id: String, delta: String },
    /// The reasoning message ends.
    ReasoningMessageEnd { message_id: String },
    /// The span of reasoning ends.
    ReasoningEnd { message_id: String },
    /// A reasoning message's opaque value: its signature, or a redacted
    /// part's encrypted value (`subtype` `message`, `entityId` the
    /// reasoning message).
    ReasoningEncryptedValue {
        subtype: EncryptedSubtype,
        entity_id: String,
        encrypted_value: String,
    },
    /// The tool's result; `error` is set when the tool failed.
    ToolCallResult {
        message_id: String,
        tool_call_id: String,
        content: Content,
        role: ToolRole,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// The conversation so far (a join's prelude).
    MessagesSnapshot { messages: Vec<AguiMessage> },
    /// What AG-UI has no type for: a `keel.*` name and its value.
    Custom { name: String, value: CustomValue },
    /// A sub-run begins inside a tree stream (its `run.started`): `name`
    /// is the agent tool's name, `parentToolCallId` the parent's call,
    /// `parentSubagentRunId` the parent when it is itself a sub-run.
    SubagentStarted {
        subagent_run_id: String,
        name: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        parent_subagent_run_id: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        parent_tool_call_id: Option<String>,
    },
    /// A sub-run completed (its `run.completed`).
    SubagentFinished {
        subagent_run_id: String,
        outcome: SubagentOutcome,
    },
    /// A sub-run failed or was cancelled (its `run.failed`, `code`
    /// `keel.run.failed`, or `run.cancelled`, `code` `keel.run.cancelled`).
    SubagentError {
        subagent_run_id: String,
        message: String,
        code: String,
    },
}

/// How a sub-run's segment ended (`SUBAGENT_FINISHED.outcome`): a Keel
/// sub-run that finishes has completed (a failed or cancelled one is a
/// `SUBAGENT_ERROR`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum SubagentOutcome {
    /// `run.completed`.
    Success,
}

/// How a finished run (or response) ended (`RUN_FINISHED.outcome`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(
    tag = "type",
    rename_all = "lowercase",
    rename_all_fields = "camelCase"
)]
pub enum RunOutcome {
    /// `run.completed`.
    Success,
    /// `run.cancelled`.
    Cancelled,
    /// An agent stream paused for frontend tool calls only (`type:
    /// "success"` with `pendingToolCallIds`): the client runs them and
    /// posts their results.
    #[serde(rename = "success")]
    Pending {
        /// The frontend calls the run waits for.
        pending_tool_call_ids: Vec<String>,
    },
    /// An agent stream paused at approvals (`type: "interrupt"`): the
    /// client answers them with `resume` entries.
    Interrupt {
        /// The pending approvals (at least one).
        interrupts: Vec<Interrupt>,
    },
}

/// A pending approval as an AG-UI interrupt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Interrupt {
    /// The Keel interaction id (what a `resume` entry's `interruptId` names).
    pub id: String,
    /// `tool_approval`.
    pub reason: String,
    /// The call waiting for approval.
    pub tool_call_id: String,
    /// `Approve <tool>?`.
    pub message: String,
}

/// The role of a text message this view opens: the model's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TextRole {
    /// `"assistant"`.
    Assistant,
}

/// The role of a reasoning message: `"reasoning"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ReasoningRole {
    /// `"reasoning"`.
    Reasoning,
}

/// What a `REASONING_ENCRYPTED_VALUE` belongs to: this view only attaches
/// values to reasoning messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EncryptedSubtype {
    /// `"message"`.
    Message,
}

/// A message's or tool result's content: text, or (when it holds images
/// or files) AG-UI content parts in order (`text`, `image`, `document`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Content {
    /// Plain text.
    Text(String),
    /// Content parts, as AG-UI's `ContentPart` JSON.
    Parts(Vec<Value>),
}

/// The role of a tool call's result message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolRole {
    /// `"tool"`.
    Tool,
}

/// Token counts in AG-UI's names; a count the log does not hold (or holds
/// as something other than a non-negative integer) is left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenUsage {
    /// Input tokens, if counted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    /// Output tokens, if counted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
}

impl TokenUsage {
    /// The counts of a Keel `usage` object (`input_tokens`, `output_tokens`).
    pub fn of(usage: &Value) -> TokenUsage {
        let count = |name: &str| usage.get(name).and_then(Value::as_u64);
        TokenUsage {
            input_tokens: count("input_tokens"),
            output_tokens: count("output_tokens"),
        }
    }
}

/// The value of a `CUSTOM` event.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum CustomValue {
    /// As it is in the log: a Keel event's payload (`keel.<kind>`) or a
    /// member of one (`keel.usage`).
    Logged(Value),
    /// `keel.discarded`: what a failed or cancelled model call leaves.
    Discarded(Discarded),
    /// `keel.text_elided`: what a join's re-opened text (or reasoning)
    /// leaves out.
    TextElided(TextElided),
}

/// What a failed or cancelled model call leaves behind: its text message
/// (`messageId`, `null` when it had none) and tool calls, no longer part
/// of the answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Discarded {
    /// The text message, if the call had one (`null` otherwise).
    pub message_id: Option<String>,
    /// The tool calls it had open.
    pub tool_call_ids: Vec<String>,
    /// Its reasoning messages (left out when it had none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reasoning_message_ids: Vec<String>,
}

/// The bytes of an open text message a join's prelude does not re-send
/// (beyond [`super::MAX_TEXT_BYTES`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TextElided {
    /// The message.
    pub message_id: String,
    /// How many bytes of its text are left out.
    pub bytes: usize,
}

/// What every event this view emits carries: the Keel event it stands for
/// (`rawEvent`, the line as JSON) and that event's time (`timestamp`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Stamp {
    /// Milliseconds; AG-UI's timestamp is in milliseconds, Keel's `ts` in
    /// microseconds. Absent when the line has no `ts`.
    #[serde(skip_serializing_if = "Option::is_none")]
    timestamp: Option<u64>,
    /// Left out when no Keel event stands for the AG-UI event.
    #[serde(skip_serializing_if = "Value::is_null")]
    raw_event: Value,
}

impl Stamp {
    /// The stamp of a Keel line, decoded (`Null` when there is none).
    pub(crate) fn of(raw: Value) -> Stamp {
        Stamp {
            timestamp: raw.get("ts").and_then(Value::as_u64).map(|ts| ts / 1000),
            raw_event: raw,
        }
    }

    /// The stamp of a Keel line's text (`rawEvent: null` if it is not JSON,
    /// which a decoded event's line always is).
    pub(crate) fn of_line(line: &str) -> Stamp {
        Stamp::of(serde_json::from_str(line).unwrap_or(Value::Null))
    }

    /// No Keel event: no `rawEvent`, no `timestamp` (an agent stream's
    /// opening events).
    pub(crate) fn none() -> Stamp {
        Stamp {
            timestamp: None,
            raw_event: Value::Null,
        }
    }

    /// The members as a JSON object (sorted), for a hand-written event.
    pub(crate) fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or_else(|e| encode_failure(&e))
    }
}

/// An AG-UI event as sent: the event and its [`Stamp`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stamped {
    #[serde(flatten)]
    event: AguiEvent,
    #[serde(flatten)]
    stamp: Stamp,
    /// The sub-run the event belongs to, in a tree stream (AG-UI's
    /// attribution); absent for the root's own events.
    #[serde(rename = "subagentRunId", skip_serializing_if = "Option::is_none")]
    subagent_run_id: Option<String>,
}

impl Stamped {
    pub(crate) fn new(event: AguiEvent, stamp: Stamp) -> Stamped {
        Stamped {
            event,
            stamp,
            subagent_run_id: None,
        }
    }

    /// The same event attributed to sub-run `run_id` (`subagentRunId`).
    pub(crate) fn attributed(self, run_id: &str) -> Stamped {
        Stamped {
            subagent_run_id: Some(run_id.to_owned()),
            ..self
        }
    }

    /// The sub-run the event is attributed to (`subagentRunId`), if any.
    pub fn subagent_run_id(&self) -> Option<&str> {
        self.subagent_run_id.as_deref()
    }

    /// The event.
    pub fn event(&self) -> &AguiEvent {
        &self.event
    }

    /// The same stamp on another event (an agent stream's rewrite).
    pub(crate) fn with_event(self, event: AguiEvent) -> Stamped {
        Stamped {
            event,
            stamp: self.stamp,
            subagent_run_id: self.subagent_run_id,
        }
    }

    /// The Keel event it stands for: its line as JSON (`rawEvent`).
    pub fn raw_event(&self) -> &Value {
        &self.stamp.raw_event
    }

    /// The Keel event's time in milliseconds (`timestamp`).
    pub fn timestamp(&self) -> Option<u64> {
        self.stamp.timestamp
    }

    /// The event as a JSON value (what [`super::check_event`] checks).
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or_else(|e| encode_failure(&e))
    }

    /// The event's JSON text, one SSE `data:` line's worth (members in
    /// sorted order; see the module header).
    pub fn to_json(&self) -> String {
        self.to_value().to_string()
    }
}

/// What is sent if an event does not encode: a `RUN_ERROR` saying so.
/// Nothing here can fail to encode (string keys only, no floats outside
/// `Value`s), so this is a typed fallback rather than a panic, as
/// `ui_stream::Chunk::to_json`'s is.
fn encode_failure(e: &serde_json::Error) -> Value {
    let error = AguiEvent::RunError {
        message: format!("an AG-UI event did not encode: {e}"),
        code: "keel.agui.encode".to_owned(),
    };
    serde_json::to_value(&error).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests;
