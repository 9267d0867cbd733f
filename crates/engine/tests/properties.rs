//! Random scripted runs with random cancellation points and random observer
//! faults always leave a lifecycle-valid log with contiguous sequences that
//! reconstructs byte for byte; the hard cases (approvals left pending or
//! timing out, `end_run` tools, panicking providers, tools and handlers,
//! observers failing on start events) leave the same valid history in the
//! log, in the SQLite journal and for `keel verify`; and one engine hosts
//! 1,000 runs at once.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use keel_engine::*;
use keel_eventlog::{
    Event, LogConfig, RunLog, Snapshot, Subscription, SubscriptionBounds, SystemClock, TryRecvError,
};
use keel_message::*;
use keel_observers::{
    JournalConfig, JournalReader, ObserveFuture, ObserverError, RequiredObserver, RunSummary,
    SqliteJournal, StoredRun, Synchronous,
};
use keel_stream::FinishReason;
use keel_testkit::strategies::{
    FaultyRun, ScriptedRun, any_fault, fault, faulty_run, scripted_run,
};
use keel_testkit::*;
use proptest::prelude::*;
use proptest::sample::select;
use proptest::strategy::ValueTree;
use proptest::test_runner::{TestCaseError, TestRunner};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

fn request(id: &str) -> RunRequest {
    RunRequest::new(
        RunId::parse(id).unwrap(),
        ModelName::parse("scripted-1").unwrap(),
        vec![Message::text(MessageId::parse("u1").unwrap(), Role::User, "go").unwrap()],
    )
    .provider_named("scripted")
}

/// encode → decode → re-encode, and snapshot → JSON Lines → restore, are
/// byte-identical; import of the lines rebuilds the same log.
fn assert_reconstructs(log: &RunLog) {
    let events = log.retained_after(0);
    for e in &events {
        let decoded = Event::decode(e.line()).unwrap();
        assert_eq!(decoded.line(), e.line());
        let payload = decoded.payload().unwrap();
        assert_eq!(payload.to_canonical().unwrap(), e.payload_json());
    }
    let text = log.snapshot().to_jsonl();
    let snap = Snapshot::from_jsonl(&text).unwrap();
    assert_eq!(snap.to_jsonl(), text);
    let restored = RunLog::restore(&snap, LogConfig::default(), Arc::new(SystemClock)).unwrap();
    let again: Vec<String> = restored
        .retained_after(0)
        .iter()
        .map(|e| e.line().to_owned())
        .collect();
    let lines: Vec<String> = events.iter().map(|e| e.line().to_owned()).collect();
    assert_eq!(again, lines);
    let imported = RunLog::import(
        log.run_id().clone(),
        lines.iter().map(String::as_str),
        LogConfig::default(),
        Arc::new(SystemClock),
    )
    .unwrap();
    assert_eq!(imported.retained_after(0).len(), lines.len());
}

