//! Typed, bounded, screened provider problems. `ProviderProblem::from_raw`
//! is in `validator.rs`, with every other raw-to-validated step, so that
//! this module does not depend on the raw types.

use crate::secrets;
use keel_message::Limits;
use keel_message::canonical::MAX_SAFE_INTEGER;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

crate::wire_enum! {
    /// What went wrong with a model call, provider-neutrally. Extensible:
    /// a value this version does not know decodes as
    /// [`ProblemKind::Unknown`] and re-encodes verbatim; its generic
    /// meaning is [`Other`](ProblemKind::Other) (the engine's retry policy
    /// treats it so). Providers map their errors to the known kinds; the
    /// validator refuses `Unknown` on the live path (rule
    /// `stream.known_value`).
    pub enum ProblemKind ("problem kind") {
        /// Too many requests (HTTP 429).
        RateLimited => "rate_limited",
        /// The provider is overloaded (HTTP 529, 503 "overloaded").
        Overloaded => "overloaded",
        /// The provider could not be reached, or the stream ended without
        /// its terminator.
        Unavailable => "unavailable",
        /// The call took too long.
        Timeout => "timeout",
        /// The credentials were missing, wrong or not allowed (HTTP 401, 403).
        Auth => "auth",
        /// The provider refused the request as malformed (HTTP 400, 404, 422).
        InvalidRequest => "invalid_request",
        /// The provider refused the request or its output on policy grounds.
        ContentFilter => "content_filter",
        /// The request did not fit the model's context window.
        ContextLength => "context_length",
        /// The provider (or its adapter) broke the stream protocol; also
        /// every host-side validation failure.
        Protocol => "protocol",
        /// The host cancelled the call.
        Cancelled => "cancelled",
        /// Anything else.
        Other => "other",
    }
}

impl ProblemKind {
    /// Every known kind, in declaration order (the same as [`ProblemKind::KNOWN`]).
    pub const ALL: [ProblemKind; 11] = [
        ProblemKind::RateLimited,
        ProblemKind::Overloaded,
        ProblemKind::Unavailable,
        ProblemKind::Timeout,
        ProblemKind::Auth,
        ProblemKind::InvalidRequest,
        ProblemKind::ContentFilter,
        ProblemKind::ContextLength,
        ProblemKind::Protocol,
        ProblemKind::Cancelled,
        ProblemKind::Other,
    ];
}

/// A validated provider problem: kind, a bounded and screened message, a
/// `retryable` flag and an optional retry-after delay.
///
/// **A problem message is never rejected.** Losing a failure report is
/// worse than keeping an imperfect one, so instead of failing, building a
/// problem:
///
/// 1. replaces every span that [`secrets::screen_value`] flags with
///    `[redacted]` (then [`redacted`](Self::redacted) is `true`), and
/// 2. truncates the result at a char boundary to
///    `limits.problem_message_bytes` (then [`truncated`](Self::truncated)
///    is `true`), screening again what is left.
///
/// ```
/// use keel_stream::{ProblemKind, ProviderProblem};
/// let key = format!("{}{}", "sk-", "x1Y2".repeat(10));
/// let p = ProviderProblem::new(ProblemKind::Auth, &format!("Incorrect API key provided: {key}"), false);
/// assert_eq!(p.message(), "Incorrect API key provided: [redacted]");
/// assert!(p.redacted() && !p.truncated());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ProviderProblem {
    kind: ProblemKind,
    message: Arc<str>,
    retryable: bool,
    retry_after: Option<Duration>,
    redacted: bool,
    truncated: bool,
}

impl ProviderProblem {
    /// A problem under the default limits (see [`new_with`](Self::new_with)).
    pub fn new(kind: ProblemKind, message: &str, retryable: bool) -> ProviderProblem {
        Self::new_with(kind, message, retryable, Limits::default_ref())
    }

    /// A problem whose message is redacted and bounded by
    /// `limits.problem_message_bytes`. Never fails.
    pub fn new_with(
        kind: ProblemKind,
        message: &str,
        retryable: bool,
        limits: &Limits,
    ) -> ProviderProblem {
        let screened = secrets::screen_and_bound(message, limits.problem_message_bytes);
        ProviderProblem {
            kind,
            redacted: screened.redacted(),
            truncated: screened.truncated(),
            message: screened.into_text().into(),
            retryable,
            retry_after: None,
        }
    }

    /// The same problem with this retry-after delay (`None` clears it).
    pub fn with_retry_after(mut self, retry_after: impl Into<Option<Duration>>) -> ProviderProblem {
        self.retry_after = retry_after.into();
        self
    }

    /// What went wrong.
    pub fn kind(&self) -> ProblemKind {
        self.kind.clone()
    }
    /// The screened, bounded message.
    pub fn message(&self) -> &str {
        &self.message
    }
    /// Whether the provider says trying again may succeed.
    pub fn retryable(&self) -> bool {
        self.retryable
    }
    /// How long the provider asked to wait before retrying, if it said.
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }
    /// Whether part of the message was replaced by `[redacted]`.
    pub fn redacted(&self) -> bool {
        self.redacted
    }
    /// Whether the message was cut to `limits.problem_message_bytes`.
    pub fn truncated(&self) -> bool {
        self.truncated
    }
}

impl fmt::Display for ProviderProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.message)
    }
}

#[derive(Serialize)]
struct ProblemOut<'a> {
    kind: ProblemKind,
    message: &'a str,
    retryable: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_after_ms: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProblemWire {
    kind: ProblemKind,
    message: String,
    retryable: bool,
    #[serde(default)]
    retry_after_ms: Option<u64>,
}

/// Wire shape: `{"kind", "message", "retryable"}` plus `"retry_after_ms"`
/// (an integer, at most 2^53 − 1) when a delay is known.
impl Serialize for ProviderProblem {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        ProblemOut {
            kind: self.kind.clone(),
            message: &self.message,
            retryable: self.retryable,
            retry_after_ms: self.retry_after.map(|d| {
                u64::try_from(d.as_millis())
                    .unwrap_or(u64::MAX)
                    .min(MAX_SAFE_INTEGER)
            }),
        }
        .serialize(s)
    }
}

/// Decoding runs [`ProviderProblem::new_with`] under the default limits, so
/// it redacts and bounds like building does.
impl<'de> Deserialize<'de> for ProviderProblem {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let w = ProblemWire::deserialize(d)?;
        Ok(ProviderProblem::new(w.kind, &w.message, w.retryable)
            .with_retry_after(w.retry_after_ms.map(Duration::from_millis)))
    }
}

#[cfg(test)]
mod tests {
    use super::ProblemKind;

    /// `ALL` is every kind once, in order: the match is exhaustive, so a
    /// new kind does not compile until it has a place here and in `ALL`.
    #[test]
    fn all_lists_every_kind_once() {
        for (i, kind) in ProblemKind::ALL.iter().enumerate() {
            let index = match kind {
                ProblemKind::RateLimited => 0,
                ProblemKind::Overloaded => 1,
                ProblemKind::Unavailable => 2,
                ProblemKind::Timeout => 3,
                ProblemKind::Auth => 4,
                ProblemKind::InvalidRequest => 5,
                ProblemKind::ContentFilter => 6,
                ProblemKind::ContextLength => 7,
                ProblemKind::Protocol => 8,
                ProblemKind::Cancelled => 9,
                ProblemKind::Other => 10,
                ProblemKind::Unknown(_) => usize::MAX,
            };
            assert_eq!(index, i, "{kind:?}");
        }
        assert_eq!(ProblemKind::ALL.as_slice(), ProblemKind::KNOWN);
    }
}
