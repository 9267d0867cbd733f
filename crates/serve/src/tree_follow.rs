//! The chat endpoints' follower of a run tree: a chat agent whose agent
//! tools start sub-runs streams them too (`/v1/chat` as
//! `data-keel-sub-run` parts, `/v1/agui` as `SUBAGENT_*` events). The
//! engine's [`TreeFollower`] merges the run and its descendants; this
//! module opens it for a chat run and keeps a slow client going, as
//! [`super::chat::next_event`] does for one run.

use super::Daemon;
use keel_engine::{
    FOLLOW_BOUNDS, FollowError, TreeCursor, TreeEvent, TreeFollowError, TreeFollower,
};
use keel_eventlog::SubscriptionError;
use keel_message::RunId;

/// A follower of run `run`'s tree after `cursor`.
pub(crate) async fn open_tree(
    daemon: &Daemon,
    run: &str,
    cursor: TreeCursor,
) -> Result<TreeFollower, String> {
    let run_id = RunId::parse(run).map_err(|e| e.to_string())?;
    TreeFollower::open(&daemon.engine, run_id, cursor, FOLLOW_BOUNDS)
        .await
        .map_err(|e| e.to_string())
}

/// The next event of the tree. A client that fell behind a run's live
/// log is not failed: the follower is reopened at its cursor (each run
/// then serves what it missed from the journal).
pub(crate) async fn next_tree_event(
    daemon: &Daemon,
    follower: &mut TreeFollower,
) -> Option<Result<TreeEvent, String>> {
    loop {
        match follower.next().await? {
            Ok(event) => return Some(Ok(event)),
            Err(TreeFollowError::Run {
                source: FollowError::Live(SubscriptionError::SlowConsumer { .. }),
                ..
            }) => {
                let (root, cursor) = (follower.root().clone(), follower.cursor().clone());
                match TreeFollower::open(&daemon.engine, root, cursor, FOLLOW_BOUNDS).await {
                    Ok(reopened) => *follower = reopened,
                    Err(e) => return Some(Err(e.to_string())),
                }
            }
            Err(e) => return Some(Err(e.to_string())),
        }
    }
}

/// Whether the root run has committed more than `after` (a pause's
/// check: more is there, the response goes on).
pub(crate) async fn more_committed(daemon: &Daemon, root: &RunId, after: u64) -> bool {
    match daemon.engine.subscribe(root, after).await {
        Ok(follower) => follower.more_committed(),
        // Can't tell: say there is more, so a response is not cut short.
        Err(_) => true,
    }
}
