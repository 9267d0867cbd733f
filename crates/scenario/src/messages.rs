//! The `messages` member of a scenario file: each message is
//! `{"role", "text"}` (one text part, the original form) or
//! `{"role", "parts": [...]}`, the general form (KEEL.md, "Contracts for
//! the third round"). A part is an object with exactly one member:
//!
//! | part | shape | roles |
//! | --- | --- | --- |
//! | text | `{"text": "…"}` | all |
//! | inline image | `{"image": {"media_type": "image/png", "base64": "…"}}` | user |
//! | image by URL | `{"image": {"url": "https://…", "media_type"?: "image/png"}}` | user |
//! | file | `{"file": {"media_type": "application/pdf", "name": "a.pdf", "base64": "…"}}` | user |
//! | reasoning | `{"reasoning": {"provider": "anthropic", "text"?: "…", "signature"?: "…"}}` | assistant |
//! | redacted reasoning | `{"redacted_reasoning": {"provider": "anthropic", "data": "…"}}` | assistant |
//!
//! A reasoning part's `text` may be left out (an empty summary) when it
//! carries a `signature`. `base64` is the standard alphabet, padded and
//! canonical. Every rule is `keel-message`'s (media type allowlists,
//! signatures of the bytes, names, bounds, the parts each role admits),
//! called, not restated; a refusal names the member it came from, e.g.
//! `messages[0].parts[1].image.base64`, and the rule, and never echoes
//! what was written there.

use keel_message::{
    Bound, FileMediaType, FileName, FilePart, HttpsUrl, ImageMediaType, ImagePart, Limits,
    MediaBytes, Message, MessageError, MessageId, OpaqueValue, Part, ProviderTag, Role,
};
use serde::Deserialize;

/// One message as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct MessageWire {
    role: Role,
    text: Option<String>,
    parts: Option<Vec<PartWire>>,
}

