//! Reasoning and tool images end to end through the engine: what the log
//! records (`model.reasoning_delta`, `model.reasoning_end`, `tool.completed`
//! with `images`), what the next request carries (the assistant message
//! with its reasoning parts in stream order, the tool result with its
//! images), and that `history::rebuild` of the log gives the same history.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use keel_engine::*;
use keel_eventlog::{Event, history};
use keel_message::*;
use keel_stream::FinishReason;
use keel_testkit::*;
use serde_json::{Value, json};
use std::sync::Arc;

fn request(id: &str) -> RunRequest {
    common::request(id).provider_named("scripted")
}

fn definition(name: &str) -> ToolDefinition {
    ToolDefinition::new(
        ToolName::parse(name).unwrap(),
        "d",
        CanonicalJson::parse(r#"{"type":"object"}"#).unwrap(),
    )
    .unwrap()
}

fn png(extra: &[u8]) -> ImagePart {
    let mut bytes = b"\x89PNG\r\n\x1a\n".to_vec();
    bytes.extend_from_slice(extra);
    ImagePart::from_bytes_with(ImageMediaType::Png, &bytes, &Limits::default()).unwrap()
}

/// A tool answering with text and `images`.
struct Camera {
    definition: ToolDefinition,
    images: Vec<ImagePart>,
}

impl Tool for Camera {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }
    fn call(&self, _invocation: ToolInvocation) -> ToolFuture {
        let output = ToolOutput::from("a picture").with_images(self.images.clone());
        Box::pin(async move { Ok(output) })
    }
}

/// Runs `request` to its end: the report, the events, and every payload
/// as JSON with the kind beside it.
async fn run(engine: &Engine, id: &str) -> (RunReport, Vec<Arc<Event>>, Vec<(String, Value)>) {
    run_with(engine, id, &Limits::default()).await
}

/// [`run`], rebuilding under `limits`.
async fn run_with(
    engine: &Engine,
    id: &str,
    limits: &Limits,
) -> (RunReport, Vec<Arc<Event>>, Vec<(String, Value)>) {
    let run = engine.start(request(id)).unwrap();
    let log = run.log().clone();
    let report = run.join_report().await;
    let events = log.retained_after(0);
    let payloads = events
        .iter()
        .map(|e| {
            let line: Value = serde_json::from_str(e.line()).unwrap();
            (e.kind().to_string(), line["payload"].clone())
        })
        .collect();
    let rebuilt = history::rebuild(&events, limits).unwrap();
    assert_eq!(rebuilt, report.history(), "the log rebuilds the history");
    (report, events, payloads)
}

fn model_payloads(payloads: &[(String, Value)], turn: u64) -> Vec<(&str, Value)> {
    payloads
        .iter()
        .filter(|(kind, p)| kind.starts_with("model.") && p["turn"] == json!(turn))
        .map(|(kind, p)| {
            let mut p = p.clone();
            // The operation id is the engine's to mint.
            p.as_object_mut().unwrap().remove("operation_id");
            (kind.as_str(), p)
        })
        .collect()
}

