//! `keel run` as a whole process against a hand-written SQLite writer
//! (issue #20's acceptance criterion: within 2×).
//!
//! Run: `cargo bench -p keel-cli --bench run_process`. The bench writes a
//! scripted scenario of 20,000 text deltas, runs `keel run` once with
//! `--json` to get its canonical lines (20,007), and builds the example
//! `sqlite_writer` (`examples/sqlite_writer.rs`, with the bench's own
//! profile, so nothing else is rebuilt). Then both are timed as spawned
//! processes, each on a new database in a new directory:
//!
//! - `keel run SCENARIO --db DIR/keel.db` (transcript to /dev/null): the
//!   engine with the SQLite journal at `synchronous=FULL` as its required
//!   observer;
//! - `sqlite_writer DIR/keel.db LINES 64`: the same lines into the same
//!   tables, 64 per transaction, WAL, `synchronous=FULL`.
//!
//! Before the criterion group the bench runs `KEEL_BENCH_PAIRED` (default
//! 8) interleaved rounds, keel then writer, and prints both medians and
//! the median per-round time ratio: fsync latency on a shared machine
//! drifts from one second to the next, and pairing cancels most of it.
//! `KEEL_BENCH_DIR` picks where the databases go (default: the system
//! temp dir).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use criterion::{Criterion, SamplingMode, criterion_group, criterion_main};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const DELTAS: usize = 20_000;
const BATCH: usize = 64;

fn base_dir() -> PathBuf {
    std::env::var_os("KEEL_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
        .join(format!("keel-run-process-{}", std::process::id()))
}

/// A new directory for one process's database.
fn fresh_dir(base: &Path) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = base.join(format!("db-{}", NEXT.fetch_add(1, Ordering::Relaxed)));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A scripted run of `DELTAS` text deltas in one model call.
fn scenario_text() -> String {
    let mut items: Vec<String> = (0..DELTAS)
        .map(|i| format!(r#"{{"text": "token {i} "}}"#))
        .collect();
    items.push(r#"{"complete": {"finish": "stop"}}"#.to_owned());
    format!(
        r#"{{"model": "bench", "messages": [{{"role": "user", "text": "go"}}],
            "provider": {{"type": "scripted", "calls": [[{}]]}}}}"#,
        items.join(",")
    )
}

/// Builds the `sqlite_writer` example with this bench's profile and
/// returns its path (beside this bench's `deps` directory).
fn writer_binary() -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let status = Command::new(cargo)
        .args([
            "build",
            "--quiet",
            "--profile",
            "bench",
            "-p",
            "keel-cli",
            "--example",
            "sqlite_writer",
        ])
        .status()
        .unwrap();
    assert!(status.success(), "building the sqlite_writer example");
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(Path::parent).unwrap();
    let path = profile_dir.join("examples").join("sqlite_writer");
    assert!(path.exists(), "no {}", path.display());
    path
}

struct Sides {
    base: PathBuf,
    scenario: PathBuf,
    lines: PathBuf,
    writer: PathBuf,
}

impl Sides {
    fn new() -> Sides {
        let base = base_dir();
        std::fs::create_dir_all(&base).unwrap();
        let scenario = base.join("scenario.json");
        std::fs::write(&scenario, scenario_text()).unwrap();
        let lines = base.join("lines.jsonl");
        let dir = fresh_dir(&base);
        let out = Command::new(env!("CARGO_BIN_EXE_keel"))
            .arg("run")
            .arg(&scenario)
            .arg("--db")
            .arg(dir.join("keel.db"))
            .arg("--json")
            .env_remove("KEEL_DB")
            .stderr(Stdio::inherit())
            .output()
            .unwrap();
        assert!(out.status.success(), "keel run --json");
        std::fs::write(&lines, &out.stdout).unwrap();
        let n = out.stdout.iter().filter(|b| **b == b'\n').count();
        assert_eq!(n, DELTAS + 7, "events of the run");
        std::fs::remove_dir_all(&dir).unwrap();
        Sides {
            base,
            scenario,
            lines,
            writer: writer_binary(),
        }
    }

    /// `keel run` on a new database: the whole process.
    fn keel(&self) -> Duration {
        timed("keel run", &self.base, |db| {
            let mut command = Command::new(env!("CARGO_BIN_EXE_keel"));
            command
                .arg("run")
                .arg(&self.scenario)
                .arg("--db")
                .arg(db)
                .env_remove("KEEL_DB")
                .env("NO_COLOR", "1");
            command
        })
    }

    /// The hand-written writer on a new database: the whole process.
    fn writer(&self) -> Duration {
        timed("sqlite_writer", &self.base, |db| {
            let mut command = Command::new(&self.writer);
            command.arg(db).arg(&self.lines).arg(BATCH.to_string());
            command
        })
    }
}

/// Runs the process `build` makes for a database in a new directory,
/// timed from spawn to exit; the directory is removed afterwards.
fn timed(what: &str, base: &Path, build: impl FnOnce(&Path) -> Command) -> Duration {
    let dir = fresh_dir(base);
    let mut command = build(&dir.join("keel.db"));
    let start = Instant::now();
    let status = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .status()
        .unwrap();
    let took = start.elapsed();
    assert!(status.success(), "{what}");
    std::fs::remove_dir_all(&dir).unwrap();
    took
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Interleaved rounds, keel then writer; prints the medians and the
/// median per-round ratio.
fn paired(sides: &Sides, rounds: usize) {
    let (mut keel, mut writer, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        let k = sides.keel().as_secs_f64();
        let w = sides.writer().as_secs_f64();
        keel.push(k);
        writer.push(w);
        ratio.push(k / w);
    }
    let (lo, hi) = ratio
        .iter()
        .fold((f64::MAX, 0f64), |(lo, hi), r| (lo.min(*r), hi.max(*r)));
    eprintln!(
        "paired x{rounds}, {} events: keel run {:.3} s, sqlite_writer (transactions of {BATCH}) {:.3} s (medians); keel/writer time ratio, median of rounds: {:.2} (range {lo:.2}-{hi:.2})",
        DELTAS + 7,
        median(keel),
        median(writer),
        median(ratio)
    );
}

fn bench(c: &mut Criterion) {
    let sides = Sides::new();
    let rounds: usize = std::env::var("KEEL_BENCH_PAIRED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8);
    if rounds > 0 {
        paired(&sides, rounds);
    }
    let mut group = c.benchmark_group("run_process");
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(10);
    group.bench_function("keel_run", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| sides.keel()).sum())
    });
    group.bench_function(format!("sqlite_writer_batch_{BATCH}"), |b| {
        b.iter_custom(|iters| (0..iters).map(|_| sides.writer()).sum())
    });
    group.finish();
    let _ = std::fs::remove_dir_all(&sides.base);
}

criterion_group!(benches, bench);
criterion_main!(benches);
