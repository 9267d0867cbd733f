//! Compaction in the engine (issue #36): a long tool loop fits a small
//! window, every failure of a compaction leaves the history usable or
//! fails the run with a typed `context` problem (never a truncation), and
//! explicit compaction (`compact_first`, `compaction_only`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use keel_engine::*;
use keel_eventlog::history;
use keel_eventlog::{ContextCompacted, EstimatorKind, Event, ModelPurpose, Payload};
use keel_message::{
    CallId, Limits, Message, MessageId, ModelName, ModelRequest, Part, ProviderTag, Role, RunId,
};
use keel_observers::{RunStatus, StoredRun};
use keel_stream::{FinishReason, ModelProvider, ProblemKind, StartFuture};
use keel_testkit::{
    RecordingObserver, ScriptItem, ScriptedProvider, ScriptedTool, ToolStep, Verdict, verify_run,
};
use serde_json::json;
use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// What the model answers a compaction call with.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Summary {
    /// A short summary.
    Short,
    /// A summary twice the size of what it summarizes.
    Larger,
    /// A non-retryable provider failure.
    Fails,
    /// A retryable failure, every attempt.
    KeepsFailing,
    /// A tool call.
    CallsTool,
    /// Whitespace only.
    Blank,
    /// Nothing for a minute.
    Stalls,
}

/// A scripted model that decides per request: a compaction request (no
/// tools, ending with the instruction) gets `summary`; an answer request
/// gets a tool call for the first `tool_turns` answers, then "done".
struct Conversation {
    inner: ScriptedProvider,
    tool_turns: usize,
    summary: Summary,
    /// Usage each answer reports (input, output), if any.
    usage: Option<(u64, u64)>,
    answers: AtomicUsize,
    compactions: AtomicUsize,
}

impl Conversation {
    fn new(tool_turns: usize, summary: Summary) -> Conversation {
        Conversation {
            inner: ScriptedProvider::new(vec![]).recording_requests(),
            tool_turns,
            summary,
            usage: None,
            answers: AtomicUsize::new(0),
            compactions: AtomicUsize::new(0),
        }
    }

    fn requests(&self) -> Vec<ModelRequest> {
        self.inner.handle().requests()
    }

    fn summary_items(&self, request: &ModelRequest) -> Vec<ScriptItem> {
        let n = self.compactions.fetch_add(1, Ordering::SeqCst);
        let stop = ScriptItem::complete(FinishReason::Stop);
        match self.summary {
            Summary::Short => vec![
                ScriptItem::text(format!("summary {n}: {}", "s".repeat(40))),
                stop,
            ],
            Summary::Larger => {
                let bytes = bytes_of(request.history());
                vec![ScriptItem::text("L".repeat(2 * bytes)), stop]
            }
            Summary::Fails => vec![ScriptItem::fail(ProblemKind::Other, "down", false)],
            Summary::KeepsFailing => {
                vec![ScriptItem::fail(ProblemKind::Overloaded, "busy", true)]
            }
            Summary::CallsTool => vec![
                ScriptItem::tool_call(format!("sneaky_{n}"), "lookup", json!({})),
                ScriptItem::complete(FinishReason::ToolCalls),
            ],
            Summary::Blank => vec![ScriptItem::text("   "), stop],
            Summary::Stalls => vec![ScriptItem::delay(Duration::from_secs(60)), stop],
        }
    }

    fn answer_items(&self) -> Vec<ScriptItem> {
        let n = self.answers.fetch_add(1, Ordering::SeqCst);
        let complete = |finish| match self.usage {
            Some((i, o)) => ScriptItem::complete_with_usage(finish, i, o),
            None => ScriptItem::complete(finish),
        };
        if n < self.tool_turns {
            vec![
                ScriptItem::text(format!("step {n}: {}", "a".repeat(120))),
                ScriptItem::tool_call(format!("call_{n}"), "lookup", json!({"q": n})),
                complete(FinishReason::ToolCalls),
            ]
        } else {
            vec![ScriptItem::text("done"), complete(FinishReason::Stop)]
        }
    }
}

fn is_compaction(request: &ModelRequest) -> bool {
    request.tools().is_empty()
        && request
            .history()
            .last()
            .is_some_and(|m| text_of(m) == DEFAULT_COMPACTION_INSTRUCTION)
}

