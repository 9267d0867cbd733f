//! Budgets of a single run (`limits.budget`): each member's breach fails
//! the run at the boundary it is checked at (before `model.started` or
//! `tool.started`), naming the rule with the spent and limit figures, in
//! the outcome and in `turn.failed` / `run.failed`; a run within its budget
//! is untouched; every member's zero (or out-of-range) limit is refused;
//! and a child's bigger budget never widens its parent's.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use keel_engine::*;
use keel_eventlog::{Cause, Event, Payload};
use keel_message::*;
use keel_stream::FinishReason;
use keel_testkit::*;
use serde_json::json;
use std::sync::Arc;

fn msg(id: &str, role: Role, text: &str) -> Message {
    Message::text(MessageId::parse(id).unwrap(), role, text).unwrap()
}

fn tool_call(id: &str) -> ScriptItem {
    ScriptItem::tool_call(id, "work", json!({}))
}

/// A model call asking for `ids` and reporting `usage` (input, output).
fn asks(ids: &[&str], usage: (u64, u64)) -> Vec<ScriptItem> {
    let mut items: Vec<_> = ids.iter().map(|id| tool_call(id)).collect();
    items.push(ScriptItem::complete_with_usage(
        FinishReason::ToolCalls,
        usage.0,
        usage.1,
    ));
    items
}

/// A model call answering with text and reporting `usage`.
fn answers(usage: (u64, u64)) -> Vec<ScriptItem> {
    vec![
        ScriptItem::text("done"),
        ScriptItem::complete_with_usage(FinishReason::Stop, usage.0, usage.1),
    ]
}

/// A model call that completes with nothing (a retryable protocol failure)
/// but still reports `usage`: its tokens count.
fn empty(usage: (u64, u64)) -> Vec<ScriptItem> {
    vec![ScriptItem::complete_with_usage(
        FinishReason::Stop,
        usage.0,
        usage.1,
    )]
}

fn budget(
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    tool_calls: Option<u64>,
    wall_ms: Option<u64>,
) -> Budget {
    Budget {
        input_tokens,
        output_tokens,
        tool_calls,
        wall_ms,
    }
}

/// One row: the budget, the model's calls, how long each tool call takes,
/// whether the run only compacts, and what must happen.
struct Case {
    name: &'static str,
    budget: Budget,
    calls: Vec<Vec<ScriptItem>>,
    tool_ms: u64,
    compaction_only: bool,
    /// `None`: the run completes. Else the breach (member, spent, limit).
    breach: Option<(BudgetMember, u64, u64)>,
    /// How many `model.started` and `tool.started` the log holds.
    started: (usize, usize),
}

fn started(events: &[Arc<Event>], kind: &str) -> usize {
    events
        .iter()
        .filter(|e| e.kind().to_string() == kind)
        .count()
}

fn failure_causes(events: &[Arc<Event>]) -> Vec<Cause> {
    events
        .iter()
        .filter_map(|e| match e.payload().unwrap() {
            Payload::TurnFailed(f) => f.cause,
            Payload::RunFailed(f) => f.cause,
            _ => None,
        })
        .collect()
}

