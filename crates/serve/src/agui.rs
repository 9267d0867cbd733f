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
//! cursor > 0 first gets the prelude (`views::agui::prelude`), all with
//! `id: <cursor>`, built without holding the run: the run's events up to
//! the cursor are read a page at a time twice, first folded into the
//! mapper's state ([`PreludeFold`]: every refusal is a problem before a
//! byte is sent), then written as the snapshot's messages, one per
//! `data:` line of the one `MESSAGES_SNAPSHOT` message ([`SnapshotWriter`]).
//! AG-UI is served from this daemon's log and journal only (not from
//! JetStream).

use super::Daemon;
use super::events::{self, EventsFormat, EventsRequest, Framer, Opened};
use super::problem::Problem;
use axum::body::Bytes;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use axum::response::sse::Event as SseEvent;
use futures_util::Stream;
use keel_eventlog::Event;
use keel_observers::PAGE_BYTES;
use keel_views::agui::{
    AguiError, AguiMapper, Prelude, PreludeFold, SNAPSHOT_OPEN, SnapshotWriter, Stamped,
};
use std::sync::Arc;

/// Journal lines read per query while building a prelude (a page also
/// ends at [`PAGE_BYTES`]).
const PAGE: usize = 512;

fn mapping_problem(e: &AguiError) -> Problem {
    Problem::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "agui-mapping",
        "The run does not map to AG-UI",
        e.to_string(),
    )
}

pub(crate) fn frame(cursor: u64, event: &Stamped) -> SseEvent {
    SseEvent::default()
        .id(cursor.to_string())
        .data(super::sse_data::escape_separators(&event.to_json()))
}

/// The SSE messages of one Keel event's AG-UI events: `seq - 1` on all
/// but the last, which carries `seq`.
pub(crate) fn group(seq: u64, mapped: &[Stamped]) -> Vec<SseEvent> {
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
    if cursor == 0 {
        let tail = events::follow(daemon, follower, framer(AguiMapper::new()));
        return Ok(events::sse_response(tail));
    }
    let prelude = match fold_prelude(&daemon, &id, cursor).await? {
        Ok(prelude) => prelude,
        Err(AguiError::Ended) => return Ok(events::nothing_follows()),
        Err(e) => return Err(mapping_problem(&e)),
    };
    let inherited = inherited_history(&daemon, &prelude).await?;
    let head = PreludeText::of(&prelude, cursor);
    let snapshot = prelude.snapshot(inherited, daemon.message_limits().clone());
    let tail = events::follow(Arc::clone(&daemon), follower, framer(prelude.into_mapper()));
    let pages = UptoPages::new(daemon, id, cursor);
    Ok(events::sse_response_after(
        written_prelude(pages, head, snapshot),
        tail,
    ))
}

