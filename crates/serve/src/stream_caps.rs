//! Caps on concurrent event streams (`GET /v1/runs/{id}/events`, `/agui`,
//! `/v1/chat/{id}/stream`, and `POST /v1/chat`'s response, which takes its
//! slot in the handler, `StreamCaps::acquire`): at most `--max-streams`
//! in all and `--max-streams-per-run` of one run (a chat stream counts for
//! its conversation id). A stream's slot is held by its
//! response body, so it is freed when the stream ends or the client goes
//! away (the connection dropping the body). Over a cap: 503
//! too-many-streams with `Retry-After`.

use super::limits::StreamLimits;
use super::problem::Problem;
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The `Retry-After` of a stream refused at a cap, in seconds.
pub const RETRY_AFTER_SECS: u32 = 5;

#[derive(Debug, Default)]
struct Open {
    total: usize,
    per_run: HashMap<String, usize>,
}

/// The open streams.
#[derive(Debug)]
pub struct StreamCaps {
    limits: StreamLimits,
    open: Mutex<Open>,
}

impl StreamCaps {
    /// Caps as `limits` says.
    pub fn new(limits: StreamLimits) -> Arc<StreamCaps> {
        Arc::new(StreamCaps {
            limits,
            open: Mutex::new(Open::default()),
        })
    }

    /// A slot for one stream of `run`, or the problem naming the full cap.
    pub(super) fn acquire(self: &Arc<Self>, run: &str) -> Result<StreamSlot, Problem> {
        let mut open = super::lock(&self.open);
        let of_run = open.per_run.get(run).copied().unwrap_or(0);
        if open.total >= self.limits.max_streams() {
            return Err(too_many(
                "max_streams",
                self.limits.max_streams(),
                format!(
                    "this daemon serves at most {} event streams at once (--max-streams)",
                    self.limits.max_streams()
                ),
            ));
        }
        if of_run >= self.limits.max_streams_per_run() {
            return Err(too_many(
                "max_streams_per_run",
                self.limits.max_streams_per_run(),
                format!(
                    "this daemon serves at most {} event streams of one run at once (--max-streams-per-run)",
                    self.limits.max_streams_per_run()
                ),
            )
            .with("run_id", run));
        }
        open.total += 1;
        *open.per_run.entry(run.to_owned()).or_insert(0) += 1;
        Ok(StreamSlot {
            caps: Arc::clone(self),
            run: run.to_owned(),
        })
    }
}

fn too_many(bound: &'static str, max: usize, detail: String) -> Problem {
    Problem::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "too-many-streams",
        "Too many event streams",
        format!("{detail}; retry after {RETRY_AFTER_SECS} s"),
    )
    .with("bound", bound)
    .with(bound, max)
}

/// One stream's slot, freed on drop.
#[derive(Debug)]
pub(super) struct StreamSlot {
    caps: Arc<StreamCaps>,
    run: String,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut open = super::lock(&self.caps.open);
        open.total = open.total.saturating_sub(1);
        if let Some(n) = open.per_run.get_mut(&self.run) {
            *n -= 1;
            if *n == 0 {
                open.per_run.remove(&self.run);
            }
        }
    }
}

/// The answer to a stream refused at a cap: the problem, with
/// `Retry-After`.
pub(super) fn refusal(problem: Problem) -> Response {
    let mut response = problem.into_response();
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
    response
}

/// `response` with its body holding `slot` until the body ends or is
/// dropped.
pub(super) fn held(slot: StreamSlot, response: Response) -> Response {
    let (parts, body) = response.into_parts();
    let held = body.into_data_stream().map(move |chunk| {
        let _held = &slot;
        chunk
    });
    Response::from_parts(parts, Body::from_stream(held))
}

/// The route layer of the stream routes: takes a slot for the run in the
/// path, or answers 503; the response body holds the slot.
pub async fn limit_streams(
    State(caps): State<Arc<StreamCaps>>,
    Path(run): Path<String>,
    request: Request,
    next: Next,
) -> Response {
    match caps.acquire(&run) {
        Ok(slot) => held(slot, next.run(request).await),
        Err(problem) => refusal(problem),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(total: usize, per_run: usize) -> Arc<StreamCaps> {
        let config = crate::limits::StreamConfig {
            max_streams: total,
            max_streams_per_run: per_run,
        };
        StreamCaps::new(StreamLimits::from_config(&config).unwrap())
    }

    #[test]
    fn caps_per_run_and_in_total_and_frees_on_drop() {
        let c = caps(3, 2);
        let a1 = c.acquire("a").unwrap();
        let _a2 = c.acquire("a").unwrap();
        let e = c.acquire("a").unwrap_err();
        assert_eq!(e.to_json()["bound"], "max_streams_per_run");
        let _b1 = c.acquire("b").unwrap();
        let e = c.acquire("c").unwrap_err();
        assert_eq!(e.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(e.to_json()["bound"], "max_streams");
        drop(a1);
        assert!(c.acquire("a").is_ok());
        assert!(crate::lock(&c.open).per_run.contains_key("b"));
    }
}
