#![allow(clippy::unwrap_used, clippy::expect_used)]
#![cfg(loom)]
//! Loom models of the log/subscription handoff: every interleaving of a
//! committer, a subscriber and a closer, explored over loom's `Mutex` and
//! `Arc` (swapped in by `src/sync.rs` under `cfg(loom)`).
//!
//! Run (from the workspace root; the separate target dir keeps the
//! `--cfg loom` build from thrashing the normal one):
//!
//! ```text
//! RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
//!     cargo test -p keel-eventlog --test loom --release -- --nocapture --test-threads=1
//! ```
//!
//! Each model sets its own preemption bound (4 for the two-thread models,
//! 3 for `close_racing_commit_drained_concurrently`, 2 for the spinning
//! marker of `durable_stream_racing_commit_and_mark`, 420k iterations and
//! 40 s at 3) unless `LOOM_MAX_PREEMPTIONS` is set, which then applies to
//! all of them. With the defaults the whole file runs in about 12 s
//! (after a ~3 min first release build of loom and deps); most of it is
//! `close_racing_commit_drained_concurrently` (66k iterations at 3) and
//! `durable_stream_racing_commit_and_mark` (34k at 2), which grow fastest
//! with `LOOM_MAX_PREEMPTIONS`. Since `try_recv` answers `Empty` from
//! atomics (loom's, under `cfg(loom)`) without the lock, the models also
//! explore those loads against every commit, mark and close. Each model prints
//! its iteration count and run time (visible with `--nocapture`).
//!
//! To see the interleaving of a failure, rerun the one model with
//! `LOOM_LOG=trace LOOM_LOCATION=1 LOOM_MAX_PREEMPTIONS=4` (with `LOOM_LOG`
//! set the model runs through `loom::model`, whose only bound is the
//! environment's).
//!
//! Models:
//! - `subscribe_after_1_racing_commit`, `subscribe_after_0_racing_commit`:
//!   replay joined to the live tail with no gap and no duplicate;
//! - `slow_consumer_racing_commit`: a subscriber bounded to one live event
//!   is cut off with a truthful recovery cursor and never blocks commits;
//! - `close_racing_commit_drained_after`, `close_racing_commit_drained_concurrently`:
//!   every `Ok` commit is delivered, then `Ended { Closed, last_seq }`;
//!   refused commits use no sequence;
//! - `stream_wakeup_run_completed`, `stream_wakeup_close`: the `Stream`
//!   polled under `loom::future::block_on` is woken by a commit or a close
//!   (a lost wakeup is a loom deadlock);
//! - `drop_pending_stream_racing_commit`: a subscription dropped with its
//!   waker registered, racing a commit that wakes it, leaves no waker,
//!   subscriber count or loom `Arc` behind;
//! - `durable_stream_wakeup_mark`, `durable_stream_wakeup_close`: a
//!   `Durable` stream is woken by `mark_durable` (and by a close after
//!   it), never shows an event above the watermark, and ends at it;
//! - `durable_stream_racing_commit_and_mark`: commits and marks racing on
//!   two threads; the durable stream sees 2, 3 in order and finishes.

use futures_util::StreamExt;
use keel_eventlog::{
    CommitError, Durability, EndReason, EventKind, LogConfig, Payload, RunCompleted, RunLog,
    RunStarted, SubscriptionBounds, SubscriptionError, SystemClock, TryRecvError,
};
use keel_message::{CanonicalJson, RunId};
use loom::sync::atomic::AtomicBool;
use loom::thread;
use std::sync::Arc as StdArc;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

/// Runs `f` under loom with `default_bound` preemptions (unless
/// `LOOM_MAX_PREEMPTIONS` overrides it) and reports iterations and time.
fn check<F>(name: &str, default_bound: usize, f: F)
where
    F: Fn() + Sync + Send + 'static,
{
    let iterations = StdArc::new(AtomicUsize::new(0));
    let counter = StdArc::clone(&iterations);
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(default_bound);
    }
    let bound = builder.preemption_bound;
    let start = Instant::now();
    let model = move || {
        counter.fetch_add(1, Ordering::Relaxed);
        f();
    };
    if std::env::var_os("LOOM_LOG").is_some() {
        // `loom::model` installs the tracing subscriber that prints the
        // interleaving; it takes its bound from LOOM_MAX_PREEMPTIONS only.
        loom::model(model);
    } else {
        builder.check(model);
    }
    eprintln!(
        "loom model {name}: {} iterations, preemption bound {:?}, {:.2?}",
        iterations.load(Ordering::Relaxed),
        bound,
        start.elapsed()
    );
}

