//! The journal's acknowledgement times: a required observer around the
//! SQLite journal that notes when each event of a streaming run was
//! acknowledged (committed), so a subscriber can measure commit to delivery.

use keel_eventlog::Event;
use keel_observers::{ObserveBatchFuture, ObserveFuture, RequiredObserver, SqliteJournal};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Acknowledgement instants (ns since `origin`, 0 = not yet) by run
/// number and seq, for runs named `s{number}`.
pub struct AckTable {
    origin: Instant,
    runs: Vec<Vec<AtomicU64>>,
}

impl AckTable {
    pub fn new(origin: Instant, runs: usize, events_per_run: usize) -> AckTable {
        let run = || (0..events_per_run + 1).map(|_| AtomicU64::new(0)).collect();
        AckTable {
            origin,
            runs: (0..runs).map(|_| run()).collect(),
        }
    }

    fn slot(&self, event: &Event) -> Option<&AtomicU64> {
        let number: usize = event.run_id().as_str().strip_prefix('s')?.parse().ok()?;
        self.runs
            .get(number)?
            .get(usize::try_from(event.seq()).ok()?)
    }

    fn note(&self, events: &[Arc<Event>]) {
        let now = self.origin.elapsed().as_nanos() as u64;
        for event in events {
            if let Some(slot) = self.slot(event) {
                slot.store(now.max(1), Ordering::Release);
            }
        }
    }

    /// When `event` was acknowledged, if it was (ns since the origin).
    pub fn acknowledged(&self, event: &Event) -> Option<u64> {
        let at = self.slot(event)?.load(Ordering::Acquire);
        (at != 0).then_some(at)
    }
}

/// The journal, noting acknowledgements in the table.
pub struct TimedJournal {
    pub journal: Arc<SqliteJournal>,
    pub acks: Arc<AckTable>,
}

impl RequiredObserver for TimedJournal {
    fn name(&self) -> &str {
        self.journal.name()
    }

    fn observe<'a>(&'a self, event: &'a Arc<Event>) -> ObserveFuture<'a> {
        Box::pin(async move {
            self.journal.observe(event).await?;
            self.acks.note(std::slice::from_ref(event));
            Ok(())
        })
    }

    fn observe_batch<'a>(&'a self, events: &'a [Arc<Event>]) -> ObserveBatchFuture<'a> {
        Box::pin(async move {
            self.journal.observe_batch(events).await?;
            self.acks.note(events);
            Ok(())
        })
    }
}
