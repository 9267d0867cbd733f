//! Single-run durable throughput: one run of 2,000 text deltas through the
//! engine with the SQLite journal as its required observer
//! (`synchronous=FULL`), against raw rusqlite inserting the same lines in
//! transactions of the same size, on the same disk, in the same process.
//!
//! The journal's transaction size is what group commit within the run
//! achieved (events stored / transactions, read from the journal's
//! stats); the raw side uses that size, rounded, and also the window's
//! bound. Before the criterion groups, `KEEL_BENCH_PAIRED` (default 8)
//! alternating rounds print the median of each side and the median ratio:
//! fsync latency on a shared machine drifts, and pairing cancels most of
//! that. `KEEL_BENCH_DIR` picks the directory for the database files.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use criterion::{Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use keel_engine::*;
use keel_message::*;
use keel_observers::journal::{JournalConfig, SqliteJournal};
use keel_observers::{PipelineConfig, RequiredObserver};
#[path = "common/deltas.rs"]
mod deltas;
use deltas::Deltas;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const DELTAS: usize = 2000;
const WINDOW: usize = 64;

fn db_path(name: &str) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let base = std::env::var_os("KEEL_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let dir = base.join(format!(
        "keel-durable-bench-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// One event row as the journal stores it.
struct Row {
    seq: i64,
    kind: String,
    ts: i64,
    line: String,
}

struct EngineSide {
    engine: Engine,
    journal: Arc<SqliteJournal>,
    next: AtomicU64,
}

impl EngineSide {
    fn new(rt: &tokio::runtime::Runtime) -> EngineSide {
        let journal = rt.block_on(async {
            Arc::new(SqliteJournal::open(db_path("engine.db"), JournalConfig::default()).unwrap())
        });
        let engine = Engine::builder()
            .provider("deltas", Arc::new(Deltas(DELTAS)))
            .required_observer(journal.clone() as Arc<dyn RequiredObserver>)
            .pipeline_config(PipelineConfig {
                window_events: WINDOW,
                ..PipelineConfig::default()
            })
            .build()
            .unwrap();
        EngineSide {
            engine,
            journal,
            next: AtomicU64::new(0),
        }
    }

    /// One whole run; its time, its rows, and the transactions it took.
    fn round(&self, rt: &tokio::runtime::Runtime) -> (Duration, Vec<Row>, u64) {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let request = RunRequest::new(
            RunId::parse(&format!("run_{n}")).unwrap(),
            ModelName::parse("bench").unwrap(),
            vec![Message::text(MessageId::parse("m1").unwrap(), Role::User, "go").unwrap()],
        )
        .provider_named("deltas");
        let before = self.journal.stats().transactions;
        let started = Instant::now();
        let events = rt.block_on(async {
            let run = self.engine.start(request).unwrap();
            let log = run.log().clone();
            assert!(matches!(run.join().await, RunOutcome::Completed { .. }));
            log.retained_after(0)
        });
        let took = started.elapsed();
        let transactions = self.journal.stats().transactions - before;
        let rows = events
            .iter()
            .map(|e| Row {
                seq: e.seq() as i64,
                kind: e.kind().to_string(),
                ts: e.ts() as i64,
                line: e.line().to_owned(),
            })
            .collect();
        (took, rows, transactions)
    }
}

/// Raw rusqlite on a database with the journal's schema and pragmas.
struct RawSide {
    conn: rusqlite::Connection,
    next: u64,
}

impl RawSide {
    fn new(rt: &tokio::runtime::Runtime) -> RawSide {
        let path = db_path("raw.db");
        // The journal creates the schema; then it is closed and raw takes over.
        rt.block_on(async { drop(SqliteJournal::open(&path, JournalConfig::default()).unwrap()) });
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
        conn.pragma_update(None, "synchronous", "FULL").unwrap();
        RawSide { conn, next: 0 }
    }

    /// Inserts `rows` in transactions of `batch`, each committed (fsync).
    fn round(&mut self, rows: &[Row], batch: usize) -> Duration {
        self.next += 1;
        let run = format!("raw_{}", self.next);
        let started = Instant::now();
        for chunk in rows.chunks(batch.max(1)) {
            let tx = self.conn.transaction().unwrap();
            {
                let mut insert = tx
                    .prepare_cached(
                        "INSERT INTO events (run_id, seq, kind, ts, line) VALUES (?1, ?2, ?3, ?4, ?5)",
                    )
                    .unwrap();
                for r in chunk {
                    insert
                        .execute(rusqlite::params![run, r.seq, r.kind, r.ts, r.line])
                        .unwrap();
                }
            }
            tx.commit().unwrap();
        }
        started.elapsed()
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// Alternating rounds; returns the batch size the engine achieved.
fn paired(rt: &tokio::runtime::Runtime, engine: &EngineSide, raw: &mut RawSide) -> usize {
    let rounds: usize = std::env::var("KEEL_BENCH_PAIRED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8);
    let (mut e_rate, mut r_rate, mut ratio, mut batches) = (vec![], vec![], vec![], vec![]);
    for _ in 0..rounds.max(1) {
        let (took, rows, transactions) = engine.round(rt);
        let batch = rows.len() as f64 / transactions.max(1) as f64;
        let raw_took = raw.round(&rows, batch.round().max(1.0) as usize);
        e_rate.push(rows.len() as f64 / took.as_secs_f64());
        r_rate.push(rows.len() as f64 / raw_took.as_secs_f64());
        ratio.push(took.as_secs_f64() / raw_took.as_secs_f64());
        batches.push(batch);
    }
    let batch = median(batches);
    println!(
        "paired x{rounds}: engine+journal {:.0} events/s, raw rusqlite (txn {:.1}) {:.0} events/s, \
         ratio {:.2}x (median per round)",
        median(e_rate),
        batch,
        median(r_rate),
        median(ratio)
    );
    batch.round().max(1.0) as usize
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let engine = EngineSide::new(&rt);
    let mut raw = RawSide::new(&rt);
    let achieved = paired(&rt, &engine, &mut raw);
    let (_, rows, _) = engine.round(&rt);
    let mut group = c.benchmark_group("durable_single_run");
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(10);
    group.throughput(Throughput::Elements(rows.len() as u64));
    group.bench_function(format!("engine_sqlite_full_window_{WINDOW}"), |b| {
        b.iter_custom(|iters| (0..iters).map(|_| engine.round(&rt).0).sum())
    });
    for batch in [achieved, WINDOW] {
        group.bench_function(format!("raw_rusqlite_txn_{batch}"), |b| {
            b.iter_custom(|iters| (0..iters).map(|_| raw.round(&rows, batch)).sum())
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
