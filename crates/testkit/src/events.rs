//! Builders for a run's lifecycle payloads, so that a test writes the run
//! it means (`run started, turn 1, a model call with text, a tool call,
//! the terminals`) instead of every field of every payload.
//!
//! Each builder fills `extra` with nothing, a model call's `attempt` with
//! 1, and optional fields with `None`; a test that needs another value
//! writes that payload out in full, or changes the built one.
//!
//! ```
//! use keel_eventlog::{LogConfig, RunLog, SystemClock};
//! use keel_message::{CallId, CanonicalJson, ModelName, OperationId, RunId, ToolName};
//! use keel_stream::FinishReason;
//! use keel_testkit::events::{self, ModelAttempt, ToolUse};
//! use std::sync::Arc;
//!
//! let model = ModelAttempt::new(1, OperationId::parse("op_1")?);
//! let tool = ToolUse::new(1, CallId::parse("c1")?, ToolName::parse("probe")?);
//! let payloads = [
//!     events::run_started(),
//!     events::turn_started(1),
//!     model.started(ModelName::parse("m")?),
//!     model.text("Checking."),
//!     model.tool_call(&tool, CanonicalJson::parse("{}")?),
//!     model.completed(FinishReason::ToolCalls, None),
//!     tool.started(),
//!     tool.completed("42"),
//!     events::turn_completed(1),
//!     events::run_completed(),
//! ];
//! let log = RunLog::new(RunId::parse("run_1")?, LogConfig::default(), Arc::new(SystemClock))?;
//! let events = events::commit_all(&log, &payloads)?;
//! keel_testkit::assert_lifecycle(&events);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use keel_eventlog::{
    CommitError, ErrorText, Event, Extra, ModelCompleted, ModelPurpose, ModelRef, ModelStarted,
    Payload, ReasoningDelta, ReasoningEnd, RunCancelled, RunCompleted, RunFailed, RunLog,
    RunStarted, TextDelta, ToolCall, ToolCompleted, ToolFailed, ToolOutcome, ToolRef, ToolRetry,
    TurnFailed, TurnRef,
};
use keel_message::{
    CallId, CanonicalJson, ModelName, OpaqueValue, OperationId, ProviderTag, ToolName,
};
use keel_stream::{FinishReason, Usage};
use std::sync::Arc;

/// `run.started` with no model, chat or continuation.
pub fn run_started() -> Payload {
    Payload::RunStarted(RunStarted::default())
}

/// `run.completed` with no usage.
pub fn run_completed() -> Payload {
    Payload::RunCompleted(RunCompleted::default())
}

/// `run.cancelled` with no reason.
pub fn run_cancelled() -> Payload {
    Payload::RunCancelled(RunCancelled::default())
}

/// `run.failed` with `error` and no cause.
pub fn run_failed(error: &str) -> Payload {
    Payload::RunFailed(RunFailed {
        error: ErrorText::new(error),
        cause: None,
        extra: Extra::new(),
    })
}

fn turn_ref(turn: u64) -> TurnRef {
    TurnRef {
        turn,
        extra: Extra::new(),
    }
}

/// `turn.started` for `turn`.
pub fn turn_started(turn: u64) -> Payload {
    Payload::TurnStarted(turn_ref(turn))
}

/// `turn.completed` for `turn`.
pub fn turn_completed(turn: u64) -> Payload {
    Payload::TurnCompleted(turn_ref(turn))
}

/// `turn.cancelled` for `turn`.
pub fn turn_cancelled(turn: u64) -> Payload {
    Payload::TurnCancelled(turn_ref(turn))
}

/// `turn.failed` for `turn` with `error` and no cause.
pub fn turn_failed(turn: u64, error: &str) -> Payload {
    Payload::TurnFailed(TurnFailed {
        turn,
        error: ErrorText::new(error),
        cause: None,
        extra: Extra::new(),
    })
}

/// One model call (attempt 1) of a turn: its start, what it streams and
/// its end all name the same turn and operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelAttempt {
    turn: u64,
    operation_id: OperationId,
}

impl ModelAttempt {
    /// The model call `operation_id` of `turn`.
    pub fn new(turn: u64, operation_id: OperationId) -> ModelAttempt {
        ModelAttempt { turn, operation_id }
    }

    /// The operation it names.
    pub fn operation_id(&self) -> &OperationId {
        &self.operation_id
    }

    /// `model.started`: attempt 1 of `model`.
    pub fn started(&self, model: ModelName) -> Payload {
        Payload::ModelStarted(ModelStarted {
            turn: self.turn,
            operation_id: self.operation_id.clone(),
            model,
            attempt: 1,
            purpose: None,
            extra: Extra::new(),
        })
    }

    /// `model.started` of this attempt as a compaction call (`purpose`
    /// `compaction`), calling `model`.
    pub fn compaction_started(&self, model: ModelName) -> Payload {
        Payload::ModelStarted(ModelStarted {
            turn: self.turn,
            operation_id: self.operation_id.clone(),
            model,
            attempt: 1,
            purpose: Some(ModelPurpose::Compaction),
            extra: Extra::new(),
        })
    }

