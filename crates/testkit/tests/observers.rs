//! Recording and faulty observers, driven through the real dispatch
//! pipeline.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use keel_eventlog::*;
use keel_observers::*;
use keel_testkit::*;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// A complete three-event run, committed.
fn events() -> Vec<Arc<Event>> {
    let (log, _) = log();
    commit_all(
        &log,
        &[
            Payload::RunStarted(RunStarted::default()),
            Payload::TurnStarted(TurnRef {
                turn: 1,
                extra: Extra::new(),
            }),
            Payload::TurnCompleted(TurnRef {
                turn: 1,
                extra: Extra::new(),
            }),
            Payload::RunCompleted(RunCompleted::default()),
        ],
    )
}

fn pipeline(required: Vec<Arc<dyn RequiredObserver>>, deadline: Duration) -> Pipeline {
    let mut builder = PipelineBuilder::new().config(PipelineConfig {
        required_deadline: deadline,
        ..PipelineConfig::default()
    });
    for observer in required {
        builder = builder.required(observer);
    }
    builder.build()
}

#[tokio::test]
async fn recording_observers_keep_what_the_pipeline_delivers() {
    let required = RecordingObserver::named("journal");
    let best_effort = RecordingBestEffort::new();
    let pipeline = PipelineBuilder::new()
        .required(Arc::new(required.clone()))
        .best_effort(Box::new(best_effort.clone()))
        .build();
    let events = events();
    for event in &events {
        pipeline.dispatch(event).await.unwrap();
    }
    required.wait_for(events.len()).await;
    assert_eq!(required.events(), events);
    assert_eq!(
        required.lines(),
        events
            .iter()
            .map(|e| e.line().to_owned())
            .collect::<Vec<_>>()
    );
    assert_lifecycle(&required.events());
    let report = pipeline.shutdown(Duration::from_secs(5));
    assert_eq!(report.flushed, vec!["recording-best-effort".to_owned()]);
    assert_eq!(best_effort.events(), events);
    assert_eq!(best_effort.lines(), required.lines());
    assert_eq!(best_effort.flushed(), 1);
    assert_eq!(RequiredObserver::name(&required), "journal");
}

#[tokio::test]
async fn redelivery_is_idempotent_and_a_conflict_is_refused() {
    let recorder = RecordingObserver::new();
    let events = events();
    recorder.observe(&events[0]).await.unwrap();
    recorder.observe(&events[0]).await.unwrap();
    assert_eq!((recorder.len(), recorder.redelivered()), (1, 1));
    // Another run's seq 1 is a different key, not a conflict.
    let (other, _) = {
        let clock = ManualClock::default();
        let log = RunLog::new(
            keel_message::RunId::parse("run_2").unwrap(),
            LogConfig::default(),
            Arc::new(clock.clone()),
        )
        .unwrap();
        (log, clock)
    };
    let foreign = other
        .commit(&Payload::RunStarted(RunStarted::default()))
        .unwrap();
    recorder.observe(&foreign).await.unwrap();
    assert_eq!(recorder.len(), 2);
    assert_eq!(recorder.events_for(foreign.run_id()), vec![foreign]);
    // Same run, same seq, other bytes: a conflict.
    let (log, clock) = log();
    clock.advance(Duration::from_secs(1));
    let different = log
        .commit(&Payload::RunStarted(RunStarted::default()))
        .unwrap();
    assert_ne!(different.line(), events[0].line());
    assert!(matches!(
        recorder.observe(&different).await,
        Err(ObserverError::Conflict { seq: 1, .. })
    ));
}

