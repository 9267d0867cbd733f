//! Lifecycle rules, one table row each, through the log's commit path.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
use common::*;
use keel_eventlog::*;
use std::sync::Arc;

fn config() -> LogConfig {
    LogConfig {
        max_open_scopes: 4,
        ..LogConfig::default()
    }
}

/// Commits `steps`; all but the last must be accepted. The last must be
/// refused with `rule` (or accepted when `rule` is None). A refusal must
/// change nothing: the next sequence stays the same.
///
/// Every other path that feeds the tracker must judge the last step the
/// same way: a log restored from a snapshot of the steps before it (its
/// JSON Lines round trip), `RunLog::import` and `Snapshot::from_events` of
/// all the lines (the last one written by hand).
fn check(row: &str, steps: Vec<Payload>, rule: Option<&str>) {
    let log = log_with(config()).0;
    let (last, head) = steps.split_last().unwrap();
    for p in head {
        log.commit(p)
            .unwrap_or_else(|e| panic!("row {row}: setup step {:?}: {e}", p.kind()));
    }
    let snapshot = Snapshot::from_jsonl(&log.snapshot().to_jsonl()).unwrap();
    let mut lines: Vec<String> = log
        .retained_after(0)
        .iter()
        .map(|e| e.line().to_owned())
        .collect();
    let seq = lines.len() as u64 + 1;
    lines.push(line_of(last, seq, 1_767_225_600_000_000));
    let before = log.stats();
    let open_before = log.open_scopes();
    let starts_before = log.open_scope_starts();
    match (log.commit(last), rule) {
        (Ok(_), None) => {}
        (Ok(e), Some(rule)) => panic!("row {row}: accepted {e}, wanted {rule}"),
        (Err(e), None) => panic!("row {row}: refused: {e}"),
        (Err(e), Some(rule)) => {
            let CommitError::Lifecycle(inner) = &e else {
                panic!("row {row}: {e:?}")
            };
            assert_eq!(inner.rule(), rule, "row {row}: {e}");
            assert!(
                e.to_string().ends_with(&format!("(rule {rule})")),
                "row {row}: {e}"
            );
            assert_eq!(log.stats(), before, "row {row}: a refusal changed the log");
            assert_eq!(log.open_scopes(), open_before, "row {row}");
            assert_eq!(log.open_scope_starts(), starts_before, "row {row}");
        }
    }
    // Restored from the snapshot of the steps before it.
    let restored = RunLog::restore(&snapshot, config(), Arc::new(SystemClock)).unwrap();
    assert_eq!(restored.open_scope_starts(), starts_before, "row {row}");
    let judged = restored.commit(last).map(|_| ()).map_err(|e| match e {
        CommitError::Lifecycle(e) => e,
        other => panic!("row {row}: restored: {other}"),
    });
    same_verdict(row, "restore", judged, rule);
    // Imported, and as a snapshot of events (no open-scope bound there).
    let imported = RunLog::import(
        run_id(),
        lines.iter().map(String::as_str),
        config(),
        Arc::new(SystemClock),
    );
    same_verdict(row, "import", at_line(imported.map(|_| ()), seq), rule);
    if rule != Some("limits.open_scopes") {
        let events = lines.iter().map(|l| Arc::new(Event::decode(l).unwrap()));
        let snapshot = Snapshot::from_events(run_id(), events);
        same_verdict(row, "from_events", at_line(snapshot.map(|_| ()), seq), rule);
    }
}

/// The lifecycle error of an import refusal, which must be at `line`.
fn at_line(result: Result<(), ImportError>, line: u64) -> Result<(), LifecycleError> {
    result.map_err(|e| match e {
        ImportError::Lifecycle { line: at, source } => {
            assert_eq!(at as u64, line, "{source}");
            source
        }
        other => panic!("not a lifecycle refusal: {other}"),
    })
}

