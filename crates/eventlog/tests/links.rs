//! The cross-run link rules (`links.parent_known`, `links.child_known`,
//! `links.terminal_agrees`), one store per row through one `check` helper.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
use common::*;
use keel_eventlog::links::LinkCheck;
use keel_eventlog::*;
use keel_message::RunId;
use std::sync::Arc;

fn rid(s: &str) -> RunId {
    RunId::parse(s).unwrap()
}

/// One stored run: its id and its events' payloads.
struct Run {
    id: &'static str,
    payloads: Vec<Payload>,
}

/// A run with turn 1 open (a child when `parent` names a run and call),
/// then `body`.
fn run(id: &'static str, parent: Option<(&str, &str)>, body: Vec<Payload>) -> Run {
    let started = RunStarted {
        parent: parent.map(|(run, c)| ParentLink::new(rid(run), call(c))),
        ..RunStarted::default()
    };
    let mut payloads = vec![Payload::RunStarted(started), turn_started(1)];
    payloads.extend(body);
    Run { id, payloads }
}

/// Ends turn 1 and the run: completed.
fn completed() -> Vec<Payload> {
    vec![turn_completed(1), run_completed()]
}

/// Ends turn 1 and the run: failed, with the cause of `cause_call`.
fn failed(cause_call: &str) -> Vec<Payload> {
    vec![
        Payload::TurnFailed(TurnFailed {
            turn: 1,
            error: ErrorText::new("boom"),
            cause: Some(cause(cause_call)),
            extra: Extra::new(),
        }),
        Payload::RunFailed(RunFailed {
            error: ErrorText::new("boom"),
            cause: Some(cause(cause_call)),
            extra: Extra::new(),
        }),
    ]
}

/// Ends turn 1 and the run: cancelled.
fn cancelled() -> Vec<Payload> {
    vec![turn_cancelled(1), run_cancelled()]
}

fn cause(c: &str) -> Cause {
    Cause {
        call_id: Some(call(c)),
        tool: Some(tool_name("get_weather")),
        ..Cause::default()
    }
}

fn host_lost_cause() -> Cause {
    Cause {
        kind: Some(recovery::HOST_LOST.to_owned()),
        ..Cause::default()
    }
}

fn join(parts: Vec<Vec<Payload>>) -> Vec<Payload> {
    parts.into_iter().flatten().collect()
}

/// Call `c` started and linking `child`.
fn linked(c: &str, child: &str) -> Vec<Payload> {
    vec![
        tool_started(1, c),
        Payload::ToolSubRun(SubRunStarted {
            turn: 1,
            call_id: call(c),
            run_id: rid(child),
            extra: Extra::new(),
        }),
    ]
}

/// `run_p` links `run_a` on call `c1` and ends that call with `terminal`;
/// `run_a`'s events after its `run.started` are `child`.
fn parent_and_child(terminal: Payload, child: Vec<Payload>) -> Vec<Run> {
    vec![
        run(
            "run_p",
            None,
            join(vec![linked("c1", "run_a"), vec![terminal]]),
        ),
        run("run_a", Some(("run_p", "c1")), child),
    ]
}

/// `terminal` of a call, its `sub_run` naming `named` with `cause`.
fn naming(mut terminal: Payload, named: &str, cause: Option<Cause>) -> Payload {
    let extra = match &mut terminal {
        Payload::ToolCompleted(p) => &mut p.extra,
        Payload::ToolFailed(p) => &mut p.extra,
        Payload::ToolCancelled(p) => &mut p.extra,
        other => panic!("not a tool terminal: {other:?}"),
    };
    let reference = SubRunRef {
        run_id: rid(named),
        cause,
    };
    reference.insert_into(extra);
    terminal
}

fn tool_done(c: &str, child: &str) -> Payload {
    naming(tool_completed(1, c), child, None)
}
fn tool_failed(c: &str, child: &str, cause: Option<Cause>) -> Payload {
    naming(tool_failed_as(1, c, "get_weather"), child, cause)
}
fn tool_cancelled_naming(c: &str, child: &str) -> Payload {
    naming(tool_cancelled(1, c), child, None)
}
fn tool_host_lost(c: &str, child: &str) -> Payload {
    tool_failed(c, child, Some(host_lost_cause()))
}

