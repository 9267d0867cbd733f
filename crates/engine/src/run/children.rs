//! A run's children: the sub-runs it started, by call, until the run ends;
//! how many it started (for `limits.max_sub_runs`); and ending every live
//! child (cancel, then wait for its task) before the run commits its own
//! terminals, so a child never outlives its parent and its terminal always
//! comes first. Also the pieces the engine's registry shares with a run
//! task: how the task ended ([`RunEnded`]) and the outcome its terminal
//! records ([`FinalOutcome`]).

use crate::cancel::CancelToken;
use crate::error::StartError;
use crate::request::{RunOutcome, RunRequest};
use keel_eventlog::RunLog;
use keel_message::{CallId, RunId};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::watch;

/// How a run task ended, as the registry learns it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RunEnded {
    /// Every required observer acknowledged every event, terminals
    /// included.
    pub(crate) acknowledged: bool,
}

/// Starts a child run in the engine the parent runs in: what the run loop
/// needs of the engine's registry, and nothing else.
pub(crate) trait StartChild: Send + Sync {
    /// Registers and spawns a run of `request` (whose `parent` is set).
    /// Its task records the parent's `tool.sub_run` first.
    fn start_child(&self, request: RunRequest) -> Result<ChildRun, StartError>;
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The outcome a run's terminal records, set when the terminal is
/// committed (before its dispatch): shared by the run task and its
/// parent, which reads a completed child's final answer from it.
#[derive(Clone, Default)]
pub(crate) struct FinalOutcome(Arc<Mutex<Option<RunOutcome>>>);

impl FinalOutcome {
    pub(crate) fn set(&self, outcome: RunOutcome) {
        *lock(&self.0) = Some(outcome);
    }
    pub(crate) fn get(&self) -> Option<RunOutcome> {
        lock(&self.0).clone()
    }
}

/// The parent's handle on one child.
#[derive(Clone)]
pub(crate) struct ChildRun {
    pub(crate) run_id: RunId,
    pub(crate) log: RunLog,
    pub(crate) cancel: CancelToken,
    pub(crate) ended: watch::Receiver<Option<RunEnded>>,
    pub(crate) final_outcome: FinalOutcome,
}

impl ChildRun {
    /// Waits until the child's task has ended: its terminals are committed
    /// and were offered to the observers. A task that went away without
    /// saying (the sender dropped) has ended too.
    pub(crate) async fn wait(&self) {
        let mut ended = self.ended.clone();
        let _ = ended.wait_for(Option::is_some).await;
    }
}

/// One started child.
struct Slot {
    call_id: CallId,
    child: ChildRun,
    /// Whether the parent's `tool.sub_run` naming it is in the parent's
    /// log (set by the child's task, right after the commit; shared from
    /// before the child is spawned, so the flag cannot be missed).
    linked: Arc<AtomicBool>,
}

#[derive(Default)]
struct State {
    /// Children counted against `limits.max_sub_runs` (started or being
    /// started).
    counted: u32,
    slots: Vec<Slot>,
}

/// The children of one run. Shared by the run task and the engine's
/// registry (which reads it when a shutdown commits an abandoned run's
/// terminals). Bounded by `limits.max_sub_runs`.
#[derive(Default)]
pub(crate) struct Children {
    state: Mutex<State>,
}

/// A child as its parent's tool terminal needs it.
pub(crate) struct ChildOf {
    pub(crate) child: ChildRun,
    pub(crate) linked: bool,
}

impl Children {
    /// Counts one more child against `max`. `Err` carries the count it
    /// would have been: nothing is counted then.
    pub(crate) fn reserve(&self, max: u32) -> Result<(), u32> {
        let mut state = lock(&self.state);
        let next = state.counted.saturating_add(1);
        if next > max {
            return Err(next);
        }
        state.counted = next;
        Ok(())
    }

    /// Gives back a reservation whose child did not start.
    pub(crate) fn release(&self) {
        let mut state = lock(&self.state);
        state.counted = state.counted.saturating_sub(1);
    }

    /// Records the child started for `call_id`.
    pub(crate) fn insert(&self, call_id: CallId, child: ChildRun, linked: Arc<AtomicBool>) {
        lock(&self.state).slots.push(Slot {
            call_id,
            child,
            linked,
        });
    }

    /// The child `call_id` started, if it started one.
    pub(crate) fn of_call(&self, call_id: &CallId) -> Option<ChildOf> {
        let state = lock(&self.state);
        let slot = state.slots.iter().find(|s| &s.call_id == call_id)?;
        Some(ChildOf {
            child: slot.child.clone(),
            linked: slot.linked.load(Ordering::SeqCst),
        })
    }

    /// Forgets the child of `call_id` once the call's terminal is
    /// committed (the count stays).
    pub(crate) fn remove(&self, call_id: &CallId) {
        lock(&self.state).slots.retain(|s| &s.call_id != call_id);
    }

    /// Cancels every child, then waits for each one's task to end. Each
    /// child does the same with its own children before its terminals, so
    /// a tree closes innermost first. The children stay: the parent's
    /// closing terminals read their outcomes.
    pub(crate) async fn end_all(&self) {
        let children: Vec<ChildRun> = lock(&self.state)
            .slots
            .iter()
            .map(|s| s.child.clone())
            .collect();
        for child in &children {
            child.cancel.cancel();
        }
        for child in &children {
            child.wait().await;
        }
    }
}
