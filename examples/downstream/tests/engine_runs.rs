//! Downstream tests in the style keel-testkit's docs give: a scripted
//! model, our own tool, a recording required observer, lifecycle checks,
//! and paused time.

use keel_downstream_example::Converter;
use keel_engine::{Engine, RunRequest};
use keel_message::ModelName;
use keel_testkit::{RecordingObserver, ScriptedProvider, assert_kinds, assert_lifecycle, kinds};
use std::sync::Arc;

/// One scripted conversation: the model calls the converter, then answers.
fn provider(arguments: &str) -> ScriptedProvider {
    ScriptedProvider::from_json(&format!(
        r#"[
        [{{"tool_call": {{"call_id": "c1", "name": "celsius_to_fahrenheit", "arguments": {arguments}}}}},
         {{"complete": {{"finish": "tool_calls"}}}}],
        [{{"delay_ms": 30000}}, {{"text": "That is warm."}}, {{"complete": {{"finish": "stop"}}}}]
    ]"#
    ))
    .unwrap()
}

fn engine(provider: ScriptedProvider, journal: &Arc<RecordingObserver>) -> Engine {
    Engine::builder()
        .provider("scripted", Arc::new(provider))
        .tool(Arc::new(Converter::new()))
        .required_observer(journal.clone())
        .build()
        .unwrap()
}

fn request() -> RunRequest {
    RunRequest::from_question(ModelName::parse("scripted-1").unwrap(), "30 °C in °F?").unwrap()
}

// Paused time: the scripted 30 s delay takes no wall-clock time.
#[tokio::test(start_paused = true)]
async fn the_tool_answers_and_every_event_reaches_the_observer() {
    let journal = Arc::new(RecordingObserver::new());
    let engine = engine(provider(r#"{"celsius": 30}"#), &journal);
    let run = engine.start(request()).unwrap();
    let log = run.log().clone();
    let done = run.join().await.into_result().unwrap();
    assert_eq!(done.final_message().joined_text(), "That is warm.");

    let events = log.retained_after(0);
    let summary = assert_lifecycle(&events);
    assert_eq!(summary.text_deltas(), 1);
    // The observer acknowledged every event, in order, with the same bytes.
    let lines: Vec<String> = events.iter().map(|e| e.line().to_owned()).collect();
    assert_eq!(journal.lines(), lines);
    let tool = events
        .iter()
        .find(|e| e.kind().to_string() == "tool.completed")
        .unwrap();
    assert!(tool.line().contains("86 °F"), "{}", tool.line());
}

#[tokio::test(start_paused = true)]
async fn a_bad_argument_is_a_tool_failure_the_model_sees_not_a_crash() {
    let journal = Arc::new(RecordingObserver::new());
    let engine = engine(provider(r#"{"celsius": "warm"}"#), &journal);
    let run = engine.start(request()).unwrap();
    let log = run.log().clone();
    run.join().await.into_result().unwrap();
    let events = log.retained_after(0);
    assert_lifecycle(&events);
    let failed = events
        .iter()
        .find(|e| e.kind().to_string() == "tool.failed")
        .unwrap();
    // The error names the argument's path, never its value.
    assert!(failed.line().contains("celsius"), "{}", failed.line());
    assert!(!failed.line().contains("warm"), "{}", failed.line());
    assert!(kinds(&events).contains(&"run.completed".to_owned()));
    assert_kinds(&events[..2], &["run.started", "run.input"]);
}
