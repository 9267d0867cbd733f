//! From a `tools/call` result to what the model reads, by stated rules:
//!
//! | content | becomes |
//! | --- | --- |
//! | `text` | its text |
//! | `image` (png, jpeg, gif, webp; valid bytes) | an [`ImagePart`] of the result, within the image bounds |
//! | `image` (another type, or bytes that are not that type) | `[image: image/svg+xml, 1234 bytes, not shown: rule message.image_media_type]` |
//! | `audio` | `[audio: audio/wav, 1234 bytes]` (decoded size; never the bytes) |
//! | `resource` (embedded) | `[resource: text/plain, 120 bytes, file:///a.txt]` |
//! | `resource_link` | `[resource link: file:///a.txt, text/plain]` |
//! | anything else | `[content: <type>, <n> bytes]` (the item's JSON size) |
//! | `structuredContent` | its canonical JSON, unless a text item already holds the same JSON |
//!
//! Items are joined with a newline. A text over the bound is cut at a
//! character boundary and ends with `[output cut: kept K of N bytes]`,
//! so the model sees the cut; the cut is also returned for the log.
//! Names and URIs in placeholders are cut to 256 bytes each.
//!
//! Images have bounds of their own ([`FlattenBounds`]): at most
//! `images` of them, each at most `image_bytes` decoded, all together at
//! most `images_bytes` (by default the text's bound, so a result's text and
//! images each fit it). They are kept in order while they fit; what is cut
//! is said in one last line of the text, `[images cut: kept K of N images,
//! B of T bytes]` (room for it is kept within the text's bound), and
//! returned as an [`ImageCut`].

use keel_message::canonical::to_canonical_string;
use keel_message::{ImagePart, Limits};
use serde_json::Value;

mod images;

pub use images::ImageCut;

/// The longest mime type or URI a placeholder repeats.
const PLACEHOLDER_FIELD_MAX_BYTES: usize = 256;

/// The bounds a result is flattened under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlattenBounds {
    /// The text's bound, marker included.
    pub text_bytes: usize,
    /// The most images kept.
    pub images: usize,
    /// The largest image kept, in decoded bytes.
    pub image_bytes: usize,
    /// The most decoded image bytes kept, all images together.
    pub images_bytes: usize,
}

impl FlattenBounds {
    /// `text_bytes` for the text, and for the images together; the count
    /// and size of each image are the default message limits
    /// (`media_parts_per_message`, `image_bytes`).
    pub fn new(text_bytes: usize) -> FlattenBounds {
        let limits = Limits::default_ref();
        FlattenBounds {
            text_bytes,
            images: limits.media_parts_per_message,
            image_bytes: limits.image_bytes,
            images_bytes: text_bytes,
        }
    }
}

/// A flattened result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flattened {
    text: String,
    original_bytes: Option<u64>,
    is_error: bool,
    images: Vec<ImagePart>,
    image_cut: Option<ImageCut>,
}

impl Flattened {
    /// The text for the model (cut, with its marker, when over the bound).
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The flattened text's full size when it was cut.
    pub fn original_bytes(&self) -> Option<u64> {
        self.original_bytes
    }

    /// The server set `isError: true`.
    pub fn is_error(&self) -> bool {
        self.is_error
    }

    /// The images kept, in the result's order.
    pub fn images(&self) -> &[ImagePart] {
        &self.images
    }

    /// What of the images was cut, when some were.
    pub fn image_cut(&self) -> Option<ImageCut> {
        self.image_cut
    }

    /// Takes the text.
    pub fn into_text(self) -> String {
        self.text
    }
}

/// Why a result could not be flattened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FlattenError {
    /// The result is not a JSON object, or `content` is not an array.
    #[error("the tools/call result is not an object with a content array (rule mcp.result_shape)")]
    Shape,
}

/// Flattens `result` (a `CallToolResult` as JSON), its text cut to
/// `max_bytes` and its images within [`FlattenBounds::new`]`(max_bytes)`.
pub fn flatten(result: &Value, max_bytes: usize) -> Result<Flattened, FlattenError> {
    flatten_with(result, &FlattenBounds::new(max_bytes))
}