/// Set by a producer after its last commit. A consumer that saw it set
/// before a `try_recv` that came back `Empty` has everything it will ever
/// get, so it stops (and its assertions report a lost event) instead of
/// spinning until loom's branch limit.
type Done = loom::sync::Arc<AtomicBool>;

fn new_log() -> RunLog {
    RunLog::new(
        RunId::parse("run_loom").unwrap(),
        LogConfig::default(),
        std::sync::Arc::new(SystemClock),
    )
    .unwrap()
}

/// A log with `run.started` committed at seq 1.
fn started_log() -> RunLog {
    let log = new_log();
    assert_eq!(
        log.commit(&Payload::RunStarted(RunStarted::default()))
            .unwrap()
            .seq(),
        1
    );
    log
}

/// An extension event: no lifecycle effect, valid any time before the end.
fn note() -> Payload {
    Payload::Extension {
        kind: EventKind::parse("test.note").unwrap(),
        payload: CanonicalJson::parse("{}").unwrap(),
    }
}

fn run_completed() -> Payload {
    Payload::RunCompleted(RunCompleted::default())
}

/// (a) Thread A commits seq 2 and 3; thread B subscribes after `after` and
/// drains with `try_recv` until it has seq 3. B must see exactly
/// `after+1..=3`, in order, once each, whatever the interleaving.
fn subscribe_racing_commit(after: u64) {
    let log = started_log();
    let done = Done::new(AtomicBool::new(false));
    let producer = {
        let log = log.clone();
        let done = done.clone();
        thread::spawn(move || {
            let a = log.commit(&note()).unwrap().seq();
            let b = log.commit(&note()).unwrap().seq();
            done.store(true, SeqCst);
            (a, b)
        })
    };
    let consumer = thread::spawn(move || {
        let mut sub = log.subscribe(after, SubscriptionBounds::default()).unwrap();
        assert_eq!(sub.cursor(), after);
        let expected: Vec<u64> = (after + 1..=3).collect();
        let mut seen = Vec::new();
        while seen.len() < expected.len() {
            let producer_done = done.load(SeqCst);
            match sub.try_recv() {
                Ok(event) => seen.push(event.seq()),
                // Everything was committed before this poll: no more is
                // coming, stop instead of spinning on a lost event.
                Err(TryRecvError::Empty) if producer_done => break,
                Err(e) => {
                    assert_eq!(e, TryRecvError::Empty);
                    thread::yield_now();
                }
            }
        }
        assert_eq!(seen, expected);
        assert_eq!(sub.cursor(), 3);
        // No duplicate or extra event follows.
        assert_eq!(sub.try_recv().unwrap_err(), TryRecvError::Empty);
    });
    assert_eq!(producer.join().unwrap(), (2, 3));
    consumer.join().unwrap();
}

#[test]
fn subscribe_after_1_racing_commit() {
    check("subscribe_after_1_racing_commit", 4, || {
        subscribe_racing_commit(1)
    });
}

#[test]
fn subscribe_after_0_racing_commit() {
    check("subscribe_after_0_racing_commit", 4, || {
        subscribe_racing_commit(0)
    });
}