async fn check(case: Case) {
    let name = case.name;
    let provider = ScriptedProvider::new(case.calls);
    let tool = ScriptedTool::named(
        "work",
        (0..8)
            .map(|_| ToolStep::ok(json!("ok")).after_ms(case.tool_ms))
            .collect(),
    )
    .unwrap();
    let limits = EngineLimits {
        budget: Some(case.budget),
        retry: RetryPolicy {
            jitter: 0.0,
            ..RetryPolicy::default()
        },
        ..EngineLimits::default()
    };
    let engine = Engine::builder()
        .provider("scripted", Arc::new(provider))
        .tool(Arc::new(tool))
        .clock(Arc::new(ManualClock::default()))
        .limits(limits)
        .build()
        .unwrap();
    let history = vec![
        msg("sys", Role::System, "be brief"),
        msg("u1", Role::User, &"x".repeat(300)),
        msg("a1", Role::Assistant, "ok"),
        msg("u2", Role::User, "and then?"),
        msg("a2", Role::Assistant, "fine"),
        msg("u3", Role::User, "go"),
    ];
    let mut request = RunRequest::new(
        RunId::parse("run_budget").unwrap(),
        ModelName::parse("scripted-1").unwrap(),
        history,
    );
    if case.compaction_only {
        request = request.compaction_only();
    }
    let run = engine.start(request).unwrap();
    let log = run.log().clone();
    let outcome = run.join().await;
    let events = log.retained_after(0);
    assert_lifecycle(&events);
    let counts = (
        started(&events, "model.started"),
        started(&events, "tool.started"),
    );
    assert_eq!(counts, case.started, "{name}: started scopes");
    let Some((member, spent, limit)) = case.breach else {
        assert!(
            matches!(outcome, RunOutcome::Completed { .. }),
            "{name}: {outcome:?}"
        );
        assert!(failure_causes(&events).is_empty(), "{name}");
        return;
    };
    let expected = FailureCause::Budget {
        member,
        spent,
        limit,
    };
    let RunOutcome::Failed { cause } = &outcome else {
        panic!("{name}: {outcome:?}");
    };
    assert_eq!(cause, &expected, "{name}");
    let text = format!("{}: spent {spent} of limit {limit}", member.rule());
    assert_eq!(cause.to_string(), text, "{name}");
    let causes = failure_causes(&events);
    assert_eq!(causes.len(), 2, "{name}: turn.failed and run.failed");
    for recorded in causes {
        assert_eq!(recorded.kind.as_deref(), Some("budget"), "{name}");
        assert_eq!(recorded.extra["rule"], json!(member.rule()), "{name}");
        assert_eq!(recorded.extra["spent"], json!(spent), "{name}");
        assert_eq!(recorded.extra["limit"], json!(limit), "{name}");
    }
    let last = events.last().unwrap().payload().unwrap();
    let Payload::RunFailed(failed) = last else {
        panic!("{name}: {last:?}")
    };
    assert_eq!(failed.error.as_str(), text, "{name}");
}

#[tokio::test(start_paused = true)]
async fn each_member_breach_fails_at_its_boundary_naming_spent_and_limit() {
    use BudgetMember::*;
    let cases = [
        Case {
            name: "within every limit",
            budget: budget(Some(1_000), Some(1_000), Some(5), Some(60_000)),
            calls: vec![asks(&["c1", "c2"], (100, 10)), answers((120, 5))],
            tool_ms: 10,
            compaction_only: false,
            breach: None,
            started: (2, 2),
        },
        Case {
            // The second answer call is allowed (90 < 100) and finishes; its
            // tool call is then refused before `tool.started`.
            name: "input tokens at a tool call",
            budget: budget(Some(100), None, None, None),
            calls: vec![asks(&["c1"], (90, 1)), asks(&["c2"], (90, 1))],
            tool_ms: 0,
            compaction_only: false,
            breach: Some((InputTokens, 180, 100)),
            started: (2, 1),
        },
        Case {
            // The empty completion's usage counts; the retry is refused
            // before its `model.started`.
            name: "output tokens at a retried model call",
            budget: budget(None, Some(10), None, None),
            calls: vec![empty((5, 12)), answers((5, 1))],
            tool_ms: 0,
            compaction_only: false,
            breach: Some((OutputTokens, 12, 10)),
            started: (1, 0),
        },
        Case {
            name: "output tokens at a compaction call",
            budget: budget(None, Some(10), None, None),
            calls: vec![empty((5, 10)), answers((5, 1))],
            tool_ms: 0,
            compaction_only: true,
            breach: Some((OutputTokens, 10, 10)),
            started: (1, 0),
        },
        Case {
            name: "tool calls across turns",
            budget: budget(None, None, Some(2), None),
            calls: vec![asks(&["c1", "c2"], (1, 1)), asks(&["c3"], (1, 1))],
            tool_ms: 0,
            compaction_only: false,
            breach: Some((ToolCalls, 2, 2)),
            started: (2, 2),
        },
        Case {
            name: "tool calls never spent by a model call",
            budget: budget(None, None, Some(1), None),
            calls: vec![asks(&["c1"], (1, 1)), answers((1, 1))],
            tool_ms: 0,
            compaction_only: false,
            breach: None,
            started: (2, 1),
        },
        Case {
            // Paused time: the tool's 1 500 ms are exact; the next model
            // call is refused.
            name: "wall time at the next model call",
            budget: budget(None, None, None, Some(1_000)),
            calls: vec![asks(&["c1"], (1, 1)), answers((1, 1))],
            tool_ms: 1_500,
            compaction_only: false,
            breach: Some((WallMs, 1_500, 1_000)),
            started: (1, 1),
        },
        Case {
            // A slow model call between the tools: its tool call is refused.
            name: "wall time at the next tool call",
            budget: budget(None, None, None, Some(1_000)),
            calls: vec![
                asks(&["c1"], (1, 1)),
                [vec![ScriptItem::DelayMs(500)], asks(&["c2"], (1, 1))].concat(),
            ],
            tool_ms: 600,
            compaction_only: false,
            breach: Some((WallMs, 1_100, 1_000)),
            started: (2, 1),
        },
    ];
    for case in cases {
        check(case).await;
    }
}

