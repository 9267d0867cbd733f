//! Messages: an id, a role and the parts that role admits, bounded.

use crate::error::{MessageError, MessageErrorKind};
use crate::ids::{CallId, MessageId};
use crate::limits::{Bound, Limits};
use crate::part::{Part, ToolCallPart};
use crate::part_wire::PartWire;
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
                | (Role::User, Part::Image(_) | Part::File(_))
                | (Role::Assistant, Part::ToolCall(_) | Part::Reasoning(_))
                | (Role::Tool, Part::ToolResult(_))
        )
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
    /// `limits.parts_per_message` parts, of which at most
    /// `limits.media_parts_per_message` images and files (tool-result
    /// images included); each part allowed for the role (rule
    /// `message.role_parts`) and within its bounds; `limits.message_bytes`
    /// in total; no call id on two parts.
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
        check_media_count(parts.iter().map(Part::media_count), limits)?;
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
                Part::ToolCall(p) => Some(p.call_id()),
                Part::ToolResult(p) => Some(p.call_id()),
                Part::Text(_) | Part::Reasoning(_) | Part::Image(_) | Part::File(_) => None,
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
        check_media_count(self.0.parts.iter().map(Part::media_count), limits)?;
        for (i, part) in self.0.parts.iter().enumerate() {
            part.revalidate(limits)
                .map_err(|e| e.within(&format!("$.parts[{i}]")))?;
        }
        Bound::MessageBytes
            .check(limits, self.0.content_bytes)
            .map_err(|e| MessageError::new("$.parts", e))
    }
}

/// The rule `limits.media_parts_per_message` over the media counts of a
/// message's parts.
fn check_media_count(
    counts: impl Iterator<Item = usize>,
    limits: &Limits,
) -> Result<(), MessageError> {
    let media = counts.fold(0usize, usize::saturating_add);
    Bound::MediaPartsPerMessage
        .check(limits, media)
        .map_err(|e| MessageError::new("$.parts", e))
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
        check_media_count(self.parts.iter().map(PartWire::media_count), limits)?;
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
