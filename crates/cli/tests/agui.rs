#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `GET /v1/runs/{id}/agui`: a live stream, a finished stream and joins
//! mid-run (in a streaming text message, in a tool call), checked with the
//! official `@ag-ui/client` (pinned 1.0.0: each event parsed with
//! `@ag-ui/core`'s `EventSchemas`, the stream through `verifyEvents`) and
//! with `ag-ui-validate` (PyPI, pinned) on the captured SSE.

mod common;

use common::daemon::{Daemon, Serve, client, get_json, post};
use common::frontends::{self, VERIFY};
use serde_json::{Value, json};
use std::time::Duration;

/// A run with a retried partial answer, an uncertain tool failure, a
/// completed tool, and a text message and tool call that stay open for a
/// while (the joins land there).
fn scenario(run_id: &str) -> String {
    json!({
        "run_id": run_id,
        "model": "scripted-1",
        "messages": [{"role": "user", "text": "Weather in Oslo?"}],
        "limits": {"max_turns": 5,
                   "retry": {"max_attempts": 3, "initial_backoff_ms": 50, "jitter": 0, "partial": "restart"}},
        "tools": [
            {"name": "lookup", "description": "Looks up.", "parameters": {"type": "object"},
             "script": [{"delay_ms": 50, "error": {"message": "reset", "outcome": "uncertain", "retry": "retryable"}}]},
            {"name": "get_weather", "description": "Weather.", "parameters": {"type": "object"},
             "script": [{"delay_ms": 50, "ok": {"temp_c": 3}}]}
        ],
        "provider": {"type": "scripted", "calls": [
            [{"delay_ms": 100}, {"text": "Look"}, {"fail": {"kind": "unavailable", "message": "dropped", "retryable": true}}],
            [{"delay_ms": 100}, {"text": "Looking up."},
             {"tool_call": {"call_id": "c1", "name": "lookup", "arguments": {"q": "Oslo"}}},
             {"complete": {"finish": "tool_calls", "usage": {"input_tokens": 5, "output_tokens": 3}}}],
            [{"delay_ms": 100}, {"text": "Checking "}, {"delay_ms": 700}, {"text": "the weather."},
             {"tool_call": {"call_id": "c2", "name": "get_weather", "arguments": {"city": "Oslo"}}},
             {"delay_ms": 700},
             {"complete": {"finish": "tool_calls", "usage": {"input_tokens": 9, "output_tokens": 4}}}],
            [{"delay_ms": 100}, {"text": "3 °C."}, {"complete": {"finish": "stop"}}]
        ]}
    })
    .to_string()
}

/// One SSE message: its `id:` and its `data:` as JSON.
struct Message {
    id: u64,
    data: Value,
}

fn parse_sse(body: &str) -> Vec<Message> {
    let mut out = Vec::new();
    for block in body.split("\n\n") {
        let (mut id, mut data) = (None, String::new());
        for line in block.lines() {
            if let Some(v) = line.strip_prefix("id: ") {
                id = Some(v.parse().unwrap());
            } else if let Some(v) = line.strip_prefix("data: ") {
                data.push_str(v);
            }
        }
        if let Some(id) = id.filter(|_| !data.is_empty()) {
            out.push(Message {
                id,
                data: serde_json::from_str(&data).unwrap(),
            });
        }
    }
    out
}

