//! "Every Started gets exactly one matching terminal", case by case: the
//! histories that once broke it (issue 15), each with the fix it needs,
//! plus per-run composition. Every run here ends with `assert_lifecycle`
//! over its whole log.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::request;
use common::{call, calls, done};
use keel_engine::*;
use keel_eventlog::{Event, Payload};
use keel_message::*;
use keel_stream::{
    FinishReason, ModelProvider, ProblemKind, RawItem, RawStream, RetryPosition, StartFuture,
};
use keel_testkit::*;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

fn tool(name: &str, steps: Vec<ToolStep>) -> ScriptedTool {
    ScriptedTool::named(name, steps).unwrap()
}

fn needs_approval(t: ScriptedTool) -> ScriptedTool {
    t.with_policy(ToolPolicy {
        requires_approval: true,
        ..ToolPolicy::default()
    })
}

fn engine_with(provider: ScriptedProvider) -> EngineBuilder {
    Engine::builder()
        .provider("scripted", Arc::new(provider))
        .clock(Arc::new(ManualClock::default()))
}

/// Runs `request` to its end and checks the whole log's lifecycle and that
/// the run left the registry.
async fn check(engine: &Engine, request: RunRequest) -> (RunOutcome, Vec<Arc<Event>>) {
    let run = engine.start(request).unwrap();
    let log = run.log().clone();
    let outcome = run.join().await;
    let events = log.retained_after(0);
    assert_lifecycle(&events);
    assert_eq!(engine.live_runs(), 0, "the run left the registry");
    (outcome, events)
}

fn kinds(events: &[Arc<Event>]) -> Vec<String> {
    events.iter().map(|e| e.kind().to_string()).collect()
}

/// Returns once `run`'s log holds an event of `kind`.
async fn committed(run: &RunHandle, kind: &str) {
    let mut sub = run.subscribe(0).unwrap();
    while let Some(e) = sub.recv().await {
        if e.unwrap().kind().to_string() == kind {
            return;
        }
    }
    panic!("the log ended without {kind}");
}

fn payloads(events: &[Arc<Event>], kind: &str) -> Vec<Payload> {
    events
        .iter()
        .filter(|e| e.kind().to_string() == kind)
        .map(|e| e.payload().unwrap())
        .collect()
}

/// An interaction handler that never answers.
struct Silent;
impl InteractionHandler for Silent {
    fn handle(&self, _request: InteractionRequest) -> InteractionFuture {
        Box::pin(std::future::pending())
    }
}

/// Case 1: an `end_run` failure while a sibling waits for approval closes
/// the interaction and keeps the failing call as the cause.
#[tokio::test]
async fn end_run_failure_closes_a_sibling_waiting_for_approval() {
    let provider = ScriptedProvider::new(vec![calls(vec![
        call("c1", "send_email"),
        call("c2", "get_weather"),
    ])]);
    let failing =
        tool("get_weather", vec![ToolStep::error("disk on fire")]).with_policy(ToolPolicy {
            on_failure: OnToolFailure::EndRun,
            ..ToolPolicy::default()
        });
    let engine = engine_with(provider)
        .tool(Arc::new(needs_approval(tool("send_email", vec![]))))
        .tool(Arc::new(failing))
        .interaction_handler(Arc::new(Silent))
        .build()
        .unwrap();
    let (outcome, events) = check(&engine, request("run_case1").provider_named("scripted")).await;
    let k = kinds(&events);
    assert_eq!(
        &k[k.len() - 3..],
        ["interaction.cancelled", "turn.failed", "run.failed"],
        "{k:?}"
    );
    let RunOutcome::Failed {
        cause: FailureCause::Tool { call_id, .. },
    } = outcome
    else {
        panic!("{outcome:?}")
    };
    assert_eq!(call_id.as_str(), "c2");
    for kind in ["turn.failed", "run.failed"] {
        let cause = match &payloads(&events, kind)[0] {
            Payload::TurnFailed(f) => f.cause.clone(),
            Payload::RunFailed(f) => f.cause.clone(),
            _ => None,
        }
        .unwrap();
        assert_eq!(cause.call_id.unwrap().as_str(), "c2", "{kind}");
        assert_eq!(cause.tool.unwrap().as_str(), "get_weather", "{kind}");
    }
}

