//! Replay: a recorded run with retries, parallel tools, an approval and a
//! cancellation replays identical; a changed tool result or retry limit
//! reports the first diverging seq with both lines.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use keel_engine::{Engine, EngineLimits, RetryPolicy, RunRequest, ToolPolicy};
use keel_eventlog::Event;
use keel_message::{Message, MessageId, ModelName, Role, RunId};
use keel_stream::{FinishReason, ProblemKind};
use keel_testkit::replay::{Divergence, Recording, compare, replay};
use keel_testkit::*;
use serde_json::json;
use std::sync::Arc;

/// Records the run: turn 1 fails once (retryable) then calls `weather`
/// and `lookup` (approval, approved) in parallel; turn 2 calls `slow`,
/// which hangs until the run is cancelled.
async fn record() -> Vec<Event> {
    let provider = ScriptedProvider::new(vec![
        vec![ScriptItem::fail(ProblemKind::Overloaded, "busy", true)],
        vec![
            ScriptItem::text("Checking."),
            ScriptItem::tool_call("c1", "weather", json!({"city": "Oslo"})),
            ScriptItem::tool_call("c2", "lookup", json!({"q": "x"})),
            ScriptItem::complete_with_usage(FinishReason::ToolCalls, 10, 5),
        ],
        vec![
            ScriptItem::tool_call("c3", "slow", json!({})),
            ScriptItem::complete(FinishReason::ToolCalls),
        ],
    ]);
    let slow = ScriptedTool::named("slow", vec![ToolStep::hang()]).unwrap();
    let slow_handle = slow.handle();
    let request = RunRequest::new(
        RunId::parse("run_recorded").unwrap(),
        ModelName::parse("scripted-1").unwrap(),
        vec![Message::text(MessageId::parse("u1").unwrap(), Role::User, "Weather?").unwrap()],
    )
    .provider(Arc::new(provider))
    .tool(Arc::new(
        ScriptedTool::named("weather", vec![ToolStep::ok(json!("3 °C"))]).unwrap(),
    ))
    .tool(Arc::new(
        ScriptedTool::named("lookup", vec![ToolStep::ok(json!({"found": 1}))])
            .unwrap()
            .with_policy(ToolPolicy {
                requires_approval: true,
                ..ToolPolicy::default()
            }),
    ))
    .tool(Arc::new(slow))
    .interaction_handler(Arc::new(ScriptedInteractions::always(
        InteractionStep::approve(),
    )));
    let engine = Engine::builder().build().unwrap();
    let handle = engine.start(request).unwrap();
    let mut subscription = handle.subscribe(0).unwrap();
    let canceller = handle.canceller();
    tokio::spawn(async move {
        slow_handle.wait_called(1).await;
        canceller.cancel();
    });
    let mut events = Vec::new();
    while let Some(event) = subscription.recv().await {
        events.push(Event::clone(&event.unwrap()));
    }
    handle.join().await;
    events
}

/// Replays `recording` under another run id with `limits`.
async fn replayed(recording: &Recording, limits: EngineLimits) -> Vec<Event> {
    let request = recording
        .request(RunId::parse("run_replayed").unwrap())
        .unwrap()
        .limits(limits);
    let engine = Engine::builder().build().unwrap();
    replay(&engine, request, recording).await.unwrap()
}

/// The seq of the first event of `kind` whose line contains `needle`.
fn seq_of(events: &[Event], kind: &str, needle: &str) -> u64 {
    events
        .iter()
        .find(|e| e.kind().name() == kind && e.line().contains(needle))
        .map(|e| e.seq())
        .unwrap_or_else(|| panic!("no {kind} with {needle}"))
}

#[tokio::test(start_paused = true)]
async fn a_recorded_run_with_retries_parallel_tools_an_approval_and_a_cancellation_replays_identical()
 {
    let recorded = record().await;
    let kinds: Vec<String> = recorded
        .iter()
        .map(|e| e.kind().name().into_owned())
        .collect();
    for kind in [
        "model.failed",
        "interaction.completed",
        "tool.cancelled",
        "run.cancelled",
    ] {
        assert!(
            kinds.iter().any(|k| k == kind),
            "the recording has {kind}: {kinds:?}"
        );
    }
    let recording = Recording::from_events(&recorded).unwrap();
    assert_eq!(recording.model_calls(), 3);
    assert_eq!(
        recording.cancel_after(),
        Some(seq_of(&recorded, "tool.cancelled", "c3") - 1)
    );
    let replayed = replayed(&recording, EngineLimits::default()).await;
    assert_eq!(compare(&recorded, &replayed), Ok(()));
    assert!(replayed[0].run_id().as_str() == "run_replayed");
}

/// One divergence case: how the replay is changed, and where it must
/// first differ.
struct Case {
    name: &'static str,
    /// Edits the recorded events the replay serves (the code under test
    /// sees a different tool result).
    edit: fn(&[Event]) -> Vec<Event>,
    limits: EngineLimits,
    /// The first diverging seq, from the recorded events.
    seq: fn(&[Event]) -> u64,
    /// What the recorded and replayed lines there contain.
    recorded: &'static str,
    replayed: &'static str,
}

