//! Recording and fault-injecting observers.

use crate::sync::{Signal, lock, scripted_panic};
use crate::tool::HANG;
use keel_eventlog::Event;
use keel_message::RunId;
use keel_observers::{BestEffortObserver, ObserveFuture, ObserverError, RequiredObserver};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Acknowledged events, in order, deduplicated by run and sequence.
#[derive(Debug, Default)]
struct Store {
    events: Vec<Arc<Event>>,
    index: HashMap<(RunId, u64), usize>,
    redelivered: usize,
}

impl Store {
    /// Accepts `event` once; a redelivery with the same bytes succeeds
    /// without a second copy, other bytes under a known sequence conflict.
    fn accept(&mut self, event: &Arc<Event>) -> Result<(), ObserverError> {
        let key = (event.run_id().clone(), event.seq());
        if let Some(&i) = self.index.get(&key) {
            let same = self.events.get(i).is_some_and(|e| e.line() == event.line());
            if same {
                self.redelivered += 1;
                return Ok(());
            }
            return Err(ObserverError::Conflict {
                run_id: event.run_id().to_string(),
                seq: event.seq(),
            });
        }
        self.index.insert(key, self.events.len());
        self.events.push(Arc::clone(event));
        Ok(())
    }

    fn lines(&self) -> Vec<String> {
        self.events.iter().map(|e| e.line().to_owned()).collect()
    }

    fn for_run(&self, run_id: &RunId) -> Vec<Arc<Event>> {
        self.events
            .iter()
            .filter(|e| e.run_id() == run_id)
            .cloned()
            .collect()
    }
}

#[derive(Debug, Default)]
struct Recorder {
    store: Mutex<Store>,
    signal: Signal,
}

/// A [`RequiredObserver`] that acknowledges every event at once and keeps
/// it. Clones share one record: register one clone
/// (`Arc::new(recorder.clone())`) and read the other.
///
/// Delivery is at least once, so it behaves like a durable store would: a
/// redelivered event with the same bytes is acknowledged without a second
/// copy ([`redelivered`](Self::redelivered) counts them), and different
/// bytes under a sequence it already holds are refused with
/// [`ObserverError::Conflict`]. One recorder may observe many runs; the
/// events keep arrival order ([`events_for`](Self::events_for) picks one
/// run).
///
/// ```
/// use keel_testkit::{RecordingObserver, assert_lifecycle};
/// use keel_eventlog::*;
/// use keel_observers::RequiredObserver;
/// use keel_message::RunId;
/// use std::sync::Arc;
///
/// let log = RunLog::new(RunId::parse("run_1")?, LogConfig::default(), Arc::new(SystemClock))?;
/// let recorder = RecordingObserver::new();
/// let rt = tokio::runtime::Builder::new_current_thread().build()?;
/// for payload in [
///     Payload::RunStarted(RunStarted::default()),
///     Payload::RunCompleted(RunCompleted::default()),
/// ] {
///     let event = log.commit(&payload)?;
///     rt.block_on(recorder.observe(&event))?;
/// }
/// assert_eq!(recorder.len(), 2);
/// assert_lifecycle(&recorder.events());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct RecordingObserver {
    name: Arc<str>,
    shared: Arc<Recorder>,
}

impl RecordingObserver {
    /// A recorder named `recording`.
    pub fn new() -> RecordingObserver {
        Self::named("recording")
    }

    /// A recorder with this name (at most 128 bytes, as the observer
    /// contract asks).
    pub fn named(name: &str) -> RecordingObserver {
        RecordingObserver {
            name: Arc::from(name),
            shared: Arc::default(),
        }
    }

    /// The acknowledged events, in order.
    pub fn events(&self) -> Vec<Arc<Event>> {
        lock(&self.shared.store).events.clone()
    }

    /// The acknowledged events of one run, in order.
    pub fn events_for(&self, run_id: &RunId) -> Vec<Arc<Event>> {
        lock(&self.shared.store).for_run(run_id)
    }

    /// The canonical lines of the acknowledged events, in order.
    pub fn lines(&self) -> Vec<String> {
        lock(&self.shared.store).lines()
    }

    /// How many events were acknowledged (redeliveries not counted).
    pub fn len(&self) -> usize {
        lock(&self.shared.store).events.len()
    }