/// Flattens `result` (a `CallToolResult` as JSON) under `bounds`.
pub fn flatten_with(result: &Value, bounds: &FlattenBounds) -> Result<Flattened, FlattenError> {
    let object = result.as_object().ok_or(FlattenError::Shape)?;
    let content = match object.get("content") {
        None | Some(Value::Null) => &[][..],
        Some(Value::Array(items)) => items.as_slice(),
        Some(_) => return Err(FlattenError::Shape),
    };
    let mut kept = images::Kept::new(bounds);
    let mut pieces: Vec<String> = Vec::with_capacity(content.len());
    for item in content {
        if item.get("type").and_then(Value::as_str) == Some("image") {
            if let Some(placeholder) = kept.offer(item) {
                pieces.push(placeholder);
            }
        } else {
            pieces.push(item_text(item));
        }
    }
    if let Some(structured) = object.get("structuredContent") {
        let repeated = content.iter().any(|item| {
            item.get("type").and_then(Value::as_str) == Some("text")
                && item
                    .get("text")
                    .and_then(Value::as_str)
                    .and_then(|t| serde_json::from_str::<Value>(t).ok())
                    .is_some_and(|v| &v == structured)
        });
        if !repeated {
            pieces.push(canonical(structured));
        }
    }
    let is_error = object.get("isError").and_then(Value::as_bool) == Some(true);
    let images::KeptImages {
        parts: images,
        cut: image_cut,
    } = kept.finish();
    let text = pieces.join("\n");
    let (text, original_bytes) = match image_cut {
        None => cut(text, bounds.text_bytes),
        Some(image_cut) => {
            // The images' line always fits: the text keeps room for it
            // and the newline before it.
            let line = image_cut.marker();
            let room = line.len() + 1;
            let (mut text, original) = cut(text, bounds.text_bytes.saturating_sub(room));
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(&line);
            (text, original)
        }
    };
    Ok(Flattened {
        text,
        original_bytes,
        is_error,
        images,
        image_cut,
    })
}

fn item_text(item: &Value) -> String {
    let field = |name: &str| item.get(name).and_then(Value::as_str);
    match field("type") {
        Some("text") => field("text").unwrap_or_default().to_owned(),
        Some("audio") => format!(
            "[audio: {}, {} bytes]",
            short(field("mimeType").unwrap_or("unknown type")),
            base64_decoded_len(field("data").unwrap_or_default())
        ),
        Some("resource") => resource_text(item.get("resource").unwrap_or(&Value::Null)),
        Some("resource_link") => format!(
            "[resource link: {}, {}]",
            short(field("uri").unwrap_or("no uri")),
            short(field("mimeType").unwrap_or("unknown type"))
        ),
        Some(other) => format!(
            "[content: {}, {} bytes]",
            short(other),
            serde_json::to_string(item).map_or(0, |json| json.len())
        ),
        None => "[content: untyped]".to_owned(),
    }
}

fn resource_text(resource: &Value) -> String {
    let field = |name: &str| resource.get(name).and_then(Value::as_str);
    let bytes = match (field("text"), field("blob")) {
        (Some(text), _) => text.len() as u64,
        (None, Some(blob)) => base64_decoded_len(blob),
        (None, None) => 0,
    };
    format!(
        "[resource: {}, {bytes} bytes, {}]",
        short(field("mimeType").unwrap_or("unknown type")),
        short(field("uri").unwrap_or("no uri"))
    )
}

/// The size base64 text decodes to, without decoding it.
pub(crate) fn base64_decoded_len(data: &str) -> u64 {
    let significant = data.bytes().filter(|b| !b.is_ascii_whitespace()).count() as u64;
    let padding = data.bytes().rev().take_while(|&b| b == b'=').count() as u64;
    (significant / 4 * 3 + (significant % 4).saturating_sub(1)).saturating_sub(padding.min(2))
}

pub(crate) fn short(text: &str) -> String {
    let mut end = text.len().min(PLACEHOLDER_FIELD_MAX_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end]
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

fn canonical(value: &Value) -> String {
    // Canonical where the JSON rules allow it (a number that is not
    // finite is the one case they refuse); serde's form otherwise.
    to_canonical_string(value).unwrap_or_else(|_| value.to_string())
}

/// Cuts `text` to at most `max_bytes`, marker included.
fn cut(text: String, max_bytes: usize) -> (String, Option<u64>) {
    if text.len() <= max_bytes {
        return (text, None);
    }
    let original = text.len();
    // The marker's digits are bounded by the original's, so reserve that.
    let marker_room = format!("\n[output cut: kept {original} of {original} bytes]").len();
    let mut end = max_bytes.saturating_sub(marker_room);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let marker = format!("\n[output cut: kept {end} of {original} bytes]");
    let mut kept = text;
    kept.truncate(end);
    kept.push_str(&marker);
    (kept, Some(original as u64))
}

#[cfg(test)]
mod tests;
