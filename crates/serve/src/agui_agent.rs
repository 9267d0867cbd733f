//! `POST /v1/agui`: the AG-UI agent endpoint. A client (`@ag-ui/client`'s
//! `HttpAgent`, CopilotKit) posts a `RunAgentInput` and reads the AG-UI
//! event stream of a Keel run (RFC: `docs/rfc/`, the AG-UI agent mapping).
//!
//! The agent is the chat agent (`--chat-scenario`, or a run factory's
//! [`chat_agent`](crate::RunFactory::chat_agent)). `threadId` is a chat
//! conversation ([`super::chat_runs`]): runs are `chat-{threadId}-{n}`,
//! the same namespace as `POST /v1/chat`'s `id`, and the history is rebuilt
//! from the log, never taken from the client. Of the posted messages only
//! the new input is read ([`NewInput`]):
//! - a last `user` message starts the thread's next run (409
//!   `conversation-busy` while its run is live), with the client's `tools`
//!   as frontend tools ([`super::frontend_tools`]) beside the agent's (a
//!   name the agent has is 400 naming `tools[i].name`);
//! - trailing `tool` messages are the results of the live run's pending
//!   frontend calls (409 `tool-call-not-pending` naming
//!   `messages[i].toolCallId` when one is not waiting);
//! - `resume` entries answer the live run's pending approvals (409
//!   `interaction-not-pending` naming `resume[i].interruptId`).
//!
//! Nothing is applied unless every item is waiting. Each response is
//! `RUN_STARTED` with the client's ids and a `CUSTOM` `keel.run`, then the
//! run's mapped events from where the client's copy ends
//! ([`keel_views::agui::drive::AgentStream`]), then `RUN_FINISHED` with an
//! interrupt outcome (approvals pending) or a success outcome (only
//! frontend calls pending) once the run waits for the client with nothing
//! more committed, or the run's own terminal.
//!
//! SSE ids are Keel cursors with the group rule of `GET /v1/runs/{id}/agui`
//! (`agui::group`). A POST with `Last-Event-ID: <cursor>` is a
//! resume after a cut connection: nothing in its body is applied (it must
//! still parse, and name the thread); the response follows the thread's
//! latest run from the cursor to its next pause or terminal.
//!
//! Bounds and defences as `POST /v1/chat`: the body at most
//! [`super::MAX_BODY_BYTES`], `RunAgentInput`'s own bounds
//! ([`InputLimits`]), the cross-site checks and the token (router layers),
//! a `--max-streams` slot keyed by the thread, taken before a run starts.

use super::approvals::{ANSWER_WAIT, when_parked};
use super::chat::{chat_agent, next_event, open_follower};
use super::chat_runs::{self, LastRun, run_name};
use super::factory::RunPlan;
use super::frontend_tools::{ClientResult, FrontendTool};
use super::problem::Problem;
use super::{Daemon, agui, chat_start, events, read_body, stream_caps};
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::response::sse::Event as SseEvent;
use futures_util::Stream;
use keel_engine::{InteractionDecision, RunFollower, RunRequest, Tool};
use keel_eventlog::ChatId;
use keel_message::{RunId, ToolDefinition, ToolName};
use keel_views::agui::drive::AgentStream;
use keel_views::agui::input::{
    ClientToolResult, InputError, InputLimits, InteractionDecisionWire, NewInput, ResumeAnswer,
    RunAgentInput,
};
use keel_views::agui::{AguiError, Stamped};
use std::collections::BTreeSet;
use std::convert::Infallible;
use std::sync::Arc;

/// The request bounds: `RunAgentInput`'s defaults, messages under the
/// engine's message limits.
fn input_limits(daemon: &Daemon) -> InputLimits {
    InputLimits {
        message: daemon.message_limits().clone(),
        ..InputLimits::default()
    }
}

fn invalid(detail: String, path: &str, rule: &str) -> Problem {
    Problem::new(
        StatusCode::BAD_REQUEST,
        "invalid-body",
        "Invalid AG-UI request",
        detail,
    )
    .with("path", path)
    .with("rule", rule)
}

fn input_problem(e: &InputError) -> Problem {
    invalid(e.to_string(), e.path(), e.rule())
}

/// `Last-Event-ID`, if sent: the cursor the client's copy ends at.
fn last_event_id(headers: &HeaderMap) -> Result<Option<u64>, Problem> {
    let Some(value) = headers.get("last-event-id") else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map(Some)
        .ok_or_else(|| {
            Problem::new(
                StatusCode::BAD_REQUEST,
                "invalid-request",
                "Invalid request",
                "Last-Event-ID is not a sequence number",
            )
            .with("path", "Last-Event-ID")
        })
}

