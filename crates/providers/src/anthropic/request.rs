//! The Messages request body: system messages joined into `system`,
//! content blocks for text, `tool_use` and `tool_result`, tools with their
//! input schema.

use keel_message::{Message, ModelRequest, Part, Role};
use serde_json::{Map, Value, json};

/// The request body for `request`.
pub(super) fn request_body(request: &ModelRequest, max_tokens: u32) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model().as_str()));
    body.insert("max_tokens".into(), json!(max_tokens));
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
        .map(message)
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

/// One Keel message (not a system one) as a Messages API message.
fn message(message: &Message) -> Value {
    let role = match message.role() {
        Role::Assistant => "assistant",
        // Tool results travel in a user message.
        Role::User | Role::Tool | Role::System => "user",
    };
    let content: Vec<Value> = message
        .parts()
        .iter()
        .filter_map(|part| match part {
            Part::Text(text) => Some(json!({"type": "text", "text": text.text()})),
            Part::ToolCall(call) => Some(json!({
                "type": "tool_use",
                "id": call.call_id().as_str(),
                "name": call.name().as_str(),
                "input": call.arguments().to_value(),
            })),
            Part::ToolResult(result) => {
                let mut block = Map::new();
                block.insert("type".into(), json!("tool_result"));
                block.insert("tool_use_id".into(), json!(result.call_id().as_str()));
                block.insert("content".into(), json!(result.content()));
                if result.is_error() {
                    block.insert("is_error".into(), json!(true));
                }
                Some(Value::Object(block))
            }
            // Not sent yet: the providers branch of #34 maps reasoning,
            // images and files to their Messages API blocks.
            Part::Reasoning(_) | Part::Image(_) | Part::File(_) => None,
        })
        .collect();
    json!({"role": role, "content": content})
}
