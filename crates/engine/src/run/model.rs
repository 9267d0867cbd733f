//! Model attempts and backoff: each attempt is its own model scope with a
//! fresh operation id; its validated items are committed one by one, and
//! it ends with exactly one model terminal, whatever the provider does
//! (fails, stalls, panics, completes with nothing, reuses a call id).

use super::budget::budget_failure;
use super::sources::TurnTools;
use super::turn::TurnFailure;
use super::{Runner, Step};
use crate::config::PartialRetry;
use crate::error::FailureCause;
use crate::guard::guarded;
use futures_util::{FutureExt, StreamExt};
use keel_eventlog::history::AssistantDraft;
use keel_eventlog::{
    Cause, ErrorText, Extra, ModelCompleted, ModelFailed, ModelPurpose, ModelStarted, Payload,
    ProblemRecord, ReasoningDelta, ReasoningEnd, TextDelta, ToolCall,
};
use keel_message::{
    Message, ModelRequest, OpaqueValue, OperationId, ProviderTag, ToolCallPart, ToolDefinition,
};
use keel_stream::{
    Completion, ModelFailure, ProblemKind, ProviderProblem, RawStream, RetryPosition, StreamItem,
    StreamValidator,
};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use tokio::time::Instant;

/// What a completed model call said: its assistant message in stream
/// order, built as `history::rebuild` builds it from the events.
pub(super) type ModelOutput = AssistantDraft;

/// A model call to make: the turn's answer (the history, listing the
/// turn's tools) or a compaction (the given messages, no tools).
pub(super) enum Call {
    /// The answer call, listing these tools.
    Answer(Arc<[ToolDefinition]>),
    /// A compaction call sending these messages.
    Compaction(Arc<[Message]>),
}

impl Call {
    fn purpose(&self) -> Option<ModelPurpose> {
        match self {
            Call::Answer(_) => None,
            Call::Compaction(_) => Some(ModelPurpose::Compaction),
        }
    }
    fn definitions(&self) -> Arc<[ToolDefinition]> {
        match self {
            Call::Answer(definitions) => Arc::clone(definitions),
            Call::Compaction(_) => Arc::from(Vec::new()),
        }
    }
}

/// A completed call: the attempt that completed, and what it said.
pub(super) struct Called {
    pub(super) operation_id: OperationId,
    pub(super) output: ModelOutput,
}

/// How one model attempt ended.
enum AttemptEnd {
    Completed(ModelOutput),
    Failed {
        problem: ProviderProblem,
        position: RetryPosition,
    },
}

/// One attempt's identity, for every event it records.
struct Attempt<'a> {
    turn: u64,
    /// What the call is for (`None`: the answer call).
    purpose: Option<ModelPurpose>,
    operation_id: &'a OperationId,
    deadline: Instant,
    /// The provider's tag, recorded with each reasoning part it sends.
    provider: ProviderTag,
}

impl Runner {
    /// The turn's answer call, retried as the policy says, every attempt
    /// listing the turn's tools. `Err` is the turn's failure (the last
    /// attempt's problem, or a request bound).
    pub(super) async fn model_with_retries(
        &self,
        turn: u64,
        tools: &TurnTools,
    ) -> Step<Result<ModelOutput, TurnFailure>> {
        let call = Call::Answer(Arc::clone(&tools.definitions));
        Ok(self.call_with_retries(turn, &call).await?.map(|c| c.output))
    }

