//! JetStream publish throughput through [`JetStreamObserver`] versus raw
//! async-nats JetStream publishes (each awaiting its `PubAck`) of the same
//! payloads.
//!
//! `cargo bench -p keel-observers --features nats --bench nats -- --warm-up-time 1 --measurement-time 5`
//!
//! Starts its own `nats-server -js` (file storage in a temp dir) on a free
//! loopback port; without `nats-server` on PATH it prints
//! `SKIPPED: nats-server not on PATH` and measures nothing. Both sides send
//! the same canonical lines (a ~150-byte `model.text_delta` each) of a fresh
//! run per iteration, one at a time, awaiting each ack: that is how the
//! pipeline drives a required observer for one run. The observer adds the
//! `Nats-Msg-Id` and expected-last-subject-sequence headers and its per-run
//! bookkeeping; raw sends the line with no headers to the same stream.
//!
//! Group `jetstream_batch`: the observer gets the run's 200 events in one
//! `observe_batch` (published back to back, acks awaited in order, each
//! message chained to the one before by `Nats-Expected-Last-Msg-Id`);
//! raw publishes the same lines back to back with no headers and then
//! awaits the acks in order.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use keel_eventlog::{
    Event, Extra, LogConfig, ModelStarted, Payload, RunLog, RunStarted, SystemClock, TextDelta,
    TurnRef,
};
use keel_message::{ModelName, OperationId, RunId};
use keel_observers::{JetStreamConfig, JetStreamObserver, RequiredObserver};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const EVENTS_PER_RUN: usize = 200;

struct Server(Child, std::path::PathBuf);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        let _ = std::fs::remove_dir_all(&self.1);
    }
}

fn start_server() -> Option<(Server, String)> {
    let port = TcpListener::bind("127.0.0.1:0")
        .ok()?
        .local_addr()
        .ok()?
        .port();
    let dir = std::env::temp_dir().join(format!("keel-nats-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).ok()?;
    let child = Command::new("nats-server")
        .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
        .arg(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let server = Server(child, dir);
    let t = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if t.elapsed() > Duration::from_secs(10) {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Some((server, format!("nats://127.0.0.1:{port}")))
}

fn events(run: &str) -> Vec<Arc<Event>> {
    let log = RunLog::new(
        RunId::parse(run).unwrap(),
        LogConfig::default(),
        Arc::new(SystemClock),
    )
    .unwrap();
    let model = ModelName::parse("bench-1").unwrap();
    let op = OperationId::parse("op_1").unwrap();
    let mut out = vec![
        log.commit(&Payload::RunStarted(RunStarted {
            model: Some(model.clone()),
            chat: None,
            extra: Extra::new(),
            continues: None,
            forked_from: None,
            parent: None,
        }))
        .unwrap(),
        log.commit(&Payload::TurnStarted(TurnRef {
            turn: 1,
            extra: Extra::new(),
        }))
        .unwrap(),
        log.commit(&Payload::ModelStarted(ModelStarted {
            turn: 1,
            operation_id: op.clone(),
            model,
            attempt: 1,
            purpose: None,
            extra: Extra::new(),
        }))
        .unwrap(),
    ];
    while out.len() < EVENTS_PER_RUN {
        out.push(
            log.commit(&Payload::TextDelta(TextDelta {
                turn: 1,
                operation_id: op.clone(),
                text: "the quick brown fox jumps over the lazy dog".to_owned(),
                extra: Extra::new(),
            }))
            .unwrap(),
        );
    }
    out
}

fn bench(c: &mut Criterion) {
    if Command::new("nats-server")
        .arg("--version")
        .output()
        .is_err()
    {
        println!("SKIPPED: nats-server not on PATH");
        return;
    }
    let (_server, url) = start_server().expect("nats-server did not start");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let observer = rt
        .block_on(JetStreamObserver::connect(JetStreamConfig::new(url)))
        .unwrap();
    let context = observer.handle().context().clone();
    let counter = AtomicU64::new(0);
    let setup = Setup {
        rt: &rt,
        observer: &observer,
        context: &context,
        counter: &counter,
    };
    one_by_one(c, &setup);
    batched(c, &setup);
}

/// What both groups share.
struct Setup<'a> {
    rt: &'a tokio::runtime::Runtime,
    observer: &'a JetStreamObserver,
    context: &'a async_nats::jetstream::Context,
    counter: &'a AtomicU64,
}

/// Each event awaited before the next.
fn one_by_one(c: &mut Criterion, setup: &Setup<'_>) {
    let Setup {
        rt,
        observer,
        context,
        counter,
    } = *setup;
    let mut group = c.benchmark_group("jetstream_publish");
    group.throughput(Throughput::Elements(EVENTS_PER_RUN as u64));
    group.sample_size(10);
    group.bench_function("observer", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let run = format!("run_obs_{}", counter.fetch_add(1, Ordering::Relaxed));
                let evs = events(&run);
                let t = Instant::now();
                rt.block_on(async {
                    for e in &evs {
                        observer.observe(e).await.unwrap();
                    }
                });
                total += t.elapsed();
            }
            total
        })
    });
    group.bench_function("raw_async_nats", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let run = format!("run_raw_{}", counter.fetch_add(1, Ordering::Relaxed));
                let subject = format!("keel.runs.{run}");
                let payloads: Vec<Bytes> = events(&run)
                    .iter()
                    .map(|e| Bytes::copy_from_slice(e.line().as_bytes()))
                    .collect();
                let t = Instant::now();
                rt.block_on(async {
                    for p in payloads {
                        context
                            .publish(subject.clone(), p)
                            .await
                            .unwrap()
                            .await
                            .unwrap();
                    }
                });
                total += t.elapsed();
            }
            total
        })
    });
    group.finish();
}

/// The whole run in one batch; raw awaits its acks in order after sending all.
fn batched(c: &mut Criterion, setup: &Setup<'_>) {
    let Setup {
        rt,
        observer,
        context,
        counter,
    } = *setup;
    let mut group = c.benchmark_group("jetstream_batch");
    group.throughput(Throughput::Elements(EVENTS_PER_RUN as u64));
    group.sample_size(10);
    group.bench_function("observer", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let run = format!("run_obsb_{}", counter.fetch_add(1, Ordering::Relaxed));
                let evs = events(&run);
                let t = Instant::now();
                rt.block_on(observer.observe_batch(&evs)).unwrap();
                total += t.elapsed();
            }
            total
        })
    });
    group.bench_function("raw_async_nats", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let run = format!("run_rawb_{}", counter.fetch_add(1, Ordering::Relaxed));
                let subject = format!("keel.runs.{run}");
                let payloads: Vec<Bytes> = events(&run)
                    .iter()
                    .map(|e| Bytes::copy_from_slice(e.line().as_bytes()))
                    .collect();
                let t = Instant::now();
                rt.block_on(async {
                    let mut acks = Vec::with_capacity(payloads.len());
                    for p in payloads {
                        acks.push(context.publish(subject.clone(), p).await.unwrap());
                    }
                    for ack in acks {
                        ack.await.unwrap();
                    }
                });
                total += t.elapsed();
            }
            total
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
