//! The history a run ends with can be rebuilt from its log alone, value
//! for value: over random runs (retries, partial failures, tool failures
//! and panics, approvals, cancellations), `history::rebuild` of the log
//! equals the history the engine held when the run ended.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use keel_engine::*;
use keel_eventlog::history;
use keel_message::*;
use keel_stream::FinishReason;
use keel_testkit::strategies::scripted_run;
use keel_testkit::*;
use proptest::prelude::*;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

fn input() -> Vec<Message> {
    vec![
        Message::text(MessageId::parse("m1").unwrap(), Role::System, "be brief").unwrap(),
        Message::text(MessageId::parse("m2").unwrap(), Role::User, "go").unwrap(),
    ]
}

fn request(id: &str) -> RunRequest {
    RunRequest::new(
        RunId::parse(id).unwrap(),
        ModelName::parse("scripted-1").unwrap(),
        input(),
    )
}

/// Approves, denies, fails, then never answers, in turn.
#[derive(Default)]
struct Cycle(std::sync::atomic::AtomicUsize);

impl InteractionHandler for Cycle {
    fn handle(&self, _request: InteractionRequest) -> InteractionFuture {
        let n = self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Box::pin(async move {
            match n % 4 {
                0 => Ok(InteractionDecision::Approved),
                1 => Ok(InteractionDecision::Denied),
                2 => Err(InteractionError("ui gone".into())),
                _ => std::future::pending().await,
            }
        })
    }
}

/// Runs to the end and checks the rebuilt history against the engine's.
async fn check(engine: &Engine, request: RunRequest) -> RunReport {
    let run = engine.start(request).unwrap();
    let log = run.log().clone();
    let report = run.join_report().await;
    let events = log.retained_after(0);
    assert_lifecycle(&events);
    let rebuilt = history::rebuild(&events, &Limits::default()).unwrap();
    assert_eq!(rebuilt, report.history(), "rebuilt history differs");
    if let RunOutcome::Completed { transcript, .. } = report.outcome() {
        assert_eq!(transcript, report.history());
    }
    report
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn the_log_rebuilds_the_history_the_engine_held(
        script in scripted_run(),
        cancel_after in proptest::option::weighted(0.4, 0u64..2_000),
        restart_partial in any::<bool>(),
        approvals in any::<bool>(),
        partial_at in proptest::option::weighted(0.5, 0usize..4),
    ) {
        // A call that streams text and then fails mid-stream (retryable),
        // before one of the script's calls: with `Restart` the text stays
        // in the log under the failed attempt and must not reach the
        // history.
        let mut script = script;
        if let Some(at) = partial_at {
            let at = at.min(script.calls.len());
            script.calls.insert(at, vec![
                ScriptItem::text("lost words"),
                ScriptItem::fail(keel_stream::ProblemKind::Unavailable, "cut", true),
            ]);
        }
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap();
        rt.block_on(async {
            let retry = RetryPolicy {
                partial: if restart_partial { PartialRetry::Restart } else { PartialRetry::Never },
                ..RetryPolicy::default()
            };
            let mut builder = Engine::builder()
                .provider("scripted", Arc::new(script.provider()))
                .clock(Arc::new(ManualClock::default()))
                .interaction_handler(Arc::new(Cycle::default()))
                .limits(EngineLimits {
                    tool_call_timeout: Duration::from_secs(10),
                    approval_timeout: Duration::from_secs(5),
                    retry,
                    ..EngineLimits::default()
                });
            for (i, tool) in script.scripted_tools().into_iter().enumerate() {
                let tool = if approvals && i == 0 {
                    tool.with_policy(ToolPolicy { requires_approval: true, ..ToolPolicy::default() })
                } else {
                    tool
                };
                builder = builder.tool(Arc::new(tool));
            }
            let engine = builder.build().unwrap();
            let run = engine.start(request("run_hist").provider_named("scripted")).unwrap();
            if let Some(ms) = cancel_after {
                let canceller = run.canceller();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    canceller.cancel();
                });
            }
            let log = run.log().clone();
            let report = run.join_report().await;
            let events = log.retained_after(0);
            assert_lifecycle(&events);
            let rebuilt = history::rebuild(&events, &Limits::default()).unwrap();
            prop_assert_eq!(&rebuilt[..], report.history());
            Ok(())
        })?;
    }
}