    /// A model call (answer or compaction) retried as the policy says;
    /// each call counts its attempts from 1.
    pub(super) async fn call_with_retries(
        &self,
        turn: u64,
        call: &Call,
    ) -> Step<Result<Called, TurnFailure>> {
        let retry = &self.ctx.limits.retry;
        let mut attempt: u32 = 0;
        loop {
            attempt += 1;
            let (operation_id, history) = {
                let mut st = self.state();
                let history: Arc<[Message]> = match call {
                    Call::Answer(_) => st.history.clone().into(),
                    Call::Compaction(messages) => Arc::clone(messages),
                };
                (st.ops.issue(), history)
            };
            let request = match ModelRequest::new_with(
                operation_id.clone(),
                self.model.clone(),
                history,
                call.definitions(),
                &self.env.message_limits,
            ) {
                Ok(r) => r,
                Err(e) => return Ok(Err(TurnFailure::message_rule(&e))),
            };
            // Budget: after the tree's model gate, before `model.started`;
            // the gate is held to this attempt's terminal.
            let admitted = match self.admit_model_call().await {
                Ok(admitted) => admitted,
                Err(breach) => return Ok(Err(budget_failure(breach))),
            };
            self.rec
                .record(Payload::ModelStarted(ModelStarted {
                    turn,
                    operation_id: operation_id.clone(),
                    model: self.model.clone(),
                    attempt,
                    purpose: call.purpose(),
                    extra: Extra::new(),
                }))
                .await?;
            let at = (turn, call.purpose());
            let ended = self.attempt(at, &operation_id, request).await?;
            drop(admitted);
            let (problem, position) = match ended {
                AttemptEnd::Completed(output) => {
                    return Ok(Ok(Called {
                        operation_id,
                        output,
                    }));
                }
                AttemptEnd::Failed { problem, position } => (problem, position),
            };
            // An unknown position (never made live) reads as partial.
            let allowed = !position.may_have_output() || retry.partial == PartialRetry::Restart;
            let seed = hash_seed(self.run_id.as_str(), turn);
            if problem.retryable()
                && allowed
                && attempt < retry.max_attempts
                && let Some(wait) = retry.backoff(attempt, seed, problem.retry_after())
            {
                tokio::time::sleep(wait).await;
                continue;
            }
            return Ok(Err(model_failure(operation_id, problem, position)));
        }
    }

    /// One attempt: start (guarded, within the call timeout), then stream.
    async fn attempt(
        &self,
        (turn, purpose): (u64, Option<ModelPurpose>),
        operation_id: &OperationId,
        request: ModelRequest,
    ) -> Step<AttemptEnd> {
        let at = Attempt {
            turn,
            purpose,
            operation_id,
            deadline: Instant::now() + self.ctx.limits.model_call_timeout,
            provider: self.ctx.provider.provider_tag(),
        };
        let provider = Arc::clone(&self.ctx.provider);
        let started =
            tokio::time::timeout_at(at.deadline, guarded(move || provider.start(request))).await;
        // A start failure's position is the stream crate's to say.
        let at_start = ModelFailure::at_start;
        match started {
            Err(_) => {
                self.model_failed(&at, at_start(self.timeout_problem()))
                    .await
            }
            Ok(Err(_panic)) => {
                let problem = panic_problem("the provider panicked starting the call");
                self.model_failed(&at, at_start(problem)).await
            }
            Ok(Ok(Err(raw))) => {
                let problem = ProviderProblem::from_raw(raw, &self.env.message_limits);
                self.model_failed(&at, at_start(problem)).await
            }
            Ok(Ok(Ok(stream))) => self.stream(&at, stream).await,
        }
    }

    fn timeout_problem(&self) -> ProviderProblem {
        ProviderProblem::new(
            ProblemKind::Timeout,
            &format!(
                "model call exceeded limits.model_call_timeout ({} ms)",
                self.ctx.limits.model_call_timeout.as_millis()
            ),
            true,
        )
    }

