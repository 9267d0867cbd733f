//! Keel messages as AG-UI messages (the members of a `MESSAGES_SNAPSHOT`),
//! typed and tagged by `role`. Encoded like the events (`super::event`):
//! camelCase members, optional ones left out, members in sorted order.

use super::Content;
use crate::media;
use keel_message::{ImagePart, Message, Part, Role};
use serde::Serialize;
use serde_json::{Value, json};

/// One AG-UI message, by role.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(
    tag = "role",
    rename_all = "lowercase",
    rename_all_fields = "camelCase"
)]
#[allow(missing_docs)] // the members are AG-UI's, named as AG-UI names them
pub enum AguiMessage {
    /// Instructions from the host: the message's text.
    System { id: String, content: String },
    /// The user's message: its text, or its parts in order when it holds
    /// images or files.
    User { id: String, content: Content },
    /// One reasoning part of the model's message (`id` is
    /// `<message id>.reasoning.<n>`, from 1), before the message; its
    /// `encryptedValue` is the part's signature or redacted value.
    Reasoning {
        id: String,
        content: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        encrypted_value: Option<String>,
    },
    /// The model's message: its text (left out when it has none) and its
    /// tool calls (left out when it made none).
    Assistant {
        id: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        content: Option<String>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<AguiToolCall>,
    },
    /// One tool result (`id` is `<message id>.<call id>`); `error` repeats
    /// the content of a failed call.
    Tool {
        id: String,
        content: Content,
        tool_call_id: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
}

/// A tool call of an assistant message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum AguiToolCall {
    /// A function call (the only kind AG-UI has).
    Function {
        /// The call id.
        id: String,
        /// The tool and its arguments.
        function: FunctionCall,
    },
}

/// The tool and arguments of an [`AguiToolCall`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FunctionCall {
    /// The tool's name.
    pub name: String,
    /// The arguments as JSON text.
    pub arguments: String,
}

impl AguiMessage {
    /// One Keel message as AG-UI messages: a tool message becomes one AG-UI
    /// tool message per result, every other message one message.
    pub fn of(message: &Message) -> Vec<AguiMessage> {
        let id = message.id().as_str();
        match message.role() {
            Role::Tool => message
                .parts()
                .iter()
                .filter_map(|p| match p {
                    Part::ToolResult(r) => Some(AguiMessage::Tool {
                        id: format!("{id}.{}", r.call_id().as_str()),
                        content: tool_content(r.content(), r.images()),
                        tool_call_id: r.call_id().as_str().to_owned(),
                        error: r.is_error().then(|| r.content().to_owned()),
                    }),
                    _ => None,
                })
                .collect(),
            Role::Assistant => {
                let mut out = reasoning_messages(message);
                let text = message.joined_text();
                let tool_calls = message
                    .tool_calls()
                    .map(|c| AguiToolCall::Function {
                        id: c.call_id().as_str().to_owned(),
                        function: FunctionCall {
                            name: c.name().as_str().to_owned(),
                            arguments: c.arguments().as_str().to_owned(),
                        },
                    })
                    .collect();
                out.push(AguiMessage::Assistant {
                    id: id.to_owned(),
                    content: (!text.is_empty()).then_some(text),
                    tool_calls,
                });
                out
            }
            Role::System => vec![AguiMessage::System {
                id: id.to_owned(),
                content: message.joined_text(),
            }],
            Role::User => vec![AguiMessage::User {
                id: id.to_owned(),
                content: user_content(message),
            }],
        }
    }

    /// The message as a JSON value.
    pub fn to_value(&self) -> Value {
        // Nothing here fails to encode (strings and vectors of them only).
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// The message's JSON text (members in sorted order).
    pub fn to_json(&self) -> String {
        self.to_value().to_string()
    }
}

/// The reasoning parts of an assistant message, as reasoning messages.
fn reasoning_messages(message: &Message) -> Vec<AguiMessage> {
    let id = message.id().as_str();
    message
        .parts()
        .iter()
        .filter_map(|p| match p {
            Part::Reasoning(r) => Some(r),
            _ => None,
        })
        .enumerate()
        .map(|(i, r)| AguiMessage::Reasoning {
            id: format!("{id}.reasoning.{}", i + 1),
            content: r.text().to_owned(),
            encrypted_value: r
                .signature()
                .or(r.redacted())
                .map(|v| v.as_str().to_owned()),
        })
        .collect()
}

/// A user message's content: its text, or (when it holds an image or a
/// file) its parts in order.
fn user_content(message: &Message) -> Content {
    let media = |p: &Part| matches!(p, Part::Image(_) | Part::File(_));
    if !message.parts().iter().any(media) {
        return Content::Text(message.joined_text());
    }
    let parts = message
        .parts()
        .iter()
        .filter_map(|p| match p {
            Part::Text(t) => Some(json!({"type": "text", "text": t.text()})),
            Part::Image(image) => Some(media::image_part(image)),
            Part::File(file) => Some(media::file_part(file)),
            _ => None,
        })
        .collect();
    Content::Parts(parts)
}

/// A tool result's content: its text, or (with images) a text part and
/// an image part per image.
pub(super) fn tool_content(output: &str, images: &[ImagePart]) -> Content {
    if images.is_empty() {
        return Content::Text(output.to_owned());
    }
    let text = json!({"type": "text", "text": output});
    let parts = std::iter::once(text)
        .chain(images.iter().map(media::image_part))
        .collect();
    Content::Parts(parts)
}
