//! Sub-runs: agent tools start child runs whose outcome is the call's one
//! terminal; children end before their parent's terminals on every path
//! (completion, failure, the call's timeout, cancellation, a sibling's
//! failure, shutdown); the depth and count bounds fail typed.
//!
//! Every test checks the whole tree with [`check_tree`]. The engine's clock
//! ticks once per read, and every log reads it under its commit lock, so
//! the `ts` of two events of different runs orders their commits.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::type_complexity
)]

use keel_engine::*;
use keel_eventlog::{Clock, Event, Payload, SubRunRef};
use keel_message::*;
use keel_stream::{FinishReason, ProblemKind};
use keel_testkit::*;
use serde_json::json;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The limits every agent of a test tree gives its child (`None`: the
/// engine's).
type ChildLimits = Option<EngineLimits>;
use std::time::Duration;

/// A clock that moves one microsecond per read: commit order across logs.
#[derive(Debug, Default)]
struct TickingClock(AtomicU64);

impl Clock for TickingClock {
    fn now_micros(&self) -> u64 {
        ManualClock::START_2026 + self.0.fetch_add(1, Ordering::SeqCst)
    }
}

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

fn definition(name: &str) -> ToolDefinition {
    ToolDefinition::new(
        ToolName::parse(name).unwrap(),
        "delegates a task",
        CanonicalJson::from_value(&AgentTool::task_parameters()).unwrap(),
    )
    .unwrap()
}

/// What a run of a test tree does.
#[derive(Debug, Clone)]
enum Node {
    /// Answers this text.
    Answer(&'static str),
    /// Its model call fails (not retryable): the run fails.
    Fail,
    /// Its model call takes far longer than any test.
    Hang,
    /// Calls these agents in parallel (named `a0`, `a1`, … with their call
    /// timeouts), then answers `merged`.
    Delegate(Vec<(Node, Option<Duration>)>),
    /// Calls one plain tool that fails with `on_failure: EndRun`, beside
    /// these agents.
    EndRunBeside(Vec<(Node, Option<Duration>)>),
}

fn hang() -> Vec<ScriptItem> {
    vec![
        ScriptItem::delay(Duration::from_secs(600)),
        ScriptItem::text("too late"),
        ScriptItem::complete(FinishReason::Stop),
    ]
}

fn agent_calls(
    children: &[(Node, Option<Duration>)],
    limits: &ChildLimits,
) -> (Vec<ScriptItem>, Vec<Arc<dyn Tool>>) {
    let mut calls = Vec::new();
    let mut tools = Vec::new();
    for (i, (child, timeout)) in children.iter().enumerate() {
        let name = format!("a{i}");
        calls.push(ScriptItem::tool_call(
            format!("c{i}"),
            &name,
            json!({"task": format!("task {i}")}),
        ));
        tools.push(agent_tool(&name, child, *timeout, limits));
    }
    (calls, tools)
}

/// The provider script and tools of a run doing `node`.
fn plan(node: &Node, limits: &ChildLimits) -> (ScriptedProvider, Vec<Arc<dyn Tool>>) {
    match node {
        Node::Answer(text) => (ScriptedProvider::new(vec![answer(text)]), Vec::new()),
        Node::Fail => {
            let fail = ScriptItem::fail(ProblemKind::InvalidRequest, "bad request", false);
            (ScriptedProvider::new(vec![vec![fail]]), Vec::new())
        }
        Node::Hang => (ScriptedProvider::new(vec![hang()]), Vec::new()),
        Node::Delegate(children) => {
            let (mut calls, tools) = agent_calls(children, limits);
            calls.push(ScriptItem::complete(FinishReason::ToolCalls));
            (ScriptedProvider::new(vec![calls, answer("merged")]), tools)
        }
        Node::EndRunBeside(children) => {
            let (mut calls, mut tools) = agent_calls(children, limits);
            let failing =
                ScriptedTool::named("brittle", vec![ToolStep::error("broken").after_ms(50)])
                    .unwrap()
                    .with_policy(ToolPolicy {
                        on_failure: OnToolFailure::EndRun,
                        ..ToolPolicy::default()
                    });
            tools.push(Arc::new(failing));
            calls.push(ScriptItem::tool_call("c_brittle", "brittle", json!({})));
            calls.push(ScriptItem::complete(FinishReason::ToolCalls));
            (ScriptedProvider::new(vec![calls]), tools)
        }
    }
}

fn agent_tool(
    name: &str,
    node: &Node,
    timeout: Option<Duration>,
    limits: &ChildLimits,
) -> Arc<dyn Tool> {
    let (provider, tools) = plan(node, limits);
    let mut spec = AgentSpec::new(model()).provider(Arc::new(provider));
    if let Some(limits) = limits {
        spec = spec.limits(limits.clone());
    }
    for tool in tools {
        spec = spec.tool(tool);
    }
    Arc::new(
        AgentTool::new(definition(name), spec).with_policy(ToolPolicy {
            timeout,
            ..ToolPolicy::default()
        }),
    )
}

fn root_request(id: &str, node: &Node, limits: &ChildLimits) -> RunRequest {
    let (provider, tools) = plan(node, limits);
    let mut request = RunRequest::new(RunId::parse(id).unwrap(), model(), user("Plan it."))
        .provider(Arc::new(provider));
    for tool in tools {
        request = request.tool(tool);
    }
    request
}

/// An engine whose runs are all recorded, on a ticking clock.
fn engine_with(recorder: &RecordingObserver, limits: EngineLimits) -> Engine {
    Engine::builder()
        .required_observer(Arc::new(recorder.clone()))
        .clock(Arc::new(TickingClock::default()))
        .limits(limits)
        .build()
        .unwrap()
}

fn engine(recorder: &RecordingObserver) -> Engine {
    engine_with(recorder, EngineLimits::default())
}

/// Every run's events, by run.
fn by_run(events: &[Arc<Event>]) -> BTreeMap<RunId, Vec<Arc<Event>>> {
    let mut runs: BTreeMap<RunId, Vec<Arc<Event>>> = BTreeMap::new();
    for e in events {
        runs.entry(e.run_id().clone())
            .or_default()
            .push(Arc::clone(e));
    }
    runs
}

fn kind(e: &Event) -> String {
    e.kind().to_string()
}

fn is_run_terminal(e: &Event) -> bool {
    matches!(
        kind(e).as_str(),
        "run.completed" | "run.failed" | "run.cancelled"
    )
}

/// A tool terminal's call id and `sub_run` member.
fn tool_terminal(e: &Event) -> Option<(CallId, Option<SubRunRef>)> {
    let (call, extra) = match e.payload().ok()? {
        Payload::ToolCompleted(p) => (p.call_id, p.extra),
        Payload::ToolFailed(p) => (p.call_id, p.extra),
        Payload::ToolCancelled(p) => (p.call_id, p.extra),
        _ => return None,
    };
    Some((call, SubRunRef::from_extra(&extra)))
}

/// What [`check_tree`] found, for the tests' own assertions.
#[derive(Debug, Default)]
struct Tree {
    /// child run → (parent run, call id).
    parents: HashMap<RunId, (RunId, CallId)>,
    /// (parent run, call id) → the parent's tool terminal.
    terminals: HashMap<(RunId, CallId), Arc<Event>>,
    /// run → its run terminal.
    ends: HashMap<RunId, Arc<Event>>,
}

impl Tree {
    fn children_of(&self, run: &str) -> Vec<(CallId, RunId)> {
        let mut children: Vec<_> = self
            .parents
            .iter()
            .filter(|(_, (p, _))| p.as_str() == run)
            .map(|(child, (_, call))| (call.clone(), child.clone()))
            .collect();
        children.sort();
        children
    }
    fn end_kind(&self, run: &RunId) -> String {
        kind(&self.ends[run])
    }
}

/// Checks every invariant of a tree of runs, each run's events complete:
/// each log's lifecycle; every child's `parent` names a call of a stored
/// run whose `tool.sub_run` names the child and was committed before the
/// child's `run.started`; every `tool.sub_run` names a stored child
/// pointing back; the call has exactly one terminal, it names the child,
/// agrees with the child's run terminal (a failed one carrying the
/// child's cause) and was committed after it; nothing of a child is
/// committed after its parent's run terminal.
fn check_tree(events: &[Arc<Event>]) -> Tree {
    let runs = by_run(events);
    let mut tree = Tree::default();
    for (run, events) in &runs {
        assert_lifecycle(events);
        let end = events.last().unwrap();
        assert!(is_run_terminal(end), "{run} ends with {}", kind(end));
        tree.ends.insert(run.clone(), Arc::clone(end));
        if let Payload::RunStarted(started) = events[0].payload().unwrap()
            && let Some(link) = started.parent
        {
            tree.parents
                .insert(run.clone(), (link.run_id, link.call_id));
        }
        for e in events {
            if let Some((call, _)) = tool_terminal(e) {
                let previous = tree
                    .terminals
                    .insert((run.clone(), call.clone()), Arc::clone(e));
                assert!(previous.is_none(), "{run}: two terminals for {call}");
            }
        }
    }
    for (child, (parent, call)) in &tree.parents {
        let parent_events = runs
            .get(parent)
            .unwrap_or_else(|| panic!("{child}'s parent {parent} is not stored"));
        let link = parent_events
            .iter()
            .find(|e| matches!(e.payload().unwrap(), Payload::ToolSubRun(p) if &p.call_id == call))
            .unwrap_or_else(|| panic!("{parent} has no tool.sub_run for {call}"));
        let Payload::ToolSubRun(sub_run) = link.payload().unwrap() else {
            unreachable!()
        };
        assert_eq!(
            &sub_run.run_id, child,
            "{parent}'s {call} names another child"
        );
        let child_events = &runs[child];
        assert!(
            link.ts() < child_events[0].ts(),
            "{child} started before its link"
        );
        let terminal = tree
            .terminals
            .get(&(parent.clone(), call.clone()))
            .unwrap_or_else(|| panic!("{parent}'s {call} has no terminal"));
        let (_, named) = tool_terminal(terminal).unwrap();
        let named = named.unwrap_or_else(|| panic!("{parent}'s {call} terminal names no child"));
        assert_eq!(&named.run_id, child);
        let child_end = &tree.ends[child];
        let expected = match kind(child_end).as_str() {
            "run.completed" => "tool.completed",
            "run.failed" => "tool.failed",
            _ => "tool.cancelled",
        };
        assert_eq!(kind(terminal), expected, "{parent}'s {call} vs {child}");
        if let Payload::RunFailed(failed) = child_end.payload().unwrap() {
            assert_eq!(named.cause, failed.cause, "{parent}'s {call} cause");
        }
        assert!(
            child_end.ts() < terminal.ts(),
            "{child}'s terminal was committed after {parent}'s {call} terminal"
        );
        let parent_end = &tree.ends[parent];
        assert!(child_events.iter().all(|e| e.ts() < parent_end.ts()));
    }
    for (run, events) in &runs {
        for e in events {
            if let Payload::ToolSubRun(p) = e.payload().unwrap() {
                let back = tree.parents.get(&p.run_id);
                assert_eq!(
                    back,
                    Some(&(run.clone(), p.call_id.clone())),
                    "{run} links {}",
                    p.run_id
                );
            }
        }
    }
    tree
}

/// Runs `node` as run `id` to its end (cancelling it after `cancel_after`,
/// when given) and checks the tree. Nothing is left live.
async fn run_tree(
    engine: &Engine,
    recorder: &RecordingObserver,
    id: &str,
    node: &Node,
    cancel_after: Option<Duration>,
) -> (RunOutcome, Tree) {
    let run = engine.start(root_request(id, node, &None)).unwrap();
    if let Some(after) = cancel_after {
        let canceller = run.canceller();
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            canceller.cancel();
        });
    }
    let outcome = run.join().await;
    assert_eq!(engine.live_runs(), 0, "{id}: runs left live");
    let events = recorder.events();
    let tree = check_tree(&events);
    (outcome, tree)
}

