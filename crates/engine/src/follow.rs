//! [`RunFollower`]: one cursor over a run's whole history, the durable
//! prefix from the engine's [`RunHistory`] and the rest from the live log.
//!
//! A live run's log retains a bounded window; whatever it evicted is in
//! the history (the required observers made it durable before the log
//! let it go), or is on its way there: the log may evict an event still in
//! the engine's window when its retention is smaller than the window. The
//! follower reads the history a page at a time from its cursor and joins
//! the live log right after the last event it read; when the log no longer
//! retains the next event and it was not durable when the history was
//! read, the follower reads the history again ([`IN_FLIGHT_POLL`]) for at
//! most [`IN_FLIGHT_WAIT`]. Past the durable watermark (or the wait) the
//! event is missing, and the follower ends with [`FollowError::Gap`]. So
//! the seam has no gap and no duplicate. A run that is not live is read
//! from the history alone, and the follower ends at its end.

use keel_eventlog::{
    Durability, Event, RunLog, SubscribeError, Subscription, SubscriptionBounds, SubscriptionError,
};
use keel_message::RunId;
use keel_observers::{RunHistory, RunHistoryError};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

/// The bounds of [`Engine::subscribe`](crate::Engine::subscribe): 4,096
/// undelivered events or 8 MiB, durable events only: nothing a follower
/// is given can be taken back by a crash, so its cursor is valid on a
/// restarted host over the same store.
pub const FOLLOW_BOUNDS: SubscriptionBounds = SubscriptionBounds {
    max_events: 4096,
    max_bytes: 8 << 20,
    durability: Durability::Durable,
};

/// Events read from the history per call. A store that reads from disk
/// also ends a page at a byte budget (the journal at
/// `keel_observers::PAGE_BYTES`, 256 KiB plus one line), so the page a
/// follower holds is bounded in bytes; a short page is not the run's end:
/// the follower reads until a page is empty.
pub const HISTORY_PAGE: usize = 512;

/// How long a follower waits before reading the history again for an
/// event the log evicted while it was still on its way to the store.
pub(crate) const IN_FLIGHT_POLL: Duration = Duration::from_millis(2);

/// How long at most it waits for one such event: longer than a required
/// observer's default deadline (10 s); past it the store is failing, and
/// the follower ends with [`FollowError::Gap`].
pub(crate) const IN_FLIGHT_WAIT: Duration = Duration::from_secs(30);

/// Why a follower could not be opened, or ended before the run's terminal.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FollowError {
    /// The run is not live, and the history (if the engine has one) holds
    /// nothing of it. From `subscribe`.
    #[error("run {run_id} is neither live nor stored (rule follow.known_run)")]
    UnknownRun {
        /// The run asked for.
        run_id: RunId,
    },
    /// The cursor is past the run's last event. From `subscribe`.
    #[error(
        "cursor {requested} is ahead of the run (latest {latest}) (rule follow.cursor_committed)"
    )]
    CursorAhead {
        /// The cursor asked for.
        requested: u64,
        /// The run's last committed (or, not live, stored) seq.
        latest: u64,
    },
    /// The events right after the cursor are neither retained by the log
    /// nor stored. From `subscribe`.
    #[error(
        "cursor {requested}: the events after it are neither retained nor stored (next available {earliest}, latest {latest}) (rule follow.cursor_available)"
    )]
    CursorExpired {
        /// The cursor asked for.
        requested: u64,
        /// The next seq that can be served.
        earliest: u64,
        /// The run's last seq.
        latest: u64,
    },
    /// The event after `last_delivered` is neither retained nor stored
    /// (evicted past the durable watermark, still missing after
    /// its in-flight wait of 30 s, or skipped by the store). From `next`.
    #[error(
        "the event after {last_delivered} is neither retained nor stored (next available {next_available}) (rule follow.no_gap)"
    )]
    Gap {
        /// The last seq delivered: where to resume.
        last_delivered: u64,
        /// The next seq the log or the store holds.
        next_available: u64,
    },
    /// The history returned an event of another run. From `next`.
    #[error("the history's event at seq {seq} belongs to another run (rule follow.same_run)")]
    ForeignEvent {
        /// Its seq.
        seq: u64,
    },
    /// The live subscription ended early: the consumer fell behind its
    /// bounds ([`SubscriptionError::SlowConsumer`]) or the log was shut
    /// down ([`SubscriptionError::Ended`]). From `next`.
    #[error(transparent)]
    Live(SubscriptionError),
    /// The live log refused the cursor for a reason of its own.
    #[error(transparent)]
    Log(SubscribeError),
    /// The history could not be read.
    #[error(transparent)]
    History(#[from] RunHistoryError),
}

