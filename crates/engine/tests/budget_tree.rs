//! Budgets over run trees (property): generated trees of agent runs (depth
//! ≤ 3, parallel children, provider retries, failing tools and children,
//! children with budgets of their own, bigger or smaller) under random
//! budgets, on paused time. For every run that has a budget, its subtree's
//! usage stays within the limit plus the largest single model call of that
//! subtree (tokens) or within the limit (tool calls); the tree's wall time
//! within the limit plus the longest single step; every budget failure
//! names `budget.<member>` with a limit of its chain and a spent figure at
//! or over it. A child's bigger budget never widens its ancestors'.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use keel_engine::*;
use keel_eventlog::{Event, Payload};
use keel_message::*;
use keel_stream::{FinishReason, ProblemKind};
use keel_testkit::*;
use proptest::prelude::*;
use serde_json::json;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// Longest scripted model delay and tool call, and the retry backoff: the
/// most any one step runs past a wall-time check.
const MAX_MODEL_MS: u64 = 40;
const MAX_TOOL_MS: u64 = 60;
const BACKOFF_MS: u64 = 10;

/// One run of the tree: its own budget and its model calls in order (the
/// last answers; the others ask for tools).
#[derive(Debug, Clone)]
struct Node {
    own: Option<Budget>,
    calls: Vec<Call>,
}

#[derive(Debug, Clone)]
struct Call {
    /// A retryable provider failure first (a pristine retry).
    retried: bool,
    usage: (u64, u64),
    delay_ms: u64,
    actions: Vec<Action>,
}

#[derive(Debug, Clone)]
enum Action {
    Tool { fails: bool, ms: u64 },
    Child(Box<Node>),
}

fn budget_strategy() -> impl Strategy<Value = Budget> {
    (
        proptest::option::of(1u64..300),
        proptest::option::of(1u64..80),
        proptest::option::of(1u64..8),
        proptest::option::of(20u64..300),
    )
        .prop_map(
            |(input_tokens, output_tokens, tool_calls, wall_ms)| Budget {
                input_tokens,
                output_tokens,
                tool_calls,
                wall_ms,
            },
        )
}

fn action_strategy(depth: u32) -> BoxedStrategy<Action> {
    let tool = (any::<bool>(), 0..=MAX_TOOL_MS)
        .prop_map(|(fails, ms)| Action::Tool {
            fails: fails && ms % 3 == 0,
            ms,
        })
        .boxed();
    if depth >= 3 {
        return tool;
    }
    prop_oneof![
        1 => tool,
        1 => node_strategy(depth + 1).prop_map(|n| Action::Child(Box::new(n))),
    ]
    .boxed()
}

fn call_strategy(depth: u32, answers: bool) -> impl Strategy<Value = Call> {
    let actions = if answers {
        Just(Vec::new()).boxed()
    } else {
        proptest::collection::vec(action_strategy(depth), 1..=3).boxed()
    };
    (
        proptest::bool::weighted(0.2),
        (0u64..80, 0u64..30),
        0..=MAX_MODEL_MS,
        actions,
    )
        .prop_map(|(retried, usage, delay_ms, actions)| Call {
            retried,
            usage,
            delay_ms,
            actions,
        })
}

fn node_strategy(depth: u32) -> BoxedStrategy<Node> {
    // The root always calls tools; deeper runs ever less.
    let tool_turns = match depth {
        0 => 1..=3,
        1 => 0..=2,
        _ => 0..=1,
    };
    let own = if depth == 0 {
        budget_strategy().prop_map(Some).boxed()
    } else {
        proptest::option::weighted(0.4, budget_strategy()).boxed()
    };
    (
        own,
        proptest::collection::vec(call_strategy(depth, false), tool_turns),
        call_strategy(depth, true),
    )
        .prop_map(|(own, mut calls, last)| {
            calls.push(last);
            Node { own, calls }
        })
        .boxed()
}

fn call_id(call: usize, action: usize) -> String {
    format!("c{call}_{action}")
}

fn agent_name(call: usize, action: usize) -> String {
    format!("agent_{call}_{action}")
}

/// The provider's calls for `node`: a failure before each retried call.
fn script(node: &Node) -> Vec<Vec<ScriptItem>> {
    let mut calls = Vec::new();
    for (i, call) in node.calls.iter().enumerate() {
        if call.retried {
            calls.push(vec![ScriptItem::fail(
                ProblemKind::RateLimited,
                "busy",
                true,
            )]);
        }
        let mut items = vec![ScriptItem::DelayMs(call.delay_ms)];
        for (j, action) in call.actions.iter().enumerate() {
            let (tool, args) = match action {
                Action::Tool { fails, ms } => {
                    ("work".to_owned(), json!({"fails": fails, "ms": ms}))
                }
                Action::Child(_) => (agent_name(i, j), json!({"task": "go"})),
            };
            items.push(ScriptItem::tool_call(call_id(i, j), &tool, args));
        }
        let finish = if call.actions.is_empty() {
            items.insert(1, ScriptItem::text("done"));
            FinishReason::Stop
        } else {
            FinishReason::ToolCalls
        };
        items.push(ScriptItem::complete_with_usage(
            finish,
            call.usage.0,
            call.usage.1,
        ));
        calls.push(items);
    }
    calls
}

