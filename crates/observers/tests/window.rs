//! A run's window: group commit within a run, backpressure at the bound,
//! acknowledgements in order, the durable watermark and the log it marks,
//! best-effort offers at the watermark, and refusals at seq N.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use futures_util::FutureExt;
use keel_eventlog::*;
use keel_message::RunId;
use keel_observers::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One batch an observer kept: its run and seqs.
#[derive(Clone)]
struct Offered {
    run: String,
    seqs: Vec<u64>,
}

/// A batch-aware required observer: records each batch it was offered,
/// waits on an optional gate per batch, and refuses the event with a
/// given seq (after acknowledging the events before it in its batch).
#[derive(Default)]
struct Batching {
    name: String,
    batches: Mutex<Vec<Offered>>,
    refuse: Option<u64>,
    gate: Option<Arc<tokio::sync::Semaphore>>,
    delay: Option<Duration>,
    hang: bool,
}

impl Batching {
    fn named(name: &str) -> Batching {
        Batching {
            name: name.into(),
            ..Batching::default()
        }
    }
    fn seen(&self) -> Vec<u64> {
        self.batches
            .lock()
            .unwrap()
            .iter()
            .flat_map(|b| b.seqs.iter().copied())
            .collect()
    }
    fn batch_sizes(&self) -> Vec<usize> {
        self.batches
            .lock()
            .unwrap()
            .iter()
            .map(|b| b.seqs.len())
            .collect()
    }
}

impl RequiredObserver for Batching {
    fn name(&self) -> &str {
        &self.name
    }
    fn observe<'a>(&'a self, event: &'a Arc<Event>) -> ObserveFuture<'a> {
        Box::pin(async move {
            self.observe_batch(std::slice::from_ref(event))
                .await
                .map_err(|e| e.source)
        })
    }
    fn observe_batch<'a>(&'a self, events: &'a [Arc<Event>]) -> ObserveBatchFuture<'a> {
        Box::pin(async move {
            if let Some(gate) = &self.gate {
                gate.acquire().await.unwrap().forget();
            }
            if let Some(d) = self.delay {
                tokio::time::sleep(d).await;
            }
            if self.hang {
                std::future::pending::<()>().await;
            }
            let refused = self
                .refuse
                .and_then(|seq| events.iter().position(|e| e.seq() == seq));
            let kept = refused.unwrap_or(events.len());
            self.batches.lock().unwrap().push(Offered {
                run: events[0].run_id().to_string(),
                seqs: events[..kept].iter().map(|e| e.seq()).collect(),
            });
            match refused {
                None => Ok(()),
                Some(acknowledged) => Err(BatchError {
                    acknowledged,
                    source: ObserverError::Failed("disk full".into()),
                }),
            }
        })
    }
}

/// A best-effort observer that checks, for every event it is offered,
/// that the run log already counts it durable.
struct AtWatermark {
    log: RunLog,
    seen: Arc<Mutex<Vec<u64>>>,
    ahead: Arc<AtomicU64>,
}

impl BestEffortObserver for AtWatermark {
    fn name(&self) -> &str {
        "at-watermark"
    }
    fn observe(&mut self, event: &Arc<Event>) {
        if self.log.durable_seq() < event.seq() {
            self.ahead.fetch_add(1, Ordering::SeqCst);
        }
        self.seen.lock().unwrap().push(event.seq());
    }
}

struct Fixture {
    log: RunLog,
    pipeline: Arc<Pipeline>,
    best_effort: Arc<Mutex<Vec<u64>>>,
    ahead: Arc<AtomicU64>,
}

fn fixture(run: &str, config: PipelineConfig, required: Vec<Arc<Batching>>) -> Fixture {
    let log = RunLog::new(
        RunId::parse(run).unwrap(),
        LogConfig::default(),
        Arc::new(SystemClock),
    )
    .unwrap();
    let best_effort = Arc::new(Mutex::new(Vec::new()));
    let ahead = Arc::new(AtomicU64::new(0));
    let mut builder = PipelineBuilder::new().config(config);
    for r in required {
        builder = builder.required(r);
    }
    let pipeline = Arc::new(
        builder
            .best_effort(Box::new(AtWatermark {
                log: log.clone(),
                seen: best_effort.clone(),
                ahead: ahead.clone(),
            }))
            .build(),
    );
    Fixture {
        log,
        pipeline,
        best_effort,
        ahead,
    }
}

