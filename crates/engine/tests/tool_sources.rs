//! Tool sources and tool outputs: the turn's tool set (fixed tools, then
//! each source's, a taken name skipped) is what the model request lists
//! and what the turn's calls resolve against; `keel.tools_changed`
//! records each source's change; a panicking or hanging source
//! contributes nothing; every source is closed once, however the run
//! ends; a tool's cut is recorded in `tool.completed`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::type_complexity
)]

mod common;

use common::{call, calls, done};
use keel_engine::*;
use keel_eventlog::{Event, Payload, RunLog};
use keel_message::*;
use keel_stream::ProblemKind;
use keel_testkit::*;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

// ---- a scripted tool source ----

/// One answer of [`TestSource::tools`].
#[derive(Clone)]
enum Answer {
    List(Vec<Arc<dyn Tool>>),
    /// `tools` itself panics.
    PanicSync,
    /// The future panics while polled.
    PanicPolled,
    /// Sleeps for `HANG`, then gives the list: what a missing timeout
    /// would let through.
    Hang(Vec<Arc<dyn Tool>>),
}

/// A source answering each `tools` with its next answer; once they are
/// used up it repeats its last list. It counts `close` and notes whether
/// the run's terminal was in the log when it was closed.
struct TestSource {
    name: String,
    answers: Mutex<VecDeque<Answer>>,
    last: Mutex<Vec<Arc<dyn Tool>>>,
    close_sleeps: Option<Duration>,
    closes: AtomicUsize,
    log: OnceLock<RunLog>,
    closed_after_terminal: Mutex<Vec<bool>>,
}

impl TestSource {
    fn new(name: &str, answers: Vec<Answer>) -> Arc<TestSource> {
        Arc::new(TestSource {
            name: name.to_owned(),
            answers: Mutex::new(answers.into()),
            last: Mutex::new(Vec::new()),
            close_sleeps: None,
            closes: AtomicUsize::new(0),
            log: OnceLock::new(),
            closed_after_terminal: Mutex::new(Vec::new()),
        })
    }
    fn lists(name: &str, lists: Vec<Vec<Arc<dyn Tool>>>) -> Arc<TestSource> {
        TestSource::new(name, lists.into_iter().map(Answer::List).collect())
    }
    fn closes(&self) -> usize {
        self.closes.load(Ordering::SeqCst)
    }
}

impl ToolSource for TestSource {
    fn name(&self) -> &str {
        &self.name
    }
    fn tools(&self) -> ToolListFuture {
        let answer = self.answers.lock().unwrap().pop_front();
        let answer = answer.unwrap_or_else(|| Answer::List(self.last.lock().unwrap().clone()));
        match answer {
            Answer::List(list) => {
                *self.last.lock().unwrap() = list.clone();
                Box::pin(async move { list })
            }
            Answer::PanicSync => panic!("source tools"),
            Answer::PanicPolled => Box::pin(async { panic!("source tools future") }),
            Answer::Hang(list) => Box::pin(async move {
                tokio::time::sleep(HANG).await;
                list
            }),
        }
    }
    fn close(&self) -> CloseFuture {
        self.closes.fetch_add(1, Ordering::SeqCst);
        let ended = self.log.get().is_some_and(RunLog::run_ended);
        self.closed_after_terminal.lock().unwrap().push(ended);
        let sleep = self.close_sleeps;
        Box::pin(async move {
            if let Some(d) = sleep {
                tokio::time::sleep(d).await;
            }
        })
    }
}

// ---- helpers ----

fn request(id: &str) -> RunRequest {
    common::request(id).provider_named("scripted")
}

