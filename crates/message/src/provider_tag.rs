//! [`ProviderTag`]: which provider a reasoning part came from.

use crate::error::{MessageError, MessageErrorKind};
use crate::names::NameProblem;
use std::sync::Arc;

/// The longest provider tag, in bytes (a wire-format constant).
pub const PROVIDER_TAG_MAX_BYTES: usize = 64;

/// Which provider produced a reasoning part. A provider only accepts its
/// own reasoning back, so adapters send a part only when its tag is theirs.
///
/// Rule `message.provider_tag`: 1 to 64 bytes, `[a-z][a-z0-9._-]*`.
///
/// ```
/// use keel_message::ProviderTag;
/// assert_eq!(ProviderTag::anthropic().as_str(), "anthropic");
/// assert_eq!(ProviderTag::parse("openai-compatible")?, ProviderTag::openai_compatible());
/// assert_eq!(ProviderTag::parse("openai-responses")?, ProviderTag::openai_responses());
/// assert_eq!(ProviderTag::gemini().as_str(), "gemini");
/// assert!(ProviderTag::parse("Anthropic").is_err());
/// # Ok::<(), keel_message::MessageError>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProviderTag(Arc<str>);

/// The rule `message.provider_tag`, naming the first problem.
fn tag_problem(text: &str) -> Option<NameProblem> {
    let bytes = text.as_bytes();
    let Some(&first) = bytes.first() else {
        return Some(NameProblem::Empty);
    };
    if bytes.len() > PROVIDER_TAG_MAX_BYTES {
        return Some(NameProblem::TooLong {
            len: bytes.len(),
            max: PROVIDER_TAG_MAX_BYTES,
        });
    }
    if !first.is_ascii_lowercase() {
        return Some(NameProblem::Character { offset: 0 });
    }
    bytes
        .iter()
        .position(|&b| !(b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b)))
        .map(|offset| NameProblem::Character { offset })
}

impl ProviderTag {
    /// Validates and copies `text`.
    pub fn parse(text: &str) -> Result<ProviderTag, MessageError> {
        match tag_problem(text) {
            Some(problem) => Err(MessageError::new(
                "$",
                MessageErrorKind::ProviderTag { problem },
            )),
            None => Ok(ProviderTag(Arc::from(text))),
        }
    }

    /// The tag.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `anthropic`: the Anthropic Messages API adapter.
    pub fn anthropic() -> ProviderTag {
        ProviderTag(Arc::from("anthropic"))
    }

    /// `openai-compatible`: the OpenAI-compatible chat completions adapter.
    pub fn openai_compatible() -> ProviderTag {
        ProviderTag(Arc::from("openai-compatible"))
    }

    /// `openai-responses`: the OpenAI Responses API adapter.
    pub fn openai_responses() -> ProviderTag {
        ProviderTag(Arc::from("openai-responses"))
    }

    /// `gemini`: the Google Gemini `generateContent` adapter.
    pub fn gemini() -> ProviderTag {
        ProviderTag(Arc::from("gemini"))
    }

    /// `scripted`: keel-testkit's scripted provider.
    pub fn scripted() -> ProviderTag {
        ProviderTag(Arc::from("scripted"))
    }

    /// `custom`: a provider that names no tag of its own.
    pub fn custom() -> ProviderTag {
        ProviderTag(Arc::from("custom"))
    }
}

crate::string_newtype_impls!(ProviderTag, MessageError);
