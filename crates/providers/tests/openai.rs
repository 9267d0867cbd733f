//! The OpenAI Chat Completions adapter against a local replay server: every
//! shared fixture through the conformance suite at several read sizes,
//! then the cases the fixtures do not cover.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use keel_message::*;
use keel_providers::{
    ApiKey, ConnectOptions, OpenAiCompatible, OpenAiConfig, OpenAiOptions, ProviderKind,
};
use keel_stream::{FinishReason, MetadataAllowlist, ModelProvider, ProblemKind, RetryPosition};
use keel_testkit::conformance::*;
use serde_json::{Value, json};
use std::time::Duration;

const KEY: &str = "sk-test-Zq8x1Y2w3V4u5T6s7R8q9P0o";

fn config(server: &Server) -> OpenAiConfig {
    OpenAiConfig {
        base_url: server.base_url(),
        api_key: Some(ApiKey::new(KEY).unwrap()),
        ..OpenAiConfig::default()
    }
}

fn provider(server: &Server) -> OpenAiCompatible {
    OpenAiCompatible::new(config(server)).unwrap()
}

fn allow() -> CheckOptions {
    CheckOptions::default().with_allowlist(MetadataAllowlist::new(["openai"]).unwrap())
}

async fn observe_one(reply: Reply) -> Observed {
    let server = Server::one(reply).await;
    observe(&provider(&server), simple_request("gpt-4.1-mini"), &allow()).await
}