/// `"name"` (description `d`) or `"name:description"`.
fn definition(spec: &str) -> ToolDefinition {
    let (name, description) = spec.split_once(':').unwrap_or((spec, "d"));
    ToolDefinition::new(
        ToolName::parse(name).unwrap(),
        description,
        CanonicalJson::parse(r#"{"type":"object"}"#).unwrap(),
    )
    .unwrap()
}

/// A source tool answering `steps`.
fn tool(spec: &str, steps: Vec<ToolStep>) -> Arc<dyn Tool> {
    Arc::new(ScriptedTool::new(definition(spec), steps))
}

fn listed(specs: &[&str]) -> Vec<Arc<dyn Tool>> {
    specs.iter().map(|s| tool(s, vec![])).collect()
}

/// A definition as [`definition`] spells it.
fn spec(d: &ToolDefinition) -> String {
    match d.description() {
        "d" => d.name().to_string(),
        other => format!("{}:{other}", d.name()),
    }
}

/// The fixed tool every run has (description "scripted tool").
fn weather(turns: usize) -> Arc<ScriptedTool> {
    let steps = (0..turns).map(|_| ToolStep::ok(json!("3 °C"))).collect();
    Arc::new(ScriptedTool::named("get_weather", steps).unwrap())
}

const WEATHER: &str = "get_weather:scripted tool";

fn engine(provider: ScriptedProvider) -> EngineBuilder {
    Engine::builder()
        .provider("scripted", Arc::new(provider))
        .clock(Arc::new(ManualClock::default()))
}

/// Runs `request` to its end; the log passes the lifecycle check.
async fn run(engine: &Engine, request: RunRequest) -> (RunOutcome, Vec<Arc<Event>>) {
    let handle = engine.start(request).unwrap();
    let log = handle.log().clone();
    let outcome = handle.join().await;
    let events = log.retained_after(0);
    assert_lifecycle(&events);
    (outcome, events)
}

fn changes(events: &[Arc<Event>]) -> Vec<Value> {
    let kinds: Vec<String> = events.iter().map(|e| e.kind().to_string()).collect();
    // Every record sits between its turn's start and its first model call.
    for (i, kind) in kinds.iter().enumerate() {
        if kind == "keel.tools_changed" {
            let before = kinds[..i].iter().rev().find(|k| *k != "keel.tools_changed");
            assert_eq!(
                before.map(String::as_str),
                Some("turn.started"),
                "{kinds:?}"
            );
            let after = kinds[i..].iter().find(|k| *k != "keel.tools_changed");
            assert_eq!(
                after.map(String::as_str),
                Some("model.started"),
                "{kinds:?}"
            );
        }
    }
    events
        .iter()
        .filter(|e| e.kind().to_string() == "keel.tools_changed")
        .map(|e| serde_json::from_str(e.payload_json()).unwrap())
        .collect()
}

fn record(turn: u64, source: &str, arrays: [&[&str]; 4]) -> Value {
    let [added, removed, changed, skipped] = arrays;
    json!({"turn": turn, "source": source, "added": added, "removed": removed,
           "changed": changed, "skipped": skipped})
}

fn first(events: &[Arc<Event>], kind: &str, call_id: &str) -> Payload {
    let found = events.iter().find(|e| {
        e.kind().to_string() == kind
            && serde_json::from_str::<Value>(e.payload_json()).unwrap()["call_id"] == call_id
    });
    found
        .unwrap_or_else(|| panic!("no {kind} for {call_id}"))
        .payload()
        .unwrap()
}

// ---- the turn's tool set and its change records ----

struct ChangeCase {
    name: &'static str,
    /// Each source's name and its list turn by turn (`"name"` or
    /// `"name:description"`); every source has one list per turn.
    sources: Vec<(&'static str, Vec<Vec<&'static str>>)>,
    /// Every `keel.tools_changed` payload, in log order.
    records: Vec<Value>,
    /// Each turn's model request, as tool specs in the order listed.
    requests: Vec<Vec<&'static str>>,
}

fn change_cases() -> Vec<ChangeCase> {
    let none: &[&str] = &[];
    vec![
        ChangeCase {
            name: "turn 1 is compared with nothing; an unchanged list records nothing",
            sources: vec![("mcp:files", vec![vec!["b", "a"], vec!["b", "a"]])],
            records: vec![record(1, "mcp:files", [&["a", "b"], none, none, none])],
            requests: vec![vec![WEATHER, "b", "a"], vec![WEATHER, "b", "a"]],
        },
        ChangeCase {
            name: "added, removed and changed, each in name order",
            sources: vec![("s", vec![vec!["c", "a", "b"], vec!["d", "a:other", "c"]])],
            records: vec![
                record(1, "s", [&["a", "b", "c"], none, none, none]),
                record(2, "s", [&["d"], &["b"], &["a"], none]),
            ],
            requests: vec![
                vec![WEATHER, "c", "a", "b"],
                vec![WEATHER, "d", "a:other", "c"],
            ],
        },
        ChangeCase {
            name: "a name a fixed tool or an earlier source took is skipped",
            sources: vec![
                ("s1", vec![vec!["x:one"], vec!["x:one"]]),
                ("s2", vec![vec!["get_weather", "x:two", "y"]; 2]),
            ],
            records: vec![
                record(1, "s1", [&["x"], none, none, none]),
                record(
                    1,
                    "s2",
                    [
                        &["get_weather", "x", "y"],
                        none,
                        none,
                        &["get_weather", "x"],
                    ],
                ),
            ],
            requests: vec![vec![WEATHER, "x:one", "y"]; 2],
        },
        ChangeCase {
            name: "a change of what is skipped alone is recorded",
            sources: vec![
                ("s1", vec![vec![], vec!["y:one"]]),
                ("s2", vec![vec!["y:two"], vec!["y:two"]]),
            ],
            records: vec![
                record(1, "s2", [&["y"], none, none, none]),
                record(2, "s1", [&["y"], none, none, none]),
                record(2, "s2", [none, none, none, &["y"]]),
            ],
            requests: vec![vec![WEATHER, "y:two"], vec![WEATHER, "y:one"]],
        },
        ChangeCase {
            name: "a name a source repeats is skipped the second time",
            sources: vec![("s", vec![vec!["a:first", "a:second"]])],
            records: vec![record(1, "s", [&["a"], none, none, &["a"]])],
            requests: vec![vec![WEATHER, "a:first"]],
        },
        ChangeCase {
            name: "an empty source records nothing",
            sources: vec![("s", vec![vec![], vec![]])],
            records: vec![],
            requests: vec![vec![WEATHER], vec![WEATHER]],
        },
    ]
}

/// Every turn but the last calls the fixed tool; the last answers.
#[tokio::test]
async fn each_turn_lists_its_tool_set_and_records_what_each_source_changed() {
    for case in change_cases() {
        let turns = case.requests.len();
        let mut script: Vec<_> = (1..turns)
            .map(|t| calls(vec![call(&format!("c{t}"), "get_weather")]))
            .collect();
        script.push(done());
        let provider = ScriptedProvider::new(script).recording_requests();
        let requests = provider.handle();
        let engine = engine(provider).tool(weather(turns)).build().unwrap();
        let mut req = request("run_changes");
        for (name, lists) in &case.sources {
            let lists = lists.iter().map(|specs| listed(specs)).collect();
            req = req.tool_source(TestSource::lists(name, lists));
        }
        let (outcome, events) = run(&engine, req).await;
        assert!(
            matches!(outcome, RunOutcome::Completed { .. }),
            "{}: {outcome:?}",
            case.name
        );
        assert_eq!(changes(&events), case.records, "{}", case.name);
        let seen: Vec<Vec<String>> = requests
            .requests()
            .iter()
            .map(|r| r.tools().iter().map(spec).collect())
            .collect();
        assert_eq!(seen, case.requests, "{}", case.name);
    }
}

/// A call is resolved against its own turn's set: a tool the source
/// added runs, one it removed is unknown.
#[tokio::test]
async fn calls_resolve_against_their_turns_set() {
    let alpha = tool("alpha", vec![ToolStep::ok(json!("A"))]);
    let beta = tool("beta", vec![ToolStep::ok(json!("B"))]);
    let source = TestSource::lists("s", vec![vec![alpha], vec![beta]]);
    let provider = ScriptedProvider::new(vec![
        calls(vec![call("c1", "alpha")]),
        calls(vec![call("c2", "alpha"), call("c3", "beta")]),
        done(),
    ]);
    let engine = engine(provider).build().unwrap();
    let (outcome, events) = run(&engine, request("run_resolve").tool_source(source)).await;
    assert!(
        matches!(outcome, RunOutcome::Completed { .. }),
        "{outcome:?}"
    );
    let Payload::ToolCompleted(c1) = first(&events, "tool.completed", "c1") else {
        panic!()
    };
    assert_eq!((c1.turn, c1.output.as_str()), (1, "A"));
    let Payload::ToolFailed(c2) = first(&events, "tool.failed", "c2") else {
        panic!()
    };
    assert_eq!(c2.error.as_str(), "unknown tool alpha");
    let Payload::ToolCompleted(c3) = first(&events, "tool.completed", "c3") else {
        panic!()
    };
    assert_eq!((c3.turn, c3.output.as_str()), (2, "B"));
}

/// Each array holds at most 128 names; `omitted` counts the rest, for
/// the arrays that were cut only.
#[tokio::test]
async fn a_record_keeps_128_names_per_array_and_counts_the_rest() {
    let names: Vec<String> = (0..130).map(|i| format!("t{i:03}")).collect();
    let specs: Vec<&str> = names.iter().map(String::as_str).collect();
    let source = TestSource::lists("s", vec![listed(&specs), vec![]]);
    let provider = ScriptedProvider::new(vec![calls(vec![call("c1", "get_weather")]), done()]);
    let engine = engine(provider)
        .tool(weather(1))
        .message_limits(Limits {
            tools_per_request: 256,
            ..Limits::default()
        })
        .build()
        .unwrap();
    let (_, events) = run(&engine, request("run_many").tool_source(source)).await;
    let records = changes(&events);
    let kept = &specs[..128];
    let none: &[&str] = &[];
    let mut added = record(1, "s", [kept, none, none, none]);
    added["omitted"] = json!({"added": 2});
    let mut removed = record(2, "s", [none, kept, none, none]);
    removed["omitted"] = json!({"removed": 2});
    assert_eq!(records, [added, removed]);
}

/// A record the log refuses as too large is recorded with its names left
/// out and counted; the run goes on.
#[tokio::test]
async fn a_record_over_the_event_bound_keeps_its_counts() {
    let names: Vec<String> = (0..100).map(|i| format!("{:a<60}{i:03}", "t")).collect();
    let specs: Vec<&str> = names.iter().map(String::as_str).collect();
    let source = TestSource::lists("s", vec![listed(&specs)]);
    let engine = engine(ScriptedProvider::new(vec![done()]))
        .log_config(keel_eventlog::LogConfig {
            max_event_bytes: 4096,
            ..keel_eventlog::LogConfig::default()
        })
        .build()
        .unwrap();
    let (outcome, events) = run(&engine, request("run_big").tool_source(source)).await;
    assert!(
        matches!(outcome, RunOutcome::Completed { .. }),
        "{outcome:?}"
    );
    let none: &[&str] = &[];
    let mut compact = record(1, "s", [none, none, none, none]);
    compact["omitted"] = json!({"added": 100});
    assert_eq!(changes(&events), [compact]);
}

/// A source that panics (in `tools` or its future) or takes longer than
/// `tool_call_timeout` contributes nothing to that turn; the run goes
/// on, and its next answer counts again.
#[tokio::test(start_paused = true)]
async fn a_panicking_or_hanging_source_contributes_nothing() {
    let sources = [
        TestSource::new(
            "panics",
            vec![Answer::PanicSync, Answer::List(listed(&["p"]))],
        ),
        TestSource::new(
            "polled",
            vec![Answer::PanicPolled, Answer::List(listed(&["q"]))],
        ),
        TestSource::new(
            "hangs",
            vec![
                Answer::Hang(listed(&["late"])),
                Answer::List(listed(&["h"])),
            ],
        ),
    ];
    let provider = ScriptedProvider::new(vec![calls(vec![call("c1", "get_weather")]), done()])
        .recording_requests();
    let requests = provider.handle();
    let limits = EngineLimits {
        tool_call_timeout: Duration::from_secs(1),
        ..EngineLimits::default()
    };
    let engine = engine(provider)
        .tool(weather(1))
        .limits(limits)
        .build()
        .unwrap();
    let mut req = request("run_faulty");
    for source in &sources {
        req = req.tool_source(Arc::clone(source) as Arc<dyn ToolSource>);
    }
    let (outcome, events) = run(&engine, req).await;
    assert!(
        matches!(outcome, RunOutcome::Completed { .. }),
        "{outcome:?}"
    );
    let seen: Vec<Vec<String>> = requests
        .requests()
        .iter()
        .map(|r| r.tools().iter().map(spec).collect())
        .collect();
    assert_eq!(seen, [vec![WEATHER], vec![WEATHER, "p", "q", "h"]]);
    let none: &[&str] = &[];
    assert_eq!(
        changes(&events),
        [
            record(2, "panics", [&["p"], none, none, none]),
            record(2, "polled", [&["q"], none, none, none]),
            record(2, "hangs", [&["h"], none, none, none]),
        ]
    );
    assert!(sources.iter().all(|s| s.closes() == 1));
}

// ---- closing ----

/// A tool whose `policy` panics: the run task's own panic guard fails the
/// run (`policy` is read outside the tool's guard).
struct PolicyPanics(ToolDefinition);

impl Tool for PolicyPanics {
    fn definition(&self) -> &ToolDefinition {
        &self.0
    }
    fn policy(&self) -> ToolPolicy {
        panic!("policy")
    }
    fn call(&self, _invocation: ToolInvocation) -> ToolFuture {
        Box::pin(async { Ok("never".into()) })
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Ending {
    Completed,
    Failed,
    Cancelled,
    Panicked,
}

/// Every source is closed exactly once, after the run's terminal is
/// committed, however the run ends.
#[tokio::test(start_paused = true)]
async fn every_source_is_closed_once_after_the_terminal_whatever_the_ending() {
    for ending in [
        Ending::Completed,
        Ending::Failed,
        Ending::Cancelled,
        Ending::Panicked,
    ] {
        let script = match ending {
            Ending::Completed => vec![done()],
            Ending::Failed => vec![vec![ScriptItem::fail(ProblemKind::Auth, "no", false)]],
            Ending::Cancelled => vec![vec![ScriptItem::delay(Duration::from_secs(3600))]],
            Ending::Panicked => vec![calls(vec![call("c1", "boom")])],
        };
        let provider = ScriptedProvider::new(script);
        let started = provider.handle();
        let engine = engine(provider).build().unwrap();
        let boom: Arc<dyn Tool> = Arc::new(PolicyPanics(definition("boom")));
        let sources = [
            TestSource::lists("a", vec![vec![boom]]),
            TestSource::lists("b", vec![]),
        ];
        let mut req = request("run_close");
        for source in &sources {
            req = req.tool_source(Arc::clone(source) as Arc<dyn ToolSource>);
        }
        let handle = engine.start(req).unwrap();
        let log = handle.log().clone();
        for source in &sources {
            source.log.set(log.clone()).ok().unwrap();
        }
        if ending == Ending::Cancelled {
            started.wait_started(1).await;
            assert!(sources.iter().all(|s| s.closes() == 0), "closed mid-run");
            handle.cancel();
        }
        let outcome = handle.join().await;
        assert_lifecycle(&log.retained_after(0));
        match ending {
            Ending::Completed => assert!(matches!(outcome, RunOutcome::Completed { .. })),
            Ending::Failed => assert!(matches!(outcome, RunOutcome::Failed { .. })),
            Ending::Cancelled => assert_eq!(outcome, RunOutcome::Cancelled),
            Ending::Panicked => assert!(
                matches!(
                    outcome,
                    RunOutcome::Failed {
                        cause: FailureCause::Internal(_)
                    }
                ),
                "{outcome:?}"
            ),
        }
        for source in &sources {
            assert_eq!(source.closes(), 1, "{ending:?} {}", source.name);
            let after = source.closed_after_terminal.lock().unwrap().clone();
            assert_eq!(after, [true], "{ending:?} {}", source.name);
        }
    }
}

/// A close that does not finish is abandoned at `closing_deadline`.
#[tokio::test(start_paused = true)]
async fn a_hanging_close_is_bounded_by_the_closing_deadline() {
    let source = Arc::new(TestSource {
        close_sleeps: Some(HANG),
        ..Arc::into_inner(TestSource::lists("s", vec![])).unwrap()
    });
    let engine = engine(ScriptedProvider::new(vec![done()])).build().unwrap();
    let t0 = tokio::time::Instant::now();
    let (outcome, _) = run(
        &engine,
        request("run_slow_close").tool_source(source.clone()),
    )
    .await;
    assert!(matches!(outcome, RunOutcome::Completed { .. }));
    assert_eq!(t0.elapsed(), EngineLimits::default().closing_deadline);
    assert_eq!(source.closes(), 1);
}

// ---- approval ----

/// A source tool that needs approval, in a run with no interaction
/// handler, is not run: its call fails (definitive, not retryable) and is
/// fed back whatever its policy says; with a handler it is asked for.
#[tokio::test]
async fn a_source_tool_needing_approval_without_a_handler_fails_its_call() {
    for (on_failure, handler) in [
        (OnToolFailure::FeedBack, false),
        (OnToolFailure::EndRun, false),
        (OnToolFailure::FeedBack, true),
    ] {
        let guarded = ScriptedTool::new(definition("rm"), vec![ToolStep::ok(json!("gone"))])
            .with_policy(ToolPolicy {
                on_failure,
                requires_approval: true,
                timeout: None,
                idempotent: false,
            });
        let invoked = guarded.handle();
        let source = TestSource::lists("s", vec![vec![Arc::new(guarded) as Arc<dyn Tool>]]);
        let provider = ScriptedProvider::new(vec![calls(vec![call("c1", "rm")]), done()]);
        let mut builder = engine(provider);
        if handler {
            builder = builder.interaction_handler(Arc::new(ScriptedInteractions::always(
                InteractionStep::approve(),
            )));
        }
        let engine = builder.build().unwrap();
        let (outcome, events) = run(&engine, request("run_approval").tool_source(source)).await;
        let row = format!("{on_failure:?} handler={handler}");
        assert!(
            matches!(outcome, RunOutcome::Completed { .. }),
            "{row}: {outcome:?}"
        );
        if handler {
            assert_eq!(invoked.calls().len(), 1, "{row}");
            assert!(matches!(
                first(&events, "tool.completed", "c1"),
                Payload::ToolCompleted(_)
            ));
            continue;
        }
        assert_eq!(invoked.calls().len(), 0, "{row}: the tool ran");
        let Payload::ToolFailed(failed) = first(&events, "tool.failed", "c1") else {
            panic!()
        };
        assert_eq!(failed.outcome, Some(ToolOutcome::Definitive), "{row}");
        assert_eq!(failed.retry, Some(ToolRetry::NotRetryable), "{row}");
        assert!(
            failed.error.as_str().contains("rule run.approval_handler"),
            "{row}"
        );
    }
}

// ---- tool output ----

/// A tool that returns a fixed [`ToolOutput`].
struct Fixed(ToolDefinition, ToolOutput);

impl Tool for Fixed {
    fn definition(&self) -> &ToolDefinition {
        &self.0
    }
    fn call(&self, _invocation: ToolInvocation) -> ToolFuture {
        let output = self.1.clone();
        Box::pin(async move { Ok(output) })
    }
}

/// A cut is recorded in `tool.completed` as `output_cut`; a whole output
/// has no such member; a cut output over `limits.part_bytes` is still a
/// `tool.failed` (outcome `uncertain`).
#[tokio::test]
async fn a_cut_is_recorded_in_tool_completed() {
    let over = "a".repeat(Limits::default().part_bytes + 1);
    let rows: [(ToolOutput, Option<Value>); 3] = [
        (
            ToolOutput::cut("abc", 10),
            Some(json!({"original_bytes": 10, "kept_bytes": 3})),
        ),
        (ToolOutput::new("whole"), None),
        (ToolOutput::cut(over, u64::MAX), None),
    ];
    for (row, (output, want)) in rows.into_iter().enumerate() {
        let failing = output.content().len() > Limits::default().part_bytes;
        let fixed = Fixed(definition("fixed"), output.clone());
        let provider = ScriptedProvider::new(vec![calls(vec![call("c1", "fixed")]), done()]);
        let engine = engine(provider).tool(Arc::new(fixed)).build().unwrap();
        let (outcome, events) = run(&engine, request("run_cut")).await;
        assert!(matches!(outcome, RunOutcome::Completed { .. }), "row {row}");
        if failing {
            let Payload::ToolFailed(failed) = first(&events, "tool.failed", "c1") else {
                panic!("row {row}")
            };
            assert_eq!(failed.outcome, Some(ToolOutcome::Uncertain), "row {row}");
            continue;
        }
        let Payload::ToolCompleted(completed) = first(&events, "tool.completed", "c1") else {
            panic!("row {row}")
        };
        assert_eq!(completed.output, output.content(), "row {row}");
        assert_eq!(
            completed.extra.get("output_cut").cloned(),
            want,
            "row {row}"
        );
    }
}

/// `ToolOutput::cut` keeps the content's length and JSON-safe counts.
#[test]
fn a_cut_counts_what_it_kept() {
    let cut = ToolOutput::cut("abcd", u64::MAX).output_cut().unwrap();
    assert_eq!(
        cut,
        OutputCut {
            original_bytes: (1 << 53) - 1,
            kept_bytes: 4
        }
    );
    let cut = ToolOutput::cut("abcd", 1).output_cut().unwrap();
    assert_eq!(
        cut,
        OutputCut {
            original_bytes: 4,
            kept_bytes: 4
        }
    );
    assert_eq!(ToolOutput::from(String::from("x")), ToolOutput::new("x"));
}
