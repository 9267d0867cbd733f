//! `keel run` against a local server that replays real provider wire
//! transcripts (the shared fixtures): OpenAI-compatible, Anthropic, the
//! OpenAI Responses API and Gemini, a retried 429 before the stream, tool
//! round trips (the Responses one carrying its reasoning item back, the
//! Gemini one its thought signature), and the key kept out of every output
//! and of the database.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
use common::*;

const SECRET: &str = "sk-test-REPLAYKEY0123456789abcdefghij";

fn run_scenario(sb: &Sandbox, scenario: &str) -> std::process::Output {
    let file = sb.write("net.json", scenario);
    keel()
        .arg("run")
        .arg(&file)
        .args(sb.db_args())
        .args(["--approve", "all"])
        .env("KEEL_TEST_API_KEY", SECRET)
        .env("RUST_LOG", "trace")
        .output()
        .unwrap()
}

fn assert_no_secret(sb: &Sandbox, out: &std::process::Output) {
    let (stdout, stderr) = text(out);
    assert!(!stdout.contains(SECRET) && !stderr.contains(SECRET));
    let db = std::fs::read(sb.db()).unwrap();
    assert!(
        !db.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()),
        "key stored in the database"
    );
}

#[test]
fn openai_compatible_retries_a_429_then_streams_the_answer() {
    let (base, recorded) = replay(&["rate_limited_429", "text_only"]);
    let sb = Sandbox::new();
    let out = run_scenario(
        &sb,
        &format!(
            r#"{{"model": "gpt-5-mini", "messages": [{{"role": "user", "text": "Tell me about smørrebrød"}}],
                "allow_metadata": ["openai"],
                "limits": {{"retry": {{"initial_backoff_ms": 10, "max_backoff_ms": 1500}}}},
                "provider": {{"type": "openai-compatible", "base_url": "{base}", "api_key_env": "KEEL_TEST_API_KEY"}}}}"#
        ),
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("Smørrebrød (open sandwiches) are a Danish lunch classic 🥪"),
        "{stdout}"
    );
    let requests = &recorded.lock().unwrap().requests;
    assert_eq!(requests.len(), 2, "one retry after the 429");
    let (head, body) = &requests[1];
    assert!(head.starts_with("POST /v1/chat/completions"), "{head}");
    assert!(head.to_ascii_lowercase().contains(&format!(
        "authorization: bearer {}",
        SECRET.to_ascii_lowercase()
    )));
    let body: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(body["stream"], true);
    assert_eq!(body["model"], "gpt-5-mini");
    assert_no_secret(&sb, &out);
    // The stored run: a pristine retryable failure, then the answer; verify is clean.
    let json = keel().args(["runs"]).args(sb.db_args()).output().unwrap();
    assert!(text(&json).0.contains("completed"));
    let verify = keel().arg("verify").args(sb.db_args()).output().unwrap();
    assert_eq!(verify.status.code(), Some(0), "{}", text(&verify).1);
}

#[test]
fn anthropic_tool_round_trip() {
    let (base, recorded) = replay(&["anthropic_single_tool_call", "anthropic_text_only"]);
    let sb = Sandbox::new();
    let out = run_scenario(
        &sb,
        &format!(
            r#"{{"model": "claude-sonnet-4-5", "messages": [{{"role": "system", "text": "Be brief."}}, {{"role": "user", "text": "Write a note"}}],
                "tools": [{{"name": "write_file", "description": "Write a file", "parameters": {{"type": "object"}},
                            "script": [{{"ok": "written"}}]}}],
                "provider": {{"type": "anthropic", "base_url": "{base}", "api_key_env": "KEEL_TEST_API_KEY"}}}}"#
        ),
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("write_file"), "{stdout}");
    let requests = &recorded.lock().unwrap().requests;
    assert_eq!(requests.len(), 2);
    let (head, first) = &requests[0];
    assert!(head.starts_with("POST /v1/messages"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("anthropic-version: 2023-06-01")
    );
    let first: serde_json::Value = serde_json::from_str(first).unwrap();
    assert_eq!(first["system"], "Be brief.");
    // The second request carries the tool result answering the tool_use id.
    let second: serde_json::Value = serde_json::from_str(&requests[1].1).unwrap();
    let text_second = second.to_string();
    assert!(
        text_second.contains("toolu_01aGqHVXxxYJ3zCxhr73RH1C")
            && text_second.contains("tool_result"),
        "{text_second}"
    );
    assert_no_secret(&sb, &out);
    let verify = keel().arg("verify").args(sb.db_args()).output().unwrap();
    assert_eq!(verify.status.code(), Some(0));
}

