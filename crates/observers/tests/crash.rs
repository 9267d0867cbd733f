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

use keel_eventlog::{
    Clock, Event, Extra, LogConfig, ModelCompleted, ModelStarted, Payload, RunCancelled,
    RunCompleted, RunFailed, RunLog, RunStarted, TextDelta, TurnRef,
};
use keel_message::{ModelName, OperationId, RunId};
use keel_observers::{JournalConfig, JournalReader, RequiredObserver, RunStatus, SqliteJournal};
use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const CHILD_ENV: &str = "KEEL_CRASH_CHILD";
const TASKS: u64 = 4;
const RUNS_PER_TASK: u64 = 60;

// ------------------------------------------------------------- the script

/// splitmix64: a tiny deterministic PRNG.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A clock that advances 250 µs per reading: the script is deterministic.
#[derive(Debug)]
struct StepClock(AtomicU64);

impl Clock for StepClock {
    fn now_micros(&self) -> u64 {
        self.0.fetch_add(250, Ordering::Relaxed)
    }
}

fn run_name(seed: u64, task: u64, k: u64) -> String {
    format!("run_s{seed}_t{task}_r{k}")
}

fn parse_run_name(name: &str) -> (u64, u64, u64) {
    let rest = name.strip_prefix("run_s").unwrap();
    let (seed, rest) = rest.split_once("_t").unwrap();
    let (task, k) = rest.split_once("_r").unwrap();
    (
        seed.parse().unwrap(),
        task.parse().unwrap(),
        k.parse().unwrap(),
    )
}

/// The events of run `k` of `task` under `seed`, committed through a real
/// `RunLog`: the same on every call, so the parent can rebuild exactly
/// what the child wrote.
fn script(seed: u64, task: u64, k: u64) -> Vec<Arc<Event>> {
    let mut rng = Rng::new(seed.wrapping_mul(1_000_003) ^ (task << 32) ^ k);
    let run = RunId::parse(&run_name(seed, task, k)).unwrap();
    let clock = Arc::new(StepClock(AtomicU64::new(
        1_767_225_600_000_000 + k * 1_000_000,
    )));
    let log = RunLog::new(run, LogConfig::default(), clock).unwrap();
    let model = ModelName::parse("scripted-1").unwrap();
    let mut events = Vec::new();
    let mut commit = |p: Payload| events.push(log.commit(&p).unwrap());
    commit(Payload::RunStarted(RunStarted {
        model: Some(model.clone()),
        chat: None,
        extra: Extra::new(),
        continues: None,
        forked_from: None,
        parent: None,
    }));
    let turns = 1 + rng.below(3);
    for turn in 1..=turns {
        let op = OperationId::parse(&format!("op_{k}_{turn}")).unwrap();
        commit(Payload::TurnStarted(TurnRef {
            turn,
            extra: Extra::new(),
        }));
        commit(Payload::ModelStarted(ModelStarted {
            turn,
            operation_id: op.clone(),
            model: model.clone(),
            attempt: 1,
            purpose: None,
            extra: Extra::new(),
        }));
        for _ in 0..rng.below(12) {
            // Mostly short deltas, some spanning several pages.
            let len = if rng.below(10) == 0 {
                2_000 + rng.below(14_000)
            } else {
                1 + rng.below(60)
            };
            let text: String = (0..len)
                .map(|_| char::from(b" abcdefghijklmnopqrstuvwxyz.,\"\\\n"[rng.below(32) as usize]))
                .collect();
            commit(Payload::TextDelta(TextDelta {
                turn,
                operation_id: op.clone(),
                text,
                extra: Extra::new(),
            }));
        }
        commit(Payload::ModelCompleted(ModelCompleted {
            turn,
            operation_id: op,
            finish: keel_stream::FinishReason::Stop,
            usage: Some(keel_stream::Usage::new(rng.below(1000), rng.below(1000)).unwrap()),
            metadata: None,
            extra: Extra::new(),
        }));
        commit(Payload::TurnCompleted(TurnRef {
            turn,
            extra: Extra::new(),
        }));
    }
    commit(match rng.below(3) {
        0 => Payload::RunCompleted(RunCompleted::default()),
        1 => Payload::RunFailed(RunFailed {
            error: keel_eventlog::ErrorText::new("scripted failure"),
            cause: None,
            extra: Extra::new(),
        }),
        _ => Payload::RunCancelled(RunCancelled::default()),
    });
    events
}

// --------------------------------------------------------------- the child

