//! The async side of a run's window: submitting with backpressure,
//! waiting at a barrier, and the flusher task that hands each batch to
//! the required observers and marks the run log durable.

use crate::dispatch::DispatchError;
use crate::pipeline::Pipeline;
use crate::window::{Admission, Take, WindowCore, WindowError};
use keel_eventlog::{Event, RunLog};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::Notify;

struct Shared {
    core: WindowCore,
    /// Acknowledges the batches and gets the settled events' best-effort
    /// offers.
    pipeline: Arc<Pipeline>,
    /// Wakes the flusher: an admission into an empty queue, or the close.
    work: Notify,
    /// Wakes submitters waiting for room and barriers waiting for the
    /// watermark: every settle, and the flusher's end.
    changed: Notify,
    flusher_started: AtomicBool,
}

/// One run's window onto the pipeline: events go in as they are
/// committed, and the run waits only when the window is full or at a
/// barrier ([`durable`](RunWindow::durable)).
///
/// A flusher task (started on the first submit, on the current tokio
/// runtime) takes everything pending as one batch, offers it to each
/// required observer with [`observe_batch`], raises the watermark over
/// what all of them acknowledged, marks the run log durable up to it
/// ([`RunLog::mark_durable`]) and offers those events to the best-effort
/// observers. The first refusal stops the window: nothing from the
/// refused event on is acknowledged, and every later submit or barrier
/// returns the refusal.
///
/// Dropping the window closes it; the flusher still acknowledges what was
/// admitted, then ends.
///
/// [`observe_batch`]: crate::RequiredObserver::observe_batch
/// [`RunLog::mark_durable`]: keel_eventlog::RunLog::mark_durable
pub struct RunWindow {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for RunWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunWindow")
            .field("core", &self.shared.core)
            .field("watermark", &self.watermark())
            .finish()
    }
}

/// Opening a run's window lives with the window (the pipeline module does
/// not depend on its async side).
impl Pipeline {
    /// Opens the window through which one run's events reach the
    /// observers: group commit within the run, bounded by
    /// [`PipelineConfig::window_events`](crate::PipelineConfig::window_events) and
    /// [`window_bytes`](crate::PipelineConfig::window_bytes). `log` is the
    /// run's log, marked durable as acknowledgements come back.
    pub fn window(self: &Arc<Self>, log: RunLog) -> RunWindow {
        let run_id = log.run_id().to_string();
        RunWindow::new(Arc::clone(self), self.new_core(run_id, Some(log)))
    }
}

impl RunWindow {
    fn new(pipeline: Arc<Pipeline>, core: WindowCore) -> RunWindow {
        RunWindow {
            shared: Arc::new(Shared {
                core,
                pipeline,
                work: Notify::new(),
                changed: Notify::new(),
                flusher_started: AtomicBool::new(false),
            }),
        }
    }

    /// Hands a committed event of this run to the observers. Returns once
    /// it is admitted, waiting while the window is full; an error means an
    /// earlier (or this) event was refused, or the window is closed.
    pub async fn submit(&self, event: &Arc<Event>) -> Result<(), WindowError> {
        let shared = &self.shared;
        if shared.pipeline.required_count() == 0 {
            shared.core.acknowledge_now(event)?;
            shared.pipeline.offer_best_effort(event);
            return Ok(());
        }
        loop {
            let changed = shared.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            match shared.core.admit(event) {
                Admission::Queued { wake } => {
                    self.start_flusher()?;
                    if wake {
                        shared.work.notify_one();
                    }
                    return Ok(());
                }
                Admission::Full => changed.await,
                Admission::Refused(error) => return Err(error),
            }
        }
    }

    /// Waits until `seq` is durable: acknowledged by every required
    /// observer, with every lower seq. The barrier before anything that
    /// depends on durability (a tool's side effect, a question to a
    /// person, returning a run's outcome).
    pub async fn durable(&self, seq: u64) -> Result<(), WindowError> {
        loop {
            let changed = self.shared.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if let Some(result) = self.shared.core.durable(seq) {
                return result;
            }
            changed.await;
        }
    }

    /// Closes the window and waits until the flusher has acknowledged
    /// what was admitted (or stopped at a refusal). Bound it with a
    /// timeout: an observer may take up to its deadline per batch.
    pub async fn finish(&self) {
        self.shared.core.close();
        self.shared.work.notify_one();
        loop {
            let changed = self.shared.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.shared.core.finished() {
                return;
            }
            changed.await;
        }
    }

    /// The durable watermark: every seq up to it is acknowledged.
    pub fn watermark(&self) -> u64 {
        self.shared.core.watermark()
    }

    /// The refusal that stopped the window, if any.
    pub fn failure(&self) -> Option<DispatchError> {
        self.shared.core.failure()
    }

    /// Starts the flusher on the current runtime, once.
    fn start_flusher(&self) -> Result<(), WindowError> {
        if self.shared.flusher_started.load(Ordering::Acquire) {
            return Ok(());
        }
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| WindowError::NoRuntime)?;
        if !self.shared.flusher_started.swap(true, Ordering::AcqRel) {
            runtime.spawn(flush(Arc::clone(&self.shared)));
        }
        Ok(())
    }
}

impl Drop for RunWindow {
    fn drop(&mut self) {
        self.shared.core.close();
        self.shared.work.notify_one();
    }
}

/// The flusher: one per run, so batches, acknowledgements and best-effort
/// offers stay in sequence order.
async fn flush(shared: Arc<Shared>) {
    loop {
        match shared.core.take() {
            Take::Batch(batch) => {
                let outcome = shared.pipeline.acknowledge_batch(&batch).await;
                let settled = shared.core.settle(&batch, outcome);
                for event in settled.to_offer() {
                    shared.pipeline.offer_best_effort(event);
                }
                shared.changed.notify_waiters();
            }
            // `notify_one` stores a permit, so an admission between `take`
            // and this wait is not missed.
            Take::Idle => shared.work.notified().await,
            Take::Done => break,
        }
    }
    shared.changed.notify_waiters();
}
