//! The Gemini adapter against a local replay server: every fixture through
//! the conformance suite at several read sizes (and the key looked for in
//! every item), the request mapping, thought signatures sent back on the
//! part they came with (checked in the second request the server
//! receives, through the engine too), call ids, errors and the key.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use keel_engine::{Engine, RunOutcome, RunRequest};
use keel_message::*;
use keel_providers::{
    ApiKey, ConnectOptions, Gemini, GeminiConfig, GeminiOptions, ProviderConfigError, ProviderKind,
};
use keel_stream::{FinishReason, MetadataAllowlist, ModelProvider, ProblemKind, RetryPosition};
use keel_testkit::conformance::*;
use keel_testkit::{ScriptedTool, ToolStep};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

const KEY: &str = "AIzaSyTest-Zq8x1Y2w3V4u5T6s7R8q9P0oNmLk";
const FOLDER: &str = "gemini";

fn config(server: &Server) -> GeminiConfig {
    GeminiConfig {
        base_url: server.base_url(),
        api_key: Some(ApiKey::new(KEY).unwrap()),
        ..GeminiConfig::default()
    }
}

fn provider(server: &Server) -> Gemini {
    Gemini::new(config(server)).unwrap()
}

fn allow() -> CheckOptions {
    CheckOptions::default().with_allowlist(MetadataAllowlist::new(["gemini"]).unwrap())
}

