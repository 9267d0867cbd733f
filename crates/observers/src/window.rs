//! The per-run window: committed events not yet acknowledged by every
//! required observer, handed over in batches (group commit within a run),
//! acknowledged in sequence order, with the durable watermark they raise
//! and the best-effort feed that follows that watermark.
//!
//! The state machine ([`WindowCore`]) is synchronous and lock-based, so a
//! loom model drives it directly; [`RunWindow`](crate::RunWindow) puts the
//! async waits and the flusher task around it. The core holds no pipeline:
//! settling returns what to offer the best-effort observers ([`Settled`]),
//! and the caller offers it.

use crate::dispatch::{BatchOutcome, DispatchError};
use keel_eventlog::{Event, RunLog};
use std::collections::VecDeque;
use std::sync::Arc;

#[cfg(loom)]
use loom::sync::{Mutex, MutexGuard};
#[cfg(not(loom))]
use std::sync::{Mutex, MutexGuard};

/// Why a window takes no more events, or a barrier cannot be passed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WindowError {
    /// A required observer refused an event of this run: nothing from
    /// that event on is acknowledged, and the window takes no more.
    #[error(transparent)]
    Refused(#[from] DispatchError),
    /// The window was closed before the event became durable.
    #[error("the window of run {run_id} is closed at durable seq {watermark} (rule window.open)")]
    Closed {
        /// The run.
        run_id: String,
        /// Its durable watermark when the window closed.
        watermark: u64,
    },
    /// The first submit of a run with required observers was made outside
    /// a tokio runtime, where its flusher task cannot be started.
    #[error("a run's window needs a tokio runtime for its flusher (rule window.runtime)")]
    NoRuntime,
}

/// What [`WindowCore::admit`] did with an event.
#[derive(Debug)]
pub enum Admission {
    /// Queued for the flusher; `wake` says the queue was empty, so an idle
    /// flusher must be woken.
    Queued {
        /// Whether the queue was empty before.
        wake: bool,
    },
    /// The window is at its event or byte bound: wait for an
    /// acknowledgement and offer it again.
    Full,
    /// Refused for good.
    Refused(WindowError),
}

/// What the flusher should do next.
#[derive(Debug)]
pub enum Take {
    /// Acknowledge these events: everything the run had pending, in order.
    Batch(Vec<Arc<Event>>),
    /// Nothing pending: wait for an admission.
    Idle,
    /// Closed and drained, or failed: the flusher ends.
    Done,
}

/// What [`WindowCore::settle`] did with a batch: the new watermark, and
/// the acknowledged prefix, for the caller to offer to the best-effort
/// observers in order
/// ([`Pipeline::offer_best_effort`](crate::Pipeline::offer_best_effort)).
/// The run log is already marked durable over it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "the settled events are to be offered to the best-effort observers"]
pub struct Settled<'a> {
    raised: Option<u64>,
    to_offer: &'a [Arc<Event>],
}

impl<'a> Settled<'a> {
    /// The new watermark, when it rose.
    pub fn raised(&self) -> Option<u64> {
        self.raised
    }

    /// The events every required observer acknowledged, in order: what
    /// the best-effort observers are offered next.
    pub fn to_offer(&self) -> &'a [Arc<Event>] {
        self.to_offer
    }
}

/// How many unacknowledged events one run may have in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WindowBounds {
    pub(crate) events: usize,
    pub(crate) bytes: usize,
}

#[derive(Debug)]
struct State {
    /// Admitted, not yet taken by the flusher.
    pending: VecDeque<Arc<Event>>,
    /// Admitted and not yet settled (pending plus the batch in flight).
    unacked_events: usize,
    unacked_bytes: usize,
    watermark: u64,
    failure: Option<DispatchError>,
    closed: bool,
    /// The flusher has ended: nothing admitted will be settled any more.
    done: bool,
}

/// The synchronous state machine of one run's window.
///
/// Invariant: the watermark only rises, only to the last seq of a settled
/// prefix, and the events it hands out to offer to best-effort observers
/// ([`Settled::to_offer`], and each event acknowledged at once) are
/// exactly the settled prefixes, in order, once the watermark covers them.
pub struct WindowCore {
    run_id: String,
    /// Marked durable as the watermark rises, before best-effort offers.
    log: Option<RunLog>,
    bounds: WindowBounds,
    state: Mutex<State>,
}

impl std::fmt::Debug for WindowCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WindowCore")
            .field("run_id", &self.run_id)
            .field("bounds", &self.bounds)
            .finish_non_exhaustive()
    }
}

