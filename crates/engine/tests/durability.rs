//! The engine's window onto its required observers: events are not
//! awaited one by one, but a tool's side effect, a question to a person
//! and a run's outcome wait until what they depend on is durable; a
//! refusal at seq N fails the run with the observer as cause.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{call, calls, done, request};
use keel_engine::*;
use keel_eventlog::{Event, Payload};
use keel_message::*;
use keel_observers::{
    BatchError, ObserveBatchFuture, ObserveFuture, ObserverError, PipelineConfig, RequiredObserver,
};
use keel_stream::FinishReason;
use keel_testkit::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A journal stand-in that takes `delay` per batch, records what it
/// acknowledged (after the delay) and each batch's size, and refuses
/// from a given seq on.
struct SlowJournal {
    delay: Duration,
    acked: Mutex<Vec<Arc<Event>>>,
    batches: Mutex<Vec<usize>>,
    refuse_from: Option<u64>,
}

impl SlowJournal {
    fn new(delay_ms: u64, refuse_from: Option<u64>) -> Arc<SlowJournal> {
        Arc::new(SlowJournal {
            delay: Duration::from_millis(delay_ms),
            acked: Mutex::new(Vec::new()),
            batches: Mutex::new(Vec::new()),
            refuse_from,
        })
    }
    /// Whether an acknowledged event of `kind` mentions `needle`.
    fn has(&self, kind: &str, needle: &str) -> bool {
        self.acked
            .lock()
            .unwrap()
            .iter()
            .any(|e| e.kind().to_string() == kind && e.line().contains(needle))
    }
    fn seqs(&self) -> Vec<u64> {
        self.acked.lock().unwrap().iter().map(|e| e.seq()).collect()
    }
}

impl RequiredObserver for SlowJournal {
    fn name(&self) -> &str {
        "slow-journal"
    }
    fn observe<'a>(&'a self, event: &'a Arc<Event>) -> ObserveFuture<'a> {
        observe_as_batch(self, event)
    }
    fn observe_batch<'a>(&'a self, events: &'a [Arc<Event>]) -> ObserveBatchFuture<'a> {
        Box::pin(async move {
            tokio::time::sleep(self.delay).await;
            self.batches.lock().unwrap().push(events.len());
            for (i, e) in events.iter().enumerate() {
                if self.refuse_from.is_some_and(|from| e.seq() >= from) {
                    return Err(BatchError {
                        acknowledged: i,
                        source: ObserverError::Failed("disk full".into()),
                    });
                }
                let mut acked = self.acked.lock().unwrap();
                // At least once: a re-offer of an acknowledged event is fine.
                if !acked.iter().any(|a| a.seq() == e.seq()) {
                    acked.push(Arc::clone(e));
                }
            }
            Ok(())
        })
    }
}

/// A tool that notes whether its own `tool.started` was durable when it
/// was called.
struct Probe {
    definition: ToolDefinition,
    journal: Arc<SlowJournal>,
    started_durable: Arc<Mutex<Vec<bool>>>,
}

impl Tool for Probe {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }
    fn call(&self, invocation: ToolInvocation) -> ToolFuture {
        let needle = format!("\"call_id\":\"{}\"", invocation.call_id.as_str());
        let durable = self.journal.has("tool.started", &needle);
        self.started_durable.lock().unwrap().push(durable);
        Box::pin(async { Ok(ToolOutput::new("done")) })
    }
}

/// An approver that notes whether the question's `interaction.started`
/// was durable when it was asked.
struct Approver {
    journal: Arc<SlowJournal>,
    asked_durable: Arc<AtomicBool>,
}

impl InteractionHandler for Approver {
    fn handle(&self, request: InteractionRequest) -> InteractionFuture {
        let needle = format!("\"interaction_id\":\"{}\"", request.interaction_id.as_str());
        let durable = self.journal.has("interaction.started", &needle);
        self.asked_durable.store(durable, Ordering::SeqCst);
        Box::pin(async { Ok(InteractionDecision::Approved) })
    }
}

