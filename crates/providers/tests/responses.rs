//! The OpenAI Responses adapter against a local replay server: every
//! fixture through the conformance suite at several read sizes (and
//! secret-free), the reasoning item sent back byte-exact in the next
//! request as the server received it, then the cases the fixtures do not
//! cover.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use keel_message::*;
use keel_providers::{
    ApiKey, OpenAiResponses, OpenAiResponsesConfig, ProviderKind, ReasoningEffort, ResponsesOptions,
};
use keel_stream::{
    FinishReason, MetadataAllowlist, ModelProvider, ProblemKind, RetryPosition, StreamItem,
};
use keel_testkit::conformance::*;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

const KEY: &str = "sk-proj-test-Rx7Yq2Wz9Kd4Lm8Np3Vb6Tc1";
const FOLDER: &str = "openai-responses";

fn config(server: &Server) -> OpenAiResponsesConfig {
    OpenAiResponsesConfig {
        base_url: server.base_url(),
        api_key: Some(ApiKey::new(KEY).unwrap()),
        ..OpenAiResponsesConfig::default()
    }
}

fn provider(server: &Server) -> OpenAiResponses {
    OpenAiResponses::new(config(server)).unwrap()
}

fn allow() -> CheckOptions {
    CheckOptions::default().with_allowlist(MetadataAllowlist::new(["openai"]).unwrap())
}

fn case(name: &str) -> Fixture {
    fixture(FOLDER, name)
}

/// Observes `reply` for a one-message request; checks the stream is
/// free of the key.
async fn observe_one(reply: Reply) -> Observed {
    let server = Server::one(reply).await;
    let seen = observe(&provider(&server), simple_request("gpt-4.1-mini"), &allow()).await;
    check_secret_free(&seen, KEY).unwrap();
    seen
}

fn problem(seen: &Observed) -> (ProblemKind, bool, RetryPosition) {
    let failure = seen.failure.as_ref().expect("a failure");
    (
        failure.kind(),
        failure.problem().retryable(),
        failure.position(),
    )
}

/// An SSE body of typed events, each as `event: {type}` and its data.
fn events(items: &[Value]) -> String {
    items
        .iter()
        .map(|e| match e["type"].as_str() {
            Some(kind) => format!("event: {kind}\ndata: {e}\n\n"),
            None => format!("data: {e}\n\n"),
        })
        .collect()
}

fn text_delta(delta: &str) -> Value {
    json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0,
           "content_index": 0, "delta": delta})
}

fn completed() -> Value {
    json!({"type": "response.completed", "response": {"id": "resp_1", "model": "m", "status": "completed",
           "usage": {"input_tokens": 3, "output_tokens": 1}}})
}

/// A short text answer.
fn ok_reply() -> Reply {
    Reply::sse(events(&[text_delta("ok"), completed()]))
}

#[tokio::test]
async fn every_fixture_conforms_at_every_read_size() {
    for fixture in all_fixtures(FOLDER) {
        for split in SPLITS {
            let server = Server::one(Reply::fixture(&fixture, split)).await;
            let seen = observe(&provider(&server), simple_request("o4-mini"), &allow()).await;
            let checked =
                compare(&fixture.expect, &seen).and_then(|()| check_secret_free(&seen, KEY));
            if let Err(failure) = checked {
                panic!("{} (split {split}): {failure}", fixture.name);
            }
            let requests = server.requests();
            assert_eq!(requests.len(), 1);
            assert_eq!(
                (requests[0].method.as_str(), requests[0].path.as_str()),
                ("POST", "/v1/responses")
            );
        }
    }
}

#[tokio::test]
async fn metadata_holds_only_safe_facts() {
    let seen = observe_one(Reply::fixture(&case("text_only"), 0)).await;
    assert_eq!(
        seen.completion.unwrap().metadata().to_canonical_string(),
        r#"{"openai":{"id":"resp_68f2a1c0d4e88190a6b5c4d3e2f1a0b9","model":"gpt-4.1-mini-2025-04-14","request_id":"req_5f1d2c0a9b8e4f7a8c6d3e2b1a0f9e8d","service_tier":"default"}}"#
    );
}

