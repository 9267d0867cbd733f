//! [`ReasoningPart`]: a model's reasoning, as its provider returned it,
//! and its wire shape.

use crate::error::{MessageError, MessageErrorKind};
use crate::limits::{Bound, Limits};
use crate::opaque::OpaqueValue;
use crate::provider_tag::ProviderTag;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// What a reasoning part holds: readable text (perhaps a summary, perhaps
/// empty) with an optional signature, or only an opaque value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum ReasoningContent {
    Text {
        text: Arc<str>,
        signature: Option<OpaqueValue>,
    },
    Redacted(OpaqueValue),
}

/// A model's reasoning, tagged with the provider it came from so that it
/// is only ever sent back to that provider, byte-exact.
///
/// A redacted part has empty text, no signature and only its opaque value.
/// Otherwise the text is within [`Limits::part_bytes`] and, when empty,
/// there is a signature (rule `message.empty_reasoning`).
///
/// ```
/// use keel_message::{OpaqueValue, Part, ProviderTag};
/// let part = Part::reasoning(ProviderTag::anthropic(), "Let me think.", Some(OpaqueValue::new("c2ln")?))?;
/// let Part::Reasoning(r) = &part else { unreachable!() };
/// assert_eq!(r.text(), "Let me think.");
/// assert!(!r.is_redacted());
/// # Ok::<(), keel_message::MessageError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ReasoningPart {
    provider: ProviderTag,
    content: ReasoningContent,
}

impl ReasoningPart {
    /// Readable reasoning: `text` within `limits.part_bytes`, non-empty
    /// unless there is a signature, which is within `limits.opaque_bytes`.
    pub fn new_with(
        provider: ProviderTag,
        text: &str,
        signature: Option<OpaqueValue>,
        limits: &Limits,
    ) -> Result<ReasoningPart, MessageError> {
        if text.is_empty() && signature.is_none() {
            return Err(MessageError::new(
                "$.text",
                MessageErrorKind::EmptyReasoning,
            ));
        }
        let part = ReasoningPart {
            provider,
            content: ReasoningContent::Text {
                text: Arc::from(text),
                signature,
            },
        };
        part.revalidate(limits)?;
        Ok(part)
    }

    /// A redacted part: only the provider's opaque value.
    pub fn new_redacted(provider: ProviderTag, value: OpaqueValue) -> ReasoningPart {
        ReasoningPart {
            provider,
            content: ReasoningContent::Redacted(value),
        }
    }

    /// The provider the part came from.
    pub fn provider(&self) -> &ProviderTag {
        &self.provider
    }

    /// The readable text: may be empty, and is empty when redacted.
    pub fn text(&self) -> &str {
        match &self.content {
            ReasoningContent::Text { text, .. } => text,
            ReasoningContent::Redacted(_) => "",
        }
    }

    /// The provider's signature over the text, if any.
    pub fn signature(&self) -> Option<&OpaqueValue> {
        match &self.content {
            ReasoningContent::Text { signature, .. } => signature.as_ref(),
            ReasoningContent::Redacted(_) => None,
        }
    }

    /// The opaque value of a redacted part.
    pub fn redacted(&self) -> Option<&OpaqueValue> {
        match &self.content {
            ReasoningContent::Redacted(value) => Some(value),
            ReasoningContent::Text { .. } => None,
        }
    }

    /// Whether this is a redacted part.
    pub fn is_redacted(&self) -> bool {
        matches!(self.content, ReasoningContent::Redacted(_))
    }

    /// The bytes this part counts against `message_bytes`: text and opaque
    /// values.
    pub fn content_bytes(&self) -> usize {
        match &self.content {
            ReasoningContent::Text { text, signature } => {
                text.len() + signature.as_ref().map_or(0, OpaqueValue::len)
            }
            ReasoningContent::Redacted(value) => value.len(),
        }
    }

    /// Checks the bounds: text within `part_bytes`, opaque values within
    /// `opaque_bytes` (they may have been built under other limits).
    pub(crate) fn revalidate(&self, limits: &Limits) -> Result<(), MessageError> {
        match &self.content {
            ReasoningContent::Redacted(value) => {
                within_bound(Bound::OpaqueBytes, limits, value.len(), "$.redacted")
            }
            ReasoningContent::Text { text, signature } => {
                within_bound(Bound::PartBytes, limits, text.len(), "$.text")?;
                let signature = signature.as_ref().map_or(0, OpaqueValue::len);
                within_bound(Bound::OpaqueBytes, limits, signature, "$.signature")
            }
        }
    }
}

fn within_bound(
    bound: Bound,
    limits: &Limits,
    actual: usize,
    path: &str,
) -> Result<(), MessageError> {
    bound
        .check(limits, actual)
        .map_err(|e| MessageError::new(path, e))
}

/// The wire shape of a reasoning part without its part tag: `text` is
/// always present unless the part is redacted, which has only `redacted`.
#[derive(Serialize)]
pub(crate) struct ReasoningOut<'a> {
    provider: &'a ProviderTag,
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    signature: Option<&'a OpaqueValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    redacted: Option<&'a OpaqueValue>,
}

impl<'a> From<&'a ReasoningPart> for ReasoningOut<'a> {
    fn from(part: &'a ReasoningPart) -> Self {
        let provider = &part.provider;
        match &part.content {
            ReasoningContent::Text { text, signature } => ReasoningOut {
                provider,
                text: Some(text),
                signature: signature.as_ref(),
                redacted: None,
            },
            ReasoningContent::Redacted(value) => ReasoningOut {
                provider,
                text: None,
                signature: None,
                redacted: Some(value),
            },
        }
    }
}

/// The wire shape of a reasoning part, as deserialized before validation.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReasoningWire {
    provider: String,
    text: Option<String>,
    signature: Option<String>,
    redacted: Option<String>,
}

impl ReasoningWire {
    pub(crate) fn build(self, limits: &Limits) -> Result<ReasoningPart, MessageError> {
        let provider = ProviderTag::parse(&self.provider).map_err(|e| e.within("$.provider"))?;
        let opaque =
            |text: &str, at: &str| OpaqueValue::new_with(text, limits).map_err(|e| e.within(at));
        match (self.text, self.signature, self.redacted) {
            (None, None, Some(value)) => Ok(ReasoningPart::new_redacted(
                provider,
                opaque(&value, "$.redacted")?,
            )),
            (Some(text), signature, None) => {
                let signature = signature.map(|s| opaque(&s, "$.signature")).transpose()?;
                ReasoningPart::new_with(provider, &text, signature, limits)
            }
            (_, _, Some(_)) => Err(MessageError::new(
                "$.redacted",
                MessageErrorKind::ReasoningShape,
            )),
            (None, _, None) => Err(MessageError::new(
                "$.text",
                MessageErrorKind::ReasoningShape,
            )),
        }
    }
}