/// A tool that sleeps `ms` then answers, or fails when asked to.
struct Work(ToolDefinition);

impl Tool for Work {
    fn definition(&self) -> &ToolDefinition {
        &self.0
    }
    fn call(&self, invocation: ToolInvocation) -> ToolFuture {
        let args = invocation.arguments.to_value();
        Box::pin(async move {
            let ms = args["ms"].as_u64().unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            if args["fails"].as_bool().unwrap_or(false) {
                return Err(ToolError::new("work failed"));
            }
            Ok(ToolOutput::new("worked"))
        })
    }
}

fn definition(name: &str, parameters: serde_json::Value) -> ToolDefinition {
    ToolDefinition::new(
        ToolName::parse(name).unwrap(),
        "a tool",
        CanonicalJson::from_value(&parameters).unwrap(),
    )
    .unwrap()
}

fn work() -> Arc<dyn Tool> {
    Arc::new(Work(definition("work", json!({"type": "object"}))))
}

fn limits(own: Option<Budget>) -> EngineLimits {
    EngineLimits {
        budget: own,
        retry: RetryPolicy {
            initial_backoff: Duration::from_millis(BACKOFF_MS),
            max_backoff: Duration::from_millis(BACKOFF_MS),
            jitter: 0.0,
            ..RetryPolicy::default()
        },
        ..EngineLimits::default()
    }
}

fn model() -> ModelName {
    ModelName::parse("scripted-1").unwrap()
}

/// The tools of a run of `node`: `work` and one agent tool per child.
fn tools_of(node: &Node) -> Vec<Arc<dyn Tool>> {
    let mut tools = vec![work()];
    for (i, call) in node.calls.iter().enumerate() {
        for (j, action) in call.actions.iter().enumerate() {
            if let Action::Child(child) = action {
                let mut spec = AgentSpec::new(model())
                    .provider(Arc::new(ScriptedProvider::new(script(child))))
                    .limits(limits(child.own));
                for tool in tools_of(child) {
                    spec = spec.tool(tool);
                }
                let definition = definition(&agent_name(i, j), AgentTool::task_parameters());
                tools.push(Arc::new(AgentTool::new(definition, spec)));
            }
        }
    }
    tools
}

/// One run as its log shows it.
#[derive(Default)]
struct RunSeen {
    parent: Option<(RunId, String)>,
    usage: (u64, u64),
    /// The largest single call of the run (input, output).
    largest: (u64, u64),
    tool_calls: u64,
    budget_failure: Option<keel_eventlog::Cause>,
}

fn seen(events: &[Arc<Event>]) -> HashMap<RunId, RunSeen> {
    let mut runs: HashMap<RunId, RunSeen> = HashMap::new();
    for event in events {
        let run = runs.entry(event.run_id().clone()).or_default();
        match event.payload().unwrap() {
            Payload::RunStarted(p) => {
                run.parent = p.parent.map(|l| (l.run_id, l.call_id.to_string()));
            }
            Payload::ModelCompleted(p) => {
                let u = p.usage.unwrap();
                let (i, o) = (u.input_tokens(), u.output_tokens());
                run.usage = (run.usage.0 + i, run.usage.1 + o);
                run.largest = (run.largest.0.max(i), run.largest.1.max(o));
            }
            Payload::ToolStarted(_) => run.tool_calls += 1,
            Payload::RunFailed(p) => {
                run.budget_failure = p.cause.filter(|c| c.kind.as_deref() == Some("budget"));
            }
            _ => {}
        }
    }
    runs
}

/// The spec of every run: the root's, then each child's by its call id.
fn specs<'a>(
    root_id: &RunId,
    root: &'a Node,
    runs: &HashMap<RunId, RunSeen>,
) -> HashMap<RunId, &'a Node> {
    let mut specs = HashMap::from([(root_id.clone(), root)]);
    loop {
        let before = specs.len();
        for (id, run) in runs {
            let Some((parent, call)) = &run.parent else {
                continue;
            };
            if specs.contains_key(id) {
                continue;
            }
            let Some(parent_spec) = specs.get(parent).copied() else {
                continue;
            };
            let (i, j) = call[1..].split_once('_').unwrap();
            let action = &parent_spec.calls[i.parse::<usize>().unwrap()].actions
                [j.parse::<usize>().unwrap()];
            let Action::Child(child) = action else {
                panic!("{call} is no agent call")
            };
            specs.insert(id.clone(), child);
        }
        if specs.len() == before {
            return specs;
        }
    }
}

fn ancestors(id: &RunId, runs: &HashMap<RunId, RunSeen>) -> Vec<RunId> {
    let mut chain = vec![id.clone()];
    while let Some((parent, _)) = &runs[chain.last().unwrap()].parent {
        chain.push(parent.clone());
    }
    chain
}

