//! Turning a [`TreeCursor`] back into followers: the root after its seq,
//! and each listed run after its own, once it is shown to be a descendant
//! of the root (its `run.started` names its parent, whose chain of
//! parents reaches the root). A cursor is the client's text: it may name
//! any run, and only the root's tree is served.

use super::source::{RunSource, first_event};
use super::{RunCall, TreeFollowError};
use crate::follow::{FollowError, RunFollower};
use crate::tree_cursor::{MAX_TREE_RUNS, TreeCursor};
use keel_eventlog::{ParentLink, Payload, SubscriptionBounds};
use keel_message::RunId;
use std::collections::HashMap;

/// A listed run, opened after its seq.
pub(crate) struct ListedRun {
    pub(crate) run_id: RunId,
    /// Its parent's call that started it (from its `run.started`).
    pub(crate) link: RunCall,
    pub(crate) follower: RunFollower,
}

/// The followers a cursor resumes.
pub(crate) struct Resumed {
    pub(crate) root: RunFollower,
    pub(crate) listed: Vec<ListedRun>,
}

/// Opens the root and every listed run after their seqs; refused with
/// the entry and the rule when a listed run is the root, is not a
/// descendant of it, or can't be followed from its seq.
pub(crate) async fn resume(
    source: &dyn RunSource,
    root: &RunId,
    cursor: &TreeCursor,
    bounds: SubscriptionBounds,
) -> Result<Resumed, TreeFollowError> {
    let root_follower = source
        .open(root.clone(), cursor.root_seq(), bounds)
        .await
        .map_err(TreeFollowError::Root)?;
    let mut parents = HashMap::new();
    let mut listed = Vec::with_capacity(cursor.entries().len());
    for (i, entry) in cursor.entries().iter().enumerate() {
        let index = i + 1;
        let run_id = entry.run_id().clone();
        if &run_id == root {
            return Err(TreeFollowError::RootListed { entry: index });
        }
        let at_entry = |source| TreeFollowError::Entry {
            entry: index,
            source,
        };
        let link = parent_link(source, &run_id)
            .await
            .map_err(at_entry)?
            .ok_or(TreeFollowError::NotDescendant { entry: index })?;
        descends(source, root, &link.run_id, index, &mut parents).await?;
        let follower = source
            .open(run_id.clone(), entry.seq(), bounds)
            .await
            .map_err(at_entry)?;
        listed.push(ListedRun {
            run_id,
            link: RunCall {
                run_id: link.run_id,
                call_id: link.call_id,
            },
            follower,
        });
    }
    Ok(Resumed {
        root: root_follower,
        listed,
    })
}

/// The `parent` of `run_id`'s `run.started`: `None` for a run that is not
/// a sub-run; [`FollowError::UnknownRun`] when it shows no event.
async fn parent_link(
    source: &dyn RunSource,
    run_id: &RunId,
) -> Result<Option<ParentLink>, FollowError> {
    let Some(first) = first_event(source, run_id).await? else {
        return Err(FollowError::UnknownRun {
            run_id: run_id.clone(),
        });
    };
    Ok(match first.payload() {
        Ok(Payload::RunStarted(started)) => started.parent,
        _ => None,
    })
}

/// Whether the chain of parents from `parent` reaches `root` within
/// [`MAX_TREE_RUNS`] steps; `parents` caches what was read.
async fn descends(
    source: &dyn RunSource,
    root: &RunId,
    parent: &RunId,
    entry: usize,
    parents: &mut HashMap<RunId, Option<RunId>>,
) -> Result<(), TreeFollowError> {
    let mut at = parent.clone();
    for _ in 0..MAX_TREE_RUNS {
        if &at == root {
            return Ok(());
        }
        let next = match parents.get(&at) {
            Some(known) => known.clone(),
            None => {
                let read = match parent_link(source, &at).await {
                    Ok(link) => link.map(|l| l.run_id),
                    // A chain through a run that is not there is broken.
                    Err(FollowError::UnknownRun { .. }) => None,
                    Err(source) => return Err(TreeFollowError::Entry { entry, source }),
                };
                parents.insert(at.clone(), read.clone());
                read
            }
        };
        match next {
            Some(up) => at = up,
            None => break,
        }
    }
    Err(TreeFollowError::NotDescendant { entry })
}
