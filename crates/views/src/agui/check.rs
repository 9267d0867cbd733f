//! The view's own check of its output: the `@ag-ui/core` schema's
//! required members for the types this view emits ([`check_event`]) and
//! the stream rules `@ag-ui/client`'s `verifyEvents` enforces
//! ([`check_stream`]). It reads the wire form (JSON values), so it also
//! judges streams that did not come from [`super::AguiMapper`].

use serde_json::Value;

/// Why an AG-UI event breaks this view's own schema.
pub fn check_event(event: &Value) -> Result<(), String> {
    let ty = event.get("type").and_then(Value::as_str).ok_or("no type")?;
    let required: &[&str] = match ty {
        "RUN_STARTED" => &["threadId", "runId"],
        "RUN_FINISHED" => &["threadId", "runId"],
        "RUN_ERROR" => &["message"],
        "STEP_STARTED" | "STEP_FINISHED" => &["stepName"],
        "TEXT_MESSAGE_START" | "TEXT_MESSAGE_END" => &["messageId"],
        "TEXT_MESSAGE_CONTENT" => &["messageId", "delta"],
        "TOOL_CALL_START" => &["toolCallId", "toolCallName"],
        "TOOL_CALL_ARGS" => &["toolCallId", "delta"],
        "TOOL_CALL_END" => &["toolCallId"],
        "TOOL_CALL_RESULT" => &["messageId", "toolCallId", "content"],
        "CUSTOM" => &["name"],
        "MESSAGES_SNAPSHOT" => &[],
        other => return Err(format!("{other} is not a type this view emits")),
    };
    for field in required {
        if !event.get(*field).is_some_and(Value::is_string) {
            return Err(format!("{ty}.{field} is not a string"));
        }
    }
    if ty == "MESSAGES_SNAPSHOT" && !event.get("messages").is_some_and(Value::is_array) {
        return Err("MESSAGES_SNAPSHOT.messages is not an array".to_owned());
    }
    if event.get("rawEvent").is_none_or(Value::is_null) {
        return Err(format!("{ty} has no rawEvent"));
    }
    Ok(())
}

/// Checks a whole stream the way `@ag-ui/client`'s `verifyEvents` does
/// for the types this view emits: `RUN_STARTED` first, nothing after
/// `RUN_FINISHED`/`RUN_ERROR`, every END after its START with no START
/// of an open id, and no open step, message or call at `RUN_FINISHED`.
pub fn check_stream(events: &[Value]) -> Result<(), String> {
    use std::collections::HashSet;
    let mut open: [HashSet<String>; 3] = Default::default();
    let mut ended = false;
    for (i, event) in events.iter().enumerate() {
        check_event(event).map_err(|e| format!("event {i}: {e}"))?;
        let ty = event["type"].as_str().unwrap_or_default();
        if ended || (i == 0) != (ty == "RUN_STARTED") {
            return Err(format!("event {i}: {ty} out of place"));
        }
        let (set, id, opens) = match ty {
            "STEP_STARTED" | "STEP_FINISHED" => (0, "stepName", ty == "STEP_STARTED"),
            "TEXT_MESSAGE_START" | "TEXT_MESSAGE_END" => (1, "messageId", ty.ends_with("START")),
            "TOOL_CALL_START" | "TOOL_CALL_END" => (2, "toolCallId", ty.ends_with("START")),
            "TEXT_MESSAGE_CONTENT" | "TOOL_CALL_ARGS" => {
                let (set, id) = if ty == "TOOL_CALL_ARGS" {
                    (2, "toolCallId")
                } else {
                    (1, "messageId")
                };
                let key = event[id].as_str().unwrap_or_default();
                if !open[set].contains(key) {
                    return Err(format!("event {i}: {ty} of {key}, which is not open"));
                }
                continue;
            }
            "RUN_FINISHED" | "RUN_ERROR" => {
                if ty == "RUN_FINISHED" && open.iter().any(|s| !s.is_empty()) {
                    return Err(format!("event {i}: RUN_FINISHED with scopes open"));
                }
                ended = true;
                continue;
            }
            _ => continue,
        };
        let key = event[id].as_str().unwrap_or_default().to_owned();
        let fine = if opens {
            open[set].insert(key.clone())
        } else {
            open[set].remove(&key)
        };
        if !fine {
            return Err(format!("event {i}: {ty} of {key} does not pair"));
        }
    }
    Ok(())
}
