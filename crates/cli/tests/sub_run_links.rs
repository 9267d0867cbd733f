#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `keel verify` checks the links between runs (`links.*` rules) and
//! `keel runs --tree` shows sub-runs, over stores built by hand and
//! stored through `keel import`.

mod common;

use common::{Sandbox, keel, text};
use keel_eventlog::*;
use keel_message::{CallId, RunId, ToolName};
use keel_testkit::events::{ToolUse, run_completed, turn_completed, turn_started};
use std::sync::Arc;

fn rid(s: &str) -> RunId {
    RunId::parse(s).unwrap()
}

fn tool_use(call: &str) -> ToolUse {
    ToolUse::new(
        1,
        CallId::parse(call).unwrap(),
        ToolName::parse("researcher").unwrap(),
    )
}

/// `run.started` (naming `parent` and its call, for a child) and turn 1.
fn head(parent: Option<(&str, &str)>) -> Vec<Payload> {
    let started = RunStarted {
        parent: parent.map(|(run, call)| ParentLink::new(rid(run), CallId::parse(call).unwrap())),
        ..RunStarted::default()
    };
    vec![Payload::RunStarted(started), turn_started(1)]
}

/// Call `call` started, linking `child`.
fn linked(call: &str, child: &str) -> Vec<Payload> {
    vec![
        tool_use(call).started(),
        Payload::ToolSubRun(SubRunStarted {
            turn: 1,
            call_id: CallId::parse(call).unwrap(),
            run_id: rid(child),
            extra: Extra::new(),
        }),
    ]
}

/// `terminal`, its `sub_run` naming `child`.
fn naming(mut terminal: Payload, child: &str) -> Payload {
    let extra = match &mut terminal {
        Payload::ToolCompleted(p) => &mut p.extra,
        Payload::ToolFailed(p) => &mut p.extra,
        Payload::ToolCancelled(p) => &mut p.extra,
        other => panic!("not a tool terminal: {other:?}"),
    };
    SubRunRef::new(rid(child)).insert_into(extra);
    terminal
}

fn done() -> Vec<Payload> {
    vec![turn_completed(1), run_completed()]
}

/// Stores `run_id`'s `payloads` through `keel import` (committed through
/// a `RunLog` first, so each run is valid on its own).
fn store(sb: &Sandbox, run_id: &str, payloads: Vec<Payload>) {
    let log = RunLog::new(rid(run_id), LogConfig::default(), Arc::new(SystemClock)).unwrap();
    for p in &payloads {
        log.commit(p).unwrap();
    }
    let file = sb.write(&format!("{run_id}.jsonl"), &log.snapshot().to_jsonl());
    sb.ok(&["import", file.to_str().unwrap()]);
}

/// A parent whose call c1 ran child `run_a` (completed) and whose call c2
/// ran `run_b`, itself the parent of `run_c` through its call c9.
fn clean_tree(sb: &Sandbox) {
    let parent = [
        head(None),
        linked("c1", "run_a"),
        linked("c2", "run_b"),
        vec![
            naming(tool_use("c1").completed("found"), "run_a"),
            naming(tool_use("c2").completed("checked"), "run_b"),
        ],
        done(),
    ];
    store(sb, "run_p", parent.concat());
    store(sb, "run_a", [head(Some(("run_p", "c1"))), done()].concat());
    let middle = [
        head(Some(("run_p", "c2"))),
        linked("c9", "run_c"),
        vec![naming(tool_use("c9").completed("ok"), "run_c")],
        done(),
    ];
    store(sb, "run_b", middle.concat());
    store(sb, "run_c", [head(Some(("run_b", "c9"))), done()].concat());
}

/// `keel verify`: its exit code, stdout and stderr.
fn verify(sb: &Sandbox) -> (Option<i32>, String, String) {
    let out = keel().arg("verify").args(sb.db_args()).output().unwrap();
    let (stdout, stderr) = text(&out);
    (out.status.code(), stdout, stderr)
}

#[test]
fn verify_is_clean_on_a_linked_tree_and_counts_its_links() {
    let sb = Sandbox::new();
    clean_tree(&sb);
    let (code, stdout, stderr) = verify(&sb);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(
        stdout.contains("4 run(s): 4 ok, 0 incomplete, 0 violations, 3 sub-run link(s)"),
        "{stdout}"
    );
}

