//! # One daemon, thousands of runs: the scale figures
//!
//! Measures, in one process and one run (release build; not a test):
//!
//! 1. **Idle live runs**: `--idle` runs (10,000) in one [`Engine`] with a
//!    SQLite journal, each parked in a slow tool (`park`) after its first
//!    model turn; the resident memory per run (RSS from `/proc/self/statm`
//!    before the first start and once every run is parked, divided by the
//!    count) and the **start rate** (runs per second from the first
//!    `Engine::start` to the last run reaching its tool, and the rate of
//!    the `start` calls alone).
//! 2. **Streaming runs in process**: `--streaming` runs (1,000), each
//!    streaming `--deltas` text deltas (200) at once after a gate opens,
//!    each followed by one `Engine::subscribe` subscriber (durable events
//!    only). Aggregate durable events per second (gate open to the last
//!    event delivered) and the delay from the journal's acknowledgement
//!    of an event (its commit) to its delivery to the subscriber, and from
//!    the event's `ts` (its commit to the run's log) to its delivery.
//!    Against it, in the same round: raw rusqlite writing the same
//!    canonical lines in transactions of 64 (one writer, run after run).
//! 3. **Streaming runs over SSE**: the same through `keel_serve`'s server
//!    on a loopback port (`POST /v1/runs`, one SSE client connection per
//!    run); the delay from the event's `ts` to the client's parse.
//!
//! Phases 2 and 3 alternate for `--rounds` rounds (2). `--journal-batch`
//! sets phase 2's journal `max_batch` (events per transaction; 512).
//!
//! ```text
//! cargo run --release -p keel-serve --example scale -- \
//!   [--idle 10000] [--streaming 1000] [--deltas 200] [--pace-us 0] \
//!   [--rounds 2] [--dir DIR] [--no-sse] [--journal-batch 512]
//! ```
//!
//! 1,000 SSE streams take ~2,000 file descriptors (`ulimit -n` ≥ 4096).
//! `--dir` holds the databases (a temporary directory by default).
#![allow(missing_docs)]

mod acks;
mod models;
mod raw;
mod sse;
mod stats;

use acks::{AckTable, TimedJournal};
use keel_engine::{Engine, EngineLimits, RunHandle, RunRequest};
use keel_eventlog::Event;
use keel_message::{Message, MessageId, ModelName, Role, RunId};
use keel_observers::RequiredObserver;
use keel_observers::journal::{JournalConfig, SqliteJournal};
use models::{Arrivals, Gate, GatedDeltas, ParkTool, ParkingModel};
use stats::{Percentiles, rss_bytes, unix_micros};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// The command line.
struct Args {
    idle: usize,
    streaming: usize,
    deltas: usize,
    pace: Duration,
    rounds: usize,
    dir: Option<PathBuf>,
    sse: bool,
    /// The in-process journal's `max_batch` (events per transaction).
    journal_batch: usize,
}

impl Args {
    fn parse(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
        let mut parsed = Args {
            idle: 10_000,
            streaming: 1_000,
            deltas: 200,
            pace: Duration::ZERO,
            rounds: 2,
            dir: None,
            sse: true,
            journal_batch: JournalConfig::default().max_batch,
        };
        while let Some(flag) = args.next() {
            if flag == "--no-sse" {
                parsed.sse = false;
                continue;
            }
            let value = args.next().ok_or(format!("{flag}: a value is required"))?;
            let number = || {
                value
                    .parse::<usize>()
                    .map_err(|e| format!("{flag} {value}: {e}"))
            };
            match flag.as_str() {
                "--idle" => parsed.idle = number()?,
                "--streaming" => parsed.streaming = number()?,
                "--deltas" => parsed.deltas = number()?,
                "--pace-us" => parsed.pace = Duration::from_micros(number()? as u64),
                "--rounds" => parsed.rounds = number()?.max(1),
                "--dir" => parsed.dir = Some(PathBuf::from(value)),
                "--journal-batch" => parsed.journal_batch = number()?.max(1),
                _ => return Err(format!("unknown flag {flag}")),
            }
        }
        Ok(parsed)
    }
}

