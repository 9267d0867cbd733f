//! The Vercel AI SDK's chat routes: `POST /v1/chat` (the body `useChat`
//! sends) and `GET /v1/chat/{id}/stream` (`useChat({resume: true})`),
//! answered with the UI message stream v1 ([`keel_views::ui_stream`]).
//!
//! The agent is the run factory's ([`RunFactory::chat_agent`](crate::RunFactory::chat_agent)):
//! `keel serve --chat-scenario FILE` (its provider scripted or allowed
//! with `--allow-provider`, checked at startup), or a host's own plan. A
//! body may name `model` and `provider` (a type name) only as the agent
//! does, else 403 `provider-not-allowed`.
//!
//! Streams follow the run with the engine's [`RunFollower`] (the journal,
//! then the live log, durable events only, no gap and no duplicate); a
//! stream paused at an approval ends when nothing more is committed
//! ([`RunFollower::more_committed`]).
//!
//! Conversations (#13, #32): the posted `id` names the conversation; its
//! runs are `chat-{id}-{n}`, n = 1, 2, …, created only here and marked as
//! the chat's in their `run.started` ([`super::chat_runs`]). The first
//! user message starts run 1 with the scenario's messages plus that
//! message. A later one starts the next run, continuing the last
//! *completed* run (which must carry the chat's mark) with the history
//! rebuilt from the journal: of the client's copy only the last message
//! is read; runs after it that failed or were cancelled are not part of
//! the history, and with no completed run the next run starts from the
//! scenario's messages again. A last message that is an assistant message
//! with answered approvals (`approval-responded` tool parts) answers the
//! live run's pending interactions and streams the rest of that run.
//!
//! Every response stream, `POST /v1/chat`'s as well as the resume's,
//! holds a `--max-streams` slot (keyed by the conversation id) while it
//! is open; at the cap the POST is refused before a run starts.
//!
//! A last user message may carry the AI SDK's `file` parts
//! (`{"type": "file", "mediaType", "url", "filename"?}`): an image type
//! (png, jpeg, gif, webp) from a `data:` URL of that type or an `https`
//! URL becomes an image part; `application/pdf`, `text/plain`,
//! `text/markdown`, `text/csv` and `application/json` from a `data:` URL
//! become a file part (named by `filename`, or `attachment`); any other
//! type is refused naming the part's `mediaType`, and every bound
//! (`limits.image_bytes`, `limits.file_bytes`, the media parts of one
//! message) and rule (base64, the bytes' signature, the file name) is
//! refused naming the part's member and the rule. The message holds the
//! files, then the text.
//!
//! Bounds: the body at most [`super::MAX_BODY_BYTES`], an `id` of at most
//! [`MAX_CHAT_ID_BYTES`] bytes of `[A-Za-z0-9_-]` (a [`ChatId`]), at most
//! [`MAX_MESSAGES`] messages of at most [`MAX_PARTS`] parts each, and at
//! most [`MAX_CONVERSATION_RUNS`] runs per conversation.

pub use super::chat_runs::MAX_CONVERSATION_RUNS;
use super::chat_runs::{self, LastRun, NextRun, run_name};
use super::factory::RunPlan;
use super::problem::Problem;
use super::tree_follow::{more_committed, next_tree_event, open_tree};
use super::{Daemon, chat_start, read_body, runs, stream_caps};
use axum::body::Body;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::Stream;
use keel_engine::TreeCursor;
use keel_engine::{FollowError, InteractionDecision, RunFollower};
use keel_eventlog::{ChatId, Event, Payload, SubscriptionError};
use keel_message::{Part, RunId};
use keel_observers::RunStatus;
use keel_views::ui_stream::{Chunk, DONE, STREAM_HEADER, UiStream, UiTree};
use serde_json::{Map, Value};
use std::convert::Infallible;
use std::sync::Arc;

/// Longest conversation id, in bytes: the eventlog's [`ChatId`] rule.
pub use keel_eventlog::CHAT_ID_MAX_BYTES as MAX_CHAT_ID_BYTES;
/// Most messages in a body.
pub const MAX_MESSAGES: usize = 1000;
/// Most parts in one message.
pub const MAX_PARTS: usize = 256;

