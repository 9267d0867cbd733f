//! Validated identifiers.
//!
//! Every identifier follows one wire rule, the same on every host so that a
//! log written by one host is readable by any other: 1 to [`ID_MAX_BYTES`]
//! bytes, each an ASCII letter, digit, `_`, `-`, `.` or `:`. That admits the
//! ids providers mint (`call_9bX…`, `toolu_01…`) and excludes whitespace,
//! control characters, quotes and path separators, so an id can be printed,
//! logged and used as a SQL key or URL segment without escaping. The two
//! dot segments `.` and `..` are refused as well (rule `ids.dot_segment`):
//! as a URL path segment or a file name they mean "this" and "the parent",
//! not an id.
//!
//! There is no `Default`, no `From<String>` and no way to build an id other
//! than [`parse`](RunId::parse) (or deserializing, which calls it).
//! [`OperationId`]s are issued by the host (see [`OperationIdIssuer`]);
//! provider adapters receive them inside a `ModelRequest` and the stream
//! items they yield have no field that could carry one.

use std::fmt;
use std::sync::Arc;

/// The longest identifier, in bytes.
pub const ID_MAX_BYTES: usize = 128;

/// Why a string is not a valid identifier. The offending text is never
/// echoed: only its length or the byte offset of the first bad character.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IdError {
    /// The string was empty.
    #[error("{kind} is empty (rule ids.length: 1..={ID_MAX_BYTES} bytes)")]
    Empty {
        /// Which identifier type was being parsed, e.g. `"run id"`.
        kind: &'static str,
    },
    /// The string was longer than [`ID_MAX_BYTES`].
    #[error("{kind} is {len} bytes (rule ids.length: 1..={ID_MAX_BYTES} bytes)")]
    TooLong {
        /// Which identifier type was being parsed.
        kind: &'static str,
        /// The actual length in bytes.
        len: usize,
    },
    /// A byte outside `[A-Za-z0-9_.:-]`.
    #[error(
        "{kind} has a disallowed character at byte {offset} (rule ids.charset: ASCII letters, digits, '_', '-', '.', ':')"
    )]
    Character {
        /// Which identifier type was being parsed.
        kind: &'static str,
        /// Byte offset of the first disallowed character.
        offset: usize,
    },
    /// The whole id is `.` or `..`, a path dot segment.
    #[error(
        "{kind} is a dot segment of {len} byte(s) (rule ids.dot_segment: `.` and `..` are not ids)"
    )]
    DotSegment {
        /// Which identifier type was being parsed.
        kind: &'static str,
        /// 1 for `.`, 2 for `..`.
        len: usize,
    },
}

impl IdError {
    /// The rule this error names: `ids.length`, `ids.charset` or
    /// `ids.dot_segment`.
    pub fn rule(&self) -> &'static str {
        match self {
            IdError::Empty { .. } | IdError::TooLong { .. } => "ids.length",
            IdError::Character { .. } => "ids.charset",
            IdError::DotSegment { .. } => "ids.dot_segment",
        }
    }
}

