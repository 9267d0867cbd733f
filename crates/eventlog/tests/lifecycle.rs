//! Lifecycle rules, one table row each, through the log's commit path.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
use common::*;
use keel_eventlog::*;

/// Commits `steps`; all but the last must be accepted. The last must be
/// refused with `rule` (or accepted when `rule` is None). A refusal must
/// change nothing: the next sequence stays the same.
fn check(row: &str, steps: Vec<Payload>, rule: Option<&str>) {
    let log = log_with(LogConfig {
        max_open_scopes: 4,
        ..LogConfig::default()
    })
    .0;
    let (last, head) = steps.split_last().unwrap();
    for p in head {
        log.commit(p)
            .unwrap_or_else(|e| panic!("row {row}: setup step {:?}: {e}", p.kind()));
    }
    let before = log.stats();
    let open_before = log.open_scopes();
    match (log.commit(last), rule) {
        (Ok(_), None) => {}
        (Ok(e), Some(rule)) => panic!("row {row}: accepted {e}, wanted {rule}"),
        (Err(e), None) => panic!("row {row}: refused: {e}"),
        (Err(e), Some(rule)) => {
            assert!(matches!(e, CommitError::Lifecycle(_)), "row {row}: {e:?}");
            assert!(
                e.to_string().contains(&format!("(rule {rule})")),
                "row {row}: {e}"
            );
            assert_eq!(log.stats(), before, "row {row}: a refusal changed the log");
            assert_eq!(log.open_scopes(), open_before, "row {row}");
        }
    }
}

#[test]
fn lifecycle_rules() {
    let rows: Vec<(&str, Vec<Payload>, Option<&str>)> = vec![
        ("run starts", vec![run_started()], None),
        (
            "turn before run",
            vec![turn_started(1)],
            Some("lifecycle.run_first"),
        ),
        (
            "second run start",
            vec![run_started(), run_started()],
            Some("lifecycle.unique_start"),
        ),
        (
            "terminal without start",
            vec![run_started(), turn_completed(1)],
            Some("lifecycle.terminal_without_start"),
        ),
        (
            "model terminal without start",
            vec![run_started(), turn_started(1), model_completed(1, "op_1")],
            Some("lifecycle.terminal_without_start"),
        ),
        (
            "second terminal",
            vec![
                run_started(),
                turn_started(1),
                tool_started(1, "c1"),
                tool_completed(1, "c1"),
                tool_cancelled(1, "c1"),
            ],
            Some("lifecycle.one_terminal"),
        ),
        (
            "second turn terminal",
            vec![
                run_started(),
                turn_started(1),
                turn_completed(1),
                turn_cancelled(1),
            ],
            Some("lifecycle.one_terminal"),
        ),
        (
            "duplicate tool start",
            vec![
                run_started(),
                turn_started(1),
                tool_started(1, "c1"),
                tool_completed(1, "c1"),
                tool_started(1, "c1"),
            ],
            Some("lifecycle.unique_start"),
        ),
        (
            "duplicate open model start",
            vec![
                run_started(),
                turn_started(1),
                model_started(1, "op_1"),
                model_started(1, "op_1"),
            ],
            Some("lifecycle.unique_start"),
        ),
        (
            "turn number reused",
            vec![
                run_started(),
                turn_started(2),
                turn_completed(2),
                turn_started(2),
            ],
            Some("lifecycle.unique_start"),
        ),
        (
            "turn number goes back",
            vec![
                run_started(),
                turn_started(2),
                turn_completed(2),
                turn_started(1),
            ],
            Some("lifecycle.unique_start"),
        ),
        (
            "next turn",
            vec![
                run_started(),
                turn_started(1),
                turn_completed(1),
                turn_started(2),
            ],
            None,
        ),
        (
            "same call id in a later turn",
            vec![
                run_started(),
                turn_started(1),
                tool_started(1, "c1"),
                tool_completed(1, "c1"),
                turn_completed(1),
                turn_started(2),
                tool_started(2, "c1"),
            ],
            None,
        ),
        (
            "parent before children",
            vec![
                run_started(),
                turn_started(1),
                model_started(1, "op_1"),
                turn_completed(1),
            ],
            Some("lifecycle.children_first"),
        ),
        (
            "run before turn",
            vec![run_started(), turn_started(1), run_completed()],
            Some("lifecycle.children_first"),
        ),
        (
            "anything after run end",
            vec![run_started(), run_completed(), note()],
            Some("lifecycle.nothing_after_run"),
        ),
        (
            "start after run end",
            vec![run_started(), run_cancelled(), turn_started(1)],
            Some("lifecycle.nothing_after_run"),
        ),
        (
            "tool outside a turn",
            vec![run_started(), tool_started(1, "c1")],
            Some("lifecycle.nesting"),
        ),
        (
            "tool in another turn",
            vec![run_started(), turn_started(1), tool_started(2, "c1")],
            Some("lifecycle.nesting"),
        ),
        (
            "two turns at once",
            vec![run_started(), turn_started(1), turn_started(2)],
            Some("lifecycle.one_turn_at_a_time"),
        ),
        (
            "delta outside its model call",
            vec![run_started(), turn_started(1), delta(1, "op_1", "hi")],
            Some("lifecycle.in_open_scope"),
        ),
        (
            "delta after its model call ended",
            vec![
                run_started(),
                turn_started(1),
                model_started(1, "op_1"),
                model_completed(1, "op_1"),
                delta(1, "op_1", "hi"),
            ],
            Some("lifecycle.in_open_scope"),
        ),
        (
            "delta inside its model call",
            vec![
                run_started(),
                turn_started(1),
                model_started(1, "op_1"),
                delta(1, "op_1", "hi"),
            ],
            None,
        ),
        (
            "too many open scopes",
            vec![
                run_started(),
                turn_started(1),
                tool_started(1, "a"),
                tool_started(1, "b"),
                tool_started(1, "c"),
            ],
            Some("limits.open_scopes"),
        ),
    ];
    for (row, steps, rule) in rows {
        check(row, steps, rule);
    }
}

