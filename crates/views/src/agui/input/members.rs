//! The members of a `RunAgentInput` beside its messages: the ids, the
//! frontend tools, the context, the resume entries, and the members
//! accepted but not used.

use super::{
    AguiRunId, ContextEntry, FrontendToolSpec, InputError, InputLimits, InteractionDecisionWire,
    ResumeAnswer, member,
};
use keel_eventlog::ChatId;
use keel_message::{CanonicalJson, InteractionId, ToolDefinition, ToolName};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The parameters a tool declared without any get: any object.
const ANY_OBJECT: &str = r#"{"type":"object"}"#;

/// The client id rule: 1 to `max` bytes, no control characters. The
/// error is the detail (a length or an offset, never the text).
pub(super) fn check_client_id(text: &str, max: usize) -> Result<(), String> {
    if text.is_empty() || text.len() > max {
        return Err(format!("1 to {max} bytes, not {}", text.len()));
    }
    match text.char_indices().find(|(_, c)| c.is_control()) {
        Some((offset, _)) => Err(format!("no control characters (one at byte {offset})")),
        None => Ok(()),
    }
}

/// A required string member.
fn required_string<'a>(
    root: &'a Map<String, Value>,
    name: &str,
    rule: &'static str,
) -> Result<&'a str, InputError> {
    match root.get(name) {
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(InputError::new(name, rule, "a string")),
        None => Err(InputError::new(name, rule, "a string (required)")),
    }
}

/// An optional string member of `object` at `path`.
pub(super) fn optional_string<'a>(
    object: &'a Map<String, Value>,
    name: &str,
    path: &str,
    rule: &'static str,
) -> Result<Option<&'a str>, InputError> {
    match member(object, name) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(InputError::new(format!("{path}{name}"), rule, "a string")),
    }
}

/// An optional array member, at most `max` long.
fn bounded_array<'a>(
    root: &'a Map<String, Value>,
    name: &str,
    max: usize,
    rule: &'static str,
) -> Result<&'a [Value], InputError> {
    match member(root, name) {
        None => Ok(&[]),
        Some(Value::Array(items)) if items.len() <= max => Ok(items),
        Some(Value::Array(items)) => Err(InputError::new(
            name,
            rule,
            format!("at most {max} entries, not {}", items.len()),
        )),
        Some(_) => Err(InputError::new(name, rule, "an array")),
    }
}

/// An array element as an object.
fn element<'a>(
    value: &'a Value,
    path: &str,
    rule: &'static str,
) -> Result<&'a Map<String, Value>, InputError> {
    value
        .as_object()
        .ok_or_else(|| InputError::new(path, rule, "an object"))
}

/// `threadId`: a Keel conversation id.
pub(super) fn thread_id(root: &Map<String, Value>) -> Result<ChatId, InputError> {
    const RULE: &str = "agui.input.thread_id";
    let text = required_string(root, "threadId", RULE)?;
    ChatId::parse(text).map_err(|e| {
        InputError::new(
            "threadId",
            RULE,
            format!(
                "a conversation id: 1 to 64 bytes of [A-Za-z0-9_-] ({})",
                e.rule()
            ),
        )
    })
}

/// `runId`: the client's run id.
pub(super) fn run_id(
    root: &Map<String, Value>,
    limits: &InputLimits,
) -> Result<AguiRunId, InputError> {
    const RULE: &str = "agui.input.run_id";
    let text = required_string(root, "runId", RULE)?;
    let max = limits.max_id_bytes.min(super::AGUI_ID_MAX_BYTES);
    check_client_id(text, max).map_err(|detail| InputError::new("runId", RULE, detail))?;
    AguiRunId::parse(text).map_err(|detail| InputError::new("runId", RULE, detail))
}

/// The members accepted and not used: `parentRunId` and
/// `protocolVersion` (bounded strings), `state` and `forwardedProps`
/// (bounded JSON values).
pub(super) fn accepted_unused(
    root: &Map<String, Value>,
    limits: &InputLimits,
) -> Result<(), InputError> {
    for name in ["parentRunId", "protocolVersion"] {
        const RULE: &str = "agui.input.client_id";
        if let Some(text) = optional_string(root, name, "", RULE)? {
            check_client_id(text, limits.max_id_bytes)
                .map_err(|detail| InputError::new(name, RULE, detail))?;
        }
    }
    for name in ["state", "forwardedProps"] {
        if let Some(value) = member(root, name) {
            opaque_size(value, name, limits)?;
        }
    }
    Ok(())
}

/// The canonical size of an opaque value, at most `max_opaque_bytes`.
fn opaque_size(
    value: &Value,
    path: &str,
    limits: &InputLimits,
) -> Result<CanonicalJson, InputError> {
    const RULE: &str = "agui.input.opaque_bytes";
    let canonical = CanonicalJson::from_value_with(value, &limits.message)
        .map_err(|e| InputError::new(path, e.rule(), "canonical JSON"))?;
    if canonical.len() > limits.max_opaque_bytes {
        return Err(InputError::new(
            path,
            RULE,
            format!(
                "at most {} canonical JSON bytes, not {}",
                limits.max_opaque_bytes,
                canonical.len()
            ),
        ));
    }
    Ok(canonical)
}

