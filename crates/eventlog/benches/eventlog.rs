//! Benches for the Performance section. Every comparison runs in
//! the same process, one right after the other.
//!
//! Run: `cargo bench -p keel-eventlog --bench eventlog -- --warm-up-time 1 --measurement-time 3`
//!
//! - `commit_fanout/{keel,broadcast}/batch{1,64}/{0,1,16,256}`: one
//!   iteration commits (keel) or sends (broadcast) `batch` text deltas,
//!   then every subscriber / receiver calls `try_recv` until `Empty`. Both
//!   sides run the identical scheme, so the per-event figure (criterion's
//!   throughput is `batch` elements) is commit-or-send plus every
//!   consumer's share of receiving it, including the final `Empty` probe.
//!   `batch1` is the worst case for keel's pull design (every consumer
//!   locks the log twice per event); `batch64` is a consumer that polls
//!   less often than the producer commits. Broadcast carries clones of
//!   `Arc<Event>`s committed once into another log (a pool of 4096
//!   distinct events, cycled), so it pays no encoding: keel's figure
//!   includes `Payload::to_canonical`, measured alone in `encode_decode`.
//! - `catch_up/{keel,vec_floor}`: `subscribe(0)` on 100k retained events
//!   and `try_recv` until empty, against cloning each `Arc` of a
//!   `Vec<Arc<Event>>` of the same events.
//! - `encode_decode/{text_delta,tool_failed}/...`: keel's canonical
//!   encoding and checked decoding against plain `serde_json` on
//!   equivalent derived structs (whose output is asserted byte-identical).
//!   `decode_event/keel_decode_generic` is `Event::decode` without its
//!   shortcuts (the text-delta fast path, the borrowed envelope): the
//!   reference path, the whole decode before they existed.
//! - `stalled_subscriber/{healthy_only,with_stalled}`: per-commit latency,
//!   each commit timed alone (`iter_custom`); p50/p99/p99.9 printed, over
//!   every commit criterion ran and over a fixed interleaved pass of 200k
//!   commits per configuration. The stalled subscriber lives for the whole
//!   measurement: a commit never visits subscribers (it appends, evicts
//!   and wakes registered wakers), so one that never polls costs nothing
//!   and learns it was cut off (`SlowConsumer`) when it finally polls,
//!   which the bench checks at the end.
//!
//! Every comparison also prints a noise-resistant cross-check: short
//! rounds alternating the two sides, median per side (this machine is
//! shared, and criterion runs the two sides seconds apart).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use criterion::{BenchmarkId, Criterion, Throughput, black_box, criterion_group, criterion_main};
use keel_eventlog::{Durability, ErrorText, SubscriptionError};
use keel_eventlog::{
    Event, Extra, LogConfig, ModelStarted, Payload, RunLog, RunStarted, Subscription,
    SubscriptionBounds, SystemClock, TextDelta, ToolFailed, ToolOutcome, ToolRef, ToolRetry,
    TryRecvError, TurnRef,
};
use keel_message::{CallId, ModelName, OperationId, RunId, ToolName};
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::broadcast;

const DELTA_TEXT: &str = "Hello there, world! "; // 20 bytes

/// Bounds nobody reaches in these benches.
const HUGE: SubscriptionBounds = SubscriptionBounds {
    max_events: usize::MAX / 4,
    max_bytes: usize::MAX / 4,
    durability: Durability::Committed,
};

fn op() -> OperationId {
    OperationId::parse("op_1").unwrap()
}

fn delta(text: &str) -> Payload {
    Payload::TextDelta(TextDelta {
        turn: 1,
        operation_id: op(),
        text: text.to_owned(),
        extra: Extra::new(),
    })
}

fn tool_failed() -> Payload {
    Payload::ToolFailed(ToolFailed {
        turn: 1,
        call_id: CallId::parse("call_9bXq2LmT").unwrap(),
        tool: ToolName::parse("get_weather").unwrap(),
        error: ErrorText::new("upstream returned 503 Service Unavailable after 3 attempts"),
        outcome: Some(ToolOutcome::Uncertain),
        retry: Some(ToolRetry::Retryable),
        extra: Extra::new(),
    })
}