#[tokio::test]
async fn the_request_body_and_headers_have_the_documented_shape() {
    let server = Server::one(ok_reply()).await;
    let provider = OpenAiResponses::new(OpenAiResponsesConfig {
        wire: ResponsesOptions {
            max_output_tokens: Some(256),
            reasoning_effort: Some(ReasoningEffort::Low),
        },
        ..config(&server)
    })
    .unwrap();
    let seen = observe(&provider, rich_request("o4-mini"), &allow()).await;
    assert_eq!(seen.text, "ok");
    let request = &server.requests()[0];
    assert_eq!(
        request.json(),
        json!({
            "model": "o4-mini",
            "input": [
                {"type": "message", "role": "system", "content": [{"type": "input_text", "text": "Be brief."}]},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather in Oslo?"}]},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
                {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"},
                {"type": "function_call", "call_id": "call_2", "name": "get_time", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "call_1", "output": "{\"temp_c\":3}"},
                {"type": "function_call_output", "call_id": "call_2", "output": "clock broken"},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Thanks!"}]}
            ],
            "tools": [
                {"type": "function", "name": "get_weather", "description": "Current weather for a city",
                 "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
                 "strict": false},
                {"type": "function", "name": "get_time", "parameters": {"type": "object"}, "strict": false}
            ],
            "max_output_tokens": 256,
            "reasoning": {"effort": "low", "summary": "auto"},
            "store": false,
            "stream": true,
            "include": ["reasoning.encrypted_content"]
        })
    );
    let h = &request.headers;
    assert_eq!(h["authorization"], format!("Bearer {KEY}"));
    assert_eq!(h["content-type"], "application/json");
    assert_eq!(h["accept"], "text/event-stream");

    // The defaults: no reasoning member, no max_output_tokens, no tools;
    // still stateless.
    let server = Server::one(ok_reply()).await;
    observe(
        &provider_without_key(&server),
        simple_request("gpt-4.1"),
        &allow(),
    )
    .await;
    let sent = server.requests()[0].json();
    assert_eq!(sent.get("reasoning"), None);
    assert_eq!(sent.get("max_output_tokens"), None);
    assert_eq!(sent.get("tools"), None);
    assert_eq!(
        (&sent["store"], &sent["stream"]),
        (&json!(false), &json!(true))
    );
    assert_eq!(sent.get("previous_response_id"), None);
    assert!(!server.requests()[0].headers.contains_key("authorization"));
}

fn provider_without_key(server: &Server) -> OpenAiResponses {
    OpenAiResponses::new(OpenAiResponsesConfig {
        api_key: None,
        ..config(server)
    })
    .unwrap()
}

/// What a fixture's reasoning items are, read from its payloads without
/// the adapter: each item's id, summary texts and encrypted content, from
/// its `response.output_item.done`.
fn fixture_reasoning(body: &str) -> Vec<Value> {
    sse_payloads(body)
        .into_iter()
        .filter(|p| p["type"] == "response.output_item.done" && p["item"]["type"] == "reasoning")
        .map(|p| p["item"].clone())
        .collect()
}

fn weather_request() -> ModelRequest {
    let tools: Arc<[ToolDefinition]> = vec![
        ToolDefinition::new(
            ToolName::parse("get_weather").unwrap(),
            "Current weather for a city",
            CanonicalJson::parse(
                r#"{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}"#,
            )
            .unwrap(),
        )
        .unwrap(),
    ]
    .into();
    let history: Arc<[Message]> = vec![
        Message::text(
            MessageId::parse("m1").unwrap(),
            Role::User,
            "Weather in Trondheim?",
        )
        .unwrap(),
    ]
    .into();
    ModelRequest::new(
        OperationIdIssuer::new().issue(),
        ModelName::parse("o4-mini").unwrap(),
        history,
        tools,
    )
    .unwrap()
}

#[tokio::test]
async fn reasoning_summaries_stream_as_reasoning_signed_with_the_sealed_item() {
    let fixture = case("reasoning_tool_call");
    let items = fixture_reasoning(fixture.body.as_deref().unwrap());
    let item = &items[0];
    let summaries: Vec<&str> = item["summary"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["text"].as_str().unwrap())
        .collect();
    assert_eq!(summaries.len(), 2);
    for split in SPLITS {
        let server = Server::one(Reply::fixture(&fixture, split)).await;
        let seen = observe(&provider(&server), weather_request(), &allow()).await;
        compare(&fixture.expect, &seen).unwrap();
        let reasoning = reasoning_items(&seen);
        let (last, deltas) = reasoning.split_last().unwrap();
        let text: String = deltas
            .iter()
            .map(|(kind, text)| {
                assert_eq!(*kind, "delta");
                text.as_str()
            })
            .collect();
        assert_eq!(text, summaries.join("\n\n"), "split {split}");
        let lengths: Vec<String> = summaries.iter().map(|s| s.len().to_string()).collect();
        let sealed = format!(
            "{}:{}:{}",
            item["id"].as_str().unwrap(),
            lengths.join(","),
            item["encrypted_content"].as_str().unwrap()
        );
        assert_eq!(last, &("signature", sealed), "split {split}");
        // The reasoning comes before the call.
        let first_call = seen
            .items
            .iter()
            .position(|i| matches!(i, StreamItem::ToolCall(_)));
        let signature = seen
            .items
            .iter()
            .position(|i| matches!(i, StreamItem::ReasoningSignature(_)));
        assert!(signature < first_call);
    }
}

#[tokio::test]
async fn the_reasoning_item_goes_back_byte_exact_in_the_next_request() {
    let first = fixture_reasoning(case("reasoning_tool_call").body.as_deref().unwrap());
    let second = fixture_reasoning(case("after_tool_result").body.as_deref().unwrap());
    let server = Server::start(vec![
        Reply::fixture(&case("reasoning_tool_call"), 7),
        Reply::fixture(&case("after_tool_result"), 1),
        ok_reply(),
    ])
    .await;
    let provider = provider(&server);
    assert_eq!(provider.provider_tag(), ProviderTag::openai_responses());
    let request = weather_request();
    let seen = observe(&provider, request.clone(), &allow()).await;
    assert_eq!(seen.finish(), Some(FinishReason::ToolCalls));
    let assistant = assistant_message(&seen, &provider.provider_tag());
    let call_id = seen.tool_calls[0].call_id().clone();
    let result = Message::new(
        MessageId::parse("t1").unwrap(),
        Role::Tool,
        vec![Part::tool_result(call_id, r#"{"temp_c":3}"#, false).unwrap()],
    )
    .unwrap();
    let next = continued(&request, vec![assistant, result]);
    let after = observe(&provider, next.clone(), &allow()).await;
    assert_eq!(after.text, "It is 3 °C in Trondheim.");
    // The second answer's reasoning has no summary: a redacted part.
    assert_eq!(reasoning_items(&after)[0].0, "redacted");
    let answer = assistant_message(&after, &provider.provider_tag());
    let user = Message::text(MessageId::parse("m9").unwrap(), Role::User, "Thanks!").unwrap();
    observe(&provider, continued(&next, vec![answer, user]), &allow()).await;

    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    let reasoning_item = |item: &Value| {
        json!({"type": "reasoning", "id": item["id"], "summary": item["summary"],
               "encrypted_content": item["encrypted_content"]})
    };
    let assistant_turn = json!([
        reasoning_item(&first[0]),
        {"type": "function_call", "call_id": "call_Mh5rS0oB3zAx4Yp6", "name": "get_weather",
         "arguments": "{\"city\":\"Trondheim\"}"},
        {"type": "function_call_output", "call_id": "call_Mh5rS0oB3zAx4Yp6", "output": "{\"temp_c\":3}"}
    ]);
    let sent = requests[1].json();
    assert_eq!(
        sent["input"].as_array().unwrap()[1..],
        assistant_turn.as_array().unwrap()[..]
    );
    let sent = requests[2].json();
    assert_eq!(
        sent["input"].as_array().unwrap()[1..4],
        assistant_turn.as_array().unwrap()[..]
    );
    assert_eq!(
        sent["input"].as_array().unwrap()[4..],
        [
            reasoning_item(&second[0]),
            json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "It is 3 °C in Trondheim."}]}),
            json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Thanks!"}]}),
        ]
    );
    // The bytes the server received hold each encrypted value exactly as
    // it was sent, and the first item's summary parts as they came.
    let raw = String::from_utf8(requests[2].body.clone()).unwrap();
    for item in [&first[0], &second[0]] {
        let needle = format!(
            "\"encrypted_content\":\"{}\"",
            item["encrypted_content"].as_str().unwrap()
        );
        assert!(raw.contains(&needle), "{needle} not in {raw}");
    }
    assert_eq!(second[0]["summary"], json!([]));
    assert_eq!(first[0]["summary"].as_array().unwrap().len(), 2);
}