/// One part as written: exactly one member is set.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PartWire {
    text: Option<String>,
    image: Option<ImageWire>,
    file: Option<FileWire>,
    reasoning: Option<ReasoningWire>,
    redacted_reasoning: Option<RedactedWire>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ImageWire {
    media_type: Option<String>,
    base64: Option<String>,
    url: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileWire {
    media_type: String,
    name: String,
    base64: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReasoningWire {
    provider: String,
    #[serde(default)]
    text: String,
    signature: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RedactedWire {
    provider: String,
    data: String,
}

/// A message or part that breaks a rule: where (the scenario's JSON path,
/// `messages[i]…`) and what (the rule, never the value).
#[derive(Debug)]
pub(crate) struct MessageRuleError {
    /// The JSON path of the offending member.
    pub(crate) path: String,
    /// The rule or bound broken.
    pub(crate) message: String,
}

fn refuse(path: String, message: impl Into<String>) -> MessageRuleError {
    MessageRuleError {
        path,
        message: message.into(),
    }
}

/// `e`'s rule at `path` (the member it came from).
fn at(path: String) -> impl FnOnce(MessageError) -> MessageRuleError {
    move |e| refuse(path, e.kind().to_string())
}

/// Builds message `i` (id `m{i+1}`) under `limits`.
pub(crate) fn check_message(
    i: usize,
    wire: &MessageWire,
    limits: &Limits,
) -> Result<Message, MessageRuleError> {
    let path = format!("messages[{i}]");
    let id = MessageId::parse(&format!("m{}", i + 1))
        .map_err(|e| refuse(path.clone(), e.to_string()))?;
    match (&wire.text, &wire.parts) {
        // The original form, refused exactly as before.
        (Some(text), None) => Message::text(id, wire.role, text).map_err(at(path)),
        (None, Some(parts)) => {
            let parts = parts
                .iter()
                .enumerate()
                .map(|(j, p)| check_part(&format!("{path}.parts[{j}]"), p, limits))
                .collect::<Result<Vec<_>, _>>()?;
            Message::new_with(id, wire.role, parts, limits).map_err(|e| {
                // The message's own path is `$` or `$.parts[j]…`.
                let within = e.path().strip_prefix('$').unwrap_or_default();
                refuse(format!("{path}{within}"), e.kind().to_string())
            })
        }
        (Some(_), Some(_)) => Err(refuse(
            path,
            "a message has `text` or `parts`, not both (rule scenario.message_form)",
        )),
        (None, None) => Err(refuse(
            path,
            "a message needs `text` or `parts` (rule scenario.message_form)",
        )),
    }
}

/// The one part `p` describes; `path` is `messages[i].parts[j]`.
fn check_part(path: &str, p: &PartWire, limits: &Limits) -> Result<Part, MessageRuleError> {
    let set = [
        p.text.is_some(),
        p.image.is_some(),
        p.file.is_some(),
        p.reasoning.is_some(),
        p.redacted_reasoning.is_some(),
    ];
    if set.iter().filter(|s| **s).count() != 1 {
        return Err(refuse(
            path.to_owned(),
            "a part has exactly one of text, image, file, reasoning, redacted_reasoning (rule scenario.part_form)",
        ));
    }
    if let Some(text) = &p.text {
        return Part::text_with(text, limits).map_err(at(format!("{path}.text")));
    }
    if let Some(image) = &p.image {
        return check_image(&format!("{path}.image"), image, limits).map(Part::image);
    }
    if let Some(file) = &p.file {
        return check_file(&format!("{path}.file"), file, limits);
    }
    if let Some(reasoning) = &p.reasoning {
        return check_reasoning(&format!("{path}.reasoning"), reasoning, limits);
    }
    match &p.redacted_reasoning {
        Some(redacted) => check_redacted(&format!("{path}.redacted_reasoning"), redacted, limits),
        None => Err(refuse(path.to_owned(), "a part with no member")),
    }
}

fn check_image(path: &str, w: &ImageWire, limits: &Limits) -> Result<ImagePart, MessageRuleError> {
    let member = |m: &str| format!("{path}.{m}");
    let media_type = match &w.media_type {
        None => None,
        Some(t) => Some(ImageMediaType::parse(t).map_err(at(member("media_type")))?),
    };
    match (&w.base64, &w.url) {
        (Some(base64), None) => {
            let Some(media_type) = media_type else {
                return Err(refuse(
                    member("media_type"),
                    "inline image bytes need a media_type (rule message.image_media_type)",
                ));
            };
            ImagePart::from_base64_with(media_type, base64, limits).map_err(at(member("base64")))
        }
        (None, Some(url)) => {
            let url = HttpsUrl::parse(url).map_err(at(member("url")))?;
            Ok(ImagePart::from_url(url, media_type))
        }
        _ => Err(refuse(
            path.to_owned(),
            "an image has `base64` or `url`, exactly one (rule scenario.image_source)",
        )),
    }
}

fn check_file(path: &str, w: &FileWire, limits: &Limits) -> Result<Part, MessageRuleError> {
    let member = |m: &str| format!("{path}.{m}");
    let media_type = FileMediaType::parse(&w.media_type).map_err(at(member("media_type")))?;
    let name = FileName::parse(&w.name).map_err(at(member("name")))?;
    let file = MediaBytes::from_base64(&w.base64, Bound::FileBytes, limits)
        .and_then(|bytes| FilePart::from_media_bytes_with(media_type, name, bytes, limits))
        .map_err(at(member("base64")))?;
    Ok(Part::File(file))
}

fn check_reasoning(
    path: &str,
    w: &ReasoningWire,
    limits: &Limits,
) -> Result<Part, MessageRuleError> {
    let member = |m: &str| format!("{path}.{m}");
    let provider = ProviderTag::parse(&w.provider).map_err(at(member("provider")))?;
    let signature = match &w.signature {
        None => None,
        Some(s) => Some(OpaqueValue::new_with(s, limits).map_err(at(member("signature")))?),
    };
    Part::reasoning_with(provider, &w.text, signature, limits).map_err(at(member("text")))
}

fn check_redacted(path: &str, w: &RedactedWire, limits: &Limits) -> Result<Part, MessageRuleError> {
    let member = |m: &str| format!("{path}.{m}");
    let provider = ProviderTag::parse(&w.provider).map_err(at(member("provider")))?;
    let data = OpaqueValue::new_with(&w.data, limits).map_err(at(member("data")))?;
    Ok(Part::redacted_reasoning(provider, data))
}
