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
//! The run's sub-runs (its agent tools' child runs) stream too, as
//! subagents of the client's run (`agui_agent/stream.rs`). SSE ids are the run tree's
//! combined cursors (plain seqs for a run without sub-runs) with the group
//! rule of `GET /v1/runs/{id}/agui` (`agui::group`). A POST with
//! `Last-Event-ID: <cursor>` is a resume after a cut connection: nothing in its body is applied (it must
//! still parse, and name the thread); the response follows the thread's
//! latest run from the cursor to its next pause or terminal.
//!
//! Bounds and defences as `POST /v1/chat`: the body at most
//! [`super::MAX_BODY_BYTES`], `RunAgentInput`'s own bounds
//! ([`InputLimits`]), the cross-site checks and the token (router layers),
//! a `--max-streams` slot keyed by the thread, taken before a run starts.

mod stream;

use super::approvals::{ANSWER_WAIT, when_parked};
use super::chat::chat_agent;
use super::chat_runs::{self, LastRun, run_name};
use super::factory::RunPlan;
use super::frontend_tools::{ClientResult, FrontendTool};
use super::problem::Problem;
use super::{Daemon, chat_start, read_body, stream_caps};
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use keel_engine::{InteractionDecision, RunRequest, Tool, TreeCursor};
use keel_eventlog::ChatId;
use keel_message::ToolDefinition;
use keel_views::agui::input::{
    ClientToolResult, InputError, InputLimits, InteractionDecisionWire, NewInput, ResumeAnswer,
    RunAgentInput,
};
use std::sync::Arc;
use stream::{Start, respond};

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

/// `Last-Event-ID`, if sent: the cursor the client's copy ends at (a
/// run tree's combined cursor; a plain seq when the run has no sub-runs).
fn last_event_id(headers: &HeaderMap) -> Result<Option<TreeCursor>, Problem> {
    let Some(value) = headers.get("last-event-id") else {
        return Ok(None);
    };
    let refused = |detail: String, rule: &str| {
        Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid-request",
            "Invalid request",
            format!("Last-Event-ID: {detail}"),
        )
        .with("path", "Last-Event-ID")
        .with("rule", rule)
    };
    let text = value
        .to_str()
        .map_err(|_| refused("is not a cursor".to_owned(), "tree_cursor.syntax"))?;
    TreeCursor::parse(text.trim())
        .map(Some)
        .map_err(|e| refused(e.to_string(), e.rule()))
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
    cursor: TreeCursor,
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
    if cursor.root_seq() > latest {
        return Err(Problem::cursor_ahead(cursor.root_seq(), latest).with("path", "Last-Event-ID"));
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
