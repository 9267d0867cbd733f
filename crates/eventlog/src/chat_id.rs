//! The id of a chat conversation: the `id` a chat client (`useChat`)
//! names its conversation by, which `run.started`'s `chat` member records
//! and a chat host puts in URLs and run ids.

use std::sync::Arc;

/// The longest conversation id, in bytes.
pub const CHAT_ID_MAX_BYTES: usize = 64;

/// Why a string is not a conversation id. Never carries the text, only its
/// length or a byte offset.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ChatIdError {
    /// Empty or longer than [`CHAT_ID_MAX_BYTES`].
    #[error("a chat id is 1 to {CHAT_ID_MAX_BYTES} bytes; {len} given (rule chat_id.length)")]
    Length {
        /// The length found, in bytes.
        len: usize,
    },
    /// A byte outside `[A-Za-z0-9_-]`.
    #[error(
        "a chat id is ASCII letters, digits, `_` and `-`; byte {offset} is not (rule chat_id.charset)"
    )]
    Character {
        /// The offset of the first such byte.
        offset: usize,
    },
}

impl ChatIdError {
    /// The rule broken: `chat_id.length` or `chat_id.charset`.
    pub fn rule(&self) -> &'static str {
        match self {
            ChatIdError::Length { .. } => "chat_id.length",
            ChatIdError::Character { .. } => "chat_id.charset",
        }
    }
}

/// A checked conversation id: 1 to [`CHAT_ID_MAX_BYTES`] bytes of
/// `[A-Za-z0-9_-]`, so it can stand in a URL path and inside a run id
/// unescaped.
///
/// ```
/// use keel_eventlog::{ChatId, ChatIdError};
/// assert_eq!(ChatId::parse("conv-1")?.as_str(), "conv-1");
/// assert_eq!(ChatId::parse("a/b").unwrap_err(), ChatIdError::Character { offset: 1 });
/// # Ok::<(), ChatIdError>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChatId(Arc<str>);

impl ChatId {
    /// Checks `text` against the rule and copies it.
    pub fn parse(text: &str) -> Result<ChatId, ChatIdError> {
        if text.is_empty() || text.len() > CHAT_ID_MAX_BYTES {
            return Err(ChatIdError::Length { len: text.len() });
        }
        if let Some(offset) = text
            .bytes()
            .position(|b| !(b.is_ascii_alphanumeric() || b == b'_' || b == b'-'))
        {
            return Err(ChatIdError::Character { offset });
        }
        Ok(ChatId(Arc::from(text)))
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

keel_message::string_newtype_impls!(ChatId, ChatIdError);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refusal_names_its_rule_in_rule_and_message() {
        for (text, rule) in [
            ("", "chat_id.length"),
            (&*"c".repeat(CHAT_ID_MAX_BYTES + 1), "chat_id.length"),
            ("a b", "chat_id.charset"),
        ] {
            let e = ChatId::parse(text).unwrap_err();
            assert_eq!(e.rule(), rule, "{text:?}");
            assert!(e.to_string().contains(&format!("(rule {rule})")), "{e}");
        }
    }
}
