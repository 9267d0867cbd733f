//! The Anthropic Messages adapter against a local replay server: every
//! shared fixture through the conformance suite at several read sizes,
//! then the cases the fixtures do not cover.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use keel_message::*;
use keel_providers::{
    ANTHROPIC_VERSION, Anthropic, AnthropicConfig, AnthropicOptions, ApiKey, ConnectOptions,
    ProviderConfigError, ProviderKind,
};
use keel_stream::{FinishReason, MetadataAllowlist, ModelProvider, ProblemKind, RetryPosition};
use keel_testkit::conformance::*;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

const KEY: &str = "sk-ant-test-Zq8x1Y2w3V4u5T6s7R8q9P0o";

fn config(server: &Server) -> AnthropicConfig {
    AnthropicConfig {
        base_url: server.base_url(),
        api_key: Some(ApiKey::new(KEY).unwrap()),
        ..AnthropicConfig::default()
    }
}

fn provider(server: &Server) -> Anthropic {
    Anthropic::new(config(server)).unwrap()
}

fn allow() -> CheckOptions {
    CheckOptions::default().with_allowlist(MetadataAllowlist::new(["anthropic"]).unwrap())
}

async fn observe_one(reply: Reply) -> Observed {
    let server = Server::one(reply).await;
    observe(
        &provider(&server),
        simple_request("claude-sonnet-4-5"),
        &allow(),
    )
    .await
}

fn problem(seen: &Observed) -> (ProblemKind, bool, RetryPosition) {
    let failure = seen.failure.as_ref().expect("a failure");
    (
        failure.kind(),
        failure.problem().retryable(),
        failure.position(),
    )
}

/// An SSE body of named events (`event: <type>` + `data: <json>`).
fn events(items: &[Value]) -> String {
    items
        .iter()
        .map(|v| format!("event: {}\ndata: {v}\n\n", v["type"].as_str().unwrap()))
        .collect()
}

fn message_start(input: u64) -> Value {
    json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
        "model": "claude-test", "content": [], "stop_reason": null,
        "usage": {"input_tokens": input, "output_tokens": 1}}})
}

fn text_block(index: u64, parts: &[&str]) -> Vec<Value> {
    let mut out = vec![
        json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}),
    ];
    for part in parts {
        out.push(json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": part}}));
    }
    out.push(json!({"type": "content_block_stop", "index": index}));
    out
}

fn tool_block(index: u64, id: &str, name: &str, fragments: &[&str]) -> Vec<Value> {
    let mut out = vec![json!({"type": "content_block_start", "index": index,
        "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}})];
    for fragment in fragments {
        out.push(json!({"type": "content_block_delta", "index": index,
            "delta": {"type": "input_json_delta", "partial_json": fragment}}));
    }
    out.push(json!({"type": "content_block_stop", "index": index}));
    out
}

fn finish(stop_reason: &str, output: u64) -> Vec<Value> {
    vec![
        json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null}, "usage": {"output_tokens": output}}),
        json!({"type": "message_stop"}),
    ]
}

#[tokio::test]
async fn every_fixture_conforms_at_every_read_size() {
    for fixture in all_fixtures("anthropic-messages") {
        for split in SPLITS {
            let server = Server::one(Reply::fixture(&fixture, split)).await;
            let result = check_stream_with(
                &provider(&server),
                simple_request("claude-sonnet-4-5"),
                &fixture.expect,
                &allow(),
            )
            .await;
            if let Err(failure) = result {
                panic!("{} (split {split}): {failure}", fixture.name);
            }
            let requests = server.requests();
            assert_eq!(
                (requests[0].method.as_str(), requests[0].path.as_str()),
                ("POST", "/v1/messages")
            );
        }
    }
}

#[tokio::test]
async fn metadata_holds_only_safe_facts() {
    let seen = observe_one(Reply::fixture(
        &fixture("anthropic-messages", "usage_included"),
        0,
    ))
    .await;
    assert_eq!(
        seen.completion.unwrap().metadata().to_canonical_string(),
        r#"{"anthropic":{"id":"msg_01Sx6eE9TXxN7mdBMT5V5Wky","model":"claude-opus-4-1-20250805","request_id":"req_011CaxPuvADFKxGEBLVREMtp","service_tier":"standard"}}"#
    );
}