/// What every run must leave, however it ended: a lifecycle-valid log
/// (exactly one terminal naming what its start named, per start), an
/// outcome that is what the log's run terminal says and never `Internal`,
/// a subscriber that saw exactly the log, acknowledgements (`acked`, an
/// observer's lines) that are a gap-free prefix of it, and a log that
/// reconstructs byte for byte. Returns the log's lines.
fn check_run(
    outcome: &RunOutcome,
    log: &RunLog,
    sub: &mut Subscription,
    acked: &[String],
) -> Vec<String> {
    let events = log.retained_after(0);
    let summary = assert_lifecycle(&events);
    // The outcome and the log agree.
    let expected = match outcome {
        RunOutcome::Completed { .. } => keel_eventlog::Terminal::Completed,
        RunOutcome::Failed { .. } => keel_eventlog::Terminal::Failed,
        RunOutcome::Cancelled => keel_eventlog::Terminal::Cancelled,
    };
    assert_eq!(summary.outcome(), expected);
    // No input fails a run as `Internal`: that is an engine bug (a commit
    // the log refused, a panic outside the guarded extension points).
    assert!(
        !matches!(
            outcome,
            RunOutcome::Failed {
                cause: FailureCause::Internal(_)
            }
        ),
        "{outcome:?}"
    );
    // The subscriber saw exactly the log.
    let mut seen = Vec::new();
    loop {
        match sub.try_recv() {
            Ok(e) => seen.push(e.line().to_owned()),
            Err(TryRecvError::Finished) => break,
            Err(other) => panic!("{other:?}"),
        }
    }
    let lines: Vec<String> = events.iter().map(|e| e.line().to_owned()).collect();
    assert_eq!(seen, lines);
    // What the observer acknowledged is a gap-free prefix of the log
    // (observers never see renumbered events).
    assert_eq!(&lines[..acked.len()], acked);
    assert_reconstructs(log);
    lines
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_runs_cancellations_and_faults_keep_the_log_valid(
        script in scripted_run(),
        cancel_after in proptest::option::weighted(0.5, 0u64..2_000),
        observer_fault in proptest::option::weighted(0.5, fault()),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap();
        rt.block_on(async {
            let mut builder = Engine::builder()
                .provider("scripted", Arc::new(script.provider()))
                .clock(Arc::new(ManualClock::default()))
                .pipeline_config(keel_observers::PipelineConfig { required_deadline: Duration::from_secs(5), ..Default::default() })
                .limits(EngineLimits { tool_call_timeout: Duration::from_secs(10), ..EngineLimits::default() });
            for tool in script.scripted_tools() {
                builder = builder.tool(Arc::new(tool));
            }
            let recorder = Arc::new(RecordingObserver::new());
            builder = builder.required_observer(recorder.clone());
            if let Some(f) = observer_fault {
                builder = builder.required_observer(Arc::new(FaultyObserver::new(f)));
            }
            let engine = builder.build().unwrap();
            let run = engine.start(request("run_prop")).unwrap();
            let log = run.log().clone();
            let mut sub = run.subscribe(0).unwrap();
            if let Some(ms) = cancel_after {
                let canceller = run.canceller();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    canceller.cancel();
                });
            }
            let outcome = run.join().await;
            check_run(&outcome, &log, &mut sub, &recorder.lines());
        });
    }
}

/// The SQLite journal, acknowledging in no paused time. Its writer is a
/// thread, so awaiting its answer leaves the runtime idle, and paused time
/// would then jump to the next timer (the observer deadline) and time out
/// nearly every event. Each offer runs on a blocking thread instead, which
/// holds paused time still until it returns (tokio `test-util`): the
/// journal looks exactly as fast as it is, and what it stores and answers
/// is its own doing.
struct PausedTimeJournal(Arc<SqliteJournal>);

impl RequiredObserver for PausedTimeJournal {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn observe<'a>(&'a self, event: &'a Arc<Event>) -> ObserveFuture<'a> {
        let journal = Arc::clone(&self.0);
        let event = Arc::clone(event);
        let offer = move || tokio::runtime::Handle::current().block_on(journal.observe(&event));
        Box::pin(async move {
            tokio::task::spawn_blocking(offer)
                .await
                .unwrap_or_else(|e| Err(ObserverError::Failed(format!("journal offer: {e}"))))
        })
    }
}

/// How a [`StartFaultObserver`] misbehaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StartAction {
    /// Refuses the event.
    Fail,
    /// Never answers (the pipeline's deadline cuts it off).
    Hang,
    /// Panics while its future is polled.
    Panic,
    /// Panics in `observe` itself, before any future exists.
    PanicSync,
}

/// Misbehave on the `nth` offer of a `<scope>.started` event
/// (redeliveries counted), acknowledge everything else.
#[derive(Debug, Clone, Copy)]
struct StartFault {
    scope: &'static str,
    nth: u64,
    action: StartAction,
}

