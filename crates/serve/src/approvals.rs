//! Approvals over HTTP: the daemon's [`InteractionHandler`] parks each
//! question until `POST /v1/runs/{id}/interactions/{interaction_id}`
//! answers it.
//!
//! The pending map is the handler's state, not a registry of runs: an
//! entry lives exactly as long as the engine's future for the question.
//! The engine drops that future when the approval times out
//! (`limits.approval_timeout`), when the run is cancelled, and when the
//! run ends, and dropping it removes the entry. So the map holds at most
//! one entry per approval some live run is waiting for: with
//! `--max-live-runs` N and `limits.max_parallel_tools` P, at most N × P.

use super::problem::Problem;
use super::{Daemon, json_response, lock, read_body};
use axum::body::Body;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use keel_engine::{InteractionDecision, InteractionFuture, InteractionHandler, InteractionRequest};
use serde_json::json;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;

/// How long an answer waits for its question to be parked.
pub(crate) const ANSWER_WAIT: Duration = Duration::from_secs(1);

/// Tries `answer` until it takes or `until` passes: the engine commits
/// `interaction.started` (or `tool.started`) just before it asks the
/// handler (or calls the tool), so an answer may arrive a moment before
/// the question is parked. Stops early once run `run` is not live.
pub(crate) async fn when_parked(
    daemon: &Daemon,
    run: &str,
    until: tokio::time::Instant,
    mut answer: impl FnMut() -> bool,
) -> bool {
    loop {
        if answer() {
            return true;
        }
        if tokio::time::Instant::now() >= until || daemon.engine.live_run(run).is_none() {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// (run id, interaction id).
type Key = (String, String);
type PendingMap = Arc<Mutex<HashMap<Key, oneshot::Sender<InteractionDecision>>>>;

/// Parks approval requests until they are answered (see the module docs
/// for how long an entry lives).
#[derive(Default)]
pub struct Approvals {
    pending: PendingMap,
}

impl std::fmt::Debug for Approvals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Approvals")
            .field("pending", &self.pending_count())
            .finish()
    }
}

impl Approvals {
    /// A handler with nothing pending.
    pub fn new() -> Approvals {
        Approvals::default()
    }

    /// How many questions are waiting for an answer.
    pub fn pending_count(&self) -> usize {
        lock(&self.pending).len()
    }

    /// Answers the question, if it is still waiting; false otherwise (never
    /// asked, answered already, timed out, or its run ended).
    pub fn answer(
        &self,
        run_id: &str,
        interaction_id: &str,
        decision: InteractionDecision,
    ) -> bool {
        let key = (run_id.to_owned(), interaction_id.to_owned());
        let sender = lock(&self.pending).remove(&key);
        sender.is_some_and(|tx| tx.send(decision).is_ok())
    }

    /// Whether the question is waiting for an answer.
    pub fn is_pending(&self, run_id: &str, interaction_id: &str) -> bool {
        let key = (run_id.to_owned(), interaction_id.to_owned());
        lock(&self.pending).contains_key(&key)
    }
}

/// Removes its entry when the question's future is dropped.
struct PendingGuard {
    pending: PendingMap,
    key: Key,
}

impl Drop for PendingGuard {
    fn drop(&mut self) {
        lock(&self.pending).remove(&self.key);
    }
}

impl InteractionHandler for Approvals {
    fn handle(&self, request: InteractionRequest) -> InteractionFuture {
        let key = (
            request.run_id.as_str().to_owned(),
            request.interaction_id.as_str().to_owned(),
        );
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(key.clone(), tx);
        let guard = PendingGuard {
            pending: Arc::clone(&self.pending),
            key,
        };
        Box::pin(async move {
            // The sender is only dropped unanswered with its entry, which
            // happens when this future is dropped: then nobody reads this.
            let decision = rx.await.unwrap_or(InteractionDecision::Denied);
            drop(guard);
            Ok(decision)
        })
    }
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Answer {
    decision: DecisionWire,
}

#[derive(serde::Deserialize, Clone, Copy)]
#[serde(rename_all = "snake_case")]
enum DecisionWire {
    Approved,
    Denied,
}

fn parse_answer(text: &str) -> Result<InteractionDecision, Problem> {
    // The one strict reading first: a repeated member is refused by name
    // here as in every other body, whatever the shape step would say.
    if let Err(e) = keel_message::strict_json::check(text) {
        let path = keel_message::strict_json::path(&e);
        return Err(Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid-body",
            "Invalid answer",
            format!("at {path}: {}", keel_message::strict_json::rule(&e)),
        )
        .with("path", path)
        .with("rule", e.rule()));
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let answer: Answer = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid-body",
            "Invalid answer",
            format!(
                "{}:{}: at {path}: expected {{\"decision\": \"approved\" | \"denied\"}}",
                inner.line(),
                inner.column()
            ),
        )
        .with("line", inner.line())
        .with("column", inner.column())
        .with("path", path)
    })?;
    // One JSON value and nothing after it: `{"decision":"approved"}{…}`
    // is not an answer.
    de.end().map_err(|e| {
        Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid-body",
            "Invalid answer",
            format!(
                "{}:{}: trailing data after the answer (rule body.single_value)",
                e.line(),
                e.column()
            ),
        )
        .with("line", e.line())
        .with("column", e.column())
    })?;
    Ok(match answer.decision {
        DecisionWire::Approved => InteractionDecision::Approved,
        DecisionWire::Denied => InteractionDecision::Denied,
    })
}