/// Checks the identifier rule for `text`.
fn check_id(kind: &'static str, text: &str) -> Result<(), IdError> {
    if text.is_empty() {
        return Err(IdError::Empty { kind });
    }
    if text.len() > ID_MAX_BYTES {
        return Err(IdError::TooLong {
            kind,
            len: text.len(),
        });
    }
    if let Some(offset) = text
        .bytes()
        .position(|b| !(b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':')))
    {
        return Err(IdError::Character { kind, offset });
    }
    if matches!(text, "." | "..") {
        return Err(IdError::DotSegment {
            kind,
            len: text.len(),
        });
    }
    Ok(())
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $kind:literal) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(Arc<str>);

        impl $name {
            /// Validates `text` against the identifier rule and copies it.
            pub fn parse(text: &str) -> Result<Self, IdError> {
                check_id($kind, text)?;
                Ok($name(Arc::from(text)))
            }

            /// The identifier text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

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

        impl std::str::FromStr for $name {
            type Err = IdError;
            fn from_str(text: &str) -> Result<Self, IdError> {
                Self::parse(text)
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

id_type!(
    /// Identifies one run: the unit that owns one event log.
    RunId,
    "run id"
);
id_type!(
    /// Identifies one message in a history.
    MessageId,
    "message id"
);
id_type!(
    /// Identifies one model call (one attempt). Issued by the host, one per
    /// attempt, never by a provider adapter.
    OperationId,
    "operation id"
);
id_type!(
    /// Identifies one interaction with the host or its user (for example an
    /// approval request), issued by the engine.
    InteractionId,
    "interaction id"
);
id_type!(
    /// Identifies one tool call, as minted by the model (or the script) and
    /// echoed by its tool result.
    CallId,
    "call id"
);

/// Issues [`OperationId`]s for one run: `op_<n>` with `n` counting from 1.
///
/// Hosts use one issuer per run so that every attempt of every model call
/// gets a fresh id; the engine owns it, adapters never see it.
///
/// ```
/// let mut ops = keel_message::OperationIdIssuer::new();
/// assert_eq!(ops.issue().as_str(), "op_1");
/// assert_eq!(ops.issue().as_str(), "op_2");
/// ```
#[derive(Debug, Default)]
pub struct OperationIdIssuer {
    issued: u64,
}

impl OperationIdIssuer {
    /// An issuer that has issued nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// The next operation id.
    pub fn issue(&mut self) -> OperationId {
        self.issued += 1;
        // "op_" plus at most 20 digits is always within the rule.
        OperationId(Arc::from(format!("op_{}", self.issued)))
    }

    /// How many ids this issuer has handed out.
    pub fn issued(&self) -> u64 {
        self.issued
    }
}

impl RunId {
    /// A fresh run id, unique across calls, threads and processes:
    /// `run_<time>_<pid>_<seed>_<n>` in lowercase hex, where `time` is the
    /// nanoseconds since the Unix epoch, `pid` the process id, `seed` a
    /// per-process random value (from std's `RandomState`) and `n` a
    /// per-process counter. At most 4 + 4 × 17 bytes, so always valid.
    ///
    /// ```
    /// let a = keel_message::RunId::generate();
    /// let b = keel_message::RunId::generate();
    /// assert_ne!(a, b);
    /// assert!(a.as_str().starts_with("run_"));
    /// assert_eq!(keel_message::RunId::parse(a.as_str()), Ok(a));
    /// ```
    pub fn generate() -> RunId {
        use std::sync::atomic::{AtomicU64, Ordering};
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        static SEED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
        let seed = *SEED.get_or_init(|| {
            use std::hash::{BuildHasher, Hasher};
            // RandomState is seeded from the OS once per process.
            let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
            hasher.write_u32(std::process::id());
            hasher.finish()
        });
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        // A clock before the epoch only costs the time component; the
        // counter and seed still make the id unique.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let text = format!(
            "run_{:x}_{:x}_{seed:x}_{n:x}",
            nanos as u64,
            std::process::id()
        );
        RunId(Arc::from(text))
    }
}

#[cfg(test)]
mod generate_tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn generated_ids_are_valid_and_unique_across_threads() {
        let threads: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(|| (0..2_000).map(|_| RunId::generate()).collect::<Vec<_>>())
            })
            .collect();
        let mut seen = HashSet::new();
        for thread in threads {
            #[allow(clippy::unwrap_used, reason = "a panicking test thread fails the test")]
            for id in thread.join().unwrap() {
                assert_eq!(check_id("run id", id.as_str()), Ok(()), "{id:?}");
                assert!(seen.insert(id.clone()), "duplicate {id:?}");
            }
        }
        assert_eq!(seen.len(), 8_000);
    }
}
