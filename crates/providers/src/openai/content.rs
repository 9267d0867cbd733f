//! Keel messages as Chat Completions messages: a user message's images
//! (`image_url`, a data URL or the https URL) and files (`file` with a
//! data URL) as content parts; an assistant message's own reasoning as
//! `reasoning_content` when the provider is configured to send it; a tool
//! message as one `role: tool` message per result, with a note for the
//! images the format cannot carry there.

use keel_message::{
    FilePart, ImageData, ImagePart, Message, Part, ProviderTag, Role, ToolResultPart,
};
use serde_json::{Map, Value, json};

/// One Keel message as Chat Completions messages (a tool message becomes
/// one `role: tool` message per result).
pub(super) fn messages(message: &Message, send_reasoning: bool) -> Vec<Value> {
    match message.role() {
        Role::System => vec![json!({"role": "system", "content": message.joined_text()})],
        Role::User => vec![json!({"role": "user", "content": user_content(message)})],
        Role::Assistant => vec![assistant(message, send_reasoning)],
        Role::Tool => message
            .parts()
            .iter()
            .filter_map(|part| match part {
                Part::ToolResult(result) => Some(json!({
                    "role": "tool",
                    "tool_call_id": result.call_id().as_str(),
                    "content": tool_content(result),
                })),
                _ => None,
            })
            .collect(),
    }
}

/// A user message's `content`: its text as one string, as before media
/// existed; with an image or a file, the list of its parts in order.
fn user_content(message: &Message) -> Value {
    let has_media = message
        .parts()
        .iter()
        .any(|part| matches!(part, Part::Image(_) | Part::File(_)));
    if !has_media {
        return json!(message.joined_text());
    }
    let parts = message
        .parts()
        .iter()
        .filter_map(|part| match part {
            Part::Text(text) => Some(json!({"type": "text", "text": text.text()})),
            Part::Image(image) => Some(image_url(image)),
            Part::File(file) => Some(file_part(file)),
            _ => None,
        })
        .collect();
    Value::Array(parts)
}

/// `data:{media type};base64,{bytes}`.
fn data_url(media_type: &str, base64: &str) -> String {
    format!("data:{media_type};base64,{base64}")
}

fn image_url(image: &ImagePart) -> Value {
    let url = match image.data() {
        ImageData::Bytes(bytes) => data_url(
            image.media_type().map_or("image/png", |m| m.as_str()),
            &bytes.to_base64(),
        ),
        ImageData::Url(url) => url.as_str().to_owned(),
    };
    json!({"type": "image_url", "image_url": {"url": url}})
}

fn file_part(file: &FilePart) -> Value {
    json!({"type": "file", "file": {
        "filename": file.name().as_str(),
        "file_data": data_url(file.media_type().as_str(), &file.bytes().to_base64()),
    }})
}

/// An assistant message: text (`null` when none), tool calls, and, when
/// `send_reasoning`, the text of the reasoning this adapter decoded as
/// `reasoning_content` (another provider's reasoning, and redacted parts,
/// are never sent).
fn assistant(message: &Message, send_reasoning: bool) -> Value {
    let text = message.joined_text();
    let calls: Vec<Value> = message
        .tool_calls()
        .map(|call| {
            json!({
                "id": call.call_id().as_str(),
                "type": "function",
                "function": {"name": call.name().as_str(), "arguments": call.arguments().as_str()},
            })
        })
        .collect();
    let mut out = Map::new();
    out.insert("role".into(), json!("assistant"));
    out.insert(
        "content".into(),
        if text.is_empty() {
            Value::Null
        } else {
            json!(text)
        },
    );
    if send_reasoning {
        let own = ProviderTag::openai_compatible();
        let reasoning: String = message
            .parts()
            .iter()
            .filter_map(|part| match part {
                Part::Reasoning(r) if r.provider() == &own && !r.is_redacted() => Some(r.text()),
                _ => None,
            })
            .collect();
        if !reasoning.is_empty() {
            out.insert("reasoning_content".into(), json!(reasoning));
        }
    }
    if !calls.is_empty() {
        out.insert("tool_calls".into(), Value::Array(calls));
    }
    Value::Object(out)
}

/// A tool result's `content`: its text, then, when it holds images, a
/// note saying what was left out (count, media types, sizes; never the
/// bytes): a `role: tool` message carries text only.
fn tool_content(result: &ToolResultPart) -> String {
    let images = result.images();
    if images.is_empty() {
        return result.content().to_owned();
    }
    let note = omitted_images_note(images);
    if result.content().is_empty() {
        note
    } else {
        format!("{}\n\n{note}", result.content())
    }
}

/// `[2 images omitted: image/png, 1234 bytes; image/jpeg by URL. This
/// chat format cannot carry images in a tool result.]`
fn omitted_images_note(images: &[ImagePart]) -> String {
    let described: Vec<String> = images
        .iter()
        .map(|image| {
            let media_type = image.media_type().map_or("image", |m| m.as_str());
            match image.data() {
                ImageData::Bytes(bytes) => format!("{media_type}, {} bytes", bytes.len()),
                ImageData::Url(_) => format!("{media_type} by URL"),
            }
        })
        .collect();
    let count = match images.len() {
        1 => "1 image".to_owned(),
        n => format!("{n} images"),
    };
    format!(
        "[{count} omitted: {}. This chat format cannot carry images in a tool result.]",
        described.join("; ")
    )
}
