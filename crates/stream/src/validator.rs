//! The host-side stream validator: [`StreamValidator`] (configured by
//! [`ValidatorConfig`]) turns raw items into validated ones, counts what
//! it accepted (the retry position is computed here and nowhere else),
//! screens completion metadata, and ends a stream with exactly one
//! terminal. `ProviderProblem::from_raw` lives here beside the other
//! raw-to-validated steps.

use crate::failure::{ModelFailure, RetryPosition};
use crate::item::{Completion, DeltaText, FinishReason, StreamItem};
use crate::metadata::{MetadataAllowlist, ProviderMetadata};
use crate::problem::ProviderProblem;
use crate::raw::{RawCompletion, RawItem, RawProblem, RawToolCall};
use crate::usage::Usage;
use crate::violation::StreamViolation;
use crate::wire_value::WireEnum;
use keel_message::{
    Bound, CallId, CanonicalJson, Limits, MessageErrorKind, OpaqueValue, ToolCallPart, ToolName,
};
use std::collections::HashSet;

/// Whether a `stop` finish may follow tool calls.
///
/// OpenAI and Anthropic streams that carry tool calls finish with
/// `tool_calls` (`tool_use`), so a `stop` after tool calls usually means an
/// adapter lost track; some OpenAI-compatible servers do send it, though.
/// Their adapters should map it to `tool_calls`, or the host can choose
/// [`Allow`](Self::Allow). `length` and `content_filter` after tool calls
/// are always accepted: they interrupt, they don't contradict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum StopAfterToolCalls {
    /// Accept a `stop` finish after tool calls.
    Allow,
    /// Reject it as [`StreamViolation::StopAfterToolCalls`] (the default).
    #[default]
    Forbid,
}

/// Validator policy. Build it from [`Default`] and set fields:
///
/// ```
/// use keel_stream::{StopAfterToolCalls, ValidatorConfig};
/// let mut config = ValidatorConfig::default();
/// config.stop_after_tool_calls = StopAfterToolCalls::Allow;
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ValidatorConfig {
    /// Whether a `stop` finish may follow tool calls. Default
    /// [`StopAfterToolCalls::Forbid`].
    pub stop_after_tool_calls: StopAfterToolCalls,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Open,
    Terminated,
}

/// Where the stream is with reasoning: what the last accepted item did to
/// it. A signature is only valid right after a reasoning delta.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reasoning {
    /// No reasoning part open: the last item was not reasoning.
    Closed,
    /// A reasoning delta opened (or continued) a part.
    Open,
    /// A signature closed the part.
    Signed,
    /// A redacted part came (whole).
    Redacted,
}

/// Validates one model stream, item by item, and computes its retry
/// position.
///
/// - [`accept`](Self::accept) turns each [`RawItem`] into a [`StreamItem`]
///   or a [`StreamViolation`]. The first terminal (completion or failure) or
///   violation ends the stream: every later item is
///   [`StreamViolation::AfterTerminal`].
/// - [`end_of_stream`](Self::end_of_stream) reports a stream that ended
///   with no terminal ([`StreamViolation::NoTerminal`]).
/// - [`position`](Self::position) is [`RetryPosition::Partial`] once a
///   valid text delta, reasoning item or tool call has been accepted. A
///   provider failure
///   item gets this position whatever the adapter believes; adapters have
///   no way to state one.
/// - Reasoning: a reasoning delta opens a part (or continues the open
///   one); a signature is valid only for the open part and closes it
///   (rules `stream.signature_open_part`, `stream.signature_once`,
///   `stream.redacted_whole`); any other item closes it unsigned. A
///   redacted part is one item, valid whenever the stream is open.
///
/// Completion metadata is reduced to the allowlisted namespaces *before*
/// it is validated ([`ProviderMetadata::from_value_allowed`]): what is
/// dropped is not inspected and cannot fail the stream.
///
/// ```
/// use keel_stream::*;
/// use keel_message::Limits;
/// let mut v = StreamValidator::new(ValidatorConfig::default(), Limits::default(), MetadataAllowlist::empty());
/// assert!(v.accept(RawItem::text("Hi")).is_ok());
/// assert_eq!(v.accept(RawItem::text("")), Err(StreamViolation::EmptyDelta));
/// assert_eq!(v.accept(RawItem::text("late")), Err(StreamViolation::AfterTerminal));
/// assert_eq!(v.position(), RetryPosition::Partial);
/// ```
#[derive(Debug, Clone)]
pub struct StreamValidator {
    config: ValidatorConfig,
    limits: Limits,
    allowlist: MetadataAllowlist,
    call_ids: HashSet<CallId>,
    valid_items: u64,
    state: State,
    reasoning: Reasoning,
}

