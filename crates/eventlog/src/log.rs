//! `RunLog`: the authoritative, bounded, per-run event log. It alone
//! assigns sequences (`commit`, refused commits as `CommitError`, using
//! no sequence), keeps the retained window within `LogConfig`'s bounds by
//! evicting oldest first while the terminal reserve stays free, holds the
//! durable watermark (`mark_durable`) and ends its subscriptions (`close`,
//! `shutdown`). Snapshots, restore and import are in `snapshot.rs`.

use crate::clock::Clock;
use crate::config::{ConfigError, LogConfig};
use crate::event::{Event, LineHead, RunTail};
use crate::kind::Phase;
use crate::lifecycle::{LifecycleError, LifecycleTracker, OpenScope};
use crate::payload::{Payload, PayloadError};
use crate::scope::{ScopeKey, Transition};
use crate::shared::{EndReason, Entry, Shared, Signal, State, wake_all};
use crate::subscription::{SubscribeError, Subscription, SubscriptionBounds};
use crate::sync::{Arc, AtomicBool, AtomicU64, Mutex, lock};
use keel_message::RunId;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;

/// Why a commit was refused. A refused commit changes nothing: no sequence
/// is used, no subscriber sees anything.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CommitError {
    /// The payload breaks a payload rule.
    #[error(transparent)]
    Payload(#[from] PayloadError),
    /// The event breaks a lifecycle rule.
    #[error(transparent)]
    Lifecycle(#[from] LifecycleError),
    /// The encoded event is over its bound.
    #[error("event is {bytes} bytes, the bound is {max} (rule log.{bound})")]
    EventTooLarge {
        /// Encoded line length.
        bytes: usize,
        /// The bound.
        max: usize,
        /// `max_event_bytes` or `max_terminal_bytes`.
        bound: &'static str,
    },
    /// An imported event whose sequence is not the next one.
    #[error("seq {found} where {expected} is next (rule log.contiguous)")]
    OutOfSequence {
        /// The next sequence.
        expected: u64,
        /// The sequence given.
        found: u64,
    },
    /// The log was closed or shut down.
    #[error("the log is {0} (rule log.open)")]
    Closed(EndReason),
}

/// Counters and positions of a log, for monitoring and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogStats {
    /// Oldest retained sequence (equals `last_seq + 1` when nothing is
    /// retained).
    pub earliest_seq: u64,
    /// Last committed sequence (0 before the first commit).
    pub last_seq: u64,
    /// Events retained.
    pub retained_events: usize,
    /// Bytes retained (lines plus per-entry overhead).
    pub retained_bytes: usize,
    /// Events evicted so far.
    pub evicted: u64,
    /// Live subscriptions.
    pub subscribers: usize,
    /// The durable watermark ([`RunLog::durable_seq`]): every event up to
    /// it is durable (0 when none is).
    pub durable_seq: u64,
}

/// The authoritative event log of one run.
///
/// A commit assigns the next sequence and a non-decreasing timestamp under
/// one lock, checks the lifecycle, appends, evicts oldest-first past the
/// bounds, and wakes waiting subscribers. It never waits for a subscriber.
/// Cloning a `RunLog` gives another handle to the same log.
///
/// **Durability.** The log also keeps a durable watermark
/// ([`durable_seq`](Self::durable_seq)) for
/// [`Durability::Durable`](crate::Durability::Durable) subscriptions. A
/// commit never raises it: the engine calls
/// [`mark_durable`](Self::mark_durable), right after the commit when the
/// run has no required observers, or when its required observers have
/// acknowledged the event. A fresh log starts at 0; a restored or imported
/// log starts with every restored event durable (they were read back from
/// where they were kept).
///
/// ```
/// use keel_eventlog::*;
/// use std::sync::Arc;
/// let run = keel_message::RunId::parse("run_1")?;
/// let log = RunLog::new(run, LogConfig::default(), Arc::new(SystemClock))?;
/// let mut sub = log.subscribe(0, SubscriptionBounds::default())?;
/// let e = log.commit(&Payload::RunStarted(RunStarted::default()))?;
/// assert_eq!(e.seq(), 1);
/// assert!(e.line().starts_with(r#"{"kind":"run.started","payload":{},"run_id":"run_1","seq":1,"ts":"#));
/// assert_eq!(sub.try_recv()?.seq(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct RunLog {
    pub(crate) shared: Arc<Shared>,
}

