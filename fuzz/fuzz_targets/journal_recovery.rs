//! Recovery of abandoned runs from the SQLite journal
//! (`SqliteJournal::recover_abandoned`). From the input: a journal (on
//! tmpfs when there is one) holding 1–3 runs, each a lifecycle-valid
//! prefix picked from the shared vocabulary (`common/events.rs`) and
//! journaled by a host that then went away, and optionally one run damaged
//! behind the journal's back through SQLite (a broken line, a line that
//! breaks the lifecycle, a missing row, a `runs` row that disagrees, an
//! owner that is not a host id). Then a second host recovers, twice.
//!
//! Never a panic; exactly the runs that were open and undamaged are
//! recovered, in the journal's run order, each keeping its stored prefix
//! byte for byte, followed by the terminals `recovery::terminals` gives
//! for its log, journaled as reported, the last a `run.failed` whose cause
//! is `host_lost`, the run now `failed` and without an owner; ended runs
//! are untouched; damaged open runs are skipped, reported as needing
//! attention with the reason the damage calls for, and untouched (damaged
//! ended runs are not looked at); a second recovery recovers nothing,
//! reports the same skipped runs and changes no row.
#![no_main]

mod common;

use common::events::lifecycle_valid;
use keel_eventlog::{Payload, recovery};
use keel_observers::{
    JournalConfig, RecoveryReport, RequiredObserver, SkipReason, SqliteJournal, Synchronous,
};
use libfuzzer_sys::fuzz_target;
use rusqlite::{Connection, params};
use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Wake, Waker};

const RUN_IDS: [&str; 3] = ["run_a", "run_b", "run_c"];

/// One run as generated: its id, whether it ended, and what recovery must
/// append (from its own log).
struct Generated {
    run_id: &'static str,
    ended: bool,
    terminals: Vec<Payload>,
}

/// How one run is damaged.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Damage {
    /// A stored line that is not JSON.
    BrokenLine { seq: u64 },
    /// Seq 1's line replaced by a `turn.started` (rule lifecycle.run_first).
    LifecycleLine,
    /// The row of a seq deleted, `runs.last_seq` left as it was.
    MissingRow { seq: u64 },
    /// `runs.last_seq` one past the stored events.
    LastSeqAhead,
    /// An ended run marked `running` again.
    StatusRunning,
    /// `owners.host` set to something no host id looks like.
    BadOwner,
}

impl Damage {
    /// The damage `byte` picks for a run of `events` stored events.
    fn pick(byte: u8, events: u64, ended: bool) -> Damage {
        let seq = u64::from(byte >> 3) % events.max(1) + 1;
        match byte % 6 {
            0 => Damage::BrokenLine { seq },
            1 => Damage::LifecycleLine,
            2 => Damage::MissingRow { seq },
            3 => Damage::LastSeqAhead,
            // `running` is no damage to a run that is running.
            4 if ended => Damage::StatusRunning,
            4 => Damage::LastSeqAhead,
            _ => Damage::BadOwner,
        }
    }

    /// Whether recovery sees the damaged run as running.
    fn running_after(self, ended: bool) -> bool {
        self == Damage::StatusRunning || !ended
    }

    fn apply(self, db: &Connection, run_id: &str) {
        let sql = match self {
            Damage::BrokenLine { seq } => db.execute(
                "UPDATE events SET line = 'not json {' WHERE run_id = ?1 AND seq = ?2",
                params![run_id, seq as i64],
            ),
            Damage::LifecycleLine => db.execute(
                "UPDATE events SET line = ?2, kind = 'turn.started' WHERE run_id = ?1 AND seq = 1",
                params![
                    run_id,
                    format!(
                        r#"{{"kind":"turn.started","payload":{{"turn":1}},"run_id":"{run_id}","seq":1,"ts":1}}"#
                    )
                ],
            ),
            Damage::MissingRow { seq } => db.execute(
                "DELETE FROM events WHERE run_id = ?1 AND seq = ?2",
                params![run_id, seq as i64],
            ),
            Damage::LastSeqAhead => db.execute(
                "UPDATE runs SET last_seq = last_seq + 1 WHERE run_id = ?1",
                [run_id],
            ),
            Damage::StatusRunning => db.execute(
                "UPDATE runs SET status = 'running' WHERE run_id = ?1",
                [run_id],
            ),
            Damage::BadOwner => db.execute(
                "INSERT OR REPLACE INTO owners (run_id, host) VALUES (?1, '../x')",
                [run_id],
            ),
        };
        sql.unwrap_or_else(|e| panic!("damaging {run_id} ({self:?}): {e}"));
    }

    /// Whether `reason` is what this damage calls for.
    fn explains(self, reason: &SkipReason) -> bool {
        match self {
            Damage::BadOwner => matches!(reason, SkipReason::InvalidOwner),
            _ => matches!(reason, SkipReason::Corrupt { .. }),
        }
    }
}