/// The request body sent for one assistant message with `parts` after
/// the first user message.
async fn sent_assistant(parts: Vec<Part>) -> Vec<Value> {
    let request = continued(
        &simple_request("o4-mini"),
        vec![Message::new(MessageId::parse("a1").unwrap(), Role::Assistant, parts).unwrap()],
    );
    let server = Server::one(ok_reply()).await;
    let seen = observe(&provider(&server), request, &allow()).await;
    assert_eq!(seen.text, "ok");
    server.requests()[0].json()["input"].as_array().unwrap()[1..].to_vec()
}

#[tokio::test]
async fn only_sealed_openai_responses_reasoning_is_sent_back() {
    let limits = Limits::default();
    let own = ProviderTag::openai_responses();
    let sig = |v: &str| Some(OpaqueValue::new(v).unwrap());
    let text = || Part::text("Hi.").unwrap();
    let message = json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hi."}]});
    for (reasoning, expected) in [
        // Its own, sealed: the item.
        (
            Part::reasoning_with(own.clone(), "A\n\nB", sig("rs_9:1,1:gAAA"), &limits).unwrap(),
            Some(
                json!({"type": "reasoning", "id": "rs_9", "encrypted_content": "gAAA",
                "summary": [{"type": "summary_text", "text": "A"}, {"type": "summary_text", "text": "B"}]}),
            ),
        ),
        (
            Part::redacted_reasoning(own.clone(), OpaqueValue::new("rs_8::gBBB").unwrap()),
            Some(
                json!({"type": "reasoning", "id": "rs_8", "summary": [], "encrypted_content": "gBBB"}),
            ),
        ),
        // Its own without a value (cut before the item was done), or a
        // value that is not its packing: dropped.
        (
            Part::reasoning_with(own.clone(), "Hm.", None, &limits).unwrap(),
            None,
        ),
        (
            Part::reasoning_with(own.clone(), "Hm.", sig("opaque"), &limits).unwrap(),
            None,
        ),
        // Another provider's: dropped.
        (
            Part::reasoning_with(ProviderTag::anthropic(), "Hm.", sig("rs_9::gAAA"), &limits)
                .unwrap(),
            None,
        ),
        (
            Part::redacted_reasoning(
                ProviderTag::openai_compatible(),
                OpaqueValue::new("rs_8::g").unwrap(),
            ),
            None,
        ),
    ] {
        let sent = sent_assistant(vec![reasoning, text()]).await;
        let expected: Vec<Value> = expected.into_iter().chain([message.clone()]).collect();
        assert_eq!(sent, expected);
    }
}