impl ModelProvider for Conversation {
    fn provider_tag(&self) -> ProviderTag {
        ProviderTag::scripted()
    }
    fn start(&self, request: ModelRequest) -> StartFuture {
        let items = if is_compaction(&request) {
            self.summary_items(&request)
        } else {
            self.answer_items()
        };
        self.inner.handle().push_call(items);
        self.inner.start(request)
    }
}

fn text_of(message: &Message) -> String {
    message
        .parts()
        .iter()
        .filter_map(|p| match p {
            Part::Text(t) => Some(t.text()),
            _ => None,
        })
        .collect()
}

fn bytes_of(messages: &[Message]) -> usize {
    messages
        .iter()
        .map(|m| serde_json::to_vec(m).unwrap().len())
        .sum()
}

/// The estimator's bytes measure of a request: its messages and tool
/// definitions as JSON, over 4 bytes per token, rounded up.
fn request_tokens(request: &ModelRequest) -> u64 {
    let tools: usize = request
        .tools()
        .iter()
        .map(|t| serde_json::to_vec(t).unwrap().len())
        .sum();
    ((bytes_of(request.history()) + tools) as u64).div_ceil(4)
}

fn message(id: &str, role: Role, text: &str) -> Message {
    Message::text(MessageId::parse(id).unwrap(), role, text).unwrap()
}

fn policy(window_tokens: u64) -> ContextPolicy {
    ContextPolicy::new(window_tokens)
}

/// What one run left: its outcome, its events, the provider's requests.
struct Ran {
    outcome: RunOutcome,
    events: Vec<Arc<Event>>,
    lines: Vec<String>,
    requests: Vec<ModelRequest>,
}

impl Ran {
    fn compacted(&self) -> Vec<(usize, ContextCompacted)> {
        self.events
            .iter()
            .enumerate()
            .filter_map(|(i, e)| match e.payload().unwrap() {
                Payload::ContextCompacted(c) => Some((i, c.clone())),
                _ => None,
            })
            .collect()
    }
    fn failed_rules(&self) -> Vec<String> {
        self.events
            .iter()
            .filter_map(|e| match e.payload().unwrap() {
                Payload::ContextCompactionFailed(f) => Some(f.rule.rule_name()),
                _ => None,
            })
            .collect()
    }
    fn answer_requests(&self) -> Vec<&ModelRequest> {
        self.requests.iter().filter(|r| !is_compaction(r)).collect()
    }
    /// `keel verify`'s check of the run's lines.
    fn verify(&self, status: RunStatus) {
        let record = StoredRun::new(self.lines.len() as u64, status);
        let run_id = self.events[0].run_id().clone();
        assert_eq!(
            verify_run(&run_id, record, &self.lines).unwrap(),
            Verdict::Ok
        );
    }
}

async fn run(
    model: Arc<Conversation>,
    request: RunRequest,
    limits: EngineLimits,
    tool_calls: usize,
) -> Ran {
    let recorder = Arc::new(RecordingObserver::new());
    let tool = ScriptedTool::named(
        "lookup",
        vec![ToolStep::ok(json!({"rows": "r".repeat(300)})); tool_calls.max(1)],
    )
    .unwrap();
    let engine = Engine::builder()
        .provider("scripted", model.clone())
        .tool(Arc::new(tool))
        .limits(limits)
        .required_observer(recorder.clone())
        .build()
        .unwrap();
    let outcome = engine.start(request).unwrap().join().await;
    engine.shutdown(Duration::from_secs(5)).await;
    Ran {
        outcome,
        events: recorder.events(),
        lines: recorder.lines(),
        requests: model.requests(),
    }
}

fn request(id: &str, history: Vec<Message>) -> RunRequest {
    RunRequest::new(
        RunId::parse(id).unwrap(),
        ModelName::parse("scripted-1").unwrap(),
        history,
    )
}

/// Every tool call a request carries has its result in the same request.
fn assert_calls_answered(request: &ModelRequest) {
    let results: HashSet<&CallId> = request
        .history()
        .iter()
        .flat_map(|m| m.parts())
        .filter_map(|p| match p {
            Part::ToolResult(r) => Some(r.call_id()),
            _ => None,
        })
        .collect();
    for m in request.history() {
        for call in m.tool_calls() {
            assert!(
                results.contains(call.call_id()),
                "{} unanswered",
                call.call_id()
            );
        }
    }
}

