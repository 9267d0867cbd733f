//! A stored run (JSON Lines, as `keel import` and recovery read it):
//! whatever the lines, `history::rebuild` never panics and is
//! deterministic, and for every log `RunLog::import` accepts,
//! `recovery::terminals` closes it: each terminal commits, innermost
//! first, and the run ends with every scope closed and the recovery cause.
#![no_main]

use keel_eventlog::{Event, LogConfig, Payload, RunLog, SystemClock, history, recovery};
use keel_message::{Limits, RunId};
use libfuzzer_sys::fuzz_target;
use std::sync::Arc;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let lines: Vec<&str> = text.lines().take(512).collect();
    let events: Vec<Event> = lines.iter().filter_map(|l| Event::decode(l).ok()).collect();
    let limits = Limits::default();
    let first = history::rebuild(&events, &limits);
    assert_eq!(first, history::rebuild(&events, &limits), "rebuild is deterministic");
    let Some(run_id) = events.first().map(|e| e.run_id().clone()) else {
        return;
    };
    let config = LogConfig::default();
    let Ok(log) = RunLog::import(run_id.clone(), lines.iter().copied(), config, Arc::new(SystemClock))
    else {
        return;
    };
    let was_ended = log.run_ended();
    let terminals = recovery::terminals(&log);
    assert_eq!(terminals.is_empty(), was_ended, "terminals exactly for an open run");
    for payload in &terminals {
        if let Err(e) = log.commit(payload) {
            panic!("recovery terminal {} refused: {e}", payload.kind());
        }
    }
    assert!(log.run_ended(), "recovery ends the run");
    assert!(log.open_scope_starts().is_empty());
    if let Some(Payload::RunFailed(p)) = terminals.last() {
        let kind = p.cause.as_ref().and_then(|c| c.kind.as_deref());
        assert_eq!(kind, Some(recovery::HOST_LOST));
    }
    let _ = RunId::parse(run_id.as_str());
});
