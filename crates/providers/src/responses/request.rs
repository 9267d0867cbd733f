//! The Responses request body: the whole history as `input`
//! (`input.rs`), tools as flat `function` tools, and the stateless
//! settings: `store: false`, `stream: true`, and
//! `include: ["reasoning.encrypted_content"]` so that reasoning items
//! come back sealed and can be sent back.

use super::ResponsesOptions;
use super::input::input_items;
use keel_message::ModelRequest;
use serde_json::{Map, Value, json};

/// The request body for `request`.
pub(super) fn request_body(request: &ModelRequest, options: &ResponsesOptions) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model().as_str()));
    body.insert(
        "input".into(),
        Value::Array(request.history().iter().flat_map(input_items).collect()),
    );
    if !request.tools().is_empty() {
        let tools = request
            .tools()
            .iter()
            .map(|tool| {
                let mut function = Map::new();
                function.insert("type".into(), json!("function"));
                function.insert("name".into(), json!(tool.name().as_str()));
                if !tool.description().is_empty() {
                    function.insert("description".into(), json!(tool.description()));
                }
                function.insert("parameters".into(), tool.parameters().to_value());
                // The API's default is strict, which refuses schemas
                // without `additionalProperties: false` on every object.
                function.insert("strict".into(), json!(false));
                Value::Object(function)
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(max) = options.max_output_tokens {
        body.insert("max_output_tokens".into(), json!(max));
    }
    if let Some(effort) = options.reasoning_effort {
        body.insert(
            "reasoning".into(),
            json!({"effort": effort.as_str(), "summary": "auto"}),
        );
    }
    body.insert("store".into(), json!(false));
    body.insert("stream".into(), json!(true));
    body.insert("include".into(), json!(["reasoning.encrypted_content"]));
    Value::Object(body)
}
