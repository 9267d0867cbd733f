#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Recovery of abandoned runs on one SQLite store: ownership through host
//! lock files, `SqliteJournal::recover_abandoned`, and the v1 → v2 schema
//! migration.
//!
//! A dead host is a real process: `recovery_child` (a test that returns at
//! once unless `KEEL_RECOVERY_CHILD=<db>` is set) re-executes this binary,
//! journals the prefixes of a fixed set of runs through its own
//! `SqliteJournal`, prints `ready <host id>` and waits to be killed with
//! SIGKILL, so its lock is released by the kernel and nothing is closed.
//! `recovery_racer` (with `KEEL_RECOVERY_RACER=<db>`) is a recoverer in a
//! process of its own: it waits for `go` on stdin, recovers, and prints
//! one `recovered <run> <terminals>` line per run it closed.
#![cfg(feature = "sqlite")]

#[path = "support/fixtures.rs"]
mod fixtures;

use fixtures::V1_DDL;
use keel_eventlog::links::LinkCheck;
use keel_eventlog::{
    Event, Extra, InteractionStarted, LogConfig, ModelCompleted, ModelStarted, ParentLink, Payload,
    RunCompleted, RunLog, RunStarted, SubRunStarted, SystemClock, TextDelta, ToolCall, ToolRef,
    TurnRef, recovery::HOST_LOST,
};
use keel_message::{CallId, CanonicalJson, InteractionId, ModelName, OperationId, RunId, ToolName};
use keel_observers::journal::SCHEMA_VERSION;
use keel_observers::{
    JournalConfig, JournalError, JournalReader, RecoveryReport, RequiredObserver, RunStatus,
    SkipReason, SqliteJournal,
};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const CHILD_ENV: &str = "KEEL_RECOVERY_CHILD";
const RACER_ENV: &str = "KEEL_RECOVERY_RACER";
/// Extra runs (`run_bulk_<k>`, open in a tool) the child writes.
const BULK_ENV: &str = "KEEL_RECOVERY_BULK";

