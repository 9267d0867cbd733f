//! `ManualClock`: a clock the test moves by hand.

use keel_eventlog::Clock;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A [`Clock`] that only moves when the test says so, in microseconds
/// since the Unix epoch.
///
/// Clones share one time (an `Arc` inside): hand one clone to the engine
/// (`Arc::new(clock.clone())`) and move the other. The clock may even be
/// set backwards; the log keeps `ts` non-decreasing within a run whatever
/// the clock says, and tests can check exactly that.
///
/// It is independent of Tokio's paused time: `tokio::time::advance` moves
/// timers, this moves event timestamps.
///
/// ```
/// use keel_testkit::ManualClock;
/// use keel_eventlog::Clock;
/// use std::time::Duration;
///
/// let clock = ManualClock::new(1_000);
/// let engine_side = clock.clone();
/// clock.advance(Duration::from_millis(2));
/// assert_eq!(engine_side.now_micros(), 3_000);
/// clock.set(10);
/// assert_eq!(engine_side.now_micros(), 10);
/// assert_eq!(ManualClock::default().now_micros(), ManualClock::START_2026);
/// ```
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// 2026-01-01T00:00:00Z in microseconds: where [`Default`] starts.
    pub const START_2026: u64 = 1_767_225_600_000_000;

    /// A clock reading `start` microseconds since the Unix epoch.
    pub fn new(start: u64) -> ManualClock {
        ManualClock(Arc::new(AtomicU64::new(start)))
    }

    /// Sets the time (backwards too).
    pub fn set(&self, micros: u64) {
        self.0.store(micros, Ordering::SeqCst);
    }

    /// Moves the time forward by `by` (whole microseconds, saturating).
    pub fn advance(&self, by: Duration) {
        let delta = u64::try_from(by.as_micros()).unwrap_or(u64::MAX);
        let _ = self
            .0
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |now| {
                Some(now.saturating_add(delta))
            });
    }

    /// The current reading.
    pub fn now(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        ManualClock::new(Self::START_2026)
    }
}

impl Clock for ManualClock {
    fn now_micros(&self) -> u64 {
        self.now()
    }
}
