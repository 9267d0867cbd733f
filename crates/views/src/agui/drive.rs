//! The AG-UI response to one `POST /v1/agui`: a Keel run's events as the
//! event stream of the client's run ([`AgentStream`]).
//!
//! The client names its thread and run (`threadId`, `runId`); the Keel
//! run behind them is `chat-{threadId}-{n}`. A response is:
//!
//! | when | AG-UI events |
//! | --- | --- |
//! | the response opens ([`AgentStream::started`]) | `RUN_STARTED` {the client's threadId and runId}, `CUSTOM` `keel.run` {run_id: the Keel run}, then the starts of the scopes open at the cursor (the turn's `STEP_STARTED`; after a cut also the open text message's, reasoning's and tool calls' starts, without their content: the client has it) |
//! | `run.started` | `CUSTOM` `keel.run.started` {the payload}: the response already said `RUN_STARTED` |
//! | every other Keel event | what [`AguiMapper`] maps it to (the read-only view's mapping, `rawEvent` the Keel line), except: |
//! | `tool.completed` of a frontend tool | `CUSTOM` `keel.tool.completed` {the payload} instead of `TOOL_CALL_RESULT`: the client ran the tool and holds its result message |
//! | `run.completed` / `run.cancelled` | `RUN_FINISHED` with the client's ids (`success` / `cancelled`) |
//! | `run.failed` | `RUN_ERROR` (AG-UI's carries no ids) |
//! | the run pauses ([`AgentStream::paused`]) | `STEP_FINISHED` of the open turn, then `RUN_FINISHED` with the client's ids and, when an approval is pending, `outcome: {type: "interrupt", interrupts: [{id: interaction id, reason: "tool_approval", toolCallId, message: "Approve <tool>?"}]}`, else `outcome: {type: "success", pendingToolCallIds}` (the frontend calls) |
//!
//! A daemon streaming the run's tree ([`AgentStream::feed_tree`]) maps the
//! sub-runs as [`AguiTree`](super::AguiTree) does: each a subagent of the
//! client's run (`SUBAGENT_STARTED` … `SUBAGENT_FINISHED`/`SUBAGENT_ERROR`,
//! its events carrying `subagentRunId`); a response resuming inside
//! sub-runs re-opens them after the run's own scopes.
//!
//! The run pauses when no model call is open and every tool call of the
//! turn without a result waits for the client: an approval pending
//! (`interaction.started` with its call, until `interaction.*` ends it)
//! or a frontend tool started (`tool.started` of a tool in the client's
//! `tools`, until `tool.*` ends it). [`AgentStream::waits`] lists them.
//!
//! A response that continues a run (answers, or a resume after a cut)
//! first [`AgentStream::skip`]s the events the client had, which builds
//! the same state without mapping them.
//!
//! Bounds: the mapper's ([`AguiMapper`]), plus the turn's tool calls
//! without a result and the pending approvals and frontend calls, each at
//! most [`MAX_OPEN_CALLS`] (one more is [`AguiError::TooManyOpenCalls`]).

use super::input::AguiRunId;
use super::{
    AguiError, AguiEvent, AguiMapper, CustomValue, Interrupt, MAX_OPEN_CALLS, RunOutcome, Stamp,
    Stamped, step_name,
};
use keel_eventlog::{ChatId, Event, Payload};
use keel_message::{CallId, InteractionId, RunId, ToolName};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};

#[cfg(test)]
mod tests;

/// What a paused run waits for from the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wait {
    /// An approval: answered by a `resume` entry naming `interrupt_id`.
    Approval {
        /// The Keel interaction (the interrupt's id).
        interrupt_id: InteractionId,
        /// The call waiting for it.
        call_id: CallId,
        /// The call's tool.
        tool: ToolName,
    },
    /// A frontend tool call: answered by a `tool` message naming `call_id`.
    ClientTool {
        /// The call.
        call_id: CallId,
        /// The frontend tool.
        tool: ToolName,
    },
}

/// The call an approval is about.
#[derive(Debug, Clone)]
struct AskedCall {
    call_id: CallId,
    tool: ToolName,
}