#[tokio::test]
async fn three_parallel_children_end_with_exactly_their_three_terminals() {
    let recorder = RecordingObserver::new();
    let engine = engine(&recorder);
    let node = Node::Delegate(vec![
        (Node::Answer("found it"), None),
        (Node::Fail, None),
        (Node::Hang, Some(Duration::from_millis(200))),
    ]);
    let (outcome, tree) = run_tree(&engine, &recorder, "run_parent", &node, None).await;
    assert!(
        matches!(outcome, RunOutcome::Completed { .. }),
        "{outcome:?}"
    );
    let children = tree.children_of("run_parent");
    assert_eq!(children.len(), 3);
    let parent = RunId::parse("run_parent").unwrap();
    let expected = [
        ("run.completed", "tool.completed"),
        ("run.failed", "tool.failed"),
        ("run.cancelled", "tool.cancelled"),
    ];
    for ((call, child), (child_end, tool_end)) in children.iter().zip(expected) {
        assert_eq!(tree.end_kind(child), child_end, "{call}");
        let terminal = &tree.terminals[&(parent.clone(), call.clone())];
        assert_eq!(kind(terminal), tool_end, "{call}");
        match terminal.payload().unwrap() {
            Payload::ToolCompleted(p) => assert_eq!(p.output, "found it"),
            Payload::ToolFailed(p) => {
                let named = SubRunRef::from_extra(&p.extra).unwrap();
                assert!(named.cause.unwrap().operation_id.is_some());
                let prefix = format!("sub-run {child} failed: ");
                assert!(
                    p.error.as_str().starts_with(&prefix),
                    "{}",
                    p.error.as_str()
                );
                assert_eq!(p.outcome, Some(ToolOutcome::Uncertain));
                assert_eq!(p.retry, Some(ToolRetry::NotRetryable));
            }
            Payload::ToolCancelled(_) => {}
            other => panic!("{other:?}"),
        }
    }
    // The model saw each outcome as `history::rebuild` would give it.
    let RunOutcome::Completed { transcript, .. } = outcome else {
        unreachable!()
    };
    let results = transcript[2].parts();
    let texts: Vec<_> = results
        .iter()
        .map(|p| match p {
            Part::ToolResult(r) => Some((r.is_error(), r.content().to_owned())),
            _ => None,
        })
        .collect();
    assert_eq!(texts[0], Some((false, "found it".to_owned())));
    assert!(texts[1].as_ref().unwrap().0);
    assert_eq!(
        texts[2],
        Some((
            true,
            "the call was cancelled (rule tool.cancelled)".to_owned()
        ))
    );
}

