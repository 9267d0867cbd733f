//! Builds a validated model request the way a host does for one turn, prints
//! it as canonical JSON, and shows a rejected input with its typed error.
#![allow(clippy::print_stdout)]

use keel_message::*;
use std::sync::Arc;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let limits = Limits::default();
    let mut operations = OperationIdIssuer::new();
    let history: Arc<[Message]> = vec![
        Message::text(MessageId::parse("m1")?, Role::System, "Answer briefly.")?,
        Message::text(MessageId::parse("m2")?, Role::User, "Weather in Oslo?")?,
    ]
    .into();
    let tools: Arc<[ToolDefinition]> = vec![ToolDefinition::new(
        ToolName::parse("get_weather")?,
        "Current weather for a city",
        CanonicalJson::parse(
            r#"{"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}"#,
        )?,
    )?]
    .into();
    let request = ModelRequest::new_with(
        operations.issue(),
        ModelName::parse("scripted-1")?,
        history,
        tools,
        &limits,
    )?;
    let canonical = CanonicalJson::from_value(&serde_json::to_value(&request)?)?;
    println!("{canonical}");

    // A user message may not carry a tool call: the error names the rule and the path.
    let call = Part::tool_call(
        CallId::parse("c1")?,
        ToolName::parse("get_weather")?,
        CanonicalJson::parse(r#"{"city":"Oslo"}"#)?,
    )?;
    match Message::new(MessageId::parse("m3")?, Role::User, vec![call]) {
        Ok(_) => println!("unexpectedly accepted"),
        Err(e) => println!("rejected: {e} [{}]", e.kind().rule()),
    }
    Ok(())
}
