//! One typed payload per event kind.
//!
//! Every payload struct keeps members it does not know in `extra`, so an
//! event written by a newer minor version decodes, and re-encodes to the
//! same bytes. Known members are typed; text that may carry provider or
//! tool output on failure paths is an [`ErrorText`]: screened for secrets
//! and bounded.

use crate::chat_id::ChatId;
use crate::kind::{EventKind, Phase, Scope, Terminal};
pub use crate::reference::RunInputReference;
use crate::scope::{ScopeKey, Transition};
use keel_message::canonical::MAX_SAFE_INTEGER as MAX_SAFE;
use keel_message::{
    CallId, CanonicalJson, ImagePart, InteractionId, Message, ModelName, OpaqueValue, OperationId,
    ProviderTag, RunId, ToolName,
};
use keel_stream::{
    FinishReason, ProblemKind, ProviderMetadata, ProviderProblem, RetryPosition, Usage,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

mod compaction;
mod media_line;
mod sub_run;
pub use compaction::{
    CompactedRange, CompactionRule, ContextCompacted, ContextCompactionFailed, EstimatorKind,
    ModelPurpose, TokenEstimator,
};
use media_line::MediaPayload;
pub use sub_run::{ParentLink, SUB_RUN, SubRunRef, SubRunStarted};

/// Members a payload does not know, kept for a byte-identical round trip.
pub type Extra = BTreeMap<String, serde_json::Value>;

/// The longest [`ErrorText`], in bytes. Terminal payloads stay small so the
/// log's terminal reserve can hold them (see `LogConfig`).
pub const ERROR_TEXT_MAX_BYTES: usize = 2048;

/// Failure text for an event: secrets replaced by `[redacted]`, cut at a
/// char boundary to [`ERROR_TEXT_MAX_BYTES`]. Building one never fails, so
/// a failure is never lost because its description was unfit.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ErrorText(String);

impl ErrorText {
    /// Screens and bounds `text`. Control characters other than newline
    /// and tab become spaces, so the escaped JSON form is at most twice
    /// the bound.
    pub fn new(text: &str) -> ErrorText {
        let blanked = |c: char| c.is_control() && c != '\n' && c != '\t';
        // Most texts have nothing to blank: screen them without a copy.
        let cleaned: std::borrow::Cow<'_, str> = if text.chars().any(blanked) {
            text.chars()
                .map(|c| if blanked(c) { ' ' } else { c })
                .collect::<String>()
                .into()
        } else {
            text.into()
        };
        ErrorText(
            keel_stream::secrets::screen_and_bound(&cleaned, ERROR_TEXT_MAX_BYTES).into_text(),
        )
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ErrorText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for ErrorText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for ErrorText {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for ErrorText {
    /// Decoding applies the same screening; a stored text that changes
    /// under it then fails the canonical round-trip check, so a log holding
    /// an unscreened secret is refused rather than silently altered.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Ok(ErrorText::new(&text))
    }
}

/// `run.started`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct RunStarted {
    /// The model the run starts with, when the host names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelName>,
    /// The run this one continues (a follow-up in a conversation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continues: Option<RunId>,
    /// The run and seq this run was forked from (then `continues` is
    /// absent): its history is that run's history as its log rebuilds it
    /// up to that seq, recorded by the `run.input` reference at seq 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<ForkedFrom>,
    /// Set when a chat host started this run as run `n` of a conversation
    /// (`keel serve`'s `POST /v1/chat`): the mark the chat checks before it
    /// continues a stored run, so a run it did not start is never taken
    /// for one of its own (RFC 2026-12-04-chat-owned-runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat: Option<ChatRun>,
    /// Set when this run is a sub-run: the parent run and the tool call
    /// that started it (the parent's log names this run back in a
    /// `tool.sub_run`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ParentLink>,
    /// Unknown members.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `run.started`'s `chat` member: which conversation a chat run belongs
/// to and its place in it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatRun {
    /// The conversation's id, as the chat client names it.
    pub id: ChatId,
    /// The run's number in the conversation, from 1.
    pub n: u64,
    /// Unknown members.
    #[serde(flatten)]
    pub extra: Extra,
}

impl ChatRun {
    /// Run `n` of conversation `id`.
    pub fn new(id: ChatId, n: u64) -> ChatRun {
        ChatRun {
            id,
            n,
            extra: Extra::new(),
        }
    }
}

/// `run.started`'s `forked_from` member: the parent run and the seq of
/// its log the fork starts from (a fork point:
/// [`crate::history::ForkPoints`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkedFrom {
    /// The parent run.
    pub run_id: RunId,
    /// The parent's seq the fork starts after.
    pub seq: u64,
    /// Unknown members.
    #[serde(flatten)]
    pub extra: Extra,
}

