//! Recording: commit, then dispatch, one event at a time per run; the
//! acknowledged cursor; and closing (terminals for every open scope, then
//! the observers re-offered what they had not acknowledged).

use super::{Interrupt, Step};
use crate::engine::EngineInner;
use crate::request::RunOutcome;
use keel_eventlog::{
    Cause, ErrorText, Event, Extra, Payload, RunFailed, RunLog, ScopeKey, TurnFailed,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How a failing run closes its run and turn scopes.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    pub(crate) error: ErrorText,
    pub(crate) cause: Cause,
}

pub(crate) struct Recorder {
    engine: Arc<EngineInner>,
    log: RunLog,
    /// Serializes commit + dispatch, so observers see each run's events in
    /// sequence order even while tools run in parallel.
    gate: tokio::sync::Mutex<()>,
    /// The last sequence every required observer acknowledged.
    acked: AtomicU64,
    /// Set once the run's terminal is committed: the outcome the log records.
    final_outcome: Mutex<Option<RunOutcome>>,
    closing_deadline: Duration,
}

impl Recorder {
    pub(crate) fn new(engine: Arc<EngineInner>, log: RunLog, closing_deadline: Duration) -> Self {
        Recorder {
            engine,
            log,
            gate: tokio::sync::Mutex::new(()),
            acked: AtomicU64::new(0),
            final_outcome: Mutex::new(None),
            closing_deadline,
        }
    }

    /// Commits to the log, then dispatches to the observers.
    pub(crate) async fn record(&self, payload: Payload) -> Step<Arc<Event>> {
        let _turn = self.gate.lock().await;
        let event = self.log.commit(&payload).map_err(Interrupt::Log)?;
        self.engine
            .pipeline
            .dispatch(&event)
            .await
            .map_err(Interrupt::Observer)?;
        self.acked.store(event.seq(), Ordering::SeqCst);
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
        let event = self.log.commit(&payload).map_err(Interrupt::Log)?;
        // From here on the log says how the run ended; a cancellation
        // during the dispatch below must not report otherwise.
        *self.final_slot() = Some(outcome.clone());
        if self.engine.pipeline.dispatch(&event).await.is_ok() {
            self.acked.store(event.seq(), Ordering::SeqCst);
        }
        Ok(outcome)
    }

    fn final_slot(&self) -> std::sync::MutexGuard<'_, Option<RunOutcome>> {
        self.final_outcome
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The outcome the log's run terminal records, once it is committed.
    pub(crate) fn final_outcome(&self) -> Option<RunOutcome> {
        self.final_slot().clone()
    }

    /// Whether the log holds the run's terminal.
    pub(crate) fn run_ended(&self) -> bool {
        self.log.run_ended()
    }

    /// Whether every required observer acknowledged every committed event.
    pub(crate) fn acknowledged(&self) -> bool {
        self.acked.load(Ordering::SeqCst) >= self.log.stats().last_seq
    }

    /// Cancelled terminals, recorded innermost first, for every scope still
    /// open inside `turn` (tools, approvals, a model call), so the turn can
    /// end.
    pub(crate) async fn cancel_children(&self, turn: u64) -> Step<()> {
        let parent = Some(ScopeKey::Turn(turn));
        for scope in self.log.open_scope_starts() {
            if scope.key().parent() == parent {
                self.record(scope.cancelled()).await?;
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
                _ => scope.cancelled(),
            };
            // A refusal here would mean the tracker and the engine disagree;
            // the log stays consistent either way.
            let _ = self.log.commit(&payload);
        }
        self.reoffer(failed_observer).await;
    }

    /// Offers observers everything they have not acknowledged, in order.
    /// An observer that fails here is skipped for the rest, so the others
    /// (the local journal, say) still get the whole history, closing
    /// terminals included.
    async fn reoffer(&self, failed_observer: Option<usize>) {
        let until = self.engine.closing_until(self.closing_deadline);
        // Each offer gets at most the pipeline's per-observer deadline, so
        // one hanging observer cannot use up the closing time the others
        // (the local journal, say) need.
        let per_offer = self.engine.pipeline.config().required_deadline;
        let mut skip: Vec<usize> = failed_observer.into_iter().collect();
        let pending = self.log.retained_after(self.acked.load(Ordering::SeqCst));
        for event in pending {
            loop {
                let left = until.saturating_duration_since(tokio::time::Instant::now());
                if left.is_zero() {
                    return;
                }
                match self
                    .engine
                    .pipeline
                    .dispatch_skipping(&event, left.min(per_offer), &skip)
                    .await
                {
                    Ok(()) => {
                        if skip.is_empty() {
                            self.acked.store(event.seq(), Ordering::SeqCst);
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

/// Commits cancelled terminals for every open scope of `log`, innermost
/// first, without the observers: what a shutdown past its deadline does
/// before it closes a log, so the log never ends with open scopes.
pub(crate) fn commit_cancelled_terminals(log: &RunLog) {
    for scope in log.open_scope_starts() {
        // Refused only if the run task closed the scope meanwhile.
        let _ = log.commit(&scope.cancelled());
    }
}
