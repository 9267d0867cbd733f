//! The model request: what the host asks one model call to do.

use crate::error::{MessageError, MessageErrorKind};
use crate::ids::{CallId, OperationId};
use crate::limits::{Bound, Limits};
use crate::message::{Message, MessageWire};
use crate::names::ModelName;
use crate::part::Part;
use crate::tool::{ToolDefinition, ToolWire};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

struct RequestInner {
    operation_id: OperationId,
    model: ModelName,
    history: Arc<[Message]>,
    tools: Arc<[ToolDefinition]>,
    history_bytes: usize,
}

/// One model call: a host-issued operation id, the model, and the
/// immutable history and tool definitions it sees.
///
/// History and tools are shared (`Arc<[_]>`) so that consecutive turns and
/// retries reuse them without copying message content; nothing in a
/// request can be changed once it is built.
///
/// ```
/// use keel_message::*;
/// use std::sync::Arc;
/// let history: Arc<[Message]> = vec![Message::text(MessageId::parse("m1")?, Role::User, "Hi")?].into();
/// let mut ops = OperationIdIssuer::new();
/// let req = ModelRequest::new(ops.issue(), ModelName::parse("gpt-5")?, history, Arc::from([]))?;
/// assert_eq!(req.operation_id().as_str(), "op_1");
/// assert_eq!(req.history().len(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct ModelRequest(Arc<RequestInner>);

impl ModelRequest {
    /// Builds a request under the default limits.
    pub fn new(
        operation_id: OperationId,
        model: ModelName,
        history: Arc<[Message]>,
        tools: Arc<[ToolDefinition]>,
    ) -> Result<ModelRequest, MessageError> {
        Self::new_with(operation_id, model, history, tools, Limits::default_ref())
    }

    /// Builds a request. Rules: the history is non-empty and within
    /// `limits.history_messages` and `limits.history_bytes`, and every
    /// message within the message bounds; the model name within
    /// `limits.model_name_bytes`; at most `limits.tools_per_request` tools
    /// with distinct names; no call id on two tool calls; every tool result
    /// answers exactly one earlier tool call.
    pub fn new_with(
        operation_id: OperationId,
        model: ModelName,
        history: Arc<[Message]>,
        tools: Arc<[ToolDefinition]>,
        limits: &Limits,
    ) -> Result<ModelRequest, MessageError> {
        Bound::ModelNameBytes
            .check(limits, model.as_str().len())
            .map_err(|e| MessageError::new("$.model", e))?;
        let history_bytes = check_history(&history, limits)?;
        check_tools(&tools, limits)?;
        Ok(ModelRequest(Arc::new(RequestInner {
            operation_id,
            model,
            history,
            tools,
            history_bytes,
        })))
    }

    /// The host-issued id of this model call.
    pub fn operation_id(&self) -> &OperationId {
        &self.0.operation_id
    }
    /// The model name.
    pub fn model(&self) -> &ModelName {
        &self.0.model
    }
    /// The history, oldest first.
    pub fn history(&self) -> &[Message] {
        &self.0.history
    }
    /// The history as a shared handle, to build the next turn's request
    /// without copying message content.
    pub fn shared_history(&self) -> Arc<[Message]> {
        Arc::clone(&self.0.history)
    }
    /// The tool definitions.
    pub fn tools(&self) -> &[ToolDefinition] {
        &self.0.tools
    }
    /// The tool definitions as a shared handle.
    pub fn shared_tools(&self) -> Arc<[ToolDefinition]> {
        Arc::clone(&self.0.tools)
    }
    /// Bytes of content across the history (what `history_bytes` bounds).
    pub fn history_bytes(&self) -> usize {
        self.0.history_bytes
    }

    /// Parses a request from JSON under `limits`, enforcing every rule.
    pub fn from_json_with(json: &str, limits: &Limits) -> Result<ModelRequest, crate::DecodeError> {
        let wire: RequestWire = crate::decode::from_json(json)?;
        Ok(wire.build(limits)?)
    }
}

/// The history rules of [`ModelRequest::new_with`], in order: non-empty,
/// within the message count, every message within its bounds and its call
/// ids consistent with the earlier ones, then within the byte total, which
/// is returned.
fn check_history(history: &[Message], limits: &Limits) -> Result<usize, MessageError> {
    if history.is_empty() {
        return Err(MessageError::new(
            "$.history",
            MessageErrorKind::EmptyHistory,
        ));
    }
    Bound::HistoryMessages
        .check(limits, history.len())
        .map_err(|e| MessageError::new("$.history", e))?;
    let mut history_bytes = 0usize;
    let mut calls: HashSet<&CallId> = HashSet::new();
    let mut answered: HashSet<&CallId> = HashSet::new();
    for (i, message) in history.iter().enumerate() {
        let at = format!("$.history[{i}]");
        message.check_bounds(limits).map_err(|e| e.within(&at))?;
        history_bytes = history_bytes.saturating_add(message.content_bytes());
        check_call_ids(&at, message, &mut calls, &mut answered)?;
    }
    Bound::HistoryBytes
        .check(limits, history_bytes)
        .map_err(|e| MessageError::new("$.history", e))?;
    Ok(history_bytes)
}

