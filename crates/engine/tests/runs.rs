//! Every terminal of every scope, each reached in a test that asserts the
//! exact event sequence; retries, tools, interactions, cancellation,
//! observer failure, shutdown, limits and build errors.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::type_complexity
)]

use keel_engine::*;
use keel_eventlog::{Event, LogConfig, Payload, Scope, Terminal};
use keel_message::*;
use keel_stream::{FinishReason, MetadataAllowlist, ProblemKind, RetryPosition};
use keel_testkit::*;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

fn user(text: &str) -> Vec<Message> {
    vec![Message::text(MessageId::parse("u1").unwrap(), Role::User, text).unwrap()]
}

fn request(id: &str) -> RunRequest {
    RunRequest::new(
        RunId::parse(id).unwrap(),
        ModelName::parse("scripted-1").unwrap(),
        user("Weather in Oslo?"),
    )
    .provider_named("scripted")
}

fn weather(steps: Vec<ToolStep>) -> ScriptedTool {
    ScriptedTool::named("get_weather", steps).unwrap()
}

fn call(id: &str) -> ScriptItem {
    ScriptItem::tool_call(id, "get_weather", json!({"city": "Oslo"}))
}

fn done() -> Vec<ScriptItem> {
    vec![
        ScriptItem::text("3 °C."),
        ScriptItem::complete(FinishReason::Stop),
    ]
}

fn builder(provider: ScriptedProvider) -> EngineBuilder {
    Engine::builder()
        .provider("scripted", Arc::new(provider))
        .clock(Arc::new(ManualClock::default()))
}

async fn run_to_end(engine: &Engine, id: &str) -> (RunOutcome, Vec<Arc<Event>>) {
    let run = engine.start(request(id)).unwrap();
    let log = run.log().clone();
    let outcome = run.join().await;
    let events = log.retained_after(0);
    assert_lifecycle(&events);
    (outcome, events)
}

/// A run whose only model attempt failed and was not retried.
const ONE_FAILED_ATTEMPT: &[&str] = &[
    "run.started",
    "run.input",
    "turn.started",
    "model.started",
    "model.failed",
    "turn.failed",
    "run.failed",
];

fn payload(events: &[Arc<Event>], kind: &str) -> Payload {
    events
        .iter()
        .find(|e| e.kind().to_string() == kind)
        .unwrap_or_else(|| panic!("no {kind}"))
        .payload()
        .unwrap()
}

