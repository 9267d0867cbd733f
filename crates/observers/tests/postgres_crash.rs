#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Crash consistency of the PostgreSQL journal, and recovery of the
//! killed host's runs.
//!
//! As `crash.rs` for SQLite: `pg_crash_consistency` re-executes this test
//! binary as a child that runs only `crash_child` (which returns at once
//! unless `KEEL_PG_CRASH_CHILD=<url>|<seed>` is set). The child writes
//! several runs concurrently through a `PgJournal`, in `observe_batch`
//! calls of seed-derived sizes mixed with single `observe` calls, printing
//! `ack <run> <seq>` only after the answer that acknowledges it; the
//! parent SIGKILLs it after a seed-derived delay. Then, on a database of
//! its own per kill: every acknowledged event is stored; each run is a
//! contiguous prefix from seq 1 of exactly what the child wrote, byte for
//! byte; `runs` agrees with `events`; a new host continues each unfinished
//! run at `last_seq + 1` (a gap refused, a retry accepted); and once the
//! server has ended the killed session (its advisory lock is free), one
//! `recover_abandoned` closes every unfinished run, and nothing is left
//! running.
//!
//! `KEEL_CRASH_KILLS` sets the number of kills (default 6, 16 under
//! `CI=true`), from seed `KEEL_CRASH_SEED` (default 1).
#![cfg(feature = "postgres")]

#[path = "support/crash_script.rs"]
mod crash_script;

use crash_script::{Killed, env_u64, parse_run_name, run_and_kill, script, write_scripts};
use keel_eventlog::Event;
use keel_observers::postgres::{PgJournal, PgReader, PgUrl};
use keel_observers::{JournalConfig, RequiredObserver, RunStatus, RunSummary, SkipReason};
use keel_testkit::pg::TempPostgres;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

const CHILD_ENV: &str = "KEEL_PG_CRASH_CHILD";

/// The child: writes `TASKS` runs at a time until killed (or done).
#[test]
fn crash_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (url, seed) = spec.rsplit_once('|').unwrap();
    let seed: u64 = seed.parse().unwrap();
    let url = PgUrl::parse(url).unwrap();
    let journal = Arc::new(PgJournal::open(&url, JournalConfig::default()).unwrap());
    write_scripts(journal, seed);
}

/// What a run must look like after the crash; returns the scripts of the
/// stored runs and their last seqs.
fn check_run(
    ctx: &str,
    seed: u64,
    reader: &PgReader,
    summary: &RunSummary,
) -> (Vec<Arc<Event>>, u64) {
    let run = summary.run_id.as_str();
    let (s, task, k) = parse_run_name(run);
    assert_eq!(s, seed, "{ctx}: foreign run {run}");
    let expected = script(seed, task, k);
    let lines = reader.events_after(run, 0, usize::MAX).unwrap();
    assert_eq!(lines.len() as u64, summary.last_seq, "{ctx}: {run} count");
    assert!(lines.len() <= expected.len(), "{ctx}: {run} too long");
    for (i, line) in lines.iter().enumerate() {
        let event = Event::decode(line)
            .unwrap_or_else(|e| panic!("{ctx}: {run} seq {}: torn row: {e}", i + 1));
        assert_eq!(event.seq(), i as u64 + 1, "{ctx}: {run} not contiguous");
        assert_eq!(line, expected[i].line(), "{ctx}: {run} seq {} bytes", i + 1);
    }
    let want_status = if lines.len() == expected.len() {
        match expected.last().map(|e| e.kind().to_string()).as_deref() {
            Some("run.completed") => RunStatus::Completed,
            Some("run.failed") => RunStatus::Failed,
            _ => RunStatus::Cancelled,
        }
    } else {
        RunStatus::Running
    };
    assert_eq!(summary.status, want_status, "{ctx}: {run} status");
    assert_eq!(summary.started_ts, expected[0].ts());
    assert_eq!(summary.updated_ts, expected[lines.len() - 1].ts());
    (expected, summary.last_seq)
}

/// Everything the crash must not have broken; returns (runs, events).
fn verify(url: &PgUrl, text: &str, seed: u64, killed: &Killed) -> (usize, u64) {
    let ctx = format!("seed {seed}");
    let Ok(reader) = PgReader::open(url) else {
        // Killed before the schema was created.
        assert!(killed.acks.is_empty(), "{ctx}: acks but no journal");
        return (0, 0);
    };
    let journal = PgJournal::open(url, JournalConfig::default())
        .unwrap_or_else(|e| panic!("{ctx}: reopen failed: {e}"));
    let runs = reader.runs().unwrap();
    let mut last: HashMap<String, u64> = HashMap::new();
    let mut scripts = HashMap::new();
    for summary in &runs {
        let (expected, stored) = check_run(&ctx, seed, &reader, summary);
        last.insert(summary.run_id.to_string(), stored);
        scripts.insert(summary.run_id.to_string(), expected);
    }
    let stored_events: u64 = last.values().sum();
    // No row beyond what `runs` accounts for.
    let mut admin = postgres::Client::connect(text, postgres::NoTls).unwrap();
    let rows: i64 = admin
        .query_one("SELECT count(*) FROM events", &[])
        .unwrap()
        .get(0);
    assert_eq!(rows as u64, stored_events, "{ctx}: events rows vs runs");
    for (run, seq) in &killed.acks {
        let stored = last.get(run).copied().unwrap_or(0);
        assert!(
            *seq <= stored,
            "{ctx}: acked {run} seq {seq} lost (stored up to {stored})"
        );
    }
    continue_runs(&ctx, &journal, &scripts, &mut last);
    recover_all(&ctx, &journal, &reader, &scripts, &last);
    drop(reader);
    journal.close().unwrap();
    (runs.len(), stored_events)
}

