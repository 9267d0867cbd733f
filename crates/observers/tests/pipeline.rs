//! Observer ordering, faults and best-effort queues.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use keel_eventlog::*;
use keel_message::RunId;
use keel_observers::*;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Records what it acknowledged; fails on the Nth event (1-based) or
/// panics (in `observe` itself or in its future) or hangs there, as
/// configured.
struct Scripted {
    name: String,
    seen: Mutex<Vec<u64>>,
    calls: AtomicU64,
    fault: Option<(u64, Fault)>,
    order: Arc<Mutex<Vec<String>>>,
}

#[derive(Clone, Copy, Debug)]
enum Fault {
    Fail,
    /// Panics while the returned future is polled.
    Panic,
    /// Panics in `observe` itself, before returning a future.
    PanicSync,
    Hang,
}

impl Scripted {
    fn new(name: &str, fault: Option<(u64, Fault)>, order: &Arc<Mutex<Vec<String>>>) -> Arc<Self> {
        Arc::new(Scripted {
            name: name.into(),
            seen: Mutex::new(Vec::new()),
            calls: AtomicU64::new(0),
            fault,
            order: Arc::clone(order),
        })
    }
    fn seen(&self) -> Vec<u64> {
        self.seen.lock().unwrap().clone()
    }
}

impl RequiredObserver for Scripted {
    fn name(&self) -> &str {
        &self.name
    }
    fn observe<'a>(&'a self, event: &'a Arc<Event>) -> ObserveFuture<'a> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        self.order
            .lock()
            .unwrap()
            .push(format!("{}:{}", self.name, event.seq()));
        if matches!(self.fault, Some((at, Fault::PanicSync)) if at == n) {
            panic!("observer bug before its future");
        }
        Box::pin(async move {
            match self.fault {
                Some((at, Fault::Fail)) if at == n => {
                    return Err(ObserverError::Failed("disk full".into()));
                }
                Some((at, Fault::Panic)) if at == n => panic!("observer bug"),
                Some((at, Fault::Hang)) if at == n => {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                }
                _ => {}
            }
            self.seen.lock().unwrap().push(event.seq());
            Ok(())
        })
    }
}

/// A best-effort observer that records, optionally blocks on a gate, and
/// can panic on one sequence.
struct Recorder {
    seen: Arc<Mutex<Vec<u64>>>,
    gate: Option<Arc<(Mutex<bool>, std::sync::Condvar)>>,
    panic_on: Option<u64>,
    flushed: Arc<AtomicBool>,
    slow_flush: Option<Duration>,
    panic_in_flush: bool,
}

impl BestEffortObserver for Recorder {
    fn name(&self) -> &str {
        "recorder"
    }
    fn observe(&mut self, event: &Arc<Event>) {
        if let Some(gate) = &self.gate {
            let (lock, cv) = &**gate;
            let mut open = lock.lock().unwrap();
            while !*open {
                open = cv.wait(open).unwrap();
            }
        }
        if self.panic_on == Some(event.seq()) {
            panic!("best-effort bug");
        }
        self.seen.lock().unwrap().push(event.seq());
    }
    fn flush(&mut self) {
        if let Some(d) = self.slow_flush {
            std::thread::sleep(d);
        }
        self.flushed.store(true, Ordering::SeqCst);
        if self.panic_in_flush {
            panic!("best-effort flush bug");
        }
    }
}

fn recorder() -> (Recorder, Arc<Mutex<Vec<u64>>>, Arc<AtomicBool>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let flushed = Arc::new(AtomicBool::new(false));
    (
        Recorder {
            seen: seen.clone(),
            gate: None,
            panic_on: None,
            flushed: flushed.clone(),
            slow_flush: None,
            panic_in_flush: false,
        },
        seen,
        flushed,
    )
}