#[tokio::test]
async fn images_and_files_go_in_as_input_image_and_input_file() {
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
        &simple_request("gpt-4.1"),
        vec![
            user_with_media("m1b"),
            user,
            Message::new(MessageId::parse("a1").unwrap(), Role::Assistant, vec![call]).unwrap(),
            tool_result_with_image("call_1", "Here it is."),
        ],
    );
    let server = Server::one(ok_reply()).await;
    let seen = observe(&provider(&server), request, &allow()).await;
    assert_eq!(seen.text, "ok");
    let input = server.requests()[0].json()["input"].clone();
    let png = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJ";
    assert_eq!(
        input[1]["content"],
        json!([
            {"type": "input_text", "text": "What is in these?"},
            {"type": "input_image", "image_url": png, "detail": "auto"},
            {"type": "input_file", "filename": "report.pdf",
             "file_data": "data:application/pdf;base64,JVBERi0xLjQKMSAwIG9iajw8Pj5lbmRvYmoKdHJhaWxlcjw8Pj4KJSVFT0YK"}
        ])
    );
    assert_eq!(
        input[2]["content"],
        json!([
            {"type": "input_text", "text": "And this?"},
            {"type": "input_image", "image_url": "https://example.com/a.jpg", "detail": "auto"}
        ])
    );
    // A tool result's image travels in its output list.
    assert_eq!(
        input[4],
        json!({"type": "function_call_output", "call_id": "call_1", "output": [
            {"type": "input_text", "text": "Here it is."},
            {"type": "input_image", "image_url": png, "detail": "auto"}
        ]})
    );
}

