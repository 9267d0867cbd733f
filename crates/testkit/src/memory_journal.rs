//! [`MemoryJournal`]: a durable in-memory store for tests, a required
//! observer and the run history followers read.

use crate::sync::lock;
use keel_eventlog::Event;
use keel_message::RunId;
use keel_observers::{
    BatchError, ObserveBatchFuture, ObserveFuture, ObserverError, RequiredObserver, RunHistory,
    RunHistoryError, RunStatus, StoredRun,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A journal in memory with the SQLite journal's rules: per run, the
/// first stored event is seq 1 and each next one is `last + 1`
/// ([`ObserverError::Gap`] otherwise, nothing stored); offering a stored
/// `(run, seq)` again with the same bytes is `Ok`, with other bytes
/// [`ObserverError::Conflict`]; a batch is applied in order up to its
/// first refusal ([`BatchError`]` { acknowledged: k, .. }`). It is also a
/// [`RunHistory`], so an engine built with
/// `.required_observer(journal.clone()).history(journal.clone())` follows
/// runs across eviction with `Engine::subscribe`.
///
/// "Durable" here means for the life of the value (nothing survives the
/// process). It answers at once, on the caller's task, with no thread,
/// timer or I/O: it works under Tokio's paused time
/// (`#[tokio::test(start_paused = true)]`), where the SQLite journal does
/// not (its writer thread syncs in real time while the paused clock jumps
/// to the pipeline's deadline; see `SqliteJournal`'s documentation).
#[derive(Debug, Default)]
pub struct MemoryJournal {
    runs: Mutex<HashMap<RunId, StoredEvents>>,
}

/// One run's stored events, `1..=len`, and its status.
#[derive(Debug)]
struct StoredEvents {
    events: Vec<Arc<Event>>,
    status: RunStatus,
}

impl Default for StoredEvents {
    fn default() -> Self {
        StoredEvents {
            events: Vec::new(),
            status: RunStatus::Running,
        }
    }
}

impl StoredEvents {
    /// Stores `event` if it is the next one; `Ok` for a stored duplicate.
    fn accept(&mut self, event: &Arc<Event>) -> Result<(), ObserverError> {
        let last = self.events.len() as u64;
        let seq = event.seq();
        if seq == last + 1 {
            if let Some(terminal) = event.kind().run_terminal() {
                self.status = RunStatus::from(terminal);
            }
            self.events.push(Arc::clone(event));
            return Ok(());
        }
        let stored = usize::try_from(seq)
            .ok()
            .and_then(|s| s.checked_sub(1))
            .and_then(|i| self.events.get(i));
        match stored {
            Some(e) if e.line() == event.line() => Ok(()),
            Some(_) => Err(ObserverError::Conflict {
                run_id: event.run_id().to_string(),
                seq,
            }),
            None => Err(ObserverError::Gap {
                run_id: event.run_id().to_string(),
                last_stored: last,
                seq,
            }),
        }
    }
}

impl MemoryJournal {
    /// An empty journal.
    pub fn new() -> MemoryJournal {
        MemoryJournal::default()
    }

    /// The stored events of `run_id`, in order (empty for an unknown run).
    pub fn events(&self, run_id: &RunId) -> Vec<Arc<Event>> {
        lock(&self.runs)
            .get(run_id)
            .map(|r| r.events.clone())
            .unwrap_or_default()
    }

    /// The stored canonical lines of `run_id`, in order.
    pub fn lines(&self, run_id: &RunId) -> Vec<String> {
        let events = self.events(run_id);
        events.iter().map(|e| e.line().to_owned()).collect()
    }

    /// Every run with a stored event.
    pub fn run_ids(&self) -> Vec<RunId> {
        lock(&self.runs).keys().cloned().collect()
    }

    fn store(&self, events: &[Arc<Event>]) -> Result<(), BatchError> {
        let mut runs = lock(&self.runs);
        for (acknowledged, event) in events.iter().enumerate() {
            let run = runs.entry(event.run_id().clone()).or_default();
            run.accept(event).map_err(|source| BatchError {
                acknowledged,
                source,
            })?;
        }
        Ok(())
    }
}

impl RequiredObserver for MemoryJournal {
    fn name(&self) -> &str {
        "memory"
    }

    /// `Ok` once stored (at once: the future is ready when first polled).
    fn observe<'a>(&'a self, event: &'a Arc<Event>) -> ObserveFuture<'a> {
        let stored = self
            .store(std::slice::from_ref(event))
            .map_err(|e| e.source);
        Box::pin(std::future::ready(stored))
    }

    /// The batch in order, under one lock, up to its first refusal.
    fn observe_batch<'a>(&'a self, events: &'a [Arc<Event>]) -> ObserveBatchFuture<'a> {
        Box::pin(std::future::ready(self.store(events)))
    }
}

impl RunHistory for MemoryJournal {
    fn name(&self) -> &str {
        "memory"
    }

    fn stored(&self, run_id: &RunId) -> Result<Option<StoredRun>, RunHistoryError> {
        let runs = lock(&self.runs);
        Ok(runs
            .get(run_id)
            .filter(|r| !r.events.is_empty())
            .map(|r| StoredRun::new(r.events.len() as u64, r.status)))
    }

    fn read_after(
        &self,
        run_id: &RunId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<Arc<Event>>, RunHistoryError> {
        let runs = lock(&self.runs);
        let Some(run) = runs.get(run_id) else {
            return Ok(Vec::new());
        };
        let start = usize::try_from(after).unwrap_or(usize::MAX);
        Ok(run.events.iter().skip(start).take(limit).cloned().collect())
    }
}