/// The AG-UI event stream of one response, from a Keel run's events.
#[derive(Debug, Clone)]
pub struct AgentStream {
    mapper: AguiMapper,
    /// The sub-runs of a tree stream ([`AgentStream::feed_tree`]).
    tree: super::AguiTree,
    thread_id: ChatId,
    run_id: AguiRunId,
    frontend_tools: BTreeSet<ToolName>,
    /// The turn's tool calls without a result, with their tools.
    unfinished: BTreeMap<CallId, ToolName>,
    /// The open model call's tool calls (dropped if the call fails).
    attempt_calls: Vec<CallId>,
    /// Pending approvals: interaction → the call it is about.
    approvals: BTreeMap<InteractionId, AskedCall>,
    /// Frontend calls started and not ended, with their tools.
    client_calls: BTreeMap<CallId, ToolName>,
    model_open: bool,
    /// The last event's line (a pause's `rawEvent`).
    last_line: String,
}

impl AgentStream {
    /// A stream for the client's `thread_id` and `run_id`; calls to
    /// `frontend_tools` are the client's to run.
    pub fn new(
        thread_id: ChatId,
        run_id: AguiRunId,
        frontend_tools: BTreeSet<ToolName>,
    ) -> AgentStream {
        AgentStream {
            mapper: AguiMapper::new(),
            tree: super::AguiTree::new(),
            thread_id,
            run_id,
            frontend_tools,
            unfinished: BTreeMap::new(),
            attempt_calls: Vec::new(),
            approvals: BTreeMap::new(),
            client_calls: BTreeMap::new(),
            model_open: false,
            last_line: String::new(),
        }
    }

    /// What the response opens with: `RUN_STARTED` with the client's ids,
    /// `CUSTOM` `keel.run` naming the Keel run, and the starts of the
    /// scopes open after the events skipped (none for a new run).
    pub fn started(&self, keel_run: &RunId) -> Vec<Stamped> {
        let run_started = AguiEvent::RunStarted {
            thread_id: self.thread_id.as_str().to_owned(),
            run_id: self.run_id.as_str().to_owned(),
            parent_run_id: None,
        };
        let keel_run = AguiEvent::Custom {
            name: "keel.run".to_owned(),
            value: CustomValue::Logged(json!({"run_id": keel_run.as_str()})),
        };
        let mut out = vec![
            Stamped::new(run_started, Stamp::none()),
            Stamped::new(keel_run, Stamp::none()),
        ];
        out.extend(self.mapper.reopen_scopes(&self.at(), false));
        // A response resuming inside sub-runs re-opens them (each AG-UI
        // response is a whole run).
        out.extend(self.tree.reopen());
        out
    }

    /// Takes an event the client already had: the state changes, nothing
    /// is mapped. The refusals of [`AgentStream::feed`].
    pub fn skip(&mut self, event: &Event) -> Result<(), AguiError> {
        self.mapper.advance(event)?;
        self.track(event)
    }

    /// Maps the next event of a run tree (the run and its sub-runs, in
    /// delivery order): the run's as [`AgentStream::feed`] does, a
    /// sub-run's as [`AguiTree`](super::AguiTree) does (`SUBAGENT_*`
    /// around its events, each with `subagentRunId`).
    pub fn feed_tree(&mut self, event: &Event) -> Result<Vec<Stamped>, AguiError> {
        let mut tree = std::mem::take(&mut self.tree);
        let mapped = tree.map_with(event, |e| self.feed(e));
        self.tree = tree;
        mapped
    }

    /// Takes an event of the run tree the client already had, as
    /// [`AgentStream::skip`] does for the run's own.
    pub fn skip_tree(&mut self, event: &Event) -> Result<(), AguiError> {
        let mut tree = std::mem::take(&mut self.tree);
        let taken = tree.map_with(event, |e| self.skip(e).map(|()| Vec::new()));
        self.tree = tree;
        taken.map(drop)
    }

    /// Maps the next event (see the module documentation).
    pub fn feed(&mut self, event: &Event) -> Result<Vec<Stamped>, AguiError> {
        let mapped = self.mapper.map(event)?;
        self.track(event)?;
        Ok(mapped.into_iter().map(|s| self.rewrite(s)).collect())
    }

