//! The dispatch pipeline: required observers in order, then best-effort
//! observers through bounded queues. `PipelineBuilder`/`PipelineConfig`
//! set the per-call deadline, the best-effort capacity and the window's
//! bounds; each required call is guarded against panics
//! (`acknowledge_batch`, `dispatch_skipping`); `offer_best_effort` and
//! `shutdown(deadline)` share one lock, so an offer is delivered or
//! counted as dropped; `Pipeline::window(log)` gives a run its window.

use crate::observer::{BatchError, BestEffortObserver, ObserverError, RequiredObserver};
use crate::queue::{Receiver, Sender, TrySendError, bounded};
use crate::run_window::RunWindow;
use crate::window::{WindowBounds, WindowCore};
use futures_util::FutureExt;
use keel_eventlog::{Event, RunLog};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[cfg(loom)]
use loom::sync::{Mutex, MutexGuard};
#[cfg(not(loom))]
use std::sync::{Mutex, MutexGuard};

/// Locks, recovering from poisoning: the guarded values (an optional
/// sender, an optional worker handle) are valid in every state.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// How the pipeline treats its observers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PipelineConfig {
    /// How long one required observer may take to acknowledge one event
    /// before the dispatch fails with `DeadlineExceeded`. Default 10 s.
    pub required_deadline: Duration,
    /// Queue capacity of each best-effort observer. Default 1,024.
    pub best_effort_capacity: usize,
    /// Most committed events one run may have in flight to the required
    /// observers before its next commit waits (see [`RunWindow`]).
    /// Default 256; 0 is taken as 1, which acknowledges one event at a
    /// time. Keep it below the run log's `max_events`: the closing
    /// re-offer reads unacknowledged events from the log.
    pub window_events: usize,
    /// Most bytes (event lines) one run may have in flight to the required
    /// observers. Default 1 MiB; an event larger than this is admitted
    /// alone.
    pub window_bytes: usize,
}

impl Default for PipelineConfig {
    fn default() -> Self {
        PipelineConfig {
            required_deadline: Duration::from_secs(10),
            best_effort_capacity: 1024,
            window_events: 256,
            window_bytes: 1 << 20,
        }
    }
}

/// What one batch achieved across every required observer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchOutcome {
    /// How many leading events of the batch every required observer
    /// acknowledged.
    pub acknowledged: usize,
    /// The first refusal, when not all of them were.
    pub error: Option<DispatchError>,
}

impl BatchOutcome {
    /// Every one of `len` events acknowledged.
    pub fn all(len: usize) -> BatchOutcome {
        BatchOutcome {
            acknowledged: len,
            error: None,
        }
    }
}

/// A required observer refused an event. The event stays committed in the
/// log under its sequence; later required observers and every best-effort
/// observer did **not** see it (they only see acknowledged events).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("required observer {observer} refused run {run_id} seq {seq}: {source}")]
pub struct DispatchError {
    /// The observer's name.
    pub observer: String,
    /// Its position in construction order.
    pub index: usize,
    /// The run.
    pub run_id: String,
    /// The committed sequence it refused.
    pub seq: u64,
    /// Why.
    #[source]
    pub source: ObserverError,
}

/// Counters of one best-effort observer.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BestEffortStats {
    /// The observer's name.
    pub name: String,
    /// Events put on its queue.
    pub enqueued: u64,
    /// Events it finished handling.
    pub delivered: u64,
    /// Events dropped because its queue was full.
    pub dropped_full: u64,
    /// Events dropped because it was already closed.
    pub dropped_closed: u64,
    /// Events during which it panicked (each counted, not delivered).
    pub panicked: u64,
}

/// Counters of the whole pipeline.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PipelineStats {
    /// Events every required observer acknowledged.
    pub acknowledged: u64,
    /// Events some required observer refused.
    pub refused: u64,
    /// One entry per best-effort observer, in construction order.
    pub best_effort: Vec<BestEffortStats>,
}

/// What shutdown achieved within its deadline.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ShutdownReport {
    /// Best-effort observers that drained their queue and flushed.
    pub flushed: Vec<String>,
    /// Best-effort observers still busy at the deadline (left to finish on
    /// their own thread; nothing waits for them).
    pub timed_out: Vec<String>,
}

#[derive(Default)]
struct Counters {
    enqueued: AtomicU64,
    delivered: AtomicU64,
    dropped_full: AtomicU64,
    dropped_closed: AtomicU64,
    panicked: AtomicU64,
}

