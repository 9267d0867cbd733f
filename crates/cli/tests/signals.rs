#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Ctrl-C and crashes: `keel run` interrupted by SIGINT at a random point
//! cancels cleanly (exit 130, cancelled terminals journaled); killed by
//! SIGKILL at a random point, it leaves a journal that `keel verify`
//! accepts, each run a contiguous prefix of what it would have been.
//!
//! Timings are random but seeded: the seed is printed, and
//! `KEEL_TEST_SEED=<seed>` replays it.
#![cfg(unix)]

mod common;

use common::{Rng, Sandbox, kind, text};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Four turns, one tool call in each of the first three: a deterministic
/// sequence of kinds, about 1.5 s long, streaming all the way.
const SLOW: &str = r#"{
  "model": "scripted-1",
  "messages": [{"role": "user", "text": "count slowly"}],
  "tools": [{"name": "wait", "script": [
    {"delay_ms": 150, "ok": "one"}, {"delay_ms": 150, "ok": "two"}, {"delay_ms": 150, "ok": "three"}]}],
  "provider": {"type": "scripted", "calls": [
    [{"delay_ms": 50}, {"text": "a"}, {"delay_ms": 40}, {"text": "b"}, {"delay_ms": 40}, {"text": "c"},
     {"delay_ms": 40}, {"text": "d"}, {"tool_call": {"call_id": "c1", "name": "wait", "arguments": {}}},
     {"complete": {"finish": "tool_calls", "usage": {"input_tokens": 5, "output_tokens": 5}}}],
    [{"delay_ms": 50}, {"text": "e"}, {"delay_ms": 40}, {"text": "f"}, {"delay_ms": 40}, {"text": "g"},
     {"delay_ms": 40}, {"text": "h"}, {"tool_call": {"call_id": "c2", "name": "wait", "arguments": {}}},
     {"complete": {"finish": "tool_calls", "usage": {"input_tokens": 5, "output_tokens": 5}}}],
    [{"delay_ms": 50}, {"text": "i"}, {"delay_ms": 40}, {"text": "j"}, {"delay_ms": 40}, {"text": "k"},
     {"delay_ms": 40}, {"text": "l"}, {"tool_call": {"call_id": "c3", "name": "wait", "arguments": {}}},
     {"complete": {"finish": "tool_calls", "usage": {"input_tokens": 5, "output_tokens": 5}}}],
    [{"delay_ms": 50}, {"text": "m"}, {"delay_ms": 40}, {"text": "n"}, {"delay_ms": 40}, {"text": "o"},
     {"delay_ms": 40}, {"text": "p"}, {"complete": {"finish": "stop", "usage": {"input_tokens": 5, "output_tokens": 5}}}]
  ]}
}"#;

/// A running `keel run --json` whose stdout lines are collected.
struct Live {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    first: mpsc::Receiver<()>,
    reader: std::thread::JoinHandle<()>,
}

fn spawn(sb: &Sandbox, scenario: &std::path::Path) -> Live {
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
    let lines = Arc::new(Mutex::new(Vec::new()));
    let (tx, first) = mpsc::channel();
    let sink = Arc::clone(&lines);
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            sink.lock().unwrap().push(line);
            let _ = tx.send(());
        }
    });
    Live {
        child,
        lines,
        first,
        reader,
    }
}

impl Live {
    fn finish(mut self) -> (std::process::ExitStatus, Vec<String>) {
        let status = self.child.wait().unwrap();
        self.reader.join().unwrap();
        let lines = self.lines.lock().unwrap().clone();
        (status, lines)
    }
}

fn verify_clean(sb: &Sandbox) -> String {
    let out = common::keel()
        .arg("verify")
        .args(sb.db_args())
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "verify: {stderr}\n{stdout}");
    stdout
}