fn probe(journal: &Arc<SlowJournal>) -> (Arc<Probe>, Arc<Mutex<Vec<bool>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let definition = ToolDefinition::new(
        ToolName::parse("probe").unwrap(),
        "notes durability",
        CanonicalJson::parse(r#"{"type":"object"}"#).unwrap(),
    )
    .unwrap();
    let tool = Arc::new(Probe {
        definition,
        journal: journal.clone(),
        started_durable: seen.clone(),
    });
    (tool, seen)
}

fn engine(journal: &Arc<SlowJournal>, script: Vec<Vec<ScriptItem>>) -> EngineBuilder {
    Engine::builder()
        .provider("scripted", Arc::new(ScriptedProvider::new(script)))
        .required_observer(journal.clone())
        .pipeline_config(PipelineConfig {
            required_deadline: Duration::from_secs(10),
            ..PipelineConfig::default()
        })
}

/// Three tool calls in parallel: none starts before its `tool.started`
/// is durable, and the outcome comes back with the terminal durable.
#[tokio::test]
async fn a_tool_never_starts_before_its_tool_started_is_durable() {
    let journal = SlowJournal::new(20, None);
    let (tool, seen) = probe(&journal);
    let engine = engine(
        &journal,
        vec![
            calls(vec![
                call("c1", "probe"),
                call("c2", "probe"),
                call("c3", "probe"),
            ]),
            done(),
        ],
    )
    .tool(tool)
    .build()
    .unwrap();
    let run = engine
        .start(request("run_tools").provider_named("scripted"))
        .unwrap();
    let log = run.log().clone();
    assert!(matches!(run.join().await, RunOutcome::Completed { .. }));
    assert_eq!(*seen.lock().unwrap(), vec![true, true, true]);
    // Returned only once the terminal is durable.
    let last = log.stats().last_seq;
    assert_eq!(journal.seqs(), (1..=last).collect::<Vec<_>>());
    assert_eq!(log.stats().durable_seq, last);
}

/// An approval question is put only once its `interaction.started` is
/// durable.
#[tokio::test]
async fn a_question_waits_for_its_interaction_started_to_be_durable() {
    let journal = SlowJournal::new(20, None);
    let (tool, seen) = probe(&journal);
    let asked_durable = Arc::new(AtomicBool::new(false));
    let gated = ScriptedTool::named("gated", vec![ToolStep::ok(serde_json::json!("ok"))])
        .unwrap()
        .with_policy(ToolPolicy {
            requires_approval: true,
            ..ToolPolicy::default()
        });
    let engine = engine(&journal, vec![calls(vec![call("c1", "gated")]), done()])
        .tool(tool)
        .tool(Arc::new(gated))
        .interaction_handler(Arc::new(Approver {
            journal: journal.clone(),
            asked_durable: asked_durable.clone(),
        }))
        .build()
        .unwrap();
    let run = engine
        .start(request("run_ask").provider_named("scripted"))
        .unwrap();
    assert!(matches!(run.join().await, RunOutcome::Completed { .. }));
    assert!(asked_durable.load(Ordering::SeqCst), "asked before durable");
    assert!(seen.lock().unwrap().is_empty());
}

/// A stream of 500 deltas under a 5 ms observer is acknowledged in
/// batches, not one event per round trip: the run does not wait for each.
#[tokio::test]
async fn deltas_are_acknowledged_in_batches() {
    let journal = SlowJournal::new(5, None);
    let mut items: Vec<ScriptItem> = (0..500)
        .map(|i| ScriptItem::text(format!("t{i} ")))
        .collect();
    items.push(ScriptItem::complete(FinishReason::Stop));
    let engine = engine(&journal, vec![items]).build().unwrap();
    let run = engine
        .start(request("run_deltas").provider_named("scripted"))
        .unwrap();
    let log = run.log().clone();
    assert!(matches!(run.join().await, RunOutcome::Completed { .. }));
    let batches = journal.batches.lock().unwrap().clone();
    let events = log.stats().last_seq as usize;
    assert_eq!(batches.iter().sum::<usize>(), events);
    assert!(
        batches.len() * 4 < events,
        "{} batches for {events} events",
        batches.len()
    );
    assert!(
        batches
            .iter()
            .all(|b| *b <= PipelineConfig::default().window_events)
    );
}

/// A refusal at seq 30, in the middle of a stream: the run fails with
/// the observer as cause naming seq 30, the log ends in `run.failed`
/// carrying that cause, nothing at or after 30 was acknowledged, and no
/// seq was reused.
#[tokio::test]
async fn a_refusal_at_seq_n_fails_the_run_with_the_observer_as_cause() {
    let journal = SlowJournal::new(2, Some(30));
    let mut items: Vec<ScriptItem> = (0..200)
        .map(|i| ScriptItem::text(format!("t{i} ")))
        .collect();
    items.push(ScriptItem::complete(FinishReason::Stop));
    let engine = engine(&journal, vec![items]).build().unwrap();
    let run = engine
        .start(request("run_refused").provider_named("scripted"))
        .unwrap();
    let log = run.log().clone();
    let outcome = run.join().await;
    let RunOutcome::Failed {
        cause: FailureCause::Observer(e),
    } = outcome
    else {
        panic!("{outcome:?}")
    };
    assert_eq!(
        (e.seq, e.index, e.observer.as_str()),
        (30, 0, "slow-journal")
    );
    let events = log.retained_after(0);
    assert_lifecycle(&events);
    let seqs: Vec<u64> = events.iter().map(|e| e.seq()).collect();
    assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>());
    let Ok(Payload::RunFailed(failed)) = events.last().unwrap().payload() else {
        panic!("the log does not end in run.failed")
    };
    assert_eq!(failed.cause.unwrap().seq, Some(30));
    assert_eq!(journal.seqs(), (1..30).collect::<Vec<_>>());
    assert_eq!(log.stats().durable_seq, 29);
}

