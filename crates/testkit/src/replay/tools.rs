//! `ReplayTools` and `ReplayApprovals`: recorded tool results and
//! approval answers, by call id.

use super::Recording;
use super::progress::Progress;
use super::recording::{ApprovalEnd, ToolEnd};
use keel_engine::{
    InteractionDecision, InteractionError, InteractionFuture, InteractionHandler, InteractionKind,
    InteractionRequest, Tool, ToolError, ToolFuture, ToolInvocation, ToolOutput, ToolPolicy,
};
use keel_message::{CanonicalJson, MessageError, ToolDefinition, ToolName};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The rule a replayed tool call names when its call id was never
/// recorded (the replayed model asked for a call the recorded run did not
/// make).
pub const UNRECORDED_CALL: &str = "replay.unrecorded_call";

/// The rule a replayed approval names when its call id was never asked
/// about in the recorded run.
pub const UNRECORDED_APPROVAL: &str = "replay.unrecorded_approval";

/// One [`Tool`] per tool name a [`Recording`] called, answering each call
/// by its call id with what was recorded:
///
/// - `tool.completed`: its output and images (and its `output_cut`, as a
///   cut output);
/// - `tool.failed`: the same failure (message, outcome, retry), so a call
///   recorded `uncertain` (by a timeout, or by recovery after a crash) is
///   replayed as that failure, and one recorded `retryable` as that;
/// - `tool.cancelled`, or a call never closed: the call hangs until the
///   run drops it;
/// - a call id never recorded: a failure naming [`UNRECORDED_CALL`].
///
/// Nothing is executed. A tool whose recorded calls asked for approval
/// requires approval; [`with_policy`](Self::with_policy) sets a tool's
/// policy instead (a scenario's composition).
#[derive(Debug, Clone)]
pub struct ReplayTools {
    ends: Arc<BTreeMap<String, ToolEnd>>,
    release: Arc<BTreeMap<String, u64>>,
    progress: Arc<Progress>,
    policies: BTreeMap<ToolName, ToolPolicy>,
}

impl ReplayTools {
    /// The tools of `recording`.
    pub fn new(recording: &Recording) -> ReplayTools {
        let policies = recording
            .tool_names
            .iter()
            .chain(recording.approved_tools.iter())
            .map(|name| {
                let policy = ToolPolicy {
                    requires_approval: recording.approved_tools.contains(name),
                    ..ToolPolicy::default()
                };
                (name.clone(), policy)
            })
            .collect();
        ReplayTools {
            ends: Arc::new(recording.tool_ends.clone()),
            release: Arc::new(recording.tool_release.clone()),
            progress: Arc::clone(&recording.progress),
            policies,
        }
    }

    /// Gives the tool `name` this policy (adding the tool when the
    /// recording never called it).
    pub fn with_policy(mut self, name: ToolName, policy: ToolPolicy) -> ReplayTools {
        self.policies.insert(name, policy);
        self
    }

    /// The tools, for [`RunRequest::tool`](keel_engine::RunRequest::tool).
    /// Their definitions name the tool with an open object schema (the
    /// definitions are not recorded, and the replayed model does not read
    /// them).
    pub fn tools(&self) -> Result<Vec<Arc<dyn Tool>>, MessageError> {
        let schema = CanonicalJson::parse(r#"{"type":"object"}"#)?;
        self.policies
            .iter()
            .map(|(name, policy)| {
                let definition = ToolDefinition::new(name.clone(), "replayed", schema.clone())?;
                Ok(Arc::new(ReplayTool {
                    definition,
                    policy: policy.clone(),
                    ends: Arc::clone(&self.ends),
                    release: Arc::clone(&self.release),
                    progress: Arc::clone(&self.progress),
                }) as Arc<dyn Tool>)
            })
            .collect()
    }
}

struct ReplayTool {
    definition: ToolDefinition,
    policy: ToolPolicy,
    ends: Arc<BTreeMap<String, ToolEnd>>,
    release: Arc<BTreeMap<String, u64>>,
    progress: Arc<Progress>,
}

impl Tool for ReplayTool {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }

