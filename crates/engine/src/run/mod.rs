//! The run loop, split by job: [`turn`] (the turn loop), [`sources`] (the
//! turn's tool set, tool sources and their change records), [`model`]
//! (model attempts and backoff), [`tools`] (tool calls and approvals),
//! [`record`] (commit, dispatch, the acknowledged cursor, closing),
//! [`delegate`] (agent tool calls: child runs) and [`children`] (a run's
//! children, ended before the run's own terminals). This module holds the
//! run's state and the top of the task: linking a sub-run to its parent,
//! cancellation, the panic guard, and settling how the run ended.

mod children;
mod compact;
mod context;
mod delegate;
mod env;
mod model;
mod record;
mod sources;
mod tools;
mod turn;

pub(crate) use children::{ChildRun, Children, FinalOutcome, RunEnded, StartChild};
pub(crate) use env::RunEnv;
pub(crate) use record::commit_cancelled_terminals;

use crate::cancel::CancelToken;
use crate::compose::RunContext;
use crate::error::FailureCause;
use crate::request::{RunOutcome, RunReport, RunRequest};
use futures_util::FutureExt;
use keel_eventlog::{Cause, CommitError, ErrorText, RunLog};
use keel_message::{CallId, Message, MessageError, ModelName, OperationIdIssuer, RunId};
use keel_observers::DispatchError;
use keel_stream::Usage;
use record::{Failure, Recorder};
use std::collections::HashSet;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, MutexGuard};

/// Why the loop stopped early.
pub(crate) enum Interrupt {
    /// A required observer refused an event.
    Observer(DispatchError),
    /// The log refused a commit.
    Log(CommitError),
    /// A message the engine built broke a message rule (a bug: the engine
    /// builds them within the limits it checks).
    Message(MessageError),
}

pub(crate) type Step<T> = Result<T, Interrupt>;

/// Each usage total is capped at 2^52 so their sum stays within 2^53 − 1.
const USAGE_CAP: u64 = 1 << 52;

/// Token usage summed over the model calls that reported it.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct UsageTotals {
    input: u64,
    output: u64,
    reported: bool,
}

impl UsageTotals {
    pub(crate) fn add(&mut self, usage: &Usage) {
        // Capped so the total stays a JSON-safe integer.
        self.input = self
            .input
            .saturating_add(usage.input_tokens())
            .min(USAGE_CAP);
        self.output = self
            .output
            .saturating_add(usage.output_tokens())
            .min(USAGE_CAP);
        self.reported = true;
    }
    pub(crate) fn total(&self) -> Option<Usage> {
        if self.reported {
            Usage::new(self.input, self.output).ok()
        } else {
            None
        }
    }
}

/// What the run loop keeps between events.
pub(crate) struct State {
    pub(crate) history: Vec<Message>,
    pub(crate) ops: OperationIdIssuer,
    pub(crate) usage: UsageTotals,
    pub(crate) interactions: u64,
    /// Call ids of tool calls the model made in completed calls: a scope
    /// identity is never started twice in a run. Bounded by max_turns ×
    /// max_tool_calls_per_turn.
    pub(crate) call_ids: HashSet<CallId>,
    /// What each tool source contributed to the previous turn, in source
    /// order.
    pub(crate) sources_seen: Vec<sources::SourceSeen>,
    /// What the context estimator starts from: the last answer call's
    /// usage and the messages it covers.
    pub(crate) usage_base: Option<context::UsageBase>,
    /// The usage (input + output tokens) the answer call that just
    /// completed reported, until its message joins the history.
    pub(crate) answer_usage: Option<u64>,
}

/// How a run task ended: the outcome, and whether the observers took all
/// of it.
pub(crate) struct RunEnd {
    run_id: RunId,
    outcome: RunOutcome,
    history: Vec<Message>,
    acknowledged: bool,
}

impl RunEnd {
    pub(crate) fn run_id(&self) -> &RunId {
        &self.run_id
    }
    pub(crate) fn acknowledged(&self) -> bool {
        self.acknowledged
    }
    pub(crate) fn into_report(self) -> RunReport {
        RunReport::new(self.outcome, self.history)
    }
}