impl ForkedFrom {
    /// A fork of `run_id` at `seq`.
    pub fn new(run_id: RunId, seq: u64) -> ForkedFrom {
        ForkedFrom {
            run_id,
            seq,
            extra: Extra::new(),
        }
    }
}

/// `run.completed`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct RunCompleted {
    /// Usage totals across every model call of the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Unknown members.
    #[serde(flatten)]
    pub extra: Extra,
}

/// What caused a turn or run to fail, for correlation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Cause {
    /// The tool call whose failure ended the turn and run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<CallId>,
    /// Its canonical tool name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<ToolName>,
    /// The model call whose failure ended the turn and run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation_id: Option<OperationId>,
    /// The required observer whose error ended the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observer: Option<String>,
    /// The sequence that observer refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    /// A stable kind for failures no call or observer names:
    /// [`HOST_LOST`](crate::recovery::HOST_LOST) for the terminals recovery
    /// appends to a run whose host died.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Unknown members.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `run.failed`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunFailed {
    /// What went wrong.
    pub error: ErrorText,
    /// Correlation with the failing scope, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<Cause>,
    /// Unknown members.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `run.cancelled`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct RunCancelled {
    /// Why, when the canceller said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<ErrorText>,
    /// Unknown members.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `turn.started`, `turn.completed`, `turn.cancelled`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnRef {
    /// The turn number, from 1.
    pub turn: u64,
    /// Unknown members.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `turn.failed`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnFailed {
    /// The turn number.
    pub turn: u64,
    /// What went wrong.
    pub error: ErrorText,
    /// Correlation with the failing scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<Cause>,
    /// Unknown members.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `model.started`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelStarted {
    /// The enclosing turn.
    pub turn: u64,
    /// The host-issued id of this attempt.
    pub operation_id: OperationId,
    /// The model called.
    pub model: ModelName,
    /// Which attempt of this turn's model call, from 1 (a compaction call's
    /// attempts count separately from the answer call's).
    pub attempt: u32,
    /// What the call is for; absent for the turn's answer call, which is
    /// the only call the history makes an assistant message of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub purpose: Option<ModelPurpose>,
    /// Unknown members.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `model.cancelled`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelRef {
    /// The enclosing turn.
    pub turn: u64,
    /// The attempt.
    pub operation_id: OperationId,
    /// Unknown members.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `model.completed`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelCompleted {
    /// The enclosing turn.
    pub turn: u64,
    /// The attempt.
    pub operation_id: OperationId,
    /// Why the model stopped.
    pub finish: FinishReason,
    /// Token usage, when the provider reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Allowlisted, screened provider metadata. Decoding validates it as
    /// the live stream does; a refusal is a [`PayloadError::Metadata`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ProviderMetadata>,
    /// Unknown members.
    #[serde(flatten)]
    pub extra: Extra,
}

/// A provider problem as recorded in `model.failed`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProblemRecord {
    /// What went wrong.
    pub kind: ProblemKind,
    /// The screened, bounded message.
    pub message: ErrorText,
    /// Whether the provider said a retry may succeed.
    pub retryable: bool,
    /// The provider's retry-after, in milliseconds, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    /// Unknown members.
    #[serde(flatten)]
    pub extra: Extra,
}

impl From<&ProviderProblem> for ProblemRecord {
    fn from(p: &ProviderProblem) -> Self {
        ProblemRecord {
            kind: p.kind(),
            message: ErrorText::new(p.message()),
            retryable: p.retryable(),
            retry_after_ms: p.retry_after().map(|d| {
                u64::try_from(d.as_millis())
                    .unwrap_or(u64::MAX)
                    .min(MAX_SAFE)
            }),
            extra: Extra::new(),
        }
    }
}

/// `model.failed`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelFailed {
    /// The enclosing turn.
    pub turn: u64,
    /// The attempt.
    pub operation_id: OperationId,
    /// The typed problem.
    pub problem: ProblemRecord,
    /// `pristine` or `partial`, computed by the host.
    pub position: RetryPosition,
    /// Unknown members.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `tool.started`, `tool.cancelled`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolRef {
    /// The enclosing turn.
    pub turn: u64,
    /// The call.
    pub call_id: CallId,
    /// The canonical tool name.
    pub tool: ToolName,
    /// Unknown members.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `tool.completed`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCompleted {
    /// The enclosing turn.
    pub turn: u64,
    /// The call.
    pub call_id: CallId,
    /// The canonical tool name.
    pub tool: ToolName,
    /// The result content fed back to the model.
    pub output: String,
    /// The images the tool returned with it, in order (member omitted when
    /// none). Their bytes count against the log's event bound.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<ImagePart>,
    /// Unknown members.
    #[serde(flatten)]
    pub extra: Extra,
}

