//! The endpoint rules, the span mapping's bounds and content rule, and the
//! export queue's "never blocks, drops counted" (the span tree itself is
//! checked against a real receiver in crates/cli/tests/otel.rs).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::spans::SpanTree;
use super::*;
use keel_eventlog::{Payload, ToolOutcome, ToolRetry};
use keel_message::{CallId, CanonicalJson, ModelName, OperationId, RunId, ToolName};
use keel_testkit::events::{self, ModelAttempt, ToolUse};
use opentelemetry::trace::Status;
use opentelemetry_sdk::trace::SpanData;
use std::time::{Duration, Instant, UNIX_EPOCH};

fn check(input: &str, want: Result<&str, OtelError>) {
    let got = OtlpEndpoint::parse(input).map(|e| e.traces_url().to_owned());
    assert_eq!(got, want.map(str::to_owned), "{input}");
}

#[test]
fn endpoints_follow_the_rules() {
    let long = format!("http://h/{}", "a".repeat(MAX_ENDPOINT_BYTES));
    let cases: [(&str, Result<&str, OtelError>); 13] = [
        (
            "http://127.0.0.1:4318",
            Ok("http://127.0.0.1:4318/v1/traces"),
        ),
        (
            "http://collector:4318/",
            Ok("http://collector:4318/v1/traces"),
        ),
        (
            "https://c.example/otlp",
            Ok("https://c.example/otlp/v1/traces"),
        ),
        (
            "https://c.example/otlp/v1/traces",
            Ok("https://c.example/otlp/v1/traces"),
        ),
        ("ftp://collector:4318", Err(OtelError::Scheme)),
        ("collector:4318", Err(OtelError::Scheme)),
        ("http://", Err(OtelError::Scheme)),
        ("http://:4318", Err(OtelError::Scheme)),
        ("http://user:pw@collector:4318", Err(OtelError::Credentials)),
        ("http://collector:4318/a b", Err(OtelError::Characters)),
        ("http://collector:4318/?api_key=k", Err(OtelError::Query)),
        ("http://collector:4318#k", Err(OtelError::Query)),
        (&long, Err(OtelError::TooLong { len: long.len() })),
    ];
    for (input, want) in cases {
        check(input, want);
    }
    // The bound itself is accepted.
    let at_bound = format!("http://h/{}", "a".repeat(MAX_ENDPOINT_BYTES - 9));
    assert!(OtlpEndpoint::parse(&at_bound).is_ok());
    // No error text holds the URL (credentials included).
    let e = OtlpEndpoint::parse("http://user:pw@collector:4318").unwrap_err();
    assert!(!e.to_string().contains("pw"));
}

const TEXT: &str = "Oslo-weather-content-7f3a";

fn secret() -> String {
    format!("{}{}", "sk-proj-", "a1B2".repeat(8))
}

/// A run with a model call (text, a tool call) and a failed tool; the
/// text and the tool's output carry [`TEXT`] and a planted secret.
fn run_payloads() -> Vec<Payload> {
    let model = ModelAttempt::new(1, OperationId::parse("op_1").unwrap());
    let tool = ToolUse::new(
        1,
        CallId::parse("call_1").unwrap(),
        ToolName::parse("get_weather").unwrap(),
    );
    let done = ToolUse::new(
        1,
        CallId::parse("call_2").unwrap(),
        ToolName::parse("lookup").unwrap(),
    );
    let arguments = CanonicalJson::parse(&format!(r#"{{"city":"{TEXT}"}}"#)).unwrap();
    vec![
        events::run_started(),
        events::turn_started(1),
        model.started(ModelName::parse("gpt-5").unwrap()),
        model.text(format!("{TEXT} ")),
        model.text(secret()),
        model.tool_call(&tool, arguments),
        model.completed(
            keel_stream::FinishReason::ToolCalls,
            Some(keel_stream::Usage::new(12, 7).unwrap()),
        ),
        tool.started(),
        tool.failed(
            TEXT,
            Some(ToolOutcome::Uncertain),
            Some(ToolRetry::Retryable),
        ),
        done.started(),
        done.completed(format!("{TEXT} {}", secret())),
        events::turn_completed(1),
        events::run_completed(),
    ]
}

/// Applies `payloads` to one run, one microsecond apart from `ts = 1000`.
fn apply(tree: &mut SpanTree, run: &str, payloads: &[Payload]) -> Vec<SpanData> {
    let mut spans = Vec::new();
    for (i, p) in payloads.iter().enumerate() {
        spans.extend(tree.apply(run, 1000 + i as u64, p));
    }
    spans
}

fn attribute(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.as_str().into_owned())
}

fn named<'a>(spans: &'a [SpanData], name: &str) -> &'a SpanData {
    spans.iter().find(|s| s.name == name).unwrap()
}