/// One cursor over a run: every event after it exactly once, in order,
/// from the history and then the live log, ending after the run's
/// terminal (or, for a run that is not live, at the history's end), or
/// with a [`FollowError`] carrying where to resume.
///
/// Made by [`Engine::subscribe`](crate::Engine::subscribe). `next` is
/// cancel safe: dropping its future loses no event.
pub struct RunFollower {
    run_id: RunId,
    /// Last seq delivered: the cursor.
    last: u64,
    bounds: SubscriptionBounds,
    log: Option<RunLog>,
    history: Option<Arc<dyn RunHistory>>,
    sub: Option<Subscription>,
    /// History events read and checked, not yet delivered (`last + 1 ..`).
    page: VecDeque<Arc<Event>>,
    /// An end to report once `page` is delivered.
    pending: Option<FollowError>,
    /// When the follower began waiting for an evicted event to reach the
    /// history.
    in_flight_since: Option<tokio::time::Instant>,
    finished: bool,
}

impl std::fmt::Debug for RunFollower {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunFollower")
            .field("run_id", &self.run_id)
            .field("cursor", &self.last)
            .field("live", &self.log.is_some())
            .field("finished", &self.finished)
            .finish()
    }
}

/// One history call on Tokio's blocking pool (a store may do file I/O).
async fn blocking<T: Send + 'static>(
    history: &Arc<dyn RunHistory>,
    f: impl FnOnce(&dyn RunHistory) -> Result<T, RunHistoryError> + Send + 'static,
) -> Result<T, RunHistoryError> {
    let name = history.name().to_owned();
    let history = Arc::clone(history);
    match tokio::task::spawn_blocking(move || f(history.as_ref())).await {
        Ok(answer) => answer,
        Err(e) => Err(RunHistoryError::read(
            name,
            format!("the read task ended abnormally: {e}"),
        )),
    }
}

impl RunFollower {
    /// Opens a follower of `run_id` after `after`: on its live `log` when
    /// there is one, else on the `history` alone.
    pub(crate) async fn open(
        run_id: RunId,
        after: u64,
        bounds: SubscriptionBounds,
        log: Option<RunLog>,
        history: Option<Arc<dyn RunHistory>>,
    ) -> Result<RunFollower, FollowError> {
        let mut follower = RunFollower {
            run_id,
            last: after,
            bounds,
            log,
            history,
            sub: None,
            page: VecDeque::new(),
            pending: None,
            in_flight_since: None,
            finished: false,
        };
        match follower.log.clone() {
            Some(log) => follower.open_live(&log).await?,
            None => follower.open_stored().await?,
        }
        Ok(follower)
    }

    async fn open_live(&mut self, log: &RunLog) -> Result<(), FollowError> {
        if log.run_ended() && self.last == log.stats().last_seq {
            // The cursor is at the run's terminal: nothing follows.
            self.finished = true;
            return Ok(());
        }
        match log.subscribe(self.last, self.bounds) {
            Ok(sub) => {
                self.sub = Some(sub);
                Ok(())
            }
            Err(SubscribeError::CursorAhead { requested, latest }) => {
                Err(FollowError::CursorAhead { requested, latest })
            }
            Err(SubscribeError::CursorExpired {
                requested,
                earliest,
                latest,
                ..
            }) => {
                // Read before the history: whatever is durable now, the
                // history read below holds.
                let durable = log.durable_seq();
                let expired = FollowError::CursorExpired {
                    requested,
                    earliest,
                    latest,
                };
                let events = match self.history.clone() {
                    Some(history) => self.read(&history).await?,
                    None => return Err(expired),
                };
                match events.first() {
                    Some(first) if first.seq() != requested + 1 => Err(expired),
                    Some(_) => {
                        self.accept(events);
                        Ok(())
                    }
                    // Evicted before it was durable: on its way to the
                    // history; `next` reads it again.
                    None if durable <= requested => Ok(()),
                    None => Err(expired),
                }
            }
            Err(e) => Err(FollowError::Log(e)),
        }
    }

