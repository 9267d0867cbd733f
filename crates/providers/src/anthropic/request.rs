//! The Messages request body: system messages joined into `system`, the
//! thinking configuration, the other messages as content blocks
//! (`content.rs`), tools with their input schema.

use super::AnthropicOptions;
use super::content::content_blocks;
use keel_message::{Message, ModelRequest, Role};
use serde_json::{Map, Value, json};

/// The request body for `request`.
pub(super) fn request_body(request: &ModelRequest, options: &AnthropicOptions) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model().as_str()));
    body.insert("max_tokens".into(), json!(options.max_tokens));
    if let Some(budget) = options.thinking_budget_tokens {
        body.insert(
            "thinking".into(),
            json!({"type": "enabled", "budget_tokens": budget}),
        );
    }
    let system: Vec<String> = request
        .history()
        .iter()
        .filter(|m| m.role() == Role::System)
        .map(Message::joined_text)
        .collect();
    if !system.is_empty() {
        body.insert("system".into(), json!(system.join("\n\n")));
    }
    let messages: Vec<Value> = request
        .history()
        .iter()
        .filter(|m| m.role() != Role::System)
        .filter_map(message)
        .collect();
    body.insert("messages".into(), Value::Array(messages));
    if !request.tools().is_empty() {
        let tools = request
            .tools()
            .iter()
            .map(|tool| {
                let mut out = Map::new();
                out.insert("name".into(), json!(tool.name().as_str()));
                if !tool.description().is_empty() {
                    out.insert("description".into(), json!(tool.description()));
                }
                out.insert("input_schema".into(), tool.parameters().to_value());
                Value::Object(out)
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    body.insert("stream".into(), json!(true));
    Value::Object(body)
}

/// One Keel message (not a system one) as a Messages API message; `None`
/// when nothing of it can be sent (an assistant message holding only
/// reasoning another provider produced).
fn message(message: &Message) -> Option<Value> {
    let role = match message.role() {
        Role::Assistant => "assistant",
        // Tool results travel in a user message.
        Role::User | Role::Tool | Role::System => "user",
    };
    let content = content_blocks(message.parts());
    (!content.is_empty()).then(|| json!({"role": role, "content": content}))
}
