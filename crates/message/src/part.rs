//! Content parts: text, tool calls and results, reasoning, images and
//! files, each validated when built.

use crate::canonical::CanonicalJson;
use crate::error::{MessageError, MessageErrorKind};
use crate::file::FilePart;
use crate::file_name::FileName;
use crate::ids::CallId;
use crate::image::ImagePart;
use crate::limits::{Bound, Limits};
use crate::media_type::FileMediaType;
use crate::names::ToolName;
use crate::opaque::OpaqueValue;
use crate::provider_tag::ProviderTag;
use crate::reasoning::ReasoningPart;
use std::sync::Arc;

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
    images: Arc<[ImagePart]>,
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
    /// The images the tool returned with its content (often none).
    pub fn images(&self) -> &[ImagePart] {
        &self.images
    }

    /// Re-checks the bounds: content within `part_bytes`, each image within
    /// `image_bytes`, at most `media_parts_per_message` images.
    fn revalidate(&self, limits: &Limits) -> Result<(), MessageError> {
        Bound::PartBytes
            .check(limits, self.content.len())
            .map_err(|e| MessageError::new("$.content", e))?;
        Bound::MediaPartsPerMessage
            .check(limits, self.images.len())
            .map_err(|e| MessageError::new("$.images", e))?;
        for (i, image) in self.images.iter().enumerate() {
            image
                .revalidate(limits)
                .map_err(|e| e.within(&format!("$.images[{i}]")))?;
        }
        Ok(())
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
    /// A tool result (tool messages only), perhaps with images.
    ToolResult(ToolResultPart),
    /// A model's reasoning (assistant messages only).
    Reasoning(ReasoningPart),
    /// An image (user messages only; a tool's images go in its result).
    Image(ImagePart),
    /// A file (user messages only).
    File(FilePart),
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
        Self::tool_result_with_images(call_id, content, is_error, Vec::new(), limits)
    }

    /// A tool result part with images: content of at most
    /// `limits.part_bytes`, at most `limits.media_parts_per_message` images,
    /// each within `limits.image_bytes`.
    pub fn tool_result_with_images(
        call_id: CallId,
        content: &str,
        is_error: bool,
        images: Vec<ImagePart>,
        limits: &Limits,
    ) -> Result<Part, MessageError> {
        let result = ToolResultPart {
            call_id,
            content: Arc::from(content),
            is_error,
            images: images.into(),
        };
        result.revalidate(limits)?;
        Ok(Part::ToolResult(result))
    }

    /// A reasoning part under the default limits.
    pub fn reasoning(
        provider: ProviderTag,
        text: &str,
        signature: Option<OpaqueValue>,
    ) -> Result<Part, MessageError> {
        Self::reasoning_with(provider, text, signature, Limits::default_ref())
    }

    /// A reasoning part: see [`ReasoningPart::new_with`].
    pub fn reasoning_with(
        provider: ProviderTag,
        text: &str,
        signature: Option<OpaqueValue>,
        limits: &Limits,
    ) -> Result<Part, MessageError> {
        ReasoningPart::new_with(provider, text, signature, limits).map(Part::Reasoning)
    }

    /// A redacted reasoning part: only the provider's opaque value.
    pub fn redacted_reasoning(provider: ProviderTag, value: OpaqueValue) -> Part {
        Part::Reasoning(ReasoningPart::new_redacted(provider, value))
    }

    /// An image part.
    pub fn image(image: ImagePart) -> Part {
        Part::Image(image)
    }

    /// A file part under the default limits.
    pub fn file(media_type: FileMediaType, name: &str, bytes: &[u8]) -> Result<Part, MessageError> {
        Self::file_with(media_type, name, bytes, Limits::default_ref())
    }

    /// A file part: a valid name (rule `message.file_name`), bytes within
    /// `limits.file_bytes` that match the media type (see [`FilePart`]).
    pub fn file_with(
        media_type: FileMediaType,
        name: &str,
        bytes: &[u8],
        limits: &Limits,
    ) -> Result<Part, MessageError> {
        let name = FileName::parse(name).map_err(|e| e.within("$.name"))?;
        FilePart::new_with(media_type, name, bytes, limits).map(Part::File)
    }

    /// The wire name of the part kind: `text`, `tool_call`, `tool_result`,
    /// `reasoning`, `image` or `file`.
    pub fn kind(&self) -> &'static str {
        match self {
            Part::Text(_) => "text",
            Part::ToolCall(_) => "tool_call",
            Part::ToolResult(_) => "tool_result",
            Part::Reasoning(_) => "reasoning",
            Part::Image(_) => "image",
            Part::File(_) => "file",
        }
    }

    /// The bytes this part counts against `message_bytes`: text, canonical
    /// arguments, result content, reasoning text and opaque values, and
    /// decoded image and file bytes (image URLs count their length).
    pub fn content_bytes(&self) -> usize {
        match self {
            Part::Text(p) => p.text.len(),
            Part::ToolCall(p) => p.arguments.len(),
            Part::ToolResult(p) => p.images.iter().fold(p.content.len(), |sum, image| {
                sum.saturating_add(image.content_bytes())
            }),
            Part::Reasoning(p) => p.content_bytes(),
            Part::Image(p) => p.content_bytes(),
            Part::File(p) => p.bytes().len(),
        }
    }

    /// How many images and files this part holds, against
    /// `media_parts_per_message`.
    pub fn media_count(&self) -> usize {
        match self {
            Part::Image(_) | Part::File(_) => 1,
            Part::ToolResult(p) => p.images.len(),
            Part::Text(_) | Part::ToolCall(_) | Part::Reasoning(_) => 0,
        }
    }

    /// Re-checks the configuration-dependent bounds of this part (it may
    /// have been built under other limits).
    pub(crate) fn revalidate(&self, limits: &Limits) -> Result<(), MessageError> {
        let part_bytes = |actual: usize, path: &str| {
            Bound::PartBytes
                .check(limits, actual)
                .map_err(|e| MessageError::new(path, e))
        };
        match self {
            Part::Text(p) => part_bytes(p.text.len(), "$.text"),
            Part::ToolCall(p) => part_bytes(p.arguments.len(), "$.arguments"),
            Part::ToolResult(p) => p.revalidate(limits),
            Part::Reasoning(p) => p.revalidate(limits),
            Part::Image(p) => p.revalidate(limits),
            Part::File(p) => p.revalidate(limits),
        }
    }
}