/// Case 2: a call id the model already used is a protocol failure of that
/// model call, found before any tool runs.
#[tokio::test]
async fn a_call_id_reused_in_a_later_turn_is_a_protocol_failure() {
    let provider = ScriptedProvider::new(vec![
        calls(vec![call("c1", "get_weather")]),
        calls(vec![call("c1", "get_weather")]),
    ]);
    let weather = tool("get_weather", vec![ToolStep::ok(json!("sunny")); 2]);
    let handle = weather.handle();
    let engine = engine_with(provider)
        .tool(Arc::new(weather))
        .build()
        .unwrap();
    let (outcome, events) = check(&engine, request("run_case2")).await;
    assert_eq!(handle.calls().len(), 1, "the reused call never ran");
    assert_eq!(payloads(&events, "tool.started").len(), 1);
    assert_eq!(payloads(&events, "model.tool_call").len(), 1);
    let RunOutcome::Failed {
        cause: FailureCause::Model {
            problem, position, ..
        },
    } = outcome
    else {
        panic!("{outcome:?}")
    };
    assert_eq!(problem.kind(), ProblemKind::Protocol);
    assert!(
        problem.message().contains("run.unique_call_id"),
        "{}",
        problem.message()
    );
    assert_eq!(position, RetryPosition::Pristine);
}

/// Case 2b: a reused call id after a new call in the same response fails
/// a model call that already shows output: its position is partial.
#[tokio::test]
async fn a_call_id_reused_after_a_new_call_fails_a_partial_attempt() {
    let provider = ScriptedProvider::new(vec![
        calls(vec![call("c1", "get_weather")]),
        calls(vec![call("c2", "get_weather"), call("c1", "get_weather")]),
    ]);
    let weather = tool("get_weather", vec![ToolStep::ok(json!("sunny")); 3]);
    let engine = engine_with(provider)
        .tool(Arc::new(weather))
        .build()
        .unwrap();
    let (outcome, events) = check(&engine, request("run_case2b")).await;
    assert_eq!(payloads(&events, "model.tool_call").len(), 2);
    let RunOutcome::Failed {
        cause: FailureCause::Model { position, .. },
    } = outcome
    else {
        panic!("{outcome:?}")
    };
    assert_eq!(position, RetryPosition::Partial);
}

/// Case 3: when the acknowledgement of `tool.started` fails, or is
/// cancelled, the closing `tool.cancelled` names the tool its start named.
#[tokio::test(start_paused = true)]
async fn a_refused_or_cancelled_tool_start_closes_under_its_own_name() {
    // run.started 1, run.input 2, turn.started 3, model.started 4,
    // model.tool_call 5, model.completed 6, tool.started 7.
    for (fault, cancel) in [(Fault::FailOn(7), false), (Fault::HangOn(7), true)] {
        let provider = ScriptedProvider::new(vec![calls(vec![call("c1", "get_weather")]), done()]);
        let engine = engine_with(provider)
            .tool(Arc::new(tool(
                "get_weather",
                vec![ToolStep::ok(json!("x"))],
            )))
            .required_observer(Arc::new(FaultyObserver::new(fault)))
            .pipeline_config(keel_observers::PipelineConfig {
                required_deadline: Duration::from_secs(3600),
                ..Default::default()
            })
            .build()
            .unwrap();
        let run = engine.start(request("run_case3")).unwrap();
        let log = run.log().clone();
        if cancel {
            tokio::time::sleep(Duration::from_secs(1)).await;
            run.cancel();
        }
        let outcome = run.join().await;
        let events = log.retained_after(0);
        assert_lifecycle(&events);
        let cancelled = payloads(&events, "tool.cancelled");
        let Some(Payload::ToolCancelled(t)) = cancelled.first() else {
            panic!("no tool.cancelled: {:?} {outcome:?}", kinds(&events))
        };
        assert_eq!(t.tool.as_str(), "get_weather");
    }
}

/// A provider that panics in `start` (synchronously) or while its stream
/// is polled.
struct PanickingProvider {
    in_stream: bool,
}

