//! Fixtures the journal tests share (`delete.rs`, `journal.rs`,
//! `listing.rs`, `postgres.rs`, `postgres_delete.rs`): a temporary
//! directory for a database, a clock the test sets, and what an offered
//! event should get, and the events and runtime the tests use.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use keel_eventlog::{Clock, Event};
use keel_observers::{ObserverError, RequiredObserver};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A unique directory under the system temp dir (named after the test
/// binary and `tag`), removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A new empty directory.
    pub fn new(tag: &str) -> TempDir {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "keel-{}-{tag}-{}-{}",
            env!("CARGO_CRATE_NAME"),
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    /// The journal's database file in it.
    pub fn db(&self) -> PathBuf {
        self.0.join("keel.db")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A clock the test sets: every event gets the same time (microseconds).
#[derive(Debug)]
pub struct SetClock(pub u64);

impl Clock for SetClock {
    fn now_micros(&self) -> u64 {
        self.0
    }
}

/// What offering an event should get.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Want {
    /// Stored (or already stored, the same bytes).
    Ok,
    /// A different event at a stored seq.
    Conflict,
    /// A gap, with the last stored seq.
    Gap(u64),
    /// The store failed.
    Failed,
}

/// Asserts that offering `run`'s event `seq` got `want` (`what` names the
/// step in the message).
pub fn assert_want(what: &str, run: &str, seq: u64, got: &Result<(), ObserverError>, want: Want) {
    let ok = match (want, got) {
        (Want::Ok, Ok(())) => true,
        (Want::Conflict, Err(ObserverError::Conflict { run_id, seq: s })) => {
            run_id == run && *s == seq
        }
        (
            Want::Gap(last),
            Err(ObserverError::Gap {
                run_id,
                last_stored,
                seq: s,
            }),
        ) => run_id == run && *last_stored == last && *s == seq,
        (Want::Failed, Err(ObserverError::Failed(_))) => true,
        _ => false,
    };
    assert!(ok, "{what}: {run} seq {seq}: want {want:?}, got {got:?}");
}

/// A multi-thread runtime with two workers (and timers and I/O).
pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// An event of an extension kind carrying `text`, with `ts = 1000 * seq`.
pub fn note(run: &str, seq: u64, text: &str) -> Arc<Event> {
    event(
        run,
        seq,
        1000 * seq,
        "test.note",
        &format!(r#"{{"text":"{text}"}}"#),
    )
}

/// The event of `run` at `seq` with this `ts`, `kind` and `payload` (JSON).
pub fn event(run: &str, seq: u64, ts: u64, kind: &str, payload: &str) -> Arc<Event> {
    let line = format!(
        r#"{{"kind":"{kind}","payload":{payload},"run_id":"{run}","seq":{seq},"ts":{ts}}}"#
    );
    Arc::new(Event::decode(&line).unwrap_or_else(|e| panic!("{line}: {e}")))
}

/// The version-1 DDL of the SQLite journal, as the release that wrote it
/// created it (frozen: a migration test starts from it).
pub const V1_DDL: &str = "
CREATE TABLE keel_schema (version INTEGER NOT NULL, events TEXT NOT NULL);
CREATE TABLE runs (
    run_id     TEXT PRIMARY KEY,
    last_seq   INTEGER NOT NULL,
    status     TEXT    NOT NULL CHECK (status IN ('running', 'completed', 'failed', 'cancelled')),
    started_ts INTEGER NOT NULL,
    updated_ts INTEGER NOT NULL
);
CREATE TABLE events (
    run_id TEXT    NOT NULL,
    seq    INTEGER NOT NULL,
    kind   TEXT    NOT NULL,
    ts     INTEGER NOT NULL,
    line   TEXT    NOT NULL,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
INSERT INTO keel_schema VALUES (1, 'keel.events/1');
";

/// Writes `runs` runs (`run_0`, …) of `events` notes each to `journal`
/// concurrently, one task per run, one `observe` at a time.
pub fn observe_notes_concurrently<J: RequiredObserver + Send + Sync + 'static>(
    rt: &tokio::runtime::Runtime,
    journal: &Arc<J>,
    runs: usize,
    events: u64,
) {
    rt.block_on(async {
        let tasks: Vec<_> = (0..runs)
            .map(|r| {
                let journal = Arc::clone(journal);
                tokio::spawn(async move {
                    let run = format!("run_{r}");
                    for seq in 1..=events {
                        journal
                            .observe(&note(&run, seq, &format!("r{r}s{seq}")))
                            .await
                            .unwrap();
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
    });
}
