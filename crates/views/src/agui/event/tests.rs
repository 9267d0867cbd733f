//! The JSON of every event type, pinned as text through one `check` helper
//! over a table: a renamed member, a wrong tag, an optional member that
//! stops being left out or a change of member order fails here.

use super::super::message::{AguiMessage, AguiToolCall, FunctionCall};
use super::*;
use serde_json::json;

/// A stamp as the mapper makes one: from a Keel line with `ts` = 5 000 µs
/// (`rawEvent` `{"ts":5000}`, `timestamp` 5).
fn stamp() -> Stamp {
    Stamp::of(json!({"ts": 5_000}))
}

fn stamped(event: AguiEvent) -> Stamped {
    Stamped::new(event, stamp())
}

/// Which variant an event is, by an exhaustive match: a new variant does
/// not compile until it is given an index here, and a row below.
fn variant(event: &AguiEvent) -> usize {
    match event {
        AguiEvent::RunStarted { .. } => 0,
        AguiEvent::RunFinished { .. } => 1,
        AguiEvent::RunError { .. } => 2,
        AguiEvent::StepStarted { .. } => 3,
        AguiEvent::StepFinished { .. } => 4,
        AguiEvent::TextMessageStart { .. } => 5,
        AguiEvent::TextMessageContent { .. } => 6,
        AguiEvent::TextMessageEnd { .. } => 7,
        AguiEvent::ToolCallStart { .. } => 8,
        AguiEvent::ToolCallArgs { .. } => 9,
        AguiEvent::ToolCallEnd { .. } => 10,
        AguiEvent::ToolCallResult { .. } => 11,
        AguiEvent::MessagesSnapshot { .. } => 12,
        AguiEvent::Custom { .. } => 13,
        AguiEvent::ReasoningStart { .. } => 14,
        AguiEvent::ReasoningMessageStart { .. } => 15,
        AguiEvent::ReasoningMessageContent { .. } => 16,
        AguiEvent::ReasoningMessageEnd { .. } => 17,
        AguiEvent::ReasoningEnd { .. } => 18,
        AguiEvent::ReasoningEncryptedValue { .. } => 19,
        AguiEvent::SubagentStarted { .. } => 20,
        AguiEvent::SubagentFinished { .. } => 21,
        AguiEvent::SubagentError { .. } => 22,
    }
}
const VARIANTS: usize = 23;

/// Each row's event, stamped, encodes to exactly its text (members in
/// sorted order), every variant has a row, and every encoded event passes
/// the view's own schema check.
fn check(rows: Vec<(AguiEvent, &str)>) {
    let mut seen = [false; VARIANTS];
    for (event, expected) in rows {
        seen[variant(&event)] = true;
        let event = stamped(event);
        assert_eq!(event.to_json(), expected);
        assert_eq!(event.to_value().to_string(), expected);
        assert_eq!(super::super::check_event(&event.to_value()), Ok(()));
    }
    let missing: Vec<usize> = (0..VARIANTS).filter(|&i| !seen[i]).collect();
    assert!(missing.is_empty(), "variants without a row: {missing:?}");
}

fn s(text: &str) -> String {
    text.to_owned()
}

/// `RUN_*` and `STEP_*`.
fn run_rows() -> Vec<(AguiEvent, &'static str)> {
    let run = |outcome, usage| AguiEvent::RunFinished {
        thread_id: s("r"),
        run_id: s("r"),
        outcome,
        usage,
    };
    let usage = TokenUsage {
        input_tokens: Some(3),
        output_tokens: None,
    };
    vec![
        (
            AguiEvent::RunStarted {
                thread_id: s("t"),
                run_id: s("r"),
                parent_run_id: None,
            },
            r#"{"rawEvent":{"ts":5000},"runId":"r","threadId":"t","timestamp":5,"type":"RUN_STARTED"}"#,
        ),
        (
            run(RunOutcome::Success, None),
            r#"{"outcome":{"type":"success"},"rawEvent":{"ts":5000},"runId":"r","threadId":"r","timestamp":5,"type":"RUN_FINISHED"}"#,
        ),
        (
            run(RunOutcome::Cancelled, Some(vec![usage])),
            r#"{"outcome":{"type":"cancelled"},"rawEvent":{"ts":5000},"runId":"r","threadId":"r","timestamp":5,"type":"RUN_FINISHED","usage":[{"inputTokens":3}]}"#,
        ),
        (
            AguiEvent::RunError {
                message: s("gave up"),
                code: s("keel.run.failed"),
            },
            r#"{"code":"keel.run.failed","message":"gave up","rawEvent":{"ts":5000},"timestamp":5,"type":"RUN_ERROR"}"#,
        ),
        (
            AguiEvent::StepStarted {
                step_name: s("turn 1"),
            },
            r#"{"rawEvent":{"ts":5000},"stepName":"turn 1","timestamp":5,"type":"STEP_STARTED"}"#,
        ),
        (
            AguiEvent::StepFinished {
                step_name: s("turn 1"),
            },
            r#"{"rawEvent":{"ts":5000},"stepName":"turn 1","timestamp":5,"type":"STEP_FINISHED"}"#,
        ),
    ]
}

