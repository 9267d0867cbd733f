//! The run loop: turns, model calls with retries, tools with bounded
//! parallelism, interactions, cancellation and closing.

use crate::cancel::CancelToken;
use crate::config::PartialRetry;
use crate::engine::{EngineInner, RunOutcome, RunRequest};
use crate::error::FailureCause;
use crate::interaction::{InteractionDecision, InteractionKind, InteractionRequest};
use crate::tool::{OnToolFailure, ToolInvocation};
use futures_util::{FutureExt, StreamExt};
use keel_eventlog::{
    Cause, ErrorText, Event, Extra, InteractionCompleted, InteractionFailed, InteractionRef,
    InteractionStarted, ModelCompleted, ModelFailed, ModelRef, ModelStarted, Payload,
    ProblemRecord, RunCancelled, RunCompleted, RunFailed, RunLog, RunStarted, ScopeKey, TextDelta,
    ToolCall, ToolCompleted, ToolFailed, ToolRef, TurnFailed, TurnRef,
};
use keel_message::{
    CallId, CanonicalJson, InteractionId, Message, MessageId, ModelRequest, OperationId,
    OperationIdIssuer, Part, Role, ToolCallPart, ToolName,
};
use keel_observers::DispatchError;
use keel_stream::{
    ModelProvider, ProblemKind, ProviderProblem, RetryPosition, StreamItem, StreamValidator, Usage,
};
use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Why the loop stopped early.
enum Interrupt {
    /// A required observer refused an event.
    Observer(DispatchError),
    /// The log refused a commit.
    Commit(String),
}

type Step<T> = Result<T, Interrupt>;

/// The largest event envelope around a payload: `{"kind":"…","payload":`,
/// `,"run_id":"…","seq":…,"ts":…}` with a 64-byte kind, a 128-byte run id
/// and 20-digit numbers.
const ENVELOPE_MAX_BYTES: usize = 64 + 128 + 20 + 20 + 48;

/// The largest `tool.completed` payload apart from its output: member
/// names, a 128-byte call id, a 64-byte tool name, a 20-digit turn.
const PAYLOAD_FIXED_MAX_BYTES: usize = 64 + 128 + 64 + 20;

/// Each usage total is capped at 2^52 so their sum stays within 2^53 − 1.
const USAGE_CAP: u64 = 1 << 52;

/// How a turn ended.
enum TurnEnd {
    /// No tool calls: the run is done.
    Final(Message),
    /// Tool results were appended: next turn.
    Continue,
    /// The turn (and run) failed.
    Failed(Box<FailureCause>, ErrorText, Option<Cause>),
}

/// How one model attempt ended.
enum ModelEnd {
    Completed {
        text: String,
        calls: Vec<ToolCallPart>,
    },
    Failed {
        problem: ProviderProblem,
        position: RetryPosition,
    },
}

/// The outcome of one tool call, as fed back to the model.
struct ToolEnd {
    part: Part,
    /// Set when the failure policy ends the run.
    ends_run: Option<(CallId, ToolName, String)>,
}

struct State {
    history: Vec<Message>,
    ops: OperationIdIssuer,
    usage: (u64, u64, bool),
    interactions: u64,
    /// Open tool calls, so a cancellation can name their tool.
    open_tools: HashMap<CallId, ToolName>,
    /// Set once the run's terminal is committed: the outcome the log records.
    final_outcome: Option<RunOutcome>,
}

pub(crate) struct Runner {
    engine: Arc<EngineInner>,
    log: RunLog,
    provider: Arc<dyn ModelProvider>,
    request: RunRequest,
    /// Serializes commit + dispatch, so observers see each run's events in
    /// sequence order even while tools run in parallel.
    gate: tokio::sync::Mutex<()>,
    /// The last sequence every required observer acknowledged.
    acked: AtomicU64,
    state: Mutex<State>,
}