impl ModelProvider for PanickingProvider {
    fn start(&self, _request: ModelRequest) -> StartFuture {
        if !self.in_stream {
            panic!("provider start");
        }
        let items = futures_util::stream::iter(vec![RawItem::text("partial")]).chain(
            futures_util::stream::poll_fn(|_| -> std::task::Poll<Option<RawItem>> {
                panic!("provider stream")
            }),
        );
        let stream: RawStream = Box::pin(items);
        Box::pin(async move { Ok(stream) })
    }
}
use futures_util::StreamExt;

/// A tool that panics in `call` (synchronously) or while polled.
struct PanickingTool {
    definition: ToolDefinition,
    in_future: bool,
}

impl Tool for PanickingTool {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }
    fn call(&self, _invocation: ToolInvocation) -> ToolFuture {
        if !self.in_future {
            panic!("tool call");
        }
        Box::pin(async { panic!("tool future") })
    }
}

/// A handler that panics in `handle` (synchronously) or while polled.
struct PanickingHandler {
    in_future: bool,
}

impl InteractionHandler for PanickingHandler {
    fn handle(&self, _request: InteractionRequest) -> InteractionFuture {
        if !self.in_future {
            panic!("handler");
        }
        Box::pin(async { panic!("handler future") })
    }
}

/// Case 4: a panic in any extension point, synchronous part or future, is
/// a typed failure; every terminal is committed and the run leaves the
/// registry.
#[tokio::test]
async fn panics_in_extension_points_are_typed_failures() {
    for in_stream in [false, true] {
        let engine = Engine::builder()
            .limits(EngineLimits {
                retry: RetryPolicy::none(),
                ..EngineLimits::default()
            })
            .build()
            .unwrap();
        let req = request("run_case4p").provider(Arc::new(PanickingProvider { in_stream }));
        let (outcome, events) = check(&engine, req).await;
        let RunOutcome::Failed {
            cause: FailureCause::Model { problem, .. },
        } = outcome
        else {
            panic!("{outcome:?}")
        };
        assert!(
            problem.message().contains("panicked"),
            "{}",
            problem.message()
        );
        assert_eq!(kinds(&events).last().unwrap(), "run.failed");
    }
    for in_future in [false, true] {
        let provider = ScriptedProvider::new(vec![calls(vec![call("c1", "boom")]), done()]);
        let boom = PanickingTool {
            definition: ToolDefinition::new(
                ToolName::parse("boom").unwrap(),
                "panics",
                CanonicalJson::parse(r#"{"type":"object"}"#).unwrap(),
            )
            .unwrap(),
            in_future,
        };
        let engine = engine_with(provider).tool(Arc::new(boom)).build().unwrap();
        let (outcome, events) = check(&engine, request("run_case4t")).await;
        assert!(
            matches!(outcome, RunOutcome::Completed { .. }),
            "{outcome:?}"
        );
        let Payload::ToolFailed(f) = &payloads(&events, "tool.failed")[0] else {
            panic!()
        };
        assert_eq!(f.error.as_str(), "tool panicked");
    }
    for in_future in [false, true] {
        let provider = ScriptedProvider::new(vec![calls(vec![call("c1", "send")]), done()]);
        let engine = engine_with(provider)
            .tool(Arc::new(needs_approval(tool("send", vec![]))))
            .interaction_handler(Arc::new(PanickingHandler { in_future }))
            .build()
            .unwrap();
        let (outcome, events) = check(&engine, request("run_case4h")).await;
        assert!(
            matches!(outcome, RunOutcome::Completed { .. }),
            "{outcome:?}"
        );
        assert_eq!(payloads(&events, "interaction.failed").len(), 1);
        assert!(payloads(&events, "tool.started").is_empty());
    }
}

/// Case 4, observers: a required observer that panics, synchronously or
/// while polled, fails the run as an observer failure with every terminal
/// in the log.
#[tokio::test]
async fn panicking_observers_fail_the_run_with_every_terminal_committed() {
    for fault in [Fault::PanicOn(3)] {
        let engine = engine_with(ScriptedProvider::new(vec![done()]))
            .required_observer(Arc::new(FaultyObserver::new(fault)))
            .build()
            .unwrap();
        let (outcome, events) = check(&engine, request("run_case4o")).await;
        assert!(
            matches!(
                outcome,
                RunOutcome::Failed {
                    cause: FailureCause::Observer(_)
                }
            ),
            "{outcome:?}"
        );
        assert_eq!(kinds(&events).last().unwrap(), "run.failed");
    }
}

/// A tool that blocks its thread in the synchronous part of `call`, so
/// the run cannot see a cancellation until it returns.
struct BlockingTool(ToolDefinition);

impl Tool for BlockingTool {
    fn definition(&self) -> &ToolDefinition {
        &self.0
    }
    fn call(&self, _invocation: ToolInvocation) -> ToolFuture {
        std::thread::sleep(Duration::from_millis(1500));
        Box::pin(async { Ok("late".into()) })
    }
}

/// Case 5: a shutdown past its deadline still commits every terminal to
/// the log before it is shut down, and the run's outcome agrees with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_past_its_deadline_commits_every_terminal() {
    let provider = ScriptedProvider::new(vec![calls(vec![call("c1", "slow")]), done()]);
    let slow = BlockingTool(
        ToolDefinition::new(
            ToolName::parse("slow").unwrap(),
            "blocks",
            CanonicalJson::parse(r#"{"type":"object"}"#).unwrap(),
        )
        .unwrap(),
    );
    let engine = engine_with(provider).tool(Arc::new(slow)).build().unwrap();
    let run = engine.start(request("run_case5")).unwrap();
    let log = run.log().clone();
    committed(&run, "tool.started").await;
    let report = engine.shutdown(Duration::from_millis(200)).await;
    assert_eq!(report.runs_abandoned, 1, "{report:?}");
    assert_eq!(report.unacknowledged.len(), 1);
    let events = log.retained_after(0);
    assert_lifecycle(&events);
    assert_eq!(kinds(&events).last().unwrap(), "run.cancelled");
    assert_eq!(
        run.join().await,
        RunOutcome::Cancelled,
        "the outcome is what the log says"
    );
}

/// Case 6: the closing deadline has a floor no configuration can lower.
#[tokio::test]
async fn the_closing_deadline_has_a_floor() {
    let low = EngineLimits {
        closing_deadline: Duration::from_millis(1),
        ..EngineLimits::default()
    };
    let built = Engine::builder().limits(low.clone()).build();
    let Err(BuildError::InvalidLimit(e)) = built else {
        panic!("built: {built:?}")
    };
    assert_eq!((e.field().name(), e.value()), ("closing_deadline", "1 ms"));
    let engine = engine_with(ScriptedProvider::new(vec![done()]))
        .build()
        .unwrap();
    let started = engine.start(request("run_case6").limits(low));
    let Err(StartError::InvalidLimit(e)) = started else {
        panic!("started: {started:?}")
    };
    assert!(e.to_string().contains("at least 500 ms"), "{e}");
    assert_eq!(engine.live_runs(), 0);
}

/// The whole rule set of engine limits, each row breaking one rule: the
/// error names the field, and a builder refuses the same limits.
#[test]
fn every_limit_rule_names_its_field() {
    use keel_engine::{LimitField, RetryPolicy};
    let retry = |r: RetryPolicy| EngineLimits {
        retry: r,
        ..EngineLimits::default()
    };
    let rows: Vec<(EngineLimits, LimitField)> = vec![
        (
            EngineLimits {
                max_turns: 0,
                ..EngineLimits::default()
            },
            LimitField::MaxTurns,
        ),
        (
            EngineLimits {
                max_tool_calls_per_turn: 0,
                ..EngineLimits::default()
            },
            LimitField::MaxToolCallsPerTurn,
        ),
        (
            EngineLimits {
                max_parallel_tools: 0,
                ..EngineLimits::default()
            },
            LimitField::MaxParallelTools,
        ),
        (
            EngineLimits {
                model_call_timeout: Duration::ZERO,
                ..EngineLimits::default()
            },
            LimitField::ModelCallTimeout,
        ),
        (
            EngineLimits {
                tool_call_timeout: Duration::ZERO,
                ..EngineLimits::default()
            },
            LimitField::ToolCallTimeout,
        ),
        (
            EngineLimits {
                approval_timeout: Duration::ZERO,
                ..EngineLimits::default()
            },
            LimitField::ApprovalTimeout,
        ),
        (
            EngineLimits {
                closing_deadline: Duration::from_millis(499),
                ..EngineLimits::default()
            },
            LimitField::ClosingDeadline,
        ),
        (
            retry(RetryPolicy {
                max_attempts: 0,
                ..RetryPolicy::default()
            }),
            LimitField::RetryMaxAttempts,
        ),
        (
            retry(RetryPolicy {
                multiplier: 0.5,
                ..RetryPolicy::default()
            }),
            LimitField::RetryMultiplier,
        ),
        (
            retry(RetryPolicy {
                multiplier: f64::NAN,
                ..RetryPolicy::default()
            }),
            LimitField::RetryMultiplier,
        ),
        (
            retry(RetryPolicy {
                jitter: 1.01,
                ..RetryPolicy::default()
            }),
            LimitField::RetryJitter,
        ),
        (
            retry(RetryPolicy {
                jitter: -0.1,
                ..RetryPolicy::default()
            }),
            LimitField::RetryJitter,
        ),
        (
            retry(RetryPolicy {
                initial_backoff: Duration::from_secs(2),
                max_backoff: Duration::from_secs(1),
                ..RetryPolicy::default()
            }),
            LimitField::RetryInitialBackoff,
        ),
    ];
    for (limits, field) in rows {
        let err = limits.check().unwrap_err();
        assert_eq!(err.field(), field, "{err}");
        assert!(err.to_string().contains(field.name()), "{err}");
        assert!(err.to_string().contains("rule engine.limits"), "{err}");
        let built = Engine::builder().limits(limits).build();
        assert!(matches!(built, Err(BuildError::InvalidLimit(_))), "{field}");
    }
    // The edges are allowed.
    let edges = EngineLimits {
        closing_deadline: MIN_CLOSING_DEADLINE,
        retry: RetryPolicy {
            multiplier: 1.0,
            jitter: 1.0,
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(1),
            ..RetryPolicy::default()
        },
        ..EngineLimits::default()
    };
    assert_eq!(edges.check(), Ok(()));
    assert_eq!(
        retry(RetryPolicy {
            jitter: 0.0,
            ..RetryPolicy::default()
        })
        .check(),
        Ok(())
    );
}

/// Case 7: an empty completion is a failed attempt (`protocol`,
/// retryable), never a turn failing on a message rule.
#[tokio::test(start_paused = true)]
async fn an_empty_completion_is_a_typed_model_failure() {
    let empty = || vec![ScriptItem::complete(FinishReason::Stop)];
    let provider = ScriptedProvider::new(vec![empty(), done()]);
    let engine = engine_with(provider).build().unwrap();
    let (outcome, events) = check(&engine, request("run_case7a")).await;
    assert!(
        matches!(outcome, RunOutcome::Completed { .. }),
        "retried: {outcome:?}"
    );
    let Payload::ModelFailed(f) = &payloads(&events, "model.failed")[0] else {
        panic!()
    };
    assert_eq!(f.problem.kind, ProblemKind::Protocol);
    assert!(
        f.problem
            .message
            .as_str()
            .contains("model.nonempty_completion")
    );

    let engine = engine_with(ScriptedProvider::new(vec![empty()]))
        .limits(EngineLimits {
            retry: RetryPolicy::none(),
            ..EngineLimits::default()
        })
        .build()
        .unwrap();
    let (outcome, _) = check(&engine, request("run_case7b")).await;
    let RunOutcome::Failed {
        cause: FailureCause::Model { problem, .. },
    } = outcome
    else {
        panic!("{outcome:?}")
    };
    assert!(!problem.message().contains("message.nonempty"));
    assert_eq!(problem.kind(), ProblemKind::Protocol);
}

/// Case 9: an unanswered approval fails its interaction when
/// `approval_timeout` runs out; the tool does not run and the run goes on.
#[tokio::test(start_paused = true)]
async fn an_unanswered_approval_times_out() {
    let provider = ScriptedProvider::new(vec![calls(vec![call("c1", "send")]), done()]);
    let send = needs_approval(tool("send", vec![ToolStep::ok(json!("sent"))]));
    let handle = send.handle();
    let engine = engine_with(provider)
        .tool(Arc::new(send))
        .interaction_handler(Arc::new(Silent))
        .limits(EngineLimits {
            approval_timeout: Duration::from_secs(30),
            ..EngineLimits::default()
        })
        .build()
        .unwrap();
    // Paused time: without the timeout the run would wait forever, and
    // this hour (virtual) is what ends the test instead.
    let run = engine.start(request("run_case9")).unwrap();
    let log = run.log().clone();
    let outcome = tokio::time::timeout(Duration::from_secs(3600), run.join())
        .await
        .expect("the approval timed out");
    let events = log.retained_after(0);
    assert_lifecycle(&events);
    assert!(
        matches!(outcome, RunOutcome::Completed { .. }),
        "{outcome:?}"
    );
    let Payload::InteractionFailed(f) = &payloads(&events, "interaction.failed")[0] else {
        panic!()
    };
    assert!(
        f.error.as_str().contains("interaction.timeout"),
        "{}",
        f.error.as_str()
    );
    assert!(handle.calls().is_empty());
}

/// Per-run composition: two runs on one engine, each with its own provider
/// and tools, see only their own tools.
#[tokio::test]
async fn runs_bring_their_own_providers_and_tools() {
    let engine = Engine::builder().build().unwrap();
    let mut runs = Vec::new();
    for (id, own, other) in [("run_a", "alpha", "beta"), ("run_b", "beta", "alpha")] {
        let provider = ScriptedProvider::new(vec![
            calls(vec![call("c1", own), call("c2", other)]),
            done(),
        ]);
        let t = tool(own, vec![ToolStep::ok(json!("mine"))]);
        let req = request(id).provider(Arc::new(provider)).tool(Arc::new(t));
        runs.push(engine.start(req).unwrap());
    }
    assert_eq!(engine.live_runs(), 2);
    for run in runs {
        let log = run.log().clone();
        assert!(matches!(run.join().await, RunOutcome::Completed { .. }));
        let events = log.retained_after(0);
        assert_lifecycle(&events);
        assert_eq!(payloads(&events, "tool.completed").len(), 1);
        let Payload::ToolFailed(f) = &payloads(&events, "tool.failed")[0] else {
            panic!()
        };
        assert!(
            f.error.as_str().starts_with("unknown tool"),
            "{}",
            f.error.as_str()
        );
    }
}

#[tokio::test]
async fn composition_errors_are_typed_and_start_nothing() {
    let shared = Arc::new(tool("shared", vec![]));
    let engine = Engine::builder().tool(shared.clone()).build().unwrap();
    let provider = || Arc::new(ScriptedProvider::new(vec![done()]));
    let rows: Vec<(&str, RunRequest, &str)> = vec![
        ("no provider", request("r1"), "run.provider_required"),
        (
            "unknown provider",
            request("r1").provider_named("x"),
            "run.provider_known",
        ),
        (
            "tool twice",
            request("r1")
                .provider(provider())
                .tool(Arc::new(tool("shared", vec![]))),
            "run.unique_tools",
        ),
        (
            "approval without handler",
            request("r1")
                .provider(provider())
                .tool(Arc::new(needs_approval(tool("send", vec![])))),
            "run.approval_handler",
        ),
    ];
    for (row, req, rule) in rows {
        let err = engine
            .start(req)
            .err()
            .unwrap_or_else(|| panic!("row {row}: started"));
        assert!(err.to_string().contains(rule), "row {row}: {err}");
    }
    assert_eq!(engine.live_runs(), 0);
}

/// A run cancelled before its task first runs still records that it
/// started and was cancelled: a run `start` accepted is never missing
/// from the log (and so from the journal).
#[tokio::test]
async fn a_run_cancelled_before_it_first_runs_is_in_the_log() {
    let recorder = Arc::new(RecordingObserver::new());
    let engine = engine_with(ScriptedProvider::new(vec![done()]))
        .required_observer(recorder.clone())
        .build()
        .unwrap();
    // The current-thread runtime has not polled the task yet.
    let run = engine.start(request("run_early")).unwrap();
    run.cancel();
    let log = run.log().clone();
    assert_eq!(run.join().await, RunOutcome::Cancelled);
    let events = log.retained_after(0);
    assert_lifecycle(&events);
    assert_eq!(kinds(&events), ["run.started", "run.cancelled"]);
    assert_eq!(recorder.events().len(), 2, "the observers got both");
}

/// A run that is waiting on its model when the engine shuts down, with a
/// required observer that acknowledges the first `acknowledged` offers:
/// the shutdown report after the run committed its cancelled terminals.
async fn shutdown_waiting_run(
    observer: Arc<dyn keel_observers::RequiredObserver>,
) -> (EngineShutdown, Vec<String>) {
    let provider = ScriptedProvider::new(vec![vec![ScriptItem::DelayMs(60_000)]]);
    let engine = engine_with(provider)
        .required_observer(observer)
        .build()
        .unwrap();
    let run = engine.start(request("run_waiting")).unwrap();
    let log = run.log().clone();
    committed(&run, "model.started").await;
    let report = engine.shutdown(Duration::from_secs(5)).await;
    let events = log.retained_after(0);
    assert_lifecycle(&events);
    (report, kinds(&events))
}

/// Case 5b: a run that ends within the shutdown deadline is reported
/// unacknowledged exactly when a required observer did not take its whole
/// history, terminals included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_reports_the_runs_an_observer_did_not_take_in_full() {
    let (report, kinds) = shutdown_waiting_run(Arc::new(RecordingObserver::new())).await;
    assert_eq!(
        (report.runs_ended, report.runs_abandoned),
        (1, 0),
        "{report:?}"
    );
    assert!(report.unacknowledged.is_empty(), "{report:?}");
    // The first four events are the ones before the model answers; the
    // observer below refuses everything after them (the terminals).
    assert_eq!(
        kinds[..4],
        ["run.started", "run.input", "turn.started", "model.started"]
    );
    assert_eq!(kinds.last().map(String::as_str), Some("run.cancelled"));
    let refusing = FaultyObserver::new(Fault::FailFrom(5));
    let (report, _) = shutdown_waiting_run(Arc::new(refusing)).await;
    assert_eq!(
        (report.runs_ended, report.runs_abandoned),
        (1, 0),
        "{report:?}"
    );
    let ids: Vec<&str> = report.unacknowledged.iter().map(RunId::as_str).collect();
    assert_eq!(ids, ["run_waiting"], "{report:?}");
}

