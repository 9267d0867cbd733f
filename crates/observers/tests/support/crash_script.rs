//! The crash tests' shared parts (`crash.rs` for SQLite,
//! `postgres_crash.rs` for PostgreSQL): the seeded script of runs a child
//! writes, how the child offers and acknowledges them, and how the parent
//! runs the child and kills it.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use keel_eventlog::{
    Clock, Event, Extra, LogConfig, ModelCompleted, ModelStarted, Payload, RunCancelled,
    RunCompleted, RunFailed, RunLog, RunStarted, TextDelta, TurnRef,
};
use keel_message::{ModelName, OperationId, RunId};
use keel_observers::RequiredObserver;
use std::io::{BufRead, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Runs each child task writes, one after the other.
pub const RUNS_PER_TASK: u64 = 60;
/// Concurrent writing tasks in a child.
pub const TASKS: u64 = 4;

// ------------------------------------------------------------- the script

/// splitmix64: a tiny deterministic PRNG.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A clock that advances 250 µs per reading: the script is deterministic.
#[derive(Debug)]
pub struct StepClock(AtomicU64);

impl Clock for StepClock {
    fn now_micros(&self) -> u64 {
        self.0.fetch_add(250, Ordering::Relaxed)
    }
}

pub fn run_name(seed: u64, task: u64, k: u64) -> String {
    format!("run_s{seed}_t{task}_r{k}")
}

pub fn parse_run_name(name: &str) -> (u64, u64, u64) {
    let rest = name.strip_prefix("run_s").unwrap();
    let (seed, rest) = rest.split_once("_t").unwrap();
    let (task, k) = rest.split_once("_r").unwrap();
    (
        seed.parse().unwrap(),
        task.parse().unwrap(),
        k.parse().unwrap(),
    )
}

/// The events of run `k` of `task` under `seed`, committed through a real
/// `RunLog`: the same on every call, so the parent can rebuild exactly
/// what the child wrote.
pub fn script(seed: u64, task: u64, k: u64) -> Vec<Arc<Event>> {
    let mut rng = Rng::new(seed.wrapping_mul(1_000_003) ^ (task << 32) ^ k);
    let run = RunId::parse(&run_name(seed, task, k)).unwrap();
    let clock = Arc::new(StepClock(AtomicU64::new(
        1_767_225_600_000_000 + k * 1_000_000,
    )));
    let log = RunLog::new(run, LogConfig::default(), clock).unwrap();
    let model = ModelName::parse("scripted-1").unwrap();
    let mut events = Vec::new();
    let mut commit = |p: Payload| events.push(log.commit(&p).unwrap());
    commit(Payload::RunStarted(RunStarted {
        model: Some(model.clone()),
        chat: None,
        extra: Extra::new(),
        continues: None,
        forked_from: None,
        parent: None,
    }));
    let turns = 1 + rng.below(3);
    for turn in 1..=turns {
        let op = OperationId::parse(&format!("op_{k}_{turn}")).unwrap();
        commit(Payload::TurnStarted(TurnRef {
            turn,
            extra: Extra::new(),
        }));
        commit(Payload::ModelStarted(ModelStarted {
            turn,
            operation_id: op.clone(),
            model: model.clone(),
            attempt: 1,
            purpose: None,
            extra: Extra::new(),
        }));
        for _ in 0..rng.below(12) {
            // Mostly short deltas, some spanning several pages.
            let len = if rng.below(10) == 0 {
                2_000 + rng.below(14_000)
            } else {
                1 + rng.below(60)
            };
            let text: String = (0..len)
                .map(|_| char::from(b" abcdefghijklmnopqrstuvwxyz.,\"\\\n"[rng.below(32) as usize]))
                .collect();
            commit(Payload::TextDelta(TextDelta {
                turn,
                operation_id: op.clone(),
                text,
                extra: Extra::new(),
            }));
        }
        commit(Payload::ModelCompleted(ModelCompleted {
            turn,
            operation_id: op,
            finish: keel_stream::FinishReason::Stop,
            usage: Some(keel_stream::Usage::new(rng.below(1000), rng.below(1000)).unwrap()),
            metadata: None,
            extra: Extra::new(),
        }));
        commit(Payload::TurnCompleted(TurnRef {
            turn,
            extra: Extra::new(),
        }));
    }
    commit(match rng.below(3) {
        0 => Payload::RunCompleted(RunCompleted::default()),
        1 => Payload::RunFailed(RunFailed {
            error: keel_eventlog::ErrorText::new("scripted failure"),
            cause: None,
            extra: Extra::new(),
        }),
        _ => Payload::RunCancelled(RunCancelled::default()),
    });
    events
}

// --------------------------------------------------------------- the child

/// Prints `ack <run> <seq>` for each of `events`, in one write.
pub fn print_acks(events: &[Arc<Event>]) {
    let mut text = String::new();
    for event in events {
        text.push_str(&format!("ack {} {}\n", event.run_id(), event.seq()));
    }
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes()).unwrap();
    out.flush().unwrap();
}

