//! Fuzzes `RunLog` with arbitrary operation sequences (commit, subscribe,
//! receive, drop, close, shutdown, snapshot and restore, import), checked
//! step by step against a small reference model: the list of committed
//! lines and the window the bounds leave.
//!
//! Configurations are small (a few KiB, a few events, 1–4 open scopes) so
//! eviction, the terminal reserve and subscriber bounds are reached in a
//! few operations. The clock is the fuzzer's and may go backwards.
//!
//! Properties:
//! - a commit that succeeds gets the next sequence, a timestamp that is
//!   `max(min(clock, 2^53 - 1), previous)`, and a canonical line within its
//!   bound; the window then
//!   equals the model's (oldest-first eviction until both bounds hold), and
//!   `stats()` agrees on every counter;
//! - a commit that fails changes nothing (stats identical) and is refused
//!   when the log is closed or the run has ended;
//! - `subscribe` refuses exactly the cursors ahead of the log or before
//!   the window, with the model's positions;
//! - a subscriber gets each event after its cursor once, in order, byte
//!   for byte as committed; `Empty` only when it is caught up with an open
//!   log; `Finished` only after the run's terminal (or a reported end);
//!   `SlowConsumer` only when its live lag can have passed its bounds,
//!   `Evicted` only when its next event is gone, `Ended` only after close
//!   or shutdown with every event delivered; nothing after an end;
//! - a tool terminal is accepted only naming the tool its accepted start
//!   named, and one naming another tool for an open call is refused with
//!   `lifecycle.same_identity` (the menu names tool `t` or `u`);
//! - a snapshot is the model's window; its JSON Lines round trip is
//!   byte-identical; restoring it gives a log with the same window and the
//!   same open scopes as their starts named them (`open_scope_starts`),
//!   that continues at the next sequence; importing a complete run gives
//!   the same events and open scopes, and `Snapshot::from_events` of them
//!   is the log's snapshot.
#![no_main]

use keel_eventlog::{
    Clock, CommitError, ENTRY_OVERHEAD_BYTES, EndReason, EventKind, LifecycleError, LogConfig,
    LogStats, MIN_TERMINAL_BYTES, Payload, Phase, RunLog, ScopeKey, Snapshot, SubscribeError,
    Subscription, SubscriptionBounds, SubscriptionError, Transition, TryRecvError,
};
use keel_message::RunId;
use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use serde_json::json;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// 2^53 − 1: the largest `seq` or `ts`.
const MAX_SAFE: u64 = (1 << 53) - 1;

#[derive(Debug, Default)]
struct FuzzClock(AtomicU64);

