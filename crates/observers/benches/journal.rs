//! SQLite journal throughput versus raw rusqlite inserts of the same rows.
//!
//! `cargo bench -p keel-observers --bench journal -- --warm-up-time 1 --measurement-time 5`
//!
//! Both sides write the same `events` rows (a ~230-byte `model.text_delta`
//! line each) into the same schema (created by the journal) with the same
//! pragmas (WAL, `synchronous=FULL`), each into its own long-lived
//! database, as a daemon would: one open journal, one open raw connection,
//! fresh run ids every iteration. The journal is driven as the pipeline
//! drives it: one tokio task per run (multi-thread runtime, 2 workers),
//! each awaiting the ack of one event before offering the next. Raw is one
//! thread inserting the rows round-robin across runs, `batch` rows per
//! `BEGIN IMMEDIATE … COMMIT`. Raw writes only `events` rows; the journal
//! also keeps `runs.last_seq` current in the same transactions.
//!
//! - `1 run`: the journal commits once per event (a run never has more
//!   than one event outstanding), so the like-for-like baseline is raw
//!   with one transaction per row; raw batched by 512 is shown too.
//! - `8 runs`: the journal groups concurrent runs' events into one
//!   transaction. Baselines: raw batched by the journal's achieved average
//!   batch, and raw batched by 512.
//! - `batch 64`, `batch 256` (one run): the run hands the journal its
//!   events in `observe_batch` calls of that size, awaiting each (what the
//!   pipeline's window does for a run that streams faster than fsync);
//!   the baseline is raw with transactions of the same size, over the
//!   same lines (the same 300 events cut at the same points).
//!
//! Before each criterion group the bench runs `KEEL_BENCH_PAIRED` (default
//! 8) paired rounds, journal then raw at the batch size the journal
//! achieved in that round, and prints median throughputs, the average
//! batch and the median per-round time ratio: fsync latency on a shared
//! machine drifts by 10x from one second to the next, so criterion's
//! consecutive measurements of the two sides can see different disks, and
//! pairing cancels most of that.
//!
//! `KEEL_BENCH_DIR` picks the directory for the database files (default:
//! the system temp dir; a tmpfs such as `/dev/shm` shows the journal's
//! own overhead with free fsyncs).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "support/bench_runs.rs"]
mod bench_runs;