/// The child: writes `TASKS` runs at a time until killed (or done).
#[test]
fn crash_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (db, seed) = spec.rsplit_once(':').unwrap();
    let seed: u64 = seed.parse().unwrap();
    let journal = Arc::new(SqliteJournal::open(db, JournalConfig::default()).unwrap());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    rt.block_on(async {
        let tasks: Vec<_> = (0..TASKS)
            .map(|task| {
                let journal = Arc::clone(&journal);
                tokio::spawn(async move {
                    let mut rng = Rng::new(seed ^ (task + 1) << 40);
                    for k in 0..RUNS_PER_TASK {
                        let events = script(seed, task, k);
                        let mut next = 0;
                        while next < events.len() {
                            next += offer(&journal, &events, next, &mut rng).await;
                        }
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
    });
}

/// Prints `ack <run> <seq>` for each of `events`, in one write.
fn print_acks(events: &[Arc<Event>]) {
    let mut text = String::new();
    for event in events {
        text.push_str(&format!("ack {} {}\n", event.run_id(), event.seq()));
    }
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes()).unwrap();
    out.flush().unwrap();
}

/// Offers the events from `next` on: one `observe` now and then, else an
/// `observe_batch` of a seed-derived size (1..=64), printing each event's
/// ack only after the answer covers it. Returns how many were acked.
async fn offer(
    journal: &SqliteJournal,
    events: &[Arc<Event>],
    next: usize,
    rng: &mut Rng,
) -> usize {
    let acked = if rng.below(4) == 0 {
        journal.observe(&events[next]).await.unwrap();
        &events[next..=next]
    } else {
        let size = 1 + rng.below(64) as usize;
        let batch = &events[next..events.len().min(next + size)];
        match journal.observe_batch(batch).await {
            Ok(()) => batch,
            Err(e) => {
                print_acks(&batch[..e.acknowledged]);
                panic!("batch at {} refused: {e}", batch[0].seq());
            }
        }
    };
    print_acks(acked);
    // Now and then, a retry of what was just acknowledged.
    if rng.below(16) == 0 {
        journal.observe_batch(acked).await.unwrap();
    }
    acked.len()
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

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name}={v} is not a number"))
        })
        .unwrap_or(default)
}

struct Killed {
    /// Complete `ack` lines the child printed.
    acks: Vec<(String, u64)>,
    /// The child exited by itself (finished its script) before the kill.
    finished: bool,
    /// The kill was timed from the spawn, not from the first ack.
    early: bool,
}

/// Runs one child on `db` and kills it after a delay chosen by `seed`.
fn run_and_kill(db: &Path, seed: u64) -> Killed {
    let mut rng = Rng::new(seed);
    let delay = Duration::from_millis(5 + rng.below(146));
    // One kill in six lands early, counted from the spawn (during start-up
    // or schema creation); the rest count from the first acknowledgement.
    let early = rng.below(6) == 0;
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["crash_child", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, format!("{}:{seed}", db.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let lines = std::thread::spawn(move || {
        let mut reader = std::io::BufReader::new(stdout);
        let mut line = String::new();
        while reader.read_line(&mut line).unwrap_or(0) > 0 {
            // A line cut short by the kill has no newline: not an ack.
            if line.ends_with('\n') && tx.send(line.trim_end().to_owned()).is_err() {
                break;
            }
            line.clear();
        }
    });
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut std::io::BufReader::new(stderr), &mut text);
        text
    });
    let mut seen = Vec::new();
    let start = Instant::now();
    if early {
        std::thread::sleep(delay / 5);
    } else {
        // Wait for the first ack, then the delay.
        loop {
            match rx.recv_timeout(Duration::from_millis(50)) {
                Ok(line) => {
                    let first = line.starts_with("ack ");
                    seen.push(line);
                    if first {
                        break;
                    }
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    if let Some(status) = child.try_wait().unwrap() {
                        panic!(
                            "seed {seed}: child exited ({status}) before its first ack: {}",
                            errors.join().unwrap()
                        );
                    }
                    assert!(
                        start.elapsed() < Duration::from_secs(60),
                        "seed {seed}: no ack within 60 s"
                    );
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        std::thread::sleep(delay);
    }
    let exited = child.try_wait().unwrap();
    if exited.is_none() {
        child.kill().unwrap();
        child.wait().unwrap();
    }
    let stderr = errors.join().unwrap();
    if let Some(status) = exited {
        assert!(
            status.success(),
            "seed {seed}: child failed ({status}): {stderr}"
        );
    }
    let finished = exited.is_some();
    lines.join().unwrap();
    seen.extend(rx.try_iter());
    let acks = seen
        .iter()
        .filter_map(|l| {
            let mut parts = l.strip_prefix("ack ")?.split(' ');
            let run = parts.next()?.to_owned();
            let seq = parts.next()?.parse().ok()?;
            Some((run, seq))
        })
        .collect();
    Killed {
        acks,
        finished,
        early,
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
        let killed = run_and_kill(&db, seed);
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
