//! Content parts and messages.

use crate::canonical::CanonicalJson;
use crate::error::{MessageError, MessageErrorKind};
use crate::ids::{CallId, MessageId};
use crate::limits::{Bound, Limits};
use crate::names::ToolName;
use crate::role::Role;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::Arc;

/// The parts each role admits (rule `message.role_parts`).
trait RoleParts {
    fn allows(self, part: &Part) -> bool;
}

impl RoleParts for Role {
    fn allows(self, part: &Part) -> bool {
        matches!(
            (self, part),
            (Role::System | Role::User | Role::Assistant, Part::Text(_))
                | (Role::Assistant, Part::ToolCall(_))
                | (Role::Tool, Part::ToolResult(_))
        )
    }
}

/// Non-empty text, at most [`Limits::part_bytes`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TextPart {
    text: Arc<str>,
}

impl TextPart {
    /// The text.
    pub fn text(&self) -> &str {
        &self.text
    }
}

/// A finalized tool call: which tool, with which JSON-object arguments.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ToolCallPart {
    call_id: CallId,
    name: ToolName,
    arguments: CanonicalJson,
}

impl ToolCallPart {
    /// A finalized tool call: the arguments must be a JSON object of at most
    /// `limits.part_bytes` canonical bytes.
    pub fn new_with(
        call_id: CallId,
        name: ToolName,
        arguments: CanonicalJson,
        limits: &Limits,
    ) -> Result<ToolCallPart, MessageError> {
        if !arguments.is_object() {
            return Err(MessageError::new(
                "$.arguments",
                MessageErrorKind::ArgumentsNotObject,
            ));
        }
        Bound::PartBytes
            .check(limits, arguments.len())
            .map_err(|e| MessageError::new("$.arguments", e))?;
        Ok(ToolCallPart {
            call_id,
            name,
            arguments,
        })
    }

    /// The call id, echoed by the matching tool result.
    pub fn call_id(&self) -> &CallId {
        &self.call_id
    }
    /// The canonical tool name.
    pub fn name(&self) -> &ToolName {
        &self.name
    }
    /// The arguments: a canonical JSON object.
    pub fn arguments(&self) -> &CanonicalJson {
        &self.arguments
    }
}

/// The result of one tool call, fed back to the model.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ToolResultPart {
    call_id: CallId,
    content: Arc<str>,
    is_error: bool,
}

impl ToolResultPart {
    /// The call this answers.
    pub fn call_id(&self) -> &CallId {
        &self.call_id
    }
    /// The result text (may be empty).
    pub fn content(&self) -> &str {
        &self.content
    }
    /// Whether the tool failed; the content then describes the failure.
    pub fn is_error(&self) -> bool {
        self.is_error
    }
}

/// One content part of a message. Build parts with the constructors, which
/// validate; the variant structs have no public constructors.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Part {
    /// Text.
    Text(TextPart),
    /// A tool call (assistant messages only).
    ToolCall(ToolCallPart),
    /// A tool result (tool messages only).
    ToolResult(ToolResultPart),
}

impl Part {
    /// A text part under the default limits.
    pub fn text(text: &str) -> Result<Part, MessageError> {
        Self::text_with(text, Limits::default_ref())
    }

    /// A text part: non-empty, at most `limits.part_bytes`.
    pub fn text_with(text: &str, limits: &Limits) -> Result<Part, MessageError> {
        if text.is_empty() {
            return Err(MessageError::new("$.text", MessageErrorKind::EmptyText));
        }
        Bound::PartBytes
            .check(limits, text.len())
            .map_err(|e| MessageError::new("$.text", e))?;
        Ok(Part::Text(TextPart {
            text: Arc::from(text),
        }))
    }

    /// A tool call part under the default limits.
    pub fn tool_call(
        call_id: CallId,
        name: ToolName,
        arguments: CanonicalJson,
    ) -> Result<Part, MessageError> {
        Self::tool_call_with(call_id, name, arguments, Limits::default_ref())
    }

    /// A tool call part: see [`ToolCallPart::new_with`].
    pub fn tool_call_with(
        call_id: CallId,
        name: ToolName,
        arguments: CanonicalJson,
        limits: &Limits,
    ) -> Result<Part, MessageError> {
        ToolCallPart::new_with(call_id, name, arguments, limits).map(Part::ToolCall)
    }

    /// A tool result part under the default limits.
    pub fn tool_result(
        call_id: CallId,
        content: &str,
        is_error: bool,
    ) -> Result<Part, MessageError> {
        Self::tool_result_with(call_id, content, is_error, Limits::default_ref())
    }

    /// A tool result part: content of at most `limits.part_bytes`.
    pub fn tool_result_with(
        call_id: CallId,
        content: &str,
        is_error: bool,
        limits: &Limits,
    ) -> Result<Part, MessageError> {
        Bound::PartBytes
            .check(limits, content.len())
            .map_err(|e| MessageError::new("$.content", e))?;
        Ok(Part::ToolResult(ToolResultPart {
            call_id,
            content: Arc::from(content),
            is_error,
        }))
    }

