//! The new input at the end of a `RunAgentInput`'s `messages`: a user
//! message (its content parts as Keel parts) or trailing tool messages
//! (frontend tool results), with the `resume` entries.

use super::members::{check_client_id, optional_string};
use super::{
    ClientToolResult, ContextEntry, InputError, InputLimits, MediaPaths, NewInput, ResumeAnswer,
    media_part, member,
};
use crate::user_media::MediaSource;
use keel_message::{Bound, CallId, Limits, Part};
use serde_json::{Map, Value};

/// The roles of `@ag-ui/core` 1.0's messages.
const ROLES: [&str; 7] = [
    "developer",
    "system",
    "assistant",
    "user",
    "tool",
    "activity",
    "reasoning",
];

const MESSAGES_RULE: &str = "agui.input.messages";
const CONTENT_RULE: &str = "agui.input.user_content";

/// A checked message: its role and members.
struct Posted<'a> {
    role: &'a str,
    members: &'a Map<String, Value>,
}

/// What the end of `messages` (with `resume`) asks for.
pub(super) fn new_input(
    root: &Map<String, Value>,
    context: &[ContextEntry],
    resume: Vec<ResumeAnswer>,
    limits: &InputLimits,
) -> Result<NewInput, InputError> {
    let messages = posted(root, limits)?;
    let last = messages.len().checked_sub(1);
    if let Some(i) = last.filter(|&i| messages[i].role == "user") {
        if !resume.is_empty() {
            return Err(InputError::new(
                "resume",
                "agui.input.one_input",
                "no resume entries with a new user message: resume answers the live run, a user message starts the next",
            ));
        }
        let parts = user_parts(i, messages[i].members, context, &limits.message)?;
        return Ok(NewInput::User { parts });
    }
    let first_tool = messages
        .iter()
        .rposition(|m| m.role != "tool")
        .map_or(0, |i| i + 1);
    let tool_results = tool_results(&messages, first_tool, &limits.message)?;
    if tool_results.is_empty() && resume.is_empty() {
        let at = last.map_or("messages".to_owned(), |i| format!("messages[{i}].role"));
        return Err(InputError::new(
            at,
            "agui.input.new_input",
            "a new input: a last user message, tool messages after the last assistant message, or resume entries",
        ));
    }
    Ok(NewInput::Answers {
        tool_results,
        resume,
    })
}

/// `messages`: each an object with a string `id` and a known `role`.
fn posted<'a>(
    root: &'a Map<String, Value>,
    limits: &InputLimits,
) -> Result<Vec<Posted<'a>>, InputError> {
    let items = match root.get("messages") {
        Some(Value::Array(items)) => items,
        _ => {
            return Err(InputError::new(
                "messages",
                MESSAGES_RULE,
                "an array (required)",
            ));
        }
    };
    if items.len() > limits.max_messages {
        return Err(InputError::new(
            "messages",
            MESSAGES_RULE,
            format!(
                "at most {} messages, not {}",
                limits.max_messages,
                items.len()
            ),
        ));
    }
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let Value::Object(members) = item else {
            return Err(InputError::new(
                format!("messages[{i}]"),
                MESSAGES_RULE,
                "an object",
            ));
        };
        let Some(Value::String(id)) = members.get("id") else {
            return Err(InputError::new(
                format!("messages[{i}].id"),
                MESSAGES_RULE,
                "a string",
            ));
        };
        check_client_id(id, limits.max_id_bytes).map_err(|detail| {
            InputError::new(format!("messages[{i}].id"), "agui.input.client_id", detail)
        })?;
        let role = match members.get("role") {
            Some(Value::String(role)) if ROLES.contains(&role.as_str()) => role.as_str(),
            _ => {
                return Err(InputError::new(
                    format!("messages[{i}].role"),
                    MESSAGES_RULE,
                    "developer, system, assistant, user, tool, activity or reasoning",
                ));
            }
        };
        out.push(Posted { role, members });
    }
    Ok(out)
}

