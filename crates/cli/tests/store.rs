#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The store behind `--db` (and `KEEL_DB`): every command parses it into
//! a store location, refuses a URL it cannot serve with a typed message
//! that never shows the URL's password, and `keel runs --conversation`
//! reads the conversation from the store's index, printing what it always
//! printed.

mod common;

use common::{Sandbox, built_with_postgres, keel, text};

/// A scenario whose model calls `get_weather` for `city`, then answers.
fn weather(run_id: &str, city: &str) -> String {
    common::weather_scenario(
        run_id,
        city,
        "unused when continuing",
        &format!("{city}: 3 °C."),
    )
}

/// Runs `run_id` (continuing `previous`, or forking it at seq 3).
fn start(sb: &Sandbox, run_id: &str, extra: &[&str]) {
    let file = sb.write(&format!("{run_id}.json"), &weather(run_id, "Oslo"));
    let out = sb.run(&file, extra);
    assert_eq!(out.status.code(), Some(0), "{run_id}: {:?}", text(&out));
}

/// A line of `keel runs` with its padding collapsed.
fn words(line: &str) -> String {
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `keel runs --conversation ID`: the ids it prints, in order, each line
/// checked against that run's line in the plain `keel runs` (status,
/// turns, events, duration, origin).
fn chain(sb: &Sandbox, id: &str, all: &str) -> Vec<String> {
    let out = sb.ok(&["runs", "--conversation", id]);
    out.lines()
        .map(|line| {
            let run = line.split_whitespace().next().unwrap();
            let listed = all
                .lines()
                .find(|l| l.split_whitespace().next() == Some(run))
                .unwrap();
            assert_eq!(words(line), words(listed), "{out}");
            run.to_owned()
        })
        .collect()
}

/// The chain of a conversation: back through the runs it continues, then
/// forward through the first follow-up of each, never a fork (its own
/// conversation) or an unrelated run; a run continued twice shows its
/// first follow-up. From the index alone: a damaged row of another
/// conversation, which the whole list cannot read, does not matter.
#[test]
fn runs_conversation_prints_the_chain_from_the_index() {
    let sb = Sandbox::new();
    start(&sb, "c1", &[]);
    start(&sb, "c2", &["--continue", "c1", "--message", "again"]);
    start(&sb, "c3", &["--continue", "c2", "--message", "again"]);
    start(&sb, "c2b", &["--continue", "c1", "--message", "branch"]);
    start(&sb, "f1", &["--fork", "c2", "--at", "3"]);
    start(
        &sb,
        "f2",
        &["--continue", "f1", "--message", "after the fork"],
    );
    start(&sb, "u1", &[]);
    let all = sb.ok(&["runs"]);
    for (id, expected) in [
        ("c1", &["c1", "c2", "c3"][..]),
        ("c2", &["c1", "c2", "c3"]),
        ("c3", &["c1", "c2", "c3"]),
        ("c2b", &["c1", "c2b"]),
        ("f1", &["f1", "f2"]),
        ("f2", &["f1", "f2"]),
        ("u1", &["u1"]),
    ] {
        assert_eq!(chain(&sb, id, &all), expected, "--conversation {id}\n{all}");
    }
    let c2 = sb.ok(&["runs", "--conversation", "c3"]);
    assert!(c2.contains("continues c2"), "{c2}");
    let fork = sb.ok(&["runs", "--conversation", "f1"]);
    assert!(fork.contains("forked from c2 at 3"), "{fork}");

    let out = keel()
        .args(["runs", "--conversation", "nope"])
        .args(sb.db_args())
        .output()
        .unwrap();
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("unknown run nope in"), "{stderr}");

    // A row of u1's that no list can read (an unknown status): the whole
    // list fails on it, c1's conversation never reads it.
    let conn = rusqlite::Connection::open(sb.db()).unwrap();
    conn.pragma_update(None, "ignore_check_constraints", true)
        .unwrap();
    conn.execute("UPDATE runs SET status = 'paused' WHERE run_id = 'u1'", [])
        .unwrap();
    drop(conn);
    let out = keel().arg("runs").args(sb.db_args()).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{:?}", text(&out));
    assert_eq!(chain(&sb, "c2b", &all), ["c1", "c2b"]);
}

/// Every command that takes `--db`, with what it needs besides.
const COMMANDS: &[&[&str]] = &[
    &["run", "scenario.json"],
    &["events", "run_1"],
    &["runs"],
    &["runs", "--conversation", "run_1"],
    &["verify"],
    &["recover"],
    &["compact", "run_1"],
    &["export", "run_1"],
    &["import", "run.jsonl"],
    &["serve", "--listen", "127.0.0.1:0"],
    &["replay", "run_1"],
];