async fn observe_one(reply: Reply) -> Observed {
    let server = Server::one(reply).await;
    observe(
        &provider(&server),
        simple_request("gemini-2.5-flash"),
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

/// A chunk whose first candidate holds `parts` (and `finish`).
fn chunk(parts: Value, finish: Option<&str>) -> String {
    let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
    if let Some(finish) = finish {
        candidate["finishReason"] = json!(finish);
    }
    json!({"candidates": [candidate], "modelVersion": "gemini-2.5-flash"}).to_string()
}

/// A one-chunk text answer.
fn answer(text: &str) -> Reply {
    Reply::sse(sse_body([chunk(json!([{"text": text}]), Some("STOP"))]))
}

/// The path every request goes to for `model`, with the key nowhere in it.
fn check_request_line(request: &Recorded, model: &str) {
    assert_eq!(request.method, "POST");
    assert_eq!(
        request.path,
        format!("/v1/models/{model}:streamGenerateContent?alt=sse")
    );
    assert_eq!(request.headers["x-goog-api-key"], KEY);
    assert!(!request.headers.contains_key("authorization"));
    assert!(!request.path.contains(KEY));
}

#[tokio::test]
async fn every_fixture_conforms_at_every_read_size() {
    for fixture in all_fixtures(FOLDER) {
        for split in SPLITS {
            let server = Server::one(Reply::fixture(&fixture, split)).await;
            let seen = observe(
                &provider(&server),
                simple_request("gemini-2.5-flash"),
                &allow(),
            )
            .await;
            if let Err(failure) = compare(&fixture.expect, &seen) {
                panic!("{} (split {split}): {failure}", fixture.name);
            }
            if let Err(failure) = check_secret_free(&seen, KEY) {
                panic!("{} (split {split}): {failure}", fixture.name);
            }
            let requests = server.requests();
            assert_eq!(requests.len(), 1);
            check_request_line(&requests[0], "gemini-2.5-flash");
        }
    }
}

#[tokio::test]
async fn metadata_holds_only_safe_facts() {
    let seen = observe_one(
        Reply::fixture(&fixture(FOLDER, "text_only"), 0).header("x-request-id", "req-7"),
    )
    .await;
    let done = seen.completion.expect("a completion");
    assert_eq!(
        done.metadata().to_canonical_string(),
        r#"{"gemini":{"id":"yJ4yaKfLFoqZ1dkPxPbO-Ak","model":"gemini-2.5-flash","request_id":"req-7"}}"#
    );
    let server = Server::one(Reply::fixture(&fixture(FOLDER, "text_only"), 0)).await;
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
    let server = Server::one(answer("ok")).await;
    let provider = Gemini::new(GeminiConfig {
        wire: GeminiOptions {
            max_output_tokens: Some(256),
            thinking_budget_tokens: Some(1024),
            include_thoughts: true,
        },
        ..config(&server)
    })
    .unwrap();
    let seen = observe(&provider, rich_request("gemini-2.5-flash"), &allow()).await;
    assert_eq!(seen.text, "ok");
    let request = &server.requests()[0];
    check_request_line(request, "gemini-2.5-flash");
    assert_eq!(
        request.json(),
        json!({
            "contents": [
                {"role": "user", "parts": [{"text": "Weather in Oslo?"}]},
                {"role": "model", "parts": [
                    {"text": "Checking."},
                    {"functionCall": {"id": "call_1", "name": "get_weather", "args": {"city": "Oslo"}}},
                    {"functionCall": {"id": "call_2", "name": "get_time", "args": {}}}
                ]},
                // The tool results and the next user message share one
                // user content.
                {"role": "user", "parts": [
                    {"functionResponse": {"id": "call_1", "name": "get_weather", "response": {"output": "{\"temp_c\":3}"}}},
                    {"functionResponse": {"id": "call_2", "name": "get_time", "response": {"error": "clock broken"}}},
                    {"text": "Thanks!"}
                ]}
            ],
            "systemInstruction": {"parts": [{"text": "Be brief."}]},
            "tools": [{"functionDeclarations": [
                {"name": "get_weather", "description": "Current weather for a city",
                 "parametersJsonSchema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
                {"name": "get_time", "parametersJsonSchema": {"type": "object"}}
            ]}],
            "generationConfig": {
                "maxOutputTokens": 256,
                "thinkingConfig": {"thinkingBudget": 1024, "includeThoughts": true}
            }
        })
    );
    let h = &request.headers;
    assert_eq!(h["content-type"], "application/json");
    assert_eq!(h["accept"], "text/event-stream");
    assert!(h["user-agent"].starts_with("keel-providers/"));

    // No key, no header; no options, no generationConfig or tools.
    let server = Server::one(answer("ok")).await;
    let provider = Gemini::new(GeminiConfig {
        api_key: None,
        ..config(&server)
    })
    .unwrap();
    observe(&provider, simple_request("models/gemini-2.5-pro"), &allow()).await;
    let request = &server.requests()[0];
    assert!(!request.headers.contains_key("x-goog-api-key"));
    assert_eq!(
        request.path,
        "/v1/models/gemini-2.5-pro:streamGenerateContent?alt=sse"
    );
    assert_eq!(
        request.json(),
        json!({"contents": [{"role": "user", "parts": [{"text": "Hi"}]}]})
    );
}

/// The model content the adapter sends back for the assistant message
/// built from `case`'s stream, and the items it was built from.
async fn sent_back(case: &str) -> (Value, Observed) {
    let server = Server::start(vec![
        Reply::fixture(&fixture(FOLDER, case), 7),
        answer("Done."),
    ])
    .await;
    let provider = provider(&server);
    let first = simple_request("gemini-2.5-pro");
    let seen = observe(&provider, first.clone(), &allow()).await;
    assert!(seen.completion.is_some(), "{case}: {:?}", seen.failure);
    let assistant = assistant_message(&seen, &ProviderTag::gemini());
    let mut more = vec![assistant];
    if !seen.tool_calls.is_empty() {
        let results = seen
            .tool_calls
            .iter()
            .map(|call| Part::tool_result(call.call_id().clone(), "3 °C", false).unwrap())
            .collect();
        more.push(Message::new(MessageId::parse("t1").unwrap(), Role::Tool, results).unwrap());
    }
    let second = observe(&provider, continued(&first, more), &allow()).await;
    assert_eq!(second.text, "Done.");
    let body = server.requests()[1].json();
    (body, seen)
}

/// The thought signature goes back byte-exact on the part it came with:
/// the server checks the second request's model content.
#[tokio::test]
async fn thought_signatures_go_back_on_the_part_they_came_with() {
    let sse = |case: &str| sse_payloads(fixture(FOLDER, case).body.as_deref().unwrap());
    let sig = |payload: &Value, part: usize| {
        payload["candidates"][0]["content"]["parts"][part]["thoughtSignature"].clone()
    };

    // A thought summary, then a call carrying the signature.
    let wire = sse("thought_function_call");
    let (body, seen) = sent_back("thought_function_call").await;
    let thought = "**Planning the lookup**\n\nThe user wants the weather in Trondheim, so I'll call get_weather with city Trondheim.";
    assert_eq!(
        reasoning_items(&seen),
        vec![
            (
                "delta",
                "**Planning the lookup**\n\nThe user wants the weather in Trondheim, ".to_owned()
            ),
            (
                "delta",
                "so I'll call get_weather with city Trondheim.".to_owned()
            ),
            ("redacted", sig(&wire[2], 0).as_str().unwrap().to_owned()),
        ]
    );
    assert_eq!(
        body["contents"][1],
        json!({"role": "model", "parts": [
            {"text": thought, "thought": true},
            {"functionCall": {"id": "call_op_1_0", "name": "get_weather", "args": {"city": "Trondheim"}},
             "thoughtSignature": sig(&wire[2], 0)}
        ]})
    );
    assert_eq!(
        body["contents"][2],
        json!({"role": "user", "parts": [
            {"functionResponse": {"id": "call_op_1_0", "name": "get_weather", "response": {"output": "3 °C"}}}
        ]})
    );
    // Byte-exact in the raw body too.
    let raw = String::from_utf8(server_raw_second("thought_function_call").await).unwrap();
    let needle = format!("\"thoughtSignature\":{}", sig(&wire[2], 0));
    assert!(raw.contains(&needle), "{raw}");

    // A signed thought part, text, and a text part with its own signature.
    let wire = sse("thought_text_answer");
    let (body, _) = sent_back("thought_text_answer").await;
    assert_eq!(
        body["contents"][1],
        json!({"role": "model", "parts": [
            {"text": "**Recalling facts**\n\nFjords are glacial valleys.", "thought": true,
             "thoughtSignature": sig(&wire[0], 0)},
            {"text": "A fjord is a long, narrow sea inlet "},
            {"text": "carved by a glacier.", "thoughtSignature": sig(&wire[2], 0)}
        ]})
    );

    // Parallel calls: the one signature stays on the first call.
    let wire = sse("parallel_function_calls");
    let (body, _) = sent_back("parallel_function_calls").await;
    let parts = body["contents"][1]["parts"].as_array().unwrap().clone();
    assert_eq!(parts.len(), 4, "{parts:?}");
    assert_eq!(parts[0], json!({"text": "Checking both cities."}));
    assert_eq!(parts[1]["thoughtSignature"], sig(&wire[1], 0));
    assert_eq!(parts[1]["functionCall"]["id"], "call_op_1_0");
    assert!(parts[2].get("thoughtSignature").is_none());
    assert_eq!(parts[3]["functionCall"]["name"], "get_time");
}

/// The raw bytes of the second request after `case`.
async fn server_raw_second(case: &str) -> Vec<u8> {
    let server = Server::start(vec![
        Reply::fixture(&fixture(FOLDER, case), 0),
        answer("Done."),
    ])
    .await;
    let provider = provider(&server);
    let first = simple_request("gemini-2.5-pro");
    let seen = observe(&provider, first.clone(), &allow()).await;
    let assistant = assistant_message(&seen, &ProviderTag::gemini());
    let results = seen
        .tool_calls
        .iter()
        .map(|call| Part::tool_result(call.call_id().clone(), "3 °C", false).unwrap())
        .collect();
    let tool = Message::new(MessageId::parse("t1").unwrap(), Role::Tool, results).unwrap();
    observe(
        &provider,
        continued(&first, vec![assistant, tool]),
        &allow(),
    )
    .await;
    server.requests()[1].body.clone()
}

/// A signature whose part is gone goes back alone on an empty text part;
/// another provider's reasoning is dropped.
#[tokio::test]
async fn reasoning_of_other_providers_is_dropped_and_a_lone_signature_kept() {
    let sig = || OpaqueValue::new("CiQB0e2Kb7vF0xzmX1HU").unwrap();
    let other = ProviderTag::anthropic();
    for (parts, expected) in [
        (
            vec![
                Part::reasoning(other.clone(), "Think.", Some(sig())).unwrap(),
                Part::redacted_reasoning(other, sig()),
                Part::text("Done.").unwrap(),
            ],
            json!([{"text": "Done."}]),
        ),
        (
            vec![
                Part::text("Done.").unwrap(),
                Part::redacted_reasoning(ProviderTag::gemini(), sig()),
            ],
            json!([{"text": "Done."}, {"text": "", "thoughtSignature": "CiQB0e2Kb7vF0xzmX1HU"}]),
        ),
        (
            vec![
                Part::reasoning(ProviderTag::gemini(), "Hm.", None).unwrap(),
                Part::text("Done.").unwrap(),
            ],
            json!([{"text": "Hm.", "thought": true}, {"text": "Done."}]),
        ),
        // A call streamed with its signature, then text: the draft puts
        // the segment's text first, the signature stays on the call.
        (
            vec![
                Part::redacted_reasoning(ProviderTag::gemini(), sig()),
                Part::text("Done.").unwrap(),
                Part::tool_call(
                    CallId::parse("c9").unwrap(),
                    ToolName::parse("f").unwrap(),
                    CanonicalJson::parse("{}").unwrap(),
                )
                .unwrap(),
            ],
            json!([{"text": "Done."}, {"functionCall": {"id": "c9", "name": "f", "args": {}},
                    "thoughtSignature": "CiQB0e2Kb7vF0xzmX1HU"}]),
        ),
        // A signature alone before a thought: its part is gone, it goes
        // back alone, not on a call after the thought.
        (
            vec![
                Part::redacted_reasoning(ProviderTag::gemini(), sig()),
                Part::reasoning(ProviderTag::gemini(), "Hm.", None).unwrap(),
                Part::tool_call(
                    CallId::parse("c9").unwrap(),
                    ToolName::parse("f").unwrap(),
                    CanonicalJson::parse("{}").unwrap(),
                )
                .unwrap(),
            ],
            json!([{"text": "", "thoughtSignature": "CiQB0e2Kb7vF0xzmX1HU"},
                   {"text": "Hm.", "thought": true},
                   {"functionCall": {"id": "c9", "name": "f", "args": {}}}]),
        ),
    ] {
        let request = continued(
            &simple_request("gemini-2.5-flash"),
            vec![Message::new(MessageId::parse("a1").unwrap(), Role::Assistant, parts).unwrap()],
        );
        let server = Server::one(answer("ok")).await;
        observe(&provider(&server), request, &allow()).await;
        let body = server.requests()[0].json();
        assert_eq!(body["contents"][1]["parts"], expected, "{body}");
    }
}

/// Call ids: stable, unique against the history (an earlier run's ids of
/// the same operation id are skipped), and sent back with the name.
#[tokio::test]
async fn call_ids_are_made_unique_against_the_history() {
    let call = Part::tool_call(
        CallId::parse("call_op_1_0").unwrap(),
        ToolName::parse("get_weather").unwrap(),
        CanonicalJson::parse(r#"{"city":"Oslo"}"#).unwrap(),
    )
    .unwrap();
    let earlier = vec![
        Message::new(MessageId::parse("a0").unwrap(), Role::Assistant, vec![call]).unwrap(),
        Message::new(
            MessageId::parse("t0").unwrap(),
            Role::Tool,
            vec![Part::tool_result(CallId::parse("call_op_1_0").unwrap(), "2 °C", false).unwrap()],
        )
        .unwrap(),
        Message::text(MessageId::parse("u2").unwrap(), Role::User, "And Bergen?").unwrap(),
    ];
    let request = continued(&simple_request("gemini-2.5-flash"), earlier);
    assert_eq!(request.operation_id().as_str(), "op_1");
    let reply = || Reply::fixture(&fixture(FOLDER, "parallel_function_calls"), 0);
    let server = Server::start(vec![reply(), reply()]).await;
    for _ in 0..2 {
        let seen = observe(&provider(&server), request.clone(), &allow()).await;
        let ids: Vec<&str> = seen
            .tool_calls
            .iter()
            .map(|c| c.call_id().as_str())
            .collect();
        assert_eq!(ids, ["call_op_1_1", "call_op_1_2", "call_op_1_3"]);
    }
    let body = server.requests()[0].json();
    assert_eq!(
        body["contents"][2]["parts"][0],
        json!({"functionResponse": {"id": "call_op_1_0", "name": "get_weather", "response": {"output": "2 °C"}}})
    );
}

#[tokio::test]
async fn errors_before_the_stream_are_pristine_and_carry_retry_after() {
    // The delay of a 429 is RetryInfo.retryDelay in the body.
    let seen = observe_one(Reply::fixture(&fixture(FOLDER, "rate_limited_429"), 0)).await;
    assert_eq!(
        problem(&seen),
        (ProblemKind::RateLimited, true, RetryPosition::Pristine)
    );
    let failure = seen.failure.unwrap();
    assert_eq!(
        failure.problem().retry_after(),
        Some(Duration::from_secs(17))
    );
    assert!(
        failure
            .problem()
            .message()
            .starts_with("HTTP 429 RESOURCE_EXHAUSTED: You exceeded your current quota"),
        "{}",
        failure.problem().message()
    );
    // A retry-after header wins over the body.
    let body = fixture(FOLDER, "rate_limited_429").body.unwrap();
    let seen = observe_one(Reply::json(429, body).header("retry-after", "3")).await;
    assert_eq!(
        seen.failure.unwrap().problem().retry_after(),
        Some(Duration::from_secs(3))
    );
    // Each error body: the fixtures' kinds, with the status name shown.
    for (case, shown) in [
        (
            "auth_400_api_key_invalid",
            "HTTP 400 INVALID_ARGUMENT: API key not valid",
        ),
        ("auth_403", "HTTP 403 PERMISSION_DENIED: "),
        (
            "context_length_400",
            "HTTP 400 INVALID_ARGUMENT: The input token count",
        ),
        ("server_error_500", "HTTP 500 INTERNAL: "),
        (
            "overloaded_503",
            "HTTP 503 UNAVAILABLE: The model is overloaded.",
        ),
        ("not_found_404", "HTTP 404 NOT_FOUND: "),
    ] {
        let seen = observe_one(Reply::fixture(&fixture(FOLDER, case), 0)).await;
        let message = seen.failure.unwrap().problem().message().to_owned();
        assert!(message.starts_with(shown), "{case}: {message}");
    }
}

#[tokio::test]
async fn a_disconnect_mid_stream_is_unavailable_and_partial() {
    let body = fixture(FOLDER, "text_only").body.unwrap();
    let cut = body.find(" a Danish").unwrap();
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
        assert_eq!(
            seen.text, "Smørrebrød (open sandwiches) are",
            "{framing:?} {split}"
        );
        assert_eq!(
            problem(&seen),
            (ProblemKind::Unavailable, true, RetryPosition::Partial)
        );
    }
    // Cut before any text: pristine.
    let seen = observe_one(Reply::sse(body).cut_after(20)).await;
    assert_eq!(
        problem(&seen),
        (ProblemKind::Unavailable, true, RetryPosition::Pristine)
    );
}

#[tokio::test]
async fn broken_chunks_are_protocol_failures() {
    for (chunks, message) in [
        (
            vec![chunk(
                json!([{"text": "a"}]),
                Some("FINISH_REASON_UNSPECIFIED"),
            )],
            "unknown finishReason FINISH_REASON_UNSPECIFIED",
        ),
        (
            vec![chunk(json!([{"text": "a"}]), Some("NEW REASON"))],
            "unknown finishReason (unprintable)",
        ),
        (
            vec![r#"{"candidates": "no"}"#.to_owned()],
            "a stream chunk is not valid JSON: an unexpected shape at column 19",
        ),
    ] {
        let seen = observe_one(Reply::sse(sse_body(chunks))).await;
        let failure = seen.failure.unwrap();
        assert_eq!(failure.kind(), ProblemKind::Protocol);
        assert_eq!(failure.problem().message(), message);
    }
    // A call over the bound of arguments (twice `json_bytes`).
    let server = Server::one(Reply::sse(sse_body([chunk(
        json!([{"functionCall": {"name": "f", "args": {"a": "x".repeat(300)}}}]),
        Some("STOP"),
    )])))
    .await;
    let small = Gemini::new(GeminiConfig {
        limits: Limits {
            json_bytes: 150,
            ..Limits::default()
        },
        ..config(&server)
    })
    .unwrap();
    let seen = observe(&small, simple_request("m"), &allow()).await;
    let failure = seen.failure.unwrap();
    assert_eq!(failure.kind(), ProblemKind::Protocol);
    assert_eq!(
        failure.problem().message(),
        "function call args over 300 bytes"
    );
    // An unknown part kind, member and candidate are ignored.
    let seen = observe_one(Reply::sse(sse_body([
        json!({"candidates": [{"content": {"parts": [{"executableCode": {"code": "1"}}, {"text": "ok", "x": 1}]}, "index": 0},
                              {"content": {"parts": [{"text": "second"}]}, "index": 1, "finishReason": "STOP"}]}).to_string(),
        chunk(json!([]), Some("STOP")),
    ])))
    .await;
    assert_eq!(seen.text, "ok");
    assert_eq!(seen.finish(), Some(FinishReason::Stop));
}

/// Each chunk reports the counts so far; a count a later chunk leaves out
/// keeps its last value.
#[tokio::test]
async fn usage_counts_are_the_latest_reported() {
    let with_usage = |parts: Value, finish: Option<&str>, usage: Value| {
        let mut chunk: Value = serde_json::from_str(&chunk(parts, finish)).unwrap();
        chunk["usageMetadata"] = usage;
        chunk.to_string()
    };
    let seen = observe_one(Reply::sse(sse_body([
        with_usage(
            json!([{"text": "a"}]),
            None,
            json!({"promptTokenCount": 5, "candidatesTokenCount": 1, "toolUsePromptTokenCount": 2}),
        ),
        with_usage(
            json!([{"text": "b"}]),
            Some("STOP"),
            json!({"candidatesTokenCount": 3, "thoughtsTokenCount": 4}),
        ),
    ])))
    .await;
    let usage = seen.usage().unwrap();
    assert_eq!((usage.input_tokens, usage.output_tokens), (7, 7));
}

#[tokio::test]
async fn the_key_never_leaks() {
    // A server that echoes the key in its error message and a header.
    let body = json!({"error": {"code": 400, "message": format!("API key not valid: {KEY}"), "status": "INVALID_ARGUMENT",
        "details": [{"reason": "API_KEY_INVALID"}]}})
    .to_string();
    let server = Server::one(Reply::json(400, body).header("x-request-id", KEY)).await;
    let seen = observe(&provider(&server), simple_request("m"), &allow()).await;
    assert_eq!(check_secret_free(&seen, KEY), Ok(()));
    let failure = seen.failure.unwrap();
    assert_eq!(failure.kind(), ProblemKind::Auth);
    let message = failure.problem().message();
    assert!(!message.contains(KEY), "{message}");
    assert!(message.contains("[redacted]"), "{message}");
    check_request_line(&server.requests()[0], "m");

    // In metadata and a stream error.
    let events = [
        json!({"candidates": [{"content": {"parts": [{"text": "Hi"}]}, "index": 0}], "responseId": KEY, "modelVersion": format!("m-{KEY}")}).to_string(),
        json!({"error": {"code": 500, "message": format!("boom {KEY}"), "status": "INTERNAL"}}).to_string(),
    ];
    let seen = observe_one(Reply::sse(sse_body(events)).header("x-request-id", KEY)).await;
    assert_eq!(check_secret_free(&seen, KEY), Ok(()));
    let seen = observe_one(Reply::sse(sse_body([json!({"candidates": [{"content": {"parts": [{"text": "Hi"}]}, "index": 0, "finishReason": "STOP"}], "responseId": KEY}).to_string()])).header("x-request-id", KEY)).await;
    assert_eq!(check_secret_free(&seen, KEY), Ok(()));
    assert!(seen.completion.unwrap().metadata().is_empty());

    let server = Server::one(answer("ok")).await;
    let config = config(&server);
    let gemini = Gemini::new(config.clone()).unwrap();
    for shown in [
        format!("{config:?}"),
        format!("{gemini:?}"),
        format!("{:?}", config.api_key),
        gemini.endpoint().to_owned(),
        gemini.url_for(&ModelName::parse("gemini-2.5-flash").unwrap()),
    ] {
        assert!(!shown.contains(KEY), "{shown}");
    }
}

#[tokio::test]
async fn images_and_pdfs_become_inline_data() {
    let server = Server::one(answer("ok")).await;
    let call = Part::tool_call(
        CallId::parse("c1").unwrap(),
        ToolName::parse("screenshot").unwrap(),
        CanonicalJson::parse("{}").unwrap(),
    )
    .unwrap();
    let url = ImagePart::from_url(
        HttpsUrl::parse("https://example.org/cat.png").unwrap(),
        Some(ImageMediaType::Png),
    );
    let history = vec![
        user_with_media("u1"),
        Message::new(MessageId::parse("a1").unwrap(), Role::Assistant, vec![call]).unwrap(),
        tool_result_with_image("c1", "Here."),
        Message::new(
            MessageId::parse("u2").unwrap(),
            Role::User,
            vec![Part::image(url)],
        )
        .unwrap(),
    ];
    let request = continued(&simple_request("gemini-2.5-flash"), history);
    observe(&provider(&server), request, &allow()).await;
    let body = server.requests()[0].json();
    let png = json!({"inlineData": {"mimeType": "image/png", "data": base64(PNG)}});
    assert_eq!(
        body["contents"][0]["parts"],
        json!([
            {"text": "Hi"},
            {"text": "What is in these?"},
            png,
            {"inlineData": {"mimeType": "application/pdf", "data": base64(PDF)}}
        ])
    );
    assert_eq!(
        body["contents"][2]["parts"],
        json!([
            {"functionResponse": {"id": "c1", "name": "screenshot", "response": {"output": "Here."}}},
            png,
            {"fileData": {"mimeType": "image/png", "fileUri": "https://example.org/cat.png"}}
        ])
    );
}

fn base64(bytes: &[u8]) -> String {
    match bytes {
        b if b == PNG => "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJ".into(),
        _ => "JVBERi0xLjQKMSAwIG9iajw8Pj5lbmRvYmoKdHJhaWxlcjw8Pj4KJSVFT0YK".into(),
    }
}

#[test]
fn bad_configurations_are_refused_and_endpoints_shown() {
    for (config, rule) in [
        (GeminiConfig::new("localhost:8080", None), "base_url"),
        (
            GeminiConfig::new("https://h/v1beta?key=k", None),
            "base_url",
        ),
        (
            GeminiConfig {
                wire: GeminiOptions {
                    max_output_tokens: Some(0),
                    ..GeminiOptions::default()
                },
                ..GeminiConfig::new("http://127.0.0.1:1/v1beta", None)
            },
            "max_output_tokens",
        ),
    ] {
        let err = Gemini::new(config).unwrap_err().to_string();
        assert!(err.contains(rule), "{err}");
        assert!(!err.contains("key=k"), "{err}");
    }
    let provider = Gemini::new(GeminiConfig::new("http://127.0.0.1:1/v1beta", None)).unwrap();
    assert_eq!(provider.endpoint(), "http://127.0.0.1:1/v1beta/models");
    assert_eq!(
        provider.url_for(&ModelName::parse("gemini-2.5-flash").unwrap()),
        "http://127.0.0.1:1/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    );
    assert_eq!(provider.provider_tag(), ProviderTag::gemini());
    let shown = format!("{provider:?}");
    assert!(shown.starts_with("Gemini {"), "{shown}");
}

#[cfg(feature = "rustls")]
#[test]
fn the_default_https_endpoint_is_accepted_with_tls() {
    let provider = Gemini::new(GeminiConfig::default()).unwrap();
    assert_eq!(
        provider.endpoint(),
        "https://generativelanguage.googleapis.com/v1beta/models"
    );
    assert_eq!(
        ProviderKind::parse("gemini").unwrap().default_base_url(),
        "https://generativelanguage.googleapis.com/v1beta"
    );
}

#[tokio::test]
async fn a_configured_thinking_budget_reaches_the_adapter_through_its_kind() {
    let server = Server::one(answer("ok")).await;
    let options = ConnectOptions {
        thinking_budget_tokens: Some(2048),
        ..ConnectOptions::default()
    };
    let provider = ProviderKind::Gemini
        .connect_with(
            Some(&server.base_url()),
            ApiKey::new(KEY).unwrap(),
            &options,
        )
        .unwrap();
    assert_eq!(provider.provider_tag(), ProviderTag::gemini());
    observe(
        provider.as_ref(),
        simple_request("gemini-2.5-flash"),
        &allow(),
    )
    .await;
    let request = &server.requests()[0];
    check_request_line(request, "gemini-2.5-flash");
    assert_eq!(
        request.json()["generationConfig"],
        json!({"thinkingConfig": {"thinkingBudget": 2048, "includeThoughts": true}})
    );
    let reasoning = ConnectOptions {
        send_reasoning: true,
        ..ConnectOptions::default()
    };
    assert_eq!(
        ProviderKind::Gemini.check_options(&reasoning),
        Err(ProviderConfigError::NotForKind {
            field: "send_reasoning",
            kind: "gemini"
        })
    );
}

/// Through the engine: a 429 is retried after its RetryInfo delay, the
/// thought and its signature are logged and kept, and the second model
/// call carries them back; the run completes.
#[tokio::test]
async fn the_engine_retries_a_429_and_sends_the_signature_back() {
    let limited = fixture(FOLDER, "rate_limited_429")
        .body
        .unwrap()
        .replace("\"17s\"", "\"0.05s\"");
    let server = Server::start(vec![
        Reply::json(429, limited),
        Reply::fixture(&fixture(FOLDER, "thought_function_call"), 1),
        answer("It is 3 °C in Trondheim."),
    ])
    .await;
    let engine = Engine::builder()
        .provider("gemini", Arc::new(provider(&server)))
        .allow_metadata(MetadataAllowlist::new(["gemini"]).unwrap())
        .build()
        .unwrap();
    let user = Message::text(MessageId::parse("u1").unwrap(), Role::User, "Weather?").unwrap();
    let tool =
        ScriptedTool::named("get_weather", vec![ToolStep::ok(json!({"temp_c": 3}))]).unwrap();
    let run = engine
        .start(
            RunRequest::new(
                RunId::parse("run_gemini").unwrap(),
                ModelName::parse("gemini-2.5-pro").unwrap(),
                vec![user],
            )
            .provider_named("gemini")
            .tool(Arc::new(tool)),
        )
        .unwrap();
    let outcome = run.join().await;
    let RunOutcome::Completed { transcript, .. } = &outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(
        transcript.last().unwrap().joined_text(),
        "It is 3 °C in Trondheim."
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    for request in &requests {
        check_request_line(request, "gemini-2.5-pro");
    }
    assert_eq!(
        requests[0].body, requests[1].body,
        "the retry resends the request"
    );
    let wire = sse_payloads(
        fixture(FOLDER, "thought_function_call")
            .body
            .as_deref()
            .unwrap(),
    );
    let signature = &wire[2]["candidates"][0]["content"]["parts"][0]["thoughtSignature"];
    let body = requests[2].json();
    let model = &body["contents"][1];
    assert_eq!(model["role"], "model");
    assert_eq!(model["parts"][0]["thought"], true);
    assert_eq!(model["parts"][1]["thoughtSignature"], *signature);
    let call_id = model["parts"][1]["functionCall"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        body["contents"][2]["parts"][0]["functionResponse"]["id"],
        json!(call_id)
    );
    assert_eq!(
        body["contents"][2]["parts"][0]["functionResponse"]["name"],
        "get_weather"
    );
}