impl WindowCore {
    pub(crate) fn new(run_id: String, log: Option<RunLog>, bounds: WindowBounds) -> Self {
        WindowCore {
            run_id,
            log,
            bounds,
            state: Mutex::new(State {
                pending: VecDeque::new(),
                unacked_events: 0,
                unacked_bytes: 0,
                watermark: 0,
                failure: None,
                closed: false,
                done: false,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Admits a committed event unless the window is full, failed or
    /// closed. An event larger than the byte bound is admitted into an
    /// empty window, so no event can wait forever.
    pub fn admit(&self, event: &Arc<Event>) -> Admission {
        let mut state = self.lock();
        if let Some(failure) = &state.failure {
            return Admission::Refused(WindowError::Refused(failure.clone()));
        }
        if state.closed {
            return Admission::Refused(self.closed_error(state.watermark));
        }
        let bytes = event.line().len();
        let over = state.unacked_events >= self.bounds.events
            || state.unacked_bytes.saturating_add(bytes) > self.bounds.bytes;
        if state.unacked_events > 0 && over {
            return Admission::Full;
        }
        let wake = state.pending.is_empty();
        state.pending.push_back(Arc::clone(event));
        state.unacked_events += 1;
        state.unacked_bytes = state.unacked_bytes.saturating_add(bytes);
        Admission::Queued { wake }
    }

    /// Hands the flusher everything pending, in order.
    pub fn take(&self) -> Take {
        let mut state = self.lock();
        if state.failure.is_some() {
            state.done = true;
            return Take::Done;
        }
        if state.pending.is_empty() {
            if state.closed {
                state.done = true;
                return Take::Done;
            }
            return Take::Idle;
        }
        Take::Batch(state.pending.drain(..).collect())
    }

    /// Settles a batch [`take`](Self::take) returned: raises the watermark
    /// over its acknowledged prefix, records a refusal, marks the run log
    /// durable up to the watermark, and returns the new watermark (when it
    /// rose) with the acknowledged prefix, for the caller to offer to the
    /// best-effort observers.
    pub fn settle<'a>(&self, batch: &'a [Arc<Event>], outcome: BatchOutcome) -> Settled<'a> {
        let acknowledged = outcome.acknowledged.min(batch.len());
        let raised = {
            let mut state = self.lock();
            state.unacked_events = state.unacked_events.saturating_sub(batch.len());
            let bytes: usize = batch.iter().map(|e| e.line().len()).sum();
            state.unacked_bytes = state.unacked_bytes.saturating_sub(bytes);
            let raised = acknowledged
                .checked_sub(1)
                .and_then(|last| batch.get(last))
                .map(|e| e.seq())
                .filter(|seq| *seq > state.watermark);
            if let Some(seq) = raised {
                state.watermark = seq;
            }
            if let Some(error) = outcome.error {
                state.failure.get_or_insert(error);
                // Nothing after the refusal is offered again by the window;
                // the engine's closing re-offer reads them from the log.
                let dropped = std::mem::take(&mut state.pending);
                state.unacked_events = state.unacked_events.saturating_sub(dropped.len());
            }
            raised
        };
        if let (Some(seq), Some(log)) = (raised, &self.log) {
            log.mark_durable(seq);
        }
        Settled {
            raised,
            to_offer: &batch[..acknowledged],
        }
    }

    /// Whether `seq` is durable: `Some(Ok)` once the watermark covers it,
    /// `Some(Err)` once it never will, `None` while it may still become so.
    pub fn durable(&self, seq: u64) -> Option<Result<(), WindowError>> {
        let state = self.lock();
        if state.watermark >= seq {
            return Some(Ok(()));
        }
        if let Some(failure) = &state.failure {
            return Some(Err(WindowError::Refused(failure.clone())));
        }
        if state.done || (state.closed && state.unacked_events == 0) {
            return Some(Err(self.closed_error(state.watermark)));
        }
        None
    }

    /// Takes no more events; what was admitted is still acknowledged.
    pub fn close(&self) {
        self.lock().closed = true;
    }

    /// Whether the flusher has ended (or there is nothing it would do).
    pub fn finished(&self) -> bool {
        let state = self.lock();
        state.done || (state.closed && state.unacked_events == 0)
    }

    /// The highest seq every required observer acknowledged, all lower
    /// seqs of the run included (0 before the first).
    pub fn watermark(&self) -> u64 {
        self.lock().watermark
    }

    /// The refusal that stopped the window, if any.
    pub fn failure(&self) -> Option<DispatchError> {
        self.lock().failure.clone()
    }

    /// Acknowledges `event` at once: for a pipeline without required
    /// observers, where committed is durable. On `Ok` the caller offers
    /// `event` to the best-effort observers.
    pub(crate) fn acknowledge_now(&self, event: &Arc<Event>) -> Result<(), WindowError> {
        {
            let mut state = self.lock();
            if let Some(failure) = &state.failure {
                return Err(WindowError::Refused(failure.clone()));
            }
            if state.closed {
                return Err(self.closed_error(state.watermark));
            }
            state.watermark = state.watermark.max(event.seq());
        }
        if let Some(log) = &self.log {
            log.mark_durable(event.seq());
        }
        Ok(())
    }

    fn closed_error(&self, watermark: u64) -> WindowError {
        WindowError::Closed {
            run_id: self.run_id.clone(),
            watermark,
        }
    }
}