keel_stream::wire_enum! {
    /// A typed tool failure's outcome: did the side effect happen?
    /// Extensible: a value this version does not know decodes as
    /// [`ToolOutcome::Unknown`] and re-encodes verbatim; its generic
    /// meaning is [`Uncertain`](ToolOutcome::Uncertain) (the side effect
    /// may have happened).
    pub enum ToolOutcome ("tool outcome") {
        /// The tool definitely did not take effect.
        Definitive => "definitive",
        /// The tool may have taken effect (a timeout, a lost connection).
        Uncertain => "uncertain",
    }
}

keel_stream::wire_enum! {
    /// Whether a failed tool call may be retried. Extensible: a value this
    /// version does not know decodes as [`ToolRetry::Unknown`] and
    /// re-encodes verbatim; its generic meaning is
    /// [`NotRetryable`](ToolRetry::NotRetryable) (never retry on a guess).
    pub enum ToolRetry ("tool retry") {
        /// Retrying may succeed.
        Retryable => "retryable",
        /// Retrying will not help.
        NotRetryable => "not_retryable",
    }
}

/// `tool.failed`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolFailed {
    /// The enclosing turn.
    pub turn: u64,
    /// The call.
    pub call_id: CallId,
    /// The canonical tool name.
    pub tool: ToolName,
    /// What went wrong.
    pub error: ErrorText,
    /// Present when the tool returned a typed failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<ToolOutcome>,
    /// Present when the tool returned a typed failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<ToolRetry>,
    /// Unknown members.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `interaction.started`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InteractionStarted {
    /// The enclosing turn.
    pub turn: u64,
    /// The interaction.
    pub interaction_id: InteractionId,
    /// What is asked, e.g. `approval`.
    pub request: String,
    /// The tool call it is about, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<CallId>,
    /// Unknown members.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `interaction.completed`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InteractionCompleted {
    /// The enclosing turn.
    pub turn: u64,
    /// The interaction.
    pub interaction_id: InteractionId,
    /// The answer, e.g. `approved` or `denied`.
    pub decision: String,
    /// Unknown members.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `interaction.cancelled`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InteractionRef {
    /// The enclosing turn.
    pub turn: u64,
    /// The interaction.
    pub interaction_id: InteractionId,
    /// Unknown members.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `interaction.failed`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InteractionFailed {
    /// The enclosing turn.
    pub turn: u64,
    /// The interaction.
    pub interaction_id: InteractionId,
    /// What went wrong.
    pub error: ErrorText,
    /// Unknown members.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `run.input`: one message of the history the run starts from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunInput {
    /// The message, as the host gave it.
    pub message: Message,
    /// Unknown members.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `model.text_delta`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TextDelta {
    /// The enclosing turn.
    pub turn: u64,
    /// The model call it belongs to.
    pub operation_id: OperationId,
    /// The text, never empty.
    pub text: String,
    /// Unknown members.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `model.reasoning_delta`: the one durable reasoning token stream (no
/// live mirror, as for `model.text_delta`). Its deltas, in order, are the
/// text of the reasoning part the next `model.reasoning_end` closes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReasoningDelta {
    /// The enclosing turn.
    pub turn: u64,
    /// The model call it belongs to.
    pub operation_id: OperationId,
    /// The reasoning text, never empty.
    pub text: String,
    /// Unknown members.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `model.reasoning_end`: closes the reasoning part whose deltas came
/// since the model call started or the last `model.reasoning_end`, with
/// the provider it came from and its `signature` (when the provider
/// signed it); or, with `redacted` and no deltas before it, a redacted
/// part, whole. It holds no text: the text is stored once, in the deltas.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReasoningEnd {
    /// The enclosing turn.
    pub turn: u64,
    /// The model call it belongs to.
    pub operation_id: OperationId,
    /// The provider the part came from (its signature is only valid there).
    pub provider: ProviderTag,
    /// The provider's signature of the part, when it gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<OpaqueValue>,
    /// A redacted part's opaque value (then there is no signature).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redacted: Option<OpaqueValue>,
    /// Unknown members.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `model.tool_call`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The enclosing turn.
    pub turn: u64,
    /// The model call it belongs to.
    pub operation_id: OperationId,
    /// The call id.
    pub call_id: CallId,
    /// The canonical tool name.
    pub name: ToolName,
    /// The arguments, a JSON object.
    pub arguments: CanonicalJson,
    /// Unknown members.
    #[serde(flatten)]
    pub extra: Extra,
}

