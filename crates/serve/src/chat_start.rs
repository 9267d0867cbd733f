//! Starting a chat conversation's next run (`POST /v1/chat` and
//! `POST /v1/agui`): the user's message appended to the agent's messages
//! (run 1) or to the previous completed run's history as rebuilt from the
//! journal, the run marked as the conversation's ([`super::chat_runs`]),
//! then admitted as every run is ([`super::runs`]).

use super::Daemon;
use super::chat_runs::{NextRun, run_name};
use super::factory::RunPlan;
use super::problem::Problem;
use super::runs;
use axum::http::StatusCode;
use keel_engine::RunRequest;
use keel_eventlog::{ChatId, ChatRun};
use keel_message::{Message, MessageError, Part, Role, RunId};
use keel_observers::conversation;
use std::sync::Arc;

/// 400 for a user message that breaks a message rule.
pub(crate) fn invalid_message(e: &MessageError) -> Problem {
    let path = "messages";
    Problem::new(
        StatusCode::BAD_REQUEST,
        "invalid-body",
        "Invalid chat request",
        format!("at {path}: {e}"),
    )
    .with("path", path)
}

/// Starts run `next` of conversation `id` from the agent `template`, with
/// one new user message of `parts`: run 1 from the agent's messages, a
/// later run continuing its previous run's history as rebuilt from the
/// journal. `extend` adds to the request before its admission (a
/// frontend's own tools). Returns the run's id once its `run.started` is
/// journaled ([`runs::admit_run`]).
pub(crate) async fn start_run(
    daemon: &Arc<Daemon>,
    template: &dyn RunPlan,
    id: &ChatId,
    next: NextRun,
    parts: Vec<Part>,
    extend: impl FnOnce(RunRequest) -> Result<RunRequest, Problem>,
) -> Result<String, Problem> {
    let limits = daemon.message_limits().clone();
    let bad = |e: MessageError| invalid_message(&e);
    let name = run_name(id, next.n);
    let run_id = RunId::parse(&name).map_err(|e| bad(e.into()))?;
    let message_id = keel_eventlog::history::follow_up_message_id(&run_id, 1).map_err(bad)?;
    let message = Message::new_with(message_id, Role::User, parts, &limits).map_err(bad)?;
    let host = daemon.host_parts();
    let request = match next.previous {
        None => {
            let mut history = template.messages().to_vec();
            history.push(message);
            template.request(run_id, history, &host)?
        }
        Some(p) => {
            let reader = Arc::clone(&daemon.reader);
            let (prev, new_run) = (run_name(id, p), run_id.clone());
            let continuation = tokio::task::spawn_blocking(move || {
                conversation::continuation(&reader, &prev, &[message], &new_run, &limits)
            })
            .await
            .map_err(Problem::journal)?
            .map_err(|e| runs::continue_problem(&run_name(id, p), &e))?;
            runs::follow_up(template, run_id, &host, continuation)?
        }
    };
    let request = extend(request.chat_run(ChatRun::new(id.clone(), next.n)))?;
    runs::admit_run(daemon, template, request).await?;
    Ok(name)
}