#[tokio::test]
async fn the_request_body_and_headers_have_the_documented_shape() {
    let body = events(
        &[
            vec![message_start(3)],
            text_block(0, &["ok"]),
            finish("end_turn", 2),
        ]
        .concat(),
    );
    let server = Server::one(Reply::sse(body)).await;
    let provider = Anthropic::new(AnthropicConfig {
        wire: AnthropicOptions {
            max_tokens: 512,
            ..AnthropicOptions::default()
        },
        ..config(&server)
    })
    .unwrap();
    let seen = observe(&provider, rich_request("claude-sonnet-4-5"), &allow()).await;
    assert_eq!(seen.text, "ok");
    let request = &server.requests()[0];
    assert_eq!(
        request.json(),
        json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 512,
            "system": "Be brief.",
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "Weather in Oslo?"}]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Oslo"}},
                    {"type": "tool_use", "id": "call_2", "name": "get_time", "input": {}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "call_1", "content": "{\"temp_c\":3}"},
                    {"type": "tool_result", "tool_use_id": "call_2", "content": "clock broken", "is_error": true}
                ]},
                {"role": "user", "content": [{"type": "text", "text": "Thanks!"}]}
            ],
            "tools": [
                {"name": "get_weather", "description": "Current weather for a city",
                 "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
                {"name": "get_time", "input_schema": {"type": "object"}}
            ],
            "stream": true
        })
    );
    let h = &request.headers;
    assert_eq!(h["x-api-key"], KEY);
    assert_eq!(h["anthropic-version"], ANTHROPIC_VERSION);
    assert_eq!(h["content-type"], "application/json");
    assert!(!h.contains_key("authorization"));
    assert!(!h.contains_key("anthropic-beta"));
}

#[tokio::test]
async fn tool_input_split_across_many_deltas_is_assembled_per_block() {
    // Text, then two tool blocks whose input arrives one character per
    // delta (including a raw 'Å' and escapes), then more text.
    let first = r#"{"path": "notes/Åse.md", "lines": [1, 2]}"#;
    let second = r#"{"q": "say \"hei\"\n"}"#;
    let chars = |s: &str| s.chars().map(String::from).collect::<Vec<_>>();
    let (a, b) = (chars(first), chars(second));
    let body = events(
        &[
            vec![message_start(10)],
            text_block(0, &["Let me ", "look."]),
            tool_block(
                1,
                "toolu_a",
                "read_file",
                &a.iter().map(String::as_str).collect::<Vec<_>>(),
            ),
            tool_block(
                2,
                "toolu_b",
                "search",
                &b.iter().map(String::as_str).collect::<Vec<_>>(),
            ),
            // A tool without parameters: no deltas at all.
            tool_block(3, "toolu_c", "get_time", &[]),
            finish("tool_use", 40),
        ]
        .concat(),
    );
    let expect = Expectation {
        text: "Let me look.".into(),
        tool_calls: vec![
            ExpectedToolCall {
                call_id: "toolu_a".into(),
                name: "read_file".into(),
                arguments: serde_json::from_str(first).unwrap(),
            },
            ExpectedToolCall {
                call_id: "toolu_b".into(),
                name: "search".into(),
                arguments: serde_json::from_str(second).unwrap(),
            },
            ExpectedToolCall {
                call_id: "toolu_c".into(),
                name: "get_time".into(),
                arguments: json!({}),
            },
        ],
        finish: Some(FinishReason::ToolCalls),
        usage: Some(ExpectedUsage {
            input_tokens: 10,
            output_tokens: 40,
        }),
        problem: None,
    };
    for split in [0, 1, 7] {
        let server = Server::one(Reply::sse(body.clone()).split(split)).await;
        check_stream(&provider(&server), simple_request("m"), &expect)
            .await
            .unwrap_or_else(|e| panic!("split {split}: {e}"));
    }
}