/// A log whose run, turn 1 and model call `op_1` are open, so text deltas
/// are accepted forever. Retention is bounded (evicting in steady state)
/// so that long measurements do not grow memory without end.
fn open_log(max_events: usize) -> RunLog {
    let config = LogConfig {
        max_events,
        max_bytes: 1 << 30,
        ..LogConfig::default()
    };
    let log = RunLog::new(
        RunId::parse("run_1").unwrap(),
        config,
        Arc::new(SystemClock),
    )
    .unwrap();
    log.commit(&Payload::RunStarted(RunStarted::default()))
        .unwrap();
    log.commit(&Payload::TurnStarted(TurnRef {
        turn: 1,
        extra: Extra::new(),
    }))
    .unwrap();
    log.commit(&Payload::ModelStarted(ModelStarted {
        turn: 1,
        operation_id: op(),
        model: ModelName::parse("gpt-5").unwrap(),
        attempt: 1,
        purpose: None,
        extra: Extra::new(),
    }))
    .unwrap();
    log
}

fn drain_keel(sub: &mut Subscription) {
    loop {
        match sub.try_recv() {
            Ok(e) => {
                black_box(e);
            }
            Err(TryRecvError::Empty) => return,
            Err(other) => panic!("subscriber ended: {other}"),
        }
    }
}

fn drain_broadcast(rx: &mut broadcast::Receiver<Arc<Event>>) {
    loop {
        match rx.try_recv() {
            Ok(e) => {
                black_box(e);
            }
            Err(broadcast::error::TryRecvError::Empty) => return,
            Err(other) => panic!("receiver ended: {other}"),
        }
    }
}

// ---------------------------------------------------------------------------
// 1. commit + fan-out vs tokio::sync::broadcast
// ---------------------------------------------------------------------------

/// Keel's side: a log (steady state, evicting) and its subscribers.
struct KeelFanout {
    log: RunLog,
    subs: Vec<Subscription>,
    payload: Payload,
}

impl KeelFanout {
    fn new(subs: usize) -> KeelFanout {
        let log = open_log(100_000);
        let payload = delta(DELTA_TEXT);
        for _ in 0..100_000 {
            log.commit(&payload).unwrap();
        }
        let subs = (0..subs)
            .map(|_| log.subscribe(log.stats().last_seq, HUGE).unwrap())
            .collect();
        KeelFanout { log, subs, payload }
    }

    /// Commits `batch` events, then every subscriber drains until `Empty`.
    fn step(&mut self, batch: usize) {
        for _ in 0..batch {
            black_box(self.log.commit(&self.payload).unwrap());
        }
        for s in &mut self.subs {
            drain_keel(s);
        }
    }
}

/// Broadcast's side: the same events, pre-built, sent as `Arc` clones.
struct BroadcastFanout {
    tx: broadcast::Sender<Arc<Event>>,
    rxs: Vec<broadcast::Receiver<Arc<Event>>>,
    pool: Arc<Vec<Arc<Event>>>,
    i: usize,
}

impl BroadcastFanout {
    fn new(subs: usize, pool: &Arc<Vec<Arc<Event>>>) -> BroadcastFanout {
        let (tx, _) = broadcast::channel::<Arc<Event>>(1024);
        let rxs = (0..subs).map(|_| tx.subscribe()).collect();
        BroadcastFanout {
            tx,
            rxs,
            pool: Arc::clone(pool),
            i: 0,
        }
    }

    /// Sends `batch` events, then every receiver drains until `Empty`.
    fn step(&mut self, batch: usize) {
        for _ in 0..batch {
            // Err only when there are no receivers.
            let _ = black_box(self.tx.send(Arc::clone(&self.pool[self.i & 4095])));
            self.i = self.i.wrapping_add(1);
        }
        for r in &mut self.rxs {
            drain_broadcast(r);
        }
    }
}

