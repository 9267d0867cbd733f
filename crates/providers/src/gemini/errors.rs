//! Gemini error classification: a non-2xx response or an `{"error": …}`
//! chunk inside a 200 stream, to a typed problem. Google errors carry the
//! HTTP `code`, a `google.rpc.Code` name as `status`, a `message`, and
//! `details` (an `ErrorInfo` `reason`, a `RetryInfo` `retryDelay`).

use crate::decode::text_of;
use crate::http::headers::{parse_go_duration, retry_after, should_retry};
use crate::problem::problem_message;
use crate::screen::safe_code;
use keel_stream::{ProblemKind, RawProblem};
use reqwest::header::HeaderMap;
use serde::Deserialize;
use serde_json::Value;
use std::time::Duration;

#[derive(Deserialize)]
struct ErrorEnvelope {
    #[serde(default)]
    error: Option<ErrorBody>,
}

/// The `error` object of an error body or an error chunk.
#[derive(Deserialize, Default)]
pub(super) struct ErrorBody {
    #[serde(default)]
    message: Option<Value>,
    #[serde(default)]
    status: Option<Value>,
    #[serde(default)]
    details: Option<Vec<Detail>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Detail {
    #[serde(default)]
    reason: Option<Value>,
    #[serde(default)]
    retry_delay: Option<Value>,
}

/// The longest `retryDelay` believed: one day, as for `retry-after`.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(86_400);

impl ErrorBody {
    /// An error body: the envelope object, or the first element of the
    /// array a non-SSE stream wraps it in.
    fn parse(body: &[u8]) -> ErrorBody {
        if let Ok(ErrorEnvelope { error: Some(error) }) = serde_json::from_slice(body) {
            return error;
        }
        serde_json::from_slice::<Vec<ErrorEnvelope>>(body)
            .ok()
            .and_then(|list| list.into_iter().next())
            .and_then(|envelope| envelope.error)
            .unwrap_or_default()
    }

    fn reason(&self) -> Option<&str> {
        self.details
            .iter()
            .flatten()
            .find_map(|d| text_of(&d.reason))
    }

