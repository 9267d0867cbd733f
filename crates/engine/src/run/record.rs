//! Recording: commit, then hand the event to the run's window (group
//! commit within the run, waiting only when the window is full); the
//! barriers that wait for the durable watermark; and closing (terminals
//! for every open scope, then the observers re-offered what they had not
//! acknowledged).

use super::children::{Children, FinalOutcome, Linked, commit_link};
use super::delegate::commit_closing;
use super::{Interrupt, RunEnv, Step};
use crate::request::RunOutcome;
use keel_eventlog::{
    Cause, CommitError, EndReason, ErrorText, Event, Extra, Payload, RunFailed, RunLog, ScopeKey,
    TurnFailed,
};
use keel_observers::{RunWindow, WindowError};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How a failing run closes its run and turn scopes.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    pub(crate) error: ErrorText,
    pub(crate) cause: Cause,
}

pub(crate) struct Recorder {
    env: Arc<RunEnv>,
    log: RunLog,
    /// Serializes commit + submit, so the window gets each run's events in
    /// sequence order even while tools run in parallel.
    gate: tokio::sync::Mutex<()>,
    /// Committed events on their way to the required observers.
    window: RunWindow,
    /// The last sequence the closing re-offer got acknowledged by every
    /// required observer (the window's watermark covers the rest).
    reoffered: AtomicU64,
    /// Set once the run's terminal is committed: the outcome the log
    /// records (shared with the parent, for a sub-run).
    final_outcome: FinalOutcome,
    /// The run's children: a call that started one closes with the
    /// terminal its child's end maps to.
    children: Arc<Children>,
    closing_deadline: Duration,
}

impl Recorder {
    pub(crate) fn new(
        env: Arc<RunEnv>,
        log: RunLog,
        closing_deadline: Duration,
        final_outcome: FinalOutcome,
        children: Arc<Children>,
    ) -> Self {
        let window = env.pipeline.window(log.clone());
        Recorder {
            env,
            log,
            gate: tokio::sync::Mutex::new(()),
            window,
            reoffered: AtomicU64::new(0),
            final_outcome,
            children,
            closing_deadline,
        }
    }

    /// Records a child's `tool.sub_run` (from the child's task), setting
    /// `linked` once it is committed ([`commit_link`]). Then waits until
    /// the event is durable; a refusal there is the run's to surface. True
    /// when the link is in the log.
    pub(crate) async fn record_link(&self, payload: &Payload, linked: &Linked) -> bool {
        let event = {
            let _turn = self.gate.lock().await;
            let Ok(event) = commit_link(&self.log, payload, linked) else {
                return false;
            };
            if self.window.submit(&event).await.is_err() {
                return true;
            }
            event
        };
        let _ = self.window.durable(event.seq()).await;
        true
    }

    /// Commits to the log, then hands the event to the window. It returns
    /// once the event is admitted, not once it is durable; an earlier
    /// refusal surfaces here.
    pub(crate) async fn record(&self, payload: Payload) -> Step<Arc<Event>> {
        let _turn = self.gate.lock().await;
        let event = self.log.commit(&payload).map_err(Interrupt::Log)?;
        self.window.submit(&event).await.map_err(interrupt)?;
        Ok(event)
    }

    /// Records, then waits until the event is durable: the barrier before
    /// anything that depends on it (a tool's side effect after its
    /// `tool.started`, a question after its `interaction.started`).
    pub(crate) async fn record_durable(&self, payload: Payload) -> Step<Arc<Event>> {
        let event = self.record(payload).await?;
        self.window.durable(event.seq()).await.map_err(interrupt)?;
        Ok(event)
    }

    /// Commits the run's terminal. Its dispatch may fail without changing
    /// the outcome: the log already says how the run ended, and `close`
    /// re-offers it to the observers.
    pub(crate) async fn record_final(
        &self,
        payload: Payload,
        outcome: RunOutcome,
    ) -> Step<RunOutcome> {
        let _turn = self.gate.lock().await;
        // Everything before the terminal is durable first, so a refusal of
        // any earlier event fails the run as it did when each event was
        // awaited, instead of hiding behind a committed terminal.
        let last = self.log.stats().last_seq;
        self.window.durable(last).await.map_err(interrupt)?;
        let event = self.log.commit(&payload).map_err(Interrupt::Log)?;
        // From here on the log says how the run ended; a cancellation
        // during the dispatch below must not report otherwise.
        self.final_outcome.set(outcome.clone());
        // The outcome goes back to the caller once the terminal is durable.
        // A refusal leaves it to `close` to re-offer.
        if self.window.submit(&event).await.is_ok() {
            let _ = self.window.durable(event.seq()).await;
        }
        Ok(outcome)
    }

    /// The outcome the log's run terminal records, once it is committed.
    pub(crate) fn final_outcome(&self) -> Option<RunOutcome> {
        self.final_outcome.get()
    }

