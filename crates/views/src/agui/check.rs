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
        "TOOL_CALL_RESULT" => &["messageId", "toolCallId"],
        "REASONING_START" | "REASONING_END" | "REASONING_MESSAGE_END" => &["messageId"],
        "REASONING_MESSAGE_START" => &["messageId", "role"],
        "REASONING_MESSAGE_CONTENT" => &["messageId", "delta"],
        "REASONING_ENCRYPTED_VALUE" => &["subtype", "entityId", "encryptedValue"],
        "CUSTOM" => &["name"],
        "MESSAGES_SNAPSHOT" => &[],
        "SUBAGENT_STARTED" => &["subagentRunId", "name"],
        "SUBAGENT_FINISHED" => &["subagentRunId"],
        "SUBAGENT_ERROR" => &["subagentRunId", "message"],
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
    if ty == "TOOL_CALL_RESULT"
        && !event
            .get("content")
            .is_some_and(|c| c.is_string() || c.is_array())
    {
        return Err("TOOL_CALL_RESULT.content is neither a string nor parts".to_owned());
    }
    // An agent stream's opening (`RUN_STARTED`, `CUSTOM` `keel.run`)
    // stands for no Keel event; every other event carries its line.
    let opening = ty == "RUN_STARTED"
        || (ty == "CUSTOM" && event.get("name").and_then(Value::as_str) == Some("keel.run"));
    match event.get("rawEvent") {
        Some(Value::Null) => Err(format!("{ty} has a null rawEvent")),
        None if !opening => Err(format!("{ty} has no rawEvent")),
        _ => Ok(()),
    }
}

/// What an event does to a scope: opens it, continues it or closes it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Scoped {
    Opens,
    Continues,
    Closes,
}

/// The scope an event type belongs to (its set and id member) and what
/// it does to it; `None` for types outside any scope.
fn scope_of(ty: &str) -> Option<(usize, &'static str, Scoped)> {
    use Scoped::{Closes, Continues, Opens};
    Some(match ty {
        "STEP_STARTED" => (0, "stepName", Opens),
        "STEP_FINISHED" => (0, "stepName", Closes),
        "TEXT_MESSAGE_START" => (1, "messageId", Opens),
        "TEXT_MESSAGE_CONTENT" => (1, "messageId", Continues),
        "TEXT_MESSAGE_END" => (1, "messageId", Closes),
        "TOOL_CALL_START" => (2, "toolCallId", Opens),
        "TOOL_CALL_ARGS" => (2, "toolCallId", Continues),
        "TOOL_CALL_END" => (2, "toolCallId", Closes),
        "REASONING_START" => (3, "messageId", Opens),
        "REASONING_END" => (3, "messageId", Closes),
        "REASONING_MESSAGE_START" => (4, "messageId", Opens),
        "REASONING_MESSAGE_CONTENT" => (4, "messageId", Continues),
        "REASONING_MESSAGE_END" => (4, "messageId", Closes),
        "SUBAGENT_STARTED" => (5, "subagentRunId", Opens),
        "SUBAGENT_FINISHED" | "SUBAGENT_ERROR" => (5, "subagentRunId", Closes),
        _ => return None,
    })
}