/// The outcome comes back only once the run's terminal is durable, even
/// when the observer takes longer than the closing deadline: the barrier
/// is the observer's deadline, not the closing one.
#[tokio::test(start_paused = true)]
async fn the_outcome_waits_for_a_durable_terminal_past_the_closing_deadline() {
    let journal = SlowJournal::new(800, None);
    let engine = engine(&journal, vec![done()])
        .limits(EngineLimits {
            closing_deadline: MIN_CLOSING_DEADLINE,
            ..EngineLimits::default()
        })
        .build()
        .unwrap();
    let run = engine
        .start(request("run_slow_end").provider_named("scripted"))
        .unwrap();
    let log = run.log().clone();
    assert!(matches!(run.join().await, RunOutcome::Completed { .. }));
    let last = log.stats().last_seq;
    assert_eq!(
        log.stats().durable_seq,
        last,
        "returned before the terminal was durable"
    );
    assert_eq!(journal.seqs(), (1..=last).collect::<Vec<_>>());
}

/// A required observer that notes the seqs of every offer as it arrives
/// (before acknowledging anything) and acknowledges only as the test
/// releases its gate.
struct Gated {
    gate: tokio::sync::Semaphore,
    arrivals: Mutex<Vec<u64>>,
}

impl RequiredObserver for Gated {
    fn name(&self) -> &str {
        "gated"
    }
    fn observe<'a>(&'a self, event: &'a Arc<Event>) -> ObserveFuture<'a> {
        observe_as_batch(self, event)
    }
    fn observe_batch<'a>(&'a self, events: &'a [Arc<Event>]) -> ObserveBatchFuture<'a> {
        Box::pin(async move {
            self.arrivals
                .lock()
                .unwrap()
                .extend(events.iter().map(|e| e.seq()));
            self.gate.acquire().await.unwrap().forget();
            Ok(())
        })
    }
}

/// A run cancelled while its window has a batch in flight closes the
/// window and lets that batch settle before the closing re-offer: the
/// observer is offered every seq once, in order (a re-offer started from
/// the old watermark would offer the in-flight events a second time,
/// ahead of their acknowledgement).
#[tokio::test]
async fn a_cancel_with_a_batch_in_flight_reoffers_nothing_twice() {
    let observer = Arc::new(Gated {
        gate: tokio::sync::Semaphore::new(0),
        arrivals: Mutex::new(Vec::new()),
    });
    let script = vec![vec![
        ScriptItem::text("Thinking"),
        ScriptItem::delay(Duration::from_secs(3600)),
        ScriptItem::text("never"),
    ]];
    let engine = Engine::builder()
        .provider("scripted", Arc::new(ScriptedProvider::new(script)))
        .required_observer(observer.clone())
        .pipeline_config(PipelineConfig {
            required_deadline: Duration::from_secs(10),
            ..PipelineConfig::default()
        })
        .build()
        .unwrap();
    let run = engine
        .start(request("run_cancel_in_flight").provider_named("scripted"))
        .unwrap();
    let log = run.log().clone();
    let has = |kind: &str| {
        log.retained_after(0)
            .iter()
            .any(|e| e.kind().to_string() == kind)
    };
    wait_until(|| has("model.text_delta")).await;
    run.cancel();
    wait_until(|| log.run_ended()).await;
    // The closing re-offer has had every chance to start.
    tokio::time::sleep(Duration::from_millis(50)).await;
    observer.gate.add_permits(1_000);
    assert_eq!(run.join().await, RunOutcome::Cancelled);
    let last = log.stats().last_seq;
    assert_eq!(
        *observer.arrivals.lock().unwrap(),
        (1..=last).collect::<Vec<_>>()
    );
    assert_eq!(log.stats().durable_seq, last);
}

/// Waits (bounded) until `done` holds.
async fn wait_until(done: impl Fn() -> bool) {
    tokio::time::timeout(Duration::from_secs(10), async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("timed out");
}
