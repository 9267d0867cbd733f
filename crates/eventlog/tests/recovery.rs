//! Recovery terminals (`recovery::terminals`): one row per kind of output
//! an open model attempt recorded, and the position its `model.failed`
//! closes at.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use keel_eventlog::*;
use keel_message::{CallId, CanonicalJson, ModelName, OperationId, RunId, ToolName};
use keel_stream::RetryPosition;
use keel_testkit::events::{self, ModelAttempt, ToolUse};
use std::sync::Arc;

/// What the open model attempt recorded before its host was lost.
enum Output {
    Nothing,
    Text,
    ToolCall,
    Reasoning,
    Redacted,
}

/// Opens run, turn 1 and model attempt `op_1`, records `output`, and
/// checks the recovery terminals: model, turn and run failed, innermost
/// first, the model one at `position`, the others naming `host_lost`.
fn check(output: Output, position: RetryPosition) {
    let log = RunLog::new(
        RunId::parse("run_1").unwrap(),
        LogConfig::default(),
        Arc::new(SystemClock),
    )
    .unwrap();
    let op = OperationId::parse("op_1").unwrap();
    let model = ModelAttempt::new(1, op.clone());
    let mut payloads = vec![
        events::run_started(),
        events::turn_started(1),
        model.started(ModelName::parse("m").unwrap()),
    ];
    match output {
        Output::Nothing => {}
        Output::Text => payloads.push(model.text("hel")),
        Output::Reasoning => payloads.push(model.reasoning("hm")),
        Output::Redacted => payloads.push(model.redacted_reasoning(
            keel_message::ProviderTag::anthropic(),
            keel_message::OpaqueValue::new("RWNy").unwrap(),
        )),
        Output::ToolCall => {
            let tool = ToolUse::new(
                1,
                CallId::parse("c1").unwrap(),
                ToolName::parse("probe").unwrap(),
            );
            payloads.push(model.tool_call(&tool, CanonicalJson::parse("{}").unwrap()));
        }
    }
    for p in &payloads {
        log.commit(p).unwrap();
    }
    let terminals = recovery::terminals(&log);
    let kinds: Vec<String> = terminals.iter().map(|p| p.kind().to_string()).collect();
    assert_eq!(kinds, ["model.failed", "turn.failed", "run.failed"]);
    let Payload::ModelFailed(model) = &terminals[0] else {
        panic!("{:?}", terminals[0])
    };
    assert_eq!((&model.operation_id, &model.position), (&op, &position));
    let Payload::RunFailed(run) = &terminals[2] else {
        panic!("{:?}", terminals[2])
    };
    let cause = run.cause.as_ref().expect("no cause");
    assert_eq!(cause.kind.as_deref(), Some(recovery::HOST_LOST));
}

#[test]
fn an_open_model_attempt_closes_partial_exactly_when_it_recorded_output() {
    check(Output::Nothing, RetryPosition::Pristine);
    check(Output::Text, RetryPosition::Partial);
    check(Output::ToolCall, RetryPosition::Partial);
    // Reasoning is observed output too.
    check(Output::Reasoning, RetryPosition::Partial);
    check(Output::Redacted, RetryPosition::Partial);
}

/// Opens run, turn 1 and tool call `c1` (its `tool.started` marked
/// idempotent or not), and checks the tool's recovery terminal: its
/// outcome and retry.
fn check_tool(idempotent: bool, outcome: Option<ToolOutcome>, retry: Option<ToolRetry>) {
    let log = RunLog::new(
        RunId::parse("run_1").unwrap(),
        LogConfig::default(),
        Arc::new(SystemClock),
    )
    .unwrap();
    let tool = ToolUse::new(
        1,
        CallId::parse("c1").unwrap(),
        ToolName::parse("put").unwrap(),
    );
    let mut started = tool.started();
    if let (true, Payload::ToolStarted(s)) = (idempotent, &mut started) {
        s.extra.insert(
            recovery::IDEMPOTENT.to_owned(),
            serde_json::Value::Bool(true),
        );
    }
    for p in [events::run_started(), events::turn_started(1), started] {
        log.commit(&p).unwrap();
    }
    let terminals = recovery::terminals(&log);
    let Payload::ToolFailed(failed) = &terminals[0] else {
        panic!("{:?}", terminals[0])
    };
    assert_eq!(
        (&failed.outcome, &failed.retry),
        (&outcome, &retry),
        "idempotent {idempotent}"
    );
}

#[test]
fn an_in_flight_idempotent_call_closes_retryable_and_any_other_uncertain() {
    check_tool(false, Some(ToolOutcome::Uncertain), None);
    check_tool(true, None, Some(ToolRetry::Retryable));
}