use bench_runs::{EVENTS_PER_RUN, events, offer_all};
use criterion::{Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use keel_observers::{JournalConfig, SqliteJournal};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A database file in its own directory, schema created by the journal.
struct Db(PathBuf);

impl Db {
    fn new() -> Db {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let base = std::env::var_os("KEEL_BENCH_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        let dir = base.join(format!(
            "keel-bench-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("keel.db");
        SqliteJournal::open(&path, JournalConfig::default())
            .unwrap()
            .close()
            .unwrap();
        Db(path)
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        if let Some(dir) = self.0.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// A long-lived journal.
struct JournalSide {
    _db: Db,
    journal: Arc<SqliteJournal>,
    next_run: u64,
    requests: u64,
    transactions: u64,
}

impl JournalSide {
    fn new() -> JournalSide {
        let db = Db::new();
        let journal = Arc::new(SqliteJournal::open(&db.0, JournalConfig::default()).unwrap());
        JournalSide {
            _db: db,
            journal,
            next_run: 0,
            requests: 0,
            transactions: 0,
        }
    }

    /// Writes `runs` fresh runs concurrently, each event on its own
    /// (`batch` 1) or in `observe_batch` calls of `batch` events; returns
    /// the time and the average transaction of this round.
    fn round(
        &mut self,
        rt: &tokio::runtime::Runtime,
        runs: usize,
        batch: usize,
    ) -> (Duration, f64) {
        let events = events(runs, &mut self.next_run);
        let before = self.journal.stats();
        let start = Instant::now();
        offer_all(rt, &self.journal, events, batch);
        let elapsed = start.elapsed();
        let after = self.journal.stats();
        let requests = after.requests - before.requests;
        let transactions = after.transactions - before.transactions;
        self.requests += requests;
        self.transactions += transactions;
        (elapsed, requests as f64 / transactions.max(1) as f64)
    }
}

/// A long-lived raw connection with the journal's pragmas.
struct RawSide {
    _db: Db,
    conn: rusqlite::Connection,
    next_run: u64,
}

impl RawSide {
    fn new() -> RawSide {
        let db = Db::new();
        let conn = rusqlite::Connection::open(&db.0).unwrap();
        let mode: String = conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        conn.pragma_update(None, "synchronous", "FULL").unwrap();
        RawSide {
            _db: db,
            conn,
            next_run: 0,
        }
    }

    /// Inserts `runs` fresh runs' rows, round-robin, `batch` per transaction.
    fn round(&mut self, runs: usize, batch: usize) -> Duration {
        let events = events(runs, &mut self.next_run);
        let mut rows = Vec::with_capacity(runs * EVENTS_PER_RUN as usize);
        for i in 0..EVENTS_PER_RUN as usize {
            for run in &events {
                rows.push(&run[i]);
            }
        }
        let conn = &self.conn;
        let start = Instant::now();
        for chunk in rows.chunks(batch) {
            conn.execute_batch("BEGIN IMMEDIATE").unwrap();
            {
                let mut insert = conn
                    .prepare_cached(
                        "INSERT INTO events (run_id, seq, kind, ts, line) VALUES (?1, ?2, ?3, ?4, ?5)",
                    )
                    .unwrap();
                for e in chunk {
                    insert
                        .execute(rusqlite::params![
                            e.run_id().as_str(),
                            e.seq() as i64,
                            e.kind().name().as_ref(),
                            e.ts() as i64,
                            e.line()
                        ])
                        .unwrap();
                }
            }
            conn.execute_batch("COMMIT").unwrap();
        }
        start.elapsed()
    }
}

/// [`bench_runs::paired`] rounds of `journal` and `raw`.
fn paired(
    rt: &tokio::runtime::Runtime,
    journal: &mut JournalSide,
    raw: &mut RawSide,
    (runs, offered): (usize, usize),
    rounds: usize,
) -> f64 {
    bench_runs::paired(
        (runs, offered),
        rounds,
        "raw",
        |runs, offered| journal.round(rt, runs, offered),
        |runs, same| raw.round(runs, same),
    )
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let rounds: usize = std::env::var("KEEL_BENCH_PAIRED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8);
    for (runs, offered) in [(1usize, 1usize), (8, 1), (1, 64), (1, 256)] {
        let mut journal = JournalSide::new();
        let mut raw = RawSide::new();
        let achieved = if rounds > 0 {
            paired(&rt, &mut journal, &mut raw, (runs, offered), rounds)
        } else {
            journal.round(&rt, runs, offered).1
        };
        let achieved = achieved.round().max(1.0) as usize;
        let name = match (runs, offered) {
            (1, 1) => "journal_1_run".to_owned(),
            (runs, 1) => format!("journal_{runs}_runs"),
            (_, offered) => format!("journal_batch_{offered}"),
        };
        let mut group = c.benchmark_group(name);
        group.sampling_mode(SamplingMode::Flat);
        group.sample_size(10);
        group.throughput(Throughput::Elements(runs as u64 * EVENTS_PER_RUN));
        let (requests0, transactions0) = (journal.requests, journal.transactions);
        group.bench_function("journal", |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| journal.round(&rt, runs, offered).0)
                    .sum()
            })
        });
        let sizes = match (runs, offered) {
            (1, 1) => vec![1, 512],
            (_, 1) => vec![achieved, 512],
            (_, offered) => vec![offered],
        };
        for batch in sizes {
            group.bench_function(format!("raw_batch_{batch}"), |b| {
                b.iter_custom(|iters| (0..iters).map(|_| raw.round(runs, batch)).sum())
            });
        }
        group.finish();
        let (requests, transactions) = (
            journal.requests - requests0,
            journal.transactions - transactions0,
        );
        eprintln!(
            "journal {runs} run(s) offered {offered} at a time, criterion iterations: average batch {:.2} ({requests} events in {transactions} transactions)",
            requests as f64 / transactions.max(1) as f64
        );
        Arc::try_unwrap(journal.journal)
            .ok()
            .unwrap()
            .close()
            .unwrap();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
