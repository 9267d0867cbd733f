//! The validated stream item union and its parts.

use crate::failure::ModelFailure;
use crate::metadata::ProviderMetadata;
use crate::usage::Usage;
use crate::violation::StreamViolation;
use keel_message::{Bound, CallId, CanonicalJson, Limits, OpaqueValue, ToolCallPart, ToolName};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::Arc;

/// The text of a validated [`StreamItem::TextDelta`]: non-empty visible
/// text, at most `limits.delta_bytes`. (The event it becomes is
/// `keel_eventlog::TextDelta`.)
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DeltaText(Arc<str>);

impl DeltaText {
    /// A delta under the default limits.
    pub fn new(text: &str) -> Result<DeltaText, StreamViolation> {
        Self::new_with(text, Limits::default_ref())
    }

    /// A delta: non-empty (rule `EmptyDelta`), at most `limits.delta_bytes`.
    pub fn new_with<T>(text: T, limits: &Limits) -> Result<DeltaText, StreamViolation>
    where
        T: AsRef<str> + Into<Arc<str>>,
    {
        let len = text.as_ref().len();
        if len == 0 {
            return Err(StreamViolation::EmptyDelta);
        }
        Bound::DeltaBytes.check(limits, len)?;
        Ok(DeltaText(text.into()))
    }

    /// The text.
    pub fn text(&self) -> &str {
        &self.0
    }

    /// The text as a shared handle.
    pub fn shared(&self) -> Arc<str> {
        Arc::clone(&self.0)
    }
}

impl fmt::Display for DeltaText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for DeltaText {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for DeltaText {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        DeltaText::new_with(text, Limits::default_ref()).map_err(serde::de::Error::custom)
    }
}

crate::wire_enum! {
    /// Why the model stopped generating. Extensible: a value this version
    /// does not know decodes as [`FinishReason::Unknown`] and re-encodes
    /// verbatim; its generic meaning is "the model stopped for a reason
    /// this reader cannot name" (the views map it to their protocol's
    /// generic value, e.g. the AI SDK's `other`). Providers map their
    /// reasons to the known values; the validator refuses `Unknown` on the
    /// live path (rule `stream.known_value`).
    pub enum FinishReason ("finish reason") {
        /// A natural end (OpenAI `stop`; Anthropic `end_turn`, `stop_sequence`).
        Stop => "stop",
        /// The model wants the host to run its tool calls (Anthropic `tool_use`).
        ToolCalls => "tool_calls",
        /// The output-token bound was hit (Anthropic `max_tokens`).
        Length => "length",
        /// The provider's filter stopped the output (Anthropic `refusal`).
        ContentFilter => "content_filter",
    }
}

/// The normal end of a stream: finish reason, optional usage and the
/// (allowlisted) provider metadata.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Completion {
    finish: FinishReason,
    usage: Option<Usage>,
    metadata: ProviderMetadata,
}

impl Completion {
    /// A completion from validated parts. Whether the finish reason fits
    /// the stream before it is the validator's question, not this one's.
    pub fn new(
        finish: FinishReason,
        usage: Option<Usage>,
        metadata: ProviderMetadata,
    ) -> Completion {
        Completion {
            finish,
            usage,
            metadata,
        }
    }
    /// Why generation stopped.
    pub fn finish(&self) -> FinishReason {
        self.finish.clone()
    }
    /// Token usage, when reported.
    pub fn usage(&self) -> Option<Usage> {
        self.usage
    }
    /// The provider metadata (empty when none was reported or allowed).
    pub fn metadata(&self) -> &ProviderMetadata {
        &self.metadata
    }
}

#[derive(Serialize)]
struct CompletionOut<'a> {
    finish: FinishReason,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Usage>,
    #[serde(skip_serializing_if = "ProviderMetadata::is_empty")]
    metadata: &'a ProviderMetadata,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CompletionWire {
    finish: FinishReason,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    metadata: ProviderMetadata,
}

