//! Responses errors inside a 200 stream: an `error` event, or the `error`
//! of a `response.failed`, both `{code, message}`, to a typed problem by
//! the code. (A non-2xx response has the Chat Completions error body and
//! is classified by the OpenAI adapter's `classify_http`.)

use crate::decode::text_of;
use crate::problem::problem_message;
use crate::screen::safe_code;
use keel_stream::{ProblemKind, RawProblem};
use serde::Deserialize;
use serde_json::Value;

/// The `{code, message}` of an `error` event or a failed response.
#[derive(Deserialize, Default)]
pub(super) struct ErrorBody {
    #[serde(default)]
    code: Option<Value>,
    #[serde(default)]
    message: Option<Value>,
}

/// Kind and retryability of an error code (and message).
fn by_code(code: Option<&str>, message: &str) -> (ProblemKind, bool) {
    let code = code.unwrap_or("");
    if code == "context_length_exceeded" || message.contains("context window") {
        return (ProblemKind::ContextLength, false);
    }
    match code {
        "rate_limit_exceeded" => (ProblemKind::RateLimited, true),
        "insufficient_quota" => (ProblemKind::RateLimited, false),
        "vector_store_timeout" | "timeout" => (ProblemKind::Timeout, true),
        c if c.contains("overloaded") => (ProblemKind::Overloaded, true),
        // `invalid_prompt`, the image codes, `bio_policy`,
        // `data_residency_mismatch`, `invalid_request_error`.
        c if c.starts_with("invalid")
            || c.contains("image")
            || matches!(c, "bio_policy" | "data_residency_mismatch") =>
        {
            (ProblemKind::InvalidRequest, false)
        }
        // `server_error` and anything unknown: a transient fault.
        _ => (ProblemKind::Unavailable, true),
    }
}

/// The problem for an error inside the stream.
pub(super) fn classify_stream_error(error: &ErrorBody) -> RawProblem {
    let code = text_of(&error.code).and_then(safe_code);
    let message = text_of(&error.message).unwrap_or("");
    let (kind, retryable) = by_code(code, message);
    RawProblem::new(kind, problem_message(None, code, message), retryable)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(code: Value, message: &str, expected: (ProblemKind, bool), shown: &str) {
        let error = ErrorBody {
            code: Some(code.clone()),
            message: Some(json!(message)),
        };
        let problem = classify_stream_error(&error);
        assert_eq!((problem.kind, problem.retryable), expected, "{code}");
        assert_eq!(problem.message, shown, "{code}");
    }

    #[test]
    fn codes_map_to_kinds() {
        use ProblemKind::*;
        for (code, message, expected, shown) in [
            (
                json!("server_error"),
                "oops",
                (Unavailable, true),
                "stream error server_error: oops",
            ),
            (
                json!("rate_limit_exceeded"),
                "",
                (RateLimited, true),
                "stream error rate_limit_exceeded",
            ),
            (
                json!("insufficient_quota"),
                "",
                (RateLimited, false),
                "stream error insufficient_quota",
            ),
            (
                json!("invalid_prompt"),
                "no",
                (InvalidRequest, false),
                "stream error invalid_prompt: no",
            ),
            (
                json!("image_too_large"),
                "",
                (InvalidRequest, false),
                "stream error image_too_large",
            ),
            (
                json!("bio_policy"),
                "",
                (InvalidRequest, false),
                "stream error bio_policy",
            ),
            (
                json!("engine_overloaded"),
                "",
                (Overloaded, true),
                "stream error engine_overloaded",
            ),
            (
                json!("vector_store_timeout"),
                "",
                (Timeout, true),
                "stream error vector_store_timeout",
            ),
            (
                json!("context_length_exceeded"),
                "",
                (ContextLength, false),
                "stream error context_length_exceeded",
            ),
            (
                json!(null),
                "Your input exceeds the context window of this model.",
                (ContextLength, false),
                "stream error: Your input exceeds the context window of this model.",
            ),
            // A code that is not a token is not shown.
            (
                json!("bad code!"),
                "m",
                (Unavailable, true),
                "stream error: m",
            ),
            (json!(7), "", (Unavailable, true), "stream error"),
        ] {
            check(code, message, expected, shown);
        }
    }
}