/// Checks the tool parts of the message at `at` against the calls and
/// results seen so far (and records them): a result must answer an earlier
/// call, and no call id appears on two calls or on two results.
fn check_call_ids<'a>(
    at: &str,
    message: &'a Message,
    calls: &mut HashSet<&'a CallId>,
    answered: &mut HashSet<&'a CallId>,
) -> Result<(), MessageError> {
    for (j, part) in message.parts().iter().enumerate() {
        let (call_id, set, orphan) = match part {
            Part::ToolCall(c) => (c.call_id(), &mut *calls, false),
            Part::ToolResult(r) => (r.call_id(), &mut *answered, !calls.contains(r.call_id())),
            Part::Text(_) | Part::Reasoning(_) | Part::Image(_) | Part::File(_) => continue,
        };
        let path = format!("{at}.parts[{j}].call_id");
        if orphan {
            return Err(MessageError::new(
                path,
                MessageErrorKind::OrphanToolResult {
                    call_id: call_id.clone(),
                },
            ));
        }
        if !set.insert(call_id) {
            return Err(MessageError::new(
                path,
                MessageErrorKind::DuplicateCallId {
                    call_id: call_id.clone(),
                },
            ));
        }
    }
    Ok(())
}

/// The tool rules of [`ModelRequest::new_with`], in order: within the tool
/// count, then per tool its description and parameter sizes and a name no
/// earlier tool has.
fn check_tools(tools: &[ToolDefinition], limits: &Limits) -> Result<(), MessageError> {
    Bound::ToolsPerRequest
        .check(limits, tools.len())
        .map_err(|e| MessageError::new("$.tools", e))?;
    let mut names = HashSet::new();
    for (i, tool) in tools.iter().enumerate() {
        let at = format!("$.tools[{i}]");
        Bound::ToolDescriptionBytes
            .check(limits, tool.description().len())
            .map_err(|e| MessageError::new(format!("{at}.description"), e))?;
        Bound::JsonBytes
            .check(limits, tool.parameters().len())
            .map_err(|e| MessageError::new(format!("{at}.parameters"), e))?;
        if !names.insert(tool.name()) {
            return Err(MessageError::new(
                format!("{at}.name"),
                MessageErrorKind::DuplicateToolName {
                    name: tool.name().clone(),
                },
            ));
        }
    }
    Ok(())
}

impl fmt::Debug for ModelRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModelRequest")
            .field("operation_id", &self.0.operation_id)
            .field("model", &self.0.model)
            .field("history", &self.0.history)
            .field("tools", &self.0.tools)
            .finish()
    }
}

impl PartialEq for ModelRequest {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
            || (self.0.operation_id == other.0.operation_id
                && self.0.model == other.0.model
                && self.0.history == other.0.history
                && self.0.tools == other.0.tools)
    }
}
impl Eq for ModelRequest {}

#[derive(Serialize)]
struct RequestOut<'a> {
    operation_id: &'a OperationId,
    model: &'a ModelName,
    history: &'a [Message],
    tools: &'a [ToolDefinition],
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RequestWire {
    operation_id: OperationId,
    model: String,
    history: Vec<MessageWire>,
    #[serde(default)]
    tools: Vec<ToolWire>,
}

impl RequestWire {
    fn build(self, limits: &Limits) -> Result<ModelRequest, MessageError> {
        Bound::HistoryMessages
            .check(limits, self.history.len())
            .map_err(|e| MessageError::new("$.history", e))?;
        Bound::ToolsPerRequest
            .check(limits, self.tools.len())
            .map_err(|e| MessageError::new("$.tools", e))?;
        let history = self
            .history
            .into_iter()
            .enumerate()
            .map(|(i, m)| {
                m.build(limits)
                    .map_err(|e| e.within(&format!("$.history[{i}]")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let tools = self
            .tools
            .into_iter()
            .enumerate()
            .map(|(i, t)| {
                t.build(limits)
                    .map_err(|e| e.within(&format!("$.tools[{i}]")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let model = ModelName::parse_with(&self.model, limits).map_err(|e| e.within("$.model"))?;
        ModelRequest::new_with(
            self.operation_id,
            model,
            history.into(),
            tools.into(),
            limits,
        )
    }
}

impl Serialize for ModelRequest {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        RequestOut {
            operation_id: &self.0.operation_id,
            model: &self.0.model,
            history: &self.0.history,
            tools: &self.0.tools,
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for ModelRequest {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        RequestWire::deserialize(d)?
            .build(Limits::default_ref())
            .map_err(serde::de::Error::custom)
    }
}
