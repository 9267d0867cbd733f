#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Multi-host (`--nats`): one nats-server (started here on a free loopback
//! port with temp storage, killed on drop), two `keel run --nats` engines
//! and two `keel serve --nats` gateways. Without `nats-server` on PATH the
//! tests that need it print `SKIPPED: nats-server not on PATH` and return.

mod common;

use common::daemon::{Daemon, Serve, client, get, wait_exit};
use common::nats::{NatsServer, free_port, have_nats_server};
use common::sse::{Sse, read_sse};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

// ------------------------------------------------------------ keel

/// `keel serve --nats NATS` on a temporary journal.
fn gateway(nats: &str) -> Daemon {
    Serve::new().args(&["--nats", nats]).start()
}

/// `deltas` text deltas, each after a `delay_ms` pause, then stop.
fn slow_scenario(run_id: &str, deltas: usize, delay_ms: u64) -> String {
    let mut items: Vec<Value> = Vec::new();
    for i in 0..deltas {
        items.push(json!({"delay_ms": delay_ms}));
        items.push(json!({"text": format!("d{i} ")}));
    }
    items.push(json!({"complete": {"finish": "stop"}}));
    json!({
        "run_id": run_id,
        "model": "scripted-1",
        "messages": [{"role": "user", "text": "count"}],
        "provider": {"type": "scripted", "calls": [items]}
    })
    .to_string()
}

/// Spawns `keel run --nats URL --db DB SCENARIO --json`.
fn engine(dir: &Path, nats: &str, run_id: &str, deltas: usize, delay_ms: u64) -> (Child, PathBuf) {
    let scenario = dir.join(format!("{run_id}.json"));
    std::fs::write(&scenario, slow_scenario(run_id, deltas, delay_ms)).unwrap();
    let db = dir.join(format!("{run_id}.db"));
    let child = Command::new(env!("CARGO_BIN_EXE_keel"))
        .arg("run")
        .arg("--nats")
        .arg(nats)
        .arg("--db")
        .arg(&db)
        .arg(&scenario)
        .args(["--json", "--approve", "none"])
        .env_remove("KEEL_DB")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    (child, db)
}

/// `keel events RUN_ID --db DB`, one line each.
fn stored_lines(db: &Path, run_id: &str) -> Vec<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_keel"))
        .args(["events", run_id, "--db"])
        .arg(db)
        .env_remove("KEEL_DB")
        .output()
        .unwrap();
    assert!(out.status.success(), "keel events failed");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// GETs the run's events from `after` through `g`, retrying 404 while the
/// engine has not published its first event yet.
async fn open_stream(c: &reqwest::Client, g: &Daemon, run_id: &str) -> reqwest::Response {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let r = get(c, g, &format!("/v1/runs/{run_id}/events?after=0")).await;
        if r.status() == 200 {
            return r;
        }
        assert_eq!(r.status(), 404, "unexpected status");
        assert!(
            Instant::now() < until,
            "the run never appeared in JetStream"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn problem(r: reqwest::Response, status: u16, kind: &str) -> Value {
    assert_eq!(r.status(), status);
    assert_eq!(
        r.headers()[reqwest::header::CONTENT_TYPE],
        "application/problem+json"
    );
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["type"], format!("urn:keel:problem:{kind}"));
    v
}

// ------------------------------------------------------------ tests

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_on_one_gateway_resume_on_the_other() {
    if !have_nats_server() {
        return;
    }
    let started = Instant::now();
    let nats = NatsServer::start();
    let url = nats.url();
    let g1 = gateway(&url);
    let g2 = gateway(&url);
    let dir = tempfile::tempdir().unwrap();
    // Two engines on two journals, concurrently.
    let (mut engine_a, db_a) = engine(dir.path(), &url, "run_nats_a", 60, 40);
    let (mut engine_b, db_b) = engine(dir.path(), &url, "run_nats_b", 30, 40);
    let c = client();

    // Gateway 2 has never seen run A: it follows it from JetStream.
    let first = open_stream(&c, &g2, "run_nats_a").await;
    let first = read_sse(first, |m| m.id.is_some_and(|id| id >= 30)).await;
    let resume = first.last().and_then(|m| m.id).unwrap();
    assert_eq!(resume, 30);
    // Disconnected (dropped); resume through gateway 1.
    let r = c
        .get(g1.url("/v1/runs/run_nats_a/events"))
        .header("Last-Event-ID", resume.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let second = read_sse(r, |_| false).await;
    assert!(
        wait_exit(&mut engine_a, Duration::from_secs(15), "the engine").success(),
        "engine A failed"
    );

    let all: Vec<&Sse> = first.iter().chain(second.iter()).collect();
    let seqs: Vec<u64> = all.iter().map(|m| m.id.unwrap()).collect();
    let want: Vec<u64> = (1..=seqs.len() as u64).collect();
    assert_eq!(seqs, want, "a gap or a duplicate across the two gateways");
    let stored = stored_lines(&db_a, "run_nats_a");
    let streamed: Vec<&str> = all.iter().map(|m| m.data.as_str()).collect();
    assert_eq!(streamed, stored, "streamed lines differ from the journal");
    for m in &all {
        let v: Value = serde_json::from_str(&m.data).unwrap();
        assert_eq!(v["seq"].as_u64(), m.id);
        assert!(!m.event.is_empty());
    }
    assert!(stored.len() > 60);
    // The stream ended after the run's terminal.
    assert!(all.last().unwrap().event.starts_with("run."));

    // Run B (the other engine), whole, through gateway 1.
    assert!(
        wait_exit(&mut engine_b, Duration::from_secs(15), "the engine").success(),
        "engine B failed"
    );
    let r = open_stream(&c, &g1, "run_nats_b").await;
    let b = read_sse(r, |_| false).await;
    let b: Vec<&str> = b.iter().map(|m| m.data.as_str()).collect();
    assert_eq!(b, stored_lines(&db_b, "run_nats_b"));

    // Remote cursors and unknown runs are the same problems as local ones.
    let last = stored.len() as u64;
    let r = get(
        &c,
        &g2,
        &format!("/v1/runs/run_nats_a/events?after={}", last + 5),
    )
    .await;
    let v = problem(r, 400, "cursor-ahead").await;
    assert_eq!(v["latest"].as_u64(), Some(last));
    let r = get(&c, &g2, "/v1/runs/run_nats_nope/events").await;
    problem(r, 404, "run-not-found").await;
    // From the terminal: 204, so an EventSource stops reconnecting, on
    // the gateway that stores the run and on the one reading JetStream.
    for g in [&g1, &g2] {
        let r = c
            .get(g.url("/v1/runs/run_nats_a/events"))
            .header("last-event-id", last.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 204);
    }
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "took {:?}",
        started.elapsed()
    );
}

/// Exit 2, and stderr names the address but not the URL's credentials.
fn assert_exit_2_without_credentials(out: &std::process::Output, port: u16) {
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("127.0.0.1:{port}")),
        "stderr: {stderr}"
    );
    assert!(!stderr.contains("s3cret-pw"), "stderr: {stderr}");
    assert!(!stderr.contains("keeluser"), "stderr: {stderr}");
}

