//! A continuation stores what is new (issue #32, R2): a chain of
//! continuations, each adding a 10 KB message, through the engine into the
//! SQLite journal, grows the database linearly: each run records the
//! history it inherits as one `run.input` reference, and the chain still
//! rebuilds from the journal to the history the model was given.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use keel_engine::*;
use keel_eventlog::history::{self, HistoryStore};
use keel_eventlog::{HistoryHasher, HistoryReference};
use keel_message::{Limits, Message, ModelName, Role, RunId};
use keel_observers::{JournalConfig, RunHistory, SqliteJournal};
use keel_stream::FinishReason;
use keel_testkit::{ScriptItem, ScriptedProvider};
use std::sync::Arc;

/// The bytes of one continuation's new message.
const MESSAGE_BYTES: usize = 10 * 1024;

/// What one run stores beyond its new message: `run.started`, the
/// reference, the turn, the model call and its answer, the terminal.
const RUN_OVERHEAD_BYTES: usize = 4 * 1024;

fn answer() -> Arc<ScriptedProvider> {
    Arc::new(ScriptedProvider::new(vec![vec![
        ScriptItem::text("ok"),
        ScriptItem::complete(FinishReason::Stop),
    ]]))
}

fn message(run: &RunId, n: usize) -> Message {
    let id = history::follow_up_message_id(run, 1).unwrap();
    let text = format!("{n:05} {}", "x".repeat(MESSAGE_BYTES - 6));
    Message::text(id, Role::User, &text).unwrap()
}

/// The reference to stored run `run`: its last seq and the digest of its
/// lines, read back from the journal.
fn reference_to(store: &dyn RunHistory, run: &RunId) -> HistoryReference {
    let mut hasher = HistoryHasher::default();
    loop {
        let page = store.events_after(run, hasher.last_seq(), 256).unwrap();
        if page.is_empty() {
            return HistoryReference::new(run.clone(), hasher);
        }
        page.iter().for_each(|e| hasher.update(e));
    }
}

/// Bytes of stored lines, of one run or (`None`) all.
fn stored_bytes(db: &std::path::Path, run: Option<&RunId>) -> usize {
    let conn = rusqlite::Connection::open(db).unwrap();
    let bytes: i64 = match run {
        Some(run) => conn.query_row(
            "SELECT COALESCE(SUM(LENGTH(line)), 0) FROM events WHERE run_id = ?1",
            [run.as_str()],
            |r| r.get(0),
        ),
        None => conn.query_row(
            "SELECT COALESCE(SUM(LENGTH(line)), 0) FROM events",
            [],
            |r| r.get(0),
        ),
    }
    .unwrap();
    usize::try_from(bytes).unwrap()
}

/// The database's size in pages: what it takes on disk once checkpointed.
fn database_bytes(db: &std::path::Path) -> usize {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
        .unwrap();
    let pages: i64 = conn
        .query_row("PRAGMA page_count", [], |r| r.get(0))
        .unwrap();
    let size: i64 = conn
        .query_row("PRAGMA page_size", [], |r| r.get(0))
        .unwrap();
    usize::try_from(pages * size).unwrap()
}