/// A typed payload; its variant decides the event kind.
#[derive(Debug, Clone, PartialEq)]
#[allow(missing_docs)]
pub enum Payload {
    RunStarted(RunStarted),
    RunCompleted(RunCompleted),
    RunFailed(RunFailed),
    RunCancelled(RunCancelled),
    TurnStarted(TurnRef),
    TurnCompleted(TurnRef),
    TurnFailed(TurnFailed),
    TurnCancelled(TurnRef),
    ModelStarted(ModelStarted),
    ModelCompleted(ModelCompleted),
    ModelFailed(ModelFailed),
    ModelCancelled(ModelRef),
    ToolStarted(ToolRef),
    ToolCompleted(ToolCompleted),
    ToolFailed(ToolFailed),
    ToolCancelled(ToolRef),
    InteractionStarted(InteractionStarted),
    InteractionCompleted(InteractionCompleted),
    InteractionFailed(InteractionFailed),
    InteractionCancelled(InteractionRef),
    TextDelta(TextDelta),
    ToolCall(ToolCall),
    ReasoningDelta(ReasoningDelta),
    ReasoningEnd(ReasoningEnd),
    RunInput(RunInput),
    ContextCompacted(ContextCompacted),
    ContextCompactionFailed(ContextCompactionFailed),
    /// `tool.sub_run`: the call started a child run.
    ToolSubRun(SubRunStarted),
    /// `run.input` in its reference form: the history of the run this one
    /// continues (see [`RunInputReference`]).
    RunInputReference(RunInputReference),
    /// A kind this version does not know; the payload is kept as is.
    Extension {
        /// The kind name.
        kind: EventKind,
        /// The payload, a JSON object.
        payload: CanonicalJson,
    },
}