    /// Whether nothing was acknowledged yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Redeliveries acknowledged without a second copy.
    pub fn redelivered(&self) -> usize {
        lock(&self.shared.store).redelivered
    }

    /// Waits until at least `n` events were acknowledged.
    ///
    /// ```
    /// # let rt = tokio::runtime::Builder::new_current_thread().build()?;
    /// # rt.block_on(async {
    /// keel_testkit::RecordingObserver::new().wait_for(0).await;
    /// # });
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub async fn wait_for(&self, n: usize) {
        self.shared.signal.until(|| self.len() >= n).await;
    }
}

impl Default for RecordingObserver {
    fn default() -> Self {
        Self::new()
    }
}

impl RequiredObserver for RecordingObserver {
    fn name(&self) -> &str {
        &self.name
    }

    fn observe<'a>(&'a self, event: &'a Arc<Event>) -> ObserveFuture<'a> {
        let result = lock(&self.shared.store).accept(event);
        self.shared.signal.changed();
        Box::pin(std::future::ready(result))
    }
}

/// A [`BestEffortObserver`] that keeps every event it is handed. Clones
/// share one record; give the pipeline `Box::new(recorder.clone())`.
///
/// ```
/// use keel_testkit::RecordingBestEffort;
/// use keel_observers::BestEffortObserver;
/// let recorder = RecordingBestEffort::new();
/// let mut boxed: Box<dyn BestEffortObserver> = Box::new(recorder.clone());
/// boxed.flush();
/// assert_eq!((recorder.len(), recorder.flushed()), (0, 1));
/// ```
#[derive(Debug, Clone)]
pub struct RecordingBestEffort {
    name: Arc<str>,
    shared: Arc<BestEffortRecord>,
}

#[derive(Debug, Default)]
struct BestEffortRecord {
    state: Mutex<(Vec<Arc<Event>>, usize)>,
    signal: Signal,
}

impl RecordingBestEffort {
    /// A recorder named `recording-best-effort`.
    pub fn new() -> RecordingBestEffort {
        Self::named("recording-best-effort")
    }

    /// A recorder with this name.
    pub fn named(name: &str) -> RecordingBestEffort {
        RecordingBestEffort {
            name: Arc::from(name),
            shared: Arc::default(),
        }
    }

    /// The events handed to it, in order.
    pub fn events(&self) -> Vec<Arc<Event>> {
        lock(&self.shared.state).0.clone()
    }

    /// Their canonical lines.
    pub fn lines(&self) -> Vec<String> {
        lock(&self.shared.state)
            .0
            .iter()
            .map(|e| e.line().to_owned())
            .collect()
    }

    /// How many events it was handed.
    pub fn len(&self) -> usize {
        lock(&self.shared.state).0.len()
    }

    /// Whether it was handed nothing yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many times it was flushed (once per pipeline shutdown).
    pub fn flushed(&self) -> usize {
        lock(&self.shared.state).1
    }

    /// Waits until it was handed at least `n` events.
    pub async fn wait_for(&self, n: usize) {
        self.shared.signal.until(|| self.len() >= n).await;
    }
}

impl Default for RecordingBestEffort {
    fn default() -> Self {
        Self::new()
    }
}

impl BestEffortObserver for RecordingBestEffort {
    fn name(&self) -> &str {
        &self.name
    }

    fn observe(&mut self, event: &Arc<Event>) {
        lock(&self.shared.state).0.push(Arc::clone(event));
        self.shared.signal.changed();
    }

    fn flush(&mut self) {
        lock(&self.shared.state).1 += 1;
        self.shared.signal.changed();
    }
}

/// What a [`FaultyObserver`] does wrong. Events are counted per offer
/// (every call to `observe`, redeliveries included), from 1.
///
/// ```
/// use keel_testkit::Fault;
/// use std::time::Duration;
/// let faults = [
///     Fault::FailOn(3), Fault::FailFrom(3), Fault::HangOn(2),
///     Fault::PanicOn(1), Fault::PanicSyncOn(1), Fault::Slow(Duration::from_millis(5)),
/// ];
/// assert_eq!(faults.len(), 6);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Refuse the Nth offer with [`ObserverError::Failed`]; acknowledge the
    /// others.
    FailOn(u64),
    /// Refuse the Nth offer and every later one.
    FailFrom(u64),
    /// Never answer the Nth offer: sleep for [`HANG`](crate::HANG), far
    /// beyond any deadline (then refuse it). Cancel-safe: dropping the
    /// future leaves nothing half-done, and the event is not recorded.
    HangOn(u64),
    /// Panic while the Nth offer's future is polled (asynchronously: the
    /// `observe` call itself returns normally).
    PanicOn(u64),
    /// Panic in the Nth `observe` call itself, synchronously, before it
    /// returns a future: the case a pipeline's unwind guard around
    /// *polling* the future does not cover.
    PanicSyncOn(u64),
    /// Acknowledge every event, each only after sleeping this long (to
    /// apply backpressure). Dropping the future mid-sleep records nothing.
    Slow(Duration),
}