/// Gemini: a 429 retried after its RetryInfo delay, a thought and a call
/// whose thoughtSignature goes back on the call in the next request, and
/// the key only in the `x-goog-api-key` header: never in a URL, an output
/// or the database.
#[test]
fn gemini_retries_a_429_and_returns_the_thought_signature() {
    let (base, recorded) = replay(&[
        "gemini_rate_limited_429",
        "gemini_thought_function_call",
        "gemini_text_only",
    ]);
    let base = base.replace("/v1", "/v1beta");
    let sb = Sandbox::new();
    let out = run_scenario(
        &sb,
        &format!(
            r#"{{"model": "gemini-2.5-pro", "messages": [{{"role": "user", "text": "Weather in Trondheim?"}}],
                "allow_metadata": ["gemini"],
                "limits": {{"retry": {{"initial_backoff_ms": 10, "max_backoff_ms": 1500}}}},
                "tools": [{{"name": "get_weather", "description": "Weather for a city", "parameters": {{"type": "object"}},
                            "script": [{{"ok": "3 °C"}}]}}],
                "provider": {{"type": "gemini", "base_url": "{base}", "api_key_env": "KEEL_TEST_API_KEY",
                              "thinking_budget_tokens": 1024}}}}"#
        ),
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("Smørrebrød (open sandwiches) are a Danish lunch classic"),
        "{stdout}"
    );
    let requests = &recorded.lock().unwrap().requests;
    assert_eq!(
        requests.len(),
        3,
        "one retry after the 429, then the tool turn"
    );
    for (head, _) in requests.iter() {
        assert!(
            head.starts_with(
                "POST /v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse HTTP/1.1"
            ),
            "{head}"
        );
        let first_line = head.lines().next().unwrap();
        assert!(!first_line.contains(SECRET), "{first_line}");
        assert!(
            head.to_ascii_lowercase()
                .contains(&format!("x-goog-api-key: {}", SECRET.to_ascii_lowercase())),
            "{head}"
        );
    }
    let first: serde_json::Value = serde_json::from_str(&requests[0].1).unwrap();
    assert_eq!(
        first["generationConfig"]["thinkingConfig"],
        serde_json::json!({"thinkingBudget": 1024, "includeThoughts": true})
    );
    assert_eq!(
        first["tools"][0]["functionDeclarations"][0]["name"],
        "get_weather"
    );
    // The third request carries the thought and, on the call, its
    // signature byte-exact, then the result under the same id and name.
    let third: serde_json::Value = serde_json::from_str(&requests[2].1).unwrap();
    let model = &third["contents"][1];
    assert_eq!(model["role"], "model");
    assert_eq!(model["parts"][0]["thought"], true);
    let wire = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/gemini_thought_function_call.sse"),
    )
    .unwrap();
    let signature = model["parts"][1]["thoughtSignature"].as_str().unwrap();
    assert!(wire.contains(&format!("\"thoughtSignature\": \"{signature}\"")));
    let call = &model["parts"][1]["functionCall"];
    assert_eq!(call["name"], "get_weather");
    let response = &third["contents"][2]["parts"][0]["functionResponse"];
    assert_eq!(response["id"], call["id"]);
    assert_eq!(response["name"], "get_weather");
    assert_eq!(response["response"], serde_json::json!({"output": "3 °C"}));
    assert_no_secret(&sb, &out);
    let verify = keel().arg("verify").args(sb.db_args()).output().unwrap();
    assert_eq!(verify.status.code(), Some(0), "{}", text(&verify).1);
}

#[test]
fn openai_responses_reasoning_round_trip() {
    let (base, recorded) = replay(&[
        "responses_reasoning_tool_call",
        "responses_after_tool_result",
    ]);
    let sb = Sandbox::new();
    let out = run_scenario(
        &sb,
        &format!(
            r#"{{"model": "o4-mini", "messages": [{{"role": "user", "text": "Weather in Trondheim?"}}],
                "allow_metadata": ["openai"],
                "tools": [{{"name": "get_weather", "description": "Current weather for a city",
                            "parameters": {{"type": "object", "properties": {{"city": {{"type": "string"}}}}}},
                            "script": [{{"ok": {{"temp_c": 3}}}}]}}],
                "provider": {{"type": "openai-responses", "base_url": "{base}", "api_key_env": "KEEL_TEST_API_KEY"}}}}"#
        ),
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("It is 3 °C in Trondheim."), "{stdout}");
    let requests = &recorded.lock().unwrap().requests;
    assert_eq!(requests.len(), 2);
    let (head, first) = &requests[0];
    assert!(head.starts_with("POST /v1/responses"), "{head}");
    let first: serde_json::Value = serde_json::from_str(first).unwrap();
    assert_eq!(first["store"], false);
    assert_eq!(
        first["include"],
        serde_json::json!(["reasoning.encrypted_content"])
    );
    // The second request carries the reasoning item exactly as the first
    // response's output_item.done had it, then the call and its output.
    let fixture = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/responses_reasoning_tool_call.sse"),
    )
    .unwrap();
    let item = fixture
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str::<serde_json::Value>(d).unwrap())
        .find(|p| p["type"] == "response.output_item.done" && p["item"]["type"] == "reasoning")
        .unwrap()["item"]
        .clone();
    let second: serde_json::Value = serde_json::from_str(&requests[1].1).unwrap();
    assert_eq!(second["input"][1]["type"], "reasoning");
    assert_eq!(second["input"][1]["id"], item["id"]);
    assert_eq!(second["input"][1]["summary"], item["summary"]);
    let encrypted = item["encrypted_content"].as_str().unwrap();
    assert!(
        requests[1]
            .1
            .contains(&format!("\"encrypted_content\":\"{encrypted}\""))
    );
    assert_eq!(second["input"][2]["call_id"], "call_Mh5rS0oB3zAx4Yp6");
    assert_eq!(second["input"][3]["type"], "function_call_output");
    assert_no_secret(&sb, &out);
    let verify = keel().arg("verify").args(sb.db_args()).output().unwrap();
    assert_eq!(verify.status.code(), Some(0), "{}", text(&verify).1);
}

#[test]
fn a_missing_key_variable_is_bad_input_naming_the_variable() {
    let sb = Sandbox::new();
    let file = sb.write(
        "net.json",
        r#"{"model": "m", "messages": [{"role": "user", "text": "hi"}],
            "provider": {"type": "openai-compatible", "base_url": "http://127.0.0.1:9/v1", "api_key_env": "KEEL_TEST_UNSET_KEY"}}"#,
    );
    let out = keel()
        .arg("run")
        .arg(&file)
        .args(sb.db_args())
        .env_remove("KEEL_TEST_UNSET_KEY")
        .output()
        .unwrap();
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("KEEL_TEST_UNSET_KEY"), "{stderr}");
    assert!(!sb.db().exists(), "nothing is opened on bad input");
}