#[test]
fn without_opt_in_no_content_is_recorded() {
    let mut tree = SpanTree::new(false);
    let spans = apply(&mut tree, "run_a", &run_payloads());
    assert_eq!(spans.len(), 4, "run, chat, two tools");
    for span in &spans {
        for key in names::CONTENT_ATTRIBUTES {
            assert_eq!(attribute(span, key), None, "{key} on {}", span.name);
        }
        for kv in &span.attributes {
            assert!(
                !kv.value.as_str().contains(TEXT),
                "{} holds content",
                kv.key
            );
        }
    }
    // Failures carry their type, never their message.
    let failed = named(&spans, "execute_tool get_weather");
    assert_eq!(
        attribute(failed, names::ERROR_TYPE).as_deref(),
        Some("uncertain")
    );
    assert_eq!(failed.status, Status::error("uncertain"));
    assert_eq!(attribute(failed, names::OUTCOME).as_deref(), Some("failed"));
    let chat = named(&spans, "chat gpt-5");
    assert_eq!(
        attribute(chat, names::USAGE_INPUT_TOKENS).as_deref(),
        Some("12")
    );
    assert_eq!(
        attribute(chat, names::USAGE_OUTPUT_TOKENS).as_deref(),
        Some("7")
    );
    assert_eq!(chat.status, Status::Unset);
    // Span times are the events' (microseconds).
    assert_eq!(chat.start_time, UNIX_EPOCH + Duration::from_micros(1002));
    assert_eq!(chat.end_time, UNIX_EPOCH + Duration::from_micros(1006));
}

#[test]
fn with_opt_in_content_is_recorded_and_screened() {
    let mut tree = SpanTree::new(true);
    let spans = apply(&mut tree, "run_a", &run_payloads());
    let chat = named(&spans, "chat gpt-5");
    let output = attribute(chat, names::OUTPUT_MESSAGES).unwrap();
    let parsed: serde_json::Value = serde_json::from_str(&output).unwrap();
    let parts = &parsed[0]["parts"];
    assert_eq!(parts[0]["type"], "text");
    let text = parts[0]["content"].as_str().unwrap();
    assert!(
        text.starts_with(TEXT) && text.contains("[redacted]"),
        "{text}"
    );
    assert_eq!(parts[1]["type"], "tool_call");
    assert_eq!(parts[1]["id"], "call_1");
    let tool = named(&spans, "execute_tool get_weather");
    let arguments = attribute(tool, names::TOOL_CALL_ARGUMENTS).unwrap();
    assert!(arguments.contains(TEXT));
    let done = named(&spans, "execute_tool lookup");
    let result = attribute(done, names::TOOL_CALL_RESULT).unwrap();
    assert_eq!(result, format!("{TEXT} [redacted]"));
    for span in &spans {
        for kv in &span.attributes {
            assert!(
                !kv.value.as_str().contains(&secret()),
                "{} holds the secret",
                kv.key
            );
        }
    }
}