#[tokio::test]
async fn fail_on_refuses_exactly_the_nth_offer() {
    let observer = FaultyObserver::named("journal", Fault::FailOn(2));
    let after = RecordingObserver::new();
    let pipeline = pipeline(
        vec![Arc::new(observer.clone()), Arc::new(after.clone())],
        Duration::from_secs(10),
    );
    let events = events();
    pipeline.dispatch(&events[0]).await.unwrap();
    let refused = pipeline.dispatch(&events[1]).await.unwrap_err();
    assert_eq!((refused.observer.as_str(), refused.seq), ("journal", 2));
    assert!(matches!(refused.source, ObserverError::Failed(_)));
    // Later required observers did not see the refused event.
    assert_eq!(after.len(), 1);
    // A redelivery (the 3rd offer) succeeds.
    pipeline.dispatch(&events[1]).await.unwrap();
    assert_eq!(observer.acknowledged(), events[..2].to_vec());
    assert_eq!((observer.offered(), observer.refused()), (3, 1));
}

#[tokio::test]
async fn fail_from_refuses_every_later_offer() {
    let observer = FaultyObserver::new(Fault::FailFrom(2));
    let events = events();
    assert!(observer.observe(&events[0]).await.is_ok());
    for event in &events[1..] {
        assert!(observer.observe(event).await.is_err());
    }
    assert_eq!(observer.lines(), vec![events[0].line().to_owned()]);
    assert_eq!(observer.refused(), 3);
    assert_eq!(observer.fault(), Fault::FailFrom(2));
}

#[tokio::test(start_paused = true)]
async fn hang_on_meets_the_deadline_and_is_cancel_safe() {
    let observer = FaultyObserver::new(Fault::HangOn(2));
    let pipeline = pipeline(vec![Arc::new(observer.clone())], Duration::from_secs(10));
    let events = events();
    pipeline.dispatch(&events[0]).await.unwrap();
    let t0 = Instant::now();
    let refused = pipeline.dispatch(&events[1]).await.unwrap_err();
    assert_eq!(t0.elapsed(), Duration::from_secs(10));
    assert_eq!(
        refused.source,
        ObserverError::DeadlineExceeded {
            deadline_ms: 10_000
        }
    );
    // The dropped future recorded nothing and counted one cancellation.
    assert_eq!(
        (observer.acknowledged().len(), observer.cancelled()),
        (1, 1)
    );
    // The next offer is answered normally.
    pipeline.dispatch(&events[1]).await.unwrap();
    assert_eq!(observer.acknowledged().len(), 2);
}

#[tokio::test]
async fn panic_on_is_caught_by_the_pipeline() {
    let observer = FaultyObserver::new(Fault::PanicOn(1));
    let pipeline = pipeline(vec![Arc::new(observer.clone())], Duration::from_secs(10));
    let events = events();
    let refused = pipeline.dispatch(&events[0]).await.unwrap_err();
    assert_eq!(refused.source, ObserverError::Panicked);
    pipeline.dispatch(&events[0]).await.unwrap();
    assert_eq!((observer.offered(), observer.acknowledged().len()), (2, 1));
    assert_eq!(observer.cancelled(), 0);
}

#[tokio::test(start_paused = true)]
async fn slow_applies_backpressure_to_every_event() {
    let observer = FaultyObserver::new(Fault::Slow(Duration::from_millis(250)));
    let pipeline = pipeline(vec![Arc::new(observer.clone())], Duration::from_secs(10));
    let events = events();
    let t0 = Instant::now();
    for event in &events {
        pipeline.dispatch(event).await.unwrap();
    }
    assert_eq!(t0.elapsed(), Duration::from_millis(250 * 4));
    assert_eq!(observer.acknowledged(), events);
    // Dropping mid-sleep records nothing.
    let observer = FaultyObserver::new(Fault::Slow(Duration::from_secs(5)));
    let gave_up = tokio::time::timeout(Duration::from_secs(1), observer.observe(&events[0])).await;
    assert!(gave_up.is_err());
    assert_eq!(
        (observer.acknowledged().len(), observer.cancelled()),
        (0, 1)
    );
}

#[tokio::test]
async fn waiting_for_offers() {
    let observer = FaultyObserver::new(Fault::FailOn(99));
    let events = events();
    let waiter = {
        let observer = observer.clone();
        tokio::spawn(async move { observer.wait_offered(2).await })
    };
    for event in &events[..2] {
        observer.observe(event).await.unwrap();
    }
    waiter.await.unwrap();
}

