//! `GET /v1/runs/{id}/events`: a run's history as an SSE stream, or a
//! page of JSON Lines with `format=jsonl`.
//!
//! One history: a stream is the engine's [`RunFollower`]
//! (`Engine::subscribe_with`, the journal as the engine's history): a
//! prefix the live log no longer retains is read from the journal first,
//! then the stream joins the log right after the last event it sent, no
//! gap and no duplicate (an evicted event not yet durable is waited for);
//! a run that is not live is served from the journal alone. This module
//! keeps the HTTP side: the query, the framing, the problems. With `--nats`, a run that is neither live nor stored
//! here is streamed from JetStream ([`RemoteSubscription`]: history, then
//! live, no gap, no duplicate), in the same framing.
//!
//! Durability: a stream (and the live tail of a JSON Lines page) follows
//! the log with [`Durability::Durable`] by default: a client is sent an
//! event only once the required observers (the journal) acknowledged it,
//! so no event it holds can be taken back by a crash, and its cursor is
//! valid on the restarted daemon. `?durability=committed` opts out (events
//! as soon as they are committed). The journal's lines are durable by
//! definition, so a run served from the journal is the same either way.

use super::Daemon;
use super::problem::Problem;
use axum::body::{Body, Bytes};
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::{Stream, StreamExt, TryStreamExt};
use keel_engine::{FollowError, RunFollower, TreeCursor};
use keel_eventlog::{Durability, Event, SubscribeError, SubscriptionBounds, SubscriptionError};
use keel_message::RunId;
use keel_observers::{
    JetStreamHandle, PAGE_BYTES, RemoteSubscribeError, RemoteSubscription, RemoteSubscriptionError,
    is_last_page,
};
use serde_json::json;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

/// Per-connection subscription bounds: 4,096 undelivered events or
/// 8 MiB, whichever is reached first; durable events only (the default
/// of every stream the daemon serves from a live log): the engine's
/// [`keel_engine::FOLLOW_BOUNDS`].
pub const DEFAULT_BOUNDS: SubscriptionBounds = keel_engine::FOLLOW_BOUNDS;
/// Smallest `max_bytes` a client may ask for.
const MIN_BYTES: usize = 4096;
/// Default and largest `limit` of a JSON Lines page.
const DEFAULT_LIMIT: usize = 1000;
const MAX_LIMIT: usize = 10_000;
/// Interval of the SSE keep-alive comments.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// The `retry:` hint every stream opens with: how long a browser waits
/// before reconnecting after a drop.
pub const RETRY_HINT: Duration = Duration::from_millis(1000);

/// The query string.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct EventsQuery {
    /// A seq, or with `children=true` a tree cursor: read as text here.
    after: Option<String>,
    children: Option<String>,
    format: Option<String>,
    limit: Option<usize>,
    max_events: Option<usize>,
    max_bytes: Option<usize>,
    named: Option<String>,
    durability: Option<String>,
}

fn bad_request(detail: String) -> Problem {
    Problem::new(
        StatusCode::BAD_REQUEST,
        "invalid-request",
        "Invalid request",
        detail,
    )
}

/// Where a request starts, and what named it.
struct StartCursor {
    /// The run's seq (with `children=true`, the root's).
    seq: u64,
    /// With `children=true`, the combined cursor.
    tree: Option<TreeCursor>,
    source: CursorSource,
}

/// Reads `after` and `Last-Event-ID`: sequence numbers, or with
/// `children` tree cursors. Both are checked when both are sent (as the
/// query's number always was); the header wins.
fn start_cursor(
    after: Option<&str>,
    headers: &HeaderMap,
    children: bool,
) -> Result<StartCursor, Problem> {
    let read = |text: &str, source| -> Result<StartCursor, Problem> {
        if children {
            let tree = tree_cursor(text, source)?;
            Ok(StartCursor {
                seq: tree.root_seq(),
                tree: Some(tree),
                source,
            })
        } else {
            Ok(StartCursor {
                seq: seq_cursor(text, source)?,
                tree: None,
                source,
            })
        }
    };
    let after = after
        .map(|text| read(text, CursorSource::After))
        .transpose()?;
    let header = match headers.get("last-event-id") {
        Some(v) => {
            let text = v
                .to_str()
                .map_err(|_| bad_request("Last-Event-ID is not a sequence number".to_owned()))?;
            Some(read(text.trim(), CursorSource::LastEventId)?)
        }
        None => None,
    };
    Ok(header.or(after).unwrap_or(StartCursor {
        seq: 0,
        tree: children.then(|| TreeCursor::new(0)),
        source: CursorSource::Start,
    }))
}