/// `keel ARGS --db LOCATION` (or `KEEL_DB=LOCATION keel ARGS`) fails:
/// with `Some(rule)`, refused as bad input (exit 2) naming the rule; with
/// `None`, any failure (an unreachable server). Nothing it prints holds
/// the location's password, and nothing is created beside it.
fn check(args: &[&str], location: &str, via_env: bool, rule: Option<&str>) {
    let sb = Sandbox::new();
    sb.write("scenario.json", &weather("run_1", "Oslo"));
    sb.write("run.jsonl", "");
    let mut cmd = keel();
    cmd.current_dir(sb.dir.path()).args(args);
    if via_env {
        cmd.env("KEEL_DB", location);
    } else {
        cmd.args(["--db", location]);
    }
    let out = cmd
        .timeout(std::time::Duration::from_secs(30))
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    let case = format!("{args:?} {location} (env: {via_env})");
    match rule {
        Some(rule) => {
            assert_eq!(out.status.code(), Some(2), "{case}: {stdout}\n{stderr}");
            assert!(stderr.contains(rule), "{case}: {stderr}");
        }
        None => assert!(!out.status.success(), "{case}: {stdout}\n{stderr}"),
    }
    for output in [&stdout, &stderr] {
        assert!(
            !output.contains("hunter2"),
            "{case}: the password: {output}"
        );
    }
    assert!(
        std::fs::read_dir(sb.dir.path()).unwrap().count() == 2,
        "{case}: nothing is created"
    );
}

/// A URL this build cannot serve, from `--db` or `KEEL_DB`, in every
/// command: a typed refusal naming the scheme (or, without the feature
/// `postgres`, the feature), before anything is opened, without the
/// password. With the feature, a server that cannot be reached fails
/// every command, without the password either.
#[test]
fn a_store_url_this_build_cannot_serve_is_refused_without_its_password() {
    let postgres = built_with_postgres();
    let pg_rule = (!postgres).then_some("rule store.postgres_feature");
    let cases = [
        ("postgres://keel:hunter2@127.0.0.1:1/keel", pg_rule),
        ("POSTGRESQL://keel:hunter2@127.0.0.1:1/keel", pg_rule),
        (
            "postgress://keel:hunter2@db/keel",
            Some("rule store.scheme"),
        ),
        ("mysql://keel:hunter2@db/keel", Some("rule store.scheme")),
    ];
    for args in COMMANDS {
        for (location, rule) in cases {
            for via_env in [false, true] {
                check(args, location, via_env, rule);
            }
        }
        // An empty KEEL_DB is no KEEL_DB (clap's rule): only `--db ""`.
        check(args, "", false, Some("rule store.location"));
    }
    let sb = Sandbox::new();
    let out = keel()
        .args(["runs", "--db", "postgres://keel:hunter2@127.0.0.1:1/keel"])
        .current_dir(sb.dir.path())
        .output()
        .unwrap();
    let (_, stderr) = text(&out);
    if postgres {
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains("keel:***@127.0.0.1:1/keel"), "{stderr}");
    } else {
        assert!(stderr.contains("feature `postgres`"), "{stderr}");
    }
}

/// `--help` names `--db` and `KEEL_DB` but never shows KEEL_DB's value
/// (it may hold a password).
#[test]
fn help_never_shows_the_value_of_keel_db() {
    for command in ["runs", "serve", "run", "verify"] {
        let out = keel()
            .args([command, "--help"])
            .env("KEEL_DB", "postgres://keel:hunter2@db/keel")
            .output()
            .unwrap();
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        assert!(stdout.contains("--db <PATH_OR_URL>"), "{stdout}");
        assert!(stdout.contains("KEEL_DB"), "{stdout}");
        assert!(!stdout.contains("hunter2"), "{command}: {stdout}");
    }
}

/// A SQLite path from `KEEL_DB` (relative, beside the command) is used
/// as before, and `--db` wins over it.
#[test]
fn a_sqlite_path_from_keel_db_or_db_is_the_journal() {
    let sb = Sandbox::new();
    sb.write("one.json", &weather("run_env", "Oslo"));
    let out = keel()
        .current_dir(sb.dir.path())
        .env("KEEL_DB", "env.db")
        .args(["run", "one.json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
    assert!(sb.path("env.db").exists());
    let listed = keel()
        .current_dir(sb.dir.path())
        .env("KEEL_DB", "other.db")
        .args(["runs", "--db", "env.db"])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&listed);
    assert_eq!(listed.status.code(), Some(0), "{stderr}");
    assert!(stdout.starts_with("run_env "), "{stdout}");
}
