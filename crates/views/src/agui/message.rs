//! Keel messages as AG-UI messages (the members of a `MESSAGES_SNAPSHOT`),
//! typed and tagged by `role`. Encoded like the events (`super::event`):
//! camelCase members, optional ones left out, members in sorted order.

use keel_message::{Message, Part, Role};
use serde::Serialize;
use serde_json::Value;

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
    /// The user's message: its text.
    User { id: String, content: String },
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
        content: String,
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
                        content: r.content().to_owned(),
                        tool_call_id: r.call_id().as_str().to_owned(),
                        error: r.is_error().then(|| r.content().to_owned()),
                    }),
                    _ => None,
                })
                .collect(),
            Role::Assistant => {
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
                vec![AguiMessage::Assistant {
                    id: id.to_owned(),
                    content: (!text.is_empty()).then_some(text),
                    tool_calls,
                }]
            }
            Role::System => vec![AguiMessage::System {
                id: id.to_owned(),
                content: message.joined_text(),
            }],
            Role::User => vec![AguiMessage::User {
                id: id.to_owned(),
                content: message.joined_text(),
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