/// `POST /v1/agui`.
pub async fn post_agui(
    State(daemon): State<Arc<Daemon>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, Problem> {
    if daemon.shutting_down() {
        return Err(super::reservation::shutting_down());
    }
    let template = chat_agent(&daemon)?;
    let cursor = last_event_id(&headers)?;
    let text = read_body(&headers, body).await?;
    let input =
        RunAgentInput::parse(&text, &input_limits(&daemon)).map_err(|e| input_problem(&e))?;
    let slot = match daemon.streams.acquire(input.thread_id().as_str()) {
        Ok(slot) => slot,
        Err(refused) => return Ok(stream_caps::refusal(refused)),
    };
    let response = match cursor {
        Some(cursor) => resume(&daemon, &input, cursor).await?,
        None => drive(&daemon, template.as_ref(), &input).await?,
    };
    Ok(stream_caps::held(slot, response))
}

/// What the body's new input asks of its thread, done, and the stream.
async fn drive(
    daemon: &Arc<Daemon>,
    template: &dyn RunPlan,
    input: &RunAgentInput,
) -> Result<Response, Problem> {
    let thread = input.thread_id();
    let last = chat_runs::last_run(daemon, thread).await?;
    match input.new_input() {
        NewInput::User { parts } => {
            let tools = frontend_tools(daemon, input)?;
            let next = chat_runs::next_run(daemon, thread, last).await?;
            let run = chat_start::start_run(daemon, template, thread, next, parts.clone(), |r| {
                with_frontend_tools(daemon, r, tools)
            })
            .await?;
            respond(daemon, input, &run, Start::Fresh).await
        }
        NewInput::Answers {
            tool_results,
            resume,
        } => {
            let run = live_run_of(daemon, thread, last)?;
            let seen = seen_by_client(daemon, &run)?;
            answer(daemon, &run, tool_results, resume).await?;
            respond(daemon, input, &run, Start::Answered(seen)).await
        }
    }
}

/// The resume of a cut response: the thread's latest run from `cursor`.
async fn resume(
    daemon: &Arc<Daemon>,
    input: &RunAgentInput,
    cursor: u64,
) -> Result<Response, Problem> {
    let thread = input.thread_id();
    let Some(last) = chat_runs::last_run(daemon, thread).await? else {
        return Err(unknown_thread(thread));
    };
    let run = run_name(thread, last.n);
    let latest = match daemon.engine.live_run(&run) {
        Some(live) => live.log().stats().last_seq,
        None => last.stored.as_ref().map_or(0, |s| s.last_seq),
    };
    if cursor > latest {
        return Err(Problem::cursor_ahead(cursor, latest).with("path", "Last-Event-ID"));
    }
    respond(daemon, input, &run, Start::Cursor(cursor)).await
}

fn unknown_thread(thread: &ChatId) -> Problem {
    Problem::new(
        StatusCode::NOT_FOUND,
        "conversation-not-found",
        "Unknown thread",
        "no run of this thread is live or stored",
    )
    .with("id", thread.as_str())
}

/// The thread's live run, or 409: tool results and approvals answer a run
/// that waits.
fn live_run_of(daemon: &Daemon, thread: &ChatId, last: Option<LastRun>) -> Result<String, Problem> {
    match last {
        Some(last) if daemon.engine.live_run(&run_name(thread, last.n)).is_some() => {
            Ok(run_name(thread, last.n))
        }
        Some(last) => Err(Problem::new(
            StatusCode::CONFLICT,
            "run-not-waiting",
            "The thread's run is not waiting",
            "tool results and resume entries answer the thread's live run; it has ended",
        )
        .with("run_id", run_name(thread, last.n))),
        None => Err(unknown_thread(thread)),
    }
}

/// What the client has of run `run`: the run up to its pause (its stream
/// is durable, so at most the durable watermark).
fn seen_by_client(daemon: &Daemon, run: &str) -> Result<u64, Problem> {
    daemon
        .engine
        .live_run(run)
        .map(|live| live.log().durable_seq())
        .ok_or_else(|| Problem::unknown_run(run))
}

/// The client's tools as frontend tools (a definition under the engine's
/// message limits: 400 naming `tools[i]`'s member).
fn frontend_tools(daemon: &Daemon, input: &RunAgentInput) -> Result<Vec<Arc<dyn Tool>>, Problem> {
    let limits = daemon.message_limits();
    let timeout = daemon.settings.default_approval_timeout;
    input
        .tools()
        .iter()
        .enumerate()
        .map(|(i, spec)| {
            let definition = ToolDefinition::new_with(
                spec.name().clone(),
                spec.description(),
                spec.parameters().clone(),
                limits,
            )
            .map_err(|e| {
                let path = format!("tools[{i}]{}", e.path().trim_start_matches('$'));
                invalid(e.to_string(), &path, e.kind().rule())
            })?;
            let tool = FrontendTool::new(definition, Arc::clone(&daemon.frontend_calls), timeout);
            Ok(Arc::new(tool) as Arc<dyn Tool>)
        })
        .collect()
}

/// `request` with the frontend `tools` added: 400 naming `tools[i].name`
/// for a name the agent has (rule `agui.frontend_tool_name`).
fn with_frontend_tools(
    daemon: &Daemon,
    mut request: RunRequest,
    tools: Vec<Arc<dyn Tool>>,
) -> Result<RunRequest, Problem> {
    for (i, tool) in tools.into_iter().enumerate() {
        if daemon.engine.has_tool(&request, tool.definition().name()) {
            return Err(invalid(
                format!(
                    "tools[{i}].name: the agent has a tool of this name (rule agui.frontend_tool_name)"
                ),
                &format!("tools[{i}].name"),
                "agui.frontend_tool_name",
            ));
        }
        request = request.tool(tool);
    }
    Ok(request)
}

/// Hands the client's results to the run's waiting frontend calls and
/// its answers to the run's pending approvals: all or none (409 naming the
/// first whose call or approval is not waiting).
async fn answer(
    daemon: &Daemon,
    run: &str,
    results: &[ClientToolResult],
    resume: &[ResumeAnswer],
) -> Result<(), Problem> {
    let until = tokio::time::Instant::now() + ANSWER_WAIT;
    for result in results {
        let call = result.call_id().as_str();
        if !when_parked(daemon, run, until, || {
            daemon.frontend_calls.is_pending(run, call)
        })
        .await
        {
            return Err(not_waiting(
                "tool-call-not-pending",
                "No such pending tool call",
                format!("messages[{}].toolCallId", result.index()),
                run,
            ));
        }
    }
    for entry in resume {
        let id = entry.interrupt_id().as_str();
        if !when_parked(daemon, run, until, || daemon.approvals.is_pending(run, id)).await {
            return Err(not_waiting(
                "interaction-not-pending",
                "No such pending approval",
                format!("resume[{}].interruptId", entry.index()),
                run,
            ));
        }
    }
    for result in results {
        let outcome = if result.is_error() {
            ClientResult::Failed(result.content().to_owned())
        } else {
            ClientResult::Returned(result.content().to_owned())
        };
        daemon
            .frontend_calls
            .answer(run, result.call_id().as_str(), outcome);
    }
    for entry in resume {
        let decision = match entry.decision() {
            InteractionDecisionWire::Approved => InteractionDecision::Approved,
            InteractionDecisionWire::Denied => InteractionDecision::Denied,
        };
        daemon
            .approvals
            .answer(run, entry.interrupt_id().as_str(), decision);
    }
    Ok(())
}

fn not_waiting(kind: &'static str, title: &'static str, path: String, run: &str) -> Problem {
    Problem::new(
        StatusCode::CONFLICT,
        kind,
        title,
        format!("{path}: nothing with this id is waiting in the thread's run"),
    )
    .with("path", path)
    .with("run_id", run)
}

/// Where a response starts in its run.
#[derive(Debug, Clone, Copy)]
enum Start {
    /// A run just started: all of it.
    Fresh,
    /// The client answered at this cursor (the run's pause): what follows.
    Answered(u64),
    /// `Last-Event-ID`: what follows the cursor; a pause or terminal at
    /// the cursor ends the response at once.
    Cursor(u64),
}

impl Start {
    fn seen(self) -> u64 {
        match self {
            Start::Fresh => 0,
            Start::Answered(seen) | Start::Cursor(seen) => seen,
        }
    }
}

/// The response: run `run` as AG-UI events from `start`.
async fn respond(
    daemon: &Arc<Daemon>,
    input: &RunAgentInput,
    run: &str,
    start: Start,
) -> Result<Response, Problem> {
    let keel_run = RunId::parse(run).map_err(|_| Problem::unknown_run(run))?;
    let follower = open_follower(daemon, run).await.map_err(|detail| {
        Problem::new(
            StatusCode::CONFLICT,
            "run-unreadable",
            "The thread's run cannot be followed",
            detail,
        )
        .with("run_id", run)
    })?;
    let frontend: BTreeSet<ToolName> = input.tools().iter().map(|t| t.name().clone()).collect();
    let view = AgentStream::new(input.thread_id().clone(), input.run_id().clone(), frontend);
    let frames = agent_stream(Arc::clone(daemon), view, keel_run, follower, start);
    Ok(events::sse_response(frames))
}

/// The end of a response whose run waits for the client (the open turn's
/// `STEP_FINISHED`, then `RUN_FINISHED`), once nothing more is committed.
/// Its messages carry the cursor of the last event sent (they close the
/// response, not an event: a resume from that cursor sends them again).
fn closing(view: &AgentStream, follower: &RunFollower) -> Option<Vec<Stamped>> {
    if follower.more_committed() {
        return None;
    }
    view.paused()
}

/// A `RUN_ERROR` for what ended the response early (the run's own failure
/// maps through the view).
fn run_error(cursor: u64, message: &str) -> SseEvent {
    let event = serde_json::json!({"type": "RUN_ERROR", "message": message, "code": "keel.stream"});
    SseEvent::default()
        .id(cursor.to_string())
        .data(super::sse_data::escape_separators(&event.to_string()))
}

/// What happened to an event of the run the client has.
enum CaughtUp {
    /// Folded in; the response goes on.
    Skipped,
    /// At a `Last-Event-ID` cursor where the run waits or ended: the
    /// response is its head and these closing events.
    Ends(Vec<Stamped>),
}

/// The frames of one response (see the module docs): the events the
/// client has are folded into the view first, then the head (which
/// re-opens the scopes open there), then the rest, mapped.
fn agent_stream(
    daemon: Arc<Daemon>,
    mut view: AgentStream,
    keel_run: RunId,
    mut follower: RunFollower,
    start: Start,
) -> impl Stream<Item = Result<SseEvent, Infallible>> + Send + 'static {
    let seen = start.seen();
    async_stream::stream! {
        let mut opened = false;
        let mut last = seen;
        if seen == 0 {
            opened = true;
            for event in view.started(&keel_run) {
                yield Ok(agui::frame(seen, &event));
            }
        }
        while let Some(next) = next_event(&daemon, &mut follower).await {
            let event = match next {
                Ok(event) => event,
                Err(detail) => {
                    yield Ok(run_error(last, &detail));
                    return;
                }
            };
            let seq = event.seq();
            if seq <= seen {
                let caught = caught_up(&mut view, &event, &follower, start);
                if seq == seen {
                    opened = true;
                    for head in view.started(&keel_run) {
                        yield Ok(agui::frame(seen, &head));
                    }
                }
                match caught {
                    Ok(CaughtUp::Skipped) => continue,
                    Ok(CaughtUp::Ends(end)) => {
                        for event in &end {
                            yield Ok(agui::frame(seq, event));
                        }
                    }
                    Err(e) => yield Ok(run_error(seq, &e.to_string())),
                }
                return;
            }
            let mapped = match view.feed(&event) {
                Ok(mapped) => mapped,
                Err(e) => {
                    yield Ok(run_error(last, &e.to_string()));
                    return;
                }
            };
            for frame in agui::group(seq, &mapped) {
                yield Ok(frame);
            }
            last = seq;
            if view.ended() {
                return;
            }
            if let Some(end) = closing(&view, &follower) {
                for event in &end {
                    yield Ok(agui::frame(seq, event));
                }
                return;
            }
        }
        if !opened {
            for head in view.started(&keel_run) {
                yield Ok(agui::frame(seen, &head));
            }
        }
        if !view.ended() {
            yield Ok(run_error(last, "the run's events ended before its terminal"));
        }
    }
}

/// An event the client has (at or before its cursor): folded into the
/// view's state. At a `Last-Event-ID` cursor the response ends at once
/// when the run waits there, or ended there (with its closing event
/// again: each response is a whole AG-UI run).
fn caught_up(
    view: &mut AgentStream,
    event: &keel_eventlog::Event,
    follower: &RunFollower,
    start: Start,
) -> Result<CaughtUp, AguiError> {
    let at_cursor = matches!(start, Start::Cursor(c) if c == event.seq());
    if at_cursor && event.kind().is_run_terminal() {
        let closing = view.feed(event)?.pop();
        return Ok(CaughtUp::Ends(closing.into_iter().collect()));
    }
    view.skip(event)?;
    Ok(match at_cursor.then(|| closing(view, follower)).flatten() {
        Some(end) => CaughtUp::Ends(end),
        None => CaughtUp::Skipped,
    })
}
