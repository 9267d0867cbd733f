//! The Anthropic Messages adapter against a local replay server: every
//! shared fixture through the conformance suite at several read sizes,
//! then the cases the fixtures do not cover.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use keel_providers::{
    ANTHROPIC_VERSION, Anthropic, AnthropicConfig, AnthropicOptions, ApiKey, ProviderConfigError,
};
use keel_stream::{FinishReason, MetadataAllowlist, ProblemKind, RetryPosition};
use keel_testkit::conformance::*;
use serde_json::{Value, json};
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
        wire: AnthropicOptions { max_tokens: 512 },
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
        wire: AnthropicOptions { max_tokens: 0 },
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
