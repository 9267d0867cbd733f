//! Agent tool calls: admission (`limits.max_sub_run_depth` and
//! `limits.max_sub_runs`), the child's request, starting it (its task
//! records the parent's `tool.sub_run` first, see [`Linker`]), waiting for
//! its end within the call's timeout (cancelling it at the timeout and
//! waiting again), and the one tool terminal its end maps to — here and
//! when the parent closes a call whose child already ended.

use super::children::{ChildOf, ChildRun, Children, Linked, unlinked};
use super::record::Recorder;
use super::tools::{CallFailure, EndsRun, ToolEnd, cut_extra};
use super::{Interrupt, Runner, Step, truncate};
use crate::config::EngineLimits;
use crate::request::{LinkFuture, LinkParent, ParentRun, RunOutcome, RunRequest};
use crate::tool::{
    AgentProvider, AgentTool, OnToolFailure, ToolInvocation, ToolOutput, ToolPolicy,
};
use keel_eventlog::{
    Cause, CommitError, ErrorText, Event, Extra, OpenScope, ParentLink, Payload, RunLog, SubRunRef,
    SubRunStarted, ToolCompleted, ToolFailed, ToolOutcome, ToolRef, ToolRetry,
};
use keel_message::{CallId, Message, MessageId, Part, Role, RunId, ToolCallPart, ToolName};
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// What `history::rebuild` gives the model for a `tool.cancelled` (the
/// wire helper's `history::CANCELLED_RESULT`, once merged).
const CANCELLED_RESULT: &str = "the call was cancelled (rule tool.cancelled)";

/// Where a run stands in its tree: its depth (0 for a run the host
/// started) and the sub-run bounds in force, the least of its own limits'
/// and every ancestor's, so no descendant can widen them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Lineage {
    depth: u32,
    max_depth: u32,
    max_sub_runs: u32,
}

impl Lineage {
    pub(crate) fn new(limits: &EngineLimits, parent: Option<&ParentRun>) -> Lineage {
        let own = Lineage {
            depth: 0,
            max_depth: limits.max_sub_run_depth,
            max_sub_runs: limits.max_sub_runs,
        };
        match parent {
            None => own,
            Some(p) => Lineage {
                depth: p.depth,
                max_depth: own.max_depth.min(p.max_depth),
                max_sub_runs: own.max_sub_runs.min(p.max_sub_runs),
            },
        }
    }
}

/// The `task` argument of an agent tool call.
#[derive(serde::Deserialize)]
struct TaskArguments {
    task: String,
}

/// How a child ended, read from its log (the authority) and, for a
/// completed child, the final answer its terminal recorded.
pub(super) enum ChildEnd {
    Completed(String),
    Failed {
        error: String,
        cause: Option<Cause>,
    },
    /// Cancelled, or (only when a shutdown gave up on it) still open.
    Cancelled,
    /// Its task could not record the parent's `tool.sub_run`: it never
    /// started, and the parent's log does not name it.
    Unlinked,
}

impl ChildEnd {
    pub(super) fn of(child: &ChildOf) -> ChildEnd {
        if !child.linked {
            return ChildEnd::Unlinked;
        }
        let log = &child.child.log;
        let last = log.stats().last_seq;
        let terminal = log.retained_after(last.saturating_sub(1)).pop();
        match terminal.and_then(|e| e.payload().ok()) {
            Some(Payload::RunCompleted(_)) => {
                let text = match child.child.final_outcome.get() {
                    Some(RunOutcome::Completed { final_message, .. }) => {
                        final_message.joined_text()
                    }
                    _ => String::new(),
                };
                ChildEnd::Completed(text)
            }
            Some(Payload::RunFailed(f)) => ChildEnd::Failed {
                error: f.error.as_str().to_owned(),
                cause: f.cause,
            },
            _ => ChildEnd::Cancelled,
        }
    }
}

/// The call a terminal closes.
pub(super) struct CallRef<'a> {
    pub(super) turn: u64,
    pub(super) call_id: &'a CallId,
    pub(super) tool: &'a ToolName,
}

fn sub_run_extra(child: &RunId, cause: Option<Cause>) -> Extra {
    let mut extra = Extra::new();
    SubRunRef {
        run_id: child.clone(),
        cause,
    }
    .insert_into(&mut extra);
    extra
}

