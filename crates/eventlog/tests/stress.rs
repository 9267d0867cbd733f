#![allow(clippy::unwrap_used, clippy::expect_used)]
// Real threads: meaningless (and panicking) outside a model under loom.
#![cfg(not(loom))]
//! Multi-threaded stress of commits racing subscriptions.
//!
//! `threads_commit_and_subscribe`: [`RUNS`] logs, each with a producer
//! thread committing a valid lifecycle (run.started, [`TURNS`] turns of
//! model.started / [`DELTAS`] text deltas / model.completed /
//! turn.completed, run.completed) and four subscriber threads using
//! `try_recv`:
//!
//! - `Eager`: subscribes after 0 before the producer starts;
//! - `Late`: subscribes once the log reached a random point, after a
//!   random earlier cursor;
//! - `TinyEvents`: after 0, bounded to 2 live events, starts polling only
//!   once 10 events are committed (so it is cut off at least once), naps
//!   now and then, and resubscribes from every recovery cursor;
//! - `TinyBytes`: a random late cursor, bounded to 1 KiB of live events,
//!   naps, resubscribes.
//!
//! Every subscriber checks: consecutive sequences within a subscription,
//! `cursor()` tracking them, truthful `SlowConsumer` fields, the run's
//! terminal last and `Finished` after it. The first [`EVICTING_RUNS`] logs
//! retain only 64 events, so cursors expire: `CursorExpired` is checked
//! and counted, the gap it causes recorded, and every received line is
//! compared with the line the producer's commit returned. The other logs
//! retain everything: each subscriber's lines are gap-free and equal
//! `retained_after(cursor)` byte for byte.
//!
//! `tokio_streams_commit_and_subscribe`: the same with subscribers as tasks
//! on a two-worker tokio runtime consuming the `Stream` (waker path), and
//! producers on plain threads.
//!
//! Both use fixed seeds (the interleavings still vary run to run); each
//! takes about 0.5 s in debug on two cores.

use futures_util::StreamExt;
use keel_eventlog::{
    Event, Extra, LogConfig, ModelCompleted, ModelStarted, Payload, RunCompleted, RunLog,
    RunStarted, SubscribeError, Subscription, SubscriptionBounds, SubscriptionError, SystemClock,
    TextDelta, TryRecvError, TurnRef,
};
use keel_message::{ModelName, OperationId, RunId};
use keel_stream::FinishReason;
use std::sync::Arc;
use std::task::Poll;
use std::thread;
use std::time::{Duration, Instant};

/// Logs per test.
const RUNS: usize = 16;
/// Of those, how many retain only [`SMALL_RETENTION`] events.
const EVICTING_RUNS: usize = 4;
const SMALL_RETENTION: usize = 64;
const TURNS: u64 = 60;
const DELTAS: u64 = 12;
/// Events per run: run.started, per turn 4 + deltas, run.completed.
const EVENTS: u64 = 2 + TURNS * (4 + DELTAS);
/// A stall guard: nothing here should take more than a few seconds.
const DEADLINE: Duration = Duration::from_secs(60);

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform-ish in `0..n` (`n > 0`).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }
}

fn lifecycle() -> Vec<Payload> {
    let model = ModelName::parse("test-model").unwrap();
    let mut out = vec![Payload::RunStarted(RunStarted::default())];
    for turn in 1..=TURNS {
        let op = OperationId::parse(&format!("op_{turn}")).unwrap();
        out.push(Payload::TurnStarted(TurnRef {
            turn,
            extra: Extra::new(),
        }));
        out.push(Payload::ModelStarted(ModelStarted {
            turn,
            operation_id: op.clone(),
            model: model.clone(),
            attempt: 1,
            purpose: None,
            extra: Extra::new(),
        }));
        for d in 0..DELTAS {
            out.push(Payload::TextDelta(TextDelta {
                turn,
                operation_id: op.clone(),
                text: format!("turn {turn} delta {d} \u{e9}\"quoted\"\n"),
                extra: Extra::new(),
            }));
        }
        out.push(Payload::ModelCompleted(ModelCompleted {
            turn,
            operation_id: op,
            finish: FinishReason::Stop,
            usage: None,
            metadata: None,
            extra: Extra::new(),
        }));
        out.push(Payload::TurnCompleted(TurnRef {
            turn,
            extra: Extra::new(),
        }));
    }
    out.push(Payload::RunCompleted(RunCompleted::default()));
    assert_eq!(out.len() as u64, EVENTS);
    out
}