/// The history a continued run or a fork inherits (its seq 2 is a
/// `run.input` reference), rebuilt from the journal through the chain of
/// references (a fork's parent only through the fork's seq); empty for a
/// run that inherits nothing.
async fn inherited_history(
    daemon: &Arc<Daemon>,
    prelude: &Prelude,
) -> Result<Vec<keel_message::Message>, Problem> {
    let Some(parent) = prelude.inherits().cloned() else {
        return Ok(Vec::new());
    };
    let forked_at = prelude.forked_at();
    let reader = Arc::clone(&daemon.reader);
    let limits = daemon.message_limits().clone();
    let rebuilt = tokio::task::spawn_blocking(move || match forked_at {
        Some(seq) => keel_eventlog::history::rebuild_fork_point(
            &keel_observers::conversation::JournalStore(&reader),
            &parent,
            seq,
            &limits,
        )
        .map_err(|e| e.to_string()),
        None => keel_observers::conversation::rebuild(&reader, &parent, &limits)
            .map_err(|e| e.to_string()),
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

/// Events `1..=cursor` folded into the prelude's state, a page at a time
/// (the first pass: every refusal is found before a byte is sent).
async fn fold_prelude(
    daemon: &Arc<Daemon>,
    id: &str,
    cursor: u64,
) -> Result<Result<Prelude, AguiError>, Problem> {
    let mut pages = UptoPages::new(Arc::clone(daemon), id.to_owned(), cursor);
    let mut fold = PreludeFold::new();
    while let Some(page) = pages.next().await? {
        for event in &page {
            if let Err(e) = fold.push(event) {
                return Ok(Err(e));
            }
        }
    }
    Ok(fold.finish())
}

/// The prelude's messages around its snapshot, as SSE text, each with
/// `id: <cursor>`; the snapshot's messages are written between.
struct PreludeText {
    /// `RUN_STARTED`, then the snapshot's opening (no blank line: the
    /// snapshot's message goes on).
    open: String,
    /// The snapshot's close, then the re-opened scopes.
    close: String,
}

impl PreludeText {
    fn of(prelude: &Prelude, cursor: u64) -> PreludeText {
        let mut open = message_text(cursor, &prelude.run_started().to_json());
        open.push_str(&format!("id: {cursor}\ndata: {SNAPSHOT_OPEN}\n"));
        let mut close = format!(
            "data: {}\n\n",
            super::sse_data::escape_separators(&prelude.snapshot_close())
        );
        for event in prelude.reopened() {
            close.push_str(&message_text(cursor, &event.to_json()));
        }
        PreludeText { open, close }
    }
}

/// One SSE message: `id:` and one `data:` line of JSON text.
fn message_text(cursor: u64, json: &str) -> String {
    format!(
        "id: {cursor}\ndata: {}\n\n",
        super::sse_data::escape_separators(json)
    )
}

/// The prelude as SSE text, a page at a time (the second pass): the head,
/// the snapshot's messages as `data:` lines of one SSE message, then the
/// close. An error here (a page that no longer reads) ends the response
/// without the blank line that would dispatch the snapshot, so a client
/// never gets a partial one.
fn written_prelude(
    mut pages: UptoPages,
    text: PreludeText,
    mut snapshot: SnapshotWriter,
) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static {
    async_stream::stream! {
        yield Ok(Bytes::from(text.open));
        loop {
            let page = match pages.next().await {
                Ok(Some(page)) => page,
                Ok(None) => break,
                Err(p) => {
                    yield Err(std::io::Error::other(p.to_json().to_string()));
                    return;
                }
            };
            let mut chunk = String::new();
            for event in &page {
                match snapshot.push(event) {
                    Ok(lines) => {
                        for line in lines {
                            chunk.push_str("data: ");
                            chunk.push_str(&super::sse_data::escape_separators(&line));
                            chunk.push('\n');
                        }
                    }
                    Err(e) => {
                        yield Err(std::io::Error::other(e.to_string()));
                        return;
                    }
                }
            }
            if !chunk.is_empty() {
                yield Ok(Bytes::from(chunk));
            }
        }
        yield Ok(Bytes::from(text.close));
    }
}

/// The run's events `1..=cursor` a page at a time: the journal (pages
/// bounded in lines and bytes, `keel_observers::PAGE_BYTES`), then what the
/// live log retains and the journal does not have yet (a page of it
/// bounded the same way). Each is checked as the next event of the run.
struct UptoPages {
    daemon: Arc<Daemon>,
    id: String,
    cursor: u64,
    last: u64,
}

impl UptoPages {
    fn new(daemon: Arc<Daemon>, id: String, cursor: u64) -> UptoPages {
        UptoPages {
            daemon,
            id,
            cursor,
            last: 0,
        }
    }

    /// The next page, `None` after the cursor's event; a 410 problem when
    /// the event after the last one is neither stored nor retained.
    async fn next(&mut self) -> Result<Option<Vec<Event>>, Problem> {
        if self.last >= self.cursor {
            return Ok(None);
        }
        let (lookup, after) = (self.id.clone(), self.last);
        let lines = self
            .daemon
            .read(move |r| r.events_after(&lookup, after, PAGE))
            .await?;
        let mut page = Vec::with_capacity(lines.len());
        for line in &lines {
            let event = events::checked(line, &self.id, self.last)?;
            if event.seq() > self.cursor {
                break;
            }
            self.last = event.seq();
            page.push(event);
        }
        if page.is_empty() {
            page = self.retained();
        }
        if page.is_empty() {
            return Err(Problem::cursor_expired(
                self.cursor,
                self.last + 1,
                self.cursor,
            ));
        }
        Ok(Some(page))
    }

    /// What the live log retains after the last event, up to the cursor
    /// and a page's byte budget.
    fn retained(&mut self) -> Vec<Event> {
        let Some(run) = self.daemon.engine.live_run(&self.id) else {
            return Vec::new();
        };
        let mut page = Vec::new();
        let mut bytes = 0usize;
        for event in run.log().retained_after(self.last) {
            if event.seq() > self.cursor || event.seq() != self.last + 1 || bytes >= PAGE_BYTES {
                break;
            }
            bytes += event.line().len();
            self.last = event.seq();
            page.push(Event::clone(&event));
        }
        page
    }
}
