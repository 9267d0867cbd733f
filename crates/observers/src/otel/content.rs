//! Opt-in content: the GenAI conventions' message attributes, every text
//! screened for secrets and bounded before it is built into one.
//!
//! Nothing here runs unless [`OtelConfig::record_content`](super::OtelConfig)
//! is set: with content off no text is even buffered.

use keel_message::{Message, Part};
use keel_stream::secrets::screen_and_bound;
use serde_json::{Value, json};

/// The most bytes of one text kept in a content attribute (after
/// screening; longer text is cut at a char boundary).
pub const MAX_CONTENT_BYTES: usize = 64 * 1024;

/// The most messages or tool calls kept in one content attribute.
pub const MAX_CONTENT_ITEMS: usize = 64;

/// Screens and bounds one text.
pub(super) fn screened(text: &str) -> String {
    screen_and_bound(text, MAX_CONTENT_BYTES).into_text()
}

/// A tool call the model asked for, as the conventions' `tool_call` part.
#[derive(Debug, Clone)]
pub(super) struct ToolCallContent {
    pub(super) id: String,
    pub(super) name: String,
    pub(super) arguments: String,
}

/// What a model call answered, gathered from its deltas and tool calls.
#[derive(Debug, Default)]
pub(super) struct OutputContent {
    text: String,
    tool_calls: Vec<ToolCallContent>,
}

impl OutputContent {
    /// Appends a text delta, up to [`MAX_CONTENT_BYTES`] in all (screening
    /// happens once, over the whole text, so a secret split across deltas
    /// is still found).
    pub(super) fn push_text(&mut self, delta: &str) {
        let room = MAX_CONTENT_BYTES.saturating_sub(self.text.len());
        let mut cut = delta.len().min(room);
        while !delta.is_char_boundary(cut) {
            cut -= 1;
        }
        self.text.push_str(&delta[..cut]);
    }

    /// Records a tool call (its arguments screened at once).
    pub(super) fn push_tool_call(&mut self, call: ToolCallContent) {
        if self.tool_calls.len() < MAX_CONTENT_ITEMS {
            self.tool_calls.push(call);
        }
    }

    /// `gen_ai.output.messages`: one assistant message.
    pub(super) fn to_attribute(&self, finish_reason: &str) -> String {
        let mut parts = Vec::new();
        if !self.text.is_empty() {
            parts.push(json!({"type": "text", "content": screened(&self.text)}));
        }
        for call in &self.tool_calls {
            parts.push(json!({
                "type": "tool_call",
                "id": call.id,
                "name": call.name,
                "arguments": call.arguments,
            }));
        }
        let message = json!({"role": "assistant", "parts": parts, "finish_reason": finish_reason});
        Value::Array(vec![message]).to_string()
    }
}

/// The messages a run was given (`run.input`), for `gen_ai.input.messages`.
#[derive(Debug, Default)]
pub(super) struct InputContent {
    messages: Vec<Value>,
}

impl InputContent {
    /// Records one input message: its text parts, screened; other parts
    /// (images, files, tool results) are named by type only.
    pub(super) fn push(&mut self, message: &Message) {
        if self.messages.len() >= MAX_CONTENT_ITEMS {
            return;
        }
        let parts: Vec<Value> = message
            .parts()
            .iter()
            .map(|part| match part {
                Part::Text(t) => json!({"type": "text", "content": screened(t.text())}),
                Part::ToolCall(_) => json!({"type": "tool_call"}),
                Part::ToolResult(_) => json!({"type": "tool_call_response"}),
                Part::Reasoning(_) => json!({"type": "reasoning"}),
                Part::Image(_) => json!({"type": "image"}),
                Part::File(_) => json!({"type": "file"}),
            })
            .collect();
        self.messages
            .push(json!({"role": message.role().as_str(), "parts": parts}));
    }

    /// Whether no message was recorded.
    pub(super) fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// `gen_ai.input.messages`.
    pub(super) fn to_attribute(&self) -> String {
        Value::Array(self.messages.clone()).to_string()
    }
}