fn same_verdict(row: &str, path: &str, judged: Result<(), LifecycleError>, rule: Option<&str>) {
    match (judged, rule) {
        (Ok(()), None) => {}
        (Err(e), Some(rule)) => assert_eq!(e.rule(), rule, "row {row} ({path}): {e}"),
        (Ok(()), Some(rule)) => panic!("row {row} ({path}): accepted, wanted {rule}"),
        (Err(e), None) => panic!("row {row} ({path}): refused: {e}"),
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
            "reasoning delta outside its model call",
            vec![run_started(), turn_started(1), thinking(1, "op_1")],
            Some("lifecycle.in_open_scope"),
        ),
        (
            "reasoning end after its model call ended",
            vec![
                run_started(),
                turn_started(1),
                model_started(1, "op_1"),
                model_completed(1, "op_1"),
                reasoning_end(1, "op_1"),
            ],
            Some("lifecycle.in_open_scope"),
        ),
        (
            "reasoning inside its model call",
            vec![
                run_started(),
                turn_started(1),
                model_started(1, "op_1"),
                thinking(1, "op_1"),
                reasoning_end(1, "op_1"),
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
        // Identity: a terminal names what its start named.
        (
            "tool completed naming its tool",
            vec![
                run_started(),
                turn_started(1),
                tool_started_as(1, "c1", "get_weather"),
                tool_completed_as(1, "c1", "get_weather"),
            ],
            None,
        ),
        (
            "tool completed naming another tool",
            vec![
                run_started(),
                turn_started(1),
                tool_started_as(1, "c1", "get_weather"),
                tool_completed_as(1, "c1", "get_time"),
            ],
            Some("lifecycle.same_identity"),
        ),
        (
            "tool failed naming another tool",
            vec![
                run_started(),
                turn_started(1),
                tool_started_as(1, "c1", "get_weather"),
                tool_failed_as(1, "c1", "get_time"),
            ],
            Some("lifecycle.same_identity"),
        ),
        (
            "tool cancelled naming another tool",
            vec![
                run_started(),
                turn_started(1),
                tool_started_as(1, "c1", "get_weather"),
                tool_cancelled_as(1, "c1", "Get_weather"),
            ],
            Some("lifecycle.same_identity"),
        ),
        (
            "tool cancelled naming the other open call's tool",
            vec![
                run_started(),
                turn_started(1),
                tool_started_as(1, "c1", "get_weather"),
                tool_started_as(1, "c2", "calculator"),
                tool_cancelled_as(1, "c1", "calculator"),
            ],
            Some("lifecycle.same_identity"),
        ),
        (
            "the other open call closes naming its own tool",
            vec![
                run_started(),
                turn_started(1),
                tool_started_as(1, "c1", "get_weather"),
                tool_started_as(1, "c2", "calculator"),
                tool_completed_as(1, "c1", "get_weather"),
                tool_completed_as(1, "c2", "calculator"),
            ],
            None,
        ),
        (
            "second terminal naming another tool is a second terminal",
            vec![
                run_started(),
                turn_started(1),
                tool_started_as(1, "c1", "get_weather"),
                tool_completed_as(1, "c1", "get_weather"),
                tool_cancelled_as(1, "c1", "get_time"),
            ],
            Some("lifecycle.one_terminal"),
        ),
        (
            "same call id in a later turn, another tool",
            vec![
                run_started(),
                turn_started(1),
                tool_started_as(1, "c1", "get_weather"),
                tool_completed_as(1, "c1", "get_weather"),
                turn_completed(1),
                turn_started(2),
                tool_started_as(2, "c1", "get_time"),
                tool_completed_as(2, "c1", "get_time"),
            ],
            None,
        ),
        (
            "tool terminal in another turn",
            vec![
                run_started(),
                turn_started(1),
                tool_started_as(1, "c1", "get_weather"),
                tool_completed_as(2, "c1", "get_weather"),
            ],
            Some("lifecycle.terminal_without_start"),
        ),
        (
            "tool terminal with another call id",
            vec![
                run_started(),
                turn_started(1),
                tool_started_as(1, "c1", "get_weather"),
                tool_cancelled_as(1, "c2", "get_weather"),
            ],
            Some("lifecycle.terminal_without_start"),
        ),
        (
            "model terminal with another operation id",
            vec![
                run_started(),
                turn_started(1),
                model_started(1, "op_1"),
                model_completed(1, "op_2"),
            ],
            Some("lifecycle.terminal_without_start"),
        ),
        (
            "model terminal in another turn",
            vec![
                run_started(),
                turn_started(1),
                model_started(1, "op_1"),
                model_cancelled(2, "op_1"),
            ],
            Some("lifecycle.terminal_without_start"),
        ),
        (
            "model terminal in the previous turn",
            vec![
                run_started(),
                turn_started(1),
                turn_completed(1),
                turn_started(2),
                model_started(2, "op_1"),
                model_completed(1, "op_1"),
            ],
            Some("lifecycle.terminal_without_start"),
        ),
        (
            "interaction terminal with another id",
            vec![
                run_started(),
                turn_started(1),
                interaction_started(1, "i1"),
                interaction_completed(1, "i2"),
            ],
            Some("lifecycle.terminal_without_start"),
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

#[test]
fn an_identity_mismatch_names_the_scope_and_both_tools() {
    let log = log();
    commit_all(
        &log,
        &[
            run_started(),
            turn_started(1),
            tool_started_as(1, "c1", "get_weather"),
        ],
    );
    let err = log
        .commit(&tool_completed_as(1, "c1", "get_time"))
        .unwrap_err();
    let CommitError::Lifecycle(inner) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(
        *inner,
        LifecycleError::IdentityMismatch {
            key: ScopeKey::Tool {
                turn: 1,
                call_id: call("c1")
            },
            field: "tool",
            started: "get_weather".into(),
            ended: "get_time".into(),
        }
    );
    assert_eq!(
        err.to_string(),
        "tool c1 (turn 1) started with tool get_weather, its terminal names get_time \
         (rule lifecycle.same_identity)"
    );
    // Still open, still closable by its own name.
    log.commit(&tool_failed_as(1, "c1", "get_weather")).unwrap();
}

/// Runs with every scope kind open, innermost last.
fn all_scopes_open() -> RunLog {
    let log = log();
    commit_all(
        &log,
        &[
            run_started(),
            turn_started(1),
            model_started(1, "op_1"),
            tool_started_as(1, "c1", "get_weather"),
            interaction_started(1, "i1"),
            tool_started_as(1, "c2", "calculator"),
        ],
    );
    log
}

#[test]
fn open_scope_starts_name_each_scope_as_its_start_did() {
    let log = all_scopes_open();
    let starts = log.open_scope_starts();
    let keys: Vec<ScopeKey> = starts.iter().map(|s| s.key().clone()).collect();
    assert_eq!(keys, log.open_scopes(), "innermost first, like open_scopes");
    let tools: Vec<Option<&str>> = starts
        .iter()
        .map(|s| s.tool().map(|t| t.as_str()))
        .collect();
    assert_eq!(
        tools,
        [
            Some("calculator"),
            None,
            Some("get_weather"),
            None,
            None,
            None
        ]
    );
    let cancelled: Vec<Payload> = starts.iter().map(OpenScope::cancelled).collect();
    assert_eq!(
        cancelled,
        vec![
            tool_cancelled_as(1, "c2", "calculator"),
            Payload::InteractionCancelled(InteractionRef {
                turn: 1,
                interaction_id: iid("i1"),
                extra: Extra::new(),
            }),
            tool_cancelled_as(1, "c1", "get_weather"),
            model_cancelled(1, "op_1"),
            turn_cancelled(1),
            run_cancelled(),
        ]
    );
    // Committed in that order they close the run.
    commit_all(&log, &cancelled);
    assert!(log.run_ended());
    assert!(log.open_scope_starts().is_empty());
}

#[test]
fn the_tracker_remembers_identities_only_while_scopes_are_open() {
    let mut t = LifecycleTracker::new(8);
    for p in [
        run_started(),
        turn_started(1),
        tool_started_as(1, "c1", "get_weather"),
    ] {
        t.apply_payload(&p).unwrap();
    }
    let wrong = tool_completed_as(1, "c1", "get_time");
    assert_eq!(
        t.check_payload(&wrong).unwrap_err().rule(),
        "lifecycle.same_identity"
    );
    // A bare transition names no tool: everything but the identity is checked.
    t.check(&wrong.transition()).unwrap();
    t.apply_payload(&tool_completed_as(1, "c1", "get_weather"))
        .unwrap();
    assert_eq!(
        t.open_scopes_innermost_first()
            .iter()
            .map(|s| s.key().clone())
            .collect::<Vec<_>>(),
        vec![ScopeKey::Turn(1), ScopeKey::Run]
    );
    // A tool scope opened by a bare transition has no tool to name: it is
    // listed by key only.
    t.apply(&tool_started_as(1, "c2", "calculator").transition())
        .unwrap();
    assert_eq!(t.open_innermost_first().len(), 3);
    assert_eq!(t.open_scopes_innermost_first().len(), 2);
    t.apply_payload(&tool_cancelled_as(1, "c2", "anything"))
        .unwrap();
}

#[test]
fn a_resumed_tracker_checks_identities_its_scopes_carry() {
    let log = all_scopes_open();
    let mut outermost_first = log.open_scope_starts();
    outermost_first.reverse();
    let t = LifecycleTracker::resume_scopes(outermost_first, Some(1), false, 8).unwrap();
    assert_eq!(t.open_scopes_innermost_first(), log.open_scope_starts());
    let err = t
        .check_payload(&tool_cancelled_as(1, "c2", "get_weather"))
        .unwrap_err();
    assert!(
        matches!(err, LifecycleError::IdentityMismatch { .. }),
        "{err}"
    );
    t.check_payload(&tool_cancelled_as(1, "c2", "calculator"))
        .unwrap();
    // From keys alone there is nothing to check against.
    let blind = LifecycleTracker::resume(
        log.open_scopes().into_iter().rev().collect(),
        Some(1),
        false,
        8,
    )
    .unwrap();
    blind
        .check_payload(&tool_cancelled_as(1, "c2", "get_weather"))
        .unwrap();
}

fn window_config() -> LogConfig {
    LogConfig {
        max_events: 10,
        max_bytes: 64 << 10,
        max_event_bytes: 4 << 10,
        max_terminal_bytes: MIN_TERMINAL_BYTES,
        max_open_scopes: 6,
    }
}

/// A log whose window no longer holds the starts of its open scopes.
fn evicted_starts() -> RunLog {
    let (log, _) = log_with(window_config());
    commit_all(
        &log,
        &[
            run_started(),
            turn_started(1),
            tool_started_as(1, "c1", "get_weather"),
            model_started(1, "op_1"),
        ],
    );
    for i in 0..12 {
        log.commit(&delta(1, "op_1", &format!("d{i}"))).unwrap();
    }
    assert!(log.stats().earliest_seq > 4, "the starts were evicted");
    log
}

fn refused_after_restore(snapshot: &Snapshot) -> LifecycleError {
    let restored = RunLog::restore(snapshot, window_config(), Arc::new(SystemClock)).unwrap();
    restored.commit(&model_completed(1, "op_1")).unwrap();
    match restored.commit(&tool_completed_as(1, "c1", "get_time")) {
        Err(CommitError::Lifecycle(e)) => {
            restored
                .commit(&tool_completed_as(1, "c1", "get_weather"))
                .unwrap();
            e
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_snapshot_window_carries_the_identities_of_open_scopes() {
    let log = evicted_starts();
    let text = log.snapshot().to_jsonl();
    let header = text.lines().next().unwrap();
    assert!(
        header.contains(r#"{"call_id":"c1","scope":"tool","tool":"get_weather","turn":1}"#),
        "{header}"
    );
    let snapshot = Snapshot::from_jsonl(&text).unwrap();
    let restored = RunLog::restore(&snapshot, window_config(), Arc::new(SystemClock)).unwrap();
    assert_eq!(restored.open_scope_starts(), log.open_scope_starts());
    assert_eq!(
        refused_after_restore(&snapshot).rule(),
        "lifecycle.same_identity"
    );

    // A window whose header does not name the tool (as snapshots before
    // the rule did) cannot be checked, so it is refused.
    let old = text.replacen(r#","tool":"get_weather""#, "", 1);
    let err = RunLog::restore(
        &Snapshot::from_jsonl(&old).unwrap(),
        window_config(),
        Arc::new(SystemClock),
    )
    .unwrap_err();
    let ImportError::Lifecycle { line: 1, source } = &err else {
        panic!("{err}")
    };
    assert_eq!(
        *source,
        LifecycleError::IdentityMissing {
            key: ScopeKey::Tool {
                turn: 1,
                call_id: call("c1")
            },
            field: "tool"
        }
    );
    assert!(
        err.to_string().ends_with("(rule lifecycle.same_identity)"),
        "{err}"
    );
}

#[test]
fn a_whole_run_snapshot_takes_identities_from_its_events() {
    let log = log();
    commit_all(
        &log,
        &[
            run_started(),
            turn_started(1),
            tool_started_as(1, "c1", "get_weather"),
            model_started(1, "op_1"),
        ],
    );
    let text = log.snapshot().to_jsonl();
    // Without the tool in the header (older snapshots): the replay knows it.
    let old = text.replacen(r#","tool":"get_weather""#, "", 1);
    let snapshot = Snapshot::from_jsonl(&old).unwrap();
    let restored = RunLog::restore(&snapshot, LogConfig::default(), Arc::new(SystemClock)).unwrap();
    assert_eq!(restored.open_scope_starts(), log.open_scope_starts());
    assert_eq!(
        restored.snapshot().to_jsonl(),
        text,
        "a new snapshot names it"
    );
    // A header naming another tool than the events is inconsistent.
    let forged = text.replacen(r#""tool":"get_weather""#, r#""tool":"get_time""#, 1);
    let err = RunLog::restore(
        &Snapshot::from_jsonl(&forged).unwrap(),
        LogConfig::default(),
        Arc::new(SystemClock),
    )
    .unwrap_err();
    assert!(matches!(err, ImportError::Inconsistent { .. }), "{err}");
    assert!(err.to_string().contains("naming get_time"), "{err}");
    assert!(err.to_string().contains("naming get_weather"), "{err}");
}

#[test]
fn from_events_is_the_snapshot_of_a_log_that_evicted_nothing() {
    let open = all_scopes_open();
    let snap = Snapshot::from_events(run_id(), open.retained_after(0)).unwrap();
    assert_eq!(snap, open.snapshot());
    assert_eq!(snap.to_jsonl(), open.snapshot().to_jsonl());
    // Empty: the snapshot of a log with nothing committed.
    let empty = Snapshot::from_events(run_id(), Vec::new()).unwrap();
    assert_eq!(empty, log().snapshot());
    // Not from seq 1, another run's events. (The lifecycle, identities
    // included, is checked through `check` above, row by row.)
    let events = open.retained_after(0);
    let err = Snapshot::from_events(run_id(), events[1..].to_vec()).unwrap_err();
    assert!(matches!(err, ImportError::Gap { line: 1, .. }), "{err}");
    let other = keel_message::RunId::parse("run_2").unwrap();
    let err = Snapshot::from_events(other, events.clone()).unwrap_err();
    assert!(
        matches!(err, ImportError::OtherRun { line: 1, .. }),
        "{err}"
    );
}

fn thinking(turn: u64, o: &str) -> Payload {
    Payload::ReasoningDelta(ReasoningDelta {
        turn,
        operation_id: op(o),
        text: "hm".into(),
        extra: Extra::new(),
    })
}

fn reasoning_end(turn: u64, o: &str) -> Payload {
    Payload::ReasoningEnd(ReasoningEnd {
        turn,
        operation_id: op(o),
        provider: keel_message::ProviderTag::scripted(),
        signature: None,
        redacted: None,
        extra: Extra::new(),
    })
}

/// `tool.sub_run` of call `c` in `turn`, naming child run `child`.
fn sub_run(turn: u64, c: &str, child: &str) -> Payload {
    Payload::ToolSubRun(SubRunStarted {
        turn,
        call_id: call(c),
        run_id: keel_message::RunId::parse(child).unwrap(),
        extra: Extra::new(),
    })
}

/// A run with turn 1 open and call `c1` started, then `rest`.
fn in_tool(rest: Vec<Payload>) -> Vec<Payload> {
    let mut steps = vec![run_started(), turn_started(1), tool_started(1, "c1")];
    steps.extend(rest);
    steps
}

#[test]
fn sub_run_links_stand_inside_their_call_once() {
    let scope = Some("lifecycle.sub_run_scope");
    let rows: Vec<(&str, Vec<Payload>, Option<&str>)> = vec![
        (
            "inside its call",
            in_tool(vec![sub_run(1, "c1", "run_c")]),
            None,
        ),
        (
            "the call's terminal after it",
            in_tool(vec![sub_run(1, "c1", "run_c"), tool_completed(1, "c1")]),
            None,
        ),
        (
            "two calls, one link each",
            in_tool(vec![
                tool_started(1, "c2"),
                sub_run(1, "c1", "run_a"),
                sub_run(1, "c2", "run_b"),
            ]),
            None,
        ),
        (
            "before any tool call",
            vec![run_started(), turn_started(1), sub_run(1, "c1", "run_c")],
            scope,
        ),
        (
            "outside any turn",
            vec![run_started(), sub_run(1, "c1", "run_c")],
            scope,
        ),
        (
            "naming another call",
            in_tool(vec![sub_run(1, "c2", "run_c")]),
            scope,
        ),
        (
            "naming another turn",
            in_tool(vec![sub_run(2, "c1", "run_c")]),
            scope,
        ),
        (
            "after the call ended",
            in_tool(vec![tool_completed(1, "c1"), sub_run(1, "c1", "run_c")]),
            scope,
        ),
        (
            "a second link, same child",
            in_tool(vec![sub_run(1, "c1", "run_c"), sub_run(1, "c1", "run_c")]),
            scope,
        ),
        (
            "a second link, another child",
            in_tool(vec![sub_run(1, "c1", "run_a"), sub_run(1, "c1", "run_b")]),
            scope,
        ),
        (
            "a second link after a model call in between",
            in_tool(vec![
                sub_run(1, "c1", "run_a"),
                model_started(1, "op_1"),
                model_completed(1, "op_1"),
                sub_run(1, "c1", "run_b"),
            ]),
            scope,
        ),
        (
            "the same call id in the next turn links again",
            in_tool(vec![
                sub_run(1, "c1", "run_a"),
                tool_completed(1, "c1"),
                turn_completed(1),
                turn_started(2),
                tool_started(2, "c1"),
                sub_run(2, "c1", "run_b"),
            ]),
            None,
        ),
        (
            "after the run ended",
            vec![run_started(), run_completed(), sub_run(1, "c1", "run_c")],
            Some("lifecycle.nothing_after_run"),
        ),
    ];
    for (row, steps, rule) in rows {
        check(row, steps, rule);
    }
}