/// A `runs` row.
#[derive(Debug, Clone, PartialEq)]
struct RunRow {
    last_seq: i64,
    status: String,
    started_ts: i64,
    updated_ts: i64,
    turns: i64,
    input_tokens: i64,
    output_tokens: i64,
}

/// Every row of one run.
#[derive(Debug, PartialEq)]
struct RunRows<'a> {
    run: Option<&'a RunRow>,
    events: Option<&'a BTreeMap<i64, String>>,
    owner: Option<&'a String>,
}

/// Every row of the journal's tables, to compare before and after.
#[derive(Debug, Clone, PartialEq)]
struct Dump {
    runs: BTreeMap<String, RunRow>,
    /// run id → its stored lines by seq.
    events: BTreeMap<String, BTreeMap<i64, String>>,
    /// run id → owner.
    owners: BTreeMap<String, String>,
}

impl Dump {
    fn read(path: &Path) -> Dump {
        let db = Connection::open(path).expect("the journal opens");
        let runs = rows(
            &db,
            "SELECT run_id, last_seq, status, started_ts, updated_ts, turns, input_tokens, \
             output_tokens FROM runs",
            |r| {
                Ok(RunRow {
                    last_seq: r.get(1)?,
                    status: r.get(2)?,
                    started_ts: r.get(3)?,
                    updated_ts: r.get(4)?,
                    turns: r.get(5)?,
                    input_tokens: r.get(6)?,
                    output_tokens: r.get(7)?,
                })
            },
        );
        let mut events: BTreeMap<String, BTreeMap<i64, String>> = BTreeMap::new();
        for id in rows(&db, "SELECT DISTINCT run_id FROM events", |_| Ok(())).into_keys() {
            let sql = format!("SELECT seq, line FROM events WHERE run_id = '{id}'");
            let lines = rows(&db, &sql, |r| r.get(1));
            let lines = lines
                .into_iter()
                .map(|(seq, line)| (seq.parse().unwrap_or(-1), line));
            events.insert(id, lines.collect());
        }
        let owners = rows(&db, "SELECT run_id, host FROM owners", |r| r.get(1));
        Dump {
            runs,
            events,
            owners,
        }
    }

    fn rows(&self, id: &str) -> RunRows<'_> {
        RunRows {
            run: self.runs.get(id),
            events: self.events.get(id),
            owner: self.owners.get(id),
        }
    }
}

