//! Resident memory and percentiles.

/// This process's resident set in bytes (`/proc/self/statm`'s second
/// field, in pages of 4 KiB; 0 where there is no /proc).
pub fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// Delays in µs: count, p50, p99, max.
pub struct Percentiles {
    pub count: usize,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

impl Percentiles {
    pub fn of(mut delays_ns: Vec<u64>) -> Percentiles {
        delays_ns.sort_unstable();
        let at = |q: f64| {
            let i = ((delays_ns.len() as f64 * q).ceil() as usize).saturating_sub(1);
            delays_ns.get(i).copied().unwrap_or(0) as f64 / 1000.0
        };
        Percentiles {
            count: delays_ns.len(),
            p50: at(0.50),
            p99: at(0.99),
            max: at(1.0),
        }
    }
}

impl std::fmt::Display for Percentiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "p50 {:.0} µs, p99 {:.0} µs, max {:.0} µs ({} events)",
            self.p50, self.p99, self.max, self.count
        )
    }
}

/// Microseconds since the Unix epoch (the events' `ts` clock).
pub fn unix_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}