fn new_log(index: usize) -> RunLog {
    let config = if index < EVICTING_RUNS {
        // The reserve rule: max_events >= 1 + max_open_scopes (run, turn
        // and model are open at most).
        LogConfig {
            max_events: SMALL_RETENTION,
            max_open_scopes: 4,
            ..LogConfig::default()
        }
    } else {
        LogConfig::default()
    };
    RunLog::new(
        RunId::parse(&format!("run_stress_{index}")).unwrap(),
        config,
        Arc::new(SystemClock),
    )
    .unwrap()
}

fn evicting(index: usize) -> bool {
    index < EVICTING_RUNS
}

/// Commits the lifecycle, pausing at random; returns the committed lines.
fn produce(log: &RunLog, seed: u64) -> Vec<String> {
    let mut rng = Rng::new(seed);
    let mut lines = Vec::new();
    for (i, payload) in lifecycle().iter().enumerate() {
        let event = log.commit(payload).unwrap();
        assert_eq!(event.seq(), i as u64 + 1);
        lines.push(event.line().to_owned());
        if rng.one_in(8) {
            thread::yield_now();
        }
        if rng.one_in(48) {
            thread::sleep(Duration::from_micros(100));
        }
    }
    lines
}

fn is_run_completed(event: &Event) -> bool {
    event.kind().to_string() == "run.completed"
}

/// What one subscriber saw, across its resubscriptions.
#[derive(Debug, Default)]
struct Collected {
    /// The cursor it first asked for.
    start: u64,
    /// (seq, line) in delivery order.
    events: Vec<(u64, String)>,
    /// Missed ranges (inclusive) because a cursor expired.
    gaps: Vec<(u64, u64)>,
    slow: usize,
    /// `Evicted` ends: a replay (read as the subscriber goes) that the
    /// evicting log dropped before it was read.
    evicted: usize,
    expired: usize,
    subscriptions: usize,
    /// Times the `Stream` was polled with nothing ready (it then had to be
    /// woken).
    waits: usize,
    finished: bool,
}

impl Collected {
    fn new(start: u64) -> Collected {
        Collected {
            start,
            ..Collected::default()
        }
    }

    /// The cursor to resume from: last received, or the start (moved past
    /// any gap).
    fn cursor(&self) -> u64 {
        let last = self.events.last().map_or(self.start, |(s, _)| *s);
        self.gaps.last().map_or(last, |(_, hi)| last.max(*hi))
    }

    /// Subscribes after `cursor()`, following `CursorExpired` to its
    /// recovery cursor (recording the gap).
    fn subscribe(&mut self, log: &RunLog, bounds: SubscriptionBounds) -> Subscription {
        loop {
            let cursor = self.cursor();
            match log.subscribe(cursor, bounds) {
                Ok(sub) => {
                    assert_eq!(sub.cursor(), cursor);
                    assert_eq!(sub.bounds(), bounds);
                    self.subscriptions += 1;
                    return sub;
                }
                Err(SubscribeError::CursorExpired {
                    requested,
                    earliest,
                    latest,
                    recovery_cursor,
                }) => {
                    assert_eq!(requested, cursor);
                    assert!(earliest > cursor + 1, "{earliest} vs {cursor}");
                    assert!(earliest <= latest, "something is always retained");
                    assert_eq!(recovery_cursor, earliest - 1);
                    self.expired += 1;
                    self.gaps.push((cursor + 1, recovery_cursor));
                }
                Err(other) => {
                    assert_eq!(Err(other), Ok(()), "cursor {cursor} refused");
                }
            }
        }
    }

    fn push(&mut self, sub: &Subscription, event: &Event) {
        assert!(!self.finished, "event after the run's terminal");
        assert_eq!(event.seq(), self.cursor() + 1, "gap or duplicate");
        assert_eq!(sub.cursor(), event.seq());
        self.events.push((event.seq(), event.line().to_owned()));
        if is_run_completed(event) {
            self.finished = true;
        }
    }

