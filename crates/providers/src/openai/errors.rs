//! OpenAI error classification: a non-2xx response (status, `error.code`,
//! `error.type`, headers) or an `{"error": …}` chunk inside a 200 stream,
//! to a typed problem.

use crate::decode::text_of;
use crate::http::headers::{retry_after, should_retry};
use crate::problem::problem_message;
use crate::screen::safe_code;
use keel_stream::{ProblemKind, RawProblem};
use reqwest::header::HeaderMap;
use serde::Deserialize;
use serde_json::Value;

#[derive(Deserialize)]
struct ErrorEnvelope {
    error: Option<ErrorBody>,
}

/// The `error` object of an error body or an error event.
#[derive(Deserialize, Default)]
pub(super) struct ErrorBody {
    #[serde(default)]
    message: Option<Value>,
    #[serde(default, rename = "type")]
    kind: Option<Value>,
    #[serde(default)]
    code: Option<Value>,
}

fn is_context_length(code: Option<&str>, message: &str) -> bool {
    code == Some("context_length_exceeded")
        || message.contains("maximum context length")
        || message.contains("context_length_exceeded")
}

/// The problem for a non-2xx response (the Responses API answers with
/// the same error body).
pub(crate) fn classify_http(status: u16, headers: &HeaderMap, body: &[u8]) -> RawProblem {
    let error = serde_json::from_slice::<ErrorEnvelope>(body)
        .ok()
        .and_then(|e| e.error)
        .unwrap_or_default();
    let code = text_of(&error.code).and_then(safe_code);
    let kind_name = text_of(&error.kind).and_then(safe_code);
    let message = text_of(&error.message).unwrap_or("");
    let overloaded = code.is_some_and(|c| c.contains("overloaded"))
        || kind_name.is_some_and(|t| t.contains("overloaded"))
        || message.to_ascii_lowercase().contains("overloaded");
    let (kind, retryable) = match status {
        401 | 403 => (ProblemKind::Auth, false),
        408 => (ProblemKind::Timeout, true),
        400 | 404 | 413 | 422 if is_context_length(code, message) => {
            (ProblemKind::ContextLength, false)
        }
        400 | 404 | 413 | 422 => (ProblemKind::InvalidRequest, false),
        429 if code == Some("insufficient_quota") => (ProblemKind::RateLimited, false),
        429 => (ProblemKind::RateLimited, true),
        503 | 529 if overloaded || status == 529 => (ProblemKind::Overloaded, true),
        500..=599 => (ProblemKind::Unavailable, true),
        300..=399 => (ProblemKind::Other, false),
        _ => (ProblemKind::InvalidRequest, false),
    };
    let retryable = should_retry(headers).unwrap_or(retryable);
    let mut problem = RawProblem::new(
        kind,
        problem_message(Some(status), code.or(kind_name), message),
        retryable,
    );
    problem.retry_after = retry_after(headers);
    problem
}

/// The problem for an `{"error": …}` chunk inside a 200 stream.
pub(super) fn classify_stream_error(error: &ErrorBody) -> RawProblem {
    let code = text_of(&error.code).and_then(safe_code);
    let kind_name = text_of(&error.kind).and_then(safe_code);
    let message = text_of(&error.message).unwrap_or("");
    let any = |needle: &str| {
        code.is_some_and(|c| c.contains(needle)) || kind_name.is_some_and(|t| t.contains(needle))
    };
    let (kind, retryable) = if is_context_length(code, message) {
        (ProblemKind::ContextLength, false)
    } else if any("overloaded") {
        (ProblemKind::Overloaded, true)
    } else if any("rate_limit") {
        (ProblemKind::RateLimited, true)
    } else if any("invalid_request") {
        (ProblemKind::InvalidRequest, false)
    } else if any("timeout") {
        (ProblemKind::Timeout, true)
    } else {
        // `server_error` and anything unknown: a transient fault.
        (ProblemKind::Unavailable, true)
    };
    RawProblem::new(
        kind,
        problem_message(None, code.or(kind_name), message),
        retryable,
    )
}