fn main() -> std::process::ExitCode {
    let args = match Args::parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("scale: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build();
    let outcome = runtime
        .map_err(Error::from)
        .and_then(|rt| rt.block_on(measure(args)));
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("scale: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn measure(args: Args) -> Result<(), Error> {
    let temp = tempfile::tempdir()?;
    let dir = args.dir.clone().unwrap_or_else(|| temp.path().to_owned());
    std::fs::create_dir_all(&dir)?;
    println!(
        "scale: {} cores, load average {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load_average()
    );
    if args.idle > 0 {
        idle_runs(&dir.join("idle.db"), args.idle).await?;
    }
    for round in 1..=args.rounds {
        if args.streaming == 0 {
            break;
        }
        println!("round {round} (load average {})", load_average());
        streaming_in_process(&dir, round, &args).await?;
        if args.sse {
            let db = dir.join(format!("sse-{round}.db"));
            let sse = sse::measure(db, args.streaming, args.deltas, args.pace).await?;
            println!(
                "  sse: {} runs, {} events in {:.2} s: {:.0} durable events/s; ts→SSE delivery {}",
                args.streaming,
                sse.events,
                sse.elapsed.as_secs_f64(),
                sse.events as f64 / sse.elapsed.as_secs_f64(),
                sse.delays
            );
        }
    }
    Ok(())
}

fn load_average() -> String {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn user_message() -> Result<Vec<Message>, Error> {
    Ok(vec![Message::text(
        MessageId::parse("u1")?,
        Role::User,
        "go",
    )?])
}

fn request(run_id: &str, provider: &str) -> Result<RunRequest, Error> {
    Ok(RunRequest::new(
        RunId::parse(run_id)?,
        ModelName::parse("scale")?,
        user_message()?,
    )
    .provider_named(provider))
}

/// Phase 1: `count` runs parked in `park`; memory per run and start rate.
async fn idle_runs(db: &Path, count: usize) -> Result<(), Error> {
    let journal = Arc::new(SqliteJournal::open(db, JournalConfig::default())?);
    let (open, gate) = Gate::closed();
    let parked = Arc::new(Arrivals::default());
    let limits = EngineLimits {
        tool_call_timeout: Duration::from_secs(3600),
        ..EngineLimits::default()
    };
    let engine = Engine::builder()
        .provider("parking", Arc::new(ParkingModel))
        .tool(Arc::new(ParkTool::new(gate, Arc::clone(&parked))))
        .required_observer(Arc::clone(&journal) as Arc<dyn RequiredObserver>)
        .limits(limits)
        .build()?;
    let before = rss_bytes();
    let started = Instant::now();
    let mut runs = Vec::with_capacity(count);
    for i in 0..count {
        runs.push(engine.start(request(&format!("i{i}"), "parking")?)?);
    }
    let calls = started.elapsed();
    parked.reached(count).await;
    let all_parked = started.elapsed();
    let after = rss_bytes();
    let per_run = after.saturating_sub(before) as f64 / count as f64;
    println!(
        "idle: {count} live runs parked in a tool: RSS {:.1} MiB → {:.1} MiB, {:.1} KiB per run \
         ({} live)",
        before as f64 / 1048576.0,
        after as f64 / 1048576.0,
        per_run / 1024.0,
        engine.live_runs()
    );
    println!(
        "start: {count} runs in {:.2} s to the last one parked: {:.0} runs/s \
         (the start calls alone: {:.0}/s)",
        all_parked.as_secs_f64(),
        count as f64 / all_parked.as_secs_f64(),
        count as f64 / calls.as_secs_f64()
    );
    lookups(&engine, count);
    let _ = open.send(true);
    let released = Instant::now();
    let ended = join_all(runs).await;
    println!(
        "release: {ended} of {count} runs completed in {:.2} s",
        released.elapsed().as_secs_f64()
    );
    engine.shutdown(Duration::from_secs(30)).await;
    drop(engine);
    close(journal)?;
    Ok(())
}

/// Closes the journal once the engine let go of it (a handle still held
/// elsewhere closes it on drop).
fn close(journal: Arc<SqliteJournal>) -> Result<(), Error> {
    match Arc::into_inner(journal) {
        Some(journal) => Ok(journal.close()?),
        None => Ok(()),
    }
}

/// Times `Engine::live_run` by id text at `count` live runs: what the
/// daemon asks on every stream, status, admission and listed run.
fn lookups(engine: &Engine, count: usize) {
    let ids: Vec<String> = (0..count)
        .map(|i| format!("i{}", (i * 7919) % count))
        .collect();
    let started = Instant::now();
    let found = ids
        .iter()
        .filter(|id| engine.live_run(id).is_some())
        .count();
    let took = started.elapsed();
    println!(
        "lookup: Engine::live_run at {count} live runs: {:.0} ns each ({found} found)",
        took.as_nanos() as f64 / count as f64
    );
}

/// Joins every run; how many completed.
async fn join_all(runs: Vec<RunHandle>) -> usize {
    let mut completed = 0;
    for run in runs {
        if matches!(run.join().await, keel_engine::RunOutcome::Completed { .. }) {
            completed += 1;
        }
    }
    completed
}

/// The delays one subscriber saw (ns): from acknowledgement, from `ts`.
#[derive(Default)]
struct Seen {
    from_ack: Vec<u64>,
    from_ts: Vec<u64>,
}

/// Follows `run_id` from the start until its end.
async fn subscriber(
    engine: Engine,
    run_id: RunId,
    acks: Arc<AckTable>,
    origin: Instant,
    ready: tokio::sync::mpsc::Sender<()>,
) -> Result<Seen, Error> {
    let mut follower = engine.subscribe(&run_id, 0).await?;
    let _ = ready.send(()).await;
    let mut seen = Seen::default();
    while let Some(event) = follower.next().await {
        let event = event?;
        let (now, wall) = (origin.elapsed().as_nanos() as u64, unix_micros());
        if let Some(at) = acks.acknowledged(&event) {
            seen.from_ack.push(now.saturating_sub(at));
        }
        seen.from_ts.push(wall.saturating_sub(event.ts()) * 1000);
    }
    Ok(seen)
}

/// Phase 2, one round: streaming runs with a subscriber each, then the
/// raw writer on the same lines.
async fn streaming_in_process(dir: &Path, round: usize, args: &Args) -> Result<(), Error> {
    let count = args.streaming;
    let mut config = JournalConfig::default();
    config.max_batch = args.journal_batch;
    let journal = Arc::new(SqliteJournal::open(
        dir.join(format!("stream-{round}.db")),
        config,
    )?);
    let origin = Instant::now();
    let acks = Arc::new(AckTable::new(origin, count, args.deltas + 16));
    let timed = TimedJournal {
        journal: Arc::clone(&journal),
        acks: Arc::clone(&acks),
    };
    let (open, gate) = Gate::closed();
    let model = GatedDeltas {
        deltas: args.deltas,
        pace: args.pace,
        gate,
    };
    let engine = Engine::builder()
        .provider("deltas", Arc::new(model))
        .required_observer(Arc::new(timed) as Arc<dyn RequiredObserver>)
        .build()?;
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel(count);
    let (mut runs, mut followers) = (Vec::with_capacity(count), Vec::with_capacity(count));
    for i in 0..count {
        let run = engine.start(request(&format!("s{i}"), "deltas")?)?;
        let follow = subscriber(
            engine.clone(),
            run.run_id().clone(),
            Arc::clone(&acks),
            origin,
            ready_tx.clone(),
        );
        followers.push(tokio::spawn(follow));
        runs.push(run);
    }
    for _ in 0..count {
        ready_rx.recv().await.ok_or("a subscriber ended early")?;
    }
    let logs: Vec<_> = runs.iter().map(|r| r.log().clone()).collect();
    let started = Instant::now();
    let _ = open.send(true);
    let completed = join_all(runs).await;
    let mut seen = Seen::default();
    for follower in followers {
        let one = follower.await??;
        seen.from_ack.extend(one.from_ack);
        seen.from_ts.extend(one.from_ts);
    }
    let elapsed = started.elapsed();
    let stats = journal.stats();
    engine.shutdown(Duration::from_secs(30)).await;
    drop(engine);
    let delivered = seen.from_ts.len();
    println!(
        "  engine: {count} runs ({completed} completed), {delivered} events in {:.2} s: \
         {:.0} durable events/s, {:.1} events per transaction",
        elapsed.as_secs_f64(),
        delivered as f64 / elapsed.as_secs_f64(),
        stats.stored as f64 / stats.transactions.max(1) as f64,
    );
    println!("    ack→subscriber {}", Percentiles::of(seen.from_ack));
    println!("    ts→subscriber  {}", Percentiles::of(seen.from_ts));
    close(journal)?;
    let lines: Vec<Vec<Arc<Event>>> = logs.iter().map(|log| log.retained_after(0)).collect();
    raw_baseline(dir, round, &lines)
}

fn raw_baseline(dir: &Path, round: usize, runs: &[Vec<Arc<Event>>]) -> Result<(), Error> {
    let mut conn = raw::open(&dir.join(format!("raw-{round}.db")))?;
    let events: usize = runs.iter().map(Vec::len).sum();
    let took = raw::write(&mut conn, runs, 64, "raw_")?;
    println!(
        "  raw rusqlite, transactions of 64: {events} events in {:.2} s: {:.0} events/s",
        took.as_secs_f64(),
        events as f64 / took.as_secs_f64()
    );
    Ok(())
}
