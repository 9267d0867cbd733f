//! `verify_run`, `keel verify`'s check of one stored run: each rule it
//! names, and the two verdicts.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use keel_message::RunId;
use keel_observers::{RunStatus, StoredRun};
use keel_testkit::{Verdict, VerifyViolation, verify_run};

fn id(run: &str) -> RunId {
    RunId::parse(run).unwrap()
}

fn line(kind: &str, run: &str, seq: u64, ts: u64) -> String {
    format!(r#"{{"kind":"{kind}","payload":{{}},"run_id":"{run}","seq":{seq},"ts":{ts}}}"#)
}

/// run.started, turn 1 started and completed, run.completed.
fn completed() -> Vec<String> {
    vec![
        line("run.started", "run_1", 1, 5),
        r#"{"kind":"turn.started","payload":{"turn":1},"run_id":"run_1","seq":2,"ts":6}"#.into(),
        r#"{"kind":"turn.completed","payload":{"turn":1},"run_id":"run_1","seq":3,"ts":7}"#.into(),
        line("run.completed", "run_1", 4, 8),
    ]
}

fn rule(result: Result<Verdict, VerifyViolation>) -> (u64, &'static str) {
    let v = result.expect_err("a violation");
    assert!(v.to_string().starts_with(&format!(
        "run {} seq {}: rule {}: ",
        v.run_id, v.seq, v.rule
    )));
    (v.seq, v.rule)
}

#[test]
fn a_closed_run_whose_record_agrees_is_ok() {
    let lines = completed();
    let stored = StoredRun::new(4, RunStatus::Completed);
    assert_eq!(verify_run(&id("run_1"), stored, &lines), Ok(Verdict::Ok));
}

#[test]
fn a_running_prefix_is_incomplete_with_its_open_scopes() {
    let lines = &completed()[..2];
    let stored = StoredRun::new(2, RunStatus::Running);
    assert_eq!(
        verify_run(&id("run_1"), stored, lines),
        Ok(Verdict::Incomplete { open: 2 })
    );
}

/// A record that disagrees with the lines breaks the rule named, at the
/// seq named, with the detail named.
#[test]
fn a_record_disagreeing_with_the_lines_names_its_rule() {
    let all = completed();
    let cases: [(StoredRun, &[String], u64, &str, &str); 3] = [
        (
            StoredRun::new(2, RunStatus::Failed),
            &all[..2],
            2,
            "lifecycle.closed",
            "status failed but 2 scope(s) are still open",
        ),
        (
            StoredRun::new(4, RunStatus::Cancelled),
            &all,
            4,
            "runs.status",
            "the log ends with run.completed, the runs table says cancelled",
        ),
        (
            StoredRun::new(5, RunStatus::Completed),
            &all,
            5,
            "runs.last_seq",
            "the runs table says last_seq 5, the journal holds 4 events",
        ),
    ];
    for (stored, lines, seq, rule, detail) in cases {
        let v = verify_run(&id("run_1"), stored, lines).unwrap_err();
        assert_eq!((v.seq, v.rule, v.detail.as_str()), (seq, rule, detail));
    }
}

#[test]
fn lines_of_another_run_break_event_run_id() {
    let lines = completed();
    let stored = StoredRun::new(4, RunStatus::Completed);
    let v = verify_run(&id("run_2"), stored, &lines).unwrap_err();
    assert_eq!(v.run_id, id("run_2"));
    assert_eq!((v.seq, v.rule), (1, "event.run_id"));
    assert_eq!(v.detail, "the event belongs to run run_1");
}

#[test]
fn envelope_rules_are_named() {
    let stored = StoredRun::new(4, RunStatus::Completed);
    let with = |at: usize, line: String| {
        let mut lines = completed();
        lines[at] = line;
        lines
    };
    let mut gap = completed();
    gap.remove(1);
    let spaced = completed()[3].replacen(',', ", ", 1);
    let cases: [(Vec<String>, u64, &str); 5] = [
        (Vec::new(), 1, "seq.contiguous"),
        (gap, 2, "seq.contiguous"),
        (
            with(
                2,
                r#"{"kind":"turn.completed","payload":{"turn":1},"run_id":"run_1","seq":3,"ts":1}"#
                    .into(),
            ),
            3,
            "event.ts_monotonic",
        ),
        (
            with(
                1,
                r#"{"kind":"turn.started","payload":{"turn":1},"run_id":"run_2","seq":2,"ts":6}"#
                    .into(),
            ),
            2,
            "event.run_id",
        ),
        (with(3, spaced), 4, "event.canonical"),
    ];
    for (lines, seq, name) in cases {
        assert_eq!(rule(verify_run(&id("run_1"), stored, &lines)), (seq, name));
    }
}

#[test]
fn a_lifecycle_rule_is_named_by_the_tracker() {
    let mut lines = completed();
    lines[2] =
        r#"{"kind":"turn.completed","payload":{"turn":2},"run_id":"run_1","seq":3,"ts":7}"#.into();
    let stored = StoredRun::new(4, RunStatus::Completed);
    let (seq, rule) = rule(verify_run(&id("run_1"), stored, &lines));
    assert_eq!(seq, 3);
    assert!(rule.starts_with("lifecycle."), "{rule}");
}