/// What a row's store must give.
enum Want {
    /// Clean, with this many stored sub-runs and tolerated absent ones.
    Clean { sub_runs: usize, unstarted: usize },
    /// A violation of `rule` naming parent, child and call.
    Broken {
        rule: &'static str,
        parent: &'static str,
        child: &'static str,
        call: &'static str,
    },
}
use Want::{Broken, Clean};

fn broken(
    rule: &'static str,
    parent: &'static str,
    child: &'static str,
    call: &'static str,
) -> Want {
    Broken {
        rule,
        parent,
        child,
        call,
    }
}

/// Commits each run through a `RunLog` (so every run is lifecycle-valid
/// on its own), then feeds the events to a `LinkCheck` three ways (runs
/// in order, in reverse, interleaved event by event): each must give
/// `want`.
fn check(row: &str, runs: Vec<Run>, want: Want) {
    let logs: Vec<Vec<Arc<Event>>> = runs
        .iter()
        .map(|r| {
            let log = RunLog::new(rid(r.id), LogConfig::default(), Arc::new(SystemClock)).unwrap();
            for p in &r.payloads {
                log.commit(p)
                    .unwrap_or_else(|e| panic!("row {row}: run {}: {e}", r.id));
            }
            log.retained_after(0)
        })
        .collect();
    let forward: Vec<&Arc<Event>> = logs.iter().flatten().collect();
    let reverse: Vec<&Arc<Event>> = logs.iter().rev().flatten().collect();
    let longest = logs.iter().map(Vec::len).max().unwrap_or(0);
    let interleaved: Vec<&Arc<Event>> = (0..longest)
        .flat_map(|i| logs.iter().filter_map(move |l| l.get(i)))
        .collect();
    for (order, events) in [
        ("forward", forward),
        ("reverse", reverse),
        ("interleaved", interleaved),
    ] {
        let mut check = LinkCheck::new();
        for event in events {
            check.push(event);
        }
        match (check.finish(), &want) {
            (
                Ok(report),
                Clean {
                    sub_runs,
                    unstarted,
                },
            ) => {
                assert_eq!(report.runs(), runs.len(), "row {row} ({order})");
                assert_eq!(report.sub_runs(), *sub_runs, "row {row} ({order})");
                assert_eq!(report.unstarted(), *unstarted, "row {row} ({order})");
            }
            (Ok(_), Broken { rule, .. }) => panic!("row {row} ({order}): clean, wanted {rule}"),
            (Err(v), Clean { .. }) => panic!("row {row} ({order}): {v}"),
            (
                Err(v),
                Broken {
                    rule,
                    parent,
                    child,
                    call: c,
                },
            ) => {
                let seen = (
                    v.rule(),
                    v.parent().as_str(),
                    v.child().as_str(),
                    v.call_id().as_str(),
                );
                assert_eq!(
                    seen,
                    (*rule, *parent, *child, *c),
                    "row {row} ({order}): {v}"
                );
                let shown = v.to_string();
                assert!(
                    shown.ends_with(&format!("(rule {rule})")),
                    "row {row}: {shown}"
                );
                for name in [parent, child, c] {
                    assert!(shown.contains(name), "row {row}: {shown} lacks {name}");
                }
            }
        }
    }
}