/// A [`RequiredObserver`] that misbehaves as its [`Fault`] says, and
/// records (like [`RecordingObserver`]) what it did acknowledge. Delays
/// use `tokio::time::sleep`, so paused time drives them.
///
/// ```
/// use keel_testkit::{Fault, FaultyObserver};
/// use keel_eventlog::*;
/// use keel_observers::{ObserverError, RequiredObserver};
/// use keel_message::RunId;
/// use std::sync::Arc;
///
/// let log = RunLog::new(RunId::parse("run_1")?, LogConfig::default(), Arc::new(SystemClock))?;
/// let observer = FaultyObserver::new(Fault::FailOn(2));
/// let rt = tokio::runtime::Builder::new_current_thread().enable_time().build()?;
/// let first = log.commit(&Payload::RunStarted(RunStarted::default()))?;
/// let second = log.commit(&Payload::RunCompleted(RunCompleted::default()))?;
/// assert_eq!(rt.block_on(observer.observe(&first)), Ok(()));
/// assert!(matches!(rt.block_on(observer.observe(&second)), Err(ObserverError::Failed(_))));
/// assert_eq!((observer.offered(), observer.acknowledged().len()), (2, 1));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct FaultyObserver {
    name: Arc<str>,
    fault: Fault,
    shared: Arc<FaultyShared>,
}

#[derive(Debug, Default)]
struct FaultyShared {
    state: Mutex<FaultyState>,
    signal: Signal,
}

#[derive(Debug, Default)]
struct FaultyState {
    store: Store,
    offered: u64,
    cancelled: u64,
    refused: u64,
    panicked: u64,
}

enum Action {
    Ack,
    Slow(Duration),
    Fail,
    Hang,
    Panic,
    PanicSync,
}

impl FaultyObserver {
    /// An observer named `faulty` with this fault.
    pub fn new(fault: Fault) -> FaultyObserver {
        Self::named("faulty", fault)
    }

    /// An observer with this name and fault.
    pub fn named(name: &str, fault: Fault) -> FaultyObserver {
        FaultyObserver {
            name: Arc::from(name),
            fault,
            shared: Arc::default(),
        }
    }

    /// Its fault.
    pub fn fault(&self) -> Fault {
        self.fault
    }

    /// The events it acknowledged, in order.
    pub fn acknowledged(&self) -> Vec<Arc<Event>> {
        lock(&self.shared.state).store.events.clone()
    }

    /// Their canonical lines.
    pub fn lines(&self) -> Vec<String> {
        lock(&self.shared.state).store.lines()
    }

    /// How many times `observe` was called.
    pub fn offered(&self) -> u64 {
        lock(&self.shared.state).offered
    }

    /// How many offers it refused (failures and ended hangs; not panics).
    pub fn refused(&self) -> u64 {
        lock(&self.shared.state).refused
    }

    /// How many offers it panicked on, in `observe` itself
    /// ([`Fault::PanicSyncOn`]) or in its future ([`Fault::PanicOn`]).
    pub fn panicked(&self) -> u64 {
        lock(&self.shared.state).panicked
    }

    /// How many `observe` futures were dropped before they finished (a
    /// deadline or a cancellation gave up on them).
    pub fn cancelled(&self) -> u64 {
        lock(&self.shared.state).cancelled
    }

    /// Waits until `observe` was called at least `n` times.
    pub async fn wait_offered(&self, n: u64) {
        self.shared.signal.until(|| self.offered() >= n).await;
    }

    fn action(&self, n: u64) -> Action {
        match self.fault {
            Fault::FailOn(k) if n == k => Action::Fail,
            Fault::FailFrom(k) if n >= k => Action::Fail,
            Fault::HangOn(k) if n == k => Action::Hang,
            Fault::PanicOn(k) if n == k => Action::Panic,
            Fault::PanicSyncOn(k) if n == k => Action::PanicSync,
            Fault::Slow(d) => Action::Slow(d),
            _ => Action::Ack,
        }
    }
}