/// `TEXT_MESSAGE_*` and `TOOL_CALL_*`, each optional member absent and present.
/// `RUN_STARTED` of a sub-run and `SUBAGENT_*`.
fn sub_run_rows() -> Vec<(AguiEvent, &'static str)> {
    vec![
        (
            AguiEvent::RunStarted {
                thread_id: s("c"),
                run_id: s("c"),
                parent_run_id: Some(s("r")),
            },
            r#"{"parentRunId":"r","rawEvent":{"ts":5000},"runId":"c","threadId":"c","timestamp":5,"type":"RUN_STARTED"}"#,
        ),
        (
            AguiEvent::SubagentStarted {
                subagent_run_id: s("c"),
                name: s("researcher"),
                parent_subagent_run_id: Some(s("b")),
                parent_tool_call_id: Some(s("k1")),
            },
            r#"{"name":"researcher","parentSubagentRunId":"b","parentToolCallId":"k1","rawEvent":{"ts":5000},"subagentRunId":"c","timestamp":5,"type":"SUBAGENT_STARTED"}"#,
        ),
        (
            AguiEvent::SubagentStarted {
                subagent_run_id: s("b"),
                name: s("planner"),
                parent_subagent_run_id: None,
                parent_tool_call_id: None,
            },
            r#"{"name":"planner","rawEvent":{"ts":5000},"subagentRunId":"b","timestamp":5,"type":"SUBAGENT_STARTED"}"#,
        ),
        (
            AguiEvent::SubagentFinished {
                subagent_run_id: s("c"),
                outcome: SubagentOutcome::Success,
            },
            r#"{"outcome":{"type":"success"},"rawEvent":{"ts":5000},"subagentRunId":"c","timestamp":5,"type":"SUBAGENT_FINISHED"}"#,
        ),
        (
            AguiEvent::SubagentError {
                subagent_run_id: s("c"),
                message: s("boom"),
                code: s("keel.run.failed"),
            },
            r#"{"code":"keel.run.failed","message":"boom","rawEvent":{"ts":5000},"subagentRunId":"c","timestamp":5,"type":"SUBAGENT_ERROR"}"#,
        ),
    ]
}

