//! Subscriptions: a cursor into one run's log, with its own bounds. A
//! subscription replays what the log retains after its cursor, read in
//! batches, then follows the live tail; it sees everything committed or
//! only what is durable ([`Durability`]); it is a `Stream` and has
//! `try_recv`. Falling behind its bounds or past the retained window ends
//! it with a typed error carrying the cursor to resume from; a commit
//! never waits for it.

use crate::event::Event;
use crate::shared::{EndReason, Shared, Signal, State, is_run_terminal};
use crate::sync::lock;
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

/// Which events a subscription may see: everything committed, or only
/// what is durable.
///
/// The log's **durable watermark** ([`crate::RunLog::durable_seq`]) is the highest
/// sequence the engine declared durable with [`crate::RunLog::mark_durable`], all
/// lower sequences included (it acknowledges in sequence order). The log
/// never raises it by itself on commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Durability {
    /// Every committed event, as soon as it is committed. A crash may
    /// take back events not yet durable: a client resuming from such a
    /// cursor after a restart may find it ahead of the restored log.
    #[default]
    Committed,
    /// Only events at or below the durable watermark: nothing a crash
    /// could take back. The subscription waits for
    /// [`crate::RunLog::mark_durable`] as a `Committed` one waits for commits.
    Durable,
}

/// How far behind one subscription may fall before it is terminated, and
/// which events it sees ([`Durability`]).
///
/// Events already visible at subscribe time (the replay) do not count
/// toward the bounds; events that became visible after it (committed, or for a
/// [`Durability::Durable`] subscription durable) that the consumer has not
/// taken do. The replay is bounded separately, by the log's retention
/// ([`crate::LogConfig`]): it is read from the window as the consumer goes,
/// and a replay the log evicts first ends with
/// [`SubscriptionError::Evicted`].
///
/// Both bounds are at least 1 ([`SubscribeError::ZeroBound`]). One policy
/// for an event larger than `max_bytes`: the next undelivered event is
/// always deliverable whatever its size, and `max_bytes` bounds the
/// backlog behind it; a subscription buffers at most `max_bytes` (but
/// always one event) taken from the log, so an idle subscriber keeps at
/// most that much of what the log has evicted alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SubscriptionBounds {
    /// Most undelivered live events. Default 4,096.
    pub max_events: usize,
    /// Most undelivered live bytes (retained bytes). Default 8 MiB.
    pub max_bytes: usize,
    /// Committed (default) or durable events only.
    pub durability: Durability,
}

impl Default for SubscriptionBounds {
    fn default() -> Self {
        SubscriptionBounds {
            max_events: 4096,
            max_bytes: 8 << 20,
            durability: Durability::Committed,
        }
    }
}

/// Why `subscribe` refused a cursor.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SubscribeError {
    /// The events right after the cursor were evicted. Subscribing after
    /// `recovery_cursor` works, and misses the events between `requested`
    /// and it.
    #[error(
        "cursor {requested} expired: retained {earliest}..={latest}; resume after {recovery_cursor} (rule subscription.cursor_retained)"
    )]
    CursorExpired {
        /// The cursor asked for.
        requested: u64,
        /// Oldest retained sequence.
        earliest: u64,
        /// Last committed sequence.
        latest: u64,
        /// The oldest cursor that can be served (`earliest - 1`).
        recovery_cursor: u64,
    },
    /// A bound of zero: it would end the subscription on its first live
    /// event.
    #[error("subscription {bound} is 0 (rule subscription.bounds_nonzero: at least 1)")]
    ZeroBound {
        /// `max_events` or `max_bytes`.
        bound: &'static str,
    },
    /// The cursor is past the last committed sequence.
    #[error(
        "cursor {requested} is ahead of the log (latest {latest}) (rule subscription.cursor_committed)"
    )]
    CursorAhead {
        /// The cursor asked for.
        requested: u64,
        /// Last committed sequence.
        latest: u64,
    },
}

