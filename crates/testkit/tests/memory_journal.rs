//! `MemoryJournal`: the SQLite journal's storage rules in memory, and an
//! engine run under paused time followed with `Engine::subscribe`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use keel_engine::{Engine, FollowError, RunRequest};
use keel_eventlog::{Event, EventKind, LogConfig, Payload, RunCompleted, RunLog, RunStarted};
use keel_message::{CanonicalJson, Message, MessageId, ModelName, Role, RunId};
use keel_observers::{ObserverError, RequiredObserver, RunHistory, RunStatus, StoredRun};
use keel_stream::FinishReason;
use keel_testkit::{ManualClock, MemoryJournal, ScriptItem, ScriptedProvider, assert_lifecycle};
use std::sync::Arc;
use std::time::Duration;

fn note(n: u64) -> Payload {
    Payload::Extension {
        kind: EventKind::parse("test.note").unwrap(),
        payload: CanonicalJson::parse(&format!(r#"{{"n":{n}}}"#)).unwrap(),
    }
}

/// A run `id` with `notes` notes, stamped from `start` µs.
fn run_events(id: &str, notes: u64, start: u64) -> Vec<Arc<Event>> {
    let clock = Arc::new(ManualClock::new(start));
    let log = RunLog::new(RunId::parse(id).unwrap(), LogConfig::default(), clock).unwrap();
    let mut events = vec![
        log.commit(&Payload::RunStarted(RunStarted::default()))
            .unwrap(),
    ];
    for n in 0..notes {
        events.push(log.commit(&note(n)).unwrap());
    }
    events.push(
        log.commit(&Payload::RunCompleted(RunCompleted::default()))
            .unwrap(),
    );
    events
}

#[tokio::test]
async fn it_keeps_the_journal_rules() {
    let journal = MemoryJournal::new();
    let events = run_events("run_a", 3, 1_000);
    let run = events[0].run_id().clone();
    // A gap is refused and stores nothing.
    assert!(matches!(
        journal.observe(&events[1]).await,
        Err(ObserverError::Gap {
            last_stored: 0,
            seq: 2,
            ..
        })
    ));
    assert_eq!(RunHistory::stored(&journal, &run).unwrap(), None);
    journal.observe(&events[0]).await.unwrap();
    // A redelivery with the same bytes is Ok; other bytes conflict.
    journal.observe(&events[0]).await.unwrap();
    let other = run_events("run_a", 0, 2_000);
    assert!(matches!(
        journal.observe(&other[0]).await,
        Err(ObserverError::Conflict { seq: 1, .. })
    ));
    // A batch stops at its first refusal: [2, 3, 5] acknowledges 2.
    let batch = [events[1].clone(), events[2].clone(), events[4].clone()];
    let err = journal.observe_batch(&batch).await.unwrap_err();
    assert_eq!(err.acknowledged, 2);
    assert!(matches!(
        err.source,
        ObserverError::Gap {
            last_stored: 3,
            seq: 5,
            ..
        }
    ));
    assert_eq!(
        RunHistory::stored(&journal, &run).unwrap(),
        Some(StoredRun::new(3, RunStatus::Running))
    );
    journal.observe_batch(&events[3..]).await.unwrap();
    assert_eq!(
        RunHistory::stored(&journal, &run).unwrap(),
        Some(StoredRun::new(5, RunStatus::Completed))
    );
    assert_eq!(
        journal.lines(&run),
        events
            .iter()
            .map(|e| e.line().to_owned())
            .collect::<Vec<_>>()
    );
    let page = journal.read_after(&run, 2, 2).unwrap();
    assert_eq!(page.iter().map(|e| e.seq()).collect::<Vec<_>>(), [3, 4]);
    assert!(journal.read_after(&run, 5, 10).unwrap().is_empty());
    assert_eq!(journal.run_ids(), [run]);
}

/// An engine whose runs keep only 12 events in their logs, journaled in
/// memory and followed from it.
fn engine(journal: &Arc<MemoryJournal>, deltas: usize) -> Engine {
    let mut items: Vec<ScriptItem> = (0..deltas)
        .flat_map(|i| {
            [
                ScriptItem::delay(Duration::from_millis(10)),
                ScriptItem::text(format!("t{i} ")),
            ]
        })
        .collect();
    items.push(ScriptItem::complete(FinishReason::Stop));
    Engine::builder()
        .provider("scripted", Arc::new(ScriptedProvider::new(vec![items])))
        .required_observer(journal.clone())
        .history(journal.clone())
        .log_config(LogConfig {
            max_events: 12,
            max_open_scopes: 8,
            ..LogConfig::default()
        })
        .limits(keel_engine::EngineLimits {
            max_parallel_tools: 4,
            ..keel_engine::EngineLimits::default()
        })
        .build()
        .unwrap()
}

fn request(id: &str) -> RunRequest {
    RunRequest::new(
        RunId::parse(id).unwrap(),
        ModelName::parse("scripted-1").unwrap(),
        vec![Message::text(MessageId::parse("u1").unwrap(), Role::User, "go").unwrap()],
    )
}

#[tokio::test(start_paused = true)]
async fn a_run_under_paused_time_is_followed_across_eviction() {
    let journal = Arc::new(MemoryJournal::new());
    let engine = engine(&journal, 40);
    let run = engine.start(request("run_paused")).unwrap();
    let run_id = run.run_id().clone();

    // A follower reads a few events and goes away.
    let mut first = engine.subscribe(&run_id, 0).await.unwrap();
    let mut seen = Vec::new();
    while seen.len() < 5 {
        seen.push(first.next().await.unwrap().unwrap().seq());
    }
    let cursor = first.cursor();
    drop(first);
    // The run goes on; its log evicts what the follower has not read.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let log = engine.log(&run_id).expect("still live");
    assert!(
        log.stats().earliest_seq > cursor + 1,
        "evicted past the cursor"
    );

    // It comes back at its cursor while the run is live: the journal,
    // then the live log, no gap, no repeat, to the terminal.
    let mut second = engine.subscribe(&run_id, cursor).await.unwrap();
    while let Some(event) = second.next().await {
        seen.push(event.unwrap().seq());
    }
    let outcome = run.join().await;
    assert!(outcome.into_result().is_ok());
    let stored = journal.events(&run_id);
    assert_eq!(seen, (1..=stored.len() as u64).collect::<Vec<_>>());
    assert_lifecycle(&stored);

    // The run is no longer live: served from the journal alone.
    assert!(engine.log(&run_id).is_none());
    let mut third = engine.subscribe(&run_id, 0).await.unwrap();
    let mut lines = Vec::new();
    while let Some(event) = third.next().await {
        lines.push(event.unwrap().line().to_owned());
    }
    assert_eq!(lines, journal.lines(&run_id));
    assert!(matches!(
        engine
            .subscribe(&RunId::parse("run_none").unwrap(), 0)
            .await,
        Err(FollowError::UnknownRun { .. })
    ));
}
