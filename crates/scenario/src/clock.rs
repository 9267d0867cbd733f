//! UTC calendar formatting from the system clock (no time-zone database,
//! no dependency): the `clock` built-in's RFC 3339 time.

use std::time::{SystemTime, UNIX_EPOCH};

/// A UTC civil date and time, to the second.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Civil {
    /// Year (1970..=9999).
    pub year: i64,
    /// Month, 1..=12.
    pub month: u32,
    /// Day, 1..=31.
    pub day: u32,
    /// Hour, 0..=23.
    pub hour: u32,
    /// Minute, 0..=59.
    pub minute: u32,
    /// Second, 0..=59.
    pub second: u32,
}

/// The civil UTC time of `secs` seconds since the Unix epoch (Howard
/// Hinnant's `civil_from_days`).
pub fn civil(secs: u64) -> Civil {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    Civil {
        year,
        month,
        day,
        hour: (rem / 3600) as u32,
        minute: ((rem / 60) % 60) as u32,
        second: (rem % 60) as u32,
    }
}

fn civil_of(t: SystemTime) -> Option<Civil> {
    let secs = t.duration_since(UNIX_EPOCH).ok()?.as_secs();
    let c = civil(secs);
    (c.year <= 9999).then_some(c)
}

/// `t` as RFC 3339 in UTC, to the second: `2026-11-30T12:00:00Z`. `None`
/// before 1970 or after 9999.
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// let t = UNIX_EPOCH + Duration::from_secs(1_796_040_000);
/// assert_eq!(keel_scenario::clock::rfc3339_utc(t).as_deref(), Some("2026-11-30T12:00:00Z"));
/// ```
pub fn rfc3339_utc(t: SystemTime) -> Option<String> {
    let c = civil_of(t)?;
    Some(format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        c.year, c.month, c.day, c.hour, c.minute, c.second
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn known_dates() {
        assert_eq!(
            rfc3339_utc(UNIX_EPOCH).as_deref(),
            Some("1970-01-01T00:00:00Z")
        );
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(rfc3339_utc(leap).as_deref(), Some("2000-02-29T00:00:00Z"));
        let t = UNIX_EPOCH + Duration::from_secs(1_767_225_599); // 2025-12-31T23:59:59Z
        assert_eq!(rfc3339_utc(t).as_deref(), Some("2025-12-31T23:59:59Z"));
        let far = UNIX_EPOCH + Duration::from_secs(300_000_000_000);
        assert_eq!(rfc3339_utc(far), None);
    }
}
