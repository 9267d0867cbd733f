//! The `generateContent` request body: system messages joined into
//! `systemInstruction`, the other messages as `contents` (`content.rs`;
//! consecutive messages of one role merged, as the API pairs a turn's
//! function responses in one content), tools as `functionDeclarations`,
//! and the `generationConfig` the options set.

use super::GeminiOptions;
use super::content::{call_names, content_parts};
use keel_message::{Message, ModelRequest, Role};
use serde_json::{Map, Value, json};

/// The request body for `request`.
pub(super) fn request_body(request: &ModelRequest, options: &GeminiOptions) -> Value {
    let mut body = Map::new();
    body.insert("contents".into(), Value::Array(contents(request.history())));
    let system: Vec<String> = request
        .history()
        .iter()
        .filter(|m| m.role() == Role::System)
        .map(Message::joined_text)
        .collect();
    if !system.is_empty() {
        body.insert(
            "systemInstruction".into(),
            json!({"parts": [{"text": system.join("\n\n")}]}),
        );
    }
    if !request.tools().is_empty() {
        let declarations: Vec<Value> = request
            .tools()
            .iter()
            .map(|tool| {
                let mut out = Map::new();
                out.insert("name".into(), json!(tool.name().as_str()));
                if !tool.description().is_empty() {
                    out.insert("description".into(), json!(tool.description()));
                }
                // JSON Schema as written (`parameters` takes only the
                // OpenAPI subset, which refuses e.g. `additionalProperties`).
                out.insert("parametersJsonSchema".into(), tool.parameters().to_value());
                Value::Object(out)
            })
            .collect();
        body.insert(
            "tools".into(),
            json!([{ "functionDeclarations": declarations }]),
        );
    }
    if let Some(config) = generation_config(options) {
        body.insert("generationConfig".into(), config);
    }
    Value::Object(body)
}

/// `contents`: one `{role, parts}` per message, consecutive ones of the
/// same role merged; a message with nothing to send is left out (the API
/// refuses empty `parts`).
fn contents(history: &[Message]) -> Vec<Value> {
    let names = call_names(history);
    let mut out: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for message in history.iter().filter(|m| m.role() != Role::System) {
        let role = match message.role() {
            Role::Assistant => "model",
            // Function responses travel in a user content.
            Role::User | Role::Tool | Role::System => "user",
        };
        let parts = content_parts(message, &names);
        if parts.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some((last, merged)) if *last == role => merged.extend(parts),
            _ => out.push((role, parts)),
        }
    }
    out.into_iter()
        .map(|(role, parts)| json!({"role": role, "parts": parts}))
        .collect()
}

/// `generationConfig`, when an option sets something.
fn generation_config(options: &GeminiOptions) -> Option<Value> {
    let mut config = Map::new();
    if let Some(max) = options.max_output_tokens {
        config.insert("maxOutputTokens".into(), json!(max));
    }
    let mut thinking = Map::new();
    if let Some(budget) = options.thinking_budget_tokens {
        thinking.insert("thinkingBudget".into(), json!(budget));
    }
    if options.include_thoughts {
        thinking.insert("includeThoughts".into(), json!(true));
    }
    if !thinking.is_empty() {
        config.insert("thinkingConfig".into(), Value::Object(thinking));
    }
    (!config.is_empty()).then_some(Value::Object(config))
}