impl StreamValidator {
    /// A validator for one stream.
    pub fn new(config: ValidatorConfig, limits: Limits, allowlist: MetadataAllowlist) -> Self {
        StreamValidator {
            config,
            limits,
            allowlist,
            call_ids: HashSet::new(),
            valid_items: 0,
            state: State::Open,
            reasoning: Reasoning::Closed,
        }
    }

    /// The limits this validator enforces.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// [`RetryPosition::Partial`] once a valid text delta, reasoning item
    /// or tool call has been accepted (all of them are observed output),
    /// else [`RetryPosition::Pristine`].
    pub fn position(&self) -> RetryPosition {
        if self.valid_items > 0 {
            RetryPosition::Partial
        } else {
            RetryPosition::Pristine
        }
    }

    /// Whether the stream has ended: a terminal was accepted, or a
    /// violation was reported.
    pub fn is_terminated(&self) -> bool {
        self.state == State::Terminated
    }

    /// Validates the next raw item. On `Err`, the stream is over: turn the
    /// violation into its failure with
    /// [`into_failure_with`](StreamViolation::into_failure_with) and
    /// [`position`](Self::position).
    pub fn accept(&mut self, raw: RawItem) -> Result<StreamItem, StreamViolation> {
        if self.state == State::Terminated {
            return Err(StreamViolation::AfterTerminal);
        }
        let result = self.check(raw);
        self.reasoning = match &result {
            Ok(StreamItem::ReasoningDelta(_)) => Reasoning::Open,
            Ok(StreamItem::ReasoningSignature(_)) => Reasoning::Signed,
            Ok(StreamItem::RedactedReasoning(_)) => Reasoning::Redacted,
            _ => Reasoning::Closed,
        };
        match &result {
            Ok(item) if !item.is_terminal() => self.valid_items += 1,
            Ok(_) | Err(_) => self.state = State::Terminated,
        }
        result
    }

    /// Reports the end of the raw stream: `Err(NoTerminal)` if it ended
    /// with no terminal item (and no violation was reported before). The
    /// stream is over afterwards.
    pub fn end_of_stream(&mut self) -> Result<(), StreamViolation> {
        match self.state {
            State::Terminated => Ok(()),
            State::Open => {
                self.state = State::Terminated;
                Err(StreamViolation::NoTerminal)
            }
        }
    }

    fn check(&mut self, raw: RawItem) -> Result<StreamItem, StreamViolation> {
        match raw {
            RawItem::TextDelta(text) => Ok(StreamItem::TextDelta(DeltaText::new_with(
                text,
                &self.limits,
            )?)),
            RawItem::ReasoningDelta(text) => {
                if text.is_empty() {
                    return Err(StreamViolation::EmptyReasoningDelta);
                }
                Ok(StreamItem::ReasoningDelta(DeltaText::new_with(
                    text,
                    &self.limits,
                )?))
            }
            RawItem::ReasoningSignature(signature) => {
                match self.reasoning {
                    Reasoning::Open => {}
                    Reasoning::Signed => return Err(StreamViolation::SignatureRepeated),
                    Reasoning::Redacted => return Err(StreamViolation::SignatureAfterRedacted),
                    Reasoning::Closed => return Err(StreamViolation::SignatureWithoutReasoning),
                }
                self.opaque("reasoning signature", &signature)
                    .map(StreamItem::ReasoningSignature)
            }
            RawItem::RedactedReasoning(value) => self
                .opaque("redacted reasoning", &value)
                .map(StreamItem::RedactedReasoning),
            RawItem::ToolCall(call) => self.tool_call(call).map(StreamItem::ToolCall),
            RawItem::Completion(c) => self.completion(c).map(StreamItem::Completion),
            RawItem::Failure(problem) => {
                known(&problem.kind)?;
                Ok(StreamItem::Failure(ModelFailure::new(
                    ProviderProblem::from_raw(problem, &self.limits),
                    self.position(),
                )))
            }
        }
    }