#[tokio::test]
async fn unknown_events_blocks_and_members_are_ignored() {
    let body = events(
        &[
            vec![message_start(5)],
            vec![
                json!({"type": "future_event", "payload": {"x": 1}}),
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}}),
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{\"query\": \"x\"}"}}),
                json!({"type": "content_block_stop", "index": 0}),
                json!({"type": "content_block_start", "index": 1, "content_block": {"type": "redacted_thinking", "data": "abc"}}),
                json!({"type": "content_block_stop", "index": 1}),
                json!({"type": "content_block_start", "index": 2, "content_block": {"type": "text", "text": "", "citations": []}, "extra": true}),
                json!({"type": "content_block_delta", "index": 2, "delta": {"type": "citations_delta", "citation": {"type": "char_location"}}}),
                json!({"type": "content_block_delta", "index": 2, "delta": {"type": "text_delta", "text": "Found it."}}),
                json!({"type": "content_block_stop", "index": 2}),
            ],
            finish("end_turn", 9),
        ]
        .concat(),
    );
    let seen = observe_one(Reply::sse(body)).await;
    assert_eq!(seen.text, "Found it.");
    assert!(seen.tool_calls.is_empty());
    assert_eq!(seen.finish(), Some(FinishReason::Stop));

    // Stop reasons beyond the fixtures.
    for (reason, expected) in [
        ("stop_sequence", FinishReason::Stop),
        ("refusal", FinishReason::ContentFilter),
        ("pause_turn", FinishReason::Stop),
        ("model_context_window_exceeded", FinishReason::Length),
    ] {
        let body = events(
            &[
                vec![message_start(5)],
                text_block(0, &["Hi"]),
                finish(reason, 2),
            ]
            .concat(),
        );
        let seen = observe_one(Reply::sse(body)).await;
        assert_eq!(seen.finish(), Some(expected), "{reason}");
    }
    let body = events(
        &[
            vec![message_start(5)],
            text_block(0, &["Hi"]),
            finish("new_reason", 2),
        ]
        .concat(),
    );
    let seen = observe_one(Reply::sse(body)).await;
    assert_eq!(
        problem(&seen),
        (ProblemKind::Protocol, false, RetryPosition::Partial)
    );
}

#[tokio::test]
async fn errors_before_the_stream_are_pristine_and_carry_retry_after() {
    for (case, kind, retry_after) in [
        ("overloaded_529", ProblemKind::Overloaded, Some(5)),
        ("rate_limited_429", ProblemKind::RateLimited, Some(17)),
        ("auth_401", ProblemKind::Auth, None),
        ("context_length", ProblemKind::ContextLength, None),
    ] {
        let seen = observe_one(Reply::fixture(&fixture("anthropic-messages", case), 0)).await;
        let failure = seen.failure.expect(case);
        assert_eq!(failure.kind(), kind, "{case}");
        assert_eq!(failure.position(), RetryPosition::Pristine, "{case}");
        assert_eq!(
            failure.problem().retry_after(),
            retry_after.map(Duration::from_secs),
            "{case}"
        );
    }
    let seen = observe_one(Reply::fixture(
        &fixture("anthropic-messages", "overloaded_529"),
        0,
    ))
    .await;
    assert_eq!(
        seen.failure.unwrap().problem().message(),
        "HTTP 529 overloaded_error: Overloaded"
    );
    // A 500 api_error: unavailable, retryable.
    let seen = observe_one(Reply::json(
        500,
        r#"{"type":"error","error":{"type":"api_error","message":"Internal server error"}}"#,
    ))
    .await;
    assert_eq!(
        problem(&seen),
        (ProblemKind::Unavailable, true, RetryPosition::Pristine)
    );
}

