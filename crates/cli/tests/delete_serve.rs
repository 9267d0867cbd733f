#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The daemon's deletion routes: `DELETE /v1/runs/{id}` (and
//! `?conversation=true`), `POST /v1/prune?older_than=`; behind the token
//! and the JSON content-type defence, refusing live runs and runs others
//! depend on, leaving no byte of a deleted run in the journal's files.

mod common;

use common::daemon::{Daemon, Serve, get, get_json, wait_status};
use serde_json::{Value, json};
use std::path::Path;

const TOKEN: &str = "s3cret-token";

/// A client that sends JSON and the daemon's bearer token.
fn authed_client() -> reqwest::Client {
    common::daemon::client_builder()
        .default_headers({
            let mut h = reqwest::header::HeaderMap::new();
            h.insert("content-type", "application/json".parse().unwrap());
            h.insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
            h
        })
        .build()
        .unwrap()
}

fn marker(id: &str) -> String {
    format!("MARKER<{id}>")
}

/// A run answering with its marker; `gate` makes it wait on an approval.
fn scenario(run_id: &str, gate: bool) -> String {
    let mut first = vec![json!({"text": format!("answer {}", marker(run_id))})];
    let mut calls = vec![];
    if gate {
        first.push(json!({"tool_call": {"call_id": "c1", "name": "gate", "arguments": {}}}));
        first.push(json!({"complete": {"finish": "tool_calls"}}));
        calls.push(first);
        calls.push(vec![json!({"complete": {"finish": "stop"}})]);
    } else {
        first.push(json!({"complete": {"finish": "stop"}}));
        calls.push(first);
    }
    let mut body = json!({
        "run_id": run_id,
        "model": "scripted-1",
        "messages": [{"role": "user", "text": format!("question {}", marker(run_id))}],
        "provider": {"type": "scripted", "calls": calls}
    });
    if gate {
        body["tools"] = json!([{"name": "gate", "description": "waits for approval",
            "parameters": {"type": "object"}, "requires_approval": true,
            "script": [{"ok": "opened"}]}]);
    }
    body.to_string()
}