/// Why a payload cannot be encoded or decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PayloadError {
    /// The payload is not a JSON object.
    #[error("{kind} payload is not a JSON object (rule payload.object)")]
    NotObject {
        /// The event kind.
        kind: String,
    },
    /// A member is missing or has the wrong type; the message names the
    /// member but not its value.
    #[error("{kind} payload does not match its schema: {detail} (rule payload.schema)")]
    Schema {
        /// The event kind.
        kind: String,
        /// Which member and what was expected.
        detail: String,
    },
    /// A text delta with no text.
    #[error("model.text_delta has empty text (rule payload.text_nonempty)")]
    EmptyText,
    /// A reasoning delta with no text.
    #[error("model.reasoning_delta has empty text (rule payload.reasoning_nonempty)")]
    EmptyReasoning,
    /// A `model.reasoning_end` with both a `signature` and a `redacted`
    /// value: a redacted part is only its opaque value.
    #[error(
        "model.reasoning_end holds both a signature and a redacted value (rule payload.reasoning_end_one_form)"
    )]
    ReasoningEndForms,
    /// A turn number of 0 (turns count from 1).
    #[error("{kind} has turn 0 (rule payload.turn_from_1)")]
    TurnZero {
        /// The event kind.
        kind: String,
    },
    /// An observer name in a `cause` over 128 bytes.
    #[error("cause.observer is {len} bytes, over 128 (rule payload.observer_name)")]
    ObserverName {
        /// Its length.
        len: usize,
    },
    /// A `run.input` with both a `message` and a `history`.
    #[error("run.input holds both a message and a history reference (rule payload.input_one_form)")]
    InputForms,
    /// A history reference whose `last_seq` is 0 or not a safe integer.
    #[error(
        "run.input history.last_seq {last_seq} is out of range (rule payload.reference_seq: 1..=2^53-1)"
    )]
    ReferenceSeq {
        /// The value found.
        last_seq: u64,
    },
    /// A `context.compacted` range of no message, or of one message whose
    /// `first` and `last` differ.
    #[error(
        "context.compacted replaces.count {count} does not fit first..=last (rule payload.compacted_count: at least 1; 1 when first = last)"
    )]
    CompactedCount {
        /// The count found.
        count: u64,
    },
    /// A `context.compacted` summary whose role is not `user`.
    #[error("context.compacted summary has role {role}, not user (rule payload.summary_role)")]
    SummaryRole {
        /// The role found.
        role: String,
    },
    /// A `context.compacted` estimator of 0 bytes per token.
    #[error(
        "context.compacted estimator.bytes_per_token is 0 (rule payload.bytes_per_token: at least 1)"
    )]
    BytesPerToken,
    /// A tool terminal whose `sub_run` member is not
    /// `{"run_id": <run id>, "cause"?: <cause>}`.
    #[error("tool terminal sub_run member is malformed: {detail} (rule payload.sub_run)")]
    SubRun {
        /// Which member and what was expected, without values.
        detail: String,
    },
    /// An extension payload given a known kind.
    #[error("extension kind {kind} is a known kind (rule payload.extension_unknown)")]
    ExtensionKnown {
        /// The event kind.
        kind: String,
    },
    /// A JSON rule broke while canonicalizing.
    #[error(transparent)]
    Json(#[from] keel_message::JsonError),
    /// A `model.completed` whose metadata breaks a rule the live stream
    /// enforces (the namespace rules, the bounds, the secret screen). The
    /// error names the rule (`metadata.no_secrets`, …) and the JSON path
    /// (a secret-shaped member name by position), never a value.
    #[error("model.completed metadata {0}")]
    Metadata(#[from] keel_stream::MetadataError),
}

macro_rules! payload_table {
    ($( $variant:ident => $kind:expr ),* $(,)?) => {
        impl Payload {
            /// The event kind this payload is for.
            pub fn kind(&self) -> EventKind {
                match self {
                    $( Payload::$variant(_) => $kind, )*
                    Payload::RunInputReference(_) => EventKind::RunInput,
                    Payload::Extension { kind, .. } => kind.clone(),
                }
            }

            fn to_json(&self) -> Result<serde_json::Value, serde_json::Error> {
                match self {
                    $( Payload::$variant(p) => serde_json::to_value(p), )*
                    Payload::RunInputReference(p) => serde_json::to_value(p),
                    Payload::Extension { payload, .. } => Ok(payload.to_value()),
                }
            }

            /// Decodes the payload of an event of `kind`.
            pub fn from_json(kind: &EventKind, value: serde_json::Value) -> Result<Payload, PayloadError> {
                let name = kind.name();
                let schema = |e: serde_json::Error| PayloadError::Schema {
                    kind: name.to_string(),
                    detail: schema_detail(&e),
                };
                if !value.is_object() {
                    return Err(PayloadError::NotObject { kind: name.to_string() });
                }
                let (value, metadata) = take_metadata(kind, value)?;
                // `run.input` has two forms; a `history` member picks the
                // reference form (and `check` refuses a `message` beside it).
                if *kind == EventKind::RunInput && value.get("history").is_some() {
                    let payload = Payload::RunInputReference(serde_json::from_value(value).map_err(schema)?);
                    payload.check()?;
                    return Ok(payload);
                }
                $(
                    if *kind == $kind {
                        let payload = Payload::$variant(serde_json::from_value(value).map_err(schema)?);
                        let payload = with_metadata(payload, metadata);
                        payload.check()?;
                        return Ok(payload);
                    }
                )*
                match kind {
                    EventKind::Extension(_) => Ok(Payload::Extension {
                        kind: kind.clone(),
                        payload: CanonicalJson::from_value(&value)?,
                    }),
                    _ => Err(PayloadError::Schema { kind: name.to_string(), detail: "no payload type".into() }),
                }
            }
        }
    };
}

use Phase::{Ended, Started};
use Terminal::{Cancelled, Completed, Failed};

payload_table! {
    RunStarted => EventKind::Lifecycle(Scope::Run, Started),
    RunCompleted => EventKind::Lifecycle(Scope::Run, Ended(Completed)),
    RunFailed => EventKind::Lifecycle(Scope::Run, Ended(Failed)),
    RunCancelled => EventKind::Lifecycle(Scope::Run, Ended(Cancelled)),
    TurnStarted => EventKind::Lifecycle(Scope::Turn, Started),
    TurnCompleted => EventKind::Lifecycle(Scope::Turn, Ended(Completed)),
    TurnFailed => EventKind::Lifecycle(Scope::Turn, Ended(Failed)),
    TurnCancelled => EventKind::Lifecycle(Scope::Turn, Ended(Cancelled)),
    ModelStarted => EventKind::Lifecycle(Scope::Model, Started),
    ModelCompleted => EventKind::Lifecycle(Scope::Model, Ended(Completed)),
    ModelFailed => EventKind::Lifecycle(Scope::Model, Ended(Failed)),
    ModelCancelled => EventKind::Lifecycle(Scope::Model, Ended(Cancelled)),
    ToolStarted => EventKind::Lifecycle(Scope::Tool, Started),
    ToolCompleted => EventKind::Lifecycle(Scope::Tool, Ended(Completed)),
    ToolFailed => EventKind::Lifecycle(Scope::Tool, Ended(Failed)),
    ToolCancelled => EventKind::Lifecycle(Scope::Tool, Ended(Cancelled)),
    InteractionStarted => EventKind::Lifecycle(Scope::Interaction, Started),
    InteractionCompleted => EventKind::Lifecycle(Scope::Interaction, Ended(Completed)),
    InteractionFailed => EventKind::Lifecycle(Scope::Interaction, Ended(Failed)),
    InteractionCancelled => EventKind::Lifecycle(Scope::Interaction, Ended(Cancelled)),
    TextDelta => EventKind::TextDelta,
    ToolCall => EventKind::ToolCall,
    ReasoningDelta => EventKind::ReasoningDelta,
    ReasoningEnd => EventKind::ReasoningEnd,
    RunInput => EventKind::RunInput,
    ContextCompacted => EventKind::ContextCompacted,
    ContextCompactionFailed => EventKind::ContextCompactionFailed,
    ToolSubRun => EventKind::ToolSubRun,
}

/// Takes a `model.completed` payload's `metadata` member out of `value`
/// and validates it as a [`ProviderMetadata`] here rather than in its serde
/// `Deserialize`, so a refusal keeps its type ([`PayloadError::Metadata`]:
/// the rule and the path). A `null` is left to serde: it decodes as absent,
/// and the canonical check then refuses the line.
fn take_metadata(
    kind: &EventKind,
    mut value: serde_json::Value,
) -> Result<(serde_json::Value, Option<ProviderMetadata>), PayloadError> {
    if *kind != EventKind::Lifecycle(Scope::Model, Ended(Completed)) {
        return Ok((value, None));
    }
    let Some(members) = value.as_object_mut() else {
        return Ok((value, None));
    };
    let metadata = match members.remove("metadata") {
        None => None,
        Some(serde_json::Value::Null) => {
            members.insert("metadata".to_owned(), serde_json::Value::Null);
            None
        }
        Some(raw) => Some(ProviderMetadata::from_value(&raw)?),
    };
    Ok((value, metadata))
}

/// Puts the metadata [`take_metadata`] validated back into its completion.
fn with_metadata(mut payload: Payload, metadata: Option<ProviderMetadata>) -> Payload {
    if let (Payload::ModelCompleted(done), Some(metadata)) = (&mut payload, metadata) {
        done.metadata = Some(metadata);
    }
    payload
}

/// Names the failing member without quoting values.
fn schema_detail(e: &serde_json::Error) -> String {
    keel_message::decode::elide_values(&e.to_string())
}

impl Payload {
    /// What this payload does to the lifecycle.
    pub fn transition(&self) -> Transition {
        use Payload as P;
        let model = |turn: u64, operation_id: &OperationId| ScopeKey::Model {
            turn,
            operation_id: operation_id.clone(),
        };
        let tool = |turn: u64, call_id: &CallId| ScopeKey::Tool {
            turn,
            call_id: call_id.clone(),
        };
        let interaction = |turn: u64, id: &InteractionId| ScopeKey::Interaction {
            turn,
            interaction_id: id.clone(),
        };
        let key = match self {
            P::RunStarted(_) | P::RunCompleted(_) | P::RunFailed(_) | P::RunCancelled(_) => {
                ScopeKey::Run
            }
            P::TurnStarted(p) | P::TurnCompleted(p) | P::TurnCancelled(p) => ScopeKey::Turn(p.turn),
            P::TurnFailed(p) => ScopeKey::Turn(p.turn),
            P::ModelStarted(p) => model(p.turn, &p.operation_id),
            P::ModelCompleted(p) => model(p.turn, &p.operation_id),
            P::ModelFailed(p) => model(p.turn, &p.operation_id),
            P::ModelCancelled(p) => model(p.turn, &p.operation_id),
            P::ToolStarted(p) | P::ToolCancelled(p) => tool(p.turn, &p.call_id),
            P::ToolCompleted(p) => tool(p.turn, &p.call_id),
            P::ToolFailed(p) => tool(p.turn, &p.call_id),
            P::InteractionStarted(p) => interaction(p.turn, &p.interaction_id),
            P::InteractionCompleted(p) => interaction(p.turn, &p.interaction_id),
            P::InteractionFailed(p) => interaction(p.turn, &p.interaction_id),
            P::InteractionCancelled(p) => interaction(p.turn, &p.interaction_id),
            P::TextDelta(p) => return Transition::Within(model(p.turn, &p.operation_id)),
            P::ToolCall(p) => return Transition::Within(model(p.turn, &p.operation_id)),
            P::ReasoningDelta(p) => return Transition::Within(model(p.turn, &p.operation_id)),
            P::ReasoningEnd(p) => return Transition::Within(model(p.turn, &p.operation_id)),
            P::ContextCompacted(p) => return Transition::Within(ScopeKey::Turn(p.turn)),
            P::ContextCompactionFailed(p) => return Transition::Within(ScopeKey::Turn(p.turn)),
            P::ToolSubRun(p) => return Transition::Within(tool(p.turn, &p.call_id)),
            P::RunInput(_) | P::RunInputReference(_) => {
                return Transition::Within(ScopeKey::Run);
            }
            P::Extension { .. } => return Transition::None,
        };
        match self.kind().lifecycle_parts() {
            Some((_, phase)) => Transition::Lifecycle(key, phase),
            None => Transition::None,
        }
    }

    /// The tool a tool lifecycle event names (`tool.started` and its
    /// terminals): the identity a terminal must repeat (rule
    /// `lifecycle.same_identity`). `None` for every other kind.
    ///
    /// ```
    /// use keel_eventlog::*;
    /// use keel_message::{CallId, ToolName};
    /// let started = Payload::ToolStarted(ToolRef {
    ///     turn: 1,
    ///     call_id: CallId::parse("c1")?,
    ///     tool: ToolName::parse("get_weather")?,
    ///     extra: Extra::new(),
    /// });
    /// assert_eq!(started.tool_name().map(|t| t.as_str()), Some("get_weather"));
    /// assert_eq!(Payload::RunStarted(RunStarted::default()).tool_name(), None);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn tool_name(&self) -> Option<&ToolName> {
        match self {
            Payload::ToolStarted(p) | Payload::ToolCancelled(p) => Some(&p.tool),
            Payload::ToolCompleted(p) => Some(&p.tool),
            Payload::ToolFailed(p) => Some(&p.tool),
            _ => None,
        }
    }

    /// Checks the rules serde cannot express.
    pub fn check(&self) -> Result<(), PayloadError> {
        self.check_with(&self.transition())
    }

    /// [`check`](Self::check), given this payload's
    /// [`transition`](Self::transition) (the commit path computes it once).
    fn check_with(&self, transition: &Transition) -> Result<(), PayloadError> {
        if let Payload::TextDelta(p) = self
            && p.text.is_empty()
        {
            return Err(PayloadError::EmptyText);
        }
        match self {
            Payload::ReasoningDelta(p) if p.text.is_empty() => {
                return Err(PayloadError::EmptyReasoning);
            }
            Payload::ReasoningEnd(p) if p.signature.is_some() && p.redacted.is_some() => {
                return Err(PayloadError::ReasoningEndForms);
            }
            Payload::RunInputReference(p) => check_reference(p)?,
            Payload::ContextCompacted(p) => check_compacted(p)?,
            Payload::ToolCompleted(p) => check_sub_run(&p.extra)?,
            Payload::ToolFailed(p) => check_sub_run(&p.extra)?,
            Payload::ToolCancelled(p) => check_sub_run(&p.extra)?,
            _ => {}
        }
        if let Payload::Extension { kind, payload } = self {
            if !matches!(kind, EventKind::Extension(_)) {
                return Err(PayloadError::ExtensionKnown {
                    kind: kind.to_string(),
                });
            }
            if !payload.is_object() {
                return Err(PayloadError::NotObject {
                    kind: kind.to_string(),
                });
            }
        }
        let cause = match self {
            Payload::RunFailed(p) => p.cause.as_ref(),
            Payload::TurnFailed(p) => p.cause.as_ref(),
            _ => None,
        };
        if let Some(len) = cause.and_then(|c| c.observer.as_ref()).map(String::len)
            && len > 128
        {
            return Err(PayloadError::ObserverName { len });
        }
        let turn = match transition {
            Transition::Lifecycle(key, _) | Transition::Within(key) => match key {
                ScopeKey::Run => None,
                ScopeKey::Turn(t)
                | ScopeKey::Model { turn: t, .. }
                | ScopeKey::Tool { turn: t, .. }
                | ScopeKey::Interaction { turn: t, .. } => Some(*t),
            },
            Transition::None => None,
        };
        if turn == Some(0) {
            return Err(PayloadError::TurnZero {
                kind: self.kind().to_string(),
            });
        }
        Ok(())
    }

    /// The canonical JSON text of this payload.
    pub fn to_canonical(&self) -> Result<String, PayloadError> {
        match self.encode(&self.transition())? {
            Encoded::Text(text) => Ok(text),
            fast => {
                let mut out = String::with_capacity(fast.len());
                fast.write(&mut out);
                Ok(out)
            }
        }
    }

    /// Checks this payload (with its `transition`) and encodes it, ready
    /// to be written into an event line: a text delta is written straight
    /// into the line, any other payload through its canonical text.
    pub(crate) fn encode(&self, transition: &Transition) -> Result<Encoded<'_>, PayloadError> {
        self.check_with(transition)?;
        // The token stream's hot path: written directly in RFC 8785 key
        // order (`operation_id` < `text` < `turn`); the generic path below
        // gives the same bytes (tested), through an intermediate value. A
        // turn over 2^53 − 1 takes the generic path, which refuses it as
        // an unsafe integer like every other payload's.
        if let Payload::TextDelta(p) = self
            && p.extra.is_empty()
            && p.turn <= MAX_SAFE
        {
            return Ok(Encoded::TextDelta(p));
        }
        // Images are base64-encoded once, straight into the line.
        if let Payload::ToolCompleted(p) = self
            && !p.images.is_empty()
        {
            return MediaPayload::new(p).map(Encoded::Media);
        }
        self.canonical_generic().map(Encoded::Text)
    }

    /// The canonical text through an intermediate JSON value.
    pub(crate) fn canonical_generic(&self) -> Result<String, PayloadError> {
        let kind = self.kind();
        let value = self.to_json().map_err(|e| PayloadError::Schema {
            kind: kind.to_string(),
            detail: schema_detail(&e),
        })?;
        if !value.is_object() {
            return Err(PayloadError::NotObject {
                kind: kind.to_string(),
            });
        }
        Ok(keel_message::canonical::to_canonical_string(&value)?)
    }
}

