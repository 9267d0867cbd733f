//! `keel replay`: a stored run (retries, a partial failure, an uncertain
//! tool failure, a timed-out tool) replays `identical`; a scenario with a
//! lower retry limit reports the first diverging seq with both lines.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{Sandbox, example, keel};

/// Runs `examples/failures.json` into the sandbox's journal; its run id.
fn stored_run(sb: &Sandbox) -> String {
    let out = keel()
        .arg("run")
        .arg(example("failures.json"))
        .args(sb.db_args())
        .arg("--json")
        .output()
        .unwrap();
    let first = String::from_utf8(out.stdout).unwrap();
    let line: serde_json::Value = serde_json::from_str(first.lines().next().unwrap()).unwrap();
    line["run_id"].as_str().unwrap().to_owned()
}

#[test]
fn a_stored_run_replays_identical_and_leaves_the_journal_alone() {
    let sb = Sandbox::new();
    let run_id = stored_run(&sb);
    // What the journal holds, as its readers see it (the file's bytes
    // may change: opening a WAL journal checkpoints it).
    let stored = || {
        let runs = keel()
            .arg("runs")
            .args(sb.db_args())
            .output()
            .unwrap()
            .stdout;
        let events = keel()
            .args(["events", &run_id])
            .args(sb.db_args())
            .output()
            .unwrap()
            .stdout;
        (runs, events)
    };
    let before = stored();
    // The scenario is the composition: its retry policy restarts partial
    // failures, which the default policy does not.
    let out = keel()
        .args(["replay", &run_id, "--scenario"])
        .arg(example("failures.json"))
        .args(sb.db_args())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.trim(), "identical");
    assert_eq!(stored(), before, "nothing stored");
}

#[test]
fn a_lower_retry_limit_reports_the_first_diverging_seq_with_both_lines() {
    let sb = Sandbox::new();
    let run_id = stored_run(&sb);
    let mut scenario: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(example("failures.json")).unwrap()).unwrap();
    scenario["limits"]["retry"]["max_attempts"] = serde_json::json!(1);
    let file = sb.write("one_attempt.json", &scenario.to_string());
    let out = keel()
        .args(["replay", &run_id, "--scenario"])
        .arg(&file)
        .args(sb.db_args())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    // seq 5 is the retry's model.started in the recording; the replay
    // gives up after the first failure instead.
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "diverges at seq 6", "{stdout}");
    assert!(
        lines[1].starts_with("recorded: ") && lines[1].contains("\"model.started\""),
        "{stdout}"
    );
    assert!(
        lines[2].starts_with("replayed: ") && lines[2].contains("\"turn.failed\""),
        "{stdout}"
    );
}

#[test]
fn an_unknown_run_is_bad_input() {
    let sb = Sandbox::new();
    stored_run(&sb);
    let out = keel()
        .args(["replay", "run_nope"])
        .args(sb.db_args())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown run run_nope"));
}
