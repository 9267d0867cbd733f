//! `Recording`: a run's events read back into what a replay serves.

use super::ReplayError;
use super::progress::Progress;
use keel_eventlog::{
    Event, HistoryReference, ModelCompleted, ModelFailed, Payload, ReasoningEnd, ToolCompleted,
    ToolFailed,
};
use keel_message::{Message, ModelName, OperationId, ProviderTag, RunId, ToolName};
use keel_stream::{MetadataAllowlist, MetadataError, RawCompletion, RawItem, RawProblem, RawUsage};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

/// How a recorded model call ends when replayed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum CallEnd {
    /// The items end with the recorded terminal (completion or problem).
    Terminal,
    /// Recorded as cancelled (or never closed): the stream stalls after
    /// its items until the run drops it.
    Stall,
}

/// One recorded model call attempt: its stream items in order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RecordedCall {
    pub(crate) operation_id: OperationId,
    pub(crate) items: Vec<RawItem>,
    pub(crate) end: CallEnd,
}

/// How a recorded tool call ended.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ToolEnd {
    Completed(ToolCompleted),
    Failed(ToolFailed),
    /// Recorded as cancelled, or never closed: the replayed call hangs.
    Hang,
}

/// How a recorded approval ended.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ApprovalEnd {
    /// The decision's wire name (`approved`, `denied`).
    Decided(String),
    /// The handler's recorded error text.
    Failed(String),
    /// Recorded as cancelled, or never closed: never answered.
    Unanswered,
}

/// A recorded run, read from its events (for example the lines of a file
/// written by `keel export`), in the form a replay serves it:
///
/// - the run's inputs (`run.started`'s model, `continues` and `chat`, the
///   `run.input` messages, a `run.input` history reference);
/// - every model call attempt, in log order and whatever its purpose
///   (answer or compaction call): its deltas, reasoning, tool calls and
///   terminal ([`ReplayProvider`](super::ReplayProvider));
/// - every tool call's terminal by call id and the tool names seen
///   ([`ReplayTools`](super::ReplayTools));
/// - every approval's answer by call id
///   ([`ReplayApprovals`](super::ReplayApprovals));
/// - the cancellation: the seq after which the run was cancelled
///   ([`cancel_after`](Self::cancel_after)).
#[derive(Debug, Clone)]
pub struct Recording {
    pub(crate) events: Vec<Event>,
    pub(crate) run_id: RunId,
    pub(crate) model: ModelName,
    pub(crate) started: keel_eventlog::RunStarted,
    pub(crate) inputs: Vec<Message>,
    pub(crate) reference: Option<HistoryReference>,
    pub(crate) calls: Vec<RecordedCall>,
    pub(crate) provider_tag: Option<ProviderTag>,
    pub(crate) tool_ends: BTreeMap<String, ToolEnd>,
    pub(crate) tool_names: BTreeSet<ToolName>,
    /// Tools any of whose calls asked for approval.
    pub(crate) approved_tools: BTreeSet<ToolName>,
    pub(crate) approvals: BTreeMap<String, ApprovalEnd>,
    pub(crate) cancel_after: Option<u64>,
    /// The provider metadata namespaces recorded in `model.completed`.
    pub(crate) metadata_namespaces: BTreeSet<String>,
    /// Call id → the seq right before its recorded tool or approval
    /// terminal: the replayed answer waits until the replayed log has
    /// reached it, so parallel calls end in the recorded order.
    pub(crate) tool_release: BTreeMap<String, u64>,
    pub(crate) approval_release: BTreeMap<String, u64>,
    pub(crate) progress: Arc<Progress>,
}

