//! A run tree's events (a run and the sub-runs it started, interleaved in
//! delivery order) as one AG-UI stream.
//!
//! The root maps as [`AguiMapper`] maps a run. A sub-run is an AG-UI
//! subagent of the root's run, as the protocol has it (a subagent within
//! one run, not a separate run under `parentRunId`):
//!
//! | sub-run event | AG-UI |
//! | --- | --- |
//! | `run.started` (with `parent {run_id, call_id}`) | `SUBAGENT_STARTED` {subagentRunId = the child, name = the parent's tool name, parentToolCallId = the call, parentSubagentRunId = the parent when it is a sub-run too} |
//! | `run.completed` | `CUSTOM keel.usage` (when it has usage), `SUBAGENT_FINISHED` {outcome success} |
//! | `run.failed` | `CUSTOM keel.run.failed`, `SUBAGENT_ERROR` {message = the error, code `keel.run.failed`} |
//! | `run.cancelled` | `CUSTOM keel.run.cancelled`, `SUBAGENT_ERROR` {message, code `keel.run.cancelled`} |
//! | every other event | what [`AguiMapper`] maps it to, with `subagentRunId` = the child |
//!
//! A child's message and call ids are its own (they start with its run
//! id), and its steps are its own (`verifyEvents` keeps steps per
//! subagent), so nothing of a child collides with its parent's. The
//! parent's `tool.sub_run` maps as any other event (`CUSTOM
//! keel.tool.sub_run`); the parent's tool terminal after the child's end
//! is the call's `TOOL_CALL_RESULT` as for any tool.
//!
//! Refused, typed: a child whose first event is not a `run.started`
//! naming a run of the tree ([`AguiError::Unlinked`]), a run's event out
//! of its seq order or after its terminal, and more runs than
//! [`MAX_TREE_RUNS`](crate::sub_run::MAX_TREE_RUNS). A child's mapper is
//! dropped at its terminal, so the state held is that of the runs open.

use super::{AguiError, AguiEvent, AguiMapper, RunOutcome, Stamped, SubagentOutcome};
use crate::sub_run::{MAX_TREE_RUNS, Tree, TreeRefusal};
use keel_eventlog::Event;

/// The stateful mapping of a run tree's events (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct AguiTree {
    tree: Tree,
    /// The root's mapper (when [`AguiTree::map`] maps the root).
    root_mapper: Option<AguiMapper>,
    root_ended: bool,
    /// The sub-runs still open, in the order they started (a parent
    /// before its children).
    open: Vec<OpenChild>,
}

/// A sub-run still open: its mapper, its placement, and its
/// `run.started` line (a resumed stream's `SUBAGENT_STARTED` again).
#[derive(Debug, Clone)]
struct OpenChild {
    mapper: AguiMapper,
    place: Placement,
    started: String,
}

/// Where a child sits: what its `SUBAGENT_STARTED` names.
#[derive(Debug, Clone)]
struct Placement {
    run_id: String,
    tool: String,
    call_id: String,
    /// The parent, when it is itself a sub-run.
    parent_subagent: Option<String>,
}

impl AguiTree {
    /// A mapping at the start of the root run.
    pub fn new() -> AguiTree {
        AguiTree::default()
    }

    /// Whether the root's run terminal was mapped.
    pub fn ended(&self) -> bool {
        self.root_ended
    }

    /// Maps the next event of the tree (any run's, in delivery order).
    pub fn map(&mut self, event: &Event) -> Result<Vec<Stamped>, AguiError> {
        let mut root = self.root_mapper.take().unwrap_or_default();
        let mapped = self.map_with(event, |e| root.map(e));
        self.root_mapper = Some(root);
        mapped
    }

    /// Maps the next event of the tree, the root's through `root` (an
    /// agent stream maps its own run its own way), a sub-run's as the
    /// module docs say.
    pub(crate) fn map_with(
        &mut self,
        event: &Event,
        root: impl FnOnce(&Event) -> Result<Vec<Stamped>, AguiError>,
    ) -> Result<Vec<Stamped>, AguiError> {
        let Some(place) = self.admit(event)? else {
            let mapped = root(event)?;
            self.root_ended = event.kind().is_run_terminal();
            return Ok(mapped);
        };
        let index = match self
            .open
            .iter()
            .position(|c| c.place.run_id == place.run_id)
        {
            Some(index) => index,
            None => {
                self.open.push(OpenChild {
                    mapper: AguiMapper::new(),
                    place,
                    started: event.line().to_owned(),
                });
                self.open.len() - 1
            }
        };
        let child = &mut self.open[index];
        let mapped = child.mapper.map(event)?;
        let out = mapped.into_iter().map(|s| child.place.rewrite(s)).collect();
        if event.kind().is_run_terminal() {
            self.open.remove(index);
        }
        Ok(out)
    }

