//! The error for building messages, tool definitions and requests.

use crate::canonical::JsonError;
use crate::ids::IdError;
use crate::limits::LimitExceeded;
use crate::names::NameProblem;
use std::fmt;

/// Why a message, part, tool definition or model request was rejected.
///
/// It names the rule or bound that was broken and where: [`path`] is a
/// JSON-path-like location (`$.history[3].parts[1].arguments`). Content is
/// never echoed, only sizes, offsets and identifiers.
///
/// [`path`]: MessageError::path
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageError {
    path: String,
    kind: MessageErrorKind,
}

/// The rule a [`MessageError`] broke.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MessageErrorKind {
    /// An identifier broke the identifier rule.
    #[error(transparent)]
    Id(#[from] IdError),
    /// A JSON value broke a canonical JSON rule or bound.
    #[error(transparent)]
    Json(#[from] JsonError),
    /// A size, count or depth bound was exceeded.
    #[error(transparent)]
    Limit(#[from] LimitExceeded),
    /// A tool name broke the rule `^[A-Za-z0-9_-]{1,64}$`.
    #[error(
        "tool name {problem} (rule tool_name: 1..=64 bytes of ASCII letters, digits, '_', '-')"
    )]
    ToolName {
        /// What is wrong, without echoing the name.
        problem: NameProblem,
    },
    /// A model name broke the rule: non-empty, no whitespace or control
    /// characters.
    #[error(
        "model name {problem} (rule model_name: non-empty, no whitespace or control characters)"
    )]
    ModelName {
        /// What is wrong, without echoing the name.
        problem: NameProblem,
    },
    /// A text part was empty.
    #[error("text part is empty (rule part.text_nonempty)")]
    EmptyText,
    /// A message had no parts.
    #[error("message has no parts (rule message.nonempty)")]
    NoParts,
    /// A part kind that the role does not allow (for example a tool call in
    /// a user message).
    #[error("a {part} part is not allowed in a {role} message (rule message.role_parts)")]
    PartNotAllowed {
        /// The message role.
        role: crate::role::Role,
        /// The part kind: `text`, `tool_call` or `tool_result`.
        part: &'static str,
    },
    /// Tool-call arguments that are not a JSON object.
    #[error("tool call arguments are not a JSON object (rule tool_call.arguments_object)")]
    ArgumentsNotObject,
    /// Tool parameters that are not a JSON Schema for an object.
    #[error(
        "tool parameters are not an object schema (rule tool.parameters_object: a JSON object whose \"type\", if present, is \"object\")"
    )]
    ParametersNotObjectSchema,
    /// The same call id on two tool calls, or answered by two tool results.
    #[error("call id {call_id} is used twice (rule call_id.unique)")]
    DuplicateCallId {
        /// The repeated call id.
        call_id: crate::CallId,
    },
    /// A tool result whose call id matches no earlier tool call.
    #[error(
        "tool result answers call id {call_id}, which no earlier tool call has (rule tool_result.answers_call)"
    )]
    OrphanToolResult {
        /// The unmatched call id.
        call_id: crate::CallId,
    },
    /// Two tool definitions with the same name.
    #[error("tool {name} is defined twice (rule tools.unique_names)")]
    DuplicateToolName {
        /// The repeated name.
        name: crate::ToolName,
    },
    /// A request with no messages.
    #[error("history is empty (rule request.history_nonempty)")]
    EmptyHistory,
}

impl MessageErrorKind {
    /// A stable, machine-readable name for the rule or bound, e.g.
    /// `"ids.charset"`, `"limits.part_bytes"`, `"message.role_parts"`.
    pub fn rule(&self) -> &'static str {
        match self {
            MessageErrorKind::Id(e) => e.rule(),
            MessageErrorKind::Json(e) => e.rule(),
            MessageErrorKind::Limit(l) => l.bound.rule(),
            MessageErrorKind::ToolName { .. } => "tool_name",
            MessageErrorKind::ModelName { .. } => "model_name",
            MessageErrorKind::EmptyText => "part.text_nonempty",
            MessageErrorKind::NoParts => "message.nonempty",
            MessageErrorKind::PartNotAllowed { .. } => "message.role_parts",
            MessageErrorKind::ArgumentsNotObject => "tool_call.arguments_object",
            MessageErrorKind::ParametersNotObjectSchema => "tool.parameters_object",
            MessageErrorKind::DuplicateCallId { .. } => "call_id.unique",
            MessageErrorKind::OrphanToolResult { .. } => "tool_result.answers_call",
            MessageErrorKind::DuplicateToolName { .. } => "tools.unique_names",
            MessageErrorKind::EmptyHistory => "request.history_nonempty",
        }
    }
}

impl MessageError {
    pub(crate) fn new(path: impl Into<String>, kind: impl Into<MessageErrorKind>) -> Self {
        MessageError {
            path: path.into(),
            kind: kind.into(),
        }
    }

    /// Where the violation is, e.g. `$.parts[1].arguments`.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The rule or bound that was broken.
    pub fn kind(&self) -> &MessageErrorKind {
        &self.kind
    }

    /// Re-roots the path under `prefix` (e.g. `$.history[3]`), for callers
    /// that validate a value inside a larger one.
    pub fn within(mut self, prefix: &str) -> Self {
        let rest = self.path.strip_prefix('$').unwrap_or(&self.path);
        self.path = format!("{prefix}{rest}");
        self
    }
}

impl From<IdError> for MessageError {
    fn from(e: IdError) -> Self {
        MessageError::new("$", e)
    }
}

impl From<JsonError> for MessageError {
    fn from(e: JsonError) -> Self {
        MessageError::new("$", e)
    }
}

impl fmt::Display for MessageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.kind)
    }
}

impl std::error::Error for MessageError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.kind)
    }
}
