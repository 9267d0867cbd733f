//! A run tree's events (a run and the sub-runs it started, interleaved in
//! delivery order) as one UI message stream: the root run is the
//! assistant message, mapped by [`UiStream`]; each sub-run is a
//! `data-keel-sub-run` part of that message, nested under the tool part
//! of the call that started it.
//!
//! The part's `id` is the sub-run's id, so each update replaces the part
//! in place (the SDK reconciles data parts by type and id); its `data`:
//! `{run_id, parent_run_id, call_id, tool, status, turns, tool_calls}`
//! plus `error` when it failed or was cancelled with a reason. `call_id`
//! is the parent's call (`toolCallId` of the root's tool part for a
//! child of the root; a grandchild names its parent sub-run's call, so a
//! client nests it under that sub-run's part). Updates:
//!
//! | sub-run event | `data-keel-sub-run` |
//! | --- | --- |
//! | `run.started` | `status` `running` |
//! | `turn.completed` / `failed` / `cancelled` | `turns` + 1 |
//! | `tool.completed` / `failed` / `cancelled` | `tool_calls` + 1 |
//! | `run.completed` | `status` `completed` |
//! | `run.failed` | `status` `failed`, `error` |
//! | `run.cancelled` | `status` `cancelled`, `error` (the reason, if any) |
//!
//! A sub-run's text, reasoning and tool calls are not parts of the
//! message: the message is the root's answer, and the child's answer
//! reaches it as the parent call's `tool-output-available`. Everything
//! else of a sub-run maps to nothing.

use super::{Chunk, UiStream, ViewError};
use crate::sub_run::{MAX_TREE_RUNS, Tree, TreeRefusal};
use keel_eventlog::{Event, Payload};
use serde_json::json;
use std::collections::BTreeMap;

/// The stateful mapping of a run tree's events (see the module docs).
#[derive(Debug, Default)]
pub struct UiTree {
    tree: Tree,
    root: UiStream,
    /// The parts of the sub-runs still open, by run id.
    parts: BTreeMap<String, SubRunPart>,
}

/// What a `data-keel-sub-run` part says.
#[derive(Debug, Clone)]
struct SubRunPart {
    run_id: String,
    parent_run_id: String,
    call_id: String,
    tool: String,
    status: &'static str,
    turns: u64,
    tool_calls: u64,
    error: Option<String>,
}

impl SubRunPart {
    fn chunk(&self) -> Chunk {
        let mut data = json!({
            "run_id": self.run_id,
            "parent_run_id": self.parent_run_id,
            "call_id": self.call_id,
            "tool": self.tool,
            "status": self.status,
            "turns": self.turns,
            "tool_calls": self.tool_calls,
        });
        if let (Some(error), Some(members)) = (&self.error, data.as_object_mut()) {
            members.insert("error".to_owned(), json!(error));
        }
        Chunk::SubRun {
            id: self.run_id.clone(),
            data,
        }
    }
}

impl UiTree {
    /// A mapping at the start of the root run.
    pub fn new() -> UiTree {
        UiTree::default()
    }

    /// The root run's mapping (its end, pause and approvals).
    pub fn root(&self) -> &UiStream {
        &self.root
    }

