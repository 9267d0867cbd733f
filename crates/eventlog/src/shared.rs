//! The state one run's log shares between its `RunLog` handles and its
//! subscriptions: the retained entries and counters under the lock, the
//! lock-free signal, and why the log ended.

use crate::clock::Clock;
use crate::config::LogConfig;
use crate::event::{Event, RunTail};
use crate::lifecycle::LifecycleTracker;
use crate::sync::{AtomicBool, AtomicU64, Mutex};
use keel_message::RunId;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::task::Waker;

/// Why a log stopped taking commits before its run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EndReason {
    /// [`RunLog::close`](crate::RunLog::close) was called.
    Closed,
    /// [`RunLog::shutdown`](crate::RunLog::shutdown) was called (the engine is shutting down).
    Shutdown,
}

impl std::fmt::Display for EndReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            EndReason::Closed => "closed",
            EndReason::Shutdown => "shut down",
        })
    }
}

pub(crate) struct Entry {
    pub(crate) event: std::sync::Arc<Event>,
    /// Retained bytes of every event committed up to and including this
    /// one: the byte distance between two sequences is a subtraction.
    pub(crate) cum_bytes: u64,
}

pub(crate) struct State {
    pub(crate) entries: VecDeque<Entry>,
    /// Sequence of `entries[0]`, or `next_seq` when empty.
    pub(crate) first_seq: u64,
    pub(crate) next_seq: u64,
    /// `cum_bytes` of the last committed event.
    pub(crate) cum_bytes: u64,
    pub(crate) retained_bytes: usize,
    pub(crate) evicted: u64,
    pub(crate) last_ts: u64,
    pub(crate) tracker: LifecycleTracker,
    pub(crate) ended: Option<EndReason>,
    /// Wakers of `Committed` subscriptions, woken by commits and the end.
    pub(crate) waiters: Vec<(u64, Waker)>,
    /// The durable watermark: never lowered, never above the last commit.
    pub(crate) durable_seq: u64,
    /// Wakers of `Durable` subscriptions, woken when the watermark rises
    /// and at the end.
    pub(crate) durable_waiters: Vec<(u64, Waker)>,
    pub(crate) next_subscriber: u64,
    pub(crate) subscribers: usize,
}

impl State {
    /// `cum_bytes` at `seq` (0 for seq 0), if still known: for the event
    /// just before the window and every retained one.
    pub(crate) fn cum_at(&self, seq: u64) -> Option<u64> {
        if seq + 1 == self.first_seq {
            return Some(match self.entries.front() {
                Some(e) => e.cum_bytes - e.event.retained_bytes() as u64,
                None => self.cum_bytes,
            });
        }
        let idx = seq.checked_sub(self.first_seq)?;
        self.entries
            .get(usize::try_from(idx).ok()?)
            .map(|e| e.cum_bytes)
    }

    /// `cum_bytes` at `seq`, or at the window's start when `seq` was
    /// evicted: exact within the window, a floor before it. `seq` is at
    /// most the last committed sequence.
    pub(crate) fn cum_floor(&self, seq: u64) -> u64 {
        match self.cum_at(seq) {
            Some(cum) => cum,
            None if seq >= self.last_seq() => self.cum_bytes,
            None => self.cum_at(self.first_seq - 1).unwrap_or(0),
        }
    }

    pub(crate) fn last_seq(&self) -> u64 {
        self.next_seq - 1
    }
}

/// Wakes and forgets every waker in `waiters`.
pub(crate) fn wake_all(waiters: &mut Vec<(u64, Waker)>) {
    for (_, waker) in waiters.drain(..) {
        waker.wake();
    }
}

pub(crate) struct Shared {
    pub(crate) run_id: RunId,
    /// The start of every line's tail (`,"run_id":"…","seq":`).
    pub(crate) tail: RunTail,
    pub(crate) config: LogConfig,
    pub(crate) clock: std::sync::Arc<dyn Clock>,
    pub(crate) state: Mutex<State>,
    pub(crate) signal: Signal,
}

/// Lock-free copies of what a polling subscriber looks for, written under
/// the state lock right after the state changed and read without it, so
/// that `try_recv` with nothing new answers `Empty` without locking. A
/// stale read is a poll that came just before the change.
pub(crate) struct Signal {
    /// `State::last_seq()`.
    pub(crate) last_seq: AtomicU64,
    /// `State::durable_seq`.
    pub(crate) durable_seq: AtomicU64,
    /// The log ended or the run's terminal is committed: a caught-up
    /// subscriber must look under the lock (to finish or end).
    pub(crate) settled: AtomicBool,
}

impl Signal {
    pub(crate) fn publish(&self, state: &State) {
        self.last_seq.store(state.last_seq(), Ordering::Release);
        self.durable_seq.store(state.durable_seq, Ordering::Release);
        if state.ended.is_some() || state.tracker.run_ended() {
            self.settled.store(true, Ordering::Release);
        }
    }
}