fn start_fault() -> impl Strategy<Value = StartFault> {
    (
        select(vec!["run", "turn", "model", "tool", "interaction"]),
        1u64..4,
        select(vec![
            StartAction::Fail,
            StartAction::Hang,
            StartAction::Panic,
            StartAction::PanicSync,
        ]),
    )
        .prop_map(|(scope, nth, action)| StartFault {
            scope,
            // A run starts once.
            nth: if scope == "run" { 1 } else { nth },
            action,
        })
}

/// A required observer that misbehaves on one start event.
struct StartFaultObserver {
    fault: StartFault,
    offers: AtomicU64,
}

fn observer_panic(kind: &str) -> ObserverError {
    panic!("scripted observer panic on {kind}")
}

impl RequiredObserver for StartFaultObserver {
    fn name(&self) -> &str {
        "start_fault"
    }

    fn observe<'a>(&'a self, event: &'a Arc<Event>) -> ObserveFuture<'a> {
        let kind = event.kind().to_string();
        let hit = kind.strip_suffix(".started") == Some(self.fault.scope)
            && self.offers.fetch_add(1, Ordering::SeqCst) + 1 == self.fault.nth;
        if !hit {
            return Box::pin(std::future::ready(Ok(())));
        }
        match self.fault.action {
            // Evaluated here, in `observe` itself.
            StartAction::PanicSync => Box::pin(std::future::ready(Err(observer_panic(&kind)))),
            StartAction::Panic => Box::pin(async move { Err(observer_panic(&kind)) }),
            StartAction::Fail => Box::pin(std::future::ready(Err(ObserverError::Failed(format!(
                "refused {kind}"
            ))))),
            StartAction::Hang => Box::pin(async move {
                tokio::time::sleep(HANG).await;
                Err(ObserverError::Failed(format!("hung on {kind}")))
            }),
        }
    }
}

/// Once a known bug (fixed): the closing re-offer gave each observer the
/// whole remaining closing deadline, so one observer hanging on a
/// re-offered event starved the journal of the closing terminals. Kept as
/// a switch so the pinned test below states both sides.
const CLOSING_HANG_STARVES_JOURNAL: bool = false;

/// One generated hard case: the run, when to cancel it (ms), a random
/// observer fault, and a fault on a start event.
type HardCase = (FaultyRun, Option<u64>, Option<Fault>, Option<StartFault>);

fn hard_case() -> impl Strategy<Value = HardCase> {
    (
        faulty_run(),
        proptest::option::weighted(0.5, 0u64..800),
        proptest::option::weighted(0.2, any_fault()),
        proptest::option::weighted(0.3, start_fault()),
    )
}

/// Whether an observer of the case hangs: the one fault that can use up a
/// closing deadline.
fn hangs(case: &HardCase) -> bool {
    matches!(case.2, Some(Fault::HangOn(_)))
        || matches!(
            case.3,
            Some(StartFault {
                action: StartAction::Hang,
                ..
            })
        )
}

/// What a hard case left behind: the log's lines, and the journal's lines
/// and runs-table entry for the run.
struct Stored {
    log: Vec<String>,
    journal: Vec<String>,
    summary: RunSummary,
}

impl Stored {
    /// `keel verify`'s check of the stored run.
    fn verify(&self) -> Result<Verdict, VerifyViolation> {
        let record = StoredRun::new(self.summary.last_seq, self.summary.status);
        verify_run(&self.summary.run_id, record, &self.journal)
    }
}