/// A three-run conversation through the library: each follow-up starts
/// from the previous run's rebuilt history plus a new message, and the
/// third request holds every earlier message, call and result, in order.
#[tokio::test]
async fn a_three_run_conversation_rebuilds_from_the_logs() {
    let weather = |n: usize| {
        vec![
            ScriptItem::tool_call(format!("c{n}"), "get_weather", json!({"city": "Oslo"})),
            ScriptItem::complete(FinishReason::ToolCalls),
        ]
    };
    let answer = |t: &str| {
        vec![
            ScriptItem::text(t),
            ScriptItem::complete(FinishReason::Stop),
        ]
    };
    let provider = ScriptedProvider::new(vec![
        weather(1),
        answer("3 °C."),
        weather(2),
        answer("4 °C."),
        answer("Bye."),
    ])
    .recording_requests();
    let requests = provider.handle();
    let tool = ScriptedTool::named(
        "get_weather",
        vec![ToolStep::ok(json!("3")), ToolStep::ok(json!("4"))],
    )
    .unwrap();
    let engine = Engine::builder()
        .provider("scripted", Arc::new(provider))
        .tool(Arc::new(tool))
        .build()
        .unwrap();
    let first = check(&engine, request("run_1")).await;
    let mut previous = RunId::parse("run_1").unwrap();
    let mut history = first.history().to_vec();
    for (n, text) in [(2, "And tomorrow?"), (3, "Thanks")] {
        history.push(
            Message::text(
                MessageId::parse(&format!("u{n}")).unwrap(),
                Role::User,
                text,
            )
            .unwrap(),
        );
        let id = RunId::parse(&format!("run_{n}")).unwrap();
        let req = RunRequest::new(
            id.clone(),
            ModelName::parse("scripted-1").unwrap(),
            history.clone(),
        )
        .continues(previous.clone());
        let report = check(&engine, req).await;
        history = report.history().to_vec();
        previous = id;
    }
    let third = requests.requests().last().unwrap().history().to_vec();
    let roles: Vec<Role> = third.iter().map(Message::role).collect();
    assert_eq!(
        roles,
        [
            Role::System,
            Role::User,
            Role::Assistant,
            Role::Tool,
            Role::Assistant,
            Role::User,
            Role::Assistant,
            Role::Tool,
            Role::Assistant,
            Role::User,
        ]
    );
    let texts: Vec<String> = third.iter().map(Message::joined_text).collect();
    assert_eq!(texts[4], "3 °C.");
    assert_eq!(texts[8], "4 °C.");
    let ids: std::collections::HashSet<&str> = third.iter().map(|m| m.id().as_str()).collect();
    assert_eq!(
        ids.len(),
        third.len(),
        "message ids are unique across the runs"
    );
}

/// `run.started` records the run a request continues and the chat
/// conversation it belongs to, as the request set them, and nothing when
/// it set neither.
#[tokio::test]
async fn run_started_records_continues_and_the_chat_run() {
    let answer = || {
        vec![
            ScriptItem::text("ok"),
            ScriptItem::complete(FinishReason::Stop),
        ]
    };
    let provider = ScriptedProvider::new(vec![answer(), answer()]);
    let engine = Engine::builder()
        .provider("scripted", Arc::new(provider))
        .build()
        .unwrap();
    let started = |request: RunRequest| {
        let run = engine.start(request).unwrap();
        let log = run.log().clone();
        async move {
            run.join_report().await;
            match log.retained_after(0)[0].payload().unwrap() {
                keel_eventlog::Payload::RunStarted(p) => p,
                other => panic!("{other:?}"),
            }
        }
    };
    let plain = started(request("run_plain")).await;
    assert_eq!((plain.continues, plain.chat), (None, None));
    let chat = keel_eventlog::ChatRun::new(keel_eventlog::ChatId::parse("conv-1").unwrap(), 2);
    let marked = started(
        request("chat-conv-1-2")
            .continues(RunId::parse("chat-conv-1-1").unwrap())
            .chat_run(chat.clone()),
    )
    .await;
    assert_eq!(marked.continues.unwrap().as_str(), "chat-conv-1-1");
    assert_eq!(marked.chat, Some(chat));
}
