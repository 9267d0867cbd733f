//! Edges of the CLI's rule modules that cargo-mutants found untested:
//! one table per rule family, each row at a boundary.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use keel_serve::cross_site::{
    AllowedOrigin, CrossSiteConfigError, CrossSitePolicy, MAX_NAME_BYTES, parse_public_host,
};

/// `--public-host` values at the edges of `host[:port]`: `ok` says
/// whether the value is taken.
#[test]
fn public_host_edges() {
    let at_bound = "h".repeat(MAX_NAME_BYTES);
    let over_bound = "h".repeat(MAX_NAME_BYTES + 1);
    let rows: [(&str, bool); 8] = [
        ("example.com:8080", true),
        // A signed port is not a number here, though `u16::from_str` takes it.
        ("example.com:+80", false),
        ("example.com:", false),
        ("[::1]:8080", true),
        // An IPv6 literal is hex digits, `:` and `.`; an empty one is none.
        ("[zz]", false),
        ("[]", false),
        (&at_bound, true),
        (&over_bound, false),
    ];
    for (value, ok) in rows {
        let parsed = parse_public_host(value);
        assert_eq!(parsed.is_ok(), ok, "{value:?}: {parsed:?}");
    }
    assert!(matches!(
        parse_public_host(&over_bound),
        Err(CrossSiteConfigError::TooLong { len, max: MAX_NAME_BYTES, .. }) if len == MAX_NAME_BYTES + 1
    ));
}

/// `--allow-origin` values at the length bound, and the policy keeps the
/// origins it was given, normalized.
#[test]
fn allow_origin_edges() {
    let prefix = "http://";
    let at_bound = format!("{prefix}{}", "o".repeat(MAX_NAME_BYTES - prefix.len()));
    let over_bound = format!("{prefix}{}", "o".repeat(MAX_NAME_BYTES + 1 - prefix.len()));
    assert!(AllowedOrigin::parse(&at_bound).is_ok(), "at the bound");
    assert!(matches!(
        AllowedOrigin::parse(&over_bound),
        Err(CrossSiteConfigError::TooLong { len, .. }) if len == MAX_NAME_BYTES + 1
    ));
    let listed = vec![
        AllowedOrigin::parse("HTTPS://App.Example:8443/").unwrap(),
        AllowedOrigin::parse("http://localhost:3000").unwrap(),
    ];
    let policy = CrossSitePolicy::new(true, Vec::new(), listed);
    let origins: Vec<&str> = policy
        .allowed_origins()
        .iter()
        .map(AllowedOrigin::as_str)
        .collect();
    assert_eq!(
        origins,
        ["https://app.example:8443", "http://localhost:3000"]
    );
}

/// AG-UI: a turn is a step named after it, and a completed tool is a
/// `TOOL_CALL_RESULT` carrying its output for its call.
#[test]
fn agui_steps_and_tool_results() {
    use keel_eventlog::*;
    use keel_message::{CallId, CanonicalJson, ModelName, OperationId, RunId, ToolName};
    use keel_testkit::events::{self, ModelAttempt, ToolUse};
    let log = RunLog::new(
        RunId::parse("run_1").unwrap(),
        LogConfig::default(),
        std::sync::Arc::new(SystemClock),
    )
    .unwrap();
    let model = ModelAttempt::new(1, OperationId::parse("op1").unwrap());
    let tool = ToolUse::new(
        1,
        CallId::parse("c1").unwrap(),
        ToolName::parse("probe").unwrap(),
    );
    let payloads = [
        events::run_started(),
        events::turn_started(1),
        model.started(ModelName::parse("m").unwrap()),
        model.tool_call(&tool, CanonicalJson::parse("{}").unwrap()),
        model.completed(keel_stream::FinishReason::ToolCalls, None),
        tool.started(),
        tool.completed("42"),
    ];
    let mut mapper = keel_views::agui::AguiMapper::new();
    let mut mapped = Vec::new();
    for p in &payloads {
        mapped.extend(
            mapper
                .map(&log.commit(p).unwrap())
                .unwrap()
                .iter()
                .map(keel_views::agui::Stamped::to_value),
        );
    }
    let step = mapped
        .iter()
        .find(|e| e["type"] == "STEP_STARTED")
        .expect("no STEP_STARTED");
    assert_eq!(step["stepName"], "turn 1");
    let result = mapped.last().unwrap();
    assert_eq!(
        (&result["type"], &result["toolCallId"], &result["content"]),
        (
            &serde_json::json!("TOOL_CALL_RESULT"),
            &serde_json::json!("c1"),
            &serde_json::json!("42")
        ),
        "{result}"
    );
}

/// One AG-UI event of `ty` with `fields` and a `rawEvent`.
fn agui_event(ty: &str, fields: serde_json::Value) -> serde_json::Value {
    let mut event = serde_json::json!({"type": ty, "rawEvent": {"seq": 1}});
    for (k, v) in fields.as_object().unwrap() {
        event[k] = v.clone();
    }
    event
}