fn chunk(delta: serde_json::Value, finish: Option<&str>) -> String {
    json!({"id": "chatcmpl-x", "object": "chat.completion.chunk", "model": "m",
           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    .to_string()
}

fn usage_chunk(prompt: u64, completion: u64) -> String {
    json!({"id": "chatcmpl-x", "choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion}})
        .to_string()
}

fn tool_delta(index: u64, id: Option<&str>, name: Option<&str>, args: &str) -> String {
    let mut call = json!({"index": index, "function": {"arguments": args}});
    if let Some(id) = id {
        call["id"] = json!(id);
        call["type"] = json!("function");
    }
    if let Some(name) = name {
        call["function"]["name"] = json!(name);
    }
    chunk(json!({"tool_calls": [call]}), None)
}

fn problem(seen: &Observed) -> (ProblemKind, bool, RetryPosition) {
    let failure = seen.failure.as_ref().expect("a failure");
    (
        failure.kind(),
        failure.problem().retryable(),
        failure.position(),
    )
}

#[tokio::test]
async fn every_fixture_conforms_at_every_read_size() {
    for fixture in all_fixtures("openai-chat") {
        for split in SPLITS {
            let server = Server::one(Reply::fixture(&fixture, split)).await;
            let result = check_stream_with(
                &provider(&server),
                simple_request("gpt-4.1-mini"),
                &fixture.expect,
                &allow(),
            )
            .await;
            if let Err(failure) = result {
                panic!("{} (split {split}): {failure}", fixture.name);
            }
            let requests = server.requests();
            assert_eq!(requests.len(), 1);
            assert_eq!(
                (requests[0].method.as_str(), requests[0].path.as_str()),
                ("POST", "/v1/chat/completions")
            );
        }
    }
}

#[tokio::test]
async fn metadata_holds_only_safe_facts() {
    let seen = observe_one(Reply::fixture(&fixture("openai-chat", "text_only"), 0)).await;
    let done = seen.completion.expect("a completion");
    assert_eq!(
        done.metadata().to_canonical_string(),
        r#"{"openai":{"id":"chatcmpl-l2M69i7WdDqgNmO6SfsyNVcEQMKFc","model":"gpt-4.1-mini-2025-04-14","request_id":"req_e963a8cc7d2cd0e63b0bb0841d5824cb","service_tier":"default","system_fingerprint":"fp_b6fa7cd62d"}}"#
    );
    // gpt-5 shape: system_fingerprint null is left out.
    let seen = observe_one(Reply::fixture(&fixture("openai-chat", "usage_included"), 7)).await;
    let meta = seen.completion.unwrap().metadata().to_canonical_string();
    assert!(!meta.contains("system_fingerprint"), "{meta}");
    assert!(
        meta.contains(r#""model":"gpt-5-mini-2025-08-07""#),
        "{meta}"
    );
    // Without the allowlist, nothing.
    let server = Server::one(Reply::fixture(&fixture("openai-chat", "text_only"), 0)).await;
    let seen = observe(
        &provider(&server),
        simple_request("m"),
        &CheckOptions::default(),
    )
    .await;
    assert!(seen.completion.unwrap().metadata().is_empty());
}

#[tokio::test]
async fn the_request_body_and_headers_have_the_documented_shape() {
    let body = sse_body([
        chunk(json!({"content": "ok"}), Some("stop")),
        "[DONE]".into(),
    ]);
    let server = Server::one(Reply::sse(body)).await;
    let provider = OpenAiCompatible::new(OpenAiConfig {
        wire: OpenAiOptions {
            max_completion_tokens: Some(256),
            ..OpenAiOptions::default()
        },
        ..config(&server)
    })
    .unwrap();
    let seen = observe(&provider, rich_request("gpt-4.1-mini"), &allow()).await;
    assert_eq!(seen.text, "ok");
    let request = &server.requests()[0];
    assert_eq!(
        request.json(),
        json!({
            "model": "gpt-4.1-mini",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Weather in Oslo?"},
                {"role": "assistant", "content": "Checking.", "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}},
                    {"id": "call_2", "type": "function",
                     "function": {"name": "get_time", "arguments": "{}"}}
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp_c\":3}"},
                {"role": "tool", "tool_call_id": "call_2", "content": "clock broken"},
                {"role": "user", "content": "Thanks!"}
            ],
            "tools": [
                {"type": "function", "function": {
                    "name": "get_weather", "description": "Current weather for a city",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
                {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}
            ],
            "max_completion_tokens": 256,
            "stream": true,
            "stream_options": {"include_usage": true}
        })
    );
    let h = &request.headers;
    assert_eq!(h["authorization"], format!("Bearer {KEY}"));
    assert_eq!(h["content-type"], "application/json");
    assert_eq!(h["accept"], "text/event-stream");
    assert!(h["user-agent"].starts_with("keel-providers/"));

    // No key, no authorization header.
    let server = Server::one(Reply::sse(sse_body([
        chunk(json!({"content": "ok"}), Some("stop")),
        "[DONE]".into(),
    ])))
    .await;
    let provider = OpenAiCompatible::new(OpenAiConfig {
        api_key: None,
        ..config(&server)
    })
    .unwrap();
    observe(&provider, simple_request("llama3.1:8b"), &allow()).await;
    let request = &server.requests()[0];
    assert!(!request.headers.contains_key("authorization"));
    assert_eq!(request.json()["model"], "llama3.1:8b");
    assert!(request.json().get("tools").is_none());
}

#[tokio::test]
async fn tool_calls_split_across_many_chunks_are_assembled_by_index() {
    // Three calls; each argument string arrives one character per chunk,
    // interleaved, and index 2 shows up first.
    let args = [
        r#"{"city": "Tromsø"}"#,
        r#"{"q": "say \"hi\"", "n": [1, 2]}"#,
        "{}",
    ];
    let mut events = vec![chunk(json!({"role": "assistant", "content": null}), None)];
    for index in [2u64, 0, 1] {
        events.push(tool_delta(
            index,
            Some(&format!("call_{index}")),
            Some(&format!("tool_{index}")),
            "",
        ));
    }
    let pieces: Vec<Vec<String>> = args
        .iter()
        .map(|a| a.chars().map(String::from).collect())
        .collect();
    let longest = pieces.iter().map(Vec::len).max().unwrap();
    for i in 0..longest {
        for index in [1usize, 2, 0] {
            if let Some(piece) = pieces[index].get(i) {
                events.push(tool_delta(index as u64, None, None, piece));
            }
        }
    }
    events.push(chunk(json!({}), Some("tool_calls")));
    events.push(usage_chunk(50, 30));
    events.push("[DONE]".into());
    let expect = Expectation {
        text: String::new(),
        tool_calls: (0..3)
            .map(|i| ExpectedToolCall {
                call_id: format!("call_{i}"),
                name: format!("tool_{i}"),
                arguments: serde_json::from_str(args[i]).unwrap(),
            })
            .collect(),
        finish: Some(FinishReason::ToolCalls),
        usage: Some(ExpectedUsage {
            input_tokens: 50,
            output_tokens: 30,
        }),
        problem: None,
    };
    for split in [0, 1, 7] {
        let server = Server::one(Reply::sse(sse_body(&events)).split(split)).await;
        check_stream(&provider(&server), simple_request("m"), &expect)
            .await
            .unwrap_or_else(|e| panic!("split {split}: {e}"));
    }
}

#[tokio::test]
async fn compatible_server_quirks_are_absorbed() {
    // No ids and no index (calls told apart by position), empty arguments
    // for a parameterless tool, and `stop` as the finish after tool calls.
    let events = [
        chunk(
            json!({"tool_calls": [{"function": {"name": "get_time", "arguments": ""}}]}),
            None,
        ),
        chunk(json!({}), Some("stop")),
        usage_chunk(5, 2),
        "[DONE]".into(),
    ];
    let seen = observe_one(Reply::sse(sse_body(events))).await;
    assert_eq!(seen.finish(), Some(FinishReason::ToolCalls));
    assert_eq!(seen.tool_calls.len(), 1);
    assert_eq!(seen.tool_calls[0].call_id().as_str(), "call_op_1_0");
    assert_eq!(seen.tool_calls[0].arguments().as_str(), "{}");

    // A text delta longer than the delta bound is split (at char
    // boundaries), not rejected.
    let long = "ø".repeat(40);
    let server = Server::one(Reply::sse(sse_body([
        chunk(json!({"content": long}), Some("stop")),
        "[DONE]".into(),
    ])))
    .await;
    let limits = Limits {
        delta_bytes: 16,
        ..Limits::default()
    };
    let provider = OpenAiCompatible::new(OpenAiConfig {
        limits,
        ..config(&server)
    })
    .unwrap();
    let seen = observe(&provider, simple_request("m"), &allow()).await;
    assert_eq!(seen.text, long);
    assert_eq!(seen.items.len(), 5 + 1, "80 bytes in deltas of at most 16");

    // The usage chunk arrived but the body ended without [DONE]: nothing
    // is missing, so it completes.
    let seen = observe_one(Reply::sse(sse_body([
        chunk(json!({"content": "Hi"}), None),
        chunk(json!({}), Some("length")),
        usage_chunk(3, 1),
    ])))
    .await;
    assert_eq!(seen.finish(), Some(FinishReason::Length));
    assert_eq!(seen.usage().map(|u| u.output_tokens), Some(1));

    // A `length` finish cuts a call off mid-arguments: it is dropped, the
    // completion stands.
    let seen = observe_one(Reply::sse(sse_body([
        tool_delta(0, Some("call_a"), Some("f"), r#"{"path": "src/"#),
        chunk(json!({}), Some("length")),
        usage_chunk(3, 16),
        "[DONE]".into(),
    ])))
    .await;
    assert_eq!(seen.finish(), Some(FinishReason::Length));
    assert!(seen.tool_calls.is_empty());
}

#[tokio::test]
async fn sse_framing_variants_parse_the_same() {
    // CRLF line ends, comment and keep-alive lines, `data:` without the
    // space, an `event:` name, `id:` and `retry:` fields, and a lone
    // metadata block.
    let body = [
        ": keep-alive\r\n\r\n",
        "retry: 1000\r\n\r\n",
        &format!(
            "event: message\r\nid: 1\r\ndata:{}\r\n\r\n",
            chunk(json!({"role": "assistant", "content": ""}), None)
        ),
        &format!(
            ": comment inside\r\ndata: {}\r\n\r\n",
            chunk(json!({"content": "Blåbær"}), None)
        ),
        &format!(
            "data:{}\r\n\r\n",
            chunk(json!({"content": " 🫐"}), Some("stop"))
        ),
        &format!("data: {}\r\n\r\n", usage_chunk(2, 3)),
        "data:[DONE]\r\n\r\n",
    ]
    .concat();
    for split in [0, 1, 2, 7] {
        let seen = observe_one(Reply::sse(body.clone()).split(split)).await;
        assert_eq!(seen.text, "Blåbær 🫐", "split {split}");
        assert_eq!(seen.finish(), Some(FinishReason::Stop));
        assert_eq!(seen.usage().map(|u| u.input_tokens), Some(2));
    }
}

#[tokio::test]
async fn errors_before_the_stream_are_pristine_and_carry_retry_after() {
    // 429 with retry-after: 1.
    let seen = observe_one(Reply::fixture(
        &fixture("openai-chat", "rate_limited_429"),
        0,
    ))
    .await;
    assert_eq!(
        problem(&seen),
        (ProblemKind::RateLimited, true, RetryPosition::Pristine)
    );
    let failure = seen.failure.unwrap();
    assert_eq!(
        failure.problem().retry_after(),
        Some(Duration::from_secs(1))
    );
    assert!(
        failure
            .problem()
            .message()
            .starts_with("HTTP 429 rate_limit_exceeded: Rate limit reached"),
        "{}",
        failure.problem().message()
    );

    // 429 without retry-after: the exhausted limit's reset header.
    let body = r#"{"error": {"message": "slow down", "type": "requests", "param": null, "code": "rate_limit_exceeded"}}"#;
    let seen = observe_one(
        Reply::json(429, body)
            .header("x-ratelimit-remaining-requests", "0")
            .header("x-ratelimit-reset-requests", "1m30s")
            .header("x-ratelimit-remaining-tokens", "100")
            .header("x-ratelimit-reset-tokens", "5s"),
    )
    .await;
    assert_eq!(
        seen.failure.unwrap().problem().retry_after(),
        Some(Duration::from_secs(90))
    );

    // insufficient_quota is a 429 that must not be retried.
    let body = r#"{"error": {"message": "You exceeded your current quota.", "type": "insufficient_quota", "param": null, "code": "insufficient_quota"}}"#;
    let seen = observe_one(Reply::json(429, body)).await;
    assert_eq!(
        problem(&seen),
        (ProblemKind::RateLimited, false, RetryPosition::Pristine)
    );

    // 500, 503 (overloaded), 529, and an HTML 502 from a proxy.
    for (status, body, kind) in [
        (
            500,
            fixture("openai-chat", "server_error_500").body.unwrap(),
            ProblemKind::Unavailable,
        ),
        (
            503,
            fixture("openai-chat", "overloaded_503").body.unwrap(),
            ProblemKind::Overloaded,
        ),
        (
            529,
            r#"{"error": {"message": "Overloaded", "type": "overloaded_error"}}"#.into(),
            ProblemKind::Overloaded,
        ),
        (
            502,
            "<html>Bad gateway</html>".into(),
            ProblemKind::Unavailable,
        ),
    ] {
        let seen = observe_one(Reply::json(status, body)).await;
        assert_eq!(
            problem(&seen),
            (kind, true, RetryPosition::Pristine),
            "{status}"
        );
        let message = seen.failure.unwrap().problem().message().to_owned();
        assert!(!message.contains("html"), "{message}");
    }

    // Context length by code; x-should-retry overrides the default.
    let body = r#"{"error": {"message": "This model's maximum context length is 8192 tokens.", "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}"#;
    let seen = observe_one(Reply::json(400, body)).await;
    assert_eq!(
        problem(&seen),
        (ProblemKind::ContextLength, false, RetryPosition::Pristine)
    );
    let seen = observe_one(Reply::json(500, "{}").header("x-should-retry", "false")).await;
    assert_eq!(
        problem(&seen),
        (ProblemKind::Unavailable, false, RetryPosition::Pristine)
    );
}

#[tokio::test]
async fn a_disconnect_mid_stream_is_unavailable_and_partial() {
    let body = fixture("openai-chat", "text_only").body.unwrap();
    let cut = body.find(" sandwiches").unwrap();
    for (framing, split) in [
        (Framing::Chunked, 0),
        (Framing::Chunked, 7),
        (Framing::Close, 1),
    ] {
        let reply = Reply::sse(body.clone())
            .framing(framing)
            .split(split)
            .cut_after(cut);
        let seen = observe_one(reply).await;
        assert_eq!(seen.text, "Smørrebrød (open", "{framing:?} {split}");
        assert_eq!(
            problem(&seen),
            (ProblemKind::Unavailable, true, RetryPosition::Partial)
        );
    }
    // Cut before any text: pristine.
    let seen = observe_one(Reply::sse(body.clone()).cut_after(100)).await;
    assert_eq!(
        problem(&seen),
        (ProblemKind::Unavailable, true, RetryPosition::Pristine)
    );
}

#[tokio::test]
async fn broken_streams_are_protocol_failures() {
    // [DONE] before any finish_reason.
    let seen = observe_one(Reply::sse(sse_body([
        chunk(json!({"content": "Hi"}), None),
        "[DONE]".into(),
    ])))
    .await;
    assert_eq!(
        problem(&seen),
        (ProblemKind::Protocol, false, RetryPosition::Partial)
    );
    // An unknown finish reason.
    let seen = observe_one(Reply::sse(sse_body([
        chunk(json!({"content": "Hi"}), Some("abort")),
        "[DONE]".into(),
    ])))
    .await;
    let failure = seen.failure.unwrap();
    assert_eq!(failure.kind(), ProblemKind::Protocol);
    assert!(failure.problem().message().contains("abort"));
    // A 200 with a JSON body (a server that ignored "stream": true).
    let seen = observe_one(Reply::json(200, r#"{"id": "chatcmpl-1", "choices": []}"#)).await;
    assert_eq!(
        problem(&seen),
        (ProblemKind::Protocol, false, RetryPosition::Pristine)
    );
    // A malformed chunk whose message must not echo it.
    let seen = observe_one(Reply::fixture(
        &fixture("openai-chat", "malformed_chunk"),
        1,
    ))
    .await;
    let message = seen.failure.unwrap().problem().message().to_owned();
    assert!(message.contains("not valid JSON"), "{message}");
    assert!(!message.contains("because"), "{message}");
    // An error chunk inside the stream.
    let seen = observe_one(Reply::sse(sse_body([
        chunk(json!({"content": "Hi"}), None),
        json!({"error": {"message": "The server had an error", "type": "server_error"}})
            .to_string(),
    ])))
    .await;
    assert_eq!(
        problem(&seen),
        (ProblemKind::Unavailable, true, RetryPosition::Partial)
    );
}

#[tokio::test]
async fn an_oversized_chunk_is_a_protocol_failure() {
    let huge = "x".repeat(4000);
    let body = sse_body([
        chunk(json!({"content": "Before"}), None),
        chunk(json!({"content": huge}), None),
        chunk(json!({}), Some("stop")),
        "[DONE]".into(),
    ]);
    for split in [0, 1, 7, 1000] {
        let server = Server::one(Reply::sse(body.clone()).split(split)).await;
        let provider = OpenAiCompatible::new(OpenAiConfig {
            max_chunk_bytes: 1024,
            ..config(&server)
        })
        .unwrap();
        let seen = observe(&provider, simple_request("m"), &allow()).await;
        assert_eq!(seen.text, "Before", "split {split}");
        assert_eq!(
            problem(&seen),
            (ProblemKind::Protocol, false, RetryPosition::Partial)
        );
        let message = seen.failure.unwrap().problem().message().to_owned();
        assert!(message.contains("oversized chunk"), "{message}");
    }
    // A line with no end at all is cut off the same way.
    let seen = {
        let server =
            Server::one(Reply::sse(format!("data: {}", "y".repeat(5000))).split(100)).await;
        let provider = OpenAiCompatible::new(OpenAiConfig {
            max_chunk_bytes: 1024,
            ..config(&server)
        })
        .unwrap();
        observe(&provider, simple_request("m"), &allow()).await
    };
    assert_eq!(
        problem(&seen),
        (ProblemKind::Protocol, false, RetryPosition::Pristine)
    );
}

#[tokio::test]
async fn the_key_never_leaks() {
    // A server that echoes the whole key in its error message and in a
    // request id header.
    let body = json!({"error": {"message": format!("Invalid API key {KEY} for this model"), "type": "invalid_request_error", "code": "invalid_api_key"}}).to_string();
    let server = Server::one(Reply::json(401, body)).await;
    let seen = observe(&provider(&server), simple_request("m"), &allow()).await;
    let failure = seen.failure.unwrap();
    assert_eq!(failure.kind(), ProblemKind::Auth);
    let message = failure.problem().message();
    assert!(!message.contains(KEY), "{message}");
    assert!(message.contains("[redacted]"), "{message}");

    let events = [
        json!({"id": KEY, "model": format!("m-{KEY}"), "choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": "stop"}]}).to_string(),
        "[DONE]".into(),
    ];
    let server = Server::one(Reply::sse(sse_body(events)).header("x-request-id", KEY)).await;
    let seen = observe(&provider(&server), simple_request("m"), &allow()).await;
    let meta = seen.completion.unwrap().metadata().to_canonical_string();
    assert!(!meta.contains(KEY), "{meta}");

    let config = config(&server);
    for shown in [
        format!("{config:?}"),
        format!("{:?}", OpenAiCompatible::new(config.clone()).unwrap()),
        format!("{:?}", config.api_key),
    ] {
        assert!(!shown.contains(KEY), "{shown}");
    }
}

#[tokio::test]
async fn dropping_the_stream_closes_the_connection() {
    let body = fixture("openai-chat", "text_only").body.unwrap();
    let cut = body.find("classic").unwrap();
    let server = Server::one(Reply::sse(body.clone()).cut_after(cut).hold()).await;
    let read = check_drop_mid_stream(&provider(&server), simple_request("m"), 3)
        .await
        .unwrap();
    assert_eq!(read, 3);
    assert!(
        server.wait_closed(1, Duration::from_secs(5)).await,
        "the server never saw the connection close"
    );

    // Dropping the start future while it waits for headers also closes it.
    let mut slow = Reply::sse(body).hold();
    slow.delay = Duration::from_secs(30);
    let server = Server::one(slow).await;
    let start = provider(&server).start(simple_request("m"));
    assert!(
        tokio::time::timeout(Duration::from_millis(300), start)
            .await
            .is_err()
    );
    assert_eq!(server.requests().len(), 1);
    assert!(
        server.wait_closed(1, Duration::from_secs(5)).await,
        "the server never saw the connection close"
    );
}

#[tokio::test]
async fn transport_failures_are_typed() {
    // Nothing listens: unavailable, retryable, pristine.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let provider =
        OpenAiCompatible::new(OpenAiConfig::new(format!("http://{addr}/v1"), None)).unwrap();
    let seen = observe(&provider, simple_request("m"), &allow()).await;
    assert_eq!(
        problem(&seen),
        (ProblemKind::Unavailable, true, RetryPosition::Pristine)
    );
    assert!(
        !seen
            .failure
            .unwrap()
            .problem()
            .message()
            .contains("127.0.0.1")
    );

    // The server goes quiet mid-stream: the idle timeout fires.
    let body = fixture("openai-chat", "text_only").body.unwrap();
    let cut = body.find("classic").unwrap();
    let server = Server::one(Reply::sse(body).cut_after(cut).hold()).await;
    let provider = OpenAiCompatible::new(OpenAiConfig {
        idle_timeout: Duration::from_millis(300),
        ..config(&server)
    })
    .unwrap();
    let seen = observe(&provider, simple_request("m"), &allow()).await;
    assert_eq!(seen.text, "Smørrebrød (open sandwiches) are a Danish lunch");
    assert_eq!(
        problem(&seen),
        (ProblemKind::Timeout, true, RetryPosition::Partial)
    );
}

#[test]
fn bad_configurations_are_refused() {
    for (config, rule) in [
        (OpenAiConfig::new("localhost:8080", None), "base_url"),
        (
            OpenAiConfig::new("https://user:pw@host/v1", None),
            "base_url",
        ),
        (
            OpenAiConfig {
                max_chunk_bytes: 0,
                ..OpenAiConfig::default()
            },
            "max_chunk_bytes",
        ),
        (
            OpenAiConfig {
                idle_timeout: Duration::ZERO,
                ..OpenAiConfig::default()
            },
            "idle_timeout",
        ),
    ] {
        let err = OpenAiCompatible::new(config).unwrap_err().to_string();
        assert!(err.contains(rule), "{err}");
        assert!(!err.contains("pw@"), "{err}");
    }
    let provider = OpenAiCompatible::new(OpenAiConfig::new("http://127.0.0.1:1/v1", None)).unwrap();
    assert_eq!(
        provider.endpoint(),
        "http://127.0.0.1:1/v1/chat/completions"
    );
    let _: &dyn ModelProvider = &provider;
}

#[cfg(feature = "rustls")]
#[test]
fn the_default_https_endpoint_is_accepted_with_tls() {
    let provider = OpenAiCompatible::new(OpenAiConfig::default()).unwrap();
    assert_eq!(
        provider.endpoint(),
        "https://api.openai.com/v1/chat/completions"
    );
}

/// Only compiles without the `rustls` feature: https is refused when the
/// provider is built, naming the rule and the feature, never the URL.
#[cfg(not(feature = "rustls"))]
#[test]
fn https_is_refused_at_construction_without_tls() {
    let err = OpenAiCompatible::new(OpenAiConfig::default()).unwrap_err();
    assert_eq!(err, keel_providers::ProviderConfigError::TlsDisabled);
    let text = err.to_string();
    assert!(text.contains("rule config.tls"), "{text}");
    assert!(text.contains("`rustls` feature"), "{text}");
    assert!(!text.contains("api.openai.com"), "{text}");
}

#[test]
fn debug_shows_the_shell_with_the_key_redacted() {
    let config = OpenAiConfig {
        wire: OpenAiOptions {
            max_completion_tokens: Some(9),
            ..OpenAiOptions::default()
        },
        ..OpenAiConfig::new("http://127.0.0.1:1/v1", Some(ApiKey::new(KEY).unwrap()))
    };
    let shown = format!("{config:?}");
    assert!(shown.contains("max_completion_tokens: Some(9)"), "{shown}");
    assert!(!shown.contains(KEY), "{shown}");
    let provider = format!("{:?}", OpenAiCompatible::new(config).unwrap());
    assert!(provider.starts_with("OpenAiCompatible {"), "{provider}");
    assert!(
        provider.contains("http://127.0.0.1:1/v1/chat/completions"),
        "{provider}"
    );
    assert!(provider.contains("[redacted]"), "{provider}");
    assert!(!provider.contains(KEY), "{provider}");
}

#[tokio::test]
async fn a_finished_connection_is_reused() {
    let body = fixture("openai-chat", "text_only").body.unwrap();
    let server = Server::start(vec![Reply::sse(body); 3]).await;
    let provider = provider(&server);
    let expect = fixture("openai-chat", "text_only").expect;
    for _ in 0..3 {
        check_stream(&provider, simple_request("m"), &expect)
            .await
            .unwrap();
    }
    assert_eq!(server.requests().len(), 3);
    // Normally one; the wait for the body's end is bounded (20 ms), so a
    // starved test thread may miss one reuse, not every one.
    assert!(server.connections() < 3, "{}", server.connections());
}

// ----------------------------------------------------------- reasoning ----

/// The reasoning text of a fixture, read from its SSE payloads without the
/// adapter (`reasoning_content`, else `reasoning`, per chunk).
fn fixture_reasoning(body: &str) -> String {
    sse_payloads(body)
        .iter()
        .filter_map(|p| {
            let delta = &p["choices"][0]["delta"];
            delta["reasoning_content"]
                .as_str()
                .filter(|t| !t.is_empty())
                .or(delta["reasoning"].as_str())
                .map(str::to_owned)
        })
        .collect()
}

fn reasoning_text(seen: &Observed) -> String {
    reasoning_items(seen)
        .into_iter()
        .map(|(kind, text)| {
            assert_eq!(kind, "delta");
            text
        })
        .collect()
}

#[tokio::test]
async fn reasoning_fixtures_conform_and_yield_reasoning_deltas() {
    for case in ["reasoning_content_tool_call", "reasoning_field"] {
        let fixture = fixture("openai-reasoning", case);
        let expected = fixture_reasoning(fixture.body.as_deref().unwrap());
        assert!(expected.len() > 20, "{case}");
        for split in SPLITS {
            let server = Server::one(Reply::fixture(&fixture, split)).await;
            let seen = observe(&provider(&server), simple_request("m"), &allow()).await;
            compare(&fixture.expect, &seen).unwrap_or_else(|e| panic!("{case} split {split}: {e}"));
            assert_eq!(reasoning_text(&seen), expected, "{case} split {split}");
            // All reasoning comes before the visible text.
            let first_text = seen
                .items
                .iter()
                .position(|i| matches!(i, keel_stream::StreamItem::TextDelta(_)))
                .unwrap();
            assert!(
                seen.items[first_text..]
                    .iter()
                    .all(|i| !matches!(i, keel_stream::StreamItem::ReasoningDelta(_))),
                "{case}"
            );
        }
    }
    // A server that sends both names with the same text: taken once.
    let body = sse_body([
        chunk(
            json!({"reasoning_content": "Hmm.", "reasoning": "Hmm."}),
            None,
        ),
        chunk(
            json!({"reasoning_content": "", "reasoning": " More."}),
            None,
        ),
        chunk(json!({"content": "Hi"}), Some("stop")),
        usage_chunk(1, 2),
        "[DONE]".into(),
    ]);
    let seen = observe_one(Reply::sse(body)).await;
    assert_eq!(
        (reasoning_text(&seen).as_str(), seen.text.as_str()),
        ("Hmm. More.", "Hi")
    );
}

fn reasoning_provider(server: &Server, send_reasoning: bool) -> OpenAiCompatible {
    OpenAiCompatible::new(OpenAiConfig {
        wire: OpenAiOptions {
            send_reasoning,
            ..OpenAiOptions::default()
        },
        ..config(server)
    })
    .unwrap()
}

/// Runs the reasoning fixture, then the next request with its tool
/// result, and returns what that request sent as the assistant message.
async fn next_assistant_message(send_reasoning: bool, extra: Vec<Part>) -> Value {
    let first = fixture("openai-reasoning", "reasoning_content_tool_call");
    let last = sse_body([
        chunk(json!({"content": "Rainy."}), Some("stop")),
        "[DONE]".into(),
    ]);
    let server = Server::start(vec![Reply::fixture(&first, 7), Reply::sse(last)]).await;
    let provider = reasoning_provider(&server, send_reasoning);
    let request = simple_request("deepseek-reasoner");
    let seen = observe(&provider, request.clone(), &allow()).await;
    assert_eq!(seen.finish(), Some(FinishReason::ToolCalls));
    let kept = assistant_message(&seen, &provider.provider_tag());
    let mut parts = extra;
    parts.extend(kept.parts().iter().cloned());
    let assistant = Message::new(MessageId::parse("a1").unwrap(), Role::Assistant, parts).unwrap();
    let call_id = seen.tool_calls[0].call_id().clone();
    let result = Message::new(
        MessageId::parse("t1").unwrap(),
        Role::Tool,
        vec![Part::tool_result(call_id, "rain", false).unwrap()],
    )
    .unwrap();
    let seen = observe(
        &provider,
        continued(&request, vec![assistant, result]),
        &allow(),
    )
    .await;
    assert_eq!(seen.text, "Rainy.");
    server.requests()[1].json()["messages"][1].clone()
}

#[tokio::test]
async fn reasoning_goes_back_only_when_send_reasoning_is_configured() {
    assert!(!OpenAiOptions::default().send_reasoning);
    let expected = fixture_reasoning(
        fixture("openai-reasoning", "reasoning_content_tool_call")
            .body
            .as_deref()
            .unwrap(),
    );
    let limits = Limits::default();
    let signature = || Some(OpaqueValue::new("sig-abc").unwrap());
    // Another provider's reasoning and a redacted part never go.
    let foreign = || {
        vec![
            Part::reasoning_with(ProviderTag::anthropic(), "Elsewhere.", signature(), &limits)
                .unwrap(),
            Part::redacted_reasoning(
                ProviderTag::openai_compatible(),
                OpaqueValue::new("opaque").unwrap(),
            ),
        ]
    };
    let sent = next_assistant_message(false, foreign()).await;
    assert_eq!(sent.get("reasoning_content"), None, "{sent}");
    assert_eq!(sent["content"], "Checking the weather.");
    assert_eq!(sent["tool_calls"][0]["id"], "call_0_8d2f6a1b");
    let sent = next_assistant_message(true, foreign()).await;
    assert_eq!(sent["reasoning_content"], json!(expected), "{sent}");
    assert_eq!(sent["content"], "Checking the weather.");
}

#[tokio::test]
async fn images_and_files_reach_the_body_as_content_parts() {
    let url = ImagePart::from_url(HttpsUrl::parse("https://example.com/a.jpg").unwrap(), None);
    let user = Message::new(
        MessageId::parse("m2").unwrap(),
        Role::User,
        vec![Part::text("And this?").unwrap(), Part::image(url)],
    )
    .unwrap();
    let call = Part::tool_call(
        CallId::parse("call_1").unwrap(),
        ToolName::parse("screenshot").unwrap(),
        CanonicalJson::parse("{}").unwrap(),
    )
    .unwrap();
    let request = continued(
        &simple_request("gpt-4.1-mini"),
        vec![
            user_with_media("m1b"),
            user,
            Message::new(MessageId::parse("a1").unwrap(), Role::Assistant, vec![call]).unwrap(),
            tool_result_with_image("call_1", "Here it is."),
        ],
    );
    let body = sse_body([
        chunk(json!({"content": "ok"}), Some("stop")),
        "[DONE]".into(),
    ]);
    let server = Server::one(Reply::sse(body)).await;
    let seen = observe(&provider(&server), request, &allow()).await;
    assert_eq!(seen.text, "ok");
    let sent = server.requests()[0].json();
    let messages = &sent["messages"];
    // A text-only user message keeps the string form.
    assert_eq!(messages[0]["content"], "Hi");
    assert_eq!(
        messages[1]["content"],
        json!([
            {"type": "text", "text": "What is in these?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJ"}},
            {"type": "file", "file": {"filename": "report.pdf",
                "file_data": "data:application/pdf;base64,JVBERi0xLjQKMSAwIG9iajw8Pj5lbmRvYmoKdHJhaWxlcjw8Pj4KJSVFT0YK"}}
        ])
    );
    assert_eq!(
        messages[2]["content"],
        json!([
            {"type": "text", "text": "And this?"},
            {"type": "image_url", "image_url": {"url": "https://example.com/a.jpg"}}
        ])
    );
    // The tool result's image cannot travel: a note says what was left
    // out, and no byte of it is sent.
    let note = format!(
        "Here it is.\n\n[1 image omitted: image/png, {} bytes. This chat format cannot carry images in a tool result.]",
        PNG.len()
    );
    assert_eq!(
        messages[4],
        json!({"role": "tool", "tool_call_id": "call_1", "content": note})
    );
    let raw = String::from_utf8(server.requests()[0].body.clone()).unwrap();
    assert_eq!(raw.matches("iVBORw0KGgo").count(), 1, "{raw}");
}

#[test]
fn omitted_image_notes_name_count_types_and_sizes() {
    let limits = Limits::default();
    let png = ImagePart::from_bytes_with(ImageMediaType::Png, PNG, &limits).unwrap();
    let url = ImagePart::from_url(
        HttpsUrl::parse("https://example.com/b.gif").unwrap(),
        Some(ImageMediaType::Gif),
    );
    let bare = ImagePart::from_url(HttpsUrl::parse("https://example.com/c").unwrap(), None);
    let message = Message::new(
        MessageId::parse("t1").unwrap(),
        Role::Tool,
        vec![
            Part::tool_result_with_images(
                CallId::parse("c1").unwrap(),
                "",
                true,
                vec![png, url, bare],
                &limits,
            )
            .unwrap(),
        ],
    )
    .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let sent = rt.block_on(async {
        let body = sse_body([
            chunk(json!({"content": "ok"}), Some("stop")),
            "[DONE]".into(),
        ]);
        let server = Server::one(Reply::sse(body)).await;
        let call = Part::tool_call(
            CallId::parse("c1").unwrap(),
            ToolName::parse("shot").unwrap(),
            CanonicalJson::parse("{}").unwrap(),
        )
        .unwrap();
        let assistant =
            Message::new(MessageId::parse("a1").unwrap(), Role::Assistant, vec![call]).unwrap();
        let request = continued(&simple_request("m"), vec![assistant, message]);
        observe(&provider(&server), request, &allow()).await;
        server.requests()[0].json()
    });
    assert_eq!(
        sent["messages"][2]["content"],
        json!(format!(
            "[3 images omitted: image/png, {} bytes; image/gif by URL; image by URL. This chat format cannot carry images in a tool result.]",
            PNG.len()
        ))
    );
}

#[test]
fn the_provider_tags_its_reasoning_openai_compatible() {
    let provider = OpenAiCompatible::new(OpenAiConfig::new("http://127.0.0.1:1/v1", None)).unwrap();
    assert_eq!(provider.provider_tag(), ProviderTag::openai_compatible());
    assert_eq!(provider.provider_tag().as_str(), "openai-compatible");
}

#[tokio::test]
async fn a_configured_send_reasoning_reaches_the_adapter_through_its_kind() {
    let limits = Limits::default();
    let own =
        Part::reasoning_with(ProviderTag::openai_compatible(), "Mine.", None, &limits).unwrap();
    let assistant = Message::new(
        MessageId::parse("a1").unwrap(),
        Role::Assistant,
        vec![own, Part::text("Hello.").unwrap()],
    )
    .unwrap();
    for send_reasoning in [false, true] {
        let body = sse_body([
            chunk(json!({"content": "ok"}), Some("stop")),
            "[DONE]".into(),
        ]);
        let server = Server::one(Reply::sse(body)).await;
        let provider = ProviderKind::OpenAiCompatible
            .connect_with(
                Some(&server.base_url()),
                ApiKey::new(KEY).unwrap(),
                &ConnectOptions {
                    send_reasoning,
                    ..ConnectOptions::default()
                },
            )
            .unwrap();
        assert_eq!(provider.provider_tag(), ProviderTag::openai_compatible());
        let request = continued(&simple_request("m"), vec![assistant.clone()]);
        let seen = observe(provider.as_ref(), request, &allow()).await;
        assert_eq!(seen.text, "ok");
        let sent = &server.requests()[0].json()["messages"][1];
        let expected = send_reasoning.then(|| json!("Mine."));
        assert_eq!(sent.get("reasoning_content").cloned(), expected, "{sent}");
    }
}
