//! Engine overhead per text delta: a whole run of N deltas through the
//! engine (validate, commit, dispatch), against consuming the same raw
//! provider stream directly. With no observers, and with the SQLite journal.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use futures_util::StreamExt;
use keel_engine::*;
use keel_message::*;
#[path = "common/deltas.rs"]
mod deltas;
use deltas::Deltas;
use keel_stream::{ModelProvider, RawItem};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

const DELTAS: usize = 1000;

fn request(n: u64) -> RunRequest {
    RunRequest::new(
        RunId::parse(&format!("run_{n}")).unwrap(),
        ModelName::parse("bench").unwrap(),
        vec![Message::text(MessageId::parse("m1").unwrap(), Role::User, "go").unwrap()],
    )
    .provider_named("deltas")
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("engine_per_delta");
    group.throughput(Throughput::Elements(DELTAS as u64));
    group.sample_size(30);

    group.bench_function(BenchmarkId::new("raw_provider_stream", DELTAS), |b| {
        let provider = Deltas(DELTAS);
        b.iter(|| {
            rt.block_on(async {
                let req = ModelRequest::new(
                    OperationIdIssuer::new().issue(),
                    ModelName::parse("bench").unwrap(),
                    request(0).history().to_vec().into(),
                    Arc::from([]),
                )
                .unwrap();
                let mut stream = provider.start(req).await.unwrap();
                let mut n = 0usize;
                while let Some(item) = stream.next().await {
                    if let RawItem::TextDelta(t) = item {
                        n += t.len();
                    }
                }
                n
            })
        })
    });

    let engine = Engine::builder()
        .provider("deltas", Arc::new(Deltas(DELTAS)))
        .build()
        .unwrap();
    let counter = AtomicU64::new(0);
    group.bench_function(BenchmarkId::new("engine_no_observers", DELTAS), |b| {
        b.iter(|| {
            rt.block_on(async {
                let run = engine
                    .start(request(counter.fetch_add(1, Ordering::Relaxed)))
                    .unwrap();
                assert!(matches!(run.join().await, RunOutcome::Completed { .. }));
            })
        })
    });
    group.finish();

    // With the SQLite journal as a required observer (synchronous=FULL, the
    // default): every event is durable before the next is committed.
    let mut group = c.benchmark_group("engine_per_delta_journaled");
    group.throughput(Throughput::Elements(DELTAS as u64));
    group.sample_size(10);
    let dir = std::env::temp_dir().join(format!("keel-engine-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let journal = rt.block_on(async {
        keel_observers::journal::SqliteJournal::open(
            dir.join("bench.db"),
            keel_observers::journal::JournalConfig::default(),
        )
        .unwrap()
    });
    let engine = Engine::builder()
        .provider("deltas", Arc::new(Deltas(DELTAS)))
        .required_observer(Arc::new(journal))
        .build()
        .unwrap();
    group.bench_function(BenchmarkId::new("engine_sqlite_full", DELTAS), |b| {
        b.iter(|| {
            rt.block_on(async {
                let run = engine
                    .start(request(counter.fetch_add(1, Ordering::Relaxed)))
                    .unwrap();
                assert!(matches!(run.join().await, RunOutcome::Completed { .. }));
            })
        })
    });
    group.finish();
    drop(engine);
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, bench);
criterion_main!(benches);