    async fn open_stored(&mut self) -> Result<(), FollowError> {
        let unknown = || FollowError::UnknownRun {
            run_id: self.run_id.clone(),
        };
        let Some(history) = self.history.clone() else {
            return Err(unknown());
        };
        let run_id = self.run_id.clone();
        let Some(stored) = blocking(&history, move |h| h.stored(&run_id)).await? else {
            return Err(unknown());
        };
        let (requested, latest) = (self.last, stored.last_seq());
        if requested > latest {
            return Err(FollowError::CursorAhead { requested, latest });
        }
        if requested == latest {
            // Not live: nothing more will be stored by this engine.
            self.finished = true;
            return Ok(());
        }
        let events = self.read(&history).await?;
        match events.first() {
            Some(first) if first.seq() == requested + 1 => {
                self.accept(events);
                Ok(())
            }
            first => Err(FollowError::CursorExpired {
                requested,
                earliest: first.map_or(latest + 1, |e| e.seq()),
                latest,
            }),
        }
    }

    /// The run followed.
    pub fn run_id(&self) -> &RunId {
        &self.run_id
    }

    /// The last seq delivered: the cursor to resume from (with
    /// [`Engine::subscribe`](crate::Engine::subscribe)) after a drop.
    pub fn cursor(&self) -> u64 {
        self.last
    }

    /// The bounds of its live subscription.
    pub fn bounds(&self) -> SubscriptionBounds {
        self.bounds
    }

    /// Whether `next` has nothing more to give: the run's terminal is at
    /// or before the cursor, the history of a run that is not live is
    /// exhausted, or the follower ended with an error.
    pub fn is_finished(&self) -> bool {
        self.finished && self.page.is_empty() && self.pending.is_none()
    }

    /// Whether `next` has more to give without waiting for the run to go
    /// on: an event (or an end) is buffered, the live log has committed an
    /// event after the cursor (durable or not yet), or the run is not live
    /// and its history is not read to its end (a run that is not live has
    /// all it will ever have in the history). A host that paused at an
    /// event (an approval asked) uses it to tell "the run is waiting for an
    /// answer" from "more is already there".
    pub fn more_committed(&self) -> bool {
        if !self.page.is_empty() || self.pending.is_some() {
            return true;
        }
        if self.finished {
            return false;
        }
        self.log
            .as_ref()
            .is_none_or(|log| log.stats().last_seq > self.last)
    }

    /// The next event, waiting for it. `None` after the run's terminal
    /// (or the history's end, for a run that is not live), and after an
    /// error was returned.
    pub async fn next(&mut self) -> Option<Result<Arc<Event>, FollowError>> {
        loop {
            if let Some(event) = self.page.pop_front() {
                return Some(Ok(self.deliver(event)));
            }
            if let Some(end) = self.pending.take() {
                return Some(Err(self.fail(end)));
            }
            if self.finished {
                return None;
            }
            if let Some(sub) = self.sub.as_mut() {
                match sub.recv().await {
                    Some(Ok(event)) => return Some(Ok(self.deliver(event))),
                    // The log dropped events this follower had not taken;
                    // the history has them (or will shortly).
                    Some(Err(SubscriptionError::Evicted { .. })) if self.history.is_some() => {
                        self.sub = None;
                    }
                    Some(Err(SubscriptionError::Evicted {
                        last_delivered,
                        earliest,
                        ..
                    })) => {
                        return Some(Err(self.fail(FollowError::Gap {
                            last_delivered,
                            next_available: earliest,
                        })));
                    }
                    Some(Err(e)) => return Some(Err(self.fail(FollowError::Live(e)))),
                    None => {
                        self.finish();
                        return None;
                    }
                }
                continue;
            }
            if let Err(e) = self.refill().await {
                return Some(Err(self.fail(e)));
            }
        }
    }