    /// The wire name of the part kind: `text`, `tool_call` or `tool_result`.
    pub fn kind(&self) -> &'static str {
        match self {
            Part::Text(_) => "text",
            Part::ToolCall(_) => "tool_call",
            Part::ToolResult(_) => "tool_result",
        }
    }

    /// The bytes this part counts against `part_bytes` and `message_bytes`.
    pub fn content_bytes(&self) -> usize {
        match self {
            Part::Text(p) => p.text.len(),
            Part::ToolCall(p) => p.arguments.len(),
            Part::ToolResult(p) => p.content.len(),
        }
    }

    fn revalidate(&self, limits: &Limits) -> Result<(), MessageError> {
        // Parts may have been built under other limits; re-check the bounds
        // that depend on configuration.
        let path = match self {
            Part::Text(_) => "$.text",
            Part::ToolCall(_) => "$.arguments",
            Part::ToolResult(_) => "$.content",
        };
        Bound::PartBytes
            .check(limits, self.content_bytes())
            .map_err(|e| MessageError::new(path, e))
    }
}

struct MessageInner {
    id: MessageId,
    role: Role,
    parts: Box<[Part]>,
    content_bytes: usize,
}

/// An immutable message: id, role and bounded, ordered parts.
///
/// Cloning is a reference-count increment; nothing reachable from a
/// `Message` can be mutated, so a clone held by an in-flight request is
/// exactly what was built.
///
/// ```
/// use keel_message::{Message, MessageId, Part, Role};
/// let m = Message::new(MessageId::parse("m1")?, Role::User, vec![Part::text("Weather in Oslo?")?])?;
/// assert_eq!(m.role(), Role::User);
/// assert_eq!(m.joined_text(), "Weather in Oslo?");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Message(Arc<MessageInner>);

impl Message {
    /// Builds a message under the default limits.
    pub fn new(id: MessageId, role: Role, parts: Vec<Part>) -> Result<Message, MessageError> {
        Self::new_with(id, role, parts, Limits::default_ref())
    }

    /// Builds a message. Rules: at least one part; at most
    /// `limits.parts_per_message` parts; each part allowed for the role and
    /// within `limits.part_bytes`; `limits.message_bytes` in total; no call
    /// id on two parts.
    pub fn new_with(
        id: MessageId,
        role: Role,
        parts: Vec<Part>,
        limits: &Limits,
    ) -> Result<Message, MessageError> {
        if parts.is_empty() {
            return Err(MessageError::new("$.parts", MessageErrorKind::NoParts));
        }
        Bound::PartsPerMessage
            .check(limits, parts.len())
            .map_err(|e| MessageError::new("$.parts", e))?;
        let mut content_bytes = 0usize;
        let mut call_ids: Vec<&CallId> = Vec::new();
        for (i, part) in parts.iter().enumerate() {
            let at = format!("$.parts[{i}]");
            if !role.allows(part) {
                return Err(MessageError::new(
                    at,
                    MessageErrorKind::PartNotAllowed {
                        role,
                        part: part.kind(),
                    },
                ));
            }
            part.revalidate(limits).map_err(|e| e.within(&at))?;
            let call_id = match part {
                Part::ToolCall(p) => Some(&p.call_id),
                Part::ToolResult(p) => Some(&p.call_id),
                Part::Text(_) => None,
            };
            if let Some(call_id) = call_id {
                if call_ids.contains(&call_id) {
                    return Err(MessageError::new(
                        format!("{at}.call_id"),
                        MessageErrorKind::DuplicateCallId {
                            call_id: call_id.clone(),
                        },
                    ));
                }
                call_ids.push(call_id);
            }
            content_bytes = content_bytes.saturating_add(part.content_bytes());
        }
        Bound::MessageBytes
            .check(limits, content_bytes)
            .map_err(|e| MessageError::new("$.parts", e))?;
        Ok(Message(Arc::new(MessageInner {
            id,
            role,
            parts: parts.into_boxed_slice(),
            content_bytes,
        })))
    }

    /// A message with one text part, under the default limits.
    pub fn text(id: MessageId, role: Role, text: &str) -> Result<Message, MessageError> {
        Self::new(id, role, vec![Part::text(text)?])
    }

    /// The message id.
    pub fn id(&self) -> &MessageId {
        &self.0.id
    }

    /// The role.
    pub fn role(&self) -> Role {
        self.0.role
    }

    /// The parts, in order.
    pub fn parts(&self) -> &[Part] {
        &self.0.parts
    }

    /// Bytes of content across all parts (what `message_bytes` bounds).
    pub fn content_bytes(&self) -> usize {
        self.0.content_bytes
    }