/// What the client's last message asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ask {
    /// A user message: its text parts.
    User(Vec<String>),
    /// Answered approvals: (approval id, approved).
    Approvals(Vec<(String, bool)>),
}

/// A checked `POST /v1/chat` body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatBody {
    /// The conversation.
    pub id: ChatId,
    /// `model`, if named.
    pub model: Option<String>,
    /// `provider` (a type name), if named.
    pub provider: Option<String>,
    /// What the last message asks for.
    pub ask: Ask,
    /// The images and files of a last user message, in order (its `file`
    /// parts, checked: see the module documentation).
    pub files: Vec<Part>,
    /// Whether an earlier message is an assistant's (the client claims a
    /// history).
    pub claims_history: bool,
}

/// Why a body was refused: the JSON path and the rule. Never the content.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("at {path}: {rule}")]
pub struct BodyError {
    /// Where, e.g. `messages[2].parts[0].text`.
    pub path: String,
    /// What the member must be.
    pub rule: &'static str,
}

fn refuse<T>(path: impl Into<String>, rule: &'static str) -> Result<T, BodyError> {
    Err(BodyError {
        path: path.into(),
        rule,
    })
}

fn optional_string(
    root: &Map<String, Value>,
    name: &str,
    rule: &'static str,
) -> Result<Option<String>, BodyError> {
    match root.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => refuse(name, rule),
    }
}

/// Parses the body `useChat` sends: `id`, `messages` (UIMessage[]),
/// `trigger` (`submit-message`), `messageId`; `model` and `provider` as
/// strings; other members are ignored, as are the members of parts this
/// daemon does not read.
pub fn parse_body(text: &str) -> Result<ChatBody, BodyError> {
    let root = keel_message::strict_json::parse(text).or_else(|e| {
        refuse(
            keel_message::strict_json::path(&e),
            keel_message::strict_json::rule(&e),
        )
    })?;
    let Value::Object(root) = root else {
        return refuse("$", "the body must be a JSON object");
    };
    let id = match root.get("id") {
        Some(Value::String(s)) => chat_id(s)?,
        _ => return refuse("id", CHAT_ID_RULE),
    };
    match root.get("trigger") {
        None | Some(Value::Null) => {}
        Some(Value::String(t)) if t == "submit-message" => {}
        Some(_) => return refuse("trigger", "submit-message (regenerate is not supported)"),
    }
    optional_string(&root, "messageId", "a string")?;
    let model = optional_string(&root, "model", "a string")?;
    let provider = optional_string(&root, "provider", "a string (a provider type)")?;
    let Some(Value::Array(messages)) = root.get("messages") else {
        return refuse("messages", "an array of UI messages");
    };
    if messages.is_empty() || messages.len() > MAX_MESSAGES {
        return refuse("messages", "1 to 1000 messages");
    }
    let mut claims_history = false;
    let mut last = None;
    for (i, m) in messages.iter().enumerate() {
        let (role, parts) = message_shape(i, m)?;
        if i + 1 < messages.len() {
            claims_history |= role == "assistant";
        } else {
            last = Some((role, parts));
        }
    }
    let mut files = Vec::new();
    let ask = match last {
        Some(("user", parts)) => {
            files = user_files(messages.len() - 1, parts)?;
            user_ask(messages.len() - 1, parts, !files.is_empty())?
        }
        Some(("assistant", parts)) => approvals_ask(messages.len() - 1, parts)?,
        _ => {
            return refuse(
                format!("messages[{}].role", messages.len() - 1),
                "the last message must be a user message or an assistant message with answered approvals",
            );
        }
    };
    Ok(ChatBody {
        id,
        model,
        provider,
        ask,
        files,
        claims_history,
    })
}