/// Checks a whole stream the way `@ag-ui/client`'s `verifyEvents` does
/// for the types this view emits: `RUN_STARTED` first, nothing after
/// `RUN_FINISHED`/`RUN_ERROR`, every END after its START with no START
/// of an open id, content only for an open id, and no open step, message,
/// call or reasoning span or message at `RUN_FINISHED`; a subagent's
/// `SUBAGENT_FINISHED`/`SUBAGENT_ERROR` after its `SUBAGENT_STARTED`, an
/// id never started twice, none open at `RUN_FINISHED`, and steps kept
/// per subagent (`subagentRunId`), as `verifyEvents` keeps them.
pub fn check_stream(events: &[Value]) -> Result<(), String> {
    use std::collections::HashSet;
    let mut open: [HashSet<String>; 6] = Default::default();
    let mut subagents_seen = HashSet::new();
    let mut ended = false;
    for (i, event) in events.iter().enumerate() {
        check_event(event).map_err(|e| format!("event {i}: {e}"))?;
        let ty = event["type"].as_str().unwrap_or_default();
        if ended || (i == 0) != (ty == "RUN_STARTED") {
            return Err(format!("event {i}: {ty} out of place"));
        }
        if ty == "RUN_FINISHED" && open.iter().any(|s| !s.is_empty()) {
            return Err(format!("event {i}: RUN_FINISHED with scopes open"));
        }
        ended = matches!(ty, "RUN_FINISHED" | "RUN_ERROR");
        let Some((set, id, what)) = scope_of(ty) else {
            continue;
        };
        let mut key = event[id].as_str().unwrap_or_default().to_owned();
        if set == 0 {
            let owner = event["subagentRunId"].as_str().unwrap_or_default();
            key = format!("{owner}/{key}");
        }
        if set == 5 && what == Scoped::Opens && !subagents_seen.insert(key.clone()) {
            return Err(format!("event {i}: subagent {key} started twice"));
        }
        let fine = match what {
            Scoped::Opens => open[set].insert(key.clone()),
            Scoped::Continues => open[set].contains(&key),
            Scoped::Closes => open[set].remove(&key),
        };
        if !fine && what == Scoped::Continues {
            return Err(format!("event {i}: {ty} of {key}, which is not open"));
        }
        if !fine {
            return Err(format!("event {i}: {ty} of {key} does not pair"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A stream of `(type, id member, id)` events, stamped, and whether
    /// `check_stream` refuses it (the error containing `refusal`).
    fn check(events: &[(&str, &str, &str)], refusal: Option<&str>) {
        let mut stream =
            vec![json!({"type": "RUN_STARTED", "threadId": "t", "runId": "r", "rawEvent": {}})];
        for (ty, member, id) in events {
            let mut e = json!({"type": ty, "rawEvent": {}, "delta": "x", "role": "reasoning",
                               "subtype": "message", "encryptedValue": "v", "entityId": id,
                               "name": "n", "message": "m"});
            e[*member] = json!(id);
            stream.push(e);
        }
        stream.push(json!({"type": "RUN_FINISHED", "threadId": "t", "runId": "r", "rawEvent": {}}));
        match (check_stream(&stream), refusal) {
            (Ok(()), None) => {}
            (Err(e), Some(want)) => assert!(e.contains(want), "{e} lacks {want}"),
            (got, want) => panic!("{events:?}: got {got:?}, wanted a refusal {want:?}"),
        }
    }

    #[test]
    fn reasoning_scopes_pair_like_messages() {
        let m = "messageId";
        let span = [
            ("REASONING_START", m, "a"),
            ("REASONING_MESSAGE_START", m, "a"),
            ("REASONING_MESSAGE_CONTENT", m, "a"),
            ("REASONING_ENCRYPTED_VALUE", m, "a"),
            ("REASONING_MESSAGE_END", m, "a"),
            ("REASONING_END", m, "a"),
        ];
        check(&span, None);
        // Content outside its message, an end without its start, a start
        // of an open id, and a span or message left open at the finish.
        check(
            &[("REASONING_MESSAGE_CONTENT", m, "a")],
            Some("which is not open"),
        );
        check(&[("REASONING_END", m, "a")], Some("does not pair"));
        check(&[("REASONING_MESSAGE_END", m, "a")], Some("does not pair"));
        check(
            &[("REASONING_START", m, "a"), ("REASONING_START", m, "a")],
            Some("does not pair"),
        );
        check(&[("REASONING_START", m, "a")], Some("scopes open"));
        check(&[("REASONING_MESSAGE_START", m, "a")], Some("scopes open"));
        check(&[("REASONING_ENCRYPTED_VALUE", "entityId", "")], None);
    }

    /// Subagents pair like messages, are never started twice, and keep
    /// their own steps.
    #[test]
    fn subagents_pair_and_keep_their_steps() {
        let sub = "subagentRunId";
        check(
            &[
                ("SUBAGENT_STARTED", sub, "c"),
                ("SUBAGENT_FINISHED", sub, "c"),
            ],
            None,
        );
        check(
            &[("SUBAGENT_STARTED", sub, "c"), ("SUBAGENT_ERROR", sub, "c")],
            None,
        );
        check(&[("SUBAGENT_STARTED", sub, "c")], Some("scopes open"));
        check(&[("SUBAGENT_ERROR", sub, "c")], Some("does not pair"));
        check(
            &[
                ("SUBAGENT_STARTED", sub, "c"),
                ("SUBAGENT_FINISHED", sub, "c"),
                ("SUBAGENT_STARTED", sub, "c"),
            ],
            Some("started twice"),
        );
        let step = |owner: Option<&str>, ty: &str| {
            let mut e = json!({"type": ty, "stepName": "turn 1", "rawEvent": {}});
            if let Some(owner) = owner {
                e["subagentRunId"] = json!(owner);
            }
            e
        };
        let run = |middle: Vec<Value>| {
            let mut all = vec![json!({"type": "RUN_STARTED", "threadId": "t", "runId": "r"})];
            all.extend(middle);
            all.push(
                json!({"type": "RUN_FINISHED", "threadId": "t", "runId": "r", "rawEvent": {}}),
            );
            check_stream(&all)
        };
        let nested = vec![
            step(None, "STEP_STARTED"),
            step(Some("c"), "STEP_STARTED"),
            step(Some("c"), "STEP_FINISHED"),
            step(None, "STEP_FINISHED"),
        ];
        assert_eq!(run(nested), Ok(()));
        let crossed = vec![step(None, "STEP_STARTED"), step(Some("c"), "STEP_FINISHED")];
        assert!(run(crossed).is_err());
    }

    #[test]
    fn reasoning_events_need_their_members() {
        for (event, refusal) in [
            (
                json!({"type": "REASONING_START", "rawEvent": {}}),
                "REASONING_START.messageId",
            ),
            (
                json!({"type": "REASONING_MESSAGE_START", "messageId": "a", "rawEvent": {}}),
                "REASONING_MESSAGE_START.role",
            ),
            (
                json!({"type": "REASONING_MESSAGE_CONTENT", "messageId": "a", "rawEvent": {}}),
                "REASONING_MESSAGE_CONTENT.delta",
            ),
            (
                json!({"type": "REASONING_ENCRYPTED_VALUE", "subtype": "message", "entityId": "a", "rawEvent": {}}),
                "REASONING_ENCRYPTED_VALUE.encryptedValue",
            ),
            (
                json!({"type": "TOOL_CALL_RESULT", "messageId": "m", "toolCallId": "c", "content": 3, "rawEvent": {}}),
                "neither a string nor parts",
            ),
        ] {
            let err = check_event(&event).expect_err("refused");
            assert!(err.contains(refusal), "{err} lacks {refusal}");
        }
        let parts = json!({"type": "TOOL_CALL_RESULT", "messageId": "m", "toolCallId": "c",
                           "content": [{"type": "text", "text": "x"}], "rawEvent": {}});
        assert_eq!(check_event(&parts), Ok(()));
    }
}