/// The rules of `run.input`'s reference form that serde cannot express.
fn check_reference(p: &RunInputReference) -> Result<(), PayloadError> {
    if p.extra.contains_key("message") {
        return Err(PayloadError::InputForms);
    }
    let last_seq = p.history.last_seq;
    if last_seq == 0 || last_seq > MAX_SAFE {
        return Err(PayloadError::ReferenceSeq { last_seq });
    }
    Ok(())
}

/// A tool terminal's `sub_run` member, when present, is a [`SubRunRef`].
/// (`tool.started` shares `ToolRef` with `tool.cancelled` but never names a
/// child: its `sub_run`, if any, stays an unknown member.)
fn check_sub_run(extra: &Extra) -> Result<(), PayloadError> {
    SubRunRef::parse_extra(extra).map(|_| ())
}

/// The rules of `context.compacted` that serde cannot express.
fn check_compacted(p: &ContextCompacted) -> Result<(), PayloadError> {
    let range = &p.replaces;
    if range.count == 0 || (range.count == 1 && range.first != range.last) {
        return Err(PayloadError::CompactedCount { count: range.count });
    }
    if p.summary.role() != keel_message::Role::User {
        return Err(PayloadError::SummaryRole {
            role: p.summary.role().to_string(),
        });
    }
    if p.estimator.bytes_per_token == 0 {
        return Err(PayloadError::BytesPerToken);
    }
    Ok(())
}

