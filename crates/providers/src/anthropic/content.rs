//! Keel parts as Messages API content blocks: text, `tool_use`,
//! `tool_result` (with its images inside `content`), `image` and
//! `document` blocks, and reasoning sent back as `thinking` /
//! `redacted_thinking` blocks.
//!
//! The round-trip rule for reasoning: a part this adapter decoded (tagged
//! `anthropic`) goes back in its place, its text, signature or redacted
//! value byte for byte, as the API requires for the thinking of a turn
//! that called tools. Reasoning tagged by another provider is dropped
//! without error (its signature, if any, would not verify here), and so
//! is an `anthropic` part without a signature (a stream cut before its
//! `signature_delta`), which the API would refuse.

use keel_message::{
    FileMediaType, FilePart, ImageData, ImagePart, Part, ProviderTag, ReasoningPart, ToolResultPart,
};
use serde_json::{Map, Value, json};

/// The content blocks of `parts`, in order; reasoning that cannot be sent
/// back is left out.
pub(super) fn content_blocks(parts: &[Part]) -> Vec<Value> {
    parts.iter().filter_map(block).collect()
}

fn block(part: &Part) -> Option<Value> {
    Some(match part {
        Part::Text(text) => json!({"type": "text", "text": text.text()}),
        Part::ToolCall(call) => json!({
            "type": "tool_use",
            "id": call.call_id().as_str(),
            "name": call.name().as_str(),
            "input": call.arguments().to_value(),
        }),
        Part::ToolResult(result) => tool_result(result),
        Part::Image(image) => image_block(image),
        Part::File(file) => document(file),
        Part::Reasoning(reasoning) => return thinking(reasoning),
    })
}

/// A `tool_result`: its text alone as a string, as before images existed;
/// with images, a list of a text block (when there is text; the API
/// refuses empty text blocks) and the image blocks.
fn tool_result(result: &ToolResultPart) -> Value {
    let mut block = Map::new();
    block.insert("type".into(), json!("tool_result"));
    block.insert("tool_use_id".into(), json!(result.call_id().as_str()));
    let content = if result.images().is_empty() {
        json!(result.content())
    } else {
        let text = (!result.content().is_empty())
            .then(|| json!({"type": "text", "text": result.content()}));
        Value::Array(
            text.into_iter()
                .chain(result.images().iter().map(image_block))
                .collect(),
        )
    };
    block.insert("content".into(), content);
    if result.is_error() {
        block.insert("is_error".into(), json!(true));
    }
    Value::Object(block)
}

/// An `image` block: a `base64` source with its media type, or a `url`
/// source.
fn image_block(image: &ImagePart) -> Value {
    let source = match image.data() {
        ImageData::Bytes(bytes) => json!({
            "type": "base64",
            "media_type": image.media_type().map(|m| m.as_str()),
            "data": bytes.to_base64(),
        }),
        ImageData::Url(url) => json!({"type": "url", "url": url.as_str()}),
    };
    json!({"type": "image", "source": source})
}

/// A `document` block titled with the file name: a PDF as a `base64`
/// source; a text file (plain, Markdown, CSV, JSON) as a `text` source,
/// whose only media type the API takes is `text/plain`.
fn document(file: &FilePart) -> Value {
    let source = match file.media_type() {
        FileMediaType::Pdf => json!({
            "type": "base64",
            "media_type": file.media_type().as_str(),
            "data": file.bytes().to_base64(),
        }),
        _ => json!({
            "type": "text",
            "media_type": "text/plain",
            // UTF-8 by the part's invariant (rule message.file_signature).
            "data": String::from_utf8_lossy(file.bytes().as_bytes()),
        }),
    };
    json!({"type": "document", "source": source, "title": file.name().as_str()})
}

/// A reasoning part as the block it came from, when it can go back (see
/// the module docs).
fn thinking(reasoning: &ReasoningPart) -> Option<Value> {
    if reasoning.provider() != &ProviderTag::anthropic() {
        return None;
    }
    if let Some(data) = reasoning.redacted() {
        return Some(json!({"type": "redacted_thinking", "data": data.as_str()}));
    }
    let signature = reasoning.signature()?;
    Some(json!({
        "type": "thinking",
        "thinking": reasoning.text(),
        "signature": signature.as_str(),
    }))
}
