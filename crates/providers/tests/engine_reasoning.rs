//! Reasoning through the engine, end to end: a real adapter over a local
//! server answers a first model call with reasoning and a tool call, a
//! scripted tool runs, and the server captures the second request the
//! engine builds from its own history. The reasoning shows up as
//! `model.reasoning_delta` events and as a reasoning part of the
//! transcript, and goes back exactly as each provider's rule says.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use keel_engine::{Engine, RunOutcome, RunRequest};
use keel_eventlog::Event;
use keel_message::*;
use keel_providers::{
    Anthropic, AnthropicConfig, AnthropicOptions, ApiKey, OpenAiCompatible, OpenAiConfig,
    OpenAiOptions,
};
use keel_stream::{MetadataAllowlist, ModelProvider};
use keel_testkit::{ScriptedTool, ToolStep};
use serde_json::{Value, json};
use std::sync::Arc;

/// A run of `provider` on "Weather?" with a scripted `get_weather`; its
/// outcome and events.
async fn run(provider: Arc<dyn ModelProvider>) -> (RunOutcome, Vec<Arc<Event>>) {
    let engine = Engine::builder()
        .provider("net", provider)
        .allow_metadata(MetadataAllowlist::new(["openai", "anthropic"]).unwrap())
        .build()
        .unwrap();
    let user = Message::text(MessageId::parse("u1").unwrap(), Role::User, "Weather?").unwrap();
    let tool =
        ScriptedTool::named("get_weather", vec![ToolStep::ok(json!({"temp_c": 3}))]).unwrap();
    let request = RunRequest::new(
        RunId::parse("run_reasoning").unwrap(),
        ModelName::parse("model-1").unwrap(),
        vec![user],
    )
    .provider_named("net")
    .tool(Arc::new(tool));
    let run = engine.start(request).unwrap();
    let log = run.log().clone();
    let outcome = run.join().await;
    (outcome, log.retained_after(0))
}

/// The JSON payloads of the events of `kind`.
fn payloads(events: &[Arc<Event>], kind: &str) -> Vec<Value> {
    events
        .iter()
        .filter(|e| e.kind().to_string() == kind)
        .map(|e| serde_json::from_str::<Value>(e.line()).unwrap()["payload"].clone())
        .collect()
}

/// The transcript's reasoning parts.
fn reasoning_parts(outcome: &RunOutcome) -> Vec<ReasoningPart> {
    let RunOutcome::Completed { transcript, .. } = outcome else {
        panic!("{outcome:?}")
    };
    transcript
        .iter()
        .flat_map(|m| m.parts())
        .filter_map(|p| match p {
            Part::Reasoning(r) => Some(r.clone()),
            _ => None,
        })
        .collect()
}

