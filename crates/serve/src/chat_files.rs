//! The AI SDK's user `file` parts in `POST /v1/chat`
//! (`{"type": "file", "mediaType": "image/png", "url": "data:image/png;base64,…",
//! "filename"?: "a.png"}`) as Keel message parts.
//!
//! - An image type (png, jpeg, gif, webp) becomes an image part, from a
//!   `data:` URL of that type (the bytes must carry the type's signature)
//!   or an `https` URL (the provider fetches it).
//! - A document type (`application/pdf`, `text/plain`, `text/markdown`,
//!   `text/csv`, `application/json`) becomes a file part, from a `data:`
//!   URL only, named by `filename` (or `attachment`).
//! - Any other type is refused (SVG above all), as is a `data:` URL whose
//!   type is not the part's `mediaType`.
//!
//! The rules and bounds (`limits.image_bytes`, `limits.file_bytes`, base64,
//! signatures, file names) are `keel-message`'s; a refusal names the
//! part's member (`url`, which `chat` puts under `messages[i].parts[j]`)
//! and the rule, never the content.

use keel_message::{
    Bound, FileMediaType, FileName, FilePart, HttpsUrl, ImageMediaType, ImagePart, Limits,
    MediaBytes, MessageError, Part,
};
use serde_json::Value;

/// The name a file part gets when the client sends none.
pub const DEFAULT_FILE_NAME: &str = "attachment";

const MEDIA_TYPE_RULE: &str = "an allowed media type: image/png, image/jpeg, image/gif, image/webp, application/pdf, text/plain, text/markdown, text/csv or application/json (rules message.image_media_type, message.file_media_type)";
const DATA_URL_RULE: &str =
    "a data URL of the part's mediaType, base64 (data:<mediaType>;base64,…)";
const FILE_URL_RULE: &str = "a data URL of the part's mediaType, base64 (data:<mediaType>;base64,…); a document is not fetched";

/// Why a `file` part was refused: the member and the rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FilePartError {
    /// The part's member: `mediaType`, `url` or `filename`.
    pub member: &'static str,
    /// What the member must be, or the rule it broke.
    pub rule: &'static str,
}

/// The part `p` (a `file` part) describes.
pub fn file_part(p: &Value, limits: &Limits) -> Result<Part, FilePartError> {
    let refuse = |member: &'static str, rule: &'static str| FilePartError { member, rule };
    let broke = |member: &'static str| move |e: MessageError| refuse(member, e.kind().rule());
    let Some(Value::String(media_type)) = p.get("mediaType") else {
        return Err(refuse("mediaType", "a string"));
    };
    let Some(Value::String(url)) = p.get("url") else {
        return Err(refuse("url", "a string"));
    };
    let filename = match p.get("filename") {
        None | Some(Value::Null) => None,
        Some(Value::String(name)) => Some(name.as_str()),
        Some(_) => return Err(refuse("filename", "a string")),
    };
    let data = match url.strip_prefix("data:") {
        None => None,
        Some(rest) => Some(
            rest.strip_prefix(media_type.as_str())
                .and_then(|rest| rest.strip_prefix(";base64,"))
                .ok_or_else(|| refuse("url", DATA_URL_RULE))?,
        ),
    };
    if let Ok(image) = ImageMediaType::parse(media_type) {
        let part = match data {
            Some(base64) => ImagePart::from_base64_with(image, base64, limits),
            None => HttpsUrl::parse(url).map(|url| ImagePart::from_url(url, Some(image))),
        };
        return part.map(Part::image).map_err(broke("url"));
    }
    let Ok(document) = FileMediaType::parse(media_type) else {
        return Err(refuse("mediaType", MEDIA_TYPE_RULE));
    };
    let Some(base64) = data else {
        return Err(refuse("url", FILE_URL_RULE));
    };
    let name = FileName::parse(filename.unwrap_or(DEFAULT_FILE_NAME)).map_err(broke("filename"))?;
    MediaBytes::from_base64(base64, Bound::FileBytes, limits)
        .and_then(|bytes| FilePart::from_media_bytes_with(document, name, bytes, limits))
        .map(Part::File)
        .map_err(broke("url"))
}