async fn agui(c: &reqwest::Client, d: &Daemon, run: &str, after: Option<u64>) -> String {
    let mut request = c.get(d.url(&format!("/v1/runs/{run}/agui")));
    if let Some(after) = after {
        request = request.header("last-event-id", after.to_string());
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    response.text().await.unwrap()
}

/// The run's stored events as a JSON Lines page.
async fn events_page(c: &reqwest::Client, d: &Daemon, run: &str) -> String {
    c.get(d.url(&format!("/v1/runs/{run}/events?format=jsonl")))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The Keel seq of the first event `wanted` accepts, from the run's
/// events page, polling until it is there.
async fn seq_where(
    c: &reqwest::Client,
    d: &Daemon,
    run: &str,
    what: &str,
    wanted: impl Fn(&Value) -> bool,
) -> u64 {
    for _ in 0..200 {
        let page = events_page(c, d, run).await;
        for line in page.lines() {
            let v: Value = serde_json::from_str(line).unwrap();
            if wanted(&v) {
                return v["seq"].as_u64().unwrap();
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{what} never came");
}

/// The seq of the first text delta with `text`.
async fn seq_of_text(c: &reqwest::Client, d: &Daemon, run: &str, text: &str) -> u64 {
    seq_where(c, d, run, text, |v| {
        v["kind"] == "model.text_delta" && v["payload"]["text"] == text
    })
    .await
}

/// The seq of the `model.tool_call` of `call_id`.
async fn seq_of_call(c: &reqwest::Client, d: &Daemon, run: &str, call_id: &str) -> u64 {
    seq_where(c, d, run, call_id, |v| {
        v["kind"] == "model.tool_call" && v["payload"]["call_id"] == call_id
    })
    .await
}

/// The ids are the cursors the messages complete: non-decreasing, and
/// each Keel event's last AG-UI event carries its seq.
fn check_ids(messages: &[Message], cursor: u64) {
    let mut last = cursor;
    for m in messages {
        assert!(m.id >= last, "ids go back: {} after {last}", m.id);
        last = m.id;
        if let Some(seq) = m.data["rawEvent"]["seq"].as_u64().filter(|s| *s > cursor) {
            assert!(m.id == seq || m.id == seq - 1, "id {} for seq {seq}", m.id);
        }
    }
}

fn verify_with_client(streams: &[Vec<Value>]) {
    let input = serde_json::to_string(streams).unwrap();
    let out = frontends::run_node(VERIFY, &input);
    let results: Vec<String> = serde_json::from_str(out.trim()).unwrap();
    assert!(results.iter().all(|r| r == "ok"), "{results:?}");
}

fn validate_capture(validate: &std::path::Path, name: &str, body: &str) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(format!("{name}.sse"));
    std::fs::write(&file, body).unwrap();
    let out = std::process::Command::new(validate)
        .arg(&file)
        .arg("--json")
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("{name}: {}", String::from_utf8_lossy(&out.stdout)));
    let errors = report["summary"]["errors"]
        .as_u64()
        .or_else(|| report["errors"].as_u64());
    assert_eq!(errors, Some(0), "{name}: {report}");
}

#[tokio::test]
async fn live_finished_and_joined_streams_verify() {
    let test = "live_finished_and_joined_streams_verify";
    let Some(_modules) = frontends::node_modules(test) else {
        return;
    };
    let Some(validate) = frontends::venv_bin(test, "ag-ui-validate") else {
        return;
    };
    let d = Serve::new().start();
    let c = client();
    let run = "run_agui";
    let created = post(&c, &d, "/v1/runs", scenario(run)).await;
    assert_eq!(created.status(), 201);

    let live = tokio::spawn({
        let (c, url) = (c.clone(), d.url(&format!("/v1/runs/{run}/agui")));
        async move { c.get(url).send().await.unwrap().text().await.unwrap() }
    });
    // Joins while the run streams: inside the text message of the third
    // model call, then inside its tool call (before its model.completed).
    let in_text = seq_of_text(&c, &d, run, "Checking ").await;
    let mid_text = tokio::spawn({
        let (c, url) = (
            c.clone(),
            d.url(&format!("/v1/runs/{run}/agui?after={in_text}")),
        );
        async move { c.get(url).send().await.unwrap().text().await.unwrap() }
    });
    let in_call = seq_of_call(&c, &d, run, "c2").await;
    let mid_call = agui(&c, &d, run, Some(in_call)).await;
    let (live, mid_text) = (live.await.unwrap(), mid_text.await.unwrap());

    let mut status = get_json(&c, &d, &format!("/v1/runs/{run}")).await;
    for _ in 0..200 {
        if status["live"] == false {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        status = get_json(&c, &d, &format!("/v1/runs/{run}")).await;
    }
    assert_eq!(status["status"], "completed", "{status}");
    let finished = agui(&c, &d, run, None).await;

    let mut streams = Vec::new();
    for (name, body, cursor) in [
        ("live", &live, 0),
        ("finished", &finished, 0),
        ("mid_text", &mid_text, in_text),
        ("mid_call", &mid_call, in_call),
    ] {
        let messages = parse_sse(body);
        check_ids(&messages, cursor);
        let types: Vec<&str> = messages
            .iter()
            .map(|m| m.data["type"].as_str().unwrap())
            .collect();
        assert_eq!(types.first(), Some(&"RUN_STARTED"), "{name}");
        assert_eq!(types.last(), Some(&"RUN_FINISHED"), "{name}");
        if cursor > 0 {
            assert_eq!(types[1], "MESSAGES_SNAPSHOT", "{name}");
        }
        validate_capture(&validate, name, body);
        streams.push(messages.into_iter().map(|m| m.data).collect::<Vec<_>>());
    }
    // The joins re-open what was open: the text message, the tool call.
    let reopened = |s: &[Value], ty: &str| s.iter().take(8).any(|e| e["type"] == ty);
    assert!(reopened(&streams[2], "TEXT_MESSAGE_START"));
    assert!(reopened(&streams[3], "TOOL_CALL_START"));
    // The live and the finished stream say the same.
    assert_eq!(streams[0], streams[1]);
    // Every Keel event is some rawEvent of the stream.
    let lines = events_page(&c, &d, run).await;
    for line in lines.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        assert!(streams[1].iter().any(|e| e["rawEvent"] == v), "{line}");
    }
    verify_with_client(&streams);

    // At the terminal nothing follows; a bad cursor is a problem.
    let last = status["last_seq"].as_u64().unwrap();
    let r = c
        .get(d.url(&format!("/v1/runs/{run}/agui?after={last}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    for (path, code) in [
        (format!("/v1/runs/{run}/agui?after={}", last + 5), 400),
        ("/v1/runs/nope/agui".to_owned(), 404),
        (format!("/v1/runs/{run}/agui?format=jsonl"), 400),
    ] {
        let r = c.get(d.url(&path)).send().await.unwrap();
        assert_eq!(r.status(), code, "{path}");
        assert_eq!(r.headers()["content-type"], "application/problem+json");
    }
}

/// The seq of the first reasoning delta with `text`.
async fn seq_of_reasoning(c: &reqwest::Client, d: &Daemon, run: &str, text: &str) -> u64 {
    seq_where(c, d, run, text, |v| {
        v["kind"] == "model.reasoning_delta" && v["payload"]["text"] == text
    })
    .await
}

/// A run that reasons: a signed part and a redacted one before a tool
/// call, then an unsigned part before the answer.
fn reasoning_scenario(run_id: &str) -> String {
    json!({
        "run_id": run_id,
        "model": "scripted-1",
        "messages": [{"role": "user", "text": "Weather in Oslo?"}],
        "tools": [{"name": "get_weather", "description": "Weather.", "parameters": {"type": "object"},
                   "script": [{"ok": {"temp_c": 3}}]}],
        "provider": {"type": "scripted", "calls": [
            [{"reasoning": "The user "}, {"reasoning": "wants weather."},
             {"reasoning_signature": "c2lnLTE="}, {"redacted_reasoning": "b3BhcXVl"},
             {"text": "Checking."},
             {"tool_call": {"call_id": "c1", "name": "get_weather", "arguments": {"city": "Oslo"}}},
             {"complete": {"finish": "tool_calls"}}],
            [{"reasoning": "It is "}, {"reasoning": "cold."}, {"text": "3 °C."},
             {"complete": {"finish": "stop"}}]
        ]}
    })
    .to_string()
}

/// A run with reasoning, whole and joined inside each reasoning part (the
/// prelude re-opens it) and after the first turn (the snapshot holds the
/// reasoning messages with their encrypted values), passes the pinned
/// `verifyEvents` and `ag-ui-validate`.
#[tokio::test]
async fn reasoning_streams_and_joins_inside_it_verify() {
    let test = "reasoning_streams_and_joins_inside_it_verify";
    let Some(_modules) = frontends::node_modules(test) else {
        return;
    };
    let Some(validate) = frontends::venv_bin(test, "ag-ui-validate") else {
        return;
    };
    let d = Serve::new().start();
    let c = client();
    let run = "run_think";
    assert_eq!(
        post(&c, &d, "/v1/runs", reasoning_scenario(run))
            .await
            .status(),
        201
    );
    let in_first = seq_of_reasoning(&c, &d, run, "The user ").await;
    let in_second = seq_of_reasoning(&c, &d, run, "It is ").await;
    let after_turn = seq_where(&c, &d, run, "turn.started 2", |v| {
        v["kind"] == "turn.started" && v["payload"]["turn"] == 2
    })
    .await;
    let mut status = get_json(&c, &d, &format!("/v1/runs/{run}")).await;
    for _ in 0..200 {
        if status["live"] == false {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        status = get_json(&c, &d, &format!("/v1/runs/{run}")).await;
    }
    assert_eq!(status["status"], "completed", "{status}");

    let mut streams = Vec::new();
    for (name, cursor) in [
        ("whole", None),
        ("in_first", Some(in_first)),
        ("in_second", Some(in_second)),
        ("after_turn", Some(after_turn)),
    ] {
        let body = agui(&c, &d, run, cursor).await;
        validate_capture(&validate, name, &body);
        let messages = parse_sse(&body);
        check_ids(&messages, cursor.unwrap_or(0));
        streams.push(messages.into_iter().map(|m| m.data).collect::<Vec<_>>());
    }
    let types = |s: &[Value]| -> Vec<String> {
        s.iter()
            .map(|e| e["type"].as_str().unwrap().to_owned())
            .collect()
    };
    let whole = types(&streams[0]);
    for ty in [
        "REASONING_START",
        "REASONING_MESSAGE_START",
        "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_END",
        "REASONING_END",
        "REASONING_ENCRYPTED_VALUE",
    ] {
        assert!(whole.contains(&ty.to_owned()), "{ty} missing: {whole:?}");
    }
    let encrypted: Vec<&Value> = streams[0]
        .iter()
        .filter(|e| e["type"] == "REASONING_ENCRYPTED_VALUE")
        .map(|e| &e["encryptedValue"])
        .collect();
    assert_eq!(encrypted, [&json!("c2lnLTE="), &json!("b3BhcXVl")]);
    // A join inside reasoning re-opens it with the text so far.
    for (stream, text) in [(&streams[1], "The user "), (&streams[2], "It is ")] {
        assert_eq!(
            types(&stream[..6]),
            [
                "RUN_STARTED",
                "MESSAGES_SNAPSHOT",
                "STEP_STARTED",
                "REASONING_START",
                "REASONING_MESSAGE_START",
                "REASONING_MESSAGE_CONTENT"
            ]
        );
        assert_eq!(stream[5]["delta"], text);
    }
    // The snapshot after turn 1 holds its reasoning messages.
    let snapshot = &streams[3][1]["messages"];
    let reasoning: Vec<&Value> = snapshot
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "reasoning")
        .collect();
    assert_eq!(reasoning.len(), 2, "{snapshot}");
    assert_eq!(reasoning[0]["content"], "The user wants weather.");
    assert_eq!(reasoning[0]["encryptedValue"], "c2lnLTE=");
    assert_eq!(reasoning[1]["encryptedValue"], "b3BhcXVl");
    verify_with_client(&streams);
}
