#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! A chat agent whose agent tools start sub-runs streams them, checked
//! with the pinned frontend packages (tests/frontends): root → `planner`
//! (an agent tool) → `researcher` (an agent tool inside it), three levels.
//! - `POST /v1/agui`: the sub-runs are subagents (`SUBAGENT_STARTED` …
//!   `SUBAGENT_FINISHED`, their events carrying `subagentRunId`), the
//!   response passes `@ag-ui/core`'s `EventSchemas` and `@ag-ui/client`'s
//!   `verifyEvents`; its SSE ids are the tree's combined cursors, and a
//!   response cut inside a sub-run resumes from that id with the same
//!   tail, again verified.
//! - `POST /v1/chat`: the sub-runs are `data-keel-sub-run` parts of the
//!   assistant message, which the AI SDK's schema takes and its
//!   `readUIMessageStream` assembles, each part updated in place to its
//!   final status, nested by `call_id`.

mod common;

use common::daemon::{Daemon, Serve, client, post};
use common::frontends::{self, ASSEMBLE, VERIFY};
use serde_json::{Value, json};
use std::path::PathBuf;

fn daemon() -> Daemon {
    let file =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sub_runs/delegate.json");
    Serve::new()
        .args(&["--chat-scenario", file.to_str().unwrap()])
        .start()
}

/// The SSE messages of a body: (id, data as JSON).
fn parse_sse(body: &str) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for block in body.split("\n\n") {
        let (mut id, mut data) = (String::new(), String::new());
        for line in block.lines() {
            if let Some(v) = line.strip_prefix("id: ") {
                id = v.to_owned();
            } else if let Some(v) = line.strip_prefix("data: ") {
                data.push_str(v);
            }
        }
        if !data.is_empty() {
            out.push((id, serde_json::from_str(&data).unwrap()));
        }
    }
    out
}

fn agui_body(thread: &str) -> String {
    json!({"threadId": thread, "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": "Oslo?"}],
           "tools": [], "context": [], "state": {}, "forwardedProps": {}})
    .to_string()
}

async fn post_agui(d: &Daemon, body: String, last_event_id: Option<&str>) -> String {
    let mut req = client()
        .post(d.url("/v1/agui"))
        .header("content-type", "application/json")
        .header("accept", "text/event-stream")
        .body(body);
    if let Some(id) = last_event_id {
        req = req.header("last-event-id", id);
    }
    let resp = req.send().await.unwrap();
    assert_eq!(resp.status(), 200);
    resp.text().await.unwrap()
}

fn verify(streams: &[Vec<Value>]) -> Vec<String> {
    let out = frontends::run_node(VERIFY, &serde_json::to_string(streams).unwrap());
    serde_json::from_str(out.trim()).unwrap_or_else(|_| panic!("node said {out}"))
}

#[tokio::test]
async fn agui_streams_sub_runs_as_subagents_and_resumes_inside_one() {
    if frontends::node_modules("agui sub-runs").is_none() {
        return;
    }
    let d = daemon();
    let full = parse_sse(&post_agui(&d, agui_body("deleg"), None).await);
    let events: Vec<Value> = full.iter().map(|(_, e)| e.clone()).collect();
    let started: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "SUBAGENT_STARTED")
        .collect();
    assert_eq!(started.len(), 2, "{events:?}");
    assert_eq!(
        (&started[0]["name"], &started[0]["parentToolCallId"]),
        (&json!("planner"), &json!("k1"))
    );
    assert!(started[0].get("parentSubagentRunId").is_none());
    assert_eq!(
        (&started[1]["name"], &started[1]["parentToolCallId"]),
        (&json!("researcher"), &json!("k2"))
    );
    assert_eq!(
        started[1]["parentSubagentRunId"],
        started[0]["subagentRunId"]
    );
    let finished = events
        .iter()
        .filter(|e| e["type"] == "SUBAGENT_FINISHED")
        .count();
    assert_eq!(finished, 2);
    let grandchild = started[1]["subagentRunId"].as_str().unwrap();
    let said: String = events
        .iter()
        .filter(|e| e["type"] == "TEXT_MESSAGE_CONTENT" && e["subagentRunId"] == grandchild)
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(said, "Oslo is 4 °C.");
    assert_eq!(events.last().unwrap()["type"], "RUN_FINISHED");
    // Ids: combined cursors, listing the sub-runs while they are open.
    assert!(
        full.iter()
            .any(|(id, _)| id.contains(&format!(",{grandchild}:"))),
        "{full:?}"
    );

    // Cut after the last frame of a Keel event inside the grandchild and
    // resume from its id: the same tail, and a stream that verifies.
    let cut = full
        .windows(2)
        .position(|w| {
            w[0].1["subagentRunId"] == grandchild
                && w[0].1["type"] == "TEXT_MESSAGE_CONTENT"
                && w[1].0 != w[0].0
        })
        .unwrap();
    let resumed = parse_sse(&post_agui(&d, agui_body("deleg"), Some(&full[cut].0)).await);
    let resumed: Vec<Value> = resumed.into_iter().map(|(_, e)| e).collect();
    assert!(
        resumed.ends_with(&events[cut + 1..]),
        "the tail after {}: {resumed:?}",
        full[cut].0
    );
    let reopened: Vec<&str> = resumed[..resumed.len() - (events.len() - cut - 1)]
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert!(reopened.contains(&"SUBAGENT_STARTED"), "{reopened:?}");
    let results = verify(&[events, resumed]);
    assert_eq!(results, ["ok", "ok"]);
}

#[tokio::test]
async fn chat_streams_sub_runs_as_data_parts() {
    if frontends::node_modules("chat sub-runs").is_none() {
        return;
    }
    let d = daemon();
    let body = json!({"id": "deleg", "trigger": "submit-message", "messageId": null,
                      "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "Oslo?"}]}]});
    let resp = post(&client(), &d, "/v1/chat", body.to_string()).await;
    assert_eq!(resp.status(), 200);
    let sse = resp.text().await.unwrap();
    let out = frontends::run_node(ASSEMBLE, &json!({"body": sse, "message": null}).to_string());
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    let parts = v["message"]["parts"].as_array().unwrap();
    let sub_runs: Vec<&Value> = parts
        .iter()
        .filter(|p| p["type"] == "data-keel-sub-run")
        .collect();
    assert_eq!(
        sub_runs.len(),
        2,
        "one part per sub-run, updated in place: {parts:?}"
    );
    let (child, grandchild) = (&sub_runs[0]["data"], &sub_runs[1]["data"]);
    assert_eq!(
        (&child["tool"], &child["call_id"], &child["status"]),
        (&json!("planner"), &json!("k1"), &json!("completed"))
    );
    assert_eq!(
        (
            &grandchild["tool"],
            &grandchild["call_id"],
            &grandchild["status"]
        ),
        (&json!("researcher"), &json!("k2"), &json!("completed"))
    );
    assert_eq!(grandchild["parent_run_id"], child["run_id"]);
    assert_eq!(child["turns"], 2);
    // The planner's tool part holds the child's answer; the message's text
    // is the root's only.
    let tool = parts.iter().find(|p| p["toolCallId"] == "k1").unwrap();
    assert_eq!(tool["output"], "Plan: say 4 °C.");
    let text: String = parts
        .iter()
        .filter(|p| p["type"] == "text")
        .map(|p| p["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, "Delegating.It is 4 °C in Oslo.");
}