    /// What the run waits for from the client: its pending approvals and
    /// its frontend calls without a result, from the events seen.
    pub fn waits(&self) -> Vec<Wait> {
        let approvals = self
            .approvals
            .iter()
            .map(|(interrupt_id, asked)| Wait::Approval {
                interrupt_id: interrupt_id.clone(),
                call_id: asked.call_id.clone(),
                tool: asked.tool.clone(),
            });
        let calls = self
            .client_calls
            .iter()
            .map(|(call_id, tool)| Wait::ClientTool {
                call_id: call_id.clone(),
                tool: tool.clone(),
            });
        approvals.chain(calls).collect()
    }

    /// The end of a response at a pause, when the run is paused (see the
    /// module documentation): the open turn's `STEP_FINISHED` and
    /// `RUN_FINISHED` with the interrupt outcome (an approval pending) or
    /// a success naming the pending frontend calls. `None` when the run is
    /// not paused.
    pub fn paused(&self) -> Option<Vec<Stamped>> {
        let waits = self.waits();
        let waiting = |call: &CallId| {
            self.client_calls.contains_key(call)
                || self.approvals.values().any(|a| &a.call_id == call)
        };
        if self.ended()
            || self.model_open
            || waits.is_empty()
            || !self.unfinished.keys().all(waiting)
        {
            return None;
        }
        let at = self.at();
        let mut out = Vec::new();
        if let Some(turn) = self.mapper.step {
            let step = AguiEvent::StepFinished {
                step_name: step_name(turn),
            };
            out.push(Stamped::new(step, at.clone()));
        }
        let finished = AguiEvent::RunFinished {
            thread_id: self.thread_id.as_str().to_owned(),
            run_id: self.run_id.as_str().to_owned(),
            outcome: outcome(&waits),
            usage: None,
        };
        out.push(Stamped::new(finished, at));
        Some(out)
    }

    /// Whether the Keel run's terminal was fed (or skipped).
    pub fn ended(&self) -> bool {
        self.mapper.ended
    }

    /// The stamp of the last event taken.
    fn at(&self) -> Stamp {
        if self.last_line.is_empty() {
            return Stamp::none();
        }
        Stamp::of_line(&self.last_line)
    }

    /// The waits' state change for `event` (already taken by the mapper,
    /// so it decodes and is in order).
    fn track(&mut self, event: &Event) -> Result<(), AguiError> {
        let seq = event.seq();
        let payload = event.payload().map_err(|e| AguiError::Undecodable {
            seq,
            detail: e.to_string(),
        })?;
        self.last_line.clear();
        self.last_line.push_str(event.line());
        match payload {
            Payload::TurnStarted(_) => {
                self.unfinished.clear();
                self.attempt_calls.clear();
            }
            Payload::ModelStarted(_) => {
                self.model_open = true;
                self.attempt_calls.clear();
            }
            Payload::ModelCompleted(_) | Payload::ModelCancelled(_) => self.model_open = false,
            Payload::ModelFailed(_) => {
                self.model_open = false;
                for call in std::mem::take(&mut self.attempt_calls) {
                    self.unfinished.remove(&call);
                }
            }
            Payload::ToolCall(p) => {
                bounded(self.unfinished.len(), seq)?;
                self.attempt_calls.push(p.call_id.clone());
                self.unfinished.insert(p.call_id, p.name);
            }
            Payload::InteractionStarted(p) => {
                if let Some(call_id) = p.call_id {
                    let Some(tool) = self.unfinished.get(&call_id).cloned() else {
                        return Err(AguiError::UnknownCall { seq });
                    };
                    bounded(self.approvals.len(), seq)?;
                    self.approvals
                        .insert(p.interaction_id, AskedCall { call_id, tool });
                }
            }
            Payload::InteractionCompleted(p) => self.answered(&p.interaction_id, &p.decision),
            Payload::InteractionFailed(p) => self.answered(&p.interaction_id, "failed"),
            Payload::InteractionCancelled(p) => {
                self.approvals.remove(&p.interaction_id);
            }
            Payload::ToolStarted(p) if self.frontend_tools.contains(&p.tool) => {
                bounded(self.client_calls.len(), seq)?;
                self.client_calls.insert(p.call_id, p.tool);
            }
            Payload::ToolCompleted(p) => self.tool_ended(&p.call_id),
            Payload::ToolFailed(p) => self.tool_ended(&p.call_id),
            Payload::ToolCancelled(p) => self.tool_ended(&p.call_id),
            _ => {}
        }
        Ok(())
    }