/// The state of the read while folding the events.
#[derive(Default)]
struct Reader {
    calls: Vec<RecordedCall>,
    /// Index in `calls` of the open attempt of each operation.
    open: BTreeMap<OperationId, usize>,
    provider_tag: Option<ProviderTag>,
    tool_ends: BTreeMap<String, ToolEnd>,
    tool_names: BTreeSet<ToolName>,
    approvals: BTreeMap<String, ApprovalEnd>,
    /// Interaction id → call id, for the interaction's terminal.
    interactions: BTreeMap<String, String>,
    inputs: Vec<Message>,
    reference: Option<HistoryReference>,
    first_cancelled: Option<u64>,
    run_cancelled: bool,
    metadata_namespaces: BTreeSet<String>,
    tool_release: BTreeMap<String, u64>,
    approval_release: BTreeMap<String, u64>,
}

impl Recording {
    /// Reads a run's events, in seq order from 1.
    ///
    /// Errors: no events, events of two runs, a gap in the seqs, a first
    /// event that is not `run.started`, an undecodable payload, or a run
    /// with no model named (`replay.*` rules).
    pub fn from_events(events: &[Event]) -> Result<Recording, ReplayError> {
        let first = events.first().ok_or(ReplayError::Empty)?;
        let run_id = first.run_id().clone();
        let mut reader = Reader::default();
        let mut started = None;
        for (i, event) in events.iter().enumerate() {
            let expected = i as u64 + 1;
            if event.seq() != expected || event.run_id() != &run_id {
                return Err(ReplayError::NotOneRun {
                    seq: expected,
                    found: format!("{} seq {}", event.run_id(), event.seq()),
                });
            }
            let payload = event.payload().map_err(|e| ReplayError::Decode {
                seq: event.seq(),
                detail: e.to_string(),
            })?;
            if let Payload::RunStarted(s) = &payload {
                started = Some(s.clone());
            } else if started.is_none() {
                return Err(ReplayError::NoRunStarted);
            }
            reader.read(event.seq(), payload);
        }
        let started = started.ok_or(ReplayError::NoRunStarted)?;
        let model = started
            .model
            .clone()
            .or_else(|| first_model(events))
            .ok_or(ReplayError::NoModel)?;
        Ok(reader.finish(events.to_vec(), run_id, model, started))
    }

    /// Reads the lines of a run (the canonical event lines `keel events
    /// --json` prints, or the events of a `keel export` file).
    pub fn from_lines<'a>(
        lines: impl IntoIterator<Item = &'a str>,
    ) -> Result<Recording, ReplayError> {
        let mut events = Vec::new();
        for (i, line) in lines.into_iter().enumerate() {
            events.push(Event::decode(line).map_err(|e| ReplayError::Decode {
                seq: i as u64 + 1,
                detail: e.to_string(),
            })?);
        }
        Recording::from_events(&events)
    }

    /// The recorded events.
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// The recorded run's id.
    pub fn run_id(&self) -> &RunId {
        &self.run_id
    }

    /// The model the run called (`run.started`'s, else the first
    /// `model.started`'s).
    pub fn model(&self) -> &ModelName {
        &self.model
    }

    /// The messages the run was given in full (its `run.input` messages).
    pub fn inputs(&self) -> &[Message] {
        &self.inputs
    }

    /// The recorded `run.input` history reference, for a continued run
    /// that inherits the history of the run it continues.
    pub fn input_reference(&self) -> Option<&HistoryReference> {
        self.reference.as_ref()
    }

    /// How many model call attempts were recorded (answer and compaction
    /// calls alike).
    pub fn model_calls(&self) -> usize {
        self.calls.len()
    }

    /// The tool names the run called.
    pub fn tool_names(&self) -> impl Iterator<Item = &ToolName> {
        self.tool_names.iter()
    }

    /// For a run that ended `run.cancelled`: the seq of the event right
    /// before its first `*.cancelled` event. A replay cancels its run once
    /// its log has reached that seq (see
    /// [`replay`](super::replay)); `None` for a run not cancelled.
    pub fn cancel_after(&self) -> Option<u64> {
        self.cancel_after
    }

    /// The provider metadata namespaces the run recorded (an allowlist
    /// that lets a replay record the same metadata).
    pub fn metadata_allowlist(&self) -> Result<MetadataAllowlist, MetadataError> {
        MetadataAllowlist::new(self.metadata_namespaces.iter())
    }
}