#[tokio::test]
async fn a_disconnect_mid_stream_is_unavailable_and_partial() {
    let body = fixture("anthropic-messages", "single_tool_call")
        .body
        .unwrap();
    // Cut inside the tool input: nothing finalized, so pristine.
    let cut = body.find("ve.").unwrap();
    let seen = observe_one(Reply::sse(body.clone()).cut_after(cut).split(7)).await;
    assert!(seen.tool_calls.is_empty());
    assert_eq!(
        problem(&seen),
        (ProblemKind::Unavailable, true, RetryPosition::Pristine)
    );
    // Cut after the block stopped: the call stands, the stream is partial.
    let cut = body.find("event: message_delta").unwrap();
    for framing in [Framing::Chunked, Framing::Close] {
        let seen = observe_one(Reply::sse(body.clone()).framing(framing).cut_after(cut)).await;
        assert_eq!(seen.tool_calls.len(), 1, "{framing:?}");
        assert_eq!(
            problem(&seen),
            (ProblemKind::Unavailable, true, RetryPosition::Partial)
        );
    }
}

#[tokio::test]
async fn broken_streams_are_protocol_failures() {
    // An oversized event.
    let body = events(
        &[
            vec![message_start(5)],
            text_block(0, &["Before", &"x".repeat(3000)]),
            finish("end_turn", 2),
        ]
        .concat(),
    );
    for split in [0, 1, 7] {
        let server = Server::one(Reply::sse(body.clone()).split(split)).await;
        let provider = Anthropic::new(AnthropicConfig {
            max_chunk_bytes: 1024,
            ..config(&server)
        })
        .unwrap();
        let seen = observe(&provider, simple_request("m"), &allow()).await;
        assert_eq!(seen.text, "Before");
        assert_eq!(
            problem(&seen),
            (ProblemKind::Protocol, false, RetryPosition::Partial)
        );
        assert!(
            seen.failure
                .unwrap()
                .problem()
                .message()
                .contains("oversized chunk")
        );
    }
    // A delta for a block that never started.
    let body = events(&[
        message_start(5),
        json!({"type": "content_block_delta", "index": 4, "delta": {"type": "text_delta", "text": "Hi"}}),
    ]);
    let seen = observe_one(Reply::sse(body)).await;
    assert_eq!(
        problem(&seen),
        (ProblemKind::Protocol, false, RetryPosition::Pristine)
    );
    // An error event of an unknown type mid-stream: unavailable, retryable.
    let body = events(
        &[
            vec![message_start(5)],
            text_block(0, &["Hi"]),
            vec![json!({"type": "error", "error": {"type": "brand_new_error", "message": "?"}})],
        ]
        .concat(),
    );
    let seen = observe_one(Reply::sse(body)).await;
    assert_eq!(
        problem(&seen),
        (ProblemKind::Unavailable, true, RetryPosition::Partial)
    );
}

#[tokio::test]
async fn the_key_never_leaks() {
    let body = json!({"type": "error", "error": {"type": "authentication_error", "message": format!("invalid x-api-key {KEY}")}}).to_string();
    let seen = observe_one(Reply::json(401, body)).await;
    let message = seen.failure.unwrap().problem().message().to_owned();
    assert!(!message.contains(KEY), "{message}");

    let mut start = message_start(5);
    start["message"]["id"] = json!(KEY);
    let body = events(&[vec![start], text_block(0, &["Hi"]), finish("end_turn", 2)].concat());
    let seen = observe_one(Reply::sse(body).header("request-id", KEY)).await;
    let meta = seen.completion.unwrap().metadata().to_canonical_string();
    assert!(!meta.contains(KEY), "{meta}");
    assert!(meta.contains("claude-test"), "{meta}");

    let server = Server::one(Reply::sse("")).await;
    let config = config(&server);
    for shown in [
        format!("{config:?}"),
        format!("{:?}", Anthropic::new(config.clone()).unwrap()),
    ] {
        assert!(!shown.contains(KEY), "{shown}");
    }
}

#[tokio::test]
async fn dropping_the_stream_closes_the_connection() {
    let body = fixture("anthropic-messages", "text_only").body.unwrap();
    let cut = body.find("blueberry").unwrap();
    let server = Server::one(Reply::sse(body).cut_after(cut).hold()).await;
    let read = check_drop_mid_stream(&provider(&server), simple_request("m"), 2)
        .await
        .unwrap();
    assert_eq!(read, 2);
    assert!(
        server.wait_closed(1, Duration::from_secs(5)).await,
        "the server never saw the connection close"
    );
}

