#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `keel serve`: the real binary on port 0, driven with reqwest (rustls)
//! and curl.

mod common;

use common::daemon::{
    Daemon, Serve, cancel, client, create, get, get_json, get_text, post, wait_status,
};
use common::sse::{Sse, read_sse};
use common::verify_summary;
use serde_json::{Value, json};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `keel serve EXTRA...` with [`PROVIDER_KEY`] in its environment.
fn serve(extra: &[&str]) -> Serve {
    Serve::new()
        .args(extra)
        .env("KEEL_TEST_PROVIDER_KEY", PROVIDER_KEY)
}

/// A daemon on a temporary journal (with `KEEL_TOKEN` when given).
fn daemon(extra: &[&str], token: Option<&str>) -> Daemon {
    serve(extra).token(token).start()
}

/// Like `daemon`, with stderr written to a file (see [`Daemon::stderr`]).
fn logged_daemon(extra: &[&str]) -> Daemon {
    serve(extra).logged().start()
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
        let text = get_text(
            c,
            d,
            &format!("/v1/runs/{run}/events?format=jsonl&limit=10000"),
        )
        .await;
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
    let r = post(
        c,
        d,
        &format!("/v1/runs/{run}/interactions/{interaction}"),
        r#"{"decision":"approved"}"#,
    )
    .await;
    assert_eq!(r.status(), 200);
}

fn assert_problem(headers: &reqwest::header::HeaderMap) {
    assert_eq!(
        headers.get("content-type").unwrap(),
        "application/problem+json"
    );
}

#[tokio::test]
async fn create_and_stream_to_the_end() {
    let d = daemon(&[], None);
    let c = client();
    let run = create(&c, &d, plain("run_plain")).await;
    assert_eq!(run, "run_plain");
    let r = get(&c, &d, "/v1/runs/run_plain/events").await;
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
    let list: Value = get_json(&c, &d, "/v1/runs").await;
    assert_eq!(list["runs"][0]["run_id"], "run_plain");

    // The same id again is a conflict; an unknown run is 404; both problems.
    let again = post(&c, &d, "/v1/runs", plain("run_plain")).await;
    assert_eq!(again.status(), 409);
    assert_problem(again.headers());
    for path in ["/v1/runs/nope", "/v1/runs/nope/events", "/v1/nothing"] {
        let r = get(&c, &d, path).await;
        assert_eq!(r.status(), 404, "{path}");
        assert_problem(r.headers());
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["status"], 404);
    }
    let r = post(
        &c,
        &d,
        "/v1/runs/nope/interactions/i1",
        r#"{"decision":"denied"}"#,
    )
    .await;
    assert_eq!(r.status(), 404);
}

#[tokio::test]
async fn resume_after_a_disconnect_has_no_gap_and_no_duplicate() {
    let d = daemon(&[], None);
    let c = client();
    let run = create(&c, &d, gated("run_resume", 30, 200, 16)).await;
    let r = get(&c, &d, &format!("/v1/runs/{run}/events")).await;
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
    let r = get(
        &c,
        &d,
        &format!("/v1/runs/{run}/events?format=jsonl&after=3&limit=5"),
    )
    .await;
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
    let d = daemon(&[], None);
    let c = client();
    let run = create(&c, &d, plain("run_done")).await;
    let status = wait_status(&c, &d, &run, "completed").await;
    let last = status["last_seq"].as_u64().unwrap();
    let r = get(&c, &d, &format!("/v1/runs/{run}/events?after=2")).await;
    let msgs = read_sse(r, |_| false).await;
    assert_contiguous(&seqs(&msgs), 3);
    assert_eq!(*seqs(&msgs).last().unwrap(), last);
    assert_eq!(msgs.last().unwrap().event, "run.completed");

    // At the end: an empty stream that ends. Ahead: 400 with the cursors.
    let r = get(&c, &d, &format!("/v1/runs/{run}/events?after={last}")).await;
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
    let d = daemon(&["--log-max-events", "70"], None);
    let c = client();
    let run = create(&c, &d, gated("run_window", 120, 150, 8)).await;
    let interaction = pending_interaction(&c, &d, &run).await;
    let r = get(&c, &d, &format!("/v1/runs/{run}/events?after=0")).await;
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
    let d = daemon(&[], None);
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
        let r = get(&c, &d, &format!("/v1/runs/{run}/events?after=1{format}")).await;
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
    let r = get(&c, &d, &format!("/v1/runs/{run}/events?after=3")).await;
    assert_contiguous(&seqs(&read_sse(r, |_| false).await), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_clients_twenty_slow() {
    let d = daemon(&[], None);
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
    let d = daemon(&[], Some("s3cret-token"));
    let c = client();
    let r = get(&c, &d, "/v1/runs").await;
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
    let d = daemon(&[], None);
    let c = client();
    let big = format!("{{\"model\": \"{}\"}}", "a".repeat(2 << 20));
    let r = post(&c, &d, "/v1/runs", big).await;
    assert_eq!(r.status(), 413);
    assert_problem(r.headers());

    let r = post(&c, &d, "/v1/runs", "{\n  \"model\": ,\n}").await;
    assert_eq!(r.status(), 400);
    assert_problem(r.headers());
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["line"], 2);
    assert_eq!(v["column"], 12);

    let mut unknown: Value = serde_json::from_str(&plain("run_x")).unwrap();
    unknown["provider"]["extra"] = json!(1);
    let r = post(&c, &d, "/v1/runs", unknown.to_string()).await;
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert!(v["path"].as_str().unwrap().contains("provider"), "{v}");
    assert!(v["detail"].as_str().unwrap().contains("extra"), "{v}");
}

#[tokio::test]
async fn every_error_is_a_problem_document() {
    let d = daemon(&[], None);
    let c = client();
    // A method the route does not take: 405, the Allow header kept.
    let r = c.delete(d.url("/v1/runs")).send().await.unwrap();
    assert_eq!(r.status(), 405);
    assert_problem(r.headers());
    assert!(r.headers().get("allow").is_some(), "{:?}", r.headers());
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["type"], "urn:keel:problem:method-not-allowed");
    assert_eq!(v["status"], 405);
    // A path segment that is not percent-encoded UTF-8, and dot segments.
    for path in ["/v1/runs/%FF%FE", "/v1/runs/%FF/events"] {
        let r = get(&c, &d, path).await;
        assert_eq!(r.status(), 400, "{path}");
        assert_problem(r.headers());
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["status"], 400, "{path}");
    }
    for path in ["/v1/runs/%2E", "/v1/runs/%2E%2E/events"] {
        let r = get(&c, &d, path).await;
        assert!(r.status().is_client_error(), "{path}: {}", r.status());
        assert_problem(r.headers());
    }
}