fn delegate(children: Vec<Node>) -> Node {
    Node::Delegate(children.into_iter().map(|c| (c, None)).collect())
}

fn chain(depth: usize) -> Node {
    (0..depth).fold(Node::Answer("leaf"), |inner, _| delegate(vec![inner]))
}

/// A bound case: the tree, the engine's limits and the agents' own, how
/// many runs start, and each refused call's message as (start, end).
struct BoundCase {
    name: &'static str,
    engine: EngineLimits,
    children: ChildLimits,
    node: Node,
    runs: usize,
    refused: Vec<(&'static str, &'static str)>,
}

fn limits(depth: u32, count: u32) -> EngineLimits {
    EngineLimits {
        max_sub_run_depth: depth,
        max_sub_runs: count,
        ..EngineLimits::default()
    }
}

/// Runs the case's tree to completion and checks the refusals: each a
/// `tool.failed` (definitive, not retryable) naming its bound, with no
/// child and no `tool.sub_run`; every other call's child completed.
async fn check(case: BoundCase) {
    let recorder = RecordingObserver::new();
    let engine = engine_with(&recorder, case.engine.clone());
    let request = root_request("run_bounds", &case.node, &case.children);
    let outcome = engine.start(request).unwrap().join().await;
    assert!(
        matches!(outcome, RunOutcome::Completed { .. }),
        "{}: {outcome:?}",
        case.name
    );
    assert_eq!(engine.live_runs(), 0, "{}", case.name);
    let events = recorder.events();
    let tree = check_tree(&events);
    assert_eq!(tree.ends.len(), case.runs, "{}: runs", case.name);
    let mut refused: Vec<String> = Vec::new();
    for e in &events {
        if let Payload::ToolFailed(p) = e.payload().unwrap() {
            assert_eq!(SubRunRef::from_extra(&p.extra), None, "{}", case.name);
            assert_eq!(p.outcome, Some(ToolOutcome::Definitive), "{}", case.name);
            assert_eq!(p.retry, Some(ToolRetry::NotRetryable), "{}", case.name);
            refused.push(p.error.as_str().to_owned());
        }
    }
    assert_eq!(
        refused.len(),
        case.refused.len(),
        "{}: {refused:?}",
        case.name
    );
    for (message, (start, end)) in refused.iter().zip(&case.refused) {
        assert!(
            message.starts_with(start) && message.ends_with(end),
            "{}: {message}",
            case.name
        );
    }
}

