//! The abnormal end of a stream: a problem and where it happened.

use crate::problem::{ProblemKind, ProviderProblem};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Where in the stream a failure happened, as the host saw it: the basis
/// of every retry decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RetryPosition {
    /// No valid text delta or tool call had been accepted: a retry cannot
    /// duplicate output.
    Pristine,
    /// At least one valid text delta or tool call had been accepted.
    Partial,
}

impl RetryPosition {
    /// The wire name, `"pristine"` or `"partial"`.
    pub fn as_str(self) -> &'static str {
        match self {
            RetryPosition::Pristine => "pristine",
            RetryPosition::Partial => "partial",
        }
    }
}

impl fmt::Display for RetryPosition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The abnormal end of a stream: a typed problem and the host-computed
/// retry position. Wire shape: `{"problem": {…}, "position": …}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelFailure {
    problem: ProviderProblem,
    position: RetryPosition,
}

impl ModelFailure {
    /// A failure at a position the host computed (the validator's
    /// [`position`](crate::StreamValidator::position)).
    pub fn new(problem: ProviderProblem, position: RetryPosition) -> ModelFailure {
        ModelFailure { problem, position }
    }

    /// A failure to start a stream: always [`RetryPosition::Pristine`].
    pub fn at_start(problem: ProviderProblem) -> ModelFailure {
        Self::new(problem, RetryPosition::Pristine)
    }

    /// What went wrong.
    pub fn problem(&self) -> &ProviderProblem {
        &self.problem
    }
    /// Where it went wrong.
    pub fn position(&self) -> RetryPosition {
        self.position
    }
    /// Shorthand for `self.problem().kind()`.
    pub fn kind(&self) -> ProblemKind {
        self.problem.kind()
    }
}

impl fmt::Display for ModelFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.problem, self.position)
    }
}