#[tokio::test]
async fn errors_before_the_stream_are_typed_and_carry_retry_after() {
    let seen = observe_one(Reply::fixture(&case("rate_limited_429"), 0)).await;
    assert_eq!(
        problem(&seen),
        (ProblemKind::RateLimited, true, RetryPosition::Pristine)
    );
    let failure = seen.failure.unwrap();
    assert_eq!(
        failure.problem().retry_after(),
        Some(Duration::from_secs(2))
    );
    assert!(
        failure
            .problem()
            .message()
            .starts_with("HTTP 429 rate_limit_exceeded: Rate limit reached"),
        "{}",
        failure.problem().message()
    );
    for (name, expected) in [
        ("auth_401", (ProblemKind::Auth, false)),
        ("context_length_400", (ProblemKind::ContextLength, false)),
        ("server_error_500", (ProblemKind::Unavailable, true)),
    ] {
        let seen = observe_one(Reply::fixture(&case(name), 0)).await;
        assert_eq!(
            problem(&seen),
            (expected.0, expected.1, RetryPosition::Pristine),
            "{name}"
        );
    }
}

#[tokio::test]
async fn a_disconnect_mid_text_is_unavailable_and_partial() {
    let body = case("text_only").body.unwrap();
    let cut = body.find("\" sandwiches\"").unwrap();
    for (framing, split) in [
        (Framing::Chunked, 0),
        (Framing::Chunked, 7),
        (Framing::Close, 1),
    ] {
        let seen = observe_one(
            Reply::sse(body.clone())
                .framing(framing)
                .split(split)
                .cut_after(cut),
        )
        .await;
        assert_eq!(seen.text, "Smørrebrød (open", "{framing:?} {split}");
        assert_eq!(
            problem(&seen),
            (ProblemKind::Unavailable, true, RetryPosition::Partial)
        );
    }
    // Cut before any text: pristine.
    let seen = observe_one(Reply::sse(body).cut_after(200)).await;
    assert_eq!(
        problem(&seen),
        (ProblemKind::Unavailable, true, RetryPosition::Pristine)
    );
}