#[tokio::test]
async fn reasoning_is_recorded_once_and_sent_back_in_stream_order() {
    let provider = ScriptedProvider::new(vec![
        vec![
            ScriptItem::reasoning("The user wants "),
            ScriptItem::reasoning("the weather."),
            ScriptItem::reasoning_signature("EqQBCgIYAhIMsig"),
            ScriptItem::text("Checking."),
            common::call("c1", "get_weather"),
            ScriptItem::complete(FinishReason::ToolCalls),
        ],
        vec![
            ScriptItem::redacted_reasoning("cmVkYWN0ZWQ="),
            ScriptItem::reasoning("Sunny, then."),
            ScriptItem::text("Sunny."),
            ScriptItem::complete(FinishReason::Stop),
        ],
    ])
    .recording_requests();
    let handle = provider.handle();
    let tool = ScriptedTool::new(
        definition("get_weather"),
        vec![ToolStep::ok(json!("sunny"))],
    );
    let engine = Engine::builder()
        .provider("scripted", Arc::new(provider))
        .tool(Arc::new(tool))
        .build()
        .unwrap();
    let (report, _events, payloads) = run(&engine, "run_reason").await;
    assert!(matches!(report.outcome(), RunOutcome::Completed { .. }));

    // Turn 1: the deltas, then the part closed by its signature.
    assert_eq!(
        model_payloads(&payloads, 1)[1..5],
        [
            (
                "model.reasoning_delta",
                json!({"text": "The user wants ", "turn": 1})
            ),
            (
                "model.reasoning_delta",
                json!({"text": "the weather.", "turn": 1})
            ),
            (
                "model.reasoning_end",
                json!({"provider": "scripted", "signature": "EqQBCgIYAhIMsig", "turn": 1})
            ),
            ("model.text_delta", json!({"text": "Checking.", "turn": 1})),
        ]
    );
    // Turn 2: a redacted part (no deltas), then a part the text closes
    // unsigned.
    assert_eq!(
        model_payloads(&payloads, 2)[1..5],
        [
            (
                "model.reasoning_end",
                json!({"provider": "scripted", "redacted": "cmVkYWN0ZWQ=", "turn": 2})
            ),
            (
                "model.reasoning_delta",
                json!({"text": "Sunny, then.", "turn": 2})
            ),
            (
                "model.reasoning_end",
                json!({"provider": "scripted", "turn": 2})
            ),
            ("model.text_delta", json!({"text": "Sunny.", "turn": 2})),
        ]
    );
    // The reasoning text is stored once: in the deltas, not in the end or
    // the completion.
    let completed = payloads
        .iter()
        .filter(|(kind, _)| kind == "model.completed")
        .map(|(_, p)| p.to_string())
        .collect::<String>();
    assert!(!completed.contains("weather."), "{completed}");

    // The second request carries the first answer with its reasoning part,
    // in stream order, signature and provider intact.
    let second = &handle.requests()[1];
    let assistant = &second.history()[1];
    assert_eq!(assistant.role(), Role::Assistant);
    let kinds: Vec<_> = assistant.parts().iter().map(Part::kind).collect();
    assert_eq!(kinds, ["reasoning", "text", "tool_call"]);
    let Part::Reasoning(r) = &assistant.parts()[0] else {
        panic!()
    };
    assert_eq!(r.provider().as_str(), "scripted");
    assert_eq!(r.text(), "The user wants the weather.");
    assert_eq!(
        r.signature().map(OpaqueValue::as_str),
        Some("EqQBCgIYAhIMsig")
    );

    // The final message: the redacted part, the unsigned part, the text.
    let RunOutcome::Completed { final_message, .. } = report.outcome() else {
        panic!()
    };
    let parts = final_message.parts();
    let Part::Reasoning(redacted) = &parts[0] else {
        panic!("{parts:?}")
    };
    assert!(redacted.is_redacted());
    assert_eq!(
        redacted.redacted().map(OpaqueValue::as_str),
        Some("cmVkYWN0ZWQ=")
    );
    let Part::Reasoning(open) = &parts[1] else {
        panic!("{parts:?}")
    };
    assert_eq!((open.text(), open.signature()), ("Sunny, then.", None));
    assert_eq!(final_message.joined_text(), "Sunny.");
}

