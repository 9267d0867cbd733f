//! Durable subscriptions: the durable watermark (`mark_durable`,
//! `durable_seq`) and what a `Durability::Durable` subscriber is given.
//! Each rule is a row of a table run through one `check` helper.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
use common::*;
use keel_eventlog::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

/// One step of a scenario. The log starts with `run.started` at seq 1.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// Commit `n` extension notes.
    Notes(u64),
    /// Commit `run.completed`.
    Terminal,
    /// `mark_durable(seq)`.
    Mark(u64),
    /// The watermark now (`durable_seq` and `stats().durable_seq`).
    Watermark(u64),
    Close,
    Shutdown,
    /// Subscribe after this cursor with the case's durability and bounds.
    Subscribe(u64),
    /// Drain with `try_recv`: these seqs, then this end.
    Expect(&'static [u64], End),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Empty,
    Finished,
    Ended(EndReason, u64),
    Slow { lag_events: u64 },
}

struct Case {
    name: &'static str,
    durability: Durability,
    /// `max_events` of the bounds (bytes are unbounded).
    max_events: usize,
    steps: &'static [Step],
}

fn end_of(err: Option<TryRecvError>) -> End {
    match err {
        None => End::Empty,
        Some(TryRecvError::Empty) => End::Empty,
        Some(TryRecvError::Finished) => End::Finished,
        Some(TryRecvError::Ended(SubscriptionError::Ended { reason, last_seq })) => {
            End::Ended(reason, last_seq)
        }
        Some(TryRecvError::Ended(SubscriptionError::SlowConsumer { lag_events, .. })) => {
            End::Slow { lag_events }
        }
        Some(other) => panic!("unexpected end {other:?}"),
    }
}

fn check(case: &Case) {
    let log = log();
    log.commit(&run_started()).unwrap();
    let bounds = SubscriptionBounds {
        max_events: case.max_events,
        max_bytes: usize::MAX,
        durability: case.durability,
    };
    let mut sub = None;
    for (i, step) in case.steps.iter().enumerate() {
        let at = format!("{} step {i} {step:?}", case.name);
        match *step {
            Step::Notes(n) => (0..n).for_each(|_| drop(log.commit(&note()).unwrap())),
            Step::Terminal => drop(log.commit(&run_completed()).unwrap()),
            Step::Mark(seq) => log.mark_durable(seq),
            Step::Watermark(seq) => {
                assert_eq!(log.durable_seq(), seq, "{at}");
                assert_eq!(log.stats().durable_seq, seq, "{at}");
            }
            Step::Close => log.close(),
            Step::Shutdown => log.shutdown(),
            Step::Subscribe(after) => sub = Some(log.subscribe(after, bounds).unwrap()),
            Step::Expect(seqs, end) => {
                let sub = sub.as_mut().expect("subscribed");
                let (got, err) = drain(sub);
                assert_eq!((got.as_slice(), end_of(err)), (seqs, end), "{at}");
                if case.durability == Durability::Durable {
                    let last = got.last().copied().unwrap_or(0);
                    assert!(last <= log.durable_seq(), "{at}: above the watermark");
                }
            }
        }
    }
}

use Durability::{Committed, Durable};
use EndReason::Closed;
use Step::*;

const ROOMY: usize = 4096;

