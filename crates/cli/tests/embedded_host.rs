#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! keel-serve's `embedded_host` example (crates/serve/examples): a Rust
//! host with its own tool (`count_words`), its own provider and its own
//! `RunFactory`, no scenario file anywhere, started as a process on port 0
//! with a temporary journal and driven as its users would: `useChat`'s
//! own transport from the pinned `ai` package (tests/frontends), SSE with
//! a dropped connection resumed by `Last-Event-ID`, the viewer, and the
//! host's refusal of bodies of the wrong shape.

mod common;

use common::daemon::{Daemon, Serve, client, create, get, post};
use common::example_bin::example_bin;
use common::frontends;
use common::sse::read_sse;
use serde_json::{Value, json};
use std::collections::BTreeSet;

/// Reads `{api, text}` on stdin, sends `text` as a user message with the
/// SDK's `DefaultChatTransport` (what `useChat` posts with) and prints
/// the assistant message `readUIMessageStream` assembles from the reply.
const CHAT: &str = r#"
import { DefaultChatTransport, readUIMessageStream } from 'ai';
let input = '';
for await (const piece of process.stdin) input += piece;
const { api, text } = JSON.parse(input);
const transport = new DefaultChatTransport({ api });
const stream = await transport.sendMessages({
  chatId: 'embedded',
  trigger: 'submit-message',
  messageId: undefined,
  messages: [{ id: 'u1', role: 'user', parts: [{ type: 'text', text }] }],
  abortSignal: undefined,
});
let last;
for await (const message of readUIMessageStream({ stream, terminateOnError: true })) {
  last = message;
}
console.log(JSON.stringify(last));
"#;

/// What the host's tool answers for the texts below.
const FIVE_WORDS: &str = "the quick brown fox jumps";
const COUNTED: &str = "5 words, 25 characters";

fn host() -> Daemon {
    Serve::new()
        .host(&example_bin("keel-serve", "embedded_host"))
        .start()
}

#[tokio::test]
async fn use_chat_gets_the_answer_of_the_hosts_rust_tool() {
    if frontends::node_modules("embedded_host chat").is_none() {
        return;
    }
    let d = host();
    let input = json!({"api": d.url("/v1/chat"), "text": FIVE_WORDS}).to_string();
    let out = frontends::run_node(CHAT, &input);
    let message: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(message["role"], "assistant", "{message}");
    let parts = message["parts"].as_array().unwrap();
    let tool = parts
        .iter()
        .find(|p| p["type"] == "tool-count_words")
        .unwrap_or_else(|| panic!("no count_words part: {message}"));
    assert_eq!(tool["state"], "output-available", "{tool}");
    assert_eq!(tool["input"], json!({"text": FIVE_WORDS}));
    assert_eq!(tool["output"], COUNTED, "the Rust tool's own output");
    let text: String = parts
        .iter()
        .filter(|p| p["type"] == "text")
        .map(|p| p["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, format!("The count_words tool says: {COUNTED}."));
}

#[tokio::test]
async fn a_dropped_event_stream_resumes_with_no_gap_and_no_duplicate() {
    let (d, c) = (host(), client());
    let run = create(&c, &d, json!({"message": FIVE_WORDS}).to_string()).await;
    let url = format!("/v1/runs/{run}/events");
    // Drop the connection after the tool's call.
    let first = read_sse(get(&c, &d, &url).await, |m| m.event == "model.tool_call").await;
    let last = first.last().and_then(|m| m.id).unwrap();
    let resumed = c
        .get(d.url(&url))
        .header("last-event-id", last.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resumed.status(), 200);
    let rest = read_sse(resumed, |m| m.event == "run.completed").await;
    let seqs: Vec<u64> = first.iter().chain(&rest).filter_map(|m| m.id).collect();
    let distinct: BTreeSet<u64> = seqs.iter().copied().collect();
    assert_eq!(distinct.len(), seqs.len(), "a duplicate seq: {seqs:?}");
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "a gap");
    assert_eq!(rest.last().unwrap().event, "run.completed");
    let output = rest
        .iter()
        .find(|m| m.event == "tool.completed")
        .map(|m| serde_json::from_str::<Value>(&m.data).unwrap());
    assert_eq!(output.unwrap()["payload"]["output"], COUNTED);
    // From its terminal on, nothing follows.
    let done = c
        .get(d.url(&url))
        .header("last-event-id", seqs.len().to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(done.status(), 204);
}

#[tokio::test]
async fn the_viewer_is_served() {
    let (d, c) = (host(), client());
    let page = get(&c, &d, "/").await;
    assert_eq!(page.status(), 200);
    assert!(
        page.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    assert!(
        page.text()
            .await
            .unwrap()
            .contains(r#"<script src="/ui/app.js""#)
    );
    let script = get(&c, &d, "/ui/app.js").await;
    assert_eq!(script.status(), 200);
}

#[tokio::test]
async fn bodies_of_another_shape_are_refused_naming_the_member() {
    let (d, c) = (host(), client());
    for (body, path) in [
        (r#"{"mesage": "hi"}"#, "$.mesage"),
        (r#"{"message": 3}"#, "$.message"),
        (r#"{"message": "  "}"#, "$.message"),
        (r#"["hi"]"#, "$"),
        (r#"{"message": "a", "message": "b"}"#, "$.message"),
        ("{", "$"),
    ] {
        let r = post(&c, &d, "/v1/runs", body).await;
        assert_eq!(r.status(), 400, "{body}");
        let problem: Value = r.json().await.unwrap();
        assert_eq!(problem["type"], "urn:keel:problem:invalid-body", "{body}");
        assert_eq!(problem["path"], path, "{body}: {problem}");
    }
    let runs: Value = get(&c, &d, "/v1/runs").await.json().await.unwrap();
    assert_eq!(runs["runs"], json!([]), "nothing started");
}