/// Every member's 0 is refused at `limits.budget.<member>`; so is a limit
/// past 2^53 − 1 (its breach could not be recorded); 1 and 2^53 − 1 pass.
#[test]
fn zero_and_oversized_budget_members_are_refused_by_check() {
    const MAX: u64 = (1 << 53) - 1;
    let rows = [
        (
            budget(Some(0), None, None, None),
            Some(LimitField::BudgetInputTokens),
        ),
        (
            budget(None, Some(0), None, None),
            Some(LimitField::BudgetOutputTokens),
        ),
        (
            budget(None, None, Some(0), None),
            Some(LimitField::BudgetToolCalls),
        ),
        (
            budget(None, None, None, Some(0)),
            Some(LimitField::BudgetWallMs),
        ),
        (
            budget(None, None, None, Some(MAX + 1)),
            Some(LimitField::BudgetWallMs),
        ),
        (
            budget(Some(u64::MAX), None, None, None),
            Some(LimitField::BudgetInputTokens),
        ),
        (budget(Some(1), Some(1), Some(1), Some(1)), None),
        (budget(Some(MAX), Some(MAX), Some(MAX), Some(MAX)), None),
        (Budget::default(), None),
    ];
    for (budget, field) in rows {
        let limits = EngineLimits {
            budget: Some(budget),
            ..EngineLimits::default()
        };
        let got = limits.check().err();
        assert_eq!(got.as_ref().map(LimitError::field), field, "{budget:?}");
        if let (Some(e), Some(f)) = (got, field) {
            assert!(
                e.to_string().starts_with(&format!("limits.{}", f.name())),
                "{e}"
            );
        }
    }
    let names = [
        (LimitField::BudgetInputTokens, "budget.input_tokens"),
        (LimitField::BudgetOutputTokens, "budget.output_tokens"),
        (LimitField::BudgetToolCalls, "budget.tool_calls"),
        (LimitField::BudgetWallMs, "budget.wall_ms"),
    ];
    for (field, name) in names {
        assert_eq!(field.name(), name);
    }
}

