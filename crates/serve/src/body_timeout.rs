//! The request body timeout: a body must arrive whole within
//! `--body-timeout-ms` of its request's head, else reading it fails with
//! [`BodyTimedOut`] (which `read_body` answers with
//! 408 body-timeout). The size bound is `read_body`'s.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use futures_util::StreamExt;
use std::time::Duration;

/// Reading a request body took longer than `--body-timeout-ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the request body did not arrive within {ms} ms (--body-timeout-ms)")]
pub struct BodyTimedOut {
    ms: u128,
}

impl BodyTimedOut {
    /// The bound, in milliseconds.
    pub fn ms(&self) -> u128 {
        self.ms
    }

    /// The [`BodyTimedOut`] somewhere in `e`'s source chain.
    pub fn find(e: &(dyn std::error::Error + 'static)) -> Option<BodyTimedOut> {
        let mut current = Some(e);
        while let Some(e) = current {
            if let Some(found) = e.downcast_ref::<BodyTimedOut>() {
                return Some(*found);
            }
            current = e.source();
        }
        None
    }
}

/// The bound the middleware applies.
#[derive(Debug, Clone, Copy)]
pub struct BodyTimeout(pub Duration);

/// Replaces the request's body with one that fails once the bound from
/// now has passed before its end.
pub async fn bound_body(
    State(BodyTimeout(bound)): State<BodyTimeout>,
    request: Request,
    next: Next,
) -> Response {
    let (parts, body) = request.into_parts();
    let deadline = tokio::time::Instant::now() + bound;
    let mut data = body.into_data_stream();
    let timed = async_stream::stream! {
        loop {
            match tokio::time::timeout_at(deadline, data.next()).await {
                Ok(Some(chunk)) => yield chunk.map_err(axum::BoxError::from),
                Ok(None) => break,
                Err(_) => {
                    let e: axum::BoxError = Box::new(BodyTimedOut { ms: bound.as_millis() });
                    yield Err(e);
                    break;
                }
            }
        }
    };
    next.run(Request::from_parts(parts, Body::from_stream(timed)))
        .await
}