struct BestEffortSlot {
    name: String,
    /// `None` once closed. Sending and closing both take this lock, so a
    /// send either lands before the close (and is drained) or sees `None`
    /// (and is counted as dropped): there is no send/close race.
    sender: Mutex<Option<Sender<Arc<Event>>>>,
    counters: Arc<Counters>,
    worker: Mutex<Option<Worker>>,
}

struct Worker {
    #[cfg(not(loom))]
    done: crossbeam_channel::Receiver<()>,
    #[cfg(loom)]
    thread: loom::thread::JoinHandle<()>,
}

/// Required observers, then best-effort observers, behind one run log (or
/// many: the pipeline is shared by every run of an engine).
///
/// The engine commits an event to the run's log first, then calls
/// [`dispatch`](Pipeline::dispatch). Required observers are awaited one by
/// one in construction order; the first error stops the dispatch and is
/// returned. Only an event every required observer acknowledged is offered
/// to best-effort observers, which never block.
pub struct Pipeline {
    required: Vec<Arc<dyn RequiredObserver>>,
    /// Dropping the pipeline drops each sender, which closes its queue and
    /// ends its worker thread (not waited for: `shutdown` does that).
    best_effort: Vec<BestEffortSlot>,
    config: PipelineConfig,
    acknowledged: AtomicU64,
    refused: AtomicU64,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field(
                "required",
                &self
                    .required
                    .iter()
                    .map(|o| o.name().to_owned())
                    .collect::<Vec<_>>(),
            )
            .field("stats", &self.stats())
            .finish()
    }
}

/// Builds a [`Pipeline`]; observers are called in the order they are added.
#[derive(Default)]
pub struct PipelineBuilder {
    required: Vec<Arc<dyn RequiredObserver>>,
    best_effort: Vec<Box<dyn BestEffortObserver>>,
    config: PipelineConfig,
}

impl std::fmt::Debug for PipelineBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PipelineBuilder")
            .field("required", &self.required.len())
            .field("best_effort", &self.best_effort.len())
            .field("config", &self.config)
            .finish()
    }
}

impl PipelineBuilder {
    /// An empty builder with the default configuration.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the configuration.
    pub fn config(mut self, config: PipelineConfig) -> Self {
        self.config = config;
        self
    }

    /// Adds a required observer after those already added.
    pub fn required(mut self, observer: Arc<dyn RequiredObserver>) -> Self {
        self.required.push(observer);
        self
    }

    /// Adds a best-effort observer after those already added.
    pub fn best_effort(mut self, observer: Box<dyn BestEffortObserver>) -> Self {
        self.best_effort.push(observer);
        self
    }

    /// Starts one thread per best-effort observer and returns the pipeline.
    pub fn build(self) -> Pipeline {
        let capacity = self.config.best_effort_capacity.max(1);
        let best_effort = self
            .best_effort
            .into_iter()
            .map(|observer| spawn_worker(observer, capacity))
            .collect();
        Pipeline {
            required: self.required,
            best_effort,
            config: self.config,
            acknowledged: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }
}

fn spawn_worker(mut observer: Box<dyn BestEffortObserver>, capacity: usize) -> BestEffortSlot {
    let (tx, rx): (Sender<Arc<Event>>, Receiver<Arc<Event>>) = bounded(capacity);
    let counters = Arc::new(Counters::default());
    let name = observer.name().to_owned();
    let worker_counters = Arc::clone(&counters);
    #[allow(unused_mut)] // FnMut in std builds, called once under loom
    let mut run = move || {
        while let Ok(event) = rx.recv() {
            match std::panic::catch_unwind(AssertUnwindSafe(|| observer.observe(&event))) {
                Ok(()) => worker_counters.delivered.fetch_add(1, Ordering::Relaxed),
                Err(_) => worker_counters.panicked.fetch_add(1, Ordering::Relaxed),
            };
        }
        let _ = std::panic::catch_unwind(AssertUnwindSafe(|| observer.flush()));
    };
    #[cfg(not(loom))]
    let worker = {
        let (done_tx, done_rx) = crossbeam_channel::bounded::<()>(1);
        let spawned = std::thread::Builder::new()
            .name(format!("keel-observer-{name}"))
            .spawn(move || {
                run();
                let _ = done_tx.send(());
            });
        // If the thread cannot be spawned, the receiver is gone with it:
        // every send reports Disconnected and is counted as dropped.
        spawned.ok().map(|_| Worker { done: done_rx })
    };
    #[cfg(loom)]
    let worker = Some(Worker {
        thread: loom::thread::spawn(run),
    });
    BestEffortSlot {
        name,
        sender: Mutex::new(Some(tx)),
        counters,
        worker: Mutex::new(worker),
    }
}

/// Like [`observe_guarded`], for a batch: a panic refuses the whole batch.
async fn observe_batch_guarded(
    observer: &dyn RequiredObserver,
    events: &[Arc<Event>],
) -> Result<(), BatchError> {
    let call = async move { observer.observe_batch(events).await };
    match AssertUnwindSafe(call).catch_unwind().await {
        Ok(result) => result,
        Err(_panic) => Err(BatchError {
            acknowledged: 0,
            source: ObserverError::Panicked,
        }),
    }
}

fn deadline_error(deadline: Duration) -> ObserverError {
    ObserverError::DeadlineExceeded {
        deadline_ms: u64::try_from(deadline.as_millis()).unwrap_or(u64::MAX),
    }
}

/// Calls `observer.observe(event)` and awaits the future it returns, with
/// both parts under one unwind guard: a panic in the synchronous call that
/// builds the future and a panic while the future is polled both become
/// [`ObserverError::Panicked`] instead of unwinding into the caller's task.
/// The call is deferred into the first poll of the guarded future, so it
/// also runs under the caller's deadline.
async fn observe_guarded(
    observer: &dyn RequiredObserver,
    event: &Arc<Event>,
) -> Result<(), ObserverError> {
    let call = async move { observer.observe(event).await };
    match AssertUnwindSafe(call).catch_unwind().await {
        Ok(result) => result,
        Err(_panic) => Err(ObserverError::Panicked),
    }
}

impl Pipeline {
    /// A pipeline with no observers.
    pub fn empty() -> Pipeline {
        PipelineBuilder::new().build()
    }