/// The tool messages `messages[first..]` as results, each call once.
fn tool_results(
    messages: &[Posted<'_>],
    first: usize,
    limits: &Limits,
) -> Result<Vec<ClientToolResult>, InputError> {
    let mut results: Vec<ClientToolResult> = Vec::new();
    for (index, m) in messages.iter().enumerate().skip(first) {
        let at = format!("messages[{index}]");
        let call_id = match m.members.get("toolCallId") {
            Some(Value::String(id)) => CallId::parse(id).map_err(|e| {
                InputError::new(
                    format!("{at}.toolCallId"),
                    e.rule(),
                    "a call id (a tool call this endpoint sent)",
                )
            })?,
            _ => {
                return Err(InputError::new(
                    format!("{at}.toolCallId"),
                    MESSAGES_RULE,
                    "a string",
                ));
            }
        };
        if let Some(earlier) = results.iter().find(|r| r.call_id == call_id) {
            return Err(InputError::new(
                format!("{at}.toolCallId"),
                "agui.input.tool_result_unique",
                format!(
                    "a call no earlier message answers (messages[{}] does)",
                    earlier.index
                ),
            ));
        }
        let error = optional_string(m.members, "error", &format!("{at}."), MESSAGES_RULE)?;
        let content = tool_content(m.members, &at)?;
        let text = error.unwrap_or(&content);
        Bound::PartBytes
            .check(limits, text.len())
            .map_err(|e| InputError::new(format!("{at}.content"), e.bound.rule(), e.to_string()))?;
        results.push(ClientToolResult {
            call_id,
            content: text.to_owned(),
            error: error.is_some(),
            index,
        });
    }
    Ok(results)
}

/// A tool message's content as text: a string, or text parts joined.
fn tool_content(m: &Map<String, Value>, at: &str) -> Result<String, InputError> {
    match m.get("content") {
        Some(Value::String(text)) => Ok(text.clone()),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for (j, p) in parts.iter().enumerate() {
                match (p.get("type").and_then(Value::as_str), p.get("text")) {
                    (Some("text"), Some(Value::String(t))) => text.push_str(t),
                    _ => {
                        return Err(InputError::new(
                            format!("{at}.content[{j}]"),
                            "agui.input.tool_content",
                            "a text part {type: text, text}: a frontend tool's result is text",
                        ));
                    }
                }
            }
            Ok(text)
        }
        _ => Err(InputError::new(
            format!("{at}.content"),
            MESSAGES_RULE,
            "a string or content parts",
        )),
    }
}

/// The parts of user message `i`: the context part, media, then text.
fn user_parts(
    i: usize,
    message: &Map<String, Value>,
    context: &[ContextEntry],
    limits: &Limits,
) -> Result<Vec<Part>, InputError> {
    let at = format!("messages[{i}].content");
    let (media, texts) = match message.get("content") {
        Some(Value::String(text)) => (
            Vec::new(),
            text_part(text, &at, limits)?.into_iter().collect(),
        ),
        Some(Value::Array(parts)) => content_parts(parts, &at, limits)?,
        _ => {
            return Err(InputError::new(
                at,
                CONTENT_RULE,
                "a string or content parts",
            ));
        }
    };
    if media.is_empty() && texts.is_empty() {
        return Err(InputError::new(
            at,
            CONTENT_RULE,
            "at least one non-empty text part or one image or document part",
        ));
    }
    let mut parts = Vec::with_capacity(1 + media.len() + texts.len());
    parts.extend(context_part(context, limits)?);
    parts.extend(media);
    parts.extend(texts);
    // Again with the context part the message gains.
    parts_bound(parts.len(), &at, limits)?;
    Ok(parts)
}

/// At most `limits.parts_per_message` parts, refused at `at`.
fn parts_bound(count: usize, at: &str, limits: &Limits) -> Result<(), InputError> {
    Bound::PartsPerMessage
        .check(limits, count)
        .map_err(|e| InputError::new(at, e.bound.rule(), e.to_string()))
}

/// A text part of `text` unless it is empty.
fn text_part(text: &str, at: &str, limits: &Limits) -> Result<Option<Part>, InputError> {
    if text.is_empty() {
        return Ok(None);
    }
    Part::text_with(text, limits)
        .map(Some)
        .map_err(|e| InputError::new(at, e.kind().rule(), e.kind().to_string()))
}

/// The context as one text part: `Context:\n- {description}: {value}\n`….
fn context_part(context: &[ContextEntry], limits: &Limits) -> Result<Option<Part>, InputError> {
    if context.is_empty() {
        return Ok(None);
    }
    let mut text = String::from("Context:\n");
    for entry in context {
        text.push_str(&format!("- {}: {}\n", entry.description, entry.value));
    }
    text_part(&text, "context", limits)
}