    fn policy(&self) -> ToolPolicy {
        self.policy.clone()
    }

    fn call(&self, invocation: ToolInvocation) -> ToolFuture {
        let call_id = invocation.call_id.as_str();
        let result = match self.ends.get(call_id) {
            Some(ToolEnd::Completed(done)) => {
                let output = match cut_original_bytes(done) {
                    Some(original) => ToolOutput::cut(done.output.clone(), original),
                    None => ToolOutput::new(done.output.clone()),
                };
                Ok(output.with_images(done.images.clone()))
            }
            Some(ToolEnd::Failed(failed)) => Err(ToolError {
                message: failed.error.as_str().to_owned(),
                outcome: failed.outcome.clone(),
                retry: failed.retry.clone(),
            }),
            Some(ToolEnd::Hang) => return Box::pin(std::future::pending()),
            None => Err(ToolError::new(format!(
                "call {call_id} of {} was not recorded (rule {UNRECORDED_CALL})",
                self.definition.name()
            ))),
        };
        released(&self.progress, self.release.get(call_id).copied(), result)
    }
}

/// `answer`, once the replayed log has reached `after` (when known): the
/// recorded order of parallel calls' terminals.
fn released<T: Send + 'static>(
    progress: &Arc<Progress>,
    after: Option<u64>,
    answer: T,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>> {
    let progress = Arc::clone(progress);
    Box::pin(async move {
        if let Some(seq) = after {
            progress.reached(seq).await;
        }
        answer
    })
}

/// The `original_bytes` of a recorded `output_cut`, when the output was cut.
fn cut_original_bytes(done: &keel_eventlog::ToolCompleted) -> Option<u64> {
    done.extra
        .get("output_cut")?
        .get("original_bytes")?
        .as_u64()
}

/// An [`InteractionHandler`] answering each approval with the recorded
/// answer for its call id: the recorded decision (`approved`, `denied`),
/// the recorded handler failure (its error text), or, for an approval
/// recorded as cancelled or never answered, no answer at all (the future
/// stays pending until the run drops it). A call never asked about fails
/// naming [`UNRECORDED_APPROVAL`].
#[derive(Debug, Clone)]
pub struct ReplayApprovals {
    answers: Arc<BTreeMap<String, ApprovalEnd>>,
    release: Arc<BTreeMap<String, u64>>,
    progress: Arc<Progress>,
}

impl ReplayApprovals {
    /// The approvals of `recording`.
    pub fn new(recording: &Recording) -> ReplayApprovals {
        ReplayApprovals {
            answers: Arc::new(recording.approvals.clone()),
            release: Arc::new(recording.approval_release.clone()),
            progress: Arc::clone(&recording.progress),
        }
    }
}

impl InteractionHandler for ReplayApprovals {
    fn handle(&self, request: InteractionRequest) -> InteractionFuture {
        let InteractionKind::Approval { call_id, .. } = &request.kind else {
            return Box::pin(std::future::ready(Err(InteractionError(format!(
                "interaction {} is not an approval (rule {UNRECORDED_APPROVAL})",
                request.interaction_id
            )))));
        };
        let answer = match self.answers.get(call_id.as_str()) {
            Some(ApprovalEnd::Decided(d)) if d == "approved" => Ok(InteractionDecision::Approved),
            Some(ApprovalEnd::Decided(_)) => Ok(InteractionDecision::Denied),
            Some(ApprovalEnd::Failed(error)) => Err(InteractionError(error.clone())),
            Some(ApprovalEnd::Unanswered) => return Box::pin(std::future::pending()),
            None => Err(InteractionError(format!(
                "approval of call {call_id} was not recorded (rule {UNRECORDED_APPROVAL})"
            ))),
        };
        released(
            &self.progress,
            self.release.get(call_id.as_str()).copied(),
            answer,
        )
    }
}
