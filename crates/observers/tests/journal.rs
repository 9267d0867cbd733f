#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The SQLite journal: storage, idempotency, conflicts, gaps, batching,
//! concurrency, run status, schema refusal, reopen, read API.
#![cfg(feature = "sqlite")]

#[path = "support/fixtures.rs"]
mod fixtures;

use fixtures::{TempDir, Want, assert_want, event, note, observe_notes_concurrently, rt};
use futures_util::FutureExt;
use keel_eventlog::{
    Event, Extra, LogConfig, Payload, RunCompleted, RunLog, RunStarted, SystemClock,
};
use keel_message::{ModelName, OperationId, RunId};
use keel_observers::journal::SCHEMA_VERSION;
use keel_observers::{
    BatchError, JournalConfig, JournalError, JournalReader, ObserverError, RequiredObserver,
    RunStatus, SqliteJournal,
};
use keel_testkit::events::{self, ModelAttempt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

// ---------------------------------------------------------------- helpers

fn open(path: &Path) -> SqliteJournal {
    SqliteJournal::open(path, JournalConfig::default()).unwrap()
}

fn lines(reader: &JournalReader, run: &str) -> Vec<String> {
    reader.events_after(run, 0, usize::MAX).unwrap()
}

/// Holds the database's write lock from another connection, so the
/// journal's writer blocks in `BEGIN IMMEDIATE` and everything offered in
/// the meantime queues up into one batch.
struct WriteLock(rusqlite::Connection);

impl WriteLock {
    fn take(path: &Path) -> WriteLock {
        let conn = rusqlite::Connection::open(path).unwrap();
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        WriteLock(conn)
    }

    /// Releases the lock after `after`, from another thread.
    fn release_after(self, after: Duration) -> std::thread::JoinHandle<()> {
        std::thread::spawn(move || {
            std::thread::sleep(after);
            self.0.execute_batch("ROLLBACK").unwrap();
        })
    }
}

// ------------------------------------------------- append, retry, conflict, gap

struct AppendRow {
    name: &'static str,
    /// Offered in order: seq, payload text, expected answer.
    offers: &'static [(u64, &'static str, Want)],
    /// The stored texts afterwards, seq 1, 2, ….
    stored: &'static [&'static str],
}

/// Offers each row's events one at a time to its own run, then checks
/// every answer and the stored lines byte for byte.
fn check_append(rows: &[AppendRow]) {
    let dir = TempDir::new("append");
    let journal = open(&dir.db());
    let reader = journal.reader().unwrap();
    let rt = rt();
    for (i, row) in rows.iter().enumerate() {
        let run = format!("run_{i}");
        for &(seq, text, want) in row.offers {
            let got = rt.block_on(journal.observe(&note(&run, seq, text)));
            assert_want(row.name, &run, seq, &got, want);
        }
        let want: Vec<String> = row
            .stored
            .iter()
            .enumerate()
            .map(|(i, text)| note(&run, i as u64 + 1, text).line().to_owned())
            .collect();
        assert_eq!(lines(&reader, &run), want, "{}: stored lines", row.name);
        let summary = reader.run_status(&run).unwrap();
        assert_eq!(
            summary.map(|s| s.last_seq).unwrap_or(0),
            row.stored.len() as u64,
            "{}: last_seq",
            row.name
        );
    }
    journal.close().unwrap();
}

#[test]
fn append_retry_conflict_and_gap() {
    use Want::*;
    check_append(&[
        AppendRow {
            name: "in order, read back byte for byte",
            offers: &[(1, "a", Ok), (2, "b", Ok), (3, "c \\\"quoted\\\" é", Ok)],
            stored: &["a", "b", "c \\\"quoted\\\" é"],
        },
        AppendRow {
            name: "retry with the same bytes is accepted",
            offers: &[
                (1, "a", Ok),
                (1, "a", Ok),
                (2, "b", Ok),
                (1, "a", Ok),
                (2, "b", Ok),
            ],
            stored: &["a", "b"],
        },
        AppendRow {
            name: "different bytes for a stored seq is a conflict; the row is kept",
            offers: &[
                (1, "a", Ok),
                (2, "b", Ok),
                (2, "B", Conflict),
                (1, "x", Conflict),
                (3, "c", Ok),
            ],
            stored: &["a", "b", "c"],
        },
        AppendRow {
            name: "the first event must be seq 1",
            offers: &[(2, "b", Gap(0)), (7, "g", Gap(0)), (1, "a", Ok)],
            stored: &["a"],
        },
        AppendRow {
            name: "a skipped seq is a gap; nothing is stored for it",
            offers: &[
                (1, "a", Ok),
                (2, "b", Ok),
                (4, "d", Gap(2)),
                (3, "c", Ok),
                (5, "e", Gap(3)),
                (4, "d", Ok),
            ],
            stored: &["a", "b", "c", "d"],
        },
        AppendRow {
            name: "a refused event leaves the run usable",
            offers: &[
                (1, "a", Ok),
                (1, "z", Conflict),
                (3, "c", Gap(1)),
                (2, "b", Ok),
            ],
            stored: &["a", "b"],
        },
    ]);
}

