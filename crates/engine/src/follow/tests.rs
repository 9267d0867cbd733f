//! The follower against a hand-driven log and store: the seam between
//! them, the in-flight wait, cursors and bounds.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

use super::*;
use futures_util::FutureExt;
use keel_eventlog::{LogConfig, Payload, RunCompleted, RunStarted, SystemClock};
use keel_message::CanonicalJson;
use keel_observers::StoredRun;
use std::sync::Mutex;

/// A store the test fills by hand: what is in it is "durable".
#[derive(Default)]
struct Store {
    events: Mutex<Vec<Arc<Event>>>,
    /// Reads answered so far.
    reads: Mutex<u64>,
}

impl Store {
    fn push(&self, events: &[Arc<Event>]) {
        self.events.lock().unwrap().extend(events.iter().cloned());
    }
    fn reads(&self) -> u64 {
        *self.reads.lock().unwrap()
    }
}

impl RunHistory for Store {
    fn name(&self) -> &str {
        "test"
    }
    fn stored(&self, run_id: &RunId) -> Result<Option<StoredRun>, RunHistoryError> {
        let events = self.events.lock().unwrap();
        let mine: Vec<_> = events.iter().filter(|e| e.run_id() == run_id).collect();
        Ok(mine.last().map(|e| {
            let status = if e.kind().is_run_terminal() {
                keel_observers::RunStatus::Completed
            } else {
                keel_observers::RunStatus::Running
            };
            StoredRun::new(e.seq(), status)
        }))
    }
    fn read_after(
        &self,
        run_id: &RunId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<Arc<Event>>, RunHistoryError> {
        *self.reads.lock().unwrap() += 1;
        let events = self.events.lock().unwrap();
        Ok(events
            .iter()
            .filter(|e| e.run_id() == run_id && e.seq() > after)
            .take(limit)
            .cloned()
            .collect())
    }
}

fn run_id() -> RunId {
    RunId::parse("run_f").unwrap()
}

/// A log that retains only 8 events.
fn small_log() -> RunLog {
    let config = LogConfig {
        max_events: 8,
        max_open_scopes: 4,
        max_event_bytes: 4096,
        max_bytes: 1 << 20,
        ..LogConfig::default()
    };
    RunLog::new(run_id(), config, Arc::new(SystemClock)).unwrap()
}

fn note() -> Payload {
    Payload::Extension {
        kind: keel_eventlog::EventKind::parse("test.note").unwrap(),
        payload: CanonicalJson::parse(r#"{"n":1}"#).unwrap(),
    }
}

/// Commits `n` notes (after `run.started` when the log is empty).
fn commit(log: &RunLog, n: usize) -> Vec<Arc<Event>> {
    let mut out = Vec::new();
    if log.stats().last_seq == 0 {
        out.push(
            log.commit(&Payload::RunStarted(RunStarted::default()))
                .unwrap(),
        );
    }
    for _ in 0..n {
        out.push(log.commit(&note()).unwrap());
    }
    out
}

fn finish(log: &RunLog) -> Arc<Event> {
    log.commit(&Payload::RunCompleted(RunCompleted::default()))
        .unwrap()
}

/// Stores `events` and raises the watermark over them.
fn durable(log: &RunLog, store: &Store, events: &[Arc<Event>]) {
    store.push(events);
    if let Some(last) = events.last() {
        log.mark_durable(last.seq());
    }
}

const COMMITTED: SubscriptionBounds = SubscriptionBounds {
    max_events: 4096,
    max_bytes: 8 << 20,
    durability: Durability::Committed,
};

async fn open(
    log: Option<&RunLog>,
    store: Option<&Arc<Store>>,
    after: u64,
    bounds: SubscriptionBounds,
) -> Result<RunFollower, FollowError> {
    let history = store.map(|s| Arc::clone(s) as Arc<dyn RunHistory>);
    RunFollower::open(run_id(), after, bounds, log.cloned(), history).await
}

async fn take(follower: &mut RunFollower, n: usize) -> Vec<u64> {
    let mut seqs = Vec::new();
    while seqs.len() < n {
        match follower.next().await {
            Some(event) => seqs.push(event.unwrap().seq()),
            None => break,
        }
    }
    seqs
}

async fn drain(follower: &mut RunFollower) -> Vec<u64> {
    take(follower, usize::MAX).await
}

#[tokio::test]
async fn the_seam_has_no_gap_and_no_duplicate_across_eviction() {
    let (log, store) = (small_log(), Arc::new(Store::default()));
    let first = commit(&log, 40);
    durable(&log, &store, &first);
    let mut follower = open(Some(&log), Some(&store), 0, COMMITTED).await.unwrap();
    // From the store: the log keeps only 33..=41.
    let mut seen = take(&mut follower, 10).await;
    // While it reads, the log moves on and evicts past its cursor.
    let more = commit(&log, 30);
    durable(&log, &store, &more);
    seen.extend(take(&mut follower, 25).await);
    let rest = commit(&log, 5);
    durable(&log, &store, &rest);
    let end = finish(&log);
    durable(&log, &store, &[end]);
    seen.extend(drain(&mut follower).await);
    assert_eq!(seen, (1..=77).collect::<Vec<_>>());
    assert!(follower.is_finished());
    assert_eq!(follower.cursor(), 77);
    assert!(follower.next().await.is_none());
}

#[tokio::test]
async fn a_live_subscription_overtaken_by_eviction_reads_the_store() {
    let (log, store) = (small_log(), Arc::new(Store::default()));
    let first = commit(&log, 3);
    durable(&log, &store, &first);
    let mut follower = open(Some(&log), Some(&store), 0, COMMITTED).await.unwrap();
    assert_eq!(take(&mut follower, 2).await, [1, 2]);
    // The subscription's next events are evicted under it.
    let more = commit(&log, 20);
    durable(&log, &store, &more);
    let reads = store.reads();
    let end = finish(&log);
    durable(&log, &store, &[end]);
    assert_eq!(drain(&mut follower).await, (3..=25).collect::<Vec<_>>());
    assert!(
        store.reads() > reads,
        "the evicted events came from the store"
    );
}

#[tokio::test]
async fn resuming_at_the_cursor_repeats_nothing() {
    let (log, store) = (small_log(), Arc::new(Store::default()));
    let events = commit(&log, 30);
    durable(&log, &store, &events);
    let end = finish(&log);
    durable(&log, &store, &[end]);
    let mut first = open(Some(&log), Some(&store), 0, COMMITTED).await.unwrap();
    let mut seen = take(&mut first, 12).await;
    let cursor = first.cursor();
    drop(first);
    let mut second = open(Some(&log), Some(&store), cursor, COMMITTED)
        .await
        .unwrap();
    seen.extend(drain(&mut second).await);
    assert_eq!(seen, (1..=32).collect::<Vec<_>>());
    // At the terminal: nothing follows, and the follower says so.
    let at_end = open(Some(&log), Some(&store), 32, COMMITTED).await.unwrap();
    assert!(at_end.is_finished());
}

#[tokio::test(start_paused = true)]
async fn an_evicted_event_not_yet_durable_is_waited_for() {
    let (log, store) = (small_log(), Arc::new(Store::default()));
    let first = commit(&log, 2);
    durable(&log, &store, &first);
    // Committed and evicted, not durable: on its way to the store.
    let in_flight = commit(&log, 20);
    // Nothing after 3 is retained or stored yet: the follower opens and
    // waits for it.
    let mut follower = open(Some(&log), Some(&store), 3, COMMITTED).await.unwrap();
    let writer = {
        let (log, store) = (log.clone(), Arc::clone(&store));
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            durable(&log, &store, &in_flight);
            let end = finish(&log);
            durable(&log, &store, &[end]);
        })
    };
    assert_eq!(drain(&mut follower).await, (4..=24).collect::<Vec<_>>());
    writer.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn the_in_flight_wait_is_bounded() {
    let (log, store) = (small_log(), Arc::new(Store::default()));
    let first = commit(&log, 2);
    durable(&log, &store, &first);
    let _never_stored = commit(&log, 20);
    let mut follower = open(Some(&log), Some(&store), 0, COMMITTED).await.unwrap();
    assert_eq!(take(&mut follower, 3).await, [1, 2, 3]);
    // Returns (virtual time runs while it polls) instead of waiting forever.
    match follower.next().await {
        Some(Err(FollowError::Gap {
            last_delivered: 3,
            next_available,
        })) => assert_eq!(next_available, log.stats().earliest_seq),
        other => panic!("{other:?}"),
    }
    assert!(follower.is_finished());
}

#[tokio::test]
async fn an_evicted_durable_event_missing_from_the_store_is_a_gap() {
    let (log, store) = (small_log(), Arc::new(Store::default()));
    let first = commit(&log, 2);
    durable(&log, &store, &first);
    let lost = commit(&log, 20);
    // Durable (the watermark says so) but the store skipped it.
    log.mark_durable(lost.last().unwrap().seq());
    let mut follower = open(Some(&log), Some(&store), 0, COMMITTED).await.unwrap();
    assert_eq!(take(&mut follower, 3).await, [1, 2, 3]);
    assert!(matches!(
        follower.next().await,
        Some(Err(FollowError::Gap {
            last_delivered: 3,
            ..
        }))
    ));
}

#[tokio::test]
async fn a_cursor_neither_retained_nor_stored_is_refused() {
    let (log, store) = (small_log(), Arc::new(Store::default()));
    let events = commit(&log, 30);
    log.mark_durable(events.last().unwrap().seq());
    // The store lacks the start, and nothing after 5 is retained.
    store.push(&events[10..]);
    match open(Some(&log), Some(&store), 5, COMMITTED).await {
        Err(FollowError::CursorExpired {
            requested: 5,
            earliest,
            latest: 31,
        }) => assert_eq!(earliest, log.stats().earliest_seq),
        other => panic!("{other:?}"),
    }
    // Without a store the live log is all there is.
    assert!(matches!(
        open(Some(&log), None, 5, COMMITTED).await,
        Err(FollowError::CursorExpired { requested: 5, .. })
    ));
    assert!(matches!(
        open(Some(&log), Some(&store), 32, COMMITTED).await,
        Err(FollowError::CursorAhead {
            requested: 32,
            latest: 31
        })
    ));
}

#[tokio::test]
async fn a_run_that_is_not_live_is_read_from_the_store_to_its_end() {
    let (log, store) = (small_log(), Arc::new(Store::default()));
    let events = commit(&log, 600);
    store.push(&events);
    // A run whose host went away (no terminal): it ends at the store's end.
    let mut follower = open(None, Some(&store), 0, COMMITTED).await.unwrap();
    assert_eq!(drain(&mut follower).await, (1..=601).collect::<Vec<_>>());
    let mut resumed = open(None, Some(&store), 590, COMMITTED).await.unwrap();
    assert_eq!(drain(&mut resumed).await, (591..=601).collect::<Vec<_>>());
    assert!(
        open(None, Some(&store), 601, COMMITTED)
            .await
            .unwrap()
            .is_finished()
    );
    assert!(matches!(
        open(None, Some(&store), 602, COMMITTED).await,
        Err(FollowError::CursorAhead {
            requested: 602,
            latest: 601
        })
    ));
}

#[tokio::test]
async fn an_unknown_run_is_a_typed_error() {
    let store = Arc::new(Store::default());
    for history in [Some(&store), None] {
        match open(None, history, 0, COMMITTED).await {
            Err(FollowError::UnknownRun { run_id: id }) => assert_eq!(id, run_id()),
            other => panic!("{other:?}"),
        }
    }
}

#[tokio::test]
async fn a_store_that_skips_or_mixes_runs_is_caught() {
    let (log, store) = (small_log(), Arc::new(Store::default()));
    let events = commit(&log, 5);
    // 1, 2, then 4: the store skipped 3.
    store.push(&events[..2]);
    store.push(&events[3..]);
    let mut follower = open(None, Some(&store), 0, COMMITTED).await.unwrap();
    assert_eq!(take(&mut follower, 2).await, [1, 2]);
    assert!(matches!(
        follower.next().await,
        Some(Err(FollowError::Gap {
            last_delivered: 2,
            next_available: 4
        }))
    ));
    assert!(follower.next().await.is_none());

    // A store answering with another run's events.
    struct Mixed(Arc<Store>, RunId);
    impl RunHistory for Mixed {
        fn name(&self) -> &str {
            "mixed"
        }
        fn stored(&self, _: &RunId) -> Result<Option<StoredRun>, RunHistoryError> {
            Ok(Some(StoredRun::new(6, keel_observers::RunStatus::Running)))
        }
        fn read_after(
            &self,
            _: &RunId,
            after: u64,
            limit: usize,
        ) -> Result<Vec<Arc<Event>>, RunHistoryError> {
            self.0.read_after(&self.1, after, limit)
        }
    }
    let other = RunLog::new(
        RunId::parse("run_other").unwrap(),
        LogConfig::default(),
        Arc::new(SystemClock),
    )
    .unwrap();
    let theirs = Arc::new(Store::default());
    theirs.push(&commit(&other, 5));
    let history: Arc<dyn RunHistory> = Arc::new(Mixed(theirs, other.run_id().clone()));
    let mut follower = RunFollower::open(run_id(), 0, COMMITTED, None, Some(history))
        .await
        .unwrap();
    assert!(matches!(
        follower.next().await,
        Some(Err(FollowError::ForeignEvent { seq: 1 }))
    ));
}

#[tokio::test]
async fn a_follower_past_its_bounds_is_a_slow_consumer() {
    let log = RunLog::new(run_id(), LogConfig::default(), Arc::new(SystemClock)).unwrap();
    commit(&log, 2);
    let bounds = SubscriptionBounds {
        max_events: 2,
        ..COMMITTED
    };
    let mut follower = open(Some(&log), None, 0, bounds).await.unwrap();
    assert_eq!(follower.bounds(), bounds);
    // The replay does not count; five new events do.
    assert_eq!(take(&mut follower, 3).await, [1, 2, 3]);
    commit(&log, 5);
    assert!(matches!(
        follower.next().await,
        Some(Err(FollowError::Live(SubscriptionError::SlowConsumer {
            last_delivered: 3,
            ..
        })))
    ));
    assert!(follower.is_finished());
}

#[tokio::test]
async fn a_durable_follower_stops_at_the_watermark() {
    let (log, store) = (small_log(), Arc::new(Store::default()));
    let events = commit(&log, 5);
    durable(&log, &store, &events[..3]);
    let mut follower = open(Some(&log), Some(&store), 0, FOLLOW_BOUNDS)
        .await
        .unwrap();
    assert_eq!(take(&mut follower, 3).await, [1, 2, 3]);
    assert!(follower.next().now_or_never().is_none(), "4 is not durable");
    durable(&log, &store, &events[3..]);
    assert_eq!(take(&mut follower, 3).await, [4, 5, 6]);
}

#[tokio::test]
async fn more_committed_says_whether_next_has_an_event_without_the_run_going_on() {
    let (log, store) = (small_log(), Arc::new(Store::default()));
    let events = commit(&log, 2);
    durable(&log, &store, &events);
    let mut follower = open(Some(&log), Some(&store), 0, FOLLOW_BOUNDS)
        .await
        .unwrap();
    assert!(follower.more_committed(), "1..=3 are committed");
    assert_eq!(take(&mut follower, 3).await, [1, 2, 3]);
    assert!(!follower.more_committed(), "the run is waiting");
    // Committed and not durable yet: `next` waits for the store, not for
    // the run.
    let note = commit(&log, 1);
    assert!(follower.more_committed());
    durable(&log, &store, &note);
    let end = finish(&log);
    durable(&log, &store, &[Arc::clone(&end)]);
    assert_eq!(drain(&mut follower).await, [4, 5]);
    assert!(!follower.more_committed(), "past the terminal");

    // Evicted from the log: the page read from the store is buffered.
    let (log, store) = (small_log(), Arc::new(Store::default()));
    let events = commit(&log, 20);
    durable(&log, &store, &events);
    let mut follower = open(Some(&log), Some(&store), 0, FOLLOW_BOUNDS)
        .await
        .unwrap();
    assert_eq!(take(&mut follower, 1).await, [1]);
    assert!(follower.more_committed());
    assert_eq!(take(&mut follower, 20).await, (2..=21).collect::<Vec<_>>());
    assert!(!follower.more_committed());

    // Not live: the store holds all there is, read to its end.
    let mut stored = open(None, Some(&store), 0, FOLLOW_BOUNDS).await.unwrap();
    assert!(stored.more_committed());
    assert_eq!(drain(&mut stored).await.len(), 21);
    assert!(!stored.more_committed());
}
