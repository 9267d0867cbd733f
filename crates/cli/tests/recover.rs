#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `keel recover`: a `keel run` killed with SIGKILL at random points leaves
//! its run `running` (`keel verify` calls it incomplete); `keel recover`
//! closes it with the recovery terminals (rule `run.host_lost`), after
//! which `keel verify` reports 0 incomplete, every started scope has
//! exactly one terminal, and no seq was skipped or reused. A run whose
//! `keel run` is still alive is left to it.
//!
//! Timings are random but seeded: the seed is printed, and
//! `KEEL_TEST_SEED=<seed>` replays it. `KEEL_RECOVER_KILLS` sets the number
//! of kills (default 24).
#![cfg(unix)]

mod common;

use common::{Rng, Sandbox, kind, text};
use keel_eventlog::{Scope, Terminal};
use keel_testkit::check_lifecycle_lines;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Four turns, a slow tool call in each of the first three: about 1.5 s,
/// a third of it inside a tool.
const SLOW: &str = r#"{
  "model": "scripted-1",
  "messages": [{"role": "user", "text": "count slowly"}],
  "tools": [{"name": "wait", "script": [
    {"delay_ms": 200, "ok": "one"}, {"delay_ms": 200, "ok": "two"}, {"delay_ms": 200, "ok": "three"}]}],
  "provider": {"type": "scripted", "calls": [
    [{"delay_ms": 40}, {"text": "a"}, {"delay_ms": 40}, {"text": "b"}, {"delay_ms": 40}, {"text": "c"},
     {"tool_call": {"call_id": "c1", "name": "wait", "arguments": {}}},
     {"complete": {"finish": "tool_calls", "usage": {"input_tokens": 5, "output_tokens": 5}}}],
    [{"delay_ms": 40}, {"text": "d"}, {"delay_ms": 40}, {"text": "e"}, {"delay_ms": 40}, {"text": "f"},
     {"tool_call": {"call_id": "c2", "name": "wait", "arguments": {}}},
     {"complete": {"finish": "tool_calls", "usage": {"input_tokens": 5, "output_tokens": 5}}}],
    [{"delay_ms": 40}, {"text": "g"}, {"delay_ms": 40}, {"text": "h"}, {"delay_ms": 40}, {"text": "i"},
     {"tool_call": {"call_id": "c3", "name": "wait", "arguments": {}}},
     {"complete": {"finish": "tool_calls", "usage": {"input_tokens": 5, "output_tokens": 5}}}],
    [{"delay_ms": 40}, {"text": "j"}, {"delay_ms": 40}, {"text": "k"}, {"delay_ms": 40}, {"text": "l"},
     {"complete": {"finish": "stop", "usage": {"input_tokens": 5, "output_tokens": 5}}}]
  ]}
}"#;

/// `keel run --json` in the background; a line arrives on `lines` for each
/// event it printed.
fn spawn(sb: &Sandbox, scenario: &std::path::Path) -> (Child, mpsc::Receiver<String>) {
    let mut child = Command::new(common::bin())
        .arg("run")
        .arg(scenario)
        .args(sb.db_args())
        .arg("--json")
        .env_remove("KEEL_DB")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    (child, rx)
}

/// `keel <cmd> --db DB`: exit code and stdout.
fn keel(sb: &Sandbox, cmd: &str) -> (Option<i32>, String) {
    let out = common::keel().arg(cmd).args(sb.db_args()).output().unwrap();
    let (stdout, stderr) = text(&out);
    assert!(!stderr.contains("panicked"), "keel {cmd}: {stderr}");
    (out.status.code(), stdout)
}

/// `(run_id, status)` of every stored run (none before the journal exists).
fn runs(sb: &Sandbox) -> Vec<(String, String)> {
    let (code, stdout) = keel(sb, "runs");
    if code == Some(2) {
        return Vec::new();
    }
    stdout
        .lines()
        .map(|l| {
            let mut cols = l.split_whitespace();
            (
                cols.next().unwrap().to_owned(),
                cols.next().unwrap().to_owned(),
            )
        })
        .collect()
}

fn stored(sb: &Sandbox, run: &str) -> Vec<String> {
    sb.ok(&["events", run]).lines().map(str::to_owned).collect()
}

fn payload(line: &str) -> serde_json::Value {
    serde_json::from_str::<serde_json::Value>(line).unwrap()["payload"].clone()
}