#[test]
fn a_retry_adds_an_event_to_the_run_and_a_failed_attempt_is_an_error() {
    let mut tree = SpanTree::new(false);
    let first = ModelAttempt::new(1, OperationId::parse("op_1").unwrap());
    let second = ModelAttempt::new(1, OperationId::parse("op_2").unwrap());
    let mut retried = second.started(ModelName::parse("gpt-5").unwrap());
    if let Payload::ModelStarted(p) = &mut retried {
        p.attempt = 2;
    }
    let problem =
        keel_stream::ProviderProblem::new(keel_stream::ProblemKind::Unavailable, TEXT, true);
    let failed = Payload::ModelFailed(keel_eventlog::ModelFailed {
        turn: 1,
        operation_id: first.operation_id().clone(),
        problem: (&problem).into(),
        position: keel_stream::RetryPosition::Pristine,
        extra: keel_eventlog::Extra::new(),
    });
    let payloads = [
        events::run_started(),
        first.started(ModelName::parse("gpt-5").unwrap()),
        failed,
        retried,
        second.completed(keel_stream::FinishReason::Stop, None),
        events::run_completed(),
    ];
    let spans = apply(&mut tree, "run_a", &payloads);
    let run = named(&spans, "invoke_agent");
    let retry = run
        .events
        .iter()
        .find(|e| e.name == names::RETRY_EVENT)
        .unwrap();
    let attempt = retry
        .attributes
        .iter()
        .find(|kv| kv.key.as_str() == names::ATTEMPT);
    assert_eq!(
        attempt.map(|kv| kv.value.as_str().into_owned()).as_deref(),
        Some("2")
    );
    let failed: Vec<_> = spans.iter().filter(|s| s.status != Status::Unset).collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(
        attribute(failed[0], names::ERROR_TYPE).as_deref(),
        Some("unavailable")
    );
    assert!(
        !format!("{:?}", failed[0]).contains(TEXT),
        "a problem's message is content"
    );
}

#[test]
fn a_span_left_open_is_dropped_at_the_run_end() {
    let mut tree = SpanTree::new(false);
    let model = ModelAttempt::new(1, OperationId::parse("op_1").unwrap());
    let payloads = [
        events::run_started(),
        model.started(ModelName::parse("gpt-5").unwrap()),
        events::run_cancelled(),
    ];
    let spans = apply(&mut tree, "run_a", &payloads);
    assert_eq!(spans.len(), 1);
    assert_eq!(
        attribute(&spans[0], names::OUTCOME).as_deref(),
        Some("cancelled")
    );
    assert_eq!(tree.open_count(), 0);
}

#[test]
fn open_spans_are_bounded_and_the_excess_counted() {
    let mut tree = SpanTree::new(false);
    for i in 0..MAX_OPEN_SPANS + 3 {
        tree.apply(&format!("run_{i}"), 1, &events::run_started());
    }
    assert_eq!(tree.open_count(), MAX_OPEN_SPANS);
    assert_eq!(tree.unopened(), 3);
}

/// A receiver that accepts connections and never answers.
fn silent_receiver() -> (std::net::TcpListener, OtlpEndpoint) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    (listener, OtlpEndpoint::parse(&url).unwrap())
}

#[test]
fn a_stuck_receiver_never_blocks_the_observer_and_drops_are_counted() {
    let (_listener, endpoint) = silent_receiver();
    let config = OtelConfig::new(endpoint)
        .queue_spans(2)
        .timeout(Duration::from_millis(300));
    let mut observer = OtelObserver::new(&config).unwrap();
    let stats = observer.stats_handle();
    let log_events: Vec<_> = (0..200)
        .flat_map(|i| {
            let log = keel_eventlog::RunLog::new(
                RunId::parse(&format!("run_{i}")).unwrap(),
                keel_eventlog::LogConfig::default(),
                std::sync::Arc::new(keel_eventlog::SystemClock),
            )
            .unwrap();
            events::commit_all(&log, &[events::run_started(), events::run_completed()]).unwrap()
        })
        .collect();
    let started = Instant::now();
    for event in &log_events {
        observer.observe(event);
    }
    assert!(
        started.elapsed() < Duration::from_millis(250),
        "observe waited on the receiver"
    );
    let s = stats.get();
    // One request in flight (at most three spans: what was queued when
    // it formed), at most two spans queued: the rest dropped.
    assert!(s.dropped >= 195, "{s:?}");
    observer.flush();
    let s = stats.get();
    assert_eq!(s.exported, 0);
    assert_eq!(s.dropped + s.failed, 200, "{s:?}");
}