#[test]
fn open_scopes_are_reported_innermost_first() {
    let log = log();
    commit_all(
        &log,
        &[
            run_started(),
            turn_started(1),
            model_started(1, "op_1"),
            tool_started(1, "c1"),
        ],
    );
    let open = log.open_scopes();
    assert_eq!(
        open,
        vec![
            ScopeKey::Tool {
                turn: 1,
                call_id: call("c1")
            },
            ScopeKey::Model {
                turn: 1,
                operation_id: op("op_1")
            },
            ScopeKey::Turn(1),
            ScopeKey::Run,
        ]
    );
    // Closing them in that order (as cancellation does) is always accepted.
    commit_all(
        &log,
        &[
            tool_cancelled(1, "c1"),
            model_cancelled(1, "op_1"),
            turn_cancelled(1),
            run_cancelled(),
        ],
    );
    assert!(log.run_ended());
    assert!(log.open_scopes().is_empty());
}

#[test]
fn every_terminal_of_every_scope_closes_it() {
    use keel_eventlog::Terminal::*;
    for terminal in [Completed, Failed, Cancelled] {
        let log = log();
        let err = ErrorText::new("boom");
        let steps = vec![
            run_started(),
            turn_started(1),
            model_started(1, "op_1"),
            match terminal {
                Completed => model_completed(1, "op_1"),
                Failed => Payload::ModelFailed(ModelFailed {
                    turn: 1,
                    operation_id: op("op_1"),
                    problem: ProblemRecord {
                        kind: keel_stream::ProblemKind::Overloaded,
                        message: err.clone(),
                        retryable: true,
                        retry_after_ms: None,
                        extra: Extra::new(),
                    },
                    position: keel_stream::RetryPosition::Pristine,
                    extra: Extra::new(),
                }),
                Cancelled => model_cancelled(1, "op_1"),
            },
            match terminal {
                Completed => turn_completed(1),
                Failed => Payload::TurnFailed(TurnFailed {
                    turn: 1,
                    error: err.clone(),
                    cause: None,
                    extra: Extra::new(),
                }),
                Cancelled => turn_cancelled(1),
            },
            match terminal {
                Completed => run_completed(),
                Failed => Payload::RunFailed(RunFailed {
                    error: err.clone(),
                    cause: None,
                    extra: Extra::new(),
                }),
                Cancelled => run_cancelled(),
            },
        ];
        commit_all(&log, &steps);
        assert!(log.run_ended(), "{terminal:?}");
    }
}