/// A run cursor: a sequence number (as `u64::from_str` reads it, what the
/// query's number always was).
fn seq_cursor(text: &str, source: CursorSource) -> Result<u64, Problem> {
    text.parse::<u64>()
        .map_err(|_| bad_request(format!("{} is not a sequence number", source.name())))
}

/// A combined cursor of `children=true`: refused naming the header or
/// parameter, the part and the rule, never the text.
fn tree_cursor(text: &str, source: CursorSource) -> Result<TreeCursor, Problem> {
    TreeCursor::parse(text).map_err(|e| {
        bad_request(format!("{} is not a tree cursor: {e}", source.name()))
            .with("parameter", source.name())
            .with("rule", e.rule())
    })
}

/// How the events are delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventsFormat {
    /// `text/event-stream`, following the run (the default).
    Sse,
    /// One page of JSON Lines (`?format=jsonl`).
    Jsonl,
}

/// How run events are framed on an SSE stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Naming {
    /// `event: <kind>` (the default): a client listens per kind.
    Kind,
    /// No `event:` line (`?named=false`): every run event arrives as the
    /// default `message` type, so a generic client (`onmessage`) follows
    /// them all; the kind is in the data. `error` and `shutdown`, which
    /// are not run events, keep their names.
    Unnamed,
}

/// Where a request's cursor came from: what a refusal of it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CursorSource {
    /// No cursor: from the start.
    Start,
    /// The `Last-Event-ID` header (it wins over `after`).
    LastEventId,
    /// The `after` query parameter.
    After,
}

impl CursorSource {
    /// The header or parameter's name (`Last-Event-ID`, `after`).
    pub fn name(self) -> &'static str {
        match self {
            CursorSource::Start => "the start",
            CursorSource::LastEventId => "Last-Event-ID",
            CursorSource::After => "after",
        }
    }
}

/// A checked `GET /v1/runs/{id}/events` request: where to start, how to
/// deliver, and the bounds, clamped to what the daemon allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventsRequest {
    cursor: u64,
    /// With `children=true`: the combined cursor (its root seq is `cursor`).
    tree: Option<TreeCursor>,
    cursor_source: CursorSource,
    format: EventsFormat,
    naming: Naming,
    limit: Option<usize>,
    bounds: SubscriptionBounds,
}

