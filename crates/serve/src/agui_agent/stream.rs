//! One `POST /v1/agui` response: the thread's run and the sub-runs its
//! agent tools start, as the AG-UI event stream of the client's run
//! ([`AgentStream::feed_tree`]: sub-runs are subagents, `SUBAGENT_*`
//! around their events).
//!
//! SSE ids are the tree's combined cursor ([`TreeCursor`]: `<root_seq>`,
//! then `,<run_id>:<seq>` for each sub-run not ended at that point), with
//! the group rule of `GET /v1/runs/{id}/agui`: every AG-UI event of one
//! Keel event but the last carries the cursor before that Keel event, the
//! last the cursor after it. A run without sub-runs has cursors that are
//! plain seqs, as before. A resume (`Last-Event-ID`) first folds in what
//! the client has (the run up to the root seq, each listed sub-run up to
//! its seq: each run in its own order, so the state is each run's at the
//! cursor), then opens with the scopes open there (the run's and the open
//! sub-runs', [`AgentStream::started`]) and follows the tree from the
//! cursor.

use super::super::chat::{next_event, open_follower};
use super::super::problem::Problem;
use super::super::tree_follow::{more_committed, next_tree_event, open_tree};
use super::super::{Daemon, events};
use axum::http::StatusCode;
use axum::response::Response;
use axum::response::sse::Event as SseEvent;
use futures_util::Stream;
use keel_engine::{TreeCursor, TreeFollower};
use keel_eventlog::Event;
use keel_message::{RunId, ToolName};
use keel_views::agui::Stamped;
use keel_views::agui::drive::AgentStream;
use keel_views::agui::input::RunAgentInput;
use std::collections::BTreeSet;
use std::convert::Infallible;
use std::sync::Arc;

/// Where a response starts in its run tree.
#[derive(Debug, Clone)]
pub(super) enum Start {
    /// A run just started: all of it.
    Fresh,
    /// The client answered at this seq of the run (its pause; no sub-run
    /// is open at a pause): what follows.
    Answered(u64),
    /// `Last-Event-ID`: what follows the cursor; a pause or the run's
    /// terminal at the cursor ends the response at once.
    Cursor(TreeCursor),
}

impl Start {
    fn cursor(&self) -> TreeCursor {
        match self {
            Start::Fresh => TreeCursor::new(0),
            Start::Answered(seen) => TreeCursor::new(*seen),
            Start::Cursor(cursor) => cursor.clone(),
        }
    }
}

/// The response: run `run`'s tree as AG-UI events from `start`.
pub(super) async fn respond(
    daemon: &Arc<Daemon>,
    input: &RunAgentInput,
    run: &str,
    start: Start,
) -> Result<Response, Problem> {
    let keel_run = RunId::parse(run).map_err(|_| Problem::unknown_run(run))?;
    let frontend: BTreeSet<ToolName> = input.tools().iter().map(|t| t.name().clone()).collect();
    let mut view = AgentStream::new(input.thread_id().clone(), input.run_id().clone(), frontend);
    let cursor = start.cursor();
    let at_cursor = matches!(start, Start::Cursor(_));
    let terminal = catch_up(daemon, &mut view, &keel_run, &cursor, at_cursor)
        .await
        .map_err(|detail| unreadable(run, detail))?;
    let follower = open_tree(daemon, run, cursor.clone())
        .await
        .map_err(|detail| unreadable(run, detail))?;
    let responder = Responder {
        daemon: Arc::clone(daemon),
        keel_run,
        at_cursor,
        cursor,
    };
    Ok(events::sse_response(
        responder.frames(view, follower, terminal),
    ))
}

fn unreadable(run: &str, detail: String) -> Problem {
    Problem::new(
        StatusCode::CONFLICT,
        "run-unreadable",
        "The thread's run cannot be followed",
        detail,
    )
    .with("run_id", run)
}

/// Folds what the client has into `view`: the run's events up to the
/// cursor's root seq, then each listed sub-run's up to its seq. With
/// `at_cursor`, the run's terminal at the root seq is not folded in but
/// answered (the response closes with it again).
async fn catch_up(
    daemon: &Daemon,
    view: &mut AgentStream,
    root: &RunId,
    cursor: &TreeCursor,
    at_cursor: bool,
) -> Result<Option<Arc<Event>>, String> {
    let mut terminal = None;
    replay(daemon, root, cursor.root_seq(), |event| {
        if at_cursor && event.seq() == cursor.root_seq() && event.kind().is_run_terminal() {
            terminal = Some(Arc::clone(event));
            return Ok(());
        }
        view.skip_tree(event).map_err(|e| e.to_string())
    })
    .await?;
    for entry in cursor.entries() {
        replay(daemon, entry.run_id(), entry.seq(), |event| {
            view.skip_tree(event).map_err(|e| e.to_string())
        })
        .await?;
    }
    Ok(terminal)
}