/// A new host continues each unfinished run at `last_seq + 1` (a gap
/// refused), and a retry of a stored event is accepted.
fn continue_runs(
    ctx: &str,
    journal: &PgJournal,
    scripts: &HashMap<String, Vec<Arc<Event>>>,
    last: &mut HashMap<String, u64>,
) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    for (run, expected) in scripts {
        let stored = last[run.as_str()] as usize;
        if stored < expected.len() {
            rt.block_on(journal.observe(&expected[stored]))
                .unwrap_or_else(|e| panic!("{ctx}: {run} continue at {}: {e}", stored + 1));
            last.insert(run.clone(), stored as u64 + 1);
            if stored + 2 < expected.len() {
                let gap = rt.block_on(journal.observe(&expected[stored + 2]));
                assert!(gap.is_err(), "{ctx}: {run}: a gap was accepted");
            }
        }
        rt.block_on(journal.observe(&expected[stored.max(1) - 1]))
            .unwrap_or_else(|e| panic!("{ctx}: {run} retry of a stored event: {e}"));
    }
}

/// Once the killed session is gone, one recovery closes every unfinished
/// run (its terminals right after the stored prefix), and nothing is left
/// running.
fn recover_all(
    ctx: &str,
    journal: &PgJournal,
    reader: &PgReader,
    scripts: &HashMap<String, Vec<Arc<Event>>>,
    last: &HashMap<String, u64>,
) {
    let unfinished: Vec<&String> = scripts
        .iter()
        .filter(|(run, expected)| (last[run.as_str()] as usize) < expected.len())
        .map(|(run, _)| run)
        .collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut recovered = Vec::new();
    loop {
        let report = journal.recover_abandoned().unwrap();
        recovered.extend(report.recovered.iter().map(|r| r.run_id.to_string()));
        let waiting = report
            .skipped
            .iter()
            .any(|s| matches!(s.reason, SkipReason::OwnedByLiveHost { .. }));
        assert!(
            report.needs_attention().next().is_none(),
            "{ctx}: {:?}",
            report.skipped
        );
        if !waiting {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{ctx}: the killed host still looks alive"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    recovered.sort();
    let mut want: Vec<String> = unfinished.into_iter().cloned().collect();
    want.sort();
    assert_eq!(
        recovered, want,
        "{ctx}: every unfinished run recovered once"
    );
    for run in &want {
        let summary = reader.run_status(run).unwrap().unwrap();
        assert_eq!(summary.status, RunStatus::Failed, "{ctx}: {run}");
        assert!(
            summary.last_seq > last[run.as_str()],
            "{ctx}: {run} terminals appended"
        );
    }
    let left = reader
        .runs()
        .unwrap()
        .into_iter()
        .filter(|r| r.status == RunStatus::Running)
        .count();
    assert_eq!(left, 0, "{ctx}: runs left running");
}

#[test]
fn pg_crash_consistency() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let Some(pg) = TempPostgres::start() else {
        return;
    };
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    let kills = env_u64("KEEL_CRASH_KILLS", if ci { 16 } else { 6 });
    let first_seed = env_u64("KEEL_CRASH_SEED", 1);
    let start = Instant::now();
    let (mut acked, mut stored, mut finished, mut runs) = (0, 0, 0, 0);
    for i in 0..kills {
        let seed = first_seed + i;
        let text = pg.create_database(&format!("crash{seed}"));
        let killed = run_and_kill(CHILD_ENV, &text, seed);
        let (r, s) = verify(&PgUrl::parse(&text).unwrap(), &text, seed, &killed);
        acked += killed.acks.len();
        stored += s;
        runs += r;
        finished += usize::from(killed.finished);
    }
    eprintln!(
        "pg crash test: {kills} kills in {:.1} s: {acked} acks, {stored} events in {runs} runs stored and verified, {finished} children finished before their kill",
        start.elapsed().as_secs_f64()
    );
    assert!(
        finished < kills as usize || kills == 0,
        "no child was ever killed mid-write"
    );
}