    /// The sub-runs open now, re-opened for a response that resumes
    /// inside them: each one's `SUBAGENT_STARTED` (stamped with its
    /// `run.started`) and the starts of its open scopes (its step, text,
    /// reasoning and tool calls, without their content: the client has
    /// it), parents before children.
    pub(crate) fn reopen(&self) -> Vec<Stamped> {
        let mut out = Vec::new();
        for child in &self.open {
            let stamp = super::Stamp::of_line(&child.started);
            let started = child.mapper.run_started();
            out.push(child.place.rewrite(Stamped::new(started, stamp.clone())));
            let scopes = child.mapper.reopen_scopes(&stamp, false);
            out.extend(scopes.into_iter().map(|s| child.place.rewrite(s)));
        }
        out
    }

    /// Admits the event into the tree: `None` for the root's, the child's
    /// placement for a sub-run's.
    fn admit(&mut self, event: &Event) -> Result<Option<Placement>, AguiError> {
        let seq = event.seq();
        let run_id = event.run_id().as_str();
        let run = self.tree.admit(event).map_err(|refusal| match refusal {
            TreeRefusal::Unlinked => AguiError::Unlinked {
                run_id: run_id.to_owned(),
                seq,
            },
            TreeRefusal::TooManyRuns => AguiError::TooManyRuns { max: MAX_TREE_RUNS },
            TreeRefusal::OutOfOrder { last } => AguiError::OutOfOrder {
                run_id: run_id.to_owned(),
                last,
                found: seq,
            },
            TreeRefusal::AfterEnd => AguiError::AfterTerminal { seq },
        })?;
        let Some(parent) = run.parent.clone() else {
            return Ok(None);
        };
        let tool = run.tool.clone();
        let parent_subagent = self
            .tree
            .parent_of(parent.run_id())
            .map(|_| parent.run_id().to_owned());
        Ok(Some(Placement {
            run_id: run_id.to_owned(),
            tool,
            call_id: parent.call_id().to_owned(),
            parent_subagent,
        }))
    }
}