const WINDOW: u64 = 2_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_200_turn_tool_loop_fits_a_small_window() {
    let model = Arc::new(Conversation::new(199, Summary::Short));
    let limits = EngineLimits {
        max_turns: 200,
        context: Some(policy(WINDOW)),
        ..EngineLimits::default()
    };
    let history = vec![
        message("sys", Role::System, "You look things up."),
        message("u1", Role::User, "Look up 199 things."),
    ];
    let ran = run(model, request("long", history), limits, 199).await;
    let RunOutcome::Completed { transcript, .. } = &ran.outcome else {
        panic!("{:?}", ran.outcome);
    };
    ran.verify(RunStatus::Completed);
    let answers = ran.answer_requests();
    assert_eq!(answers.len(), 200);
    // No request reaches the window by the estimator's measure, and every
    // tool call in a request has its result.
    for r in &ran.requests {
        assert!(request_tokens(r) < WINDOW, "{} tokens", request_tokens(r));
        assert_calls_answered(r);
    }
    // Without compaction the last request would be far past the window.
    let uncompacted: u64 = 199 * 150;
    assert!(uncompacted > 10 * WINDOW);
    let compactions = ran.compacted();
    assert!(compactions.len() >= 10, "{} compactions", compactions.len());
    let limits = Limits::default();
    for (at, compacted) in &compactions {
        assert_eq!(compacted.estimator.kind, EstimatorKind::Bytes);
        assert!(compacted.tokens_before >= policy(WINDOW).threshold_tokens());
        assert!(compacted.tokens_after < compacted.tokens_before);
        // The rebuilt history after the compaction is the system message,
        // the summary, and the kept messages (the last 2 turns: assistant
        // + tool results each), exactly as they stood.
        let before = history::rebuild(&ran.events[..*at], &limits).unwrap();
        let after = history::rebuild(&ran.events[..=*at], &limits).unwrap();
        let kept = &before[before.len() - 4..];
        let mut expected = vec![before[0].clone(), compacted.summary.clone()];
        expected.extend_from_slice(kept);
        assert_eq!(after, expected);
        assert_eq!(compacted.replaces.count as usize, before.len() - 5);
        assert_eq!(&compacted.replaces.first, before[1].id());
        assert_eq!(kept[0].role(), Role::Assistant);
        assert_eq!(kept[3].role(), Role::Tool);
        // Inside a tool loop: the next answer request is exactly that
        // history, mid-loop (it ends with tool results).
        let next = ran.events[*at..]
            .iter()
            .position(
                |e| matches!(e.payload().unwrap(), Payload::ModelStarted(m) if m.purpose.is_none()),
            )
            .unwrap();
        let answer_seq = ran.events[*at + next].seq();
        let sent = answers
            .iter()
            .find(|r| {
                r.history() == after.as_slice()
                    && request_started_at(&ran.events, r) == Some(answer_seq)
            })
            .expect("the next answer request carries the compacted history");
        assert_eq!(sent.history().last().unwrap().role(), Role::Tool);
    }
    // The whole log rebuilds to the run's final history.
    assert_eq!(&history::rebuild(&ran.events, &limits).unwrap(), transcript);
}

/// The seq of the `model.started` of `request` (by operation id).
fn request_started_at(events: &[Arc<Event>], request: &ModelRequest) -> Option<u64> {
    events.iter().find_map(|e| match e.payload().unwrap() {
        Payload::ModelStarted(m) if &m.operation_id == request.operation_id() => Some(e.seq()),
        _ => None,
    })
}