    /// Whether the log holds the run's terminal.
    pub(crate) fn run_ended(&self) -> bool {
        self.log.run_ended()
    }

    /// The last sequence every required observer acknowledged, all lower
    /// ones included.
    fn acked(&self) -> u64 {
        self.window
            .watermark()
            .max(self.reoffered.load(Ordering::SeqCst))
    }

    /// Whether every required observer acknowledged every committed event.
    pub(crate) fn acknowledged(&self) -> bool {
        self.acked() >= self.log.stats().last_seq
    }

    /// Cancelled terminals, recorded innermost first, for every scope still
    /// open inside `turn` (tools, approvals, a model call), so the turn can
    /// end.
    pub(crate) async fn cancel_children(&self, turn: u64) -> Step<()> {
        let parent = Some(ScopeKey::Turn(turn));
        for scope in self.log.open_scope_starts() {
            if scope.key().parent() == parent {
                let _turn = self.gate.lock().await;
                let part_bytes = self.env.message_limits.part_bytes;
                let committed = commit_closing(&self.log, &self.children, &scope, part_bytes);
                let event = committed.map_err(Interrupt::Log)?;
                self.window.submit(&event).await.map_err(interrupt)?;
            }
        }
        Ok(())
    }

    /// Closes every open scope innermost first: cancelled, or — when
    /// `failure` is given — cancelled children and failed turn and run.
    /// Commits always reach the log; observers get them (and anything they
    /// had not acknowledged yet, in order) within the closing deadline, or
    /// the engine's shutdown deadline when that is later.
    pub(crate) async fn close(&self, failure: Option<&Failure>, failed_observer: Option<usize>) {
        let _gate = self.gate.lock().await;
        for scope in self.log.open_scope_starts() {
            let payload = match (scope.key(), failure) {
                (ScopeKey::Run, Some(f)) => Payload::RunFailed(RunFailed {
                    error: f.error.clone(),
                    cause: Some(f.cause.clone()),
                    extra: Extra::new(),
                }),
                (ScopeKey::Turn(turn), Some(f)) => Payload::TurnFailed(TurnFailed {
                    turn: *turn,
                    error: f.error.clone(),
                    cause: Some(f.cause.clone()),
                    extra: Extra::new(),
                }),
                _ => {
                    let part_bytes = self.env.message_limits.part_bytes;
                    // Refused only if the tracker and the engine disagree.
                    let _ = commit_closing(&self.log, &self.children, &scope, part_bytes);
                    continue;
                }
            };
            // A refusal here would mean the tracker and the engine disagree;
            // the log stays consistent either way.
            let _ = self.log.commit(&payload);
        }
        self.reoffer(failed_observer).await;
    }

    /// Lets the window acknowledge what it was given, then offers
    /// observers everything still not acknowledged, in order. An observer
    /// that fails here is skipped for the rest, so the others (the local
    /// journal, say) still get the whole history, closing terminals
    /// included.
    async fn reoffer(&self, failed_observer: Option<usize>) {
        let until = self.env.closing_until(self.closing_deadline);
        // The window's batch in flight must settle first: re-offering past
        // it would reach an observer out of order.
        let _ = tokio::time::timeout_at(until, self.window.finish()).await;
        // Each offer gets at most the pipeline's per-observer deadline, so
        // one hanging observer cannot use up the closing time the others
        // (the local journal, say) need.
        let per_offer = self.env.pipeline.config().required_deadline;
        let mut skip: Vec<usize> = failed_observer.into_iter().collect();
        let pending = self.log.retained_after(self.acked());
        for event in pending {
            loop {
                let left = until.saturating_duration_since(tokio::time::Instant::now());
                if left.is_zero() {
                    return;
                }
                match self
                    .env
                    .pipeline
                    .dispatch_skipping(&event, left.min(per_offer), &skip)
                    .await
                {
                    Ok(()) => {
                        if skip.is_empty() {
                            self.reoffered.store(event.seq(), Ordering::SeqCst);
                            self.log.mark_durable(event.seq());
                        }
                        break;
                    }
                    Err(e) if !skip.contains(&e.index) => skip.push(e.index),
                    Err(_) => break,
                }
            }
        }
    }
}

/// A refusal is the observer's; a closed window only follows a closed log.
fn interrupt(error: WindowError) -> Interrupt {
    match error {
        WindowError::Refused(e) => Interrupt::Observer(e),
        _ => Interrupt::Log(CommitError::Closed(EndReason::Closed)),
    }
}

/// Commits cancelled terminals for every open scope of `log`, innermost
/// first, without the observers: what a shutdown past its deadline does
/// before it closes a log, so the log never ends with open scopes.
pub(crate) fn commit_cancelled_terminals(log: &RunLog, children: &Children, part_bytes: usize) {
    for scope in log.open_scope_starts() {
        // Refused only if the run task closed the scope meanwhile.
        let _ = commit_closing(log, children, &scope, part_bytes);
    }
}
