//! Human-readable durations for the transcript and listings.

use std::time::Duration;

/// A short human-readable duration: `850ms`, `1.25s`, `2m05s`, `1h02m`.
///
/// ```
/// use std::time::Duration;
/// use keel_cli::time::human;
/// assert_eq!(human(Duration::from_millis(850)), "850ms");
/// assert_eq!(human(Duration::from_millis(1250)), "1.25s");
/// assert_eq!(human(Duration::from_secs(125)), "2m05s");
/// assert_eq!(human(Duration::from_secs(3720)), "1h02m");
/// ```
pub fn human(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{:.2}s", d.as_secs_f64())
    } else if ms < 3_600_000 {
        let s = d.as_secs();
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        let s = d.as_secs();
        format!("{}h{:02}m", s / 3600, (s / 60) % 60)
    }
}
