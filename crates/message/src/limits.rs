//! Every tunable bound on message and stream values, in one place.

use std::fmt;

/// Names one field of [`Limits`], so that an error can say which bound was
/// broken without carrying the whole configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Bound {
    /// [`Limits::parts_per_message`].
    PartsPerMessage,
    /// [`Limits::part_bytes`].
    PartBytes,
    /// [`Limits::message_bytes`].
    MessageBytes,
    /// [`Limits::history_messages`].
    HistoryMessages,
    /// [`Limits::history_bytes`].
    HistoryBytes,
    /// [`Limits::tools_per_request`].
    ToolsPerRequest,
    /// [`Limits::tool_description_bytes`].
    ToolDescriptionBytes,
    /// [`Limits::model_name_bytes`].
    ModelNameBytes,
    /// [`Limits::json_bytes`].
    JsonBytes,
    /// [`Limits::json_depth`].
    JsonDepth,
    /// [`Limits::delta_bytes`].
    DeltaBytes,
    /// [`Limits::tool_calls_per_stream`].
    ToolCallsPerStream,
    /// [`Limits::metadata_namespaces`].
    MetadataNamespaces,
    /// [`Limits::metadata_keys`].
    MetadataKeys,
    /// [`Limits::metadata_depth`].
    MetadataDepth,
    /// [`Limits::metadata_bytes`].
    MetadataBytes,
    /// [`Limits::problem_message_bytes`].
    ProblemMessageBytes,
    /// [`Limits::opaque_bytes`].
    OpaqueBytes,
    /// [`Limits::image_bytes`].
    ImageBytes,
    /// [`Limits::file_bytes`].
    FileBytes,
    /// [`Limits::media_parts_per_message`].
    MediaPartsPerMessage,
}

impl Bound {
    /// The `Limits` field this bound is read from, e.g. `"part_bytes"`.
    pub fn name(self) -> &'static str {
        let rule = self.rule();
        rule.strip_prefix("limits.").unwrap_or(rule)
    }

    /// The stable rule name, `limits.<field>`, as errors report it.
    pub fn rule(self) -> &'static str {
        match self {
            Bound::PartsPerMessage => "limits.parts_per_message",
            Bound::PartBytes => "limits.part_bytes",
            Bound::MessageBytes => "limits.message_bytes",
            Bound::HistoryMessages => "limits.history_messages",
            Bound::HistoryBytes => "limits.history_bytes",
            Bound::ToolsPerRequest => "limits.tools_per_request",
            Bound::ToolDescriptionBytes => "limits.tool_description_bytes",
            Bound::ModelNameBytes => "limits.model_name_bytes",
            Bound::JsonBytes => "limits.json_bytes",
            Bound::JsonDepth => "limits.json_depth",
            Bound::DeltaBytes => "limits.delta_bytes",
            Bound::ToolCallsPerStream => "limits.tool_calls_per_stream",
            Bound::MetadataNamespaces => "limits.metadata_namespaces",
            Bound::MetadataKeys => "limits.metadata_keys",
            Bound::MetadataDepth => "limits.metadata_depth",
            Bound::MetadataBytes => "limits.metadata_bytes",
            Bound::ProblemMessageBytes => "limits.problem_message_bytes",
            Bound::OpaqueBytes => "limits.opaque_bytes",
            Bound::ImageBytes => "limits.image_bytes",
            Bound::FileBytes => "limits.file_bytes",
            Bound::MediaPartsPerMessage => "limits.media_parts_per_message",
        }
    }

    /// The configured maximum for this bound in `limits`.
    pub fn max(self, limits: &Limits) -> usize {
        match self {
            Bound::PartsPerMessage => limits.parts_per_message,
            Bound::PartBytes => limits.part_bytes,
            Bound::MessageBytes => limits.message_bytes,
            Bound::HistoryMessages => limits.history_messages,
            Bound::HistoryBytes => limits.history_bytes,
            Bound::ToolsPerRequest => limits.tools_per_request,
            Bound::ToolDescriptionBytes => limits.tool_description_bytes,
            Bound::ModelNameBytes => limits.model_name_bytes,
            Bound::JsonBytes => limits.json_bytes,
            Bound::JsonDepth => limits.json_depth,
            Bound::DeltaBytes => limits.delta_bytes,
            Bound::ToolCallsPerStream => limits.tool_calls_per_stream,
            Bound::MetadataNamespaces => limits.metadata_namespaces,
            Bound::MetadataKeys => limits.metadata_keys,
            Bound::MetadataDepth => limits.metadata_depth,
            Bound::MetadataBytes => limits.metadata_bytes,
            Bound::ProblemMessageBytes => limits.problem_message_bytes,
            Bound::OpaqueBytes => limits.opaque_bytes,
            Bound::ImageBytes => limits.image_bytes,
            Bound::FileBytes => limits.file_bytes,
            Bound::MediaPartsPerMessage => limits.media_parts_per_message,
        }
    }

    /// Checks `actual <= max`, returning the violation otherwise.
    pub fn check(self, limits: &Limits, actual: usize) -> Result<(), LimitExceeded> {
        let max = self.max(limits);
        if actual > max {
            Err(LimitExceeded {
                bound: self,
                actual,
                max,
            })
        } else {
            Ok(())
        }
    }
}

