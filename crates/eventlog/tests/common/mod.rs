//! Helpers shared by the eventlog tests (included with `mod common;`).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use keel_eventlog::*;
use keel_message::{CallId, CanonicalJson, InteractionId, ModelName, OperationId, RunId, ToolName};
use keel_testkit::events::{ModelAttempt, ToolUse};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A clock the test moves by hand (it may even go backwards).
#[derive(Debug, Default)]
pub struct TestClock(pub AtomicU64);

impl Clock for TestClock {
    fn now_micros(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

impl TestClock {
    pub fn set(&self, v: u64) {
        self.0.store(v, Ordering::SeqCst)
    }
}

pub fn run_id() -> RunId {
    RunId::parse("run_1").unwrap()
}

pub fn log_with(config: LogConfig) -> (RunLog, Arc<TestClock>) {
    let clock = Arc::new(TestClock(AtomicU64::new(1_767_225_600_000_000)));
    (RunLog::new(run_id(), config, clock.clone()).unwrap(), clock)
}

pub fn log() -> RunLog {
    log_with(LogConfig::default()).0
}

pub fn op(s: &str) -> OperationId {
    OperationId::parse(s).unwrap()
}
pub fn call(s: &str) -> CallId {
    CallId::parse(s).unwrap()
}
pub fn tool_name(s: &str) -> ToolName {
    ToolName::parse(s).unwrap()
}
pub fn iid(s: &str) -> InteractionId {
    InteractionId::parse(s).unwrap()
}

// Each test file uses some of them.
#[allow(unused_imports)]
pub use keel_testkit::events::{
    run_cancelled, run_completed, run_started, turn_cancelled, turn_completed, turn_started,
};

/// Model call `o` of `turn`.
fn model(turn: u64, o: &str) -> ModelAttempt {
    ModelAttempt::new(turn, op(o))
}
pub fn model_started(turn: u64, o: &str) -> Payload {
    model(turn, o).started(ModelName::parse("scripted-1").unwrap())
}
pub fn model_completed(turn: u64, o: &str) -> Payload {
    model(turn, o).completed(keel_stream::FinishReason::Stop, None)
}
pub fn model_cancelled(turn: u64, o: &str) -> Payload {
    model(turn, o).cancelled()
}
pub fn delta(turn: u64, o: &str, text: &str) -> Payload {
    model(turn, o).text(text)
}
/// Call `c` of `tool` in `turn`.
fn tool_use(turn: u64, c: &str, tool: &str) -> ToolUse {
    ToolUse::new(turn, call(c), tool_name(tool))
}
pub fn tool_started(turn: u64, c: &str) -> Payload {
    tool_started_as(turn, c, "get_weather")
}
pub fn tool_cancelled(turn: u64, c: &str) -> Payload {
    tool_cancelled_as(turn, c, "get_weather")
}
pub fn tool_completed(turn: u64, c: &str) -> Payload {
    tool_completed_as(turn, c, "get_weather")
}
/// `tool.started` of call `c` naming `tool`.
pub fn tool_started_as(turn: u64, c: &str, tool: &str) -> Payload {
    tool_use(turn, c, tool).started()
}
/// `tool.completed` of call `c` naming `tool`.
pub fn tool_completed_as(turn: u64, c: &str, tool: &str) -> Payload {
    tool_use(turn, c, tool).completed("3 C")
}
/// `tool.failed` of call `c` naming `tool`.
pub fn tool_failed_as(turn: u64, c: &str, tool: &str) -> Payload {
    tool_use(turn, c, tool).failed("timed out", Some(ToolOutcome::Uncertain), None)
}
/// `tool.cancelled` of call `c` naming `tool`.
pub fn tool_cancelled_as(turn: u64, c: &str, tool: &str) -> Payload {
    tool_use(turn, c, tool).cancelled()
}
pub fn interaction_started(turn: u64, i: &str) -> Payload {
    Payload::InteractionStarted(InteractionStarted {
        turn,
        interaction_id: iid(i),
        request: "approval".into(),
        call_id: None,
        extra: Extra::new(),
    })
}
pub fn interaction_completed(turn: u64, i: &str) -> Payload {
    Payload::InteractionCompleted(InteractionCompleted {
        turn,
        interaction_id: iid(i),
        decision: "approved".into(),
        extra: Extra::new(),
    })
}
/// The canonical line `payload` would have as event `seq` of `run_1` at
/// `ts` (for events a log refuses to commit).
pub fn line_of(payload: &Payload, seq: u64, ts: u64) -> String {
    format!(
        r#"{{"kind":"{}","payload":{},"run_id":"run_1","seq":{seq},"ts":{ts}}}"#,
        payload.kind(),
        payload.to_canonical().unwrap()
    )
}
pub fn note() -> Payload {
    Payload::Extension {
        kind: EventKind::parse("test.note").unwrap(),
        payload: CanonicalJson::parse(r#"{"n":1}"#).unwrap(),
    }
}

/// Commits every payload, panicking on refusal.
pub fn commit_all(log: &RunLog, payloads: &[Payload]) {
    for p in payloads {
        log.commit(p)
            .unwrap_or_else(|e| panic!("commit {:?}: {e}", p.kind()));
    }
}

/// Drains a subscription without waiting; returns the sequences seen and
/// how it ended (None if it is merely empty).
pub fn drain(sub: &mut Subscription) -> (Vec<u64>, Option<TryRecvError>) {
    let mut seqs = Vec::new();
    loop {
        match sub.try_recv() {
            Ok(e) => seqs.push(e.seq()),
            Err(TryRecvError::Empty) => return (seqs, None),
            Err(other) => return (seqs, Some(other)),
        }
    }
}

/// A snapshot's JSON Lines with its last two events swapped, each keeping
/// the sequence of its new position (so the lines stay contiguous).
pub fn swap_last_two_events(text: &str) -> String {
    let mut lines: Vec<&str> = text.lines().collect();
    let n = lines.len();
    lines.swap(n - 1, n - 2);
    let seq_of = |line: &str| Event::decode(line).unwrap().seq();
    let (earlier, later) = (seq_of(lines[n - 1]), seq_of(lines[n - 2]));
    let renumber = |line: &str, from: u64, to: u64| {
        line.replace(&format!("\"seq\":{from},"), &format!("\"seq\":{to},"))
    };
    let mut out: Vec<String> = lines[..n - 2].iter().map(|l| (*l).to_owned()).collect();
    out.push(renumber(lines[n - 2], later, earlier));
    out.push(renumber(lines[n - 1], earlier, later));
    out.join("\n") + "\n"
}
