//! The turn loop: `run.started`, then turns until the model stops calling
//! tools, a turn fails, or `max_turns` is reached; each turn reads its
//! tool set, makes a model call (with retries) and then runs the tools it
//! asked for.

use super::context::UsageBase;
use super::model::ModelOutput;
use super::sources::TurnTools;
use super::tools::ToolsEnd;
use super::{Interrupt, Runner, Step};
use crate::error::FailureCause;
use crate::request::{CompactionRequest, RunOutcome};
use keel_eventlog::history;
use keel_eventlog::{
    Cause, CommitError, ErrorText, Extra, Payload, RunCompleted, RunFailed, RunInput,
    RunInputReference, RunStarted, TurnFailed, TurnRef,
};
use keel_message::{Message, MessageError};

/// How a turn ended.
pub(super) enum TurnEnd {
    /// No tool calls: the run is done.
    Final(Message),
    /// Tool results were appended: next turn.
    Continue,
    /// The turn (and run) failed.
    Failed(Box<TurnFailure>),
}

/// Why a turn failed: the run's cause, the recorded error text, and the
/// identity it names (the model call or tool call).
pub(crate) struct TurnFailure {
    pub(crate) cause: FailureCause,
    pub(crate) error: ErrorText,
    pub(crate) event_cause: Option<Cause>,
}

impl TurnFailure {
    /// A limit (a bound of the engine or of the message rules) was hit.
    pub(crate) fn limit(limit: &str, detail: String) -> TurnFailure {
        TurnFailure {
            error: ErrorText::new(&format!("{limit}: {detail}")),
            cause: FailureCause::Limit {
                limit: limit.to_owned(),
                detail,
            },
            event_cause: None,
        }
    }
    pub(crate) fn message_rule(e: &MessageError) -> TurnFailure {
        TurnFailure {
            error: ErrorText::new(&e.to_string()),
            cause: FailureCause::Limit {
                limit: e.kind().rule().to_owned(),
                detail: e.to_string(),
            },
            event_cause: None,
        }
    }
}

fn turn_ref(turn: u64) -> TurnRef {
    TurnRef {
        turn,
        extra: Extra::new(),
    }
}

impl Runner {
    /// `run.started`, which `Runner::run` records before the loop.
    pub(super) fn run_started(&self) -> Payload {
        Payload::RunStarted(RunStarted {
            model: Some(self.model.clone()),
            continues: self.continues.clone(),
            forked_from: self.forked_from.clone(),
            chat: self.chat.clone(),
            parent: self.parent.as_ref().map(|p| p.link.clone()),
            extra: Extra::new(),
        })
    }

    /// The turns, after `run.started`.
    pub(super) async fn drive(&self) -> Step<RunOutcome> {
        if let Some(failure) = self.record_input().await? {
            return self.fail_run(failure).await;
        }
        let max_turns = self.ctx.limits.max_turns;
        for turn in 1..=max_turns {
            self.rec
                .record(Payload::TurnStarted(turn_ref(turn)))
                .await?;
            match self.turn(turn).await? {
                TurnEnd::Final(message) => {
                    self.rec
                        .record(Payload::TurnCompleted(turn_ref(turn)))
                        .await?;
                    return self.complete(message).await;
                }
                TurnEnd::Continue => {
                    self.rec
                        .record(Payload::TurnCompleted(turn_ref(turn)))
                        .await?;
                }
                TurnEnd::Failed(failure) => return self.fail(turn, *failure).await,
            }
        }
        let failure = TurnFailure::limit(
            "limits.max_turns",
            format!("the model was still calling tools after {max_turns} turns"),
        );
        self.fail_run(failure).await
    }