impl EventsRequest {
    /// Reads the query string of `uri` (`after`, `format`, `limit`,
    /// `max_events`, `max_bytes`, `named`, `durability`, `children`;
    /// anything else is refused) and the
    /// `Last-Event-ID` header, which wins over `?after=` (a reconnecting
    /// EventSource sends it and keeps the URL's `after`). With
    /// `children=true` both are combined cursors ([`TreeCursor`]) and the
    /// format is SSE. A 400 problem names the parameter, never its value
    /// (a refused tree cursor: the parameter, the entry and the rule).
    pub fn parse(uri: &Uri, headers: &HeaderMap) -> Result<EventsRequest, Problem> {
        let Query(query) = Query::<EventsQuery>::try_from_uri(uri)
            .map_err(|e| bad_request(keel_message::decode::elide_values(&e.body_text())))?;
        let children = match query.children.as_deref() {
            None | Some("false") => false,
            Some("true") => true,
            Some(_) => return Err(bad_request("children is not one of true, false".to_owned())),
        };
        let start = start_cursor(query.after.as_deref(), headers, children)?;
        let format = match query.format.as_deref() {
            None | Some("sse") => EventsFormat::Sse,
            Some("jsonl") => EventsFormat::Jsonl,
            Some(_) => return Err(bad_request("format is not one of sse, jsonl".to_owned())),
        };
        // Checked after the query parsed, as `format` is, so that which
        // parameter a refusal names does not depend on another's value.
        let naming = match query.named.as_deref() {
            None | Some("true") => Naming::Kind,
            Some("false") => Naming::Unnamed,
            Some(_) => return Err(bad_request("named is not one of true, false".to_owned())),
        };
        let durability = match query.durability.as_deref() {
            None | Some("durable") => Durability::Durable,
            Some("committed") => Durability::Committed,
            Some(_) => {
                return Err(bad_request(
                    "durability is not one of durable, committed".to_owned(),
                ));
            }
        };
        if start.tree.is_some() && format == EventsFormat::Jsonl {
            return Err(bad_request(
                "children=true is served as sse only, not jsonl".to_owned(),
            ));
        }
        Ok(EventsRequest {
            cursor: start.seq,
            tree: start.tree,
            cursor_source: start.source,
            format,
            naming,
            limit: query.limit,
            bounds: SubscriptionBounds {
                max_events: query
                    .max_events
                    .unwrap_or(DEFAULT_BOUNDS.max_events)
                    .clamp(1, DEFAULT_BOUNDS.max_events),
                max_bytes: query
                    .max_bytes
                    .unwrap_or(DEFAULT_BOUNDS.max_bytes)
                    .clamp(MIN_BYTES, DEFAULT_BOUNDS.max_bytes),
                durability,
            },
        })
    }

    /// The last sequence the client has: events after it are sent (with
    /// `children=true`, the root's seq of [`tree_cursor`](Self::tree_cursor)).
    pub fn cursor(&self) -> u64 {
        self.cursor
    }

    /// With `children=true` (the run and its sub-runs, merged): the
    /// combined cursor the client sent, or the start.
    pub fn tree_cursor(&self) -> Option<&TreeCursor> {
        self.tree.as_ref()
    }

    /// Where the cursor came from (what a refusal of it names).
    pub fn cursor_source(&self) -> CursorSource {
        self.cursor_source
    }

    /// SSE or a JSON Lines page.
    pub fn format(&self) -> EventsFormat {
        self.format
    }

    /// How SSE frames name their events.
    pub fn naming(&self) -> Naming {
        self.naming
    }

    /// The page size asked for (JSON Lines; clamped when the page is read).
    pub fn limit(&self) -> Option<usize> {
        self.limit
    }

    /// The subscription bounds of an SSE stream, clamped.
    pub fn bounds(&self) -> SubscriptionBounds {
        self.bounds
    }

    /// Which events a live log serves: durable ones (the default) or
    /// every committed one (`?durability=committed`).
    pub fn durability(&self) -> Durability {
        self.bounds.durability
    }
}

/// The handler of one run's events. The daemon's [`router`](crate::router)
/// serves `children=true` (the run and its sub-runs) on the same route;
/// this handler alone refuses it.
pub async fn events(
    State(daemon): State<Arc<Daemon>>,
    UrlPath(id): UrlPath<String>,
    uri: Uri,
    headers: HeaderMap,
) -> Result<Response, Problem> {
    let request = EventsRequest::parse(&uri, &headers)?;
    if request.tree_cursor().is_some() {
        return Err(bad_request(
            "children=true is served by the daemon's router, not this handler".to_owned(),
        ));
    }
    one_run(daemon, id, &request).await
}

/// One run's events, as `request` asks (SSE or a JSON Lines page).
pub(crate) async fn one_run(
    daemon: Arc<Daemon>,
    id: String,
    request: &EventsRequest,
) -> Result<Response, Problem> {
    match request.format {
        EventsFormat::Sse => stream(daemon, id, request).await,
        EventsFormat::Jsonl => page(daemon, id, request).await,
    }
}

