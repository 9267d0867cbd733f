//! Tool calls and approvals: at most `max_parallel_tools` at once, results
//! in call order, each call resolved against the turn's tool set;
//! approval first where a tool needs it (within `approval_timeout`; a
//! source tool that needs it in a run with no handler fails, definitive);
//! every extension point guarded; an output that does not fit the log is
//! the tool's failure, and a tool's cut is recorded in `tool.completed`.

use super::sources::TurnTools;
use super::turn::TurnFailure;
use super::{Interrupt, Runner, Step};
use crate::error::FailureCause;
use crate::guard::guarded;
use crate::interaction::{
    InteractionDecision, InteractionHandler, InteractionKind, InteractionRequest,
};
use crate::tool::{OnToolFailure, OutputCut, Tool, ToolInvocation, ToolOutput, ToolPolicy};
use futures_util::StreamExt;
use keel_eventlog::history;
use keel_eventlog::{
    Cause, CommitError, ErrorText, Extra, InteractionCompleted, InteractionFailed,
    InteractionStarted, Payload, ToolCompleted, ToolFailed, ToolOutcome, ToolRef, ToolRetry,
};
use keel_message::{CallId, ImagePart, InteractionId, MessageError, Part, ToolCallPart, ToolName};
use std::sync::Arc;

/// A tool failure whose policy ends the run.
pub(super) struct EndsRun {
    call_id: CallId,
    tool: ToolName,
    error: String,
}

impl EndsRun {
    pub(super) fn new(call_id: &CallId, tool: &ToolName, error: String) -> EndsRun {
        EndsRun {
            call_id: call_id.clone(),
            tool: tool.clone(),
            error,
        }
    }

    pub(super) fn into_failure(self) -> TurnFailure {
        let EndsRun {
            call_id,
            tool,
            error,
        } = self;
        TurnFailure {
            error: ErrorText::new(&format!("tool {tool} (call {call_id}) failed: {error}")),
            event_cause: Some(Cause {
                call_id: Some(call_id.clone()),
                tool: Some(tool.clone()),
                ..Cause::default()
            }),
            cause: FailureCause::Tool {
                call_id,
                tool,
                error,
            },
        }
    }
}

/// How a turn's tool calls ended.
pub(super) enum ToolsEnd {
    /// Every call ended; their results, in call order.
    Results(Vec<Part>),
    /// A failure ended the run; calls still in flight were dropped.
    Ended(EndsRun),
}

/// The live path records known values only: a tool's unknown outcome
/// (made with `ToolOutcome::from_wire`) is recorded as its generic meaning,
/// `uncertain`.
fn known_outcome(outcome: ToolOutcome) -> ToolOutcome {
    if outcome.is_known() {
        outcome
    } else {
        ToolOutcome::Uncertain
    }
}

/// As [`known_outcome`]: an unknown retry is recorded as `not_retryable`.
fn known_retry(retry: ToolRetry) -> ToolRetry {
    if retry.is_known() {
        retry
    } else {
        ToolRetry::NotRetryable
    }
}

/// The outcome of one tool call, as fed back to the model.
pub(super) struct ToolEnd {
    pub(super) part: Part,
    pub(super) ends_run: Option<EndsRun>,
}

impl ToolEnd {
    /// A result fed back to the model, the run going on.
    pub(super) fn fed_back(part: Part) -> ToolEnd {
        ToolEnd {
            part,
            ends_run: None,
        }
    }
}

/// Why a tool call failed, as `tool.failed` records it.
pub(super) struct CallFailure {
    message: String,
    outcome: Option<ToolOutcome>,
    retry: Option<ToolRetry>,
}