#[tokio::test]
async fn an_answer_with_trailing_data_is_refused_and_changes_nothing() {
    let d = daemon(&[], None);
    let c = client();
    let run = create(&c, &d, gated("run_trailing", 1, 1, 1)).await;
    let interaction = pending_interaction(&c, &d, &run).await;
    let path = format!("/v1/runs/{run}/interactions/{interaction}");
    let r = post(
        &c,
        &d,
        &path,
        r#"{"decision":"approved"}{"decision":"denied"}"#,
    )
    .await;
    assert_eq!(r.status(), 400);
    assert_problem(r.headers());
    let v: Value = r.json().await.unwrap();
    assert!(
        v["detail"]
            .as_str()
            .unwrap()
            .contains("rule body.single_value"),
        "{v}"
    );
    // The interaction is still waiting: a clean answer is taken.
    approve(&c, &d, &run, &interaction).await;
    wait_status(&c, &d, &run, "completed").await;
}

#[tokio::test]
async fn cancel_ends_a_waiting_run() {
    let d = daemon(&[], None);
    let c = client();
    let run = create(&c, &d, gated("run_cancel", 1, 1, 1)).await;
    pending_interaction(&c, &d, &run).await;
    let r = cancel(&c, &d, &run).await;
    assert_eq!(r.status(), 202);
    wait_status(&c, &d, &run, "cancelled").await;
    let r = cancel(&c, &d, &run).await;
    assert_eq!(r.status(), 409);
}

#[tokio::test]
async fn curl_streams_a_run() {
    if Command::new("curl").arg("--version").output().is_err() {
        eprintln!("note: curl is not installed; skipping curl_streams_a_run");
        return;
    }
    let d = daemon(&[], None);
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
    let mut d = daemon(&[], None);
    let c = client();
    let run = create(&c, &d, gated("run_term", 1, 1, 1)).await;
    pending_interaction(&c, &d, &run).await;
    let r = get(&c, &d, &format!("/v1/runs/{run}/events")).await;
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
    let d = daemon(&[], None);
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
        let page = get(&c, &d, &format!("/v1/runs/{run}/events?format=jsonl")).await;
        let status = page.status().as_u16();
        let problem: Value = page.json().await.unwrap();
        let r = get(&c, &d, &format!("/v1/runs/{run}/events")).await;
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
    let (base, recorded) = common::replay(&["text_only"]);
    let allow = format!("openai-compatible,KEEL_TEST_PROVIDER_KEY,{base}");
    let d = daemon(&["--allow-provider", &allow], None);
    let c = client();
    let run = create(
        &c,
        &d,
        network_scenario("net_1", &base, "KEEL_TEST_PROVIDER_KEY"),
    )
    .await;
    assert_eq!(run, "net_1");
    wait_status(&c, &d, &run, "completed").await;
    let page = get_text(&c, &d, &format!("/v1/runs/{run}/events?format=jsonl")).await;
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
    let (base, recorded) = common::replay(&["text_only"]);
    let (other, _) = common::replay(&["text_only"]);
    let allow = format!("openai-compatible,KEEL_TEST_PROVIDER_KEY,{base}");
    let plain = daemon(&[], None);
    let allowing = daemon(&["--allow-provider", &allow], None);
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
        let r = post(&c, daemon, "/v1/runs", body).await;
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

// ---- one engine: runs side by side, shutdown, bounds, approvals ----

/// `body` with `limits` set.
fn with_limits(body: String, limits: Value) -> String {
    let mut v: Value = serde_json::from_str(&body).unwrap();
    v["limits"] = limits;
    v.to_string()
}

/// A run with a tool `own` that only it has and a `gate` that needs
/// approval: turn 1 calls `own` and `other` (a tool only another run
/// has), turn 2 calls the gate (the run waits there), turn 3 stops.
fn own_tools(run_id: &str, own: &str, other: &str) -> String {
    let call =
        |id: &str, name: &str| json!({"tool_call": {"call_id": id, "name": name, "arguments": {}}});
    let calls = json!([
        [call("c1", own), call("c2", other), {"complete": {"finish": "tool_calls"}}],
        [call("c3", "gate"), {"complete": {"finish": "tool_calls"}}],
        [{"text": "done"}, {"complete": {"finish": "stop"}}]
    ]);
    json!({
        "run_id": run_id,
        "model": "scripted-1",
        "messages": [{"role": "user", "text": "go"}],
        "tools": [
            {"name": own, "description": "only this run has it",
             "parameters": {"type": "object"}, "script": [{"ok": format!("{own}-ok")}]},
            {"name": "gate", "description": "waits for approval",
             "parameters": {"type": "object"}, "requires_approval": true,
             "script": [{"ok": "opened"}]}
        ],
        "provider": {"type": "scripted", "calls": calls}
    })
    .to_string()
}

/// POST /v1/runs: the status and the document.
async fn post_run(c: &reqwest::Client, d: &Daemon, body: String) -> (u16, Value) {
    let r = post(c, d, "/v1/runs", body).await;
    let status = r.status().as_u16();
    if status != 201 {
        assert_problem(r.headers());
    }
    (status, r.json().await.unwrap())
}

/// The journal's status of every run.
fn stored_statuses(db: &std::path::Path) -> std::collections::HashMap<String, String> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let mut stmt = conn.prepare("SELECT run_id, status FROM runs").unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// The stored events of `run`, in order.
fn stored_events(db: &std::path::Path, run: &str) -> Vec<Value> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let mut stmt = conn
        .prepare("SELECT line FROM events WHERE run_id = ?1 ORDER BY seq")
        .unwrap();
    stmt.query_map([run], |r| r.get::<_, String>(0))
        .unwrap()
        .map(|l| serde_json::from_str(&l.unwrap()).unwrap())
        .collect()
}