/// A message's role and parts, each part an object with a string `type`.
fn message_shape(i: usize, m: &Value) -> Result<(&str, &[Value]), BodyError> {
    let Value::Object(m) = m else {
        return refuse(format!("messages[{i}]"), "a UI message object");
    };
    let role = match m.get("role") {
        Some(Value::String(r)) if matches!(r.as_str(), "system" | "user" | "assistant") => {
            r.as_str()
        }
        _ => return refuse(format!("messages[{i}].role"), "system, user or assistant"),
    };
    let Some(Value::Array(parts)) = m.get("parts") else {
        return refuse(format!("messages[{i}].parts"), "an array of parts");
    };
    if parts.len() > MAX_PARTS {
        return refuse(format!("messages[{i}].parts"), "at most 256 parts");
    }
    for (j, p) in parts.iter().enumerate() {
        if !matches!(p.get("type"), Some(Value::String(_))) {
            return refuse(
                format!("messages[{i}].parts[{j}].type"),
                "each part is an object with a string type",
            );
        }
    }
    Ok((role, parts))
}

fn part_type(p: &Value) -> &str {
    p.get("type").and_then(Value::as_str).unwrap_or("")
}

/// The text of user message `i`; `has_files` when it has file parts
/// ([`user_files`]), which may stand without text.
fn user_ask(i: usize, parts: &[Value], has_files: bool) -> Result<Ask, BodyError> {
    let mut texts = Vec::new();
    for (j, p) in parts.iter().enumerate() {
        match part_type(p) {
            "text" => match p.get("text") {
                Some(Value::String(t)) => texts.push(t.clone()),
                _ => return refuse(format!("messages[{i}].parts[{j}].text"), "a string"),
            },
            t if t.starts_with("data-") || t == "step-start" || t == "file" => {}
            _ => {
                return refuse(
                    format!("messages[{i}].parts[{j}].type"),
                    "a user message's parts are text and file (data parts are ignored)",
                );
            }
        }
    }
    if !has_files && texts.iter().all(String::is_empty) {
        return refuse(
            format!("messages[{i}].parts"),
            "at least one non-empty text part or one file part",
        );
    }
    Ok(Ask::User(texts))
}

/// The `file` parts of user message `i` as image and file parts, under
/// the default message limits (the run's limits are checked again when
/// the message is built).
fn user_files(i: usize, parts: &[Value]) -> Result<Vec<Part>, BodyError> {
    let limits = keel_message::Limits::default_ref();
    let mut files = Vec::new();
    for (j, p) in parts.iter().enumerate() {
        if part_type(p) != "file" {
            continue;
        }
        let at = format!("messages[{i}].parts[{j}]");
        if files.len() == limits.media_parts_per_message {
            return refuse(at, keel_message::Bound::MediaPartsPerMessage.rule());
        }
        let part = super::chat_files::file_part(p, limits).map_err(|e| BodyError {
            path: format!("{at}.{}", e.member),
            rule: e.rule,
        })?;
        files.push(part);
    }
    Ok(files)
}

fn approvals_ask(i: usize, parts: &[Value]) -> Result<Ask, BodyError> {
    let mut answers = Vec::new();
    for (j, p) in parts.iter().enumerate() {
        let t = part_type(p);
        let tool = t.starts_with("tool-") || t == "dynamic-tool";
        if !tool || p.get("state").and_then(Value::as_str) != Some("approval-responded") {
            continue;
        }
        let path = format!("messages[{i}].parts[{j}].approval");
        let Some(Value::Object(approval)) = p.get("approval") else {
            return refuse(path, "an object {id, approved}");
        };
        let Some(Value::String(id)) = approval.get("id") else {
            return refuse(format!("{path}.id"), "a string");
        };
        let Some(Value::Bool(approved)) = approval.get("approved") else {
            return refuse(format!("{path}.approved"), "a boolean");
        };
        answers.push((id.clone(), *approved));
    }
    if answers.is_empty() {
        return refuse(
            format!("messages[{i}]"),
            "an assistant message as the last message must carry answered approvals",
        );
    }
    Ok(Ask::Approvals(answers))
}

fn body_problem(e: &BodyError) -> Problem {
    Problem::new(
        StatusCode::BAD_REQUEST,
        "invalid-body",
        "Invalid chat request",
        e.to_string(),
    )
    .with("path", e.path.as_str())
}

fn problem(status: StatusCode, kind: &'static str, title: &'static str, detail: &str) -> Problem {
    Problem::new(status, kind, title, detail.to_owned())
}

/// What `id` must be, as a body error says it.
const CHAT_ID_RULE: &str = "a string of 1 to 64 bytes of [A-Za-z0-9_-] (rule chat_id)";