#[test]
fn bad_configurations_are_refused() {
    let err = Anthropic::new(AnthropicConfig {
        wire: AnthropicOptions {
            max_tokens: 0,
            ..AnthropicOptions::default()
        },
        ..AnthropicConfig::default()
    })
    .unwrap_err();
    assert_eq!(
        err,
        ProviderConfigError::Zero {
            field: "max_tokens"
        }
    );
    assert!(err.to_string().contains("max_tokens"), "{err}");
    let provider = Anthropic::new(AnthropicConfig::new("http://127.0.0.1:1/v1", None)).unwrap();
    assert_eq!(provider.endpoint(), "http://127.0.0.1:1/v1/messages");
    let shown = format!("{provider:?}");
    assert!(shown.starts_with("Anthropic {"), "{shown}");
    assert!(shown.contains("max_tokens: 4096"), "{shown}");
}

#[cfg(feature = "rustls")]
#[test]
fn the_default_https_endpoint_is_accepted_with_tls() {
    let provider = Anthropic::new(AnthropicConfig::default()).unwrap();
    assert_eq!(provider.endpoint(), "https://api.anthropic.com/v1/messages");
}

/// Only compiles without the `rustls` feature.
#[cfg(not(feature = "rustls"))]
#[test]
fn https_is_refused_at_construction_without_tls() {
    let err = Anthropic::new(AnthropicConfig::default()).unwrap_err();
    assert_eq!(err, ProviderConfigError::TlsDisabled);
    assert!(err.to_string().contains("rule config.tls"), "{err}");
}

// ------------------------------------------------------------ thinking ----

/// What a thinking fixture holds, read from its SSE payloads without the
/// adapter: the thinking text (its deltas joined), the signature, the
/// redacted block's data.
#[derive(Debug, Default)]
struct FixtureThinking {
    text: String,
    signature: String,
    redacted: String,
}

fn fixture_thinking(body: &str) -> FixtureThinking {
    let mut out = FixtureThinking::default();
    for payload in sse_payloads(body) {
        let delta = &payload["delta"];
        match (payload["type"].as_str(), delta["type"].as_str()) {
            (Some("content_block_delta"), Some("thinking_delta")) => {
                out.text.push_str(delta["thinking"].as_str().unwrap());
            }
            (Some("content_block_delta"), Some("signature_delta")) => {
                out.signature = delta["signature"].as_str().unwrap().to_owned();
            }
            (Some("content_block_start"), _)
                if payload["content_block"]["type"] == "redacted_thinking" =>
            {
                out.redacted = payload["content_block"]["data"]
                    .as_str()
                    .unwrap()
                    .to_owned();
            }
            _ => {}
        }
    }
    out
}

fn thinking_provider(server: &Server) -> Anthropic {
    Anthropic::new(AnthropicConfig {
        wire: AnthropicOptions {
            max_tokens: 8192,
            thinking_budget_tokens: Some(2048),
        },
        ..config(server)
    })
    .unwrap()
}