fn check_tree(root: &Node, root_id: &RunId, events: &[Arc<Event>], elapsed: Option<Duration>) {
    let runs = seen(events);
    let specs = specs(root_id, root, &runs);
    assert_eq!(specs.len(), runs.len(), "every run maps to its spec");
    // Each budgeted run's subtree: usage within limit + its largest call.
    for (id, spec) in &specs {
        let Some(budget) = spec.own else { continue };
        let subtree: Vec<&RunSeen> = runs
            .iter()
            .filter(|(r, _)| ancestors(r, &runs).contains(id))
            .map(|(_, run)| run)
            .collect();
        let input: u64 = subtree.iter().map(|r| r.usage.0).sum();
        let output: u64 = subtree.iter().map(|r| r.usage.1).sum();
        let tools: u64 = subtree.iter().map(|r| r.tool_calls).sum();
        let largest_in = subtree.iter().map(|r| r.largest.0).max().unwrap_or(0);
        let largest_out = subtree.iter().map(|r| r.largest.1).max().unwrap_or(0);
        if let Some(limit) = budget.input_tokens {
            assert!(
                input <= limit + largest_in,
                "{id}: input {input} > {limit} + {largest_in}"
            );
        }
        if let Some(limit) = budget.output_tokens {
            assert!(
                output <= limit + largest_out,
                "{id}: output {output} > {limit} + {largest_out}"
            );
        }
        if let Some(limit) = budget.tool_calls {
            assert!(tools <= limit, "{id}: {tools} tool calls > {limit}");
        }
    }
    if let (Some(wall), Some(elapsed)) = (root.own.and_then(|b| b.wall_ms), elapsed) {
        let slack = MAX_MODEL_MS + MAX_TOOL_MS + BACKOFF_MS;
        let ms = elapsed.as_millis() as u64;
        assert!(
            ms <= wall + slack,
            "tree ran {ms} ms, wall {wall} + {slack}"
        );
    }
    // Every budget failure names a member of its chain's budgets.
    for (id, run) in &runs {
        let Some(cause) = &run.budget_failure else {
            continue;
        };
        let rule = cause.extra["rule"].as_str().unwrap();
        let member = BudgetMember::ALL
            .into_iter()
            .find(|m| m.rule() == rule)
            .unwrap_or_else(|| panic!("{id}: unknown rule {rule}"));
        let spent = cause.extra["spent"].as_u64().unwrap();
        let limit = cause.extra["limit"].as_u64().unwrap();
        assert!(spent >= limit, "{id}: {rule} spent {spent} < limit {limit}");
        let limits: Vec<u64> = ancestors(id, &runs)
            .iter()
            .filter_map(|r| specs[r].own.and_then(|b| b.limit(member)))
            .collect();
        assert!(
            limits.contains(&limit),
            "{id}: {rule} limit {limit} not in {limits:?}"
        );
    }
}

/// Where a tree runs: one thread on paused time (deterministic, and the
/// wall-time bound is exact), or two worker threads on real time (children
/// truly in parallel: the stress run; no wall bound, timing is the host's).
#[derive(Clone, Copy, PartialEq)]
enum Runtime {
    Paused,
    Threads,
}

fn run_tree(root: Node, runtime: Runtime) {
    let rt = match runtime {
        Runtime::Paused => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build(),
        Runtime::Threads => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build(),
    }
    .unwrap();
    rt.block_on(async {
        let recorder = RecordingObserver::new();
        let engine = Engine::builder()
            .required_observer(Arc::new(recorder.clone()))
            .clock(Arc::new(ManualClock::default()))
            .build()
            .unwrap();
        let root_id = RunId::parse("run_root").unwrap();
        let user = Message::text(MessageId::parse("u1").unwrap(), Role::User, "go").unwrap();
        let mut request = RunRequest::new(root_id.clone(), model(), vec![user])
            .provider(Arc::new(ScriptedProvider::new(script(&root))))
            .limits(limits(root.own));
        for tool in tools_of(&root) {
            request = request.tool(tool);
        }
        let started = tokio::time::Instant::now();
        let outcome = engine.start(request).unwrap().join().await;
        let elapsed = started.elapsed();
        engine.shutdown(Duration::from_secs(5)).await;
        let events = recorder.events();
        for run in seen(&events).keys() {
            assert_lifecycle(&recorder.events_for(run));
        }
        if let RunOutcome::Failed {
            cause:
                FailureCause::Budget {
                    member,
                    spent,
                    limit,
                },
        } = &outcome
        {
            assert!(spent >= limit || *member == BudgetMember::ToolCalls);
        }
        let elapsed = (runtime == Runtime::Paused).then_some(elapsed);
        check_tree(&root, &root_id, &events, elapsed);
    });
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn budgets_hold_over_generated_trees(root in node_strategy(0)) {
        run_tree(root, Runtime::Paused);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// The same trees on two worker threads: parallel children contend for
    /// the model gate and the tool-call reservations for real.
    #[test]
    fn budgets_hold_with_children_on_parallel_threads(root in node_strategy(0)) {
        run_tree(root, Runtime::Threads);
    }
}