fn events(n: u64) -> (RunLog, Vec<Arc<Event>>) {
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
    for _ in 1..n {
        out.push(
            log.commit(&Payload::Extension {
                kind: EventKind::parse("test.note").unwrap(),
                payload: keel_message::CanonicalJson::parse("{}").unwrap(),
            })
            .unwrap(),
        );
    }
    (log, out)
}

fn config(deadline_ms: u64, capacity: usize) -> PipelineConfig {
    PipelineConfig {
        required_deadline: Duration::from_millis(deadline_ms),
        best_effort_capacity: capacity,
        ..PipelineConfig::default()
    }
}

/// One row per fault: the pipeline returns the typed error naming the
/// observer and the seq; earlier observers saw the event, later ones and
/// best-effort ones did not; the log keeps every event under its seq.
#[tokio::test]
async fn faults_are_typed_and_lose_nothing() {
    type Row = (&'static str, Fault, fn(&ObserverError) -> bool);
    let rows: Vec<Row> = vec![
        (
            "fails on 3rd",
            Fault::Fail,
            |e| matches!(e, ObserverError::Failed(m) if m == "disk full"),
        ),
        ("panics on 3rd", Fault::Panic, |e| {
            matches!(e, ObserverError::Panicked)
        }),
        ("panics synchronously on 3rd", Fault::PanicSync, |e| {
            matches!(e, ObserverError::Panicked)
        }),
        ("hangs on 3rd", Fault::Hang, |e| {
            matches!(e, ObserverError::DeadlineExceeded { deadline_ms: 50 })
        }),
    ];
    for (row, fault, is_expected) in rows {
        let order = Arc::new(Mutex::new(Vec::new()));
        let first = Scripted::new("first", None, &order);
        let faulty = Scripted::new("faulty", Some((3, fault)), &order);
        let last = Scripted::new("last", None, &order);
        let (rec, best_seen, _) = recorder();
        let pipeline = PipelineBuilder::new()
            .config(config(50, 64))
            .required(first.clone())
            .required(faulty.clone())
            .required(last.clone())
            .best_effort(Box::new(rec))
            .build();
        let (log, evs) = events(5);
        let mut errors = Vec::new();
        for e in &evs {
            if let Err(err) = pipeline.dispatch(e).await {
                errors.push(err);
            }
        }
        assert_eq!(errors.len(), 1, "row {row}: {errors:?}");
        let err = &errors[0];
        assert_eq!(
            (
                err.observer.as_str(),
                err.index,
                err.seq,
                err.run_id.as_str()
            ),
            ("faulty", 1, 3, "run_1"),
            "row {row}"
        );
        assert!(is_expected(&err.source), "row {row}: {err}");
        assert!(
            err.to_string().contains("faulty") && err.to_string().contains("seq 3"),
            "row {row}: {err}"
        );
        // Construction order, and the refused event stops at the faulty one.
        assert_eq!(first.seen(), vec![1, 2, 3, 4, 5], "row {row}");
        assert_eq!(
            last.seen(),
            vec![1, 2, 4, 5],
            "row {row}: later required observers skip a refused event"
        );
        let calls = order.lock().unwrap().clone();
        assert_eq!(&calls[..3], &["first:1", "faulty:1", "last:1"], "row {row}");
        pipeline.shutdown(Duration::from_secs(5));
        assert_eq!(
            *best_seen.lock().unwrap(),
            vec![1, 2, 4, 5],
            "row {row}: best-effort sees only acknowledged events"
        );
        // The log is untouched: nothing un-committed, nothing renumbered.
        let seqs: Vec<u64> = log.retained_after(0).iter().map(|e| e.seq()).collect();
        assert_eq!(seqs, vec![1, 2, 3, 4, 5], "row {row}");
        let stats = pipeline.stats();
        assert_eq!((stats.acknowledged, stats.refused), (4, 1), "row {row}");
        // A retry of the refused event goes through (at-least-once delivery).
        assert!(pipeline.dispatch(&evs[2]).await.is_ok(), "row {row}");
    }
}

/// A required observer panicking in either part of `observe` (the call
/// that builds the future, or polling it) refuses the event with
/// `Panicked` from inside the dispatch: the dispatching task lives on, the
/// observers after it do not see the event, best-effort ones do not either,
/// and the next dispatch goes through.
#[tokio::test]
async fn required_panics_sync_or_async_never_reach_the_caller() {
    for fault in [Fault::PanicSync, Fault::Panic] {
        let order = Arc::new(Mutex::new(Vec::new()));
        let faulty = Scripted::new("faulty", Some((1, fault)), &order);
        let last = Scripted::new("last", None, &order);
        let (rec, best_seen, _) = recorder();
        let pipeline = Arc::new(
            PipelineBuilder::new()
                .config(config(1000, 64))
                .required(faulty.clone())
                .required(last.clone())
                .best_effort(Box::new(rec))
                .build(),
        );
        let (_log, evs) = events(2);
        let evs = Arc::new(evs);
        let task = {
            let (pipeline, evs) = (Arc::clone(&pipeline), Arc::clone(&evs));
            // A spawned task: a panic escaping the dispatch would make the
            // join fail instead of returning the dispatch's result.
            tokio::spawn(async move {
                let first = pipeline.dispatch(&evs[0]).await;
                let second = pipeline.dispatch(&evs[1]).await;
                (first, second)
            })
        };
        let (first, second) = task
            .await
            .unwrap_or_else(|e| panic!("{fault:?}: the panic escaped the dispatch: {e}"));
        let err = first.expect_err("the panicking offer is refused");
        assert_eq!(
            (err.observer.as_str(), err.index, err.seq, &err.source),
            ("faulty", 0, 1, &ObserverError::Panicked),
            "{fault:?}"
        );
        assert!(second.is_ok(), "{fault:?}: {second:?}");
        assert_eq!(faulty.seen(), vec![2], "{fault:?}");
        assert_eq!(last.seen(), vec![2], "{fault:?}");
        pipeline.shutdown(Duration::from_secs(5));
        assert_eq!(*best_seen.lock().unwrap(), vec![2], "{fault:?}");
        let stats = pipeline.stats();
        assert_eq!((stats.acknowledged, stats.refused), (1, 1), "{fault:?}");
    }
}

/// The best-effort side is guarded on its own thread: a panic in
/// `observe` is counted (see below) and one in `flush` still lets shutdown
/// report the observer as flushed.
#[tokio::test]
async fn best_effort_flush_panic_still_finishes_shutdown() {
    let (mut rec, seen, flushed) = recorder();
    rec.panic_in_flush = true;
    let pipeline = PipelineBuilder::new().best_effort(Box::new(rec)).build();
    let (_log, evs) = events(2);
    for e in &evs {
        pipeline.dispatch(e).await.unwrap();
    }
    let report = pipeline.shutdown(Duration::from_secs(5));
    assert_eq!(report.flushed, vec!["recorder".to_string()]);
    assert!(flushed.load(Ordering::SeqCst));
    assert_eq!(*seen.lock().unwrap(), vec![1, 2]);
}

#[tokio::test]
async fn best_effort_never_blocks_and_counts_drops() {
    let gate = Arc::new((Mutex::new(false), std::sync::Condvar::new()));
    let (mut rec, seen, flushed) = recorder();
    rec.gate = Some(gate.clone());
    let pipeline = PipelineBuilder::new()
        .config(config(1000, 4))
        .best_effort(Box::new(rec))
        .build();
    let (_log, evs) = events(100);
    let started = std::time::Instant::now();
    for e in &evs {
        pipeline.dispatch(e).await.unwrap();
    }
    // 100 dispatches against a blocked observer return at once.
    assert!(started.elapsed() < Duration::from_secs(5));
    let s = pipeline.stats().best_effort[0].clone();
    assert_eq!(s.enqueued + s.dropped_full, 100, "{s:?}");
    assert!(s.dropped_full >= 95, "{s:?}");
    // Open the gate; shutdown drains what was queued and flushes.
    {
        let (lock, cv) = &*gate;
        *lock.lock().unwrap() = true;
        cv.notify_all();
    }
    let report = pipeline.shutdown(Duration::from_secs(5));
    assert_eq!(report.flushed, vec!["recorder".to_string()]);
    assert!(flushed.load(Ordering::SeqCst));
    let s = pipeline.stats().best_effort[0].clone();
    assert_eq!(s.delivered, s.enqueued);
    assert_eq!(seen.lock().unwrap().len() as u64, s.enqueued);
    // After shutdown: required observers still work; best-effort offers count as closed.
    pipeline.dispatch(&evs[0]).await.unwrap();
    assert_eq!(pipeline.stats().best_effort[0].dropped_closed, 1);
}

#[tokio::test]
async fn best_effort_panic_is_counted_and_it_keeps_going() {
    let (mut rec, seen, _) = recorder();
    rec.panic_on = Some(2);
    let pipeline = PipelineBuilder::new().best_effort(Box::new(rec)).build();
    let (_log, evs) = events(4);
    for e in &evs {
        pipeline.dispatch(e).await.unwrap();
    }
    pipeline.shutdown(Duration::from_secs(5));
    assert_eq!(*seen.lock().unwrap(), vec![1, 3, 4]);
    let s = &pipeline.stats().best_effort[0];
    assert_eq!((s.delivered, s.panicked), (3, 1));
}

#[tokio::test]
async fn shutdown_respects_its_deadline() {
    let (mut rec, _, flushed) = recorder();
    rec.slow_flush = Some(Duration::from_millis(500));
    let pipeline = PipelineBuilder::new().best_effort(Box::new(rec)).build();
    let started = std::time::Instant::now();
    let report = pipeline.shutdown(Duration::from_millis(50));
    assert!(
        started.elapsed() < Duration::from_millis(400),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(report.timed_out, vec!["recorder".to_string()]);
    assert!(!flushed.load(Ordering::SeqCst));
    // Calling it again reports nothing new.
    assert_eq!(
        pipeline.shutdown(Duration::from_millis(10)),
        ShutdownReport::default()
    );
}

/// Many tasks dispatch while another shuts down: every offer is either
/// delivered or counted, never lost, and nothing hangs.
#[test]
fn dispatch_racing_shutdown_loses_nothing() {
    for round in 0..20 {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let (rec, seen, _) = recorder();
        let pipeline = Arc::new(
            PipelineBuilder::new()
                .config(config(1000, 8))
                .best_effort(Box::new(rec))
                .build(),
        );
        let (_log, evs) = events(200);
        let evs = Arc::new(evs);
        rt.block_on(async {
            let mut tasks = Vec::new();
            for t in 0..4 {
                let p = pipeline.clone();
                let evs = evs.clone();
                tasks.push(tokio::spawn(async move {
                    for e in evs.iter().skip(t).step_by(4) {
                        p.dispatch(e).await.unwrap();
                    }
                }));
            }
            let p = pipeline.clone();
            let closer = tokio::task::spawn_blocking(move || {
                std::thread::sleep(Duration::from_micros(50 * round));
                p.shutdown(Duration::from_secs(5))
            });
            for t in tasks {
                t.await.unwrap();
            }
            assert_eq!(closer.await.unwrap().timed_out.len(), 0);
        });
        let s = pipeline.stats().best_effort[0].clone();
        assert_eq!(
            s.enqueued + s.dropped_full + s.dropped_closed,
            200,
            "round {round}: {s:?}"
        );
        assert_eq!(
            s.delivered, s.enqueued,
            "round {round}: every enqueued event is delivered before close completes"
        );
        assert_eq!(seen.lock().unwrap().len() as u64, s.delivered);
    }
}