    /// Records the input history so the log alone rebuilds the
    /// conversation: what a continued run inherits as one `run.input`
    /// reference, then one `run.input` per message of its own. A message
    /// the log cannot hold (over `log.max_event_bytes`) fails the run
    /// before any turn.
    async fn record_input(&self) -> Step<Option<TurnFailure>> {
        let input = self.state().history.clone();
        let own = match &self.inherits {
            None => 0,
            Some(inherits) if inherits.messages <= input.len() => {
                let payload = Payload::RunInputReference(RunInputReference {
                    history: inherits.reference.clone(),
                    extra: Extra::new(),
                });
                self.rec.record(payload).await?;
                inherits.messages
            }
            Some(inherits) => {
                return Ok(Some(TurnFailure::limit(
                    "request.inherited_messages",
                    format!(
                        "{} inherited messages, but the history holds {}",
                        inherits.messages,
                        input.len()
                    ),
                )));
            }
        };
        for (i, message) in input.into_iter().enumerate().skip(own) {
            let payload = Payload::RunInput(RunInput {
                message,
                extra: Extra::new(),
            });
            match self.rec.record(payload).await {
                Ok(_) => {}
                Err(Interrupt::Log(e @ CommitError::EventTooLarge { .. })) => {
                    return Ok(Some(TurnFailure::limit(
                        "log.max_event_bytes",
                        format!("input message {i} cannot be recorded: {e}"),
                    )));
                }
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    }

    /// Fails the run with no turn open.
    async fn fail_run(&self, failure: TurnFailure) -> Step<RunOutcome> {
        self.rec
            .record_final(
                Payload::RunFailed(RunFailed {
                    error: failure.error,
                    cause: failure.event_cause,
                    extra: Extra::new(),
                }),
                RunOutcome::Failed {
                    cause: failure.cause,
                },
            )
            .await
    }

    async fn complete(&self, final_message: Message) -> Step<RunOutcome> {
        let (usage, transcript) = {
            let st = self.state();
            (st.usage.total(), st.history.clone())
        };
        let outcome = RunOutcome::Completed {
            final_message,
            usage: usage.unwrap_or_default(),
            transcript,
        };
        let payload = Payload::RunCompleted(RunCompleted {
            usage,
            extra: Extra::new(),
        });
        self.rec.record_final(payload, outcome).await
    }

    /// Ends the failed turn: anything still open inside it is cancelled
    /// first, then the turn and the run fail naming the same cause.
    async fn fail(&self, turn: u64, failure: TurnFailure) -> Step<RunOutcome> {
        // Children of calls still in flight (a sibling's failure ended the
        // turn) end before their calls' terminals.
        self.children.end_all().await;
        self.rec.cancel_children(turn).await?;
        self.rec
            .record(Payload::TurnFailed(TurnFailed {
                turn,
                error: failure.error.clone(),
                cause: failure.event_cause.clone(),
                extra: Extra::new(),
            }))
            .await?;
        let payload = Payload::RunFailed(RunFailed {
            error: failure.error,
            cause: failure.event_cause,
            extra: Extra::new(),
        });
        let outcome = RunOutcome::Failed {
            cause: failure.cause,
        };
        self.rec.record_final(payload, outcome).await
    }

    /// One turn: its tool set (fixed tools, then the sources'), the context
    /// check (compacting when the policy says so), the model call listing
    /// exactly that set, then the tools it asked for, resolved against the
    /// same set.
    async fn turn(&self, turn: u64) -> Step<TurnEnd> {
        if self.compaction == CompactionRequest::Only {
            return self.compaction_turn(turn).await;
        }
        let tools = match self.turn_tools(turn).await? {
            Ok(tools) => tools,
            Err(failure) => return Ok(TurnEnd::Failed(Box::new(failure))),
        };
        if let Err(failure) = self.check_context(turn, &tools).await? {
            return Ok(TurnEnd::Failed(Box::new(failure)));
        }
        match self.model_with_retries(turn, &tools).await? {
            Ok(output) => self.after_model(turn, output, &tools).await,
            Err(failure) => Ok(TurnEnd::Failed(Box::new(failure))),
        }
    }

    /// After a completed model call: the assistant message (reasoning parts
    /// included, so the next request carries them) joins the history,
    /// built as `history::rebuild` rebuilds it, then
    /// the run finishes, or runs the tools and continues.
    async fn after_model(
        &self,
        turn: u64,
        output: ModelOutput,
        tools: &TurnTools,
    ) -> Step<TurnEnd> {
        let limits = &self.ctx.limits;
        let message_limits = &self.env.message_limits;
        let message = match output.to_message(&self.run_id, turn, message_limits) {
            Ok(m) => m,
            Err(e) => return Ok(TurnEnd::Failed(Box::new(TurnFailure::message_rule(&e)))),
        };
        let calls: Vec<_> = output.calls().cloned().collect();
        {
            let mut st = self.state();
            st.history.push(message.clone());
            let messages = st.history.len();
            st.usage_base = st
                .answer_usage
                .take()
                .map(|tokens| UsageBase { tokens, messages });
        }
        if calls.len() > limits.max_tool_calls_per_turn {
            return Ok(TurnEnd::Failed(Box::new(TurnFailure::limit(
                "limits.max_tool_calls_per_turn",
                format!(
                    "the model asked for {} tool calls, the bound is {}",
                    calls.len(),
                    limits.max_tool_calls_per_turn
                ),
            ))));
        }
        if calls.is_empty() {
            return Ok(TurnEnd::Final(message));
        }
        let results = match self.run_tools(turn, &calls, tools).await? {
            ToolsEnd::Results(parts) => parts,
            ToolsEnd::Ended(ended) => return Ok(TurnEnd::Failed(Box::new(ended.into_failure()))),
        };
        match history::tool_results_message(&self.run_id, turn, results, message_limits) {
            Ok(m) => self.state().history.push(m),
            Err(e) => return Ok(TurnEnd::Failed(Box::new(TurnFailure::message_rule(&e)))),
        }
        Ok(TurnEnd::Continue)
    }
}