fn commit(log: &RunLog, first: bool) -> Arc<Event> {
    let payload = if first {
        Payload::RunStarted(RunStarted::default())
    } else {
        Payload::Extension {
            kind: EventKind::parse("test.note").unwrap(),
            payload: keel_message::CanonicalJson::parse(r#"{"n":"0123456789"}"#).unwrap(),
        }
    };
    log.commit(&payload).unwrap()
}

fn window_config(events: usize, bytes: usize) -> PipelineConfig {
    PipelineConfig {
        required_deadline: Duration::from_secs(5),
        window_events: events,
        window_bytes: bytes,
        ..PipelineConfig::default()
    }
}

/// Commits `n` events as fast as the window admits them.
async fn submit_all(log: &RunLog, window: &RunWindow, n: u64) -> Result<(), WindowError> {
    for i in 0..n {
        window.submit(&commit(log, i == 0)).await?;
    }
    Ok(())
}

/// Under a slow observer, the events pending while a batch is in flight
/// go as one batch: fewer batches than events, none over the bound, every
/// event once and in order; the log and the best-effort observer follow
/// the watermark, never ahead of it.
#[tokio::test]
async fn pending_events_are_acknowledged_as_one_batch_in_order() {
    let mut slow = Batching::named("journal");
    slow.delay = Some(Duration::from_millis(2));
    let slow = Arc::new(slow);
    let f = fixture("run_1", window_config(64, 1 << 20), vec![slow.clone()]);
    let window = f.pipeline.window(f.log.clone());
    submit_all(&f.log, &window, 300).await.unwrap();
    window.durable(300).await.unwrap();
    assert_eq!(slow.seen(), (1..=300).collect::<Vec<_>>());
    let sizes = slow.batch_sizes();
    assert!(sizes.iter().all(|s| *s <= 64), "{sizes:?}");
    assert!(
        sizes.len() < 300 / 4,
        "no grouping: {} batches",
        sizes.len()
    );
    assert_eq!(window.watermark(), 300);
    assert_eq!(f.log.durable_seq(), 300);
    f.pipeline.shutdown(Duration::from_secs(5));
    assert_eq!(
        *f.best_effort.lock().unwrap(),
        (1..=300).collect::<Vec<_>>()
    );
    assert_eq!(
        f.ahead.load(Ordering::SeqCst),
        0,
        "a best-effort offer ran ahead"
    );
}

/// One row per bound: with the observer held, exactly `admitted` submits
/// complete and the next one waits; releasing it lets the run go on.
#[tokio::test]
async fn a_full_window_waits() {
    check_full(8, 1 << 20, 8).await; // the event bound
    let line = commit(
        &RunLog::new(
            RunId::parse("run_1").unwrap(),
            LogConfig::default(),
            Arc::new(SystemClock),
        )
        .unwrap(),
        false,
    )
    .line()
    .len();
    check_full(256, 3 * line, 3).await; // the byte bound
    check_full(256, 1, 1).await; // a larger event is admitted alone
}

async fn check_full(events: usize, bytes: usize, admitted: u64) {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let mut held = Batching::named("journal");
    held.gate = Some(gate.clone());
    let held = Arc::new(held);
    let f = fixture("run_1", window_config(events, bytes), vec![held.clone()]);
    // The first event is taken alone; hold it, and fill the window behind.
    let window = f.pipeline.window(f.log.clone());
    window.submit(&commit(&f.log, true)).await.unwrap();
    tokio::task::yield_now().await;
    for _ in 1..admitted {
        window.submit(&commit(&f.log, false)).await.unwrap();
    }
    // `admitted` events in flight (the held one included): the next waits.
    let next = commit(&f.log, false);
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert!(
        window.submit(&next).now_or_never().is_none(),
        "bounds {events}/{bytes}: submit {} did not wait",
        admitted + 1
    );
    gate.add_permits(1000);
    window.submit(&next).await.unwrap();
    window.durable(next.seq()).await.unwrap();
    assert_eq!(held.seen(), (1..=next.seq()).collect::<Vec<_>>());
}

/// A refusal at seq 5 in the middle of a batch: the watermark stops at 4,
/// the observer after the refusing one was offered only 1..=4, every
/// later submit and a barrier at 5 return the refusal naming seq 5, and
/// nothing after 4 is marked durable or offered best-effort.
#[tokio::test]
async fn a_refusal_stops_the_window_at_its_seq() {
    let mut journal = Batching::named("journal");
    journal.refuse = Some(5);
    journal.delay = Some(Duration::from_millis(5));
    let journal = Arc::new(journal);
    let mirror = Arc::new(Batching::named("mirror"));
    let f = fixture(
        "run_1",
        window_config(64, 1 << 20),
        vec![journal.clone(), mirror.clone()],
    );
    let window = f.pipeline.window(f.log.clone());
    // 40 fit the window, so the refusal may surface only after them.
    let _ = submit_all(&f.log, &window, 40).await;
    let barrier = window.durable(5).await;
    let later = window.submit(&commit(&f.log, false)).await;
    for result in [barrier, later] {
        match result {
            Err(WindowError::Refused(e)) => {
                assert_eq!((e.observer.as_str(), e.index, e.seq), ("journal", 0, 5));
            }
            other => panic!("{other:?}"),
        }
    }
    window.durable(4).await.unwrap();
    assert_eq!(window.watermark(), 4);
    assert_eq!(f.log.durable_seq(), 4);
    assert_eq!(mirror.seen(), vec![1, 2, 3, 4]);
    assert_eq!(window.failure().map(|e| e.seq), Some(5));
    f.pipeline.shutdown(Duration::from_secs(5));
    assert_eq!(*f.best_effort.lock().unwrap(), vec![1, 2, 3, 4]);
    assert_eq!(f.pipeline.stats().refused, 1);
}

/// A batch that hangs past the deadline refuses its first event with
/// `DeadlineExceeded`; nothing of it is acknowledged.
#[tokio::test]
async fn a_hanging_batch_is_refused_at_the_deadline() {
    let mut hung = Batching::named("remote");
    hung.hang = true;
    let f = fixture(
        "run_1",
        PipelineConfig {
            required_deadline: Duration::from_millis(50),
            ..window_config(64, 1 << 20)
        },
        vec![Arc::new(hung)],
    );
    let window = f.pipeline.window(f.log.clone());
    window.submit(&commit(&f.log, true)).await.unwrap();
    match window.durable(1).await {
        Err(WindowError::Refused(e)) => {
            assert_eq!(e.seq, 1);
            assert!(matches!(
                e.source,
                ObserverError::DeadlineExceeded { deadline_ms: 50 }
            ));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(f.log.durable_seq(), 0);
}

/// Without required observers, committed is durable: each submit raises
/// the watermark and the log's durable seq at once, with no flusher.
#[test]
fn without_required_observers_a_submit_is_durable_at_once() {
    let f = fixture("run_1", window_config(1, 1), vec![]);
    let window = f.pipeline.window(f.log.clone());
    for i in 0..5 {
        let e = commit(&f.log, i == 0);
        // No runtime here: nothing may need one.
        window.submit(&e).now_or_never().unwrap().unwrap();
        assert_eq!(
            (window.watermark(), f.log.durable_seq()),
            (e.seq(), e.seq())
        );
    }
}

/// A window dropped with events in flight still gets them acknowledged:
/// the flusher drains, then ends (it lets go of the pipeline; a flusher
/// left parked would hold it, and the run's log, for good).
#[tokio::test]
async fn a_dropped_window_still_drains() {
    let mut slow = Batching::named("journal");
    slow.delay = Some(Duration::from_millis(2));
    let slow = Arc::new(slow);
    let f = fixture("run_1", window_config(64, 1 << 20), vec![slow.clone()]);
    let holders = Arc::strong_count(&f.pipeline);
    let window = f.pipeline.window(f.log.clone());
    submit_all(&f.log, &window, 50).await.unwrap();
    drop(window);
    let mut sub = f
        .log
        .subscribe(
            0,
            SubscriptionBounds {
                durability: Durability::Durable,
                ..SubscriptionBounds::default()
            },
        )
        .unwrap();
    let mut last = 0;
    while last < 50 {
        let e = tokio::time::timeout(Duration::from_secs(10), sub.recv())
            .await
            .expect("the dropped window did not drain")
            .unwrap()
            .unwrap();
        last = e.seq();
    }
    assert_eq!(slow.seen(), (1..=50).collect::<Vec<_>>());
    tokio::time::timeout(Duration::from_secs(10), async {
        while Arc::strong_count(&f.pipeline) > holders {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("the flusher of a dropped window did not end");
}

/// Stress: 8 runs on a multi-threaded runtime share one pipeline; each
/// run's events reach the observer gap-free and in order, in batches, and
/// each log ends durable at its last seq.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_runs_in_parallel_keep_their_order() {
    let journal = Arc::new(Batching::named("journal"));
    let pipeline = Arc::new(
        PipelineBuilder::new()
            .config(window_config(32, 1 << 20))
            .required(journal.clone())
            .build(),
    );
    let mut tasks = Vec::new();
    for r in 0..8 {
        let pipeline = pipeline.clone();
        tasks.push(tokio::spawn(async move {
            let log = RunLog::new(
                RunId::parse(&format!("run_{r}")).unwrap(),
                LogConfig::default(),
                Arc::new(SystemClock),
            )
            .unwrap();
            let window = pipeline.window(log.clone());
            for i in 0..2_000u64 {
                window.submit(&commit(&log, i == 0)).await.unwrap();
                if i % 97 == 0 {
                    tokio::task::yield_now().await;
                }
            }
            window.durable(2_000).await.unwrap();
            assert_eq!(log.durable_seq(), 2_000);
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let batches = journal.batches.lock().unwrap().clone();
    assert!(batches.iter().all(|b| b.seqs.len() <= 32));
    for r in 0..8 {
        let run = format!("run_{r}");
        let seqs: Vec<u64> = batches
            .iter()
            .filter(|b| b.run == run)
            .flat_map(|b| b.seqs.iter().copied())
            .collect();
        assert!(
            seqs == (1..=2_000).collect::<Vec<_>>(),
            "{run}: out of order or incomplete"
        );
    }
}

/// Polls `future` once, after letting the flusher run: `None` while it
/// waits.
async fn poll_after_yields<F: std::future::Future + Unpin>(future: &mut F) -> Option<F::Output> {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    future.now_or_never()
}

/// `finish` closes the window and waits for the batch in flight and what
/// is pending behind it; a barrier asked while it waits waits too (the
/// window is closed, but what it admitted will still be acknowledged);
/// afterwards the watermark covers everything admitted and a submit is
/// refused as closed at that watermark.
#[tokio::test]
async fn finish_waits_until_everything_admitted_is_acknowledged() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let mut held = Batching::named("journal");
    held.gate = Some(gate.clone());
    let held = Arc::new(held);
    let f = fixture("run_1", window_config(64, 1 << 20), vec![held.clone()]);
    let window = f.pipeline.window(f.log.clone());
    submit_all(&f.log, &window, 3).await.unwrap();
    let finish = window.finish();
    tokio::pin!(finish);
    assert!(
        poll_after_yields(&mut finish).await.is_none(),
        "finish returned with 3 events unacknowledged"
    );
    let barrier = window.durable(3);
    tokio::pin!(barrier);
    assert!(
        poll_after_yields(&mut barrier).await.is_none(),
        "a barrier on a closed window with events in flight did not wait"
    );
    gate.add_permits(1000);
    tokio::time::timeout(Duration::from_secs(10), finish)
        .await
        .expect("finish did not return once the observer acknowledged");
    assert_eq!((window.watermark(), f.log.durable_seq()), (3, 3));
    barrier.await.unwrap();
    assert_eq!(held.seen(), vec![1, 2, 3]);
    // What a log line shows of a window: its run and how far it is durable.
    let shown = format!("{window:?}");
    assert!(
        shown.contains("run_id: \"run_1\"") && shown.contains("watermark: 3"),
        "{shown}"
    );
    let refused = window.submit(&commit(&f.log, false)).await;
    assert!(
        matches!(refused, Err(WindowError::Closed { watermark: 3, .. })),
        "{refused:?}"
    );
}

/// A window that was never given an event has no flusher: `finish`
/// returns at once, and a barrier on the closed window is refused at
/// once instead of waiting for an acknowledgement that cannot come.
#[tokio::test]
async fn finish_and_barriers_on_an_unused_window_return_at_once() {
    let f = fixture(
        "run_1",
        window_config(64, 1 << 20),
        vec![Arc::new(Batching::named("journal"))],
    );
    let window = f.pipeline.window(f.log.clone());
    assert!(
        window.finish().now_or_never().is_some(),
        "finish waited on an empty window"
    );
    let barrier = window.durable(1).now_or_never();
    assert!(
        matches!(barrier, Some(Err(WindowError::Closed { watermark: 0, .. }))),
        "{barrier:?}"
    );
}

/// A barrier on an open window waits for its seq even while nothing is
/// in flight (the event may not be submitted yet), and is released by
/// the acknowledgement.
#[tokio::test]
async fn a_barrier_ahead_of_the_submits_waits_for_them() {
    let journal = Arc::new(Batching::named("journal"));
    let f = fixture("run_1", window_config(64, 1 << 20), vec![journal.clone()]);
    let window = f.pipeline.window(f.log.clone());
    let barrier = window.durable(2);
    tokio::pin!(barrier);
    assert!(
        poll_after_yields(&mut barrier).await.is_none(),
        "a barrier on an open, empty window did not wait"
    );
    submit_all(&f.log, &window, 2).await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), barrier)
        .await
        .expect("the barrier was not released")
        .unwrap();
    assert_eq!(journal.seen(), vec![1, 2]);
}

/// The byte bound is inclusive: events whose lines add up to exactly the
/// bound are all admitted, and the next one waits.
#[tokio::test]
async fn the_byte_bound_admits_up_to_and_including_it() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let mut held = Batching::named("journal");
    held.gate = Some(gate.clone());
    let held = Arc::new(held);
    let log = RunLog::new(
        RunId::parse("run_1").unwrap(),
        LogConfig::default(),
        Arc::new(SystemClock),
    )
    .unwrap();
    let events: Vec<_> = (0..4).map(|i| commit(&log, i == 0)).collect();
    let exact: usize = events[..3].iter().map(|e| e.line().len()).sum();
    let f = fixture("run_1", window_config(256, exact), vec![held.clone()]);
    let window = f.pipeline.window(log.clone());
    for e in &events[..3] {
        let admitted = window.submit(e).now_or_never();
        assert!(
            matches!(admitted, Some(Ok(()))),
            "seq {} within the bound of {exact} bytes: {admitted:?}",
            e.seq()
        );
    }
    assert!(
        window.submit(&events[3]).now_or_never().is_none(),
        "seq 4 past the bound did not wait"
    );
    gate.add_permits(1000);
    window.submit(&events[3]).await.unwrap();
    window.durable(4).await.unwrap();
    assert_eq!(held.seen(), vec![1, 2, 3, 4]);
}

/// `settle` returns the watermark only when it rose: settling a batch
/// again (an event submitted twice) leaves it where it is and says so.
#[test]
fn settle_reports_the_watermark_only_when_it_rose() {
    let f = fixture("run_1", window_config(64, 1 << 20), vec![]);
    let core = f.pipeline.window_core("run_1".into());
    let e = commit(&f.log, true);
    let mut settled = Vec::new();
    for _ in 0..2 {
        assert!(matches!(core.admit(&e), Admission::Queued { .. }));
        let Take::Batch(batch) = core.take() else {
            panic!("nothing to take")
        };
        settled.push(core.settle(&batch, BatchOutcome::all(batch.len())).raised());
    }
    assert_eq!(settled, [Some(1), None]);
    assert_eq!(core.watermark(), 1);
}

/// The core holds no pipeline: `settle` hands back exactly the prefix
/// every required observer acknowledged, in order, for the caller to offer
/// to the best-effort observers, and a refused batch's tail is not in it.
#[test]
fn settle_hands_back_only_the_acknowledged_prefix_to_offer() {
    let f = fixture("run_1", window_config(64, 1 << 20), vec![]);
    let core = f.pipeline.window_core("run_1".into());
    for i in 0..3 {
        assert!(matches!(
            core.admit(&commit(&f.log, i == 0)),
            Admission::Queued { .. }
        ));
    }
    let Take::Batch(batch) = core.take() else {
        panic!("nothing to take")
    };
    let refusal = DispatchError {
        observer: "journal".into(),
        index: 0,
        run_id: RunId::parse("run_1").unwrap(),
        seq: 3,
        source: ObserverError::Failed("disk full".into()),
    };
    let outcome = BatchOutcome {
        acknowledged: 2,
        error: Some(refusal),
    };
    let settled = core.settle(&batch, outcome);
    let offered: Vec<u64> = settled.to_offer().iter().map(|e| e.seq()).collect();
    assert_eq!(offered, [1, 2]);
    assert_eq!(settled.raised(), Some(2));
    assert_eq!(core.watermark(), 2);
    // Nothing was offered behind the caller's back.
    assert!(f.best_effort.lock().unwrap().is_empty());
}
