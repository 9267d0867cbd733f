#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `keel delete` and `keel prune`: what they delete and refuse, exit
//! codes, no byte of a deleted run left in the journal's files, every
//! other run byte-identical, and `keel verify` accepting the tombstones.

mod common;

use common::{Sandbox, keel, text};
use std::path::Path;

/// A scenario for run `id` whose user message and answer hold `id`'s
/// marker.
fn scenario(id: &str) -> String {
    let marker = marker(id);
    format!(
        r#"{{"run_id": "{id}", "model": "m",
            "messages": [{{"role": "user", "text": "question {marker}"}}],
            "provider": {{"type": "scripted", "calls": [[
              {{"text": "answer {marker}"}}, {{"complete": {{"finish": "stop"}}}}]]}}}}"#
    )
}

fn marker(id: &str) -> String {
    format!("MARKER<{id}>")
}

/// Runs `id` (continuing `previous` when given).
fn run(sb: &Sandbox, id: &str, previous: Option<&str>) {
    let file = sb.write(&format!("{id}.json"), &scenario(id));
    let out = match previous {
        None => sb.run(&file, &[]),
        Some(p) => sb.run(&file, &["--continue", p, "--message", &marker(id)]),
    };
    assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
}

/// `keel ARGS --db DB`: exit code, stdout, stderr.
fn keel_in(sb: &Sandbox, args: &[&str]) -> (Option<i32>, String, String) {
    let out = keel().args(args).args(sb.db_args()).output().unwrap();
    let (stdout, stderr) = text(&out);
    (out.status.code(), stdout, stderr)
}

/// A conversation a_1 <- a_2, and two lone runs.
fn fixture() -> Sandbox {
    let sb = Sandbox::new();
    run(&sb, "a_1", None);
    run(&sb, "a_2", Some("a_1"));
    run(&sb, "lone_1", None);
    run(&sb, "lone_2", None);
    sb
}

/// One command's case: arguments, exit code, what stdout or stderr holds,
/// and the runs gone after it.
struct Case {
    args: &'static [&'static str],
    code: i32,
    says: &'static str,
    gone: &'static [&'static str],
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            args: &["delete", "lone_1"],
            code: 0,
            says: "deleted  lone_1  ",
            gone: &["lone_1"],
        },
        Case {
            args: &["delete", "a_1"],
            code: 1,
            says: "run a_1 is continued or forked by 1 other run(s): a_2 (rule deletion.dependents)",
            gone: &[],
        },
        Case {
            args: &["delete", "--conversation", "a_2"],
            code: 0,
            says: "delete: 2 run(s) deleted",
            gone: &["a_1", "a_2"],
        },
        Case {
            args: &["delete", "nope"],
            code: 2,
            says: "deletion.not_found",
            gone: &[],
        },
        Case {
            args: &["delete", "bad id!"],
            code: 2,
            says: "run id",
            gone: &[],
        },
        Case {
            args: &["delete", "lone_1", "--who", "a\tb"],
            code: 2,
            says: "deletion.who",
            gone: &[],
        },
        Case {
            args: &["prune", "--older-than", "30d"],
            code: 0,
            says: "prune: 0 run(s) deleted",
            gone: &[],
        },
        Case {
            args: &["prune", "--older-than", "30x"],
            code: 2,
            says: "prune.older_than",
            gone: &[],
        },
    ]
}

fn check(case: &Case) {
    let sb = fixture();
    let all = ["a_1", "a_2", "lone_1", "lone_2"];
    let before: Vec<String> = all.iter().map(|r| sb.ok(&["events", r])).collect();
    let (code, stdout, stderr) = keel_in(&sb, case.args);
    assert_eq!(code, Some(case.code), "{:?}: {stdout}{stderr}", case.args);
    assert!(
        stdout.contains(case.says) || stderr.contains(case.says),
        "{:?}: {stdout}{stderr}",
        case.args
    );
    let listed = sb.ok(&["runs"]);
    for (run, lines) in all.iter().zip(&before) {
        if case.gone.contains(run) {
            assert!(common::holding(&sb.db(), &marker(run)).is_empty(), "{run}");
            assert!(!listed.contains(run), "{run} listed: {listed}");
            assert_eq!(keel_in(&sb, &["events", run]).0, Some(2), "{run}");
            assert_eq!(keel_in(&sb, &["export", run]).0, Some(2), "{run}");
        } else {
            assert_eq!(&sb.ok(&["events", run]), lines, "{:?}: {run}", case.args);
        }
    }
    let summary = common::verify_summary(&sb.db());
    if !case.gone.is_empty() {
        let tombstones = format!("{} tombstone(s)", case.gone.len());
        assert!(summary.contains(&tombstones), "{summary}");
    }
}