/// `204 No Content`: the client already has the run's terminal. By the
/// HTML standard an EventSource answered 204 stops reconnecting.
pub(crate) fn nothing_follows() -> Response {
    StatusCode::NO_CONTENT.into_response()
}

/// Where a stream of run `id` after the request's cursor begins.
pub(crate) enum Opened {
    /// The client has the terminal: `204`.
    Nothing,
    /// The engine's follower: the journal, then the live log.
    Local(Box<RunFollower>),
    /// Neither live nor stored here: the JetStream stream (`--nats`).
    Remote,
}

async fn stream(
    daemon: Arc<Daemon>,
    id: String,
    request: &EventsRequest,
) -> Result<Response, Problem> {
    match open(&daemon, &id, request).await? {
        Opened::Nothing => Ok(nothing_follows()),
        Opened::Remote => match daemon.nats.as_ref() {
            Some(handle) => remote(&daemon, handle, id, request).await,
            None => Err(Problem::unknown_run(&id)),
        },
        Opened::Local(follower) => {
            let frame = keel_framer(request.naming);
            Ok(sse_response(follow(daemon, *follower, frame)))
        }
    }
}

/// Checks the cursor against run `id` (live, else stored) and says where
/// its stream begins (`Engine::subscribe_with`: the journal, then the live
/// log); the cursor and unknown-run problems as `events`.
pub(crate) async fn open(
    daemon: &Arc<Daemon>,
    id: &str,
    request: &EventsRequest,
) -> Result<Opened, Problem> {
    let unknown = || {
        if daemon.nats.is_some() {
            Ok(Opened::Remote)
        } else {
            Err(Problem::unknown_run(id))
        }
    };
    // An id that does not parse names no run here.
    let Ok(run_id) = RunId::parse(id) else {
        return unknown();
    };
    let opened = daemon
        .engine
        .subscribe_with(&run_id, request.cursor, request.bounds)
        .await;
    match opened {
        Ok(follower) if follower.is_finished() => Ok(Opened::Nothing),
        Ok(follower) => Ok(Opened::Local(Box::new(follower))),
        Err(FollowError::UnknownRun { .. }) => unknown(),
        Err(FollowError::CursorAhead { requested, latest }) => {
            Err(Problem::cursor_ahead(requested, latest))
        }
        Err(FollowError::CursorExpired {
            requested,
            earliest,
            latest,
        }) => Err(Problem::cursor_expired(requested, earliest, latest)),
        Err(e) => Err(Problem::journal(e)),
    }
}

/// The SSE response: the `retry:` hint first, then `events`, with
/// keep-alive comments between.
pub(crate) fn sse_response(
    events: impl Stream<Item = Result<SseEvent, Infallible>> + Send + 'static,
) -> Response {
    let hint = futures_util::stream::once(async { Ok(SseEvent::default().retry(RETRY_HINT)) });
    Sse::new(futures_util::StreamExt::chain(hint, events))
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE).text("keep-alive"))
        .into_response()
}

/// [`sse_response`] with `head` (SSE text a caller wrote itself, complete
/// messages by its end) sent after the `retry:` hint and before `events`:
/// for a message too large to hold, written a piece at a time (the AG-UI
/// prelude's snapshot). An error from `head` ends the response there.
pub(crate) fn sse_response_after(
    head: impl Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static,
    events: impl Stream<Item = Result<SseEvent, Infallible>> + Send + 'static,
) -> Response {
    let hint = futures_util::stream::once(async {
        Ok::<_, std::io::Error>(Bytes::from(format!(
            "retry: {}\n\n",
            RETRY_HINT.as_millis()
        )))
    });
    let (parts, tail) = Sse::new(events)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE).text("keep-alive"))
        .into_response()
        .into_parts();
    let tail = tail.into_data_stream().map_err(std::io::Error::other);
    Response::from_parts(parts, Body::from_stream(hint.chain(head).chain(tail)))
}

fn sse_of(event: &Event, naming: Naming) -> SseEvent {
    let frame = SseEvent::default().id(event.seq().to_string());
    let frame = match naming {
        Naming::Kind => frame.event(event.kind().name()),
        Naming::Unnamed => frame,
    };
    frame.data(super::sse_data::escape_separators(event.line()))
}