/// Checks what recovery made of `run`, whose stored lines were `before`:
/// the prefix kept byte for byte, seqs 1..=n with no gap or reuse, every
/// started scope closed exactly once, the run failed as `host_lost`.
/// Returns how many terminals were appended.
fn check_recovered(sb: &Sandbox, run: &str, before: &[String], ctx: &str) -> usize {
    let after = stored(sb, run);
    assert!(after.len() > before.len(), "{ctx}: nothing appended");
    assert_eq!(&after[..before.len()], before, "{ctx}: the prefix changed");
    for (i, line) in after.iter().enumerate() {
        let event = keel_eventlog::Event::decode(line).unwrap();
        assert_eq!(event.seq(), i as u64 + 1, "{ctx}: seq skipped or reused");
    }
    let summary = check_lifecycle_lines(&after).unwrap_or_else(|e| panic!("{ctx}: {e}"));
    assert_eq!(summary.outcome(), Terminal::Failed, "{ctx}");
    for scope in [
        Scope::Run,
        Scope::Turn,
        Scope::Model,
        Scope::Tool,
        Scope::Interaction,
    ] {
        let ended: usize = [Terminal::Completed, Terminal::Failed, Terminal::Cancelled]
            .into_iter()
            .map(|t| summary.terminals(scope, t))
            .sum();
        assert_eq!(summary.started(scope), ended, "{ctx}: {scope:?}");
    }
    let appended = &after[before.len()..];
    for line in appended {
        let p = payload(line);
        match kind(line).as_str() {
            "tool.failed" => assert_eq!(p["outcome"], "uncertain", "{ctx}: {line}"),
            "model.failed" => {
                // `partial` exactly when this attempt recorded output.
                let output = before.iter().any(|l| {
                    matches!(kind(l).as_str(), "model.text_delta" | "model.tool_call")
                        && payload(l)["operation_id"] == p["operation_id"]
                });
                let want = if output { "partial" } else { "pristine" };
                assert_eq!(p["position"], want, "{ctx}: {line}");
            }
            "turn.failed" | "run.failed" => assert_eq!(p["cause"]["kind"], "host_lost", "{ctx}"),
            other => panic!("{ctx}: unexpected recovery terminal {other}"),
        }
    }
    appended.len()
}