/// Why a subscription ended before the run's terminal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SubscriptionError {
    /// The consumer fell further behind than its bounds allow. It was cut
    /// off; the run did not wait. Resubscribe after `recovery_cursor`.
    #[error(
        "slow consumer: {lag_events} events / {lag_bytes} bytes behind, bounds {max_events} / {max_bytes}; last delivered {last_delivered}, resume after {recovery_cursor} (rule subscription.bounds)"
    )]
    SlowConsumer {
        /// The last sequence handed to the consumer.
        last_delivered: u64,
        /// Where to resubscribe (equal to `last_delivered`).
        recovery_cursor: u64,
        /// Undelivered events when it was cut off.
        lag_events: u64,
        /// Undelivered bytes when it was cut off (a lower bound when the
        /// oldest of them was already evicted).
        lag_bytes: u64,
        /// The configured event bound.
        max_events: usize,
        /// The configured byte bound.
        max_bytes: usize,
    },
    /// The events after this subscriber's position were evicted from the
    /// log before it took them: its bounds are larger than the log's
    /// retention, or it was still reading its replay (which is read from
    /// the log as it goes, not copied at subscribe time) when the log
    /// evicted it. The events between `last_delivered` and
    /// `recovery_cursor` are lost to it; resubscribe after
    /// `recovery_cursor`.
    #[error(
        "evicted: events after {last_delivered} are gone (retained from {earliest}); resume after {recovery_cursor} (rule subscription.cursor_retained)"
    )]
    Evicted {
        /// The last sequence handed to the consumer.
        last_delivered: u64,
        /// Oldest retained sequence.
        earliest: u64,
        /// Where to resubscribe (`earliest - 1`).
        recovery_cursor: u64,
    },
    /// The log was closed or shut down before the run ended (or, for a
    /// [`Durability::Durable`] subscription, before the run's terminal was
    /// durable); every event this subscription could be given was
    /// delivered.
    #[error("log {reason} after seq {last_seq}")]
    Ended {
        /// Closed or shut down.
        reason: EndReason,
        /// The last sequence this subscription could be given: the last
        /// committed one for a `Committed` subscription, the durable
        /// watermark when it saw the end for a `Durable` one (events after
        /// it were committed but not durable, and were not delivered). A
        /// resubscription after it, on the restored log, continues.
        last_seq: u64,
    },
}

/// What `try_recv` found instead of an event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TryRecvError {
    /// Nothing new yet.
    #[error("no event yet")]
    Empty,
    /// The run's terminal was delivered: the stream is over.
    #[error("the run ended; the stream is over")]
    Finished,
    /// The subscription ended early (and this is reported once; after it,
    /// `Finished`).
    #[error(transparent)]
    Ended(#[from] SubscriptionError),
}

const BATCH: usize = 256;

/// One subscriber's view of a run log: every event after its cursor,
/// once, in order, ending after the run's terminal event. A
/// [`Durability::Durable`] subscription sees only events at or below the
/// log's durable watermark, and ends after the terminal once it is
/// durable.
///
/// It holds no copy of the log: it takes the events it has not delivered
/// from the retained window a batch (256) at a time, one lock per batch,
/// the replay after its cursor the same way as the live tail. `try_recv`
/// with nothing new answers `Empty` from lock-free counters, without
/// taking the log's lock.
///
/// It implements [`futures_core::Stream`] (items are
/// `Result<Arc<Event>, SubscriptionError>`; after an `Err` or the run's
/// terminal the stream ends) and offers non-async [`try_recv`].
///
/// [`try_recv`]: Subscription::try_recv
pub struct Subscription {
    log: crate::sync::Arc<Shared>,
    cursor: Cursor,
}

/// The subscriber-side state, apart from the log handle so that it can be
/// updated while the log's lock guard borrows the handle.
struct Cursor {
    id: u64,
    bounds: SubscriptionBounds,
    /// Events taken from the log but not yet handed to the consumer (at
    /// most a batch).
    buffer: VecDeque<Arc<Event>>,
    /// Last sequence moved into `buffer` (the log-side cursor).
    taken: u64,
    /// The last sequence of the replay: what was visible at subscribe
    /// time. Replayed events do not count toward the bounds.
    replay_end: u64,
    /// Last sequence handed to the consumer. The buffer holds
    /// `delivered + 1 ..= taken`, contiguous.
    delivered: u64,
    /// The run's terminal, once taken into the buffer: finding it by
    /// sequence spares the hot path a look into every event.
    terminal: Option<u64>,
    /// An end to report once the buffer is drained.
    pending: Option<SubscriptionError>,
    finished: bool,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("run_id", &self.log.run_id)
            .field("delivered", &self.cursor.delivered)
            .field("bounds", &self.cursor.bounds)
            .finish()
    }
}

impl Subscription {
    pub(crate) fn new(
        log: crate::sync::Arc<Shared>,
        after: u64,
        bounds: SubscriptionBounds,
    ) -> Result<Subscription, SubscribeError> {
        for (bound, value) in [
            ("max_events", bounds.max_events),
            ("max_bytes", bounds.max_bytes),
        ] {
            if value == 0 {
                return Err(SubscribeError::ZeroBound { bound });
            }
        }
        let (id, replay_end) = {
            let mut state = lock(&log.state);
            let latest = state.last_seq();
            if after > latest {
                return Err(SubscribeError::CursorAhead {
                    requested: after,
                    latest,
                });
            }
            if after + 1 < state.first_seq {
                return Err(SubscribeError::CursorExpired {
                    requested: after,
                    earliest: state.first_seq,
                    latest,
                    recovery_cursor: state.first_seq - 1,
                });
            }
            // The replay is read in chunks like the live tail; it ends at
            // what is visible now (for a durable subscription the
            // watermark, which a cursor above it waits for).
            let replay_end = visible(&state, bounds.durability).max(after);
            let id = state.next_subscriber;
            state.next_subscriber += 1;
            state.subscribers += 1;
            (id, replay_end)
        };
        Ok(Subscription {
            log,
            cursor: Cursor {
                id,
                bounds,
                buffer: VecDeque::new(),
                taken: after,
                replay_end,
                delivered: after,
                terminal: None,
                pending: None,
                finished: false,
            },
        })
    }