/// The child's final answer within `part_bytes`, then ever shorter cuts:
/// the first one the log takes is recorded (an answer of control
/// characters can encode to several times its size).
fn outputs_within(text: &str, part_bytes: usize) -> impl Iterator<Item = ToolOutput> + '_ {
    let original = u64::try_from(text.len()).unwrap_or(u64::MAX);
    let mut keep = Some(text.len().min(part_bytes));
    std::iter::from_fn(move || {
        let k = keep?;
        keep = (k > 0).then_some(k / 2);
        let kept = truncate(text, k);
        Some(if kept.len() == text.len() {
            ToolOutput::new(kept)
        } else {
            ToolOutput::cut(kept, original)
        })
    })
}

fn completed_payload(call: &CallRef<'_>, child: &RunId, output: &ToolOutput) -> Payload {
    let mut extra = output.output_cut().map(cut_extra).unwrap_or_default();
    extra.extend(sub_run_extra(child, None));
    Payload::ToolCompleted(ToolCompleted {
        turn: call.turn,
        call_id: call.call_id.clone(),
        tool: call.tool.clone(),
        output: output.content().to_owned(),
        images: Vec::new(),
        extra,
    })
}

fn failed_error(child: &RunId, error: &str) -> ErrorText {
    ErrorText::new(&format!("sub-run {child} failed: {error}"))
}

fn failed_payload(call: &CallRef<'_>, child: &RunId, error: &str, cause: Option<Cause>) -> Payload {
    Payload::ToolFailed(ToolFailed {
        turn: call.turn,
        call_id: call.call_id.clone(),
        tool: call.tool.clone(),
        error: failed_error(child, error),
        outcome: Some(ToolOutcome::Uncertain),
        retry: Some(ToolRetry::NotRetryable),
        extra: sub_run_extra(child, cause),
    })
}

fn cancelled_payload(call: &CallRef<'_>, child: &RunId) -> Payload {
    Payload::ToolCancelled(ToolRef {
        turn: call.turn,
        call_id: call.call_id.clone(),
        tool: call.tool.clone(),
        extra: sub_run_extra(child, None),
    })
}

/// Commits the terminal that closes `scope` while the run closes: for the
/// tool scope of a call that started a child (which has ended: the run
/// ends its children first), the one the child's end maps to; otherwise
/// the cancelled terminal. Refused only if the scope was closed meanwhile.
pub(super) fn commit_closing(
    log: &RunLog,
    children: &Children,
    scope: &OpenScope,
    part_bytes: usize,
) -> Result<Arc<Event>, CommitError> {
    let cancelled = scope.cancelled();
    let (Payload::ToolCancelled(r), Some(of)) = (&cancelled, tool_child(children, &cancelled))
    else {
        return log.commit(&cancelled);
    };
    let call = CallRef {
        turn: r.turn,
        call_id: &r.call_id,
        tool: &r.tool,
    };
    let child = &of.child.run_id;
    let mapped = match ChildEnd::of(&of) {
        ChildEnd::Completed(text) => outputs_within(&text, part_bytes)
            .map(|output| log.commit(&completed_payload(&call, child, &output)))
            .find(|r| !matches!(r, Err(CommitError::EventTooLarge { .. }))),
        // The cause is dropped only if the terminal would not fit with it.
        ChildEnd::Failed { error, cause } => Some(
            log.commit(&failed_payload(&call, child, &error, cause))
                .or_else(|_| log.commit(&failed_payload(&call, child, &error, None))),
        ),
        ChildEnd::Cancelled => Some(log.commit(&cancelled_payload(&call, child))),
        ChildEnd::Unlinked => None,
    };
    match mapped {
        Some(Ok(event)) => Ok(event),
        _ => log.commit(&cancelled),
    }
}

fn tool_child(children: &Children, cancelled: &Payload) -> Option<ChildOf> {
    match cancelled {
        Payload::ToolCancelled(r) => children.of_call(&r.call_id),
        _ => None,
    }
}

/// Records the parent's `tool.sub_run` naming the child, from the child's
/// task (so no cancellation of the parent's call can drop it half-way),
/// and marks it linked right after the commit.
struct Linker {
    rec: Arc<Recorder>,
    linked: Linked,
    payload: Payload,
}