fn median(mut v: Vec<u64>) -> f64 {
    v.sort_unstable();
    v[v.len() / 2] as f64
}

fn commit_fanout(c: &mut Criterion) {
    // The same events for broadcast: committed once into a log, then
    // cloned (4096 distinct events, cycled).
    let pool: Arc<Vec<Arc<Event>>> = {
        let log = open_log(1 << 20);
        let payload = delta(DELTA_TEXT);
        Arc::new((0..4096).map(|_| log.commit(&payload).unwrap()).collect())
    };
    let mut g = c.benchmark_group("commit_fanout");
    for batch in [1usize, 64] {
        g.throughput(Throughput::Elements(batch as u64));
        for subs in [0usize, 1, 16, 256] {
            let mut keel = KeelFanout::new(subs);
            let mut bc = BroadcastFanout::new(subs, &pool);
            // A noise-resistant cross-check: short rounds of 64 events
            // (64 / batch steps) alternating the two sides (who goes
            // first alternates too), median per side.
            let rounds = 400;
            let steps = 64 / batch;
            let (mut tk, mut tb) = (Vec::with_capacity(rounds), Vec::with_capacity(rounds));
            for r in 0..rounds {
                let mut time_keel = || {
                    let t = Instant::now();
                    for _ in 0..steps {
                        keel.step(batch);
                    }
                    tk.push(t.elapsed().as_nanos() as u64);
                };
                let mut time_bc = || {
                    let t = Instant::now();
                    for _ in 0..steps {
                        bc.step(batch);
                    }
                    tb.push(t.elapsed().as_nanos() as u64);
                };
                if r % 2 == 0 {
                    time_keel();
                    time_bc();
                } else {
                    time_bc();
                    time_keel();
                }
            }
            let (mk, mb) = (median(tk) / 64.0, median(tb) / 64.0);
            println!(
                "commit_fanout interleaved batch{batch} subs {subs}: keel {mk:.0} ns/event, broadcast {mb:.0} ns/event, ratio {:.2} (medians of {rounds} alternating rounds)",
                mk / mb
            );
            g.bench_with_input(
                BenchmarkId::new(format!("keel/batch{batch}"), subs),
                &subs,
                |b, _| b.iter(|| keel.step(batch)),
            );
            g.bench_with_input(
                BenchmarkId::new(format!("broadcast/batch{batch}"), subs),
                &subs,
                |b, _| b.iter(|| bc.step(batch)),
            );
        }
    }
    g.finish();
}

// ---------------------------------------------------------------------------
// 2. catch-up on 100k retained events vs iterating a Vec<Arc<Event>>
// ---------------------------------------------------------------------------

fn catch_up(c: &mut Criterion) {
    const N: u64 = 100_000;
    let log = open_log(N as usize);
    let payload = delta(DELTA_TEXT);
    for _ in 3..N {
        log.commit(&payload).unwrap();
    }
    let stats = log.stats();
    assert_eq!(stats.retained_events as u64, N);
    assert_eq!(stats.earliest_seq, 1);
    let events: Vec<Arc<Event>> = log.retained_after(0);
    assert_eq!(events.len() as u64, N);

    // Subscribe after 0 (the replay is then read in batches), then
    // `try_recv` until `Empty`; the subscription is dropped untimed.
    let keel = || {
        let mut sub = log.subscribe(0, HUGE).unwrap();
        let mut n = 0u64;
        loop {
            match sub.try_recv() {
                Ok(e) => {
                    black_box(e);
                    n += 1;
                }
                Err(TryRecvError::Empty) => break,
                Err(other) => panic!("{other}"),
            }
        }
        assert_eq!(n, N);
        sub
    };
    let floor = || {
        for e in &events {
            black_box(Arc::clone(e));
        }
    };
    // Noise-resistant cross-check: alternating rounds, medians. A round
    // (100k events, milliseconds) is longer than a scheduler slice on a
    // loaded machine, so the minimum of each side is printed too: the
    // round least disturbed.
    let rounds = 60;
    let (mut tk, mut tf) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let t = Instant::now();
        let sub = keel();
        tk.push(t.elapsed().as_nanos() as u64);
        drop(sub);
        let t = Instant::now();
        floor();
        tf.push(t.elapsed().as_nanos() as u64);
    }
    let min = |v: &[u64]| v.iter().copied().min().unwrap_or(0) as f64 / N as f64;
    let (nk, nf) = (min(&tk), min(&tf));
    let (mk, mf) = (median(tk) / N as f64, median(tf) / N as f64);
    println!(
        "catch_up interleaved: keel {mk:.2} ns/event, vec floor {mf:.2} ns/event, ratio {:.2} (medians of {rounds} alternating rounds); minimums keel {nk:.2}, floor {nf:.2}, ratio {:.2}",
        mk / mf,
        nk / nf
    );

    let mut g = c.benchmark_group("catch_up");
    g.sample_size(20);
    g.throughput(Throughput::Elements(N));
    g.bench_function("keel/100k", |b| b.iter(keel));
    g.bench_function("vec_floor/100k", |b| b.iter(floor));
    g.finish();
}