/// The AG-UI checks refuse what `verifyEvents` refuses: one row per rule,
/// each naming what its refusal says.
#[test]
fn agui_checks_refuse_broken_streams() {
    use keel_views::agui::{check_event, check_stream};
    use serde_json::json;
    let start = || agui_event("RUN_STARTED", json!({"threadId": "t", "runId": "r"}));
    let finish = || agui_event("RUN_FINISHED", json!({"threadId": "t", "runId": "r"}));
    let step = |ty: &str| agui_event(ty, json!({"stepName": "turn 1"}));
    let rows: Vec<(Vec<serde_json::Value>, &str)> = vec![
        (vec![step("STEP_STARTED")], "out of place"),
        (
            vec![start(), finish(), step("STEP_STARTED")],
            "out of place",
        ),
        (
            vec![start(), step("STEP_STARTED"), finish()],
            "with scopes open",
        ),
        (vec![start(), step("STEP_FINISHED")], "does not pair"),
        (
            vec![
                start(),
                agui_event(
                    "TEXT_MESSAGE_CONTENT",
                    json!({"messageId": "m", "delta": "x"}),
                ),
            ],
            "not open",
        ),
    ];
    for (stream, why) in rows {
        let refused = check_stream(&stream);
        assert!(
            refused.as_ref().is_err_and(|e| e.contains(why)),
            "{why}: {refused:?}"
        );
    }
    let fine = vec![
        start(),
        step("STEP_STARTED"),
        step("STEP_FINISHED"),
        finish(),
    ];
    assert_eq!(check_stream(&fine), Ok(()));
    let missing = agui_event("STEP_STARTED", json!({}));
    assert!(check_event(&missing).is_err_and(|e| e.contains("stepName")));
}

/// The AI SDK stream names the model's finish reason in the SDK's terms:
/// one row per reason.
#[test]
fn ui_stream_finish_reasons() {
    use keel_eventlog::*;
    use keel_message::{ModelName, OperationId, RunId};
    use keel_stream::FinishReason;
    let rows = [
        (FinishReason::Stop, "stop"),
        (FinishReason::Length, "length"),
        (FinishReason::ContentFilter, "content-filter"),
        (FinishReason::ToolCalls, "tool-calls"),
    ];
    for (finish, sdk) in rows {
        let log = RunLog::new(
            RunId::parse("run_1").unwrap(),
            LogConfig::default(),
            std::sync::Arc::new(SystemClock),
        )
        .unwrap();
        let op = OperationId::parse("op1").unwrap();
        let turn = TurnRef {
            turn: 1,
            extra: Extra::new(),
        };
        let payloads = [
            Payload::RunStarted(RunStarted::default()),
            Payload::TurnStarted(turn.clone()),
            Payload::ModelStarted(ModelStarted {
                turn: 1,
                operation_id: op.clone(),
                model: ModelName::parse("m").unwrap(),
                attempt: 1,
                purpose: None,
                extra: Extra::new(),
            }),
            Payload::ModelCompleted(ModelCompleted {
                turn: 1,
                operation_id: op,
                finish: finish.clone(),
                usage: None,
                metadata: None,
                extra: Extra::new(),
            }),
            Payload::TurnCompleted(turn),
            Payload::RunCompleted(RunCompleted::default()),
        ];
        let mut stream = keel_views::ui_stream::UiStream::new();
        let mut chunks = Vec::new();
        for p in &payloads {
            chunks.extend(stream.feed(&log.commit(p).unwrap()).unwrap());
        }
        let reasons: Vec<String> = chunks
            .iter()
            .filter_map(|c| {
                let json: serde_json::Value = serde_json::from_str(&c.to_json()).unwrap();
                json.get("finishReason")
                    .and_then(|r| r.as_str())
                    .map(str::to_owned)
            })
            .collect();
        assert_eq!(reasons, [sdk], "{finish:?}");
    }
}

/// The AI SDK stream tracks the approvals it asked for: a tool call's
/// approval question is pending (interaction id, call id) until answered.
#[test]
fn ui_stream_pending_approvals() {
    use keel_eventlog::*;
    use keel_message::{CallId, CanonicalJson, InteractionId, ModelName, OperationId, RunId};
    let log = RunLog::new(
        RunId::parse("run_1").unwrap(),
        LogConfig::default(),
        std::sync::Arc::new(SystemClock),
    )
    .unwrap();
    let op = OperationId::parse("op1").unwrap();
    let call = CallId::parse("c1").unwrap();
    let payloads = [
        Payload::RunStarted(RunStarted::default()),
        Payload::TurnStarted(TurnRef {
            turn: 1,
            extra: Extra::new(),
        }),
        Payload::ModelStarted(ModelStarted {
            turn: 1,
            operation_id: op.clone(),
            model: ModelName::parse("m").unwrap(),
            attempt: 1,
            purpose: None,
            extra: Extra::new(),
        }),
        Payload::ToolCall(ToolCall {
            turn: 1,
            operation_id: op.clone(),
            call_id: call.clone(),
            name: keel_message::ToolName::parse("probe").unwrap(),
            arguments: CanonicalJson::parse("{}").unwrap(),
            extra: Extra::new(),
        }),
        Payload::ModelCompleted(ModelCompleted {
            turn: 1,
            operation_id: op,
            finish: keel_stream::FinishReason::ToolCalls,
            usage: None,
            metadata: None,
            extra: Extra::new(),
        }),
        Payload::InteractionStarted(InteractionStarted {
            turn: 1,
            interaction_id: InteractionId::parse("i_1").unwrap(),
            request: "approval".to_owned(),
            call_id: Some(call),
            extra: Extra::new(),
        }),
    ];
    let mut stream = keel_views::ui_stream::UiStream::new();
    for p in &payloads {
        stream.feed(&log.commit(p).unwrap()).unwrap();
    }
    let pending: Vec<(&str, &str)> = stream.awaiting().collect();
    assert_eq!(pending, [("i_1", "c1")]);
}