impl std::fmt::Debug for RunLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunLog")
            .field("run_id", &self.shared.run_id)
            .field("stats", &self.stats())
            .finish()
    }
}

impl RunLog {
    /// An empty log for `run_id`.
    pub fn new(
        run_id: RunId,
        config: LogConfig,
        clock: std::sync::Arc<dyn Clock>,
    ) -> Result<RunLog, ConfigError> {
        config.validate()?;
        let tracker = LifecycleTracker::new(config.max_open_scopes);
        Ok(Self::from_parts(run_id, config, clock, tracker, 1, 0))
    }

    pub(crate) fn from_parts(
        run_id: RunId,
        config: LogConfig,
        clock: std::sync::Arc<dyn Clock>,
        tracker: LifecycleTracker,
        next_seq: u64,
        last_ts: u64,
    ) -> RunLog {
        let settled = tracker.run_ended();
        // The last committed sequence, and the durable watermark: restored
        // events (a snapshot window starts here) are durable by
        // definition. One value for the signal and the state alike.
        let last_seq = next_seq - 1;
        RunLog {
            shared: Arc::new(Shared {
                tail: RunTail::new(&run_id),
                run_id,
                config,
                clock,
                signal: Signal {
                    last_seq: AtomicU64::new(last_seq),
                    durable_seq: AtomicU64::new(last_seq),
                    settled: AtomicBool::new(settled),
                },
                state: Mutex::new(State {
                    entries: VecDeque::new(),
                    first_seq: next_seq,
                    next_seq,
                    cum_bytes: 0,
                    retained_bytes: 0,
                    evicted: 0,
                    last_ts,
                    tracker,
                    ended: None,
                    waiters: Vec::new(),
                    durable_seq: last_seq,
                    durable_waiters: Vec::new(),
                    next_subscriber: 0,
                    subscribers: 0,
                }),
            }),
        }
    }

    /// The run this log belongs to.
    pub fn run_id(&self) -> &RunId {
        &self.shared.run_id
    }

    /// The configuration.
    pub fn config(&self) -> &LogConfig {
        &self.shared.config
    }

    /// Commits one event. The payload is checked and encoded, and the
    /// line's head written into its final allocation, before the lock is
    /// taken; sequence, timestamp, lifecycle check (the tool a tool
    /// terminal names included), the line's tail, append and eviction
    /// happen under it.
    pub fn commit(&self, payload: &Payload) -> Result<std::sync::Arc<Event>, CommitError> {
        let transition = payload.transition();
        let encoded = payload.encode(&transition)?;
        // Saturates at 2^53 − 1 (a clock past it would make the line
        // unreadable as I-JSON); still non-decreasing (under the lock).
        let now = self.shared.clock.now_micros().min(crate::event::MAX_SAFE);
        // The sequence this commit most likely gets, for the line's
        // capacity only (a racing commit costs one copy of the line).
        let seq = self.shared.signal.last_seq.load(Ordering::Relaxed) + 1;
        let head = LineHead::new(payload.kind(), &encoded, &self.shared.run_id, seq, now);
        self.commit_head(head, payload, &transition, now)
    }