impl fmt::Display for Bound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.rule())
    }
}

/// A value was larger than its bound: which bound, how large it was, and
/// the configured maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{bound} exceeded: {actual} > {max}")]
pub struct LimitExceeded {
    /// The bound that was broken.
    pub bound: Bound,
    /// The offending size (bytes, count or depth, as the bound says).
    pub actual: usize,
    /// The configured maximum.
    pub max: usize,
}

/// Every tunable bound on messages, requests, JSON values and model streams.
///
/// Build it with struct update syntax from [`Limits::default()`]:
///
/// ```
/// let limits = keel_message::Limits { part_bytes: 64 * 1024, ..Default::default() };
/// assert_eq!(limits.parts_per_message, 64);
/// ```
///
/// Identifier rules (length and characters) are not here: they are part of
/// the wire format, the same on every host, so that a log written by one
/// host can always be read by another (see [`crate::ids`]).
///
/// Deserializing a value with serde enforces `Limits::default()`; use the
/// `*_with` constructors to apply other limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Content parts in one message. Default 64.
    pub parts_per_message: usize,
    /// Bytes in one part: text, canonical tool-call arguments, tool-result
    /// content, or reasoning text. Default 1 MiB.
    pub part_bytes: usize,
    /// Bytes across all parts of one message, decoded image and file bytes
    /// and reasoning opaque values included. Default 4 MiB.
    pub message_bytes: usize,
    /// Messages in one request's history. Default 4,096.
    pub history_messages: usize,
    /// Bytes across all messages of one request's history. Default 32 MiB.
    pub history_bytes: usize,
    /// Tool definitions in one request. Default 128.
    pub tools_per_request: usize,
    /// Bytes in one tool description. Default 8 KiB.
    pub tool_description_bytes: usize,
    /// Bytes in a model name. Default 256.
    pub model_name_bytes: usize,
    /// Bytes of one canonical JSON value (arguments, schemas). Default 1 MiB.
    pub json_bytes: usize,
    /// Nesting depth of one JSON value; a scalar has depth 0. Default 64.
    pub json_depth: usize,
    /// Bytes in one streamed text delta. Default 64 KiB.
    pub delta_bytes: usize,
    /// Finalized tool calls in one model stream. Default 128.
    pub tool_calls_per_stream: usize,
    /// Namespaces in one provider metadata value. Default 8.
    pub metadata_namespaces: usize,
    /// Keys across all namespaces of one provider metadata value, counted
    /// at every depth. Default 64.
    pub metadata_keys: usize,
    /// Nesting depth inside one metadata namespace. Default 4.
    pub metadata_depth: usize,
    /// Canonical bytes of one provider metadata value. Default 4 KiB.
    pub metadata_bytes: usize,
    /// Bytes in a provider problem message. Default 1 KiB.
    pub problem_message_bytes: usize,
    /// Bytes in one opaque provider value (a reasoning signature or a
    /// redacted reasoning part). Default 64 KiB.
    pub opaque_bytes: usize,
    /// Decoded bytes of one inline image. Default 1 MiB.
    pub image_bytes: usize,
    /// Decoded bytes of one file. Default 1 MiB.
    pub file_bytes: usize,
    /// Images and files in one message, tool-result images included.
    /// Default 16.
    pub media_parts_per_message: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            parts_per_message: 64,
            part_bytes: 1 << 20,
            message_bytes: 4 << 20,
            history_messages: 4096,
            history_bytes: 32 << 20,
            tools_per_request: 128,
            tool_description_bytes: 8 << 10,
            model_name_bytes: 256,
            json_bytes: 1 << 20,
            json_depth: 64,
            delta_bytes: 64 << 10,
            tool_calls_per_stream: 128,
            metadata_namespaces: 8,
            metadata_keys: 64,
            metadata_depth: 4,
            metadata_bytes: 4 << 10,
            problem_message_bytes: 1 << 10,
            opaque_bytes: 64 << 10,
            image_bytes: 1 << 20,
            file_bytes: 1 << 20,
            media_parts_per_message: 16,
        }
    }
}

impl Limits {
    /// The shared default limits, for places (serde) that cannot take a
    /// configuration.
    pub fn default_ref() -> &'static Limits {
        static DEFAULT: std::sync::OnceLock<Limits> = std::sync::OnceLock::new();
        DEFAULT.get_or_init(Limits::default)
    }
}