impl RequiredObserver for FaultyObserver {
    fn name(&self) -> &str {
        &self.name
    }

    fn observe<'a>(&'a self, event: &'a Arc<Event>) -> ObserveFuture<'a> {
        let (n, action) = {
            let mut state = lock(&self.shared.state);
            state.offered += 1;
            let n = state.offered;
            let action = self.action(n);
            if let Action::PanicSync = action {
                state.panicked += 1;
            }
            (n, action)
        };
        self.shared.signal.changed();
        if let Action::PanicSync = action {
            // Panicking is this fault's purpose: the pipeline must contain
            // an observer that panics before returning its future.
            scripted_panic(format!("scripted synchronous observer panic on event {n}"));
        }
        let mut guard = OfferGuard {
            shared: &self.shared,
            done: false,
        };
        Box::pin(async move {
            match action {
                Action::Ack => {}
                Action::Slow(d) => tokio::time::sleep(d).await,
                Action::Fail => {
                    return guard.refuse(format!("scripted failure on event {n}"));
                }
                Action::Hang => {
                    tokio::time::sleep(HANG).await;
                    return guard.refuse(format!("scripted hang on event {n} ended"));
                }
                Action::Panic | Action::PanicSync => {
                    // (PanicSync never gets here: it panicked in `observe`.)
                    guard.disarm();
                    lock(&self.shared.state).panicked += 1;
                    self.shared.signal.changed();
                    // Panicking is this fault's purpose: the pipeline must catch it.
                    scripted_panic(format!("scripted observer panic on event {n}"));
                }
            }
            guard.disarm();
            let result = lock(&self.shared.state).store.accept(event);
            self.shared.signal.changed();
            result
        })
    }
}

/// Counts an offer dropped before it finished.
struct OfferGuard<'a> {
    shared: &'a FaultyShared,
    done: bool,
}

impl OfferGuard<'_> {
    /// The offer finished (it is not a cancellation).
    fn disarm(&mut self) {
        self.done = true;
    }

    fn refuse(&mut self, message: String) -> Result<(), ObserverError> {
        self.done = true;
        lock(&self.shared.state).refused += 1;
        self.shared.signal.changed();
        Err(ObserverError::Failed(message))
    }
}

impl Drop for OfferGuard<'_> {
    fn drop(&mut self) {
        if !self.done {
            lock(&self.shared.state).cancelled += 1;
            self.shared.signal.changed();
        }
    }
}

/// `observe` for an observer whose batch path is its only path: offers
/// `event` as a batch of one and returns the batch's error. An observer
/// under test writes `fn observe(..) { observe_as_batch(self, event) }`
/// and its logic once, in `observe_batch`.
///
/// ```
/// use keel_eventlog::Event;
/// use keel_observers::{BatchError, ObserveBatchFuture, ObserveFuture, ObserverError, RequiredObserver};
/// use keel_testkit::observe_as_batch;
/// use std::sync::Arc;
///
/// struct Refusing;
/// impl RequiredObserver for Refusing {
///     fn name(&self) -> &str { "refusing" }
///     fn observe<'a>(&'a self, event: &'a Arc<Event>) -> ObserveFuture<'a> {
///         observe_as_batch(self, event)
///     }
///     fn observe_batch<'a>(&'a self, _: &'a [Arc<Event>]) -> ObserveBatchFuture<'a> {
///         Box::pin(async { Err(BatchError { acknowledged: 0, source: ObserverError::Failed("full".into()) }) })
///     }
/// }
/// let event = Arc::new(Event::decode(r#"{"kind":"run.started","payload":{},"run_id":"run_1","seq":1,"ts":5}"#)?);
/// let rt = tokio::runtime::Builder::new_current_thread().build()?;
/// assert!(matches!(rt.block_on(Refusing.observe(&event)), Err(ObserverError::Failed(_))));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn observe_as_batch<'a, O: RequiredObserver + ?Sized>(
    observer: &'a O,
    event: &'a Arc<Event>,
) -> ObserveFuture<'a> {
    Box::pin(async move {
        observer
            .observe_batch(std::slice::from_ref(event))
            .await
            .map_err(|e| e.source)
    })
}