/// (b) Bounds of one live event. A commits seq 2, 3, 4 (never blocked,
/// all `Ok`); B polls concurrently. B's events are a contiguous prefix of
/// 2..=4; a `SlowConsumer` names the last seq B really got as both
/// `last_delivered` and `recovery_cursor`, with `lag_events > 1`; and
/// resubscribing from the recovery cursor yields exactly the rest.
#[test]
fn slow_consumer_racing_commit() {
    check("slow_consumer_racing_commit", 4, || {
        let log = started_log();
        let bounds = SubscriptionBounds {
            max_events: 1,
            max_bytes: 1 << 20,
            ..SubscriptionBounds::default()
        };
        let mut sub = log.subscribe(1, bounds).unwrap();
        let done = Done::new(AtomicBool::new(false));
        let producer = {
            let log = log.clone();
            let done = done.clone();
            thread::spawn(move || {
                let commits = (0..3)
                    .map(|_| log.commit(&note()).map(|e| e.seq()))
                    .collect::<Vec<_>>();
                done.store(true, SeqCst);
                commits
            })
        };
        let consumer = thread::spawn(move || {
            let mut seen = Vec::new();
            let end = loop {
                let producer_done = done.load(SeqCst);
                match sub.try_recv() {
                    Ok(event) => {
                        seen.push(event.seq());
                        if event.seq() >= 4 {
                            break None;
                        }
                    }
                    Err(TryRecvError::Empty) if producer_done => break None,
                    Err(TryRecvError::Empty) => thread::yield_now(),
                    Err(e) => {
                        // Reported once, then the subscription is over.
                        assert_eq!(sub.try_recv().unwrap_err(), TryRecvError::Finished);
                        break Some(e);
                    }
                }
            };
            (seen, end)
        });
        let commits = producer.join().unwrap();
        assert_eq!(commits, vec![Ok(2), Ok(3), Ok(4)]);
        let (seen, end) = consumer.join().unwrap();
        assert_eq!(seen, (2..2 + seen.len() as u64).collect::<Vec<_>>());
        let resume = match end {
            None => {
                assert_eq!(seen, vec![2, 3, 4]);
                return;
            }
            Some(TryRecvError::Ended(SubscriptionError::SlowConsumer {
                last_delivered,
                recovery_cursor,
                lag_events,
                lag_bytes,
                max_events,
                ..
            })) => {
                let last = seen.last().copied().unwrap_or(1);
                assert_eq!(last_delivered, last);
                assert_eq!(recovery_cursor, last);
                assert!(lag_events > 1, "lag_events {lag_events}");
                assert!(last + lag_events <= 4, "lag past the last commit");
                assert!(lag_bytes > 0);
                assert_eq!(max_events, 1);
                recovery_cursor
            }
            Some(other) => {
                assert_eq!(Some(other), None, "only SlowConsumer may end it early");
                return;
            }
        };
        let mut again = log.subscribe(resume, bounds).unwrap();
        let rest: Vec<u64> =
            std::iter::from_fn(|| again.try_recv().ok().map(|e| e.seq())).collect();
        assert_eq!(rest, (resume + 1..=4).collect::<Vec<_>>());
    });
}

/// (c) A commits twice while B closes. Commits succeed up to the close and
/// fail with `Closed` after it; the subscriber gets every `Ok` commit in
/// order, then `Ended { Closed, last_seq }` with `last_seq` the number of
/// `Ok` commits (run.started included).
fn check_commits_around_close(commits: &[Result<u64, CommitError>]) -> u64 {
    let ok = commits.iter().take_while(|r| r.is_ok()).count();
    for (i, r) in commits.iter().enumerate() {
        if i < ok {
            assert_eq!(*r, Ok(2 + i as u64));
        } else {
            assert_eq!(*r, Err(CommitError::Closed(EndReason::Closed)));
        }
    }
    1 + ok as u64
}

fn commit_two(log: &RunLog) -> Vec<Result<u64, CommitError>> {
    (0..2)
        .map(|_| log.commit(&note()).map(|e| e.seq()))
        .collect()
}

fn assert_closed_tail(log: &RunLog, last: u64) {
    assert_eq!(
        log.commit(&note()).unwrap_err(),
        CommitError::Closed(EndReason::Closed)
    );
    assert_eq!(log.stats().last_seq, last);
}

