//! Tools: what the engine runs when the model asks.

use keel_message::{CallId, CanonicalJson, RunId, ToolDefinition};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

pub use keel_eventlog::{ToolOutcome, ToolRetry};

/// The future a tool returns.
pub type ToolFuture = Pin<Box<dyn Future<Output = Result<String, ToolError>> + Send + 'static>>;

/// One invocation of a tool.
#[derive(Debug, Clone)]
pub struct ToolInvocation {
    /// The run.
    pub run_id: RunId,
    /// The turn, from 1.
    pub turn: u64,
    /// The call id the model gave.
    pub call_id: CallId,
    /// The arguments, a canonical JSON object.
    pub arguments: CanonicalJson,
}

/// A typed tool failure: what went wrong, whether the side effect may have
/// happened, and whether retrying may help.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ToolError {
    /// What went wrong (screened and bounded before it enters an event).
    pub message: String,
    /// Whether the tool's effect definitely did not happen, or may have.
    pub outcome: Option<ToolOutcome>,
    /// Whether retrying may succeed.
    pub retry: Option<ToolRetry>,
}

impl ToolError {
    /// A failure with no typed outcome.
    pub fn new(message: impl Into<String>) -> Self {
        ToolError {
            message: message.into(),
            outcome: None,
            retry: None,
        }
    }

    /// A typed failure.
    pub fn typed(message: impl Into<String>, outcome: ToolOutcome, retry: ToolRetry) -> Self {
        ToolError {
            message: message.into(),
            outcome: Some(outcome),
            retry: Some(retry),
        }
    }
}

/// What a tool failure does to the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnToolFailure {
    /// Feed it back to the model as an error tool result (the default).
    #[default]
    FeedBack,
    /// End the turn and the run as failed, with the call as `cause`.
    EndRun,
}

/// Per-tool policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolPolicy {
    /// What a failure does.
    pub on_failure: OnToolFailure,
    /// Ask the interaction handler for approval before running.
    pub requires_approval: bool,
    /// Overrides the engine's per-call timeout.
    pub timeout: Option<Duration>,
}

impl Default for ToolPolicy {
    fn default() -> Self {
        ToolPolicy {
            on_failure: OnToolFailure::FeedBack,
            requires_approval: false,
            timeout: None,
        }
    }
}

/// A tool the engine can run.
///
/// `call` returns a future; the engine runs it inside the run's task with
/// a timeout, catches a panic, and drops it on cancellation, so a tool
/// must be cancel-safe in the same way any future is.
pub trait Tool: Send + Sync + 'static {
    /// What the model is told about the tool.
    fn definition(&self) -> &ToolDefinition;

    /// How failures, approval and timeouts are handled for this tool.
    fn policy(&self) -> ToolPolicy {
        ToolPolicy::default()
    }

    /// Runs one invocation; `Ok` is the result content for the model.
    fn call(&self, invocation: ToolInvocation) -> ToolFuture;
}