/// Runs `case` in paused time with a fresh SQLite journal as the first
/// required observer, checks the run ([`check_run`]), shuts the engine
/// down, closes the journal and reads the run back.
fn run_hard_case(case: &HardCase) -> Stored {
    let (run, cancel_after, observer_fault, start_fault) = case;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    let mut config = JournalConfig::default();
    config.synchronous = Synchronous::Normal;
    let journal = Arc::new(SqliteJournal::open(&path, config).unwrap());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    let log = rt.block_on(drive_hard_case(
        run,
        *cancel_after,
        *observer_fault,
        *start_fault,
        &journal,
    ));
    // Waits for offers still on blocking threads (ones a deadline or the
    // cancellation gave up on).
    drop(rt);
    Arc::try_unwrap(journal)
        .expect("the engine is gone")
        .close()
        .unwrap();
    let reader = JournalReader::open(&path).unwrap();
    Stored {
        log,
        journal: reader.all_lines_after("run_prop", 0).unwrap(),
        summary: reader
            .run_status("run_prop")
            .unwrap()
            .expect("the journal knows the run"),
    }
}

/// The engine half of [`run_hard_case`]; returns the log's lines.
async fn drive_hard_case(
    case: &FaultyRun,
    cancel_after: Option<u64>,
    observer_fault: Option<Fault>,
    start_fault: Option<StartFault>,
    journal: &Arc<SqliteJournal>,
) -> Vec<String> {
    let mut builder = Engine::builder()
        .provider("scripted", Arc::new(case.provider()))
        .interaction_handler(Arc::new(case.interactions()))
        .clock(Arc::new(ManualClock::default()))
        // Well under the closing deadline (2 s): a hanging observer costs
        // one deadline, and the others still take the closing terminals.
        .pipeline_config(keel_observers::PipelineConfig {
            required_deadline: Duration::from_millis(200),
            ..Default::default()
        })
        .limits(EngineLimits {
            tool_call_timeout: Duration::from_secs(10),
            approval_timeout: case.approval_timeout,
            ..EngineLimits::default()
        })
        .required_observer(Arc::new(PausedTimeJournal(Arc::clone(journal))));
    for tool in case.scripted_tools() {
        builder = builder.tool(Arc::new(tool));
    }
    let recorder = Arc::new(RecordingObserver::new());
    builder = builder.required_observer(recorder.clone());
    if let Some(f) = observer_fault {
        builder = builder.required_observer(Arc::new(FaultyObserver::new(f)));
    }
    if let Some(fault) = start_fault {
        builder = builder.required_observer(Arc::new(StartFaultObserver {
            fault,
            offers: AtomicU64::new(0),
        }));
    }
    let engine = builder.build().unwrap();
    let run = engine.start(request("run_prop")).unwrap();
    let log = run.log().clone();
    let mut sub = run.subscribe(0).unwrap();
    if let Some(ms) = cancel_after {
        let canceller = run.canceller();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            canceller.cancel();
        });
    }
    let outcome = run.join().await;
    let lines = check_run(&outcome, &log, &mut sub, &recorder.lines());
    let shutdown = engine.shutdown(Duration::from_secs(5)).await;
    if observer_fault.is_none() && start_fault.is_none() {
        assert!(
            shutdown.unacknowledged.is_empty(),
            "no observer failed, yet {:?} unacknowledged",
            shutdown.unacknowledged
        );
    }
    lines
}