/// `id` as a conversation id, or the body error naming its rule.
fn chat_id(id: &str) -> Result<ChatId, BodyError> {
    ChatId::parse(id).or_else(|_| refuse("id", CHAT_ID_RULE))
}

fn unknown_conversation(id: &ChatId) -> Problem {
    problem(
        StatusCode::NOT_FOUND,
        "conversation-not-found",
        "Unknown conversation",
        "no run of this conversation is live or stored",
    )
    .with("id", id.as_str())
}

/// The daemon's chat agent (also `POST /v1/agui`'s), or 404
/// `chat-not-configured`.
pub(crate) fn chat_agent(daemon: &Daemon) -> Result<Arc<dyn RunPlan>, Problem> {
    daemon.factory.chat_agent().ok_or_else(|| {
        problem(
            StatusCode::NOT_FOUND,
            "chat-not-configured",
            "No chat agent",
            "this daemon has no chat agent (keel serve --chat-scenario FILE, or a run factory whose chat_agent() is Some)",
        )
    })
}

/// `POST /v1/chat`: the response stream holds a stream slot of the
/// conversation ([`stream_caps`]), taken before anything starts.
pub async fn post_chat(
    State(daemon): State<Arc<Daemon>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, Problem> {
    if daemon.shutting_down() {
        return Err(super::reservation::shutting_down());
    }
    let template = chat_agent(&daemon)?;
    let text = read_body(&headers, body).await?;
    let body = parse_body(&text).map_err(|e| body_problem(&e))?;
    let model_ok = body.model.as_deref().is_none_or(|m| m == template.model());
    let provider_ok = body
        .provider
        .as_deref()
        .is_none_or(|p| p == template.provider_type());
    if !model_ok || !provider_ok {
        return Err(runs::provider_not_allowed());
    }
    let slot = match daemon.streams.acquire(body.id.as_str()) {
        Ok(slot) => slot,
        Err(refused) => return Ok(stream_caps::refusal(refused)),
    };
    let response = converse(&daemon, template.as_ref(), body).await?;
    Ok(stream_caps::held(slot, response))
}

/// What the body asks of its conversation, done.
async fn converse(
    daemon: &Arc<Daemon>,
    template: &dyn RunPlan,
    body: ChatBody,
) -> Result<Response, Problem> {
    let last = chat_runs::last_run(daemon, &body.id).await?;
    match (body.ask, last) {
        (Ask::User(_), None) if body.claims_history => Err(unknown_conversation(&body.id)),
        (Ask::User(texts), last) => {
            let next = chat_runs::next_run(daemon, &body.id, last).await?;
            let user = UserMessage {
                texts: &texts,
                files: &body.files,
            };
            start(daemon, template, &body.id, next, user).await
        }
        (Ask::Approvals(_), None) => Err(unknown_conversation(&body.id)),
        (Ask::Approvals(answers), Some(last)) => {
            answer(daemon, &run_name(&body.id, last.n), last.live, &answers).await
        }
    }
}

/// What the user's message holds: its files, then its text (the AI SDK's
/// order).
#[derive(Clone, Copy)]
struct UserMessage<'a> {
    texts: &'a [String],
    files: &'a [Part],
}

/// Starts the conversation's next run with the user's message, and
/// streams it.
async fn start(
    daemon: &Arc<Daemon>,
    template: &dyn RunPlan,
    id: &ChatId,
    next: NextRun,
    user: UserMessage<'_>,
) -> Result<Response, Problem> {
    let limits = daemon.message_limits().clone();
    let texts = user
        .texts
        .iter()
        .filter(|t| !t.is_empty())
        .map(|t| Part::text_with(t, &limits));
    let parts = user
        .files
        .iter()
        .cloned()
        .map(Ok)
        .chain(texts)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| chat_start::invalid_message(&e))?;
    let name = chat_start::start_run(daemon, template, id, next, parts, Ok).await?;
    Ok(ui_response(ui_stream(Arc::clone(daemon), name, 0)))
}