    /// The text parts concatenated, in order.
    pub fn joined_text(&self) -> String {
        self.0
            .parts
            .iter()
            .filter_map(|p| match p {
                Part::Text(t) => Some(t.text()),
                _ => None,
            })
            .collect()
    }

    /// The tool calls, in order.
    pub fn tool_calls(&self) -> impl Iterator<Item = &ToolCallPart> {
        self.0.parts.iter().filter_map(|p| match p {
            Part::ToolCall(c) => Some(c),
            _ => None,
        })
    }

    /// Whether two handles share one allocation (clones do).
    pub fn ptr_eq(a: &Message, b: &Message) -> bool {
        Arc::ptr_eq(&a.0, &b.0)
    }

    /// Re-checks the configuration-dependent bounds (parts, part bytes,
    /// message bytes) against `limits`; the structural rules were checked
    /// when the message was built and cannot have changed.
    pub(crate) fn check_bounds(&self, limits: &Limits) -> Result<(), MessageError> {
        Bound::PartsPerMessage
            .check(limits, self.0.parts.len())
            .map_err(|e| MessageError::new("$.parts", e))?;
        for (i, part) in self.0.parts.iter().enumerate() {
            part.revalidate(limits)
                .map_err(|e| e.within(&format!("$.parts[{i}]")))?;
        }
        Bound::MessageBytes
            .check(limits, self.0.content_bytes)
            .map_err(|e| MessageError::new("$.parts", e))
    }
}

impl PartialEq for Message {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
            || (self.0.id == other.0.id
                && self.0.role == other.0.role
                && self.0.parts == other.0.parts)
    }
}
impl Eq for Message {}

impl fmt::Debug for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Message")
            .field("id", &self.0.id)
            .field("role", &self.0.role)
            .field("parts", &self.0.parts)
            .finish()
    }
}

// ---- serde: wire shapes ----

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum PartOut<'a> {
    Text {
        text: &'a str,
    },
    ToolCall {
        call_id: &'a CallId,
        name: &'a ToolName,
        arguments: &'a CanonicalJson,
    },
    ToolResult {
        call_id: &'a CallId,
        content: &'a str,
        is_error: bool,
    },
}

/// The wire shape of a part, as deserialized before validation.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum PartWire {
    Text {
        text: String,
    },
    ToolCall {
        call_id: CallId,
        name: ToolName,
        arguments: CanonicalJson,
    },
    ToolResult {
        call_id: CallId,
        content: String,
        #[serde(default)]
        is_error: bool,
    },
}

impl PartWire {
    fn build(self, limits: &Limits) -> Result<Part, MessageError> {
        match self {
            PartWire::Text { text } => Part::text_with(&text, limits),
            PartWire::ToolCall {
                call_id,
                name,
                arguments,
            } => Part::tool_call_with(call_id, name, arguments, limits),
            PartWire::ToolResult {
                call_id,
                content,
                is_error,
            } => Part::tool_result_with(call_id, &content, is_error, limits),
        }
    }
}

impl Serialize for Part {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Part::Text(p) => PartOut::Text { text: &p.text },
            Part::ToolCall(p) => PartOut::ToolCall {
                call_id: &p.call_id,
                name: &p.name,
                arguments: &p.arguments,
            },
            Part::ToolResult(p) => PartOut::ToolResult {
                call_id: &p.call_id,
                content: &p.content,
                is_error: p.is_error,
            },
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for Part {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        PartWire::deserialize(d)?
            .build(Limits::default_ref())
            .map_err(serde::de::Error::custom)
    }
}

/// The wire shape of a message, as deserialized before validation.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct MessageWire {
    id: MessageId,
    role: Role,
    parts: Vec<PartWire>,
}

impl MessageWire {
    pub(crate) fn build(self, limits: &Limits) -> Result<Message, MessageError> {
        Bound::PartsPerMessage
            .check(limits, self.parts.len())
            .map_err(|e| MessageError::new("$.parts", e))?;
        let parts = self
            .parts
            .into_iter()
            .enumerate()
            .map(|(i, p)| {
                p.build(limits)
                    .map_err(|e| e.within(&format!("$.parts[{i}]")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Message::new_with(self.id, self.role, parts, limits)
    }
}

impl Message {
    /// Parses a message from JSON under `limits`, enforcing every rule.
    pub fn from_json_with(json: &str, limits: &Limits) -> Result<Message, crate::DecodeError> {
        let wire: MessageWire = crate::decode::from_json(json)?;
        Ok(wire.build(limits)?)
    }
}

impl Serialize for Message {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("Message", 3)?;
        st.serialize_field("id", &self.0.id)?;
        st.serialize_field("role", &self.0.role)?;
        st.serialize_field("parts", &*self.0.parts)?;
        st.end()
    }
}

impl<'de> Deserialize<'de> for Message {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        MessageWire::deserialize(d)?
            .build(Limits::default_ref())
            .map_err(serde::de::Error::custom)
    }
}
