#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Run admission against real `keel serve` daemons (issue #32): one run
//! id is one run across daemons sharing a journal (R4), and a POST the
//! live-run bound refuses starts nothing, MCP servers included (R5).
#![cfg(unix)]

mod common;

use common::daemon::{Daemon, Serve, client, get_text, post};
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};

/// A quick run whose user message is `marker`.
fn marked(run_id: &str, marker: &str) -> String {
    json!({
        "run_id": run_id,
        "model": "scripted-1",
        "messages": [{"role": "user", "text": marker}],
        "provider": {"type": "scripted", "calls": [[{"text": "ok"}, {"complete": {"finish": "stop"}}]]}
    })
    .to_string()
}

/// How many trials of one id posted to two daemons at once.
const TRIALS: usize = 100;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_run_id_posted_to_two_daemons_at_once_is_one_run() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("keel.db");
    let a = Serve::new().db(&db).start();
    let b = Serve::new().db(&db).start();
    let c = client();
    let started = Instant::now();
    for trial in 0..TRIALS {
        let id = format!("dup-{trial}");
        let (to_a, to_b) = tokio::join!(
            post(&c, &a, "/v1/runs", marked(&id, "client-a")),
            post(&c, &b, "/v1/runs", marked(&id, "client-b")),
        );
        let (sa, sb) = (to_a.status().as_u16(), to_b.status().as_u16());
        let (winner, marker, loser, refusal) = match (sa, sb) {
            (201, 409) => (&a, "client-a", "client-b", to_b),
            (409, 201) => (&b, "client-b", "client-a", to_a),
            _ => panic!("trial {trial}: {sa} and {sb}, not one 201 and one 409"),
        };
        let problem: Value = refusal.json().await.unwrap();
        assert_eq!(problem["type"], "urn:keel:problem:run-exists", "{problem}");
        assert_eq!(problem["run_id"], id.as_str());
        // The winner's client reads its own run to its terminal, from
        // either daemon: never the other client's.
        for d in [&a, &b] {
            let stream = read_to_terminal(&c, winner, d, &id).await;
            assert!(stream.contains(marker), "trial {trial}: {stream}");
            assert!(!stream.contains(loser), "trial {trial}: {stream}");
        }
    }
    eprintln!("{TRIALS} trials in {:?}", started.elapsed());
}

/// `GET /v1/runs/{id}/events` on `d` once `winner` has finished the run:
/// the whole stream, which ends at the run's terminal.
async fn read_to_terminal(c: &reqwest::Client, winner: &Daemon, d: &Daemon, id: &str) -> String {
    let path = format!("/v1/runs/{id}/events");
    if !std::ptr::eq(winner, d) {
        // The other daemon serves the journal's copy once the run ended.
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            let v: Value = common::daemon::get_json(c, d, &format!("/v1/runs/{id}")).await;
            if v["status"] == "completed" {
                break;
            }
            assert!(Instant::now() < until, "{id} on the other daemon: {v}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let text = tokio::time::timeout(Duration::from_secs(10), get_text(c, d, &path))
        .await
        .unwrap_or_else(|_| panic!("{path}: no terminal within 10 s"));
    assert!(text.contains("event: run.completed"), "{text}");
    text
}

/// An MCP server command that records each start in `log` and then never
/// answers (so a start holds its POST for the whole startup timeout).
fn recording_server(dir: &Path, log: &Path) -> String {
    let script = dir.join("record.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho started >> '{}'\nexec sleep 60\n",
            log.display()
        ),
    )
    .unwrap();
    let mut perms = std::fs::metadata(&script).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&script, perms).unwrap();
    format!("rec={}", script.display())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_over_the_live_run_bound_starts_no_mcp_server() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("starts.log");
    let server = recording_server(dir.path(), &log);
    let d = Serve::new()
        .args(&["--max-live-runs", "1", "--mcp", &server])
        .start();
    let c = client();
    // The one live run: a slow stream with no MCP server.
    let mut items: Vec<Value> = (0..100).map(|_| json!({"delay_ms": 100})).collect();
    items.push(json!({"complete": {"finish": "stop"}}));
    let slow = json!({
        "model": "scripted-1",
        "messages": [{"role": "user", "text": "hold the slot"}],
        "provider": {"type": "scripted", "calls": [items]}
    });
    assert_eq!(
        post(&c, &d, "/v1/runs", slow.to_string()).await.status(),
        201
    );
    let with_server = json!({
        "model": "scripted-1",
        "messages": [{"role": "user", "text": "use the server"}],
        "mcp_servers": [{"name": "rec"}],
        "provider": {"type": "scripted", "calls": [[{"text": "x"}, {"complete": {"finish": "stop"}}]]}
    })
    .to_string();
    let started = Instant::now();
    let answers = futures_util::future::join_all((0..40).map(|_| {
        let request = c.post(d.url("/v1/runs")).body(with_server.clone());
        // A server start holds a POST for its 30 s startup timeout: a
        // refusal must come long before that.
        tokio::time::timeout(Duration::from_secs(3), request.send())
    }))
    .await;
    let elapsed = started.elapsed();
    for answer in answers {
        let response = answer
            .expect("a refused POST was not answered at once")
            .unwrap();
        let status = response.status();
        let problem: Value = response.json().await.unwrap();
        assert_eq!(status, 503, "{problem}");
        assert_eq!(problem["type"], "urn:keel:problem:too-many-live-runs");
    }
    let starts = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(
        starts.lines().count(),
        0,
        "refused POSTs started MCP servers"
    );
    eprintln!("40 refusals in {elapsed:?}");
}
