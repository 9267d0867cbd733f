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
//! The rules and bounds are `keel_views::user_media`'s (shared with
//! `POST /v1/agui`); this module reads the AI SDK's spelling (the `data:`
//! URL) and names the part's member (`url`, which `chat` puts under
//! `messages[i].parts[j]`) and the rule, never the content.

use keel_message::{Limits, Part};
use keel_views::user_media::{MediaRefusal, MediaSource, user_media_part};
use serde_json::Value;

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
    let source = match url.strip_prefix("data:") {
        None => MediaSource::Url(url),
        Some(rest) => MediaSource::Base64(
            rest.strip_prefix(media_type.as_str())
                .and_then(|rest| rest.strip_prefix(";base64,"))
                .ok_or_else(|| refuse("url", DATA_URL_RULE))?,
        ),
    };
    user_media_part(media_type, source, filename, limits).map_err(|e| match e {
        MediaRefusal::MediaType => refuse("mediaType", keel_views::user_media::MEDIA_TYPE_RULE),
        MediaRefusal::DocumentUrl => refuse("url", FILE_URL_RULE),
        MediaRefusal::FileName(kind) => refuse("filename", kind.rule()),
        MediaRefusal::Source(kind) => refuse("url", kind.rule()),
    })
}