#[tokio::test]
async fn depth_and_count_bounds_fail_typed_and_children_cannot_widen_them() {
    let depth_rule = "(rule limits.max_sub_run_depth)";
    let count_rule = "(rule limits.max_sub_runs)";
    let cases = vec![
        BoundCase {
            name: "three levels nest under the default depth",
            engine: EngineLimits::default(),
            children: None,
            node: chain(3),
            runs: 4,
            refused: vec![],
        },
        BoundCase {
            name: "a fourth level is refused",
            engine: EngineLimits::default(),
            children: None,
            node: chain(4),
            runs: 4,
            refused: vec![(
                "sub-run depth 4 is over limits.max_sub_run_depth 3 ",
                depth_rule,
            )],
        },
        BoundCase {
            name: "depth 0 allows no sub-run",
            engine: limits(0, 16),
            children: None,
            node: chain(1),
            runs: 1,
            refused: vec![(
                "sub-run depth 1 is over limits.max_sub_run_depth 0 ",
                depth_rule,
            )],
        },
        BoundCase {
            name: "a child's wider depth bound does not widen its parent's",
            engine: limits(1, 16),
            children: Some(limits(10, 16)),
            node: chain(2),
            runs: 2,
            refused: vec![(
                "sub-run depth 2 is over limits.max_sub_run_depth 1 ",
                depth_rule,
            )],
        },
        BoundCase {
            name: "a child's narrower depth bound holds for its own children",
            engine: limits(5, 16),
            children: Some(limits(1, 16)),
            node: chain(3),
            runs: 2,
            refused: vec![(
                "sub-run depth 2 is over limits.max_sub_run_depth 1 ",
                depth_rule,
            )],
        },
        BoundCase {
            name: "a run starts at most max_sub_runs children",
            engine: limits(3, 2),
            children: None,
            node: delegate(vec![Node::Answer("x"); 3]),
            runs: 3,
            refused: vec![(
                "sub-run 3 of run run_bounds is over limits.max_sub_runs 2 ",
                count_rule,
            )],
        },
        BoundCase {
            name: "a child's larger count bound does not widen its parent's",
            engine: limits(3, 1),
            children: Some(limits(3, 5)),
            node: delegate(vec![delegate(vec![Node::Answer("x"); 2])]),
            runs: 3,
            refused: vec![(
                "sub-run 2 of run ",
                "is over limits.max_sub_runs 1 (rule limits.max_sub_runs)",
            )],
        },
        BoundCase {
            name: "count 0 allows no sub-run",
            engine: limits(3, 0),
            children: None,
            node: chain(1),
            runs: 1,
            refused: vec![(
                "sub-run 1 of run run_bounds is over limits.max_sub_runs 0 ",
                count_rule,
            )],
        },
    ];
    for case in cases {
        check(case).await;
    }
}