#[test]
fn link_rules() {
    let parent_known = "links.parent_known";
    let child_known = "links.child_known";
    let agrees = "links.terminal_agrees";
    let rows: Vec<(&str, Vec<Run>, Want)> = vec![
        (
            "three children: completed, failed with its cause, cancelled",
            vec![
                run(
                    "run_p",
                    None,
                    join(vec![
                        linked("c1", "run_a"),
                        linked("c2", "run_b"),
                        linked("c3", "run_c"),
                        vec![
                            tool_done("c1", "run_a"),
                            tool_failed("c2", "run_b", Some(cause("k1"))),
                            tool_cancelled_naming("c3", "run_c"),
                        ],
                        completed(),
                    ]),
                ),
                run("run_a", Some(("run_p", "c1")), completed()),
                run("run_b", Some(("run_p", "c2")), failed("k1")),
                run("run_c", Some(("run_p", "c3")), cancelled()),
            ],
            Clean {
                sub_runs: 3,
                unstarted: 0,
            },
        ),
        (
            "a child failed without a cause, its tool.failed names none",
            vec![
                run(
                    "run_p",
                    None,
                    join(vec![
                        linked("c1", "run_a"),
                        vec![tool_failed("c1", "run_a", None)],
                    ]),
                ),
                run(
                    "run_a",
                    Some(("run_p", "c1")),
                    vec![
                        turn_cancelled(1),
                        Payload::RunFailed(RunFailed {
                            error: ErrorText::new("x"),
                            cause: None,
                            extra: Extra::new(),
                        }),
                    ],
                ),
            ],
            Clean {
                sub_runs: 1,
                unstarted: 0,
            },
        ),
        (
            "three levels, all completed",
            vec![
                run(
                    "run_p",
                    None,
                    join(vec![
                        linked("c1", "run_a"),
                        vec![tool_done("c1", "run_a")],
                        completed(),
                    ]),
                ),
                run(
                    "run_a",
                    Some(("run_p", "c1")),
                    join(vec![
                        linked("c9", "run_b"),
                        vec![tool_done("c9", "run_b")],
                        completed(),
                    ]),
                ),
                run("run_b", Some(("run_a", "c9")), completed()),
            ],
            Clean {
                sub_runs: 2,
                unstarted: 0,
            },
        ),
        (
            "both still running",
            vec![
                run("run_p", None, linked("c1", "run_a")),
                run("run_a", Some(("run_p", "c1")), vec![]),
            ],
            Clean {
                sub_runs: 1,
                unstarted: 0,
            },
        ),
        (
            "the child ended, the call not yet",
            vec![
                run("run_p", None, linked("c1", "run_a")),
                run("run_a", Some(("run_p", "c1")), completed()),
            ],
            Clean {
                sub_runs: 1,
                unstarted: 0,
            },
        ),
        (
            "linked, the child not started yet",
            vec![run("run_p", None, linked("c1", "run_a"))],
            Clean {
                sub_runs: 0,
                unstarted: 1,
            },
        ),
        (
            "linked, the host lost before the child started",
            vec![run(
                "run_p",
                None,
                join(vec![
                    linked("c1", "run_a"),
                    vec![tool_host_lost("c1", "run_a")],
                ]),
            )],
            Clean {
                sub_runs: 0,
                unstarted: 1,
            },
        ),
        (
            "host lost: agrees with a completed child",
            parent_and_child(tool_host_lost("c1", "run_a"), completed()),
            Clean {
                sub_runs: 1,
                unstarted: 0,
            },
        ),
        (
            "host lost: agrees with a child still open",
            parent_and_child(tool_host_lost("c1", "run_a"), vec![]),
            Clean {
                sub_runs: 1,
                unstarted: 0,
            },
        ),
        (
            "linked, the call completed, no child stored",
            vec![run(
                "run_p",
                None,
                join(vec![linked("c1", "run_a"), vec![tool_done("c1", "run_a")]]),
            )],
            broken(child_known, "run_p", "run_a", "c1"),
        ),
        (
            "linked, the call cancelled (not host_lost), no child stored",
            vec![run(
                "run_p",
                None,
                join(vec![
                    linked("c1", "run_a"),
                    vec![tool_cancelled_naming("c1", "run_a")],
                ]),
            )],
            broken(child_known, "run_p", "run_a", "c1"),
        ),
        (
            "the linked child names no parent",
            vec![
                run("run_p", None, linked("c1", "run_a")),
                run("run_a", None, vec![]),
            ],
            broken(child_known, "run_p", "run_a", "c1"),
        ),
        (
            "two parents link one child; it names the other",
            vec![
                run("run_p", None, linked("c1", "run_a")),
                run("run_q", None, linked("c1", "run_a")),
                run("run_a", Some(("run_q", "c1")), vec![]),
            ],
            broken(child_known, "run_p", "run_a", "c1"),
        ),
        (
            "the child's parent is not stored",
            vec![run("run_a", Some(("run_gone", "c1")), vec![])],
            broken(parent_known, "run_gone", "run_a", "c1"),
        ),
        (
            "the child's parent holds no link",
            vec![
                run("run_p", None, vec![tool_started(1, "c1")]),
                run("run_a", Some(("run_p", "c1")), vec![]),
            ],
            broken(parent_known, "run_p", "run_a", "c1"),
        ),
        (
            "the child's parent linked it from another call",
            vec![
                run("run_p", None, linked("c1", "run_a")),
                run("run_a", Some(("run_p", "c2")), vec![]),
            ],
            broken(parent_known, "run_p", "run_a", "c2"),
        ),
        (
            "two children claim one call",
            vec![
                run("run_p", None, linked("c1", "run_a")),
                run("run_a", Some(("run_p", "c1")), vec![]),
                run("run_x", Some(("run_p", "c1")), vec![]),
            ],
            broken(parent_known, "run_p", "run_x", "c1"),
        ),
        (
            "two runs each the other's parent",
            vec![
                run("run_a", Some(("run_b", "c1")), linked("c1", "run_b")),
                run("run_b", Some(("run_a", "c1")), linked("c1", "run_a")),
            ],
            broken(parent_known, "run_b", "run_a", "c1"),
        ),
        (
            "child completed, tool failed",
            parent_and_child(tool_failed("c1", "run_a", None), completed()),
            broken(agrees, "run_p", "run_a", "c1"),
        ),
        (
            "child failed, tool completed",
            parent_and_child(tool_done("c1", "run_a"), failed("k1")),
            broken(agrees, "run_p", "run_a", "c1"),
        ),
        (
            "child cancelled, tool completed",
            parent_and_child(tool_done("c1", "run_a"), cancelled()),
            broken(agrees, "run_p", "run_a", "c1"),
        ),
        (
            "child completed, tool cancelled",
            parent_and_child(tool_cancelled_naming("c1", "run_a"), completed()),
            broken(agrees, "run_p", "run_a", "c1"),
        ),
        (
            "the call ended while its child is open",
            parent_and_child(tool_cancelled_naming("c1", "run_a"), vec![]),
            broken(agrees, "run_p", "run_a", "c1"),
        ),
        (
            "the tool terminal does not name the child",
            parent_and_child(tool_completed(1, "c1"), completed()),
            broken(agrees, "run_p", "run_a", "c1"),
        ),
        (
            "the tool terminal names another run",
            parent_and_child(tool_done("c1", "run_z"), completed()),
            broken(agrees, "run_p", "run_a", "c1"),
        ),
        (
            "tool.failed with another cause than the child's",
            parent_and_child(tool_failed("c1", "run_a", Some(cause("k2"))), failed("k1")),
            broken(agrees, "run_p", "run_a", "c1"),
        ),
        (
            "tool.failed without the child's cause (left out to fit)",
            parent_and_child(tool_failed("c1", "run_a", None), failed("k1")),
            Clean {
                sub_runs: 1,
                unstarted: 0,
            },
        ),
        (
            "a tool terminal names a sub-run its call never linked",
            vec![run(
                "run_p",
                None,
                vec![tool_started(1, "c1"), tool_done("c1", "run_a")],
            )],
            broken(agrees, "run_p", "run_a", "c1"),
        ),
    ];
    for (row, runs, want) in rows {
        check(row, runs, want);
    }
}