impl Reader {
    fn read(&mut self, seq: u64, payload: Payload) {
        match payload {
            Payload::RunInput(input) => self.inputs.push(input.message),
            Payload::RunInputReference(reference) => self.reference = Some(reference.history),
            Payload::ModelStarted(started) => {
                self.open
                    .insert(started.operation_id.clone(), self.calls.len());
                self.calls.push(RecordedCall {
                    operation_id: started.operation_id,
                    items: Vec::new(),
                    end: CallEnd::Stall,
                });
            }
            Payload::TextDelta(d) => self.push_item(&d.operation_id, RawItem::text(d.text)),
            Payload::ReasoningDelta(d) => {
                self.push_item(&d.operation_id, RawItem::reasoning(d.text));
            }
            Payload::ReasoningEnd(end) => self.reasoning_end(end),
            Payload::ToolCall(call) => {
                let item = RawItem::tool_call(
                    call.call_id.as_str(),
                    call.name.as_str(),
                    call.arguments.as_str(),
                );
                self.push_item(&call.operation_id, item);
            }
            Payload::ModelCompleted(c) => self.model_completed(c),
            Payload::ModelFailed(f) => self.model_failed(f),
            Payload::ModelCancelled(c) => {
                self.open.remove(&c.operation_id);
                self.cancelled(seq);
            }
            other => self.read_scopes(seq, other),
        }
    }

    /// Tool, interaction and run-level events.
    fn read_scopes(&mut self, seq: u64, payload: Payload) {
        match payload {
            Payload::ToolStarted(t) => {
                self.tool_names.insert(t.tool);
                self.tool_ends
                    .entry(t.call_id.as_str().to_owned())
                    .or_insert(ToolEnd::Hang);
            }
            Payload::ToolCompleted(t) => {
                self.tool_release
                    .insert(t.call_id.as_str().to_owned(), seq - 1);
                self.tool_names.insert(t.tool.clone());
                self.tool_ends
                    .insert(t.call_id.as_str().to_owned(), ToolEnd::Completed(t));
            }
            Payload::ToolFailed(t) => {
                self.tool_release
                    .insert(t.call_id.as_str().to_owned(), seq - 1);
                self.tool_names.insert(t.tool.clone());
                self.tool_ends
                    .insert(t.call_id.as_str().to_owned(), ToolEnd::Failed(t));
            }
            Payload::ToolCancelled(t) => {
                self.tool_ends
                    .insert(t.call_id.as_str().to_owned(), ToolEnd::Hang);
                self.cancelled(seq);
            }
            Payload::InteractionStarted(i) => {
                if let Some(call) = i.call_id {
                    self.interactions.insert(
                        i.interaction_id.as_str().to_owned(),
                        call.as_str().to_owned(),
                    );
                    self.approvals
                        .insert(call.as_str().to_owned(), ApprovalEnd::Unanswered);
                }
            }
            Payload::InteractionCompleted(i) => {
                self.release_approval(i.interaction_id.as_str(), seq);
                self.answer(i.interaction_id.as_str(), ApprovalEnd::Decided(i.decision));
            }
            Payload::InteractionFailed(i) => {
                self.release_approval(i.interaction_id.as_str(), seq);
                self.answer(
                    i.interaction_id.as_str(),
                    ApprovalEnd::Failed(i.error.as_str().to_owned()),
                );
            }
            Payload::InteractionCancelled(_) | Payload::TurnCancelled(_) => self.cancelled(seq),
            Payload::RunCancelled(_) => {
                self.cancelled(seq);
                self.run_cancelled = true;
            }
            _ => {}
        }
    }

    fn release_approval(&mut self, interaction_id: &str, seq: u64) {
        if let Some(call) = self.interactions.get(interaction_id) {
            self.approval_release.insert(call.clone(), seq - 1);
        }
    }

