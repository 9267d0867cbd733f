//! [`MediaBytes`]: shared, immutable image or file bytes, and their one
//! canonical base64 text.

use crate::error::{Base64Problem, MessageError, MessageErrorKind};
use crate::limits::{Bound, Limits};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use std::fmt;
use std::sync::Arc;

/// The bytes of an image or a file, shared: a clone is a reference-count
/// increment, so a 1 MiB image held by a message, a request, a log entry
/// and a subscriber is one allocation.
///
/// On the wire the bytes are standard, padded base64, and only the
/// canonical text is accepted (no whitespace, no non-zero trailing bits;
/// rule `message.base64`), so `to_base64(from_base64(x)) == x` for every
/// accepted `x`.
///
/// ```
/// use keel_message::{Bound, Limits, MediaBytes};
/// let bytes = MediaBytes::from_base64("aGk=", Bound::FileBytes, &Limits::default())?;
/// assert_eq!(bytes.as_bytes(), b"hi");
/// assert_eq!(bytes.to_base64(), "aGk=");
/// assert!(MediaBytes::from_base64("aGl=", Bound::FileBytes, &Limits::default()).is_err());
/// # Ok::<(), keel_message::MessageError>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct MediaBytes(Arc<[u8]>);

impl MediaBytes {
    /// Copies `bytes` under `bound` (`Bound::ImageBytes` or
    /// `Bound::FileBytes`) of `limits`.
    pub fn copy_from(
        bytes: &[u8],
        bound: Bound,
        limits: &Limits,
    ) -> Result<MediaBytes, MessageError> {
        bound
            .check(limits, bytes.len())
            .map_err(|e| MessageError::new("$", e))?;
        Ok(MediaBytes(Arc::from(bytes)))
    }

    /// Decodes canonical base64 whose decoded size is within `bound` of
    /// `limits`. The size is checked before anything is decoded.
    pub fn from_base64(
        text: &str,
        bound: Bound,
        limits: &Limits,
    ) -> Result<MediaBytes, MessageError> {
        let base64_error = |problem| MessageError::new("$", MessageErrorKind::Base64 { problem });
        if !text.len().is_multiple_of(4) {
            return Err(base64_error(Base64Problem::Length { len: text.len() }));
        }
        let padding = text
            .bytes()
            .rev()
            .take(2)
            .take_while(|&b| b == b'=')
            .count();
        bound
            .check(limits, text.len() / 4 * 3 - padding)
            .map_err(|e| MessageError::new("$", e))?;
        let bytes = STANDARD.decode(text).map_err(|e| {
            base64_error(match e {
                base64::DecodeError::InvalidByte(offset, _) => Base64Problem::Character { offset },
                base64::DecodeError::InvalidLastSymbol(offset, _) => {
                    Base64Problem::TrailingBits { offset }
                }
                base64::DecodeError::InvalidLength(len) => Base64Problem::Length { len },
                base64::DecodeError::InvalidPadding => Base64Problem::Padding,
            })
        })?;
        Ok(MediaBytes(Arc::from(bytes)))
    }

    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The number of bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are no bytes.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The canonical base64 text: standard alphabet, padded.
    pub fn to_base64(&self) -> String {
        STANDARD.encode(&self.0)
    }

    /// Whether two handles share one allocation (clones do).
    pub fn ptr_eq(a: &MediaBytes, b: &MediaBytes) -> bool {
        Arc::ptr_eq(&a.0, &b.0)
    }
}

impl fmt::Debug for MediaBytes {
    /// Only the size: the bytes may be large, and are content.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MediaBytes({} bytes)", self.0.len())
    }
}

impl serde::Serialize for MediaBytes {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_base64())
    }
}
