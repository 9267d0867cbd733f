//! A 1 MiB image through the log append, a subscription read and the
//! journal copy, against a plain `Vec<u8>` clone of the same bytes.
//!
//! Two measurements:
//!
//! - **Heap counts** (printed first): the image is a `tool.completed`
//!   image of a 1 MiB PNG; each stage runs once under dhat's heap counter
//!   (the bench's global allocator) and prints the blocks and bytes it
//!   allocated, as a multiple of the image. The log's line holds the image
//!   as base64 (4/3 of its size): one allocation of the line is the one
//!   copy. The subscription hands out the committed event itself (an
//!   `Arc`), and the journal binds the line as it is. SQLite's own copy of
//!   a bound text (into its page cache and the WAL) is made with SQLite's
//!   allocator, which a Rust allocator does not see.
//! - **Times** (criterion): the same stages against `Vec<u8>::clone` of
//!   the image's bytes. The journal runs with `synchronous=NORMAL`, so
//!   its time is the copy into SQLite and not an fsync.
//!
//! `KEEL_BENCH_DIR` picks the directory for the journal files.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use keel_eventlog::*;
use keel_message::*;
use keel_observers::RequiredObserver;
use keel_observers::journal::{JournalConfig, SqliteJournal, Synchronous};
use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

const IMAGE_BYTES: usize = 1 << 20;

/// A 1 MiB PNG: the signature, then bytes that do not repeat simply.
fn image_bytes() -> Vec<u8> {
    let mut bytes = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut x: u32 = 0x9E37_79B9;
    while bytes.len() < IMAGE_BYTES {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        bytes.push(x as u8);
    }
    bytes
}

fn image(bytes: &[u8]) -> ImagePart {
    ImagePart::from_bytes_with(ImageMediaType::Png, bytes, &Limits::default()).unwrap()
}

static NEXT_RUN: AtomicU64 = AtomicU64::new(0);

/// A fresh log with a tool call open: `run.started`, `turn.started`,
/// `tool.started`.
fn open_log() -> RunLog {
    let n = NEXT_RUN.fetch_add(1, Ordering::Relaxed);
    let log = RunLog::new(
        RunId::parse(&format!("run_{n}")).unwrap(),
        LogConfig::default(),
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
    log.commit(&Payload::ToolStarted(ToolRef {
        turn: 1,
        call_id: CallId::parse("c1").unwrap(),
        tool: ToolName::parse("camera").unwrap(),
        extra: Extra::new(),
    }))
    .unwrap();
    log
}

/// The `tool.completed` carrying `image` (shared, not copied).
fn completed(image: &ImagePart) -> Payload {
    Payload::ToolCompleted(ToolCompleted {
        turn: 1,
        call_id: CallId::parse("c1").unwrap(),
        tool: ToolName::parse("camera").unwrap(),
        output: "a picture".into(),
        images: vec![image.clone()],
        extra: Extra::new(),
    })
}

fn journal(rt: &tokio::runtime::Runtime) -> Arc<SqliteJournal> {
    let base = std::env::var_os("KEEL_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let dir = base.join(format!("keel-media-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut config = JournalConfig::default();
    config.synchronous = Synchronous::Normal;
    let path = dir.join("journal.db");
    let _ = std::fs::remove_file(&path);
    rt.block_on(async { Arc::new(SqliteJournal::open(path, config).unwrap()) })
}

/// A log with the image's event committed, the events before it already
/// journaled: the image's event, ready for the journal.
fn journaled_up_to_image(
    rt: &tokio::runtime::Runtime,
    journal: &SqliteJournal,
    image: &ImagePart,
) -> Arc<Event> {
    let log = open_log();
    rt.block_on(async {
        for event in log.retained_after(0) {
            journal.observe(&event).await.unwrap();
        }
    });
    log.commit(&completed(image)).unwrap()
}

/// What one stage allocated.
struct Heap {
    blocks: u64,
    bytes: u64,
}

fn counted<T>(f: impl FnOnce() -> T) -> (T, Heap) {
    let before = dhat::HeapStats::get();
    let out = f();
    let after = dhat::HeapStats::get();
    let heap = Heap {
        blocks: after.total_blocks - before.total_blocks,
        bytes: after.total_bytes - before.total_bytes,
    };
    (out, heap)
}

fn report(stage: &str, heap: &Heap) {
    println!(
        "media/{stage}: {} allocations, {} bytes ({:.2} x the image)",
        heap.blocks,
        heap.bytes,
        heap.bytes as f64 / IMAGE_BYTES as f64
    );
}

/// Counts each stage once, under dhat (slow: it records every allocation,
/// so it runs before the timed groups, which run without it).
fn heap_counts(rt: &tokio::runtime::Runtime, bytes: &[u8], image: &ImagePart) {
    let journal = journal(rt);
    let log = open_log();
    let mut subscription = log.subscribe(3, SubscriptionBounds::default()).unwrap();
    let payload = completed(image);
    let profiler = dhat::Profiler::builder().testing().build();
    let (copy, heap) = counted(|| bytes.to_vec());
    report("vec_clone", &heap);
    drop(copy);
    let (event, heap) = counted(|| log.commit(&payload).unwrap());
    report("log_append", &heap);
    let (read, heap) = counted(|| subscription.try_recv().unwrap());
    report("subscription_read", &heap);
    assert!(
        Arc::ptr_eq(&read, &event),
        "the subscription shares the event"
    );
    rt.block_on(async {
        for early in log.retained_after(0).iter().take(3) {
            journal.observe(early).await.unwrap();
        }
    });
    let ((), heap) = counted(|| rt.block_on(journal.observe(&event)).unwrap());
    report("journal_copy", &heap);
    drop(profiler);
    println!(
        "media/line: {} bytes ({:.2} x the image: base64 and the envelope)",
        event.line().len(),
        event.line().len() as f64 / IMAGE_BYTES as f64
    );
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let bytes = image_bytes();
    let image = image(&bytes);
    heap_counts(&rt, &bytes, &image);

    let mut group = c.benchmark_group("media_1mib");
    group.throughput(Throughput::Bytes(IMAGE_BYTES as u64));
    group.sample_size(30);
    group.bench_function("vec_clone", |b| b.iter(|| black_box(bytes.to_vec())));
    group.bench_function("log_append", |b| {
        b.iter_batched(
            || (open_log(), completed(&image)),
            |(log, payload)| black_box(log.commit(&payload).unwrap()),
            BatchSize::PerIteration,
        )
    });
    group.bench_function("subscription_read", |b| {
        b.iter_batched(
            || {
                let log = open_log();
                let subscription = log.subscribe(3, SubscriptionBounds::default()).unwrap();
                log.commit(&completed(&image)).unwrap();
                (log, subscription)
            },
            |(log, mut subscription)| {
                let event = subscription.try_recv().unwrap();
                black_box(event.line().len());
                (log, subscription)
            },
            BatchSize::PerIteration,
        )
    });
    let journal = journal(&rt);
    group.bench_function("journal_copy", |b| {
        b.iter_batched(
            || journaled_up_to_image(&rt, &journal, &image),
            |event| rt.block_on(journal.observe(&event)).unwrap(),
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