/// `POST /v1/runs/{id}/interactions/{interaction_id}`.
pub async fn answer_interaction(
    State(daemon): State<Arc<Daemon>>,
    UrlPath((id, interaction_id)): UrlPath<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, Problem> {
    let text = read_body(&headers, body).await?;
    let decision = parse_answer(&text)?;
    // The engine commits `interaction.started` just before it asks the
    // handler, so an answer may arrive a moment before the question is
    // parked: while the run is live, wait for it a little.
    let until = tokio::time::Instant::now() + ANSWER_WAIT;
    while !daemon.approvals.is_pending(&id, &interaction_id)
        && daemon.engine.live_run(&id).is_some()
        && tokio::time::Instant::now() < until
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    if daemon.approvals.answer(&id, &interaction_id, decision) {
        return Ok(json_response(
            StatusCode::OK,
            &json!({ "run_id": id, "interaction_id": interaction_id, "decision": decision.as_str() }),
        ));
    }
    Err(Problem::new(
        StatusCode::NOT_FOUND,
        "interaction-not-pending",
        "No such pending interaction",
        "no approval with this id is waiting in this run (never asked, answered, timed out, or the run ended)",
    )
    .with("run_id", id.as_str())
    .with("interaction_id", interaction_id.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_engine::InteractionKind;
    use keel_message::{CallId, CanonicalJson, InteractionId, RunId, ToolName};

    fn request(
        run: &str,
        interaction: &str,
    ) -> Result<InteractionRequest, Box<dyn std::error::Error>> {
        Ok(InteractionRequest {
            run_id: RunId::parse(run)?,
            turn: 1,
            interaction_id: InteractionId::parse(interaction)?,
            kind: InteractionKind::Approval {
                call_id: CallId::parse("c1")?,
                tool: ToolName::parse("gate")?,
                arguments: CanonicalJson::parse("{}")?,
            },
        })
    }

    #[tokio::test]
    async fn an_entry_lives_as_long_as_its_question() -> Result<(), Box<dyn std::error::Error>> {
        let approvals = Approvals::new();
        // Answered: the future resolves and the entry is gone.
        let asked = approvals.handle(request("run_a", "i_1")?);
        assert_eq!(approvals.pending_count(), 1);
        assert!(approvals.answer("run_a", "i_1", InteractionDecision::Approved));
        assert_eq!(asked.await, Ok(InteractionDecision::Approved));
        assert_eq!(approvals.pending_count(), 0);
        assert!(!approvals.answer("run_a", "i_1", InteractionDecision::Approved));

        // Timed out (the engine's timeout drops the future): gone.
        let asked = approvals.handle(request("run_a", "i_2")?);
        let waited = tokio::time::timeout(Duration::from_millis(10), asked).await;
        assert!(waited.is_err());
        assert_eq!(approvals.pending_count(), 0);

        // The run ended or was cancelled (the future dropped unpolled): gone.
        let asked = approvals.handle(request("run_b", "i_1")?);
        assert_eq!(approvals.pending_count(), 1);
        drop(asked);
        assert_eq!(approvals.pending_count(), 0);
        assert!(!approvals.answer("run_b", "i_1", InteractionDecision::Denied));
        Ok(())
    }
}
