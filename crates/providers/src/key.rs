//! API keys: read from the environment, sent in one header, never shown.

use keel_message::EnvVarName;
use keel_stream::RawProblem;
use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

/// The longest API key accepted, in bytes.
pub const API_KEY_MAX_BYTES: usize = 4096;

/// A provider API key.
///
/// Its `Debug` and `Display` print `[redacted]`, never the key, and it has
/// no `Serialize` or accessor: the only place its bytes go is the request's
/// authentication header, which is marked sensitive. Problem messages an
/// adapter builds have every occurrence of the key replaced by
/// `[redacted]` before they leave the adapter (on top of the secret screen
/// every problem message goes through in `keel-stream`).
///
/// A key is 1 to [`API_KEY_MAX_BYTES`] bytes of visible ASCII (`!` to `~`),
/// the characters an HTTP header value can carry unescaped.
///
/// ```
/// use keel_providers::ApiKey;
/// let key = ApiKey::new("sk-example-0123456789abcdef")?;
/// assert_eq!(format!("{key:?} {key}"), "[redacted] [redacted]");
/// assert!(ApiKey::new("two words").is_err());
/// # Ok::<(), keel_providers::ApiKeyError>(())
/// ```
#[derive(Clone)]
pub struct ApiKey(Arc<str>);

/// Why an API key could not be read. Never carries the key itself, only
/// the environment variable's name and a position or size.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ApiKeyError {
    /// The environment variable is not set.
    #[error("environment variable {var} is not set")]
    NotSet {
        /// The variable's name.
        var: String,
    },
    /// The environment variable's value is not Unicode.
    #[error("environment variable {var} is not valid Unicode")]
    NotUnicode {
        /// The variable's name.
        var: String,
    },
    /// The key is empty.
    #[error("the API key{} is empty (rule api_key.length)", in_var(.var))]
    Empty {
        /// The variable it came from, if any.
        var: Option<String>,
    },
    /// The key is longer than [`API_KEY_MAX_BYTES`].
    #[error("the API key{} is {len} bytes, over {API_KEY_MAX_BYTES} (rule api_key.length)", in_var(.var))]
    TooLong {
        /// The variable it came from, if any.
        var: Option<String>,
        /// Its length in bytes.
        len: usize,
    },
    /// The key has a character outside visible ASCII.
    #[error(
        "the API key{} has a character outside visible ASCII at byte {offset} (rule api_key.charset)",
        in_var(.var)
    )]
    Character {
        /// The variable it came from, if any.
        var: Option<String>,
        /// The byte offset of the first bad character.
        offset: usize,
    },
}

fn in_var(var: &Option<String>) -> String {
    match var {
        Some(var) => format!(" in {var}"),
        None => String::new(),
    }
}

impl ApiKey {
    /// A key from its text.
    pub fn new(key: impl Into<String>) -> Result<ApiKey, ApiKeyError> {
        Self::checked(key.into(), None)
    }

    /// The key held by the environment variable `var` (a checked name:
    /// see [`EnvVarName`]).
    ///
    /// ```
    /// use keel_message::EnvVarName;
    /// use keel_providers::{ApiKey, ApiKeyError};
    /// let var = EnvVarName::parse("KEEL_DOC_SURELY_UNSET_VARIABLE")?;
    /// let err = ApiKey::from_env(&var).unwrap_err();
    /// assert_eq!(err, ApiKeyError::NotSet { var: "KEEL_DOC_SURELY_UNSET_VARIABLE".into() });
    /// # Ok::<(), keel_message::EnvVarNameError>(())
    /// ```
    pub fn from_env(var: &EnvVarName) -> Result<ApiKey, ApiKeyError> {
        let name = var.as_str();
        match std::env::var(name) {
            Ok(key) => Self::checked(key, Some(name)),
            Err(std::env::VarError::NotPresent) => Err(ApiKeyError::NotSet { var: name.into() }),
            Err(std::env::VarError::NotUnicode(_)) => {
                Err(ApiKeyError::NotUnicode { var: name.into() })
            }
        }
    }

    fn checked(key: String, var: Option<&str>) -> Result<ApiKey, ApiKeyError> {
        let var = var.map(str::to_owned);
        if key.is_empty() {
            return Err(ApiKeyError::Empty { var });
        }
        if key.len() > API_KEY_MAX_BYTES {
            return Err(ApiKeyError::TooLong {
                var,
                len: key.len(),
            });
        }
        if let Some(offset) = key.bytes().position(|b| !b.is_ascii_graphic()) {
            return Err(ApiKeyError::Character { var, offset });
        }
        Ok(ApiKey(key.into()))
    }

    /// The key, for the authentication header only.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }

    /// `text` with every occurrence of the key replaced by `[redacted]`.
    pub(crate) fn scrub<'a>(&self, text: &'a str) -> Cow<'a, str> {
        if text.contains(&*self.0) {
            Cow::Owned(text.replace(&*self.0, "[redacted]"))
        } else {
            Cow::Borrowed(text)
        }
    }
}

/// `problem` with every occurrence of `key` in its message replaced by
/// `[redacted]` (a server may echo the request's credentials in an error).
pub(crate) fn scrub_problem(mut problem: RawProblem, key: Option<&ApiKey>) -> RawProblem {
    if let Some(key) = key
        && let Cow::Owned(clean) = key.scrub(&problem.message)
    {
        problem.message = clean;
    }
    problem
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl fmt::Display for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn keys_are_checked_and_never_shown() {
        let key = ApiKey::new("k3y-value-xyz").unwrap();
        assert_eq!(
            format!("{key:?}|{key}|{key:#?}"),
            "[redacted]|[redacted]|[redacted]"
        );
        assert_eq!(key.scrub("a k3y-value-xyz b"), "a [redacted] b");
        assert!(matches!(key.scrub("nothing"), Cow::Borrowed(_)));
        assert_eq!(
            ApiKey::new("").unwrap_err(),
            ApiKeyError::Empty { var: None }
        );
        assert_eq!(
            ApiKey::new("ab\ncd").unwrap_err(),
            ApiKeyError::Character {
                var: None,
                offset: 2
            }
        );
        assert!(matches!(
            ApiKey::new("x".repeat(API_KEY_MAX_BYTES + 1)),
            Err(ApiKeyError::TooLong { .. })
        ));
        // A name that is not one (`A=B`, empty) cannot reach `from_env`:
        // `EnvVarName` refuses it.
        let unset = EnvVarName::parse("KEEL_TEST_SURELY_UNSET_KEY").unwrap();
        assert_eq!(
            ApiKey::from_env(&unset).unwrap_err(),
            ApiKeyError::NotSet {
                var: "KEEL_TEST_SURELY_UNSET_KEY".into()
            }
        );
        let err = ApiKey::new("bad key").unwrap_err().to_string();
        assert!(!err.contains("bad"), "{err}");
    }
}