fn text_and_tool_rows() -> Vec<(AguiEvent, &'static str)> {
    let call_start = |parent: Option<&str>| AguiEvent::ToolCallStart {
        tool_call_id: s("c1"),
        tool_call_name: s("get"),
        parent_message_id: parent.map(s),
    };
    let result = |error: Option<&str>| AguiEvent::ToolCallResult {
        message_id: s("r.c1.result"),
        tool_call_id: s("c1"),
        content: Content::Text(s("out")),
        role: ToolRole::Tool,
        error: error.map(s),
    };
    vec![
        (
            AguiEvent::TextMessageStart {
                message_id: s("m"),
                role: TextRole::Assistant,
            },
            r#"{"messageId":"m","rawEvent":{"ts":5000},"role":"assistant","timestamp":5,"type":"TEXT_MESSAGE_START"}"#,
        ),
        (
            AguiEvent::TextMessageContent {
                message_id: s("m"),
                delta: s("Hi"),
            },
            r#"{"delta":"Hi","messageId":"m","rawEvent":{"ts":5000},"timestamp":5,"type":"TEXT_MESSAGE_CONTENT"}"#,
        ),
        (
            AguiEvent::TextMessageEnd { message_id: s("m") },
            r#"{"messageId":"m","rawEvent":{"ts":5000},"timestamp":5,"type":"TEXT_MESSAGE_END"}"#,
        ),
        (
            call_start(None),
            r#"{"rawEvent":{"ts":5000},"timestamp":5,"toolCallId":"c1","toolCallName":"get","type":"TOOL_CALL_START"}"#,
        ),
        (
            call_start(Some("m")),
            r#"{"parentMessageId":"m","rawEvent":{"ts":5000},"timestamp":5,"toolCallId":"c1","toolCallName":"get","type":"TOOL_CALL_START"}"#,
        ),
        (
            AguiEvent::ToolCallArgs {
                tool_call_id: s("c1"),
                delta: s(r#"{"a":1}"#),
            },
            r#"{"delta":"{\"a\":1}","rawEvent":{"ts":5000},"timestamp":5,"toolCallId":"c1","type":"TOOL_CALL_ARGS"}"#,
        ),
        (
            AguiEvent::ToolCallEnd {
                tool_call_id: s("c1"),
            },
            r#"{"rawEvent":{"ts":5000},"timestamp":5,"toolCallId":"c1","type":"TOOL_CALL_END"}"#,
        ),
        (
            result(None),
            r#"{"content":"out","messageId":"r.c1.result","rawEvent":{"ts":5000},"role":"tool","timestamp":5,"toolCallId":"c1","type":"TOOL_CALL_RESULT"}"#,
        ),
        (
            result(Some("reset")),
            r#"{"content":"out","error":"reset","messageId":"r.c1.result","rawEvent":{"ts":5000},"role":"tool","timestamp":5,"toolCallId":"c1","type":"TOOL_CALL_RESULT"}"#,
        ),
    ]
}

/// `MESSAGES_SNAPSHOT` and `CUSTOM`, with each kind of custom value.
fn snapshot_and_custom_rows() -> Vec<(AguiEvent, &'static str)> {
    vec![
        (
            AguiEvent::MessagesSnapshot {
                messages: Vec::new(),
            },
            r#"{"messages":[],"rawEvent":{"ts":5000},"timestamp":5,"type":"MESSAGES_SNAPSHOT"}"#,
        ),
        (
            AguiEvent::Custom {
                name: s("keel.turn.failed"),
                value: CustomValue::Logged(json!({"turn": 1, "error": "x"})),
            },
            r#"{"name":"keel.turn.failed","rawEvent":{"ts":5000},"timestamp":5,"type":"CUSTOM","value":{"error":"x","turn":1}}"#,
        ),
        (
            AguiEvent::Custom {
                name: s("keel.discarded"),
                value: CustomValue::Discarded(Discarded {
                    message_id: None,
                    tool_call_ids: vec![s("c1"), s("c2")],
                    reasoning_message_ids: Vec::new(),
                }),
            },
            r#"{"name":"keel.discarded","rawEvent":{"ts":5000},"timestamp":5,"type":"CUSTOM","value":{"messageId":null,"toolCallIds":["c1","c2"]}}"#,
        ),
        (
            AguiEvent::Custom {
                name: s("keel.discarded"),
                value: CustomValue::Discarded(Discarded {
                    message_id: Some(s("m")),
                    tool_call_ids: Vec::new(),
                    reasoning_message_ids: vec![s("m.reasoning.1")],
                }),
            },
            r#"{"name":"keel.discarded","rawEvent":{"ts":5000},"timestamp":5,"type":"CUSTOM","value":{"messageId":"m","reasoningMessageIds":["m.reasoning.1"],"toolCallIds":[]}}"#,
        ),
        (
            AguiEvent::Custom {
                name: s("keel.text_elided"),
                value: CustomValue::TextElided(TextElided {
                    message_id: s("m"),
                    bytes: 3,
                }),
            },
            r#"{"name":"keel.text_elided","rawEvent":{"ts":5000},"timestamp":5,"type":"CUSTOM","value":{"bytes":3,"messageId":"m"}}"#,
        ),
    ]
}

/// `REASONING_*`, and a tool result whose content is parts.
fn reasoning_rows() -> Vec<(AguiEvent, &'static str)> {
    let id = || s("r.op.reasoning.1");
    vec![
        (
            AguiEvent::ReasoningStart { message_id: id() },
            r#"{"messageId":"r.op.reasoning.1","rawEvent":{"ts":5000},"timestamp":5,"type":"REASONING_START"}"#,
        ),
        (
            AguiEvent::ReasoningMessageStart {
                message_id: id(),
                role: ReasoningRole::Reasoning,
            },
            r#"{"messageId":"r.op.reasoning.1","rawEvent":{"ts":5000},"role":"reasoning","timestamp":5,"type":"REASONING_MESSAGE_START"}"#,
        ),
        (
            AguiEvent::ReasoningMessageContent {
                message_id: id(),
                delta: s("hmm"),
            },
            r#"{"delta":"hmm","messageId":"r.op.reasoning.1","rawEvent":{"ts":5000},"timestamp":5,"type":"REASONING_MESSAGE_CONTENT"}"#,
        ),
        (
            AguiEvent::ReasoningMessageEnd { message_id: id() },
            r#"{"messageId":"r.op.reasoning.1","rawEvent":{"ts":5000},"timestamp":5,"type":"REASONING_MESSAGE_END"}"#,
        ),
        (
            AguiEvent::ReasoningEnd { message_id: id() },
            r#"{"messageId":"r.op.reasoning.1","rawEvent":{"ts":5000},"timestamp":5,"type":"REASONING_END"}"#,
        ),
        (
            AguiEvent::ReasoningEncryptedValue {
                subtype: EncryptedSubtype::Message,
                entity_id: id(),
                encrypted_value: s("sig"),
            },
            r#"{"encryptedValue":"sig","entityId":"r.op.reasoning.1","rawEvent":{"ts":5000},"subtype":"message","timestamp":5,"type":"REASONING_ENCRYPTED_VALUE"}"#,
        ),
        (
            AguiEvent::ToolCallResult {
                message_id: s("r.c1.result"),
                tool_call_id: s("c1"),
                content: Content::Parts(vec![
                    json!({"type": "text", "text": "out"}),
                    json!({"type": "image", "source": {"type": "data", "value": "R0lG", "mimeType": "image/gif"}}),
                ]),
                role: ToolRole::Tool,
                error: None,
            },
            r#"{"content":[{"text":"out","type":"text"},{"source":{"mimeType":"image/gif","type":"data","value":"R0lG"},"type":"image"}],"messageId":"r.c1.result","rawEvent":{"ts":5000},"role":"tool","timestamp":5,"toolCallId":"c1","type":"TOOL_CALL_RESULT"}"#,
        ),
    ]
}

#[test]
fn every_event_type_encodes_as_pinned() {
    let mut rows = run_rows();
    rows.extend(sub_run_rows());
    rows.extend(reasoning_rows());
    rows.extend(text_and_tool_rows());
    rows.extend(snapshot_and_custom_rows());
    check(rows);
}

/// The snapshot's messages, one row per role and optional member.
#[test]
fn every_message_kind_encodes_as_pinned() {
    let call = AguiToolCall::Function {
        id: s("c1"),
        function: FunctionCall {
            name: s("get"),
            arguments: s("{}"),
        },
    };
    let assistant = |content: Option<&str>, tool_calls: Vec<AguiToolCall>| AguiMessage::Assistant {
        id: s("a"),
        content: content.map(s),
        tool_calls,
    };
    let tool = |error: Option<&str>| AguiMessage::Tool {
        id: s("t.c1"),
        content: Content::Text(s("out")),
        tool_call_id: s("c1"),
        error: error.map(s),
    };
    let rows = [
        (
            AguiMessage::System {
                id: s("s"),
                content: s("be brief"),
            },
            r#"{"content":"be brief","id":"s","role":"system"}"#,
        ),
        (
            AguiMessage::User {
                id: s("u"),
                content: Content::Text(s("Hi")),
            },
            r#"{"content":"Hi","id":"u","role":"user"}"#,
        ),
        (
            AguiMessage::User {
                id: s("u"),
                content: Content::Parts(vec![json!({"type": "text", "text": "Hi"})]),
            },
            r#"{"content":[{"text":"Hi","type":"text"}],"id":"u","role":"user"}"#,
        ),
        (
            AguiMessage::Reasoning {
                id: s("a.reasoning.1"),
                content: s("hmm"),
                encrypted_value: None,
            },
            r#"{"content":"hmm","id":"a.reasoning.1","role":"reasoning"}"#,
        ),
        (
            AguiMessage::Reasoning {
                id: s("a.reasoning.2"),
                content: s(""),
                encrypted_value: Some(s("opaque")),
            },
            r#"{"content":"","encryptedValue":"opaque","id":"a.reasoning.2","role":"reasoning"}"#,
        ),
        (
            assistant(Some("ok"), Vec::new()),
            r#"{"content":"ok","id":"a","role":"assistant"}"#,
        ),
        (
            assistant(None, vec![call]),
            r#"{"id":"a","role":"assistant","toolCalls":[{"function":{"arguments":"{}","name":"get"},"id":"c1","type":"function"}]}"#,
        ),
        (
            tool(None),
            r#"{"content":"out","id":"t.c1","role":"tool","toolCallId":"c1"}"#,
        ),
        (
            tool(Some("out")),
            r#"{"content":"out","error":"out","id":"t.c1","role":"tool","toolCallId":"c1"}"#,
        ),
    ];
    for (message, expected) in rows {
        assert_eq!(message.to_json(), expected);
    }
}

/// A line without `ts` has no `timestamp`; the stamp alone is what closes
/// a written snapshot.
#[test]
fn a_stamp_without_a_time_has_no_timestamp() {
    let event = Stamped::new(
        AguiEvent::StepFinished {
            step_name: s("turn 1"),
        },
        Stamp::of(json!({"seq": 1})),
    );
    assert_eq!(
        event.to_json(),
        r#"{"rawEvent":{"seq":1},"stepName":"turn 1","type":"STEP_FINISHED"}"#
    );
    assert_eq!(event.timestamp(), None);
    assert_eq!(
        stamp().to_value().to_string(),
        r#"{"rawEvent":{"ts":5000},"timestamp":5}"#
    );
}