#[tokio::test]
async fn an_agent_tool_called_outside_an_engine_answers_a_typed_error() {
    let tool = agent_tool("a0", &Node::Answer("x"), None, &None);
    assert!(tool.as_agent().is_some());
    let invocation = ToolInvocation {
        run_id: RunId::parse("run_1").unwrap(),
        turn: 1,
        call_id: CallId::parse("c1").unwrap(),
        arguments: CanonicalJson::parse(r#"{"task":"x"}"#).unwrap(),
    };
    let error = tool.call(invocation).await.unwrap_err();
    assert_eq!(
        error.message,
        "agent tool a0 runs only inside an engine run (rule sub_run.engine)"
    );
    assert_eq!(error.outcome, Some(ToolOutcome::Definitive));
    assert_eq!(error.retry, Some(ToolRetry::NotRetryable));
    let plain = ScriptedTool::named("plain", vec![]).unwrap();
    assert!(plain.as_agent().is_none());
}

#[tokio::test]
async fn a_call_without_a_task_fails_before_any_child_starts() {
    let recorder = RecordingObserver::new();
    let engine = engine(&recorder);
    let node = Node::Answer("x");
    let parent = ScriptedProvider::new(vec![
        vec![
            ScriptItem::tool_call("c0", "a0", json!({"topic": "x"})),
            ScriptItem::complete(FinishReason::ToolCalls),
        ],
        answer("ok"),
    ]);
    let request = RunRequest::new(RunId::parse("run_t").unwrap(), model(), user("Go."))
        .provider(Arc::new(parent))
        .tool(agent_tool("a0", &node, None, &None));
    let outcome = engine.start(request).unwrap().join().await;
    assert!(matches!(outcome, RunOutcome::Completed { .. }));
    let events = recorder.events();
    let tree = check_tree(&events);
    assert_eq!(tree.ends.len(), 1);
    let failed = events
        .iter()
        .find_map(|e| match e.payload().unwrap() {
            Payload::ToolFailed(p) => Some(p),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        failed.error.as_str(),
        "arguments at $: missing field `task` (rule tool.arguments)"
    );
}

/// A tree with a hanging grandchild, a hanging child and a child that
/// completes at once.
fn busy_tree() -> Node {
    Node::Delegate(vec![
        (delegate(vec![Node::Hang, Node::Answer("inner")]), None),
        (Node::Hang, None),
        (Node::Answer("quick"), None),
    ])
}

/// Starts `node`, cancels the root once `k` events are acknowledged (or
/// after `fallback`), and checks the tree. Returns how many events were
/// acknowledged when the cancel was sent, or `None` when the fallback
/// sent it.
async fn cancel_after_events(node: &Node, k: usize, fallback: Duration) -> Option<usize> {
    let recorder = RecordingObserver::new();
    let engine = engine(&recorder);
    let run = engine.start(root_request("run_root", node, &None)).unwrap();
    let canceller = run.canceller();
    let watcher = recorder.clone();
    let sent = tokio::spawn(async move {
        let reached = tokio::time::timeout(fallback, watcher.wait_for(k)).await;
        canceller.cancel();
        reached.ok().map(|()| watcher.len())
    });
    let outcome = run.join().await;
    assert_eq!(outcome, RunOutcome::Cancelled, "cancelled after {k} events");
    assert_eq!(engine.live_runs(), 0, "cancelled after {k} events");
    let tree = check_tree(&recorder.events());
    assert_eq!(
        tree.end_kind(&RunId::parse("run_root").unwrap()),
        "run.cancelled"
    );
    sent.await.unwrap()
}

#[tokio::test]
async fn cancelling_a_parent_at_every_point_closes_its_children_first() {
    let node = busy_tree();
    let mut k = 1;
    // Every prefix of the tree's events, until the tree only hangs.
    while cancel_after_events(&node, k, Duration::from_millis(300))
        .await
        .is_some()
    {
        k += 1;
        assert!(k < 200, "the tree never settles into hanging");
    }
    assert!(k > 10, "only {k} cancellation points");
}

#[tokio::test]
async fn a_childs_own_timeout_cancels_its_grandchildren_first() {
    let recorder = RecordingObserver::new();
    let engine = engine(&recorder);
    let node = Node::Delegate(vec![(
        delegate(vec![Node::Hang, Node::Hang]),
        Some(Duration::from_millis(200)),
    )]);
    let (outcome, tree) = run_tree(&engine, &recorder, "run_root", &node, None).await;
    assert!(
        matches!(outcome, RunOutcome::Completed { .. }),
        "{outcome:?}"
    );
    let children = tree.children_of("run_root");
    assert_eq!(children.len(), 1);
    let (_, child) = &children[0];
    assert_eq!(tree.end_kind(child), "run.cancelled");
    let grandchildren = tree.children_of(child.as_str());
    assert_eq!(grandchildren.len(), 2);
    for (_, grandchild) in grandchildren {
        assert_eq!(tree.end_kind(&grandchild), "run.cancelled");
    }
}

#[tokio::test]
async fn a_siblings_end_run_failure_closes_the_children_first() {
    let recorder = RecordingObserver::new();
    let engine = engine(&recorder);
    let node = Node::EndRunBeside(vec![(delegate(vec![Node::Hang]), None), (Node::Hang, None)]);
    let (outcome, tree) = run_tree(&engine, &recorder, "run_root", &node, None).await;
    let RunOutcome::Failed {
        cause: FailureCause::Tool { call_id, .. },
    } = outcome
    else {
        panic!("{outcome:?}")
    };
    assert_eq!(call_id.as_str(), "c_brittle");
    let root = RunId::parse("run_root").unwrap();
    for (call, child) in tree.children_of("run_root") {
        assert_eq!(tree.end_kind(&child), "run.cancelled");
        assert_eq!(
            kind(&tree.terminals[&(root.clone(), call)]),
            "tool.cancelled"
        );
    }
    assert_eq!(tree.ends.len(), 4);
}

#[tokio::test]
async fn shutdown_closes_every_tree_innermost_first() {
    let recorder = RecordingObserver::new();
    let engine = engine(&recorder);
    let mut roots = Vec::new();
    for i in 0..3 {
        let request = root_request(&format!("run_root{i}"), &busy_tree(), &None);
        roots.push(engine.start(request).unwrap());
    }
    // Every hanging run is live: 3 × (the root, a child and its
    // grandchild, another child); the quick ones are done.
    while engine.live_runs() < 12 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let report = engine.shutdown(Duration::from_secs(10)).await;
    assert!(report.runs_ended >= 12, "{report:?}");
    assert_eq!(report.runs_abandoned, 0);
    for root in roots {
        assert_eq!(root.join().await, RunOutcome::Cancelled);
    }
    assert_eq!(engine.live_runs(), 0);
    let tree = check_tree(&recorder.events());
    assert_eq!(tree.ends.len(), 18);
}

/// A tree whose every run hangs: no run ends before a shutdown.
fn hanging_tree() -> Node {
    delegate(vec![delegate(vec![Node::Hang, Node::Hang]), Node::Hang])
}

/// Starts the hanging tree under an observer that never answers its
/// `hang_on`-th offer (nor, behind it, any later one), shuts down with a
/// short deadline, and checks the tree in the logs. Returns how many runs
/// the shutdown abandoned at its deadline.
async fn shutdown_stuck_tree(hang_on: u64) -> usize {
    let engine = Engine::builder()
        .required_observer(Arc::new(FaultyObserver::new(Fault::HangOn(hang_on))))
        .clock(Arc::new(TickingClock::default()))
        .pipeline_config(keel_observers::PipelineConfig {
            required_deadline: Duration::from_secs(3600),
            ..Default::default()
        })
        .build()
        .unwrap();
    let root = engine
        .start(root_request("run_root", &hanging_tree(), &None))
        .unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    let logs: Vec<_> = engine
        .live_run_ids()
        .iter()
        .filter_map(|id| engine.log(id))
        .collect();
    let report = engine.shutdown(Duration::from_millis(600)).await;
    assert_eq!(report.runs_ended + report.runs_abandoned, logs.len());
    assert!(root.log().run_ended());
    let events: Vec<_> = logs.iter().flat_map(|l| l.retained_after(0)).collect();
    check_tree(&events);
    report.runs_abandoned
}

#[tokio::test]
async fn shutdown_past_its_deadline_keeps_children_first() {
    let mut most = 0;
    for hang_on in [2, 6, 10, 14, 18, 24] {
        most = most.max(shutdown_stuck_tree(hang_on).await);
    }
    assert!(most >= 2, "no case abandoned a parent with its child");
}

/// A plain tool that finds the run's live children, keeps their handles
/// (in `kept`, and in tasks of its own), and then never returns.
struct Grabber {
    engine: Arc<std::sync::OnceLock<Engine>>,
    kept: Arc<std::sync::Mutex<Vec<LiveRun>>>,
    definition: ToolDefinition,
}

impl Tool for Grabber {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }
    fn call(&self, invocation: ToolInvocation) -> ToolFuture {
        let engine = self.engine.get().unwrap().clone();
        let kept = Arc::clone(&self.kept);
        Box::pin(async move {
            loop {
                let children = engine.live_children(&invocation.run_id);
                if !children.is_empty() {
                    for child in children {
                        let live = engine.live_run(child.as_str()).unwrap();
                        let held = live.clone();
                        tokio::spawn(async move {
                            tokio::time::sleep(Duration::from_secs(600)).await;
                            drop(held);
                        });
                        kept.lock().unwrap().push(live);
                    }
                    break;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            std::future::pending::<()>().await;
            Ok(ToolOutput::new("never"))
        })
    }
}

#[tokio::test]
async fn a_child_cannot_outlive_its_parent_even_when_its_handle_is_kept() {
    for cancel_ms in [0, 5, 20, 60, 150] {
        let recorder = RecordingObserver::new();
        let slot = Arc::new(std::sync::OnceLock::new());
        let kept = Arc::new(std::sync::Mutex::new(Vec::new()));
        let grabber = Grabber {
            engine: Arc::clone(&slot),
            kept: Arc::clone(&kept),
            definition: ToolDefinition::new(
                ToolName::parse("grab").unwrap(),
                "keeps children",
                CanonicalJson::parse(r#"{"type":"object"}"#).unwrap(),
            )
            .unwrap(),
        };
        let engine = engine(&recorder);
        slot.set(engine.clone()).unwrap();
        let parent = ScriptedProvider::new(vec![vec![
            ScriptItem::tool_call("c0", "a0", json!({"task": "hang"})),
            ScriptItem::tool_call("c1", "a1", json!({"task": "nest"})),
            ScriptItem::tool_call("c_grab", "grab", json!({})),
            ScriptItem::complete(FinishReason::ToolCalls),
        ]]);
        let request = RunRequest::new(RunId::parse("run_p").unwrap(), model(), user("Go."))
            .provider(Arc::new(parent))
            .tool(agent_tool("a0", &Node::Hang, None, &None))
            .tool(agent_tool("a1", &delegate(vec![Node::Hang]), None, &None))
            .tool(Arc::new(grabber));
        let run = engine.start(request).unwrap();
        let parent_id = run.run_id().clone();
        tokio::time::sleep(Duration::from_millis(cancel_ms)).await;
        run.cancel();
        assert_eq!(run.join().await, RunOutcome::Cancelled);
        // The parent's task has ended: nothing it started is still live,
        // whoever holds a handle.
        assert!(engine.live_children(&parent_id).is_empty());
        assert_eq!(engine.live_runs(), 0, "cancelled after {cancel_ms} ms");
        let kept: Vec<LiveRun> = kept.lock().unwrap().clone();
        assert!(!kept.is_empty() || cancel_ms == 0, "nothing grabbed");
        for live in &kept {
            assert!(live.log().run_ended(), "{}", live.run_id());
            tokio::time::timeout(Duration::ZERO, live.ended())
                .await
                .expect("the child's task has ended");
            assert!(engine.live_run(live.run_id().as_str()).is_none());
        }
        check_tree(&recorder.events());
    }
}

/// A deterministic generator (xorshift64*), so a failing seed replays.
struct Seeded(u64);

impl Seeded {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A random tree of at most `depth` more levels: answers, failures,
/// hangs under a call timeout (so every tree ends by itself), nesting.
fn random_children(rng: &mut Seeded, depth: u32) -> Vec<(Node, Option<Duration>)> {
    (0..=rng.below(3))
        .map(|_| {
            let pick = rng.below(if depth == 0 { 3 } else { 4 });
            match pick {
                0 => (Node::Answer("done"), None),
                1 => (Node::Fail, None),
                2 => (Node::Hang, Some(Duration::from_millis(5 + rng.below(60)))),
                _ => (
                    Node::Delegate(random_children(rng, depth - 1)),
                    Some(Duration::from_millis(20 + rng.below(200))),
                ),
            }
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_parents_with_parallel_children_and_random_cancels_keep_every_invariant() {
    let seed = std::env::var("KEEL_STRESS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5EED_0037_u64);
    let mut rng = Seeded(seed);
    for round in 0..3 {
        let recorder = RecordingObserver::new();
        let engine = engine(&recorder);
        let mut runs = Vec::new();
        for i in 0..16 {
            let node = Node::Delegate(random_children(&mut rng, 2));
            let run = engine
                .start(root_request(&format!("run_{round}_{i}"), &node, &None))
                .unwrap();
            let cancel = (rng.below(3) > 0).then(|| Duration::from_millis(rng.below(80)));
            if let Some(after) = cancel {
                let canceller = run.canceller();
                tokio::spawn(async move {
                    tokio::time::sleep(after).await;
                    canceller.cancel();
                });
            }
            runs.push(run);
        }
        let parents: Vec<RunId> = runs.iter().map(|r| r.run_id().clone()).collect();
        for run in runs {
            let outcome = run.join().await;
            assert!(
                !matches!(outcome, RunOutcome::Failed { .. }),
                "seed {seed:#x}: {outcome:?}"
            );
        }
        assert_eq!(engine.live_runs(), 0, "seed {seed:#x} round {round}");
        let tree = check_tree(&recorder.events());
        for parent in &parents {
            assert!(engine.live_children(parent).is_empty());
            assert!(tree.ends.contains_key(parent));
        }
    }
}

/// A tool whose future blocks its thread: a run task that cannot see its
/// cancellation (the only way a run is still short of its terminals at a
/// shutdown deadline).
struct Blocking(ToolDefinition);

impl Tool for Blocking {
    fn definition(&self) -> &ToolDefinition {
        &self.0
    }
    fn call(&self, _invocation: ToolInvocation) -> ToolFuture {
        Box::pin(async {
            std::thread::sleep(Duration::from_millis(1500));
            Ok(ToolOutput::new("woke"))
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shutdown_past_its_deadline_closes_a_stuck_child_before_its_parent() {
    let recorder = RecordingObserver::new();
    let engine = engine(&recorder);
    let blocking = Blocking(
        ToolDefinition::new(
            ToolName::parse("block").unwrap(),
            "blocks its thread",
            CanonicalJson::parse(r#"{"type":"object"}"#).unwrap(),
        )
        .unwrap(),
    );
    let child_provider = ScriptedProvider::new(vec![vec![
        ScriptItem::tool_call("b1", "block", json!({})),
        ScriptItem::complete(FinishReason::ToolCalls),
    ]]);
    let spec = AgentSpec::new(model())
        .provider(Arc::new(child_provider))
        .tool(Arc::new(blocking));
    let parent = ScriptedProvider::new(vec![vec![
        ScriptItem::tool_call("c0", "a0", json!({"task": "block"})),
        ScriptItem::complete(FinishReason::ToolCalls),
    ]]);
    let request = RunRequest::new(RunId::parse("run_p").unwrap(), model(), user("Go."))
        .provider(Arc::new(parent))
        .tool(Arc::new(AgentTool::new(definition("a0"), spec)));
    let run = engine.start(request).unwrap();
    let parent_log = run.log().clone();
    let child_log = loop {
        let children = engine.live_children(run.run_id());
        if let Some(log) = children.first().and_then(|c| engine.log(c)) {
            break log;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    // The child is inside its blocking tool call.
    while !child_log
        .retained_after(0)
        .iter()
        .any(|e| kind(e) == "tool.started")
    {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let report = engine.shutdown(Duration::from_millis(300)).await;
    assert_eq!(report.runs_abandoned, 2, "{report:?}");
    let mut events = parent_log.retained_after(0);
    events.extend(child_log.retained_after(0));
    let tree = check_tree(&events);
    assert_eq!(tree.end_kind(child_log.run_id()), "run.cancelled");
}
