#![allow(clippy::unwrap_used, dead_code)]
//! Script and request helpers shared by the engine's integration tests.

use keel_engine::RunRequest;
use keel_message::{Message, MessageId, ModelName, Role, RunId};
use keel_stream::FinishReason;
use keel_testkit::ScriptItem;
use serde_json::json;

/// A run `id` of model `scripted-1` whose history is one user "go".
pub fn request(id: &str) -> RunRequest {
    RunRequest::new(
        RunId::parse(id).unwrap(),
        ModelName::parse("scripted-1").unwrap(),
        vec![Message::text(MessageId::parse("u1").unwrap(), Role::User, "go").unwrap()],
    )
}

/// A tool call `id` of `tool` with no arguments.
pub fn call(id: &str, tool: &str) -> ScriptItem {
    ScriptItem::tool_call(id, tool, json!({}))
}

/// One model call making `items` (tool calls) and finishing for tools.
pub fn calls(items: Vec<ScriptItem>) -> Vec<ScriptItem> {
    let mut items = items;
    items.push(ScriptItem::complete(FinishReason::ToolCalls));
    items
}

/// One model call answering "ok".
pub fn done() -> Vec<ScriptItem> {
    vec![
        ScriptItem::text("ok"),
        ScriptItem::complete(FinishReason::Stop),
    ]
}
