//! Loom model of the best-effort close protocol: dispatch racing shutdown.
//!
//! Run with:
//! `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p keel-observers --test loom --release`
//! (the model is small enough to explore without a preemption bound).
#![cfg(loom)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use keel_eventlog::*;
use keel_observers::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

struct Counting(Arc<AtomicU64>);

impl BestEffortObserver for Counting {
    fn name(&self) -> &str {
        "counting"
    }
    fn observe(&mut self, _event: &Arc<Event>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn two_events() -> Vec<Arc<Event>> {
    let log = RunLog::new(
        keel_message::RunId::parse("run_1").unwrap(),
        LogConfig::default(),
        Arc::new(SystemClock),
    )
    .unwrap();
    vec![
        log.commit(&Payload::RunStarted(RunStarted::default()))
            .unwrap(),
        log.commit(&Payload::Extension {
            kind: EventKind::parse("test.note").unwrap(),
            payload: keel_message::CanonicalJson::parse("{}").unwrap(),
        })
        .unwrap(),
    ]
}

/// Every offer is delivered or counted as dropped; nothing enqueued is lost
/// by the close, and shutdown never hangs.
#[test]
fn dispatch_racing_shutdown() {
    loom::model(|| {
        let seen = Arc::new(AtomicU64::new(0));
        let pipeline = loom::sync::Arc::new(
            PipelineBuilder::new()
                .config(PipelineConfig {
                    best_effort_capacity: 1,
                    ..PipelineConfig::default()
                })
                .best_effort(Box::new(Counting(seen.clone())))
                .build(),
        );
        let events = two_events();
        let p = pipeline.clone();
        let dispatcher = loom::thread::spawn(move || {
            for e in &events {
                // No required observers: the future completes without a runtime.
                loom::future::block_on(p.dispatch(e)).unwrap();
            }
        });
        let report = pipeline.shutdown(Duration::from_secs(1));
        dispatcher.join().unwrap();
        assert_eq!(report.flushed, vec!["counting".to_string()]);
        let s = pipeline.stats().best_effort[0].clone();
        assert_eq!(s.enqueued + s.dropped_full + s.dropped_closed, 2, "{s:?}");
        assert_eq!(s.delivered, s.enqueued, "{s:?}");
        assert_eq!(seen.load(Ordering::SeqCst), s.delivered);
    });
}

// ------------------------------------------------------------- the window

/// A best-effort observer that records the seqs it sees, in order.
struct Recording(Arc<std::sync::Mutex<Vec<u64>>>);

impl BestEffortObserver for Recording {
    fn name(&self) -> &str {
        "recording"
    }
    fn observe(&mut self, event: &Arc<Event>) {
        self.0.lock().unwrap().push(event.seq());
    }
}

fn three_events() -> Vec<Arc<Event>> {
    let log = RunLog::new(
        keel_message::RunId::parse("run_1").unwrap(),
        LogConfig::default(),
        Arc::new(SystemClock),
    )
    .unwrap();
    let note = || Payload::Extension {
        kind: EventKind::parse("test.note").unwrap(),
        payload: keel_message::CanonicalJson::parse("{}").unwrap(),
    };
    vec![
        log.commit(&Payload::RunStarted(RunStarted::default()))
            .unwrap(),
        log.commit(&note()).unwrap(),
        log.commit(&note()).unwrap(),
    ]
}

/// The window models have four threads (committer, flusher, the
/// best-effort worker, the closer) and spin on a full window, so they are
/// explored with a preemption bound, as loom recommends for models of
/// this size.
fn bounded() -> loom::model::Builder {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder
}

struct WindowModel {
    pipeline: Arc<Pipeline>,
    seen: Arc<std::sync::Mutex<Vec<u64>>>,
}

fn window_model(window_events: usize) -> WindowModel {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let pipeline = Arc::new(
        PipelineBuilder::new()
            .config(PipelineConfig {
                best_effort_capacity: 8,
                window_events,
                ..PipelineConfig::default()
            })
            .best_effort(Box::new(Recording(seen.clone())))
            .build(),
    );
    WindowModel { pipeline, seen }
}

/// The flusher: takes batches until done, acknowledging each one in full
/// or, from `fail_from` on, refusing at that seq, and offers what each
/// settle hands back to the best-effort observers, as the window's flusher
/// task does.
fn flusher(core: Arc<WindowCore>, pipeline: Arc<Pipeline>, fail_from: Option<u64>) {
    loop {
        match core.take() {
            Take::Batch(batch) => {
                let outcome = match fail_from.and_then(|f| batch.iter().position(|e| e.seq() >= f))
                {
                    None => BatchOutcome::all(batch.len()),
                    Some(at) => BatchOutcome {
                        acknowledged: at,
                        error: Some(DispatchError {
                            observer: "journal".into(),
                            index: 0,
                            run_id: keel_message::RunId::parse("run_1").unwrap(),
                            seq: batch[at].seq(),
                            source: ObserverError::Failed("disk full".into()),
                        }),
                    },
                };
                let before = core.watermark();
                let settled = core.settle(&batch, outcome);
                // The watermark only rises, to a settled seq.
                assert!(core.watermark() >= before);
                if let Some(w) = settled.raised() {
                    assert!(batch.iter().any(|e| e.seq() == w));
                }
                // Only what the watermark covers is offered.
                for event in settled.to_offer() {
                    assert!(event.seq() <= core.watermark());
                    pipeline.offer_best_effort(event);
                }
            }
            Take::Idle => loom::thread::yield_now(),
            Take::Done => return,
        }
    }
}

/// The committer: admits each event in turn, yielding while the window is
/// full; the last seq admitted, or that and why the window refused.
fn admit_all(core: &WindowCore, events: &[Arc<Event>]) -> Result<u64, (u64, WindowError)> {
    let mut admitted = 0;
    for e in events {
        loop {
            match core.admit(e) {
                Admission::Queued { .. } => break,
                Admission::Full => loom::thread::yield_now(),
                Admission::Refused(why) => return Err((admitted, why)),
            }
        }
        admitted = e.seq();
    }
    Ok(admitted)
}

/// Commits racing acknowledgements and the close, with a window of 2 over
/// 3 events: the window never holds more than its bound, every admitted
/// event is acknowledged before the flusher ends (the close loses
/// nothing), and the best-effort observer sees exactly the acknowledged
/// prefix, in order, never ahead of the watermark.
#[test]
fn window_commit_ack_close() {
    bounded().check(|| {
        let model = window_model(2);
        let core = Arc::new(model.pipeline.window_core("run_1".into()));
        let events = three_events();
        let committer = {
            let core = core.clone();
            loom::thread::spawn(move || admit_all(&core, &events))
        };
        let flush = {
            let (core, pipeline) = (core.clone(), model.pipeline.clone());
            loom::thread::spawn(move || flusher(core, pipeline, None))
        };
        core.close();
        let admitted = match committer.join().unwrap() {
            Ok(last) | Err((last, WindowError::Closed { .. })) => last,
            Err((_, other)) => panic!("{other:?}"),
        };
        flush.join().unwrap();
        assert_eq!(
            core.watermark(),
            admitted,
            "the close lost an admitted event"
        );
        assert!(core.finished());
        model.pipeline.shutdown(Duration::from_secs(1));
        let seen = model.seen.lock().unwrap().clone();
        assert_eq!(seen, (1..=admitted).collect::<Vec<_>>());
    });
}

/// A refusal at seq 2: the watermark stops at 1, later admissions are
/// refused with that refusal, a barrier at 2 fails, and the best-effort
/// observer saw only seq 1 — racing the committer and the feed.
#[test]
fn window_refusal_stops_at_the_refused_seq() {
    bounded().check(|| {
        let model = window_model(2);
        let core = Arc::new(model.pipeline.window_core("run_1".into()));
        let events = three_events();
        let committer = {
            let core = core.clone();
            loom::thread::spawn(move || match admit_all(&core, &events) {
                Ok(_) => {}
                Err((_, WindowError::Refused(d))) => assert_eq!(d.seq, 2),
                Err((_, other)) => panic!("{other:?}"),
            })
        };
        let flush = {
            let (core, pipeline) = (core.clone(), model.pipeline.clone());
            loom::thread::spawn(move || flusher(core, pipeline, Some(2)))
        };
        committer.join().unwrap();
        core.close();
        flush.join().unwrap();
        assert!(core.watermark() <= 1);
        assert!(matches!(
            core.durable(2),
            Some(Err(WindowError::Refused(_)))
        ));
        model.pipeline.shutdown(Duration::from_secs(1));
        let seen = model.seen.lock().unwrap().clone();
        assert_eq!(seen, (1..=core.watermark()).collect::<Vec<_>>());
    });
}