/// Wire shape: `{"finish", "usage"?, "metadata"?}`; `usage` is left out
/// when unknown and `metadata` when empty.
impl Serialize for Completion {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        CompletionOut {
            finish: self.finish.clone(),
            usage: self.usage,
            metadata: &self.metadata,
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for Completion {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let w = CompletionWire::deserialize(d)?;
        Ok(Completion::new(w.finish, w.usage, w.metadata))
    }
}

/// One validated item of a model stream: a strict tagged union.
///
/// A well-formed stream is any number of text deltas, reasoning items and
/// tool calls, then exactly one terminal: a [`Completion`] or a
/// [`ModelFailure`]. A reasoning part is one or more reasoning deltas,
/// closed by its signature or by any other item; a redacted reasoning
/// part comes whole, as one item. Only the
/// [`StreamValidator`](crate::StreamValidator) decides that a raw item
/// belongs in a stream; the constructors of the parts check only the parts.
///
/// Wire shape (tag `type`): `{"type":"text_delta","text"}`,
/// `{"type":"reasoning_delta","text"}`,
/// `{"type":"reasoning_signature","signature"}`,
/// `{"type":"redacted_reasoning","redacted"}`,
/// `{"type":"tool_call","call_id","name","arguments"}`,
/// `{"type":"completion","finish","usage"?,"metadata"?}`,
/// `{"type":"failure","problem","position"}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum StreamItem {
    /// Visible text.
    TextDelta(DeltaText),
    /// A piece of reasoning text: it opens a reasoning part or continues
    /// the open one.
    ReasoningDelta(DeltaText),
    /// The signature of the open reasoning part, which it closes.
    ReasoningSignature(OpaqueValue),
    /// A redacted reasoning part, whole.
    RedactedReasoning(OpaqueValue),
    /// A finalized tool call.
    ToolCall(ToolCallPart),
    /// The normal end.
    Completion(Completion),
    /// The abnormal end.
    Failure(ModelFailure),
}

impl StreamItem {
    /// Whether this item ends a stream.
    pub fn is_terminal(&self) -> bool {
        matches!(self, StreamItem::Completion(_) | StreamItem::Failure(_))
    }

    /// The wire tag: `text_delta`, `reasoning_delta`,
    /// `reasoning_signature`, `redacted_reasoning`, `tool_call`,
    /// `completion` or `failure`.
    pub fn type_name(&self) -> &'static str {
        match self {
            StreamItem::TextDelta(_) => "text_delta",
            StreamItem::ReasoningDelta(_) => "reasoning_delta",
            StreamItem::ReasoningSignature(_) => "reasoning_signature",
            StreamItem::RedactedReasoning(_) => "redacted_reasoning",
            StreamItem::ToolCall(_) => "tool_call",
            StreamItem::Completion(_) => "completion",
            StreamItem::Failure(_) => "failure",
        }
    }
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ItemOut<'a> {
    TextDelta {
        text: &'a DeltaText,
    },
    ReasoningDelta {
        text: &'a DeltaText,
    },
    ReasoningSignature {
        signature: &'a OpaqueValue,
    },
    RedactedReasoning {
        redacted: &'a OpaqueValue,
    },
    ToolCall {
        call_id: &'a CallId,
        name: &'a ToolName,
        arguments: &'a CanonicalJson,
    },
    Completion(&'a Completion),
    Failure(&'a ModelFailure),
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
enum ItemWire {
    TextDelta {
        text: DeltaText,
    },
    ReasoningDelta {
        text: DeltaText,
    },
    ReasoningSignature {
        signature: OpaqueValue,
    },
    RedactedReasoning {
        redacted: OpaqueValue,
    },
    ToolCall {
        call_id: CallId,
        name: ToolName,
        arguments: CanonicalJson,
    },
    Completion(Completion),
    Failure(ModelFailure),
}

impl Serialize for StreamItem {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            StreamItem::TextDelta(text) => ItemOut::TextDelta { text },
            StreamItem::ReasoningDelta(text) => ItemOut::ReasoningDelta { text },
            StreamItem::ReasoningSignature(signature) => ItemOut::ReasoningSignature { signature },
            StreamItem::RedactedReasoning(redacted) => ItemOut::RedactedReasoning { redacted },
            StreamItem::ToolCall(c) => ItemOut::ToolCall {
                call_id: c.call_id(),
                name: c.name(),
                arguments: c.arguments(),
            },
            StreamItem::Completion(c) => ItemOut::Completion(c),
            StreamItem::Failure(f) => ItemOut::Failure(f),
        }
        .serialize(s)
    }
}

/// Decoding validates each part under the default limits (it cannot check
/// the item's place in a stream: that is the validator's job).
impl<'de> Deserialize<'de> for StreamItem {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(match ItemWire::deserialize(d)? {
            ItemWire::TextDelta { text } => StreamItem::TextDelta(text),
            ItemWire::ReasoningDelta { text } => StreamItem::ReasoningDelta(text),
            ItemWire::ReasoningSignature { signature } => StreamItem::ReasoningSignature(signature),
            ItemWire::RedactedReasoning { redacted } => StreamItem::RedactedReasoning(redacted),
            ItemWire::ToolCall {
                call_id,
                name,
                arguments,
            } => StreamItem::ToolCall(
                ToolCallPart::new_with(call_id, name, arguments, Limits::default_ref())
                    .map_err(serde::de::Error::custom)?,
            ),
            ItemWire::Completion(c) => StreamItem::Completion(c),
            ItemWire::Failure(f) => StreamItem::Failure(f),
        })
    }
}
