//! The media types Keel carries: an allowlist for images (never SVG) and
//! one for files, each with the leading-bytes check its content must pass.

use crate::error::{MessageError, MessageErrorKind};
use std::fmt;

/// An image media type from the allowlist (rule `message.image_media_type`).
/// SVG is never allowed: it is a document that can run script.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ImageMediaType {
    /// `image/png`.
    Png,
    /// `image/jpeg`.
    Jpeg,
    /// `image/gif`.
    Gif,
    /// `image/webp`.
    Webp,
}

impl ImageMediaType {
    /// Parses the wire name (exact, lowercase).
    pub fn parse(text: &str) -> Result<ImageMediaType, MessageError> {
        match text {
            "image/png" => Ok(ImageMediaType::Png),
            "image/jpeg" => Ok(ImageMediaType::Jpeg),
            "image/gif" => Ok(ImageMediaType::Gif),
            "image/webp" => Ok(ImageMediaType::Webp),
            _ => Err(MessageError::new(
                "$",
                MessageErrorKind::UnknownImageMediaType { len: text.len() },
            )),
        }
    }

    /// The wire name, e.g. `image/png`.
    pub fn as_str(self) -> &'static str {
        match self {
            ImageMediaType::Png => "image/png",
            ImageMediaType::Jpeg => "image/jpeg",
            ImageMediaType::Gif => "image/gif",
            ImageMediaType::Webp => "image/webp",
        }
    }

    /// Whether `bytes` start with this type's signature (rule
    /// `message.image_signature`), so that bytes labelled as an image are
    /// at least shaped like one.
    pub fn signature_matches(self, bytes: &[u8]) -> bool {
        match self {
            ImageMediaType::Png => bytes.starts_with(b"\x89PNG\r\n\x1a\n"),
            ImageMediaType::Jpeg => bytes.starts_with(&[0xFF, 0xD8, 0xFF]),
            ImageMediaType::Gif => bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a"),
            ImageMediaType::Webp => {
                bytes.starts_with(b"RIFF") && bytes.get(8..12) == Some(b"WEBP".as_slice())
            }
        }
    }
}

/// A file media type from the allowlist (rule `message.file_media_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileMediaType {
    /// `application/pdf`.
    Pdf,
    /// `text/plain`.
    PlainText,
    /// `text/markdown`.
    Markdown,
    /// `text/csv`.
    Csv,
    /// `application/json`.
    Json,
}

impl FileMediaType {
    /// Parses the wire name (exact, lowercase).
    pub fn parse(text: &str) -> Result<FileMediaType, MessageError> {
        match text {
            "application/pdf" => Ok(FileMediaType::Pdf),
            "text/plain" => Ok(FileMediaType::PlainText),
            "text/markdown" => Ok(FileMediaType::Markdown),
            "text/csv" => Ok(FileMediaType::Csv),
            "application/json" => Ok(FileMediaType::Json),
            _ => Err(MessageError::new(
                "$",
                MessageErrorKind::UnknownFileMediaType { len: text.len() },
            )),
        }
    }

    /// The wire name, e.g. `application/pdf`.
    pub fn as_str(self) -> &'static str {
        match self {
            FileMediaType::Pdf => "application/pdf",
            FileMediaType::PlainText => "text/plain",
            FileMediaType::Markdown => "text/markdown",
            FileMediaType::Csv => "text/csv",
            FileMediaType::Json => "application/json",
        }
    }

    /// Whether the content is text (UTF-8), as every type but PDF is.
    pub fn is_text(self) -> bool {
        !matches!(self, FileMediaType::Pdf)
    }

    /// The content rule (rule `message.file_signature`): a PDF starts
    /// with `%PDF-`; the text types are UTF-8.
    pub fn check_content(self, bytes: &[u8]) -> Result<(), MessageError> {
        self.content_problem(bytes)
            .map_err(|kind| MessageError::new("$", kind))
    }

    fn content_problem(self, bytes: &[u8]) -> Result<(), MessageErrorKind> {
        let media_type = self.as_str();
        if !self.is_text() {
            if bytes.starts_with(b"%PDF-") {
                return Ok(());
            }
            return Err(MessageErrorKind::FileSignature { media_type });
        }
        std::str::from_utf8(bytes)
            .map(|_| ())
            .map_err(|e| MessageErrorKind::FileNotUtf8 {
                media_type,
                offset: e.valid_up_to(),
            })
    }
}

macro_rules! media_type_impls {
    ($name:ident) => {
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
                $name::parse(&text).map_err(serde::de::Error::custom)
            }
        }
    };
}

media_type_impls!(ImageMediaType);
media_type_impls!(FileMediaType);