impl Placement {
    /// A child's mapped event as the tree stream sends it.
    fn rewrite(&self, stamped: Stamped) -> Stamped {
        let subagent = self.run_id.clone();
        let replaced = match stamped.event() {
            AguiEvent::RunStarted { .. } => AguiEvent::SubagentStarted {
                subagent_run_id: subagent,
                name: match self.tool.is_empty() {
                    true => "agent".to_owned(),
                    false => self.tool.clone(),
                },
                parent_subagent_run_id: self.parent_subagent.clone(),
                parent_tool_call_id: Some(self.call_id.clone()),
            },
            AguiEvent::RunFinished {
                outcome: RunOutcome::Cancelled,
                ..
            } => AguiEvent::SubagentError {
                subagent_run_id: subagent,
                message: "the sub-run was cancelled".to_owned(),
                code: "keel.run.cancelled".to_owned(),
            },
            AguiEvent::RunFinished { .. } => AguiEvent::SubagentFinished {
                subagent_run_id: subagent,
                outcome: SubagentOutcome::Success,
            },
            AguiEvent::RunError { message, code } => AguiEvent::SubagentError {
                subagent_run_id: subagent,
                message: message.clone(),
                code: code.clone(),
            },
            _ => return stamped.attributed(&self.run_id),
        };
        stamped.with_event(replaced)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agui::check_stream;
    use crate::sub_run::fixture::{ev, three_levels};
    use serde_json::{Value, json};

    /// Maps `events` as one tree stream: the wire JSON, or the first
    /// refusal.
    fn map_all(events: &[Event]) -> Result<Vec<Value>, AguiError> {
        let mut tree = AguiTree::new();
        let mut out = Vec::new();
        for event in events {
            out.extend(tree.map(event)?.iter().map(Stamped::to_value));
        }
        Ok(out)
    }

    /// The events of `out` whose `type` is `ty`, or that a sub-run owns.
    fn of_type<'a>(out: &'a [Value], ty: &str) -> Vec<&'a Value> {
        out.iter().filter(|e| e["type"] == ty).collect()
    }

    #[test]
    fn sub_runs_become_subagents_around_their_own_events() -> Result<(), AguiError> {
        let out = map_all(&three_levels())?;
        check_stream(&out).map_err(|e| AguiError::Undecodable { seq: 0, detail: e })?;
        let started = of_type(&out, "SUBAGENT_STARTED");
        assert_eq!(
            started,
            [
                &json!({"type": "SUBAGENT_STARTED", "subagentRunId": "run_c", "name": "planner",
                        "parentToolCallId": "k1", "timestamp": 1001,
                        "rawEvent": started[0]["rawEvent"]}),
                &json!({"type": "SUBAGENT_STARTED", "subagentRunId": "run_g", "name": "researcher",
                        "parentToolCallId": "k2", "parentSubagentRunId": "run_c",
                        "timestamp": 1001, "rawEvent": started[1]["rawEvent"]}),
                &json!({"type": "SUBAGENT_STARTED", "subagentRunId": "run_x", "name": "critic",
                        "parentToolCallId": "k3", "timestamp": 1001,
                        "rawEvent": started[2]["rawEvent"]}),
            ]
        );
        let ends: Vec<(String, String)> = out
            .iter()
            .filter(|e| {
                matches!(
                    e["type"].as_str(),
                    Some("SUBAGENT_FINISHED" | "SUBAGENT_ERROR")
                )
            })
            .map(|e| {
                let code = e["code"].as_str().unwrap_or("success").to_owned();
                (
                    e["subagentRunId"].as_str().unwrap_or_default().to_owned(),
                    code,
                )
            })
            .collect();
        let want = [
            ("run_g", "success"),
            ("run_x", "keel.run.cancelled"),
            ("run_c", "keel.run.failed"),
        ];
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(r, c)| ((*r).to_owned(), (*c).to_owned()))
            .collect();
        assert_eq!(ends, want);
        // Every event of a sub-run, and only those, carries its id; no
        // RUN_* event comes from a sub-run.
        for e in &out {
            let owner = e["rawEvent"]["run_id"].as_str().unwrap_or_default();
            let subagent_event = e["type"]
                .as_str()
                .is_some_and(|t| t.starts_with("SUBAGENT_"));
            if owner == "run_r" || subagent_event {
                assert!(e.get("subagentRunId").is_none() || subagent_event, "{e}");
            } else {
                assert_eq!(e["subagentRunId"], owner, "{e}");
            }
        }
        assert_eq!(of_type(&out, "RUN_STARTED").len(), 1);
        assert_eq!(of_type(&out, "RUN_FINISHED").len(), 1);
        Ok(())
    }

    /// A run followed on its own keeps its parent as `parentRunId`.
    #[test]
    fn a_sub_run_on_its_own_names_its_parent_run() -> Result<(), AguiError> {
        let child = ev(
            "run_c",
            1,
            "run.started",
            json!({"parent": {"run_id": "run_r", "call_id": "k1"}}),
        );
        let out = AguiMapper::new().map(&child)?;
        assert_eq!(out[0].to_value()["parentRunId"], "run_r");
        let root = ev("run_r", 1, "run.started", json!({}));
        assert!(
            AguiMapper::new().map(&root)?[0]
                .to_value()
                .get("parentRunId")
                .is_none()
        );
        Ok(())
    }

    /// Streams the tree refuses, one rule each.
    #[test]
    fn unlinked_disordered_and_late_events_are_refused() {
        let tree = three_levels();
        let check = |events: Vec<Event>, rule: &str| {
            let err = map_all(&events).expect_err(rule);
            assert!(err.to_string().contains(rule), "{err} lacks {rule}");
        };
        // A child before the root knows it (its parent is not in the tree).
        let mut orphan = tree[..8].to_vec();
        orphan.push(ev(
            "run_z",
            1,
            "run.started",
            json!({"parent": {"run_id": "run_q", "call_id": "k9"}}),
        ));
        check(orphan, "agui.tree_linked");
        // A run whose first event is not a linked run.started.
        let mut unlinked = tree[..8].to_vec();
        unlinked.push(ev("run_c", 1, "turn.started", json!({"turn": 1})));
        check(unlinked, "agui.tree_linked");
        // A child's seq skipped.
        let mut skipped = tree[..9].to_vec();
        skipped.push(ev("run_c", 3, "turn.started", json!({"turn": 1})));
        check(skipped, "agui.tree_in_order");
        // A child's event after its terminal.
        let mut late = tree[..25].to_vec();
        late.push(ev("run_g", 8, "turn.started", json!({"turn": 2})));
        check(late, "agui.after_terminal");
    }
}
