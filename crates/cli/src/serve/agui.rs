//! `GET /v1/runs/{id}/agui`: a run as AG-UI events over SSE.
//!
//! The same history, cursors, bounds, problems, `retry:` hint and `204`
//! at the terminal as `GET /v1/runs/{id}/events` (`events::open` and
//! `events::follow`); only the framing differs: each run event goes
//! through an [`AguiMapper`] and becomes one or more SSE messages whose
//! `data:` is an AG-UI event (with `rawEvent` = the Keel line).
//!
//! Ids: every message carries `id:`, the cursor it completes. The last
//! AG-UI event of a Keel event `seq` carries `seq`; the ones before it
//! carry `seq - 1`, so a client that lost the connection inside a group
//! resumes (`Last-Event-ID`) before the whole group and gets it again,
//! after a prelude that matches that cursor: resume is exact. A join at a
//! cursor > 0 first gets [`agui::prelude`] (built from the run's events
//! up to the cursor), all with `id: <cursor>`. AG-UI is served from this
//! daemon's log and journal only (not from JetStream).

use super::Daemon;
use super::events::{self, EventsFormat, EventsRequest, Framer, Opened};
use super::problem::Problem;
use crate::views::agui::{self, AguiError, AguiMapper};
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use axum::response::sse::Event as SseEvent;
use futures_util::StreamExt;
use keel_eventlog::Event;
use serde_json::Value;
use std::convert::Infallible;
use std::sync::Arc;

/// Journal lines read per query while building a prelude.
const PAGE: usize = 512;

fn mapping_problem(e: &AguiError) -> Problem {
    Problem::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "agui-mapping",
        "The run does not map to AG-UI",
        e.to_string(),
    )
}

fn frame(cursor: u64, event: &Value) -> SseEvent {
    SseEvent::default()
        .id(cursor.to_string())
        .data(event.to_string())
}

/// The SSE messages of one Keel event's AG-UI events: `seq - 1` on all
/// but the last, which carries `seq`.
fn group(seq: u64, mapped: &[Value]) -> Vec<SseEvent> {
    let n = mapped.len();
    mapped
        .iter()
        .enumerate()
        .map(|(i, e)| frame(if i + 1 == n { seq } else { seq - 1 }, e))
        .collect()
}

fn framer(mut mapper: AguiMapper) -> Framer {
    Box::new(move |event: &Event| match mapper.map(event) {
        Ok(mapped) => Ok(group(event.seq(), &mapped)),
        Err(e) => Err(events::error_event(&mapping_problem(&e))),
    })
}

/// The handler.
pub async fn agui_events(
    State(daemon): State<Arc<Daemon>>,
    UrlPath(id): UrlPath<String>,
    uri: Uri,
    headers: HeaderMap,
) -> Result<Response, Problem> {
    let request = EventsRequest::parse(&uri, &headers)?;
    if request.format() != EventsFormat::Sse {
        return Err(Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid-request",
            "Invalid request",
            "format: the AG-UI view is served as sse only",
        ));
    }
    let follower = match events::open(&daemon, &id, &request).await? {
        Opened::Nothing => return Ok(events::nothing_follows()),
        Opened::Remote => return Err(Problem::unknown_run(&id)),
        Opened::Local(follower) => *follower,
    };
    let cursor = request.cursor();
    let (mapper, prelude) = if cursor == 0 {
        (AguiMapper::new(), Vec::new())
    } else {
        let upto = events_upto(&daemon, &id, cursor).await?;
        let inherited = inherited_history(&daemon, &upto).await?;
        match agui::prelude(&upto, inherited) {
            Ok(p) => p,
            Err(AguiError::Ended) => return Ok(events::nothing_follows()),
            Err(e) => return Err(mapping_problem(&e)),
        }
    };
    let head: Vec<Result<SseEvent, Infallible>> =
        prelude.iter().map(|e| Ok(frame(cursor, e))).collect();
    let tail = events::follow(daemon, follower, framer(mapper));
    Ok(events::sse_response(
        futures_util::stream::iter(head).chain(tail),
    ))
}

/// The history a continued run inherits (its seq 2 is a `run.input`
/// reference), rebuilt from the journal through the chain of references;
/// empty for a run that inherits nothing.
async fn inherited_history(
    daemon: &Arc<Daemon>,
    events: &[Event],
) -> Result<Vec<keel_message::Message>, Problem> {
    let parent = events.get(1).and_then(|e| match e.payload() {
        Ok(keel_eventlog::Payload::RunInputReference(r)) => Some(r.history.run_id),
        _ => None,
    });
    let Some(parent) = parent else {
        return Ok(Vec::new());
    };
    let reader = Arc::clone(&daemon.reader);
    let rebuilt = tokio::task::spawn_blocking(move || {
        crate::conversation::rebuild(&reader, &parent, &keel_message::Limits::default())
    })
    .await
    .map_err(Problem::journal)?;
    match rebuilt {
        Ok(chain) => Ok(chain.history),
        Err(e) => Err(Problem::new(
            StatusCode::CONFLICT,
            "history-unresolved",
            "The run's inherited history does not rebuild",
            e.to_string(),
        )),
    }
}

/// The run's events from seq 1 through `cursor`: the journal, then what
/// the live log holds and the journal does not have yet. Bounded by the
/// cursor (a prelude needs the history up to it).
async fn events_upto(daemon: &Arc<Daemon>, id: &str, cursor: u64) -> Result<Vec<Event>, Problem> {
    let mut events = Vec::new();
    let mut last = 0;
    'pages: while last < cursor {
        let (lookup, after) = (id.to_owned(), last);
        let page = daemon
            .read(move |r| r.events_after(&lookup, after, PAGE))
            .await?;
        if page.is_empty() {
            break;
        }
        for line in &page {
            let event = events::checked(line, id, last)?;
            if event.seq() > cursor {
                break 'pages;
            }
            last = event.seq();
            events.push(event);
        }
    }
    if last < cursor
        && let Some(run) = daemon.engine.live_run(id)
    {
        for event in run.log().retained_after(last) {
            if event.seq() > cursor || event.seq() != last + 1 {
                break;
            }
            last = event.seq();
            events.push(Event::clone(&event));
        }
    }
    if last < cursor {
        return Err(Problem::cursor_expired(cursor, last + 1, cursor));
    }
    Ok(events)
}
