//! The pipeline's own accessors and its reading of observer claims:
//! a batch refusal that claims everything, `Debug`, `config`, and what
//! dropping a pipeline does to its best-effort workers.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use keel_eventlog::*;
use keel_message::RunId;
use keel_observers::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Refuses every batch while claiming it accepted the whole offer: a
/// contract breach the pipeline must read as "the last one was refused".
struct ClaimsAll;

impl RequiredObserver for ClaimsAll {
    fn name(&self) -> &str {
        "claims_all"
    }
    fn observe<'a>(&'a self, _event: &'a Arc<Event>) -> ObserveFuture<'a> {
        Box::pin(async { Ok(()) })
    }
    fn observe_batch<'a>(&'a self, events: &'a [Arc<Event>]) -> ObserveBatchFuture<'a> {
        Box::pin(async move {
            Err(BatchError {
                acknowledged: events.len(),
                source: ObserverError::Failed("claims everything".into()),
            })
        })
    }
}

/// Records the length of every batch it is offered.
struct Lengths(Mutex<Vec<usize>>);

impl RequiredObserver for Lengths {
    fn name(&self) -> &str {
        "lengths"
    }
    fn observe<'a>(&'a self, _event: &'a Arc<Event>) -> ObserveFuture<'a> {
        Box::pin(async { Ok(()) })
    }
    fn observe_batch<'a>(&'a self, events: &'a [Arc<Event>]) -> ObserveBatchFuture<'a> {
        self.0.lock().unwrap().push(events.len());
        Box::pin(async { Ok(()) })
    }
}

/// Sets its flag when dropped, which happens when its worker ends.
struct DropFlag(Arc<AtomicBool>);

impl BestEffortObserver for DropFlag {
    fn name(&self) -> &str {
        "drop_flag"
    }
    fn observe(&mut self, _event: &Arc<Event>) {}
    fn flush(&mut self) {}
}

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

fn events(n: usize) -> Vec<Arc<Event>> {
    let log = RunLog::new(
        RunId::parse("run_1").unwrap(),
        LogConfig::default(),
        Arc::new(SystemClock),
    )
    .unwrap();
    let mut out = vec![
        log.commit(&Payload::RunStarted(RunStarted::default()))
            .unwrap(),
    ];
    while out.len() < n {
        let note = Payload::Extension {
            kind: EventKind::parse("test.note").unwrap(),
            payload: keel_message::CanonicalJson::parse("{}").unwrap(),
        };
        out.push(log.commit(&note).unwrap());
    }
    out
}

#[tokio::test]
async fn a_refusal_claiming_the_whole_batch_refuses_its_last_event() {
    let later = Arc::new(Lengths(Mutex::new(Vec::new())));
    let pipeline = PipelineBuilder::new()
        .required(Arc::new(ClaimsAll))
        .required(later.clone())
        .build();
    let batch = events(4);
    let outcome = pipeline.acknowledge_batch(&batch).await;
    assert_eq!(
        outcome.acknowledged, 3,
        "fewer acknowledged is the safe reading"
    );
    let error = outcome.error.expect("the refusal is reported");
    assert_eq!(error.observer, "claims_all");
    assert_eq!(
        error.seq,
        batch[3].seq(),
        "names the first seq not acknowledged"
    );
    assert_eq!(
        *later.0.lock().unwrap(),
        vec![3],
        "later observers see the accepted prefix"
    );
    assert_eq!(pipeline.stats().acknowledged, 3);
}

#[test]
fn debug_names_required_observers_and_counts_the_rest() {
    let builder = PipelineBuilder::new()
        .required(Arc::new(ClaimsAll))
        .best_effort(Box::new(DropFlag(Arc::new(AtomicBool::new(false)))));
    let shown = format!("{builder:?}");
    assert!(shown.starts_with("PipelineBuilder"), "{shown}");
    assert!(
        shown.contains("required: 1") && shown.contains("best_effort: 1"),
        "{shown}"
    );
    let pipeline = builder.build();
    let shown = format!("{pipeline:?}");
    assert!(shown.starts_with("Pipeline"), "{shown}");
    assert!(shown.contains("\"claims_all\""), "{shown}");
    assert!(shown.contains("stats"), "{shown}");
}

#[test]
fn config_is_the_one_it_was_built_with() {
    let config = PipelineConfig {
        required_deadline: Duration::from_millis(1234),
        best_effort_capacity: 7,
        ..PipelineConfig::default()
    };
    let pipeline = PipelineBuilder::new().config(config.clone()).build();
    assert_eq!(pipeline.config(), &config);
}

/// Dropping a pipeline closes its best-effort queues, so their worker
/// threads end (and drop their observers) without a shutdown call.
#[test]
fn dropping_a_pipeline_ends_its_best_effort_workers() {
    let dropped = Arc::new(AtomicBool::new(false));
    let pipeline = PipelineBuilder::new()
        .best_effort(Box::new(DropFlag(dropped.clone())))
        .build();
    drop(pipeline);
    let give_up = Instant::now() + Duration::from_secs(10);
    while !dropped.load(Ordering::SeqCst) {
        assert!(Instant::now() < give_up, "the worker outlived its pipeline");
        std::thread::sleep(Duration::from_millis(5));
    }
}
