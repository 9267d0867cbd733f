//! Validated names: tool names (`^[A-Za-z0-9_-]{1,64}$`, the rule
//! `ToolSpec::new` shares) and model names.

use std::fmt;
use std::sync::Arc;

/// What is wrong with a name, without repeating it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameProblem {
    /// The name was empty.
    Empty,
    /// The name was this many bytes, over its maximum.
    TooLong {
        /// The actual length in bytes.
        len: usize,
        /// The maximum.
        max: usize,
    },
    /// A disallowed character at this byte offset.
    Character {
        /// Byte offset of the first disallowed character.
        offset: usize,
    },
}

impl fmt::Display for NameProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NameProblem::Empty => f.write_str("is empty"),
            NameProblem::TooLong { len, max } => write!(f, "is {len} bytes, over {max}"),
            NameProblem::Character { offset } => {
                write!(f, "has a disallowed character at byte {offset}")
            }
        }
    }
}

/// The longest tool name, in bytes (the bound every major provider shares).
pub const TOOL_NAME_MAX_BYTES: usize = 64;

/// A canonical tool name: 1 to 64 bytes of ASCII letters, digits, `_`, `-`.
///
/// Names are case-sensitive and compared exactly; "canonical" means no
/// normalisation happens anywhere, so the name a model calls is the name the
/// log records.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ToolName(Arc<str>);

impl ToolName {
    /// A name that passed the tool-name rule (`name_rules`).
    pub(crate) fn from_checked_text(text: Arc<str>) -> ToolName {
        ToolName(text)
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The tool-name rule, as a `const fn` so that `ToolSpec::new` applies the
/// same rule at compile time.
pub(crate) const fn tool_name_problem(text: &str) -> Option<NameProblem> {
    let bytes = text.as_bytes();
    if bytes.is_empty() {
        return Some(NameProblem::Empty);
    }
    if bytes.len() > TOOL_NAME_MAX_BYTES {
        return Some(NameProblem::TooLong {
            len: bytes.len(),
            max: TOOL_NAME_MAX_BYTES,
        });
    }
    let mut offset = 0;
    while offset < bytes.len() {
        let b = bytes[offset];
        if !(b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
            return Some(NameProblem::Character { offset });
        }
        offset += 1;
    }
    None
}

/// A static name that passed the tool-name rule: what `ToolSpec` holds, so
/// that turning it into a [`ToolName`] cannot fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CheckedToolName(&'static str);

impl CheckedToolName {
    /// Applies the tool-name rule.
    pub(crate) const fn check(text: &'static str) -> Result<Self, NameProblem> {
        match tool_name_problem(text) {
            Some(problem) => Err(problem),
            None => Ok(CheckedToolName(text)),
        }
    }

    /// The name.
    pub(crate) const fn as_str(&self) -> &'static str {
        self.0
    }
}

impl From<CheckedToolName> for ToolName {
    fn from(name: CheckedToolName) -> Self {
        ToolName(Arc::from(name.0))
    }
}

/// A model name as the provider knows it (`gpt-5`, `claude-sonnet-4-5`,
/// `llama3.1:8b`, `accounts/x/models/y`): non-empty, at most
/// [`Limits::model_name_bytes`](crate::Limits::model_name_bytes), no whitespace or control characters.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ModelName(Arc<str>);

impl ModelName {
    /// A name that passed the model-name rule (`name_rules`).
    pub(crate) fn from_checked_text(text: Arc<str>) -> ModelName {
        ModelName(text)
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

macro_rules! name_impls {
    ($name:ident) => {
        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($name), &*self.0)
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }
        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }
        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
                Self::parse(&text).map_err(serde::de::Error::custom)
            }
        }
    };
}
name_impls!(ToolName);
name_impls!(ModelName);