impl LinkParent for Linker {
    fn link(&self) -> LinkFuture {
        let rec = Arc::clone(&self.rec);
        let linked = Arc::clone(&self.linked);
        let payload = self.payload.clone();
        Box::pin(async move { rec.record_link(&payload, &linked).await })
    }
    fn is_linked(&self) -> bool {
        self.linked.load(Ordering::SeqCst)
    }
}

impl CallFailure {
    /// A call refused before any child started: definitive, not
    /// retryable.
    fn refused(message: String) -> CallFailure {
        CallFailure::typed(message, ToolOutcome::Definitive, ToolRetry::NotRetryable)
    }
}

impl Runner {
    /// Runs an agent tool's call (its `tool.started` is committed): starts
    /// the child, waits for its end (cancelling it at the call's timeout),
    /// and commits the one terminal the child's end maps to.
    pub(super) async fn delegate(
        &self,
        turn: u64,
        call: &ToolCallPart,
        agent: &AgentTool,
        policy: &ToolPolicy,
    ) -> Step<ToolEnd> {
        let (child, linked) = match self.start_child(turn, call, agent) {
            Ok(started) => started,
            Err(failure) => return self.finish(turn, call, Err(failure), policy).await,
        };
        let timeout = policy.timeout.unwrap_or(self.ctx.limits.tool_call_timeout);
        let timed_out = tokio::time::timeout(timeout, child.wait()).await.is_err();
        if timed_out {
            child.cancel.cancel();
            child.wait().await;
        }
        let end = ChildEnd::of(&ChildOf {
            child: child.clone(),
            linked: linked.load(Ordering::SeqCst),
        });
        let call_ref = CallRef {
            turn,
            call_id: call.call_id(),
            tool: call.name(),
        };
        if let ChildEnd::Unlinked = end {
            let message = format!(
                "sub-run {} could not record tool.sub_run in this run's log (rule sub_run.link)",
                child.run_id
            );
            let ended = self.finish(turn, call, Err(CallFailure::refused(message)), policy);
            let ended = ended.await?;
            self.children.remove(call.call_id());
            return Ok(ended);
        }
        let mut ended = self
            .record_child_end(&call_ref, call, &child.run_id, end)
            .await?;
        self.children.remove(call.call_id());
        if policy.on_failure == OnToolFailure::EndRun && ended.is_error {
            let why = if timed_out {
                format!("timed out after {} ms", timeout.as_millis())
            } else {
                ended.error
            };
            ended.end.ends_run = Some(EndsRun::new(call.call_id(), call.name(), why));
        }
        Ok(ended.end)
    }

    /// Commits the terminal of a linked child's end; the result part is
    /// what `history::rebuild` gives for it.
    async fn record_child_end(
        &self,
        call_ref: &CallRef<'_>,
        call: &ToolCallPart,
        child: &RunId,
        end: ChildEnd,
    ) -> Step<ChildToolEnd> {
        let part_bytes = self.env.message_limits.part_bytes;
        let (content, is_error) = match end {
            ChildEnd::Completed(text) => {
                let mut recorded = None;
                for output in outputs_within(&text, part_bytes) {
                    match self
                        .rec
                        .record(completed_payload(call_ref, child, &output))
                        .await
                    {
                        Ok(_) => {
                            recorded = Some(output.into_content());
                            break;
                        }
                        Err(Interrupt::Log(CommitError::EventTooLarge { .. })) => {}
                        Err(e) => return Err(e),
                    }
                }
                (recorded.unwrap_or_default(), false)
            }
            ChildEnd::Failed { error, cause } => {
                let payload = failed_payload(call_ref, child, &error, cause);
                self.rec.record(payload).await?;
                (failed_error(child, &error).as_str().to_owned(), true)
            }
            ChildEnd::Cancelled | ChildEnd::Unlinked => {
                self.rec.record(cancelled_payload(call_ref, child)).await?;
                (CANCELLED_RESULT.to_owned(), true)
            }
        };
        Ok(ChildToolEnd {
            end: ToolEnd::fed_back(self.result_part(call, &content, is_error)?),
            is_error,
            error: content.to_owned(),
        })
    }

