//! The deletion routes, behind the token and the cross-site defences like
//! every mutating route (a `DELETE` or `POST` needs a JSON content type,
//! so a browser preflights it):
//!
//! - `DELETE /v1/runs/{id}`: the run and its sub-runs;
//! - `DELETE /v1/runs/{id}?conversation=true`: its whole conversation;
//! - `POST /v1/prune?older_than=30d`: every closed run tree older than
//!   the age.
//!
//! Each takes an optional `who` (recorded in the tombstones; default
//! `keel serve`) and answers `200 {"deleted": [tombstone…]}`. The rules
//! are the store's (`keel_observers::deletion`): a running run or one
//! another run continues or forks from is a 409 `deletion-refused`
//! problem naming the rule (and the dependents); a run live in this
//! daemon is refused before the store is asked. With `--nats` the runs
//! are deleted from JetStream first, then from this host's journal.
//! Deletions take the
//! admission lock, so no run of this daemon is admitted (a continuation
//! or fork reading the history of a run being deleted) meanwhile.

use super::problem::Problem;
use super::{Daemon, json_response};
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use keel_message::RunId;
use keel_observers::deletion::{
    DeleteError, DeletionRequest, DeletionTarget, OlderThan, Tombstone, Who,
};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// Who the tombstones name when a request names no one.
pub const DEFAULT_WHO: &str = "keel serve";

/// The query of `DELETE /v1/runs/{id}`, as sent (checked by
/// [`DeleteQuery::parse`]).
#[derive(Debug, Default, Clone, serde::Deserialize)]
pub struct DeleteQuery {
    /// `true` (the run's whole conversation) or `false` (the default).
    pub conversation: Option<String>,
    /// Who deletes (rule `deletion.who`).
    pub who: Option<String>,
}

impl DeleteQuery {
    /// The request for run `id`, or a 400 `invalid-deletion` problem
    /// naming the parameter and the rule.
    pub fn parse(&self, id: &str) -> Result<DeletionRequest, Problem> {
        let run_id = RunId::parse(id).map_err(|e| {
            bad(
                "id",
                "deletion.run_id",
                format!("the path must name a run id: {e}"),
            )
        })?;
        let conversation = match self.conversation.as_deref() {
            None | Some("false") => false,
            Some("true") => true,
            Some(_) => {
                return Err(bad(
                    "conversation",
                    "deletion.conversation",
                    "conversation must be true or false".to_owned(),
                ));
            }
        };
        let target = if conversation {
            DeletionTarget::Conversation(run_id)
        } else {
            DeletionTarget::Run(run_id)
        };
        Ok(DeletionRequest::new(target, who(self.who.as_deref())?))
    }
}

/// The query of `POST /v1/prune`, as sent (checked by
/// [`PruneQuery::parse`]).
#[derive(Debug, Default, Clone, serde::Deserialize)]
pub struct PruneQuery {
    /// The age: digits and a unit `s`, `m`, `h` or `d` (required).
    pub older_than: Option<String>,
    /// Who prunes (rule `deletion.who`).
    pub who: Option<String>,
}

impl PruneQuery {
    /// The request for a store whose clock reads `now_ms`, or a 400
    /// `invalid-deletion` problem naming the parameter and the rule.
    pub fn parse(&self, now_ms: u64) -> Result<DeletionRequest, Problem> {
        let text = self.older_than.as_deref().ok_or_else(|| {
            bad(
                "older_than",
                "prune.older_than",
                "older_than is required (such as 30d)".to_owned(),
            )
        })?;
        let age = OlderThan::parse(text).map_err(|e| bad("older_than", e.rule(), e.to_string()))?;
        Ok(DeletionRequest::new(
            age.target(now_ms),
            who(self.who.as_deref())?,
        ))
    }
}

fn who(given: Option<&str>) -> Result<Who, Problem> {
    Who::parse(given.unwrap_or(DEFAULT_WHO)).map_err(|e| bad("who", e.rule(), e.to_string()))
}

fn bad(parameter: &str, rule: &'static str, detail: String) -> Problem {
    Problem::new(
        StatusCode::BAD_REQUEST,
        "invalid-deletion",
        "Invalid deletion request",
        detail,
    )
    .with("parameter", parameter)
    .with("rule", rule)
}

/// `DELETE /v1/runs/{id}[?conversation=true][&who=…]`.
pub async fn delete_run(
    State(daemon): State<Arc<Daemon>>,
    UrlPath(id): UrlPath<String>,
    Query(query): Query<DeleteQuery>,
) -> Result<Response, Problem> {
    let request = query.parse(&id)?;
    execute(&daemon, request).await
}

/// `POST /v1/prune?older_than=30d[&who=…]`.
pub async fn prune(
    State(daemon): State<Arc<Daemon>>,
    Query(query): Query<PruneQuery>,
) -> Result<Response, Problem> {
    let request = query.parse(now_ms())?;
    execute(&daemon, request).await
}

async fn execute(daemon: &Daemon, request: DeletionRequest) -> Result<Response, Problem> {
    // No admission while the store deletes.
    let _admission = daemon.admission.lock().await;
    if let DeletionTarget::Run(id) | DeletionTarget::Conversation(id) = request.target()
        && daemon.engine.live_run(id.as_str()).is_some()
    {
        return Err(refused(&DeleteError::Live { run_id: id.clone() }));
    }
    // With `--nats`, JetStream is the history every host reads: it is
    // deleted there first (a refusal there deletes nothing anywhere), then
    // from this host's copy, which may not hold the runs at all.
    let shared = match &daemon.nats {
        Some(stream) => Some(
            stream
                .delete_runs(&request)
                .await
                .map_err(|e| refused(&e))?,
        ),
        None => None,
    };
    let journal = Arc::clone(&daemon.journal);
    let local = tokio::task::spawn_blocking(move || journal.delete_runs(&request))
        .await
        .map_err(Problem::journal)?;
    let tombstones = match (shared, local) {
        (Some(shared), Ok(_) | Err(DeleteError::NotFound { .. })) => shared,
        (_, Err(e)) => return Err(refused(&e)),
        (None, Ok(local)) => local,
    };
    Ok(json_response(StatusCode::OK, &answer(&tombstones)))
}

/// `{"deleted": [tombstone…]}`.
fn answer(tombstones: &[Tombstone]) -> Value {
    json!({ "deleted": tombstones.iter().map(Tombstone::to_json).collect::<Vec<_>>() })
}

/// The problem of a refused or failed deletion.
fn refused(e: &DeleteError) -> Problem {
    let conflict = |run_id: &RunId| {
        Problem::new(
            StatusCode::CONFLICT,
            "deletion-refused",
            "The deletion is refused",
            e.to_string(),
        )
        .with("rule", e.rule())
        .with("run_id", run_id.as_str())
    };
    match e {
        DeleteError::Live { run_id } => conflict(run_id),
        DeleteError::Dependents { run_id, dependents } => conflict(run_id).with(
            "dependents",
            dependents.iter().map(RunId::as_str).collect::<Vec<_>>(),
        ),
        DeleteError::NotFound { run_id } => Problem::unknown_run(run_id.as_str()),
        DeleteError::InvalidWho { .. } => bad("who", e.rule(), e.to_string()),
        DeleteError::Reclaim { deleted, .. } => Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "deletion-not-reclaimed",
            "Deleted, but the freed pages were not reclaimed",
            e.to_string(),
        )
        .with("deleted", answer(deleted)["deleted"].clone()),
        e => Problem::journal(e),
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