    /// An approval answered: a denied or failed one leaves its call with
    /// no result to wait for.
    fn answered(&mut self, interaction: &InteractionId, decision: &str) {
        let asked = self.approvals.remove(interaction);
        if let (Some(asked), false) = (asked, decision == "approved") {
            self.unfinished.remove(&asked.call_id);
        }
    }

    fn tool_ended(&mut self, call: &CallId) {
        self.unfinished.remove(call);
        self.client_calls.remove(call);
    }

    /// A mapped event as this stream sends it (see the module table).
    fn rewrite(&self, stamped: Stamped) -> Stamped {
        let replaced = match stamped.event() {
            AguiEvent::RunStarted { .. } => Some(self.logged(&stamped, "keel.run.started")),
            AguiEvent::RunFinished { outcome, usage, .. } => Some(AguiEvent::RunFinished {
                thread_id: self.thread_id.as_str().to_owned(),
                run_id: self.run_id.as_str().to_owned(),
                outcome: outcome.clone(),
                usage: usage.clone(),
            }),
            AguiEvent::ToolCallResult { error: None, .. } if self.ran_by_client(&stamped) => {
                Some(self.logged(&stamped, "keel.tool.completed"))
            }
            _ => None,
        };
        match replaced {
            Some(event) => stamped.with_event(event),
            None => stamped,
        }
    }

    /// Whether a `TOOL_CALL_RESULT` stands for a frontend tool's
    /// `tool.completed`.
    fn ran_by_client(&self, stamped: &Stamped) -> bool {
        let tool = stamped
            .raw_event()
            .pointer("/payload/tool")
            .and_then(Value::as_str);
        tool.is_some_and(|t| self.frontend_tools.iter().any(|f| f.as_str() == t))
    }

    /// `CUSTOM` `name` carrying the stamped Keel event's payload.
    fn logged(&self, stamped: &Stamped, name: &str) -> AguiEvent {
        let payload = stamped
            .raw_event()
            .get("payload")
            .cloned()
            .unwrap_or(Value::Null);
        AguiEvent::Custom {
            name: name.to_owned(),
            value: CustomValue::Logged(payload),
        }
    }
}

/// Refuses one more entry than [`MAX_OPEN_CALLS`].
fn bounded(len: usize, seq: u64) -> Result<(), AguiError> {
    if len >= MAX_OPEN_CALLS {
        return Err(AguiError::TooManyOpenCalls {
            seq,
            max: MAX_OPEN_CALLS,
        });
    }
    Ok(())
}

/// A pause's outcome: the approvals as interrupts, or (none pending) a
/// success naming the frontend calls.
fn outcome(waits: &[Wait]) -> RunOutcome {
    let interrupts: Vec<Interrupt> = waits
        .iter()
        .filter_map(|w| match w {
            Wait::Approval {
                interrupt_id,
                call_id,
                tool,
            } => Some(Interrupt {
                id: interrupt_id.as_str().to_owned(),
                reason: "tool_approval".to_owned(),
                tool_call_id: call_id.as_str().to_owned(),
                message: format!("Approve {}?", tool.as_str()),
            }),
            Wait::ClientTool { .. } => None,
        })
        .collect();
    if !interrupts.is_empty() {
        return RunOutcome::Interrupt { interrupts };
    }
    let pending_tool_call_ids = waits
        .iter()
        .filter_map(|w| match w {
            Wait::ClientTool { call_id, .. } => Some(call_id.as_str().to_owned()),
            Wait::Approval { .. } => None,
        })
        .collect();
    RunOutcome::Pending {
        pending_tool_call_ids,
    }
}