    /// `model.text_delta` carrying `text`.
    pub fn text(&self, text: impl Into<String>) -> Payload {
        Payload::TextDelta(TextDelta {
            turn: self.turn,
            operation_id: self.operation_id.clone(),
            text: text.into(),
            extra: Extra::new(),
        })
    }

    /// `model.reasoning_delta` carrying `text`.
    pub fn reasoning(&self, text: impl Into<String>) -> Payload {
        Payload::ReasoningDelta(ReasoningDelta {
            turn: self.turn,
            operation_id: self.operation_id.clone(),
            text: text.into(),
            extra: Extra::new(),
        })
    }

    /// `model.reasoning_end` closing the open part from `provider`, with
    /// its `signature` if any.
    pub fn reasoning_end(&self, provider: ProviderTag, signature: Option<OpaqueValue>) -> Payload {
        Payload::ReasoningEnd(ReasoningEnd {
            turn: self.turn,
            operation_id: self.operation_id.clone(),
            provider,
            signature,
            redacted: None,
            extra: Extra::new(),
        })
    }

    /// `model.reasoning_end` of a redacted part from `provider`.
    pub fn redacted_reasoning(&self, provider: ProviderTag, value: OpaqueValue) -> Payload {
        Payload::ReasoningEnd(ReasoningEnd {
            turn: self.turn,
            operation_id: self.operation_id.clone(),
            provider,
            signature: None,
            redacted: Some(value),
            extra: Extra::new(),
        })
    }

    /// `model.tool_call` asking for `tool` with `arguments`.
    pub fn tool_call(&self, tool: &ToolUse, arguments: CanonicalJson) -> Payload {
        Payload::ToolCall(ToolCall {
            turn: self.turn,
            operation_id: self.operation_id.clone(),
            call_id: tool.call_id.clone(),
            name: tool.tool.clone(),
            arguments,
            extra: Extra::new(),
        })
    }

    /// `model.cancelled`.
    pub fn cancelled(&self) -> Payload {
        Payload::ModelCancelled(ModelRef {
            turn: self.turn,
            operation_id: self.operation_id.clone(),
            extra: Extra::new(),
        })
    }

    /// `model.completed` with `finish` and `usage`, no metadata.
    pub fn completed(&self, finish: FinishReason, usage: Option<Usage>) -> Payload {
        Payload::ModelCompleted(ModelCompleted {
            turn: self.turn,
            operation_id: self.operation_id.clone(),
            finish,
            usage,
            metadata: None,
            extra: Extra::new(),
        })
    }
}

/// One tool call of a turn: the model's `model.tool_call` (see
/// [`ModelAttempt::tool_call`]), its start and its end all name the same
/// call and tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolUse {
    turn: u64,
    call_id: CallId,
    tool: ToolName,
}

impl ToolUse {
    /// The call `call_id` of `tool` in `turn`.
    pub fn new(turn: u64, call_id: CallId, tool: ToolName) -> ToolUse {
        ToolUse {
            turn,
            call_id,
            tool,
        }
    }

    fn tool_ref(&self) -> ToolRef {
        ToolRef {
            turn: self.turn,
            call_id: self.call_id.clone(),
            tool: self.tool.clone(),
            extra: Extra::new(),
        }
    }

    /// `tool.started`.
    pub fn started(&self) -> Payload {
        Payload::ToolStarted(self.tool_ref())
    }

    /// `tool.cancelled`.
    pub fn cancelled(&self) -> Payload {
        Payload::ToolCancelled(self.tool_ref())
    }

    /// `tool.completed` with `output`.
    pub fn completed(&self, output: impl Into<String>) -> Payload {
        Payload::ToolCompleted(ToolCompleted {
            turn: self.turn,
            call_id: self.call_id.clone(),
            tool: self.tool.clone(),
            output: output.into(),
            images: Vec::new(),
            extra: Extra::new(),
        })
    }

    /// `tool.failed` with `error`, `outcome` and `retry`.
    pub fn failed(
        &self,
        error: &str,
        outcome: Option<ToolOutcome>,
        retry: Option<ToolRetry>,
    ) -> Payload {
        Payload::ToolFailed(ToolFailed {
            turn: self.turn,
            call_id: self.call_id.clone(),
            tool: self.tool.clone(),
            error: ErrorText::new(error),
            outcome,
            retry,
            extra: Extra::new(),
        })
    }
}

/// Commits every payload to `log`, in order, and returns the events; the
/// first refusal stops it.
///
/// # Errors
///
/// The first [`CommitError`] the log returns.
pub fn commit_all(log: &RunLog, payloads: &[Payload]) -> Result<Vec<Arc<Event>>, CommitError> {
    payloads.iter().map(|p| log.commit(p)).collect()
}
