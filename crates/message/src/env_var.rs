//! The name of an environment variable, as every part of Keel that names
//! one (a provider's key variable, an MCP server's passed-through
//! variables, `keel serve --allow-provider`) checks it.
//!
//! The rule is the one a POSIX shell accepts for a name it can export,
//! `[A-Za-z_][A-Za-z0-9_]*`, bounded at [`ENV_VAR_NAME_MAX_BYTES`]. A name
//! is often written next to a secret (the variable holds an API key), so
//! an error never echoes the text: only its length or a byte offset.

use std::sync::Arc;

/// The longest environment variable name, in bytes.
pub const ENV_VAR_NAME_MAX_BYTES: usize = 128;

/// Why a string is not an environment variable name. Never carries the
/// text (it may be the secret itself, pasted where its name belongs).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EnvVarNameError {
    /// Empty or longer than [`ENV_VAR_NAME_MAX_BYTES`].
    #[error(
        "an environment variable name is 1 to {ENV_VAR_NAME_MAX_BYTES} bytes; {len} given (rule env_var_name.length)"
    )]
    Length {
        /// The length found, in bytes.
        len: usize,
    },
    /// The first byte is a digit.
    #[error(
        "an environment variable name starts with a letter or `_`, not a digit (rule env_var_name.leading_digit)"
    )]
    LeadingDigit,
    /// A byte outside `[A-Za-z0-9_]`.
    #[error(
        "an environment variable name is ASCII letters, digits and `_`; byte {offset} is not (rule env_var_name.charset)"
    )]
    Character {
        /// The offset of the first such byte.
        offset: usize,
    },
}

impl EnvVarNameError {
    /// The rule broken: `env_var_name.length`, `env_var_name.leading_digit`
    /// or `env_var_name.charset`.
    pub fn rule(&self) -> &'static str {
        match self {
            EnvVarNameError::Length { .. } => "env_var_name.length",
            EnvVarNameError::LeadingDigit => "env_var_name.leading_digit",
            EnvVarNameError::Character { .. } => "env_var_name.charset",
        }
    }
}

/// A checked environment variable name: 1 to [`ENV_VAR_NAME_MAX_BYTES`]
/// bytes of `[A-Za-z0-9_]`, not starting with a digit.
///
/// ```
/// use keel_message::{EnvVarName, EnvVarNameError};
/// assert_eq!(EnvVarName::parse("OPENAI_API_KEY")?.as_str(), "OPENAI_API_KEY");
/// assert_eq!(EnvVarName::parse("1KEY").unwrap_err(), EnvVarNameError::LeadingDigit);
/// assert_eq!(EnvVarName::parse("sk-abc").unwrap_err().rule(), "env_var_name.charset");
/// # Ok::<(), EnvVarNameError>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EnvVarName(Arc<str>);

impl EnvVarName {
    /// Checks `text` against the rule and copies it.
    pub fn parse(text: &str) -> Result<EnvVarName, EnvVarNameError> {
        if text.is_empty() || text.len() > ENV_VAR_NAME_MAX_BYTES {
            return Err(EnvVarNameError::Length { len: text.len() });
        }
        if let Some(offset) = text
            .bytes()
            .position(|b| !(b.is_ascii_alphanumeric() || b == b'_'))
        {
            return Err(EnvVarNameError::Character { offset });
        }
        if text.as_bytes()[0].is_ascii_digit() {
            return Err(EnvVarNameError::LeadingDigit);
        }
        Ok(EnvVarName(Arc::from(text)))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

crate::string_newtype_impls!(EnvVarName, EnvVarNameError);