/// Answers the run's pending approvals and streams the rest of the run.
async fn answer(
    daemon: &Arc<Daemon>,
    run: &str,
    live: bool,
    answers: &[(String, bool)],
) -> Result<Response, Problem> {
    let not_pending = || {
        problem(
            StatusCode::CONFLICT,
            "interaction-not-pending",
            "No such pending approval",
            "none of the answered approvals is waiting in the conversation's run",
        )
        .with("run_id", run)
    };
    let Some(live_run) = live.then(|| daemon.engine.live_run(run)).flatten() else {
        return Err(not_pending());
    };
    // What the client has: the run up to its last pause before now (its
    // stream is durable, so at most the durable watermark).
    let seen = live_run.log().durable_seq();
    let until = tokio::time::Instant::now() + super::approvals::ANSWER_WAIT;
    let mut answered = 0;
    for (approval, approved) in answers {
        let decision = if *approved {
            InteractionDecision::Approved
        } else {
            InteractionDecision::Denied
        };
        // The question is parked just after `interaction.started`: while
        // the run is live, wait for it a little.
        let parked = super::approvals::when_parked(daemon, run, until, || {
            daemon.approvals.answer(run, approval, decision)
        });
        if parked.await {
            answered += 1;
        }
    }
    if answered == 0 {
        return Err(not_pending());
    }
    Ok(ui_response(ui_stream(
        Arc::clone(daemon),
        run.to_owned(),
        seen,
    )))
}

/// `GET /v1/chat/{id}/stream`: the live run from its first event, then
/// followed live; when the conversation's last run failed or was
/// cancelled, a short stream carrying that failure (an `error` chunk, which
/// `useChat` shows); 204 when it completed.
pub async fn resume_stream(
    State(daemon): State<Arc<Daemon>>,
    UrlPath(id): UrlPath<String>,
) -> Result<Response, Problem> {
    let id = chat_id(&id).map_err(|e| body_problem(&e))?;
    match chat_runs::last_run(&daemon, &id).await? {
        None => Err(unknown_conversation(&id)),
        Some(LastRun { n, live: true, .. }) => Ok(ui_response(ui_stream(
            Arc::clone(&daemon),
            run_name(&id, n),
            0,
        ))),
        Some(LastRun {
            n,
            stored: Some(summary),
            ..
        }) if matches!(summary.status, RunStatus::Failed | RunStatus::Cancelled) => {
            unfinished_stream(&daemon, run_name(&id, n), summary.last_seq).await
        }
        Some(_) => Ok(StatusCode::NO_CONTENT.into_response()),
    }
}

/// The resume of a conversation whose last run, `run`, ended failed or
/// cancelled at `last_seq`: [`ended_unfinished`] of its terminal, then
/// `[DONE]`.
async fn unfinished_stream(
    daemon: &Daemon,
    run: String,
    last_seq: u64,
) -> Result<Response, Problem> {
    let lookup = run.clone();
    let after = last_seq.saturating_sub(1);
    let lines = daemon
        .read(move |r| r.events_after(&lookup, after, 1))
        .await?;
    let terminal = lines.first().and_then(|line| Event::decode(line).ok());
    let frames = ended_unfinished(&run, terminal.as_ref())
        .iter()
        .map(frame)
        .chain(std::iter::once(SseEvent::default().data(DONE)))
        .map(Ok)
        .collect::<Vec<_>>();
    Ok(ui_response(futures_util::stream::iter(frames)))
}

/// What a resume says of a conversation whose last run failed or was
/// cancelled: the message starts, an `error` chunk says why (the run's
/// screened error, or that it was cancelled), and it finishes with the
/// `error` finish reason and the outcome in `messageMetadata.keel`.
fn ended_unfinished(run: &str, terminal: Option<&Event>) -> Vec<Chunk> {
    let (outcome, error_text) = match terminal.map(Event::payload) {
        Some(Ok(Payload::RunFailed(p))) => ("failed", format!("the run failed: {}", p.error)),
        Some(Ok(Payload::RunCancelled(p))) => (
            "cancelled",
            match p.reason {
                Some(reason) => format!("the run was cancelled: {}", reason.as_str()),
                None => "the run was cancelled".to_owned(),
            },
        ),
        _ => ("failed", "the run did not complete".to_owned()),
    };
    vec![
        UiStream::start(run),
        Chunk::Error { error_text },
        Chunk::Finish {
            finish_reason: Some("error"),
            message_metadata: Some(serde_json::json!({"keel": {"outcome": outcome}})),
        },
    ]
}

