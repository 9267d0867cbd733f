//! [`FilePart`]: a file a user attached, and its wire shape.

use crate::error::MessageError;
use crate::file_name::FileName;
use crate::limits::{Bound, Limits};
use crate::media_bytes::MediaBytes;
use crate::media_type::FileMediaType;
use serde::{Deserialize, Serialize};

/// A file: a media type from the allowlist, a name, and bytes within
/// [`Limits::file_bytes`] that match the type (rule
/// `message.file_signature`: a PDF starts with `%PDF-`, text is UTF-8).
///
/// ```
/// use keel_message::{FileMediaType, FileName, FilePart, Limits};
/// let file = FilePart::new_with(
///     FileMediaType::PlainText,
///     FileName::parse("notes.txt")?,
///     b"hello",
///     &Limits::default(),
/// )?;
/// assert_eq!(file.bytes().as_bytes(), b"hello");
/// # Ok::<(), keel_message::MessageError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FilePart {
    media_type: FileMediaType,
    name: FileName,
    bytes: MediaBytes,
}

impl FilePart {
    /// Copies `bytes` into a file part.
    pub fn new_with(
        media_type: FileMediaType,
        name: FileName,
        bytes: &[u8],
        limits: &Limits,
    ) -> Result<FilePart, MessageError> {
        let bytes = MediaBytes::copy_from(bytes, Bound::FileBytes, limits)
            .map_err(|e| e.within("$.base64"))?;
        Self::from_media_bytes_with(media_type, name, bytes, limits)
    }

    /// A file part sharing `bytes` (no copy), under the same rules.
    pub fn from_media_bytes_with(
        media_type: FileMediaType,
        name: FileName,
        bytes: MediaBytes,
        limits: &Limits,
    ) -> Result<FilePart, MessageError> {
        Bound::FileBytes
            .check(limits, bytes.len())
            .map_err(|e| MessageError::new("$.base64", e))?;
        media_type
            .check_content(bytes.as_bytes())
            .map_err(|e| e.within("$.base64"))?;
        Ok(FilePart {
            media_type,
            name,
            bytes,
        })
    }

    /// The media type.
    pub fn media_type(&self) -> FileMediaType {
        self.media_type
    }

    /// The file name.
    pub fn name(&self) -> &FileName {
        &self.name
    }

    /// The bytes.
    pub fn bytes(&self) -> &MediaBytes {
        &self.bytes
    }

    /// Re-checks `limits.file_bytes` (the part may have been built under
    /// other limits).
    pub(crate) fn revalidate(&self, limits: &Limits) -> Result<(), MessageError> {
        Bound::FileBytes
            .check(limits, self.bytes.len())
            .map_err(|e| MessageError::new("$.base64", e))
    }
}

/// The wire shape of a file without its part tag.
#[derive(Serialize)]
pub(crate) struct FileOut<'a> {
    media_type: &'static str,
    name: &'a str,
    base64: String,
}

impl<'a> From<&'a FilePart> for FileOut<'a> {
    fn from(file: &'a FilePart) -> Self {
        FileOut {
            media_type: file.media_type.as_str(),
            name: file.name.as_str(),
            base64: file.bytes.to_base64(),
        }
    }
}

/// The wire shape of a file, as deserialized before validation.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileWire {
    media_type: String,
    name: String,
    base64: String,
}

impl FileWire {
    pub(crate) fn build(self, limits: &Limits) -> Result<FilePart, MessageError> {
        let media_type =
            FileMediaType::parse(&self.media_type).map_err(|e| e.within("$.media_type"))?;
        let name = FileName::parse(&self.name).map_err(|e| e.within("$.name"))?;
        let bytes = MediaBytes::from_base64(&self.base64, Bound::FileBytes, limits)
            .map_err(|e| e.within("$.base64"))?;
        FilePart::from_media_bytes_with(media_type, name, bytes, limits)
    }
}
