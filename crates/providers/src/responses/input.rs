//! Keel messages as Responses `input` items: system and user messages as
//! `message` items (a user's images as `input_image`, files as
//! `input_file`, both data URLs or the image's https URL); an assistant
//! message as its items in order (`reasoning` items this adapter decoded,
//! `message` items of `output_text`, `function_call`s); a tool message as
//! one `function_call_output` per result (with its images as
//! `input_image` in a list `output`).
//!
//! The round-trip rule for reasoning: a part tagged `openai-responses`
//! whose signature or redacted value is this adapter's packing
//! (`sealed.rs`) goes back in its place as the `reasoning` item it came
//! from: `id`, `summary` and `encrypted_content` as received. Reasoning of
//! another provider, and an own part without its value (a stream cut
//! before the item was done), are dropped without error: the API would
//! refuse a reasoning item it cannot decrypt.

use super::sealed::unpack;
use keel_message::ToolResultPart;
use keel_message::{
    FilePart, ImageData, ImagePart, Message, Part, ProviderTag, ReasoningPart, Role,
};
use serde_json::{Value, json};

/// One Keel message as Responses input items.
pub(super) fn input_items(message: &Message) -> Vec<Value> {
    match message.role() {
        Role::System => vec![json!({"type": "message", "role": "system", "content": [
            {"type": "input_text", "text": message.joined_text()}
        ]})],
        Role::User => vec![user(message)],
        Role::Assistant => assistant(message.parts()),
        Role::Tool => message
            .parts()
            .iter()
            .filter_map(|part| match part {
                Part::ToolResult(result) => Some(tool_output(result)),
                _ => None,
            })
            .collect(),
    }
}

/// A user message: its text, images and files as content parts in order.
fn user(message: &Message) -> Value {
    let content: Vec<Value> = message
        .parts()
        .iter()
        .filter_map(|part| match part {
            Part::Text(text) => Some(json!({"type": "input_text", "text": text.text()})),
            Part::Image(image) => Some(input_image(image)),
            Part::File(file) => Some(input_file(file)),
            _ => None,
        })
        .collect();
    json!({"type": "message", "role": "user", "content": content})
}

/// `data:{media type};base64,{bytes}`.
fn data_url(media_type: &str, base64: &str) -> String {
    format!("data:{media_type};base64,{base64}")
}

fn input_image(image: &ImagePart) -> Value {
    let url = match image.data() {
        ImageData::Bytes(bytes) => data_url(
            image.media_type().map_or("image/png", |m| m.as_str()),
            &bytes.to_base64(),
        ),
        ImageData::Url(url) => url.as_str().to_owned(),
    };
    json!({"type": "input_image", "image_url": url, "detail": "auto"})
}

fn input_file(file: &FilePart) -> Value {
    json!({
        "type": "input_file",
        "filename": file.name().as_str(),
        "file_data": data_url(file.media_type().as_str(), &file.bytes().to_base64()),
    })
}

/// An assistant message's items in part order; consecutive text parts
/// become one `message` item.
fn assistant(parts: &[Part]) -> Vec<Value> {
    let mut items = Vec::new();
    let mut text: Vec<Value> = Vec::new();
    let flush = |text: &mut Vec<Value>, items: &mut Vec<Value>| {
        if !text.is_empty() {
            let content = std::mem::take(text);
            items.push(json!({"type": "message", "role": "assistant", "content": content}));
        }
    };
    for part in parts {
        match part {
            Part::Text(t) => text.push(json!({"type": "output_text", "text": t.text()})),
            Part::Reasoning(reasoning) => {
                if let Some(item) = reasoning_item(reasoning) {
                    flush(&mut text, &mut items);
                    items.push(item);
                }
            }
            Part::ToolCall(call) => {
                flush(&mut text, &mut items);
                items.push(json!({
                    "type": "function_call",
                    "call_id": call.call_id().as_str(),
                    "name": call.name().as_str(),
                    "arguments": call.arguments().as_str(),
                }));
            }
            _ => {}
        }
    }
    flush(&mut text, &mut items);
    items
}

/// A reasoning part as the `reasoning` item it came from, when it can go
/// back (see the module docs).
fn reasoning_item(reasoning: &ReasoningPart) -> Option<Value> {
    if reasoning.provider() != &ProviderTag::openai_responses() {
        return None;
    }
    let value = reasoning.signature().or(reasoning.redacted())?;
    let sealed = unpack(value.as_str(), reasoning.text())?;
    let summary: Vec<Value> = sealed
        .summary
        .iter()
        .map(|text| json!({"type": "summary_text", "text": text}))
        .collect();
    Some(json!({
        "type": "reasoning",
        "id": sealed.id,
        "summary": summary,
        "encrypted_content": sealed.encrypted,
    }))
}

/// A `function_call_output`: its text alone as a string; with images, a
/// list of an `input_text` (when there is text) and `input_image`s.
fn tool_output(result: &ToolResultPart) -> Value {
    let output = if result.images().is_empty() {
        json!(result.content())
    } else {
        let text = (!result.content().is_empty())
            .then(|| json!({"type": "input_text", "text": result.content()}));
        Value::Array(
            text.into_iter()
                .chain(result.images().iter().map(input_image))
                .collect(),
        )
    };
    json!({"type": "function_call_output", "call_id": result.call_id().as_str(), "output": output})
}
