//! PostgreSQL journal throughput versus raw `tokio-postgres` batched
//! inserts of the same rows, on one throwaway server the bench starts
//! (`keel_testkit::pg::TempPostgres`: the distribution's binaries, default
//! settings, `fsync` and `synchronous_commit` on).
//!
//! `cargo bench -p keel-observers --features postgres --bench postgres -- --warm-up-time 1 --measurement-time 5`
//!
//! Both sides write the same `events` rows (a ~230-byte `model.text_delta`
//! line each) into the same schema (created by the journal), each into its
//! own database on the same server, over one long-lived connection, with
//! fresh run ids every iteration. The journal is driven as the pipeline
//! drives it: one tokio task per run (multi-thread runtime, 2 workers),
//! each awaiting the ack of one event (or one `observe_batch` call) before
//! offering the next. Raw is one task inserting the rows round-robin across
//! runs with one multi-row `INSERT … SELECT FROM unnest(…)` per
//! transaction of `batch` rows. Raw writes only `events` rows; the journal
//! also reads its runs' rows `FOR UPDATE`, checks each event and keeps
//! `runs` and `owners` current in the same transactions.
//!
//! - `1 run`: one commit per event (a run never has more than one event
//!   outstanding); baselines raw by 1 and by 64.
//! - `16 runs`: the journal groups concurrent runs' events; baselines raw
//!   at the journal's achieved average batch, and by 64.
//! - `batch 64` (1 and 16 runs): `observe_batch` calls of 64; baseline
//!   raw by 64.
//!
//! Before each group the bench runs `KEEL_BENCH_PAIRED` (default 6) paired
//! rounds (journal, then raw at the batch the journal achieved) and prints
//! median throughputs and the median per-round time ratio.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "support/bench_runs.rs"]
mod bench_runs;

use bench_runs::{EVENTS_PER_RUN, events, offer_all};
use criterion::{Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use keel_observers::JournalConfig;
use keel_observers::postgres::{PgJournal, PgUrl};
use keel_testkit::pg::TempPostgres;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A long-lived journal.
struct JournalSide {
    journal: Arc<PgJournal>,
    next_run: u64,
    requests: u64,
    transactions: u64,
}

impl JournalSide {
    fn new(url: &PgUrl) -> JournalSide {
        JournalSide {
            journal: Arc::new(PgJournal::open(url, JournalConfig::default()).unwrap()),
            next_run: 0,
            requests: 0,
            transactions: 0,
        }
    }

    /// Writes `runs` fresh runs concurrently, one event at a time (with a
    /// `batch` of one) or in `observe_batch` calls of `batch`; returns the
    /// time and the average transaction of this round.
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

/// A long-lived raw `tokio-postgres` connection.
struct RawSide {
    client: tokio_postgres::Client,
    next_run: u64,
}

const RAW_INSERT: &str = "INSERT INTO events (run_id, seq, kind, ts, line) \
     SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::bigint[], $5::text[])";

impl RawSide {
    fn new(rt: &tokio::runtime::Runtime, url: &str) -> RawSide {
        let client = rt.block_on(async {
            let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(connection);
            client
        });
        RawSide {
            client,
            next_run: 0,
        }
    }

    /// Inserts `runs` fresh runs' rows, round-robin, `batch` per transaction.
    fn round(&mut self, rt: &tokio::runtime::Runtime, runs: usize, batch: usize) -> Duration {
        let events = events(runs, &mut self.next_run);
        let mut rows = Vec::with_capacity(runs * EVENTS_PER_RUN as usize);
        for i in 0..EVENTS_PER_RUN as usize {
            for run in &events {
                rows.push(&run[i]);
            }
        }
        let client = &mut self.client;
        let start = Instant::now();
        rt.block_on(async {
            let insert = client.prepare(RAW_INSERT).await.unwrap();
            for chunk in rows.chunks(batch) {
                let run: Vec<&str> = chunk.iter().map(|e| e.run_id().as_str()).collect();
                let seq: Vec<i64> = chunk.iter().map(|e| e.seq() as i64).collect();
                let kind: Vec<String> =
                    chunk.iter().map(|e| e.kind().name().into_owned()).collect();
                let ts: Vec<i64> = chunk.iter().map(|e| e.ts() as i64).collect();
                let line: Vec<&str> = chunk.iter().map(|e| e.line()).collect();
                let tx = client.transaction().await.unwrap();
                tx.execute(&insert, &[&run, &seq, &kind, &ts, &line])
                    .await
                    .unwrap();
                tx.commit().await.unwrap();
            }
        });
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
        "raw tokio-postgres",
        |runs, offered| journal.round(rt, runs, offered),
        |runs, same| raw.round(rt, runs, same),
    )
}

fn bench(c: &mut Criterion) {
    let Some(pg) = TempPostgres::start() else {
        return;
    };
    let journal_url = PgUrl::parse(&pg.create_database("bench_journal")).unwrap();
    let raw_url = pg.create_database("bench_raw");
    // The raw side writes into the journal's schema.
    PgJournal::open(&PgUrl::parse(&raw_url).unwrap(), JournalConfig::default())
        .unwrap()
        .close()
        .unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let rounds: usize = std::env::var("KEEL_BENCH_PAIRED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6);
    let mut raw = RawSide::new(&rt, &raw_url);
    for (runs, offered) in [(1usize, 1usize), (16, 1), (1, 64), (16, 64)] {
        let mut journal = JournalSide::new(&journal_url);
        let achieved = if rounds > 0 {
            paired(&rt, &mut journal, &mut raw, (runs, offered), rounds)
        } else {
            journal.round(&rt, runs, offered).1
        };
        let achieved = achieved.round().max(1.0) as usize;
        let name = match (runs, offered) {
            (1, 1) => "pg_journal_1_run".to_owned(),
            (runs, 1) => format!("pg_journal_{runs}_runs"),
            (runs, offered) => format!("pg_journal_{runs}_runs_batch_{offered}"),
        };
        let mut group = c.benchmark_group(name);
        group.sampling_mode(SamplingMode::Flat);
        group.sample_size(10);
        group.throughput(Throughput::Elements(runs as u64 * EVENTS_PER_RUN));
        group.bench_function("journal", |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| journal.round(&rt, runs, offered).0)
                    .sum()
            })
        });
        let sizes = match (runs, offered) {
            (1, 1) => vec![1, 64],
            (_, 1) => vec![achieved, 64],
            (_, offered) => vec![offered],
        };
        for batch in sizes {
            group.bench_function(format!("raw_batch_{batch}"), |b| {
                b.iter_custom(|iters| (0..iters).map(|_| raw.round(&rt, runs, batch)).sum())
            });
        }
        group.finish();
        eprintln!(
            "pg journal {runs} run(s) offered {offered} at a time: average batch {:.2} ({} events in {} transactions)",
            journal.requests as f64 / journal.transactions.max(1) as f64,
            journal.requests,
            journal.transactions
        );
        let journal = Arc::try_unwrap(journal.journal).ok().unwrap();
        journal.close().unwrap();
    }
    drop(raw);
    drop(rt);
    drop(pg);
}

criterion_group!(benches, bench);
criterion_main!(benches);