impl Runner {
    pub(crate) fn new(
        engine: Arc<EngineInner>,
        log: RunLog,
        provider: Arc<dyn ModelProvider>,
        request: RunRequest,
    ) -> Runner {
        Runner {
            engine,
            log,
            provider,
            state: Mutex::new(State {
                history: request.history.clone(),
                ops: OperationIdIssuer::new(),
                usage: (0, 0, false),
                interactions: 0,
                open_tools: HashMap::new(),
                final_outcome: None,
            }),
            request,
            gate: tokio::sync::Mutex::new(()),
            acked: AtomicU64::new(0),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs to the end. Cancellation drops everything in flight (provider
    /// stream, tool futures, a pending observer acknowledgement), then the
    /// open scopes are closed innermost first.
    pub(crate) async fn run(self, cancel: CancelToken) -> RunOutcome {
        let driven = tokio::select! {
            biased;
            () = cancel.cancelled() => None,
            r = self.drive() => Some(r),
        };
        let outcome = self.settle(driven).await;
        // The log is the authority: once the run's terminal is committed,
        // the outcome is what it records, whatever interrupted afterwards.
        self.state().final_outcome.take().unwrap_or(outcome)
    }

    async fn settle(&self, driven: Option<Step<RunOutcome>>) -> RunOutcome {
        match driven {
            Some(Ok(outcome)) => {
                // The run's terminal is in the log; offer observers anything
                // they have not acknowledged yet (a refused terminal, say).
                self.close(None, None).await;
                outcome
            }
            None => {
                self.close(None, None).await;
                RunOutcome::Cancelled
            }
            Some(Err(Interrupt::Observer(e))) => {
                let cause = Cause {
                    observer: Some(truncate(&e.observer, 128)),
                    seq: Some(e.seq),
                    ..Cause::default()
                };
                self.close(Some((ErrorText::new(&e.to_string()), cause)), Some(e.index))
                    .await;
                RunOutcome::Failed {
                    cause: FailureCause::Observer(e),
                }
            }
            Some(Err(Interrupt::Commit(e))) => {
                self.close(Some((ErrorText::new(&e), Cause::default())), None)
                    .await;
                RunOutcome::Failed {
                    cause: FailureCause::Internal(e),
                }
            }
        }
    }

    /// Commits to the log, then dispatches to the observers, one event at a
    /// time per run.
    async fn record(&self, payload: Payload) -> Step<Arc<Event>> {
        let _turn = self.gate.lock().await;
        let event = self
            .log
            .commit(&payload)
            .map_err(|e| Interrupt::Commit(e.to_string()))?;
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
    async fn record_final(&self, payload: Payload, outcome: RunOutcome) -> Step<RunOutcome> {
        let _turn = self.gate.lock().await;
        let event = self
            .log
            .commit(&payload)
            .map_err(|e| Interrupt::Commit(e.to_string()))?;
        // From here on the log says how the run ended; a cancellation
        // during the dispatch below must not report otherwise.
        self.state().final_outcome = Some(outcome.clone());
        if self.engine.pipeline.dispatch(&event).await.is_ok() {
            self.acked.store(event.seq(), Ordering::SeqCst);
        }
        Ok(outcome)
    }

    async fn drive(&self) -> Step<RunOutcome> {
        self.record(Payload::RunStarted(RunStarted {
            model: Some(self.request.model.clone()),
            extra: Extra::new(),
        }))
        .await?;
        let max_turns = self.engine.limits.max_turns;
        for turn in 1..=max_turns {
            self.record(Payload::TurnStarted(TurnRef {
                turn,
                extra: Extra::new(),
            }))
            .await?;
            match self.turn(turn).await? {
                TurnEnd::Final(message) => {
                    self.record(Payload::TurnCompleted(TurnRef {
                        turn,
                        extra: Extra::new(),
                    }))
                    .await?;
                    let usage = self.usage();
                    let outcome = RunOutcome::Completed {
                        final_message: message,
                        usage: usage.unwrap_or_default(),
                    };
                    return self
                        .record_final(
                            Payload::RunCompleted(RunCompleted {
                                usage,
                                extra: Extra::new(),
                            }),
                            outcome,
                        )
                        .await;
                }
                TurnEnd::Continue => {
                    self.record(Payload::TurnCompleted(TurnRef {
                        turn,
                        extra: Extra::new(),
                    }))
                    .await?;
                }
                TurnEnd::Failed(cause, error, event_cause) => {
                    self.record(Payload::TurnFailed(TurnFailed {
                        turn,
                        error: error.clone(),
                        cause: event_cause.clone(),
                        extra: Extra::new(),
                    }))
                    .await?;
                    return self
                        .record_final(
                            Payload::RunFailed(RunFailed {
                                error,
                                cause: event_cause,
                                extra: Extra::new(),
                            }),
                            RunOutcome::Failed { cause: *cause },
                        )
                        .await;
                }
            }
        }
        let detail = format!("the model was still calling tools after {max_turns} turns");
        let outcome = RunOutcome::Failed {
            cause: FailureCause::Limit {
                limit: "limits.max_turns".into(),
                detail: detail.clone(),
            },
        };
        self.record_final(
            Payload::RunFailed(RunFailed {
                error: ErrorText::new(&format!("limits.max_turns: {detail}")),
                cause: None,
                extra: Extra::new(),
            }),
            outcome,
        )
        .await
    }

    fn usage(&self) -> Option<Usage> {
        let (i, o, any) = self.state().usage;
        if any { Usage::new(i, o).ok() } else { None }
    }

    async fn turn(&self, turn: u64) -> Step<TurnEnd> {
        let retry = self.engine.limits.retry.clone();
        let mut attempt: u32 = 0;
        let (text, calls) = loop {
            attempt += 1;
            let (operation_id, history) = {
                let mut st = self.state();
                (st.ops.issue(), st.history.clone())
            };
            let request = match ModelRequest::new_with(
                operation_id.clone(),
                self.request.model.clone(),
                history.into(),
                Arc::clone(&self.engine.definitions),
                &self.engine.message_limits,
            ) {
                Ok(r) => r,
                Err(e) => {
                    let detail = e.to_string();
                    return Ok(failed(
                        FailureCause::Limit {
                            limit: e.kind().rule().to_owned(),
                            detail: detail.clone(),
                        },
                        ErrorText::new(&detail),
                        None,
                    ));
                }
            };
            self.record(Payload::ModelStarted(ModelStarted {
                turn,
                operation_id: operation_id.clone(),
                model: self.request.model.clone(),
                attempt,
                extra: Extra::new(),
            }))
            .await?;
            match self.model_call(turn, &operation_id, request).await? {
                ModelEnd::Completed { text, calls } => break (text, calls),
                ModelEnd::Failed { problem, position } => {
                    let allowed = match position {
                        RetryPosition::Pristine => true,
                        RetryPosition::Partial => retry.partial == PartialRetry::Restart,
                    };
                    let seed = hash_seed(self.request.run_id.as_str(), turn);
                    if problem.retryable()
                        && allowed
                        && attempt < retry.max_attempts
                        && let Some(wait) = retry.backoff(attempt, seed, problem.retry_after())
                    {
                        tokio::time::sleep(wait).await;
                        continue;
                    }
                    let error = ErrorText::new(&format!(
                        "model call {operation_id} failed: {} ({})",
                        problem.message(),
                        problem.kind()
                    ));
                    let cause = Cause {
                        operation_id: Some(operation_id.clone()),
                        ..Cause::default()
                    };
                    return Ok(failed(
                        FailureCause::Model {
                            operation_id,
                            problem,
                            position,
                        },
                        error,
                        Some(cause),
                    ));
                }
            }
        };
        self.after_model(turn, text, calls).await
    }

    /// One model attempt: start, stream through the validator, commit every
    /// item, end with exactly one model terminal.
    async fn model_call(
        &self,
        turn: u64,
        operation_id: &OperationId,
        request: ModelRequest,
    ) -> Step<ModelEnd> {
        let deadline = tokio::time::Instant::now() + self.engine.limits.model_call_timeout;
        let timeout_problem = || {
            ProviderProblem::new(
                ProblemKind::Timeout,
                &format!(
                    "model call exceeded limits.model_call_timeout ({} ms)",
                    self.engine.limits.model_call_timeout.as_millis()
                ),
                true,
            )
        };
        let started = tokio::time::timeout_at(deadline, self.provider.start(request)).await;
        let stream = match started {
            Err(_) => {
                return self
                    .model_failed(
                        turn,
                        operation_id,
                        timeout_problem(),
                        RetryPosition::Pristine,
                    )
                    .await;
            }
            Ok(Err(raw)) => {
                let problem = ProviderProblem::from_raw(raw, &self.engine.message_limits);
                return self
                    .model_failed(turn, operation_id, problem, RetryPosition::Pristine)
                    .await;
            }
            Ok(Ok(stream)) => stream,
        };
        let validator = StreamValidator::new(
            self.engine.validator.clone(),
            self.engine.message_limits.clone(),
            self.engine.allowlist.clone(),
        );
        let mut items = keel_stream::validate(stream, validator);
        let mut text = String::new();
        let mut calls = Vec::new();
        loop {
            let next = match tokio::time::timeout_at(deadline, items.next()).await {
                Ok(next) => next,
                Err(_) => {
                    let position = items.position();
                    drop(items);
                    return self
                        .model_failed(turn, operation_id, timeout_problem(), position)
                        .await;
                }
            };
            match next {
                Some(StreamItem::TextDelta(delta)) => {
                    self.record(Payload::TextDelta(TextDelta {
                        turn,
                        operation_id: operation_id.clone(),
                        text: delta.text().to_owned(),
                        extra: Extra::new(),
                    }))
                    .await?;
                    text.push_str(delta.text());
                }
                Some(StreamItem::ToolCall(call)) => {
                    self.record(Payload::ToolCall(ToolCall {
                        turn,
                        operation_id: operation_id.clone(),
                        call_id: call.call_id().clone(),
                        name: call.name().clone(),
                        arguments: call.arguments().clone(),
                        extra: Extra::new(),
                    }))
                    .await?;
                    calls.push(call);
                }
                Some(StreamItem::Completion(done)) => {
                    drop(items);
                    let usage = done.usage();
                    if let Some(u) = &usage {
                        let mut st = self.state();
                        // Capped so the total stays a JSON-safe integer.
                        st.usage.0 = st.usage.0.saturating_add(u.input_tokens()).min(USAGE_CAP);
                        st.usage.1 = st.usage.1.saturating_add(u.output_tokens()).min(USAGE_CAP);
                        st.usage.2 = true;
                    }
                    let metadata = if done.metadata().is_empty() {
                        None
                    } else {
                        CanonicalJson::parse(&done.metadata().to_canonical_string()).ok()
                    };
                    self.record(Payload::ModelCompleted(ModelCompleted {
                        turn,
                        operation_id: operation_id.clone(),
                        finish: done.finish(),
                        usage,
                        metadata,
                        extra: Extra::new(),
                    }))
                    .await?;
                    return Ok(ModelEnd::Completed { text, calls });
                }
                Some(StreamItem::Failure(failure)) => {
                    drop(items);
                    return self
                        .model_failed(
                            turn,
                            operation_id,
                            failure.problem().clone(),
                            failure.position(),
                        )
                        .await;
                }
                None => {
                    // ValidatedStream always ends with a terminal; reaching
                    // here means it did not, which the log must still close.
                    let position = items.position();
                    let problem = ProviderProblem::new(
                        ProblemKind::Protocol,
                        "stream ended without a terminal",
                        false,
                    );
                    return self
                        .model_failed(turn, operation_id, problem, position)
                        .await;
                }
            }
        }
    }

    async fn model_failed(
        &self,
        turn: u64,
        operation_id: &OperationId,
        problem: ProviderProblem,
        position: RetryPosition,
    ) -> Step<ModelEnd> {
        self.record(Payload::ModelFailed(ModelFailed {
            turn,
            operation_id: operation_id.clone(),
            problem: ProblemRecord::from(&problem),
            position,
            extra: Extra::new(),
        }))
        .await?;
        Ok(ModelEnd::Failed { problem, position })
    }

    /// After a completed model call: finish, or run the tools and continue.
    async fn after_model(
        &self,
        turn: u64,
        text: String,
        calls: Vec<ToolCallPart>,
    ) -> Step<TurnEnd> {
        let limits = &self.engine.limits;
        if calls.len() > limits.max_tool_calls_per_turn {
            let detail = format!(
                "the model asked for {} tool calls, the bound is {}",
                calls.len(),
                limits.max_tool_calls_per_turn
            );
            return Ok(failed(
                FailureCause::Limit {
                    limit: "limits.max_tool_calls_per_turn".into(),
                    detail: detail.clone(),
                },
                ErrorText::new(&format!("limits.max_tool_calls_per_turn: {detail}")),
                None,
            ));
        }
        let mut parts = Vec::new();
        if !text.is_empty() {
            match Part::text_with(&text, &self.engine.message_limits) {
                Ok(p) => parts.push(p),
                Err(e) => return Ok(limit_failure(e)),
            }
        }
        parts.extend(calls.iter().cloned().map(Part::ToolCall));
        let message = match message_id(turn, "a").and_then(|id| {
            Message::new_with(id, Role::Assistant, parts, &self.engine.message_limits)
        }) {
            Ok(m) => m,
            Err(e) => return Ok(limit_failure(e)),
        };
        self.state().history.push(message.clone());
        if calls.is_empty() {
            return Ok(TurnEnd::Final(message));
        }
        // Tool calls, at most `max_parallel_tools` at once, results in call order.
        let mut results: Vec<Option<ToolEnd>> = calls.iter().map(|_| None).collect();
        let mut ended: Option<(CallId, ToolName, String)> = None;
        {
            let mut pending = calls.iter().enumerate();
            let mut running = futures_util::stream::FuturesUnordered::new();
            loop {
                while running.len() < limits.max_parallel_tools {
                    let Some((i, call)) = pending.next() else {
                        break;
                    };
                    running.push(async move { (i, self.tool_call(turn, call).await) });
                }
                let Some((i, result)) = running.next().await else {
                    break;
                };
                let end = result?;
                let stop = end.ends_run.clone();
                results[i] = Some(end);
                if stop.is_some() {
                    ended = stop;
                    break;
                }
            }
            // Dropping `running` drops tool calls still in flight.
        }
        if let Some((call_id, tool, error)) = ended {
            self.cancel_open_tools(turn).await?;
            let text = ErrorText::new(&format!("tool {tool} (call {call_id}) failed: {error}"));
            let cause = Cause {
                call_id: Some(call_id.clone()),
                tool: Some(tool.clone()),
                ..Cause::default()
            };
            return Ok(failed(
                FailureCause::Tool {
                    call_id,
                    tool,
                    error,
                },
                text,
                Some(cause),
            ));
        }
        let parts: Vec<Part> = results.into_iter().flatten().map(|r| r.part).collect();
        match message_id(turn, "t")
            .and_then(|id| Message::new_with(id, Role::Tool, parts, &self.engine.message_limits))
        {
            Ok(m) => self.state().history.push(m),
            Err(e) => return Ok(limit_failure(e)),
        }
        Ok(TurnEnd::Continue)
    }

    async fn cancel_open_tools(&self, turn: u64) -> Step<()> {
        let open: Vec<(CallId, ToolName)> = self.state().open_tools.drain().collect();
        for (call_id, tool) in open {
            self.record(Payload::ToolCancelled(ToolRef {
                turn,
                call_id,
                tool,
                extra: Extra::new(),
            }))
            .await?;
        }
        Ok(())
    }

    /// Why `payload` would not fit in one event line, if it would not.
    /// `limits.part_bytes` bounds a tool's output in bytes, but the line
    /// holds it JSON-escaped (a control character takes six bytes), so an
    /// output within the part bound can still pass `log.max_event_bytes`;
    /// that is the tool's failure, not the run's. The envelope (kind, run
    /// id, seq, ts) is counted at its largest.
    fn encoded_over_bound(&self, payload: &Payload, output_len: usize) -> Option<String> {
        let max = self.engine.log_config.max_event_bytes;
        // Escaping at most sextuples a byte (`\u00XX`), and ids, names and
        // the envelope fit in the slack: most outputs need no trial encoding.
        if output_len
            .saturating_mul(6)
            .saturating_add(ENVELOPE_MAX_BYTES + PAYLOAD_FIXED_MAX_BYTES)
            <= max
        {
            return None;
        }
        match payload.to_canonical() {
            Ok(json) if json.len().saturating_add(ENVELOPE_MAX_BYTES) <= max => None,
            Ok(json) => Some(format!(
                "tool output encodes to {} bytes, over log.max_event_bytes {max}",
                json.len()
            )),
            Err(e) => Some(format!("tool output cannot be recorded: {e}")),
        }
    }

    /// One tool call: approval if the tool needs it, then the tool scope.
    async fn tool_call(&self, turn: u64, call: &ToolCallPart) -> Step<ToolEnd> {
        let tool = self.engine.tools.get(call.name()).cloned();
        let policy = tool.as_ref().map(|t| t.policy()).unwrap_or_default();
        let limits = &self.engine.message_limits;
        let result = |content: &str, is_error: bool| {
            Part::tool_result_with(call.call_id().clone(), content, is_error, limits).or_else(
                |_| {
                    Part::tool_result_with(
                        call.call_id().clone(),
                        "tool result exceeded limits.part_bytes",
                        true,
                        limits,
                    )
                },
            )
        };
        if policy.requires_approval
            && let Some(handler) = self.engine.interactions.clone()
        {
            let interaction_id = {
                let mut st = self.state();
                st.interactions += 1;
                InteractionId::parse(&format!("i_{}", st.interactions))
            };
            let Ok(interaction_id) = interaction_id else {
                return Err(Interrupt::Commit("interaction id".into()));
            };
            self.record(Payload::InteractionStarted(InteractionStarted {
                turn,
                interaction_id: interaction_id.clone(),
                request: "approval".into(),
                call_id: Some(call.call_id().clone()),
                extra: Extra::new(),
            }))
            .await?;
            let request = InteractionRequest {
                run_id: self.request.run_id.clone(),
                turn,
                interaction_id: interaction_id.clone(),
                kind: InteractionKind::Approval {
                    call_id: call.call_id().clone(),
                    tool: call.name().clone(),
                    arguments: call.arguments().clone(),
                },
            };
            let answer = AssertUnwindSafe(handler.handle(request))
                .catch_unwind()
                .await;
            let denial = match answer {
                Ok(Ok(decision)) => {
                    self.record(Payload::InteractionCompleted(InteractionCompleted {
                        turn,
                        interaction_id,
                        decision: decision.as_str().into(),
                        extra: Extra::new(),
                    }))
                    .await?;
                    (decision == InteractionDecision::Denied).then(|| "denied".to_owned())
                }
                Ok(Err(e)) => {
                    self.fail_interaction(turn, interaction_id, &e.0).await?;
                    Some(format!("approval failed: {}", ErrorText::new(&e.0)))
                }
                Err(_) => {
                    self.fail_interaction(turn, interaction_id, "interaction handler panicked")
                        .await?;
                    Some("approval failed: interaction handler panicked".to_owned())
                }
            };
            if let Some(text) = denial {
                return Ok(ToolEnd {
                    part: result(&text, true).map_err(|e| Interrupt::Commit(e.to_string()))?,
                    ends_run: None,
                });
            }
        }
        let tool_name = call.name().clone();
        self.record(Payload::ToolStarted(ToolRef {
            turn,
            call_id: call.call_id().clone(),
            tool: tool_name.clone(),
            extra: Extra::new(),
        }))
        .await?;
        self.state()
            .open_tools
            .insert(call.call_id().clone(), tool_name.clone());
        let outcome: Result<
            String,
            (
                String,
                Option<keel_eventlog::ToolOutcome>,
                Option<keel_eventlog::ToolRetry>,
            ),
        > = match tool {
            None => Err((format!("unknown tool {tool_name}"), None, None)),
            Some(tool) => {
                let timeout = policy
                    .timeout
                    .unwrap_or(self.engine.limits.tool_call_timeout);
                let invocation = ToolInvocation {
                    run_id: self.request.run_id.clone(),
                    turn,
                    call_id: call.call_id().clone(),
                    arguments: call.arguments().clone(),
                };
                let running = AssertUnwindSafe(tool.call(invocation)).catch_unwind();
                match tokio::time::timeout(timeout, running).await {
                    Err(_) => Err((
                        format!("timed out after {} ms", timeout.as_millis()),
                        Some(keel_eventlog::ToolOutcome::Uncertain),
                        Some(keel_eventlog::ToolRetry::Retryable),
                    )),
                    Ok(Err(_)) => Err(("tool panicked".to_owned(), None, None)),
                    Ok(Ok(Err(e))) => Err((e.message, e.outcome, e.retry)),
                    Ok(Ok(Ok(output))) => {
                        if output.len() > limits.part_bytes {
                            Err((
                                format!(
                                    "tool output is {} bytes, over limits.part_bytes {}",
                                    output.len(),
                                    limits.part_bytes
                                ),
                                Some(keel_eventlog::ToolOutcome::Uncertain),
                                Some(keel_eventlog::ToolRetry::NotRetryable),
                            ))
                        } else {
                            Ok(output)
                        }
                    }
                }
            }
        };
        let outcome = outcome.and_then(|output| {
            let payload = Payload::ToolCompleted(ToolCompleted {
                turn,
                call_id: call.call_id().clone(),
                tool: tool_name.clone(),
                output: output.clone(),
                extra: Extra::new(),
            });
            match self.encoded_over_bound(&payload, output.len()) {
                None => Ok((output, payload)),
                Some(message) => Err((
                    message,
                    Some(keel_eventlog::ToolOutcome::Uncertain),
                    Some(keel_eventlog::ToolRetry::NotRetryable),
                )),
            }
        });
        let end = match outcome {
            Ok((output, payload)) => {
                self.record(payload).await?;
                ToolEnd {
                    part: result(&output, false).map_err(|e| Interrupt::Commit(e.to_string()))?,
                    ends_run: None,
                }
            }
            Err((message, outcome, retry)) => {
                let error = ErrorText::new(&message);
                self.record(Payload::ToolFailed(ToolFailed {
                    turn,
                    call_id: call.call_id().clone(),
                    tool: tool_name.clone(),
                    error: error.clone(),
                    outcome,
                    retry,
                    extra: Extra::new(),
                }))
                .await?;
                ToolEnd {
                    part: result(error.as_str(), true)
                        .map_err(|e| Interrupt::Commit(e.to_string()))?,
                    ends_run: (policy.on_failure == OnToolFailure::EndRun).then(|| {
                        (
                            call.call_id().clone(),
                            tool_name.clone(),
                            error.as_str().to_owned(),
                        )
                    }),
                }
            }
        };
        self.state().open_tools.remove(call.call_id());
        Ok(end)
    }

    async fn fail_interaction(
        &self,
        turn: u64,
        interaction_id: InteractionId,
        error: &str,
    ) -> Step<()> {
        self.record(Payload::InteractionFailed(InteractionFailed {
            turn,
            interaction_id,
            error: ErrorText::new(error),
            extra: Extra::new(),
        }))
        .await
        .map(|_| ())
    }

    /// Closes every open scope innermost first: cancelled, or — when
    /// `failure` is given — cancelled children and failed turn and run.
    /// Commits always reach the log; observers get them (and anything they
    /// had not acknowledged yet, in order) within the closing deadline.
    async fn close(&self, failure: Option<(ErrorText, Cause)>, failed_observer: Option<usize>) {
        let _gate = self.gate.lock().await;
        for key in self.log.open_scopes() {
            let payload = self.closing_payload(&key, failure.as_ref());
            // A refusal here would mean the tracker and the engine disagree;
            // the log stays consistent either way.
            let _ = self.log.commit(&payload);
        }
        // Offer observers everything they have not acknowledged, in order.
        // An observer that fails here is skipped for the rest, so the
        // others (the local journal, say) still get the whole history,
        // closing terminals included.
        let deadline = self.engine.limits.closing_deadline;
        let until = tokio::time::Instant::now() + deadline;
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
                    .dispatch_skipping(&event, left, &skip)
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

    fn closing_payload(&self, key: &ScopeKey, failure: Option<&(ErrorText, Cause)>) -> Payload {
        let extra = Extra::new;
        match (key, failure) {
            (ScopeKey::Run, Some((error, cause))) => Payload::RunFailed(RunFailed {
                error: error.clone(),
                cause: Some(cause.clone()),
                extra: extra(),
            }),
            (ScopeKey::Run, None) => Payload::RunCancelled(RunCancelled::default()),
            (ScopeKey::Turn(turn), Some((error, cause))) => Payload::TurnFailed(TurnFailed {
                turn: *turn,
                error: error.clone(),
                cause: Some(cause.clone()),
                extra: extra(),
            }),
            (ScopeKey::Turn(turn), None) => Payload::TurnCancelled(TurnRef {
                turn: *turn,
                extra: extra(),
            }),
            (ScopeKey::Model { turn, operation_id }, _) => Payload::ModelCancelled(ModelRef {
                turn: *turn,
                operation_id: operation_id.clone(),
                extra: extra(),
            }),
            (ScopeKey::Tool { turn, call_id }, _) => {
                let tool = self
                    .state()
                    .open_tools
                    .remove(call_id)
                    .or_else(|| ToolName::parse("unknown").ok());
                match tool {
                    Some(tool) => Payload::ToolCancelled(ToolRef {
                        turn: *turn,
                        call_id: call_id.clone(),
                        tool,
                        extra: extra(),
                    }),
                    None => Payload::RunCancelled(RunCancelled::default()),
                }
            }
            (
                ScopeKey::Interaction {
                    turn,
                    interaction_id,
                },
                _,
            ) => Payload::InteractionCancelled(InteractionRef {
                turn: *turn,
                interaction_id: interaction_id.clone(),
                extra: extra(),
            }),
        }
    }
}

fn failed(cause: FailureCause, error: ErrorText, event_cause: Option<Cause>) -> TurnEnd {
    TurnEnd::Failed(Box::new(cause), error, event_cause)
}

fn limit_failure(e: keel_message::MessageError) -> TurnEnd {
    let detail = e.to_string();
    failed(
        FailureCause::Limit {
            limit: e.kind().rule().to_owned(),
            detail: detail.clone(),
        },
        ErrorText::new(&detail),
        None,
    )
}

fn message_id(turn: u64, suffix: &str) -> Result<MessageId, keel_message::MessageError> {
    // "keel_<turn>_<suffix>" is always within the id rule.
    Ok(MessageId::parse(&format!("keel_{turn}_{suffix}"))?)
}

fn truncate(s: &str, max: usize) -> String {
    let mut cut = s.len().min(max);
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    s[..cut].to_owned()
}

fn hash_seed(run: &str, turn: u64) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    run.hash(&mut h);
    turn.hash(&mut h);
    h.finish()
}
