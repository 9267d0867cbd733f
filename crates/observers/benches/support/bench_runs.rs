//! What the journal benches share (`journal.rs` for SQLite, `postgres.rs`
//! for PostgreSQL): the runs they write, how the journal side offers them,
//! and the paired rounds of journal and raw inserts.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use keel_eventlog::Event;
use keel_observers::RequiredObserver;
use std::sync::Arc;
use std::time::Duration;

/// Events in each run a round writes.
pub const EVENTS_PER_RUN: u64 = 300;

/// `runs` fresh runs of `EVENTS_PER_RUN` text deltas each.
pub fn events(runs: usize, next_run: &mut u64) -> Vec<Vec<Arc<Event>>> {
    (0..runs)
        .map(|_| {
            let r = *next_run;
            *next_run += 1;
            (1..=EVENTS_PER_RUN)
                .map(|seq| {
                    let line = format!(
                        r#"{{"kind":"model.text_delta","payload":{{"operation_id":"op_{r}_1","text":"token {seq} of a streamed answer, long enough to look like a typical delta from a model","turn":1}},"run_id":"run_bench_{r}","seq":{seq},"ts":{}}}"#,
                        1_767_225_600_000_000 + seq
                    );
                    Arc::new(Event::decode(&line).unwrap())
                })
                .collect()
        })
        .collect()
}

/// Offers `runs` to `journal` concurrently as the pipeline does, one
/// tokio task per run: each event on its own (`batch` 1) or in
/// `observe_batch` calls of `batch`, awaiting each before the next.
pub fn offer_all<J: RequiredObserver + Send + Sync + 'static>(
    rt: &tokio::runtime::Runtime,
    journal: &Arc<J>,
    runs: Vec<Vec<Arc<Event>>>,
    batch: usize,
) {
    rt.block_on(async {
        let tasks: Vec<_> = runs
            .into_iter()
            .map(|run| {
                let journal = Arc::clone(journal);
                tokio::spawn(async move {
                    if batch == 1 {
                        for event in &run {
                            journal.observe(event).await.unwrap();
                        }
                    } else {
                        for chunk in run.chunks(batch) {
                            journal.observe_batch(chunk).await.unwrap();
                        }
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
    });
}

/// The median of `v`.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Alternates journal and raw rounds so that both see the same machine;
/// raw (named `raw_name` in the line printed) uses the batch the journal
/// achieved in the same round, or the batch offered: raw then cuts the
/// same lines at the same points. Prints the medians and returns the mean
/// achieved batch. `offered` is the size of the journal's `observe_batch`
/// calls (1: one `observe` per event). `journal` is a round's time and
/// average batch; `raw` a round's time.
pub fn paired(
    (runs, offered): (usize, usize),
    rounds: usize,
    raw_name: &str,
    mut journal: impl FnMut(usize, usize) -> (Duration, f64),
    mut raw: impl FnMut(usize, usize) -> Duration,
) -> f64 {
    let n = (runs as u64 * EVENTS_PER_RUN) as f64;
    let (mut j_rate, mut r_rate, mut ratio, mut batches) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        let (j, batch) = journal(runs, offered);
        let same = if offered > 1 {
            offered
        } else {
            batch.round().max(1.0) as usize
        };
        let r = raw(runs, same);
        j_rate.push(n / j.as_secs_f64());
        r_rate.push(n / r.as_secs_f64());
        ratio.push(j.as_secs_f64() / r.as_secs_f64());
        batches.push(batch);
    }
    let mean_batch = batches.iter().sum::<f64>() / batches.len().max(1) as f64;
    eprintln!(
        "paired x{rounds}, {runs} run(s), offered {offered} at a time: journal {:.0} events/s (average batch {mean_batch:.2}), {raw_name} at the same batch {:.0} events/s; journal/raw time ratio, median of rounds: {:.2}",
        median(j_rate),
        median(r_rate),
        median(ratio)
    );
    mean_batch
}