/// How a failure case must end.
#[derive(Debug)]
enum Expect {
    /// The run completes on the uncompacted history, each compaction
    /// recorded as failed with this rule.
    Continues(&'static str),
    /// The run fails with the window problem; the log holds every input
    /// message (or, after a compaction, the summary in place of its range).
    FailsOnWindow,
}

struct Case {
    name: &'static str,
    summary: Summary,
    history: Vec<Message>,
    window: u64,
    expect: Expect,
}

/// A conversation under the threshold at first, past it after a few tool
/// turns, always under the window.
fn growing() -> Vec<Message> {
    vec![message("u1", Role::User, &"q".repeat(400))]
}

/// A history already past a window of 1000 tokens (4000 bytes), whose
/// oldest three messages can be compacted.
fn past_the_window(last_bytes: usize) -> Vec<Message> {
    vec![
        message("u1", Role::User, &"x".repeat(1500)),
        message("a1", Role::Assistant, "ok"),
        message("u2", Role::User, &"y".repeat(1500)),
        message("a2", Role::Assistant, "ok"),
        message("u3", Role::User, &"z".repeat(last_bytes)),
    ]
}

async fn check(case: Case) {
    let model = Arc::new(Conversation::new(4, case.summary));
    let limits = EngineLimits {
        context: Some(policy(case.window)),
        retry: RetryPolicy {
            initial_backoff: Duration::from_millis(1),
            ..RetryPolicy::default()
        },
        ..EngineLimits::default()
    };
    let input = case.history.clone();
    let ran = run(model, request("case", input.clone()), limits, 4).await;
    let name = case.name;
    for r in &ran.requests {
        assert!(
            request_tokens(r) < case.window,
            "{name}: a request reached the window"
        );
    }
    match case.expect {
        Expect::Continues(rule) => {
            assert!(
                matches!(ran.outcome, RunOutcome::Completed { .. }),
                "{name}: {:?}",
                ran.outcome
            );
            ran.verify(RunStatus::Completed);
            let rules = ran.failed_rules();
            assert!(!rules.is_empty(), "{name}: no compaction was tried");
            assert!(rules.iter().all(|r| r == rule), "{name}: {rules:?}");
            assert!(ran.compacted().is_empty(), "{name}");
            // Every answer request carries the whole history so far.
            for r in ran.answer_requests() {
                assert_eq!(&r.history()[..input.len()], input.as_slice(), "{name}");
            }
            let last = ran.answer_requests().last().unwrap().history().len();
            assert_eq!(last, input.len() + 2 * 4, "{name}: nothing was dropped");
        }
        Expect::FailsOnWindow => {
            let RunOutcome::Failed {
                cause: FailureCause::Limit { limit, detail },
            } = &ran.outcome
            else {
                panic!("{name}: {:?}", ran.outcome);
            };
            assert_eq!(limit, "limits.context.window_tokens", "{name}");
            assert!(
                detail.contains(&format!("the window is {} tokens", case.window)),
                "{name}: {detail}"
            );
            assert!(detail.contains("nothing was truncated"), "{name}: {detail}");
            ran.verify(RunStatus::Failed);
            assert!(
                ran.answer_requests().is_empty(),
                "{name}: an answer call was made"
            );
            // Nothing was truncated: the log's history holds every input
            // message, or the summary in place of the compacted range.
            let rebuilt = history::rebuild(&ran.events, &Limits::default()).unwrap();
            match ran.compacted().first() {
                None => assert_eq!(rebuilt, input, "{name}"),
                Some((_, c)) => {
                    let n = c.replaces.count as usize;
                    assert_eq!(rebuilt[0], c.summary, "{name}");
                    assert_eq!(&rebuilt[1..], &input[n..], "{name}");
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_compaction_continues_on_the_old_history_or_fails_typed() {
    // Four tool turns of ~160 tokens each on a ~110-token start: past the
    // threshold (640 of 800) from turn 4, under the window throughout.
    let continues = |name, summary, rule| Case {
        name,
        summary,
        history: growing(),
        window: 1_000,
        expect: Expect::Continues(rule),
    };
    let cases = [
        continues("summary larger", Summary::Larger, "compaction.not_smaller"),
        continues("call fails", Summary::Fails, "compaction.model_failed"),
        continues(
            "call keeps failing",
            Summary::KeepsFailing,
            "compaction.model_failed",
        ),
        continues(
            "summary calls a tool",
            Summary::CallsTool,
            "compaction.tool_call",
        ),
        continues("summary blank", Summary::Blank, "compaction.empty"),
        Case {
            name: "window exceeded, nothing to compact",
            summary: Summary::Short,
            history: vec![message("u1", Role::User, &"x".repeat(5000))],
            window: 1_000,
            expect: Expect::FailsOnWindow,
        },
        Case {
            name: "window exceeded, the compaction call fails",
            summary: Summary::Fails,
            history: past_the_window(1500),
            window: 1_000,
            expect: Expect::FailsOnWindow,
        },
        Case {
            name: "window exceeded, the summary is larger",
            summary: Summary::Larger,
            history: past_the_window(1500),
            window: 1_000,
            expect: Expect::FailsOnWindow,
        },
        Case {
            name: "window exceeded, the range alone fills the window",
            summary: Summary::Short,
            history: vec![
                message("u1", Role::User, &"x".repeat(4500)),
                message("a1", Role::Assistant, "ok"),
                message("u2", Role::User, "y"),
                message("a2", Role::Assistant, "ok"),
                message("u3", Role::User, "z"),
            ],
            window: 1_000,
            expect: Expect::FailsOnWindow,
        },
        Case {
            name: "window exceeded even after compacting",
            summary: Summary::Short,
            history: past_the_window(4500),
            window: 1_000,
            expect: Expect::FailsOnWindow,
        },
    ];
    for case in cases {
        check(case).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compaction_only_run_completes_with_the_summary() {
    let model = Arc::new(Conversation::new(0, Summary::Short));
    let input = vec![
        message("sys", Role::System, "be brief"),
        message("u1", Role::User, &"x".repeat(300)),
        message("a1", Role::Assistant, "ok"),
        message("u2", Role::User, "and then?"),
        message("a2", Role::Assistant, "fine"),
    ];
    let request = request("only", input.clone()).compaction_only();
    let ran = run(model, request, EngineLimits::default(), 0).await;
    let RunOutcome::Completed {
        final_message,
        transcript,
        ..
    } = &ran.outcome
    else {
        panic!("{:?}", ran.outcome);
    };
    ran.verify(RunStatus::Completed);
    assert_eq!(final_message.id().as_str(), "only.t1.s");
    assert_eq!(final_message.role(), Role::User);
    // keep_turns 2 keeps u2 and a2; u1 and a1 are summarized.
    let expected = vec![
        input[0].clone(),
        final_message.clone(),
        input[3].clone(),
        input[4].clone(),
    ];
    assert_eq!(transcript, &expected);
    assert_eq!(
        history::rebuild(&ran.events, &Limits::default()).unwrap(),
        expected
    );
    assert_eq!(ran.requests.len(), 1);
    assert!(is_compaction(&ran.requests[0]));
    assert_eq!(
        ran.requests[0].history().len(),
        3,
        "u1, a1, the instruction"
    );
    let purposes: Vec<_> = ran
        .events
        .iter()
        .filter_map(|e| match e.payload().unwrap() {
            Payload::ModelStarted(m) => Some(m.purpose.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(purposes, vec![Some(ModelPurpose::Compaction)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compaction_only_run_with_nothing_to_compact_fails_naming_the_rule() {
    let model = Arc::new(Conversation::new(0, Summary::Short));
    let request = request("nothing", vec![message("u1", Role::User, "hi")]).compaction_only();
    let ran = run(model, request, EngineLimits::default(), 0).await;
    let RunOutcome::Failed {
        cause: FailureCause::Limit { limit, .. },
    } = &ran.outcome
    else {
        panic!("{:?}", ran.outcome);
    };
    assert_eq!(limit, "compaction.nothing_to_compact");
    assert!(ran.requests.is_empty());
    ran.verify(RunStatus::Failed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compact_first_compacts_under_the_threshold_and_usage_is_the_estimator() {
    let mut conversation = Conversation::new(3, Summary::Short);
    conversation.usage = Some((1150, 100));
    let model = Arc::new(conversation);
    let limits = EngineLimits {
        context: Some(ContextPolicy {
            keep_turns: 1,
            ..policy(1_500)
        }),
        ..EngineLimits::default()
    };
    let input = vec![
        message("u1", Role::User, &"x".repeat(400)),
        message("a1", Role::Assistant, "ok"),
        message("u2", Role::User, "go on"),
    ];
    let request = request("first", input).compact_first(true);
    let ran = run(model, request, limits, 3).await;
    assert!(
        matches!(ran.outcome, RunOutcome::Completed { .. }),
        "{:?}",
        ran.outcome
    );
    ran.verify(RunStatus::Completed);
    let compactions = ran.compacted();
    // Turn 1 compacts although ~130 tokens is far under the threshold
    // (1200); then usage (1250 tokens per answer + what was added since)
    // passes the threshold on turn 3.
    assert_eq!(compactions[0].1.turn, 1);
    assert_eq!(compactions[0].1.estimator.kind, EstimatorKind::Bytes);
    assert!(compactions[0].1.tokens_before < 200);
    let usage_based: Vec<_> = compactions[1..]
        .iter()
        .map(|(_, c)| (c.estimator.kind.clone(), c.tokens_before))
        .collect();
    assert!(!usage_based.is_empty(), "no compaction on usage");
    for (kind, before) in usage_based {
        assert_eq!(kind, EstimatorKind::Usage);
        assert!((1_200..1_500).contains(&before), "{before}");
    }
}

#[test]
fn a_context_policy_is_checked_with_the_limits() {
    let check = |policy: ContextPolicy, field: Option<LimitField>| {
        let limits = EngineLimits {
            context: Some(policy.clone()),
            ..EngineLimits::default()
        };
        assert_eq!(limits.check().err().map(|e| e.field()), field, "{policy:?}");
    };
    let base = policy(1_000);
    check(base.clone(), None);
    check(
        ContextPolicy {
            window_tokens: 0,
            ..base.clone()
        },
        Some(LimitField::ContextWindowTokens),
    );
    check(
        ContextPolicy {
            compact_at: 0.0,
            ..base.clone()
        },
        Some(LimitField::ContextCompactAt),
    );
    check(
        ContextPolicy {
            compact_at: 1.0,
            ..base.clone()
        },
        None,
    );
    check(
        ContextPolicy {
            compact_at: 1.01,
            ..base.clone()
        },
        Some(LimitField::ContextCompactAt),
    );
    check(
        ContextPolicy {
            compact_at: f64::NAN,
            ..base.clone()
        },
        Some(LimitField::ContextCompactAt),
    );
    check(
        ContextPolicy {
            bytes_per_token: 0,
            ..base.clone()
        },
        Some(LimitField::ContextBytesPerToken),
    );
    check(
        ContextPolicy {
            bytes_per_token: 16,
            ..base.clone()
        },
        None,
    );
    check(
        ContextPolicy {
            bytes_per_token: 17,
            ..base.clone()
        },
        Some(LimitField::ContextBytesPerToken),
    );
    check(
        ContextPolicy {
            instruction: " ".into(),
            ..base.clone()
        },
        Some(LimitField::ContextInstruction),
    );
    check(
        ContextPolicy {
            instruction: "x".repeat(MAX_COMPACTION_INSTRUCTION_BYTES + 1),
            ..base.clone()
        },
        Some(LimitField::ContextInstruction),
    );
    assert_eq!(
        ContextPolicy {
            compact_at: 0.5,
            ..policy(3)
        }
        .threshold_tokens(),
        1
    );
    assert_eq!(
        ContextPolicy {
            compact_at: 0.0001,
            ..policy(3)
        }
        .threshold_tokens(),
        1
    );
}

/// A run cancelled during its compaction call ends cancelled, the call
/// closed with it, and `keel verify` passes the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_cancelled_during_its_compaction_call_closes_cleanly() {
    let model = Arc::new(Conversation::new(0, Summary::Stalls));
    let recorder = Arc::new(RecordingObserver::new());
    let engine = Engine::builder()
        .provider("scripted", model.clone())
        .required_observer(recorder.clone())
        .build()
        .unwrap();
    let input = vec![
        message("u1", Role::User, &"x".repeat(300)),
        message("a1", Role::Assistant, "ok"),
        message("u2", Role::User, "and?"),
        message("a2", Role::Assistant, "fine"),
    ];
    let handle = engine
        .start(request("stalled", input.clone()).compaction_only())
        .unwrap();
    let mut events = handle.subscribe(0).unwrap();
    while let Some(Ok(event)) = events.recv().await {
        if matches!(event.payload().unwrap(), Payload::ModelStarted(m) if m.purpose.is_some()) {
            handle.cancel();
        }
    }
    assert!(matches!(handle.join().await, RunOutcome::Cancelled));
    engine.shutdown(Duration::from_secs(5)).await;
    let ran = Ran {
        outcome: RunOutcome::Cancelled,
        events: recorder.events(),
        lines: recorder.lines(),
        requests: model.requests(),
    };
    ran.verify(RunStatus::Cancelled);
    let kinds: Vec<String> = ran.events.iter().map(|e| e.kind().to_string()).collect();
    assert!(kinds.contains(&"model.cancelled".to_owned()), "{kinds:?}");
    assert!(ran.compacted().is_empty());
    assert_eq!(
        history::rebuild(&ran.events, &Limits::default()).unwrap(),
        input
    );
}
