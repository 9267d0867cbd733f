//! `keel run` against a local server that replays real provider wire
//! transcripts (the shared fixtures): OpenAI-compatible and Anthropic, a
//! retried 429 before the stream, a tool round trip, and the key kept out
//! of every output and of the database.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
use common::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

const SECRET: &str = "sk-test-REPLAYKEY0123456789abcdefghij";

/// Status, headers and body of one replayed response.
type Response = (u16, Vec<(String, String)>, Vec<u8>);

struct Recorded {
    requests: Vec<(String, String)>, // (head, body)
}

/// Serves one fixture per connection, in order; records each request.
fn replay(fixtures: &[&str]) -> (String, Arc<Mutex<Recorded>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let recorded = Arc::new(Mutex::new(Recorded {
        requests: Vec::new(),
    }));
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let responses: Vec<Response> = fixtures
        .iter()
        .map(|name| {
            let meta: serde_json::Value = serde_json::from_str(
                &std::fs::read_to_string(dir.join(format!("{name}.json"))).unwrap(),
            )
            .unwrap();
            let body = std::fs::read(dir.join(format!("{name}.sse"))).unwrap();
            let headers = meta["headers"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
                .collect();
            (meta["status"].as_u64().unwrap() as u16, headers, body)
        })
        .collect();
    let rec = recorded.clone();
    std::thread::spawn(move || {
        for (status, headers, body) in responses {
            let Ok((stream, _)) = listener.accept() else {
                return;
            };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut head = String::new();
            let mut length = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap();
                }
                head.push_str(&line);
            }
            let mut req = vec![0; length];
            reader.read_exact(&mut req).unwrap();
            rec.lock()
                .unwrap()
                .requests
                .push((head, String::from_utf8(req).unwrap()));
            let mut out = stream;
            let mut response = format!(
                "HTTP/1.1 {status} X\r\nconnection: close\r\ncontent-length: {}\r\n",
                body.len()
            );
            for (k, v) in headers {
                response.push_str(&format!("{k}: {v}\r\n"));
            }
            response.push_str("\r\n");
            out.write_all(response.as_bytes()).unwrap();
            out.write_all(&body).unwrap();
            out.flush().unwrap();
        }
    });
    (format!("http://{addr}/v1"), recorded)
}

fn run_scenario(sb: &Sandbox, scenario: &str) -> std::process::Output {
    let file = sb.write("net.json", scenario);
    keel()
        .arg("run")
        .arg(&file)
        .args(sb.db_args())
        .args(["--approve", "all"])
        .env("KEEL_TEST_API_KEY", SECRET)
        .output()
        .unwrap()
}

fn assert_no_secret(sb: &Sandbox, out: &std::process::Output) {
    let (stdout, stderr) = text(out);
    assert!(!stdout.contains(SECRET) && !stderr.contains(SECRET));
    let db = std::fs::read(sb.db()).unwrap();
    assert!(
        !db.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()),
        "key stored in the database"
    );
}

#[test]
fn openai_compatible_retries_a_429_then_streams_the_answer() {
    let (base, recorded) = replay(&["rate_limited_429", "text_only"]);
    let sb = Sandbox::new();
    let out = run_scenario(
        &sb,
        &format!(
            r#"{{"model": "gpt-5-mini", "messages": [{{"role": "user", "text": "Tell me about smørrebrød"}}],
                "allow_metadata": ["openai"],
                "limits": {{"retry": {{"initial_backoff_ms": 10, "max_backoff_ms": 1500}}}},
                "provider": {{"type": "openai-compatible", "base_url": "{base}", "api_key_env": "KEEL_TEST_API_KEY"}}}}"#
        ),
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("Smørrebrød (open sandwiches) are a Danish lunch classic 🥪"),
        "{stdout}"
    );
    let requests = &recorded.lock().unwrap().requests;
    assert_eq!(requests.len(), 2, "one retry after the 429");
    let (head, body) = &requests[1];
    assert!(head.starts_with("POST /v1/chat/completions"), "{head}");
    assert!(head.to_ascii_lowercase().contains(&format!(
        "authorization: bearer {}",
        SECRET.to_ascii_lowercase()
    )));
    let body: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(body["stream"], true);
    assert_eq!(body["model"], "gpt-5-mini");
    assert_no_secret(&sb, &out);
    // The stored run: a pristine retryable failure, then the answer; verify is clean.
    let json = keel().args(["runs"]).args(sb.db_args()).output().unwrap();
    assert!(text(&json).0.contains("completed"));
    let verify = keel().arg("verify").args(sb.db_args()).output().unwrap();
    assert_eq!(verify.status.code(), Some(0), "{}", text(&verify).1);
}

#[test]
fn anthropic_tool_round_trip() {
    let (base, recorded) = replay(&["anthropic_single_tool_call", "anthropic_text_only"]);
    let sb = Sandbox::new();
    let out = run_scenario(
        &sb,
        &format!(
            r#"{{"model": "claude-sonnet-4-5", "messages": [{{"role": "system", "text": "Be brief."}}, {{"role": "user", "text": "Write a note"}}],
                "tools": [{{"name": "write_file", "description": "Write a file", "parameters": {{"type": "object"}},
                            "script": [{{"ok": "written"}}]}}],
                "provider": {{"type": "anthropic", "base_url": "{base}", "api_key_env": "KEEL_TEST_API_KEY"}}}}"#
        ),
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("write_file"), "{stdout}");
    let requests = &recorded.lock().unwrap().requests;
    assert_eq!(requests.len(), 2);
    let (head, first) = &requests[0];
    assert!(head.starts_with("POST /v1/messages"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("anthropic-version: 2023-06-01")
    );
    let first: serde_json::Value = serde_json::from_str(first).unwrap();
    assert_eq!(first["system"], "Be brief.");
    // The second request carries the tool result answering the tool_use id.
    let second: serde_json::Value = serde_json::from_str(&requests[1].1).unwrap();
    let text_second = second.to_string();
    assert!(
        text_second.contains("toolu_01aGqHVXxxYJ3zCxhr73RH1C")
            && text_second.contains("tool_result"),
        "{text_second}"
    );
    assert_no_secret(&sb, &out);
    let verify = keel().arg("verify").args(sb.db_args()).output().unwrap();
    assert_eq!(verify.status.code(), Some(0));
}

#[test]
fn a_missing_key_variable_is_bad_input_naming_the_variable() {
    let sb = Sandbox::new();
    let file = sb.write(
        "net.json",
        r#"{"model": "m", "messages": [{"role": "user", "text": "hi"}],
            "provider": {"type": "openai-compatible", "base_url": "http://127.0.0.1:9/v1", "api_key_env": "KEEL_TEST_UNSET_KEY"}}"#,
    );
    let out = keel()
        .arg("run")
        .arg(&file)
        .args(sb.db_args())
        .env_remove("KEEL_TEST_UNSET_KEY")
        .output()
        .unwrap();
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("KEEL_TEST_UNSET_KEY"), "{stderr}");
    assert!(!sb.db().exists(), "nothing is opened on bad input");
}
