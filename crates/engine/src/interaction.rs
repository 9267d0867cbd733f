//! Interactions: the run asks the host (or its user) something, for
//! example approval before a tool marked as needing it.

use keel_message::{CallId, CanonicalJson, InteractionId, RunId, ToolName};
use std::future::Future;
use std::pin::Pin;

/// What the run asks.
#[derive(Debug, Clone)]
pub struct InteractionRequest {
    /// The run.
    pub run_id: RunId,
    /// The turn.
    pub turn: u64,
    /// The interaction's id (issued by the engine).
    pub interaction_id: InteractionId,
    /// The question.
    pub kind: InteractionKind,
}

/// The kinds of question.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum InteractionKind {
    /// May this tool call run?
    Approval {
        /// The call.
        call_id: CallId,
        /// The tool.
        tool: ToolName,
        /// Its arguments.
        arguments: CanonicalJson,
    },
}

impl InteractionKind {
    /// The wire name recorded in `interaction.started` (`approval`).
    pub fn as_str(&self) -> &'static str {
        match self {
            InteractionKind::Approval { .. } => "approval",
        }
    }
}

/// The answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InteractionDecision {
    /// Go ahead.
    Approved,
    /// Do not: the tool does not run and its result says "denied".
    Denied,
}

impl InteractionDecision {
    /// The wire name recorded in `interaction.completed`.
    pub fn as_str(self) -> &'static str {
        match self {
            InteractionDecision::Approved => "approved",
            InteractionDecision::Denied => "denied",
        }
    }
}

/// The handler could not answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InteractionError(pub String);

/// The future a handler returns.
pub type InteractionFuture =
    Pin<Box<dyn Future<Output = Result<InteractionDecision, InteractionError>> + Send + 'static>>;

/// Answers interactions. Dropping the future (on cancellation) abandons
/// the question.
pub trait InteractionHandler: Send + Sync + 'static {
    /// Answer `request`.
    fn handle(&self, request: InteractionRequest) -> InteractionFuture;
}
