//! Anthropic error classification: the error `type`, else the status,
//! to a typed problem, for a non-2xx response and an `error` event.

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
    #[serde(default)]
    error: Option<ErrorBody>,
}

/// The `error` object of an error body or an error event.
#[derive(Deserialize, Default)]
pub(super) struct ErrorBody {
    #[serde(default, rename = "type")]
    kind: Option<Value>,
    #[serde(default)]
    message: Option<Value>,
}

fn is_context_length(message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    message.contains("prompt is too long")
        || message.contains("exceed context limit")
        || message.contains("context window")
}

/// Kind and retryability from the error `type` (and message), when the
/// type is known.
fn by_type(kind: &str, message: &str) -> Option<(ProblemKind, bool)> {
    Some(match kind {
        "invalid_request_error" if is_context_length(message) => {
            (ProblemKind::ContextLength, false)
        }
        "invalid_request_error" | "not_found_error" | "request_too_large" => {
            (ProblemKind::InvalidRequest, false)
        }
        "authentication_error" | "permission_error" => (ProblemKind::Auth, false),
        "billing_error" => (ProblemKind::Other, false),
        "rate_limit_error" => (ProblemKind::RateLimited, true),
        "overloaded_error" => (ProblemKind::Overloaded, true),
        "timeout_error" => (ProblemKind::Timeout, true),
        "api_error" => (ProblemKind::Unavailable, true),
        _ => return None,
    })
}

fn by_status(status: u16, message: &str) -> (ProblemKind, bool) {
    match status {
        401 | 403 => (ProblemKind::Auth, false),
        408 | 504 => (ProblemKind::Timeout, true),
        400 | 404 | 413 | 422 if is_context_length(message) => (ProblemKind::ContextLength, false),
        400 | 404 | 413 | 422 => (ProblemKind::InvalidRequest, false),
        429 => (ProblemKind::RateLimited, true),
        529 => (ProblemKind::Overloaded, true),
        500..=599 => (ProblemKind::Unavailable, true),
        300..=399 => (ProblemKind::Other, false),
        _ => (ProblemKind::InvalidRequest, false),
    }
}

/// The problem for a non-2xx response. The status decides auth, rate
/// limits and overload; the error `type` refines the rest.
pub(super) fn classify_http(status: u16, headers: &HeaderMap, body: &[u8]) -> RawProblem {
    let error = serde_json::from_slice::<ErrorEnvelope>(body)
        .ok()
        .and_then(|e| e.error)
        .unwrap_or_default();
    let kind_name = text_of(&error.kind).and_then(safe_code);
    let message = text_of(&error.message).unwrap_or("");
    let (kind, retryable) = match status {
        401 | 403 | 429 | 529 => by_status(status, message),
        _ => kind_name
            .and_then(|k| by_type(k, message))
            .unwrap_or_else(|| by_status(status, message)),
    };
    let retryable = should_retry(headers).unwrap_or(retryable);
    let mut problem = RawProblem::new(
        kind,
        problem_message(Some(status), kind_name, message),
        retryable,
    );
    problem.retry_after = retry_after(headers);
    problem
}

/// The problem for an `error` event inside a 200 stream: by its type,
/// else a transient fault.
pub(super) fn classify_stream_error(error: &ErrorBody) -> RawProblem {
    let kind_name = text_of(&error.kind).and_then(safe_code);
    let message = text_of(&error.message).unwrap_or("");
    let (kind, retryable) = kind_name
        .and_then(|k| by_type(k, message))
        .unwrap_or((ProblemKind::Unavailable, true));
    RawProblem::new(kind, problem_message(None, kind_name, message), retryable)
}