/// `(run_id, status)` of every stored run.
fn runs(sb: &Sandbox) -> Vec<(String, String)> {
    let out = common::keel()
        .arg("runs")
        .args(sb.db_args())
        .output()
        .unwrap();
    if out.status.code() == Some(2) {
        return Vec::new(); // no journal yet (killed before it was created)
    }
    text(&out)
        .0
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

#[test]
fn sigint_at_a_random_point_cancels_cleanly_with_exit_130() {
    let mut rng = Rng::from_env("sigint");
    let sb = Sandbox::new();
    let scenario = sb.write("slow.json", SLOW);
    let rounds = 5;
    for round in 0..rounds {
        let live = spawn(&sb, &scenario);
        // The handler is installed before anything is printed: wait for
        // run.started, then interrupt somewhere in the run.
        live.first
            .recv_timeout(Duration::from_secs(30))
            .expect("the run started");
        let delay = rng.between(50, 400);
        std::thread::sleep(Duration::from_millis(delay));
        let killed = Command::new("kill")
            .args(["-INT", &live.child.id().to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        let (status, printed) = live.finish();
        assert_eq!(
            status.code(),
            Some(130),
            "round {round}, SIGINT after {delay} ms"
        );
        let run_id: String =
            serde_json::from_str::<serde_json::Value>(&printed[0]).unwrap()["run_id"]
                .as_str()
                .unwrap()
                .to_owned();
        // Every event the run committed, the cancelled terminals included,
        // is journaled: the live output equals the stored lines.
        let stored = sb.ok(&["events", &run_id]);
        assert_eq!(
            stored.lines().collect::<Vec<_>>(),
            printed,
            "round {round}, SIGINT after {delay} ms"
        );
        assert_eq!(kind(printed.last().unwrap()), "run.cancelled");
        let statuses = runs(&sb);
        assert!(
            statuses.contains(&(run_id.clone(), "cancelled".to_owned())),
            "{statuses:?}"
        );
    }
    let report = verify_clean(&sb);
    assert!(
        report.contains(&format!("{rounds} run(s): {rounds} ok, 0 incomplete")),
        "{report}"
    );
}

#[test]
fn a_second_sigint_exits_at_once_and_the_journal_stays_valid() {
    let sb = Sandbox::new();
    let scenario = sb.write("slow.json", SLOW);
    let live = spawn(&sb, &scenario);
    live.first.recv_timeout(Duration::from_secs(30)).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let pid = live.child.id().to_string();
    for _ in 0..2 {
        Command::new("kill").args(["-INT", &pid]).status().unwrap();
        std::thread::sleep(Duration::from_millis(5));
    }
    let (status, _) = live.finish();
    assert_eq!(status.code(), Some(130));
    verify_clean(&sb);
    let statuses = runs(&sb);
    assert_eq!(statuses.len(), 1);
    assert!(
        ["cancelled", "running"].contains(&statuses[0].1.as_str()),
        "{statuses:?}"
    );
}

#[test]
fn sigkill_at_random_points_leaves_contiguous_prefixes_that_verify_accepts() {
    let mut rng = Rng::from_env("sigkill");
    let sb = Sandbox::new();
    let scenario = sb.write("slow.json", SLOW);
    // The reference: the same scenario, run to completion.
    let reference = spawn(&sb, &scenario);
    let (status, reference) = reference.finish();
    assert!(status.success());
    let reference_kinds: Vec<String> = reference.iter().map(|l| kind(l)).collect();
    let started = Instant::now();
    let kills = 24;
    let (mut incomplete, mut empty) = (0, 0);
    let mut known: Vec<String> = runs(&sb).into_iter().map(|(id, _)| id).collect();
    for round in 0..kills {
        let mut live = spawn(&sb, &scenario);
        let delay = rng.between(0, 1200);
        std::thread::sleep(Duration::from_millis(delay));
        live.child.kill().unwrap();
        let (_, printed) = live.finish();
        verify_clean(&sb);
        let new: Vec<(String, String)> = runs(&sb)
            .into_iter()
            .filter(|(id, _)| !known.contains(id))
            .collect();
        assert!(new.len() <= 1, "{new:?}");
        let Some((run_id, status)) = new.into_iter().next() else {
            empty += 1; // killed before run.started was journaled
            continue;
        };
        known.push(run_id.clone());
        if status == "running" {
            incomplete += 1;
        }
        let stored: Vec<String> = sb
            .ok(&["events", &run_id])
            .lines()
            .map(str::to_owned)
            .collect();
        // Contiguous from 1 ...
        for (i, line) in stored.iter().enumerate() {
            let event = keel_eventlog::Event::decode(line).unwrap();
            assert_eq!(event.seq(), i as u64 + 1, "round {round}: {line}");
        }
        // ... and a prefix of the run it would have been ...
        let kinds: Vec<String> = stored.iter().map(|l| kind(l)).collect();
        assert!(
            reference_kinds.starts_with(&kinds),
            "round {round} (kill after {delay} ms): {kinds:?}"
        );
        // ... agreeing with what the process printed before it died.
        for (a, b) in stored.iter().zip(&printed) {
            assert_eq!(a, b, "round {round}");
        }
    }
    eprintln!(
        "sigkill: {kills} kills in {:?}: {incomplete} incomplete, {empty} before any event",
        started.elapsed()
    );
    let report = verify_clean(&sb);
    assert!(report.contains("0 violations"), "{report}");
}
