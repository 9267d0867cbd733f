//! From a `tools/call` result to the text the model reads, by stated rules:
//!
//! | content | becomes |
//! | --- | --- |
//! | `text` | its text |
//! | `image`, `audio` | `[image: image/png, 1234 bytes]` (decoded size) |
//! | `resource` (embedded) | `[resource: text/plain, 120 bytes, file:///a.txt]` |
//! | `resource_link` | `[resource link: file:///a.txt, text/plain]` |
//! | anything else | `[content: <type>]` |
//! | `structuredContent` | its canonical JSON, unless a text item already holds the same JSON |
//!
//! Items are joined with a newline. A text over the bound is cut at a
//! character boundary and ends with `[output cut: kept K of N bytes]`,
//! so the model sees the cut; the cut is also returned for the log.
//! Names and URIs in placeholders are cut to 256 bytes each.

use keel_message::canonical::to_canonical_string;
use serde_json::Value;

/// The longest mime type or URI a placeholder repeats.
const PLACEHOLDER_FIELD_MAX_BYTES: usize = 256;

/// A flattened result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flattened {
    text: String,
    original_bytes: Option<u64>,
    is_error: bool,
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

/// Flattens `result` (a `CallToolResult` as JSON), cut to `max_bytes`.
pub fn flatten(result: &Value, max_bytes: usize) -> Result<Flattened, FlattenError> {
    let object = result.as_object().ok_or(FlattenError::Shape)?;
    let content = match object.get("content") {
        None | Some(Value::Null) => &[][..],
        Some(Value::Array(items)) => items.as_slice(),
        Some(_) => return Err(FlattenError::Shape),
    };
    let mut pieces: Vec<String> = content.iter().map(item_text).collect();
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
    let (text, original_bytes) = cut(pieces.join("\n"), max_bytes);
    Ok(Flattened {
        text,
        original_bytes,
        is_error,
    })
}

fn item_text(item: &Value) -> String {
    let field = |name: &str| item.get(name).and_then(Value::as_str);
    match field("type") {
        Some("text") => field("text").unwrap_or_default().to_owned(),
        Some(kind @ ("image" | "audio")) => format!(
            "[{kind}: {}, {} bytes]",
            short(field("mimeType").unwrap_or("unknown type")),
            base64_decoded_len(field("data").unwrap_or_default())
        ),
        Some("resource") => resource_text(item.get("resource").unwrap_or(&Value::Null)),
        Some("resource_link") => format!(
            "[resource link: {}, {}]",
            short(field("uri").unwrap_or("no uri")),
            short(field("mimeType").unwrap_or("unknown type"))
        ),
        Some(other) => format!("[content: {}]", short(other)),
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
fn base64_decoded_len(data: &str) -> u64 {
    let significant = data.bytes().filter(|b| !b.is_ascii_whitespace()).count() as u64;
    let padding = data.bytes().rev().take_while(|&b| b == b'=').count() as u64;
    (significant / 4 * 3 + (significant % 4).saturating_sub(1)).saturating_sub(padding.min(2))
}

fn short(text: &str) -> String {
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
