//! The order recovery closes a store's runs in
//! (`recovery::children_first`): every run before its parent, deepest
//! first, one row per shape of tree through one `check` helper.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use keel_eventlog::recovery::{children_first, parent_of};
use keel_eventlog::*;
use keel_message::{CallId, RunId};

/// One running run and the parent its `run.started` names.
struct Running {
    id: RunId,
    parent: Option<RunId>,
}

/// Orders `runs` (given as `(run, parent)` names, in start order): the
/// result must be `want`, and every run must come before its parent.
fn check(row: &str, runs: &[(&str, Option<&str>)], want: &[&str]) {
    let given: Vec<Running> = runs
        .iter()
        .map(|(id, parent)| Running {
            id: RunId::parse(id).unwrap(),
            parent: parent.map(|p| RunId::parse(p).unwrap()),
        })
        .collect();
    let ordered = children_first(given, |r| &r.id, |r| r.parent.as_ref());
    let names: Vec<&str> = ordered.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(names, want, "row {row}");
    let at = |id: &RunId| ordered.iter().position(|r| &r.id == id);
    for (i, run) in ordered.iter().enumerate() {
        if let Some(parent) = run.parent.as_ref().and_then(at)
            && !row.contains("cycle")
        {
            assert!(i < parent, "row {row}: {} after its parent", run.id);
        }
    }
}

/// A row: its name, the runs as `(run, parent)` in start order, and the
/// order recovery must close them in.
type Row<'a> = (&'a str, Vec<(&'a str, Option<&'a str>)>, Vec<&'a str>);

#[test]
fn children_are_recovered_before_their_parents() {
    let rows: Vec<Row<'_>> = vec![
        (
            "no sub-runs: the given order",
            vec![("a", None), ("b", None)],
            vec!["a", "b"],
        ),
        (
            "a chain of three, in start order",
            vec![("p", None), ("c", Some("p")), ("g", Some("c"))],
            vec!["g", "c", "p"],
        ),
        (
            "a chain given children first stays so",
            vec![("g", Some("c")), ("c", Some("p")), ("p", None)],
            vec!["g", "c", "p"],
        ),
        (
            "siblings keep their order, before their parent",
            vec![
                ("p", None),
                ("c1", Some("p")),
                ("c2", Some("p")),
                ("q", None),
            ],
            vec!["c1", "c2", "p", "q"],
        ),
        (
            "two trees: deepest first across them",
            vec![
                ("p", None),
                ("q", None),
                ("q1", Some("q")),
                ("p1", Some("p")),
                ("p11", Some("p1")),
            ],
            vec!["p11", "q1", "p1", "p", "q"],
        ),
        (
            "a parent that is not running counts for nothing",
            vec![("c", Some("ended")), ("x", None)],
            vec!["c", "x"],
        ),
        (
            "a grandchild whose parent is not running sits with the roots",
            vec![("p", None), ("g", Some("gone")), ("c", Some("p"))],
            vec!["c", "p", "g"],
        ),
        (
            "a cycle (a forged store) ends",
            vec![("a", Some("b")), ("b", Some("a")), ("c", None)],
            vec!["a", "b", "c"],
        ),
        (
            "a run its own parent (a cycle)",
            vec![("a", Some("a"))],
            vec!["a"],
        ),
    ];
    for (row, runs, want) in rows {
        check(row, &runs, &want);
    }
}

#[test]
fn the_parent_is_read_from_a_stored_first_line() {
    let line = |payload: &Payload| {
        format!(
            r#"{{"kind":"run.started","payload":{},"run_id":"run_c","seq":1,"ts":1}}"#,
            payload.to_canonical().unwrap()
        )
    };
    let child = Payload::RunStarted(RunStarted {
        parent: Some(ParentLink::new(
            RunId::parse("run_p").unwrap(),
            CallId::parse("c1").unwrap(),
        )),
        ..RunStarted::default()
    });
    assert_eq!(
        parent_of(&line(&child)),
        Some(RunId::parse("run_p").unwrap())
    );
    let root = Payload::RunStarted(RunStarted::default());
    assert_eq!(parent_of(&line(&root)), None);
    assert_eq!(parent_of("not a line"), None);
}