impl CallFailure {
    pub(super) fn typed(message: String, outcome: ToolOutcome, retry: ToolRetry) -> CallFailure {
        CallFailure {
            message,
            outcome: Some(outcome),
            retry: Some(retry),
        }
    }
    /// A tool's own typed error, its unknown outcome and retry recorded as
    /// their generic meanings.
    pub(super) fn from_tool_error(e: crate::tool::ToolError) -> CallFailure {
        CallFailure {
            message: e.message,
            outcome: e.outcome.map(known_outcome),
            retry: e.retry.map(known_retry),
        }
    }
    fn plain(message: String) -> CallFailure {
        CallFailure {
            message,
            outcome: None,
            retry: None,
        }
    }
    /// A tool that needs approval in a run with no interaction handler
    /// (only a source tool can be one: a fixed tool refuses the run).
    fn unapprovable(tool: &ToolName) -> CallFailure {
        CallFailure {
            message: format!(
                "tool {tool} requires approval but the run has no interaction handler (rule run.approval_handler)"
            ),
            outcome: Some(ToolOutcome::Definitive),
            retry: Some(ToolRetry::NotRetryable),
        }
    }
    fn uncertain(message: String, retry: ToolRetry) -> CallFailure {
        CallFailure {
            message,
            outcome: Some(ToolOutcome::Uncertain),
            retry: Some(retry),
        }
    }
}

impl Runner {
    /// Runs the calls, at most `max_parallel_tools` at once. Dropping the
    /// unfinished futures (when a failure ends the run) drops tool calls
    /// and approvals still in flight; the turn then closes their scopes.
    pub(super) async fn run_tools(
        &self,
        turn: u64,
        calls: &[ToolCallPart],
        tools: &TurnTools,
    ) -> Step<ToolsEnd> {
        let mut results: Vec<Option<Part>> = calls.iter().map(|_| None).collect();
        let mut pending = calls.iter().enumerate();
        let mut running = futures_util::stream::FuturesUnordered::new();
        loop {
            while running.len() < self.ctx.limits.max_parallel_tools {
                let Some((i, call)) = pending.next() else {
                    break;
                };
                running.push(async move { (i, self.tool_call(turn, call, tools).await) });
            }
            let Some((i, result)) = running.next().await else {
                break;
            };
            let end = result?;
            if let Some(ended) = end.ends_run {
                return Ok(ToolsEnd::Ended(ended));
            }
            results[i] = Some(end.part);
        }
        Ok(ToolsEnd::Results(results.into_iter().flatten().collect()))
    }

    pub(super) fn result_part(
        &self,
        call: &ToolCallPart,
        content: &str,
        is_error: bool,
    ) -> Step<Part> {
        self.result_part_with_images(call, content, is_error, Vec::new())
    }

    fn result_part_with_images(
        &self,
        call: &ToolCallPart,
        content: &str,
        is_error: bool,
        images: Vec<ImagePart>,
    ) -> Step<Part> {
        let limits = &self.env.message_limits;
        history::tool_result_part_with_images(call.call_id(), content, is_error, images, limits)
            .map_err(Interrupt::Message)
    }

    /// One tool call: approval if the tool needs it, then the tool scope.
    /// A tool that needs approval in a run with no handler is not run: its
    /// call fails (definitive) and is fed back, whatever its policy says.
    async fn tool_call(&self, turn: u64, call: &ToolCallPart, tools: &TurnTools) -> Step<ToolEnd> {
        let tool = tools.set.get(call.name()).cloned();
        let mut policy = tool.as_ref().map(|t| t.policy()).unwrap_or_default();
        let unapprovable = policy.requires_approval && self.ctx.interactions.is_none();
        if policy.requires_approval
            && let Some(handler) = self.ctx.interactions.clone()
            && let Some(refusal) = self.approval(turn, call, handler).await?
        {
            return Ok(ToolEnd {
                part: self.result_part(call, &refusal, true)?,
                ends_run: None,
            });
        }
        // Durable before the side effect: a crash after the tool acted
        // must not leave a history that says it never started.
        self.rec
            .record_durable(Payload::ToolStarted(ToolRef {
                turn,
                call_id: call.call_id().clone(),
                tool: call.name().clone(),
                extra: started_extra(&policy),
            }))
            .await?;
        let agent = tool.as_ref().and_then(|t| t.as_agent());
        let result = if unapprovable {
            policy.on_failure = OnToolFailure::FeedBack;
            Err(CallFailure::unapprovable(call.name()))
        } else if let Some(agent) = agent {
            return self.delegate(turn, call, agent, &policy).await;
        } else {
            self.invoke(turn, call, tool, &policy).await
        };
        self.finish(turn, call, result, &policy).await
    }

