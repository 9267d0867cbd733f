//! The wire shapes of parts: `{"type": "text" | "tool_call" |
//! "tool_result" | "reasoning" | "image" | "file", …}`, serialized
//! canonically and decoded strictly, each rule reporting its member's path.

use crate::canonical::CanonicalJson;
use crate::error::MessageError;
use crate::file::{FileOut, FileWire};
use crate::ids::CallId;
use crate::image::{ImageOut, ImagePart, ImageWire};
use crate::limits::{Bound, Limits};
use crate::names::ToolName;
use crate::part::Part;
use crate::reasoning::{ReasoningOut, ReasoningWire};
use serde::{Deserialize, Serialize};

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
        #[serde(skip_serializing_if = "<[_]>::is_empty")]
        images: &'a [ImagePart],
    },
    Reasoning(ReasoningOut<'a>),
    Image(ImageOut<'a>),
    File(FileOut<'a>),
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
        #[serde(default)]
        images: Vec<ImageWire>,
    },
    Reasoning(ReasoningWire),
    Image(ImageWire),
    File(FileWire),
}

impl PartWire {
    /// Images and files in this part, counted before anything is decoded.
    pub(crate) fn media_count(&self) -> usize {
        match self {
            PartWire::Image(_) | PartWire::File(_) => 1,
            PartWire::ToolResult { images, .. } => images.len(),
            PartWire::Text { .. } | PartWire::ToolCall { .. } | PartWire::Reasoning(_) => 0,
        }
    }

    pub(crate) fn build(self, limits: &Limits) -> Result<Part, MessageError> {
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
                images,
            } => {
                let images = build_images(images, limits)?;
                Part::tool_result_with_images(call_id, &content, is_error, images, limits)
            }
            PartWire::Reasoning(wire) => wire.build(limits).map(Part::Reasoning),
            PartWire::Image(wire) => wire.build(limits).map(Part::Image),
            PartWire::File(wire) => wire.build(limits).map(Part::File),
        }
    }
}

impl Serialize for Part {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Part::Text(p) => PartOut::Text { text: p.text() },
            Part::ToolCall(p) => PartOut::ToolCall {
                call_id: p.call_id(),
                name: p.name(),
                arguments: p.arguments(),
            },
            Part::ToolResult(p) => PartOut::ToolResult {
                call_id: p.call_id(),
                content: p.content(),
                is_error: p.is_error(),
                images: p.images(),
            },
            Part::Reasoning(p) => PartOut::Reasoning(p.into()),
            Part::Image(p) => PartOut::Image(p.into()),
            Part::File(p) => PartOut::File(p.into()),
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

/// Builds a tool result's images, checking their count before decoding any.
fn build_images(images: Vec<ImageWire>, limits: &Limits) -> Result<Vec<ImagePart>, MessageError> {
    Bound::MediaPartsPerMessage
        .check(limits, images.len())
        .map_err(|e| MessageError::new("$.images", e))?;
    images
        .into_iter()
        .enumerate()
        .map(|(i, image)| {
            image
                .build(limits)
                .map_err(|e| e.within(&format!("$.images[{i}]")))
        })
        .collect()
}
