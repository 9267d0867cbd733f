//! [`OpaqueValue`]: a provider's signature or encrypted value, carried
//! byte-exact and never shown.

use crate::error::{MessageError, MessageErrorKind};
use crate::limits::{Bound, Limits};
use crate::names::NameProblem;
use std::fmt;
use std::sync::Arc;

/// A provider's opaque value: a reasoning signature, or the encrypted body
/// of a redacted reasoning part. Keel never interprets it; it sends it back
/// to the provider that issued it exactly as received.
///
/// Rule `message.opaque_value`: non-empty, printable ASCII `0x21..=0x7E`
/// only (base64 and the like), at most [`Limits::opaque_bytes`]. It may be
/// a secret the provider sealed, so `Debug` and errors show only its length.
///
/// ```
/// use keel_message::OpaqueValue;
/// let sig = OpaqueValue::new("EqQBCkgIARABGAIiQL")?;
/// assert_eq!(sig.len(), 18);
/// assert_eq!(format!("{sig:?}"), "OpaqueValue(18 bytes)");
/// assert!(OpaqueValue::new("has space").is_err());
/// # Ok::<(), keel_message::MessageError>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct OpaqueValue(Arc<str>);

impl OpaqueValue {
    /// Validates and copies `text` under the default limits.
    pub fn new(text: &str) -> Result<OpaqueValue, MessageError> {
        Self::new_with(text, Limits::default_ref())
    }

    /// Validates and copies `text`: non-empty, printable ASCII, at most
    /// `limits.opaque_bytes`.
    pub fn new_with(text: &str, limits: &Limits) -> Result<OpaqueValue, MessageError> {
        let problem = if text.is_empty() {
            Some(NameProblem::Empty)
        } else {
            text.bytes()
                .position(|b| !(0x21..=0x7E).contains(&b))
                .map(|offset| NameProblem::Character { offset })
        };
        if let Some(problem) = problem {
            return Err(MessageError::new(
                "$",
                MessageErrorKind::OpaqueValue { problem },
            ));
        }
        Bound::OpaqueBytes
            .check(limits, text.len())
            .map_err(|e| MessageError::new("$", e))?;
        Ok(OpaqueValue(Arc::from(text)))
    }

    /// The value, to send back to its provider.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Always false: an opaque value is never empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for OpaqueValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OpaqueValue({} bytes)", self.0.len())
    }
}

impl serde::Serialize for OpaqueValue {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for OpaqueValue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        OpaqueValue::new(&text).map_err(serde::de::Error::custom)
    }
}