#[test]
fn a_recovered_tree_keeps_its_links() {
    // The host died with the parent's call and the child open; the child
    // is recovered first (run.failed host_lost), then the parent (its call
    // tool.failed host_lost, naming the child).
    let parent = RunLog::new(rid("run_p"), LogConfig::default(), Arc::new(SystemClock)).unwrap();
    commit_all(&parent, &run("run_p", None, linked("c1", "run_a")).payloads);
    let child = RunLog::new(rid("run_a"), LogConfig::default(), Arc::new(SystemClock)).unwrap();
    commit_all(
        &child,
        &run("run_a", Some(("run_p", "c1")), vec![tool_started(1, "c7")]).payloads,
    );
    for log in [&child, &parent] {
        for terminal in recovery::terminals(log) {
            log.commit(&terminal).unwrap();
        }
    }
    let last = parent.retained_after(0);
    let tool_end = last
        .iter()
        .find_map(|e| match e.payload().unwrap() {
            Payload::ToolFailed(p) => Some(p),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        SubRunRef::from_extra(&tool_end.extra),
        Some(SubRunRef {
            run_id: rid("run_a"),
            cause: Some(host_lost_cause()),
        })
    );
    assert_eq!(tool_end.outcome, Some(ToolOutcome::Uncertain));
    let mut check = LinkCheck::new();
    for event in child.retained_after(0).iter().chain(last.iter()) {
        check.push(event);
    }
    assert_eq!(check.finish().unwrap().sub_runs(), 1);
    // Without the mark, the same terminal would disagree with the child.
    let plain = recovery::terminals(&child_with_call_open());
    assert!(plain.iter().all(|p| match p {
        Payload::ToolFailed(f) => SubRunRef::from_extra(&f.extra).is_none(),
        _ => true,
    }));
}

/// A run with an open call that linked no child: its recovered tool
/// terminal names none.
fn child_with_call_open() -> RunLog {
    let log = RunLog::new(rid("run_x"), LogConfig::default(), Arc::new(SystemClock)).unwrap();
    commit_all(
        &log,
        &run("run_x", None, vec![tool_started(1, "c1")]).payloads,
    );
    log
}

#[test]
fn only_link_kinds_are_read() {
    let mut check = LinkCheck::new();
    // A text delta of a run is not read: that run is not seen.
    let delta = Event::decode(&line_of(&delta(1, "op_1", "hi"), 5, 2)).unwrap();
    check.push(&delta);
    assert_eq!(check.finish().unwrap().runs(), 0);
}

/// Feeds `runs` to a `LinkCheck` with tombstones for `deleted`.
fn finish_with_tombstones(
    runs: &[Run],
    deleted: &[&str],
) -> Result<links::LinkReport, links::LinkViolation> {
    let mut check = LinkCheck::new();
    for r in runs {
        let log = RunLog::new(rid(r.id), LogConfig::default(), Arc::new(SystemClock)).unwrap();
        for p in &r.payloads {
            log.commit(p).unwrap();
        }
        for event in log.retained_after(0) {
            check.push(&event);
        }
    }
    for d in deleted {
        check.tombstone(rid(d));
    }
    check.finish()
}

#[test]
fn a_link_to_a_deleted_run_is_accepted_only_when_a_tombstone_names_it() {
    let both = || parent_and_child(tool_done("c1", "run_a"), completed());
    let parent_only = || vec![both().remove(0)];
    let child_only = || vec![both().remove(1)];
    // (row, runs stored, tombstones, the links to deleted runs or the rule broken)
    type Row = (
        &'static str,
        Vec<Run>,
        &'static [&'static str],
        Result<usize, &'static str>,
    );
    let rows: Vec<Row> = vec![
        ("both stored", both(), &[], Ok(0)),
        ("child deleted", parent_only(), &["run_a"], Ok(1)),
        (
            "child missing",
            parent_only(),
            &[],
            Err("links.child_known"),
        ),
        (
            "another run's tombstone",
            parent_only(),
            &["run_x"],
            Err("links.child_known"),
        ),
        ("parent deleted", child_only(), &["run_p"], Ok(1)),
        (
            "parent missing",
            child_only(),
            &[],
            Err("links.parent_known"),
        ),
        // A tombstone of a run that is stored again changes nothing.
        (
            "tombstone of a stored run",
            both(),
            &["run_a", "run_p"],
            Ok(0),
        ),
    ];
    for (row, runs, deleted, want) in rows {
        match (finish_with_tombstones(&runs, deleted), want) {
            (Ok(report), Ok(to_deleted)) => {
                assert_eq!(report.to_deleted(), to_deleted, "{row}");
            }
            (Err(v), Err(rule)) => assert_eq!(v.rule(), rule, "{row}: {v}"),
            (got, want) => panic!("{row}: got {got:?}, want {want:?}"),
        }
    }
}