    /// Asks the handler (guarded, within `approval_timeout`); `Some` is why
    /// the tool is not run.
    async fn approval(
        &self,
        turn: u64,
        call: &ToolCallPart,
        handler: Arc<dyn InteractionHandler>,
    ) -> Step<Option<String>> {
        let n = {
            let mut st = self.state();
            st.interactions += 1;
            st.interactions
        };
        let interaction_id = InteractionId::parse(&format!("i_{n}"))
            .map_err(|e| Interrupt::Message(MessageError::from(e)))?;
        // Durable before the question reaches a person.
        self.rec
            .record_durable(Payload::InteractionStarted(InteractionStarted {
                turn,
                interaction_id: interaction_id.clone(),
                request: "approval".into(),
                call_id: Some(call.call_id().clone()),
                extra: Extra::new(),
            }))
            .await?;
        let request = InteractionRequest {
            run_id: self.run_id.clone(),
            turn,
            interaction_id: interaction_id.clone(),
            kind: InteractionKind::Approval {
                call_id: call.call_id().clone(),
                tool: call.name().clone(),
                arguments: call.arguments().clone(),
            },
        };
        let timeout = self.ctx.limits.approval_timeout;
        let answer = tokio::time::timeout(timeout, guarded(move || handler.handle(request))).await;
        let failure = match answer {
            Ok(Ok(Ok(decision))) => {
                self.rec
                    .record(Payload::InteractionCompleted(InteractionCompleted {
                        turn,
                        interaction_id,
                        decision: decision.as_str().into(),
                        extra: Extra::new(),
                    }))
                    .await?;
                let denied = decision == InteractionDecision::Denied;
                return Ok(denied.then(|| history::DENIED_RESULT.to_owned()));
            }
            Ok(Ok(Err(e))) => e.0,
            Ok(Err(_panic)) => "interaction handler panicked".to_owned(),
            Err(_) => format!(
                "no answer within limits.approval_timeout ({} ms) (rule interaction.timeout)",
                timeout.as_millis()
            ),
        };
        let error = ErrorText::new(&failure);
        self.rec
            .record(Payload::InteractionFailed(InteractionFailed {
                turn,
                interaction_id,
                error: error.clone(),
                extra: Extra::new(),
            }))
            .await?;
        Ok(Some(history::approval_failed_result(&error)))
    }

    /// Calls the tool (guarded, within its timeout) and bounds its output.
    async fn invoke(
        &self,
        turn: u64,
        call: &ToolCallPart,
        tool: Option<Arc<dyn Tool>>,
        policy: &ToolPolicy,
    ) -> Result<ToolOutput, CallFailure> {
        let Some(tool) = tool else {
            return Err(CallFailure::plain(format!("unknown tool {}", call.name())));
        };
        let timeout = policy.timeout.unwrap_or(self.ctx.limits.tool_call_timeout);
        let invocation = ToolInvocation {
            run_id: self.run_id.clone(),
            turn,
            call_id: call.call_id().clone(),
            arguments: call.arguments().clone(),
        };
        let part_bytes = self.env.message_limits.part_bytes;
        match tokio::time::timeout(timeout, guarded(move || tool.call(invocation))).await {
            Err(_) => Err(CallFailure::uncertain(
                format!("timed out after {} ms", timeout.as_millis()),
                ToolRetry::Retryable,
            )),
            Ok(Err(_panic)) => Err(CallFailure::plain("tool panicked".to_owned())),
            Ok(Ok(Err(e))) => Err(CallFailure::from_tool_error(e)),
            Ok(Ok(Ok(output))) if output.content().len() > part_bytes => {
                Err(CallFailure::uncertain(
                    format!(
                        "tool output is {} bytes, over limits.part_bytes {part_bytes}",
                        output.content().len()
                    ),
                    ToolRetry::NotRetryable,
                ))
            }
            Ok(Ok(Ok(output))) => {
                // The images must fit the result part's bounds, which name
                // themselves (`limits.image_bytes`, …).
                let limits = &self.env.message_limits;
                let images = output.images().to_vec();
                match Part::tool_result_with_images(
                    call.call_id().clone(),
                    "",
                    false,
                    images,
                    limits,
                ) {
                    Ok(_) => Ok(output),
                    Err(e) => Err(CallFailure::uncertain(
                        format!("tool output images: {e}"),
                        ToolRetry::NotRetryable,
                    )),
                }
            }
        }
    }