#[tokio::test]
async fn completed_run_with_a_tool_round_trip() {
    let provider = ScriptedProvider::new(vec![
        vec![
            ScriptItem::text("Checking."),
            call("c1"),
            ScriptItem::complete_with_usage(FinishReason::ToolCalls, 12, 7),
        ],
        vec![
            ScriptItem::text("3 °C."),
            ScriptItem::complete_with_usage(FinishReason::Stop, 20, 3),
        ],
    ])
    .recording_requests();
    let handle = provider.handle();
    let tool = weather(vec![ToolStep::ok(json!({"temp_c": 3}))]);
    let engine = builder(provider).tool(Arc::new(tool)).build().unwrap();
    let (outcome, events) = run_to_end(&engine, "run_ok").await;
    assert_kinds(
        &events,
        &[
            "run.started",
            "run.input",
            "turn.started",
            "model.started",
            "model.text_delta",
            "model.tool_call",
            "model.completed",
            "tool.started",
            "tool.completed",
            "turn.completed",
            "turn.started",
            "model.started",
            "model.text_delta",
            "model.completed",
            "turn.completed",
            "run.completed",
        ],
    );
    let RunOutcome::Completed {
        final_message,
        usage,
        transcript,
    } = outcome
    else {
        panic!("{outcome:?}")
    };
    assert_eq!(final_message.joined_text(), "3 °C.");
    assert_eq!((usage.input_tokens(), usage.output_tokens()), (32, 10));
    // The transcript: the question, the call, its result, the answer.
    let roles: Vec<Role> = transcript.iter().map(Message::role).collect();
    assert_eq!(
        roles,
        [Role::User, Role::Assistant, Role::Tool, Role::Assistant]
    );
    assert_eq!(transcript.last(), Some(&final_message));
    // The second request carried the tool result, answering the first call.
    let second = &handle.requests()[1];
    let last = second.history().last().unwrap();
    assert_eq!(last.role(), Role::Tool);
    let Part::ToolResult(r) = &last.parts()[0] else {
        panic!()
    };
    assert_eq!(
        (r.call_id().as_str(), r.content(), r.is_error()),
        ("c1", r#"{"temp_c":3}"#, false)
    );
    // Fresh operation ids per model call.
    assert_ne!(handle.requests()[0].operation_id(), second.operation_id());
}

#[tokio::test]
async fn non_retryable_model_failure_fails_model_turn_and_run() {
    let provider = ScriptedProvider::new(vec![vec![ScriptItem::fail(
        ProblemKind::Auth,
        "bad key sk-ant-api03-AAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        false,
    )]]);
    let engine = builder(provider).build().unwrap();
    let (outcome, events) = run_to_end(&engine, "run_auth").await;
    assert_kinds(&events, ONE_FAILED_ATTEMPT);
    let RunOutcome::Failed {
        cause: FailureCause::Model {
            problem, position, ..
        },
    } = outcome
    else {
        panic!("{outcome:?}")
    };
    assert_eq!(
        (problem.kind(), position),
        (ProblemKind::Auth, RetryPosition::Pristine)
    );
    // The key never reaches an event.
    assert!(events.iter().all(|e| !e.line().contains("AAAAAAAAAAAA")));
    let Payload::RunFailed(f) = payload(&events, "run.failed") else {
        panic!()
    };
    assert_eq!(f.cause.unwrap().operation_id.unwrap().as_str(), "op_1");
}

#[tokio::test(start_paused = true)]
async fn pristine_retryable_failures_are_retried_as_new_model_scopes() {
    let provider = ScriptedProvider::new(vec![
        vec![ScriptItem::fail(ProblemKind::Overloaded, "busy", true)],
        vec![ScriptItem::fail(
            ProblemKind::RateLimited,
            "slow down",
            true,
        )],
        done(),
    ])
    .recording_requests();
    let handle = provider.handle();
    let engine = builder(provider).build().unwrap();
    let (outcome, events) = run_to_end(&engine, "run_retry").await;
    assert!(matches!(outcome, RunOutcome::Completed { .. }));
    assert_kinds(
        &events,
        &[
            "run.started",
            "run.input",
            "turn.started",
            "model.started",
            "model.failed",
            "model.started",
            "model.failed",
            "model.started",
            "model.text_delta",
            "model.completed",
            "turn.completed",
            "run.completed",
        ],
    );
    let ops: Vec<String> = handle
        .requests()
        .iter()
        .map(|r| r.operation_id().to_string())
        .collect();
    assert_eq!(ops, ["op_1", "op_2", "op_3"]);
    let attempts: Vec<u32> = events
        .iter()
        .filter_map(|e| match e.payload().unwrap() {
            Payload::ModelStarted(m) => Some(m.attempt),
            _ => None,
        })
        .collect();
    assert_eq!(attempts, [1, 2, 3]);
}

/// A provider that asks for a longer wait than `max_backoff` is not
/// retried: the run does not sleep on a provider's say-so past the
/// policy's bound.
#[tokio::test(start_paused = true)]
async fn a_retry_after_beyond_max_backoff_is_not_waited_for() {
    let mut fail = ScriptFail::new(ProblemKind::RateLimited, "come back in an hour", true);
    fail.retry_after_ms = Some(3_600_000);
    let provider = ScriptedProvider::new(vec![vec![ScriptItem::Fail(fail)], done()]);
    let engine = builder(provider).build().unwrap();
    let started = tokio::time::Instant::now();
    let (outcome, events) = run_to_end(&engine, "run_long_wait").await;
    assert!(matches!(outcome, RunOutcome::Failed { .. }), "{outcome:?}");
    assert_kinds(&events, ONE_FAILED_ATTEMPT);
    assert!(started.elapsed() < Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn retries_stop_at_max_attempts() {
    let provider = ScriptedProvider::new(vec![
        vec![ScriptItem::fail(
            ProblemKind::Overloaded,
            "busy",
            true
        )];
        5
    ]);
    let handle = provider.handle();
    let limits = EngineLimits {
        retry: RetryPolicy {
            max_attempts: 2,
            ..RetryPolicy::default()
        },
        ..EngineLimits::default()
    };
    let engine = builder(provider).limits(limits).build().unwrap();
    let (outcome, _) = run_to_end(&engine, "run_retry_max").await;
    assert!(matches!(
        outcome,
        RunOutcome::Failed {
            cause: FailureCause::Model { .. }
        }
    ));
    assert_eq!(handle.started(), 2);
}

#[tokio::test(start_paused = true)]
async fn partial_failures_are_not_retried_by_default() {
    let provider = ScriptedProvider::new(vec![
        vec![
            ScriptItem::text("It is"),
            ScriptItem::fail(ProblemKind::Overloaded, "busy", true),
        ],
        done(),
    ]);
    let handle = provider.handle();
    let engine = builder(provider).build().unwrap();
    let (outcome, events) = run_to_end(&engine, "run_partial").await;
    assert_kinds(
        &events,
        &[
            "run.started",
            "run.input",
            "turn.started",
            "model.started",
            "model.text_delta",
            "model.failed",
            "turn.failed",
            "run.failed",
        ],
    );
    let RunOutcome::Failed {
        cause: FailureCause::Model { position, .. },
    } = outcome
    else {
        panic!("{outcome:?}")
    };
    assert_eq!(position, RetryPosition::Partial);
    assert_eq!(handle.started(), 1);
}

#[tokio::test(start_paused = true)]
async fn partial_restart_policy_keeps_the_discarded_output_in_the_log() {
    let provider = ScriptedProvider::new(vec![
        vec![
            ScriptItem::text("It is"),
            ScriptItem::fail(ProblemKind::Overloaded, "busy", true),
        ],
        done(),
    ]);
    let limits = EngineLimits {
        retry: RetryPolicy {
            partial: PartialRetry::Restart,
            ..RetryPolicy::default()
        },
        ..EngineLimits::default()
    };
    let engine = builder(provider).limits(limits).build().unwrap();
    let (outcome, events) = run_to_end(&engine, "run_restart").await;
    let RunOutcome::Completed { final_message, .. } = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(
        final_message.joined_text(),
        "3 °C.",
        "the discarded partial text is not in the answer"
    );
    assert_kinds(
        &events,
        &[
            "run.started",
            "run.input",
            "turn.started",
            "model.started",
            "model.text_delta",
            "model.failed",
            "model.started",
            "model.text_delta",
            "model.completed",
            "turn.completed",
            "run.completed",
        ],
    );
    let Payload::ModelFailed(f) = payload(&events, "model.failed") else {
        panic!()
    };
    assert_eq!(f.position, RetryPosition::Partial);
}

#[tokio::test]
async fn malformed_scripts_become_protocol_failures() {
    let rows: Vec<(&str, Vec<ScriptItem>)> = vec![
        (
            "text after complete",
            vec![
                ScriptItem::complete(FinishReason::Stop),
                ScriptItem::text("late"),
            ],
        ),
        (
            "duplicate call id",
            vec![
                call("c1"),
                call("c1"),
                ScriptItem::complete(FinishReason::ToolCalls),
            ],
        ),
        (
            "empty delta",
            vec![
                ScriptItem::text(""),
                ScriptItem::complete(FinishReason::Stop),
            ],
        ),
        (
            "disconnect",
            vec![ScriptItem::text("Hi"), ScriptItem::disconnect()],
        ),
        (
            "bad arguments",
            vec![
                ScriptItem::tool_call_raw("c1", "get_weather", "{nope"),
                ScriptItem::complete(FinishReason::ToolCalls),
            ],
        ),
    ];
    for (row, script) in rows {
        let engine = builder(ScriptedProvider::new(vec![script]))
            .build()
            .unwrap();
        let (outcome, events) = run_to_end(&engine, "run_bad").await;
        let RunOutcome::Failed {
            cause: FailureCause::Model { problem, .. },
        } = outcome
        else {
            panic!("row {row}: {outcome:?}")
        };
        assert_eq!(problem.kind(), ProblemKind::Protocol, "row {row}");
        assert!(!problem.retryable(), "row {row}");
        let kinds = kinds(&events);
        assert_eq!(
            &kinds[kinds.len() - 3..],
            ["model.failed", "turn.failed", "run.failed"],
            "row {row}"
        );
    }
}

/// The live path records known values only: a tool's typed failure with
/// an outcome or retry this version does not know (made with `from_wire`)
/// is recorded as the generic meaning, `uncertain` and `not_retryable`.
#[tokio::test(start_paused = true)]
async fn a_tools_unknown_outcome_and_retry_are_recorded_as_their_generic_meaning() {
    let provider = ScriptedProvider::new(vec![
        vec![call("c1"), ScriptItem::complete(FinishReason::ToolCalls)],
        done(),
    ]);
    let tool = weather(vec![ToolStep::typed_error(
        "odd",
        ToolOutcome::from_wire("maybe").unwrap(),
        ToolRetry::from_wire("later").unwrap(),
    )]);
    let engine = builder(provider).tool(Arc::new(tool)).build().unwrap();
    let (outcome, events) = run_to_end(&engine, "run_unknown_tool_values").await;
    assert!(
        matches!(outcome, RunOutcome::Completed { .. }),
        "{outcome:?}"
    );
    let typed: Vec<_> = events
        .iter()
        .filter_map(|e| match e.payload().unwrap() {
            Payload::ToolFailed(f) => Some((f.outcome, f.retry)),
            _ => None,
        })
        .collect();
    assert_eq!(
        typed,
        [(Some(ToolOutcome::Uncertain), Some(ToolRetry::NotRetryable))]
    );
}

#[tokio::test(start_paused = true)]
async fn tool_failures_feed_back_by_default_with_full_correlation() {
    let provider = ScriptedProvider::new(vec![
        vec![
            call("c1"),
            call("c2"),
            call("c3"),
            ScriptItem::tool_call("c4", "no_such_tool", json!({})),
            ScriptItem::complete(FinishReason::ToolCalls),
        ],
        done(),
    ])
    .recording_requests();
    let handle = provider.handle();
    let tool = weather(vec![
        ToolStep::typed_error(
            "upstream 503",
            ToolOutcome::Definitive,
            ToolRetry::Retryable,
        ),
        ToolStep::panic("bug"),
        ToolStep::hang(),
    ])
    .with_policy(ToolPolicy {
        timeout: Some(Duration::from_secs(5)),
        ..ToolPolicy::default()
    });
    let limits = EngineLimits {
        max_parallel_tools: 1,
        ..EngineLimits::default()
    };
    let engine = builder(provider)
        .tool(Arc::new(tool))
        .limits(limits)
        .build()
        .unwrap();
    let (outcome, events) = run_to_end(&engine, "run_tools").await;
    assert!(
        matches!(outcome, RunOutcome::Completed { .. }),
        "{outcome:?}"
    );
    let failed: Vec<(
        String,
        String,
        String,
        Option<ToolOutcome>,
        Option<ToolRetry>,
    )> = events
        .iter()
        .filter_map(|e| match e.payload().unwrap() {
            Payload::ToolFailed(f) => Some((
                f.call_id.to_string(),
                f.tool.to_string(),
                f.error.to_string(),
                f.outcome,
                f.retry,
            )),
            _ => None,
        })
        .collect();
    assert_eq!(
        failed,
        vec![
            (
                "c1".into(),
                "get_weather".into(),
                "upstream 503".into(),
                Some(ToolOutcome::Definitive),
                Some(ToolRetry::Retryable)
            ),
            (
                "c2".into(),
                "get_weather".into(),
                "tool panicked".into(),
                None,
                None
            ),
            (
                "c3".into(),
                "get_weather".into(),
                "timed out after 5000 ms".into(),
                Some(ToolOutcome::Uncertain),
                Some(ToolRetry::Retryable)
            ),
            (
                "c4".into(),
                "no_such_tool".into(),
                "unknown tool no_such_tool".into(),
                None,
                None
            ),
        ]
    );
    // Every failure went back to the model as an error result, in call order.
    let results = handle.requests()[1].history().last().unwrap().clone();
    let flags: Vec<(String, bool)> = results
        .parts()
        .iter()
        .map(|p| match p {
            Part::ToolResult(r) => (r.call_id().to_string(), r.is_error()),
            _ => panic!(),
        })
        .collect();
    assert_eq!(
        flags,
        [
            ("c1".into(), true),
            ("c2".into(), true),
            ("c3".into(), true),
            ("c4".into(), true)
        ]
    );
}

#[tokio::test]
async fn end_run_policy_fails_turn_and_run_with_the_call_as_cause() {
    let provider = ScriptedProvider::new(vec![vec![
        call("c1"),
        ScriptItem::complete(FinishReason::ToolCalls),
    ]]);
    let tool = weather(vec![ToolStep::error("disk on fire")]).with_policy(ToolPolicy {
        on_failure: OnToolFailure::EndRun,
        ..ToolPolicy::default()
    });
    let engine = builder(provider).tool(Arc::new(tool)).build().unwrap();
    let (outcome, events) = run_to_end(&engine, "run_endrun").await;
    assert_kinds(
        &events,
        &[
            "run.started",
            "run.input",
            "turn.started",
            "model.started",
            "model.tool_call",
            "model.completed",
            "tool.started",
            "tool.failed",
            "turn.failed",
            "run.failed",
        ],
    );
    let RunOutcome::Failed {
        cause: FailureCause::Tool { call_id, tool, .. },
    } = outcome
    else {
        panic!("{outcome:?}")
    };
    assert_eq!((call_id.as_str(), tool.as_str()), ("c1", "get_weather"));
    for kind in ["turn.failed", "run.failed"] {
        let cause = match payload(&events, kind) {
            Payload::TurnFailed(f) => f.cause,
            Payload::RunFailed(f) => f.cause,
            _ => None,
        }
        .unwrap();
        assert_eq!(cause.call_id.unwrap().as_str(), "c1", "{kind}");
        assert_eq!(cause.tool.unwrap().as_str(), "get_weather", "{kind}");
    }
}

struct Approver(
    Result<InteractionDecision, InteractionError>,
    Option<Duration>,
);

impl InteractionHandler for Approver {
    fn handle(&self, _request: InteractionRequest) -> InteractionFuture {
        let answer = self.0.clone();
        let wait = self.1;
        Box::pin(async move {
            if let Some(w) = wait {
                tokio::time::sleep(w).await;
            }
            answer
        })
    }
}

fn approval_engine(
    answer: Result<InteractionDecision, InteractionError>,
    wait: Option<Duration>,
) -> (Engine, ToolHandle) {
    let provider = ScriptedProvider::new(vec![
        vec![call("c1"), ScriptItem::complete(FinishReason::ToolCalls)],
        done(),
    ]);
    let tool = weather(vec![ToolStep::ok(json!("sunny"))]).with_policy(ToolPolicy {
        requires_approval: true,
        ..ToolPolicy::default()
    });
    let tool_handle = tool.handle();
    let engine = builder(provider)
        .tool(Arc::new(tool))
        .interaction_handler(Arc::new(Approver(answer, wait)))
        .build()
        .unwrap();
    (engine, tool_handle)
}

const TURN_1_CALL: [&str; 6] = [
    "run.started",
    "run.input",
    "turn.started",
    "model.started",
    "model.tool_call",
    "model.completed",
];
const TURN_2_DONE: [&str; 7] = [
    "turn.completed",
    "turn.started",
    "model.started",
    "model.text_delta",
    "model.completed",
    "turn.completed",
    "run.completed",
];

#[tokio::test]
async fn approved_interaction_runs_the_tool() {
    let (engine, tool) = approval_engine(Ok(InteractionDecision::Approved), None);
    let (_, events) = run_to_end(&engine, "run_approved").await;
    let expected: Vec<&str> = TURN_1_CALL
        .iter()
        .chain(&[
            "interaction.started",
            "interaction.completed",
            "tool.started",
            "tool.completed",
        ])
        .chain(&TURN_2_DONE)
        .copied()
        .collect();
    assert_kinds(&events, &expected);
    assert_eq!(tool.calls().len(), 1);
}

#[tokio::test]
async fn denied_interaction_skips_the_tool_and_says_denied() {
    let (engine, tool) = approval_engine(Ok(InteractionDecision::Denied), None);
    let (_, events) = run_to_end(&engine, "run_denied").await;
    let expected: Vec<&str> = TURN_1_CALL
        .iter()
        .chain(&["interaction.started", "interaction.completed"])
        .chain(&TURN_2_DONE)
        .copied()
        .collect();
    assert_kinds(&events, &expected);
    assert!(tool.calls().is_empty());
    let Payload::InteractionCompleted(c) = payload(&events, "interaction.completed") else {
        panic!()
    };
    assert_eq!(c.decision, "denied");
    // Interactions are numbered from 1 within the run.
    assert_eq!(c.interaction_id.as_str(), "i_1");
}

/// A commit the log refuses (here: a line over its event bound) fails the
/// run with an internal cause; it is not reported as cancelled.
#[tokio::test]
async fn a_refused_commit_fails_the_run() {
    let provider = ScriptedProvider::new(vec![vec![
        ScriptItem::text("x".repeat(12_000)),
        ScriptItem::complete(FinishReason::Stop),
    ]]);
    let engine = builder(provider)
        .log_config(LogConfig {
            max_event_bytes: 8 << 10,
            ..LogConfig::default()
        })
        .build()
        .unwrap();
    let (outcome, events) = run_to_end(&engine, "run_log_full").await;
    assert!(
        matches!(
            outcome,
            RunOutcome::Failed {
                cause: FailureCause::Internal(_)
            }
        ),
        "{outcome:?}"
    );
    let last = events.last().map(|e| e.kind().to_string());
    assert_eq!(last.as_deref(), Some("run.failed"));
}

#[tokio::test]
async fn failed_interaction_skips_the_tool() {
    let (engine, tool) = approval_engine(Err(InteractionError("ui went away".into())), None);
    let (_, events) = run_to_end(&engine, "run_ifail").await;
    let expected: Vec<&str> = TURN_1_CALL
        .iter()
        .chain(&["interaction.started", "interaction.failed"])
        .chain(&TURN_2_DONE)
        .copied()
        .collect();
    assert_kinds(&events, &expected);
    assert!(tool.calls().is_empty());
}

#[tokio::test(start_paused = true)]
async fn cancel_during_an_interaction() {
    let (engine, _) = approval_engine(
        Ok(InteractionDecision::Approved),
        Some(Duration::from_secs(3600)),
    );
    let run = engine.start(request("run_icancel")).unwrap();
    let log = run.log().clone();
    let mut sub = run.subscribe(0).unwrap();
    while let Some(e) = sub.recv().await {
        if e.unwrap().kind().to_string() == "interaction.started" {
            break;
        }
    }
    run.cancel();
    assert_eq!(run.join().await, RunOutcome::Cancelled);
    let events = log.retained_after(0);
    let expected: Vec<&str> = TURN_1_CALL
        .iter()
        .chain(&[
            "interaction.started",
            "interaction.cancelled",
            "turn.cancelled",
            "run.cancelled",
        ])
        .copied()
        .collect();
    assert_kinds(&events, &expected);
}

#[tokio::test(start_paused = true)]
async fn cancel_mid_stream_drops_the_provider_and_closes_innermost_first() {
    let provider = ScriptedProvider::new(vec![vec![
        ScriptItem::text("Thinking"),
        ScriptItem::delay(Duration::from_secs(3600)),
        ScriptItem::text("never"),
    ]]);
    let handle = provider.handle();
    let engine = builder(provider).build().unwrap();
    let run = engine.start(request("run_cancel_model")).unwrap();
    let log = run.log().clone();
    let mut sub = run.subscribe(0).unwrap();
    while let Some(e) = sub.recv().await {
        if e.unwrap().kind().to_string() == "model.text_delta" {
            break;
        }
    }
    run.cancel();
    assert_eq!(run.join().await, RunOutcome::Cancelled);
    assert_kinds(
        &log.retained_after(0),
        &[
            "run.started",
            "run.input",
            "turn.started",
            "model.started",
            "model.text_delta",
            "model.cancelled",
            "turn.cancelled",
            "run.cancelled",
        ],
    );
    assert_eq!(handle.dropped(), 1, "the provider stream was dropped");
    // The subscriber sees the closing events and then the end.
    let rest: Vec<String> = {
        let mut v = Vec::new();
        while let Some(e) = sub.recv().await {
            v.push(e.unwrap().kind().to_string());
        }
        v
    };
    assert_eq!(rest, ["model.cancelled", "turn.cancelled", "run.cancelled"]);
}

#[tokio::test(start_paused = true)]
async fn cancel_during_a_tool_cancels_the_tool_future() {
    let provider = ScriptedProvider::new(vec![vec![
        call("c1"),
        ScriptItem::complete(FinishReason::ToolCalls),
    ]]);
    let tool = weather(vec![ToolStep::hang()]);
    let tool_handle = tool.handle();
    let engine = builder(provider).tool(Arc::new(tool)).build().unwrap();
    let run = engine.start(request("run_cancel_tool")).unwrap();
    let log = run.log().clone();
    tool_handle.wait_called(1).await;
    run.cancel();
    assert_eq!(run.join().await, RunOutcome::Cancelled);
    let expected: Vec<&str> = TURN_1_CALL
        .iter()
        .chain(&[
            "tool.started",
            "tool.cancelled",
            "turn.cancelled",
            "run.cancelled",
        ])
        .copied()
        .collect();
    assert_kinds(&log.retained_after(0), &expected);
    assert_eq!(tool_handle.cancelled(), 1);
}

#[tokio::test]
async fn required_observer_failure_fails_the_run_without_reusing_a_sequence() {
    let provider = ScriptedProvider::new(vec![done()]);
    // Fails from the 4th offer on (model.started), so closing must skip it to complete the
    // first observer's history.
    let faulty = Arc::new(FaultyObserver::new(Fault::FailFrom(4)));
    let recorder = Arc::new(RecordingObserver::new());
    let engine = builder(provider)
        .required_observer(recorder.clone())
        .required_observer(faulty.clone())
        .build()
        .unwrap();
    let (outcome, events) = run_to_end(&engine, "run_obs").await;
    let RunOutcome::Failed {
        cause: FailureCause::Observer(e),
    } = outcome
    else {
        panic!("{outcome:?}")
    };
    assert_eq!((e.seq, e.index), (4, 1));
    // Events are handed over without waiting for each acknowledgement, so
    // the run may commit a few more before the refusal of seq 4 reaches
    // it; it still fails, with that cause, and closes every scope.
    let kinds: Vec<String> = events.iter().map(|e| e.kind().to_string()).collect();
    assert_eq!(
        kinds[..4],
        ["run.started", "run.input", "turn.started", "model.started"]
    );
    assert_eq!(kinds.last().map(String::as_str), Some("run.failed"));
    let Payload::RunFailed(f) = payload(&events, "run.failed") else {
        panic!()
    };
    let cause = f.cause.unwrap();
    assert_eq!(cause.seq, Some(4));
    assert!(cause.observer.is_some());
    // The first observer saw every event, in order, each exactly once
    // (the refused one was re-offered while closing, at least once).
    let seqs: Vec<u64> = recorder.events().iter().map(|e| e.seq()).collect();
    assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>());
}

/// A required observer's refusal that reaches the run while its turn is
/// open fails the turn with the run: the turn is not merely cancelled.
#[tokio::test]
async fn an_observer_failure_fails_the_open_turn() {
    // The refusal of seq 4 (model.started) is in by the time the model
    // answers.
    let provider = ScriptedProvider::new(vec![vec![
        ScriptItem::DelayMs(300),
        ScriptItem::text("late"),
        ScriptItem::complete(FinishReason::Stop),
    ]]);
    let faulty = Arc::new(FaultyObserver::new(Fault::FailFrom(4)));
    let engine = builder(provider).required_observer(faulty).build().unwrap();
    let (outcome, events) = run_to_end(&engine, "run_obs_turn").await;
    assert!(matches!(outcome, RunOutcome::Failed { .. }), "{outcome:?}");
    let kinds: Vec<String> = events.iter().map(|e| e.kind().to_string()).collect();
    assert!(!kinds.iter().any(|k| k == "turn.completed"), "{kinds:?}");
    assert!(!kinds.iter().any(|k| k == "turn.cancelled"), "{kinds:?}");
    assert_eq!(kinds[kinds.len() - 2..], ["turn.failed", "run.failed"]);
}

/// `limits.max_tool_calls_per_turn`: a turn may ask for exactly the bound;
/// past it (by one or by more) the turn and run fail, naming the limit,
/// and no tool runs.
#[tokio::test]
async fn tool_calls_per_turn_are_bounded() {
    for (asked, fails) in [(2, false), (3, true), (5, true)] {
        let mut items: Vec<ScriptItem> = (1..=asked).map(|i| call(&format!("c{i}"))).collect();
        items.push(ScriptItem::complete(FinishReason::ToolCalls));
        let provider = ScriptedProvider::new(vec![items, done()]);
        let tool = weather(vec![ToolStep::ok(json!("x")); asked]);
        let limits = EngineLimits {
            max_tool_calls_per_turn: 2,
            ..EngineLimits::default()
        };
        let engine = builder(provider)
            .tool(Arc::new(tool))
            .limits(limits)
            .build()
            .unwrap();
        let (outcome, events) = run_to_end(&engine, "run_calls").await;
        let started = events
            .iter()
            .filter(|e| e.kind().to_string() == "tool.started")
            .count();
        if fails {
            let RunOutcome::Failed {
                cause: FailureCause::Limit { limit, .. },
            } = &outcome
            else {
                panic!("{asked} calls: {outcome:?}")
            };
            assert_eq!(limit, "limits.max_tool_calls_per_turn");
            assert_eq!(started, 0, "{asked} calls");
        } else {
            assert!(
                matches!(outcome, RunOutcome::Completed { .. }),
                "{asked} calls: {outcome:?}"
            );
            assert_eq!(started, asked, "{asked} calls");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn cancel_works_while_a_required_observer_applies_backpressure() {
    let provider = ScriptedProvider::new(vec![done()]);
    let slow = Arc::new(FaultyObserver::new(Fault::Slow(Duration::from_secs(30))));
    let limits = EngineLimits {
        closing_deadline: MIN_CLOSING_DEADLINE,
        ..EngineLimits::default()
    };
    let engine = builder(provider)
        .required_observer(slow.clone())
        .pipeline_config(keel_observers::PipelineConfig {
            required_deadline: Duration::from_secs(3600),
            // One event in flight: the run waits at its second commit.
            window_events: 1,
            ..Default::default()
        })
        .limits(limits)
        .build()
        .unwrap();
    let run = engine.start(request("run_slow")).unwrap();
    let log = run.log().clone();
    slow.wait_offered(1).await;
    let started = tokio::time::Instant::now();
    run.cancel();
    assert_eq!(run.join().await, RunOutcome::Cancelled);
    assert!(
        started.elapsed() <= Duration::from_secs(1),
        "cancel waited {:?}",
        started.elapsed()
    );
    assert_kinds(
        &log.retained_after(0),
        &["run.started", "run.input", "run.cancelled"],
    );
}

#[tokio::test]
async fn max_turns_fails_the_run_naming_the_limit() {
    let provider = ScriptedProvider::new(vec![
        vec![call("c1"), ScriptItem::complete(FinishReason::ToolCalls)],
        vec![call("c2"), ScriptItem::complete(FinishReason::ToolCalls)],
    ]);
    let tool = weather(vec![ToolStep::ok(json!(1)), ToolStep::ok(json!(2))]);
    let limits = EngineLimits {
        max_turns: 2,
        ..EngineLimits::default()
    };
    let engine = builder(provider)
        .tool(Arc::new(tool))
        .limits(limits)
        .build()
        .unwrap();
    let (outcome, events) = run_to_end(&engine, "run_turns").await;
    let RunOutcome::Failed {
        cause: FailureCause::Limit { limit, .. },
    } = outcome
    else {
        panic!("{outcome:?}")
    };
    assert_eq!(limit, "limits.max_turns");
    assert_eq!(kinds(&events).last().unwrap(), "run.failed");
}

#[tokio::test(start_paused = true)]
async fn shutdown_cancels_live_runs_and_ends_subscriptions() {
    let provider =
        ScriptedProvider::new(vec![vec![ScriptItem::delay(Duration::from_secs(3600))]; 3]);
    let recorder = RecordingBestEffort::new();
    let engine = builder(provider)
        .best_effort_observer(Box::new(recorder.clone()))
        .build()
        .unwrap();
    let runs: Vec<RunHandle> = (0..3)
        .map(|i| engine.start(request(&format!("run_s{i}"))).unwrap())
        .collect();
    let mut subs: Vec<_> = runs.iter().map(|r| r.subscribe(0).unwrap()).collect();
    tokio::task::yield_now().await;
    let report = engine.shutdown(Duration::from_secs(5)).await;
    assert_eq!((report.runs_ended, report.runs_abandoned), (3, 0));
    assert_eq!(report.observers.flushed.len(), 1);
    assert!(matches!(
        engine.start(request("late")),
        Err(StartError::ShuttingDown)
    ));
    for (run, sub) in runs.into_iter().zip(subs.iter_mut()) {
        let mut last = None;
        while let Some(e) = sub.recv().await {
            last = Some(e.unwrap().kind().to_string());
        }
        assert_eq!(last.as_deref(), Some("run.cancelled"));
        assert_eq!(run.join().await, RunOutcome::Cancelled);
    }
}

#[test]
fn build_errors_are_typed() {
    let tool = || Arc::new(weather(vec![]));
    let rows: Vec<(&str, Result<Engine, BuildError>, &str)> = vec![
        (
            "duplicate tool",
            builder(ScriptedProvider::new(vec![]))
                .tool(tool())
                .tool(tool())
                .build(),
            "engine.unique_tools",
        ),
        (
            "approval without handler",
            builder(ScriptedProvider::new(vec![]))
                .tool(Arc::new(weather(vec![]).with_policy(ToolPolicy {
                    requires_approval: true,
                    ..ToolPolicy::default()
                })))
                .build(),
            "engine.approval_handler",
        ),
        (
            "zero turns",
            builder(ScriptedProvider::new(vec![]))
                .limits(EngineLimits {
                    max_turns: 0,
                    ..EngineLimits::default()
                })
                .build(),
            "engine.limits",
        ),
        (
            "zero parallelism",
            builder(ScriptedProvider::new(vec![]))
                .limits(EngineLimits {
                    max_parallel_tools: 0,
                    ..EngineLimits::default()
                })
                .build(),
            "engine.limits",
        ),
        (
            "more parallel tools than open scopes",
            builder(ScriptedProvider::new(vec![]))
                .limits(EngineLimits {
                    max_parallel_tools: 63,
                    ..EngineLimits::default()
                })
                .build(),
            "at most log.max_open_scopes - 2",
        ),
        (
            "bad retention",
            builder(ScriptedProvider::new(vec![]))
                .log_config(keel_eventlog::LogConfig {
                    max_events: 1,
                    ..Default::default()
                })
                .build(),
            "log.terminal_reserve",
        ),
    ];
    for (row, got, rule) in rows {
        let err = got.err().unwrap_or_else(|| panic!("row {row}: built"));
        assert!(err.to_string().contains(rule), "row {row}: {err}");
    }
}

/// A tool output within `limits.part_bytes` whose escaped form passes
/// `log.max_event_bytes` (control characters take six bytes in JSON) is
/// the tool's failure, fed back to the model; the run goes on. Before,
/// the commit was refused and the run failed as "internal".
#[tokio::test]
async fn an_output_that_escapes_past_the_event_bound_fails_the_tool_not_the_run() {
    let provider = ScriptedProvider::new(vec![
        vec![call("c1"), ScriptItem::complete(FinishReason::ToolCalls)],
        done(),
    ]);
    // 400,000 bytes raw (under part_bytes, 1 MiB); 2.4 MB escaped (over
    // max_event_bytes, 2 MiB).
    let output = "\u{1}".repeat(400_000);
    let engine = builder(provider)
        .tool(Arc::new(weather(vec![ToolStep::ok(json!(output))])))
        .build()
        .unwrap();
    let (outcome, events) = run_to_end(&engine, "run_escape").await;
    assert!(
        matches!(outcome, RunOutcome::Completed { .. }),
        "{outcome:?}"
    );
    let Payload::ToolFailed(failed) = payload(&events, "tool.failed") else {
        panic!("not tool.failed")
    };
    assert!(
        failed.error.as_str().contains("rule log.max_event_bytes"),
        "{}",
        failed.error.as_str()
    );
    assert_eq!(failed.outcome, Some(ToolOutcome::Uncertain));
    assert!(
        events
            .iter()
            .all(|e| e.kind().to_string() != "tool.completed")
    );
}

#[tokio::test]
async fn start_errors_are_typed_and_commit_nothing() {
    let engine = builder(ScriptedProvider::new(vec![done(), done()]))
        .build()
        .unwrap();
    let req = request("run_x").provider_named("nope");
    assert!(matches!(
        engine.start(req),
        Err(StartError::UnknownProvider { .. })
    ));
    let req = RunRequest::new(
        RunId::parse("run_x").unwrap(),
        ModelName::parse("m").unwrap(),
        vec![],
    );
    assert!(matches!(engine.start(req), Err(StartError::EmptyHistory)));
    let first = engine.start(request("run_x")).unwrap();
    assert!(matches!(
        engine.start(request("run_x")),
        Err(StartError::DuplicateRun { .. })
    ));
    first.join().await;
}

/// Starts a run, lets it reach its first wait, cancels it, returns its log.
async fn cancel_soon(engine: &Engine, id: &str) -> Vec<Arc<Event>> {
    let run = engine.start(request(id)).unwrap();
    let log = run.log().clone();
    tokio::time::sleep(Duration::from_millis(10)).await;
    run.cancel();
    assert_eq!(run.join().await, RunOutcome::Cancelled);
    log.retained_after(0)
}

/// Every (scope, terminal) pair is reached by the tests above; this one
/// checks that claim by running them through the summary counter.
#[tokio::test(start_paused = true)]
async fn terminal_coverage_summary() {
    let mut seen = std::collections::BTreeSet::new();
    let mut add = |events: &[Arc<Event>]| {
        for (k, n) in assert_lifecycle(events).all_terminals() {
            if *n > 0 {
                seen.insert(*k);
            }
        }
    };
    // completed everywhere
    let (engine, _) = approval_engine(Ok(InteractionDecision::Approved), None);
    add(&run_to_end(&engine, "a").await.1);
    // failed model/turn/run, tool failed, interaction failed
    let engine = builder(ScriptedProvider::new(vec![vec![ScriptItem::fail(
        ProblemKind::Auth,
        "x",
        false,
    )]]))
    .build()
    .unwrap();
    add(&run_to_end(&engine, "b").await.1);
    let engine = builder(ScriptedProvider::new(vec![
        vec![call("c1"), ScriptItem::complete(FinishReason::ToolCalls)],
        done(),
    ]))
    .tool(Arc::new(weather(vec![ToolStep::error("e")])))
    .build()
    .unwrap();
    add(&run_to_end(&engine, "c").await.1);
    let (engine, _) = approval_engine(Err(InteractionError("e".into())), None);
    add(&run_to_end(&engine, "d").await.1);
    // cancelled: interaction (and turn, run); model; tool
    let (engine, _) = approval_engine(
        Ok(InteractionDecision::Approved),
        Some(Duration::from_secs(3600)),
    );
    add(&cancel_soon(&engine, "e").await);
    let engine = builder(ScriptedProvider::new(vec![vec![ScriptItem::delay(
        Duration::from_secs(3600),
    )]]))
    .build()
    .unwrap();
    add(&cancel_soon(&engine, "f").await);
    let engine = builder(ScriptedProvider::new(vec![vec![
        call("c1"),
        ScriptItem::complete(FinishReason::ToolCalls),
    ]]))
    .tool(Arc::new(weather(vec![ToolStep::hang()])))
    .build()
    .unwrap();
    add(&cancel_soon(&engine, "g").await);
    for scope in Scope::ALL {
        for terminal in Terminal::ALL {
            assert!(
                seen.contains(&(scope, terminal)),
                "{scope:?} {terminal:?} never reached"
            );
        }
    }
}

/// `model.completed` carries the allowlisted provider metadata when there
/// is some, and no `metadata` field when there is none.
#[tokio::test]
async fn completions_carry_allowlisted_metadata_only_when_there_is_some() {
    for metadata in [Some(json!({"openai": {"request_id": "req_1"}})), None] {
        let provider = ScriptedProvider::new(vec![vec![
            ScriptItem::text("hi"),
            ScriptItem::Complete(ScriptComplete {
                finish: FinishReason::Stop,
                usage: None,
                metadata: metadata.clone(),
            }),
        ]]);
        let engine = builder(provider)
            .allow_metadata(MetadataAllowlist::new(["openai"]).unwrap())
            .build()
            .unwrap();
        let (_, events) = run_to_end(&engine, "run_meta").await;
        let Payload::ModelCompleted(done) = payload(&events, "model.completed") else {
            panic!()
        };
        let recorded = done.metadata.as_ref().map(|m| m.to_value());
        assert_eq!(recorded, metadata);
    }
}

/// A tool's output may be exactly `limits.part_bytes`; one byte more and
/// the call fails, naming the bound.
#[tokio::test]
async fn tool_output_is_bounded_by_part_bytes() {
    for (bytes, kind) in [(256, "tool.completed"), (257, "tool.failed")] {
        let provider = ScriptedProvider::new(vec![
            vec![call("c1"), ScriptItem::complete(FinishReason::ToolCalls)],
            done(),
        ]);
        let tool = weather(vec![ToolStep::ok(json!("x".repeat(bytes)))]);
        let engine = builder(provider)
            .tool(Arc::new(tool))
            .message_limits(Limits {
                part_bytes: 256,
                ..Limits::default()
            })
            .build()
            .unwrap();
        let (_, events) = run_to_end(&engine, "run_part_bytes").await;
        let ended: Vec<String> = events
            .iter()
            .map(|e| e.kind().to_string())
            .filter(|k| k == "tool.completed" || k == "tool.failed")
            .collect();
        assert_eq!(ended, [kind], "{bytes} bytes");
        if let Payload::ToolFailed(f) = payload(&events, kind) {
            assert!(f.error.as_str().contains("limits.part_bytes"), "{f:?}");
        }
    }
}

#[tokio::test]
async fn has_tool_names_the_builders_and_the_requests_tools_only() {
    let provider = ScriptedProvider::new(vec![done()]);
    let engine = builder(provider)
        .tool(Arc::new(weather(vec![])))
        .build()
        .unwrap();
    let name = |n: &str| ToolName::parse(n).unwrap();
    let plain = request("run_has_tool");
    assert!(
        engine.has_tool(&plain, &name("get_weather")),
        "the builder's"
    );
    assert!(!engine.has_tool(&plain, &name("pick_color")));
    let own = ScriptedTool::named("pick_color", vec![]).unwrap();
    let with_own = request("run_has_tool").tool(Arc::new(own));
    assert!(
        engine.has_tool(&with_own, &name("pick_color")),
        "the request's"
    );
    assert!(engine.has_tool(&with_own, &name("get_weather")));
    assert!(!engine.has_tool(&with_own, &name("other")));
}

/// `tool.started` of an idempotent tool records `"idempotent": true`
/// (what recovery reads); any other tool's records nothing more.
#[tokio::test]
async fn tool_started_records_an_idempotent_tool() {
    for idempotent in [false, true] {
        let provider = ScriptedProvider::new(vec![
            vec![call("c1"), ScriptItem::complete(FinishReason::ToolCalls)],
            done(),
        ]);
        let tool = weather(vec![ToolStep::ok(json!("sunny"))]).with_policy(ToolPolicy {
            idempotent,
            ..ToolPolicy::default()
        });
        let engine = builder(provider).tool(Arc::new(tool)).build().unwrap();
        let (_, events) = run_to_end(&engine, "run_idem").await;
        let started = events
            .iter()
            .find(|e| e.kind().to_string() == "tool.started")
            .unwrap();
        assert_eq!(
            started.line().contains(r#""idempotent":true"#),
            idempotent,
            "{}",
            started.line()
        );
    }
}

/// `live_run` finds a live run by its id's text, and nothing for another
/// id, text that is no run id, or a run that has ended.
#[tokio::test]
async fn live_run_is_found_by_its_id_text() {
    let provider = ScriptedProvider::new(vec![vec![
        call("c1"),
        ScriptItem::complete(FinishReason::ToolCalls),
    ]]);
    let tool = weather(vec![ToolStep::hang()]);
    let engine = builder(provider).tool(Arc::new(tool)).build().unwrap();
    let run = engine.start(request("run_live")).unwrap();
    let check = |text: &str, live: bool| {
        let found = engine
            .live_run(text)
            .map(|r| r.run_id().as_str().to_owned());
        assert_eq!(found, live.then(|| text.to_owned()), "live_run({text:?})");
    };
    for (text, live) in [
        ("run_live", true),
        ("run_other", false),
        ("RUN_LIVE", false),
        ("run_live ", false),
        ("run live", false),
        ("", false),
    ] {
        check(text, live);
    }
    run.cancel();
    run.join().await;
    check("run_live", false);
}
