//! Sub-runs: agent tools start child runs whose outcome is the call's one
//! terminal; children end before their parent's terminals on every path
//! (completion, failure, the call's timeout, cancellation, a sibling's
//! failure, shutdown); the depth and count bounds fail typed.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::type_complexity
)]

use keel_engine::*;
use keel_eventlog::{Event, EventKind, Payload, SubRunRef};
use keel_message::*;
use keel_stream::{FinishReason, ProblemKind};
use keel_testkit::*;
use serde_json::json;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

fn user(text: &str) -> Vec<Message> {
    vec![Message::text(MessageId::parse("u1").unwrap(), Role::User, text).unwrap()]
}

fn model() -> ModelName {
    ModelName::parse("scripted-1").unwrap()
}

fn answer(text: &str) -> Vec<ScriptItem> {
    vec![
        ScriptItem::text(text),
        ScriptItem::complete(FinishReason::Stop),
    ]
}

fn delegate(call_id: &str, tool: &str, task: &str) -> ScriptItem {
    ScriptItem::tool_call(call_id, tool, json!({"task": task}))
}

/// A model turn that calls `calls`, then stops for tools.
fn calling(calls: Vec<ScriptItem>) -> Vec<ScriptItem> {
    let mut items = calls;
    items.push(ScriptItem::complete(FinishReason::ToolCalls));
    items
}

fn definition(name: &str) -> ToolDefinition {
    ToolDefinition::new(
        ToolName::parse(name).unwrap(),
        "delegates a task",
        CanonicalJson::from_value(&AgentTool::task_parameters()).unwrap(),
    )
    .unwrap()
}

/// An agent tool `name` whose child calls `provider`.
fn agent(name: &str, provider: ScriptedProvider, timeout: Option<Duration>) -> Arc<dyn Tool> {
    let spec = AgentSpec::new(model()).provider(Arc::new(provider));
    Arc::new(
        AgentTool::new(definition(name), spec).with_policy(ToolPolicy {
            timeout,
            ..ToolPolicy::default()
        }),
    )
}

/// An engine whose runs are all recorded, in acknowledgement order.
fn engine(recorder: &RecordingObserver) -> Engine {
    Engine::builder()
        .required_observer(Arc::new(recorder.clone()))
        .build()
        .unwrap()
}

fn root(id: &str, provider: ScriptedProvider) -> RunRequest {
    RunRequest::new(RunId::parse(id).unwrap(), model(), user("Plan it."))
        .provider(Arc::new(provider))
}

/// The runs in `events`, in first-seen order.
fn runs(events: &[Arc<Event>]) -> Vec<RunId> {
    let mut seen = Vec::new();
    for e in events {
        if !seen.contains(e.run_id()) {
            seen.push(e.run_id().clone());
        }
    }
    seen
}

/// Each tool terminal of `events`, by call id: (kind, payload).
fn tool_terminals(events: &[Arc<Event>]) -> HashMap<String, (String, Payload)> {
    events
        .iter()
        .filter(|e| {
            matches!(
                e.kind().to_string().as_str(),
                "tool.completed" | "tool.failed" | "tool.cancelled"
            )
        })
        .map(|e| {
            let payload = e.payload().unwrap();
            let call = match &payload {
                Payload::ToolCompleted(p) => p.call_id.clone(),
                Payload::ToolFailed(p) => p.call_id.clone(),
                Payload::ToolCancelled(p) => p.call_id.clone(),
                _ => unreachable!(),
            };
            (call.to_string(), (e.kind().to_string(), payload))
        })
        .collect()
}

fn sub_run_of(payload: &Payload) -> Option<SubRunRef> {
    match payload {
        Payload::ToolCompleted(p) => SubRunRef::from_extra(&p.extra),
        Payload::ToolFailed(p) => SubRunRef::from_extra(&p.extra),
        Payload::ToolCancelled(p) => SubRunRef::from_extra(&p.extra),
        _ => None,
    }
}

fn kinds(events: &[Arc<Event>]) -> Vec<String> {
    events.iter().map(|e| e.kind().to_string()).collect()
}

