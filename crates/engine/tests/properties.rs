//! Random scripted runs with random cancellation points and random observer
//! faults always leave a lifecycle-valid log with contiguous sequences that
//! reconstructs byte for byte; and one engine hosts 1,000 runs at once.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use keel_engine::*;
use keel_eventlog::{
    Event, LogConfig, RunLog, Snapshot, SubscriptionBounds, SystemClock, TryRecvError,
};
use keel_message::*;
use keel_stream::FinishReason;
use keel_testkit::strategies::{fault, scripted_run};
use keel_testkit::*;
use proptest::prelude::*;
use std::sync::Arc;
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
            let events = log.retained_after(0);
            let summary = assert_lifecycle(&events);
            // The outcome and the log agree.
            let expected = match outcome {
                RunOutcome::Completed { .. } => keel_eventlog::Terminal::Completed,
                RunOutcome::Failed { .. } => keel_eventlog::Terminal::Failed,
                RunOutcome::Cancelled => keel_eventlog::Terminal::Cancelled,
            };
            assert_eq!(summary.outcome(), expected);
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
            // What the first required observer acknowledged is a gap-free
            // prefix of the log (observers never see renumbered events).
            let acked = recorder.lines();
            assert_eq!(&lines[..acked.len()], &acked[..]);
            assert_reconstructs(&log);
        });
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