    fn answer(&mut self, interaction_id: &str, end: ApprovalEnd) {
        if let Some(call) = self.interactions.get(interaction_id) {
            self.approvals.insert(call.clone(), end);
        }
    }

    fn cancelled(&mut self, seq: u64) {
        self.first_cancelled.get_or_insert(seq);
    }

    fn push_item(&mut self, operation_id: &OperationId, item: RawItem) {
        if let Some(call) = self
            .open
            .get(operation_id)
            .and_then(|&i| self.calls.get_mut(i))
        {
            call.items.push(item);
        }
    }

    fn reasoning_end(&mut self, end: ReasoningEnd) {
        self.provider_tag.get_or_insert(end.provider.clone());
        if let Some(signature) = end.signature {
            self.push_item(
                &end.operation_id,
                RawItem::reasoning_signature(signature.as_str()),
            );
        } else if let Some(redacted) = end.redacted {
            self.push_item(
                &end.operation_id,
                RawItem::redacted_reasoning(redacted.as_str()),
            );
        }
    }

    fn model_completed(&mut self, c: ModelCompleted) {
        let item = RawItem::Completion(RawCompletion {
            finish: c.finish,
            usage: c.usage.map(|u| RawUsage {
                input_tokens: u.input_tokens(),
                output_tokens: u.output_tokens(),
            }),
            metadata: c.metadata.map(|m| {
                let value = m.to_value();
                if let Some(namespaces) = value.as_object() {
                    self.metadata_namespaces.extend(namespaces.keys().cloned());
                }
                value
            }),
        });
        self.close(&c.operation_id, item);
    }

    fn model_failed(&mut self, f: ModelFailed) {
        let problem = f.problem;
        let item = RawItem::Failure(RawProblem {
            kind: problem.kind,
            message: problem.message.as_str().to_owned(),
            retryable: problem.retryable,
            retry_after: problem.retry_after_ms.map(Duration::from_millis),
        });
        self.close(&f.operation_id, item);
    }

    fn close(&mut self, operation_id: &OperationId, terminal: RawItem) {
        if let Some(call) = self
            .open
            .remove(operation_id)
            .and_then(|i| self.calls.get_mut(i))
        {
            call.items.push(terminal);
            call.end = CallEnd::Terminal;
        }
    }

    fn finish(
        self,
        events: Vec<Event>,
        run_id: RunId,
        model: ModelName,
        started: keel_eventlog::RunStarted,
    ) -> Recording {
        let approved_tools = approved_tool_names(&events, &self.approvals)
            .into_iter()
            .collect();
        Recording {
            events,
            run_id,
            model,
            started,
            inputs: self.inputs,
            reference: self.reference,
            calls: self.calls,
            provider_tag: self.provider_tag,
            tool_ends: self.tool_ends,
            tool_names: self.tool_names,
            approved_tools,
            approvals: self.approvals,
            cancel_after: self
                .first_cancelled
                .filter(|_| self.run_cancelled)
                .map(|seq| seq - 1),
            metadata_namespaces: self.metadata_namespaces,
            tool_release: self.tool_release,
            approval_release: self.approval_release,
            progress: Arc::default(),
        }
    }
}

/// The names of the tools whose calls asked for approval: the name comes
/// from the call's `model.tool_call`.
fn approved_tool_names(
    events: &[Event],
    approvals: &BTreeMap<String, ApprovalEnd>,
) -> Vec<ToolName> {
    events
        .iter()
        .filter_map(|e| match e.payload() {
            Ok(Payload::ToolCall(call)) if approvals.contains_key(call.call_id.as_str()) => {
                Some(call.name)
            }
            _ => None,
        })
        .collect()
}

/// The model of the first `model.started`.
fn first_model(events: &[Event]) -> Option<ModelName> {
    events.iter().find_map(|e| match e.payload() {
        Ok(Payload::ModelStarted(s)) => Some(s.model),
        _ => None,
    })
}
