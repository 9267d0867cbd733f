//! Recovery terminals (`recovery::terminals`): one row per kind of output
//! an open model attempt recorded, and the position its `model.failed`
//! closes at.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use keel_eventlog::*;
use keel_message::{CallId, CanonicalJson, ModelName, OperationId, RunId, ToolName};
use keel_stream::RetryPosition;
use std::sync::Arc;

/// What the open model attempt recorded before its host was lost.
enum Output {
    Nothing,
    Text,
    ToolCall,
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
    let mut payloads = vec![
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
            extra: Extra::new(),
        }),
    ];
    match output {
        Output::Nothing => {}
        Output::Text => payloads.push(Payload::TextDelta(TextDelta {
            turn: 1,
            operation_id: op.clone(),
            text: "hel".into(),
            extra: Extra::new(),
        })),
        Output::ToolCall => payloads.push(Payload::ToolCall(ToolCall {
            turn: 1,
            operation_id: op.clone(),
            call_id: CallId::parse("c1").unwrap(),
            name: ToolName::parse("probe").unwrap(),
            arguments: CanonicalJson::parse("{}").unwrap(),
            extra: Extra::new(),
        })),
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
}