async fn send(
    c: &reqwest::Client,
    d: &Daemon,
    method: reqwest::Method,
    path: &str,
    body: Option<String>,
) -> (u16, Value) {
    let mut request = c.request(method, d.url(path)).bearer_auth(TOKEN);
    if let Some(body) = body {
        request = request.body(body);
    }
    let r = request.send().await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

async fn delete(c: &reqwest::Client, d: &Daemon, path: &str) -> (u16, Value) {
    send(c, d, reqwest::Method::DELETE, path, None).await
}

/// The stored lines of `run` (`keel events`, beside the daemon).
fn stored_lines(db: &Path, run: &str) -> String {
    let out = common::keel()
        .args(["events", run, "--db"])
        .arg(db)
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap()
}

async fn authed_status(c: &reqwest::Client, d: &Daemon, run: &str) -> Value {
    let r = c
        .get(d.url(&format!("/v1/runs/{run}")))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    r.json().await.unwrap()
}

#[tokio::test]
async fn the_daemon_deletes_behind_its_token_and_by_the_rules() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("keel.db");
    let d = Serve::new().db(&db).token(Some(TOKEN)).start();
    let c = authed_client();
    for (run, gate) in [("run_gone", false), ("run_kept", false), ("run_live", true)] {
        let (status, v) = send(
            &c,
            &d,
            reqwest::Method::POST,
            "/v1/runs",
            Some(scenario(run, gate)),
        )
        .await;
        assert_eq!(status, 201, "{v}");
    }
    wait_status(&c, &d, "run_gone", "completed").await;
    wait_status(&c, &d, "run_kept", "completed").await;
    let kept = stored_lines(&db, "run_kept");
    assert!(!kept.is_empty());

    // The defences: no token, no JSON content type.
    let plain = reqwest::Client::new();
    let r = plain
        .delete(d.url("/v1/runs/run_gone"))
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = plain
        .delete(d.url("/v1/runs/run_gone"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 415);
    assert_eq!(
        authed_status(&c, &d, "run_gone").await["status"],
        "completed"
    );

    // Refusals: live, bad parameters, unknown.
    let (status, v) = delete(&c, &d, "/v1/runs/run_live").await;
    assert_eq!(
        (status, v["rule"].as_str()),
        (409, Some("deletion.live")),
        "{v}"
    );
    let (status, v) = delete(&c, &d, "/v1/runs/run_gone?conversation=maybe").await;
    assert_eq!(
        (status, v["rule"].as_str()),
        (400, Some("deletion.conversation")),
        "{v}"
    );
    let (status, v) = delete(&c, &d, "/v1/runs/run_nope").await;
    assert_eq!(status, 404, "{v}");
    let (status, v) = send(
        &c,
        &d,
        reqwest::Method::POST,
        "/v1/prune?older_than=30x",
        None,
    )
    .await;
    assert_eq!(
        (status, v["rule"].as_str()),
        (400, Some("prune.older_than")),
        "{v}"
    );

    // A deletion: the tombstone answered, nothing of the run left.
    let (status, v) = delete(&c, &d, "/v1/runs/run_gone?who=ops").await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["deleted"][0]["run_id"], "run_gone", "{v}");
    assert_eq!(v["deleted"][0]["who"], "ops", "{v}");
    assert_eq!(v["deleted"].as_array().unwrap().len(), 1, "{v}");
    let r = get(&c, &d, "/v1/runs/run_gone").await;
    assert_eq!(r.status(), 404);
    let r = get(&c, &d, "/v1/runs/run_gone/events").await;
    assert_eq!(r.status(), 404);
    let list: Value = get_json(&c, &d, "/v1/runs").await;
    assert!(!list.to_string().contains("run_gone"), "{list}");
    assert!(common::holding(&db, &marker("run_gone")).is_empty());
    assert_eq!(stored_lines(&db, "run_kept"), kept);

    // A follow-up makes run_kept a run another depends on.
    let (status, v) = send(
        &c,
        &d,
        reqwest::Method::POST,
        "/v1/runs/run_kept/messages",
        Some(scenario("run_next", false)),
    )
    .await;
    assert_eq!(status, 201, "{v}");
    wait_status(&c, &d, "run_next", "completed").await;
    let (status, v) = delete(&c, &d, "/v1/runs/run_kept").await;
    assert_eq!(
        (status, v["rule"].as_str()),
        (409, Some("deletion.dependents")),
        "{v}"
    );
    assert_eq!(v["dependents"], json!(["run_next"]), "{v}");
    let (status, v) = delete(&c, &d, "/v1/runs/run_next?conversation=true").await;
    assert_eq!(status, 200, "{v}");
    let gone: Vec<&str> = v["deleted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["run_id"].as_str().unwrap())
        .collect();
    assert_eq!(gone, ["run_kept", "run_next"], "{v}");
    assert!(common::holding(&db, &marker("run_kept")).is_empty());
    assert!(common::holding(&db, &marker("run_next")).is_empty());

    // Prune: nothing closed is 30 days old; the live run stays.
    let (status, v) = send(
        &c,
        &d,
        reqwest::Method::POST,
        "/v1/prune?older_than=30d",
        None,
    )
    .await;
    assert_eq!((status, v.clone()), (200, json!({"deleted": []})), "{v}");
    assert_eq!(authed_status(&c, &d, "run_live").await["status"], "running");
}

#[tokio::test]
async fn with_nats_the_daemon_deletes_from_jetstream_and_its_journal() {
    if !common::nats::have_nats_server() {
        return;
    }
    let nats = common::nats::NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("keel.db");
    let d = Serve::new()
        .db(&db)
        .args(&["--nats", &nats.url()])
        .token(Some(TOKEN))
        .start();
    // A second gateway, with a journal of its own: it reads runs it does
    // not have from JetStream.
    let other = Serve::new()
        .args(&["--nats", &nats.url()])
        .token(Some(TOKEN))
        .start();
    let c = authed_client();
    for run in ["run_n1", "run_n2"] {
        let (status, v) = send(
            &c,
            &d,
            reqwest::Method::POST,
            "/v1/runs",
            Some(scenario(run, false)),
        )
        .await;
        assert_eq!(status, 201, "{v}");
        wait_status(&c, &d, run, "completed").await;
    }
    for run in ["run_n1", "run_n2"] {
        assert!(
            !common::files_holding(nats.dir(), &marker(run)).is_empty(),
            "{run}"
        );
        let r = get(&c, &other, &format!("/v1/runs/{run}/events")).await;
        assert_eq!(r.status(), 200, "{run}");
    }
    let (status, v) = delete(&c, &d, "/v1/runs/run_n1").await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["deleted"][0]["run_id"], "run_n1", "{v}");
    assert!(common::files_holding(nats.dir(), &marker("run_n1")).is_empty());
    assert!(common::holding(&db, &marker("run_n1")).is_empty());
    assert!(!common::files_holding(nats.dir(), &marker("run_n2")).is_empty());
    let r = get(&c, &other, "/v1/runs/run_n1/events").await;
    assert_eq!(r.status(), 404);
    let r = get(&c, &other, "/v1/runs/run_n2/events").await;
    assert_eq!(r.status(), 200);
}