#[test]
fn manual_clock_stamps_events_and_the_log_keeps_ts_monotonic() {
    let (log, clock) = log();
    clock.set(5_000);
    let first = log
        .commit(&Payload::RunStarted(RunStarted::default()))
        .unwrap();
    assert_eq!(first.ts(), 5_000);
    clock.advance(Duration::from_micros(7));
    let second = log
        .commit(&Payload::TurnStarted(TurnRef {
            turn: 1,
            extra: Extra::new(),
        }))
        .unwrap();
    assert_eq!(second.ts(), 5_007);
    // The clock goes backwards; the log does not.
    clock.set(1);
    let third = log
        .commit(&Payload::TurnCompleted(TurnRef {
            turn: 1,
            extra: Extra::new(),
        }))
        .unwrap();
    assert_eq!(third.ts(), 5_007);
    assert_eq!(clock.now(), 1);
    clock.set(u64::MAX - 1);
    clock.advance(Duration::from_secs(1));
    assert_eq!(clock.now(), u64::MAX);
}

/// `PanicOn` is asynchronous (building the future is fine, polling it
/// panics); `PanicSyncOn` panics in `observe` itself. The handle counts
/// both, neither as a refusal nor a cancellation.
#[tokio::test]
async fn panic_on_is_async_and_panic_sync_on_is_sync() {
    let events = events();
    let is_async = FaultyObserver::new(Fault::PanicOn(1));
    let future = is_async.observe(&events[0]);
    assert_eq!(is_async.panicked(), 0, "nothing happened before the poll");
    // The future borrows the observer and the event: drive it on a
    // scoped thread of its own, where the panic is caught at the join.
    let polled = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                tokio::runtime::Builder::new_current_thread()
                    .build()
                    .unwrap()
                    .block_on(future)
            })
            .join()
    });
    let payload = polled.expect_err("polling panics");
    assert_eq!(
        panic_message(&*payload),
        Some("scripted observer panic on event 1")
    );

    let is_sync = FaultyObserver::new(Fault::PanicSyncOn(2));
    assert_eq!(is_sync.observe(&events[0]).await, Ok(()));
    let message = sync_panic(|| is_sync.observe(&events[1]));
    assert_eq!(message, "scripted synchronous observer panic on event 2");
    assert_eq!(is_sync.observe(&events[1]).await, Ok(()), "third offer");
    for (observer, offered, acknowledged) in [(&is_async, 1, 0), (&is_sync, 3, 2)] {
        assert_eq!(
            (
                observer.offered(),
                observer.panicked(),
                observer.refused(),
                observer.cancelled(),
                observer.acknowledged().len()
            ),
            (offered, 1, 0, 0, acknowledged),
            "{:?}",
            observer.fault()
        );
    }
}

/// Through the real pipeline, a synchronous panic is caught just like an
/// asynchronous one: the dispatch is refused with `Panicked`, the task
/// lives on, and a redelivery is acknowledged.
#[tokio::test]
async fn panic_sync_on_is_caught_by_the_pipeline() {
    let observer = FaultyObserver::new(Fault::PanicSyncOn(1));
    let pipeline = Arc::new(pipeline(
        vec![Arc::new(observer.clone())],
        Duration::from_secs(10),
    ));
    let events = Arc::new(events());
    let (p, e) = (Arc::clone(&pipeline), Arc::clone(&events));
    let refused = tokio::spawn(async move { p.dispatch(&e[0]).await })
        .await
        .expect("the panic stays inside the pipeline")
        .unwrap_err();
    assert_eq!(refused.source, ObserverError::Panicked);
    pipeline.dispatch(&events[0]).await.unwrap();
    assert_eq!(
        (
            observer.offered(),
            observer.panicked(),
            observer.acknowledged().len()
        ),
        (2, 1, 1)
    );
}
