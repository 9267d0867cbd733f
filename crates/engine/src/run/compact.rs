//! Compaction in the run: the context check before every answer call
//! (inside tool loops too), the compaction call and its outcome
//! (`context.compacted`, or `context.compaction_failed` naming the rule),
//! the window rule (a request estimated at the window or more is never
//! sent: the run fails with a `limits.context.window_tokens` problem), and
//! the compaction-only turn. The history is never truncated: it is either
//! replaced by summary + kept messages, or left as it was.

use super::context::{self, Estimate, UsageBase, compaction_range, estimate, tokens_of};
use super::model::{Call, Called};
use super::sources::TurnTools;
use super::turn::{TurnEnd, TurnFailure};
use super::{Runner, Step};
use crate::config::ContextPolicy;
use crate::error::FailureCause;
use crate::request::CompactionRequest;
use keel_eventlog::history::compaction_message_id;
use keel_eventlog::{
    CompactedRange, CompactionRule, ContextCompacted, ContextCompactionFailed, ErrorText, Extra,
    Payload, TokenEstimator,
};
use keel_message::{Message, OperationId, Part, Role, ToolDefinition};
use std::ops::Range;
use std::sync::Arc;

/// The limit a request at or past the window fails.
const WINDOW_LIMIT: &str = "limits.context.window_tokens";

/// How a compaction attempt ended.
pub(super) enum Compaction {
    /// The history is now system messages, the summary, the kept tail.
    Compacted { summary: Message, after: Estimate },
    /// Recorded as `context.compaction_failed`; the history is unchanged.
    Refused {
        rule: CompactionRule,
        detail: String,
    },
    /// No call was made: nothing to compact, or no request to send that
    /// fits (the range plus the instruction reach the window).
    NotRun { reason: String },
    /// The budget refused the compaction call: the turn fails.
    OverBudget(Box<TurnFailure>),
}

/// A summary the compaction call produced, not yet accepted.
struct Draft {
    operation_id: OperationId,
    summary: Message,
}

impl Runner {
    /// The policy this run compacts by: the limits' own, or, for an
    /// explicit compaction without one, the defaults over an unbounded
    /// window (it never fails on the window).
    fn context_policy(&self) -> Option<ContextPolicy> {
        match (&self.ctx.limits.context, self.compaction) {
            (Some(policy), _) => Some(policy.clone()),
            (None, CompactionRequest::Threshold) => None,
            (None, _) => Some(ContextPolicy::new(u64::MAX)),
        }
    }

    /// Before the turn's answer call: estimate the request and compact at
    /// the threshold (or on turn 1 when the request asks to); then the
    /// request must be under the window. `Err` fails the turn.
    pub(super) async fn check_context(
        &self,
        turn: u64,
        tools: &TurnTools,
    ) -> Step<Result<(), TurnFailure>> {
        let Some(policy) = self.context_policy() else {
            return Ok(Ok(()));
        };
        let before = self.estimate_now(&tools.definitions, &policy);
        let forced = turn == 1 && self.compaction == CompactionRequest::First;
        if before.tokens < policy.threshold_tokens() && !forced {
            return Ok(Ok(()));
        }
        let outcome = self.compact(turn, before.clone(), &policy).await?;
        let (estimate, what) = match outcome {
            Compaction::Compacted { after, .. } => (after, "after compaction".to_owned()),
            Compaction::Refused { rule, detail } => (
                before,
                format!("compaction refused ({}: {detail})", rule.rule_name()),
            ),
            Compaction::NotRun { reason } => (before, format!("no compaction ({reason})")),
            Compaction::OverBudget(failure) => return Ok(Err(*failure)),
        };
        if estimate.tokens >= policy.window_tokens {
            return Ok(Err(window_failure(estimate, &policy, &what)));
        }
        Ok(Ok(()))
    }

    /// A compaction-only run's turn: the compaction and nothing else; its
    /// summary is the run's final message.
    pub(super) async fn compaction_turn(&self, turn: u64) -> Step<TurnEnd> {
        let policy = self
            .context_policy()
            .unwrap_or_else(|| ContextPolicy::new(u64::MAX));
        let before = self.estimate_now(&[], &policy);
        let failure = match self.compact(turn, before, &policy).await? {
            Compaction::Compacted { summary, .. } => return Ok(TurnEnd::Final(summary)),
            Compaction::Refused { rule, detail } => TurnFailure::limit(&rule.rule_name(), detail),
            Compaction::NotRun { reason } => {
                TurnFailure::limit("compaction.nothing_to_compact", reason)
            }
            Compaction::OverBudget(failure) => *failure,
        };
        Ok(TurnEnd::Failed(Box::new(failure)))
    }

