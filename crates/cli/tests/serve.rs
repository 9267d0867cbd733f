#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `keel serve`: the real binary on port 0, driven with reqwest (rustls)
//! and curl.

#[path = "common/sse.rs"]
mod sse;
use serde_json::{Value, json};
use sse::{Sse, read_sse};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Daemon {
    child: Child,
    base: String,
    db: PathBuf,
    _dir: tempfile::TempDir,
}

impl Daemon {
    fn start(extra: &[&str], token: Option<&str>) -> Daemon {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("keel.db");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_keel"));
        cmd.arg("serve")
            .arg("--db")
            .arg(&db)
            .args(["--listen", "127.0.0.1:0"])
            .args(extra)
            .env_remove("KEEL_DB")
            .env_remove("KEEL_TOKEN")
            .env("KEEL_TEST_PROVIDER_KEY", PROVIDER_KEY)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(t) = token {
            cmd.env("KEEL_TOKEN", t);
        }
        let mut child = cmd.spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_owned();
        Daemon {
            child,
            base: addr,
            db,
            _dir: dir,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn sigterm(&self) {
        let ok = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok);
    }

    fn wait_exit(&mut self, within: Duration) -> std::process::ExitStatus {
        let until = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < until, "the daemon did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap()
}

/// A plain run: three text deltas, then stop.
fn plain(run_id: &str) -> String {
    json!({
        "run_id": run_id,
        "model": "scripted-1",
        "messages": [{"role": "user", "text": "hi"}],
        "provider": {"type": "scripted", "calls": [[
            {"text": "Hello"}, {"text": ", "}, {"text": "world."},
            {"complete": {"finish": "stop"}}
        ]]}
    })
    .to_string()
}

/// `before` text deltas, then a tool call that needs approval (the run
/// waits there), then `after` text deltas of `size` bytes each.
fn gated(run_id: &str, before: usize, after: usize, size: usize) -> String {
    let mut first: Vec<Value> = (0..before)
        .map(|i| json!({"text": format!("b{i} ")}))
        .collect();
    first.push(json!({"tool_call": {"call_id": "c1", "name": "gate", "arguments": {}}}));
    first.push(json!({"complete": {"finish": "tool_calls"}}));
    let chunk = "x".repeat(size);
    let mut second: Vec<Value> = (0..after).map(|_| json!({"text": chunk})).collect();
    second.push(json!({"complete": {"finish": "stop"}}));
    json!({
        "run_id": run_id,
        "model": "scripted-1",
        "messages": [{"role": "user", "text": "go"}],
        "tools": [{"name": "gate", "description": "waits for approval",
                   "parameters": {"type": "object"}, "requires_approval": true,
                   "script": [{"ok": "opened"}]}],
        "provider": {"type": "scripted", "calls": [first, second]}
    })
    .to_string()
}

async fn create(c: &reqwest::Client, d: &Daemon, body: String) -> String {
    let r = c.post(d.url("/v1/runs")).body(body).send().await.unwrap();
    assert_eq!(r.status(), 201);
    let v: Value = r.json().await.unwrap();
    v["run_id"].as_str().unwrap().to_owned()
}

fn seqs(msgs: &[Sse]) -> Vec<u64> {
    msgs.iter().filter_map(|m| m.id).collect()
}

fn assert_contiguous(seqs: &[u64], from: u64) {
    let want: Vec<u64> = (from..from + seqs.len() as u64).collect();
    assert_eq!(seqs, want.as_slice(), "a gap or a duplicate");
}

/// Polls the JSON Lines page until an `interaction.started` line appears;
/// returns its interaction id.
async fn pending_interaction(c: &reqwest::Client, d: &Daemon, run: &str) -> String {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let text = c
            .get(d.url(&format!("/v1/runs/{run}/events?format=jsonl&limit=10000")))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        for line in text.lines() {
            let v: Value = serde_json::from_str(line).unwrap();
            if v["kind"] == "interaction.started" {
                let id = v["payload"]["interaction_id"]
                    .as_str()
                    .or_else(|| v["interaction_id"].as_str())
                    .unwrap_or_else(|| panic!("no interaction id in {line}"));
                return id.to_owned();
            }
        }
        assert!(Instant::now() < until, "no interaction started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn approve(c: &reqwest::Client, d: &Daemon, run: &str, interaction: &str) {
    let r = c
        .post(d.url(&format!("/v1/runs/{run}/interactions/{interaction}")))
        .body(r#"{"decision":"approved"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

async fn wait_status(c: &reqwest::Client, d: &Daemon, run: &str, want: &str) -> Value {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let v: Value = c
            .get(d.url(&format!("/v1/runs/{run}")))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if v["status"] == want && v["live"] == false {
            return v;
        }
        assert!(Instant::now() < until, "status stayed {v}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn assert_problem(headers: &reqwest::header::HeaderMap) {
    assert_eq!(
        headers.get("content-type").unwrap(),
        "application/problem+json"
    );
}

#[tokio::test]
async fn create_and_stream_to_the_end() {
    let d = Daemon::start(&[], None);
    let c = client();
    let run = create(&c, &d, plain("run_plain")).await;
    assert_eq!(run, "run_plain");
    let r = c
        .get(d.url("/v1/runs/run_plain/events"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers().get("content-type").unwrap(),
        "text/event-stream"
    );
    let msgs = read_sse(r, |_| false).await;
    assert_contiguous(&seqs(&msgs), 1);
    assert_eq!(msgs.first().unwrap().event, "run.started");
    assert_eq!(msgs.last().unwrap().event, "run.completed");
    for m in &msgs {
        let v: Value = serde_json::from_str(&m.data).unwrap();
        assert_eq!(v["seq"].as_u64(), m.id);
        assert_eq!(v["kind"], m.event.as_str());
    }
    let status = wait_status(&c, &d, "run_plain", "completed").await;
    assert_eq!(status["last_seq"].as_u64().unwrap(), msgs.len() as u64);
    let list: Value = c
        .get(d.url("/v1/runs"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(list["runs"][0]["run_id"], "run_plain");

    // The same id again is a conflict; an unknown run is 404; both problems.
    let again = c
        .post(d.url("/v1/runs"))
        .body(plain("run_plain"))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 409);
    assert_problem(again.headers());
    for path in ["/v1/runs/nope", "/v1/runs/nope/events", "/v1/nothing"] {
        let r = c.get(d.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 404, "{path}");
        assert_problem(r.headers());
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["status"], 404);
    }
    let r = c
        .post(d.url("/v1/runs/nope/interactions/i1"))
        .body(r#"{"decision":"denied"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
}

#[tokio::test]
async fn resume_after_a_disconnect_has_no_gap_and_no_duplicate() {
    let d = Daemon::start(&[], None);
    let c = client();
    let run = create(&c, &d, gated("run_resume", 30, 200, 16)).await;
    let r = c
        .get(d.url(&format!("/v1/runs/{run}/events")))
        .send()
        .await
        .unwrap();
    let first = read_sse(r, |m| m.event == "interaction.started").await;
    let mut all = seqs(&first);
    // Disconnected (the response is dropped). The run goes on.
    let interaction = pending_interaction(&c, &d, &run).await;
    approve(&c, &d, &run, &interaction).await;
    let last = *all.last().unwrap();
    let r = c
        .get(d.url(&format!("/v1/runs/{run}/events?after=1")))
        .header("Last-Event-ID", last.to_string())
        .send()
        .await
        .unwrap();
    let rest = read_sse(r, |_| false).await;
    all.extend(seqs(&rest));
    assert_contiguous(&all, 1);
    assert_eq!(rest.last().unwrap().event, "run.completed");

    // A JSON Lines page.
    let r = c
        .get(d.url(&format!(
            "/v1/runs/{run}/events?format=jsonl&after=3&limit=5"
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers().get("keel-next-cursor").unwrap(), "8");
    let text = r.text().await.unwrap();
    let page: Vec<u64> = text
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["seq"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(page, vec![4, 5, 6, 7, 8]);
}

#[tokio::test]
async fn a_finished_run_resumes_from_the_journal_and_cursors_are_checked() {
    let d = Daemon::start(&[], None);
    let c = client();
    let run = create(&c, &d, plain("run_done")).await;
    let status = wait_status(&c, &d, &run, "completed").await;
    let last = status["last_seq"].as_u64().unwrap();
    let r = c
        .get(d.url(&format!("/v1/runs/{run}/events?after=2")))
        .send()
        .await
        .unwrap();
    let msgs = read_sse(r, |_| false).await;
    assert_contiguous(&seqs(&msgs), 3);
    assert_eq!(*seqs(&msgs).last().unwrap(), last);
    assert_eq!(msgs.last().unwrap().event, "run.completed");

    // At the end: an empty stream that ends. Ahead: 400 with the cursors.
    let r = c
        .get(d.url(&format!("/v1/runs/{run}/events?after={last}")))
        .send()
        .await
        .unwrap();
    assert!(read_sse(r, |_| false).await.is_empty());
    let r = c
        .get(d.url(&format!("/v1/runs/{run}/events")))
        .header("Last-Event-ID", (last + 5).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert_problem(r.headers());
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["requested"].as_u64(), Some(last + 5));
    assert_eq!(v["latest"].as_u64(), Some(last));
}

#[tokio::test]
async fn a_live_run_serves_the_evicted_prefix_from_the_journal() {
    // The log keeps 70 events; the run commits ~130 before it waits.
    let d = Daemon::start(&["--log-max-events", "70"], None);
    let c = client();
    let run = create(&c, &d, gated("run_window", 120, 150, 8)).await;
    let interaction = pending_interaction(&c, &d, &run).await;
    let r = c
        .get(d.url(&format!("/v1/runs/{run}/events?after=0")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let reader = tokio::spawn(read_sse(r, |_| false));
    tokio::time::sleep(Duration::from_millis(100)).await;
    approve(&c, &d, &run, &interaction).await;
    let msgs = reader.await.unwrap();
    assert_contiguous(&seqs(&msgs), 1);
    assert!(msgs.len() > 280, "{}", msgs.len());
    assert_eq!(msgs.last().unwrap().event, "run.completed");
}

#[tokio::test]
async fn an_expired_cursor_is_410_with_the_cursors() {
    let d = Daemon::start(&[], None);
    let c = client();
    let run = create(&c, &d, plain("run_gone")).await;
    let status = wait_status(&c, &d, &run, "completed").await;
    let last = status["last_seq"].as_u64().unwrap();
    // The journal holds every event of a run, so a cursor only expires
    // when stored events are gone: delete the first three.
    let conn = rusqlite::Connection::open(&d.db).unwrap();
    let n = conn
        .execute("DELETE FROM events WHERE run_id = ?1 AND seq <= 3", [&run])
        .unwrap();
    assert_eq!(n, 3);
    drop(conn);
    for format in ["", "&format=jsonl"] {
        let r = c
            .get(d.url(&format!("/v1/runs/{run}/events?after=1{format}")))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 410, "{format}");
        assert_problem(r.headers());
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["type"], "urn:keel:problem:cursor-expired");
        assert_eq!(v["requested"], 1);
        assert_eq!(v["earliest"], 4);
        assert_eq!(v["latest"].as_u64(), Some(last));
        assert_eq!(v["recovery_cursor"], 3);
    }
    // The recovery cursor works.
    let r = c
        .get(d.url(&format!("/v1/runs/{run}/events?after=3")))
        .send()
        .await
        .unwrap();
    assert_contiguous(&seqs(&read_sse(r, |_| false).await), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_clients_twenty_slow() {
    let d = Daemon::start(&[], None);
    let c = client();
    // 600 events of ~1.1 KiB after the gate: far more than a stalled
    // client's socket buffers hold.
    let run = create(&c, &d, gated("run_load", 2, 600, 1024)).await;
    let interaction = pending_interaction(&c, &d, &run).await;
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel::<()>(256);
    let (go_tx, go_rx) = tokio::sync::watch::channel(false);
    let mut fast = Vec::new();
    let mut slow = Vec::new();
    for i in 0..200 {
        let c = c.clone();
        let slow_one = i % 10 == 0;
        let url = if slow_one {
            d.url(&format!(
                "/v1/runs/{run}/events?max_events=2&max_bytes=4096"
            ))
        } else {
            d.url(&format!("/v1/runs/{run}/events"))
        };
        let ready = ready_tx.clone();
        let mut go = go_rx.clone();
        let task = tokio::spawn(async move {
            let r = c.get(url).send().await.unwrap();
            assert_eq!(r.status(), 200);
            let _ = ready.send(()).await;
            if slow_one {
                // Stall until the run is over, then read what is left.
                let _ = go.wait_for(|g| *g).await;
            }
            read_sse(r, |_| false).await
        });
        if slow_one {
            slow.push(task)
        } else {
            fast.push(task)
        }
    }
    for _ in 0..200 {
        ready_rx.recv().await.unwrap();
    }
    let started = Instant::now();
    approve(&c, &d, &run, &interaction).await;
    let status = wait_status(&c, &d, &run, "completed").await;
    let run_time = started.elapsed();
    let last = status["last_seq"].as_u64().unwrap();
    let mut fast_events = 0usize;
    for t in fast {
        let msgs = t.await.unwrap();
        assert_contiguous(&seqs(&msgs), 1);
        assert_eq!(*seqs(&msgs).last().unwrap(), last);
        fast_events += msgs.len();
    }
    let delivered_in = started.elapsed();
    go_tx.send(true).unwrap();
    for t in slow {
        let msgs = t.await.unwrap();
        let end = msgs.last().unwrap();
        assert_eq!(end.event, "error", "a slow client was not cut off");
        let v: Value = serde_json::from_str(&end.data).unwrap();
        assert_eq!(v["type"], "urn:keel:problem:slow-consumer");
        let got = seqs(&msgs);
        assert_contiguous(&got, 1);
        assert_eq!(v["last_delivered"].as_u64(), got.last().copied());
        assert_eq!(v["recovery_cursor"], v["last_delivered"]);
        assert_eq!(v["max_events"], 2);
        assert_eq!(v["max_bytes"], 4096);
        assert!(got.last().copied().unwrap() < last);
    }
    eprintln!(
        "200 clients (20 slow): run of {last} events done in {run_time:?}; {fast_events} events to 180 fast clients in {delivered_in:?}"
    );
}

#[tokio::test]
async fn auth_is_enforced_with_a_token() {
    let d = Daemon::start(&[], Some("s3cret-token"));
    let c = client();
    let r = c.get(d.url("/v1/runs")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert_problem(r.headers());
    for wrong in ["Bearer s3cret-tokeN", "Bearer s3cret", "Basic s3cret-token"] {
        let r = c
            .get(d.url("/v1/runs"))
            .header("Authorization", wrong)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "{wrong}");
    }
    let r = c
        .get(d.url("/v1/runs"))
        .bearer_auth("s3cret-token")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    // A non-loopback address without a token is refused: exit 2.
    let out = Command::new(env!("CARGO_BIN_EXE_keel"))
        .args(["serve", "--listen", "0.0.0.0:0", "--db"])
        .arg(d.db.parent().unwrap().join("other.db"))
        .env_remove("KEEL_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("token"));
}

#[tokio::test]
async fn bad_bodies_are_problems() {
    let d = Daemon::start(&[], None);
    let c = client();
    let big = format!("{{\"model\": \"{}\"}}", "a".repeat(2 << 20));
    let r = c.post(d.url("/v1/runs")).body(big).send().await.unwrap();
    assert_eq!(r.status(), 413);
    assert_problem(r.headers());

    let r = c
        .post(d.url("/v1/runs"))
        .body("{\n  \"model\": ,\n}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert_problem(r.headers());
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["line"], 2);
    assert_eq!(v["column"], 12);

    let mut unknown: Value = serde_json::from_str(&plain("run_x")).unwrap();
    unknown["provider"]["extra"] = json!(1);
    let r = c
        .post(d.url("/v1/runs"))
        .body(unknown.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert!(v["path"].as_str().unwrap().contains("provider"), "{v}");
    assert!(v["detail"].as_str().unwrap().contains("extra"), "{v}");
}

#[tokio::test]
async fn cancel_ends_a_waiting_run() {
    let d = Daemon::start(&[], None);
    let c = client();
    let run = create(&c, &d, gated("run_cancel", 1, 1, 1)).await;
    pending_interaction(&c, &d, &run).await;
    let r = c
        .post(d.url(&format!("/v1/runs/{run}/cancel")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    wait_status(&c, &d, &run, "cancelled").await;
    let r = c
        .post(d.url(&format!("/v1/runs/{run}/cancel")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 409);
}

#[tokio::test]
async fn curl_streams_a_run() {
    if Command::new("curl").arg("--version").output().is_err() {
        eprintln!("note: curl is not installed; skipping curl_streams_a_run");
        return;
    }
    let d = Daemon::start(&[], None);
    let c = client();
    let run = create(&c, &d, plain("run_curl")).await;
    let url = d.url(&format!("/v1/runs/{run}/events"));
    let out = tokio::task::spawn_blocking(move || {
        Command::new("curl")
            .args(["-sS", "-N", "--max-time", "20", &url])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("id: 1\nevent: run.started\ndata: {"),
        "{text}"
    );
    assert!(text.contains("event: run.completed"), "{text}");
    // And a resume with Last-Event-ID.
    let url = d.url(&format!("/v1/runs/{run}/events"));
    let out = Command::new("curl")
        .args([
            "-sS",
            "-N",
            "--max-time",
            "20",
            "-H",
            "Last-Event-ID: 2",
            &url,
        ])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        !text.contains("id: 2\n") && text.contains("id: 3\n"),
        "{text}"
    );
}

#[tokio::test]
async fn sigterm_cancels_runs_and_closes_streams() {
    let mut d = Daemon::start(&[], None);
    let c = client();
    let run = create(&c, &d, gated("run_term", 1, 1, 1)).await;
    pending_interaction(&c, &d, &run).await;
    let r = c
        .get(d.url(&format!("/v1/runs/{run}/events")))
        .send()
        .await
        .unwrap();
    let reader = tokio::spawn(read_sse(r, |_| false));
    tokio::time::sleep(Duration::from_millis(100)).await;
    d.sigterm();
    let msgs = reader.await.unwrap();
    assert_contiguous(&seqs(&msgs), 1);
    let kinds: Vec<&str> = msgs.iter().map(|m| m.event.as_str()).collect();
    assert_eq!(kinds[kinds.len() - 2], "run.cancelled", "{kinds:?}");
    assert_eq!(kinds[kinds.len() - 1], "shutdown", "{kinds:?}");
    let status = tokio::task::spawn_blocking(move || {
        let status = d.wait_exit(Duration::from_secs(15));
        (status, d)
    })
    .await
    .unwrap();
    assert_eq!(status.0.code(), Some(0));
    let conn = rusqlite::Connection::open(&status.1.db).unwrap();
    let stored: String = conn
        .query_row("SELECT status FROM runs WHERE run_id = ?1", [&run], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(stored, "cancelled");
}

/// A stored line that was changed on disk (not canonical any more, or
/// moved to another run) is never served: a JSON Lines page refuses with
/// a `journal` problem, an SSE stream ends with one, wherever the line
/// sits in the page.
#[tokio::test]
async fn tampered_journal_lines_are_not_served() {
    let d = Daemon::start(&[], None);
    let c = client();
    let run = create(&c, &d, plain("run_tamper")).await;
    let last = wait_status(&c, &d, &run, "completed").await["last_seq"]
        .as_u64()
        .unwrap();
    assert!(last >= 4);
    let conn = rusqlite::Connection::open(&d.db).unwrap();
    let rewrite = |seq: i64, from: &str, to: &str| {
        conn.execute(
            "UPDATE events SET line = replace(line, ?2, ?3) WHERE run_id = ?1 AND seq = ?4",
            rusqlite::params![run, from, to, seq],
        )
        .unwrap();
    };
    // What a JSON Lines page and an SSE stream serve now.
    let serve = || async {
        let page = c
            .get(d.url(&format!("/v1/runs/{run}/events?format=jsonl")))
            .send()
            .await
            .unwrap();
        let status = page.status().as_u16();
        let problem: Value = page.json().await.unwrap();
        let r = c
            .get(d.url(&format!("/v1/runs/{run}/events")))
            .send()
            .await
            .unwrap();
        (status, problem, read_sse(r, |_| false).await)
    };

    // A middle line: an extra space makes it non-canonical.
    rewrite(3, "\"payload\":", "\"payload\": ");
    let (status, problem, msgs) = serve().await;
    assert_eq!(status, 500);
    assert_eq!(problem["type"], "urn:keel:problem:journal", "{problem}");
    assert_eq!(seqs(&msgs), vec![1, 2], "served past the tampered line");
    assert_eq!(msgs.last().unwrap().event, "error");

    // Another run's line under this run's key.
    rewrite(3, "\"payload\": ", "\"payload\":");
    rewrite(2, "\"run_id\":\"run_tamper\"", "\"run_id\":\"run_other\"");
    let (status, _, msgs) = serve().await;
    assert_eq!(status, 500);
    assert_eq!(seqs(&msgs), vec![1], "served another run's line");
}

/// The key the daemons under test have in their environment.
const PROVIDER_KEY: &str = "sk-test-serve-0123456789abcdefghij";

fn network_scenario(run: &str, base: &str, env: &str) -> String {
    format!(
        r#"{{"run_id": "{run}", "model": "gpt-5-mini", "messages": [{{"role": "user", "text": "hi"}}],
            "provider": {{"type": "openai-compatible", "base_url": "{base}", "api_key_env": "{env}"}}}}"#
    )
}

#[tokio::test]
async fn a_network_provider_runs_in_the_daemon() {
    let (base, recorded) = common_replay::replay(&["text_only"]);
    let allow = format!("openai-compatible,KEEL_TEST_PROVIDER_KEY,{base}");
    let d = Daemon::start(&["--allow-provider", &allow], None);
    let c = client();
    let run = create(
        &c,
        &d,
        network_scenario("net_1", &base, "KEEL_TEST_PROVIDER_KEY"),
    )
    .await;
    assert_eq!(run, "net_1");
    wait_status(&c, &d, &run, "completed").await;
    let page = c
        .get(d.url(&format!("/v1/runs/{run}/events?format=jsonl")))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        page.contains("Sm") && page.contains("model.completed"),
        "{page}"
    );
    assert_eq!(recorded.lock().unwrap().requests.len(), 1);
}

/// A posted scenario cannot pick the key variable or the endpoint: only
/// the operator's `--allow-provider` triples run, and a refusal is the
/// same whether or not the variable exists (nothing is read, nothing is
/// sent).
#[tokio::test]
async fn network_providers_run_only_as_the_operator_allowed() {
    let (base, recorded) = common_replay::replay(&["text_only"]);
    let (other, _) = common_replay::replay(&["text_only"]);
    let allow = format!("openai-compatible,KEEL_TEST_PROVIDER_KEY,{base}");
    let plain = Daemon::start(&[], None);
    let allowing = Daemon::start(&["--allow-provider", &allow], None);
    let c = client();
    let cases = [
        // No allowance at all.
        (
            &plain,
            network_scenario("n1", &base, "KEEL_TEST_PROVIDER_KEY"),
        ),
        // Another variable (set or not), another endpoint.
        (&allowing, network_scenario("n2", &base, "HOME")),
        (
            &allowing,
            network_scenario("n3", &base, "KEEL_NO_SUCH_VARIABLE"),
        ),
        (
            &allowing,
            network_scenario("n4", &other, "KEEL_TEST_PROVIDER_KEY"),
        ),
    ];
    let mut bodies = Vec::new();
    for (daemon, body) in cases {
        let r = c
            .post(daemon.url("/v1/runs"))
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403);
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["type"], "urn:keel:problem:provider-not-allowed", "{v}");
        assert_eq!(v["path"], "provider", "{v}");
        let text = v.to_string();
        assert!(!text.contains(PROVIDER_KEY), "{text}");
        bodies.push(v["detail"].clone());
    }
    assert!(
        bodies.windows(2).all(|w| w[0] == w[1]),
        "refusals differ: {bodies:?}"
    );
    assert_eq!(
        recorded.lock().unwrap().requests.len(),
        0,
        "a refused provider sent a request"
    );
}

#[path = "common/mod.rs"]
mod common_replay;
