//! The two observer contracts. A [`RequiredObserver`] is async and its
//! `Ok` means the event is durably accepted under the observer's contract;
//! `observe_batch` (by default one by one) answers a refusal with
//! [`BatchError`] naming what was acknowledged before it. A
//! [`BestEffortObserver`] runs on its own thread behind a bounded queue
//! and can slow nothing.

use keel_eventlog::Event;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// The future a required observer returns.
pub type ObserveFuture<'a> = Pin<Box<dyn Future<Output = Result<(), ObserverError>> + Send + 'a>>;

/// The future [`RequiredObserver::observe_batch`] returns.
pub type ObserveBatchFuture<'a> = Pin<Box<dyn Future<Output = Result<(), BatchError>> + Send + 'a>>;

/// A batch was durably accepted only up to a point.
///
/// `acknowledged` leading events of the batch are durably accepted; the
/// event at that index was refused with `source`, and nothing after it is
/// taken as accepted, whatever the observer did with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("refused the event at index {acknowledged} of the batch: {source}")]
pub struct BatchError {
    /// How many leading events of the batch are durably accepted.
    pub acknowledged: usize,
    /// Why the next one was not.
    #[source]
    pub source: ObserverError,
}

/// An observer whose acknowledgement the run waits for.
///
/// Called once per committed event, in sequence order per run, in the
/// pipeline's construction order. `Ok(())` means the event is durably
/// accepted *under this observer's documented contract* (for the SQLite
/// journal: in the database file, fsynced with `synchronous=FULL`). It may
/// apply backpressure by taking its time, but only within the deadline the
/// pipeline gives it; past that the pipeline reports
/// [`ObserverError::DeadlineExceeded`] and drops the future, so an
/// implementation must be cancel-safe (dropping the future must not leave
/// it half-applied in a way a retry of the same event cannot repair).
///
/// Delivery is at least once: after an error the engine may offer the same
/// event again, so accepting an event already accepted with the same bytes
/// must succeed.
pub trait RequiredObserver: Send + Sync + 'static {
    /// A short stable name for errors and stats (at most 128 bytes).
    fn name(&self) -> &str;

    /// Durably accept `event`.
    fn observe<'a>(&'a self, event: &'a Arc<Event>) -> ObserveFuture<'a>;

    /// Durably accept `events`: consecutive events of one run, in
    /// sequence order, never empty. `Ok(())` acknowledges every one of
    /// them; an error says how many leading events are accepted.
    ///
    /// The pipeline calls this with whatever a run has pending (group
    /// commit), so an observer that can make several events durable at
    /// the cost of one (one SQLite transaction, one round of JetStream
    /// acks) should override it. The default observes one by one. The
    /// same cancel-safety and at-least-once rules as
    /// [`observe`](Self::observe) apply to every event of the batch.
    fn observe_batch<'a>(&'a self, events: &'a [Arc<Event>]) -> ObserveBatchFuture<'a> {
        Box::pin(async move {
            for (acknowledged, event) in events.iter().enumerate() {
                self.observe(event).await.map_err(|source| BatchError {
                    acknowledged,
                    source,
                })?;
            }
            Ok(())
        })
    }
}

/// An observer that sees events only after every required observer
/// acknowledged them, through a bounded queue, on its own thread. It can
/// never block or fail a run: a full queue drops the event and counts it.
pub trait BestEffortObserver: Send + 'static {
    /// A short stable name for stats.
    fn name(&self) -> &str;

    /// Handle one event. Runs on the observer's own thread; a panic is
    /// caught and counted, and the observer keeps receiving events.
    fn observe(&mut self, event: &Arc<Event>);

    /// Called once when the pipeline shuts down, after the last event.
    fn flush(&mut self) {}
}

/// Why a required observer did not acknowledge an event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ObserverError {
    /// The observer reported a failure.
    #[error("{0}")]
    Failed(String),
    /// The observer already holds different bytes for this run and
    /// sequence.
    #[error("conflict: run {run_id} seq {seq} is already stored with different bytes")]
    Conflict {
        /// The run.
        run_id: String,
        /// The sequence.
        seq: u64,
    },
    /// The observer is missing earlier events of this run, so accepting
    /// this one would leave a gap.
    #[error("gap: run {run_id} has seq {last_stored} stored, offered {seq}")]
    Gap {
        /// The run.
        run_id: String,
        /// Last stored sequence.
        last_stored: u64,
        /// The sequence offered.
        seq: u64,
    },
    /// The observer did not answer within the deadline.
    #[error("no acknowledgement within {deadline_ms} ms")]
    DeadlineExceeded {
        /// The deadline in milliseconds.
        deadline_ms: u64,
    },
    /// The observer panicked.
    #[error("observer panicked")]
    Panicked,
    /// The observer was shut down.
    #[error("observer is closed")]
    Closed,
}
