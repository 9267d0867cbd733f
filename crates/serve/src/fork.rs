//! The fork routes: `POST /v1/runs/{id}/fork?at=SEQ` starts a run from
//! run `id`'s history as its log rebuilds it through seq `at` (a fork
//! point, rule `fork.point`), plus the body's messages; `GET
//! /v1/runs/{id}/tree` lists the conversation `id` belongs to (the
//! viewer's tree). The run forked is only read.

use super::problem::Problem;
use super::runs::{admit, invalid, stored_input_problem};
use super::{Daemon, chat_runs, json_response, read_body};
use crate::factory::{HostParts, RunPlan};
use crate::reservation::shutting_down;
use axum::body::Body;
use axum::extract::{Path as UrlPath, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use keel_engine::RunRequest;
use keel_message::RunId;
use keel_observers::conversation::{self, Fork, ForkError, Origin};
use serde_json::{Value, json};
use std::sync::Arc;

/// Longest `at` accepted, in digits (`u64::MAX` has 20).
const MAX_AT_DIGITS: usize = 20;

/// `POST /v1/runs/{id}/fork?at=SEQ`: the body is what the factory takes
/// for `POST /v1/runs` (same bounds and problems); its plan runs the fork
/// and its messages are the new messages, appended to `id`'s history
/// through `SEQ`. 201 and the new run's id, as `/messages` answers.
pub async fn fork_run(
    State(daemon): State<Arc<Daemon>>,
    UrlPath(id): UrlPath<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, Problem> {
    if daemon.shutting_down() {
        return Err(shutting_down());
    }
    let at = fork_seq(query.as_deref())?;
    let text = read_body(&headers, body).await?;
    let plan = daemon.factory.posted(&text)?;
    let run_id = plan.run_id().cloned().unwrap_or_else(RunId::generate);
    chat_runs::refuse_reserved(&run_id)?;
    let fork = {
        let reader = Arc::clone(&daemon.reader);
        let limits = daemon.message_limits().clone();
        let (parent, follow_up, new_run) = (id.clone(), plan.messages().to_vec(), run_id.clone());
        tokio::task::spawn_blocking(move || {
            conversation::fork(&reader, &parent, at, &follow_up, &new_run, &limits)
        })
        .await
        .map_err(Problem::journal)?
        .map_err(|e| fork_problem(&id, at, &e))?
    };
    conversation::check_stored_input(Some(&fork.reference), fork.new_messages())
        .map_err(|e| stored_input_problem(&e))?;
    let request = fork_request(plan.as_ref(), run_id, &daemon.host_parts(), fork)?;
    admit(&daemon, plan.as_ref(), request).await
}

/// A fork: the plan's run, starting from `fork` (the parent's history
/// through the seq plus the new messages), recording `forked_from` and
/// the parent's history by reference.
fn fork_request(
    plan: &dyn RunPlan,
    run_id: RunId,
    host: &HostParts,
    fork: Fork,
) -> Result<RunRequest, Problem> {
    let request = plan.request(run_id, fork.history, host)?;
    Ok(request.forks(fork.reference, fork.inherited))
}

/// The `at` query parameter: the parent's seq, decimal, at least 1; 400
/// naming rule `fork.at` when it is missing, repeated or not a number.
fn fork_seq(query: Option<&str>) -> Result<u64, Problem> {
    let mut values = query
        .unwrap_or_default()
        .split('&')
        .filter_map(|pair| pair.strip_prefix("at="));
    let value = match (values.next(), values.next()) {
        (Some(value), None) => value,
        _ => return Err(bad_at("the query must give `at` once")),
    };
    let digits = !value.is_empty()
        && value.len() <= MAX_AT_DIGITS
        && value.bytes().all(|b| b.is_ascii_digit());
    match value.parse::<u64>() {
        Ok(seq) if digits && seq >= 1 => Ok(seq),
        _ => Err(bad_at(&format!(
            "`at` must be a seq of the run, a decimal number from 1, of at most {MAX_AT_DIGITS} digits; this one is {} bytes",
            value.len()
        ))),
    }
}

fn bad_at(detail: &str) -> Problem {
    Problem::new(
        StatusCode::BAD_REQUEST,
        "invalid-fork-point",
        "Invalid fork point",
        format!("{detail} (rule fork.at)"),
    )
    .with("rule", "fork.at")
}

/// 404 for an unknown run, 409 naming the rule for a seq that is not a
/// fork point or a run that does not rebuild, 400 for a bad message.
fn fork_problem(id: &str, at: u64, e: &ForkError) -> Problem {
    match e {
        ForkError::UnknownRun { .. } => Problem::unknown_run(id),
        ForkError::Point { source, .. } => Problem::new(
            StatusCode::CONFLICT,
            "fork-point-refused",
            "The run cannot be forked there",
            source.to_string(),
        )
        .with("run_id", id)
        .with("at", at)
        .with("rule", source.rule()),
        ForkError::Message(m) => invalid(m.to_string(), "messages"),
        ForkError::Journal(j) => Problem::journal(j),
        e => Problem::new(
            StatusCode::CONFLICT,
            "run-not-forkable",
            "The run cannot be forked",
            e.to_string(),
        )
        .with("run_id", id),
    }
}

/// `GET /v1/runs/{id}/tree`: `{"runs": [{"run_id", "status", "depth",
/// "continues"?, "forked_from"?: {"run_id", "seq"}, "parent"?: {"run_id",
/// "call_id"}}], "truncated"}`, the root first, each run followed by the
/// runs that come from it (continuations, forks and sub-runs: a sub-run
/// has `parent`, as its `run.started` does).
pub async fn run_tree(
    State(daemon): State<Arc<Daemon>>,
    UrlPath(id): UrlPath<String>,
) -> Result<Response, Problem> {
    let lookup = id.clone();
    let tree = daemon
        .read(move |r| conversation::tree(r, &lookup))
        .await?
        .ok_or_else(|| Problem::unknown_run(&id))?;
    let runs: Vec<Value> = tree
        .nodes
        .iter()
        .map(|node| {
            let mut run = json!({
                "run_id": node.run.run_id.as_str(),
                "status": node.run.status.as_str(),
                "depth": node.depth,
            });
            match &node.origin {
                Origin::Root => {}
                Origin::Continues(parent) => run["continues"] = json!(parent.as_str()),
                Origin::Fork(fork) => {
                    run["forked_from"] = json!({"run_id": fork.run_id.as_str(), "seq": fork.seq});
                }
                Origin::SubRun(link) => {
                    run["parent"] =
                        json!({"run_id": link.run_id.as_str(), "call_id": link.call_id.as_str()});
                }
            }
            run
        })
        .collect();
    Ok(json_response(
        StatusCode::OK,
        &json!({ "runs": runs, "truncated": tree.truncated }),
    ))
}