    /// The configuration.
    pub fn config(&self) -> &PipelineConfig {
        &self.config
    }

    /// Offers a committed event to every observer, using the configured
    /// deadline for each required observer.
    pub async fn dispatch(&self, event: &Arc<Event>) -> Result<(), DispatchError> {
        self.dispatch_within(event, self.config.required_deadline)
            .await
    }

    /// Offers a committed event to every observer. Each required observer
    /// gets at most `deadline` (the operation's remaining budget, when the
    /// caller has a tighter one). Dropping the returned future cancels the
    /// dispatch: best-effort observers then do not see the event.
    ///
    /// A required observer that panics, either in `observe` itself (before
    /// returning its future) or while that future is polled, refuses the
    /// event with [`ObserverError::Panicked`]; the panic never reaches the
    /// caller's task. A best-effort observer's panic (in `observe` or
    /// `flush`) stays on its own thread and is counted.
    pub async fn dispatch_within(
        &self,
        event: &Arc<Event>,
        deadline: Duration,
    ) -> Result<(), DispatchError> {
        self.dispatch_skipping(event, deadline, &[]).await
    }

    /// Like [`dispatch_within`](Self::dispatch_within), but without calling
    /// the required observers whose construction index is in `skip` (those
    /// that already failed while a run is being closed), so the others still
    /// receive the whole history. An event dispatched with a non-empty `skip`
    /// is not offered to best-effort observers: not every required observer
    /// acknowledged it.
    pub async fn dispatch_skipping(
        &self,
        event: &Arc<Event>,
        deadline: Duration,
        skip: &[usize],
    ) -> Result<(), DispatchError> {
        for (index, observer) in self.required.iter().enumerate() {
            if skip.contains(&index) {
                continue;
            }
            let outcome = tokio::time::timeout(deadline, observe_guarded(&**observer, event)).await;
            let result = outcome.unwrap_or_else(|_elapsed| Err(deadline_error(deadline)));
            if let Err(source) = result {
                self.refused.fetch_add(1, Ordering::Relaxed);
                return Err(DispatchError {
                    observer: observer.name().to_owned(),
                    index,
                    run_id: event.run_id().to_string(),
                    seq: event.seq(),
                    source,
                });
            }
        }
        if skip.is_empty() {
            self.acknowledged.fetch_add(1, Ordering::Relaxed);
            self.offer_best_effort(event);
        }
        Ok(())
    }

    /// Opens the window through which one run's events reach the
    /// observers: group commit within the run, bounded by
    /// [`PipelineConfig::window_events`] and
    /// [`window_bytes`](PipelineConfig::window_bytes). `log` is the run's
    /// log, marked durable as acknowledgements come back.
    pub fn window(self: &Arc<Self>, log: RunLog) -> RunWindow {
        let run_id = log.run_id().to_string();
        RunWindow::new(self.new_core(run_id, Some(log)))
    }

    /// The window's state machine alone, without the flusher task or a
    /// log to mark durable: what [`window`](Self::window) wraps, for
    /// driving it by hand (the loom model does).
    pub fn window_core(self: &Arc<Self>, run_id: String) -> WindowCore {
        self.new_core(run_id, None)
    }