/// The journal holds the log byte for byte, lifecycle-valid, and `keel
/// verify` passes it (but see [`CLOSING_HANG_STARVES_JOURNAL`]).
fn check_journal(case: &HardCase, stored: &Stored) -> Result<(), TestCaseError> {
    if stored.journal != stored.log && CLOSING_HANG_STARVES_JOURNAL && hangs(case) {
        // The known bug: a gap-free prefix, which verify calls incomplete.
        prop_assert!(stored.log.starts_with(&stored.journal));
        let unclosed = matches!(
            check_lifecycle_lines(&stored.journal),
            Err(LifecycleViolation::Unclosed { .. })
        );
        prop_assert!(unclosed, "a short journal misses terminals, nothing else");
        let verdict = stored.verify();
        prop_assert!(
            matches!(verdict, Ok(Verdict::Incomplete { .. })),
            "verify: {:?}",
            verdict
        );
        return Ok(());
    }
    if let Err(violation) = check_lifecycle_lines(&stored.journal) {
        prop_assert!(false, "journal: {}", violation);
    }
    prop_assert_eq!(
        &stored.journal,
        &stored.log,
        "the journal holds the log byte for byte"
    );
    prop_assert_eq!(stored.verify(), Ok(Verdict::Ok));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Approvals left pending (timing out, or closed by cancellation or an
    /// `end_run` failure), `end_run` tools, panicking providers, tools and
    /// handlers (synchronously and while polled), and observers failing,
    /// hanging or panicking on start events or anywhere: every start gets
    /// exactly one matching terminal in the log, in the journal (the same
    /// bytes) and for `keel verify`.
    #[test]
    fn hard_runs_agree_in_log_journal_and_verify(case in hard_case()) {
        let stored = run_hard_case(&case);
        check_journal(&case, &stored)?;
    }
}

/// The hard paths the property is meant to reach, as seen in a log.
const HARD_PATHS: [&str; 14] = [
    "approval timed out",
    "approval cancelled",
    "approval denied",
    "handler failed",
    "handler panicked",
    "tool panicked",
    "tool timed out",
    "tool cancelled",
    "provider start panicked",
    "provider stream panicked",
    "end_run tool failed the run",
    "start event refused",
    "run cancelled",
    "run completed",
];

/// Which of [`HARD_PATHS`] a log went through.
fn hard_paths(lines: &[String]) -> BTreeSet<&'static str> {
    let mut out = BTreeSet::new();
    for line in lines {
        let kind = Event::decode(line).unwrap().kind().to_string();
        let has = |text: &str| line.contains(text);
        let path = match kind.as_str() {
            "interaction.failed" if has("interaction.timeout") => "approval timed out",
            "interaction.failed" if has("handler panicked") => "handler panicked",
            "interaction.failed" => "handler failed",
            "interaction.cancelled" => "approval cancelled",
            "interaction.completed" if has("denied") => "approval denied",
            "tool.failed" if has("tool panicked") => "tool panicked",
            "tool.failed" if has("timed out") => "tool timed out",
            "tool.cancelled" => "tool cancelled",
            "model.failed" if has("panicked starting") => "provider start panicked",
            "model.failed" if has("stream panicked") => "provider stream panicked",
            "run.failed" if has(r#""call_id""#) => "end_run tool failed the run",
            "run.failed" if has("start_fault") => "start event refused",
            "run.cancelled" => "run cancelled",
            "run.completed" => "run completed",
            _ => continue,
        };
        out.insert(path);
    }
    out
}

/// The generator reaches the hard paths: over a fixed sample, the runs the
/// property checks go through every one of [`HARD_PATHS`].
#[test]
fn hard_cases_reach_every_hard_path() {
    let mut runner = TestRunner::deterministic();
    let mut seen = BTreeSet::new();
    for _ in 0..128 {
        let case = hard_case().new_tree(&mut runner).unwrap().current();
        let stored = run_hard_case(&case);
        check_journal(&case, &stored).unwrap();
        seen.extend(hard_paths(&stored.log));
    }
    let missing: Vec<&str> = HARD_PATHS
        .into_iter()
        .filter(|p| !seen.contains(p))
        .collect();
    assert!(missing.is_empty(), "never reached: {missing:?}");
}

/// [`CLOSING_HANG_STARVES_JOURNAL`], pinned down: a run cancelled while
/// its tool runs, with an observer that hangs on its `k`-th offer. Some
/// `k` land on a re-offered closing event; the journal must still get the
/// whole history.
#[test]
fn a_hang_while_closing_leaves_the_journal_whole() {
    let run = FaultyRun {
        run: ScriptedRun {
            calls: vec![
                vec![
                    ScriptItem::tool_call("c1", "alpha", serde_json::json!({})),
                    ScriptItem::complete(FinishReason::ToolCalls),
                ],
                vec![
                    ScriptItem::text("done"),
                    ScriptItem::complete(FinishReason::Stop),
                ],
            ],
            tools: vec![(
                "alpha".into(),
                vec![ToolStep::ok(serde_json::json!(1)).after_ms(300)],
            )],
        },
        policies: vec![],
        start_panics: vec![],
        interactions: vec![],
        approval_timeout: Duration::from_secs(600),
    };
    let mut short = Vec::new();
    for k in 1..12 {
        let case: HardCase = (run.clone(), Some(100), Some(Fault::HangOn(k)), None);
        let stored = run_hard_case(&case);
        check_journal(&case, &stored).unwrap();
        if stored.journal != stored.log {
            short.push(k);
        }
    }
    if CLOSING_HANG_STARVES_JOURNAL {
        assert!(
            !short.is_empty(),
            "no hang left the journal short: the closing re-offer is fixed, \
             set CLOSING_HANG_STARVES_JOURNAL to false"
        );
    } else {
        assert!(
            short.is_empty(),
            "a hang on offer {short:?} while closing left the journal without the closing terminals"
        );
    }
}

#[test]
fn one_engine_hosts_a_thousand_concurrent_runs() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        const RUNS: usize = 1000;
        let mut calls = Vec::new();
        for _ in 0..RUNS {
            calls.push(vec![
                ScriptItem::tool_call("c1", "get_weather", serde_json::json!({"city": "Oslo"})),
                ScriptItem::complete(FinishReason::ToolCalls),
            ]);
            calls.push(vec![
                ScriptItem::text("3 "),
                ScriptItem::text("°C."),
                ScriptItem::complete(FinishReason::Stop),
            ]);
        }
        // One provider per run keeps each script in order.
        let mut builder = Engine::builder().clock(Arc::new(ManualClock::default()));
        for i in 0..RUNS {
            builder = builder.provider(
                format!("p{i}"),
                Arc::new(ScriptedProvider::new(vec![
                    calls[2 * i].clone(),
                    calls[2 * i + 1].clone(),
                ])),
            );
        }
        let tool = ScriptedTool::named(
            "get_weather",
            (0..RUNS)
                .map(|_| ToolStep::ok(serde_json::json!({"temp_c": 3})))
                .collect(),
        )
        .unwrap();
        let recorder = Arc::new(RecordingObserver::new());
        let engine = builder
            .tool(Arc::new(tool))
            .required_observer(recorder.clone())
            .build()
            .unwrap();
        let mut handles = Vec::new();
        for i in 0..RUNS {
            let req = request(&format!("run_{i}")).provider_named(format!("p{i}"));
            let run = engine.start(req).unwrap();
            let sub = run
                .subscribe_with(
                    0,
                    SubscriptionBounds {
                        max_events: 1 << 20,
                        max_bytes: usize::MAX,
                        ..Default::default()
                    },
                )
                .unwrap();
            let reader = tokio::spawn(async move {
                let mut sub = sub;
                let mut lines = Vec::new();
                while let Some(e) = sub.recv().await {
                    lines.push(e.unwrap().line().to_owned());
                }
                lines
            });
            handles.push((run, reader));
        }
        for (run, reader) in handles {
            let log = run.log().clone();
            let outcome = run.join().await;
            assert!(
                matches!(outcome, RunOutcome::Completed { .. }),
                "{outcome:?}"
            );
            let events = log.retained_after(0);
            assert_lifecycle(&events);
            assert_eq!(events.len(), 16);
            let lines: Vec<String> = events.iter().map(|e| e.line().to_owned()).collect();
            assert_eq!(reader.await.unwrap(), lines);
            assert_eq!(recorder.events_for(log.run_id()).len(), events.len());
        }
        assert_eq!(engine.live_runs(), 0);
    });
}