async fn check(case: Case) {
    let recorded = record().await;
    let served = Recording::from_events(&(case.edit)(&recorded)).unwrap();
    let replayed = replayed(&served, case.limits).await;
    let Err(Divergence {
        seq,
        recorded: r,
        replayed: p,
    }) = compare(&recorded, &replayed)
    else {
        panic!("{}: the replay must diverge", case.name);
    };
    assert_eq!(seq, (case.seq)(&recorded), "{}", case.name);
    let (r, p) = (r.unwrap_or_default(), p.unwrap_or_default());
    assert!(
        r.contains(case.recorded),
        "{}: recorded line {r}",
        case.name
    );
    assert!(
        p.contains(case.replayed),
        "{}: replayed line {p}",
        case.name
    );
}

/// The events with `weather`'s output replaced.
fn other_weather(events: &[Event]) -> Vec<Event> {
    events
        .iter()
        .map(|e| {
            if e.kind().name() != "tool.completed" || !e.line().contains("\"c1\"") {
                return e.clone();
            }
            let mut line: serde_json::Value = serde_json::from_str(e.line()).unwrap();
            line["payload"]["output"] = json!("-40 °C");
            Event::decode(&serde_json::to_string(&line).unwrap()).unwrap()
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_changed_tool_result_or_retry_limit_reports_the_first_diverging_seq() {
    check(Case {
        name: "tool result",
        edit: other_weather,
        limits: EngineLimits::default(),
        seq: |events| seq_of(events, "tool.completed", "\"c1\""),
        recorded: "3 °C",
        replayed: "-40 °C",
    })
    .await;
    check(Case {
        name: "retry limit",
        edit: <[Event]>::to_vec,
        limits: EngineLimits {
            retry: RetryPolicy::none(),
            ..EngineLimits::default()
        },
        seq: |events| seq_of(events, "model.failed", "busy") + 1,
        recorded: "model.started",
        replayed: "turn.failed",
    })
    .await;
}

/// A run's lines under `run`, with `ts` and the input message id given.
fn lines(run: &str, ts: u64, message_id: &str) -> Vec<Event> {
    [
        format!(r#"{{"kind":"run.started","payload":{{"model":"m"}},"run_id":"{run}","seq":1,"ts":{ts}}}"#),
        format!(
            r#"{{"kind":"run.input","payload":{{"message":{{"id":"{message_id}","parts":[{{"text":"hi","type":"text"}}],"role":"user"}}}},"run_id":"{run}","seq":2,"ts":{ts}}}"#
        ),
    ]
    .iter()
    .map(|l| Event::decode(l).unwrap())
    .collect()
}

#[test]
fn compare_ignores_ts_run_id_and_run_derived_ids_only() {
    let recorded = lines("run_a", 1, "run_a.u1");
    assert_eq!(compare(&recorded, &lines("run_b", 9, "run_b.u1")), Ok(()));
    let other = compare(&recorded, &lines("run_b", 9, "run_c.u1")).unwrap_err();
    assert_eq!(other.seq, 2);
    let shorter = compare(&recorded, &recorded[..1]).unwrap_err();
    assert_eq!((shorter.seq, shorter.replayed), (2, None));
}

/// A run that compacted (a `purpose: "compaction"` model call, then
/// `context.compacted`) replays identical: the compaction call is served
/// from the recording like any other model call.
#[tokio::test(start_paused = true)]
async fn a_recorded_compaction_replays_identical() {
    let long = "Tell me everything about the weather in Oslo. ".repeat(20);
    let mut history = Vec::new();
    for (i, role) in [
        Role::User,
        Role::Assistant,
        Role::User,
        Role::Assistant,
        Role::User,
        Role::Assistant,
        Role::User,
    ]
    .into_iter()
    .enumerate()
    {
        let id = MessageId::parse(&format!("m{i}")).unwrap();
        history.push(Message::text(id, role, &long).unwrap());
    }
    let limits = EngineLimits {
        context: Some(keel_engine::ContextPolicy::new(100_000)),
        ..EngineLimits::default()
    };
    let provider = ScriptedProvider::new(vec![
        vec![
            ScriptItem::text("Oslo weather, summarized."),
            ScriptItem::complete(FinishReason::Stop),
        ],
        vec![
            ScriptItem::text("Done."),
            ScriptItem::complete(FinishReason::Stop),
        ],
    ]);
    let request = RunRequest::new(
        RunId::parse("run_compacted").unwrap(),
        ModelName::parse("scripted-1").unwrap(),
        history,
    )
    .provider(Arc::new(provider))
    .limits(limits.clone())
    .compact_first(true);
    let engine = Engine::builder().build().unwrap();
    let handle = engine.start(request).unwrap();
    let mut subscription = handle.subscribe(0).unwrap();
    let mut recorded = Vec::new();
    while let Some(event) = subscription.recv().await {
        recorded.push(Event::clone(&event.unwrap()));
    }
    handle.join().await;
    assert!(
        recorded
            .iter()
            .any(|e| e.kind().name() == "context.compacted"),
        "the recording compacted"
    );
    let recording = Recording::from_events(&recorded).unwrap();
    assert_eq!(recording.model_calls(), 2);
    let request = recording
        .request(RunId::parse("run_replayed").unwrap())
        .unwrap()
        .limits(limits)
        .compact_first(true);
    let replayed = replay(&Engine::builder().build().unwrap(), request, &recording)
        .await
        .unwrap();
    assert_eq!(compare(&recorded, &replayed), Ok(()));
}