    /// Maps the next event of the tree (any run's, in delivery order).
    pub fn feed(&mut self, event: &Event) -> Result<Vec<Chunk>, ViewError> {
        let seq = event.seq();
        let run_id = event.run_id().as_str();
        let run = self.tree.admit(event).map_err(|refusal| match refusal {
            TreeRefusal::Unlinked => ViewError::Unlinked {
                run_id: run_id.to_owned(),
                seq,
            },
            TreeRefusal::TooManyRuns => ViewError::TooManyRuns { max: MAX_TREE_RUNS },
            TreeRefusal::OutOfOrder { last } => ViewError::OutOfOrder { last, found: seq },
            TreeRefusal::AfterEnd => ViewError::AfterEnd { seq },
        })?;
        let Some(parent) = run.parent.clone() else {
            return self.root.feed(event);
        };
        let tool = run.tool.clone();
        let payload = event
            .payload()
            .map_err(|source| ViewError::Payload { seq, source })?;
        let part = self
            .parts
            .entry(run_id.to_owned())
            .or_insert_with(|| SubRunPart {
                run_id: run_id.to_owned(),
                parent_run_id: parent.run_id().to_owned(),
                call_id: parent.call_id().to_owned(),
                tool,
                status: "running",
                turns: 0,
                tool_calls: 0,
                error: None,
            });
        let changed = match payload {
            Payload::RunStarted(_) => true,
            Payload::TurnCompleted(_) | Payload::TurnFailed(_) | Payload::TurnCancelled(_) => {
                part.turns += 1;
                true
            }
            Payload::ToolCompleted(_) | Payload::ToolFailed(_) | Payload::ToolCancelled(_) => {
                part.tool_calls += 1;
                true
            }
            Payload::RunCompleted(_) => {
                part.status = "completed";
                true
            }
            Payload::RunFailed(p) => {
                part.status = "failed";
                part.error = Some(p.error.as_str().to_owned());
                true
            }
            Payload::RunCancelled(p) => {
                part.status = "cancelled";
                part.error = p.reason.map(|r| r.as_str().to_owned());
                true
            }
            _ => false,
        };
        let out = if changed {
            vec![part.chunk()]
        } else {
            Vec::new()
        };
        if event.kind().is_run_terminal() {
            self.parts.remove(run_id);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sub_run::fixture::{ev, three_levels};
    use serde_json::Value;

    fn feed_all(events: &[Event]) -> Result<Vec<Value>, ViewError> {
        let mut tree = UiTree::new();
        let mut out = Vec::new();
        for event in events {
            for chunk in tree.feed(event)? {
                out.push(serde_json::from_str(&chunk.to_json()).unwrap_or(Value::Null));
            }
        }
        assert!(tree.root().ended(), "the root ended");
        Ok(out)
    }

    /// The sub-runs are `data-keel-sub-run` parts updated in place, nested
    /// by their parent's call; their text is not the message's.
    #[test]
    fn sub_runs_are_data_parts_of_their_parents_call() -> Result<(), ViewError> {
        let out = feed_all(&three_levels())?;
        let parts: Vec<&Value> = out
            .iter()
            .filter(|c| c["type"] == "data-keel-sub-run")
            .collect();
        let summary: Vec<String> = parts
            .iter()
            .map(|p| {
                let d = &p["data"];
                assert_eq!(p["id"], d["run_id"]);
                format!(
                    "{} {}/{} {} {} t{} c{}{}",
                    d["run_id"].as_str().unwrap_or_default(),
                    d["parent_run_id"].as_str().unwrap_or_default(),
                    d["call_id"].as_str().unwrap_or_default(),
                    d["tool"].as_str().unwrap_or_default(),
                    d["status"].as_str().unwrap_or_default(),
                    d["turns"],
                    d["tool_calls"],
                    d.get("error").map(|e| format!(" {e}")).unwrap_or_default(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                "run_c run_r/k1 planner running t0 c0",
                "run_g run_c/k2 researcher running t0 c0",
                "run_g run_c/k2 researcher running t1 c0",
                "run_x run_r/k3 critic running t0 c0",
                "run_g run_c/k2 researcher completed t1 c0",
                "run_c run_r/k1 planner running t0 c1",
                "run_x run_r/k3 critic cancelled t0 c0 \"timeout\"",
                "run_c run_r/k1 planner running t1 c1",
                "run_c run_r/k1 planner failed t1 c1 \"boom\"",
            ]
        );
        // The root's message: its own tool parts and results, no text of
        // a sub-run.
        let types: Vec<&str> = out
            .iter()
            .filter(|c| c["type"] != "data-keel-sub-run")
            .filter_map(|c| c["type"].as_str())
            .collect();
        assert_eq!(
            types,
            [
                "start-step",
                "tool-input-available",
                "tool-input-available",
                "tool-output-error",
                "data-keel-tool-failed",
                "finish-step",
                "finish",
            ]
        );
        assert!(!out.iter().any(|c| c["type"] == "text-delta"));
        Ok(())
    }

    #[test]
    fn unlinked_and_disordered_sub_runs_are_refused() {
        let tree = three_levels();
        let check = |events: Vec<Event>, rule: &str| {
            let mut view = UiTree::new();
            let err = events
                .iter()
                .map(|e| view.feed(e))
                .find_map(Result::err)
                .unwrap_or_else(|| panic!("{rule} not refused"));
            assert_eq!(err.rule(), rule, "{err}");
            assert!(err.to_string().contains(rule), "{err}");
        };
        let mut unlinked = tree[..8].to_vec();
        unlinked.push(ev(
            "run_c",
            1,
            "turn.started",
            serde_json::json!({"turn": 1}),
        ));
        check(unlinked, "ui_stream.tree_linked");
        let mut skipped = tree[..9].to_vec();
        skipped.push(ev(
            "run_c",
            3,
            "turn.started",
            serde_json::json!({"turn": 1}),
        ));
        check(skipped, "ui_stream.in_order");
        let mut late = tree[..25].to_vec();
        late.push(ev(
            "run_g",
            8,
            "turn.started",
            serde_json::json!({"turn": 2}),
        ));
        check(late, "ui_stream.after_end");
    }

    /// More runs than the bound is a typed refusal.
    #[test]
    fn the_tree_is_bounded() {
        let mut view = UiTree::new();
        let mut events = vec![
            ev("run_r", 1, "run.started", serde_json::json!({})),
            ev("run_r", 2, "turn.started", serde_json::json!({"turn": 1})),
        ];
        for i in 0..MAX_TREE_RUNS {
            let child = format!("run_{i}");
            let call = format!("k{i}");
            events.push(ev(
                &child,
                1,
                "run.started",
                serde_json::json!({"parent": {"run_id": "run_r", "call_id": call}}),
            ));
        }
        let err = events
            .iter()
            .map(|e| view.feed(e))
            .find_map(Result::err)
            .expect("refused");
        assert!(
            matches!(err, ViewError::TooManyRuns { max: MAX_TREE_RUNS }),
            "{err}"
        );
        // The last one refused, the one before it admitted.
        let mut view = UiTree::new();
        let admitted = events[..events.len() - 1]
            .iter()
            .all(|e| view.feed(e).is_ok());
        assert!(admitted);
    }
}