    /// Records the tool's terminal. The event-size rule is the log's: an
    /// output the log refuses as too large becomes the tool's failure.
    pub(super) async fn finish(
        &self,
        turn: u64,
        call: &ToolCallPart,
        result: Result<ToolOutput, CallFailure>,
        policy: &ToolPolicy,
    ) -> Step<ToolEnd> {
        let failure = match result {
            Ok(output) => {
                let cut = output.output_cut();
                // Images are shared (reference-counted), not copied.
                let images = output.images().to_vec();
                let output = output.into_content();
                // The result part copies the output; the payload then takes it.
                let part = self.result_part_with_images(call, &output, false, images.clone())?;
                let completed = Payload::ToolCompleted(ToolCompleted {
                    turn,
                    call_id: call.call_id().clone(),
                    tool: call.name().clone(),
                    output,
                    images,
                    extra: cut.map(cut_extra).unwrap_or_default(),
                });
                match self.rec.record(completed).await {
                    Ok(_) => {
                        return Ok(ToolEnd {
                            part,
                            ends_run: None,
                        });
                    }
                    Err(Interrupt::Log(e @ CommitError::EventTooLarge { .. })) => {
                        CallFailure::uncertain(
                            format!("tool output cannot be recorded: {e}"),
                            ToolRetry::NotRetryable,
                        )
                    }
                    Err(e) => return Err(e),
                }
            }
            Err(failure) => failure,
        };
        let error = ErrorText::new(&failure.message);
        self.rec
            .record(Payload::ToolFailed(ToolFailed {
                turn,
                call_id: call.call_id().clone(),
                tool: call.name().clone(),
                error: error.clone(),
                outcome: failure.outcome,
                retry: failure.retry,
                extra: Extra::new(),
            }))
            .await?;
        Ok(ToolEnd {
            part: self.result_part(call, error.as_str(), true)?,
            ends_run: (policy.on_failure == OnToolFailure::EndRun).then(|| EndsRun {
                call_id: call.call_id().clone(),
                tool: call.name().clone(),
                error: error.as_str().to_owned(),
            }),
        })
    }
}

/// `tool.started`'s members beyond the scope: `"idempotent": true` for an
/// idempotent tool (what recovery reads), nothing otherwise.
fn started_extra(policy: &ToolPolicy) -> Extra {
    let mut extra = Extra::new();
    if policy.idempotent {
        extra.insert(
            keel_eventlog::recovery::IDEMPOTENT.to_owned(),
            serde_json::Value::Bool(true),
        );
    }
    extra
}

/// `tool.completed`'s record of a cut:
/// `"output_cut": {"original_bytes": N, "kept_bytes": M}`.
pub(super) fn cut_extra(cut: OutputCut) -> Extra {
    let mut extra = Extra::new();
    extra.insert(
        "output_cut".to_owned(),
        serde_json::json!({
            "original_bytes": cut.original_bytes,
            "kept_bytes": cut.kept_bytes,
        }),
    );
    extra
}
