//! Forks in history rebuild: a parent run (a lifecycle-valid run from the
//! shared vocabulary, or any decodable picks of it in any order) forked at
//! a seq the input picks.
//!
//! `ForkPoints` fed the parent through the seq and `history::rebuild_fork_point`
//! agree (a refusal is the same `fork.point` / `fork.seq_known` error, and
//! `fork.seq_known` exactly for a seq the parent does not have); neither
//! panics and both are deterministic. An accepted fork point's history is
//! the parent's events through the seq rebuilt alone, its reference the
//! seq and the digest of lines 1..=seq, and the parent is read no further
//! than the event after the seq (or its head, seqs 1 and 2). A fork log recording that reference
//! rebuilds (`rebuild_chain`) to the same history; one whose `forked_from`
//! names another seq is refused; a fork of the fork at its reference
//! gives the same history again.
#![no_main]

mod common;

use common::events::{events, lifecycle_valid};
use keel_eventlog::history::{self, ChainError, ForkPoints, HistoryStore};
use keel_eventlog::{
    Event, Extra, ForkedFrom, HistoryHasher, LogConfig, Payload, RunCompleted, RunInputReference, RunLog,
    RunStarted, SystemClock,
};
use keel_message::{Limits, RunId};
use libfuzzer_sys::fuzz_target;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Runs' events, served three a page; remembers the highest seq served.
#[derive(Default)]
struct Runs {
    runs: BTreeMap<RunId, Vec<Event>>,
    served: Mutex<BTreeMap<RunId, u64>>,
}

impl HistoryStore for Runs {
    type Error = std::convert::Infallible;
    fn events_after(&self, run: &RunId, after: u64, limit: usize) -> Result<Vec<Event>, Self::Error> {
        let events = self.runs.get(run).map(Vec::as_slice).unwrap_or_default();
        let page: Vec<Event> = events.iter().filter(|e| e.seq() > after).take(limit.min(3)).cloned().collect();
        if let Some(last) = page.last() {
            let mut served = self.served.lock().expect("not poisoned");
            let max = served.entry(run.clone()).or_default();
            *max = (*max).max(last.seq());
        }
        Ok(page)
    }
}

/// A completed fork of `forked_from` recording `reference` at seq 2.
fn fork_log(id: &str, forked_from: ForkedFrom, reference: keel_eventlog::HistoryReference) -> Vec<Event> {
    let log = RunLog::new(RunId::parse(id).expect("valid"), LogConfig::default(), Arc::new(SystemClock))
        .expect("default config");
    let payloads = [
        Payload::RunStarted(RunStarted { forked_from: Some(forked_from), ..RunStarted::default() }),
        Payload::RunInputReference(RunInputReference { history: reference, extra: Extra::new() }),
        Payload::RunCompleted(RunCompleted::default()),
    ];
    for payload in &payloads {
        log.commit(payload).expect("a fork log commits");
    }
    log.retained_after(0).iter().map(|e| Event::clone(e)).collect()
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let at = u64::from(u16::from_le_bytes([data[0], data[1]]) % 300);
    let parent: Vec<Event> = if data[2] & 1 == 1 {
        events(&data[3..])
    } else {
        lifecycle_valid("run_p", &data[3..], |_, _| true).events.iter().map(|e| Event::clone(e)).collect()
    };
    let Some(parent_id) = parent.first().map(|e| e.run_id().clone()) else {
        return;
    };
    let limits = Limits::default();
    let mut points = ForkPoints::default();
    for event in parent.iter().take_while(|e| e.seq() <= at) {
        points.push(event).expect("the vocabulary decodes");
    }
    let next = parent.iter().find(|e| e.seq() == at + 1);
    let fed = points.check(at, next);
    if let Err(e) = &fed {
        let past = at == 0 || at > parent.len() as u64;
        assert_eq!(e.rule() == "fork.seq_known", past, "seq_known exactly past the run: {e}");
    }

    let mut store = Runs::default();
    store.runs.insert(parent_id.clone(), parent.clone());
    let rebuilt = history::rebuild_fork_point(&store, &parent_id, at, &limits);
    let again = history::rebuild_fork_point(&store, &parent_id, at, &limits);
    assert_eq!(rebuilt.as_ref().ok(), again.as_ref().ok(), "deterministic");
    // The walk reads each run's first two events (its head), the stream
    // the parent through the seq and the event after it.
    let served = store.served.lock().expect("not poisoned").get(&parent_id).copied().unwrap_or(0);
    assert!(served <= (at + 1).max(2), "read seq {served} of a fork at {at}");
    let rebuilt = match (fed, rebuilt) {
        (Err(fed), Err(ChainError::ForkPoint { source, .. })) => {
            assert_eq!(fed, source, "one rule");
            return;
        }
        (Err(fed), other) => panic!("the fed rule refused ({fed}) but the rebuild gave {other:?}"),
        (Ok(()), Err(ChainError::ForkPoint { source, .. })) => panic!("the rebuild refused a fork point: {source}"),
        // The history itself does not rebuild (no input through the seq).
        (Ok(()), Err(_)) => return,
        (Ok(()), Ok(rebuilt)) => rebuilt,
    };
    let prefix: Vec<Event> = parent.iter().take_while(|e| e.seq() <= at).cloned().collect();
    assert_eq!(Ok(rebuilt.history.clone()), history::rebuild(&prefix, &limits), "the parent's rebuild through the seq");
    assert_eq!(rebuilt.reference.last_seq, at);
    assert_eq!(rebuilt.reference.digest, HistoryHasher::default().finish_with(prefix.iter()));

    let fork_id = RunId::parse("run_k").expect("valid");
    store.runs.insert(fork_id.clone(), fork_log("run_k", ForkedFrom::new(parent_id.clone(), at), rebuilt.reference.clone()));
    let chain = history::rebuild_chain(&store, &fork_id, &limits).expect("a recorded fork rebuilds");
    assert_eq!(chain.history, rebuilt.history);
    assert_eq!(chain.runs, vec![parent_id.clone(), fork_id.clone()]);
    let of_fork = history::rebuild_fork_point(&store, &fork_id, 2, &limits).expect("a fork's reference is a fork point");
    assert_eq!(of_fork.history, rebuilt.history);

    let wrong = RunId::parse("run_w").expect("valid");
    store.runs.insert(wrong.clone(), fork_log("run_w", ForkedFrom::new(parent_id, at + 1), rebuilt.reference));
    assert!(history::rebuild_chain(&store, &wrong, &limits).is_err(), "forked_from must match the reference");
});
