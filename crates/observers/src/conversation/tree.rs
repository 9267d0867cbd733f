//! The tree of a conversation: its root run, then every continuation,
//! fork and sub-run under the run it comes from, as the runs'
//! `run.started` events name them (`continues`, `forked_from`, `parent`). `keel runs --tree` prints it;
//! the daemon serves it to the viewer.

use super::fork::{Origin, origin};
use crate::store::StoreReads;
use crate::{JournalError, RunSummary};
use std::collections::{HashMap, HashSet};

/// The most runs a tree lists; a larger conversation is cut there
/// ([`ConversationTree::truncated`]).
pub const MAX_TREE_RUNS: usize = 10_000;

/// One run of a conversation's tree.
#[derive(Debug, Clone)]
pub struct TreeNode {
    /// The run.
    pub run: RunSummary,
    /// Where it comes from.
    pub origin: Origin,
    /// How far below the root (the root is 0).
    pub depth: usize,
}

/// A conversation's runs, the root first, each followed by the runs that
/// come from it (depth first, oldest first among siblings).
#[derive(Debug, Clone, Default)]
pub struct ConversationTree {
    /// The runs, in tree order.
    pub nodes: Vec<TreeNode>,
    /// Whether runs past [`MAX_TREE_RUNS`] were left out.
    pub truncated: bool,
}

/// The tree of the conversation stored run `run_id` belongs to (`None`:
/// no such run). Reads every stored run's summary and first event.
pub fn tree(
    reader: &(impl StoreReads + ?Sized),
    run_id: &str,
) -> Result<Option<ConversationTree>, JournalError> {
    let all = reader.runs()?;
    if !all.iter().any(|r| r.run_id.as_str() == run_id) {
        return Ok(None);
    }
    let mut origins = HashMap::with_capacity(all.len());
    for run in &all {
        origins.insert(
            run.run_id.as_str().to_owned(),
            origin(reader, run.run_id.as_str())?,
        );
    }
    let parent_of = |id: &str| {
        origins
            .get(id)
            .and_then(Origin::parent)
            .map(|p| p.as_str().to_owned())
            .filter(|p| origins.contains_key(p))
    };
    // Up to the root, stopping at a cycle (a journal written by hand).
    let mut root = run_id.to_owned();
    let mut seen = HashSet::from([root.clone()]);
    while let Some(parent) = parent_of(&root) {
        if !seen.insert(parent.clone()) {
            break;
        }
        root = parent;
    }
    let mut children: HashMap<String, Vec<&RunSummary>> = HashMap::new();
    for run in &all {
        if let Some(parent) = parent_of(run.run_id.as_str()) {
            children.entry(parent).or_default().push(run);
        }
    }
    let mut out = ConversationTree::default();
    let mut visited = HashSet::new();
    let mut stack: Vec<(&RunSummary, usize)> = all
        .iter()
        .filter(|r| r.run_id.as_str() == root)
        .map(|r| (r, 0))
        .collect();
    while let Some((run, depth)) = stack.pop() {
        let id = run.run_id.as_str();
        if !visited.insert(id.to_owned()) {
            continue;
        }
        if out.nodes.len() == MAX_TREE_RUNS {
            out.truncated = true;
            break;
        }
        let below = children.get(id).map(Vec::as_slice).unwrap_or_default();
        // Reversed onto the stack, so the oldest child comes out first.
        stack.extend(below.iter().rev().map(|child| (*child, depth + 1)));
        out.nodes.push(TreeNode {
            run: run.clone(),
            origin: origins.get(id).cloned().unwrap_or(Origin::Root),
            depth,
        });
    }
    Ok(Some(out))
}
