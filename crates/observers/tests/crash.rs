#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Crash consistency of the SQLite journal.
//!
//! `crash_consistency` re-executes this test binary as a child that runs
//! only `crash_child` (a normal test that returns at once unless
//! `KEEL_CRASH_CHILD=<db path>:<seed>` is set). The child writes several
//! runs concurrently through the journal, in `observe_batch` calls of
//! seed-derived sizes (1..=64) mixed with single `observe` calls, and
//! prints `ack <run> <seq>` for each event only after the answer that
//! acknowledges it (for a refused batch, only its acknowledged prefix). The parent kills it with SIGKILL after a seed-derived
//! delay, then checks the file: every acknowledged event is present, each
//! run is a contiguous prefix from seq 1 of exactly what the child wrote
//! (byte for byte, every line canonical, no torn row), the database passes
//! `integrity_check`, it reopens, and a second writer continues at
//! `last_seq + 1`.
//!
//! `KEEL_CRASH_KILLS` sets the number of kills (default 12, and 200 under
//! `CI=true`; each uses a different seed, from `KEEL_CRASH_SEED`, default
//! 1).
#![cfg(feature = "sqlite")]

#[path = "support/crash_script.rs"]
mod crash_script;

use crash_script::{Killed, env_u64, parse_run_name, run_and_kill, script, write_scripts};
use keel_eventlog::Event;
use keel_observers::{JournalConfig, JournalReader, RequiredObserver, RunStatus, SqliteJournal};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

const CHILD_ENV: &str = "KEEL_CRASH_CHILD";

// --------------------------------------------------------------- the child

/// The child: writes `TASKS` runs at a time until killed (or done).
#[test]
fn crash_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (db, seed) = spec.rsplit_once('|').unwrap();
    let seed: u64 = seed.parse().unwrap();
    let journal = Arc::new(SqliteJournal::open(db, JournalConfig::default()).unwrap());
    write_scripts(journal, seed);
}

// -------------------------------------------------------------- the parent

struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let dir = std::env::temp_dir().join(format!("keel-crash-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("crash test: keeping {} for inspection", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// Everything the crash must not have broken.
fn verify(db: &Path, seed: u64, killed: &Killed) -> (usize, u64) {
    let ctx = format!("seed {seed} ({})", db.display());
    if !db.exists() {
        assert!(killed.acks.is_empty(), "{ctx}: acks but no database");
        return (0, 0);
    }
    // Reopening succeeds (this runs WAL recovery).
    let journal = SqliteJournal::open(db, JournalConfig::default())
        .unwrap_or_else(|e| panic!("{ctx}: reopen failed: {e}"));
    let admin = rusqlite::Connection::open(db).unwrap();
    let check: String = admin
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok", "{ctx}: integrity_check");
    let reader = JournalReader::open(db).unwrap();
    let runs = reader.runs().unwrap();
    let mut last: HashMap<String, u64> = HashMap::new();
    let mut stored_events = 0u64;
    let mut scripts = HashMap::new();
    for summary in &runs {
        let (s, task, k) = parse_run_name(summary.run_id.as_str());
        assert_eq!(s, seed, "{ctx}: foreign run {}", summary.run_id);
        let expected = script(seed, task, k);
        let lines = reader
            .events_after(summary.run_id.as_str(), 0, usize::MAX)
            .unwrap();
        // A contiguous prefix from seq 1 of what the child wrote, byte for
        // byte, each line canonical (decode re-encodes and compares).
        assert_eq!(
            lines.len() as u64,
            summary.last_seq,
            "{ctx}: {} count",
            summary.run_id
        );
        assert!(
            lines.len() <= expected.len(),
            "{ctx}: {} too long",
            summary.run_id
        );
        for (i, line) in lines.iter().enumerate() {
            let event = Event::decode(line).unwrap_or_else(|e| {
                panic!("{ctx}: {} seq {}: torn row: {e}", summary.run_id, i + 1)
            });
            assert_eq!(
                event.seq(),
                i as u64 + 1,
                "{ctx}: {} not contiguous",
                summary.run_id
            );
            assert_eq!(event.run_id(), &summary.run_id);
            assert_eq!(
                line,
                expected[i].line(),
                "{ctx}: {} seq {} bytes",
                summary.run_id,
                i + 1
            );
        }
        let ended = lines.len() == expected.len();
        let want_status = if ended {
            match expected.last().map(|e| e.kind().to_string()).as_deref() {
                Some("run.completed") => RunStatus::Completed,
                Some("run.failed") => RunStatus::Failed,
                _ => RunStatus::Cancelled,
            }
        } else {
            RunStatus::Running
        };
        assert_eq!(
            summary.status, want_status,
            "{ctx}: {} status",
            summary.run_id
        );
        assert_eq!(summary.started_ts, expected[0].ts());
        assert_eq!(summary.updated_ts, expected[lines.len() - 1].ts());
        stored_events += summary.last_seq;
        last.insert(summary.run_id.to_string(), summary.last_seq);
        scripts.insert(summary.run_id.clone(), expected);
    }
    // No row outside what `runs` accounts for, and the copied columns agree
    // with the line.
    let mut stmt = admin
        .prepare("SELECT run_id, seq, kind, ts, line FROM events")
        .unwrap();
    let rows = stmt
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, i64>(3)?,
                r.get::<_, String>(4)?,
            ))
        })
        .unwrap();
    let mut rows_seen = 0u64;
    for row in rows {
        let (run, seq, kind, ts, line) = row.unwrap();
        let event = Event::decode(&line).unwrap();
        assert!(
            last.get(&run).is_some_and(|l| (seq as u64) <= *l),
            "{ctx}: row {run} {seq} beyond runs.last_seq"
        );
        assert_eq!((kind, ts as u64), (event.kind().to_string(), event.ts()));
        rows_seen += 1;
    }
    assert_eq!(rows_seen, stored_events, "{ctx}: events rows vs runs");
    drop(stmt);
    drop(admin);
    // Every acknowledged event survived.
    for (run, seq) in &killed.acks {
        let stored = last.get(run).copied().unwrap_or(0);
        assert!(
            *seq <= stored,
            "{ctx}: acked {run} seq {seq} lost (stored up to {stored})"
        );
    }
    // A second writer continues each unfinished run at last_seq + 1.
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    for (run, expected) in &scripts {
        let stored = last[run.as_str()] as usize;
        if stored < expected.len() {
            rt.block_on(journal.observe(&expected[stored]))
                .unwrap_or_else(|e| panic!("{ctx}: {run} continue at {}: {e}", stored + 1));
            if stored + 2 < expected.len() {
                let gap = rt.block_on(journal.observe(&expected[stored + 2]));
                assert!(gap.is_err(), "{ctx}: {run}: a gap was accepted");
            }
        }
        rt.block_on(journal.observe(&expected[stored.max(1) - 1]))
            .unwrap_or_else(|e| panic!("{ctx}: {run} retry of a stored event: {e}"));
    }
    journal.close().unwrap();
    let reader = JournalReader::open(db).unwrap();
    for (run, expected) in &scripts {
        let want = (last[run.as_str()] as usize + 1).min(expected.len()) as u64;
        assert_eq!(
            reader.run_status(run.as_str()).unwrap().unwrap().last_seq,
            want
        );
    }
    (runs.len(), stored_events)
}

#[test]
fn crash_consistency() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    // CI runs 200 kills (about 45 s); a local run 12.
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    let kills = env_u64("KEEL_CRASH_KILLS", if ci { 200 } else { 12 });
    let first_seed = env_u64("KEEL_CRASH_SEED", 1);
    let dir = TempDir::new();
    let start = Instant::now();
    let (mut acked, mut stored, mut finished, mut runs, mut early) = (0, 0, 0, 0, 0);
    for i in 0..kills {
        let seed = first_seed + i;
        let db = dir.0.join(format!("crash-{seed}.db"));
        let killed = run_and_kill(CHILD_ENV, &db.display().to_string(), seed);
        let (r, s) = verify(&db, seed, &killed);
        acked += killed.acks.len();
        stored += s;
        runs += r;
        finished += usize::from(killed.finished);
        early += usize::from(killed.early);
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
        }
    }
    eprintln!(
        "crash test: {kills} kills (seeds {first_seed}..={}, {early} timed from spawn) in {:.1} s: {acked} acks, {stored} events in {runs} runs stored and verified, {finished} children finished before their kill",
        (first_seed + kills).saturating_sub(1),
        start.elapsed().as_secs_f64()
    );
    assert!(
        finished < kills as usize || kills == 0,
        "no child was ever killed mid-write"
    );
}
