//! Where a [`TreeFollower`](super::TreeFollower) gets its runs' followers:
//! the engine ([`EngineSource`]), or in tests a hand-driven log and store.
//! A child is followed from a stream that opens it first, trying again
//! while it is not yet known (its parent records the link before the
//! child starts).

use crate::follow::{FollowError, RunFollower};
use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use keel_eventlog::{Durability, Event, SubscriptionBounds};
use keel_message::RunId;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How often a child that is not known yet is looked for again.
pub(crate) const CHILD_POLL: Duration = Duration::from_millis(5);

/// How long a listed run may take to show its `run.started` when a
/// cursor is resumed (a run listed at seq 0 may be starting).
pub(crate) const START_WAIT: Duration = Duration::from_secs(5);

/// The bounds of the one-event read of a run's `run.started`: it is read
/// for its parent link, not delivered, so it need not be durable yet.
const FIRST_EVENT: SubscriptionBounds = SubscriptionBounds {
    max_events: 16,
    max_bytes: 1 << 20,
    durability: Durability::Committed,
};

/// Opens a follower of a run after a seq.
pub(crate) trait RunSource: Send + Sync + 'static {
    /// A follower of `run_id` after `after`, as
    /// [`Engine::subscribe_with`](crate::Engine::subscribe_with).
    fn open(
        &self,
        run_id: RunId,
        after: u64,
        bounds: SubscriptionBounds,
    ) -> BoxFuture<'static, Result<RunFollower, FollowError>>;
}

/// The engine's runs: live ones from their logs, the rest from its history.
pub(crate) struct EngineSource(pub(crate) crate::Engine);

impl RunSource for EngineSource {
    fn open(
        &self,
        run_id: RunId,
        after: u64,
        bounds: SubscriptionBounds,
    ) -> BoxFuture<'static, Result<RunFollower, FollowError>> {
        let engine = self.0.clone();
        Box::pin(async move { engine.subscribe_with(&run_id, after, bounds).await })
    }
}

/// The first event of `run_id` (its `run.started`), waiting at most
/// [`START_WAIT`] for a live run that has none yet; `Ok(None)` when it
/// shows none in that time.
pub(crate) async fn first_event(
    source: &dyn RunSource,
    run_id: &RunId,
) -> Result<Option<Arc<Event>>, FollowError> {
    let mut follower = source.open(run_id.clone(), 0, FIRST_EVENT).await?;
    match tokio::time::timeout(START_WAIT, follower.next()).await {
        Ok(Some(Ok(event))) => Ok(Some(event)),
        Ok(Some(Err(e))) => Err(e),
        Ok(None) | Err(_) => Ok(None),
    }
}

/// The events of a child just discovered, from its start: opened when it
/// is known, looked for every [`CHILD_POLL`] until then. Once `give_up`
/// is set (its parent's call has ended, or the parent's stream has), a
/// look that began after it and still finds nothing ends the stream with
/// [`FollowError::UnknownRun`]: the child never started.
pub(crate) fn child_stream(
    source: Arc<dyn RunSource>,
    run_id: RunId,
    bounds: SubscriptionBounds,
    give_up: Arc<AtomicBool>,
) -> BoxStream<'static, Result<Arc<Event>, FollowError>> {
    let opened = async move {
        loop {
            // Read before the look: a look that began before the parent's
            // call ended may have missed a child that started and ended.
            let giving_up = give_up.load(Ordering::Acquire);
            match source.open(run_id.clone(), 0, bounds).await {
                Err(FollowError::UnknownRun { .. }) if !giving_up => {
                    tokio::time::sleep(CHILD_POLL).await;
                }
                other => return other,
            }
        }
    };
    futures_util::stream::once(opened)
        .flat_map(|opened| match opened {
            Ok(follower) => follower.into_stream().boxed(),
            Err(e) => futures_util::stream::once(async move { Err(e) }).boxed(),
        })
        .boxed()
}