/// How a stream turns one run event into SSE messages; an `Err` is the
/// stream's last message (it closes after it).
pub(crate) type Framer = Box<dyn FnMut(&Event) -> Result<Vec<SseEvent>, SseEvent> + Send>;

fn keel_framer(naming: Naming) -> Framer {
    Box::new(move |event| Ok(vec![sse_of(event, naming)]))
}

pub(crate) fn error_event(problem: &Problem) -> SseEvent {
    SseEvent::default()
        .event("error")
        .data(super::sse_data::escape_separators(
            &problem.to_json().to_string(),
        ))
}

fn shutdown_event(last: u64) -> SseEvent {
    SseEvent::default().event("shutdown").data(
        json!({
            "type": "urn:keel:problem:shutting-down",
            "title": "The daemon is shutting down",
            "status": 503,
            "detail": "the stream is closed; resume after last_delivered from this or another daemon on the same journal",
            "last_delivered": last,
            "recovery_cursor": last,
        })
        .to_string(),
    )
}

fn gap_problem(last: u64, found: u64) -> Problem {
    Problem::new(
        StatusCode::GONE,
        "cursor-expired",
        "Events missing",
        format!("the event after {last} is neither retained nor stored (next available {found})"),
    )
    .with("last_delivered", last)
    .with("earliest", found)
    .with("recovery_cursor", found.saturating_sub(1))
}

/// A stored line as the next event of run `id` after `last`: it decodes,
/// follows `last` and names the run; else the problem to end with.
pub(crate) fn checked(line: &str, id: &str, last: u64) -> Result<Event, Problem> {
    let event = Event::decode(line)
        .map_err(|e| Problem::journal(format!("a stored line does not decode: {e}")))?;
    if event.seq() != last + 1 {
        return Err(gap_problem(last, event.seq()));
    }
    if event.run_id().as_str() != id {
        return Err(Problem::journal(format!(
            "stored seq {} belongs to another run",
            event.seq()
        )));
    }
    Ok(event)
}