    /// The last sequence handed to the consumer: the cursor to resume from.
    pub fn cursor(&self) -> u64 {
        self.cursor.delivered
    }

    /// The bounds.
    pub fn bounds(&self) -> SubscriptionBounds {
        self.cursor.bounds
    }
}

impl Cursor {
    /// Moves newly visible events into the buffer, or records why the
    /// subscription must end. Returns whether anything changed.
    fn refill(&mut self, state: &State) -> bool {
        let latest = state.last_seq();
        let limit = visible(state, self.bounds.durability);
        if self.taken == latest
            && limit == latest
            && self.pending.is_none()
            && state.tracker.run_ended()
        {
            // Caught up on a run that has ended (and, for a durable
            // subscription, whose terminal is durable): its terminal was at
            // or before the cursor, and nothing can follow it.
            self.finished = true;
            return true;
        }
        if self.taken < limit {
            self.take(state, limit);
            return true;
        }
        if let Some(reason) = state.ended
            && self.pending.is_none()
            && self.taken != u64::MAX
        {
            self.pending = Some(SubscriptionError::Ended {
                reason,
                last_seq: limit,
            });
            self.taken = u64::MAX;
            return true;
        }
        false
    }

    /// Takes the events after `taken` up to `limit` (at most a batch), or
    /// ends the subscription if they are over its bounds or evicted.
    fn take(&mut self, state: &State, limit: u64) {
        // Live lag counts from the last event taken, or from the end of
        // the replay while replaying: the replay is not part of it.
        let base = self.taken.max(self.replay_end).min(limit);
        let lag_events = limit - base;
        // The next event is always deliverable, whatever its size: the
        // byte bound counts the backlog behind it, so one event larger
        // than `max_bytes` reaches a consumer that keeps up (and is
        // buffered alone, see below). Evicted positions count from the
        // window's start: a lower bound.
        let lag_bytes = match lag_events {
            0 => 0,
            _ => state.cum_floor(limit) - state.cum_floor(base + 1),
        };
        if lag_events > self.bounds.max_events as u64 || lag_bytes > self.bounds.max_bytes as u64 {
            self.pending = Some(SubscriptionError::SlowConsumer {
                last_delivered: self.delivered,
                recovery_cursor: self.delivered,
                lag_events,
                lag_bytes,
                max_events: self.bounds.max_events,
                max_bytes: self.bounds.max_bytes,
            });
            // Take nothing more from the log.
            self.taken = u64::MAX;
            return;
        }
        if self.taken + 1 < state.first_seq {
            // Within its bounds, but the log's retention is smaller than
            // them and the next event is already gone.
            self.pending = Some(SubscriptionError::Evicted {
                last_delivered: self.delivered,
                earliest: state.first_seq,
                recovery_cursor: state.first_seq - 1,
            });
            self.taken = u64::MAX;
            return;
        }
        // `taken + 1` is retained (checked above) and `limit` is at most
        // the last commit, so both ends are within the window.
        let start = usize::try_from(self.taken + 1 - state.first_seq).unwrap_or(usize::MAX);
        let count = usize::try_from(limit - self.taken)
            .unwrap_or(usize::MAX)
            .min(BATCH);
        let end = start.saturating_add(count).min(state.entries.len());
        // The buffer holds at most `max_bytes` (and at least one event):
        // what it holds stays pinned when the log evicts it, so an idle
        // subscriber pins no more than its own byte bound.
        let before = state.cum_floor(self.taken);
        let fits = state
            .entries
            .range(start..end)
            .take_while(|e| e.cum_bytes - before <= self.bounds.max_bytes as u64)
            .count()
            .max(1);
        let end = end.min(start.saturating_add(fits));
        if start < end {
            self.buffer.extend(
                state
                    .entries
                    .range(start..end)
                    .map(|e| Arc::clone(&e.event)),
            );
            self.taken += (end - start) as u64;
        }
        // Nothing is committed after the run's terminal: once the run has
        // ended it is the last event, if the last event is a terminal.
        if self.taken == state.last_seq()
            && state.tracker.run_ended()
            && state
                .entries
                .back()
                .is_some_and(|e| is_run_terminal(&e.event))
        {
            self.terminal = Some(self.taken);
        }
    }