#[test]
fn verify_names_the_rule_both_runs_and_the_call_of_a_broken_link() {
    // The parent's tool failed, but its child completed.
    let sb = Sandbox::new();
    let parent = [
        head(None),
        linked("c1", "run_a"),
        vec![naming(
            tool_use("c1").failed("sub-run run_a failed: x", None, None),
            "run_a",
        )],
        done(),
    ];
    store(&sb, "run_p", parent.concat());
    store(&sb, "run_a", [head(Some(("run_p", "c1"))), done()].concat());
    let (code, stdout, stderr) = verify(&sb);
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    for part in [
        "run run_p call c1",
        "sub-run run_a",
        "(rule links.terminal_agrees)",
    ] {
        assert!(stderr.contains(part), "{part}: {stderr}");
    }
    // Each run is valid on its own: both were reported ok first.
    assert_eq!(stdout.matches("ok          run_").count(), 2, "{stdout}");

    // A child whose parent is not stored.
    let sb = Sandbox::new();
    store(
        &sb,
        "run_a",
        [head(Some(("run_gone", "c4"))), done()].concat(),
    );
    let (code, _, stderr) = verify(&sb);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("run run_a names parent run_gone call c4")
            && stderr.ends_with("(rule links.parent_known)\n"),
        "{stderr}"
    );

    // A link whose child was never stored, though the call completed.
    let sb = Sandbox::new();
    let parent = [
        head(None),
        linked("c1", "run_a"),
        vec![naming(tool_use("c1").completed("x"), "run_a")],
        done(),
    ];
    store(&sb, "run_p", parent.concat());
    let (code, _, stderr) = verify(&sb);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("(rule links.child_known)"), "{stderr}");
}

#[test]
fn recover_closes_children_before_parents_and_verify_stays_clean() {
    // A tree left open by a dead host (imported runs have no owner), in
    // start order: root, child, grandchild.
    let sb = Sandbox::new();
    store(&sb, "run_p", [head(None), linked("c1", "run_b")].concat());
    let middle = [head(Some(("run_p", "c1"))), linked("c2", "run_c")].concat();
    store(&sb, "run_b", middle);
    store(&sb, "run_c", head(Some(("run_b", "c2"))));
    let out = sb.ok(&["recover"]);
    let order: Vec<&str> = out
        .lines()
        .filter_map(|l| l.strip_prefix("recovered  "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(order, ["run_c", "run_b", "run_p"], "{out}");
    let (code, stdout, stderr) = verify(&sb);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(
        stdout.contains("3 ok, 0 incomplete, 0 violations, 2 sub-run link(s)"),
        "{stdout}"
    );
}

#[test]
fn runs_tree_shows_sub_runs_under_their_parents() {
    let sb = Sandbox::new();
    clean_tree(&sb);
    // From any run of the tree, the whole tree.
    for from in ["run_p", "run_c"] {
        let tree = sb.ok(&["runs", "--tree", from]);
        assert_eq!(
            tree.lines().collect::<Vec<_>>(),
            [
                "run_p  completed",
                "  run_a  completed  sub-run of run_p (call c1)",
                "  run_b  completed  sub-run of run_p (call c2)",
                "    run_c  completed  sub-run of run_b (call c9)",
            ],
            "{tree}"
        );
    }
    let listed = sb.ok(&["runs"]);
    let line = listed.lines().find(|l| l.starts_with("run_c ")).unwrap();
    assert!(line.ends_with("  sub-run of run_b (call c9)"), "{listed}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_daemons_tree_names_each_sub_runs_parent_and_call() {
    let sb = Sandbox::new();
    clean_tree(&sb);
    let d = common::daemon::Serve::new().db(&sb.db()).start();
    let c = common::daemon::client();
    let tree = common::daemon::get_json(&c, &d, "/v1/runs/run_a/tree").await;
    let child = |run: &str, depth: u64, parent: &str, call: &str| {
        serde_json::json!({"run_id": run, "status": "completed", "depth": depth,
            "parent": {"run_id": parent, "call_id": call}})
    };
    assert_eq!(
        tree,
        serde_json::json!({"runs": [
            {"run_id": "run_p", "status": "completed", "depth": 0},
            child("run_a", 1, "run_p", "c1"),
            child("run_b", 1, "run_p", "c2"),
            child("run_c", 2, "run_b", "c9"),
        ], "truncated": false})
    );
}
