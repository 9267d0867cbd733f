#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `keel serve` under hostile clients (issue #22): raw sockets that stay
//! silent, trickle their head or body, or never read, against the real
//! binary with small bounds; reqwest for the authenticated client.
//!
//! Each bound is set far below its default, and each guard (how long a
//! test waits for the daemon to act) far below the default too, so a test
//! fails when its rule is missing.

mod common;

use common::daemon::{Daemon, Serve, client, create, get, get_json, wait_status};
use serde_json::{Value, json};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

const TOKEN: &str = "h0stile-test-token";
/// How long a test waits for the daemon to close a socket: below every
/// default timeout (10 s header, 10 s write, 30 s body, 60 s idle).
const GUARD: Duration = Duration::from_secs(5);

fn daemon(extra: &[&str], token: Option<&str>) -> Daemon {
    Serve::new().args(extra).token(token).start()
}

/// A TCP connection to `d` from `127.0.0.LAST` (distinct peers on Linux
/// loopback), with a receive buffer of `recv_buffer` bytes when given.
async fn connect_from(d: &Daemon, last: u8, recv_buffer: Option<u32>) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    if let Some(n) = recv_buffer {
        socket.set_recv_buffer_size(n).unwrap();
    }
    socket
        .bind(SocketAddr::new(IpAddr::from([127, 0, 0, last]), 0))
        .unwrap();
    socket.connect(d.addr).await.unwrap()
}