/// Offers the events from `next` on: one `observe` now and then, else an
/// `observe_batch` of a seed-derived size (1..=64), printing each event's
/// ack only after the answer covers it. Returns how many were acked.
pub async fn offer(
    journal: &impl RequiredObserver,
    events: &[Arc<Event>],
    next: usize,
    rng: &mut Rng,
) -> usize {
    let acked = if rng.below(4) == 0 {
        journal.observe(&events[next]).await.unwrap();
        &events[next..=next]
    } else {
        let size = 1 + rng.below(64) as usize;
        let batch = &events[next..events.len().min(next + size)];
        match journal.observe_batch(batch).await {
            Ok(()) => batch,
            Err(e) => {
                print_acks(&batch[..e.acknowledged]);
                panic!("batch at {} refused: {e}", batch[0].seq());
            }
        }
    };
    print_acks(acked);
    // Now and then, a retry of what was just acknowledged.
    if rng.below(16) == 0 {
        journal.observe_batch(acked).await.unwrap();
    }
    acked.len()
}

/// The child's work: `TASKS` tasks on two worker threads, each offering
/// its `RUNS_PER_TASK` scripts to `journal` in turn until done (or killed).
pub fn write_scripts<J: RequiredObserver + Send + Sync + 'static>(journal: Arc<J>, seed: u64) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    rt.block_on(async {
        let tasks: Vec<_> = (0..TASKS)
            .map(|task| {
                let journal = Arc::clone(&journal);
                tokio::spawn(async move {
                    let mut rng = Rng::new(seed ^ (task + 1) << 40);
                    for k in 0..RUNS_PER_TASK {
                        let events = script(seed, task, k);
                        let mut next = 0;
                        while next < events.len() {
                            next += offer(&*journal, &events, next, &mut rng).await;
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

// -------------------------------------------------------------- the parent

pub fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name}={v} is not a number"))
        })
        .unwrap_or(default)
}

pub struct Killed {
    /// Complete `ack` lines the child printed.
    pub acks: Vec<(String, u64)>,
    /// The child exited by itself (finished its script) before the kill.
    pub finished: bool,
    /// The kill was timed from the spawn, not from the first ack.
    pub early: bool,
}

/// Runs one child (this test binary's `crash_child` test, with
/// `child_env` set to `<target>|<seed>`) and kills it after a delay chosen
/// by `seed`.
pub fn run_and_kill(child_env: &str, target: &str, seed: u64) -> Killed {
    let mut rng = Rng::new(seed);
    let delay = Duration::from_millis(5 + rng.below(146));
    // One kill in six lands early, counted from the spawn (during start-up
    // or schema creation); the rest count from the first acknowledgement.
    let early = rng.below(6) == 0;
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["crash_child", "--exact", "--nocapture", "--test-threads=1"])
        .env(child_env, format!("{target}|{seed}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let lines = std::thread::spawn(move || {
        let mut reader = std::io::BufReader::new(stdout);
        let mut line = String::new();
        while reader.read_line(&mut line).unwrap_or(0) > 0 {
            // A line cut short by the kill has no newline: not an ack.
            if line.ends_with('\n') && tx.send(line.trim_end().to_owned()).is_err() {
                break;
            }
            line.clear();
        }
    });
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut std::io::BufReader::new(stderr), &mut text);
        text
    });
    let mut seen = Vec::new();
    let start = Instant::now();
    if early {
        std::thread::sleep(delay / 5);
    } else {
        // Wait for the first ack, then the delay.
        loop {
            match rx.recv_timeout(Duration::from_millis(50)) {
                Ok(line) => {
                    let first = line.starts_with("ack ");
                    seen.push(line);
                    if first {
                        break;
                    }
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    if let Some(status) = child.try_wait().unwrap() {
                        panic!(
                            "seed {seed}: child exited ({status}) before its first ack: {}",
                            errors.join().unwrap()
                        );
                    }
                    assert!(
                        start.elapsed() < Duration::from_secs(60),
                        "seed {seed}: no ack within 60 s"
                    );
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        std::thread::sleep(delay);
    }
    let exited = child.try_wait().unwrap();
    if exited.is_none() {
        child.kill().unwrap();
        child.wait().unwrap();
    }
    let stderr = errors.join().unwrap();
    if let Some(status) = exited {
        assert!(
            status.success(),
            "seed {seed}: child failed ({status}): {stderr}"
        );
    }
    let finished = exited.is_some();
    lines.join().unwrap();
    seen.extend(rx.try_iter());
    let acks = seen
        .iter()
        .filter_map(|l| {
            let mut parts = l.strip_prefix("ack ")?.split(' ');
            let run = parts.next()?.to_owned();
            let seq = parts.next()?.parse().ok()?;
            Some((run, seq))
        })
        .collect();
    Killed {
        acks,
        finished,
        early,
    }
}