fn weather_request() -> ModelRequest {
    let history: Arc<[Message]> = vec![
        Message::text(
            MessageId::parse("m1").unwrap(),
            Role::User,
            "Weather in Trondheim?",
        )
        .unwrap(),
    ]
    .into();
    let tools: Arc<[ToolDefinition]> = vec![
        ToolDefinition::new(
            ToolName::parse("get_weather").unwrap(),
            "Current weather for a city",
            CanonicalJson::parse(r#"{"type":"object","properties":{"city":{"type":"string"}}}"#)
                .unwrap(),
        )
        .unwrap(),
    ]
    .into();
    ModelRequest::new(
        OperationIdIssuer::new().issue(),
        ModelName::parse("claude-sonnet-4-5").unwrap(),
        history,
        tools,
    )
    .unwrap()
}

#[tokio::test]
async fn the_thinking_fixtures_conform_and_yield_reasoning_at_every_read_size() {
    let fixture = fixture("anthropic-thinking", "thinking_tool_call");
    let expected = fixture_thinking(fixture.body.as_deref().unwrap());
    assert!(!expected.text.is_empty() && !expected.signature.is_empty());
    for split in SPLITS {
        let server = Server::one(Reply::fixture(&fixture, split)).await;
        let provider = thinking_provider(&server);
        let seen = observe(&provider, weather_request(), &allow()).await;
        compare(&fixture.expect, &seen).unwrap_or_else(|e| panic!("split {split}: {e}"));
        let items = reasoning_items(&seen);
        let text: String = items
            .iter()
            .filter(|(kind, _)| *kind == "delta")
            .map(|(_, t)| t.as_str())
            .collect();
        assert_eq!(text, expected.text, "split {split}");
        // Deltas, then the signature, then the redacted block, in stream
        // order (and before the text and the tool call).
        let kinds: Vec<&str> = items.iter().map(|(kind, _)| *kind).collect();
        let deltas = kinds.len() - 2;
        assert!(kinds[..deltas].iter().all(|k| *k == "delta"), "{kinds:?}");
        assert_eq!(
            items[deltas..],
            [
                ("signature", expected.signature.clone()),
                ("redacted", expected.redacted.clone())
            ]
        );
        let first_text = seen
            .items
            .iter()
            .position(|i| matches!(i, keel_stream::StreamItem::TextDelta(_)))
            .unwrap();
        let redacted = seen
            .items
            .iter()
            .position(|i| matches!(i, keel_stream::StreamItem::RedactedReasoning(_)))
            .unwrap();
        assert!(redacted < first_text, "split {split}");
    }
    let after = fixture_named("after_tool_result");
    let server = Server::one(Reply::fixture(&after, 7)).await;
    let seen = observe(&provider(&server), weather_request(), &allow()).await;
    compare(&after.expect, &seen).unwrap();
}

fn fixture_named(case: &str) -> Fixture {
    fixture("anthropic-thinking", case)
}

#[tokio::test]
async fn thinking_and_redacted_blocks_go_back_byte_exact() {
    let first = fixture_named("thinking_tool_call");
    let expected = fixture_thinking(first.body.as_deref().unwrap());
    let server = Server::start(vec![
        Reply::fixture(&first, 7),
        Reply::fixture(&fixture_named("after_tool_result"), 0),
    ])
    .await;
    let provider = thinking_provider(&server);
    assert_eq!(provider.provider_tag(), ProviderTag::anthropic());
    let request = weather_request();
    let seen = observe(&provider, request.clone(), &allow()).await;
    assert_eq!(seen.finish(), Some(FinishReason::ToolCalls));
    let assistant = assistant_message(&seen, &provider.provider_tag());
    let call_id = seen.tool_calls[0].call_id().as_str().to_owned();
    let result = Message::new(
        MessageId::parse("t1").unwrap(),
        Role::Tool,
        vec![
            Part::tool_result(CallId::parse(&call_id).unwrap(), r#"{"temp_c":3}"#, false).unwrap(),
        ],
    )
    .unwrap();
    let next = continued(&request, vec![assistant, result]);
    let seen = observe(&provider, next, &allow()).await;
    assert_eq!(seen.text, "It is 3 °C in Trondheim.");

    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    for sent in &requests {
        assert_eq!(
            sent.json()["thinking"],
            json!({"type": "enabled", "budget_tokens": 2048})
        );
    }
    let body = requests[1].json();
    assert_eq!(
        body["messages"][1],
        json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": expected.text, "signature": expected.signature},
            {"type": "redacted_thinking", "data": expected.redacted},
            {"type": "text", "text": "Let me check the weather."},
            {"type": "tool_use", "id": call_id, "name": "get_weather", "input": {"city": "Trondheim"}}
        ]})
    );
    // The opaque values are in the body's bytes exactly as they came.
    let raw = String::from_utf8(requests[1].body.clone()).unwrap();
    for needle in [
        format!("\"signature\":\"{}\"", expected.signature),
        format!("\"data\":\"{}\"", expected.redacted),
        format!(
            "\"thinking\":{}",
            serde_json::to_string(&expected.text).unwrap()
        ),
    ] {
        assert!(raw.contains(&needle), "{needle} not in {raw}");
    }
}