/// Reads until the daemon closes the socket (EOF or reset); what was read,
/// or `None` when it was still open after [`GUARD`].
async fn read_until_closed(s: &mut TcpStream, guard: Duration) -> Option<Vec<u8>> {
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    let until = tokio::time::Instant::now() + guard;
    loop {
        match tokio::time::timeout_at(until, s.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(got),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// Whether the daemon has closed `s` (a read gives EOF or an error
/// within a short look; a silent open socket gives nothing).
async fn is_closed(s: &mut TcpStream) -> bool {
    read_until_closed(s, Duration::from_millis(200))
        .await
        .is_some()
}

/// Sends one request on `s` and reads its whole response (by
/// Content-Length); the status code and the body.
async fn request(s: &mut TcpStream, head: &str) -> (u16, String) {
    s.write_all(head.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let n = tokio::time::timeout(GUARD, s.read(&mut buf))
            .await
            .expect("no response")
            .unwrap();
        assert!(
            n > 0,
            "closed mid-response: {:?}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got).into_owned();
        let Some(end) = text.find("\r\n\r\n") else {
            continue;
        };
        let len: usize = text[..end]
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length: ")
                    .map(|v| v.trim().parse().unwrap())
            })
            .expect("no content-length");
        if got.len() >= end + 4 + len {
            let status = text[9..12].parse().unwrap();
            return (status, text[end + 4..end + 4 + len].to_owned());
        }
    }
}

fn authed_get(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n\r\n")
}

async fn authed_list(d: &Daemon) -> reqwest::StatusCode {
    client()
        .get(d.url("/v1/runs"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .status()
}

#[tokio::test]
async fn a_silent_client_is_cut_off_at_the_header_timeout() {
    let d = daemon(&["--header-timeout-ms", "300"], None);
    let mut s = connect_from(&d, 1, None).await;
    let got = read_until_closed(&mut s, GUARD).await;
    assert!(
        got.is_some(),
        "a silent socket was still open after {GUARD:?}"
    );
}

#[tokio::test]
async fn trickled_headers_are_cut_off_and_never_served() {
    let d = daemon(&["--header-timeout-ms", "500"], None);
    let mut s = connect_from(&d, 1, None).await;
    s.write_all(b"GET /v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .await
        .unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 4096];
    let mut answer = Vec::new();
    let closed = loop {
        assert!(
            started.elapsed() < GUARD,
            "a trickling head was still read after {GUARD:?}"
        );
        // One header line every 50 ms: bytes keep moving, the head never ends.
        if s.write_all(b"X-Trickle: a\r\n").await.is_err() {
            break true;
        }
        match s.try_read(&mut buf) {
            Ok(0) => break true,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => break true,
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(closed);
    let answer = String::from_utf8_lossy(&answer);
    assert!(!answer.contains(" 200 "), "served: {answer}");
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed() {
    let d = daemon(
        &["--header-timeout-ms", "30000", "--idle-timeout-ms", "300"],
        None,
    );
    let mut s = connect_from(&d, 1, None).await;
    let (status, _) = request(&mut s, "GET /v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").await;
    assert_eq!(status, 200);
    assert!(
        read_until_closed(&mut s, GUARD).await.is_some(),
        "an idle connection was still open after {GUARD:?}"
    );
}

#[tokio::test]
async fn a_stalled_body_is_answered_408() {
    let d = daemon(&["--body-timeout-ms", "300"], None);
    let mut s = connect_from(&d, 1, None).await;
    s.write_all(
        b"POST /v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"run_id\":",
    )
    .await
    .unwrap();
    let got = read_until_closed(&mut s, GUARD)
        .await
        .unwrap_or_else(|| panic!("no answer to a stalled body after {GUARD:?}"));
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 408 "), "{text}");
    assert!(text.contains("application/problem+json"), "{text}");
    assert!(text.contains("urn:keel:problem:body-timeout"), "{text}");
    assert!(text.contains("--body-timeout-ms"), "{text}");
}

/// A finished run whose event stream is about 1 MB: 900 text deltas of
/// 1000 bytes.
async fn large_run(d: &Daemon) -> String {
    let delta = "x".repeat(1000);
    let mut calls: Vec<Value> = (0..900).map(|_| json!({"text": delta})).collect();
    calls.push(json!({"complete": {"finish": "stop"}}));
    let body = json!({
        "run_id": "run_large",
        "model": "scripted-1",
        "messages": [{"role": "user", "text": "go"}],
        "provider": {"type": "scripted", "calls": [calls]}
    })
    .to_string();
    let c = client();
    let run = create(&c, d, body).await;
    wait_status(&c, d, &run, "completed").await;
    run
}

#[tokio::test]
async fn a_client_that_does_not_read_is_dropped_at_the_write_timeout() {
    let d = daemon(
        &["--write-timeout-ms", "300", "--send-buffer-bytes", "16384"],
        None,
    );
    let run = large_run(&d).await;
    // A reader that keeps up gets the whole stream, to its terminal.
    let whole = get(&client(), &d, &format!("/v1/runs/{run}/events"))
        .await
        .bytes()
        .await
        .unwrap();
    assert!(whole.len() > 900_000, "{}", whole.len());
    assert!(String::from_utf8_lossy(&whole).contains("event: run.completed"));

    let mut s = connect_from(&d, 1, Some(4096)).await;
    s.write_all(
        format!("GET /v1/runs/{run}/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    // Never read while the daemon's writes stall, well past their bound.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let got = read_until_closed(&mut s, GUARD)
        .await
        .unwrap_or_else(|| panic!("a non-reading client was still connected"));
    let text = String::from_utf8_lossy(&got);
    assert!(
        !text.contains("event: run.completed"),
        "the whole stream was held for it"
    );
    // What the client holds is what the socket buffers held when the
    // daemon gave up: a fraction of the stream.
    assert!(
        got.len() < whole.len() / 2,
        "{} of {}",
        got.len(),
        whole.len()
    );
}

#[tokio::test]
async fn silent_peers_at_the_per_peer_cap_do_not_lock_out_a_client_with_the_token() {
    let d = daemon(
        &[
            "--max-connections-per-peer",
            "3",
            "--header-timeout-ms",
            "30000",
        ],
        Some(TOKEN),
    );
    // The same address as the authenticated client: 127.0.0.1.
    let mut silent = Vec::new();
    for _ in 0..3 {
        silent.push(connect_from(&d, 1, None).await);
    }
    assert_eq!(authed_list(&d).await, 200);
    assert!(
        is_closed(&mut silent[0]).await,
        "the oldest silent socket made room"
    );
    assert!(!is_closed(&mut silent[2]).await);
}

#[tokio::test]
async fn silent_peers_filling_the_total_cap_do_not_lock_out_a_client_with_the_token() {
    let d = daemon(
        &[
            "--max-connections",
            "4",
            "--max-connections-per-peer",
            "4",
            "--header-timeout-ms",
            "30000",
        ],
        Some(TOKEN),
    );
    let mut silent = Vec::new();
    for _ in 0..4 {
        silent.push(connect_from(&d, 2, None).await);
    }
    for _ in 0..3 {
        assert_eq!(authed_list(&d).await, 200);
    }
    assert!(
        is_closed(&mut silent[0]).await,
        "the oldest silent socket made room"
    );
    assert!(!is_closed(&mut silent[3]).await);
}

#[tokio::test]
async fn authenticated_connections_keep_their_slots_and_the_next_is_refused_503() {
    let d = daemon(
        &["--max-connections", "2", "--max-connections-per-peer", "2"],
        Some(TOKEN),
    );
    let mut first = connect_from(&d, 1, None).await;
    let mut second = connect_from(&d, 2, None).await;
    assert_eq!(request(&mut first, &authed_get("/v1/runs")).await.0, 200);
    assert_eq!(request(&mut second, &authed_get("/v1/runs")).await.0, 200);
    let mut third = connect_from(&d, 3, None).await;
    let got = read_until_closed(&mut third, GUARD).await.unwrap();
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 503 "), "{text}");
    assert!(text.contains("retry-after: 1"), "{text}");
    assert!(
        text.contains("urn:keel:problem:too-many-connections"),
        "{text}"
    );
    assert!(text.contains("\"bound\":\"max_connections\""), "{text}");
    // The authenticated connections were not closed to make room.
    assert_eq!(request(&mut first, &authed_get("/v1/runs")).await.0, 200);
    drop(second);
    // Its slot is freed when it closes.
    let until = Instant::now() + GUARD;
    loop {
        let mut next = connect_from(&d, 3, None).await;
        next.write_all(authed_get("/v1/runs").as_bytes())
            .await
            .unwrap();
        let got = read_until_closed(&mut next, Duration::from_millis(500)).await;
        let answered = match got {
            None => true, // kept open after its answer: admitted
            Some(bytes) => !String::from_utf8_lossy(&bytes).starts_with("HTTP/1.1 503 "),
        };
        if answered {
            break;
        }
        assert!(
            Instant::now() < until,
            "the closed connection's slot was not freed"
        );
    }
}

/// A run that stops at an approval, so its event stream stays open.
fn gated(run_id: &str) -> String {
    json!({
        "run_id": run_id,
        "model": "scripted-1",
        "messages": [{"role": "user", "text": "go"}],
        "tools": [{"name": "gate", "description": "waits for approval",
                   "parameters": {"type": "object"}, "requires_approval": true,
                   "script": [{"ok": "opened"}]}],
        "provider": {"type": "scripted", "calls": [
            [{"tool_call": {"call_id": "c1", "name": "gate", "arguments": {}}},
             {"complete": {"finish": "tool_calls"}}],
            [{"text": "done"}, {"complete": {"finish": "stop"}}]
        ]}
    })
    .to_string()
}

async fn assert_too_many_streams(r: reqwest::Response, bound: &str) {
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers().get("retry-after").unwrap(), "5");
    assert_eq!(
        r.headers().get("content-type").unwrap(),
        "application/problem+json"
    );
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["type"], "urn:keel:problem:too-many-streams");
    assert_eq!(v["bound"], bound);
}

#[tokio::test]
async fn event_streams_are_capped_per_run_and_in_total() {
    let d = daemon(&["--max-streams", "2", "--max-streams-per-run", "1"], None);
    let c = client();
    create(&c, &d, gated("run_a")).await;
    create(&c, &d, gated("run_b")).await;
    let a = get(&c, &d, "/v1/runs/run_a/events").await;
    assert_eq!(a.status(), 200);
    assert_too_many_streams(
        get(&c, &d, "/v1/runs/run_a/agui").await,
        "max_streams_per_run",
    )
    .await;
    let b = get(&c, &d, "/v1/runs/run_b/events").await;
    assert_eq!(b.status(), 200);
    assert_too_many_streams(get(&c, &d, "/v1/chat/run_c/stream").await, "max_streams").await;
    // Other routes are not capped.
    assert_eq!(get(&c, &d, "/v1/runs/run_a").await.status(), 200);
    // A stream's slot is freed when its client goes away.
    drop(a);
    let until = Instant::now() + GUARD;
    loop {
        let again = get(&c, &d, "/v1/runs/run_a/events").await;
        if again.status() == 200 {
            break;
        }
        assert_eq!(again.status(), 503);
        assert!(Instant::now() < until, "a closed stream kept its slot");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(b);
}

fn plain(run_id: &str) -> String {
    json!({
        "run_id": run_id,
        "model": "scripted-1",
        "messages": [{"role": "user", "text": "hi"}],
        "provider": {"type": "scripted", "calls": [[
            {"text": "Hello"}, {"complete": {"finish": "stop"}}
        ]]}
    })
    .to_string()
}

#[tokio::test]
async fn the_run_list_pages_with_a_cursor() {
    let d = daemon(&[], None);
    let c = client();
    let mut made = Vec::new();
    for i in 0..5 {
        let run = create(&c, &d, plain(&format!("run_page_{i}"))).await;
        wait_status(&c, &d, &run, "completed").await;
        made.push(run);
    }
    let everything = get_json(&c, &d, "/v1/runs").await;
    assert_eq!(everything["runs"].as_array().unwrap().len(), 5);
    assert_eq!(everything["next"], Value::Null);
    let mut seen = Vec::new();
    let mut path = "/v1/runs?limit=2".to_owned();
    let mut pages = 0;
    loop {
        let page = get_json(&c, &d, &path).await;
        let runs = page["runs"].as_array().unwrap();
        assert!(runs.len() <= 2);
        seen.extend(
            runs.iter()
                .map(|r| r["run_id"].as_str().unwrap().to_owned()),
        );
        pages += 1;
        match page["next"].as_str() {
            Some(next) => path = format!("/v1/runs?limit=2&after={next}"),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    let listed: Vec<String> = everything["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(seen, listed, "the pages are the list, in order, once each");
    let mut sorted = seen.clone();
    sorted.sort();
    assert_eq!(sorted, made);

    for (query, member) in [
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("limit=x", "limit"),
        ("after=zz", "after"),
        ("after=6162", "after"),
    ] {
        let r = get(&c, &d, &format!("/v1/runs?{query}")).await;
        assert_eq!(r.status(), 400, "{query}");
        assert_eq!(
            r.headers().get("content-type").unwrap(),
            "application/problem+json"
        );
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["type"], "urn:keel:problem:invalid-page", "{query}");
        assert_eq!(v["parameter"], member, "{query}");
    }
}

/// Every run id of `path` and the pages after it, in order.
async fn all_listed(c: &reqwest::Client, d: &Daemon, path: &str) -> Vec<String> {
    let mut seen = Vec::new();
    let mut next_path = format!("{path}&limit=1");
    loop {
        let page = get_json(c, d, &next_path).await;
        seen.extend(
            page["runs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["run_id"].as_str().unwrap().to_owned()),
        );
        match page["next"].as_str() {
            Some(next) => next_path = format!("{path}&limit=1&after={next}"),
            None => return seen,
        }
    }
}

#[tokio::test]
async fn the_run_list_filters_by_status_conversation_and_since() {
    let d = daemon(&[], None);
    let c = client();
    let first = create(&c, &d, plain("run_f_a")).await;
    wait_status(&c, &d, &first, "completed").await;
    let started = get_json(&c, &d, "/v1/runs/run_f_a").await["started_ts"]
        .as_u64()
        .unwrap();
    let r = common::daemon::post(&c, &d, "/v1/runs/run_f_a/messages", plain("run_f_b")).await;
    assert_eq!(r.status(), 201);
    wait_status(&c, &d, "run_f_b", "completed").await;
    let loose = create(&c, &d, plain("run_f_c")).await;
    wait_status(&c, &d, &loose, "completed").await;
    for (query, want) in [
        ("status=completed", vec!["run_f_a", "run_f_b", "run_f_c"]),
        ("status=failed", vec![]),
        ("conversation=run_f_b", vec!["run_f_a", "run_f_b"]),
        ("conversation=run_f_c", vec!["run_f_c"]),
        ("conversation=run_f_none", vec![]),
        (
            "status=completed&conversation=run_f_a",
            vec!["run_f_a", "run_f_b"],
        ),
        (
            &*format!("since={}", started / 1000 + 1),
            vec!["run_f_b", "run_f_c"],
        ),
        (
            "since=1970-01-01T00:00:00Z",
            vec!["run_f_a", "run_f_b", "run_f_c"],
        ),
    ] {
        assert_eq!(
            all_listed(&c, &d, &format!("/v1/runs?{query}")).await,
            want,
            "{query}"
        );
    }
    let page = get_json(&c, &d, "/v1/runs?status=completed&limit=1").await;
    let next = page["next"].as_str().unwrap().to_owned();
    for (query, member, rule) in [
        ("status=done", "status", "runs.status"),
        ("conversation=a%20b", "conversation", "runs.conversation"),
        ("since=yesterday", "since", "runs.since"),
        (&*format!("after={next}"), "after", "runs.cursor_filters"),
        (
            &*format!("status=failed&after={next}"),
            "after",
            "runs.cursor_filters",
        ),
    ] {
        let r = get(&c, &d, &format!("/v1/runs?{query}")).await;
        assert_eq!(r.status(), 400, "{query}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["type"], "urn:keel:problem:invalid-page", "{query}");
        assert_eq!(v["parameter"], member, "{query}");
        assert_eq!(v["rule"], rule, "{query}");
    }
    let allowed = get_json(&c, &d, "/v1/runs?status=done").await["allowed"].clone();
    assert_eq!(
        allowed,
        json!(["running", "completed", "failed", "cancelled"])
    );
}

/// Every body `keel serve` reads refuses a repeated member, naming its
/// JSON path (issue #32, R9): last-wins would let
/// `"approved":false,"approved":true` approve.
#[tokio::test]
async fn every_body_refuses_a_duplicate_member_by_its_path() {
    let chat =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/chat/approval.json");
    let d = daemon(&["--chat-scenario", chat.to_str().unwrap()], None);
    let approval = r#"{"id":"c1","trigger":"submit-message","messages":[
        {"id":"u1","role":"user","parts":[{"type":"text","text":"go"}]},
        {"id":"a1","role":"assistant","parts":[{"type":"tool-x","toolCallId":"t1",
          "state":"approval-responded","approval":{"id":"i1","approved":false,"approved":true}}]}]}"#;
    let scenario = r#"{"model":"scripted-1","messages":[{"role":"user","text":"hi"}],
        "tools":[{"name":"t","parameters":{"type":"object","type":"string"},"script":[]}],
        "provider":{"type":"scripted","calls":[]}}"#;
    let answer = r#"{"decision":"denied","decision":"approved"}"#;
    for (route, body, at) in [
        (
            "/v1/chat",
            approval,
            "$.messages[1].parts[0].approval.approved",
        ),
        ("/v1/runs", scenario, "tools[0].parameters.type"),
        ("/v1/runs/r1/interactions/i1", answer, "$.decision"),
    ] {
        let r = client().post(d.url(route)).body(body).send().await.unwrap();
        let status = r.status();
        let v: Value = r.json().await.unwrap();
        assert_eq!(status, 400, "{route}: {v}");
        assert_eq!(v["path"], at, "{route}: {v}");
        assert!(
            v["detail"].as_str().unwrap().contains("json.duplicate_key"),
            "{route}: {v}"
        );
    }
}

/// A head that two readers could read two ways is refused before any
/// other rule (issue #32, R11): an absolute-form target (its Host might
/// name another host than its URL), and a repeated Host or Origin (a
/// proxy may read the last where the daemon reads the first).
#[tokio::test]
async fn an_ambiguous_request_head_is_refused() {
    let d = daemon(&[], None);
    let port = d.port();
    let plain = format!("GET /v1/runs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n");
    let mut s = connect_from(&d, 1, None).await;
    assert_eq!(request(&mut s, &plain).await.0, 200, "the control");
    for (head, kind) in [
        (
            format!("GET http://127.0.0.1:{port}/v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
            "absolute-target",
        ),
        (
            "GET http://evil.example/v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".to_owned(),
            "absolute-target",
        ),
        (
            "GET /v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.example\r\n\r\n".to_owned(),
            "repeated-header",
        ),
        (
            format!(
                "GET /v1/runs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nOrigin: http://127.0.0.1:{port}\r\nOrigin: http://evil.example\r\n\r\n"
            ),
            "repeated-header",
        ),
    ] {
        let mut s = connect_from(&d, 1, None).await;
        let (status, body) = request(&mut s, &head).await;
        assert_eq!(status, 400, "{head:?}: {body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["type"], format!("urn:keel:problem:{kind}"), "{head:?}");
        assert!(
            v["detail"]
                .as_str()
                .unwrap()
                .contains("rule http.unambiguous_head")
        );
    }
}

/// U+2028 and U+2029 never stand raw on a `data:` line (issue #32, R11):
/// the Keel and AG-UI streams write them as `\u2028` and `\u2029`.
#[tokio::test]
async fn line_separators_are_escaped_on_every_data_line() {
    let d = daemon(&[], None);
    let c = client();
    let body = json!({
        "run_id": "run_separators",
        "model": "scripted-1",
        "messages": [{"role": "user", "text": "a\u{2028}b"}],
        "provider": {"type": "scripted", "calls": [[
            {"text": "c\u{2029}d\u{2028}e"}, {"complete": {"finish": "stop"}}]]}
    })
    .to_string();
    let run = create(&c, &d, body).await;
    wait_status(&c, &d, &run, "completed").await;
    for stream in ["events", "agui"] {
        let bytes = get(&c, &d, &format!("/v1/runs/{run}/{stream}"))
            .await
            .bytes()
            .await
            .unwrap();
        let text = String::from_utf8(bytes.to_vec()).unwrap();
        assert!(!text.contains(['\u{2028}', '\u{2029}']), "{stream}: {text}");
        assert!(
            text.contains("\\u2028") && text.contains("\\u2029"),
            "{stream}: {text}"
        );
    }
}
