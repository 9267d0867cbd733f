//! Errors of building an engine, starting a run, and why a run failed.

use keel_message::{CallId, MessageError, OperationId, RunId, ToolName};
use keel_observers::DispatchError;
use keel_stream::{ProviderProblem, RetryPosition};

use crate::budget::BudgetMember;
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

/// Why a run failed. Its `Display` is what `run.failed` events and the
/// CLI print; [`source`](std::error::Error::source) is the observer's
/// refusal for [`Observer`](FailureCause::Observer) (a provider's
/// [`ProviderProblem`] is a value, not an error type, so
/// [`Model`](FailureCause::Model) has none).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FailureCause {
    /// A model call failed and was not retried (or ran out of attempts).
    #[error(
        "model call {operation_id} failed ({}, {}): {}",
        problem.kind(),
        position.as_str(),
        problem.message()
    )]
    Model {
        /// The last attempt.
        operation_id: OperationId,
        /// Its problem.
        problem: ProviderProblem,
        /// Where the stream was when it failed.
        position: RetryPosition,
    },
    /// A tool failed and its policy ends the run.
    #[error("tool {tool} (call {call_id}) failed: {error}")]
    Tool {
        /// The call.
        call_id: CallId,
        /// The tool.
        tool: ToolName,
        /// The (screened, bounded) error.
        error: String,
    },
    /// A required observer refused an event.
    #[error("{0}")]
    Observer(#[source] DispatchError),
    /// A limit was hit (`max_turns`, `max_tool_calls_per_turn`, a request
    /// bound).
    #[error("{limit}: {detail}")]
    Limit {
        /// Which limit, e.g. `limits.max_turns`.
        limit: String,
        /// What happened.
        detail: String,
    },
    /// A budget of the run or of an ancestor was spent at a model or tool
    /// call boundary (`limits.budget`).
    #[error("{}: spent {spent} of limit {limit}", member.rule())]
    Budget {
        /// The member spent.
        member: BudgetMember,
        /// What the account that set the limit has spent (milliseconds
        /// since its run started for [`BudgetMember::WallMs`]).
        spent: u64,
        /// Its limit.
        limit: u64,
    },
    /// The log refused a commit the engine made, or the run task panicked
    /// outside every guarded extension point (a bug, reported rather than
    /// hidden).
    #[error("internal: {0}")]
    Internal(String),
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;
    use keel_observers::ObserverError;
    use keel_stream::ProblemKind;
    use std::error::Error as _;

    fn dispatch() -> DispatchError {
        DispatchError {
            observer: "journal".into(),
            index: 0,
            run_id: keel_message::RunId::parse("run_1").unwrap(),
            seq: 3,
            source: ObserverError::Failed("disk full".into()),
        }
    }

    #[test]
    fn display_texts_are_the_ones_events_record() {
        let model = FailureCause::Model {
            operation_id: OperationId::parse("op_2").unwrap(),
            problem: ProviderProblem::new(ProblemKind::RateLimited, "slow down", true),
            position: RetryPosition::Pristine,
        };
        let expected = format!(
            "model call op_2 failed ({}, {}): slow down",
            ProblemKind::RateLimited,
            RetryPosition::Pristine.as_str()
        );
        assert_eq!(model.to_string(), expected);
        let tool = FailureCause::Tool {
            call_id: CallId::parse("c1").unwrap(),
            tool: ToolName::parse("get_weather").unwrap(),
            error: "boom".into(),
        };
        assert_eq!(tool.to_string(), "tool get_weather (call c1) failed: boom");
        let limit = FailureCause::Limit {
            limit: "limits.max_turns".into(),
            detail: "4 turns".into(),
        };
        assert_eq!(limit.to_string(), "limits.max_turns: 4 turns");
        let budget = FailureCause::Budget {
            member: BudgetMember::ToolCalls,
            spent: 3,
            limit: 3,
        };
        assert_eq!(budget.to_string(), "budget.tool_calls: spent 3 of limit 3");
        assert_eq!(
            FailureCause::Internal("x".into()).to_string(),
            "internal: x"
        );
        assert_eq!(
            FailureCause::Observer(dispatch()).to_string(),
            dispatch().to_string()
        );
    }

    #[test]
    fn observer_failure_has_the_refusal_as_source() {
        let cause = FailureCause::Observer(dispatch());
        let source = cause.source().unwrap();
        assert_eq!(source.to_string(), dispatch().to_string());
        assert_eq!(source.source().unwrap().to_string(), "disk full");
        assert!(FailureCause::Internal("x".into()).source().is_none());
    }
}
