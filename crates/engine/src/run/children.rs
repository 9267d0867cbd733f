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
use keel_eventlog::{CommitError, Event, Payload, RunLog};
use keel_message::{CallId, RunId};
#[cfg(loom)]
use loom::sync::atomic::AtomicBool;
#[cfg(loom)]
use loom::sync::{Mutex, MutexGuard};
use std::sync::Arc;
#[cfg(not(loom))]
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
#[cfg(not(loom))]
use std::sync::{Mutex, MutexGuard};
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

/// The final outcome's slot is not part of the registry's protocol (one
/// writer, read after the writer's task ended): always std.
fn lock_std<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The outcome a run's terminal records, set when the terminal is
/// committed (before its dispatch): shared by the run task and its
/// parent, which reads a completed child's final answer from it.
#[derive(Clone, Default)]
pub(crate) struct FinalOutcome(Arc<std::sync::Mutex<Option<RunOutcome>>>);

impl FinalOutcome {
    pub(crate) fn set(&self, outcome: RunOutcome) {
        *lock_std(&self.0) = Some(outcome);
    }
    pub(crate) fn get(&self) -> Option<RunOutcome> {
        lock_std(&self.0).clone()
    }
}

/// Whether a child's link (the parent's `tool.sub_run`) is in the
/// parent's log: set by the child's task right after the commit, read by
/// the parent once the child ended.
pub(crate) type Linked = Arc<AtomicBool>;

/// A fresh, unset [`Linked`] flag.
pub(crate) fn unlinked() -> Linked {
    Arc::new(AtomicBool::new(false))
}

/// Commits a child's link (the parent's `tool.sub_run`) to the parent's
/// `log` and, only once it is in, sets `linked`: the flag never claims a
/// link the log lacks, whoever reads it when.
pub(crate) fn commit_link(
    log: &RunLog,
    link: &Payload,
    linked: &Linked,
) -> Result<std::sync::Arc<Event>, CommitError> {
    let event = log.commit(link)?;
    linked.store(true, Ordering::SeqCst);
    Ok(event)
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
    linked: Linked,
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
    pub(crate) fn insert(&self, call_id: CallId, child: ChildRun, linked: Linked) {
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

/// Loom models of the registry: concurrent reservations never pass the
/// bound and every child a reservation let start is found; a release
/// racing a reservation; and the link flag, set right after the commit,
/// never claims a link the log does not hold.
#[cfg(all(test, loom))]
mod loom_model {
    #![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]
    use super::*;
    use keel_eventlog::{Extra, LogConfig, SubRunStarted, SystemClock, ToolRef, TurnRef};
    use keel_message::ToolName;
    use loom::sync::Arc as LoomArc;

    fn log(id: &str) -> RunLog {
        RunLog::new(
            RunId::parse(id).unwrap(),
            LogConfig::default(),
            std::sync::Arc::new(SystemClock),
        )
        .unwrap()
    }

    fn child(id: &str) -> ChildRun {
        let (_tx, ended) = watch::channel(None);
        ChildRun {
            run_id: RunId::parse(id).unwrap(),
            log: log(id),
            cancel: CancelToken::default(),
            ended,
            final_outcome: FinalOutcome::default(),
        }
    }

    fn call(i: usize) -> CallId {
        CallId::parse(&format!("c{i}")).unwrap()
    }

    #[test]
    fn concurrent_reservations_never_pass_the_bound() {
        loom::model(|| {
            let children = LoomArc::new(Children::default());
            let threads: Vec<_> = (0..2)
                .map(|i| {
                    let children = LoomArc::clone(&children);
                    loom::thread::spawn(move || {
                        let admitted = children.reserve(1).is_ok();
                        if admitted {
                            children.insert(call(i), child(&format!("run_{i}")), unlinked());
                        }
                        admitted
                    })
                })
                .collect();
            let admitted: Vec<bool> = threads.into_iter().map(|t| t.join().unwrap()).collect();
            assert_eq!(admitted.iter().filter(|a| **a).count(), 1);
            for (i, admitted) in admitted.into_iter().enumerate() {
                assert_eq!(children.of_call(&call(i)).is_some(), admitted);
            }
            assert_eq!(children.reserve(1), Err(2));
        });
    }

    #[test]
    fn a_release_racing_a_reservation_leaves_the_count_exact() {
        loom::model(|| {
            let children = LoomArc::new(Children::default());
            children.reserve(1).unwrap();
            let releasing = LoomArc::clone(&children);
            let release = loom::thread::spawn(move || releasing.release());
            let reserving = LoomArc::clone(&children);
            let reserve = loom::thread::spawn(move || reserving.reserve(1).is_ok());
            release.join().unwrap();
            let admitted = reserve.join().unwrap();
            // Admitted: the count is 1 again; refused: the release came
            // after, and the count is 0. Either way one more fits exactly
            // when the count is 0.
            assert_eq!(children.reserve(1).is_ok(), !admitted);
        });
    }

    #[test]
    fn the_link_flag_never_claims_a_link_the_log_lacks() {
        loom::model(|| {
            let parent = log("run_parent");
            parent
                .commit(&Payload::RunStarted(Default::default()))
                .unwrap();
            parent
                .commit(&Payload::TurnStarted(TurnRef {
                    turn: 1,
                    extra: Extra::new(),
                }))
                .unwrap();
            parent
                .commit(&Payload::ToolStarted(ToolRef {
                    turn: 1,
                    call_id: call(0),
                    tool: ToolName::parse("a0").unwrap(),
                    extra: Extra::new(),
                }))
                .unwrap();
            let linked = unlinked();
            let link = Payload::ToolSubRun(SubRunStarted {
                turn: 1,
                call_id: call(0),
                run_id: RunId::parse("run_child").unwrap(),
                extra: Extra::new(),
            });
            let (child_log, child_flag) = (parent.clone(), Linked::clone(&linked));
            let child = loom::thread::spawn(move || {
                commit_link(&child_log, &link, &child_flag).unwrap();
            });
            let in_log = |log: &RunLog| {
                log.retained_after(0)
                    .iter()
                    .any(|e| e.kind().to_string() == "tool.sub_run")
            };
            // The parent's side: whenever it reads the flag set, the log
            // holds the link.
            if linked.load(Ordering::SeqCst) {
                assert!(in_log(&parent));
            }
            child.join().unwrap();
            assert_eq!(linked.load(Ordering::SeqCst), in_log(&parent));
        });
    }
}