#[test]
fn sigkill_at_random_points_then_recover_leaves_no_run_incomplete() {
    let mut rng = Rng::from_env("recover");
    let kills: usize = std::env::var("KEEL_RECOVER_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24);
    let sb = Sandbox::new();
    let scenario = sb.write("slow.json", SLOW);
    let started = Instant::now();
    let mut known: Vec<String> = Vec::new();
    // What the kills interrupted: the last stored kind of each run.
    let mut cut_at: BTreeMap<String, usize> = BTreeMap::new();
    let (mut recovered, mut empty, mut finished, mut recover_time) = (0, 0, 0, Duration::ZERO);
    for round in 0..kills {
        let (mut child, _lines) = spawn(&sb, &scenario);
        let delay = rng.between(0, 1300);
        std::thread::sleep(Duration::from_millis(delay));
        child.kill().unwrap();
        child.wait().unwrap();
        let ctx = format!("round {round} (SIGKILL after {delay} ms)");
        let new: Vec<(String, String)> = runs(&sb)
            .into_iter()
            .filter(|(id, _)| !known.contains(id))
            .collect();
        assert!(new.len() <= 1, "{ctx}: {new:?}");
        let Some((run, status)) = new.into_iter().next() else {
            empty += 1; // killed before run.started was journaled
            continue;
        };
        known.push(run.clone());
        if status != "running" {
            finished += 1; // the run ended before the kill
            let (code, out) = keel(&sb, "recover");
            assert_eq!(code, Some(0), "{ctx}: {out}");
            assert!(out.contains("recover: 0 run(s) recovered"), "{ctx}: {out}");
            continue;
        }
        let before = stored(&sb, &run);
        *cut_at.entry(kind(before.last().unwrap())).or_default() += 1;
        let (code, out) = keel(&sb, "verify");
        assert_eq!(code, Some(0), "{ctx}: {out}");
        assert!(out.contains(&format!("incomplete  {run}")), "{ctx}: {out}");
        let t = Instant::now();
        let (code, out) = keel(&sb, "recover");
        recover_time += t.elapsed();
        assert_eq!(code, Some(0), "{ctx}: {out}");
        let appended = check_recovered(&sb, &run, &before, &ctx);
        assert!(
            out.contains(&format!(
                "recovered  {run}  {appended} terminal(s) appended, seq {}..={}",
                before.len() + 1,
                before.len() + appended
            )),
            "{ctx}: {out}"
        );
        assert!(out.contains("recover: 1 run(s) recovered"), "{ctx}: {out}");
        let (code, out) = keel(&sb, "verify");
        assert_eq!(code, Some(0), "{ctx}: {out}");
        assert!(out.contains(" 0 incomplete, 0 violations"), "{ctx}: {out}");
        // Idempotent.
        let (_, out) = keel(&sb, "recover");
        assert!(out.contains("recover: 0 run(s) recovered"), "{ctx}: {out}");
        recovered += 1;
    }
    eprintln!(
        "recover: {kills} kills in {:.1} s: {recovered} runs recovered (`keel recover` {:?} each on average), {finished} ended before the kill, {empty} killed before run.started; cut after {cut_at:?}",
        started.elapsed().as_secs_f64(),
        recover_time / recovered.max(1) as u32
    );
    assert!(recovered >= kills / 2, "too few kills landed mid-run");
    // Every kind of cut the scenario has was seen at least once over the
    // default number of kills: inside a tool and while streaming.
    if kills >= 24 {
        assert!(cut_at.contains_key("tool.started"), "{cut_at:?}");
    }
    // The hosts directory holds no stale lock file.
    let hosts = sb.path("keel.db.hosts");
    let left: Vec<_> = std::fs::read_dir(&hosts).unwrap().flatten().collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn a_run_whose_keel_run_is_alive_is_left_to_it() {
    let sb = Sandbox::new();
    let scenario = sb.write("slow.json", SLOW);
    let (mut child, lines) = spawn(&sb, &scenario);
    let first = lines.recv_timeout(Duration::from_secs(30)).unwrap();
    let run = serde_json::from_str::<serde_json::Value>(&first).unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    std::thread::sleep(Duration::from_millis(200));
    let (code, out) = keel(&sb, "recover");
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains(&format!("skipped    {run}  owned by live host h")),
        "{out}"
    );
    assert!(out.contains("recover: 0 run(s) recovered"), "{out}");
    assert!(
        out.contains("1 owned by a live host, 0 need attention"),
        "{out}"
    );
    // The run goes on to its own end.
    assert!(child.wait().unwrap().success());
    let lines = stored(&sb, &run);
    assert_eq!(kind(lines.last().unwrap()), "run.completed");
    check_lifecycle_lines(&lines).unwrap();
    let (_, out) = keel(&sb, "verify");
    assert!(out.contains("1 ok, 0 incomplete"), "{out}");
}

#[test]
fn recover_refuses_a_missing_journal_without_creating_it() {
    let sb = Sandbox::new();
    let (code, _) = keel(&sb, "recover");
    assert_eq!(code, Some(2));
    assert!(!sb.db().exists());
    assert!(!sb.path("keel.db.hosts").exists());
}

/// Runs `cmd` to its end, killing it and failing the test if it is still
/// running after `within`; its exit code and stdout.
fn finishes_within(mut cmd: Command, within: Duration, what: &str) -> (Option<i32>, String) {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let until = Instant::now() + within;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() >= until {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} was still running after {within:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// Puts a FIFO, a symlink (to a regular file nobody locks) or a directory
/// where the dead host's lock file was.
fn plant(what: &str, lock: &std::path::Path) {
    std::fs::remove_file(lock).unwrap();
    match what {
        "FIFO" => {
            let ok = Command::new("mkfifo").arg(lock).status().unwrap().success();
            assert!(ok, "mkfifo");
        }
        "symlink" => {
            let target = lock.with_extension("target");
            std::fs::write(&target, "").unwrap();
            std::os::unix::fs::symlink(&target, lock).unwrap();
        }
        _ => std::fs::create_dir(lock).unwrap(),
    }
}

/// A run left `running` by a `keel run` killed with SIGKILL; its run id
/// and the lock file its host left behind.
fn abandoned_run(sb: &Sandbox) -> (String, std::path::PathBuf) {
    let scenario = sb.write("slow.json", SLOW);
    let (mut child, lines) = spawn(sb, &scenario);
    let first = lines.recv_timeout(Duration::from_secs(30)).unwrap();
    let run = serde_json::from_str::<serde_json::Value>(&first).unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    // Until `run.started` is journaled.
    let until = Instant::now() + Duration::from_secs(10);
    while !runs(sb).iter().any(|(id, _)| *id == run) {
        assert!(Instant::now() < until, "{run} never journaled");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let hosts = sb.path("keel.db.hosts");
    let mut locks: Vec<_> = std::fs::read_dir(&hosts)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "lock"))
        .collect();
    assert_eq!(locks.len(), 1, "{locks:?}");
    (run, locks.remove(0))
}

#[test]
fn a_lock_file_that_is_not_a_regular_file_hangs_neither_recover_nor_serve() {
    for what in ["FIFO", "symlink", "directory"] {
        let sb = Sandbox::new();
        let (run, lock) = abandoned_run(&sb);
        plant(what, &lock);
        let mut recover = Command::new(common::bin());
        recover.arg("recover").args(sb.db_args());
        let (code, out) = finishes_within(recover, Duration::from_secs(10), "keel recover");
        // Not a lock: the run needs attention, and nothing was opened as one.
        assert_eq!(code, Some(1), "{what}: {out}");
        assert!(
            out.contains(&format!("skipped    {run}  cannot check host h")),
            "{what}: {out}"
        );
        assert!(
            out.contains(&format!(
                "is a {what}, not a regular lock file (rule hosts.lock_file)"
            )),
            "{what}: {out}"
        );
        // `keel serve` recovers at startup, and starts.
        let mut serve = Command::new(common::bin());
        serve
            .arg("serve")
            .args(sb.db_args())
            .args(["--listen", "127.0.0.1:0"])
            .env_remove("KEEL_TOKEN");
        let mut child = serve
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let first = rx.recv_timeout(Duration::from_secs(10));
        let _ = child.kill();
        let _ = child.wait();
        let first = first.unwrap_or_else(|_| panic!("{what}: keel serve did not start in 10 s"));
        assert!(first.starts_with("listening on "), "{what}: {first}");
        assert!(
            std::fs::symlink_metadata(&lock).is_ok(),
            "{what}: a file that is not a lock was removed"
        );
    }
}