// ---------------------------------------------------------------- helpers

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let dir = std::env::temp_dir().join(format!(
            "keel-recovery-{tag}-{}-{}-{nanos}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn db(&self) -> PathBuf {
        self.0.join("keel.db")
    }

    fn hosts(&self) -> PathBuf {
        self.0.join("keel.db.hosts")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("recovery test: keeping {} for inspection", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

fn open(db: &Path) -> SqliteJournal {
    SqliteJournal::open(db, JournalConfig::default()).unwrap()
}

fn op(s: &str) -> OperationId {
    OperationId::parse(s).unwrap()
}

fn call(s: &str) -> CallId {
    CallId::parse(s).unwrap()
}

fn tool(s: &str) -> ToolName {
    ToolName::parse(s).unwrap()
}

fn model() -> ModelName {
    ModelName::parse("scripted-1").unwrap()
}

fn run_started() -> Payload {
    Payload::RunStarted(RunStarted {
        model: Some(model()),
        chat: None,
        continues: None,
        forked_from: None,
        parent: None,
        extra: Extra::new(),
    })
}

fn turn_started(turn: u64) -> Payload {
    Payload::TurnStarted(TurnRef {
        turn,
        extra: Extra::new(),
    })
}

fn model_started(turn: u64, id: &str) -> Payload {
    Payload::ModelStarted(ModelStarted {
        turn,
        operation_id: op(id),
        model: model(),
        attempt: 1,
        purpose: None,
        extra: Extra::new(),
    })
}

fn delta(turn: u64, id: &str, text: &str) -> Payload {
    Payload::TextDelta(TextDelta {
        turn,
        operation_id: op(id),
        text: text.to_owned(),
        extra: Extra::new(),
    })
}

fn tool_call(turn: u64, id: &str, call_id: &str, name: &str) -> Payload {
    Payload::ToolCall(ToolCall {
        turn,
        operation_id: op(id),
        call_id: call(call_id),
        name: tool(name),
        arguments: CanonicalJson::parse("{}").unwrap(),
        extra: Extra::new(),
    })
}

fn model_completed(turn: u64, id: &str) -> Payload {
    model_finished(turn, id, keel_stream::FinishReason::ToolCalls)
}

fn model_finished(turn: u64, id: &str, finish: keel_stream::FinishReason) -> Payload {
    Payload::ModelCompleted(ModelCompleted {
        turn,
        operation_id: op(id),
        finish,
        usage: None,
        metadata: None,
        extra: Extra::new(),
    })
}

fn tool_started(turn: u64, call_id: &str, name: &str) -> Payload {
    Payload::ToolStarted(ToolRef {
        turn,
        call_id: call(call_id),
        tool: tool(name),
        extra: Extra::new(),
    })
}

/// A run's name, the prefix the child journals, and the terminal kinds
/// recovery must append (innermost first); `None` for a run that ended.
type Shape = (&'static str, Vec<Payload>, Option<Vec<&'static str>>);

/// The runs the child journals.
fn shapes() -> Vec<Shape> {
    let asked = Payload::InteractionStarted(InteractionStarted {
        turn: 1,
        interaction_id: InteractionId::parse("i1").unwrap(),
        request: "approval".to_owned(),
        call_id: Some(call("c1")),
        extra: Extra::new(),
    });
    vec![
        (
            "run_partial",
            vec![
                run_started(),
                turn_started(1),
                model_started(1, "op1"),
                delta(1, "op1", "Hel"),
                delta(1, "op1", "lo"),
            ],
            Some(vec!["model.failed", "turn.failed", "run.failed"]),
        ),
        (
            "run_pristine",
            vec![run_started(), turn_started(1), model_started(1, "op1")],
            Some(vec!["model.failed", "turn.failed", "run.failed"]),
        ),
        (
            "run_tools",
            vec![
                run_started(),
                turn_started(1),
                model_started(1, "op1"),
                tool_call(1, "op1", "c1", "get_weather"),
                tool_call(1, "op1", "c2", "get_time"),
                model_completed(1, "op1"),
                tool_started(1, "c1", "get_weather"),
                tool_started(1, "c2", "get_time"),
            ],
            Some(vec![
                "tool.failed",
                "tool.failed",
                "turn.failed",
                "run.failed",
            ]),
        ),
        (
            "run_approval",
            vec![
                run_started(),
                turn_started(1),
                model_started(1, "op1"),
                tool_call(1, "op1", "c1", "deploy"),
                model_completed(1, "op1"),
                asked,
            ],
            Some(vec!["interaction.failed", "turn.failed", "run.failed"]),
        ),
        (
            "run_between_turns",
            vec![
                run_started(),
                turn_started(1),
                model_started(1, "op1"),
                delta(1, "op1", "done"),
                model_finished(1, "op1", keel_stream::FinishReason::Stop),
                Payload::TurnCompleted(TurnRef {
                    turn: 1,
                    extra: Extra::new(),
                }),
            ],
            Some(vec!["run.failed"]),
        ),
        (
            "run_done",
            vec![
                run_started(),
                Payload::RunCompleted(RunCompleted::default()),
            ],
            None,
        ),
    ]
}

fn bulk_run(k: u64) -> (String, Vec<Payload>) {
    (
        format!("run_bulk_{k}"),
        vec![
            run_started(),
            turn_started(1),
            model_started(1, "op1"),
            tool_call(1, "op1", "c1", "slow"),
            model_completed(1, "op1"),
            tool_started(1, "c1", "slow"),
        ],
    )
}

/// Commits `payloads` to a fresh log of `run` and journals each event.
fn journal_run(
    rt: &tokio::runtime::Runtime,
    journal: &SqliteJournal,
    run: &str,
    payloads: &[Payload],
) -> Vec<Arc<Event>> {
    let log = RunLog::new(
        RunId::parse(run).unwrap(),
        LogConfig::default(),
        Arc::new(SystemClock),
    )
    .unwrap();
    payloads
        .iter()
        .map(|p| {
            let event = log.commit(p).unwrap();
            rt.block_on(journal.observe(&event)).unwrap();
            event
        })
        .collect()
}

// ---------------------------------------------------------- the children

/// The dead host: journals the shapes (and `KEEL_RECOVERY_BULK` more
/// runs), says `ready <host id>`, and waits to be killed.
#[test]
fn recovery_child() {
    let Ok(db) = std::env::var(CHILD_ENV) else {
        return;
    };
    let bulk: u64 = std::env::var(BULK_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let journal = open(Path::new(&db));
    let rt = rt();
    for (run, payloads, _) in shapes() {
        journal_run(&rt, &journal, run, &payloads);
    }
    for k in 0..bulk {
        let (run, payloads) = bulk_run(k);
        journal_run(&rt, &journal, &run, &payloads);
    }
    println!("ready {}", journal.host_id());
    std::io::stdout().flush().unwrap();
    loop {
        std::thread::sleep(Duration::from_secs(60));
    }
}

/// A recoverer process: `go` on stdin, then recover and print what it did.
#[test]
fn recovery_racer() {
    let Ok(db) = std::env::var(RACER_ENV) else {
        return;
    };
    let journal = open(Path::new(&db));
    println!("ready {}", journal.host_id());
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let report = journal.recover_abandoned().unwrap();
    for run in &report.recovered {
        println!("recovered {} {}", run.run_id, run.terminals.len());
    }
    println!("done");
    journal.close().unwrap();
}

struct Spawned {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    host: String,
}

impl Drop for Spawned {
    /// A failing test leaves no process behind.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts this test binary as `test` with `env` set, and waits for its
/// `ready <host id>` line.
fn spawn(test: &str, env: &[(&str, String)]) -> Spawned {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([test, "--exact", "--nocapture", "--test-threads=1", "-q"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let host = loop {
        line.clear();
        assert!(
            stdout.read_line(&mut line).unwrap() > 0,
            "{test} exited before it was ready"
        );
        if let Some(host) = line.trim_end().strip_prefix("ready ") {
            break host.to_owned();
        }
    };
    Spawned {
        child,
        stdin,
        stdout,
        host,
    }
}

/// A host that journaled the shapes and `bulk` more runs, then died.
fn dead_host(db: &Path, bulk: u64) -> String {
    let mut host = spawn(
        "recovery_child",
        &[
            (CHILD_ENV, db.display().to_string()),
            (BULK_ENV, bulk.to_string()),
        ],
    );
    host.child.kill().unwrap(); // SIGKILL on Unix
    host.child.wait().unwrap();
    host.host.clone()
}

/// Every stored line of `run`.
fn lines(db: &Path, run: &str) -> Vec<String> {
    JournalReader::open(db)
        .unwrap()
        .events_after(run, 0, usize::MAX)
        .unwrap()
}

/// `run`'s lines are seqs 1..=n and a complete, lifecycle-valid log (the
/// import replays every commit rule), and the status is `failed`.
fn assert_closed(db: &Path, run: &str) -> Vec<String> {
    let stored = lines(db, run);
    for (i, line) in stored.iter().enumerate() {
        assert_eq!(Event::decode(line).unwrap().seq(), i as u64 + 1, "{run}");
    }
    let log = RunLog::import(
        RunId::parse(run).unwrap(),
        stored.iter().map(String::as_str),
        LogConfig::default(),
        Arc::new(SystemClock),
    )
    .unwrap_or_else(|e| panic!("{run}: {e}"));
    assert!(log.run_ended(), "{run}: not ended");
    assert!(log.open_scopes().is_empty(), "{run}: scopes open");
    let status = JournalReader::open(db)
        .unwrap()
        .run_status(run)
        .unwrap()
        .unwrap();
    assert_eq!(status.status, RunStatus::Failed, "{run}");
    assert_eq!(status.last_seq, stored.len() as u64, "{run}");
    stored
}

fn owners(db: &Path) -> Vec<(String, String)> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let mut stmt = conn
        .prepare("SELECT run_id, host FROM owners ORDER BY run_id")
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

fn payload(line: &str) -> serde_json::Value {
    serde_json::from_str::<serde_json::Value>(line).unwrap()["payload"].clone()
}

// ------------------------------------------------------------------ tests

#[test]
fn a_killed_hosts_runs_are_recovered_innermost_first_and_only_once() {
    if std::env::var_os(CHILD_ENV).is_some() || std::env::var_os(RACER_ENV).is_some() {
        return;
    }
    let dir = TempDir::new("killed");
    let db = dir.db();
    let mut live = spawn("recovery_child", &[(CHILD_ENV, db.display().to_string())]);
    let recoverer = open(&db);
    assert_ne!(recoverer.host_id(), live.host);
    // While the host lives, its runs are its own.
    let report = recoverer.recover_abandoned().unwrap();
    assert!(report.recovered.is_empty(), "{report:?}");
    let running: Vec<_> = shapes()
        .into_iter()
        .filter(|(_, _, want)| want.is_some())
        .map(|(run, _, _)| run)
        .collect();
    assert_eq!(report.skipped.len(), running.len(), "{report:?}");
    for skipped in &report.skipped {
        assert_eq!(
            skipped.reason,
            SkipReason::OwnedByLiveHost {
                host: live.host.clone()
            }
        );
    }
    let lock = dir.hosts().join(format!("{}.lock", live.host));
    assert!(lock.exists());
    // SIGKILL: nothing is closed, the kernel drops the lock.
    live.child.kill().unwrap();
    live.child.wait().unwrap();
    assert!(lock.exists(), "a killed host cannot remove its file");
    let prefixes: BTreeMap<&str, Vec<String>> =
        running.iter().map(|run| (*run, lines(&db, run))).collect();
    let done_before = lines(&db, "run_done");

    let started = Instant::now();
    let report = recoverer.recover_abandoned().unwrap();
    let took = started.elapsed();
    assert!(report.skipped.is_empty(), "{report:?}");
    assert_eq!(report.swept_host_files, 1);
    assert!(!lock.exists(), "the dead host's file is swept");
    let recovered: BTreeMap<&str, _> = report
        .recovered
        .iter()
        .map(|r| (r.run_id.as_str(), r))
        .collect();
    assert_eq!(recovered.len(), running.len());
    for (run, _, want) in shapes() {
        let Some(want) = want else { continue };
        let r = recovered[run];
        assert_eq!(r.previous_owner.as_deref(), Some(live.host.as_str()));
        let kinds: Vec<String> = r.terminals.iter().map(|e| e.kind().to_string()).collect();
        assert_eq!(kinds, want, "{run}");
        let stored = assert_closed(&db, run);
        let prefix = &prefixes[run];
        // The prefix is untouched; the terminals follow it, seq for seq.
        assert_eq!(&stored[..prefix.len()], &prefix[..], "{run}");
        let tail: Vec<&str> = r.terminals.iter().map(|e| e.line()).collect();
        assert_eq!(
            stored[prefix.len()..]
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
            tail,
            "{run}"
        );
        for line in &stored[prefix.len()..] {
            let p = payload(line);
            match p.get("error").and_then(|e| e.as_str()) {
                Some(error) => assert!(error.contains("run.host_lost"), "{line}"),
                None => assert!(
                    p["problem"]["message"]
                        .as_str()
                        .unwrap()
                        .contains("run.host_lost")
                ),
            }
        }
        let last = payload(stored.last().unwrap());
        assert_eq!(last["cause"]["kind"], HOST_LOST, "{run}");
    }
    // The model position is what the log shows; a tool in flight is
    // uncertain.
    let position = |run: &str| payload(recovered[run].terminals[0].line())["position"].clone();
    assert_eq!(position("run_partial"), "partial");
    assert_eq!(position("run_pristine"), "pristine");
    let pristine = payload(recovered["run_pristine"].terminals[0].line());
    assert_eq!(pristine["problem"]["kind"], "unavailable");
    assert_eq!(pristine["problem"]["retryable"], false);
    let tools: Vec<_> = recovered["run_tools"].terminals[..2]
        .iter()
        .map(|e| payload(e.line()))
        .collect();
    // Innermost (last started) first.
    assert_eq!(tools[0]["call_id"], "c2");
    assert_eq!(tools[0]["tool"], "get_time");
    assert_eq!(tools[1]["call_id"], "c1");
    for t in &tools {
        assert_eq!(t["outcome"], "uncertain");
    }
    // The ended run is untouched, no run has an owner any more.
    assert_eq!(lines(&db, "run_done"), done_before);
    assert!(owners(&db).is_empty(), "{:?}", owners(&db));
    // Idempotent.
    let again = recoverer.recover_abandoned().unwrap();
    assert!(
        again.recovered.is_empty() && again.skipped.is_empty(),
        "{again:?}"
    );
    eprintln!(
        "recovery: {} runs recovered in {took:?} ({:?} per run)",
        running.len(),
        took / running.len() as u32
    );
    recoverer.close().unwrap();
}

#[test]
fn a_live_owner_keeps_its_runs_and_a_closed_one_gives_them_up() {
    let dir = TempDir::new("live");
    let db = dir.db();
    let rt = rt();
    let owner = open(&db);
    journal_run(&rt, &owner, "run_a", &[run_started(), turn_started(1)]);
    assert_eq!(
        owners(&db),
        [("run_a".to_owned(), owner.host_id().to_owned())]
    );
    let other = open(&db);
    let report = other.recover_abandoned().unwrap();
    assert!(report.recovered.is_empty());
    assert_eq!(
        report.skipped[0].reason,
        SkipReason::OwnedByLiveHost {
            host: owner.host_id().to_owned()
        }
    );
    // The owner itself does not recover what it is still writing.
    let own = owner.recover_abandoned().unwrap();
    assert_eq!(own.skipped[0].reason, SkipReason::OwnedByThisHost);
    assert!(own.needs_attention().next().is_none());
    assert_eq!(lines(&db, "run_a").len(), 2);
    // Closing without ending the run abandons it: the lock file is gone.
    let host = owner.host_id().to_owned();
    owner.close().unwrap();
    assert!(!dir.hosts().join(format!("{host}.lock")).exists());
    let report = other.recover_abandoned().unwrap();
    assert_eq!(report.recovered.len(), 1, "{report:?}");
    assert_eq!(
        report.recovered[0].previous_owner.as_deref(),
        Some(host.as_str())
    );
    let stored = assert_closed(&db, "run_a");
    assert_eq!(stored.len(), 4);
    other.close().unwrap();
    // Both hosts are gone and left no file behind.
    assert_eq!(std::fs::read_dir(dir.hosts()).unwrap().count(), 0);
}

#[test]
fn racing_recoverers_close_each_run_exactly_once() {
    if std::env::var_os(CHILD_ENV).is_some() || std::env::var_os(RACER_ENV).is_some() {
        return;
    }
    const BULK: u64 = 40;
    let rounds = 3;
    for round in 0..rounds {
        let dir = TempDir::new("race");
        let db = dir.db();
        let dead = dead_host(&db, BULK);
        let mut racers: Vec<Spawned> = (0..2)
            .map(|_| spawn("recovery_racer", &[(RACER_ENV, db.display().to_string())]))
            .collect();
        let local = open(&db);
        // Everyone is ready: start the two processes and this one together.
        for racer in &mut racers {
            racer.stdin.write_all(b"go\n").unwrap();
            racer.stdin.flush().unwrap();
        }
        let mine = local.recover_abandoned().unwrap();
        let mut closed: BTreeMap<String, (String, usize)> = BTreeMap::new();
        for run in &mine.recovered {
            closed.insert(
                run.run_id.to_string(),
                ("local".to_owned(), run.terminals.len()),
            );
        }
        let racer_hosts: Vec<String> = racers.iter().map(|r| r.host.clone()).collect();
        for skipped in &mine.skipped {
            // Claimed by a racer first: either the claim was lost, or the
            // racer (alive) owned it when this one looked.
            match &skipped.reason {
                SkipReason::ClaimedElsewhere => {}
                SkipReason::OwnedByLiveHost { host } if racer_hosts.contains(host) => {}
                other => panic!("round {round}: {}: {other:?}", skipped.run_id),
            }
        }
        for mut racer in racers {
            let mut line = String::new();
            loop {
                line.clear();
                assert!(racer.stdout.read_line(&mut line).unwrap() > 0);
                let line = line.trim_end();
                if line == "done" {
                    break;
                }
                // The test harness's own lines.
                let Some(rest) = line.strip_prefix("recovered ") else {
                    continue;
                };
                let mut parts = rest.split(' ');
                let run = parts.next().unwrap().to_owned();
                let n: usize = parts.next().unwrap().parse().unwrap();
                let previous = closed.insert(run.clone(), (racer.host.clone(), n));
                assert!(
                    previous.is_none(),
                    "round {round}: {run} recovered twice ({previous:?} and {})",
                    racer.host
                );
            }
            assert!(racer.child.wait().unwrap().success());
        }
        let expected = shapes().iter().filter(|s| s.2.is_some()).count() + BULK as usize;
        assert_eq!(closed.len(), expected, "round {round}: {closed:?}");
        for (run, (_, n)) in &closed {
            let stored = assert_closed(&db, run);
            let run_terminals = stored
                .iter()
                .filter(|l| l.starts_with(r#"{"kind":"run.failed""#))
                .count();
            assert_eq!(run_terminals, 1, "round {round}: {run}");
            let before = stored.len() - n;
            assert!(before >= 2, "{run}");
        }
        let winners: BTreeSet<&str> = closed.values().map(|(who, _)| who.as_str()).collect();
        eprintln!(
            "race round {round}: {} runs of dead host {dead} closed once each, by {} recoverer(s)",
            closed.len(),
            winners.len()
        );
        assert!(owners(&db).is_empty());
        local.close().unwrap();
    }
}

/// Stores `events` of one run as a version-1 writer would have.
fn insert_run(conn: &rusqlite::Connection, events: &[Arc<Event>], status: &str) {
    for e in events {
        conn.execute(
            "INSERT INTO events VALUES (?1, ?2, ?3, ?4, ?5)",
            rusqlite::params![
                e.run_id().as_str(),
                e.seq() as i64,
                e.kind().to_string(),
                e.ts() as i64,
                e.line()
            ],
        )
        .unwrap();
    }
    let (first, last) = (&events[0], events.last().unwrap());
    conn.execute(
        "INSERT INTO runs (run_id, last_seq, status, started_ts, updated_ts) \
         VALUES (?1, ?2, ?3, ?4, ?5)",
        rusqlite::params![
            first.run_id().as_str(),
            last.seq() as i64,
            status,
            first.ts() as i64,
            last.ts() as i64
        ],
    )
    .unwrap();
}

fn committed(run: &str, payloads: &[Payload]) -> Vec<Arc<Event>> {
    let log = RunLog::new(
        RunId::parse(run).unwrap(),
        LogConfig::default(),
        Arc::new(SystemClock),
    )
    .unwrap();
    payloads.iter().map(|p| log.commit(p).unwrap()).collect()
}

fn version(db: &Path) -> i64 {
    rusqlite::Connection::open(db)
        .unwrap()
        .query_row("SELECT max(version) FROM keel_schema", [], |r| r.get(0))
        .unwrap()
}

#[test]
fn a_v1_store_is_migrated_in_place_and_its_running_runs_recovered() {
    let dir = TempDir::new("v1");
    let db = dir.db();
    let running = committed("run_old", &[run_started(), turn_started(1)]);
    let done = committed(
        "run_done",
        &[
            run_started(),
            Payload::RunCompleted(RunCompleted::default()),
        ],
    );
    {
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
        conn.execute_batch(V1_DDL).unwrap();
        insert_run(&conn, &running, "running");
        insert_run(&conn, &done, "completed");
    }
    // A reader reads version 1 as it is, and changes nothing.
    let reader = JournalReader::open(&db).unwrap();
    assert_eq!(reader.runs().unwrap().len(), 2);
    drop(reader);
    assert_eq!(version(&db), 1);
    // A writer migrates it.
    let journal = open(&db);
    assert_eq!(version(&db), i64::from(SCHEMA_VERSION));
    assert_eq!(SCHEMA_VERSION, 5);
    // Version 3 summed the stored events into the runs rows once.
    let reader = JournalReader::open(&db).unwrap();
    assert_eq!(reader.totals().unwrap()["run_old"].turns, 1);
    assert_eq!(reader.totals().unwrap(), reader.summed_totals().unwrap());
    drop(reader);
    assert!(owners(&db).is_empty());
    assert_eq!(lines(&db, "run_done").len(), 2);
    // A run stored before ownership existed has no owner: abandoned.
    let report = journal.recover_abandoned().unwrap();
    assert_eq!(report.recovered.len(), 1, "{report:?}");
    assert_eq!(report.recovered[0].run_id.as_str(), "run_old");
    assert_eq!(report.recovered[0].previous_owner, None);
    let stored = assert_closed(&db, "run_old");
    let old: Vec<&str> = running.iter().map(|e| e.line()).collect();
    assert_eq!(
        stored[..2].iter().map(String::as_str).collect::<Vec<_>>(),
        old
    );
    journal.close().unwrap();
    // Reopening a current store changes nothing; the recovery's terminals
    // kept the counters equal to the events.
    open(&db).close().unwrap();
    assert_eq!(version(&db), i64::from(SCHEMA_VERSION));
    let reader = JournalReader::open(&db).unwrap();
    assert_eq!(reader.totals().unwrap(), reader.summed_totals().unwrap());
}

#[test]
fn a_failed_migration_rolls_back_whole() {
    let dir = TempDir::new("v1-fail");
    let db = dir.db();
    {
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.execute_batch(V1_DDL).unwrap();
        insert_run(&conn, &committed("run_a", &[run_started()]), "running");
        // Something else already took the name the migration needs.
        conn.execute_batch("CREATE TABLE owners (x TEXT)").unwrap();
    }
    let err = SqliteJournal::open(&db, JournalConfig::default()).unwrap_err();
    assert!(
        matches!(
            err,
            JournalError::Sqlite {
                op: "migrate the schema",
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(version(&db), 1, "the version was not bumped");
    assert_eq!(lines(&db, "run_a").len(), 1);
    assert!(!dir.hosts().exists(), "no host file for a store not opened");
}

#[test]
fn corrupt_or_foreign_owned_runs_are_reported_and_left_untouched() {
    let dir = TempDir::new("corrupt");
    let db = dir.db();
    let journal = open(&db);
    // A model scope in a turn that never started: the import refuses it.
    let broken_line = r#"{"kind":"model.started","payload":{"attempt":1,"model":"m","operation_id":"op1","turn":1},"run_id":"run_bad","seq":2,"ts":4000000000000000}"#;
    let good = committed("run_bad", &[run_started()]);
    let evil = committed("run_evil", &[run_started(), turn_started(1)]);
    let gone = "h0123456789abcdef0123456789abcdef";
    let bait = dir.0.join("bait.lock");
    std::fs::write(&bait, "keep me").unwrap();
    let stray_tmp = dir.hosts().join("hfedcba9876543210fedcba9876543210.tmp");
    std::fs::write(&stray_tmp, "").unwrap();
    let unrelated = dir.hosts().join("notes.txt");
    std::fs::write(&unrelated, "").unwrap();
    {
        let conn = rusqlite::Connection::open(&db).unwrap();
        insert_run(&conn, &good, "running");
        conn.execute(
            "INSERT INTO events VALUES ('run_bad', 2, 'model.started', 4000000000000000, ?1)",
            [broken_line],
        )
        .unwrap();
        conn.execute("UPDATE runs SET last_seq = 2 WHERE run_id = 'run_bad'", [])
            .unwrap();
        conn.execute("INSERT INTO owners VALUES ('run_bad', ?1)", [gone])
            .unwrap();
        insert_run(&conn, &evil, "running");
        conn.execute("INSERT INTO owners VALUES ('run_evil', '../bait')", [])
            .unwrap();
    }
    let before = (lines(&db, "run_bad"), lines(&db, "run_evil"), owners(&db));
    let report: RecoveryReport = journal.recover_abandoned().unwrap();
    assert!(report.recovered.is_empty(), "{report:?}");
    let reasons: BTreeMap<&str, &SkipReason> = report
        .skipped
        .iter()
        .map(|s| (s.run_id.as_str(), &s.reason))
        .collect();
    match reasons["run_bad"] {
        SkipReason::Corrupt { detail } => {
            assert!(
                detail.contains("line 2") && detail.contains("lifecycle"),
                "{detail}"
            )
        }
        other => panic!("run_bad: {other:?}"),
    }
    assert_eq!(reasons["run_evil"], &SkipReason::InvalidOwner);
    assert_eq!(report.needs_attention().count(), 2);
    assert_eq!(
        (lines(&db, "run_bad"), lines(&db, "run_evil"), owners(&db)),
        before,
        "nothing was written"
    );
    assert_eq!(std::fs::read_to_string(&bait).unwrap(), "keep me");
    // The stray temporary file of a host that died while opening is swept;
    // files that are not host files are not.
    assert_eq!(report.swept_host_files, 1);
    assert!(!stray_tmp.exists());
    assert!(unrelated.exists());
    // The SkipReason texts name the rule and never the content.
    let text = reasons["run_bad"].to_string();
    assert!(text.contains("recovery.importable"), "{text}");
    assert!(!text.contains("\"m\""), "{text}");
    journal.close().unwrap();
}

/// `run.started` of a sub-run of `parent`'s call `call_id`.
fn child_started(parent: &str, call_id: &str) -> Payload {
    Payload::RunStarted(RunStarted {
        parent: Some(ParentLink::new(
            RunId::parse(parent).unwrap(),
            call(call_id),
        )),
        ..RunStarted::default()
    })
}

/// `tool.sub_run`: call `call_id` of turn 1 started `child`.
fn sub_run(call_id: &str, child: &str) -> Payload {
    Payload::ToolSubRun(SubRunStarted {
        turn: 1,
        call_id: call(call_id),
        run_id: RunId::parse(child).unwrap(),
        extra: Extra::new(),
    })
}

#[test]
fn a_tree_is_recovered_children_first_and_keeps_its_links() {
    let dir = TempDir::new("tree");
    let db = dir.db();
    let rt = rt();
    let owner = open(&db);
    // In start order: the root, an unrelated run, the child, the
    // grandchild; each open where the host died.
    let delegating = |head: Payload, call_id: &str, child: &str| {
        vec![
            head,
            turn_started(1),
            tool_started(1, call_id, "researcher"),
            sub_run(call_id, child),
        ]
    };
    journal_run(
        &rt,
        &owner,
        "run_p",
        &delegating(run_started(), "c1", "run_b"),
    );
    journal_run(&rt, &owner, "run_x", &[run_started(), turn_started(1)]);
    let middle = delegating(child_started("run_p", "c1"), "c2", "run_c");
    journal_run(&rt, &owner, "run_b", &middle);
    let leaf = [
        child_started("run_b", "c2"),
        turn_started(1),
        model_started(1, "op_1"),
    ];
    journal_run(&rt, &owner, "run_c", &leaf);
    owner.close().unwrap();

    let recoverer = open(&db);
    let report = recoverer.recover_abandoned().unwrap();
    let order: Vec<&str> = report.recovered.iter().map(|r| r.run_id.as_str()).collect();
    assert_eq!(order, ["run_c", "run_b", "run_p", "run_x"], "{report:?}");
    // Commit time agrees: each child's run.failed is no later than its
    // parent's tool.failed.
    let ts_of = |run: &str, kind: &str| {
        let stored = assert_closed(&db, run);
        let line = stored
            .iter()
            .find(|l| l.contains(&format!(r#""kind":"{kind}""#)))
            .unwrap();
        Event::decode(line).unwrap().ts()
    };
    assert!(ts_of("run_c", "run.failed") <= ts_of("run_b", "tool.failed"));
    assert!(ts_of("run_b", "run.failed") <= ts_of("run_p", "tool.failed"));
    // The parents' calls name their children, host_lost: the links hold.
    let mut links = LinkCheck::new();
    for run in ["run_p", "run_x", "run_b", "run_c"] {
        for line in lines(&db, run) {
            links.push(&Event::decode(&line).unwrap());
        }
    }
    let checked = links.finish().unwrap();
    assert_eq!(checked.sub_runs(), 2);
    let parent_tool = lines(&db, "run_p")
        .into_iter()
        .find(|l| l.contains(r#""kind":"tool.failed""#))
        .unwrap();
    assert_eq!(
        payload(&parent_tool)["sub_run"],
        serde_json::json!({"cause": {"kind": HOST_LOST}, "run_id": "run_b"})
    );
    recoverer.close().unwrap();
}