    /// The `RetryInfo` delay (`"37s"`, `"1.5s"`), within one day.
    fn retry_delay(&self) -> Option<Duration> {
        self.details
            .iter()
            .flatten()
            .find_map(|d| text_of(&d.retry_delay))
            .and_then(parse_go_duration)
            .filter(|delay| *delay <= MAX_RETRY_DELAY)
    }
}

fn is_context_length(message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    message.contains("exceeds the maximum number of tokens")
        || message.contains("input token count")
        || message.contains("context window")
}

/// A bad key comes as 400 `INVALID_ARGUMENT` with reason
/// `API_KEY_INVALID`.
fn is_bad_key(reason: Option<&str>, message: &str) -> bool {
    reason == Some("API_KEY_INVALID") || message.contains("API key not valid")
}

/// Kind and retryability from the `status` name, when it is known.
fn by_status_name(name: &str, reason: Option<&str>, message: &str) -> Option<(ProblemKind, bool)> {
    Some(match name {
        "INVALID_ARGUMENT" if is_bad_key(reason, message) => (ProblemKind::Auth, false),
        "INVALID_ARGUMENT" | "OUT_OF_RANGE" if is_context_length(message) => {
            (ProblemKind::ContextLength, false)
        }
        "INVALID_ARGUMENT" | "FAILED_PRECONDITION" | "NOT_FOUND" | "OUT_OF_RANGE" => {
            (ProblemKind::InvalidRequest, false)
        }
        "UNAUTHENTICATED" | "PERMISSION_DENIED" => (ProblemKind::Auth, false),
        "RESOURCE_EXHAUSTED" => (ProblemKind::RateLimited, true),
        "UNAVAILABLE" if message.to_ascii_lowercase().contains("overloaded") => {
            (ProblemKind::Overloaded, true)
        }
        "UNAVAILABLE" | "INTERNAL" | "ABORTED" | "UNKNOWN" => (ProblemKind::Unavailable, true),
        "DEADLINE_EXCEEDED" => (ProblemKind::Timeout, true),
        _ => return None,
    })
}

fn by_http_status(status: u16, reason: Option<&str>, message: &str) -> (ProblemKind, bool) {
    match status {
        400 if is_bad_key(reason, message) => (ProblemKind::Auth, false),
        401 | 403 => (ProblemKind::Auth, false),
        408 | 504 => (ProblemKind::Timeout, true),
        400 | 404 | 413 | 422 if is_context_length(message) => (ProblemKind::ContextLength, false),
        400 | 404 | 413 | 422 => (ProblemKind::InvalidRequest, false),
        429 => (ProblemKind::RateLimited, true),
        500..=599 => (ProblemKind::Unavailable, true),
        300..=399 => (ProblemKind::Other, false),
        _ => (ProblemKind::InvalidRequest, false),
    }
}

/// The problem for a non-2xx response. Auth and rate limits go by the
/// HTTP status; the `status` name refines the rest.
pub(super) fn classify_http(status: u16, headers: &HeaderMap, body: &[u8]) -> RawProblem {
    let error = ErrorBody::parse(body);
    let name = text_of(&error.status).and_then(safe_code);
    let message = text_of(&error.message).unwrap_or("");
    let reason = error.reason();
    let (kind, retryable) = match status {
        401 | 403 | 429 => by_http_status(status, reason, message),
        _ => name
            .and_then(|n| by_status_name(n, reason, message))
            .unwrap_or_else(|| by_http_status(status, reason, message)),
    };
    let retryable = should_retry(headers).unwrap_or(retryable);
    let mut problem = RawProblem::new(
        kind,
        problem_message(Some(status), name, message),
        retryable,
    );
    problem.retry_after = retry_after(headers).or_else(|| error.retry_delay());
    problem
}

/// The problem for an `{"error": …}` chunk inside a 200 stream: by its
/// `status` name, else a transient fault.
pub(super) fn classify_stream_error(error: &ErrorBody) -> RawProblem {
    let name = text_of(&error.status).and_then(safe_code);
    let message = text_of(&error.message).unwrap_or("");
    let (kind, retryable) = name
        .and_then(|n| by_status_name(n, error.reason(), message))
        .unwrap_or((ProblemKind::Unavailable, true));
    let mut problem = RawProblem::new(kind, problem_message(None, name, message), retryable);
    problem.retry_after = error.retry_delay();
    problem
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(status: u16, body: &str, kind: ProblemKind, retryable: bool, retry: Option<u64>) {
        let problem = classify_http(status, &HeaderMap::new(), body.as_bytes());
        assert_eq!(
            (problem.kind, problem.retryable, problem.retry_after),
            (kind, retryable, retry.map(Duration::from_secs)),
            "{status} {body}"
        );
    }

    #[test]
    fn google_errors_map_to_typed_problems() {
        let bad_key = r#"{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID","domain":"googleapis.com"}]}}"#;
        check(400, bad_key, ProblemKind::Auth, false, None);
        let too_long = r#"{"error":{"code":400,"message":"The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}"#;
        check(400, too_long, ProblemKind::ContextLength, false, None);
        let quota = r#"{"error":{"code":429,"message":"Resource has been exhausted.","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"37s"}]}}"#;
        check(429, quota, ProblemKind::RateLimited, true, Some(37));
        let far = r#"{"error":{"code":429,"status":"RESOURCE_EXHAUSTED","details":[{"retryDelay":"100000s"}]}}"#;
        check(429, far, ProblemKind::RateLimited, true, None);
        let overloaded = r#"{"error":{"code":503,"message":"The model is overloaded. Please try again later.","status":"UNAVAILABLE"}}"#;
        check(503, overloaded, ProblemKind::Overloaded, true, None);
        let internal = r#"[{"error":{"code":500,"message":"An internal error has occurred.","status":"INTERNAL"}}]"#;
        check(500, internal, ProblemKind::Unavailable, true, None);
        let missing =
            r#"{"error":{"code":404,"message":"models/nope is not found","status":"NOT_FOUND"}}"#;
        check(404, missing, ProblemKind::InvalidRequest, false, None);
        check(504, "<html>", ProblemKind::Timeout, true, None);
        check(403, "{}", ProblemKind::Auth, false, None);
        let stream = ErrorBody::parse(
            br#"{"error":{"code":503,"message":"overloaded","status":"UNAVAILABLE"}}"#,
        );
        let problem = classify_stream_error(&stream);
        assert_eq!(
            (problem.kind, problem.message.as_str()),
            (
                ProblemKind::Overloaded,
                "stream error UNAVAILABLE: overloaded"
            )
        );
    }
}