fn ui_response(
    frames: impl Stream<Item = Result<SseEvent, Infallible>> + Send + 'static,
) -> Response {
    let mut response = Sse::new(frames)
        .keep_alive(KeepAlive::new().interval(super::events::KEEP_ALIVE))
        .into_response();
    let headers = response.headers_mut();
    headers.insert(STREAM_HEADER.0, HeaderValue::from_static(STREAM_HEADER.1));
    headers.insert("cache-control", HeaderValue::from_static("no-cache"));
    response
}

/// The chat's next event of `follower` (the engine's: the journal, then
/// the live log, durable events only, so a chat client never renders what
/// a crash could take back). A client that fell behind the live log's
/// bounds is not failed: the follower is reopened at its cursor, and the
/// journal serves what it missed.
pub(crate) async fn next_event(
    daemon: &Daemon,
    follower: &mut RunFollower,
) -> Option<Result<Arc<Event>, String>> {
    loop {
        match follower.next().await? {
            Ok(event) => return Some(Ok(event)),
            Err(FollowError::Live(SubscriptionError::SlowConsumer { .. })) => {
                let (run_id, cursor) = (follower.run_id().clone(), follower.cursor());
                match daemon.engine.subscribe(&run_id, cursor).await {
                    Ok(reopened) => *follower = reopened,
                    Err(e) => return Some(Err(e.to_string())),
                }
            }
            Err(e) => return Some(Err(e.to_string())),
        }
    }
}

/// A follower of the chat's run `run` from its first event.
pub(crate) async fn open_follower(daemon: &Daemon, run: &str) -> Result<RunFollower, String> {
    let run_id = RunId::parse(run).map_err(|e| e.to_string())?;
    daemon
        .engine
        .subscribe(&run_id, 0)
        .await
        .map_err(|e| e.to_string())
}

fn frame(chunk: &Chunk) -> SseEvent {
    SseEvent::default().data(super::sse_data::escape_separators(&chunk.to_json()))
}

/// The run as UI message stream frames: the run's tree (its sub-runs as
/// `data-keel-sub-run` parts, [`UiTree`]). Chunks of events up to `seen`
/// (the root's seq) the client has up to the last pause among them; those
/// after it are sent. The stream ends after the run's terminal, or at a
/// pause with nothing committed after it (the client answers in its next
/// request).
fn ui_stream(
    daemon: Arc<Daemon>,
    run: String,
    seen: u64,
) -> impl Stream<Item = Result<SseEvent, Infallible>> + Send + 'static {
    async_stream::stream! {
        let mut view = UiTree::new();
        let mut held: Vec<Chunk> = Vec::new();
        yield Ok(frame(&UiStream::start(&run)));
        let mut follower = match open_tree(&daemon, &run, TreeCursor::new(0)).await {
            Ok(follower) => follower,
            Err(error_text) => {
                yield Ok(frame(&Chunk::Error { error_text }));
                yield Ok(SseEvent::default().data(DONE));
                return;
            }
        };
        while let Some(next) = next_tree_event(&daemon, &mut follower).await {
            let chunks = match next.map(|e| view.feed(&e.event).map_err(|v| v.to_string())) {
                Ok(Ok(chunks)) => chunks,
                Ok(Err(e)) | Err(e) => {
                    yield Ok(frame(&Chunk::Error { error_text: e }));
                    break;
                }
            };
            let root = view.root();
            if root.last_seq() <= seen {
                held.extend(chunks);
                if root.paused() {
                    held.clear();
                }
                continue;
            }
            for chunk in held.drain(..).chain(chunks) {
                yield Ok(frame(&chunk));
            }
            if view.root().ended() {
                break;
            }
            if view.root().paused()
                && !more_committed(&daemon, follower.root(), view.root().last_seq()).await
            {
                yield Ok(frame(&Chunk::Finish { finish_reason: None, message_metadata: Some(serde_json::json!({"keel": {"outcome": "awaiting-approval"}})) }));
                break;
            }
        }
        for chunk in held.drain(..) {
            yield Ok(frame(&chunk));
        }
        yield Ok(SseEvent::default().data(DONE));
    }
}