/// A checked payload, ready to be written as canonical JSON.
pub(crate) enum Encoded<'a> {
    /// A text delta without unknown members, written directly.
    TextDelta(&'a TextDelta),
    /// A `tool.completed` with images, their base64 written directly.
    Media(MediaPayload<'a>),
    /// Any other payload's canonical text.
    Text(String),
}

/// `{"operation_id":"","text":,"turn":}` without its variable parts.
const TEXT_DELTA_FIXED_BYTES: usize = 35;

impl Encoded<'_> {
    /// The length of the canonical text.
    pub(crate) fn len(&self) -> usize {
        match self {
            Encoded::TextDelta(p) => {
                TEXT_DELTA_FIXED_BYTES
                    + p.operation_id.as_str().len()
                    + canonical_str_len(&p.text)
                    + crate::decimal::digits(p.turn)
            }
            Encoded::Media(p) => p.len(),
            Encoded::Text(text) => text.len(),
        }
    }

    /// Appends the canonical text to `out`.
    pub(crate) fn write(&self, out: &mut String) {
        match self {
            Encoded::TextDelta(p) => {
                out.push_str("{\"operation_id\":\"");
                out.push_str(p.operation_id.as_str());
                out.push_str("\",\"text\":");
                keel_message::canonical::write_canonical_str(&p.text, out);
                out.push_str(",\"turn\":");
                crate::decimal::push_u64(out, p.turn);
                out.push('}');
            }
            Encoded::Media(p) => p.write(out),
            Encoded::Text(text) => out.push_str(text),
        }
    }
}

/// The length of `s` as an RFC 8785 string, quotes included: `"` and `\`
/// and the five control characters with a short form take two bytes, the
/// other control characters six (`\u00xx`), everything else itself.
pub(crate) fn canonical_str_len(s: &str) -> usize {
    let escaped = |b: &u8| *b < 0x20 || *b == b'"' || *b == b'\\';
    // Most texts have nothing to escape: a count the compiler vectorizes.
    if s.bytes().filter(escaped).count() == 0 {
        return s.len() + 2;
    }
    s.len()
        + 2
        + s.bytes()
            .map(|b| match b {
                b'"' | b'\\' | 0x08 | 0x09 | 0x0a | 0x0c | 0x0d => 1,
                0..0x20 => 5,
                _ => 0,
            })
            .sum::<usize>()
}