/// `tools`: the frontend tools, names unique.
pub(super) fn tools(
    root: &Map<String, Value>,
    limits: &InputLimits,
) -> Result<Vec<FrontendToolSpec>, InputError> {
    const RULE: &str = "agui.input.tools";
    let items = bounded_array(root, "tools", limits.max_tools, RULE)?;
    let mut names = BTreeMap::new();
    let mut tools = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let at = format!("tools[{i}]");
        let tool = element(item, &at, RULE)?;
        let tool = frontend_tool(tool, &at, limits)?;
        if let Some(earlier) = names.insert(tool.name().clone(), i) {
            return Err(InputError::new(
                format!("{at}.name"),
                "agui.input.tool_name_unique",
                format!("a name no earlier tool has (tools[{earlier}] has it)"),
            ));
        }
        tools.push(tool);
    }
    Ok(tools)
}

/// One declared tool at `at`.
fn frontend_tool(
    tool: &Map<String, Value>,
    at: &str,
    limits: &InputLimits,
) -> Result<FrontendToolSpec, InputError> {
    const RULE: &str = "agui.input.tools";
    let name = match tool.get("name") {
        Some(Value::String(name)) => ToolName::parse(name).map_err(|e| {
            InputError::new(format!("{at}.name"), e.kind().rule(), e.kind().to_string())
        })?,
        _ => return Err(InputError::new(format!("{at}.name"), RULE, "a string")),
    };
    let Some(Value::String(description)) = tool.get("description") else {
        return Err(InputError::new(
            format!("{at}.description"),
            RULE,
            "a string",
        ));
    };
    let path = format!("{at}.parameters");
    let parameters = match member(tool, "parameters") {
        Some(value) => opaque_size(value, &path, limits)?,
        None => CanonicalJson::parse(ANY_OBJECT)
            .map_err(|e| InputError::new(&path, e.rule(), "canonical JSON"))?,
    };
    let definition = ToolDefinition::new_with(name, description, parameters, &limits.message)
        .map_err(|e| {
            let member = if e.path() == "$.description" {
                "description"
            } else {
                "parameters"
            };
            InputError::new(
                format!("{at}.{member}"),
                e.kind().rule(),
                e.kind().to_string(),
            )
        })?;
    Ok(FrontendToolSpec { definition })
}

/// `context`: `{description, value}` string pairs.
pub(super) fn context(
    root: &Map<String, Value>,
    limits: &InputLimits,
) -> Result<Vec<ContextEntry>, InputError> {
    const RULE: &str = "agui.input.context";
    let items = bounded_array(root, "context", limits.max_context, RULE)?;
    let mut entries = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let at = format!("context[{i}]");
        let entry = element(item, &at, RULE)?;
        let text = |name: &str| match entry.get(name) {
            Some(Value::String(s)) => Ok(s.clone()),
            _ => Err(InputError::new(format!("{at}.{name}"), RULE, "a string")),
        };
        entries.push(ContextEntry {
            description: text("description")?,
            value: text("value")?,
        });
    }
    Ok(entries)
}

/// `resume`: each entry answers one pending approval, each interrupt once.
pub(super) fn resume(
    root: &Map<String, Value>,
    limits: &InputLimits,
) -> Result<Vec<ResumeAnswer>, InputError> {
    const RULE: &str = "agui.input.resume";
    let items = bounded_array(root, "resume", limits.max_resume, RULE)?;
    let mut answers: Vec<ResumeAnswer> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let at = format!("resume[{i}]");
        let entry = element(item, &at, RULE)?;
        let answer = resume_entry(entry, &at, i)?;
        if let Some(earlier) = answers
            .iter()
            .find(|a| a.interrupt_id == answer.interrupt_id)
        {
            return Err(InputError::new(
                format!("{at}.interruptId"),
                "agui.input.resume_unique",
                format!(
                    "an interrupt no earlier entry answers (resume[{}] does)",
                    earlier.index
                ),
            ));
        }
        answers.push(answer);
    }
    Ok(answers)
}

/// One resume entry at `at`: `resolved` with `payload.approved`, or
/// `cancelled`.
fn resume_entry(
    entry: &Map<String, Value>,
    at: &str,
    index: usize,
) -> Result<ResumeAnswer, InputError> {
    const RULE: &str = "agui.input.resume";
    let interrupt_id = match entry.get("interruptId") {
        Some(Value::String(id)) => InteractionId::parse(id).map_err(|e| {
            InputError::new(
                format!("{at}.interruptId"),
                e.rule(),
                "an interaction id (an interrupt this endpoint sent)",
            )
        })?,
        _ => {
            return Err(InputError::new(
                format!("{at}.interruptId"),
                RULE,
                "a string",
            ));
        }
    };
    let decision = match entry.get("status").and_then(Value::as_str) {
        Some("cancelled") => InteractionDecisionWire::Denied,
        Some("resolved") => match member(entry, "payload").and_then(|p| p.get("approved")) {
            Some(Value::Bool(true)) => InteractionDecisionWire::Approved,
            Some(Value::Bool(false)) => InteractionDecisionWire::Denied,
            _ => {
                return Err(InputError::new(
                    format!("{at}.payload.approved"),
                    "agui.input.resume_payload",
                    "a boolean: a resolved approval says whether it is approved",
                ));
            }
        },
        _ => {
            return Err(InputError::new(
                format!("{at}.status"),
                RULE,
                "resolved or cancelled",
            ));
        }
    };
    Ok(ResumeAnswer {
        interrupt_id,
        decision,
        index,
    })
}
