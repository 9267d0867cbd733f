//! # keel-stream: the model stream union and its host-side validator
//!
//! This crate defines what a model call produces and checks that a
//! provider produced exactly that. It owns:
//!
//! - [`StreamItem`], a strict tagged union: a [`DeltaText`], a reasoning
//!   delta, signature or redacted part, a finalized
//!   tool call ([`keel_message::ToolCallPart`]), a [`Completion`] (finish
//!   reason, [`Usage`], [`ProviderMetadata`]) or a [`ModelFailure`] (a typed
//!   [`ProviderProblem`] and its [`RetryPosition`]);
//! - [`RawItem`], the unvalidated form provider adapters emit, and the
//!   [`StreamValidator`] that turns one into the other, rejecting empty,
//!   oversized, duplicate, contradictory and post-terminal items with a
//!   typed [`StreamViolation`] each, and computing the retry position on the
//!   host side;
//! - [`ProviderMetadata`], namespaced bounded JSON that enters events only
//!   for namespaces in the engine's [`MetadataAllowlist`], and the
//!   [`secrets`] screens that keep credentials, headers, prompt and tool
//!   content and raw payloads out of it;
//! - the [`ModelProvider`] trait and [`ValidatedStream`], the validating
//!   [`Stream`](futures_core::Stream) adapter every provider stream is read
//!   through.
//!
//! Decisions worth knowing:
//!
//! - **Retry position is the host's.** It is `partial` once a valid text
//!   delta, reasoning item or tool call has been accepted (reasoning is
//!   observed output too), else `pristine`; a start failure
//!   is always `pristine`. No raw type has a field that could claim a
//!   position.
//! - **A violation is a failure, not a panic or an error channel.** The
//!   first violation ends the stream as a [`ModelFailure`] of kind
//!   [`ProblemKind::Protocol`], not retryable, whose message is the
//!   violation's `Display` (it names the rule and never echoes content).
//!   Nothing is accepted after a terminal.
//! - **A problem message is never rejected.** Losing a failure report is
//!   worse than keeping an imperfect one: secrets in it are replaced by
//!   `[redacted]` and it is cut at a char boundary to
//!   `limits.problem_message_bytes`, with [`ProviderProblem::redacted`] and
//!   [`ProviderProblem::truncated`] telling which happened. Metadata, on the
//!   other hand, is optional, so metadata that breaks a rule fails the
//!   stream with a [`MetadataError`] naming the rule and the JSON path.
//! - **Non-allowlisted metadata is dropped unread**, not rejected.
//! - **Wire enums are additive.** [`FinishReason`], [`ProblemKind`] and
//!   [`RetryPosition`] decode a value this version does not know as their
//!   `Unknown` variant ([`UnknownValue`], rule `wire_value.syntax`) and
//!   encode it back byte for byte, so a newer minor version's events stay
//!   readable. Only decoding makes one: the validator refuses an unknown
//!   value in a raw item (rule `stream.known_value`), so the live path
//!   produces known values only.
//!
//! What it is not: it does no I/O, speaks no provider wire format and runs
//! no tasks; it depends only on `futures-core` for the `Stream` trait, not
//! on an async runtime. `keel-message` sits below it (ids, tool calls,
//! requests, [`Limits`](keel_message::Limits), canonical JSON).
//! `keel-providers` adapts OpenAI- and Anthropic-style wire streams to
//! [`RawItem`]s; `keel-testkit` scripts raw streams; `keel-eventlog` records
//! validated items as `model.*` events (reusing [`secrets`] for tool error
//! text); `keel-engine` drives providers through [`validate`] and decides
//! retries from the [`ModelFailure`]s.
//!
//! ```
//! use keel_stream::*;
//! use keel_message::Limits;
//!
//! let raw = vec![
//!     RawItem::text("Checking."),
//!     RawItem::tool_call("c1", "get_weather", r#"{ "city": "Oslo" }"#),
//!     RawItem::Completion(RawCompletion {
//!         finish: FinishReason::ToolCalls,
//!         usage: Some(RawUsage { input_tokens: 12, output_tokens: 7 }),
//!         metadata: Some(serde_json::json!({
//!             "scripted": {"request_id": "r1"},
//!             "debug": {"authorization": "never looked at: not allowlisted"}
//!         })),
//!     }),
//! ];
//! let mut validator = StreamValidator::new(
//!     ValidatorConfig::default(),
//!     Limits::default(),
//!     MetadataAllowlist::new(["scripted"])?,
//! );
//! let items = raw
//!     .into_iter()
//!     .map(|item| validator.accept(item))
//!     .collect::<Result<Vec<_>, _>>()?;
//! validator.end_of_stream()?;
//! assert_eq!(validator.position(), RetryPosition::Partial);
//!
//! let StreamItem::Completion(done) = &items[2] else { unreachable!() };
//! assert_eq!(done.usage().map(|u| u.total()), Some(19));
//! assert_eq!(
//!     serde_json::to_string(&items[2])?,
//!     r#"{"type":"completion","finish":"tool_calls","usage":{"input_tokens":12,"output_tokens":7},"metadata":{"scripted":{"request_id":"r1"}}}"#
//! );
//!
//! // Anything after the terminal is a violation, which becomes a protocol failure.
//! let violation = validator.accept(RawItem::text("late")).unwrap_err();
//! assert_eq!(violation, StreamViolation::AfterTerminal);
//! let failure = violation.into_failure(validator.position());
//! assert_eq!(failure.kind(), ProblemKind::Protocol);
//! assert!(!failure.problem().retryable());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

mod failure;
mod item;
mod metadata;
mod problem;
mod provider;
mod raw;
pub mod secrets;
mod usage;
mod validator;
mod violation;
pub mod wire_value;

pub use failure::{ModelFailure, RetryPosition};
pub use item::{Completion, DeltaText, FinishReason, StreamItem};
pub use metadata::{
    MetadataAllowlist, MetadataError, MetadataErrorKind, NAMESPACE_MAX_BYTES, ProviderMetadata,
};
pub use problem::{ProblemKind, ProviderProblem};
pub use provider::{ModelProvider, RawStream, StartFuture, ValidatedStream, validate};
pub use raw::{RawCompletion, RawItem, RawProblem, RawToolCall, RawUsage};
pub use usage::{Usage, UsageOverflow};
pub use validator::{StopAfterToolCalls, StreamValidator, ValidatorConfig};
pub use violation::StreamViolation;
pub use wire_value::{UNKNOWN_VALUE_MAX_BYTES, UnknownValue, WireEnum, WireValueError};
