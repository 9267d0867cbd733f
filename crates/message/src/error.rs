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
        /// The part kind: `text`, `tool_call`, `tool_result`,
        /// `reasoning`, `image` or `file`.
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
    /// An opaque provider value (signature, redacted reasoning) that is
    /// empty or holds a byte outside printable ASCII `0x21..=0x7E`.
    #[error("opaque value {problem} (rule message.opaque_value: printable ASCII 0x21..=0x7E)")]
    OpaqueValue {
        /// What is wrong, without echoing the value.
        problem: NameProblem,
    },
    /// A provider tag that broke the rule `^[a-z][a-z0-9._-]{0,63}$`.
    #[error("provider tag {problem} (rule message.provider_tag: 1..=64 bytes, [a-z][a-z0-9._-]*)")]
    ProviderTag {
        /// What is wrong, without echoing the tag.
        problem: NameProblem,
    },
    /// An image media type outside the allowlist.
    #[error(
        "image media type ({len} bytes) is not image/png, image/jpeg, image/gif or image/webp (rule message.image_media_type)"
    )]
    UnknownImageMediaType {
        /// The length of the refused media type.
        len: usize,
    },
    /// Inline image bytes without a media type.
    #[error("inline image bytes need a media type (rule message.image_media_type)")]
    MissingImageMediaType,
    /// A file media type outside the allowlist.
    #[error(
        "file media type ({len} bytes) is not application/pdf, text/plain, text/markdown, text/csv or application/json (rule message.file_media_type)"
    )]
    UnknownFileMediaType {
        /// The length of the refused media type.
        len: usize,
    },
    /// Bytes that are not canonical base64 (standard alphabet, padded, no
    /// whitespace, no non-zero trailing bits).
    #[error("{problem} (rule message.base64: canonical padded standard base64)")]
    Base64 {
        /// What is wrong, without echoing the text.
        problem: Base64Problem,
    },
    /// An image URL that is not a bounded `https://` URL of printable ASCII.
    #[error("image url {problem} (rule message.image_url)")]
    ImageUrl {
        /// What is wrong, without echoing the URL.
        problem: UrlProblem,
    },
    /// An image whose bytes do not start with its media type's signature.
    #[error(
        "image bytes do not start with the {media_type} signature (rule message.image_signature)"
    )]
    ImageSignature {
        /// The declared media type.
        media_type: &'static str,
    },
    /// An image with both inline bytes and a URL, or neither.
    #[error("an image has exactly one of `base64` or `url` (rule message.image_source)")]
    ImageSource,
    /// A file name that is empty, too long, or holds a control character,
    /// `/` or `\\`.
    #[error(
        "file name {problem} (rule message.file_name: 1..=255 bytes, no control characters, '/' or '\\')"
    )]
    FileName {
        /// What is wrong, without echoing the name.
        problem: NameProblem,
    },
    /// A file name that is `.` or `..`.
    #[error("file name is a dot segment of {len} byte(s) (rule message.file_name)")]
    FileNameDotSegment {
        /// 1 for `.`, 2 for `..`.
        len: usize,
    },
    /// A PDF whose bytes do not start with `%PDF-`.
    #[error(
        "file bytes do not start with the {media_type} signature (rule message.file_signature)"
    )]
    FileSignature {
        /// The declared media type.
        media_type: &'static str,
    },
    /// A text or JSON file whose bytes are not UTF-8.
    #[error("{media_type} file is not UTF-8 at byte {offset} (rule message.file_signature)")]
    FileNotUtf8 {
        /// The declared media type.
        media_type: &'static str,
        /// Byte offset of the first invalid sequence.
        offset: usize,
    },
    /// A reasoning part with neither text nor a signature.
    #[error("reasoning part has no text and no signature (rule message.empty_reasoning)")]
    EmptyReasoning,
    /// A reasoning part on the wire that has `redacted` together with
    /// `text` or `signature`, or neither `redacted` nor `text`.
    #[error(
        "a reasoning part has `text` (and optionally `signature`), or only `redacted` (rule message.reasoning_shape)"
    )]
    ReasoningShape,
}

/// What is wrong with a base64 text, without repeating it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Base64Problem {
    /// The length is not a multiple of 4 (padding is required).
    Length {
        /// The length in bytes.
        len: usize,
    },
    /// A byte outside the standard alphabet (whitespace included), or
    /// padding out of place.
    Character {
        /// Byte offset of the first bad byte.
        offset: usize,
    },
    /// The last symbol has non-zero trailing bits, so the text is not the
    /// canonical encoding of its bytes.
    TrailingBits {
        /// Byte offset of the last symbol.
        offset: usize,
    },
    /// Padding that is missing or of the wrong length.
    Padding,
}

impl fmt::Display for Base64Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Base64Problem::Length { len } => {
                write!(f, "base64 is {len} bytes, not a multiple of 4")
            }
            Base64Problem::Character { offset } => {
                write!(f, "base64 has a disallowed byte at {offset}")
            }
            Base64Problem::TrailingBits { offset } => {
                write!(f, "base64 has non-zero trailing bits at byte {offset}")
            }
            Base64Problem::Padding => f.write_str("base64 padding is wrong"),
        }
    }
}

/// What is wrong with an image URL, without repeating it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum UrlProblem {
    /// The URL does not start with `https://`.
    NotHttps,
    /// Nothing between `https://` and the path.
    EmptyHost,
    /// A `user:password@` before the host: credentials do not belong in a
    /// message.
    Credentials,
    /// Longer than the wire-format maximum.
    TooLong {
        /// The length in bytes.
        len: usize,
        /// The maximum.
        max: usize,
    },
    /// A byte outside printable ASCII `0x21..=0x7E` (spaces included).
    Character {
        /// Byte offset of the first bad byte.
        offset: usize,
    },
}

impl fmt::Display for UrlProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UrlProblem::NotHttps => f.write_str("does not start with https://"),
            UrlProblem::EmptyHost => f.write_str("has an empty host"),
            UrlProblem::Credentials => f.write_str("has credentials before the host"),
            UrlProblem::TooLong { len, max } => write!(f, "is {len} bytes, over {max}"),
            UrlProblem::Character { offset } => {
                write!(f, "has a disallowed byte at {offset}")
            }
        }
    }
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
            MessageErrorKind::OpaqueValue { .. } => "message.opaque_value",
            MessageErrorKind::ProviderTag { .. } => "message.provider_tag",
            MessageErrorKind::UnknownImageMediaType { .. }
            | MessageErrorKind::MissingImageMediaType => "message.image_media_type",
            MessageErrorKind::UnknownFileMediaType { .. } => "message.file_media_type",
            MessageErrorKind::Base64 { .. } => "message.base64",
            MessageErrorKind::ImageUrl { .. } => "message.image_url",
            MessageErrorKind::ImageSignature { .. } => "message.image_signature",
            MessageErrorKind::ImageSource => "message.image_source",
            MessageErrorKind::FileName { .. } | MessageErrorKind::FileNameDotSegment { .. } => {
                "message.file_name"
            }
            MessageErrorKind::FileSignature { .. } | MessageErrorKind::FileNotUtf8 { .. } => {
                "message.file_signature"
            }
            MessageErrorKind::EmptyReasoning => "message.empty_reasoning",
            MessageErrorKind::ReasoningShape => "message.reasoning_shape",
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
