//! Bearer-token authentication, compared in constant time.

use super::problem::Problem;
use super::{BearerToken, Daemon};
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

/// Whether `a` and `b` are equal, in time that depends only on their
/// length: every byte is compared, differences are OR-ed together, and a
/// length mismatch is a rejection (the token's length is not a secret
/// worth protecting; its bytes are).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b) {
        diff |= x ^ y;
    }
    std::hint::black_box(diff) == 0
}

/// Whether `headers` carry `Authorization: Bearer <token>` with exactly
/// this token (one space after the scheme, nothing around the token; a
/// second `Authorization` header is not looked at).
pub fn bearer_matches(headers: &axum::http::HeaderMap, token: &[u8]) -> bool {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
        .is_some_and(|presented| constant_time_eq(presented, token))
}

/// Rejects a request without `Authorization: Bearer <token>` when the
/// daemon has a token.
pub async fn require_token(
    State(daemon): State<Arc<Daemon>>,
    request: Request,
    next: Next,
) -> Response {
    let Some(token) = daemon.token.as_ref().map(BearerToken::as_bytes) else {
        return next.run(request).await;
    };
    if bearer_matches(request.headers(), token) {
        next.run(request).await
    } else {
        let mut response = Problem::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "Missing or wrong bearer token",
            "this daemon requires Authorization: Bearer <token>",
        )
        .into_response();
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            axum::http::HeaderValue::from_static("Bearer"),
        );
        response
    }
}

#[cfg(test)]
mod tests {
    use super::constant_time_eq;

    #[test]
    fn compares_bytes_and_lengths() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(!constant_time_eq(b"", b"x"));
        assert!(constant_time_eq(b"", b""));
    }
}
