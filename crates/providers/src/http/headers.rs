//! Reading a response's headers: a header's text, the delay a response
//! asks for (retry-after and the rate-limit resets) and
//! `x-should-retry`. Each odd value is ignored, never an error: headers
//! only refine a problem the status already decided.

use reqwest::header::HeaderMap;
use std::time::Duration;

/// A header's value as text, if present and visible ASCII.
pub(crate) fn header<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

/// The delay a response asks for: `retry-after-ms` (milliseconds), else
/// `retry-after` (seconds, possibly fractional; an HTTP date is ignored),
/// else the longest `x-ratelimit-reset-*` duration (`1s`, `475ms`, `6m0s`)
/// among the limits whose `x-ratelimit-remaining-*` is `0`. A delay over
/// [`MAX_RETRY_AFTER`] is ignored.
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    if let Some(ms) = header(headers, "retry-after-ms").and_then(parse_decimal) {
        return within_bound(ms / 1000.0);
    }
    if let Some(seconds) = header(headers, "retry-after").and_then(parse_decimal) {
        return within_bound(seconds);
    }
    ["requests", "tokens"]
        .iter()
        .filter(|limit| header(headers, &format!("x-ratelimit-remaining-{limit}")) == Some("0"))
        .filter_map(|limit| {
            header(headers, &format!("x-ratelimit-reset-{limit}")).and_then(parse_go_duration)
        })
        .max()
}

/// The longest retry-after delay believed: one day.
const MAX_RETRY_AFTER: f64 = 86_400.0;

fn within_bound(seconds: f64) -> Option<Duration> {
    (seconds.is_finite() && (0.0..=MAX_RETRY_AFTER).contains(&seconds))
        .then(|| Duration::from_secs_f64(seconds))
}

/// A non-negative decimal number (digits and at most one dot).
fn parse_decimal(text: &str) -> Option<f64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return None;
    }
    text.parse().ok()
}

/// A Go-style duration as OpenAI's rate-limit headers write it: `1s`,
/// `475ms`, `6m0s`, `1h2m3.5s`, `20us`.
pub(crate) fn parse_go_duration(text: &str) -> Option<Duration> {
    let mut rest = text;
    let mut total = 0f64;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let number_len = rest
            .bytes()
            .position(|b| !(b.is_ascii_digit() || b == b'.'))
            .unwrap_or(rest.len());
        if number_len == 0 {
            return None;
        }
        let value: f64 = rest[..number_len].parse().ok()?;
        rest = &rest[number_len..];
        let unit_len = rest
            .bytes()
            .position(|b| b.is_ascii_digit() || b == b'.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += value * scale;
    }
    within_bound(total)
}

/// `x-should-retry: true|false`, when the provider sends it.
pub(crate) fn should_retry(headers: &HeaderMap) -> Option<bool> {
    match header(headers, "x-should-retry")? {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn go_durations_parse() {
        assert_eq!(parse_go_duration("475ms"), Some(Duration::from_millis(475)));
        assert_eq!(parse_go_duration("1s"), Some(Duration::from_secs(1)));
        assert_eq!(parse_go_duration("6m0s"), Some(Duration::from_secs(360)));
        assert_eq!(
            parse_go_duration("1h2m3.5s"),
            Some(Duration::from_millis(3_723_500))
        );
        for bad in ["", "ms", "5", "5x", "-1s", "1s2", "9999999h"] {
            assert_eq!(parse_go_duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn retry_after_prefers_the_explicit_headers() {
        let mut h = HeaderMap::new();
        h.insert(
            "x-ratelimit-remaining-tokens",
            HeaderValue::from_static("0"),
        );
        h.insert(
            "x-ratelimit-reset-tokens",
            HeaderValue::from_static("475ms"),
        );
        h.insert(
            "x-ratelimit-remaining-requests",
            HeaderValue::from_static("4"),
        );
        h.insert("x-ratelimit-reset-requests", HeaderValue::from_static("9s"));
        assert_eq!(retry_after(&h), Some(Duration::from_millis(475)));
        h.insert("retry-after", HeaderValue::from_static("2"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(2)));
        h.insert("retry-after-ms", HeaderValue::from_static("1500"));
        assert_eq!(retry_after(&h), Some(Duration::from_millis(1500)));
        h.insert("retry-after-ms", HeaderValue::from_static("120000"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(120)));
        let mut long = HeaderMap::new();
        long.insert("retry-after", HeaderValue::from_static("172800"));
        assert_eq!(retry_after(&long), None);
        let mut date = HeaderMap::new();
        date.insert(
            "retry-after",
            HeaderValue::from_static("Wed, 21 Oct 2026 07:28:00 GMT"),
        );
        assert_eq!(retry_after(&date), None);
    }

    #[test]
    fn should_retry_reads_only_true_and_false() {
        let mut h = HeaderMap::new();
        assert_eq!(should_retry(&h), None);
        h.insert("x-should-retry", HeaderValue::from_static("false"));
        assert_eq!(should_retry(&h), Some(false));
        h.insert("x-should-retry", HeaderValue::from_static(" true "));
        assert_eq!(should_retry(&h), Some(true));
        h.insert("x-should-retry", HeaderValue::from_static("yes"));
        assert_eq!(should_retry(&h), None);
    }
}
