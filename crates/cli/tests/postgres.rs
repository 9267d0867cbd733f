#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `--db postgres://…` against a real PostgreSQL server the test starts
//! itself (`keel_testkit::pg::TempPostgres`): `keel run` (and a follow-up),
//! `keel runs` (the list and a conversation), `keel events`, `keel verify`,
//! `keel recover`, `keel export` and `keel import` into another database,
//! and `keel serve` listing and streaming from it. Nothing any of them
//! prints holds the password.
//!
//! A `keel` built without the feature `postgres` (keel-cli's, or
//! keel-observers' through the workspace) prints a SKIPPED line; without
//! the server's binaries, `TempPostgres` prints one (and fails under
//! `CI=true`).

mod common;

use common::daemon::{Serve, client, get_json, get_text};
use common::{Sandbox, built_with_postgres, keel, text};
use keel_testkit::pg::{PASSWORD, TempPostgres};
use std::path::Path;

/// A PostgreSQL server for the test, or `None` (after a SKIPPED line)
/// when this `keel` lacks the feature `postgres` or the server's binaries
/// are missing.
fn server() -> Option<TempPostgres> {
    if !built_with_postgres() {
        println!(
            "SKIPPED: keel built without the feature postgres (cargo test --features postgres)"
        );
        return None;
    }
    TempPostgres::start()
}

/// `keel ARGS` with `KEEL_DB=url`: it succeeds; its stdout. Neither
/// output holds the password.
fn ok(url: &str, args: &[&str]) -> String {
    let out = keel().env("KEEL_DB", url).args(args).output().unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "keel {args:?}: {stdout}\n{stderr}");
    for output in [&stdout, &stderr] {
        assert!(!output.contains(PASSWORD), "keel {args:?}: {output}");
    }
    stdout
}

/// A scenario whose model calls `get_weather`, then answers.
fn weather(run_id: &str) -> String {
    common::weather_scenario(run_id, "Oslo", "Oslo?", "Oslo: 3 °C.")
}