    /// Whether a look under the lock would find nothing: nothing visible
    /// past `taken`, and the log neither ended nor at the run's terminal.
    fn nothing_new(&self, signal: &Signal) -> bool {
        if signal.settled.load(Ordering::Acquire) {
            return false;
        }
        let visible = match self.bounds.durability {
            Durability::Committed => signal.last_seq.load(Ordering::Acquire),
            Durability::Durable => signal.durable_seq.load(Ordering::Acquire),
        };
        self.taken >= visible
    }

    /// The next buffered event (the hot path: small enough to return in
    /// registers). The buffer is empty once the subscription finished.
    #[inline]
    fn pop(&mut self) -> Option<Arc<Event>> {
        let event = self.buffer.pop_front()?;
        self.delivered += 1;
        debug_assert_eq!(event.seq(), self.delivered);
        if self.terminal == Some(self.delivered) {
            self.finished = true;
            self.buffer.clear();
            self.pending = None;
        }
        Some(event)
    }

    fn next_ready(&mut self) -> Option<Result<Arc<Event>, TryRecvError>> {
        if self.finished {
            return Some(Err(TryRecvError::Finished));
        }
        if let Some(event) = self.pop() {
            return Some(Ok(event));
        }
        if let Some(end) = self.pending.take() {
            self.finished = true;
            return Some(Err(TryRecvError::Ended(end)));
        }
        None
    }
}

impl Subscription {
    /// The next event without waiting.
    pub fn try_recv(&mut self) -> Result<Arc<Event>, TryRecvError> {
        if let Some(event) = self.cursor.pop() {
            return Ok(event);
        }
        self.try_recv_slow()
    }

    /// `try_recv` with an empty buffer: an end to report, nothing new
    /// (lock-free), or a refill under the lock.
    #[inline(never)]
    fn try_recv_slow(&mut self) -> Result<Arc<Event>, TryRecvError> {
        if let Some(ready) = self.cursor.next_ready() {
            return ready;
        }
        if self.cursor.nothing_new(&self.log.signal) {
            return Err(TryRecvError::Empty);
        }
        {
            let state = lock(&self.log.state);
            self.cursor.refill(&state);
        }
        if let Some(event) = self.cursor.pop() {
            return Ok(event);
        }
        self.cursor.next_ready().unwrap_or(Err(TryRecvError::Empty))
    }

    /// The next event, waiting for it. `None` after the run's terminal (or
    /// after an early end was reported).
    pub async fn recv(&mut self) -> Option<Result<Arc<Event>, SubscriptionError>> {
        std::future::poll_fn(|cx| self.poll_recv(cx)).await
    }

    fn poll_recv(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Arc<Event>, SubscriptionError>>> {
        let convert = |r: Result<Arc<Event>, TryRecvError>| match r {
            Ok(e) => Some(Ok(e)),
            Err(TryRecvError::Ended(e)) => Some(Err(e)),
            Err(_) => None,
        };
        if let Some(event) = self.cursor.pop() {
            return Poll::Ready(Some(Ok(event)));
        }
        if let Some(ready) = self.cursor.next_ready() {
            return Poll::Ready(convert(ready));
        }
        let mut state = lock(&self.log.state);
        self.cursor.refill(&state);
        match self.cursor.next_ready() {
            Some(ready) => Poll::Ready(convert(ready)),
            None => {
                // Registered under the same lock the commit (or, for a
                // durable subscription, `mark_durable`) takes: one after
                // our check necessarily sees this waker.
                let id = self.cursor.id;
                let waiters = match self.cursor.bounds.durability {
                    Durability::Committed => &mut state.waiters,
                    Durability::Durable => &mut state.durable_waiters,
                };
                match waiters.iter_mut().find(|(w, _)| *w == id) {
                    Some((_, waker)) => waker.clone_from(cx.waker()),
                    None => waiters.push((id, cx.waker().clone())),
                }
                Poll::Pending
            }
        }
    }
}

impl futures_core::Stream for Subscription {
    type Item = Result<Arc<Event>, SubscriptionError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().poll_recv(cx)
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut state = lock(&self.log.state);
        state.subscribers = state.subscribers.saturating_sub(1);
        let id = self.cursor.id;
        match self.cursor.bounds.durability {
            Durability::Committed => state.waiters.retain(|(w, _)| *w != id),
            Durability::Durable => state.durable_waiters.retain(|(w, _)| *w != id),
        }
    }
}

/// The last sequence a subscription of `durability` may be given now.
fn visible(state: &State, durability: Durability) -> u64 {
    match durability {
        Durability::Committed => state.last_seq(),
        // Never above the last commit (`mark_durable` clamps).
        Durability::Durable => state.durable_seq.min(state.last_seq()),
    }
}