const CASES: &[Case] = &[
    Case {
        name: "a fresh log starts at 0; nothing above the watermark is shown",
        durability: Durable,
        max_events: ROOMY,
        steps: &[
            Watermark(0),
            Notes(5),
            Subscribe(0),
            Expect(&[], End::Empty),
            Mark(3),
            Watermark(3),
            Expect(&[1, 2, 3], End::Empty),
            Mark(6),
            Expect(&[4, 5, 6], End::Empty),
        ],
    },
    Case {
        name: "the replay stops at the watermark, the rest follows marks",
        durability: Durable,
        max_events: ROOMY,
        steps: &[
            Notes(5),
            Mark(2),
            Subscribe(0),
            Expect(&[1, 2], End::Empty),
            Mark(4),
            Expect(&[3, 4], End::Empty),
        ],
    },
    Case {
        name: "mark_durable never lowers the watermark",
        durability: Durable,
        max_events: ROOMY,
        steps: &[
            Notes(5),
            Mark(4),
            Mark(2),
            Mark(0),
            Watermark(4),
            Subscribe(0),
            Expect(&[1, 2, 3, 4], End::Empty),
        ],
    },
    Case {
        name: "mark_durable clamps to the last commit",
        durability: Durable,
        max_events: ROOMY,
        steps: &[
            Notes(2),
            Mark(100),
            Watermark(3),
            Notes(2),
            Watermark(3),
            Subscribe(0),
            Expect(&[1, 2, 3], End::Empty),
            Mark(5),
            Expect(&[4, 5], End::Empty),
        ],
    },
    Case {
        name: "a cursor above the watermark is allowed and waits",
        durability: Durable,
        max_events: ROOMY,
        steps: &[
            Notes(5),
            Mark(2),
            Subscribe(4),
            Expect(&[], End::Empty),
            Mark(4),
            Expect(&[], End::Empty),
            Mark(6),
            Expect(&[5, 6], End::Empty),
        ],
    },
    Case {
        name: "close delivers up to the watermark, then ends there",
        durability: Durable,
        max_events: ROOMY,
        steps: &[
            Notes(4),
            Subscribe(0),
            Mark(3),
            Close,
            Expect(&[1, 2, 3], End::Ended(Closed, 3)),
            Expect(&[], End::Finished),
        ],
    },
    Case {
        name: "shutdown with a cursor above the watermark ends at the watermark",
        durability: Durable,
        max_events: ROOMY,
        steps: &[
            Notes(4),
            Mark(2),
            Subscribe(4),
            Shutdown,
            Expect(&[], End::Ended(EndReason::Shutdown, 2)),
        ],
    },
    Case {
        name: "marks after close still raise the watermark",
        durability: Durable,
        max_events: ROOMY,
        steps: &[
            Notes(4),
            Close,
            Mark(5),
            Watermark(5),
            Subscribe(0),
            Expect(&[1, 2, 3, 4, 5], End::Ended(Closed, 5)),
        ],
    },
    Case {
        name: "the run's terminal finishes the stream only once durable",
        durability: Durable,
        max_events: ROOMY,
        steps: &[
            Notes(1),
            Terminal,
            Subscribe(0),
            Mark(2),
            Expect(&[1, 2], End::Empty),
            Mark(3),
            Expect(&[3], End::Finished),
        ],
    },
    Case {
        name: "a cursor at a terminal not yet durable waits, then finishes",
        durability: Durable,
        max_events: ROOMY,
        steps: &[
            Terminal,
            Mark(1),
            Subscribe(2),
            Expect(&[], End::Empty),
            Mark(2),
            Expect(&[], End::Finished),
        ],
    },
    Case {
        name: "a terminal not durable at close ends typed before it",
        durability: Durable,
        max_events: ROOMY,
        steps: &[
            Notes(1),
            Terminal,
            Mark(2),
            Close,
            Subscribe(0),
            Expect(&[1, 2], End::Ended(Closed, 2)),
        ],
    },
    Case {
        name: "lag counts durable events not taken, not committed ones",
        durability: Durable,
        max_events: 2,
        steps: &[
            Subscribe(1),
            Notes(10),
            Expect(&[], End::Empty),
            Mark(3),
            Expect(&[2, 3], End::Empty),
            Mark(11),
            Expect(&[], End::Slow { lag_events: 8 }),
        ],
    },
    Case {
        name: "the durable replay does not count toward the bounds",
        durability: Durable,
        max_events: 2,
        steps: &[
            Notes(10),
            Mark(9),
            Subscribe(0),
            Expect(&[1, 2, 3, 4, 5, 6, 7, 8, 9], End::Empty),
        ],
    },
    // Committed subscriptions ignore the watermark entirely.
    Case {
        name: "committed: every commit, whatever the watermark",
        durability: Committed,
        max_events: ROOMY,
        steps: &[
            Notes(4),
            Subscribe(0),
            Expect(&[1, 2, 3, 4, 5], End::Empty),
            Mark(2),
            Notes(1),
            Expect(&[6], End::Empty),
            Close,
            Expect(&[], End::Ended(Closed, 6)),
        ],
    },
    Case {
        name: "committed: the terminal finishes without a mark",
        durability: Committed,
        max_events: ROOMY,
        steps: &[Subscribe(1), Terminal, Expect(&[2], End::Finished)],
    },
    Case {
        name: "committed: a cursor at the terminal finishes at once",
        durability: Committed,
        max_events: ROOMY,
        steps: &[Terminal, Subscribe(2), Expect(&[], End::Finished)],
    },
    Case {
        name: "committed: lag counts commits",
        durability: Committed,
        max_events: 2,
        steps: &[
            Subscribe(1),
            Notes(3),
            Expect(&[], End::Slow { lag_events: 3 }),
        ],
    },
];

#[test]
fn durable_subscription_rules() {
    for case in CASES {
        check(case);
    }
}

fn durable() -> SubscriptionBounds {
    SubscriptionBounds {
        durability: Durability::Durable,
        ..SubscriptionBounds::default()
    }
}

