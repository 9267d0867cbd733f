//! A response's verdict, once its status and headers are in: a 2xx event
//! stream goes on to the pump; a 2xx JSON body (a server that ignored
//! `"stream": true`) is a `protocol` problem; any other status has its
//! body read, up to a bound, and classified by the wire format.

use keel_stream::{ProblemKind, RawProblem};
use reqwest::header::{CONTENT_TYPE, HeaderMap};

/// A wire format's classifier of a non-2xx response: status, headers and
/// (bounded) body to a problem.
pub(crate) type Classify = fn(u16, &HeaderMap, &[u8]) -> RawProblem;

/// `response` if it starts an event stream, else its problem.
pub(crate) async fn accept(
    response: reqwest::Response,
    max_error_body_bytes: usize,
    classify: Classify,
) -> Result<reqwest::Response, RawProblem> {
    let status = response.status().as_u16();
    if response.status().is_success() {
        if is_json(response.headers()) {
            return Err(RawProblem::new(
                ProblemKind::Protocol,
                format!(
                    "HTTP {status} with content-type application/json, not an event stream (was \"stream\": true ignored?)"
                ),
                false,
            ));
        }
        return Ok(response);
    }
    let headers = response.headers().clone();
    let body = read_bounded(response, max_error_body_bytes).await;
    Err(classify(status, &headers, &body))
}

/// Whether the content type is JSON.
fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.trim()
                .to_ascii_lowercase()
                .starts_with("application/json")
        })
}

/// Reads at most `max` bytes of a body; a read error or timeout ends it
/// early (the error body is only a hint).
async fn read_bounded(mut response: reqwest::Response, max: usize) -> Vec<u8> {
    let mut body = Vec::new();
    while let Ok(Some(chunk)) = response.chunk().await {
        let room = max - body.len();
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if body.len() >= max {
            break;
        }
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn only_a_json_content_type_is_json() {
        let mut h = HeaderMap::new();
        assert!(!is_json(&h));
        for (value, json) in [
            ("application/json", true),
            (" Application/JSON; charset=utf-8", true),
            ("text/event-stream", false),
            ("text/event-stream; charset=utf-8", false),
        ] {
            h.insert(CONTENT_TYPE, HeaderValue::from_static(value));
            assert_eq!(is_json(&h), json, "{value}");
        }
    }
}