fn reasoning_content_fixture() -> (Reply, String) {
    let fixture = fixture("openai-reasoning", "reasoning_content_tool_call");
    let text = sse_payloads(fixture.body.as_deref().unwrap())
        .iter()
        .filter_map(|p| {
            p["choices"][0]["delta"]["reasoning_content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    (Reply::fixture(&fixture, 7), text)
}

async fn openai_run(send_reasoning: bool) -> (RunOutcome, Vec<Arc<Event>>, Value, String) {
    let (first, expected) = reasoning_content_fixture();
    let last = sse_body([
        json!({"choices": [{"index": 0, "delta": {"content": "Rainy."}, "finish_reason": "stop"}]})
            .to_string(),
        "[DONE]".into(),
    ]);
    let server = Server::start(vec![first, Reply::sse(last)]).await;
    let provider = OpenAiCompatible::new(OpenAiConfig {
        api_key: Some(ApiKey::new("sk-local-0123456789").unwrap()),
        wire: OpenAiOptions {
            send_reasoning,
            ..OpenAiOptions::default()
        },
        ..OpenAiConfig::new(server.base_url(), None)
    })
    .unwrap();
    let (outcome, events) = run(Arc::new(provider)).await;
    let requests = server.requests();
    assert_eq!(requests.len(), 2, "{outcome:?}");
    (outcome, events, requests[1].json(), expected)
}

#[tokio::test]
async fn openai_reasoning_is_logged_kept_and_sent_back_only_when_configured() {
    for send_reasoning in [false, true] {
        let (outcome, events, second, expected) = openai_run(send_reasoning).await;
        let deltas = payloads(&events, "model.reasoning_delta");
        assert!(!deltas.is_empty());
        let logged: String = deltas.iter().map(|p| p["text"].as_str().unwrap()).collect();
        assert_eq!(logged, expected);
        let parts = reasoning_parts(&outcome);
        assert_eq!(parts.len(), 1, "{parts:?}");
        assert_eq!(parts[0].provider(), &ProviderTag::openai_compatible());
        assert_eq!(parts[0].text(), expected);
        assert_eq!(parts[0].signature(), None);
        let assistant = &second["messages"][1];
        assert_eq!(assistant["role"], "assistant");
        assert_eq!(assistant["tool_calls"][0]["id"], "call_0_8d2f6a1b");
        if send_reasoning {
            assert_eq!(
                assistant["reasoning_content"],
                json!(expected),
                "{assistant}"
            );
        } else {
            assert_eq!(assistant.get("reasoning_content"), None, "{assistant}");
        }
    }
}

#[tokio::test]
async fn anthropic_thinking_goes_back_byte_exact_through_the_engine() {
    let first = fixture("anthropic-thinking", "thinking_tool_call");
    let server = Server::start(vec![
        Reply::fixture(&first, 1),
        Reply::fixture(&fixture("anthropic-thinking", "after_tool_result"), 0),
    ])
    .await;
    let provider = Anthropic::new(AnthropicConfig {
        wire: AnthropicOptions {
            max_tokens: 8192,
            thinking_budget_tokens: Some(4096),
        },
        ..AnthropicConfig::new(
            server.base_url(),
            Some(ApiKey::new("sk-ant-local-0123").unwrap()),
        )
    })
    .unwrap();
    let (outcome, events) = run(Arc::new(provider)).await;
    let requests = server.requests();
    assert_eq!(requests.len(), 2, "{outcome:?}");

    // What the fixture holds, read without the adapter.
    let mut thinking = String::new();
    let (mut signature, mut redacted) = (String::new(), String::new());
    for p in sse_payloads(first.body.as_deref().unwrap()) {
        match p["delta"]["type"].as_str() {
            Some("thinking_delta") => thinking.push_str(p["delta"]["thinking"].as_str().unwrap()),
            Some("signature_delta") => signature = p["delta"]["signature"].as_str().unwrap().into(),
            _ => {}
        }
        if p["content_block"]["type"] == "redacted_thinking" {
            redacted = p["content_block"]["data"].as_str().unwrap().into();
        }
    }
    let logged: String = payloads(&events, "model.reasoning_delta")
        .iter()
        .map(|p| p["text"].as_str().unwrap())
        .collect();
    assert_eq!(logged, thinking);
    let parts = reasoning_parts(&outcome);
    assert_eq!(parts.len(), 2, "{parts:?}");
    assert_eq!(
        parts[0].signature().map(OpaqueValue::as_str),
        Some(signature.as_str())
    );
    assert_eq!(
        parts[1].redacted().map(OpaqueValue::as_str),
        Some(redacted.as_str())
    );

    let second = requests[1].json();
    let content = &second["messages"][1]["content"];
    assert_eq!(
        content[0],
        json!({"type": "thinking", "thinking": thinking, "signature": signature})
    );
    assert_eq!(
        content[1],
        json!({"type": "redacted_thinking", "data": redacted})
    );
    assert_eq!(content[2]["type"], "text");
    assert_eq!(content[3]["type"], "tool_use");
    assert_eq!(
        second["thinking"],
        json!({"type": "enabled", "budget_tokens": 4096})
    );
    let raw = String::from_utf8(requests[1].body.clone()).unwrap();
    assert!(
        raw.contains(&format!("\"signature\":\"{signature}\"")),
        "{raw}"
    );
    assert!(raw.contains(&format!("\"data\":\"{redacted}\"")), "{raw}");
}
