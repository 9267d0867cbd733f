//! The Chat Completions request body: history as `messages`
//! (`content.rs`), tools as functions, `stream` with usage.

use super::OpenAiOptions;
use super::content::messages;
use keel_message::ModelRequest;
use serde_json::{Map, Value, json};

/// The request body for `request`.
pub(super) fn request_body(request: &ModelRequest, options: &OpenAiOptions) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model().as_str()));
    body.insert(
        "messages".into(),
        Value::Array(
            request
                .history()
                .iter()
                .flat_map(|message| messages(message, options.send_reasoning))
                .collect(),
        ),
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
    if let Some(max) = options.max_completion_tokens {
        body.insert("max_completion_tokens".into(), json!(max));
    }
    body.insert("stream".into(), json!(true));
    body.insert("stream_options".into(), json!({"include_usage": true}));
    Value::Object(body)
}
