//! The Chat Completions request body: history as `messages` (a tool
//! message becomes one `role: tool` message per result), tools as
//! functions, `stream` with usage.

use keel_message::{Message, ModelRequest, Part, Role};
use serde_json::{Map, Value, json};

/// The request body for `request`.
pub(super) fn request_body(request: &ModelRequest, max_completion_tokens: Option<u32>) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model().as_str()));
    body.insert(
        "messages".into(),
        Value::Array(request.history().iter().flat_map(messages).collect()),
    );
    if !request.tools().is_empty() {
        let tools = request
            .tools()
            .iter()
            .map(|tool| {
                let mut function = Map::new();
                function.insert("name".into(), json!(tool.name().as_str()));
                if !tool.description().is_empty() {
                    function.insert("description".into(), json!(tool.description()));
                }
                function.insert("parameters".into(), tool.parameters().to_value());
                json!({"type": "function", "function": function})
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(max) = max_completion_tokens {
        body.insert("max_completion_tokens".into(), json!(max));
    }
    body.insert("stream".into(), json!(true));
    body.insert("stream_options".into(), json!({"include_usage": true}));
    Value::Object(body)
}

/// One Keel message as Chat Completions messages (a tool message becomes
/// one `role: tool` message per result).
fn messages(message: &Message) -> Vec<Value> {
    match message.role() {
        Role::System => vec![json!({"role": "system", "content": message.joined_text()})],
        Role::User => vec![json!({"role": "user", "content": message.joined_text()})],
        Role::Assistant => {
            let text = message.joined_text();
            let calls: Vec<Value> = message
                .tool_calls()
                .map(|call| {
                    json!({
                        "id": call.call_id().as_str(),
                        "type": "function",
                        "function": {"name": call.name().as_str(), "arguments": call.arguments().as_str()},
                    })
                })
                .collect();
            let mut out = Map::new();
            out.insert("role".into(), json!("assistant"));
            out.insert(
                "content".into(),
                if text.is_empty() {
                    Value::Null
                } else {
                    json!(text)
                },
            );
            if !calls.is_empty() {
                out.insert("tool_calls".into(), Value::Array(calls));
            }
            vec![Value::Object(out)]
        }
        Role::Tool => message
            .parts()
            .iter()
            .filter_map(|part| match part {
                Part::ToolResult(result) => Some(json!({
                    "role": "tool",
                    "tool_call_id": result.call_id().as_str(),
                    "content": result.content(),
                })),
                _ => None,
            })
            .collect(),
    }
}
