//! Peak memory of one run log under its byte bound.
//!
//! One `RunLog` with `max_bytes` = 64 MiB (the binding bound: `max_events`
//! is effectively unbounded), 10,000,000 commits (run, turn and model
//! started, text deltas of 20–40 bytes of text, then model, turn and run
//! completed), two subscribers that keep up (drained every 1,000 commits).
//!
//! ```text
//! cargo build --release -p keel-eventlog --example memory
//! /usr/bin/time -v target/release/examples/memory            # 64 MiB, 10M commits
//! /usr/bin/time -v target/release/examples/memory 128 2000000 # MiB, commits
//! ```
//!
//! The goal (issue 4): maximum resident set size at most 1.25 x the bound.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use keel_eventlog::{
    ENTRY_OVERHEAD_BYTES, Event, Extra, LogConfig, ModelCompleted, ModelStarted, Payload,
    RunCompleted, RunLog, RunStarted, Subscription, SubscriptionBounds, SystemClock, TextDelta,
    TryRecvError, TurnRef,
};
use keel_message::{ModelName, OperationId, RunId};
use std::sync::Arc;

const DRAIN_EVERY: u64 = 1_000;

/// Realistic model text pieces, 20 to 40 bytes.
const WORDS: &str = "Sure! Here is a short summary of the document you shared: the \
    quarterly report shows revenue up 12% year over year, driven mostly by the new \
    subscription tier, while operating costs stayed flat. The main risks it names are \
    supplier concentration and a pending regulatory review in two markets.";

fn texts() -> Vec<String> {
    let bytes = WORDS.as_bytes();
    let mut out = Vec::new();
    let mut start = 0;
    let mut len = 20;
    while start + 40 < bytes.len() {
        out.push(WORDS[start..start + len].to_owned());
        start += len;
        len = 20 + (len * 7 + 3) % 21; // 20..=40
    }
    out
}

/// Kernel-reported peak and current resident set (kB), for a cross-check.
fn rss_kb() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    (field("VmHWM:"), field("VmRSS:"))
}

fn drain(sub: &mut Subscription) -> (u64, u64) {
    let (mut n, mut last) = (0, 0);
    loop {
        match sub.try_recv() {
            Ok(e) => {
                n += 1;
                last = e.seq();
            }
            Err(TryRecvError::Empty | TryRecvError::Finished) => return (n, last),
            Err(other) => panic!("subscriber cut off: {other}"),
        }
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mib: usize = args.next().map_or(64, |a| a.parse().expect("MiB"));
    let commits: u64 = args
        .next()
        .map_or(10_000_000, |a| a.parse().expect("commits"));

    let config = LogConfig {
        max_events: usize::MAX / 2,
        max_bytes: mib << 20,
        ..LogConfig::default()
    };
    let log = RunLog::new(
        RunId::parse("run_01J9ZK3M8Q").unwrap(),
        config,
        Arc::new(SystemClock),
    )
    .expect("valid config");
    let op = OperationId::parse("op_1").unwrap();
    let bounds = SubscriptionBounds::default();
    let mut subs = [
        log.subscribe(0, bounds).unwrap(),
        log.subscribe(0, bounds).unwrap(),
    ];
    let mut received = [0u64; 2];

    log.commit(&Payload::RunStarted(RunStarted::default()))
        .unwrap();
    log.commit(&Payload::TurnStarted(TurnRef {
        turn: 1,
        extra: Extra::new(),
    }))
    .unwrap();
    log.commit(&Payload::ModelStarted(ModelStarted {
        turn: 1,
        operation_id: op.clone(),
        model: ModelName::parse("gpt-5").unwrap(),
        attempt: 1,
        purpose: None,
        extra: Extra::new(),
    }))
    .unwrap();

    let texts = texts();
    let deltas = commits - 6;
    let started = std::time::Instant::now();
    let mut line_bytes = 0u64;
    let mut peak_retained = (0usize, 0usize);
    for i in 0..deltas {
        let text = &texts[(i as usize) % texts.len()];
        let e = log
            .commit(&Payload::TextDelta(TextDelta {
                turn: 1,
                operation_id: op.clone(),
                text: text.clone(),
                extra: Extra::new(),
            }))
            .unwrap();
        line_bytes += e.line().len() as u64;
        if i % DRAIN_EVERY == DRAIN_EVERY - 1 {
            for (s, r) in subs.iter_mut().zip(&mut received) {
                *r += drain(s).0;
            }
            let st = log.stats();
            if st.retained_bytes > peak_retained.1 {
                peak_retained = (st.retained_events, st.retained_bytes);
            }
        }
    }
    let before_end = log.stats();
    let (hwm_before_end, rss_before_end) = rss_kb();
    log.commit(&Payload::ModelCompleted(ModelCompleted {
        turn: 1,
        operation_id: op,
        finish: keel_stream::FinishReason::Stop,
        usage: None,
        metadata: None,
        extra: Extra::new(),
    }))
    .unwrap();
    log.commit(&Payload::TurnCompleted(TurnRef {
        turn: 1,
        extra: Extra::new(),
    }))
    .unwrap();
    log.commit(&Payload::RunCompleted(RunCompleted::default()))
        .unwrap();
    for (s, r) in subs.iter_mut().zip(&mut received) {
        *r += drain(s).0;
        assert_eq!(s.try_recv().unwrap_err(), TryRecvError::Finished);
    }
    let elapsed = started.elapsed();
    let st = log.stats();
    let (hwm, rss) = rss_kb();

    let mean_line = line_bytes as f64 / deltas as f64;
    println!(
        "bound: max_bytes = {mib} MiB ({} bytes), max_events = usize::MAX/2",
        mib << 20
    );
    println!(
        "commits: {} ({} text deltas, mean line {mean_line:.1} bytes, text {}..={} bytes) in {:.2?} ({:.0} ns/commit)",
        st.last_seq,
        deltas,
        texts.iter().map(String::len).min().unwrap_or(0),
        texts.iter().map(String::len).max().unwrap_or(0),
        elapsed,
        elapsed.as_nanos() as f64 / st.last_seq as f64
    );
    println!("subscribers received: {received:?} (both must equal the commit count)");
    println!(
        "retained before the terminals: {} events, {} bytes ({:.2} MiB) counted; evicted {}",
        before_end.retained_events,
        before_end.retained_bytes,
        before_end.retained_bytes as f64 / (1 << 20) as f64,
        before_end.evicted
    );
    println!(
        "peak retained (sampled): {} events, {} bytes",
        peak_retained.0, peak_retained.1
    );
    println!(
        "counted per event: line {mean_line:.1} + ENTRY_OVERHEAD_BYTES {ENTRY_OVERHEAD_BYTES} = {:.1}",
        mean_line + ENTRY_OVERHEAD_BYTES as f64
    );
    println!(
        "sizes: Event {} bytes (Arc allocation {} before malloc rounding), deque slot (Arc + cum_bytes) 16 bytes",
        std::mem::size_of::<Event>(),
        std::mem::size_of::<Event>() + 16
    );
    println!(
        "rss: VmHWM {hwm} kB ({:.1} MiB), VmRSS {rss} kB; before the terminals VmHWM {hwm_before_end} kB, VmRSS {rss_before_end} kB",
        hwm as f64 / 1024.0
    );
    println!(
        "peak / bound = {:.3} (goal <= 1.25); rss before terminals / retained events = {:.1} bytes/event",
        hwm as f64 * 1024.0 / (mib << 20) as f64,
        rss_before_end as f64 * 1024.0 / before_end.retained_events as f64
    );
}