    /// Admits the call under the bounds, then builds and starts the child.
    /// A refusal starts nothing and counts nothing.
    fn start_child(
        &self,
        turn: u64,
        call: &ToolCallPart,
        agent: &AgentTool,
    ) -> Result<(ChildRun, Linked), CallFailure> {
        let lineage = self.lineage;
        let depth = lineage.depth.saturating_add(1);
        if depth > lineage.max_depth {
            return Err(CallFailure::refused(format!(
                "sub-run depth {depth} is over limits.max_sub_run_depth {} (rule limits.max_sub_run_depth)",
                lineage.max_depth
            )));
        }
        if let Err(n) = self.children.reserve(lineage.max_sub_runs) {
            return Err(CallFailure::refused(format!(
                "sub-run {n} of run {} is over limits.max_sub_runs {} (rule limits.max_sub_runs)",
                self.run_id, lineage.max_sub_runs
            )));
        }
        let linked = unlinked();
        let started = self
            .child_request(turn, call, agent, depth, &linked)
            .and_then(|request| {
                self.starter
                    .start_child(request)
                    .map_err(|e| CallFailure::refused(format!("sub-run could not start: {e}")))
            });
        match started {
            Ok(child) => {
                self.children
                    .insert(call.call_id().clone(), child.clone(), Arc::clone(&linked));
                Ok((child, linked))
            }
            Err(failure) => {
                self.children.release();
                Err(failure)
            }
        }
    }

    /// The child's request: the spec's instructions then the task as a
    /// user message; the spec's provider (the parent's by default), tools
    /// and limits; the parent's interaction handler and metadata allowlist.
    fn child_request(
        &self,
        turn: u64,
        call: &ToolCallPart,
        agent: &AgentTool,
        depth: u32,
        linked: &Linked,
    ) -> Result<RunRequest, CallFailure> {
        let invocation = ToolInvocation {
            run_id: self.run_id.clone(),
            turn,
            call_id: call.call_id().clone(),
            arguments: call.arguments().clone(),
        };
        let arguments: TaskArguments = invocation
            .parse_arguments()
            .map_err(CallFailure::from_tool_error)?;
        let task = task_message(&arguments.task, &self.env.message_limits)?;
        let spec = agent.spec();
        let mut history = spec.instruction_messages().to_vec();
        history.push(task);
        let child_id = RunId::generate();
        let mut request = RunRequest::new(child_id.clone(), spec.model().clone(), history)
            .allow_metadata(self.ctx.allowlist.clone());
        request = match spec.provider_choice() {
            AgentProvider::Default => request.provider(Arc::clone(&self.ctx.provider)),
            AgentProvider::Named(name) => request.provider_named(name.clone()),
            AgentProvider::Own(provider) => request.provider(Arc::clone(provider)),
        };
        for tool in spec.tools() {
            request = request.tool(Arc::clone(tool));
        }
        if let Some(limits) = spec.own_limits() {
            request = request.limits(limits.clone());
        }
        if let Some(handler) = &self.ctx.interactions {
            request = request.interaction_handler(Arc::clone(handler));
        }
        let link = Payload::ToolSubRun(SubRunStarted {
            turn,
            call_id: call.call_id().clone(),
            run_id: child_id,
            extra: Extra::new(),
        });
        request.parent = Some(ParentRun {
            link: ParentLink::new(self.run_id.clone(), call.call_id().clone()),
            depth,
            max_depth: self.lineage.max_depth,
            max_sub_runs: self.lineage.max_sub_runs,
            linker: Arc::new(Linker {
                rec: Arc::clone(&self.rec),
                linked: Arc::clone(linked),
                payload: link,
            }),
        });
        Ok(request)
    }
}

/// A child's terminal as the turn needs it: the result for the model, and
/// whether (and how) the call failed, for its failure policy.
struct ChildToolEnd {
    end: ToolEnd,
    is_error: bool,
    error: String,
}

/// The task as the child's user message (id `task`), within the engine's
/// message limits.
fn task_message(task: &str, limits: &keel_message::Limits) -> Result<Message, CallFailure> {
    let refused = |e: keel_message::MessageError| {
        CallFailure::typed(
            format!("task: {e}"),
            ToolOutcome::Definitive,
            ToolRetry::Retryable,
        )
    };
    let id = MessageId::parse("task").map_err(|e| refused(e.into()))?;
    let part = Part::text_with(task, limits).map_err(refused)?;
    Message::new_with(id, Role::User, vec![part], limits).map_err(refused)
}
