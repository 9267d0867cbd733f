//! Keel messages as Gemini `contents` parts: text, `inlineData` (images,
//! PDFs and text files as base64 with their MIME type), `fileData`
//! (images by URL), `functionCall` and `functionResponse`, and this
//! adapter's own reasoning sent back with its `thoughtSignature` on the
//! part it came with.
//!
//! Where a signature goes back (the inverse of the decoder's mapping):
//!
//! - a reasoning part with text (a `thought: true` part) goes back as
//!   `{"text", "thought": true}`, with `thoughtSignature` when the thought
//!   part carried one;
//! - a redacted part holds a signature that came on a non-thought part:
//!   it goes back on the first `functionCall` among the parts after it (up
//!   to the next reasoning part), else on the first text part there (the
//!   draft keeps a segment's text before its calls, so a call is looked
//!   for first), else on an empty text part in its place, the shape of a
//!   signature streamed alone (`{"text": "", "thoughtSignature"}`).
//!
//! Reasoning another provider produced is dropped without error.

use keel_message::{
    CallId, FilePart, ImageData, ImagePart, Message, OpaqueValue, Part, ProviderTag, Role,
    ToolName, ToolResultPart,
};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// The tool name of every call in a history, by call id: a
/// `functionResponse` names its function.
pub(super) type CallNames<'a> = BTreeMap<&'a CallId, &'a ToolName>;

/// The call names of `history`.
pub(super) fn call_names(history: &[Message]) -> CallNames<'_> {
    history
        .iter()
        .flat_map(|m| m.tool_calls())
        .map(|call| (call.call_id(), call.name()))
        .collect()
}

/// One Keel message (not a system one) as a Gemini content's role and
/// parts.
pub(super) fn content_parts(message: &Message, names: &CallNames<'_>) -> Vec<Value> {
    match message.role() {
        Role::Assistant => model_parts(message.parts()),
        Role::Tool => tool_parts(message.parts(), names),
        Role::User | Role::System => message.parts().iter().filter_map(user_part).collect(),
    }
}

fn user_part(part: &Part) -> Option<Value> {
    Some(match part {
        Part::Text(text) => json!({"text": text.text()}),
        Part::Image(image) => image_part(image),
        Part::File(file) => file_part(file),
        Part::ToolCall(_) | Part::ToolResult(_) | Part::Reasoning(_) => return None,
    })
}

/// An image: `inlineData` with its bytes, or `fileData` with its URL.
fn image_part(image: &ImagePart) -> Value {
    let mime = image.media_type().map(|m| m.as_str());
    match image.data() {
        ImageData::Bytes(bytes) => json!({"inlineData": {
            "mimeType": mime.unwrap_or("image/png"),
            "data": bytes.to_base64(),
        }}),
        ImageData::Url(url) => {
            let mut data = Map::new();
            if let Some(mime) = mime {
                data.insert("mimeType".into(), json!(mime));
            }
            data.insert("fileUri".into(), json!(url.as_str()));
            json!({ "fileData": data })
        }
    }
}

/// A file (PDF, plain text, Markdown, CSV, JSON): `inlineData` with its
/// MIME type. The API takes no file name.
fn file_part(file: &FilePart) -> Value {
    json!({"inlineData": {
        "mimeType": file.media_type().as_str(),
        "data": file.bytes().to_base64(),
    }})
}

/// A tool message: one `functionResponse` per result, in order, then the
/// results' images as `inlineData` parts (a `functionResponse` carries a
/// JSON object only).
fn tool_parts(parts: &[Part], names: &CallNames<'_>) -> Vec<Value> {
    let results: Vec<&ToolResultPart> = parts
        .iter()
        .filter_map(|part| match part {
            Part::ToolResult(result) => Some(result),
            _ => None,
        })
        .collect();
    let responses = results
        .iter()
        .map(|result| function_response(result, names));
    let images = results
        .iter()
        .flat_map(|result| result.images())
        .map(image_part);
    responses.chain(images).collect()
}

/// `{"functionResponse": {"id", "name", "response": {"output" | "error":
/// content}}}`: the keys the API documents for a result and an error.
fn function_response(result: &ToolResultPart, names: &CallNames<'_>) -> Value {
    let key = if result.is_error() { "error" } else { "output" };
    // A request's results all have their call (rule
    // call_id.orphan_result), so the name is always found.
    let name = names.get(result.call_id()).map_or("", |name| name.as_str());
    json!({"functionResponse": {
        "id": result.call_id().as_str(),
        "name": name,
        "response": { key: result.content() },
    }})
}

/// An assistant message: text, `functionCall`s and this adapter's
/// reasoning, each signature where it came (see the module docs).
fn model_parts(parts: &[Part]) -> Vec<Value> {
    let own = ProviderTag::gemini();
    let mut carried: BTreeMap<usize, &OpaqueValue> = BTreeMap::new();
    let mut out = Vec::new();
    for (index, part) in parts.iter().enumerate() {
        let mut value = match part {
            Part::Reasoning(r) if r.provider() != &own => continue,
            Part::Reasoning(r) => match r.redacted() {
                Some(signature) => {
                    match carrier(parts, index) {
                        Some(target) => {
                            carried.insert(target, signature);
                        }
                        None => {
                            out.push(json!({"text": "", "thoughtSignature": signature.as_str()}))
                        }
                    }
                    continue;
                }
                None => {
                    let mut thought = json!({"text": r.text(), "thought": true});
                    if let Some(signature) = r.signature() {
                        thought["thoughtSignature"] = json!(signature.as_str());
                    }
                    thought
                }
            },
            Part::Text(text) => json!({"text": text.text()}),
            Part::ToolCall(call) => json!({"functionCall": {
                "id": call.call_id().as_str(),
                "name": call.name().as_str(),
                "args": call.arguments().to_value(),
            }}),
            Part::Image(image) => image_part(image),
            Part::File(file) => file_part(file),
            Part::ToolResult(_) => continue,
        };
        if let Some(signature) = carried.remove(&index) {
            value["thoughtSignature"] = json!(signature.as_str());
        }
        out.push(value);
    }
    out
}

/// The index of the part that carries the signature of the redacted part
/// at `at`: the first call after it, else the first text, among the parts
/// before the next reasoning part.
fn carrier(parts: &[Part], at: usize) -> Option<usize> {
    let segment: Vec<(usize, &Part)> = parts
        .iter()
        .enumerate()
        .skip(at + 1)
        .take_while(|(_, part)| !matches!(part, Part::Reasoning(_)))
        .collect();
    let first = |wanted: fn(&Part) -> bool| {
        segment
            .iter()
            .find(|(_, part)| wanted(part))
            .map(|(index, _)| *index)
    };
    first(|p| matches!(p, Part::ToolCall(_))).or_else(|| first(|p| matches!(p, Part::Text(_))))
}