    /// Checks an early end: `SlowConsumer`, or `Evicted` (a replay the
    /// evicting log dropped before it was read), with truthful fields.
    fn cut_off(&mut self, err: &SubscriptionError, bounds: SubscriptionBounds) {
        match *err {
            SubscriptionError::SlowConsumer {
                last_delivered,
                recovery_cursor,
                lag_events,
                lag_bytes,
                max_events,
                max_bytes,
            } => {
                assert_eq!(last_delivered, self.cursor());
                assert_eq!(recovery_cursor, last_delivered);
                assert_eq!(
                    (max_events, max_bytes),
                    (bounds.max_events, bounds.max_bytes)
                );
                assert!(
                    lag_events > max_events as u64 || lag_bytes > max_bytes as u64,
                    "{err}"
                );
                assert!(last_delivered + lag_events <= EVENTS);
                self.slow += 1;
            }
            SubscriptionError::Evicted {
                last_delivered,
                earliest,
                recovery_cursor,
            } => {
                assert_eq!(last_delivered, self.cursor());
                assert!(earliest > last_delivered + 1, "{err}");
                assert_eq!(recovery_cursor, earliest - 1);
                self.evicted += 1;
                self.gaps.push((last_delivered + 1, recovery_cursor));
            }
            SubscriptionError::Ended { .. } => {
                assert_eq!(Some(err), None, "the log is never closed here");
            }
            _ => assert_eq!(Some(err), None, "unknown end"),
        }
    }