#[tokio::test]
async fn broken_streams_are_protocol_failures_that_echo_nothing() {
    let seen = observe_one(Reply::fixture(&case("malformed_event"), 1)).await;
    let message = seen.failure.unwrap().problem().message().to_owned();
    assert!(message.contains("not valid JSON"), "{message}");
    assert!(!message.contains("proxy"), "{message}");
    for (items, says) in [
        // An incomplete response with a reason the adapter does not know.
        (
            vec![
                text_delta("Hi"),
                json!({"type": "response.incomplete", "response": {"incomplete_details": {"reason": "tea_break"}}}),
            ],
            "unknown incomplete reason tea_break",
        ),
        (
            vec![json!({"type": "response.incomplete", "response": {"incomplete_details": null}})],
            "response.incomplete without a reason",
        ),
        // A known event without its members.
        (
            vec![json!({"type": "response.output_text.delta"})],
            "an unexpected shape",
        ),
        // An event without a type.
        (vec![json!({"delta": "x"})], "an unexpected shape"),
        // A sealed reasoning item without a usable id.
        (
            vec![
                json!({"type": "response.output_item.done", "output_index": 0,
                "item": {"type": "reasoning", "id": "rs:1", "summary": [], "encrypted_content": "gAAA"}}),
            ],
            "rule responses.reasoning_id",
        ),
    ] {
        let seen = observe_one(Reply::sse(events(&items))).await;
        let failure = seen.failure.unwrap();
        assert_eq!(failure.kind(), ProblemKind::Protocol, "{says}");
        assert!(
            failure.problem().message().contains(says),
            "{}",
            failure.problem().message()
        );
    }
    // A 200 with a JSON body (a server that ignored "stream": true).
    let seen = observe_one(Reply::json(200, r#"{"id": "resp_1", "output": []}"#)).await;
    assert_eq!(
        problem(&seen),
        (ProblemKind::Protocol, false, RetryPosition::Pristine)
    );
}

#[tokio::test]
async fn an_incomplete_response_drops_the_call_it_cut() {
    let items = [
        json!({"type": "response.output_item.added", "output_index": 0,
               "item": {"type": "function_call", "call_id": "call_x", "name": "f", "arguments": ""}}),
        json!({"type": "response.function_call_arguments.delta", "output_index": 0, "delta": "{\"pa"}),
        json!({"type": "response.incomplete", "response": {"status": "incomplete",
               "incomplete_details": {"reason": "max_output_tokens"}, "usage": {"input_tokens": 5, "output_tokens": 16}}}),
    ];
    let seen = observe_one(Reply::sse(events(&items))).await;
    assert_eq!(seen.finish(), Some(FinishReason::Length));
    assert!(seen.tool_calls.is_empty());
    // content_filter as the reason.
    let items = [
        text_delta("Well"),
        json!({"type": "response.incomplete", "response": {"incomplete_details": {"reason": "content_filter"}}}),
    ];
    let seen = observe_one(Reply::sse(events(&items))).await;
    assert_eq!(
        (seen.text.as_str(), seen.finish()),
        ("Well", Some(FinishReason::ContentFilter))
    );
}

/// The failure message of `items` streamed under `limits`.
async fn failure_under(limits: Limits, items: &[Value]) -> String {
    let server = Server::one(Reply::sse(events(items))).await;
    let provider = OpenAiResponses::new(OpenAiResponsesConfig {
        limits,
        ..config(&server)
    })
    .unwrap();
    let seen = observe(&provider, simple_request("m"), &allow()).await;
    seen.failure.unwrap().problem().message().to_owned()
}

#[tokio::test]
async fn bounds_hold_on_calls_and_arguments() {
    let added = |i: u64| {
        json!({"type": "response.output_item.added", "output_index": i,
               "item": {"type": "function_call", "call_id": format!("call_{i}"), "name": "f", "arguments": ""}})
    };
    let delta = |text: String| json!({"type": "response.function_call_arguments.delta", "output_index": 0, "delta": text});
    let done = json!({"type": "response.output_item.done", "output_index": 0,
        "item": {"type": "function_call", "call_id": "call_0", "name": "f", "arguments": "x".repeat(81)}});
    let calls = |n| Limits {
        tool_calls_per_stream: n,
        ..Limits::default()
    };
    let json_bytes = |n| Limits {
        json_bytes: n,
        ..Limits::default()
    };
    // Exactly at the bound (2 × json_bytes): accepted.
    let exact = format!("{{\"k\":\"{}\"}}", "x".repeat(72));
    assert_eq!(exact.len(), 80);
    let done_empty = json!({"type": "response.output_item.done", "output_index": 0,
        "item": {"type": "function_call", "call_id": "call_0", "name": "f", "arguments": ""}});
    let server = Server::one(Reply::sse(events(&[
        added(0),
        delta(exact.clone()),
        done_empty,
        completed(),
    ])))
    .await;
    let provider = OpenAiResponses::new(OpenAiResponsesConfig {
        limits: json_bytes(40),
        ..config(&server)
    })
    .unwrap();
    let seen = observe(&provider, simple_request("m"), &allow()).await;
    assert_eq!(seen.tool_calls.len(), 1, "{:?}", seen.failure);
    assert_eq!(
        seen.tool_calls[0].arguments().to_value(),
        json!({"k": "x".repeat(72)})
    );
    for (limits, items, says) in [
        (
            calls(2),
            vec![added(0), added(1), added(2)],
            "more than 2 tool calls",
        ),
        (
            json_bytes(40),
            vec![added(0), delta("x".repeat(81))],
            "arguments over 80 bytes",
        ),
        (
            json_bytes(40),
            vec![added(0), delta("x".repeat(80)), delta("y".into())],
            "arguments over 80 bytes",
        ),
        // The done item's arguments are held to the same bound.
        (
            json_bytes(40),
            vec![added(0), done],
            "arguments over 80 bytes",
        ),
    ] {
        let message = failure_under(limits, &items).await;
        assert!(message.contains(says), "{message}");
    }
}

#[tokio::test]
async fn the_key_never_leaks() {
    // A server that echoes the key in its error message and headers.
    let body = json!({"error": {"message": format!("Incorrect API key provided: {KEY}."), "type": "invalid_request_error", "code": "invalid_api_key"}}).to_string();
    let server = Server::one(Reply::json(401, body).header("x-request-id", KEY)).await;
    let seen = observe(&provider(&server), simple_request("m"), &allow()).await;
    check_secret_free(&seen, KEY).unwrap();
    let message = seen.failure.unwrap().problem().message().to_owned();
    assert!(
        !message.contains(KEY) && message.contains("[redacted]"),
        "{message}"
    );

    // In the stream: the response id and model, an error event's message.
    let items = [
        json!({"type": "response.created", "response": {"id": KEY, "model": format!("m-{KEY}")}}),
        text_delta("Hi"),
        json!({"type": "error", "code": "server_error", "message": format!("key {KEY} broke")}),
    ];
    let server = Server::one(Reply::sse(events(&items)).header("x-request-id", KEY)).await;
    let seen = observe(&provider(&server), simple_request("m"), &allow()).await;
    check_secret_free(&seen, KEY).unwrap();
    assert_eq!(
        problem(&seen),
        (ProblemKind::Unavailable, true, RetryPosition::Partial)
    );
    let items = [
        json!({"type": "response.created", "response": {"id": KEY, "model": format!("m-{KEY}")}}),
        completed(),
    ];
    let server = Server::one(Reply::sse(events(&items)).header("x-request-id", KEY)).await;
    let seen = observe(&provider(&server), simple_request("m"), &allow()).await;
    check_secret_free(&seen, KEY).unwrap();
    let meta = seen.completion.unwrap().metadata().to_canonical_string();
    assert!(!meta.contains(KEY), "{meta}");

    let config = config(&server);
    for shown in [
        format!("{config:?}"),
        format!("{:?}", OpenAiResponses::new(config.clone()).unwrap()),
    ] {
        assert!(!shown.contains(KEY), "{shown}");
        assert!(shown.contains("[redacted]"), "{shown}");
    }
}

#[tokio::test]
async fn dropping_the_stream_closes_the_connection() {
    let body = case("text_only").body.unwrap();
    let cut = body.find("\" classic\"").unwrap();
    let server = Server::one(Reply::sse(body).cut_after(cut).hold()).await;
    let read = check_drop_mid_stream(&provider(&server), simple_request("m"), 3)
        .await
        .unwrap();
    assert_eq!(read, 3);
    assert!(server.wait_closed(1, Duration::from_secs(5)).await);
}

#[tokio::test]
async fn the_kind_connects_the_adapter_at_its_endpoint() {
    assert_eq!(
        ProviderKind::parse("openai-responses"),
        Ok(ProviderKind::OpenAiResponses)
    );
    let server = Server::one(ok_reply()).await;
    let provider = ProviderKind::OpenAiResponses
        .connect(Some(&server.base_url()), ApiKey::new(KEY).unwrap())
        .unwrap();
    assert_eq!(provider.provider_tag(), ProviderTag::openai_responses());
    let seen = observe(provider.as_ref(), simple_request("m"), &allow()).await;
    assert_eq!(seen.text, "ok");
    assert_eq!(server.requests()[0].path, "/v1/responses");
    assert_eq!(
        OpenAiResponses::new(OpenAiResponsesConfig::new("http://127.0.0.1:1/v1", None))
            .unwrap()
            .endpoint(),
        "http://127.0.0.1:1/v1/responses"
    );
}

#[test]
fn bad_configurations_are_refused() {
    for (config, rule) in [
        (
            OpenAiResponsesConfig::new("localhost:8080", None),
            "base_url",
        ),
        (
            OpenAiResponsesConfig {
                wire: ResponsesOptions {
                    max_output_tokens: Some(0),
                    ..ResponsesOptions::default()
                },
                ..OpenAiResponsesConfig::new("http://127.0.0.1:1/v1", None)
            },
            "max_output_tokens must be greater than zero",
        ),
    ] {
        let err = OpenAiResponses::new(config).unwrap_err().to_string();
        assert!(err.contains(rule), "{err}");
    }
}

/// Through the engine: the first call meets a 429 with `Retry-After`,
/// is retried, streams the reasoning fixture; the scripted tool runs; the
/// engine's own history carries the reasoning item into the next call,
/// byte-exact, as the server received it.
#[tokio::test]
async fn a_run_retries_the_429_and_sends_the_reasoning_item_back() {
    use keel_engine::{Engine, RunOutcome, RunRequest};
    use keel_testkit::{ScriptedTool, ToolStep};
    let first = case("reasoning_tool_call");
    let item = &fixture_reasoning(first.body.as_deref().unwrap())[0];
    let limited = case("rate_limited_429");
    let mut retry_soon = Reply::fixture(&limited, 0);
    retry_soon.headers.retain(|(name, _)| name != "retry-after");
    let server = Server::start(vec![
        retry_soon.header("retry-after", "1"),
        Reply::fixture(&first, 7),
        Reply::fixture(&case("after_tool_result"), 0),
    ])
    .await;
    let engine = Engine::builder()
        .provider("net", Arc::new(provider(&server)))
        .allow_metadata(MetadataAllowlist::new(["openai"]).unwrap())
        .build()
        .unwrap();
    let user = Message::text(MessageId::parse("u1").unwrap(), Role::User, "Weather?").unwrap();
    let tool =
        ScriptedTool::named("get_weather", vec![ToolStep::ok(json!({"temp_c": 3}))]).unwrap();
    let request = RunRequest::new(
        RunId::parse("run_responses").unwrap(),
        ModelName::parse("o4-mini").unwrap(),
        vec![user],
    )
    .provider_named("net")
    .tool(Arc::new(tool));
    let started = std::time::Instant::now();
    let outcome = engine.start(request).unwrap().join().await;
    assert!(
        matches!(outcome, RunOutcome::Completed { .. }),
        "{outcome:?}"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "Retry-After was not waited for"
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(
        requests[0].body, requests[1].body,
        "the retry sends the same body"
    );
    let sent = requests[2].json();
    let expected = json!({"type": "reasoning", "id": item["id"], "summary": item["summary"],
                          "encrypted_content": item["encrypted_content"]});
    assert_eq!(sent["input"][1], expected, "{sent}");
    let raw = String::from_utf8(requests[2].body.clone()).unwrap();
    assert!(raw.contains(&format!(
        "\"encrypted_content\":\"{}\"",
        item["encrypted_content"].as_str().unwrap()
    )));
}
