//! A user's images and files as the frontends send them, made Keel
//! message parts under one set of rules, whichever protocol carried them
//! (the AI SDK's `file` parts in `POST /v1/chat`, AG-UI's `image`,
//! `document` and legacy `binary` content parts in `POST /v1/agui`):
//!
//! - An image type (png, jpeg, gif, webp) becomes an image part, from
//!   inline base64 bytes (which must carry the type's signature) or an
//!   `https` URL (the provider fetches it).
//! - A document type (`application/pdf`, `text/plain`, `text/markdown`,
//!   `text/csv`, `application/json`) becomes a file part, from inline
//!   bytes only (a document is never fetched), named by the client's file
//!   name or [`DEFAULT_FILE_NAME`].
//! - Any other type is refused (SVG above all).
//!
//! The rules and bounds (`limits.image_bytes`, `limits.file_bytes`,
//! base64, signatures, file names) are `keel-message`'s; a refusal
//! ([`MediaRefusal`]) says which member of the part broke which rule,
//! never the content. Each protocol's parser names the member in its own
//! terms.

use keel_message::{
    Bound, FileMediaType, FileName, FilePart, HttpsUrl, ImageMediaType, ImagePart, Limits,
    MediaBytes, MessageError, MessageErrorKind, Part,
};

/// The name a file part gets when the client sends none.
pub const DEFAULT_FILE_NAME: &str = "attachment";

/// What a refused media type should have been.
pub const MEDIA_TYPE_RULE: &str = "an allowed media type: image/png, image/jpeg, image/gif, image/webp, application/pdf, text/plain, text/markdown, text/csv or application/json (rules message.image_media_type, message.file_media_type)";

/// Where a part's bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MediaSource<'a> {
    /// Inline, as base64 text.
    Base64(&'a str),
    /// At a URL (only an image's may be fetched, and only over `https`).
    Url(&'a str),
}

/// Why a user's media part was refused: which member, and the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MediaRefusal {
    /// The media type is not one Keel takes ([`MEDIA_TYPE_RULE`]).
    #[error("{MEDIA_TYPE_RULE}")]
    MediaType,
    /// A document named by URL: documents are never fetched.
    #[error("a document's bytes inline; a document is not fetched")]
    DocumentUrl,
    /// The bytes or the URL break a message rule or bound.
    #[error(transparent)]
    Source(MessageErrorKind),
    /// The file name breaks the file name rule.
    #[error(transparent)]
    FileName(MessageErrorKind),
}

/// The Keel part a user's image or file describes: its declared media
/// type, where its bytes are, and (documents only) the client's file name.
pub fn user_media_part(
    media_type: &str,
    source: MediaSource<'_>,
    file_name: Option<&str>,
    limits: &Limits,
) -> Result<Part, MediaRefusal> {
    let source_rule = |e: MessageError| MediaRefusal::Source(e.kind().clone());
    if let Ok(image) = ImageMediaType::parse(media_type) {
        let part = match source {
            MediaSource::Base64(base64) => ImagePart::from_base64_with(image, base64, limits),
            MediaSource::Url(url) => {
                HttpsUrl::parse(url).map(|url| ImagePart::from_url(url, Some(image)))
            }
        };
        return part.map(Part::image).map_err(source_rule);
    }
    let Ok(document) = FileMediaType::parse(media_type) else {
        return Err(MediaRefusal::MediaType);
    };
    let MediaSource::Base64(base64) = source else {
        return Err(MediaRefusal::DocumentUrl);
    };
    let name = FileName::parse(file_name.unwrap_or(DEFAULT_FILE_NAME))
        .map_err(|e| MediaRefusal::FileName(e.kind().clone()))?;
    MediaBytes::from_base64(base64, Bound::FileBytes, limits)
        .and_then(|bytes| FilePart::from_media_bytes_with(document, name, bytes, limits))
        .map(Part::File)
        .map_err(source_rule)
}