// ---------------------------------------------------------------------------
// 3. encode / decode vs plain serde_json
// ---------------------------------------------------------------------------

/// The envelope as a plain derived struct; members in canonical order, so
/// serde_json's output equals the canonical line byte for byte.
#[derive(Serialize, Deserialize)]
struct PlainEvent<P> {
    kind: String,
    payload: P,
    run_id: String,
    seq: u64,
    ts: u64,
}

#[derive(Serialize, Deserialize, Clone)]
struct PlainTextDelta {
    operation_id: String,
    text: String,
    turn: u64,
}

#[derive(Serialize, Deserialize, Clone, Copy)]
#[serde(rename_all = "snake_case")]
enum PlainOutcome {
    Definitive,
    Uncertain,
}

#[derive(Serialize, Deserialize, Clone, Copy)]
#[serde(rename_all = "snake_case")]
enum PlainRetry {
    Retryable,
    NotRetryable,
}

#[derive(Serialize, Deserialize, Clone)]
struct PlainToolFailed {
    call_id: String,
    error: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    outcome: Option<PlainOutcome>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    retry: Option<PlainRetry>,
    tool: String,
    turn: u64,
}

fn bench_codec<P>(c: &mut Criterion, name: &str, payload: &Payload, event: &Arc<Event>, plain: &P)
where
    P: Serialize + for<'de> Deserialize<'de> + Clone,
{
    let plain_event = PlainEvent {
        kind: event.kind().to_string(),
        payload: plain.clone(),
        run_id: event.run_id().to_string(),
        seq: event.seq(),
        ts: event.ts(),
    };
    // The comparison is only fair if both sides produce the same bytes.
    assert_eq!(
        payload.to_canonical().unwrap(),
        serde_json::to_string(plain).unwrap()
    );
    assert_eq!(serde_json::to_string(&plain_event).unwrap(), event.line());
    let line = event.line().to_owned();
    println!("{name}: line is {} bytes: {line}", line.len());

    let mut g = c.benchmark_group(format!("encode_decode/{name}"));
    g.bench_function("encode_payload/keel_to_canonical", |b| {
        b.iter(|| black_box(black_box(payload).to_canonical().unwrap()))
    });
    g.bench_function("encode_payload/serde_to_string", |b| {
        b.iter(|| black_box(serde_json::to_string(black_box(plain)).unwrap()))
    });
    g.bench_function("encode_event/serde_to_string", |b| {
        b.iter(|| black_box(serde_json::to_string(black_box(&plain_event)).unwrap()))
    });
    g.bench_function("decode_event/keel_decode", |b| {
        b.iter(|| black_box(Event::decode(black_box(&line)).unwrap()))
    });
    g.bench_function("decode_event/keel_decode_generic", |b| {
        b.iter(|| black_box(Event::decode_generic(black_box(&line)).unwrap()))
    });
    g.bench_function("decode_event/serde_from_str", |b| {
        b.iter(|| black_box(serde_json::from_str::<PlainEvent<P>>(black_box(&line)).unwrap()))
    });
    g.finish();
}

