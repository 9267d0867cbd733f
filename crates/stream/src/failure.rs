//! The abnormal end of a stream: a problem and where it happened.

use crate::problem::{ProblemKind, ProviderProblem};
use serde::{Deserialize, Serialize};
use std::fmt;

crate::wire_enum! {
    /// Where in the stream a failure happened, as the host saw it: the
    /// basis of every retry decision. Extensible: a value this version does
    /// not know decodes as [`RetryPosition::Unknown`] and re-encodes
    /// verbatim; a reader treats it as [`Partial`](RetryPosition::Partial)
    /// ([`may_have_output`](RetryPosition::may_have_output)), the side on
    /// which a retry can never silently duplicate output. Only the
    /// validator computes a position, and only a known one.
    pub enum RetryPosition ("retry position") {
        /// No valid text delta or tool call had been accepted: a retry
        /// cannot duplicate output.
        Pristine => "pristine",
        /// At least one valid text delta or tool call had been accepted.
        Partial => "partial",
    }
}

impl RetryPosition {
    /// Whether output may have been accepted before the failure: true for
    /// [`Partial`](RetryPosition::Partial) and for an unknown position
    /// (the conservative reading), false only for
    /// [`Pristine`](RetryPosition::Pristine).
    pub fn may_have_output(&self) -> bool {
        !matches!(self, RetryPosition::Pristine)
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
        self.position.clone()
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