/// A user message's content parts: its media parts and its text parts.
fn content_parts(
    parts: &[Value],
    at: &str,
    limits: &Limits,
) -> Result<(Vec<Part>, Vec<Part>), InputError> {
    parts_bound(parts.len(), at, limits)?;
    let (mut media, mut texts) = (Vec::new(), Vec::new());
    for (j, p) in parts.iter().enumerate() {
        let at = format!("{at}[{j}]");
        let Value::Object(p) = p else {
            return Err(InputError::new(at, CONTENT_RULE, "a content part object"));
        };
        if p.get("type").and_then(Value::as_str) == Some("text") {
            let Some(Value::String(text)) = p.get("text") else {
                return Err(InputError::new(
                    format!("{at}.text"),
                    CONTENT_RULE,
                    "a string",
                ));
            };
            texts.extend(text_part(text, &format!("{at}.text"), limits)?);
            continue;
        }
        if media.len() == limits.media_parts_per_message {
            let bound = Bound::MediaPartsPerMessage;
            let detail = format!("at most {} image and document parts", bound.max(limits));
            return Err(InputError::new(at, bound.rule(), detail));
        }
        media.push(media_content(p, &at, limits)?);
    }
    Ok((media, texts))
}

/// An `image`, `document` or legacy `binary` part at `at` as a Keel part.
fn media_content(p: &Map<String, Value>, at: &str, limits: &Limits) -> Result<Part, InputError> {
    match p.get("type").and_then(Value::as_str) {
        Some(kind @ ("image" | "document")) => sourced(p, kind, at, limits),
        Some("binary") => binary(p, at, limits),
        _ => Err(InputError::new(
            format!("{at}.type"),
            "agui.input.part_type",
            "text, image, document or binary (audio and video are not taken)",
        )),
    }
}

/// An `image` or `document` part (`kind`): its `source` and, for a
/// document, `metadata.filename`.
fn sourced(
    p: &Map<String, Value>,
    kind: &str,
    at: &str,
    limits: &Limits,
) -> Result<Part, InputError> {
    let Some(Value::Object(source)) = p.get("source") else {
        return Err(InputError::new(
            format!("{at}.source"),
            CONTENT_RULE,
            "a source object",
        ));
    };
    let paths = MediaPaths {
        media_type: format!("{at}.source.mimeType"),
        source: format!("{at}.source.value"),
        file_name: format!("{at}.metadata.filename"),
    };
    let Some(Value::String(value)) = source.get("value") else {
        return Err(InputError::new(paths.source, CONTENT_RULE, "a string"));
    };
    let Some(Value::String(media_type)) = member(source, "mimeType") else {
        return Err(InputError::new(
            paths.media_type,
            CONTENT_RULE,
            "a string: the media type",
        ));
    };
    if media_type.starts_with("image/") != (kind == "image") {
        return Err(InputError::new(
            paths.media_type,
            "agui.input.part_media_type",
            "an image type in an image part, a document type in a document part",
        ));
    }
    let from = match source.get("type").and_then(Value::as_str) {
        Some("data") => MediaSource::Base64(value),
        Some("url") => MediaSource::Url(value),
        _ => {
            return Err(InputError::new(
                format!("{at}.source.type"),
                "agui.input.source_type",
                "data or url (a provider's file handle is not taken)",
            ));
        }
    };
    let file_name = match member(p, "metadata") {
        Some(Value::Object(metadata)) => optional_string(
            metadata,
            "filename",
            &format!("{at}.metadata."),
            CONTENT_RULE,
        )?,
        _ => None,
    };
    media_part(&paths, media_type, from, file_name, limits)
}

/// A legacy `binary` part: `mimeType` with `data` (base64) or `url`, and
/// `filename`.
fn binary(p: &Map<String, Value>, at: &str, limits: &Limits) -> Result<Part, InputError> {
    let Some(Value::String(media_type)) = p.get("mimeType") else {
        return Err(InputError::new(
            format!("{at}.mimeType"),
            CONTENT_RULE,
            "a string: the media type",
        ));
    };
    let data = optional_string(p, "data", &format!("{at}."), CONTENT_RULE)?;
    let url = optional_string(p, "url", &format!("{at}."), CONTENT_RULE)?;
    let (from, source) = match (data, url) {
        (Some(data), _) => (MediaSource::Base64(data), "data"),
        (None, Some(url)) => (MediaSource::Url(url), "url"),
        (None, None) => {
            return Err(InputError::new(
                format!("{at}.data"),
                CONTENT_RULE,
                "a string: a binary part carries data or a url",
            ));
        }
    };
    let paths = MediaPaths {
        media_type: format!("{at}.mimeType"),
        source: format!("{at}.{source}"),
        file_name: format!("{at}.filename"),
    };
    let file_name = optional_string(p, "filename", &format!("{at}."), CONTENT_RULE)?;
    media_part(&paths, media_type, from, file_name, limits)
}
