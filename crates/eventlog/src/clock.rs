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
            .map(micros)
            .unwrap_or(0)
    }
}

/// Whole microseconds in `d`, saturating at `u64::MAX`: what
/// `u64::try_from(d.as_micros()).unwrap_or(u64::MAX)` gives, without
/// 128-bit arithmetic.
fn micros(d: std::time::Duration) -> u64 {
    d.as_secs()
        .saturating_mul(1_000_000)
        .saturating_add(u64::from(d.subsec_micros()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::Duration;

    fn reference(d: Duration) -> u64 {
        u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
    }

    #[test]
    fn micros_at_the_edges() {
        let max_secs = u64::MAX / 1_000_000;
        for d in [
            Duration::ZERO,
            Duration::from_nanos(999),
            Duration::from_nanos(1_000),
            Duration::new(max_secs, 551_615_000),
            Duration::new(max_secs, 551_615_999),
            Duration::new(max_secs, 551_616_000),
            Duration::new(max_secs, 999_999_999),
            Duration::new(max_secs + 1, 0),
            Duration::MAX,
        ] {
            assert_eq!(micros(d), reference(d), "{d:?}");
        }
    }

    proptest! {
        #[test]
        fn micros_agrees_with_as_micros(secs in any::<u64>(), nanos in 0u32..1_000_000_000) {
            let d = Duration::new(secs, nanos);
            prop_assert_eq!(micros(d), reference(d));
        }

        #[test]
        fn micros_agrees_near_now(secs in 0u64..(1 << 40), nanos in 0u32..1_000_000_000) {
            let d = Duration::new(secs, nanos);
            prop_assert_eq!(micros(d), reference(d));
        }
    }
}