    /// A signature or redacted value: an [`OpaqueValue`] within
    /// `limits.opaque_bytes`. Its error keeps the rule and the length,
    /// never the value.
    fn opaque(&self, what: &'static str, raw: &str) -> Result<OpaqueValue, StreamViolation> {
        OpaqueValue::new_with(raw, &self.limits).map_err(|e| match e.kind() {
            MessageErrorKind::Limit(limit) => StreamViolation::OverBound(*limit),
            kind => StreamViolation::InvalidOpaque {
                what,
                rule: kind.rule(),
                len: raw.len(),
            },
        })
    }

    fn tool_call(&mut self, raw: RawToolCall) -> Result<ToolCallPart, StreamViolation> {
        let call_id = CallId::parse(&raw.call_id).map_err(StreamViolation::InvalidCallId)?;
        let name = ToolName::parse(&raw.name).map_err(StreamViolation::InvalidToolName)?;
        if self.call_ids.contains(&call_id) {
            return Err(StreamViolation::DuplicateCallId { call_id });
        }
        Bound::ToolCallsPerStream.check(&self.limits, self.call_ids.len() + 1)?;
        let arguments =
            CanonicalJson::parse_with(&raw.arguments, &self.limits).map_err(|e| {
                match e.limit() {
                    Some(limit) => StreamViolation::OverBound(*limit),
                    None => StreamViolation::ArgumentsNotJson { rule: e.rule() },
                }
            })?;
        // `ToolCallPart` owns the object rule; its error maps below.
        let part = ToolCallPart::new_with(call_id.clone(), name, arguments, &self.limits).map_err(
            |e| match e.kind() {
                MessageErrorKind::Limit(limit) => StreamViolation::OverBound(*limit),
                MessageErrorKind::ArgumentsNotObject => StreamViolation::ArgumentsNotObject,
                _ => StreamViolation::InvalidToolCall(e),
            },
        )?;
        self.call_ids.insert(call_id);
        Ok(part)
    }

    fn completion(&mut self, raw: RawCompletion) -> Result<Completion, StreamViolation> {
        let had_calls = !self.call_ids.is_empty();
        known(&raw.finish)?;
        match raw.finish {
            FinishReason::ToolCalls if !had_calls => {
                return Err(StreamViolation::FinishWithoutToolCalls);
            }
            FinishReason::Stop
                if had_calls && self.config.stop_after_tool_calls == StopAfterToolCalls::Forbid =>
            {
                return Err(StreamViolation::StopAfterToolCalls);
            }
            _ => {}
        }
        let usage = raw
            .usage
            .map(|u| Usage::new(u.input_tokens, u.output_tokens))
            .transpose()?;
        let metadata = match &raw.metadata {
            None => ProviderMetadata::empty(),
            Some(value) => {
                ProviderMetadata::from_value_allowed(value, &self.allowlist, &self.limits)?
            }
        };
        Ok(Completion::new(raw.finish, usage, metadata))
    }
}

/// Rule `stream.known_value`: a raw item carries known values only.
fn known<E: WireEnum>(value: &E) -> Result<(), StreamViolation> {
    if value.is_known() {
        Ok(())
    } else {
        Err(StreamViolation::UnknownValue { what: E::WHAT })
    }
}

/// Lives with the validator, which turns every other raw item into its
/// validated form too.
impl ProviderProblem {
    /// Validates what an adapter reported.
    pub fn from_raw(raw: RawProblem, limits: &Limits) -> ProviderProblem {
        Self::new_with(raw.kind, &raw.message, raw.retryable, limits)
            .with_retry_after(raw.retry_after)
    }
}