#[tokio::test]
async fn an_open_part_is_closed_before_a_failure_and_the_retry_forgets_it() {
    let provider = ScriptedProvider::new(vec![
        vec![
            ScriptItem::reasoning("lost"),
            ScriptItem::fail(keel_stream::ProblemKind::Unavailable, "cut", true),
        ],
        vec![
            ScriptItem::reasoning("kept"),
            ScriptItem::text("ok"),
            ScriptItem::complete(FinishReason::Stop),
        ],
    ]);
    let engine = Engine::builder()
        .provider("scripted", Arc::new(provider))
        .limits(EngineLimits {
            retry: RetryPolicy {
                partial: PartialRetry::Restart,
                initial_backoff: std::time::Duration::from_millis(1),
                ..RetryPolicy::default()
            },
            ..EngineLimits::default()
        })
        .build()
        .unwrap();
    let (report, _events, payloads) = run(&engine, "run_retry").await;
    let kinds: Vec<_> = model_payloads(&payloads, 1)
        .into_iter()
        .map(|(kind, p)| (kind, p.get("position").cloned()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("model.started", None),
            ("model.reasoning_delta", None),
            ("model.reasoning_end", None),
            ("model.failed", Some(json!("partial"))),
            ("model.started", None),
            ("model.reasoning_delta", None),
            ("model.reasoning_end", None),
            ("model.text_delta", None),
            ("model.completed", None),
        ]
    );
    let RunOutcome::Completed { final_message, .. } = report.outcome() else {
        panic!()
    };
    let Part::Reasoning(r) = &final_message.parts()[0] else {
        panic!()
    };
    assert_eq!(r.text(), "kept");
}

#[tokio::test]
async fn reasoning_alone_is_no_answer() {
    let provider = ScriptedProvider::new(vec![vec![
        ScriptItem::reasoning("hm"),
        ScriptItem::complete(FinishReason::Stop),
    ]]);
    let engine = Engine::builder()
        .provider("scripted", Arc::new(provider))
        .build()
        .unwrap();
    let (report, _events, payloads) = run(&engine, "run_empty").await;
    assert!(matches!(report.outcome(), RunOutcome::Failed { .. }));
    let failed = payloads
        .iter()
        .find(|(kind, _)| kind == "model.failed")
        .unwrap();
    assert!(
        failed.1["problem"]["message"]
            .as_str()
            .unwrap()
            .contains("model.nonempty_completion")
    );
}

#[tokio::test]
async fn tool_images_are_recorded_and_fed_back() {
    let provider = ScriptedProvider::new(vec![
        vec![
            common::call("c1", "camera"),
            ScriptItem::complete(FinishReason::ToolCalls),
        ],
        common::done(),
    ])
    .recording_requests();
    let handle = provider.handle();
    let images = vec![png(&[1, 2, 3]), png(&[4])];
    let camera = Camera {
        definition: definition("camera"),
        images: images.clone(),
    };
    let engine = Engine::builder()
        .provider("scripted", Arc::new(provider))
        .tool(Arc::new(camera))
        .build()
        .unwrap();
    let (_report, _events, payloads) = run(&engine, "run_camera").await;
    let (_, completed) = payloads
        .iter()
        .find(|(kind, _)| kind == "tool.completed")
        .unwrap();
    assert_eq!(
        completed["images"],
        json!([
            {"base64": "iVBORw0KGgoBAgM=", "media_type": "image/png"},
            {"base64": "iVBORw0KGgoE", "media_type": "image/png"},
        ])
    );
    let second = &handle.requests()[1];
    let Part::ToolResult(result) = &second.history().last().unwrap().parts()[0] else {
        panic!()
    };
    assert_eq!(result.content(), "a picture");
    assert_eq!(result.images(), images);
}

#[tokio::test]
async fn tool_images_over_their_bound_fail_the_call() {
    let provider = ScriptedProvider::new(vec![
        vec![
            common::call("c1", "camera"),
            ScriptItem::complete(FinishReason::ToolCalls),
        ],
        common::done(),
    ]);
    let camera = Camera {
        definition: definition("camera"),
        images: (0..3).map(|i| png(&[i])).collect(),
    };
    let limits = Limits {
        media_parts_per_message: 2,
        ..Limits::default()
    };
    let engine = Engine::builder()
        .provider("scripted", Arc::new(provider))
        .tool(Arc::new(camera))
        .message_limits(limits.clone())
        .build()
        .unwrap();
    let (_report, _events, payloads) = run_with(&engine, "run_many", &limits).await;
    let (_, failed) = payloads
        .iter()
        .find(|(kind, _)| kind == "tool.failed")
        .unwrap();
    let error = failed["error"].as_str().unwrap();
    assert!(error.contains("limits.media_parts_per_message"), "{error}");
    assert_eq!(failed["outcome"], json!("uncertain"));
}