    /// The follower as a [`Stream`](futures_core::Stream) of the same
    /// items as [`next`](Self::next).
    pub fn into_stream(
        self,
    ) -> impl futures_core::Stream<Item = Result<Arc<Event>, FollowError>> + Send + 'static {
        futures_util::stream::unfold(self, |mut follower| async move {
            let item = follower.next().await?;
            Some((item, follower))
        })
    }

    fn deliver(&mut self, event: Arc<Event>) -> Arc<Event> {
        self.last = event.seq();
        if event.kind().is_run_terminal() {
            self.finish();
        }
        event
    }

    /// Ends the follower: nothing more is read.
    fn finish(&mut self) {
        self.finished = true;
        self.sub = None;
        self.page.clear();
    }

    fn fail(&mut self, e: FollowError) -> FollowError {
        self.finish();
        e
    }

    /// The seq the buffered page ends at (`last` when it is empty).
    fn end(&self) -> u64 {
        self.page.back().map_or(self.last, |e| e.seq())
    }

    /// The next page of the history after what is buffered.
    async fn read(
        &self,
        history: &Arc<dyn RunHistory>,
    ) -> Result<Vec<Arc<Event>>, RunHistoryError> {
        let (run_id, after) = (self.run_id.clone(), self.end());
        blocking(history, move |h| h.read_after(&run_id, after, HISTORY_PAGE)).await
    }

    /// Buffers the page's leading events that follow the cursor and belong
    /// to the run; the first that does not becomes the pending end.
    /// Returns whether the whole page was taken.
    fn accept(&mut self, events: Vec<Arc<Event>>) -> bool {
        for event in events {
            let end = self.end();
            if event.seq() != end + 1 {
                self.pending = Some(FollowError::Gap {
                    last_delivered: end,
                    next_available: event.seq(),
                });
                return false;
            }
            if event.run_id() != &self.run_id {
                self.pending = Some(FollowError::ForeignEvent { seq: event.seq() });
                return false;
            }
            self.page.push_back(event);
        }
        true
    }

    /// Nothing buffered and no subscription: the next history page, then
    /// the live log right after it.
    async fn refill(&mut self) -> Result<(), FollowError> {
        let Some(history) = self.history.clone() else {
            return self.join_log(None).await;
        };
        // Read before the history: whatever is durable now, the history
        // read below holds (the watermark rises after the store's ack).
        let durable = self.log.as_ref().map(RunLog::durable_seq);
        let events = self.read(&history).await?;
        if events.is_empty() {
            return self.join_log(durable).await;
        }
        self.in_flight_since = None;
        if self.accept(events)
            && let Some(log) = self.log.as_ref()
            && let Ok(sub) = log.subscribe(self.end(), self.bounds)
        {
            // Join the live log as soon as it retains what follows.
            self.sub = Some(sub);
        }
        Ok(())
    }

    /// The history has nothing after the cursor: follow the live log from
    /// it, or end. `durable` is the log's watermark before the history was
    /// read: an evicted next event that was not durable then is on its way
    /// to the store, and the history is read again shortly.
    async fn join_log(&mut self, durable: Option<u64>) -> Result<(), FollowError> {
        let Some(log) = self.log.clone() else {
            self.finish();
            return Ok(());
        };
        match log.subscribe(self.last, self.bounds) {
            Ok(sub) => {
                self.sub = Some(sub);
                Ok(())
            }
            Err(SubscribeError::CursorExpired { .. })
                if self.history.is_some()
                    && durable.is_some_and(|d| d <= self.last)
                    && self.still_in_flight() =>
            {
                tokio::time::sleep(IN_FLIGHT_POLL).await;
                Ok(())
            }
            Err(SubscribeError::CursorExpired { earliest, .. }) => Err(FollowError::Gap {
                last_delivered: self.last,
                next_available: earliest,
            }),
            Err(e) => Err(FollowError::Log(e)),
        }
    }

    /// Whether to keep waiting for an evicted event to reach the history:
    /// for [`IN_FLIGHT_WAIT`] after the wait began.
    fn still_in_flight(&mut self) -> bool {
        let now = tokio::time::Instant::now();
        let since = *self.in_flight_since.get_or_insert(now);
        now.duration_since(since) < IN_FLIGHT_WAIT
    }
}

#[cfg(test)]
mod tests;