/// The rows of `sql`, keyed by their first column as text (unique in
/// every query here).
fn rows<T>(
    db: &Connection,
    sql: &str,
    row: impl Fn(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
) -> BTreeMap<String, T> {
    let mut stmt = db.prepare(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    let key = |r: &rusqlite::Row<'_>| match r.get::<_, rusqlite::types::Value>(0)? {
        rusqlite::types::Value::Integer(i) => Ok::<_, rusqlite::Error>(i.to_string()),
        rusqlite::types::Value::Text(t) => Ok(t),
        other => Ok(format!("{other:?}")),
    };
    let found = stmt
        .query_map([], |r| Ok((key(r)?, row(r)?)))
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    found
        .map(|r| r.unwrap_or_else(|e| panic!("{sql}: {e}")))
        .collect()
}

/// A fresh directory per input, removed afterwards.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Scratch {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let shm = Path::new("/dev/shm");
        let base = if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = base.join(format!("keel-fuzz-journal-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct ThreadWaker(std::thread::Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Drives `future` on this thread (the journal needs no runtime).
fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park();
    }
}

fn config() -> JournalConfig {
    let mut config = JournalConfig::default();
    config.synchronous = Synchronous::Normal;
    config
}

/// Journals the runs of `data` through a host that then closes.
fn write_runs(path: &Path, data: &[u8]) -> Vec<Generated> {
    let journal = SqliteJournal::open(path, config()).expect("a new journal opens");
    let count = usize::from(data.first().copied().unwrap_or(0) % 3) + 1;
    let mut rest = data.get(1..).unwrap_or_default();
    let mut runs = Vec::new();
    for run_id in &RUN_IDS[..count] {
        let Some((&len, tail)) = rest.split_first() else {
            break;
        };
        let take = (usize::from(len) * 2).min(tail.len());
        let valid = lifecycle_valid(run_id, &tail[..take], |_, _| true);
        rest = &tail[take..];
        if valid.events.is_empty() {
            continue;
        }
        block_on(journal.observe_batch(&valid.events))
            .unwrap_or_else(|e| panic!("journaling {run_id}: {e:?}"));
        runs.push(Generated {
            run_id,
            ended: valid.log.run_ended(),
            terminals: recovery::terminals(&valid.log),
        });
    }
    journal.close().expect("the writer closes");
    runs
}

fn check_recovered(report: &RecoveryReport, run: &Generated, before: &Dump, after: &Dump) {
    let Some(got) = report
        .recovered
        .iter()
        .find(|r| r.run_id.as_str() == run.run_id)
    else {
        panic!(
            "{} was open and undamaged but not recovered: {report:?}",
            run.run_id
        );
    };
    let kept = &before.events[run.run_id];
    let stored = &after.events[run.run_id];
    for (seq, line) in kept {
        assert_eq!(
            stored.get(seq),
            Some(line),
            "{} seq {seq} changed",
            run.run_id
        );
    }
    assert_eq!(
        got.terminals.len(),
        run.terminals.len(),
        "{}: terminals",
        run.run_id
    );
    assert_eq!(
        stored.len(),
        kept.len() + run.terminals.len(),
        "{}: rows",
        run.run_id
    );
    for (i, (event, want)) in got.terminals.iter().zip(&run.terminals).enumerate() {
        let seq = (kept.len() + i + 1) as i64;
        assert_eq!(event.seq(), seq as u64, "terminals continue the prefix");
        assert_eq!(
            stored.get(&seq).map(String::as_str),
            Some(event.line()),
            "journaled as reported"
        );
        assert_eq!(
            event.payload().ok().as_ref(),
            Some(want),
            "the terminal recovery::terminals gives"
        );
    }
    let last = got.terminals.last().map(|e| e.payload());
    let Some(Ok(Payload::RunFailed(failed))) = last else {
        panic!("{} does not end with run.failed: {last:?}", run.run_id);
    };
    let cause = failed.cause.as_ref().and_then(|c| c.kind.as_deref());
    assert_eq!(cause, Some(recovery::HOST_LOST));
    let row = &after.runs[run.run_id];
    assert_eq!(row.status, "failed", "{}: {row:?}", run.run_id);
    assert_eq!(row.last_seq, stored.len() as i64, "{}: {row:?}", run.run_id);
    assert!(
        !after.owners.contains_key(run.run_id),
        "an ended run keeps an owner"
    );
}

fuzz_target!(|data: &[u8]| {
    let Some((&damage_byte, data)) = data.split_first() else {
        return;
    };
    let scratch = Scratch::new();
    let path = scratch.0.join("journal.db");
    let runs = write_runs(&path, data);
    // The damaged run, if any: bit 7 off, then the run's index.
    let damaged = (damage_byte & 0x80 == 0)
        .then(|| usize::from(damage_byte & 3))
        .filter(|&i| i < runs.len())
        .map(|i| {
            let before = Dump::read(&path);
            let events = before.events[runs[i].run_id].len() as u64;
            let damage = Damage::pick(damage_byte.rotate_right(2), events, runs[i].ended);
            let db = Connection::open(&path).expect("the journal opens");
            damage.apply(&db, runs[i].run_id);
            (i, damage)
        });
    let before = Dump::read(&path);
    let journal = SqliteJournal::open(&path, config()).expect("the journal reopens");
    let first = journal
        .recover_abandoned()
        .expect("recovery works on a sound store");
    let after = Dump::read(&path);
    for (i, run) in runs.iter().enumerate() {
        let damage = damaged.filter(|(d, _)| *d == i).map(|(_, d)| d);
        let skipped = first.skipped.iter().find(|s| s.run_id == run.run_id);
        match damage {
            None if !run.ended => check_recovered(&first, run, &before, &after),
            None => {
                assert!(skipped.is_none(), "an ended run was looked at: {skipped:?}");
                assert_eq!(
                    before.rows(run.run_id),
                    after.rows(run.run_id),
                    "ended run changed"
                );
            }
            Some(damage) => {
                assert_eq!(
                    before.rows(run.run_id),
                    after.rows(run.run_id),
                    "damaged run changed"
                );
                assert!(
                    !first
                        .recovered
                        .iter()
                        .any(|r| r.run_id.as_str() == run.run_id)
                );
                if damage.running_after(run.ended) {
                    let skipped =
                        skipped.unwrap_or_else(|| panic!("{damage:?} not reported: {first:?}"));
                    assert!(
                        damage.explains(&skipped.reason),
                        "{damage:?} reported as {}",
                        skipped.reason
                    );
                    assert!(first.needs_attention().any(|s| s.run_id == run.run_id));
                } else {
                    assert!(skipped.is_none(), "an ended run was looked at: {skipped:?}");
                }
            }
        }
    }
    let order: Vec<&str> = first.recovered.iter().map(|r| r.run_id.as_str()).collect();
    let mut sorted = order.clone();
    sorted.sort_by_key(|id| (before.runs[*id].started_ts, id.to_string()));
    assert_eq!(order, sorted, "recovered in the journal's run order");
    assert_eq!(
        first.skipped.len(),
        first.needs_attention().count(),
        "{first:?}"
    );
    let second = journal.recover_abandoned().expect("recovery works twice");
    assert!(
        second.recovered.is_empty(),
        "a second recovery recovered {:?}",
        second.recovered
    );
    assert_eq!(
        second.skipped, first.skipped,
        "the second recovery skips the same runs"
    );
    journal.close().expect("the writer closes");
    assert_eq!(Dump::read(&path), after, "the second recovery changed rows");
});