/// Run `run_id`'s events `1..=upto`, each to `take`.
async fn replay(
    daemon: &Daemon,
    run_id: &RunId,
    upto: u64,
    mut take: impl FnMut(&Arc<Event>) -> Result<(), String>,
) -> Result<(), String> {
    if upto == 0 {
        return Ok(());
    }
    let mut follower = open_follower(daemon, run_id.as_str()).await?;
    while let Some(next) = next_event(daemon, &mut follower).await {
        let event = next?;
        take(&event)?;
        if event.seq() >= upto {
            return Ok(());
        }
    }
    Err(format!("run {run_id} ends before seq {upto}"))
}

/// What one response streams from.
struct Responder {
    daemon: Arc<Daemon>,
    keel_run: RunId,
    at_cursor: bool,
    cursor: TreeCursor,
}

impl Responder {
    /// The frames (see the module docs): the head at the cursor, then the
    /// tree's events mapped, until the run's terminal or a pause with
    /// nothing more committed.
    fn frames(
        self,
        mut view: AgentStream,
        mut follower: TreeFollower,
        terminal: Option<Arc<Event>>,
    ) -> impl Stream<Item = Result<SseEvent, Infallible>> + Send + 'static {
        async_stream::stream! {
            let mut last = self.cursor.to_string();
            let mut root_seq = self.cursor.root_seq();
            for head in view.started(&self.keel_run) {
                yield Ok(frame(&last, &head));
            }
            if let Some(terminal) = terminal {
                match view.feed_tree(&terminal) {
                    Ok(mut mapped) => if let Some(end) = mapped.pop() {
                        yield Ok(frame(&last, &end));
                    },
                    Err(e) => yield Ok(run_error(&last, &e.to_string())),
                }
                return;
            }
            if self.at_cursor
                && let Some(end) = self.closing(&view, root_seq).await
            {
                for event in &end {
                    yield Ok(frame(&last, event));
                }
                return;
            }
            while let Some(next) = next_tree_event(&self.daemon, &mut follower).await {
                let tree_event = match next {
                    Ok(tree_event) => tree_event,
                    Err(detail) => {
                        yield Ok(run_error(&last, &detail));
                        return;
                    }
                };
                let mapped = match view.feed_tree(&tree_event.event) {
                    Ok(mapped) => mapped,
                    Err(e) => {
                        yield Ok(run_error(&last, &e.to_string()));
                        return;
                    }
                };
                let id = tree_event.cursor.to_string();
                let n = mapped.len();
                for (i, event) in mapped.iter().enumerate() {
                    yield Ok(frame(if i + 1 == n { &id } else { &last }, event));
                }
                last = id;
                if view.ended() {
                    return;
                }
                if tree_event.run_id != self.keel_run {
                    continue;
                }
                root_seq = tree_event.event.seq();
                if let Some(end) = self.closing(&view, root_seq).await {
                    for event in &end {
                        yield Ok(frame(&last, event));
                    }
                    return;
                }
            }
            if !view.ended() {
                yield Ok(run_error(&last, "the run's events ended before its terminal"));
            }
        }
    }

    /// The end of a response whose run waits for the client (the open
    /// turn's `STEP_FINISHED`, then `RUN_FINISHED`), once nothing more is
    /// committed after `root_seq`.
    async fn closing(&self, view: &AgentStream, root_seq: u64) -> Option<Vec<Stamped>> {
        let end = view.paused()?;
        match more_committed(&self.daemon, &self.keel_run, root_seq).await {
            true => None,
            false => Some(end),
        }
    }
}

fn frame(cursor: &str, event: &Stamped) -> SseEvent {
    SseEvent::default()
        .id(cursor)
        .data(super::super::sse_data::escape_separators(&event.to_json()))
}

/// A `RUN_ERROR` for what ended the response early (the run's own failure
/// maps through the view).
fn run_error(cursor: &str, message: &str) -> SseEvent {
    let event = serde_json::json!({"type": "RUN_ERROR", "message": message, "code": "keel.stream"});
    SseEvent::default()
        .id(cursor)
        .data(super::super::sse_data::escape_separators(
            &event.to_string(),
        ))
}