    fn commit_head(
        &self,
        head: LineHead,
        payload: &Payload,
        transition: &Transition,
        now: u64,
    ) -> Result<std::sync::Arc<Event>, CommitError> {
        let tool = payload.tool_name();
        let mut state = lock(&self.shared.state);
        if let Some(reason) = state.ended {
            return Err(CommitError::Closed(reason));
        }
        state.tracker.check_links(payload)?;
        state.tracker.check_named(transition, tool)?;
        state.tracker.check_order(payload)?;
        crate::lifecycle::check_position(payload, state.next_seq)?;
        let seq = state.next_seq;
        let ts = now.max(state.last_ts);
        self.check_size(head.line_len(&self.shared.tail, seq, ts), transition)?;
        // Applying re-checks, then changes only what a lifecycle event
        // changes: an event within a scope, or of no scope, was checked
        // just above against this same state, so there is nothing to do.
        if let Transition::Lifecycle(..) = transition {
            state.tracker.apply_named(transition, tool)?;
        }
        state.tracker.apply_order(payload);
        let event = std::sync::Arc::new(head.finish(
            self.shared.run_id.clone(),
            &self.shared.tail,
            seq,
            ts,
        ));
        self.append_locked(&mut state, std::sync::Arc::clone(&event));
        Ok(event)
    }

    /// Appends an event that already has its sequence and timestamp
    /// (restore and import): the same checks as a commit, no renumbering.
    /// `payload` is the event's, decoded.
    pub(crate) fn commit_verbatim(
        &self,
        event: &std::sync::Arc<Event>,
        payload: &Payload,
    ) -> Result<std::sync::Arc<Event>, CommitError> {
        let (transition, tool) = (payload.transition(), payload.tool_name());
        let mut state = lock(&self.shared.state);
        if let Some(reason) = state.ended {
            return Err(CommitError::Closed(reason));
        }
        state.tracker.check_links(payload)?;
        state.tracker.check_named(&transition, tool)?;
        state.tracker.check_order(payload)?;
        crate::lifecycle::check_position(payload, event.seq())?;
        if event.seq() != state.next_seq {
            return Err(CommitError::OutOfSequence {
                expected: state.next_seq,
                found: event.seq(),
            });
        }
        self.check_size(event.line().len(), &transition)?;
        state.tracker.apply_named(&transition, tool)?;
        state.tracker.apply_order(payload);
        self.append_locked(&mut state, std::sync::Arc::clone(event));
        // Restored and imported events are durable by definition (they
        // were read back from where they were kept).
        if state.durable_seq + 1 == event.seq() {
            state.durable_seq = event.seq();
            self.shared.signal.publish(&state);
            wake_all(&mut state.durable_waiters);
        }
        Ok(std::sync::Arc::clone(event))
    }

    fn check_size(&self, bytes: usize, transition: &Transition) -> Result<(), CommitError> {
        let reserved = matches!(
            transition,
            Transition::Lifecycle(_, Phase::Ended(t)) if *t != crate::kind::Terminal::Completed
        );
        let (max, bound) = if reserved {
            (self.shared.config.max_terminal_bytes, "max_terminal_bytes")
        } else {
            (self.shared.config.max_event_bytes, "max_event_bytes")
        };
        if bytes > max {
            return Err(CommitError::EventTooLarge { bytes, max, bound });
        }
        Ok(())
    }

    /// Appends, evicts oldest-first past either bound, wakes waiters.
    fn append_locked(&self, state: &mut State, event: std::sync::Arc<Event>) {
        let size = event.retained_bytes();
        state.cum_bytes += size as u64;
        state.next_seq = event.seq() + 1;
        state.last_ts = state.last_ts.max(event.ts());
        state.entries.push_back(Entry {
            event,
            cum_bytes: state.cum_bytes,
        });
        state.retained_bytes += size;
        let config = &self.shared.config;
        while state.entries.len() > config.max_events || state.retained_bytes > config.max_bytes {
            match state.entries.pop_front() {
                Some(old) => {
                    state.retained_bytes -= old.event.retained_bytes();
                    state.first_seq = old.event.seq() + 1;
                    state.evicted += 1;
                }
                None => break,
            }
        }
        self.shared.signal.publish(state);
        wake_all(&mut state.waiters);
    }

