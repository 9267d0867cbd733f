//! Errors of building an engine, starting a run, and why a run failed.

use keel_message::{CallId, MessageError, OperationId, RunId, ToolName};
use keel_observers::DispatchError;
use keel_stream::{ProviderProblem, RetryPosition};

use crate::config::LimitError;

/// A composition the engine refuses at build time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// Two providers under one name.
    #[error("provider {name} registered twice (rule engine.unique_providers)")]
    DuplicateProvider {
        /// The name.
        name: String,
    },
    /// Two tools with one name.
    #[error("tool {name} registered twice (rule engine.unique_tools)")]
    DuplicateTool {
        /// The name.
        name: ToolName,
    },
    /// A tool needs approval but there is no interaction handler.
    #[error(
        "tool {name} requires approval but no interaction handler is set (rule engine.approval_handler)"
    )]
    ApprovalWithoutHandler {
        /// The tool.
        name: ToolName,
    },
    /// A limit that makes no sense (zero turns, zero parallelism, …).
    #[error(transparent)]
    InvalidLimit(#[from] LimitError),
    /// The log configuration breaks the reserve rule.
    #[error(transparent)]
    LogConfig(#[from] keel_eventlog::ConfigError),
}

/// Why a run could not start. Nothing was committed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The request names a provider the engine does not have.
    #[error("unknown provider {name} (rule run.provider_known)")]
    UnknownProvider {
        /// The name.
        name: String,
    },
    /// A live run already has this id.
    #[error("run {run_id} is already running (rule run.unique_id)")]
    DuplicateRun {
        /// The id.
        run_id: RunId,
    },
    /// The engine is shutting down.
    #[error("the engine is shutting down (rule engine.open)")]
    ShuttingDown,
    /// The request brings no provider and does not name one, and the
    /// builder has not exactly one to default to.
    #[error(
        "the request names no provider and the engine has {registered} (rule run.provider_required)"
    )]
    NoProvider {
        /// How many providers the builder registered.
        registered: usize,
    },
    /// A tool of the request has the name of another of its tools or of
    /// one the builder registered.
    #[error("tool {name} given twice (rule run.unique_tools)")]
    DuplicateTool {
        /// The name.
        name: ToolName,
    },
    /// A tool needs approval, but neither the request nor the builder set
    /// an interaction handler.
    #[error(
        "tool {name} requires approval but no interaction handler is set (rule run.approval_handler)"
    )]
    ApprovalWithoutHandler {
        /// The tool.
        name: ToolName,
    },
    /// The request's limits break a rule.
    #[error(transparent)]
    InvalidLimit(#[from] LimitError),
    /// The history is empty.
    #[error("the run has no messages (rule run.history_nonempty)")]
    EmptyHistory,
    /// The history breaks a message rule under the engine's limits.
    #[error(transparent)]
    InvalidHistory(#[from] MessageError),
    /// The log configuration is invalid.
    #[error(transparent)]
    Log(#[from] keel_eventlog::ConfigError),
    /// Not called inside a Tokio runtime.
    #[error("Engine::start must be called inside a Tokio runtime")]
    NoRuntime,
}

/// Why a run failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailureCause {
    /// A model call failed and was not retried (or ran out of attempts).
    Model {
        /// The last attempt.
        operation_id: OperationId,
        /// Its problem.
        problem: ProviderProblem,
        /// Where the stream was when it failed.
        position: RetryPosition,
    },
    /// A tool failed and its policy ends the run.
    Tool {
        /// The call.
        call_id: CallId,
        /// The tool.
        tool: ToolName,
        /// The (screened, bounded) error.
        error: String,
    },
    /// A required observer refused an event.
    Observer(DispatchError),
    /// A limit was hit (`max_turns`, `max_tool_calls_per_turn`, a request
    /// bound).
    Limit {
        /// Which limit, e.g. `limits.max_turns`.
        limit: String,
        /// What happened.
        detail: String,
    },
    /// The log refused a commit the engine made, or the run task panicked
    /// outside every guarded extension point (a bug, reported rather than
    /// hidden).
    Internal(String),
}

impl std::fmt::Display for FailureCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FailureCause::Model {
                operation_id,
                problem,
                position,
            } => write!(
                f,
                "model call {operation_id} failed ({}, {}): {}",
                problem.kind(),
                position.as_str(),
                problem.message()
            ),
            FailureCause::Tool {
                call_id,
                tool,
                error,
            } => {
                write!(f, "tool {tool} (call {call_id}) failed: {error}")
            }
            FailureCause::Observer(e) => write!(f, "{e}"),
            FailureCause::Limit { limit, detail } => write!(f, "{limit}: {detail}"),
            FailureCause::Internal(e) => write!(f, "internal: {e}"),
        }
    }
}