/// The run's `run.started` parent link, as (run id, call id).
fn parent_of(events: &[Arc<Event>]) -> Option<(String, String)> {
    match events.first()?.payload().ok()? {
        Payload::RunStarted(p) => p
            .parent
            .map(|l| (l.run_id.to_string(), l.call_id.to_string())),
        _ => None,
    }
}

#[tokio::test]
async fn three_children_end_with_exactly_their_three_terminals() {
    let recorder = RecordingObserver::new();
    let engine = engine(&recorder);
    let parent = ScriptedProvider::new(vec![
        calling(vec![
            delegate("c_ok", "ok", "find it"),
            delegate("c_fail", "fail", "break it"),
            delegate("c_slow", "slow", "take forever"),
        ]),
        answer("Done."),
    ]);
    let ok = ScriptedProvider::new(vec![answer("found it")]);
    let fail = ScriptedProvider::new(vec![vec![ScriptItem::fail(
        ProblemKind::InvalidRequest,
        "bad request",
        false,
    )]]);
    let slow = ScriptedProvider::new(vec![vec![
        ScriptItem::delay(Duration::from_secs(30)),
        ScriptItem::text("too late"),
        ScriptItem::complete(FinishReason::Stop),
    ]]);
    let request = root("run_parent", parent)
        .tool(agent("ok", ok, None))
        .tool(agent("fail", fail, None))
        .tool(agent("slow", slow, Some(Duration::from_millis(200))));
    let run = engine.start(request).unwrap();
    let outcome = run.join().await;
    assert!(
        matches!(outcome, RunOutcome::Completed { .. }),
        "{outcome:?}"
    );
    assert_eq!(engine.live_runs(), 0);
    let events = recorder.events();
    let all = runs(&events);
    assert_eq!(all.len(), 4, "the parent and three children");
    let parent_id = RunId::parse("run_parent").unwrap();
    let parent_events = recorder.events_for(&parent_id);
    assert_lifecycle(&parent_events);
    let terminals = tool_terminals(&parent_events);
    assert_eq!(terminals.len(), 3, "{:?}", kinds(&parent_events));
    let expect = [
        ("c_ok", "tool.completed", "run.completed"),
        ("c_fail", "tool.failed", "run.failed"),
        ("c_slow", "tool.cancelled", "run.cancelled"),
    ];
    for (call, tool_kind, child_kind) in expect {
        let (kind, payload) = &terminals[call];
        assert_eq!(kind, tool_kind, "{call}");
        let link = sub_run_of(payload).unwrap_or_else(|| panic!("{call} names no sub-run"));
        let child_events = recorder.events_for(&link.run_id);
        assert_lifecycle(&child_events);
        assert_eq!(
            parent_of(&child_events),
            Some(("run_parent".to_owned(), call.to_owned()))
        );
        assert_eq!(
            child_events.last().unwrap().kind().to_string(),
            child_kind,
            "{call}"
        );
        let sub_run_event = parent_events
            .iter()
            .find(|e| {
                *e.kind() == EventKind::ToolSubRun
                    && matches!(e.payload().unwrap(), Payload::ToolSubRun(p) if p.run_id == link.run_id && p.call_id.as_str() == call)
            })
            .unwrap_or_else(|| panic!("no tool.sub_run for {call}"));
        let position = |id: &RunId, seq: u64| {
            events
                .iter()
                .position(|e| e.run_id() == id && e.seq() == seq)
                .unwrap()
        };
        // The link before the child's first event; the child's terminal
        // before the call's.
        assert!(position(&parent_id, sub_run_event.seq()) < position(&link.run_id, 1));
        let tool_seq = parent_events
            .iter()
            .find(|e| e.kind().to_string() == *tool_kind)
            .map(|e| e.seq())
            .unwrap();
        let _ = tool_seq;
        match payload {
            Payload::ToolCompleted(p) => assert_eq!(p.output, "found it"),
            Payload::ToolFailed(p) => {
                let cause = link.cause.expect("the child's cause");
                assert!(cause.operation_id.is_some(), "{cause:?}");
                assert!(
                    p.error
                        .as_str()
                        .starts_with(&format!("sub-run {} failed: ", link.run_id)),
                    "{}",
                    p.error.as_str()
                );
            }
            _ => assert!(link.cause.is_none()),
        }
    }
}