#[test]
fn restored_and_imported_logs_start_durable() {
    let log = log();
    commit_all(&log, &[run_started(), note(), note(), note()]);
    assert_eq!(log.durable_seq(), 0);
    let check_restored = |restored: &RunLog, what: &str| {
        assert_eq!(restored.durable_seq(), 4, "{what}");
        assert_eq!(restored.stats().durable_seq, 4, "{what}");
        let mut sub = restored.subscribe(0, durable()).unwrap();
        assert_eq!(drain(&mut sub), (vec![1, 2, 3, 4], None), "{what}");
        // A commit after the restore is not durable until marked.
        restored.commit(&note()).unwrap();
        assert_eq!(drain(&mut sub), (vec![], None), "{what}");
        restored.mark_durable(5);
        assert_eq!(drain(&mut sub), (vec![5], None), "{what}");
    };
    let restored =
        RunLog::restore(&log.snapshot(), LogConfig::default(), Arc::new(SystemClock)).unwrap();
    check_restored(&restored, "restore of the whole run");
    let lines: Vec<String> = log
        .retained_after(0)
        .iter()
        .map(|e| e.line().to_owned())
        .collect();
    let imported = RunLog::import(
        run_id(),
        lines.iter().map(String::as_str),
        LogConfig::default(),
        Arc::new(SystemClock),
    )
    .unwrap();
    check_restored(&imported, "import");
    // A window: the snapshot of a log that evicted its start.
    let (small, _) = log_with(LogConfig {
        max_events: 3,
        max_open_scopes: 2,
        ..LogConfig::default()
    });
    commit_all(&small, &[run_started(), note(), note(), note()]);
    let snapshot = small.snapshot();
    assert_eq!(snapshot.earliest_seq(), 2);
    let window = RunLog::restore(
        &snapshot,
        LogConfig {
            max_events: 3,
            max_open_scopes: 2,
            ..LogConfig::default()
        },
        Arc::new(SystemClock),
    )
    .unwrap();
    assert_eq!(window.durable_seq(), 4);
    let mut sub = window.subscribe(1, durable()).unwrap();
    assert_eq!(drain(&mut sub), (vec![2, 3, 4], None));
}

#[tokio::test(flavor = "current_thread")]
async fn a_pending_durable_stream_wakes_on_mark_durable_not_on_commit() {
    let log = log();
    log.commit(&run_started()).unwrap();
    let mut sub = log.subscribe(0, durable()).unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let reader = tokio::spawn(async move {
        while let Some(item) = sub.recv().await {
            tx.send(item.map(|e| e.seq())).unwrap();
        }
    });
    tokio::task::yield_now().await;
    log.commit(&note()).unwrap();
    tokio::task::yield_now().await;
    assert!(rx.try_recv().is_err(), "delivered before it was durable");
    log.mark_durable(2);
    assert_eq!(rx.recv().await, Some(Ok(1)));
    assert_eq!(rx.recv().await, Some(Ok(2)));
    log.commit(&run_completed()).unwrap();
    log.close();
    assert_eq!(
        rx.recv().await,
        Some(Err(SubscriptionError::Ended {
            reason: EndReason::Closed,
            last_seq: 2
        }))
    );
    assert_eq!(rx.recv().await, None);
    reader.await.unwrap();
    assert_eq!(log.stats().subscribers, 0);
}