fn encode_decode(c: &mut Criterion) {
    // text delta
    let td = delta(DELTA_TEXT);
    let log = open_log(100_000);
    let td_event = log.commit(&td).unwrap();
    let td_plain = PlainTextDelta {
        operation_id: "op_1".into(),
        text: DELTA_TEXT.into(),
        turn: 1,
    };
    bench_codec(c, "text_delta", &td, &td_event, &td_plain);
    // The whole commit of a text delta (encode + assemble + lock +
    // lifecycle + append + eviction), no subscribers, for reference.
    {
        let mut g = c.benchmark_group("encode_decode/text_delta");
        g.bench_function("encode_event/keel_commit", |b| {
            b.iter(|| black_box(log.commit(black_box(&td)).unwrap()))
        });
        g.finish();
    }

    // tool.failed
    let tf = tool_failed();
    let log = open_log(1 << 20);
    log.commit(&Payload::ToolStarted(ToolRef {
        turn: 1,
        call_id: CallId::parse("call_9bXq2LmT").unwrap(),
        tool: ToolName::parse("get_weather").unwrap(),
        extra: Extra::new(),
    }))
    .unwrap();
    let tf_event = log.commit(&tf).unwrap();
    let tf_plain = PlainToolFailed {
        call_id: "call_9bXq2LmT".into(),
        error: "upstream returned 503 Service Unavailable after 3 attempts".into(),
        outcome: Some(PlainOutcome::Uncertain),
        retry: Some(PlainRetry::Retryable),
        tool: "get_weather".into(),
        turn: 1,
    };
    let _ = PlainOutcome::Definitive;
    let _ = PlainRetry::NotRetryable;
    bench_codec(c, "tool_failed", &tf, &tf_event, &tf_plain);
}

// ---------------------------------------------------------------------------
// 4. stalled subscriber: commit latency distribution
// ---------------------------------------------------------------------------

/// One configuration: a log in steady state (already evicting), one
/// healthy subscriber drained after every commit (untimed), and maybe one
/// subscriber that never reads.
struct Setup {
    log: RunLog,
    healthy: Subscription,
    stalled: Option<Subscription>,
    payload: Payload,
}

const STALL_RETAINED: usize = 100_000;

impl Setup {
    fn new(with_stalled: bool) -> Setup {
        let log = open_log(STALL_RETAINED);
        let payload = delta(DELTA_TEXT);
        // Steady state: fill past the retention bound so every commit evicts.
        for _ in 0..STALL_RETAINED + 1000 {
            log.commit(&payload).unwrap();
        }
        let last = log.stats().last_seq;
        let healthy = log
            .subscribe(
                last,
                SubscriptionBounds {
                    max_events: 4096,
                    max_bytes: 8 << 20,
                    ..SubscriptionBounds::default()
                },
            )
            .unwrap();
        // Small bounds: it is over them after 17 commits.
        let stalled = with_stalled.then(|| {
            log.subscribe(
                last,
                SubscriptionBounds {
                    max_events: 16,
                    max_bytes: 4096,
                    ..SubscriptionBounds::default()
                },
            )
            .unwrap()
        });
        Setup {
            log,
            healthy,
            stalled,
            payload,
        }
    }

    /// Commits `n` events, timing each commit alone; returns the sum and
    /// appends each duration (ns) to `out`.
    fn run(&mut self, n: u64, out: &mut Vec<u64>) -> Duration {
        let mut total = Duration::ZERO;
        for _ in 0..n {
            let t0 = Instant::now();
            let e = self.log.commit(&self.payload).unwrap();
            let dt = t0.elapsed();
            black_box(e);
            total += dt;
            out.push(u64::try_from(dt.as_nanos()).unwrap_or(u64::MAX));
            drain_keel(&mut self.healthy);
        }
        total
    }

