//! `GET /v1/runs/{id}/events?children=true`: a run and every sub-run it
//! starts, merged into one SSE stream by the engine's [`TreeFollower`].
//!
//! Each message is an event framed as on the one-run stream (its line
//! carries its own `run_id`); its `id:` is the combined cursor
//! ([`TreeCursor`]: `<root_seq>` then `,<run_id>:<seq>` per run whose
//! terminal is not delivered yet), which `Last-Event-ID` or `after` take
//! back: the stream resumes right after that event, nothing repeated,
//! nothing lost. A child's events come after the `tool.sub_run` naming
//! it, and its run terminal before its parent's terminal of that call.
//!
//! A cursor is the client's text: a run it lists must be the root's
//! descendant and followable from its seq, else 400 naming the header or
//! parameter, the entry and the rule (410 when the events after a listed
//! seq are gone). The tree is served from this daemon's engine and
//! journal only (not from JetStream).

use super::Daemon;
use super::events::{
    CursorSource, EventsRequest, Naming, end_problem, error_event, nothing_follows, sse_response,
};
use super::problem::Problem;
use axum::http::StatusCode;
use axum::response::Response;
use axum::response::sse::Event as SseEvent;
use futures_util::Stream;
use keel_engine::{FollowError, TreeCursor, TreeEvent, TreeFollowError, TreeFollower};
use keel_message::RunId;
use serde_json::json;
use std::convert::Infallible;
use std::sync::Arc;

/// The stream of run `id`'s tree after `cursor`; `204` when the client has
/// every run's end.
pub(crate) async fn stream(
    daemon: Arc<Daemon>,
    id: &str,
    cursor: TreeCursor,
    request: &EventsRequest,
) -> Result<Response, Problem> {
    // An id that does not parse names no run here.
    let Ok(root) = RunId::parse(id) else {
        return Err(Problem::unknown_run(id));
    };
    match TreeFollower::open(&daemon.engine, root, cursor, request.bounds()).await {
        Ok(follower) if follower.is_finished() => Ok(nothing_follows()),
        Ok(follower) => Ok(sse_response(follow(daemon, follower, request.naming()))),
        Err(e) => Err(open_problem(id, &e, request.cursor_source())),
    }
}

/// Why a cursor can't be resumed, as a problem naming where it came from
/// (`parameter`: `Last-Event-ID` or `after`).
fn open_problem(id: &str, e: &TreeFollowError, source: CursorSource) -> Problem {
    let parameter = source.name();
    match e {
        TreeFollowError::Root(FollowError::UnknownRun { .. }) => Problem::unknown_run(id),
        TreeFollowError::Root(FollowError::CursorAhead { requested, latest }) => {
            Problem::cursor_ahead(*requested, *latest)
        }
        TreeFollowError::Root(FollowError::CursorExpired {
            requested,
            earliest,
            latest,
        }) => Problem::cursor_expired(*requested, *earliest, *latest),
        TreeFollowError::Entry {
            entry,
            source:
                FollowError::CursorExpired {
                    requested,
                    earliest,
                    latest,
                },
        } => Problem::cursor_expired(*requested, *earliest, *latest).with("entry", *entry),
        TreeFollowError::Entry {
            entry,
            source: FollowError::UnknownRun { .. },
        } => invalid_cursor(e, parameter, "follow.known_run", *entry),
        TreeFollowError::Entry {
            entry,
            source: FollowError::CursorAhead { .. },
        } => invalid_cursor(e, parameter, "follow.cursor_committed", *entry),
        TreeFollowError::RootListed { entry } => {
            invalid_cursor(e, parameter, "tree_cursor.root_listed", *entry)
        }
        TreeFollowError::NotDescendant { entry } => {
            invalid_cursor(e, parameter, "tree_cursor.descendant", *entry)
        }
        other => Problem::journal(other),
    }
    .with("parameter", parameter)
}

fn invalid_cursor(e: &TreeFollowError, parameter: &str, rule: &str, entry: usize) -> Problem {
    Problem::new(
        StatusCode::BAD_REQUEST,
        "invalid-request",
        "Invalid request",
        format!("{parameter}: {e}"),
    )
    .with("rule", rule)
    .with("entry", entry)
}

fn frame(event: &TreeEvent, naming: Naming) -> SseEvent {
    let message = SseEvent::default().id(event.cursor.to_string());
    let message = match naming {
        Naming::Kind => message.event(event.event.kind().name()),
        Naming::Unnamed => message,
    };
    message.data(super::sse_data::escape_separators(event.event.line()))
}

/// The SSE messages of a tree follower; `shutdown` when the daemon stops.
fn follow(
    daemon: Arc<Daemon>,
    mut follower: TreeFollower,
    naming: Naming,
) -> impl Stream<Item = Result<SseEvent, Infallible>> + Send + 'static {
    async_stream::stream! {
        while let Some(next) = follower.next().await {
            match next {
                Ok(event) => yield Ok(frame(&event, naming)),
                Err(e) => {
                    yield Ok(end_event(&e, follower.cursor()));
                    return;
                }
            }
        }
        if daemon.shutting_down() {
            yield Ok(shutdown_event(follower.cursor()));
        }
    }
}

/// The last message of a tree stream that ended with `e`: the one-run
/// problems (naming the run), the bound, or a journal problem; each with
/// the combined `cursor` to resume from.
fn end_event(e: &TreeFollowError, cursor: &TreeCursor) -> SseEvent {
    let problem = match e {
        TreeFollowError::Run { run_id, source } => match end_problem(source) {
            Some(problem) => problem.with("run_id", run_id.as_str()),
            None => return shutdown_event(cursor),
        },
        TreeFollowError::TooManyRuns { .. } => Problem::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "tree-too-large",
            "Too many runs at once",
            e.to_string(),
        )
        .with("rule", "tree.max_runs"),
        other => Problem::journal(other),
    };
    error_event(&problem.with("cursor", cursor.to_string()))
}

fn shutdown_event(cursor: &TreeCursor) -> SseEvent {
    SseEvent::default().event("shutdown").data(
        json!({
            "type": "urn:keel:problem:shutting-down",
            "title": "The daemon is shutting down",
            "status": 503,
            "detail": "the stream is closed; resume after cursor from this or another daemon on the same journal",
            "cursor": cursor.to_string(),
            "recovery_cursor": cursor.to_string(),
        })
        .to_string(),
    )
}