#[test]
fn close_racing_commit_drained_after() {
    check("close_racing_commit_drained_after", 4, || {
        let log = started_log();
        let mut sub = log.subscribe(1, SubscriptionBounds::default()).unwrap();
        let committer = {
            let log = log.clone();
            thread::spawn(move || commit_two(&log))
        };
        let closer = {
            let log = log.clone();
            thread::spawn(move || log.close())
        };
        let commits = committer.join().unwrap();
        closer.join().unwrap();
        let last = check_commits_around_close(&commits);
        let mut seen = Vec::new();
        let end = loop {
            match sub.try_recv() {
                Ok(event) => seen.push(event.seq()),
                Err(e) => break e,
            }
        };
        assert_eq!(seen, (2..=last).collect::<Vec<_>>());
        assert_eq!(
            end,
            TryRecvError::Ended(SubscriptionError::Ended {
                reason: EndReason::Closed,
                last_seq: last,
            })
        );
        assert_eq!(sub.try_recv().unwrap_err(), TryRecvError::Finished);
        assert_closed_tail(&log, last);
    });
}

#[test]
fn close_racing_commit_drained_concurrently() {
    check("close_racing_commit_drained_concurrently", 3, || {
        let log = started_log();
        let mut sub = log.subscribe(1, SubscriptionBounds::default()).unwrap();
        let committer = {
            let log = log.clone();
            thread::spawn(move || commit_two(&log))
        };
        let closer = {
            let log = log.clone();
            thread::spawn(move || log.close())
        };
        let drainer = thread::spawn(move || {
            let mut seen = Vec::new();
            let end = loop {
                match sub.try_recv() {
                    Ok(event) => seen.push(event.seq()),
                    Err(TryRecvError::Empty) => thread::yield_now(),
                    Err(e) => break e,
                }
            };
            assert_eq!(sub.try_recv().unwrap_err(), TryRecvError::Finished);
            (seen, end)
        });
        let commits = committer.join().unwrap();
        closer.join().unwrap();
        let (seen, end) = drainer.join().unwrap();
        let last = check_commits_around_close(&commits);
        assert_eq!(seen, (2..=last).collect::<Vec<_>>());
        assert_eq!(
            end,
            TryRecvError::Ended(SubscriptionError::Ended {
                reason: EndReason::Closed,
                last_seq: last,
            })
        );
        assert_closed_tail(&log, last);
    });
}

/// (d) The `Stream` is polled with loom's waker while A commits a note and
/// then `end` (the run's terminal, or a close). A waker registered after
/// the consumer's check but missed by the commit would leave the consumer
/// parked forever: loom reports that as a deadlock.
fn stream_wakeup(close: bool) {
    let log = started_log();
    let producer = {
        let log = log.clone();
        thread::spawn(move || {
            assert_eq!(log.commit(&note()).unwrap().seq(), 2);
            if close {
                log.close();
            } else {
                assert_eq!(log.commit(&run_completed()).unwrap().seq(), 3);
            }
        })
    };
    let consumer = thread::spawn(move || {
        let mut sub = log.subscribe(1, SubscriptionBounds::default()).unwrap();
        loom::future::block_on(async move {
            let mut items = Vec::new();
            while let Some(item) = sub.next().await {
                items.push(item.map(|e| e.seq()));
            }
            // The stream stays over.
            assert!(sub.next().await.is_none());
            items
        })
    });
    producer.join().unwrap();
    let items = consumer.join().unwrap();
    if close {
        assert_eq!(
            items,
            vec![
                Ok(2),
                Err(SubscriptionError::Ended {
                    reason: EndReason::Closed,
                    last_seq: 2,
                }),
            ]
        );
    } else {
        assert_eq!(items, vec![Ok(2), Ok(3)]);
    }
}

#[test]
fn stream_wakeup_run_completed() {
    check("stream_wakeup_run_completed", 4, || stream_wakeup(false));
}

#[test]
fn stream_wakeup_close() {
    check("stream_wakeup_close", 4, || stream_wakeup(true));
}