/// What the engine's registry shares with a run task: the run's children
/// (read by a shutdown that commits an abandoned run's terminals), the
/// outcome its terminal records (read by its parent), and how the run
/// starts children of its own.
pub(crate) struct RunTies {
    pub(crate) children: Arc<Children>,
    pub(crate) final_outcome: FinalOutcome,
    pub(crate) starter: Arc<dyn StartChild>,
}

pub(crate) struct Runner {
    pub(crate) env: Arc<RunEnv>,
    pub(crate) ctx: RunContext,
    pub(crate) rec: Arc<Recorder>,
    pub(crate) run_id: RunId,
    pub(crate) model: ModelName,
    pub(crate) continues: Option<RunId>,
    pub(crate) forked_from: Option<keel_eventlog::ForkedFrom>,
    pub(crate) chat: Option<keel_eventlog::ChatRun>,
    pub(crate) inherits: Option<crate::request::Inheritance>,
    pub(crate) compaction: crate::request::CompactionRequest,
    /// Set for a sub-run: its link, recorded in `run.started`.
    pub(crate) parent: Option<crate::request::ParentRun>,
    pub(crate) lineage: delegate::Lineage,
    pub(crate) children: Arc<Children>,
    pub(crate) starter: Arc<dyn StartChild>,
    state: Mutex<State>,
}

