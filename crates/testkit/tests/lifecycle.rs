//! The lifecycle checker and the kind assertions: every violation it
//! names, and the summaries it returns.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use keel_eventlog::*;
use keel_message::{CallId, OperationId, ToolName};
use keel_testkit::events::{self, ModelAttempt, ToolUse};
use keel_testkit::*;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

fn line(kind: &str, payload: &str, run: &str, seq: u64, ts: u64) -> String {
    format!(r#"{{"kind":"{kind}","payload":{payload},"run_id":"{run}","seq":{seq},"ts":{ts}}}"#)
}

fn decode(lines: &[String]) -> Vec<Arc<Event>> {
    lines
        .iter()
        .map(|l| Arc::new(Event::decode(l).unwrap_or_else(|e| panic!("{l}: {e}"))))
        .collect()
}

/// A run with a turn, a model call with a delta and a tool call, a tool
/// that fails, and a cancelled second turn.
fn full_run() -> Vec<Arc<Event>> {
    let (log, _) = log();
    let model = ModelAttempt::new(1, OperationId::parse("op_1").unwrap());
    let tool = ToolUse::new(
        1,
        CallId::parse("c1").unwrap(),
        ToolName::parse("get_weather").unwrap(),
    );
    commit_all(
        &log,
        &[
            events::run_started(),
            events::turn_started(1),
            model.started(keel_message::ModelName::parse("scripted-1").unwrap()),
            model.text("Checking."),
            model.tool_call(&tool, keel_message::CanonicalJson::parse("{}").unwrap()),
            model.completed(keel_stream::FinishReason::ToolCalls, None),
            tool.started(),
            tool.failed("timed out", Some(ToolOutcome::Uncertain), None),
            events::turn_completed(1),
            events::turn_started(2),
            events::turn_cancelled(2),
            events::run_cancelled(),
        ],
    )
}

#[test]
fn a_valid_run_is_summarised() {
    let events = full_run();
    let summary = check_lifecycle(&events).unwrap();
    assert_eq!(summary, assert_lifecycle(&events));
    assert_eq!(summary.run_id().as_str(), "run_1");
    assert_eq!(summary.events(), 12);
    assert_eq!(summary.outcome(), Terminal::Cancelled);
    assert_eq!(summary.started(Scope::Turn), 2);
    assert_eq!(summary.started(Scope::Interaction), 0);
    assert_eq!(summary.terminals(Scope::Turn, Terminal::Completed), 1);
    assert_eq!(summary.terminals(Scope::Turn, Terminal::Cancelled), 1);
    assert_eq!(summary.terminals(Scope::Tool, Terminal::Failed), 1);
    assert_eq!(summary.terminals(Scope::Model, Terminal::Completed), 1);
    assert_eq!(summary.terminals(Scope::Run, Terminal::Cancelled), 1);
    assert_eq!(summary.all_terminals().values().sum::<usize>(), 5);
    assert_eq!((summary.text_deltas(), summary.tool_calls()), (1, 1));
    assert_kinds(
        &events,
        &[
            "run.started",
            "turn.started",
            "model.started",
            "model.text_delta",
            "model.tool_call",
            "model.completed",
            "tool.started",
            "tool.failed",
            "turn.completed",
            "turn.started",
            "turn.cancelled",
            "run.cancelled",
        ],
    );
    // The lines check the same.
    let lines: Vec<&str> = events.iter().map(|e| e.line()).collect();
    assert_eq!(check_lifecycle_lines(&lines).unwrap(), summary);
}

#[test]
fn sequences_must_be_contiguous_from_one() {
    let events = full_run();
    assert_eq!(check_lifecycle(&[]), Err(LifecycleViolation::Empty));
    assert_eq!(
        check_lifecycle(&events[1..]),
        Err(LifecycleViolation::Seq {
            index: 0,
            expected: 1,
            found: 2
        })
    );
    let mut gap = events.clone();
    gap.remove(3);
    assert_eq!(
        check_lifecycle(&gap),
        Err(LifecycleViolation::Seq {
            index: 3,
            expected: 4,
            found: 5
        })
    );
    let mut repeat = events.clone();
    repeat.insert(2, events[1].clone());
    assert!(matches!(
        check_lifecycle(&repeat),
        Err(LifecycleViolation::Seq {
            index: 2,
            found: 2,
            ..
        })
    ));
}

#[test]
fn one_run_only() {
    let lines = vec![
        line("run.started", "{}", "run_1", 1, 5),
        line("run.completed", "{}", "run_2", 2, 5),
    ];
    let err = check_lifecycle(&decode(&lines)).unwrap_err();
    assert!(
        matches!(err, LifecycleViolation::RunId { seq: 2, .. }),
        "{err}"
    );
    assert_eq!(err.to_string(), "seq 2 belongs to run run_2, not run_1");
}

#[test]
fn timestamps_never_decrease() {
    let lines = vec![
        line("run.started", "{}", "run_1", 1, 10),
        line("run.completed", "{}", "run_1", 2, 9),
    ];
    assert_eq!(
        check_lifecycle(&decode(&lines)),
        Err(LifecycleViolation::TsBackwards {
            seq: 2,
            previous: 10,
            found: 9
        })
    );
}

#[test]
fn lines_must_be_canonical() {
    let lines = [
        line("run.started", "{}", "run_1", 1, 10),
        // Members out of order: decodes as JSON, but not canonical.
        r#"{"payload":{},"kind":"run.completed","run_id":"run_1","seq":2,"ts":10}"#.to_owned(),
    ];
    let err = check_lifecycle_lines(&lines).unwrap_err();
    assert!(
        matches!(err, LifecycleViolation::NotCanonical { seq: 2, .. }),
        "{err}"
    );
}

#[test]
fn lifecycle_rules_are_enforced_in_order() {
    let cases: Vec<(Vec<String>, u64, &str)> = vec![
        (
            vec![
                line("run.started", "{}", "run_1", 1, 1),
                line("turn.started", r#"{"turn":1}"#, "run_1", 2, 1),
                line("turn.completed", r#"{"turn":1}"#, "run_1", 3, 1),
                line("turn.failed", r#"{"error":"x","turn":1}"#, "run_1", 4, 1),
            ],
            4,
            "lifecycle.one_terminal",
        ),
        (
            vec![
                line("run.started", "{}", "run_1", 1, 1),
                line("turn.started", r#"{"turn":1}"#, "run_1", 2, 1),
                line("run.completed", "{}", "run_1", 3, 1),
            ],
            3,
            "lifecycle.children_first",
        ),
        (
            vec![
                line("run.started", "{}", "run_1", 1, 1),
                line(
                    "tool.started",
                    r#"{"call_id":"c1","tool":"t","turn":1}"#,
                    "run_1",
                    2,
                    1,
                ),
            ],
            2,
            "lifecycle.nesting",
        ),
        (
            vec![
                line("run.started", "{}", "run_1", 1, 1),
                line("run.completed", "{}", "run_1", 2, 1),
                line("run.completed", "{}", "run_1", 3, 1),
            ],
            3,
            "lifecycle.nothing_after_run",
        ),
        (
            vec![line("turn.started", r#"{"turn":1}"#, "run_1", 1, 1)],
            1,
            "lifecycle.run_first",
        ),
        (
            vec![
                line("run.started", "{}", "run_1", 1, 1),
                line("turn.started", r#"{"turn":1}"#, "run_1", 2, 1),
                line(
                    "model.text_delta",
                    r#"{"operation_id":"op_1","text":"a","turn":1}"#,
                    "run_1",
                    3,
                    1,
                ),
            ],
            3,
            "lifecycle.in_open_scope",
        ),
        (
            tool_terminal(r#""tool":"get_time""#, 1),
            4,
            "lifecycle.same_identity",
        ),
        (
            tool_terminal(r#""tool":"get_weather""#, 2),
            4,
            "lifecycle.terminal_without_start",
        ),
        (
            model_terminal(r#""operation_id":"op_2","turn":1"#),
            4,
            "lifecycle.terminal_without_start",
        ),
        (
            model_terminal(r#""operation_id":"op_1","turn":2"#),
            4,
            "lifecycle.terminal_without_start",
        ),
    ];
    for (lines, seq, rule) in cases {
        for err in [
            check_lifecycle(&decode(&lines)).unwrap_err(),
            check_lifecycle_lines(&lines).unwrap_err(),
        ] {
            let LifecycleViolation::Lifecycle { seq: at, error, .. } = &err else {
                panic!("{rule}: {err}")
            };
            assert_eq!(*at, seq, "{rule}");
            assert_eq!(error.rule(), rule, "{err}");
            assert!(err.to_string().contains(rule), "{rule}: {err}");
        }
        // assert_lifecycle panics naming the rule and the line.
        let events = decode(&lines);
        let panic = catch_unwind(AssertUnwindSafe(|| assert_lifecycle(&events))).unwrap_err();
        let message = panic.downcast_ref::<String>().unwrap();
        assert!(message.contains(&format!("(rule {rule})")), "{message}");
        assert!(message.contains(&lines[seq as usize - 1]), "{message}");
    }
}

/// A run whose tool c1 starts as `get_weather` in turn 1, then a
/// `tool.completed` naming `identity` (its tool) in `turn`, seq 4.
fn tool_terminal(identity: &str, turn: u64) -> Vec<String> {
    vec![
        line("run.started", "{}", "run_1", 1, 1),
        line("turn.started", r#"{"turn":1}"#, "run_1", 2, 1),
        line(
            "tool.started",
            r#"{"call_id":"c1","tool":"get_weather","turn":1}"#,
            "run_1",
            3,
            1,
        ),
        line(
            "tool.completed",
            &format!(r#"{{"call_id":"c1","output":"3 C",{identity},"turn":{turn}}}"#),
            "run_1",
            4,
            1,
        ),
    ]
}

/// A run whose model call op_1 starts in turn 1, then a `model.completed`
/// naming `identity` (its operation id and turn), seq 4.
fn model_terminal(identity: &str) -> Vec<String> {
    vec![
        line("run.started", "{}", "run_1", 1, 1),
        line("turn.started", r#"{"turn":1}"#, "run_1", 2, 1),
        line(
            "model.started",
            r#"{"attempt":1,"model":"m","operation_id":"op_1","turn":1}"#,
            "run_1",
            3,
            1,
        ),
        line(
            "model.completed",
            &format!(r#"{{"finish":"stop",{identity}}}"#),
            "run_1",
            4,
            1,
        ),
    ]
}

#[test]
fn a_tool_terminal_naming_its_tool_passes() {
    let mut lines = tool_terminal(r#""tool":"get_weather""#, 1);
    lines.push(line("turn.completed", r#"{"turn":1}"#, "run_1", 5, 1));
    lines.push(line("run.completed", "{}", "run_1", 6, 1));
    let summary = check_lifecycle_lines(&lines).unwrap();
    assert_eq!(summary.terminals(Scope::Tool, Terminal::Completed), 1);
}

#[test]
fn every_scope_must_be_closed_at_the_end() {
    let events = full_run();
    let err = check_lifecycle(&events[..10]).unwrap_err();
    assert_eq!(
        err,
        LifecycleViolation::Unclosed {
            last_seq: 10,
            open: vec![
                keel_eventlog::ScopeKey::Turn(2),
                keel_eventlog::ScopeKey::Run
            ],
        }
    );
    assert_eq!(
        err.to_string(),
        "the log ends at seq 10 with 2 scope(s) open: turn 2, run"
    );
}

#[test]
fn assert_lifecycle_panics_with_the_violation_and_the_line() {
    let events = full_run();
    let panic = catch_unwind(AssertUnwindSafe(|| assert_lifecycle(&events[..11]))).unwrap_err();
    let message = panic.downcast_ref::<String>().unwrap();
    assert!(message.contains("lifecycle violation"), "{message}");
    assert!(message.contains("scope(s) open: run"), "{message}");
    assert!(message.contains(r#""kind":"turn.cancelled""#), "{message}");
}

#[test]
fn assert_kinds_names_the_first_difference() {
    let events = full_run();
    assert_eq!(kinds(&events[..2]), ["run.started", "turn.started"]);
    let panic = catch_unwind(AssertUnwindSafe(|| {
        assert_kinds(
            &events[..3],
            &["run.started", "turn.started", "tool.started"],
        )
    }))
    .unwrap_err();
    let message = panic.downcast_ref::<String>().unwrap();
    assert!(
        message.starts_with("event kinds differ at seq 3"),
        "{message}"
    );
    assert!(message.contains(">   3  tool.started"), "{message}");
    assert!(message.contains("model.started"), "{message}");
    // Length differences too.
    assert!(
        catch_unwind(AssertUnwindSafe(|| assert_kinds(
            &events[..2],
            &["run.started"]
        )))
        .is_err()
    );
    assert!(
        catch_unwind(AssertUnwindSafe(|| assert_kinds(
            &events[..0],
            &["run.started"]
        )))
        .is_err()
    );
    assert_kinds(&[], &[]);
}