/// A committer, a marker raising the watermark behind it, and durable
/// subscribers on other threads (some joining late, one async): each sees
/// a gap-free prefix, never above the watermark at delivery, and finishes
/// with the durable terminal.
#[test]
fn durable_subscribers_under_concurrent_commits_and_marks() {
    const EVENTS: u64 = 20_000;
    let log = log();
    log.commit(&run_started()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let bounds = SubscriptionBounds {
        max_events: usize::MAX,
        max_bytes: usize::MAX,
        durability: Durability::Durable,
    };
    let committed = Arc::new(AtomicBool::new(false));
    let committer = {
        let log = log.clone();
        let committed = Arc::clone(&committed);
        thread::spawn(move || {
            for _ in 0..EVENTS {
                log.commit(&note()).unwrap();
            }
            log.commit(&run_completed()).unwrap();
            committed.store(true, Ordering::SeqCst);
        })
    };
    let marker = {
        let log = log.clone();
        let committed = Arc::clone(&committed);
        thread::spawn(move || {
            let mut step = 1u64;
            loop {
                let done = committed.load(Ordering::SeqCst);
                let last = log.stats().last_seq;
                // Behind the committer, by a varying distance.
                log.mark_durable(last.saturating_sub(step % 7));
                step += 1;
                if done {
                    log.mark_durable(last);
                    return;
                }
                assert!(Instant::now() < deadline, "marker stalled");
                thread::yield_now();
            }
        })
    };
    let subscribers: Vec<_> = (0..4u64)
        .map(|i| {
            let log = log.clone();
            thread::spawn(move || {
                if i % 2 == 1 {
                    // Join late, at a cursor somewhere in the log.
                    while log.stats().last_seq < EVENTS / 4 {
                        thread::yield_now();
                    }
                }
                let after = if i % 2 == 1 { log.durable_seq() / 2 } else { 0 };
                let mut sub = log.subscribe(after, bounds).unwrap();
                let seen = if i == 3 {
                    follow_async(&log, &mut sub)
                } else {
                    follow_polling(&log, &mut sub, deadline)
                };
                (after, seen)
            })
        })
        .collect();
    committer.join().unwrap();
    marker.join().unwrap();
    for s in subscribers {
        let (after, seen) = s.join().unwrap();
        assert_eq!(seen, after + 1..=EVENTS + 2, "subscriber after {after}");
    }
    assert_eq!(log.durable_seq(), EVENTS + 2);
}

/// Polls with `try_recv` until `Finished`; returns the range delivered.
fn follow_polling(
    log: &RunLog,
    sub: &mut Subscription,
    deadline: Instant,
) -> std::ops::RangeInclusive<u64> {
    let first = sub.cursor() + 1;
    let mut next = first;
    loop {
        match sub.try_recv() {
            Ok(e) => check_delivery(log, &mut next, e.seq()),
            Err(TryRecvError::Empty) => {
                assert!(Instant::now() < deadline, "subscriber stalled");
                thread::yield_now();
            }
            Err(TryRecvError::Finished) => return first..=sub.cursor(),
            Err(other) => panic!("{other}"),
        }
    }
}

/// Follows with the async `recv` on a current-thread runtime.
fn follow_async(log: &RunLog, sub: &mut Subscription) -> std::ops::RangeInclusive<u64> {
    let first = sub.cursor() + 1;
    let mut next = first;
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        while let Some(item) = sub.recv().await {
            check_delivery(log, &mut next, item.unwrap().seq());
        }
    });
    first..=sub.cursor()
}

/// Gap-free and in order (`next` is the seq expected), and never above
/// the watermark.
fn check_delivery(log: &RunLog, next: &mut u64, seq: u64) {
    assert_eq!(seq, *next, "gap or duplicate");
    *next += 1;
    // The watermark never goes down, so reading it after the delivery
    // bounds the one at delivery from above.
    let watermark = log.durable_seq();
    assert!(
        seq <= watermark,
        "delivered {seq} above watermark {watermark}"
    );
}

/// A restored run that had ended finishes a caught-up subscriber of either
/// durability at once (the lock-free `Empty` answer must not hide it).
#[test]
fn a_restored_ended_run_finishes_caught_up_subscribers() {
    let config = LogConfig {
        max_events: 3,
        max_open_scopes: 2,
        ..LogConfig::default()
    };
    let (log, _) = log_with(config.clone());
    commit_all(&log, &[run_started(), note(), note(), run_completed()]);
    let snapshot = log.snapshot();
    assert_eq!(snapshot.earliest_seq(), 2, "a window");
    let restored = RunLog::restore(&snapshot, config, Arc::new(SystemClock)).unwrap();
    for durability in [Durability::Committed, Durability::Durable] {
        let bounds = SubscriptionBounds {
            durability,
            ..SubscriptionBounds::default()
        };
        let mut at_end = restored.subscribe(4, bounds).unwrap();
        assert_eq!(
            at_end.try_recv(),
            Err(TryRecvError::Finished),
            "{durability:?}"
        );
        let mut before = restored.subscribe(2, bounds).unwrap();
        assert_eq!(
            drain(&mut before),
            (vec![3, 4], Some(TryRecvError::Finished))
        );
    }
}

/// Dropping a subscription that waits forgets only its own waker: another
/// subscription waiting on the same log (committed or durable) still
/// wakes on the next event.
#[tokio::test(flavor = "current_thread")]
async fn dropping_a_waiting_subscription_leaves_the_others_waiting() {
    use futures_util::FutureExt;
    for durability in [Durability::Committed, Durability::Durable] {
        let log = log();
        log.commit(&run_started()).unwrap();
        log.mark_durable(1);
        let bounds = SubscriptionBounds {
            durability,
            ..SubscriptionBounds::default()
        };
        let mut kept = log.subscribe(1, bounds).unwrap();
        let mut dropped = log.subscribe(1, bounds).unwrap();
        let reader = tokio::spawn(async move { kept.recv().await.map(|r| r.map(|e| e.seq())) });
        tokio::task::yield_now().await;
        assert!(dropped.recv().now_or_never().is_none(), "{durability:?}");
        drop(dropped);
        log.commit(&note()).unwrap();
        log.mark_durable(2);
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(
            reader.is_finished(),
            "{durability:?}: the kept one never woke"
        );
        assert_eq!(reader.await.unwrap(), Some(Ok(2)), "{durability:?}");
    }
}