impl Runner {
    pub(crate) fn new(
        env: Arc<RunEnv>,
        ctx: RunContext,
        log: RunLog,
        request: RunRequest,
        ties: RunTies,
    ) -> Runner {
        let rec = Recorder::new(
            Arc::clone(&env),
            log,
            ctx.limits.closing_deadline,
            ties.final_outcome,
            Arc::clone(&ties.children),
        );
        let sources_seen = vec![sources::SourceSeen::default(); ctx.sources.len()];
        let lineage = delegate::Lineage::new(&ctx.limits, request.parent.as_ref());
        Runner {
            rec: Arc::new(rec),
            parent: request.parent,
            lineage,
            children: ties.children,
            starter: ties.starter,
            env,
            ctx,
            run_id: request.run_id,
            model: request.model,
            continues: request.continues,
            forked_from: request.forked_from,
            chat: request.chat,
            inherits: request.inherits,
            compaction: request.compaction,
            state: Mutex::new(State {
                history: request.history,
                ops: OperationIdIssuer::new(),
                usage: UsageTotals::default(),
                interactions: 0,
                call_ids: HashSet::new(),
                sources_seen,
                usage_base: None,
                answer_usage: None,
            }),
        }
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs to the end. Cancellation drops everything in flight (provider
    /// stream, tool futures, a pending observer acknowledgement), then the
    /// open scopes are closed innermost first. A panic that escapes every
    /// guarded extension point fails the run as `Internal`, with every
    /// terminal committed. Last, however the run ended, every tool source
    /// is closed.
    pub(crate) async fn run(self, cancel: CancelToken) -> RunEnd {
        // A sub-run's parent names it (`tool.sub_run`) before it starts;
        // a link the parent's log refused, or that a cancellation cut short
        // before its commit, leaves no trace of the child. Once committed,
        // the child starts (and, cancelled, ends at once).
        if let Some(parent) = &self.parent {
            let linked = tokio::select! {
                biased;
                linked = parent.linker.link() => linked,
                () = cancel.cancelled() => parent.linker.is_linked(),
            };
            if !linked {
                return self.unlinked();
            }
        }
        let driven = AssertUnwindSafe(async {
            // `run.started` is committed even when the run is cancelled
            // before its task first runs: a run `start` accepted is in the
            // log. The commit happens on the first poll; only its dispatch
            // can be cut short.
            let started = tokio::select! {
                biased;
                r = self.rec.record(self.run_started()) => r,
                () = cancel.cancelled() => return None,
            };
            if let Err(e) = started {
                return Some(Err(e));
            }
            tokio::select! {
                biased;
                () = cancel.cancelled() => None,
                r = self.drive() => Some(r),
            }
        })
        .catch_unwind()
        .await;
        // However the loop stopped, every child ends (cancelled, waited
        // for) before this run commits its own closing terminals.
        self.children.end_all().await;
        let outcome = match driven {
            Ok(driven) => self.settle(driven).await,
            Err(_) => {
                let detail = "the run task panicked".to_owned();
                self.fail_closing(FailureCause::Internal(detail.clone()), &detail)
                    .await
            }
        };
        // The log is the authority: once the run's terminal is committed,
        // the outcome is what it records, whatever interrupted afterwards.
        let outcome = self.rec.final_outcome().unwrap_or(outcome);
        self.close_sources().await;
        let history = std::mem::take(&mut self.state().history);
        RunEnd {
            acknowledged: self.rec.acknowledged(),
            run_id: self.run_id,
            outcome,
            history,
        }
    }

    /// How a sub-run whose link the parent's log refused ends: nothing
    /// committed, nothing for the observers.
    fn unlinked(self) -> RunEnd {
        let detail = "the parent's log refused tool.sub_run (rule sub_run.link)".to_owned();
        RunEnd {
            acknowledged: true,
            run_id: self.run_id,
            outcome: RunOutcome::Failed {
                cause: FailureCause::Internal(detail),
            },
            history: Vec::new(),
        }
    }

    async fn settle(&self, driven: Option<Step<RunOutcome>>) -> RunOutcome {
        match driven {
            Some(Ok(outcome)) => {
                // The run's terminal is in the log; offer observers anything
                // they have not acknowledged yet (a refused terminal, say).
                self.rec.close(None, None).await;
                outcome
            }
            None => {
                self.rec.close(None, None).await;
                RunOutcome::Cancelled
            }
            Some(Err(Interrupt::Observer(e))) => {
                let failure = Failure {
                    error: ErrorText::new(&e.to_string()),
                    cause: Cause {
                        observer: Some(truncate(&e.observer, 128)),
                        seq: Some(e.seq),
                        ..Cause::default()
                    },
                };
                self.rec.close(Some(&failure), Some(e.index)).await;
                RunOutcome::Failed {
                    cause: FailureCause::Observer(e),
                }
            }
            Some(Err(Interrupt::Log(_))) if self.rec.run_ended() => {
                // Only a shutdown past its deadline commits a run's
                // terminals outside its task, and it commits them cancelled.
                self.rec.close(None, None).await;
                RunOutcome::Cancelled
            }
            Some(Err(Interrupt::Log(e))) => {
                let detail = e.to_string();
                self.fail_closing(FailureCause::Internal(detail.clone()), &detail)
                    .await
            }
            Some(Err(Interrupt::Message(e))) => {
                let detail = e.to_string();
                self.fail_closing(FailureCause::Internal(detail.clone()), &detail)
                    .await
            }
        }
    }

    /// Closes the run as failed for a reason no event names (a refused
    /// commit, a panic outside the guarded extension points).
    async fn fail_closing(&self, cause: FailureCause, detail: &str) -> RunOutcome {
        let failure = Failure {
            error: ErrorText::new(detail),
            cause: Cause::default(),
        };
        self.rec.close(Some(&failure), None).await;
        RunOutcome::Failed { cause }
    }
}

pub(crate) fn truncate(s: &str, max: usize) -> String {
    let mut cut = s.len().min(max);
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    s[..cut].to_owned()
}

#[cfg(test)]
mod tests {
    use super::truncate;

    #[test]
    fn truncate_cuts_at_a_char_boundary_at_or_below_the_bound() {
        assert_eq!(truncate("abc", 8), "abc");
        assert_eq!(truncate("abcdef", 4), "abcd");
        // `é` is two bytes: a cut inside it moves down to its start.
        assert_eq!(truncate("aéé", 4), "aé");
        assert_eq!(truncate("ééé", 5), "éé");
        assert_eq!(truncate("€", 2), "");
    }
}