    /// Raises the durable watermark to `min(seq, last committed seq)`:
    /// every event up to it is durable (the caller acknowledges in
    /// sequence order). It never lowers the watermark; a lower or equal
    /// `seq` changes nothing. Wakes the
    /// [`Durable`](crate::Durability::Durable) subscriptions waiting for
    /// it. It works after [`close`](Self::close) too: acknowledgements of
    /// events committed before the close may still arrive.
    pub fn mark_durable(&self, seq: u64) {
        let mut state = lock(&self.shared.state);
        let target = seq.min(state.last_seq());
        if target > state.durable_seq {
            state.durable_seq = target;
            self.shared.signal.publish(&state);
            wake_all(&mut state.durable_waiters);
        }
    }

    /// The durable watermark: every event up to it is durable (0 when
    /// none is). See [`mark_durable`](Self::mark_durable).
    pub fn durable_seq(&self) -> u64 {
        lock(&self.shared.state).durable_seq
    }

    /// Subscribes to every event after sequence `after` (0 for all).
    ///
    /// Under the log lock, this checks the cursor and records where the
    /// replay (what is visible now) ends; nothing is copied. The
    /// subscriber then reads the replay and the live tail alike, straight
    /// from the retained events, a batch per lock: it sees every later
    /// event exactly once, in order. A cursor older than the retained
    /// window is [`SubscribeError::CursorExpired`]; one past the last
    /// commit is [`SubscribeError::CursorAhead`]. A replay evicted before
    /// the subscriber reached it ends the subscription with
    /// [`SubscriptionError::Evicted`](crate::SubscriptionError::Evicted)
    /// (with the default retention of 100,000 events, a consumer far
    /// behind an active run).
    pub fn subscribe(
        &self,
        after: u64,
        bounds: SubscriptionBounds,
    ) -> Result<Subscription, SubscribeError> {
        Subscription::new(Arc::clone(&self.shared), after, bounds)
    }

    /// Stops taking commits. Subscribers receive what was committed (a
    /// `Durable` one: what is durable when it sees the end), then a typed
    /// end (unless they already saw the run's terminal).
    pub fn close(&self) {
        self.end(EndReason::Closed);
    }

    /// Like [`close`](Self::close), for engine shutdown.
    pub fn shutdown(&self) {
        self.end(EndReason::Shutdown);
    }

    fn end(&self, reason: EndReason) {
        let mut state = lock(&self.shared.state);
        if state.ended.is_none() {
            state.ended = Some(reason);
        }
        self.shared.signal.publish(&state);
        wake_all(&mut state.waiters);
        wake_all(&mut state.durable_waiters);
    }

    /// Counters and positions.
    pub fn stats(&self) -> LogStats {
        let state = lock(&self.shared.state);
        LogStats {
            earliest_seq: state.first_seq,
            last_seq: state.last_seq(),
            retained_events: state.entries.len(),
            retained_bytes: state.retained_bytes,
            evicted: state.evicted,
            subscribers: state.subscribers,
            durable_seq: state.durable_seq,
        }
    }

    /// The open scopes, innermost first: what cancellation must close, in
    /// that order.
    pub fn open_scopes(&self) -> Vec<ScopeKey> {
        lock(&self.shared.state).tracker.open_innermost_first()
    }

    /// The open scopes as their start events named them, innermost first
    /// like [`open_scopes`](Self::open_scopes): every open scope, a tool
    /// scope with the tool its `tool.started` named. Committing each
    /// one's [`OpenScope::cancelled`] in this order closes the run.
    pub fn open_scope_starts(&self) -> Vec<OpenScope> {
        lock(&self.shared.state)
            .tracker
            .open_scopes_innermost_first()
    }

    /// Whether the run's terminal has been committed.
    pub fn run_ended(&self) -> bool {
        lock(&self.shared.state).tracker.run_ended()
    }

    /// The retained events after `after`, oldest first (a copy of handles).
    pub fn retained_after(&self, after: u64) -> Vec<std::sync::Arc<Event>> {
        let state = lock(&self.shared.state);
        let skip = after.saturating_add(1).saturating_sub(state.first_seq);
        state
            .entries
            .iter()
            .skip(usize::try_from(skip).unwrap_or(usize::MAX))
            .map(|e| std::sync::Arc::clone(&e.event))
            .collect()
    }
}