    /// Checks what was collected against the producer's lines and the log.
    fn verify(&self, log: &RunLog, evicting: bool, produced: &[String], who: &str) {
        assert!(self.finished, "{who}: never saw run.completed");
        assert_eq!(self.events.last().map(|(s, _)| *s), Some(EVENTS), "{who}");
        // Every line is the committed line, byte for byte.
        for (seq, line) in &self.events {
            assert_eq!(line, &produced[*seq as usize - 1], "{who}: seq {seq}");
        }
        // Contiguous, save for the recorded gaps.
        let missed: u64 = self.gaps.iter().map(|(lo, hi)| hi + 1 - lo).sum();
        assert_eq!(
            self.events.len() as u64 + missed,
            EVENTS - self.start,
            "{who}: events plus gaps cover start..=end"
        );
        if evicting {
            assert_eq!(self.expired + self.evicted, self.gaps.len());
        } else {
            assert_eq!(self.expired, 0, "{who}: nothing is evicted");
            assert_eq!(self.evicted, 0, "{who}: nothing is evicted");
            let retained: Vec<String> = log
                .retained_after(self.start)
                .iter()
                .map(|e| e.line().to_owned())
                .collect();
            let got: Vec<String> = self.events.iter().map(|(_, l)| l.clone()).collect();
            assert_eq!(got, retained, "{who}: differs from retained_after");
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Eager,
    Late,
    TinyEvents,
    TinyBytes,
}

impl Kind {
    const ALL: [Kind; 4] = [Kind::Eager, Kind::Late, Kind::TinyEvents, Kind::TinyBytes];

    fn bounds(self, evicting: bool) -> SubscriptionBounds {
        match self {
            // In a log that evicts, even the roomy subscribers stay below
            // its retention, so falling out of the live window is over the
            // bounds; a replay (not counted by them, read as the subscriber
            // goes) the log evicts first ends with `Evicted`, a gap.
            Kind::Eager | Kind::Late if evicting => SubscriptionBounds {
                max_events: SMALL_RETENTION / 2,
                ..SubscriptionBounds::default()
            },
            Kind::Eager | Kind::Late => SubscriptionBounds::default(),
            Kind::TinyEvents => SubscriptionBounds {
                max_events: 2,
                max_bytes: 1 << 20,
                ..SubscriptionBounds::default()
            },
            Kind::TinyBytes => SubscriptionBounds {
                max_events: 4096,
                max_bytes: 1024,
                ..SubscriptionBounds::default()
            },
        }
    }

    fn naps(self) -> bool {
        matches!(self, Kind::TinyEvents | Kind::TinyBytes)
    }
}

/// Waits (spinning politely) until the log has at least `seq` events.
fn wait_for(log: &RunLog, seq: u64, deadline: Instant) {
    while log.stats().last_seq < seq {
        assert!(Instant::now() < deadline, "producer stalled");
        thread::sleep(Duration::from_micros(50));
    }
}

/// A late cursor: once the log reached a random point, a random cursor
/// strictly before the last commit. (A subscription after the run's
/// terminal itself currently never reports `Finished`.)
fn late_cursor(log: &RunLog, rng: &mut Rng, deadline: Instant) -> u64 {
    wait_for(log, 1 + rng.below(EVENTS), deadline);
    let latest = log.stats().last_seq;
    rng.below(latest)
}

fn subscriber_thread(
    log: &RunLog,
    pre: Option<Subscription>,
    kind: Kind,
    seed: u64,
    deadline: Instant,
) -> Collected {
    let mut rng = Rng::new(seed);
    let bounds = kind.bounds(evicting_log(log));
    let (mut out, mut sub) = match pre {
        Some(sub) => {
            let mut out = Collected::new(sub.cursor());
            out.subscriptions = 1;
            (out, sub)
        }
        None => {
            let mut out = Collected::new(late_cursor(log, &mut rng, deadline));
            let sub = out.subscribe(log, bounds);
            (out, sub)
        }
    };
    if matches!(kind, Kind::TinyEvents) {
        // Fall behind the bound before the first poll: a guaranteed cut.
        wait_for(log, 10, deadline);
    }
    loop {
        match sub.try_recv() {
            Ok(event) => {
                out.push(&sub, &event);
                if kind.naps() && rng.one_in(16) {
                    thread::sleep(Duration::from_micros(200));
                }
            }
            Err(TryRecvError::Empty) => {
                assert!(Instant::now() < deadline, "subscriber stalled: {out:?}");
                if rng.one_in(2) {
                    thread::yield_now();
                } else {
                    thread::sleep(Duration::from_micros(30));
                }
            }
            Err(TryRecvError::Finished) => {
                assert!(out.finished, "Finished before run.completed");
                assert_eq!(sub.try_recv().unwrap_err(), TryRecvError::Finished);
                return out;
            }
            Err(TryRecvError::Ended(err)) => {
                assert!(!out.finished);
                out.cut_off(&err, bounds);
                assert_eq!(sub.try_recv().unwrap_err(), TryRecvError::Finished);
                sub = out.subscribe(log, bounds);
            }
        }
    }
}

fn evicting_log(log: &RunLog) -> bool {
    log.config().max_events == SMALL_RETENTION
}

#[derive(Debug, Default)]
struct Totals {
    subscribers: usize,
    events: usize,
    slow: usize,
    expired: usize,
    evicted: usize,
    subscriptions: usize,
    waits: usize,
}

impl Totals {
    fn add(&mut self, c: &Collected) {
        self.subscribers += 1;
        self.events += c.events.len();
        self.slow += c.slow;
        self.expired += c.expired;
        self.evicted += c.evicted;
        self.subscriptions += c.subscriptions;
        self.waits += c.waits;
    }
}

fn check_log_end(log: &RunLog, index: usize, produced: &[String]) {
    assert!(log.run_ended());
    assert!(log.open_scopes().is_empty());
    let stats = log.stats();
    assert_eq!(stats.last_seq, EVENTS);
    assert_eq!(stats.subscribers, 0, "every subscription was dropped");
    let retained: Vec<String> = log
        .retained_after(0)
        .iter()
        .map(|e| e.line().to_owned())
        .collect();
    let tail = &produced[produced.len() - retained.len()..];
    assert_eq!(retained, tail);
    if evicting(index) {
        assert_eq!(retained.len(), SMALL_RETENTION);
        assert_eq!(stats.evicted, EVENTS - SMALL_RETENTION as u64);
    } else {
        assert_eq!(retained.len() as u64, EVENTS);
    }
}

#[test]
fn threads_commit_and_subscribe() {
    let started = Instant::now();
    let deadline = started + DEADLINE;
    let mut totals = Totals::default();
    let runs: Vec<_> = (0..RUNS)
        .map(|index| {
            let log = new_log(index);
            // Eager and TinyEvents subscribe after 0 before any commit.
            let subscribers: Vec<_> = Kind::ALL
                .iter()
                .enumerate()
                .map(|(k, &kind)| {
                    let pre = match kind {
                        Kind::Eager | Kind::TinyEvents => {
                            Some(log.subscribe(0, kind.bounds(evicting(index))).unwrap())
                        }
                        Kind::Late | Kind::TinyBytes => None,
                    };
                    let log = log.clone();
                    let seed = (index * 16 + k) as u64 + 1000;
                    thread::spawn(move || subscriber_thread(&log, pre, kind, seed, deadline))
                })
                .collect();
            let producer = {
                let log = log.clone();
                thread::spawn(move || produce(&log, index as u64 + 1))
            };
            (index, log, producer, subscribers)
        })
        .collect();
    for (index, log, producer, subscribers) in runs {
        let produced = producer.join().unwrap();
        for (kind, handle) in Kind::ALL.iter().zip(subscribers) {
            let collected = handle.join().unwrap();
            let who = format!("run {index} {kind:?}");
            collected.verify(&log, evicting(index), &produced, &who);
            if matches!(kind, Kind::TinyEvents) {
                assert!(collected.slow >= 1, "{who}: was never cut off");
            }
            totals.add(&collected);
        }
        check_log_end(&log, index, &produced);
    }
    eprintln!(
        "stress threads: {RUNS} runs x {EVENTS} events, {totals:?}, {:.2?}",
        started.elapsed()
    );
    assert!(totals.slow >= RUNS);
}

/// The `Stream` consumer: `next().await` until `None`, resubscribing after
/// every `SlowConsumer`.
async fn subscriber_task(log: RunLog, kind: Kind, seed: u64, deadline: Instant) -> Collected {
    let mut rng = Rng::new(seed);
    let bounds = kind.bounds(evicting_log(&log));
    let start = match kind {
        Kind::Eager | Kind::TinyEvents => 0,
        Kind::Late | Kind::TinyBytes => {
            // Late in time as well as in cursor.
            let target = 1 + rng.below(EVENTS);
            while log.stats().last_seq < target {
                assert!(Instant::now() < deadline, "producer stalled");
                tokio::time::sleep(Duration::from_micros(100)).await;
            }
            rng.below(log.stats().last_seq)
        }
    };
    let mut out = Collected::new(start);
    let mut sub = out.subscribe(&log, bounds);
    loop {
        let item = match futures_util::poll!(sub.next()) {
            Poll::Ready(item) => item,
            Poll::Pending => {
                out.waits += 1;
                sub.next().await
            }
        };
        match item {
            Some(Ok(event)) => {
                out.push(&sub, &event);
                if kind.naps() && rng.one_in(16) {
                    tokio::time::sleep(Duration::from_micros(300)).await;
                }
            }
            Some(Err(err)) => {
                assert!(!out.finished);
                out.cut_off(&err, bounds);
                assert!(sub.next().await.is_none(), "the stream ends after an error");
                sub = out.subscribe(&log, bounds);
            }
            None => {
                assert!(out.finished, "stream ended before run.completed");
                assert!(sub.next().await.is_none());
                return out;
            }
        }
    }
}

#[test]
fn tokio_streams_commit_and_subscribe() {
    let started = Instant::now();
    let deadline = started + DEADLINE;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    let mut totals = Totals::default();
    rt.block_on(async {
        let runs: Vec<_> = (0..RUNS)
            .map(|index| {
                let log = new_log(index);
                let tasks: Vec<_> = Kind::ALL
                    .iter()
                    .enumerate()
                    .map(|(k, &kind)| {
                        let seed = (index * 16 + k) as u64 + 5000;
                        tokio::spawn(subscriber_task(log.clone(), kind, seed, deadline))
                    })
                    .collect();
                let producer = {
                    let log = log.clone();
                    thread::spawn(move || produce(&log, index as u64 + 7000))
                };
                (index, log, producer, tasks)
            })
            .collect();
        for (index, log, producer, tasks) in runs {
            let produced = producer.join().unwrap();
            for (kind, task) in Kind::ALL.iter().zip(tasks) {
                let collected = tokio::time::timeout(DEADLINE, task)
                    .await
                    .expect("subscriber task hung (lost wakeup?)")
                    .unwrap();
                let who = format!("tokio run {index} {kind:?}");
                collected.verify(&log, evicting(index), &produced, &who);
                totals.add(&collected);
            }
            check_log_end(&log, index, &produced);
        }
    });
    eprintln!(
        "stress tokio: {RUNS} runs x {EVENTS} events, {totals:?}, {:.2?}",
        started.elapsed()
    );
    assert!(totals.waits > 0, "the waker path was never taken");
}