    fn estimate_now(&self, tools: &[ToolDefinition], policy: &ContextPolicy) -> Estimate {
        let st = self.state();
        estimate(&st.history, tools, st.usage_base, policy.bytes_per_token)
    }

    /// Compacts the history's range (see `context::compaction_range`):
    /// the compaction call, then the summary's checks, then the event that
    /// records the outcome.
    async fn compact(
        &self,
        turn: u64,
        before: Estimate,
        policy: &ContextPolicy,
    ) -> Step<Compaction> {
        let history = self.state().history.clone();
        let Some(range) = compaction_range(&history, policy.keep_turns) else {
            let reason = format!(
                "nothing to compact: the {} messages are system messages or among the last {} turns",
                history.len(),
                policy.keep_turns
            );
            return Ok(Compaction::NotRun { reason });
        };
        let request = match self.compaction_request(turn, &history[range.clone()], policy) {
            Ok(request) => request,
            Err(reason) => return Ok(Compaction::NotRun { reason }),
        };
        let draft = match self
            .call_with_retries(turn, &Call::Compaction(request))
            .await?
        {
            Ok(called) => self.draft(turn, called),
            Err(failure) if matches!(failure.cause, FailureCause::Budget { .. }) => {
                return Ok(Compaction::OverBudget(Box::new(failure)));
            }
            Err(failure) => match failure.event_cause.and_then(|c| c.operation_id) {
                Some(operation_id) => Err((
                    operation_id,
                    CompactionRule::ModelFailed,
                    failure.error.as_str().to_owned(),
                )),
                // No call was started: the request broke a message bound.
                None => {
                    let reason = failure.error.as_str().to_owned();
                    return Ok(Compaction::NotRun { reason });
                }
            },
        };
        let accepted =
            draft.and_then(|d| self.accept(&history, range.clone(), d, before.clone(), policy));
        match accepted {
            Ok((event, after)) => {
                let summary = event.summary.clone();
                self.apply(turn, event, &history, range).await?;
                Ok(Compaction::Compacted { summary, after })
            }
            Err((operation_id, rule, detail)) => {
                self.refuse(turn, operation_id, rule.clone(), &detail, &before)
                    .await?;
                Ok(Compaction::Refused { rule, detail })
            }
        }
    }

    /// The compaction call's messages: the range, then the instruction as
    /// a user message (it carries the summary's id: the summary answers
    /// it). `Err` when that request would reach the window itself.
    fn compaction_request(
        &self,
        turn: u64,
        range: &[Message],
        policy: &ContextPolicy,
    ) -> Result<Arc<[Message]>, String> {
        let limits = &self.env.message_limits;
        let instruction = compaction_message_id(&self.run_id, turn)
            .and_then(|id| {
                let part = Part::text_with(&policy.instruction, limits)?;
                Message::new_with(id, Role::User, vec![part], limits)
            })
            .map_err(|e| format!("the instruction breaks a message rule: {e}"))?;
        let mut messages = range.to_vec();
        messages.push(instruction);
        let tokens = tokens_of(context::message_bytes(&messages), policy.bytes_per_token);
        if tokens >= policy.window_tokens {
            return Err(format!(
                "the compaction request itself is estimated at {tokens} tokens, the window is {}",
                policy.window_tokens
            ));
        }
        Ok(messages.into())
    }

    /// The summary the call wrote: its text, as a user message; refused
    /// when the answer called a tool or held no text.
    fn draft(
        &self,
        turn: u64,
        called: Called,
    ) -> Result<Draft, (OperationId, CompactionRule, String)> {
        let Called {
            operation_id,
            output,
        } = called;
        let refuse = |rule, detail: String| Err((operation_id.clone(), rule, detail));
        if let Some(call) = output.calls().next() {
            let detail = format!("the compaction answer called tool {}", call.name());
            return refuse(CompactionRule::ToolCall, detail);
        }
        let limits = &self.env.message_limits;
        let text = match output.to_message(&self.run_id, turn, limits) {
            Ok(message) => text_of(&message),
            Err(e) => return refuse(CompactionRule::ModelFailed, e.to_string()),
        };
        if text.trim().is_empty() {
            return refuse(
                CompactionRule::Empty,
                "the compaction answer held no text".into(),
            );
        }
        let summary = compaction_message_id(&self.run_id, turn).and_then(|id| {
            let part = Part::text_with(&text, limits)?;
            Message::new_with(id, Role::User, vec![part], limits)
        });
        match summary {
            Ok(summary) => Ok(Draft {
                operation_id,
                summary,
            }),
            Err(e) => refuse(CompactionRule::ModelFailed, e.to_string()),
        }
    }