/// Runs a first run and `continuations` follow-ups, each continuing the
/// one before with one 10 KB message; the bytes each run stored.
async fn chain(db: &std::path::Path, continuations: usize) -> (Vec<usize>, RunId, Vec<Message>) {
    let journal = Arc::new(SqliteJournal::open(db, JournalConfig::default()).unwrap());
    let store: Arc<dyn RunHistory> = Arc::new(journal.reader().unwrap());
    let engine = Engine::builder()
        .provider("scripted", answer())
        .required_observer(journal.clone())
        .build()
        .unwrap();
    let model = ModelName::parse("scripted-1").unwrap();
    let mut per_run = Vec::new();
    let mut previous: Option<(RunId, Vec<Message>)> = None;
    for n in 0..=continuations {
        let run = RunId::parse(&format!("chain_{n}")).unwrap();
        let request = match previous.take() {
            None => RunRequest::new(run.clone(), model.clone(), vec![message(&run, n)]),
            Some((parent, transcript)) => {
                let inherited = transcript.len();
                let mut history = transcript;
                history.push(message(&run, n));
                RunRequest::new(run.clone(), model.clone(), history)
                    .inherits(reference_to(&*store, &parent), inherited)
            }
        };
        let done = engine
            .start(request.provider(answer()))
            .unwrap()
            .join()
            .await
            .into_result()
            .unwrap();
        per_run.push(stored_bytes(db, Some(&run)));
        previous = Some((run, done.into_transcript()));
    }
    engine.shutdown(std::time::Duration::from_secs(5)).await;
    drop(engine);
    // The run tasks' last references to the journal go as they finish
    // (after their terminals were acknowledged): wait for them, bounded.
    let mut journal = journal;
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match Arc::try_unwrap(journal) {
            Ok(owned) => break owned.close().unwrap(),
            Err(shared) if std::time::Instant::now() < until => {
                journal = shared;
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            Err(_) => panic!("the engine still holds the journal after 10 s"),
        }
    }
    let (last, transcript) = previous.unwrap();
    (per_run, last, transcript)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_continuations_of_10_kb_store_about_2_mb() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("k.db");
    let (per_run, last, transcript) = chain(&db, 200).await;
    // Each run stores its new message and a bounded overhead, however
    // long the history it inherits (the old form stored all of it: run n
    // stored n × 10 KB).
    for (n, bytes) in per_run.iter().enumerate() {
        assert!(
            *bytes <= MESSAGE_BYTES + RUN_OVERHEAD_BYTES,
            "run {n} stored {bytes} bytes"
        );
    }
    let lines = stored_bytes(&db, None);
    let on_disk = database_bytes(&db);
    assert!(lines < 3 * 1024 * 1024, "{lines} bytes of lines");
    assert!(on_disk < 4 * 1024 * 1024, "{on_disk} bytes on disk");
    // The chain rebuilds from the journal to the history the model had.
    let reader = SqliteJournal::open(&db, JournalConfig::default())
        .unwrap()
        .reader()
        .unwrap();
    let store: &dyn RunHistory = &reader;
    let rebuilt = history::rebuild_chain(store, &last, &Limits::default()).unwrap();
    assert_eq!(rebuilt.runs.len(), 201);
    assert_eq!(rebuilt.history, transcript);
}

/// Prints the bytes stored per run at 50, 100 and 200 continuations
/// (docs/PERFORMANCE.md; bytes, not times, so any profile):
/// `cargo test -p keel-engine --test continuation_storage -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement for docs/PERFORMANCE.md"]
async fn bytes_per_run_at_50_100_and_200_continuations() {
    for continuations in [50, 100, 200] {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("k.db");
        let (per_run, _, _) = chain(&db, continuations).await;
        let lines = stored_bytes(&db, None);
        let on_disk = database_bytes(&db);
        let runs = per_run.len();
        println!(
            "{continuations} continuations of {MESSAGE_BYTES} B: {runs} runs, {lines} B of lines \
             ({} B per run, last run {} B), database {on_disk} B ({} B per run)",
            lines / runs,
            per_run.last().unwrap(),
            on_disk / runs,
        );
    }
}

/// A request claiming more inherited messages than its history holds
/// fails before any turn, naming the rule, and records no input.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_inherited_messages_than_the_history_holds_fails_the_run() {
    let engine = Engine::builder()
        .provider("scripted", answer())
        .build()
        .unwrap();
    let run = RunId::parse("over").unwrap();
    let reference = HistoryReference {
        run_id: RunId::parse("parent").unwrap(),
        last_seq: 4,
        digest: format!("sha256:{}", "0".repeat(64)).parse().unwrap(),
        extra: Default::default(),
    };
    let request = RunRequest::new(
        run.clone(),
        ModelName::parse("scripted-1").unwrap(),
        vec![message(&run, 0)],
    )
    .inherits(reference, 2);
    let handle = engine.start(request).unwrap();
    let log = handle.log().clone();
    match handle.join().await {
        RunOutcome::Failed {
            cause: FailureCause::Limit { limit, .. },
        } => assert_eq!(limit, "request.inherited_messages"),
        other => panic!("{other:?}"),
    }
    let kinds: Vec<String> = log
        .retained_after(0)
        .iter()
        .map(|e| e.kind().to_string())
        .collect();
    assert_eq!(kinds, ["run.started", "run.failed"]);
}
