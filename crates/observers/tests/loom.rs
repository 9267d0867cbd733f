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
