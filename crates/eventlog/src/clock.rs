//! Where timestamps come from.

/// A source of wall-clock time in microseconds since the Unix epoch. The
/// engine owns one; tests use a manual clock. The log never lets `ts` go
/// backwards within a run, whatever the clock says.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Microseconds since the Unix epoch.
    fn now_micros(&self) -> u64;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_micros(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
            .unwrap_or(0)
    }
}