    /// Streams through the validator, committing every item; each poll is
    /// guarded, so a panicking stream is a failed attempt.
    async fn stream(&self, at: &Attempt<'_>, stream: RawStream) -> Step<AttemptEnd> {
        let validator = StreamValidator::new(
            self.env.validator.clone(),
            self.env.message_limits.clone(),
            self.ctx.allowlist.clone(),
        );
        let mut items = keel_stream::validate(stream, validator);
        let mut output = ModelOutput::default();
        loop {
            // What the log shows of this attempt before the next item: the
            // position of a failure that item causes without being recorded.
            let before = items.position();
            let polled = AssertUnwindSafe(items.next()).catch_unwind();
            let next = tokio::time::timeout_at(at.deadline, polled).await;
            let position = items.position();
            let problem = match next {
                Ok(Ok(Some(item))) => {
                    match self.item(at, item, before, position, &mut output).await? {
                        Some(end) => return Ok(end),
                        None => continue,
                    }
                }
                Err(_) => self.timeout_problem(),
                Ok(Err(_panic)) => panic_problem("the provider stream panicked"),
                // ValidatedStream always ends with a terminal; reaching
                // here means it did not, which the log must still close.
                Ok(Ok(None)) => ProviderProblem::new(
                    ProblemKind::Protocol,
                    "stream ended without a terminal",
                    false,
                ),
            };
            drop(items);
            self.close_reasoning(at, &mut output).await?;
            return self
                .model_failed(at, ModelFailure::new(problem, position))
                .await;
        }
    }

    /// Records one validated item; `Some` when it ended the attempt. A
    /// reasoning part still open is closed (`model.reasoning_end`, unsigned)
    /// before any item that is not its signature or another delta.
    async fn item(
        &self,
        at: &Attempt<'_>,
        item: StreamItem,
        before: RetryPosition,
        position: RetryPosition,
        output: &mut ModelOutput,
    ) -> Step<Option<AttemptEnd>> {
        match item {
            StreamItem::ReasoningDelta(delta) => {
                self.rec
                    .record(Payload::ReasoningDelta(ReasoningDelta {
                        turn: at.turn,
                        operation_id: at.operation_id.clone(),
                        text: delta.text().to_owned(),
                        extra: Extra::new(),
                    }))
                    .await?;
                output.push_reasoning_delta(delta.text());
                return Ok(None);
            }
            StreamItem::ReasoningSignature(signature) => {
                self.reasoning_end(at, Some(signature.clone()), None)
                    .await?;
                output.end_reasoning(at.provider.clone(), Some(signature));
                return Ok(None);
            }
            _ => {}
        }
        self.close_reasoning(at, output).await?;
        match item {
            StreamItem::TextDelta(delta) => {
                self.rec
                    .record(Payload::TextDelta(TextDelta {
                        turn: at.turn,
                        operation_id: at.operation_id.clone(),
                        text: delta.text().to_owned(),
                        extra: Extra::new(),
                    }))
                    .await?;
                output.push_text(delta.text());
            }
            StreamItem::RedactedReasoning(value) => {
                self.reasoning_end(at, None, Some(value.clone())).await?;
                output.push_redacted(at.provider.clone(), value);
            }
            StreamItem::ToolCall(call) => {
                return self.tool_call_item(at, call, before, output).await;
            }
            StreamItem::Completion(done) => {
                let output = std::mem::take(output);
                return self.completed(at, done, output, position).await.map(Some);
            }
            StreamItem::Failure(failure) => return self.model_failed(at, failure).await.map(Some),
            // Handled above.
            StreamItem::ReasoningDelta(_) | StreamItem::ReasoningSignature(_) => {}
        }
        Ok(None)
    }

    /// Records `model.reasoning_end` for the part still open, unsigned.
    async fn close_reasoning(&self, at: &Attempt<'_>, output: &mut ModelOutput) -> Step<()> {
        if output.has_open_reasoning() {
            self.reasoning_end(at, None, None).await?;
            output.end_reasoning(at.provider.clone(), None);
        }
        Ok(())
    }

    async fn reasoning_end(
        &self,
        at: &Attempt<'_>,
        signature: Option<OpaqueValue>,
        redacted: Option<OpaqueValue>,
    ) -> Step<()> {
        self.rec
            .record(Payload::ReasoningEnd(ReasoningEnd {
                turn: at.turn,
                operation_id: at.operation_id.clone(),
                provider: at.provider.clone(),
                signature,
                redacted,
                extra: Extra::new(),
            }))
            .await?;
        Ok(())
    }