/// A run with a budget refuses to start when the budget breaks a rule.
#[tokio::test]
async fn a_request_with_a_zero_budget_does_not_start() {
    let engine = Engine::builder()
        .provider("scripted", Arc::new(ScriptedProvider::new(vec![])))
        .build()
        .unwrap();
    let request = RunRequest::new(
        RunId::parse("run_zero").unwrap(),
        ModelName::parse("scripted-1").unwrap(),
        vec![msg("u1", Role::User, "go")],
    )
    .limits(EngineLimits {
        budget: Some(budget(None, None, Some(0), None)),
        ..EngineLimits::default()
    });
    let Err(StartError::InvalidLimit(e)) = engine.start(request) else {
        panic!("started");
    };
    assert_eq!(e.field(), LimitField::BudgetToolCalls);
}

/// A child whose own budget is far bigger is still stopped by its
/// parent's: the child fails at its second tool call with the parent's
/// figures (its own 10 000 tokens never count), its cause rides on the
/// parent's `tool.failed`, and the parent's next model call is refused on
/// the tokens the child spent.
#[tokio::test(start_paused = true)]
async fn a_childs_bigger_budget_never_widens_its_parents() {
    let wide = budget(Some(10_000), Some(10_000), Some(50), None);
    let child_provider = ScriptedProvider::new(vec![
        asks(&["k1"], (10, 40)),
        asks(&["k2"], (10, 40)),
        answers((1, 1)),
    ]);
    let work = ScriptedTool::named("work", vec![ToolStep::ok(json!("ok")); 4]).unwrap();
    let spec = AgentSpec::new(ModelName::parse("scripted-1").unwrap())
        .provider(Arc::new(child_provider))
        .tool(Arc::new(work))
        .limits(EngineLimits {
            budget: Some(wide),
            ..EngineLimits::default()
        });
    let definition = ToolDefinition::new(
        ToolName::parse("helper").unwrap(),
        "delegates",
        CanonicalJson::from_value(&AgentTool::task_parameters()).unwrap(),
    )
    .unwrap();
    let parent_provider = ScriptedProvider::new(vec![
        vec![
            ScriptItem::tool_call("p1", "helper", json!({"task": "dig"})),
            ScriptItem::complete_with_usage(FinishReason::ToolCalls, 5, 5),
        ],
        answers((1, 1)),
    ]);
    let recorder = RecordingObserver::new();
    let engine = Engine::builder()
        .required_observer(Arc::new(recorder.clone()))
        .build()
        .unwrap();
    let request = RunRequest::new(
        RunId::parse("run_parent").unwrap(),
        ModelName::parse("scripted-1").unwrap(),
        vec![msg("u1", Role::User, "go")],
    )
    .provider(Arc::new(parent_provider))
    .tool(Arc::new(AgentTool::new(definition, spec)))
    .limits(EngineLimits {
        budget: Some(budget(None, Some(60), Some(3), None)),
        ..EngineLimits::default()
    });
    let outcome = engine.start(request).unwrap().join().await;
    let parent_cause = FailureCause::Budget {
        member: BudgetMember::OutputTokens,
        spent: 85,
        limit: 60,
    };
    assert!(
        matches!(&outcome, RunOutcome::Failed { cause } if *cause == parent_cause),
        "{outcome:?}"
    );
    let events = recorder.events();
    let child_failed = events
        .iter()
        .filter(|e| e.run_id().as_str() != "run_parent")
        .find_map(|e| match e.payload().unwrap() {
            Payload::RunFailed(f) => Some(f),
            _ => None,
        })
        .expect("the child failed");
    assert_eq!(
        child_failed.error.as_str(),
        "budget.output_tokens: spent 85 of limit 60"
    );
    let tool_failed = events
        .iter()
        .find_map(|e| match e.payload().unwrap() {
            Payload::ToolFailed(f) if f.call_id.as_str() == "p1" => Some(f),
            _ => None,
        })
        .expect("the parent's agent call failed");
    let sub_run = keel_eventlog::SubRunRef::from_extra(&tool_failed.extra).unwrap();
    let cause = sub_run.cause.unwrap();
    assert_eq!(cause.kind.as_deref(), Some("budget"));
    assert_eq!(cause.extra["rule"], json!("budget.output_tokens"));
    assert_eq!(cause.extra["limit"], json!(60));
}
