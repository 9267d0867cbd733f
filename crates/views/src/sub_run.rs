//! What the views read of a sub-run's link: a child's `run.started`
//! names its parent run and the parent's tool call (`parent: {run_id,
//! call_id}`), and a tree stream's events are each one run's, interleaved.
//!
//! Both tree views ([`crate::ui_stream::UiTree`], [`crate::agui::AguiTree`])
//! take a tree stream's events in delivery order: the root's in seq order,
//! each child's in seq order, a child's first event its `run.started`
//! (after its parent's `tool.sub_run`). They keep the same small record
//! of every run of the tree, bounded by [`MAX_TREE_RUNS`].

use keel_eventlog::{Event, Payload};
use std::collections::BTreeMap;

/// Most runs one tree view follows (the root and its descendants); the
/// next child is the typed error the view names (`*.tree_runs_bound`).
pub const MAX_TREE_RUNS: usize = 1024;

/// A child's link to its parent, as its `run.started` records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParentRef {
    run_id: String,
    call_id: String,
}

impl ParentRef {
    /// The parent link of a `run.started` event, when it has one.
    pub fn of(event: &Event) -> Option<ParentRef> {
        match event.payload() {
            Ok(Payload::RunStarted(p)) => p.parent.map(|p| ParentRef {
                run_id: p.run_id.as_str().to_owned(),
                call_id: p.call_id.as_str().to_owned(),
            }),
            _ => None,
        }
    }

    /// The parent run.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The parent's tool call that started the child.
    pub fn call_id(&self) -> &str {
        &self.call_id
    }
}

/// What a tree view knows of one run of the tree.
#[derive(Debug, Clone)]
pub(crate) struct TreeRun {
    /// The parent link (`None` for the root).
    pub(crate) parent: Option<ParentRef>,
    /// The parent's tool name for the call (`""` for the root, or when
    /// the call's start was not seen).
    pub(crate) tool: String,
    /// The last seq of this run mapped.
    pub(crate) last_seq: u64,
    /// Whether its run terminal was mapped.
    pub(crate) ended: bool,
}

/// Why a tree stream's event has no place in the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TreeRefusal {
    /// A run other than the root whose first event is not a `run.started`
    /// naming a run of the tree as its parent.
    Unlinked,
    /// More runs than [`MAX_TREE_RUNS`].
    TooManyRuns,
    /// Not the next seq of its run.
    OutOfOrder { last: u64 },
    /// After its run's terminal.
    AfterEnd,
}

/// The runs of one tree, and the tool names of their open calls (what a
/// child's `SUBAGENT_STARTED.name` / `data-keel-sub-run.tool` says).
#[derive(Debug, Clone, Default)]
pub(crate) struct Tree {
    root: Option<String>,
    runs: BTreeMap<String, TreeRun>,
    /// (run id, call id) → tool name, from `tool.started` to its terminal.
    open_tools: BTreeMap<String, String>,
}

fn call_key(run_id: &str, call_id: &str) -> String {
    format!("{run_id}\u{0}{call_id}")
}

impl Tree {
    /// Takes the next event: records a new child, checks its run's order,
    /// and keeps the open calls' tool names. Answers the run's record.
    pub(crate) fn admit(&mut self, event: &Event) -> Result<&TreeRun, TreeRefusal> {
        let run_id = event.run_id().as_str();
        let root = self.root.get_or_insert_with(|| run_id.to_owned()).clone();
        if !self.runs.contains_key(run_id) {
            let run = self.new_run(event, run_id == root)?;
            self.runs.insert(run_id.to_owned(), run);
        }
        self.track_tools(event);
        let run = self.runs.get_mut(run_id).ok_or(TreeRefusal::Unlinked)?;
        if run.ended {
            return Err(TreeRefusal::AfterEnd);
        }
        if event.seq() != run.last_seq + 1 {
            return Err(TreeRefusal::OutOfOrder { last: run.last_seq });
        }
        run.last_seq = event.seq();
        run.ended = event.kind().is_run_terminal();
        Ok(run)
    }

    fn new_run(&self, event: &Event, is_root: bool) -> Result<TreeRun, TreeRefusal> {
        if self.runs.len() >= MAX_TREE_RUNS {
            return Err(TreeRefusal::TooManyRuns);
        }
        if is_root {
            return Ok(TreeRun {
                parent: None,
                tool: String::new(),
                last_seq: 0,
                ended: false,
            });
        }
        let parent = ParentRef::of(event)
            .filter(|p| self.runs.contains_key(p.run_id()))
            .ok_or(TreeRefusal::Unlinked)?;
        let tool = self
            .open_tools
            .get(&call_key(parent.run_id(), parent.call_id()))
            .cloned()
            .unwrap_or_default();
        Ok(TreeRun {
            parent: Some(parent),
            tool,
            last_seq: 0,
            ended: false,
        })
    }

    fn track_tools(&mut self, event: &Event) {
        let run_id = event.run_id().as_str();
        match event.payload() {
            Ok(Payload::ToolStarted(p)) => {
                let key = call_key(run_id, p.call_id.as_str());
                // One entry per open call: bounded by the run's open calls.
                self.open_tools.insert(key, p.tool.as_str().to_owned());
            }
            Ok(
                Payload::ToolCompleted(keel_eventlog::ToolCompleted { call_id, .. })
                | Payload::ToolFailed(keel_eventlog::ToolFailed { call_id, .. })
                | Payload::ToolCancelled(keel_eventlog::ToolRef { call_id, .. }),
            ) => {
                self.open_tools.remove(&call_key(run_id, call_id.as_str()));
            }
            _ => {}
        }
    }

    /// A run's parent, when it is a child of the tree.
    pub(crate) fn parent_of(&self, run_id: &str) -> Option<&ParentRef> {
        self.runs.get(run_id).and_then(|r| r.parent.as_ref())
    }
}

/// Hand-built tree streams for the views' tests.
#[cfg(test)]
pub(crate) mod fixture {
    use keel_eventlog::Event;
    use serde_json::{Value, json};

    /// Event `seq` of run `run`, decoded.
    pub(crate) fn ev(run: &str, seq: u64, kind: &str, payload: Value) -> Event {
        let line = json!({"kind": kind, "payload": payload, "run_id": run, "seq": seq,
                          "ts": 1_000_000 + seq * 1000});
        Event::decode(&line.to_string()).unwrap_or_else(|e| panic!("{kind}: {e}"))
    }

    /// A tree of three levels, as a tree follower delivers it (the file
    /// `tests/trees/three_levels.jsonl`, which the CLI's frontend
    /// tests read too): `run_r` calls `planner` (k1, child `run_c`) and
    /// `critic` (k3, child `run_x`); `run_c` calls `researcher` (k2,
    /// grandchild `run_g`). `run_g` completes, `run_c` fails, `run_x` is
    /// cancelled; the root completes.
    pub(crate) fn three_levels() -> Vec<Event> {
        include_str!("../tests/trees/three_levels.jsonl")
            .lines()
            .map(|line| Event::decode(line).unwrap_or_else(|e| panic!("{line}: {e}")))
            .collect()
    }
}
