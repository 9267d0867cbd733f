//! What one page of the run list costs as the store grows: a page of 50
//! (the first, one from the middle, and one under a `status` filter) read
//! with `JournalReader::runs_page` (the indexed query) against the old path
//! (every run's summary and totals read, then filtered in memory), at
//! 1,000, 10,000 and 100,000 stored runs, in the same process.
//!
//! `cargo run --release -p keel-observers --features sqlite --example list_page_cost`
//! (`-- 1000 10000` for other sizes).

use keel_observers::{
    JournalConfig, JournalReader, RunStatus, RunsCursor, RunsQuery, SqliteJournal,
};
use std::time::{Duration, Instant};

const PAGE: usize = 50;
const REPEATS: usize = 31;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let sizes: Vec<usize> = match std::env::args()
        .skip(1)
        .map(|a| a.parse::<usize>())
        .collect::<Result<Vec<usize>, _>>()
    {
        Ok(v) if !v.is_empty() => v,
        _ => vec![1_000, 10_000, 100_000],
    };
    let dir = std::env::temp_dir().join(format!("keel-list-page-cost-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    println!(
        "stored runs | page (first) | page (middle) | page (status=failed) | old path (read all) | old / page"
    );
    for n in sizes {
        let path = dir.join(format!("keel-{n}.db"));
        fill(&path, n)?;
        let reader = JournalReader::open(&path)?;
        let middle = RunsCursor {
            started_ts: 1_000 + (n as u64 / 2),
            run_id: format!("run_{:07}", n / 2),
        };
        let first = median(|| reader.runs_page(&RunsQuery::first(PAGE)).map(|_| ()))?;
        let mid = median(|| {
            let q = RunsQuery {
                after: Some(middle.clone()),
                ..RunsQuery::first(PAGE)
            };
            reader.runs_page(&q).map(|_| ())
        })?;
        let failed = median(|| {
            let q = RunsQuery {
                status: Some(RunStatus::Failed),
                after: Some(middle.clone()),
                ..RunsQuery::first(PAGE)
            };
            reader.runs_page(&q).map(|_| ())
        })?;
        let old = median(|| {
            // What `GET /v1/runs` did before: every summary and every
            // total, then the page after the cursor.
            let all = reader.runs()?;
            let totals = reader.totals()?;
            let page: Vec<_> = all
                .iter()
                .filter(|s| {
                    (s.started_ts, s.run_id.as_str()) > (middle.started_ts, middle.run_id.as_str())
                })
                .take(PAGE)
                .map(|s| totals.get(s.run_id.as_str()).copied())
                .collect();
            std::hint::black_box(page);
            Ok(())
        })?;
        println!(
            "{n:>11} | {:>12?} | {:>13?} | {:>20?} | {:>19?} | {:>9.0}x",
            first,
            mid,
            failed,
            old,
            old.as_secs_f64() / mid.as_secs_f64()
        );
        drop(reader);
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// A journal (created by the writer, so at the current schema with its
/// indexes) holding `n` runs' rows, a quarter of them failed.
fn fill(path: &std::path::Path, n: usize) -> Result<(), Box<dyn std::error::Error>> {
    let _ = std::fs::remove_file(path);
    SqliteJournal::open(path, JournalConfig::default())?.close()?;
    let mut conn = rusqlite::Connection::open(path)?;
    let tx = conn.transaction()?;
    {
        let mut insert = tx.prepare(
            "INSERT INTO runs (run_id, last_seq, status, started_ts, updated_ts, turns, \
             input_tokens, output_tokens, conversation) VALUES (?1, 4, ?2, ?3, ?3, 1, 10, 5, ?1)",
        )?;
        for i in 0..n {
            let status = if i % 4 == 3 { "failed" } else { "completed" };
            insert.execute(rusqlite::params![
                format!("run_{i:07}"),
                status,
                1_000 + i as i64
            ])?;
        }
    }
    tx.commit()?;
    Ok(())
}

/// The median of [`REPEATS`] timed calls of `f`.
fn median(
    mut f: impl FnMut() -> Result<(), keel_observers::JournalError>,
) -> Result<Duration, keel_observers::JournalError> {
    let mut times = Vec::with_capacity(REPEATS);
    for _ in 0..REPEATS {
        let start = Instant::now();
        f()?;
        times.push(start.elapsed());
    }
    times.sort();
    Ok(times[REPEATS / 2])
}