/// The SSE messages of a follower, each run event framed by `frame`: the
/// journal, then the live log, no gap, no duplicate (the engine's
/// [`RunFollower`]); `shutdown` when the daemon stops.
pub(crate) fn follow(
    daemon: Arc<Daemon>,
    mut follower: RunFollower,
    mut frame: Framer,
) -> impl Stream<Item = Result<SseEvent, Infallible>> + Send + 'static {
    async_stream::stream! {
        while let Some(next) = follower.next().await {
            match next {
                Ok(event) => match frame(&event) {
                    Ok(send) => {
                        for message in send {
                            yield Ok(message);
                        }
                    }
                    Err(last) => {
                        yield Ok(last);
                        return;
                    }
                },
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

/// The last message of a stream whose follower ended with `e` after
/// `last`: a slow consumer is 429, a log shut down is `shutdown`, a
/// missing event is the gap problem, anything else a journal problem.
fn end_event(e: &FollowError, last: u64) -> SseEvent {
    match end_problem(e) {
        Some(problem) => error_event(&problem),
        None => shutdown_event(last),
    }
}

/// The problem a stream whose follower ended with `e` ends with; `None`
/// when the daemon is shutting down (the log was shut down).
pub(crate) fn end_problem(e: &FollowError) -> Option<Problem> {
    match e {
        FollowError::Live(SubscriptionError::SlowConsumer {
            last_delivered,
            recovery_cursor,
            lag_events,
            lag_bytes,
            max_events,
            max_bytes,
        }) => Some(
            Problem::new(
                StatusCode::TOO_MANY_REQUESTS,
                "slow-consumer",
                "Slow consumer",
                format!("the client fell {lag_events} events / {lag_bytes} bytes behind (bounds {max_events} / {max_bytes}); resume after {recovery_cursor}"),
            )
            .with("last_delivered", *last_delivered)
            .with("recovery_cursor", *recovery_cursor)
            .with("lag_events", *lag_events)
            .with("lag_bytes", *lag_bytes)
            .with("max_events", *max_events)
            .with("max_bytes", *max_bytes),
        ),
        FollowError::Live(SubscriptionError::Ended { .. }) => None,
        FollowError::Gap {
            last_delivered,
            next_available,
        } => Some(gap_problem(*last_delivered, *next_available)),
        other => Some(Problem::journal(other)),
    }
}

/// The latest seq of run `id`: stored, or committed in its live log (for
/// the cursor check), and the latest a page may serve under `durability`
/// (`Keel-Latest`: a live log's durable watermark for a durable page).
fn latest_of(
    id: &str,
    stored: Option<u64>,
    live: Option<&keel_engine::LiveRun>,
    durability: Durability,
) -> Result<(u64, u64), Problem> {
    let stats = live.map(|r| r.log().stats());
    if stored.is_none() && stats.is_none() {
        return Err(Problem::unknown_run(id));
    }
    let stored = stored.unwrap_or(0);
    let committed = stats.as_ref().map_or(0, |s| s.last_seq);
    let visible = match durability {
        Durability::Durable => stats.as_ref().map_or(0, |s| s.durable_seq),
        Durability::Committed => committed,
    };
    Ok((stored.max(committed), stored.max(visible)))
}

/// Checks stored lines as the SSE path checks them: each decodes
/// (canonical, lifecycle-valid kinds), belongs to run `id`, and follows
/// the previous one; a page never carries a line it would not stream.
/// Returns the last seq.
fn check_page(lines: &[String], id: &str, cursor: u64, latest: u64) -> Result<u64, Problem> {
    let mut last = cursor;
    for line in lines {
        let event = Event::decode(line)
            .map_err(|e| Problem::journal(format!("a stored line does not decode: {e}")))?;
        if event.seq() != last + 1 {
            return Err(if last == cursor {
                Problem::cursor_expired(cursor, event.seq(), latest)
            } else {
                gap_problem(last, event.seq())
            });
        }
        if event.run_id().as_str() != id {
            return Err(Problem::journal(format!(
                "stored seq {} belongs to another run",
                event.seq()
            )));
        }
        last = event.seq();
    }
    Ok(last)
}

async fn page(
    daemon: Arc<Daemon>,
    id: String,
    request: &EventsRequest,
) -> Result<Response, Problem> {
    let (cursor, durability) = (request.cursor, request.durability());
    let limit = request.limit.unwrap_or(DEFAULT_LIMIT).clamp(1, MAX_LIMIT);
    let live = daemon.engine.live_run(&id);
    let lookup = id.clone();
    let stored = daemon.read(move |r| r.run_status(&lookup)).await?;
    let (latest, visible) = latest_of(&id, stored.map(|s| s.last_seq), live.as_ref(), durability)?;
    if cursor > latest {
        return Err(Problem::cursor_ahead(cursor, latest));
    }
    let lookup = id.clone();
    let mut lines = daemon
        .read(move |r| r.events_after(&lookup, cursor, limit))
        .await?;
    let mut last = check_page(&lines, &id, cursor, latest)?;
    // Only after the journal's last page: a page cut by its bounds is
    // followed by more of the journal, not by the log.
    if let Some(run) = live.as_ref().filter(|_| is_last_page(&lines, limit)) {
        // Events committed but not yet journaled; a durable page stops at
        // the watermark, and at the page's byte budget.
        let tail = run.log().retained_after(last);
        if let Some(e) = tail.first().filter(|e| e.seq() != last + 1) {
            return Err(Problem::cursor_expired(cursor, e.seq(), latest));
        }
        let mut bytes: usize = lines.iter().map(String::len).sum();
        for event in tail
            .iter()
            .take_while(|e| e.seq() <= visible)
            .take(limit - lines.len())
        {
            if bytes >= PAGE_BYTES {
                break;
            }
            bytes += event.line().len();
            lines.push(event.line().to_owned());
            last = event.seq();
        }
    }
    Ok(ndjson(&lines, last, visible.max(last)))
}

/// A JSON Lines page with its `Keel-Next-Cursor` and `Keel-Latest`.
fn ndjson(lines: &[String], next: u64, latest: u64) -> Response {
    let mut body = String::with_capacity(lines.iter().map(|l| l.len() + 1).sum());
    for line in lines {
        body.push_str(line);
        body.push('\n');
    }
    let mut response = (StatusCode::OK, body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    if let Ok(v) = HeaderValue::from_str(&next.to_string()) {
        headers.insert("keel-next-cursor", v);
    }
    if let Ok(v) = HeaderValue::from_str(&latest.to_string()) {
        headers.insert("keel-latest", v);
    }
    response
}

fn nats_problem(detail: impl std::fmt::Display) -> Problem {
    Problem::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "jetstream",
        "JetStream could not be read",
        detail.to_string(),
    )
}

/// The SSE stream of a run this daemon does not have, from JetStream.
async fn remote(
    daemon: &Arc<Daemon>,
    handle: &JetStreamHandle,
    id: String,
    request: &EventsRequest,
) -> Result<Response, Problem> {
    let cursor = request.cursor;
    let sub = match RemoteSubscription::open(handle, &id, cursor).await {
        Ok(sub) => sub,
        Err(RemoteSubscribeError::UnknownRun { .. }) => return Err(Problem::unknown_run(&id)),
        Err(RemoteSubscribeError::Cursor(SubscribeError::CursorAhead { requested, latest })) => {
            return Err(Problem::cursor_ahead(requested, latest));
        }
        Err(RemoteSubscribeError::Cursor(SubscribeError::CursorExpired {
            requested,
            earliest,
            latest,
            ..
        })) => return Err(Problem::cursor_expired(requested, earliest, latest)),
        Err(e) => return Err(nats_problem(e)),
    };
    if cursor > 0 && ended_at(handle, &id, cursor).await? {
        // The client has the terminal: nothing follows (a subscription at
        // the run's last seq would wait for events that never come).
        return Ok(nothing_follows());
    }
    Ok(sse_response(remote_stream(
        Arc::clone(daemon),
        sub,
        request.naming,
    )))
}

fn remote_stream(
    daemon: Arc<Daemon>,
    mut sub: RemoteSubscription,
    naming: Naming,
) -> impl Stream<Item = Result<SseEvent, Infallible>> + Send + 'static {
    async_stream::stream! {
        loop {
            match sub.next().await {
                Some(Ok(event)) => yield Ok(sse_of(&event, naming)),
                Some(Err(RemoteSubscriptionError::Gap { expected, found, .. })) => {
                    yield Ok(error_event(&gap_problem(expected.saturating_sub(1), found)));
                    return;
                }
                Some(Err(RemoteSubscriptionError::Nats { detail, recovery_cursor })) => {
                    let problem = nats_problem(format!("{detail}; resume after {recovery_cursor}"))
                        .with("last_delivered", recovery_cursor)
                        .with("recovery_cursor", recovery_cursor);
                    yield Ok(error_event(&problem));
                    return;
                }
                Some(Err(e)) => {
                    yield Ok(error_event(&nats_problem(e)));
                    return;
                }
                None => break,
            }
        }
        if daemon.shutting_down() {
            yield Ok(shutdown_event(sub.cursor()));
        }
    }
}

/// Whether the run's last event in JetStream is its terminal, at `cursor`.
async fn ended_at(handle: &JetStreamHandle, id: &str, cursor: u64) -> Result<bool, Problem> {
    let stream = handle
        .context()
        .get_stream(handle.config().stream.as_str())
        .await
        .map_err(nats_problem)?;
    let last = stream
        .get_last_raw_message_by_subject(&handle.config().subject(id))
        .await
        .map_err(nats_problem)?;
    let Some(event) = std::str::from_utf8(&last.payload)
        .ok()
        .and_then(|t| Event::decode(t).ok())
    else {
        return Ok(false);
    };
    Ok(event.seq() == cursor && event.kind().is_run_terminal())
}