#[test]
fn run_with_an_unreachable_nats_is_exit_2_without_credentials() {
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("s.json");
    std::fs::write(&scenario, slow_scenario("run_nats_down", 1, 0)).unwrap();
    let url = format!("nats://keeluser:s3cret-pw@127.0.0.1:{port}");
    let out = Command::new(env!("CARGO_BIN_EXE_keel"))
        .arg("run")
        .args(["--nats", &url, "--db"])
        .arg(dir.path().join("keel.db"))
        .arg(&scenario)
        .args(["--json", "--approve", "none"])
        .env_remove("KEEL_DB")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_exit_2_without_credentials(&out, port);
}

#[test]
fn serve_with_an_unreachable_nats_is_exit_2_without_credentials() {
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let url = format!("nats://keeluser:s3cret-pw@127.0.0.1:{port}");
    let out = Command::new(env!("CARGO_BIN_EXE_keel"))
        .arg("serve")
        .args(["--listen", "127.0.0.1:0", "--nats", &url, "--db"])
        .arg(dir.path().join("keel.db"))
        .env_remove("KEEL_DB")
        .env_remove("KEEL_TOKEN")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_exit_2_without_credentials(&out, port);
}

/// nats-server is killed mid-run: the JetStream observer fails with a typed
/// error at its deadline, the run ends `failed` with the observer as cause
/// (exit 1), the SQLite journal holds the whole truthful history, and after
/// a restart the JetStream stream holds a contiguous prefix of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_killed_mid_run_fails_the_run_truthfully() {
    if !have_nats_server() {
        return;
    }
    let mut nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (mut child, db) = engine(dir.path(), &nats.url(), "run_killed", 80, 30);
    tokio::time::sleep(Duration::from_millis(700)).await;
    nats.kill();
    let status = wait_exit(&mut child, Duration::from_secs(40), "the engine");
    assert_eq!(status.code(), Some(1), "the run fails");
    let stored = stored_lines(&db, "run_killed");
    let last = stored.last().unwrap();
    assert!(last.contains(r#""kind":"run.failed""#), "{last}");
    assert!(
        last.contains(r#""observer":"#),
        "the cause names the observer: {last}"
    );
    // `keel verify` is clean.
    common::verify_summary(&db);

    nats.restart();
    let handle =
        keel_observers::JetStreamHandle::connect(keel_observers::JetStreamConfig::new(nats.url()))
            .await
            .unwrap();
    let mut sub = keel_observers::RemoteSubscription::open(&handle, "run_killed", 0)
        .await
        .unwrap();
    let mut remote = Vec::new();
    while let Ok(Some(next)) = tokio::time::timeout(Duration::from_secs(2), sub.next()).await {
        remote.push(next.unwrap().line().to_owned());
    }
    assert!(!remote.is_empty(), "JetStream acked events before the kill");
    assert!(
        remote.len() < stored.len(),
        "the tail after the kill is not in JetStream"
    );
    assert_eq!(
        &stored[..remote.len()],
        &remote[..],
        "a contiguous prefix, byte for byte, no seq reused"
    );
}