#[test]
fn conflict_in_timestamp_only() {
    let dir = TempDir::new("ts");
    let journal = open(&dir.db());
    let rt = rt();
    let first = event("run_t", 1, 10, "test.note", r#"{"text":"a"}"#);
    let same_but_ts = event("run_t", 1, 11, "test.note", r#"{"text":"a"}"#);
    rt.block_on(journal.observe(&first)).unwrap();
    let got = rt.block_on(journal.observe(&same_but_ts));
    assert_want("ts differs", "run_t", 1, &got, Want::Conflict);
    assert_eq!(journal.name(), "sqlite");
    let stats = journal.stats();
    assert_eq!((stats.stored, stats.refused), (1, 1), "{stats:?}");
}

// --------------------------------------------------------------- batches

struct BatchRow {
    run: &'static str,
    seq: u64,
    text: &'static str,
    want: Want,
}

/// Stores `preload` first, then offers all `rows` while the writer is
/// blocked, so they share one transaction; checks every answer, then that
/// each run holds exactly `stored`.
fn check_batch(
    name: &str,
    preload: &[(&str, u64, &str)],
    rows: &[BatchRow],
    stored: &[(&str, &[&str])],
) {
    let dir = TempDir::new("batch");
    let journal = open(&dir.db());
    let rt = rt();
    for &(run, seq, text) in preload {
        rt.block_on(journal.observe(&note(run, seq, text))).unwrap();
    }
    let before = journal.stats();
    let lock = WriteLock::take(&dir.db());
    let release = lock.release_after(Duration::from_millis(300));
    let events: Vec<Arc<Event>> = rows.iter().map(|r| note(r.run, r.seq, r.text)).collect();
    // `join_all` polls in order, so the events queue in row order.
    let answers = rt.block_on(futures_util::future::join_all(
        events.iter().map(|e| journal.observe(e)),
    ));
    release.join().unwrap();
    for (row, got) in rows.iter().zip(&answers) {
        assert_want(name, row.run, row.seq, got, row.want);
    }
    let after = journal.stats();
    // The writer may take what was queued before it blocked (one event or
    // a few, depending on scheduling); everything else queued behind the
    // lock. So all rows commit in at most two transactions, and one of
    // them holds at least half the rows.
    assert_eq!(
        after.requests - before.requests,
        rows.len() as u64,
        "{name}: {after:?}"
    );
    assert!(
        after.transactions - before.transactions <= 2,
        "{name}: expected the queued rows in at most two transactions: {after:?}"
    );
    assert!(
        after.largest_batch * 2 >= rows.len() as u64,
        "{name}: expected one batch of the queued rows: {after:?}"
    );
    let reader = journal.reader().unwrap();
    for &(run, texts) in stored {
        let want: Vec<String> = texts
            .iter()
            .enumerate()
            .map(|(i, t)| note(run, i as u64 + 1, t).line().to_owned())
            .collect();
        assert_eq!(lines(&reader, run), want, "{name}: {run}");
    }
    journal.close().unwrap();
}

#[test]
fn refused_events_do_not_affect_their_batch() {
    use Want::*;
    let row = |run, seq, text, want| BatchRow {
        run,
        seq,
        text,
        want,
    };
    check_batch(
        "gap, conflict, retry and good events in one batch",
        &[("run_c", 1, "c1"), ("run_d", 1, "d1"), ("run_d", 2, "d2")],
        &[
            row("run_a", 1, "a1", Ok),
            row("run_a", 2, "a2", Ok),
            row("run_g", 2, "g2", Gap(0)),
            row("run_c", 1, "other", Conflict),
            row("run_a", 3, "a3", Ok),
            row("run_c", 2, "c2", Ok),
            row("run_d", 2, "d2", Ok),
            row("run_a", 3, "a3", Ok),
            row("run_a", 5, "a5", Gap(3)),
            row("run_a", 2, "A2", Conflict),
            row("run_b", 1, "b1", Ok),
            row("run_g", 1, "g1", Ok),
            row("run_g", 2, "g2", Ok),
        ],
        &[
            ("run_a", &["a1", "a2", "a3"]),
            ("run_b", &["b1"]),
            ("run_c", &["c1", "c2"]),
            ("run_d", &["d1", "d2"]),
            ("run_g", &["g1", "g2"]),
        ],
    );
}

#[test]
fn a_failed_transaction_is_never_acknowledged() {
    let dir = TempDir::new("poison");
    let journal = open(&dir.db());
    let rt = rt();
    let admin = rusqlite::Connection::open(dir.db()).unwrap();
    // Any write of run_poison's runs row aborts its transaction.
    admin
        .execute_batch(
            "CREATE TRIGGER poison BEFORE INSERT ON runs WHEN NEW.run_id = 'run_poison' \
             BEGIN SELECT RAISE(ABORT, 'injected fault'); END;",
        )
        .unwrap();
    let lock = WriteLock::take(&dir.db());
    let release = lock.release_after(Duration::from_millis(300));
    let events = [
        note("run_ok", 1, "a"),
        note("run_ok", 2, "b"),
        note("run_poison", 1, "p"),
        note("run_ok", 3, "c"),
    ];
    let answers = rt.block_on(futures_util::future::join_all(
        events.iter().map(|e| journal.observe(e)),
    ));
    release.join().unwrap();
    assert_want("healthy", "run_ok", 1, &answers[0], Want::Ok);
    assert_want("healthy", "run_ok", 2, &answers[1], Want::Ok);
    assert_want("poisoned", "run_poison", 1, &answers[2], Want::Failed);
    assert_want("healthy", "run_ok", 3, &answers[3], Want::Ok);
    let reader = journal.reader().unwrap();
    assert_eq!(lines(&reader, "run_ok").len(), 3);
    assert!(lines(&reader, "run_poison").is_empty());
    assert_eq!(reader.run_status("run_poison").unwrap(), None);
    assert_eq!(journal.stats().failed, 1);
    // Once the fault is gone the same event goes through.
    admin.execute_batch("DROP TRIGGER poison").unwrap();
    rt.block_on(journal.observe(&events[2])).unwrap();
    assert_eq!(
        lines(&reader, "run_poison"),
        vec![events[2].line().to_owned()]
    );
    journal.close().unwrap();
}

#[test]
fn many_concurrent_runs_are_stored_contiguously() {
    const RUNS: usize = 8;
    const EVENTS: u64 = 500;
    let dir = TempDir::new("concurrent");
    let journal = Arc::new(open(&dir.db()));
    let rt = rt();
    observe_notes_concurrently(&rt, &journal, RUNS, EVENTS);
    let stats = journal.stats();
    eprintln!(
        "{RUNS} runs x {EVENTS} events: {} transactions, average batch {:.2}, largest {}",
        stats.transactions,
        stats.average_batch(),
        stats.largest_batch
    );
    assert_eq!(stats.stored, RUNS as u64 * EVENTS);
    assert!(
        stats.largest_batch > 1,
        "no group commit happened: {stats:?}"
    );
    let reader = journal.reader().unwrap();
    assert_eq!(reader.runs().unwrap().len(), RUNS);
    for r in 0..RUNS {
        let run = format!("run_{r}");
        let want: Vec<String> = (1..=EVENTS)
            .map(|seq| note(&run, seq, &format!("r{r}s{seq}")).line().to_owned())
            .collect();
        assert_eq!(lines(&reader, &run), want, "{run}");
        // Pagination by cursor.
        let page = reader.events_after(&run, 100, 50).unwrap();
        assert_eq!(page, want[100..150].to_vec());
    }
    Arc::try_unwrap(journal).unwrap().close().unwrap();
}

// ------------------------------------------------------------ run status

struct StatusRow {
    name: &'static str,
    /// (kind, payload) in seq order, ts = 1000 * seq.
    events: &'static [(&'static str, &'static str)],
    want: Option<RunStatus>,
}

fn check_status(rows: &[StatusRow]) {
    let dir = TempDir::new("status");
    let journal = open(&dir.db());
    let reader = journal.reader().unwrap();
    let rt = rt();
    for (i, row) in rows.iter().enumerate() {
        let run = format!("run_{i}");
        let events: Vec<_> = row
            .events
            .iter()
            .enumerate()
            .map(|(j, (kind, payload))| {
                let seq = j as u64 + 1;
                event(&run, seq, 1000 * seq, kind, payload)
            })
            .collect();
        for e in &events {
            rt.block_on(journal.observe(e)).unwrap();
        }
        // A retry of the last event after the run ended is still accepted.
        if let Some(last) = events.last() {
            rt.block_on(journal.observe(last)).unwrap();
        }
        let summary = reader.run_status(&run).unwrap();
        assert_eq!(summary.as_ref().map(|s| s.status), row.want, "{}", row.name);
        if let Some(s) = summary {
            let n = events.len() as u64;
            assert_eq!(
                (s.run_id.as_str(), s.last_seq, s.started_ts, s.updated_ts),
                (run.as_str(), n, 1000, 1000 * n),
                "{}",
                row.name
            );
        }
    }
    let listed = reader.runs().unwrap();
    assert_eq!(
        listed.len(),
        rows.iter().filter(|r| r.want.is_some()).count()
    );
    journal.close().unwrap();
}

#[test]
fn run_status_follows_lifecycle_events() {
    check_status(&[
        StatusRow {
            name: "started",
            events: &[("run.started", "{}")],
            want: Some(RunStatus::Running),
        },
        StatusRow {
            name: "started then other events",
            events: &[
                ("run.started", "{}"),
                ("turn.started", r#"{"turn":1}"#),
                ("turn.completed", r#"{"turn":1}"#),
            ],
            want: Some(RunStatus::Running),
        },
        StatusRow {
            name: "completed",
            events: &[("run.started", "{}"), ("run.completed", "{}")],
            want: Some(RunStatus::Completed),
        },
        StatusRow {
            name: "failed",
            events: &[("run.started", "{}"), ("run.failed", r#"{"error":"boom"}"#)],
            want: Some(RunStatus::Failed),
        },
        StatusRow {
            name: "cancelled",
            events: &[("run.started", "{}"), ("run.cancelled", "{}")],
            want: Some(RunStatus::Cancelled),
        },
        StatusRow {
            name: "turn terminal does not end the run",
            events: &[
                ("run.started", "{}"),
                ("turn.started", r#"{"turn":1}"#),
                ("turn.failed", r#"{"error":"x","turn":1}"#),
            ],
            want: Some(RunStatus::Running),
        },
        StatusRow {
            name: "no events: unknown run",
            events: &[],
            want: None,
        },
    ]);
}

// -------------------------------------------------------- refusing to open

/// Bytes of the database, its WAL, and whether each side file exists.
#[derive(Debug, PartialEq)]
struct Files {
    db: Option<Vec<u8>>,
    wal: Option<Vec<u8>>,
    shm: bool,
}

fn files(path: &Path) -> Files {
    let side = |s: &str| PathBuf::from(format!("{}{s}", path.display()));
    Files {
        db: std::fs::read(path).ok(),
        wal: std::fs::read(side("-wal")).ok(),
        shm: side("-shm").exists(),
    }
}

/// Writes a journal-shaped database with schema `version` in WAL mode.
fn journal_like(path: &Path, version: i64) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    conn.execute_batch(&format!(
        "CREATE TABLE keel_schema (version INTEGER NOT NULL, events TEXT NOT NULL);
         INSERT INTO keel_schema VALUES ({version}, 'keel.events/9');
         CREATE TABLE runs (run_id TEXT PRIMARY KEY, last_seq INTEGER NOT NULL, status TEXT NOT NULL,
                            started_ts INTEGER NOT NULL, updated_ts INTEGER NOT NULL, shiny TEXT);
         CREATE TABLE events (run_id TEXT, seq INTEGER, kind TEXT, ts INTEGER, line TEXT,
                              PRIMARY KEY (run_id, seq)) WITHOUT ROWID;
         INSERT INTO runs VALUES ('run_1', 1, 'running', 1, 1, 'new');"
    ))
    .unwrap();
    conn
}

struct RefuseRow {
    name: &'static str,
    /// Builds the file; may return a connection to keep open during the
    /// attempt (a live writer of a newer version).
    setup: fn(&Path) -> Option<rusqlite::Connection>,
    want: fn(&JournalError) -> bool,
}

/// For each row: the writer and the reader both refuse to open, with the
/// expected error, and the files are byte-for-byte what they were.
fn check_refused(rows: &[RefuseRow]) {
    for row in rows {
        let dir = TempDir::new("refuse");
        let path = dir.db();
        let keep = (row.setup)(&path);
        let before = files(&path);
        let err = SqliteJournal::open(&path, JournalConfig::default())
            .err()
            .unwrap_or_else(|| panic!("{}: writer opened", row.name));
        assert!((row.want)(&err), "{}: writer: {err:?}", row.name);
        assert_eq!(
            files(&path),
            before,
            "{}: writer touched the files",
            row.name
        );
        let err = JournalReader::open(&path)
            .err()
            .unwrap_or_else(|| panic!("{}: reader opened", row.name));
        assert!((row.want)(&err), "{}: reader: {err:?}", row.name);
        assert_eq!(
            files(&path),
            before,
            "{}: reader touched the files",
            row.name
        );
        drop(keep);
    }
}

#[test]
fn refuses_newer_or_foreign_databases_without_touching_them() {
    fn newer(e: &JournalError) -> bool {
        matches!(e, JournalError::NewerSchema { found, supported, .. } if *found == SCHEMA_VERSION + 1 && *supported == SCHEMA_VERSION)
    }
    check_refused(&[
        RefuseRow {
            name: "newer schema, cleanly closed (no -wal, no -shm)",
            setup: |p| {
                journal_like(p, i64::from(SCHEMA_VERSION) + 1);
                None
            },
            want: newer,
        },
        RefuseRow {
            name: "newer schema, its writer still running (live -wal and -shm)",
            setup: |p| {
                let conn = journal_like(p, i64::from(SCHEMA_VERSION) + 1);
                conn.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
                conn.execute_batch("INSERT INTO runs VALUES ('run_2', 5, 'running', 2, 3, 'x')")
                    .unwrap();
                Some(conn)
            },
            want: newer,
        },
        RefuseRow {
            name: "newer schema in a rollback-journal database",
            setup: |p| {
                let conn = journal_like(p, 7);
                conn.pragma_update(None, "journal_mode", "DELETE").unwrap();
                None
            },
            want: |e| matches!(e, JournalError::NewerSchema { found: 7, .. }),
        },
        RefuseRow {
            name: "someone else's database",
            setup: |p| {
                let conn = rusqlite::Connection::open(p).unwrap();
                conn.execute_batch("CREATE TABLE notes (x TEXT); INSERT INTO notes VALUES ('hi');")
                    .unwrap();
                None
            },
            want: |e| matches!(e, JournalError::NotAJournal { .. }),
        },
        RefuseRow {
            name: "schema version 0",
            setup: |p| {
                journal_like(p, 0);
                None
            },
            want: |e| matches!(e, JournalError::InvalidSchema { .. }),
        },
        RefuseRow {
            name: "not a SQLite file",
            setup: |p| {
                std::fs::write(p, "this is a text file, not a database\n".repeat(200)).unwrap();
                None
            },
            want: |e| matches!(e, JournalError::NotSqlite { .. }),
        },
    ]);
}

#[test]
fn reader_refuses_a_missing_journal_without_creating_it() {
    let dir = TempDir::new("missing");
    let err = JournalReader::open(dir.db()).unwrap_err();
    assert!(matches!(err, JournalError::NotFound { .. }), "{err:?}");
    assert!(!dir.db().exists());
    let err = SqliteJournal::open(dir.0.join("no/such/dir/keel.db"), JournalConfig::default())
        .unwrap_err();
    assert!(matches!(err, JournalError::Sqlite { .. }), "{err:?}");
}

#[test]
fn config_is_checked() {
    let dir = TempDir::new("config");
    type Edit = fn(&mut JournalConfig);
    let rows: [(&str, Edit); 3] = [
        ("max_batch", |c| c.max_batch = 0),
        ("max_batch_bytes", |c| c.max_batch_bytes = 0),
        ("queue_capacity", |c| c.queue_capacity = 0),
    ];
    for (field, edit) in rows {
        let mut config = JournalConfig::default();
        edit(&mut config);
        let err = SqliteJournal::open(dir.db(), config).unwrap_err();
        assert!(
            matches!(err, JournalError::Config { field: f, .. } if f == field),
            "{field}: {err:?}"
        );
        assert!(!dir.db().exists(), "{field}: the file was created");
    }
}

// --------------------------------------------------------------- reopen

#[test]
fn reopen_continues_where_the_file_left_off() {
    let dir = TempDir::new("reopen");
    let rt = rt();
    {
        let journal = open(&dir.db());
        for seq in 1..=3 {
            rt.block_on(journal.observe(&note("run_a", seq, "a")))
                .unwrap();
        }
        rt.block_on(journal.observe(&note("run_b", 1, "b")))
            .unwrap();
        journal.close().unwrap();
    }
    // A clean close checkpoints and removes the WAL.
    assert!(!PathBuf::from(format!("{}-wal", dir.db().display())).exists());
    let admin = rusqlite::Connection::open(dir.db()).unwrap();
    let (version, events): (i64, String) = admin
        .query_row("SELECT version, events FROM keel_schema", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    assert_eq!(
        (version, events.as_str()),
        (i64::from(SCHEMA_VERSION), keel_eventlog::SCHEMA_VERSION)
    );
    let mode: String = admin
        .pragma_query_value(None, "journal_mode", |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    drop(admin);

    let journal = open(&dir.db());
    for (run, seq, text, want) in [
        ("run_a", 3, "a", Want::Ok),
        ("run_a", 2, "x", Want::Conflict),
        ("run_a", 6, "a", Want::Gap(3)),
        ("run_a", 4, "a", Want::Ok),
        ("run_b", 1, "b", Want::Ok),
        ("run_b", 2, "b", Want::Ok),
        ("run_c", 2, "c", Want::Gap(0)),
    ] {
        let got = rt.block_on(journal.observe(&note(run, seq, text)));
        assert_want("after reopen", run, seq, &got, want);
    }
    let reader = journal.reader().unwrap();
    assert_eq!(lines(&reader, "run_a").len(), 4);
    assert_eq!(lines(&reader, "run_b").len(), 2);
    journal.close().unwrap();
    // Reading after the writer is gone.
    assert_eq!(lines(&reader, "run_a").len(), 4);
}

#[test]
fn a_second_writer_on_the_same_file_is_not_confused_by_a_stale_cache() {
    let dir = TempDir::new("two-writers");
    let rt = rt();
    let first = open(&dir.db());
    let second = open(&dir.db());
    rt.block_on(first.observe(&note("run_x", 1, "a"))).unwrap();
    rt.block_on(second.observe(&note("run_x", 2, "b"))).unwrap();
    // `first` cached last_seq 1; it must see the other writer's seq 2.
    let got = rt.block_on(first.observe(&note("run_x", 2, "B")));
    assert_want("stale cache", "run_x", 2, &got, Want::Conflict);
    rt.block_on(first.observe(&note("run_x", 3, "c"))).unwrap();
    assert_eq!(lines(&first.reader().unwrap(), "run_x").len(), 3);
    first.close().unwrap();
    second.close().unwrap();
}

// ---------------------------------------------------- read API, shutdown

#[test]
fn an_acknowledged_event_is_visible_to_a_reader_at_once() {
    let dir = TempDir::new("visible");
    let journal = open(&dir.db());
    let reader = JournalReader::open(journal.path()).unwrap();
    let rt = rt();
    for seq in 1..=100 {
        let e = note("run_v", seq, "v");
        rt.block_on(journal.observe(&e)).unwrap();
        assert_eq!(
            reader.events_after("run_v", seq - 1, 10).unwrap(),
            vec![e.line().to_owned()],
            "seq {seq}"
        );
        assert_eq!(reader.run_status("run_v").unwrap().unwrap().last_seq, seq);
    }
    assert!(reader.events_after("run_v", 100, 10).unwrap().is_empty());
    assert!(reader.events_after("run_none", 0, 10).unwrap().is_empty());
    assert_eq!(reader.events_after("run_v", 0, 0).unwrap().len(), 0);
    journal.close().unwrap();
}

#[test]
fn close_drains_the_queue_and_cancelled_observes_are_safe() {
    let dir = TempDir::new("drain");
    let journal = open(&dir.db());
    let events: Vec<_> = (1..=40).map(|seq| note("run_q", seq, "q")).collect();
    let lock = WriteLock::take(&dir.db());
    // Each observe queues its event, then is dropped before the ack
    // (as a pipeline deadline would).
    for e in &events {
        assert!(journal.observe(e).now_or_never().is_none());
    }
    let release = lock.release_after(Duration::from_millis(200));
    journal.close().unwrap();
    release.join().unwrap();
    let reader = JournalReader::open(dir.db()).unwrap();
    let want: Vec<String> = events.iter().map(|e| e.line().to_owned()).collect();
    assert_eq!(lines(&reader, "run_q"), want);
    // Offering a cancelled event again is fine.
    let journal = open(&dir.db());
    let rt = rt();
    rt.block_on(journal.observe(&events[39])).unwrap();
    assert_eq!(journal.stats().duplicates, 1);
    drop(journal); // Drop closes too.
}

// ------------------------------------------------------ a real run's log

#[test]
fn a_real_run_log_is_stored_and_imports_back() {
    let dir = TempDir::new("runlog");
    let journal = open(&dir.db());
    let rt = rt();
    let run = RunId::parse("run_real").unwrap();
    let log = RunLog::new(run.clone(), LogConfig::default(), Arc::new(SystemClock)).unwrap();
    let model_name = ModelName::parse("scripted-1").unwrap();
    let model = ModelAttempt::new(1, OperationId::parse("op_1").unwrap());
    let usage = keel_stream::Usage::new(12, 7).unwrap();
    let mut payloads = vec![
        Payload::RunStarted(RunStarted {
            model: Some(model_name.clone()),
            chat: None,
            extra: Extra::new(),
            continues: None,
            forked_from: None,
            parent: None,
        }),
        events::turn_started(1),
        model.started(model_name),
    ];
    for text in ["Checking", " the weather", " in Oslo: 3 °C, \"cloudy\".\n"] {
        payloads.push(model.text(text));
    }
    payloads.extend([
        model.completed(keel_stream::FinishReason::Stop, Some(usage)),
        events::turn_completed(1),
        Payload::RunCompleted(RunCompleted {
            usage: Some(usage),
            extra: Extra::new(),
        }),
    ]);
    let mut committed = Vec::new();
    for payload in &payloads {
        let event = log.commit(payload).unwrap();
        rt.block_on(journal.observe(&event)).unwrap();
        committed.push(event.line().to_owned());
    }
    let reader = journal.reader().unwrap();
    let stored = lines(&reader, run.as_str());
    assert_eq!(stored, committed);
    let summary = reader.run_status(run.as_str()).unwrap().unwrap();
    assert_eq!(summary.status, RunStatus::Completed);
    assert_eq!(summary.last_seq, payloads.len() as u64);
    let imported = RunLog::import(
        run,
        stored.iter().map(String::as_str),
        LogConfig::default(),
        Arc::new(SystemClock),
    )
    .unwrap();
    assert_eq!(imported.stats().last_seq, payloads.len() as u64);
    assert!(imported.run_ended());
    journal.close().unwrap();
}

// --------------------------------------------------------------- totals

fn turn(run: &str, seq: u64, turn: u64) -> Arc<Event> {
    event(
        run,
        seq,
        seq,
        "turn.started",
        &format!(r#"{{"turn":{turn}}}"#),
    )
}

fn completed(run: &str, seq: u64, usage: Option<(u64, u64)>) -> Arc<Event> {
    let usage = usage.map_or(String::new(), |(i, o)| {
        format!(r#","usage":{{"input_tokens":{i},"output_tokens":{o}}}"#)
    });
    event(
        run,
        seq,
        seq,
        "model.completed",
        &format!(r#"{{"finish":"stop","operation_id":"op_{seq}","turn":1{usage}}}"#),
    )
}

#[test]
fn run_totals_are_kept_across_batches_reopens_and_duplicates() {
    let dir = TempDir::new("totals");
    let rt = rt();
    let first = [
        turn("run_t", 1, 1),
        completed("run_t", 2, Some((5, 2))),
        completed("run_t", 3, None),
    ];
    {
        let journal = open(&dir.db());
        for e in &first {
            rt.block_on(journal.observe(e)).unwrap();
        }
        // A duplicate is stored once and counted once.
        rt.block_on(journal.observe(&first[1])).unwrap();
        journal.close().unwrap();
    }
    // Reopened: the writer reloads the counters from the runs row.
    let journal = open(&dir.db());
    for e in [turn("run_t", 4, 2), completed("run_t", 5, Some((7, 1)))] {
        rt.block_on(journal.observe(&e)).unwrap();
    }
    rt.block_on(journal.observe(&note("run_other", 1, "x")))
        .unwrap();
    journal.close().unwrap();
    let reader = JournalReader::open(dir.db()).unwrap();
    let totals = reader.totals().unwrap();
    assert_eq!(
        totals["run_t"],
        keel_observers::RunTotals {
            turns: 2,
            input_tokens: 12,
            output_tokens: 3
        }
    );
    assert_eq!(totals["run_other"], keel_observers::RunTotals::default());
    assert_eq!(totals, reader.summed_totals().unwrap());
}

// ------------------------------------------------------- observe_batch

fn notes(run: &str, seqs: std::ops::RangeInclusive<u64>) -> Vec<Arc<Event>> {
    seqs.map(|seq| note(run, seq, &format!("{run} {seq}")))
        .collect()
}

fn batch_error(got: Result<(), BatchError>) -> (usize, ObserverError) {
    let e = got.expect_err("the batch should be refused");
    (e.acknowledged, e.source)
}

#[test]
fn a_batch_is_one_transaction_acknowledged_after_its_commit() {
    let dir = TempDir::new("batch-one-txn");
    let journal = Arc::new(open(&dir.db()));
    let batch = notes("run_b", 1..=64);
    let before = journal.stats();
    // Held lock: the batch queues; nothing may be acknowledged before the
    // commit, and a reader must never see part of it.
    let lock = WriteLock::take(&dir.db());
    let writer = {
        let (journal, batch) = (Arc::clone(&journal), batch.clone());
        std::thread::spawn(move || rt().block_on(journal.observe_batch(&batch)))
    };
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (path, stop) = (dir.db(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let reader = JournalReader::open(&path).unwrap();
            let mut seen = std::collections::BTreeSet::new();
            while !stop.load(Ordering::Relaxed) {
                seen.insert(reader.events_after("run_b", 0, usize::MAX).unwrap().len());
            }
            seen.insert(reader.events_after("run_b", 0, usize::MAX).unwrap().len());
            seen
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    assert!(!writer.is_finished(), "acknowledged before its commit");
    lock.release_after(Duration::ZERO).join().unwrap();
    writer.join().unwrap().unwrap();
    stop.store(true, Ordering::Relaxed);
    let seen = watcher.join().unwrap();
    assert!(
        seen.iter().all(|n| *n == 0 || *n == 64),
        "a reader saw part of the batch: {seen:?}"
    );
    let after = journal.stats();
    assert_eq!(after.transactions - before.transactions, 1, "{after:?}");
    assert_eq!(after.stored - before.stored, 64);
    assert_eq!(after.largest_batch, 64);
    let want: Vec<String> = batch.iter().map(|e| e.line().to_owned()).collect();
    assert_eq!(lines(&journal.reader().unwrap(), "run_b"), want);
    // A batch larger than `max_batch` is still one transaction.
    let mut config = JournalConfig::default();
    config.max_batch = 8;
    drop(journal);
    let small = SqliteJournal::open(dir.db(), config).unwrap();
    let before = small.stats();
    rt().block_on(small.observe_batch(&notes("run_b", 65..=128)))
        .unwrap();
    assert_eq!(small.stats().transactions - before.transactions, 1);
    small.close().unwrap();
}

#[test]
fn a_batch_keeps_what_precedes_its_first_refusal() {
    let dir = TempDir::new("batch-partial");
    let journal = open(&dir.db());
    let rt = rt();
    let stored = notes("run_p", 1..=3);
    rt.block_on(journal.observe_batch(&stored)).unwrap();
    // Conflict in the middle: seq 2 is a retry, seq 3 has other bytes.
    let conflicting = vec![
        stored[1].clone(),
        note("run_p", 3, "other bytes"),
        note("run_p", 4, "p4"),
        note("run_p", 5, "p5"),
    ];
    let (acknowledged, source) = batch_error(rt.block_on(journal.observe_batch(&conflicting)));
    assert_eq!(acknowledged, 1);
    assert_want("conflict", "run_p", 3, &Err(source), Want::Conflict);
    let reader = journal.reader().unwrap();
    let want: Vec<String> = stored.iter().map(|e| e.line().to_owned()).collect();
    assert_eq!(lines(&reader, "run_p"), want, "nothing after the conflict");
    // New events, then a gap: the new ones commit, the rest is refused.
    let gapped = vec![
        note("run_p", 4, "p4"),
        note("run_p", 5, "p5"),
        note("run_p", 7, "p7"),
        note("run_p", 8, "p8"),
    ];
    let (acknowledged, source) = batch_error(rt.block_on(journal.observe_batch(&gapped)));
    assert_eq!(acknowledged, 2);
    assert_want("gap", "run_p", 7, &Err(source), Want::Gap(5));
    assert_eq!(reader.run_status("run_p").unwrap().unwrap().last_seq, 5);
    assert_eq!(
        lines(&reader, "run_p")[3..],
        [gapped[0].line(), gapped[1].line()]
    );
    // The engine's re-offer from the first unacknowledged event goes on.
    rt.block_on(journal.observe_batch(&notes("run_p", 6..=8)))
        .unwrap();
    assert_eq!(reader.run_status("run_p").unwrap().unwrap().last_seq, 8);
    journal.close().unwrap();
}

#[test]
fn a_batch_with_a_gap_at_its_start_acknowledges_nothing() {
    let dir = TempDir::new("batch-gap");
    let journal = open(&dir.db());
    let rt = rt();
    let (acknowledged, source) =
        batch_error(rt.block_on(journal.observe_batch(&notes("run_new", 2..=4))));
    assert_eq!(acknowledged, 0);
    assert_want("new run", "run_new", 2, &Err(source), Want::Gap(0));
    rt.block_on(journal.observe_batch(&notes("run_g", 1..=3)))
        .unwrap();
    let (acknowledged, source) =
        batch_error(rt.block_on(journal.observe_batch(&notes("run_g", 5..=9))));
    assert_eq!(acknowledged, 0);
    assert_want("existing run", "run_g", 5, &Err(source), Want::Gap(3));
    let reader = journal.reader().unwrap();
    assert!(lines(&reader, "run_new").is_empty());
    assert_eq!(reader.run_status("run_new").unwrap(), None);
    assert_eq!(lines(&reader, "run_g").len(), 3);
    journal.close().unwrap();
}

#[test]
fn an_identical_batch_offered_again_is_accepted() {
    let dir = TempDir::new("batch-retry");
    let journal = open(&dir.db());
    let rt = rt();
    let batch = notes("run_r", 1..=10);
    rt.block_on(journal.observe_batch(&batch)).unwrap();
    let before = journal.stats();
    rt.block_on(journal.observe_batch(&batch)).unwrap();
    let after = journal.stats();
    assert_eq!(after.duplicates - before.duplicates, 10);
    assert_eq!(after.stored, before.stored);
    // Overlapping the stored tail: the known part is a retry, the rest new.
    rt.block_on(journal.observe_batch(&notes("run_r", 8..=15)))
        .unwrap();
    let reader = journal.reader().unwrap();
    let want: Vec<String> = notes("run_r", 1..=15)
        .iter()
        .map(|e| e.line().to_owned())
        .collect();
    assert_eq!(lines(&reader, "run_r"), want);
    journal.close().unwrap();
}

#[test]
fn a_batch_continues_a_run_and_keeps_its_bookkeeping() {
    let dir = TempDir::new("batch-run");
    let journal = open(&dir.db());
    let rt = rt();
    let run = "run_life";
    let started = event(run, 1, 1000, "run.started", "{}");
    rt.block_on(journal.observe(&started)).unwrap();
    rt.block_on(journal.observe(&turn(run, 2, 1))).unwrap();
    let owner = |journal: &SqliteJournal| -> Option<String> {
        let admin = rusqlite::Connection::open(journal.path()).unwrap();
        admin
            .query_row("SELECT host FROM owners WHERE run_id = ?1", [run], |r| {
                r.get(0)
            })
            .ok()
    };
    assert_eq!(owner(&journal).as_deref(), Some(journal.host_id()));
    let rest = vec![
        completed(run, 3, Some((10, 4))),
        note(run, 4, "between turns"),
        turn(run, 5, 2),
        completed(run, 6, Some((1, 2))),
        event(run, 7, 7000, "run.completed", "{}"),
    ];
    rt.block_on(journal.observe_batch(&rest)).unwrap();
    let reader = journal.reader().unwrap();
    let summary = reader.run_status(run).unwrap().unwrap();
    assert_eq!(
        (
            summary.status,
            summary.last_seq,
            summary.started_ts,
            summary.updated_ts
        ),
        (RunStatus::Completed, 7, 1000, 7000)
    );
    assert_eq!(owner(&journal), None, "the terminal removes the owner");
    let totals = reader.totals().unwrap();
    assert_eq!(
        totals[run],
        keel_observers::RunTotals {
            turns: 2,
            input_tokens: 11,
            output_tokens: 6
        }
    );
    assert_eq!(totals, reader.summed_totals().unwrap());
    // Offered again after the run ended: still a retry, counted once.
    rt.block_on(journal.observe_batch(&rest)).unwrap();
    assert_eq!(reader.totals().unwrap()[run], totals[run]);
    journal.close().unwrap();
}

#[test]
fn a_batch_shares_the_grouped_transaction_and_fails_alone() {
    let dir = TempDir::new("batch-group");
    let journal = open(&dir.db());
    let rt = rt();
    let admin = rusqlite::Connection::open(dir.db()).unwrap();
    admin
        .execute_batch(
            "CREATE TRIGGER poison BEFORE INSERT ON runs WHEN NEW.run_id = 'run_poison' \
             BEGIN SELECT RAISE(ABORT, 'injected fault'); END;",
        )
        .unwrap();
    let good = notes("run_good", 1..=5);
    let poisoned = notes("run_poison", 1..=4);
    let single = note("run_single", 1, "s");
    let partial = vec![note("run_x", 1, "x1"), note("run_x", 3, "x3")];
    // Everything queues behind the lock, then goes into one transaction;
    // the poisoned batch takes it down, so each request is retried alone.
    let lock = WriteLock::take(&dir.db());
    let release = lock.release_after(Duration::from_millis(300));
    let before = journal.stats();
    let (a, b, c, d) = rt.block_on(async {
        tokio::join!(
            journal.observe_batch(&good),
            journal.observe_batch(&poisoned),
            journal.observe(&single),
            journal.observe_batch(&partial),
        )
    });
    release.join().unwrap();
    a.unwrap();
    c.unwrap();
    let (acknowledged, source) = batch_error(b);
    assert_eq!(acknowledged, 0, "a failed transaction acknowledges none");
    assert!(matches!(source, ObserverError::Failed(_)), "{source:?}");
    let (acknowledged, source) = batch_error(d);
    assert_eq!(acknowledged, 1);
    assert_want("partial", "run_x", 3, &Err(source), Want::Gap(1));
    let after = journal.stats();
    assert_eq!(after.failed - before.failed, 4);
    let reader = journal.reader().unwrap();
    assert_eq!(lines(&reader, "run_good").len(), 5);
    assert!(lines(&reader, "run_poison").is_empty());
    assert_eq!(lines(&reader, "run_x").len(), 1);
    // Without the fault, the same batch goes through.
    admin.execute_batch("DROP TRIGGER poison").unwrap();
    rt.block_on(journal.observe_batch(&poisoned)).unwrap();
    assert_eq!(lines(&reader, "run_poison").len(), 4);
    journal.close().unwrap();
}

#[test]
fn a_cancelled_batch_is_committed_whole_or_not_at_all() {
    let dir = TempDir::new("batch-cancel");
    let journal = open(&dir.db());
    let batch = notes("run_c", 1..=30);
    let lock = WriteLock::take(&dir.db());
    // Queued, then dropped before the answer (a pipeline deadline).
    assert!(journal.observe_batch(&batch).now_or_never().is_none());
    let release = lock.release_after(Duration::from_millis(100));
    journal.close().unwrap();
    release.join().unwrap();
    let reader = JournalReader::open(dir.db()).unwrap();
    assert_eq!(lines(&reader, "run_c").len(), 30);
    let journal = open(&dir.db());
    rt().block_on(journal.observe_batch(&batch)).unwrap();
    assert_eq!(journal.stats().duplicates, 30);
    journal.close().unwrap();
}

/// Requests offered while the writer is blocked are grouped into
/// transactions of at most `max_batch` events, and a transaction closes
/// as soon as its lines reach `max_batch_bytes`: with the bound exactly
/// at 4 events, or exactly at 3 events' bytes, the largest transaction
/// holds exactly that many.
#[test]
fn a_grouped_transaction_stops_exactly_at_its_bounds() {
    // Twelve runs whose first events are all the same length.
    let events: Vec<Arc<Event>> = (b'a'..=b'l')
        .map(|c| note(&format!("run_{}", c as char), 1, "x"))
        .collect();
    let size = events[0].line().len();
    assert!(events.iter().all(|e| e.line().len() == size));
    for (bound, max_batch, max_batch_bytes, largest) in [
        ("max_batch", 4, 1 << 20, 4),
        ("max_batch_bytes", 512, 3 * size, 3),
    ] {
        let dir = TempDir::new("group");
        let mut config = JournalConfig::default();
        config.max_batch = max_batch;
        config.max_batch_bytes = max_batch_bytes;
        let journal = SqliteJournal::open(dir.db(), config).unwrap();
        let release = WriteLock::take(&dir.db()).release_after(Duration::from_millis(300));
        let answers = rt().block_on(futures_util::future::join_all(
            events.iter().map(|e| journal.observe(e)),
        ));
        release.join().unwrap();
        assert!(answers.iter().all(Result::is_ok), "{bound}: {answers:?}");
        let stats = journal.stats();
        assert_eq!(stats.stored, 12, "{bound}: {stats:?}");
        assert_eq!(stats.largest_batch, largest, "{bound}: {stats:?}");
        journal.close().unwrap();
    }
}