impl Clock for FuzzClock {
    fn now_micros(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// What the log must hold.
struct Model {
    /// Every committed line; `lines[i]` has seq `i + 1`. After a restore of
    /// a window, the lines before it are kept as they were.
    lines: Vec<String>,
    /// Oldest retained seq (`last + 1` when nothing is retained).
    first: u64,
    retained_bytes: usize,
    evicted: u64,
    /// The durable watermark: nothing marks it in this target, so it is 0
    /// until a restore, which starts at the restored last seq.
    durable: u64,
    last_ts: u64,
    ended: Option<EndReason>,
    /// Seq of the run's terminal, once committed.
    terminal: Option<u64>,
    /// Open tool scopes (started by accepted commits) and the tool each
    /// start named.
    tools: HashMap<ScopeKey, String>,
    config: LogConfig,
}

impl Model {
    fn last(&self) -> u64 {
        self.lines.len() as u64
    }
    fn size(&self, seq: u64) -> usize {
        self.lines[(seq - 1) as usize].len() + ENTRY_OVERHEAD_BYTES
    }
    fn bytes_between(&self, after: u64, upto: u64) -> usize {
        (after + 1..=upto).map(|s| self.size(s)).sum()
    }
    fn append(&mut self, line: String) {
        self.lines.push(line);
        self.retained_bytes += self.size(self.last());
        while (self.last() + 1 - self.first) as usize > self.config.max_events
            || self.retained_bytes > self.config.max_bytes
        {
            self.retained_bytes -= self.size(self.first);
            self.first += 1;
            self.evicted += 1;
        }
    }
    fn expected_stats(&self, subscribers: usize) -> LogStats {
        LogStats {
            earliest_seq: self.first,
            last_seq: self.last(),
            retained_events: (self.last() + 1 - self.first) as usize,
            retained_bytes: self.retained_bytes,
            evicted: self.evicted,
            subscribers,
            durable_seq: self.durable,
        }
    }
    fn window(&self) -> &[String] {
        &self.lines[(self.first - 1) as usize..]
    }
}

struct Sub {
    sub: Subscription,
    /// Last seq delivered.
    delivered: u64,
    /// Last committed seq when it subscribed: the replay ends there.
    joined: u64,
    bounds: SubscriptionBounds,
    /// An end (or the terminal) was delivered: only `Finished` may follow.
    over: bool,
}

fn config(u: &mut Unstructured<'_>) -> Result<LogConfig> {
    let max_open_scopes = u.int_in_range(1..=4)?;
    let max_terminal_bytes = MIN_TERMINAL_BYTES + u.int_in_range(0..=2048)?;
    let max_event_bytes = u.int_in_range(256..=4096)?;
    let reserve = max_open_scopes * (max_terminal_bytes + ENTRY_OVERHEAD_BYTES);
    Ok(LogConfig {
        max_events: max_open_scopes + 1 + u.int_in_range(0..=40)?,
        max_bytes: max_event_bytes + ENTRY_OVERHEAD_BYTES + reserve + u.int_in_range(0..=4096)?,
        max_event_bytes,
        max_terminal_bytes,
        max_open_scopes,
    })
}

/// Non-empty text of 1 to about 6,000 bytes, some of it escaped in JSON.
fn text(u: &mut Unstructured<'_>) -> Result<String> {
    let len = match u.int_in_range(0..=7)? {
        0..=3 => u.int_in_range(1..=16)?,
        4..=6 => u.int_in_range(1..=512)?,
        _ => u.int_in_range(1..=6000)?,
    };
    let fill = *u.choose(&["a", "é", "\"", "\n", "\u{1F600}", "\\"])?;
    Ok(fill.repeat((len / fill.len()).max(1)))
}

/// Text of 1 to about `max + 64` bytes: most fit an event, some do not.
fn sized_text(u: &mut Unstructured<'_>, max: usize) -> Result<String> {
    let len = u.int_in_range(1..=max + 64)?;
    let fill = *u.choose(&["a", "é", "\n"])?;
    Ok(fill.repeat((len / fill.len()).max(1)))
}

/// Where the run is, from what was committed, so that most generated
/// commits are the valid next step and logs grow deep enough to evict
/// by bytes and by count.
#[derive(Debug, Default)]
struct Progress {
    run: bool,
    /// The open turn (0: none).
    turn: u64,
    last_turn: u64,
    /// The open model operation.
    model: Option<String>,
    next_op: u64,
}

impl Progress {
    fn committed(&mut self, p: &Payload) {
        match p {
            Payload::RunStarted(_) => self.run = true,
            Payload::TurnStarted(t) => {
                self.turn = t.turn;
                self.last_turn = self.last_turn.max(t.turn);
            }
            Payload::ModelStarted(m) => self.model = Some(m.operation_id.to_string()),
            Payload::ModelCompleted(_) | Payload::ModelFailed(_) | Payload::ModelCancelled(_) => {
                self.model = None
            }
            Payload::TurnCompleted(_) | Payload::TurnFailed(_) | Payload::TurnCancelled(_) => {
                self.turn = 0;
                self.model = None;
            }
            _ => {}
        }
    }

    /// The natural next event.
    fn next(&mut self, u: &mut Unstructured<'_>, max_event_bytes: usize) -> Result<Payload> {
        let (kind, value) = if !self.run {
            ("run.started", json!({}))
        } else if self.turn == 0 {
            ("turn.started", json!({ "turn": self.last_turn + 1 }))
        } else if let Some(op) = self.model.clone() {
            match u.int_in_range(0..=19)? {
                0 => (
                    "model.completed",
                    json!({ "turn": self.turn, "operation_id": op, "finish": "stop" }),
                ),
                1 => ("turn.completed", json!({ "turn": self.turn })),
                _ => (
                    "model.text_delta",
                    json!({ "turn": self.turn, "operation_id": op, "text": sized_text(u, max_event_bytes)? }),
                ),
            }
        } else if u.ratio(1, 3)? {
            ("turn.completed", json!({ "turn": self.turn }))
        } else {
            self.next_op += 1;
            let op = format!("op_{}", self.next_op);
            (
                "model.started",
                json!({ "turn": self.turn, "operation_id": op, "model": "m", "attempt": 1 }),
            )
        };
        let kind = EventKind::parse(kind).expect("a known kind");
        Ok(Payload::from_json(&kind, value)
            .unwrap_or_else(|e| panic!("next payload {kind:?}: {e}")))
    }
}

/// A payload from a menu of lifecycle events around a few turns and
/// operations, so that valid sequences are likely and invalid ones (wrong
/// nesting, unknown scopes, a second run terminal) are reached too.
fn payload(u: &mut Unstructured<'_>) -> Result<Payload> {
    let turn: u64 = u.int_in_range(1..=2)?;
    let op = *u.choose(&["op_1", "op_2"])?;
    let call = *u.choose(&["call_1", "call_2"])?;
    // Two names, so a terminal may name another tool than its start.
    let tool = *u.choose(&["t", "u"])?;
    let (kind, value) = match u.int_in_range(0..=15)? {
        0 => ("run.started", json!({})),
        1 => ("turn.started", json!({ "turn": turn })),
        2 => (
            "model.started",
            json!({ "turn": turn, "operation_id": op, "model": "m", "attempt": 1 }),
        ),
        3 | 4 | 5 => (
            "model.text_delta",
            json!({ "turn": turn, "operation_id": op, "text": text(u)? }),
        ),
        6 => (
            "model.completed",
            json!({ "turn": turn, "operation_id": op, "finish": "tool_calls" }),
        ),
        7 => (
            "model.failed",
            json!({ "turn": turn, "operation_id": op,
            "problem": { "kind": "overloaded", "message": text(u)?, "retryable": true }, "position": "pristine" }),
        ),
        8 => (
            "tool.started",
            json!({ "turn": turn, "call_id": call, "tool": tool, "arguments": {} }),
        ),
        9 => (
            "tool.completed",
            json!({ "turn": turn, "call_id": call, "tool": tool, "output": text(u)? }),
        ),
        10 => (
            "tool.cancelled",
            json!({ "turn": turn, "call_id": call, "tool": tool }),
        ),
        11 => ("turn.completed", json!({ "turn": turn })),
        12 => ("turn.cancelled", json!({ "turn": turn })),
        13 => ("run.completed", json!({})),
        14 => ("run.failed", json!({ "error": text(u)? })),
        _ => ("run.cancelled", json!({})),
    };
    let kind = EventKind::parse(kind).expect("a known kind");
    Ok(Payload::from_json(&kind, value).unwrap_or_else(|e| panic!("menu payload {kind:?}: {e}")))
}

/// The scope, phase and tool of a tool lifecycle event.
fn tool_identity(p: &Payload) -> Option<(ScopeKey, Phase, String)> {
    match (p.transition(), p.tool_name()) {
        (Transition::Lifecycle(key, phase), Some(tool)) => {
            Some((key, phase, tool.as_str().to_owned()))
        }
        _ => None,
    }
}

fn check_stats(log: &RunLog, model: &Model, subs: &[Sub]) {
    assert_eq!(
        log.stats(),
        model.expected_stats(subs.len()),
        "stats differ from the model"
    );
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(config) = config(&mut u) else { return };
    config
        .validate()
        .expect("the generated config keeps the reserve rule");
    let run_id = RunId::parse("run_fuzz").expect("valid id");
    let clock = Arc::new(FuzzClock::default());
    let mut log = RunLog::new(run_id.clone(), config.clone(), clock.clone()).expect("valid config");
    let mut model = Model {
        lines: Vec::new(),
        first: 1,
        retained_bytes: 0,
        evicted: 0,
        durable: 0,
        last_ts: 0,
        ended: None,
        terminal: None,
        tools: HashMap::new(),
        config: config.clone(),
    };
    let mut subs: Vec<Sub> = Vec::new();
    let mut progress = Progress::default();

    while !u.is_empty() {
        let Ok(op) = u.int_in_range(0..=15u8) else {
            break;
        };
        match op {
            // Commit (the most common operation).
            0..=6 => {
                let p = if op <= 4 {
                    progress.next(&mut u, config.max_event_bytes)
                } else {
                    payload(&mut u)
                };
                let Ok(p) = p else { break };
                if let Ok(step) = u.int_in_range(0..=15u64) {
                    // Mostly forward, sometimes backwards, rarely past
                    // the largest safe integer.
                    let now = clock.0.load(Ordering::SeqCst);
                    let next = match step {
                        0 => now.saturating_sub(5),
                        15 => u64::MAX - 3,
                        _ => now.saturating_add(step),
                    };
                    clock.0.store(next, Ordering::SeqCst);
                }
                let before = log.stats();
                let identity = tool_identity(&p);
                let mismatch = match &identity {
                    Some((key, Phase::Ended(_), tool)) => {
                        model.tools.get(key).is_some_and(|started| started != tool)
                    }
                    _ => false,
                };
                match log.commit(&p) {
                    Ok(event) => {
                        assert!(
                            !mismatch,
                            "a tool terminal naming another tool was accepted"
                        );
                        match identity {
                            Some((key, Phase::Started, tool)) => {
                                model.tools.insert(key, tool);
                            }
                            Some((key, Phase::Ended(_), tool)) => assert_eq!(
                                model.tools.remove(&key),
                                Some(tool),
                                "a tool terminal accepted naming another tool than its start"
                            ),
                            None => {}
                        }
                        assert!(model.ended.is_none(), "a closed log took a commit");
                        assert!(
                            model.terminal.is_none(),
                            "a commit after the run's terminal"
                        );
                        assert_eq!(event.seq(), model.last() + 1, "not the next sequence");
                        let ts = clock
                            .0
                            .load(Ordering::SeqCst)
                            .min(MAX_SAFE)
                            .max(model.last_ts);
                        assert_eq!(event.ts(), ts, "timestamp is not max(clock, previous)");
                        model.last_ts = ts;
                        let bound = config.max_event_bytes.max(config.max_terminal_bytes);
                        assert!(event.line().len() <= bound, "a line over every bound");
                        let canonical = keel_message::CanonicalJson::parse(event.line())
                            .unwrap_or_else(|e| panic!("a committed line is not I-JSON: {e}"));
                        assert_eq!(canonical.as_str(), event.line(), "not canonical");
                        if event.kind().to_string().starts_with("run.")
                            && event.kind().to_string() != "run.started"
                        {
                            model.terminal = Some(event.seq());
                        }
                        model.append(event.line().to_owned());
                        progress.committed(&p);
                    }
                    Err(e) => {
                        assert_eq!(log.stats(), before, "a refused commit changed the log: {e}");
                        if let Some(reason) = model.ended {
                            assert_eq!(e, CommitError::Closed(reason));
                        } else if mismatch {
                            assert!(
                                matches!(
                                    e,
                                    CommitError::Lifecycle(LifecycleError::IdentityMismatch { .. })
                                ),
                                "a tool terminal naming another tool refused otherwise: {e}"
                            );
                        }
                    }
                }
                check_stats(&log, &model, &subs);
                assert!(model.retained_bytes <= config.max_bytes);
            }
            // Subscribe.
            7 | 8 => {
                let last = model.last();
                let Ok(pick) = u.int_in_range(0..=6u8) else {
                    break;
                };
                let after = match pick {
                    0 => 0,
                    1 => last,
                    2 => last.saturating_sub(1),
                    3 => model.first.saturating_sub(1),
                    4 => model.first.saturating_sub(2),
                    5 => last + 1,
                    _ => u.int_in_range(0..=last + 2).unwrap_or(0),
                };
                let bounds = SubscriptionBounds {
                    max_events: u.int_in_range(1..=8).unwrap_or(1),
                    max_bytes: u.int_in_range(1..=20_000).unwrap_or(1),
                    ..Default::default()
                };
                match log.subscribe(after, bounds) {
                    Ok(sub) => {
                        assert!(
                            after <= last && after + 1 >= model.first,
                            "cursor {after} accepted"
                        );
                        subs.push(Sub {
                            sub,
                            delivered: after,
                            joined: last,
                            bounds,
                            over: false,
                        });
                    }
                    Err(SubscribeError::CursorAhead { requested, latest }) => {
                        assert!(after > last);
                        assert_eq!((requested, latest), (after, last));
                    }
                    Err(SubscribeError::CursorExpired {
                        requested,
                        earliest,
                        latest,
                        recovery_cursor,
                    }) => {
                        assert!(after + 1 < model.first);
                        assert_eq!(
                            (requested, earliest, latest, recovery_cursor),
                            (after, model.first, last, model.first - 1)
                        );
                    }
                    Err(other) => panic!("unexpected subscribe error {other}"),
                }
                check_stats(&log, &model, &subs);
            }
            // Receive a few.
            9..=11 => {
                if subs.is_empty() {
                    continue;
                }
                let i = u.choose_index(subs.len()).unwrap_or(0);
                let n = u.int_in_range(1..=8).unwrap_or(1);
                for _ in 0..n {
                    receive(&mut subs[i], &model);
                }
            }
            // Drop a subscriber.
            12 => {
                if !subs.is_empty() {
                    let i = u.choose_index(subs.len()).unwrap_or(0);
                    subs.swap_remove(i);
                }
                check_stats(&log, &model, &subs);
            }
            // Close or shut down.
            13 => {
                let reason = if u.arbitrary().unwrap_or(false) {
                    log.close();
                    EndReason::Closed
                } else {
                    log.shutdown();
                    EndReason::Shutdown
                };
                model.ended.get_or_insert(reason);
            }
            // Snapshot, JSON Lines round trip, restore (subscribers of the
            // old log go with it).
            14 => {
                let snap = log.snapshot();
                assert_eq!(snap.last_seq(), model.last());
                assert_eq!(snap.earliest_seq(), model.first);
                let lines: Vec<&str> = snap.events().iter().map(|e| e.line()).collect();
                assert_eq!(lines, model.window(), "snapshot window differs");
                let jsonl = snap.to_jsonl();
                let back = Snapshot::from_jsonl(&jsonl)
                    .unwrap_or_else(|e| panic!("a snapshot does not parse back: {e}"));
                assert_eq!(
                    back.to_jsonl(),
                    jsonl,
                    "JSON Lines round trip changed bytes"
                );
                let restored = RunLog::restore(&back, config.clone(), clock.clone())
                    .unwrap_or_else(|e| panic!("a snapshot does not restore: {e}"));
                assert_eq!(
                    restored.open_scope_starts(),
                    log.open_scope_starts(),
                    "restore changed the open scopes or their identities"
                );
                subs.clear();
                log = restored;
                model.ended = None;
                model.evicted = 0;
                model.durable = model.last();
                check_stats(&log, &model, &subs);
                assert_eq!(
                    log.retained_after(0)
                        .iter()
                        .map(|e| e.line())
                        .collect::<Vec<_>>(),
                    model.window()
                );
            }
            // Import a complete run.
            _ => {
                if model.first != 1 {
                    continue;
                }
                let imported = RunLog::import(
                    run_id.clone(),
                    model.lines.iter().map(String::as_str),
                    config.clone(),
                    clock.clone(),
                )
                .unwrap_or_else(|e| panic!("a committed run does not import: {e}"));
                let lines: Vec<String> = imported
                    .retained_after(0)
                    .iter()
                    .map(|e| e.line().to_owned())
                    .collect();
                assert_eq!(lines, model.lines, "import changed the events");
                assert_eq!(imported.stats().last_seq, model.last());
                assert_eq!(imported.durable_seq(), model.last(), "an import is durable");
                assert_eq!(
                    imported.open_scope_starts(),
                    log.open_scope_starts(),
                    "import changed the open scopes or their identities"
                );
                let snap = Snapshot::from_events(run_id.clone(), log.retained_after(0))
                    .unwrap_or_else(|e| panic!("a committed run is not a snapshot: {e}"));
                assert_eq!(snap, log.snapshot(), "from_events differs from snapshot()");
            }
        }
    }
    // Drain everyone: whatever is left must come out complete.
    for sub in &mut subs {
        for _ in 0..=model.lines.len() + 2 {
            receive(sub, &model);
        }
        assert!(
            sub.over || sub.delivered == model.last(),
            "a drained subscriber stopped short of the last event"
        );
    }
});

fn receive(s: &mut Sub, model: &Model) {
    let result = s.sub.try_recv();
    if s.over {
        assert_eq!(
            result.map(|e| e.seq()),
            Err(TryRecvError::Finished),
            "something after an end"
        );
        return;
    }
    match result {
        Ok(event) => {
            assert_eq!(
                event.seq(),
                s.delivered + 1,
                "not the next event: a gap or a repeat"
            );
            assert_eq!(
                event.line(),
                model.lines[(event.seq() - 1) as usize],
                "bytes differ"
            );
            s.delivered = event.seq();
            if model.terminal == Some(event.seq()) {
                s.over = true;
            }
        }
        Err(TryRecvError::Empty) => {
            assert_eq!(s.delivered, model.last(), "Empty while events are pending");
            assert!(model.ended.is_none(), "Empty on a closed log");
            assert!(
                model.terminal.is_none_or(|t| t > s.delivered),
                "Empty after the terminal"
            );
        }
        Err(TryRecvError::Finished) => {
            let t = model.terminal.expect("Finished without a run terminal");
            assert!(
                s.delivered >= t,
                "Finished before the terminal was delivered"
            );
            s.over = true;
        }
        Err(TryRecvError::Ended(end)) => {
            s.over = true;
            match end {
                SubscriptionError::SlowConsumer {
                    last_delivered,
                    recovery_cursor,
                    lag_events,
                    lag_bytes,
                    max_events,
                    max_bytes,
                } => {
                    assert_eq!(
                        (last_delivered, recovery_cursor),
                        (s.delivered, s.delivered)
                    );
                    assert_eq!(
                        (max_events, max_bytes),
                        (s.bounds.max_events, s.bounds.max_bytes)
                    );
                    assert!(lag_events > max_events as u64 || lag_bytes > max_bytes as u64);
                    // The live lag counts from what the log handed over,
                    // which is at least what was delivered and the replay.
                    let from = s.delivered.max(s.joined);
                    let upper_events = model.last() - from;
                    let upper_bytes = model.bytes_between(from, model.last()) as u64;
                    assert!(
                        lag_events <= upper_events,
                        "lag {lag_events} > {upper_events}"
                    );
                    assert!(
                        upper_events > max_events as u64 || upper_bytes > max_bytes as u64,
                        "cut off within its bounds: {upper_events} events / {upper_bytes} bytes"
                    );
                }
                SubscriptionError::Evicted {
                    last_delivered,
                    earliest,
                    recovery_cursor,
                } => {
                    assert_eq!(last_delivered, s.delivered);
                    assert_eq!((earliest, recovery_cursor), (model.first, model.first - 1));
                    assert!(
                        model.first > s.delivered + 1,
                        "Evicted while its next event is retained"
                    );
                }
                SubscriptionError::Ended { reason, last_seq } => {
                    assert_eq!(Some(reason), model.ended);
                    assert_eq!(last_seq, model.last());
                    assert_eq!(
                        s.delivered,
                        model.last(),
                        "Ended before every event was delivered"
                    );
                }
                other => panic!("unexpected end {other}"),
            }
        }
    }
}