/// How many stored events have this kind.
fn stored_count(db: &std::path::Path, kind: &str) -> usize {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.query_row("SELECT COUNT(*) FROM events WHERE kind = ?1", [kind], |r| {
        r.get::<_, i64>(0)
    })
    .unwrap() as usize
}

/// Waits until `n` approvals are parked in the journal.
async fn wait_parked(db: &std::path::Path, n: usize) {
    let until = Instant::now() + Duration::from_secs(60);
    while stored_count(db, "interaction.started") < n {
        assert!(Instant::now() < until, "the approvals were not all asked");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// SIGTERM, then wait for the exit: its status, the daemon, and how long
/// the exit took.
async fn terminate(d: Daemon, within: Duration) -> (std::process::ExitStatus, Daemon, Duration) {
    let started = Instant::now();
    d.sigterm();
    tokio::task::spawn_blocking(move || {
        let mut d = d;
        let status = d.wait_exit(within);
        (status, d, started.elapsed())
    })
    .await
    .unwrap()
}

/// Posts `n` gated runs `{prefix}{i}`, 50 at a time, all 201.
async fn post_gated(c: &reqwest::Client, d: &Daemon, prefix: &str, n: usize) {
    for chunk in (0..n).collect::<Vec<_>>().chunks(50) {
        let posts = chunk.iter().map(|i| {
            let (c, url, body) = (
                c.clone(),
                d.url("/v1/runs"),
                gated(&format!("{prefix}{i}"), 0, 0, 1),
            );
            async move {
                c.post(url)
                    .body(body)
                    .send()
                    .await
                    .unwrap()
                    .status()
                    .as_u16()
            }
        });
        for status in futures_util::future::join_all(posts).await {
            assert_eq!(status, 201);
        }
    }
}

#[tokio::test]
async fn two_runs_with_their_own_tools_live_side_by_side() {
    let d = daemon(&[], None);
    let c = client();
    create(&c, &d, own_tools("run_alpha", "alpha", "beta")).await;
    create(&c, &d, own_tools("run_beta", "beta", "alpha")).await;
    pending_interaction(&c, &d, "run_alpha").await;
    pending_interaction(&c, &d, "run_beta").await;
    // Both live at once, in one engine.
    let list: Value = get_json(&c, &d, "/v1/runs").await;
    let live: Vec<&str> = list["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["live"] == true)
        .map(|r| r["run_id"].as_str().unwrap())
        .collect();
    assert!(
        live.contains(&"run_alpha") && live.contains(&"run_beta"),
        "{list}"
    );
    // Each ran its own tool and found the other's unknown.
    for (run, own, other) in [
        ("run_alpha", "alpha", "beta"),
        ("run_beta", "beta", "alpha"),
    ] {
        let events = stored_events(&d.db, run);
        let ended = |kind: &str, tool: &str| {
            events
                .iter()
                .find(|e| e["kind"] == kind && e["payload"]["tool"] == tool)
                .unwrap_or_else(|| panic!("{run}: no {kind} of {tool}"))
                .clone()
        };
        assert_eq!(
            ended("tool.completed", own)["payload"]["output"],
            format!("{own}-ok")
        );
        let failed = ended("tool.failed", other);
        let error = failed["payload"]["error"].as_str().unwrap();
        assert!(
            error.contains(&format!("unknown tool {other}")),
            "{run}: {failed}"
        );
        assert!(
            !events
                .iter()
                .any(|e| e["kind"] == "tool.completed" && e["payload"]["tool"] == other),
            "{run} ran {other}"
        );
    }
    // SIGTERM cancels both and journals their terminals; exit 0.
    let (status, d, took) = terminate(d, Duration::from_secs(40)).await;
    assert_eq!(status.code(), Some(0));
    eprintln!("two live runs: SIGTERM to exit in {took:?}");
    let statuses = stored_statuses(&d.db);
    assert_eq!(statuses["run_alpha"], "cancelled");
    assert_eq!(statuses["run_beta"], "cancelled");
    for run in ["run_alpha", "run_beta"] {
        let events = stored_events(&d.db, run);
        assert_eq!(events.last().unwrap()["kind"], "run.cancelled", "{run}");
    }
    let summary = verify_summary(&d.db);
    assert!(summary.contains("2 ok, 0 incomplete"), "{summary}");
}

#[tokio::test]
async fn a_live_run_id_is_refused_while_the_run_is_live() {
    let d = daemon(&[], None);
    let c = client();
    create(&c, &d, gated("run_twice", 0, 0, 1)).await;
    let (status, v) = post_run(&c, &d, gated("run_twice", 0, 0, 1)).await;
    assert_eq!(status, 409, "{v}");
    assert_eq!(v["type"], "urn:keel:problem:run-exists");
    assert_eq!(v["run_id"], "run_twice");
    assert_eq!(v["rule"], "run.unique_id");
    let s: Value = get_json(&c, &d, "/v1/runs/run_twice").await;
    assert_eq!(s["live"], true, "{s}");
    // Once it ended it is stored: still refused.
    cancel(&c, &d, "run_twice").await;
    wait_status(&c, &d, "run_twice", "cancelled").await;
    let (status, v) = post_run(&c, &d, gated("run_twice", 0, 0, 1)).await;
    assert_eq!(status, 409, "{v}");
}

#[tokio::test]
async fn limits_the_engine_refuses_are_400_naming_the_member() {
    let d = daemon(&[], None);
    let c = client();
    let cases = [
        (
            json!({"closing_deadline_ms": 1}),
            "limits.closing_deadline_ms",
        ),
        (
            json!({"approval_timeout_ms": 0}),
            "limits.approval_timeout_ms",
        ),
    ];
    for (limits, path) in cases {
        let (status, v) = post_run(&c, &d, with_limits(plain("run_limits"), limits)).await;
        assert_eq!(status, 400, "{v}");
        assert_eq!(v["type"], "urn:keel:problem:invalid-scenario", "{v}");
        assert_eq!(v["path"], path, "{v}");
    }
    // Nothing was started or stored.
    let r = get(&c, &d, "/v1/runs/run_limits").await;
    assert_eq!(r.status(), 404);
}

#[tokio::test]
async fn live_runs_are_bounded() {
    let d = daemon(&["--max-live-runs", "2"], None);
    let c = client();
    create(&c, &d, gated("run_b1", 0, 0, 1)).await;
    create(&c, &d, gated("run_b2", 0, 0, 1)).await;
    let (status, v) = post_run(&c, &d, gated("run_b3", 0, 0, 1)).await;
    assert_eq!(status, 503, "{v}");
    assert_eq!(v["type"], "urn:keel:problem:too-many-live-runs");
    assert_eq!(v["bound"], "max_live_runs");
    assert_eq!(v["max_live_runs"], 2);
    // When one has ended, there is room again.
    cancel(&c, &d, "run_b1").await;
    wait_status(&c, &d, "run_b1", "cancelled").await;
    create(&c, &d, gated("run_b3", 0, 0, 1)).await;

    // Flags out of range are bad input.
    for args in [
        ["--max-live-runs", "0"],
        ["--shutdown-timeout-ms", "10"],
        ["--approval-timeout-ms", "0"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_keel"))
            .args(["serve", "--listen", "127.0.0.1:0", "--db"])
            .arg(d.db.parent().unwrap().join("other.db"))
            .args(args)
            .env_remove("KEEL_TOKEN")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(args[0]),
            "{args:?}"
        );
    }
}

/// What a run's stream holds once it has ended.
async fn kinds_to_the_end(c: &reqwest::Client, d: &Daemon, run: &str) -> Vec<String> {
    let read = async {
        let r = get(c, d, &format!("/v1/runs/{run}/events")).await;
        read_sse(r, |_| false).await
    };
    let msgs = tokio::time::timeout(Duration::from_secs(30), read)
        .await
        .unwrap_or_else(|_| panic!("{run}: the stream did not end"));
    msgs.into_iter().map(|m| m.event).collect()
}

#[tokio::test]
async fn an_unanswered_approval_times_out_and_the_run_goes_on() {
    // The scenario's timeout.
    let d = daemon(&[], None);
    let c = client();
    let body = with_limits(
        gated("run_late", 0, 1, 1),
        json!({"approval_timeout_ms": 300}),
    );
    create(&c, &d, body).await;
    let interaction = pending_interaction(&c, &d, "run_late").await;
    let kinds = kinds_to_the_end(&c, &d, "run_late").await;
    assert!(
        kinds.contains(&"interaction.failed".to_owned()),
        "{kinds:?}"
    );
    assert!(
        !kinds.contains(&"interaction.completed".to_owned()),
        "{kinds:?}"
    );
    assert!(
        !kinds.contains(&"tool.started".to_owned()),
        "the gate ran: {kinds:?}"
    );
    assert_eq!(kinds.last().unwrap(), "run.completed", "{kinds:?}");
    let failed = stored_events(&d.db, "run_late")
        .into_iter()
        .find(|e| e["kind"] == "interaction.failed")
        .unwrap();
    let error = failed["payload"]["error"].as_str().unwrap();
    assert!(error.contains("approval_timeout"), "{failed}");
    // Nothing is left pending: a late answer is 404.
    let r = post(
        &c,
        &d,
        &format!("/v1/runs/run_late/interactions/{interaction}"),
        r#"{"decision":"approved"}"#,
    )
    .await;
    assert_eq!(r.status(), 404);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["type"], "urn:keel:problem:interaction-not-pending");

    // The daemon's default applies when the scenario sets none, and a
    // scenario's own timeout wins over it.
    let d = daemon(&["--approval-timeout-ms", "300"], None);
    create(&c, &d, gated("run_default", 0, 1, 1)).await;
    let own = with_limits(
        gated("run_own", 0, 1, 1),
        json!({"approval_timeout_ms": 60000}),
    );
    create(&c, &d, own).await;
    let kinds = kinds_to_the_end(&c, &d, "run_default").await;
    assert!(
        kinds.contains(&"interaction.failed".to_owned()),
        "{kinds:?}"
    );
    assert_eq!(kinds.last().unwrap(), "run.completed");
    let interaction = pending_interaction(&c, &d, "run_own").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    approve(&c, &d, "run_own", &interaction).await;
    let kinds = kinds_to_the_end(&c, &d, "run_own").await;
    assert!(
        kinds.contains(&"interaction.completed".to_owned()),
        "{kinds:?}"
    );
    assert_eq!(kinds.last().unwrap(), "run.completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_runs_waiting_for_approvals_are_cancelled_and_journaled_on_sigterm() {
    const N: usize = 600;
    let d = logged_daemon(&[]);
    let c = client();
    let started = Instant::now();
    post_gated(&c, &d, "run_wait_", N).await;
    wait_parked(&d.db, N).await;
    eprintln!(
        "{N} runs posted and waiting for approvals in {:?}",
        started.elapsed()
    );
    let (status, d, took) = terminate(d, Duration::from_secs(60)).await;
    let stderr = d.stderr();
    eprintln!("{N} runs waiting for approvals: SIGTERM to exit in {took:?}\n{stderr}");
    assert_eq!(status.code(), Some(0), "{stderr}");
    let statuses = stored_statuses(&d.db);
    assert_eq!(statuses.len(), N);
    let left: Vec<_> = statuses.iter().filter(|(_, s)| *s != "cancelled").collect();
    assert!(left.is_empty(), "not cancelled in the journal: {left:?}");
    let summary = verify_summary(&d.db);
    assert!(
        summary.contains(&format!("{N} ok, 0 incomplete")),
        "{summary}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn posts_during_shutdown_are_503_and_no_accepted_run_is_left_running() {
    const N: usize = 400;
    let d = logged_daemon(&[]);
    let c = client();
    post_gated(&c, &d, "run_slow_", N).await;
    wait_parked(&d.db, N).await;
    // Post gated runs (they would wait for ever) while the daemon shuts
    // down, until it stops listening.
    let (go_tx, go_rx) = tokio::sync::watch::channel(false);
    let posters: Vec<_> = (0..4)
        .map(|p| {
            let (c, url, mut go) = (c.clone(), d.url("/v1/runs"), go_rx.clone());
            tokio::spawn(async move {
                let _ = go.wait_for(|g| *g).await;
                let mut seen = Vec::new();
                for i in 0.. {
                    let id = format!("run_late_{p}_{i}");
                    let Ok(r) = c.post(&url).body(gated(&id, 0, 0, 1)).send().await else {
                        break;
                    };
                    let status = r.status().as_u16();
                    let v: Value = r.json().await.unwrap_or_default();
                    seen.push((id, status, v));
                }
                seen
            })
        })
        .collect();
    // The posts are under way when the signal arrives.
    go_tx.send(true).unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let signalled = Instant::now();
    d.sigterm();
    let mut seen = Vec::new();
    for p in posters {
        seen.extend(p.await.unwrap());
    }
    let (status, d, _) = terminate_wait(d).await;
    let took = signalled.elapsed();
    let stderr = d.stderr();
    let count = |code: u16| seen.iter().filter(|(_, s, _)| *s == code).count();
    eprintln!(
        "{N} waiting runs; posts around SIGTERM: {} accepted, {} refused 503; exit {took:?} after SIGTERM\n{stderr}",
        count(201),
        count(503)
    );
    // Nothing accepted is left behind: every 201 ended cancelled and
    // journaled (a run the shutdown cancelled before its first event is
    // not answered 201), every refusal stored nothing.
    let statuses = stored_statuses(&d.db);
    for (id, status, v) in &seen {
        match status {
            201 => assert_eq!(
                statuses.get(id).map(String::as_str),
                Some("cancelled"),
                "{id} was accepted but not cancelled and journaled"
            ),
            503 => assert!(!statuses.contains_key(id), "{id} refused but stored"),
            other => panic!("{id}: {other} {v}"),
        }
    }
    let running: Vec<_> = statuses.iter().filter(|(_, s)| *s == "running").collect();
    assert!(running.is_empty(), "left running: {running:?}");
    let summary = verify_summary(&d.db);
    assert!(summary.contains(" 0 incomplete"), "{summary}");
    assert_eq!(status.code(), Some(0), "{stderr}");
    // And posts during the shutdown were refused as such.
    let refused: Vec<_> = seen.iter().filter(|(_, s, _)| *s == 503).collect();
    assert!(
        !refused.is_empty(),
        "no post got 503 ({} accepted)",
        count(201)
    );
    for (_, _, v) in &refused {
        assert_eq!(v["type"], "urn:keel:problem:shutting-down", "{v}");
    }
}

/// A journal that cannot take the closing terminals within
/// `--shutdown-timeout-ms` (another process holds its write lock): the
/// runs are named on stderr as left for recovery, and the exit code is 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_the_journal_did_not_take_are_named_and_the_exit_is_1() {
    const N: usize = 5;
    let d = logged_daemon(&["--shutdown-timeout-ms", "1000"]);
    let c = client();
    post_gated(&c, &d, "run_stuck_", N).await;
    wait_parked(&d.db, N).await;
    let locker = rusqlite::Connection::open(&d.db).unwrap();
    locker.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let (status, d, took) = terminate(d, Duration::from_secs(60)).await;
    drop(locker);
    let stderr = d.stderr();
    eprintln!("{N} runs, journal locked: exit {status:?} {took:?} after SIGTERM\n{stderr}");
    assert_eq!(status.code(), Some(1), "{stderr}");
    for i in 0..N {
        assert!(
            stderr.contains(&format!("keel: left for recovery: run_stuck_{i}\n")),
            "run_stuck_{i} not named: {stderr}"
        );
    }
    let statuses = stored_statuses(&d.db);
    assert!(statuses.values().all(|s| s == "running"), "{statuses:?}");
    let summary = verify_summary(&d.db);
    assert!(
        summary.contains(&format!("0 ok, {N} incomplete")),
        "{summary}"
    );
}

/// Waits for a daemon that was already sent SIGTERM.
async fn terminate_wait(d: Daemon) -> (std::process::ExitStatus, Daemon, Duration) {
    let started = Instant::now();
    tokio::task::spawn_blocking(move || {
        let mut d = d;
        let status = d.wait_exit(Duration::from_secs(60));
        (status, d, started.elapsed())
    })
    .await
    .unwrap()
}

/// A scenario whose model calls `get_weather` for `city`, then answers;
/// `messages` are the new messages when it continues a run.
fn weather_turn(run_id: &str, city: &str, question: &str) -> String {
    json!({
        "run_id": run_id,
        "model": "scripted-1",
        "messages": [{"role": "user", "text": question}],
        "tools": [{
            "name": "get_weather", "description": "weather", "parameters": {"type": "object"},
            "script": [{"ok": {"city": city}}]
        }],
        "provider": {"type": "scripted", "calls": [
            [{"tool_call": {"call_id": format!("{run_id}_c1"), "name": "get_weather", "arguments": {"city": city}}},
             {"complete": {"finish": "tool_calls"}}],
            [{"text": format!("{city}: 3 °C.")}, {"complete": {"finish": "stop"}}]
        ]}
    })
    .to_string()
}

/// `POST /v1/runs/{id}/messages`: a three-run conversation over HTTP; the
/// third run's recorded input holds every earlier message, text, call
/// and result, in order. A live, unknown or failed run is refused with a
/// typed problem.
#[tokio::test]
async fn a_three_run_conversation_over_http() {
    let d = daemon(&[], None);
    let c = client();
    let r = post(&c, &d, "/v1/runs", weather_turn("chat_1", "Oslo", "Oslo?")).await;
    assert_eq!(r.status(), 201);
    wait_status(&c, &d, "chat_1", "completed").await;
    for (n, city) in [(2, "Bergen"), (3, "Tromsø")] {
        let previous = format!("chat_{}", n - 1);
        let body = weather_turn(&format!("chat_{n}"), city, &format!("{city}?"));
        let r = post(&c, &d, &format!("/v1/runs/{previous}/messages"), body).await;
        assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
        wait_status(&c, &d, &format!("chat_{n}"), "completed").await;
    }
    let lines = get_text(&c, &d, "/v1/runs/chat_3/events?format=jsonl").await;
    // The third run records the second's history by reference, then its
    // own message; the journal rebuilds the whole history.
    let own: Vec<Value> = lines
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["kind"] == "run.input")
        .map(|e| e["payload"].clone())
        .collect();
    assert_eq!(own.len(), 2, "{lines}");
    assert_eq!(own[0]["history"]["run_id"], "chat_2", "{lines}");
    let mut inputs: Vec<Value> = common::rebuilt_history(&d.db, "chat_2");
    inputs.push(own[1]["message"].clone());
    let roles: Vec<&str> = inputs.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(
        roles,
        [
            "user",
            "assistant",
            "tool",
            "assistant",
            "user",
            "assistant",
            "tool",
            "assistant",
            "user"
        ],
        "{lines}"
    );
    let texts: Vec<String> = inputs
        .iter()
        .map(|m| {
            m["parts"][0]["text"]
                .as_str()
                .or(m["parts"][0]["content"].as_str())
                .unwrap_or("call")
                .to_owned()
        })
        .collect();
    assert_eq!(texts[3], "Oslo: 3 °C.");
    assert_eq!(texts[6], r#"{"city":"Bergen"}"#);
    assert_eq!(texts[8], "Tromsø?");
    // Refusals: unknown, and a run that did not complete.
    let r = post(
        &c,
        &d,
        "/v1/runs/nope/messages",
        weather_turn("chat_x", "Oslo", "?"),
    )
    .await;
    assert_eq!(r.status(), 404);
    let failing = json!({
        "run_id": "chat_failed", "model": "scripted-1",
        "messages": [{"role": "user", "text": "hi"}],
        "limits": {"retry": {"max_attempts": 1}},
        "provider": {"type": "scripted", "calls": [[{"fail": {"kind": "auth", "message": "no", "retryable": false}}]]}
    });
    assert_eq!(
        post(&c, &d, "/v1/runs", failing.to_string()).await.status(),
        201
    );
    wait_status(&c, &d, "chat_failed", "failed").await;
    let r = post(
        &c,
        &d,
        "/v1/runs/chat_failed/messages",
        weather_turn("chat_y", "Oslo", "?"),
    )
    .await;
    assert_eq!(r.status(), 409);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["type"], "urn:keel:problem:run-not-continuable", "{v}");
    assert_eq!(v["status"], "failed");
}

// ------------------------------------------- browsers: cross-site, SSE

/// A client that sends exactly the headers given (no default JSON type).
fn bare_client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap()
}

async fn problem_type(r: reqwest::Response) -> String {
    let v: Value = r.json().await.unwrap();
    v["type"].as_str().unwrap_or_default().to_owned()
}

async fn run_count(d: &Daemon) -> usize {
    let r = client().get(d.url("/v1/runs")).send().await.unwrap();
    let v: Value = r.json().await.unwrap();
    v["runs"].as_array().unwrap().len()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_foreign_host_is_421_before_anything_is_read_or_started() {
    let d = daemon(&["--public-host", "keel.internal:8443"], None);
    let c = bare_client();
    for (method, path) in [("GET", "/v1/runs"), ("GET", "/"), ("POST", "/v1/runs")] {
        for host in [
            "attacker.example",
            "attacker.example:7878",
            "127.0.0.1.nip.io",
        ] {
            let r = c
                .request(method.parse().unwrap(), d.url(path))
                .header("host", host)
                .header("content-type", "application/json")
                .body(plain("run_rebound"))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 421, "{method} {path} Host {host}");
            assert_eq!(problem_type(r).await, "urn:keel:problem:host-not-allowed");
        }
    }
    for host in ["localhost:1", "[::1]", "keel.internal:8443"] {
        let r = c
            .get(d.url("/v1/runs"))
            .header("host", host)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "Host {host}");
    }
    let r = c
        .get(d.url("/v1/runs"))
        .header("host", "keel.internal:9999")
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        421,
        "a --public-host with a port serves that port only"
    );
    assert_eq!(run_count(&d).await, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn simple_cross_site_posts_start_nothing() {
    let d = daemon(&["--allow-origin", "http://127.0.0.1:5555"], None);
    let c = bare_client();
    let bodies = [
        Some("text/plain"),
        Some("text/plain;charset=UTF-8"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
        None,
    ];
    for content_type in bodies {
        let mut r = c.post(d.url("/v1/runs")).body(plain("run_simple"));
        if let Some(t) = content_type {
            r = r.header("content-type", t);
        }
        let r = r.send().await.unwrap();
        assert_eq!(r.status(), 415, "{content_type:?}");
        assert_eq!(
            problem_type(r).await,
            "urn:keel:problem:unsupported-media-type"
        );
    }
    // Cancel and answers too, body or not.
    for path in [
        "/v1/runs/x/cancel",
        "/v1/runs/x/interactions/i",
        "/v1/runs/x/messages",
        "/v1/runs/x/fork?at=3",
    ] {
        let r = c.post(d.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 415, "{path}");
    }
    // A listed page reads why: the refusal carries its CORS header.
    let r = c
        .post(d.url("/v1/runs"))
        .header("origin", "http://127.0.0.1:5555")
        .header("content-type", "text/plain")
        .body(plain("run_listed_plain"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 415);
    assert_eq!(
        r.headers()["access-control-allow-origin"],
        "http://127.0.0.1:5555"
    );
    // A page on another origin, listed or not: refused or typed.
    let r = c
        .post(d.url("/v1/runs"))
        .header("origin", "http://evil.example")
        .header("content-type", "application/json")
        .body(plain("run_evil"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(problem_type(r).await, "urn:keel:problem:origin-not-allowed");
    assert_eq!(run_count(&d).await, 0);
    // The daemon's own origin (the viewer) may post.
    let r = c
        .post(d.url("/v1/runs"))
        .header("origin", d.base.clone())
        .header("content-type", "application/json")
        .body(plain("run_own"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
}

#[tokio::test(flavor = "multi_thread")]
async fn cors_answers_listed_origins_only_and_never_with_a_wildcard() {
    let allowed = "http://127.0.0.1:5555";
    for token in [None, Some("tok-123")] {
        let d = daemon(&["--allow-origin", allowed], token);
        let c = bare_client();
        let r = c
            .request(reqwest::Method::OPTIONS, d.url("/v1/runs"))
            .header("origin", allowed)
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "content-type,authorization",
            )
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "preflight {}", r.status());
        let h = r.headers();
        assert_eq!(h["access-control-allow-origin"], allowed);
        let allow_headers = h["access-control-allow-headers"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(allow_headers.contains("content-type"), "{allow_headers}");
        assert_eq!(
            allow_headers.contains("authorization"),
            token.is_some(),
            "Authorization is allowed exactly when a token is configured: {allow_headers}"
        );
        assert!(h["vary"].to_str().unwrap().contains("origin"));
        // A listed origin reads, with the headers a client needs.
        let mut get = c.get(d.url("/v1/runs")).header("origin", allowed);
        if let Some(t) = token {
            get = get.bearer_auth(t);
        }
        let r = get.send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["access-control-allow-origin"], allowed);
        for (name, value) in r.headers() {
            assert_ne!(value, "*", "{name} is a wildcard");
        }
        // Another origin gets no CORS headers, and no answer.
        let r = c
            .request(reqwest::Method::OPTIONS, d.url("/v1/runs"))
            .header("origin", "http://127.0.0.1:5556")
            .header("access-control-request-method", "POST")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403);
        assert!(r.headers().get("access-control-allow-origin").is_none());
    }
    // Without --allow-origin: no CORS headers at all.
    let d = daemon(&[], None);
    let r = bare_client().get(d.url("/v1/runs")).send().await.unwrap();
    assert!(r.headers().get("access-control-allow-origin").is_none());
}

#[test]
fn bad_cross_site_flags_are_exit_2_naming_the_flag() {
    for (flag, value) in [
        ("--allow-origin", "*"),
        ("--allow-origin", "http://example.com/app"),
        ("--allow-origin", "null"),
        ("--public-host", "bad host"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_keel"))
            .args(["serve", "--listen", "127.0.0.1:0", flag, value])
            .env_remove("KEEL_TOKEN")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{flag} {value}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(flag), "{flag} {value}: {err}");
    }
}

async fn raw_events(
    d: &Daemon,
    run: &str,
    query: &str,
    last_event_id: Option<u64>,
) -> reqwest::Response {
    let mut r = client().get(d.url(&format!("/v1/runs/{run}/events{query}")));
    if let Some(id) = last_event_id {
        r = r.header("last-event-id", id.to_string());
    }
    r.send().await.unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn event_streams_speak_eventsource() {
    let d = daemon(&[], None);
    let c = client();
    let run = create(&c, &d, plain("run_es")).await;
    wait_status(&c, &d, &run, "completed").await;
    // The retry hint comes first; named by kind by default.
    let text = raw_events(&d, &run, "", None).await.text().await.unwrap();
    assert!(text.starts_with("retry: 1000\n\n"), "{text}");
    assert!(text.contains("event: run.started\n"), "{text}");
    let last = text.matches("\nid: ").count() as u64 + u64::from(text.starts_with("id: "));
    // ?named=false: no event lines; every run event is a `message`.
    let text = raw_events(&d, &run, "?named=false", None)
        .await
        .text()
        .await
        .unwrap();
    assert!(!text.contains("event:"), "{text}");
    assert_eq!(text.matches("id: ").count() as u64, last);
    assert!(text.contains(r#""kind":"run.completed""#), "{text}");
    // A reconnect at the terminal gets 204; one before it gets the rest.
    let r = raw_events(&d, &run, "", Some(last)).await;
    assert_eq!(r.status(), 204);
    let r = raw_events(&d, &run, &format!("?after={last}"), None).await;
    assert_eq!(r.status(), 204);
    let r = raw_events(&d, &run, "", Some(last - 1)).await;
    assert_eq!(r.status(), 200);
    let rest = read_sse(r, |_| false).await;
    assert_eq!(seqs(&rest), vec![last]);
    // A bad `named` is a 400 naming the parameter.
    let r = raw_events(&d, &run, "?named=maybe", None).await;
    assert_eq!(r.status(), 400);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_run_list_has_turns_usage_and_times() {
    let d = daemon(&[], None);
    let c = client();
    let body = json!({
        "run_id": "run_totals",
        "model": "scripted-1",
        "messages": [{"role": "user", "text": "go"}],
        "tools": [{"name": "t", "description": "a tool", "parameters": {"type": "object"},
                   "requires_approval": false, "script": [{"ok": 1}]}],
        "provider": {"type": "scripted", "calls": [
            [{"tool_call": {"call_id": "c1", "name": "t", "arguments": {}}},
             {"complete": {"finish": "tool_calls", "usage": {"input_tokens": 10, "output_tokens": 3}}}],
            [{"text": "done"},
             {"complete": {"finish": "stop", "usage": {"input_tokens": 20, "output_tokens": 4}}}]
        ]}
    })
    .to_string();
    let run = create(&c, &d, body).await;
    wait_status(&c, &d, &run, "completed").await;
    create(&c, &d, plain("run_plain_totals")).await;
    wait_status(&c, &d, "run_plain_totals", "completed").await;
    let v: Value = get_json(&c, &d, "/v1/runs").await;
    let runs = v["runs"].as_array().unwrap();
    let entry = |id: &str| runs.iter().find(|r| r["run_id"] == id).unwrap().clone();
    let t = entry("run_totals");
    assert_eq!(t["turns"], 2);
    assert_eq!(t["usage"], json!({"input_tokens": 30, "output_tokens": 7}));
    assert!(t["updated_ts"].as_u64().unwrap() >= t["started_ts"].as_u64().unwrap());
    let p = entry("run_plain_totals");
    assert_eq!(p["turns"], 1);
    assert_eq!(p["usage"], json!({"input_tokens": 0, "output_tokens": 0}));
}