    /// The summary must be smaller than the range it replaces (both
    /// measured in bytes over the ratio); then the event and the estimate
    /// after it.
    fn accept(
        &self,
        history: &[Message],
        range: Range<usize>,
        draft: Draft,
        before: Estimate,
        policy: &ContextPolicy,
    ) -> Result<(ContextCompacted, Estimate), (OperationId, CompactionRule, String)> {
        let bpt = policy.bytes_per_token;
        let range_tokens = tokens_of(context::message_bytes(&history[range.clone()]), bpt);
        let summary_tokens = tokens_of(
            context::message_bytes(std::slice::from_ref(&draft.summary)),
            bpt,
        );
        if summary_tokens >= range_tokens {
            let detail = format!(
                "the summary is estimated at {summary_tokens} tokens, the {} messages it would replace at {range_tokens}",
                range.len()
            );
            return Err((draft.operation_id, CompactionRule::NotSmaller, detail));
        }
        // The range's and the summary's shares are measured in bytes, so
        // the usage-based estimate stays a usage-based one.
        let after = Estimate {
            tokens: before.tokens.saturating_sub(range_tokens) + summary_tokens,
            kind: before.kind.clone(),
        };
        let event = ContextCompacted {
            turn: 0,
            operation_id: draft.operation_id,
            replaces: CompactedRange {
                first: history[range.start].id().clone(),
                last: history[range.end - 1].id().clone(),
                count: range.len() as u64,
                extra: Extra::new(),
            },
            summary: draft.summary,
            tokens_before: before.tokens,
            tokens_after: after.tokens,
            estimator: TokenEstimator {
                kind: before.kind,
                bytes_per_token: bpt,
                extra: Extra::new(),
            },
            extra: Extra::new(),
        };
        Ok((event, after))
    }

    /// Records `context.compacted`, then puts the summary in place of the
    /// range, as `history::rebuild` does from the event.
    async fn apply(
        &self,
        turn: u64,
        mut event: ContextCompacted,
        history: &[Message],
        range: Range<usize>,
    ) -> Step<()> {
        event.turn = turn;
        let mut compacted = history[..range.start].to_vec();
        compacted.push(event.summary.clone());
        compacted.extend_from_slice(&history[range.end..]);
        let after = event.tokens_after;
        let usage_based = event.estimator.kind == keel_eventlog::EstimatorKind::Usage;
        self.rec.record(Payload::ContextCompacted(event)).await?;
        let mut st = self.state();
        st.usage_base = usage_based.then_some(UsageBase {
            tokens: after,
            messages: compacted.len(),
        });
        st.history = compacted;
        Ok(())
    }

    async fn refuse(
        &self,
        turn: u64,
        operation_id: OperationId,
        rule: CompactionRule,
        detail: &str,
        before: &Estimate,
    ) -> Step<()> {
        let payload = Payload::ContextCompactionFailed(ContextCompactionFailed {
            turn,
            operation_id,
            rule,
            detail: ErrorText::new(detail),
            tokens_before: before.tokens,
            extra: Extra::new(),
        });
        self.rec.record(payload).await.map(|_| ())
    }
}

/// The visible text of a message, its text parts joined.
fn text_of(message: &Message) -> String {
    message
        .parts()
        .iter()
        .filter_map(|p| match p {
            Part::Text(t) => Some(t.text()),
            _ => None,
        })
        .collect()
}

/// The run's `context` problem: the request is estimated at the window or
/// more, and compaction did not bring it under.
fn window_failure(estimate: Estimate, policy: &ContextPolicy, what: &str) -> TurnFailure {
    TurnFailure::limit(
        WINDOW_LIMIT,
        format!(
            "the next request is estimated at {} tokens ({} estimator), the window is {} tokens; {what}; nothing was truncated",
            estimate.tokens,
            estimate.kind.as_str(),
            policy.window_tokens
        ),
    )
}
