//! Tools: what the engine runs when the model asks.

use keel_message::{CallId, CanonicalJson, RunId, ToolDefinition};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

pub use keel_eventlog::{ToolOutcome, ToolRetry};

/// The future a tool returns.
pub type ToolFuture = Pin<Box<dyn Future<Output = Result<ToolOutput, ToolError>> + Send + 'static>>;

/// The largest byte count an event can record exactly (2^53 − 1): a cut's
/// counts are capped at it so they stay JSON-safe integers.
const MAX_JSON_SAFE: u64 = (1 << 53) - 1;

/// What a tool returns: the result content for the model, and whether the
/// tool cut it (an MCP server's long answer, say).
///
/// The engine records a cut in `tool.completed` as the member
/// `"output_cut": {"original_bytes": N, "kept_bytes": M}`. A cut output is
/// still held to `limits.part_bytes`: over it, the call is a `tool.failed`
/// (outcome `uncertain`) like any other output.
///
/// ```
/// use keel_engine::{OutputCut, ToolOutput};
/// let whole = ToolOutput::from("sunny");
/// assert_eq!((whole.content(), whole.output_cut()), ("sunny", None));
/// let cut = ToolOutput::cut("sun", 5);
/// assert_eq!(cut.output_cut(), Some(OutputCut { original_bytes: 5, kept_bytes: 3 }));
/// assert_eq!(cut.into_content(), "sun");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    content: String,
    cut: Option<OutputCut>,
}

/// How much of a tool's output was kept: `kept_bytes` of `original_bytes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutputCut {
    /// The size of the whole output, in bytes.
    pub original_bytes: u64,
    /// The size of what was kept (the content), in bytes.
    pub kept_bytes: u64,
}

impl ToolOutput {
    /// The whole output.
    pub fn new(content: impl Into<String>) -> Self {
        ToolOutput {
            content: content.into(),
            cut: None,
        }
    }

    /// What is left of an output of `original_bytes` after a cut; the
    /// kept size is `content`'s length. An `original_bytes` below that is
    /// raised to it, and both counts are capped at 2^53 − 1 (what an event
    /// records exactly).
    pub fn cut(content: impl Into<String>, original_bytes: u64) -> Self {
        let content = content.into();
        let kept_bytes = u64::try_from(content.len())
            .unwrap_or(u64::MAX)
            .min(MAX_JSON_SAFE);
        let original_bytes = original_bytes.min(MAX_JSON_SAFE).max(kept_bytes);
        ToolOutput {
            content,
            cut: Some(OutputCut {
                original_bytes,
                kept_bytes,
            }),
        }
    }

    /// The result content.
    pub fn content(&self) -> &str {
        &self.content
    }

    /// The cut, if the tool made one.
    pub fn output_cut(&self) -> Option<OutputCut> {
        self.cut
    }

    /// The result content, by value.
    pub fn into_content(self) -> String {
        self.content
    }
}

impl From<String> for ToolOutput {
    fn from(content: String) -> Self {
        ToolOutput::new(content)
    }
}

impl From<&str> for ToolOutput {
    fn from(content: &str) -> Self {
        ToolOutput::new(content)
    }
}

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

    /// Runs one invocation; `Ok` is the result for the model (and the
    /// cut, when the tool shortened it).
    fn call(&self, invocation: ToolInvocation) -> ToolFuture;
}