/// The request body the adapter sends for `request` (to a real server,
/// answering with a short stream).
async fn sent_body(request: ModelRequest) -> Value {
    let body = events(
        &[
            vec![message_start(3)],
            text_block(0, &["ok"]),
            finish("end_turn", 2),
        ]
        .concat(),
    );
    let server = Server::one(Reply::sse(body)).await;
    let seen = observe(&provider(&server), request, &allow()).await;
    assert_eq!(seen.text, "ok");
    server.requests()[0].json()
}

/// One assistant message's parts, and what the body sends of it.
async fn check_reasoning_sent(parts: Vec<Part>, expected: Option<Value>) {
    let request = continued(
        &simple_request("claude-sonnet-4-5"),
        vec![Message::new(MessageId::parse("a1").unwrap(), Role::Assistant, parts).unwrap()],
    );
    let sent = sent_body(request).await;
    assert_eq!(sent["messages"].get(1).cloned(), expected, "{sent}");
}

#[tokio::test]
async fn only_signed_or_redacted_anthropic_reasoning_is_sent_back() {
    let limits = Limits::default();
    let sig = || OpaqueValue::new("EqQBCgIYAhIM1gbcDa9GJwZA2b3h").unwrap();
    let signed =
        |tag: ProviderTag| Part::reasoning_with(tag, "Think.", Some(sig()), &limits).unwrap();
    let unsigned = |tag: ProviderTag| Part::reasoning_with(tag, "Think.", None, &limits).unwrap();
    let redacted = |tag: ProviderTag| Part::redacted_reasoning(tag, sig());
    let text = || Part::text("Done.").unwrap();
    let thinking = json!({"type": "thinking", "thinking": "Think.", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3h"});
    let redacted_block =
        json!({"type": "redacted_thinking", "data": "EqQBCgIYAhIM1gbcDa9GJwZA2b3h"});
    let done = json!({"type": "text", "text": "Done."});
    let other = ProviderTag::openai_compatible;
    for (parts, expected) in [
        (
            vec![
                signed(ProviderTag::anthropic()),
                redacted(ProviderTag::anthropic()),
                text(),
            ],
            Some(json!([thinking, redacted_block, done])),
        ),
        // Another provider's reasoning, signed or not, is dropped.
        (
            vec![signed(other()), redacted(other()), text()],
            Some(json!([done])),
        ),
        (
            vec![signed(ProviderTag::custom()), text()],
            Some(json!([done])),
        ),
        // An unsigned anthropic part (a stream cut before its signature)
        // would be refused by the API.
        (
            vec![unsigned(ProviderTag::anthropic()), text()],
            Some(json!([done])),
        ),
        // Nothing left to send: the message is left out.
        (vec![signed(other())], None),
    ] {
        let expected = expected.map(|content| json!({"role": "assistant", "content": content}));
        check_reasoning_sent(parts, expected).await;
    }
}

#[tokio::test]
async fn images_and_files_reach_the_body_as_documented_blocks() {
    let limits = Limits::default();
    let url = ImagePart::from_url(
        HttpsUrl::parse("https://example.com/cat.webp").unwrap(),
        Some(ImageMediaType::Webp),
    );
    let notes = Part::file_with(
        FileMediaType::Markdown,
        "notes.md",
        "# Ø\n".as_bytes(),
        &limits,
    )
    .unwrap();
    let user = Message::new(
        MessageId::parse("m2").unwrap(),
        Role::User,
        vec![Part::image(url), notes],
    )
    .unwrap();
    let call = Part::tool_call(
        CallId::parse("toolu_1").unwrap(),
        ToolName::parse("screenshot").unwrap(),
        CanonicalJson::parse("{}").unwrap(),
    )
    .unwrap();
    let assistant =
        Message::new(MessageId::parse("a1").unwrap(), Role::Assistant, vec![call]).unwrap();
    let request = continued(
        &simple_request("claude-sonnet-4-5"),
        vec![
            user_with_media("m1b"),
            user,
            assistant.clone(),
            tool_result_with_image("toolu_1", "Here it is."),
        ],
    );
    let body = sent_body(request).await;
    let png = json!({"type": "image", "source": {"type": "base64", "media_type": "image/png",
        "data": "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJ"}});
    assert_eq!(
        body["messages"][1]["content"],
        json!([
            {"type": "text", "text": "What is in these?"},
            png,
            {"type": "document", "title": "report.pdf", "source": {"type": "base64",
                "media_type": "application/pdf",
                "data": "JVBERi0xLjQKMSAwIG9iajw8Pj5lbmRvYmoKdHJhaWxlcjw8Pj4KJSVFT0YK"}}
        ])
    );
    assert_eq!(
        body["messages"][2]["content"],
        json!([
            {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.webp"}},
            {"type": "document", "title": "notes.md",
             "source": {"type": "text", "media_type": "text/plain", "data": "# Ø\n"}}
        ])
    );
    assert_eq!(
        body["messages"][4]["content"],
        json!([{"type": "tool_result", "tool_use_id": "toolu_1", "content": [
            {"type": "text", "text": "Here it is."},
            png
        ]}])
    );
    // Without text, only the image goes in `content`.
    let request = continued(
        &simple_request("claude-sonnet-4-5"),
        vec![assistant, tool_result_with_image("toolu_1", "")],
    );
    let body = sent_body(request).await;
    assert_eq!(body["messages"][2]["content"][0]["content"], json!([png]));
}

fn check_budget(max_tokens: u32, budget: Option<u32>, expected: Result<(), ProviderConfigError>) {
    let result = Anthropic::new(AnthropicConfig {
        wire: AnthropicOptions {
            max_tokens,
            thinking_budget_tokens: budget,
        },
        ..AnthropicConfig::new("http://127.0.0.1:1/v1", None)
    })
    .map(|_| ());
    assert_eq!(
        result, expected,
        "max_tokens {max_tokens}, budget {budget:?}"
    );
    if let Err(e) = result {
        let shown = e.to_string();
        assert!(
            shown.contains("thinking_budget_tokens")
                && shown.contains("rule config.thinking_budget_tokens"),
            "{shown}"
        );
    }
}

#[test]
fn the_thinking_budget_is_at_least_1024_and_below_max_tokens() {
    let refused =
        |budget, max_tokens| Err(ProviderConfigError::ThinkingBudget { budget, max_tokens });
    for (max_tokens, budget, expected) in [
        (4096, None, Ok(())),
        (4096, Some(1024), Ok(())),
        (4096, Some(4095), Ok(())),
        (4096, Some(1023), refused(1023, 4096)),
        (4096, Some(0), refused(0, 4096)),
        (4096, Some(4096), refused(4096, 4096)),
        (1024, Some(1024), refused(1024, 1024)),
    ] {
        check_budget(max_tokens, budget, expected);
    }
}

#[tokio::test]
async fn a_configured_thinking_budget_reaches_the_adapter_through_its_kind() {
    for budget in [None, Some(1024)] {
        let body = events(
            &[
                vec![message_start(3)],
                text_block(0, &["ok"]),
                finish("end_turn", 2),
            ]
            .concat(),
        );
        let server = Server::one(Reply::sse(body)).await;
        let provider = ProviderKind::Anthropic
            .connect_with(
                Some(&server.base_url()),
                ApiKey::new(KEY).unwrap(),
                &ConnectOptions {
                    thinking_budget_tokens: budget,
                    ..ConnectOptions::default()
                },
            )
            .unwrap();
        assert_eq!(provider.provider_tag(), ProviderTag::anthropic());
        let seen = observe(provider.as_ref(), simple_request("m"), &allow()).await;
        assert_eq!(seen.text, "ok");
        let sent = server.requests()[0].json();
        let expected = budget.map(|n| json!({"type": "enabled", "budget_tokens": n}));
        assert_eq!(sent.get("thinking").cloned(), expected, "{sent}");
    }
}
