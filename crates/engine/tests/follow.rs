//! `Engine::subscribe` over the SQLite journal (its reader as the
//! engine's history), and the journal's behaviour under paused time that
//! `keel_testkit::MemoryJournal` exists for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::request;
use keel_engine::*;
use keel_eventlog::LogConfig;
use keel_observers::{JournalConfig, ObserverError, RunHistory, SqliteJournal};
use keel_stream::FinishReason;
use keel_testkit::{ScriptItem, ScriptedProvider};
use std::sync::Arc;
use std::time::Duration;

/// A provider that streams `deltas` text deltas, `delay_ms` apart.
fn provider(deltas: usize, delay_ms: u64) -> Arc<ScriptedProvider> {
    let mut items: Vec<ScriptItem> = (0..deltas)
        .flat_map(|i| {
            [
                ScriptItem::delay(Duration::from_millis(delay_ms)),
                ScriptItem::text(format!("t{i} ")),
            ]
        })
        .collect();
    items.push(ScriptItem::complete(FinishReason::Stop));
    Arc::new(ScriptedProvider::new(vec![items]))
}

fn small_logs() -> LogConfig {
    LogConfig {
        max_events: 12,
        max_open_scopes: 8,
        ..LogConfig::default()
    }
}

fn limits() -> EngineLimits {
    EngineLimits {
        max_parallel_tools: 4,
        ..EngineLimits::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_reads_the_journal_then_the_live_log() {
    let dir = tempfile::tempdir().unwrap();
    let journal =
        Arc::new(SqliteJournal::open(dir.path().join("k.db"), JournalConfig::default()).unwrap());
    let reader: Arc<dyn RunHistory> = Arc::new(journal.reader().unwrap());
    let engine = Engine::builder()
        .provider("scripted", provider(60, 1))
        .required_observer(journal.clone())
        .history(Arc::clone(&reader))
        .log_config(small_logs())
        .limits(limits())
        .build()
        .unwrap();
    assert!(engine.history().is_some());
    let run = engine.start(request("run_sqlite")).unwrap();
    let run_id = run.run_id().clone();
    let mut first = engine.subscribe(&run_id, 0).await.unwrap();
    let mut seen = Vec::new();
    for _ in 0..4 {
        seen.push(first.next().await.unwrap().unwrap().seq());
    }
    let cursor = first.cursor();
    drop(first);
    // Wait (in real time) until the log has evicted past the cursor.
    let log = engine.log(&run_id).expect("live");
    while log.stats().earliest_seq <= cursor + 1 && !log.run_ended() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut second = engine.subscribe(&run_id, cursor).await.unwrap();
    while let Some(event) = second.next().await {
        seen.push(event.unwrap().seq());
    }
    run.join().await.into_result().unwrap();
    let stored = reader.read_after(&run_id, 0, 10_000).unwrap();
    assert_eq!(seen, (1..=stored.len() as u64).collect::<Vec<_>>());
    assert!(second.is_finished());
    // A cursor past the run's end is refused with the latest seq.
    let past = stored.len() as u64 + 1;
    assert!(matches!(
        engine.subscribe(&run_id, past).await,
        Err(FollowError::CursorAhead { requested, latest }) if requested == past && latest + 1 == past
    ));
    drop(engine);
}

/// Pins why the testkit's docs send paused-time tests to `MemoryJournal`:
/// the SQLite journal's writer commits in real time on its own thread, so
/// a paused runtime with nothing else to do jumps its clock to the
/// pipeline's deadline first, and the run fails on seq 1. (The writer is
/// held up here by another connection's write lock, so that the real
/// time it takes cannot be shorter than the runtime's first idle moment.)
#[tokio::test(start_paused = true)]
async fn under_paused_time_the_sqlite_journal_misses_its_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("k.db");
    let journal = Arc::new(SqliteJournal::open(&path, JournalConfig::default()).unwrap());
    let (locked_tx, locked_rx) = std::sync::mpsc::channel();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let holder = std::thread::spawn(move || {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        locked_tx.send(()).unwrap();
        let _ = release_rx.recv();
        conn.execute_batch("COMMIT").unwrap();
    });
    locked_rx.recv().unwrap();
    let engine = Engine::builder()
        .provider("scripted", provider(1, 0))
        .required_observer(journal.clone())
        .build()
        .unwrap();
    let outcome = engine.start(request("run_paused")).unwrap().join().await;
    release_tx.send(()).unwrap();
    holder.join().unwrap();
    match outcome {
        RunOutcome::Failed {
            cause: FailureCause::Observer(e),
        } => {
            assert_eq!(e.seq, 1);
            assert!(
                matches!(e.source, ObserverError::DeadlineExceeded { .. }),
                "{e}"
            );
        }
        other => panic!("{other:?}"),
    }
}