    /// Records a tool call, unless its id was used by an earlier call of
    /// this run: then the attempt fails as a protocol error before any tool
    /// runs (a scope identity is never started twice), at `before`, the
    /// validator's position before this call: the reused call is not
    /// recorded.
    async fn tool_call_item(
        &self,
        at: &Attempt<'_>,
        call: ToolCallPart,
        before: RetryPosition,
        output: &mut ModelOutput,
    ) -> Step<Option<AttemptEnd>> {
        if self.state().call_ids.contains(call.call_id()) {
            let problem = ProviderProblem::new(
                ProblemKind::Protocol,
                &format!(
                    "tool call id {} was already used in this run (rule run.unique_call_id)",
                    call.call_id()
                ),
                false,
            );
            let failure = ModelFailure::new(problem, before);
            return self.model_failed(at, failure).await.map(Some);
        }
        self.rec
            .record(Payload::ToolCall(ToolCall {
                turn: at.turn,
                operation_id: at.operation_id.clone(),
                call_id: call.call_id().clone(),
                name: call.name().clone(),
                arguments: call.arguments().clone(),
                extra: Extra::new(),
            }))
            .await?;
        output.push_call(call);
        Ok(None)
    }

    /// The stream completed. An empty completion (no text, no tool calls)
    /// is a failed attempt (`protocol`, retryable), never a turn that
    /// fails on a message rule: see the per-run composition RFC.
    async fn completed(
        &self,
        at: &Attempt<'_>,
        done: Completion,
        output: ModelOutput,
        position: RetryPosition,
    ) -> Step<AttemptEnd> {
        let usage = done.usage();
        if let Some(u) = &usage {
            self.charge_usage(u);
        }
        {
            let mut st = self.state();
            if let Some(u) = &usage {
                st.usage.add(u);
            }
            if at.purpose.is_none() && output.has_answer() {
                // What the context estimator starts from once the answer
                // joins the history.
                st.answer_usage = usage
                    .as_ref()
                    .map(|u| u.input_tokens().saturating_add(u.output_tokens()));
            }
        }
        if !output.has_answer() {
            let problem = ProviderProblem::new(
                ProblemKind::Protocol,
                "the model completed with no text and no tool calls (rule model.nonempty_completion)",
                true,
            );
            return self
                .model_failed(at, ModelFailure::new(problem, position))
                .await;
        }
        // The validated, screened type goes into the event as it is.
        let metadata = (!done.metadata().is_empty()).then(|| done.metadata().clone());
        self.rec
            .record(Payload::ModelCompleted(ModelCompleted {
                turn: at.turn,
                operation_id: at.operation_id.clone(),
                finish: done.finish(),
                usage,
                metadata,
                extra: Extra::new(),
            }))
            .await?;
        let mut st = self.state();
        st.call_ids
            .extend(output.calls().map(|c| c.call_id().clone()));
        Ok(AttemptEnd::Completed(output))
    }

    async fn model_failed(&self, at: &Attempt<'_>, failure: ModelFailure) -> Step<AttemptEnd> {
        let (problem, position) = (failure.problem().clone(), failure.position());
        self.rec
            .record(Payload::ModelFailed(ModelFailed {
                turn: at.turn,
                operation_id: at.operation_id.clone(),
                problem: ProblemRecord::from(&problem),
                position: position.clone(),
                extra: Extra::new(),
            }))
            .await?;
        Ok(AttemptEnd::Failed { problem, position })
    }
}

fn panic_problem(message: &str) -> ProviderProblem {
    ProviderProblem::new(ProblemKind::Other, message, false)
}

fn model_failure(
    operation_id: OperationId,
    problem: ProviderProblem,
    position: RetryPosition,
) -> TurnFailure {
    let error = ErrorText::new(&format!(
        "model call {operation_id} failed: {} ({})",
        problem.message(),
        problem.kind()
    ));
    let cause = Cause {
        operation_id: Some(operation_id.clone()),
        ..Cause::default()
    };
    TurnFailure {
        cause: FailureCause::Model {
            operation_id,
            problem,
            position,
        },
        error,
        event_cause: Some(cause),
    }
}

fn hash_seed(run: &str, turn: u64) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    run.hash(&mut h);
    turn.hash(&mut h);
    h.finish()
}