/// A subscription polled once (`Pending`, waker registered) is dropped
/// while another thread commits: whichever comes first, no waker, no
/// subscriber and no loom `Arc` is left behind (loom checks the leaks).
#[test]
fn drop_pending_stream_racing_commit() {
    check("drop_pending_stream_racing_commit", 4, || {
        let log = started_log();
        let mut sub = log.subscribe(1, SubscriptionBounds::default()).unwrap();
        let producer = {
            let log = log.clone();
            thread::spawn(move || log.commit(&note()).unwrap().seq())
        };
        let consumer = thread::spawn(move || {
            loom::future::block_on(async move {
                // One poll: ready if the commit came first, else pending.
                let first = futures_util::poll!(sub.next());
                drop(sub);
                first.map(|item| item.map(|r| r.map(|e| e.seq())))
            })
        });
        assert_eq!(producer.join().unwrap(), 2);
        let first = consumer.join().unwrap();
        assert!(
            first.is_pending() || first == std::task::Poll::Ready(Some(Ok(2))),
            "{first:?}"
        );
        assert_eq!(log.stats().subscribers, 0);
    });
}

fn durable() -> SubscriptionBounds {
    SubscriptionBounds {
        durability: Durability::Durable,
        ..SubscriptionBounds::default()
    }
}

/// Drains a durable stream under `block_on`, checking each event against
/// the watermark (which never goes down, so reading it after delivery
/// bounds the one at delivery).
fn follow_durable(log: RunLog) -> Vec<Result<u64, SubscriptionError>> {
    let mut sub = log.subscribe(1, durable()).unwrap();
    loom::future::block_on(async move {
        let mut items = Vec::new();
        while let Some(item) = sub.next().await {
            if let Ok(e) = &item {
                assert!(e.seq() <= log.durable_seq(), "above the watermark");
            }
            items.push(item.map(|e| e.seq()));
        }
        assert!(sub.next().await.is_none());
        items
    })
}

/// Seq 2 and 3 are committed; A marks them durable (and then, with
/// `close`, closes the log after marking only 2). A waker registered after
/// the consumer's check but missed by `mark_durable` would park it
/// forever: a loom deadlock.
fn durable_stream_wakeup(close: bool) {
    let log = started_log();
    log.mark_durable(1);
    log.commit(&note()).unwrap();
    log.commit(&run_completed()).unwrap();
    let marker = {
        let log = log.clone();
        thread::spawn(move || {
            log.mark_durable(2);
            if close {
                log.close();
            } else {
                log.mark_durable(3);
            }
        })
    };
    let consumer = {
        let log = log.clone();
        thread::spawn(move || follow_durable(log))
    };
    marker.join().unwrap();
    let items = consumer.join().unwrap();
    if close {
        let end = Err(SubscriptionError::Ended {
            reason: EndReason::Closed,
            last_seq: 2,
        });
        assert_eq!(items, vec![Ok(2), end]);
    } else {
        assert_eq!(items, vec![Ok(2), Ok(3)]);
    }
    assert_eq!(log.stats().subscribers, 0);
}

#[test]
fn durable_stream_wakeup_mark() {
    check("durable_stream_wakeup_mark", 4, || {
        durable_stream_wakeup(false)
    });
}

#[test]
fn durable_stream_wakeup_close() {
    check("durable_stream_wakeup_close", 4, || {
        durable_stream_wakeup(true)
    });
}

/// A commits seq 2 and 3 (the terminal); B marks each durable once it is
/// committed (as an acknowledging observer would); C follows the durable
/// stream. C sees exactly 2, 3 and the stream ends.
#[test]
fn durable_stream_racing_commit_and_mark() {
    check("durable_stream_racing_commit_and_mark", 2, || {
        let log = started_log();
        log.mark_durable(1);
        let committer = {
            let log = log.clone();
            thread::spawn(move || {
                log.commit(&note()).unwrap();
                log.commit(&run_completed()).unwrap();
            })
        };
        let marker = {
            let log = log.clone();
            thread::spawn(move || {
                while log.durable_seq() < 3 {
                    // Clamped to what is committed: never ahead of it.
                    log.mark_durable(log.durable_seq() + 1);
                    assert!(log.durable_seq() <= log.stats().last_seq);
                    thread::yield_now();
                }
            })
        };
        let consumer = {
            let log = log.clone();
            thread::spawn(move || follow_durable(log))
        };
        committer.join().unwrap();
        marker.join().unwrap();
        assert_eq!(consumer.join().unwrap(), vec![Ok(2), Ok(3)]);
    });
}