/// Case 6: a run cancelled while it waits for its committed terminal to
/// become durable reports what the log says (completed), not cancelled.
#[tokio::test(start_paused = true)]
async fn a_cancel_after_the_terminal_is_committed_keeps_its_outcome() {
    // run.started 1, run.input 2, turn.started 3, model.started 4,
    // model.text_delta 5, model.completed 6, turn.completed 7,
    // run.completed 8: the observer never answers the terminal.
    let engine = engine_with(ScriptedProvider::new(vec![done()]))
        .required_observer(Arc::new(FaultyObserver::new(Fault::HangOn(8))))
        .build()
        .unwrap();
    let run = engine.start(request("run_case6")).unwrap();
    committed(&run, "run.completed").await;
    run.cancel();
    let log = run.log().clone();
    let outcome = run.join().await;
    assert!(
        matches!(outcome, RunOutcome::Completed { .. }),
        "{outcome:?}"
    );
    let events = log.retained_after(0);
    assert_lifecycle(&events);
    assert_eq!(
        kinds(&events).last().map(String::as_str),
        Some("run.completed")
    );
}

/// Case 7: an observer that first fails while the run is being closed is
/// skipped from then on, and the observers after it still get the whole
/// history, the terminal included.
#[tokio::test(start_paused = true)]
async fn an_observer_failing_at_close_does_not_cut_the_others_short() {
    // run.completed is seq 8; the first observer refuses it and every
    // re-offer.
    let recorder = Arc::new(RecordingObserver::new());
    let engine = engine_with(ScriptedProvider::new(vec![done()]))
        .required_observer(Arc::new(FaultyObserver::new(Fault::FailFrom(8))))
        .required_observer(recorder.clone())
        .build()
        .unwrap();
    let (outcome, events) = check(&engine, request("run_case7")).await;
    assert!(
        matches!(outcome, RunOutcome::Completed { .. }),
        "{outcome:?}"
    );
    assert_eq!(
        kinds(&events).last().map(String::as_str),
        Some("run.completed")
    );
    let seqs: Vec<u64> = recorder.events().iter().map(|e| e.seq()).collect();
    assert_eq!(seqs, (1..=8).collect::<Vec<u64>>());
}
