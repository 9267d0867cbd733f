//! A stored run (JSON Lines, as `keel import` and recovery read it):
//! whatever the lines, `history::rebuild` never panics and is
//! deterministic, and for every log `RunLog::import` accepts,
//! `recovery::terminals` closes it: each terminal commits, innermost
//! first, and the run ends with every scope closed and the recovery cause.
//!
//! The lines may hold several runs (an export of a continued run carries
//! the runs it references): `history::rebuild_chain` of each, through a
//! store serving short pages, never panics, is deterministic, and when it
//! succeeds its history is the run's own events rebuilt after the history
//! its reference names (`history::rebuild_after`); for a fork, the
//! history of its parent through the fork's seq.
#![no_main]

use keel_eventlog::history::HistoryStore;
use keel_eventlog::{Event, LogConfig, Payload, RunLog, SystemClock, history, recovery};
use keel_message::{Limits, RunId};
use libfuzzer_sys::fuzz_target;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The decoded lines by run, served three events a page.
struct Runs(BTreeMap<RunId, Vec<Event>>);

impl HistoryStore for Runs {
    type Error = std::convert::Infallible;
    fn events_after(&self, run: &RunId, after: u64, limit: usize) -> Result<Vec<Event>, Self::Error> {
        let events = self.0.get(run).map(Vec::as_slice).unwrap_or_default();
        Ok(events.iter().filter(|e| e.seq() > after).take(limit.min(3)).cloned().collect())
    }
}

/// Each run's chain rebuilds deterministically and agrees with
/// `rebuild_after` of its parent's history.
fn check_chains(events: &[Event], limits: &Limits) {
    let mut runs: BTreeMap<RunId, Vec<Event>> = BTreeMap::new();
    for event in events {
        runs.entry(event.run_id().clone()).or_default().push(event.clone());
    }
    let store = Runs(runs);
    for (run, own) in &store.0 {
        let chain = history::rebuild_chain(&store, run, limits);
        let again = history::rebuild_chain(&store, run, limits);
        assert_eq!(
            chain.as_ref().map(|c| &c.history).ok(),
            again.as_ref().map(|c| &c.history).ok(),
            "rebuild_chain is deterministic"
        );
        let Ok(chain) = chain else { continue };
        // The store serves a run's events in seq order from 1; lines that
        // repeat or reorder seqs are what it skips.
        if !own.iter().enumerate().all(|(i, e)| e.seq() == i as u64 + 1) {
            continue;
        }
        assert_eq!(chain.runs.last(), Some(run));
        let parent = chain.runs.len().checked_sub(2).map(|i| &chain.runs[i]);
        // A fork inherits its parent's history through the fork's seq.
        let forked_at = own.first().and_then(|e| match e.payload() {
            Ok(Payload::RunStarted(started)) => started.forked_from.map(|f| f.seq),
            _ => None,
        });
        let inherited = match (parent, forked_at) {
            (Some(parent), Some(seq)) => history::rebuild_fork_point(&store, parent, seq, limits)
                .expect("a resolved fork's parent rebuilds through its seq")
                .history,
            (Some(parent), None) => history::rebuild_chain(&store, parent, limits)
                .expect("a resolved parent rebuilds")
                .history,
            (None, _) => Vec::new(),
        };
        let after = history::rebuild_after(inherited, own, limits).expect("the run's own events rebuild");
        assert_eq!(after, chain.history, "the chain is the parent's history, then the run's");
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let lines: Vec<&str> = text.lines().take(512).collect();
    let events: Vec<Event> = lines.iter().filter_map(|l| Event::decode(l).ok()).collect();
    let limits = Limits::default();
    let first = history::rebuild(&events, &limits);
    assert_eq!(first, history::rebuild(&events, &limits), "rebuild is deterministic");
    check_chains(&events, &limits);
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