#[test]
fn delete_and_prune_delete_what_the_rules_allow() {
    for case in cases() {
        check(&case);
    }
}

#[test]
fn the_byte_search_sees_stored_runs() {
    let sb = fixture();
    for run in ["a_1", "a_2", "lone_1", "lone_2"] {
        assert!(!common::holding(&sb.db(), &marker(run)).is_empty(), "{run}");
    }
}

#[test]
fn prune_deletes_closed_runs_older_than_the_age() {
    let sb = fixture();
    std::thread::sleep(std::time::Duration::from_millis(1_100));
    run(&sb, "fresh", None);
    let (code, stdout, stderr) = keel_in(&sb, &["prune", "--older-than", "1s", "--who", "ops"]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(
        stdout.ends_with(&format!(
            "prune: 4 run(s) deleted, {} events by ops ({})\n",
            stdout
                .lines()
                .filter_map(|l| l.split_whitespace().nth(2))
                .filter_map(|n| n.parse::<u64>().ok())
                .sum::<u64>(),
            sb.db().display()
        )),
        "{stdout}"
    );
    assert_eq!(sb.run_ids(), ["fresh"]);
    for run in ["a_1", "a_2", "lone_1", "lone_2"] {
        assert!(common::holding(&sb.db(), &marker(run)).is_empty(), "{run}");
    }
    assert!(!common::holding(&sb.db(), &marker("fresh")).is_empty());
    assert!(common::verify_summary(&sb.db()).contains("4 tombstone(s)"));
}

#[test]
fn a_deleted_sub_run_is_accepted_by_verify_through_its_tombstone() {
    let sb = Sandbox::new();
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sub_runs/delegate.json");
    let out = sb.run(&fixture, &["--approve", "all"]);
    assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
    let listed = sb.ok(&["runs"]);
    assert_eq!(listed.lines().count(), 3, "{listed}");
    // The root: the run that is no run's sub-run; the leaf: the tree's last.
    let root = listed
        .lines()
        .find(|l| !l.contains("sub-run of"))
        .and_then(|l| l.split_whitespace().next())
        .unwrap()
        .to_owned();
    let tree = sb.ok(&["runs", "--tree", &root]);
    let leaf = tree
        .lines()
        .last()
        .and_then(|l| l.split_whitespace().next())
        .unwrap()
        .to_owned();
    let (code, stdout, stderr) = keel_in(&sb, &["delete", &leaf]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let summary = common::verify_summary(&sb.db());
    assert!(
        summary.contains("1 tombstone(s) (1 link(s) to deleted runs)"),
        "{summary}"
    );
    // The root deletes the rest of the tree with it.
    let (code, stdout, stderr) = keel_in(&sb, &["delete", &root]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("delete: 2 run(s) deleted"), "{stdout}");
    assert!(sb.ok(&["runs"]).trim().is_empty());
    assert!(common::verify_summary(&sb.db()).contains("3 tombstone(s)"));
}

#[test]
fn with_nats_delete_and_prune_reach_jetstream_too() {
    if !common::nats::have_nats_server() {
        return;
    }
    let nats = common::nats::NatsServer::start();
    let url = nats.url();
    let sb = Sandbox::new();
    for run in ["n_1", "n_2", "n_3"] {
        let file = sb.write(&format!("{run}.json"), &scenario(run));
        let out = sb.run(&file, &["--nats", &url]);
        assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
        assert!(
            !common::files_holding(nats.dir(), &marker(run)).is_empty(),
            "{run}"
        );
    }
    let (code, stdout, stderr) = keel_in(&sb, &["delete", "n_1", "--nats", &url]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.starts_with("deleted  n_1  "), "{stdout}");
    assert!(common::files_holding(nats.dir(), &marker("n_1")).is_empty());
    assert!(common::holding(&sb.db(), &marker("n_1")).is_empty());
    // A run only the stream holds (another host's): deleted there.
    let other = Sandbox::new();
    let (code, stdout, stderr) = keel_in(&other, &["runs"]);
    assert_eq!(code, Some(2), "no journal yet: {stdout}{stderr}");
    let file = other.write("n_4.json", &scenario("n_4"));
    assert_eq!(other.run(&file, &["--nats", &url]).status.code(), Some(0));
    let (code, stdout, stderr) = keel_in(&sb, &["delete", "n_4", "--nats", &url]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(common::files_holding(nats.dir(), &marker("n_4")).is_empty());
    // Prune, as old as nothing is: nothing deleted anywhere.
    let (code, stdout, stderr) = keel_in(&sb, &["prune", "--older-than", "30d", "--nats", &url]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.starts_with("prune: 0 run(s) deleted"), "{stdout}");
    for run in ["n_2", "n_3"] {
        assert!(
            !common::files_holding(nats.dir(), &marker(run)).is_empty(),
            "{run}"
        );
    }
}