    /// The stalled subscriber was cut off lazily: it learns so when it
    /// finally polls, with the recovery cursor where it stopped.
    fn check_stalled(&mut self) -> String {
        let Some(s) = self.stalled.as_mut() else {
            return "none".into();
        };
        match s.try_recv() {
            Err(TryRecvError::Ended(e @ SubscriptionError::SlowConsumer { .. })) => e.to_string(),
            other => panic!("stalled subscriber was not cut off: {other:?}"),
        }
    }
}

fn pct(sorted: &[u64], p: f64) -> u64 {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

fn summary(label: &str, mut v: Vec<u64>) -> (u64, u64, u64, f64) {
    if v.is_empty() {
        // A filtered run skips the criterion benches: nothing was timed.
        println!("stalled_subscriber {label}: no samples (filtered out)");
        return (0, 0, 0, 0.0);
    }
    v.sort_unstable();
    let mean = v.iter().sum::<u64>() as f64 / v.len() as f64;
    let (p50, p99, p999) = (pct(&v, 0.50), pct(&v, 0.99), pct(&v, 0.999));
    println!(
        "stalled_subscriber {label}: n={} mean={mean:.0}ns p50={p50}ns p99={p99}ns p99.9={p999}ns max={}ns",
        v.len(),
        v[v.len() - 1]
    );
    (p50, p99, p999, mean)
}

fn print_ratio(what: &str, a: (u64, u64, u64, f64), b: (u64, u64, u64, f64)) {
    if a.0 == 0 || b.0 == 0 {
        return;
    }
    println!(
        "stalled_subscriber {what}: with_stalled/healthy_only p50 {:.3}  p99 {:.3}  p99.9 {:.3}  mean {:.3}",
        b.0 as f64 / a.0 as f64,
        b.1 as f64 / a.1 as f64,
        b.2 as f64 / a.2 as f64,
        b.3 / a.3
    );
}

fn stalled(c: &mut Criterion) {
    // (a) A fixed pass, interleaved so drift hits both alike: 20 rounds of
    // 10k commits per configuration, 200k each.
    {
        let mut a = Setup::new(false);
        let mut b = Setup::new(true);
        let (mut va, mut vb) = (Vec::with_capacity(200_000), Vec::with_capacity(200_000));
        // Warm both.
        a.run(10_000, &mut Vec::new());
        b.run(10_000, &mut Vec::new());
        for _ in 0..20 {
            a.run(10_000, &mut va);
            b.run(10_000, &mut vb);
        }
        let sa = summary("interleaved healthy_only", va);
        let sb = summary("interleaved with_stalled", vb);
        print_ratio("interleaved", sa, sb);
        println!(
            "stalled_subscriber interleaved: log subscribers={} ; stalled sees: {}",
            b.log.stats().subscribers,
            b.check_stalled()
        );
    }
    // (b) Criterion means; every individually timed commit is kept too.
    let mut g = c.benchmark_group("stalled_subscriber");
    let mut results = Vec::new();
    for (label, with_stalled) in [("healthy_only", false), ("with_stalled", true)] {
        let setup = RefCell::new(Setup::new(with_stalled));
        let samples = RefCell::new(Vec::<u64>::new());
        g.bench_function(label, |bch| {
            bch.iter_custom(|iters| setup.borrow_mut().run(iters, &mut samples.borrow_mut()))
        });
        let mut setup = setup.into_inner();
        let samples = samples.into_inner();
        // A filtered run times nothing here, and commits nothing that could
        // cut the stalled subscriber off.
        let ran = !samples.is_empty();
        let s = summary(&format!("criterion-run {label}"), samples);
        if with_stalled && ran {
            println!(
                "stalled_subscriber criterion-run: log subscribers={} ; stalled sees: {}",
                setup.log.stats().subscribers,
                setup.check_stalled()
            );
        }
        results.push(s);
    }
    print_ratio("criterion-run", results[0], results[1]);
    g.finish();
}

criterion_group! {
    name = benches;
    // Plots take longer to draw than the benches take to run.
    config = Criterion::default().without_plots();
    targets = commit_fanout, catch_up, encode_decode, stalled
}
criterion_main!(benches);
