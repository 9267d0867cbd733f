//! The stream rules a raw item can break, and the protocol failure each
//! becomes.

use crate::failure::{ModelFailure, RetryPosition};
use crate::metadata::MetadataError;
use crate::problem::{ProblemKind, ProviderProblem};
use crate::usage::UsageOverflow;
use keel_message::{CallId, IdError, LimitExceeded, Limits, MessageError};

/// A stream rule a raw item broke. One variant per rule; `Display` names
/// the rule and never echoes content (text, arguments, metadata values or
/// an unparsable id or name; a *valid* duplicate call id is named).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StreamViolation {
    /// A text delta with no text.
    #[error("empty text delta (rule stream.delta_nonempty)")]
    EmptyDelta,
    /// A reasoning delta with no text.
    #[error("empty reasoning delta (rule stream.reasoning_nonempty)")]
    EmptyReasoningDelta,
    /// A reasoning signature with no reasoning part open (none was
    /// started, or another item closed it).
    #[error("reasoning signature with no open reasoning part (rule stream.signature_open_part)")]
    SignatureWithoutReasoning,
    /// A second signature for the reasoning part its first one closed.
    #[error("reasoning part signed twice (rule stream.signature_once)")]
    SignatureRepeated,
    /// A signature after a redacted reasoning part, which comes whole.
    #[error("reasoning signature after a redacted reasoning part (rule stream.redacted_whole)")]
    SignatureAfterRedacted,
    /// A signature or redacted value that is not an opaque value (empty, or
    /// not printable ASCII). Only the rule and the length are kept: the
    /// value itself is a provider secret.
    #[error("{what} is not a valid opaque value ({rule}; {len} bytes) (rule stream.opaque_value)")]
    InvalidOpaque {
        /// `reasoning signature` or `redacted reasoning`.
        what: &'static str,
        /// The message rule it broke ([`keel_message::MessageErrorKind::rule`]).
        rule: &'static str,
        /// Its length in bytes.
        len: usize,
    },
    /// An item over its bound: `delta_bytes` (text and reasoning deltas),
    /// `opaque_bytes` (signatures, redacted values), `tool_calls_per_stream`,
    /// `json_bytes` or `part_bytes` (tool-call arguments).
    #[error("item over its bound: {0}")]
    OverBound(#[from] LimitExceeded),
    /// A tool call id that is not a valid id.
    #[error("tool call has an invalid call id: {0}")]
    InvalidCallId(IdError),
    /// A tool call whose name breaks the tool-name rule.
    #[error("tool call has an invalid name: {}", .0.kind())]
    InvalidToolName(MessageError),
    /// A second tool call with the same call id.
    #[error("call id {call_id} is used twice in the stream (rule stream.call_id_unique)")]
    DuplicateCallId {
        /// The repeated id.
        call_id: CallId,
    },
    /// Tool-call arguments that are not valid (I-)JSON. Only the JSON rule
    /// is kept (e.g. `json.syntax`, `json.duplicate_key`): the parser's
    /// path would quote member names from the arguments, which are content.
    #[error("tool call arguments are not valid JSON ({rule}) (rule stream.arguments_json)")]
    ArgumentsNotJson {
        /// The canonical JSON rule that was broken ([`keel_message::JsonError::rule`]).
        rule: &'static str,
    },
    /// Tool-call arguments that are JSON but not an object.
    #[error("tool call arguments are not a JSON object (rule stream.arguments_object)")]
    ArgumentsNotObject,
    /// A tool call rejected by another `keel-message` rule.
    #[error("tool call is invalid: {}", .0.kind())]
    InvalidToolCall(MessageError),
    /// Any item after a completion, a failure or a violation.
    #[error("item after the stream's terminal (rule stream.after_terminal)")]
    AfterTerminal,
    /// A `tool_calls` finish with no tool call before it.
    #[error("finish reason tool_calls without any tool call (rule stream.finish_tool_calls)")]
    FinishWithoutToolCalls,
    /// A `stop` finish after tool calls, when the policy forbids it.
    #[error(
        "finish reason stop after tool calls (rule stream.stop_after_tool_calls; policy forbid)"
    )]
    StopAfterToolCalls,
    /// Usage counts that JSON cannot carry exactly.
    #[error(transparent)]
    UsageOverflow(#[from] UsageOverflow),
    /// Completion metadata that broke a metadata rule.
    #[error("completion metadata rejected: {0}")]
    Metadata(#[from] MetadataError),
    /// A raw finish reason or problem kind that is the enum's `Unknown`
    /// variant: only decoding a stored event makes one, and the live path
    /// produces known values only.
    #[error("raw {what} is not a known value (rule stream.known_value)")]
    UnknownValue {
        /// `finish reason` or `problem kind`.
        what: &'static str,
    },
    /// The stream ended with no completion or failure.
    #[error("stream ended without a terminal item (rule stream.terminal)")]
    NoTerminal,
}

impl StreamViolation {
    /// The protocol failure this violation becomes, under the default
    /// limits: problem kind `protocol`, not retryable, the message is this
    /// violation's `Display`.
    pub fn into_failure(self, position: RetryPosition) -> ModelFailure {
        self.into_failure_with(position, Limits::default_ref())
    }

    /// As [`into_failure`](Self::into_failure), bounding the message by
    /// `limits.problem_message_bytes`.
    pub fn into_failure_with(self, position: RetryPosition, limits: &Limits) -> ModelFailure {
        ModelFailure::new(
            ProviderProblem::new_with(ProblemKind::Protocol, &self.to_string(), false, limits),
            position,
        )
    }
}