    fn new_core(self: &Arc<Self>, run_id: String, log: Option<RunLog>) -> WindowCore {
        let bounds = WindowBounds {
            events: self.config.window_events.max(1),
            bytes: self.config.window_bytes.max(1),
        };
        WindowCore::new(Arc::clone(self), run_id, log, bounds)
    }

    /// How many required observers the pipeline has.
    pub fn required_count(&self) -> usize {
        self.required.len()
    }

    /// Offers consecutive events of one run to every required observer in
    /// construction order with [`RequiredObserver::observe_batch`], each
    /// call within the configured deadline. A later observer is offered
    /// only the prefix every earlier one acknowledged, so a refused event
    /// reaches no observer after the one that refused it. Best-effort
    /// observers are not offered anything here (the window does that).
    pub async fn acknowledge_batch(&self, batch: &[Arc<Event>]) -> BatchOutcome {
        let deadline = self.config.required_deadline;
        let mut limit = batch.len();
        let mut error = None;
        for (index, observer) in self.required.iter().enumerate() {
            if limit == 0 {
                break;
            }
            let offered = &batch[..limit];
            let outcome =
                tokio::time::timeout(deadline, observe_batch_guarded(&**observer, offered)).await;
            let result = outcome.unwrap_or_else(|_elapsed| {
                Err(BatchError {
                    acknowledged: 0,
                    source: deadline_error(deadline),
                })
            });
            let Err(refusal) = result else { continue };
            // An error that claims the whole offer was accepted is taken as
            // refusing its last event: fewer acknowledged is always safe.
            // Each refusal lowers the limit, so the last one names the
            // first seq that is not acknowledged.
            limit = refusal.acknowledged.min(limit - 1);
            error = Some(DispatchError {
                observer: observer.name().to_owned(),
                index,
                run_id: batch[limit].run_id().to_string(),
                seq: batch[limit].seq(),
                source: refusal.source,
            });
        }
        if error.is_some() {
            self.refused.fetch_add(1, Ordering::Relaxed);
        }
        self.acknowledged.fetch_add(limit as u64, Ordering::Relaxed);
        BatchOutcome {
            acknowledged: limit,
            error,
        }
    }

    /// Puts `event` on every best-effort queue without waiting.
    pub(crate) fn offer_best_effort(&self, event: &Arc<Event>) {
        for slot in &self.best_effort {
            let guard = lock(&slot.sender);
            let counter = match guard.as_ref() {
                None => &slot.counters.dropped_closed,
                Some(tx) => match tx.try_send(Arc::clone(event)) {
                    Ok(()) => &slot.counters.enqueued,
                    Err(TrySendError::Full(_)) => &slot.counters.dropped_full,
                    Err(TrySendError::Disconnected(_)) => &slot.counters.dropped_closed,
                },
            };
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counters for monitoring and tests.
    pub fn stats(&self) -> PipelineStats {
        PipelineStats {
            acknowledged: self.acknowledged.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            best_effort: self
                .best_effort
                .iter()
                .map(|s| BestEffortStats {
                    name: s.name.clone(),
                    enqueued: s.counters.enqueued.load(Ordering::Relaxed),
                    delivered: s.counters.delivered.load(Ordering::Relaxed),
                    dropped_full: s.counters.dropped_full.load(Ordering::Relaxed),
                    dropped_closed: s.counters.dropped_closed.load(Ordering::Relaxed),
                    panicked: s.counters.panicked.load(Ordering::Relaxed),
                })
                .collect(),
        }
    }

    /// Closes every best-effort queue and waits, until `deadline` at most,
    /// for each observer to drain what was queued and flush. Later
    /// dispatches still reach required observers; best-effort offers are
    /// counted as `dropped_closed`. Calling it again reports nothing new.
    pub fn shutdown(&self, deadline: Duration) -> ShutdownReport {
        let until = Instant::now() + deadline;
        // Close every queue first, so all observers drain in parallel.
        for slot in &self.best_effort {
            lock(&slot.sender).take();
        }
        let mut report = ShutdownReport::default();
        for slot in &self.best_effort {
            let Some(worker) = lock(&slot.worker).take() else {
                continue;
            };
            #[cfg(not(loom))]
            let finished = worker.done.recv_deadline(until).is_ok();
            #[cfg(loom)]
            let finished = {
                let _ = until;
                worker.thread.join().is_ok()
            };
            if finished {
                report.flushed.push(slot.name.clone());
            } else {
                report.timed_out.push(slot.name.clone());
            }
        }
        report
    }
}