#[test]
fn run_runs_verify_export_and_import_on_postgres() {
    let Some(pg) = server() else {
        return;
    };
    let url = pg.url();
    let sb = Sandbox::new();
    let first = sb.write("one.json", &weather("pg_1"));
    let second = sb.write("two.json", &weather("pg_2"));
    let out = ok(&url, &["run", first.to_str().unwrap()]);
    assert!(out.contains("Oslo: 3 °C."), "{out}");
    // `--db` as well as KEEL_DB.
    let out = keel()
        .args(["run", second.to_str().unwrap(), "--db", &url])
        .args(["--continue", "pg_1", "--message", "And tomorrow?"])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(!stdout.contains(PASSWORD) && !stderr.contains(PASSWORD));
    assert!(
        stdout.contains(":***@127.0.0.1"),
        "the hint names the store: {stdout}"
    );

    let runs = ok(&url, &["runs"]);
    let ids: Vec<&str> = runs
        .lines()
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(ids, ["pg_1", "pg_2"], "{runs}");
    assert!(runs.contains("continues pg_1"), "{runs}");
    let chain = ok(&url, &["runs", "--conversation", "pg_1"]);
    assert_eq!(chain.lines().count(), 2, "{chain}");
    let failed = ok(&url, &["runs", "--status", "failed"]);
    assert_eq!(failed, "", "no failed run");
    let events = ok(&url, &["events", "pg_2"]);
    assert!(events.lines().count() > 5, "{events}");
    let verify = ok(&url, &["verify"]);
    assert!(
        verify.contains("2 run(s): 2 ok, 0 incomplete, 0 violations"),
        "{verify}"
    );
    let recover = ok(&url, &["recover"]);
    assert!(!recover.contains("recovered pg_"), "{recover}");

    // Export from PostgreSQL, import into an empty database, verify there.
    let file = sb.path("pg_2.jsonl");
    ok(&url, &["export", "pg_2", "-o", file.to_str().unwrap()]);
    let other = pg.create_database("imported");
    let imported = ok(&other, &["import", file.to_str().unwrap()]);
    assert!(imported.contains("imported run pg_2"), "{imported}");
    assert!(!imported.contains(PASSWORD), "{imported}");
    assert_eq!(ok(&other, &["events", "pg_2"]), events, "the same bytes");
    let verify = ok(&other, &["verify"]);
    assert!(verify.contains("2 run(s): 2 ok"), "{verify}");

    // A wrong password: a failure (exit 1) that does not show either one.
    let wrong = url.replace(PASSWORD, "not-the-password");
    let out = keel().args(["runs", "--db", &wrong]).output().unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        !stderr.contains("not-the-password") && !stderr.contains(PASSWORD),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn serve_lists_and_streams_runs_from_postgres() {
    let Some(pg) = server() else {
        return;
    };
    let url = pg.url();
    let sb = Sandbox::new();
    let file = sb.write("one.json", &weather("pg_cli"));
    ok(&url, &["run", file.to_str().unwrap()]);
    let daemon = Serve::new().db(Path::new(&url)).start();
    let c = client();
    let r = c
        .post(daemon.url("/v1/runs"))
        .header("content-type", "application/json")
        .body(weather("pg_http"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    for _ in 0..200 {
        let run: serde_json::Value = get_json(&c, &daemon, "/v1/runs/pg_http").await;
        if run["status"] == "completed" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let events = get_text(&c, &daemon, "/v1/runs/pg_http/events?format=jsonl").await;
    assert!(events.contains("run.completed"), "{events}");
    let list: serde_json::Value = get_json(&c, &daemon, "/v1/runs?status=completed").await;
    let ids: Vec<&str> = list["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["pg_cli", "pg_http"], "{list}");
    // What the daemon journaled is in the database: the CLI reads it.
    drop(daemon);
    let cli = ok(&url, &["events", "pg_http"]);
    assert_eq!(cli, events, "the same bytes from the CLI");
}

/// A run that asks for approval of its one tool call and so stays live
/// until someone answers.
fn parked(run_id: &str) -> String {
    serde_json::json!({
        "run_id": run_id,
        "model": "scripted-1",
        "messages": [{"role": "user", "text": "Weather?"}],
        "tools": [{
            "name": "get_weather", "description": "weather", "parameters": {"type": "object"},
            "requires_approval": true,
            "script": [{"ok": {"temp_c": 3}}]
        }],
        "provider": {"type": "scripted", "calls": [
            [{"tool_call": {"call_id": format!("{run_id}_c1"), "name": "get_weather", "arguments": {}}},
             {"complete": {"finish": "tool_calls"}}],
            [{"text": "3 °C"}, {"complete": {"finish": "stop"}}]
        ]}
    })
    .to_string()
}

/// Two daemons started at once on one database whose previous daemon was
/// SIGKILLed with runs in flight: their startup recoveries race, and each
/// run is closed exactly once (one terminal, `keel verify` clean); both
/// then serve every run.
#[tokio::test(flavor = "multi_thread")]
async fn two_daemons_recover_a_killed_daemons_runs_exactly_once() {
    let Some(pg) = server() else {
        return;
    };
    let url = pg.url();
    let ids: Vec<String> = (0..6).map(|n| format!("pg_parked_{n}")).collect();
    let first = Serve::new().db(Path::new(&url)).start();
    let c = client();
    for id in &ids {
        let r = c
            .post(first.url("/v1/runs"))
            .header("content-type", "application/json")
            .body(parked(id))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    }
    // Every run is parked on its approval, durably: the CLI, another
    // host, reads that from the database while the daemon holds the runs.
    for id in &ids {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while !ok(&url, &["events", id]).contains("interaction.started") {
            assert!(std::time::Instant::now() < until, "{id} never parked");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
    first.kill();
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| Serve::new().db(Path::new(&url)).start());
        let b = s.spawn(|| Serve::new().db(Path::new(&url)).start());
        (a.join().unwrap(), b.join().unwrap())
    });
    for id in &ids {
        let lines = ok(&url, &["events", id]);
        let terminals: Vec<String> = lines
            .lines()
            .map(common::kind)
            .filter(|k| matches!(k.as_str(), "run.completed" | "run.failed" | "run.cancelled"))
            .collect();
        assert_eq!(terminals.len(), 1, "{id}: {terminals:?}\n{lines}");
        for d in [&a, &b] {
            let run: serde_json::Value = get_json(&c, d, &format!("/v1/runs/{id}")).await;
            assert_ne!(run["status"], "running", "{id}: {run}");
        }
    }
    let verify = ok(&url, &["verify"]);
    assert!(
        verify.contains("6 run(s): 6 ok, 0 incomplete, 0 violations"),
        "{verify}"
    );
}
