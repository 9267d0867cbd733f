//! The run routes: `POST /v1/runs` (a scenario becomes a run of the
//! daemon's one engine), `GET /v1/runs`, `GET /v1/runs/{id}` and
//! `POST /v1/runs/{id}/cancel`, and the follow-ups of a run:
//! `POST /v1/runs/{id}/messages` and `POST /v1/runs/{id}/compact`. Every
//! refusal is a typed problem naming the scenario member, the rule or the
//! bound.

use super::chat_runs;
use super::factory::{HostParts, RunPlan};
use super::problem::Problem;
use super::reservation::{Reservation, run_exists, shutting_down};
use super::{Daemon, json_response, read_body};
use axum::body::Body;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use keel_engine::{LiveRun, RunHandle, RunRequest, StartError};
use keel_eventlog::{Durability, SubscriptionBounds};
use keel_message::RunId;
use keel_observers::conversation::{self, Continuation, ContinueError, StoredInputError};
use keel_observers::{RunSummary, RunTotals};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::sync::Arc;

/// `POST /v1/runs`: the factory turns the body into a run.
pub async fn create_run(
    State(daemon): State<Arc<Daemon>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, Problem> {
    if daemon.shutting_down() {
        return Err(shutting_down());
    }
    let text = read_body(&headers, body).await?;
    let plan = daemon.factory.posted(&text)?;
    conversation::check_stored_input(None, plan.messages())
        .map_err(|e| stored_input_problem(&e))?;
    let run_id = plan.run_id().cloned().unwrap_or_else(RunId::generate);
    chat_runs::refuse_reserved(&run_id)?;
    let request = plan.request(run_id, plan.messages().to_vec(), &daemon.host_parts())?;
    admit(&daemon, plan.as_ref(), request).await
}

/// Starts `request` and answers 201 once its `run.started` is committed.
pub(super) async fn admit(
    daemon: &Daemon,
    plan: &dyn RunPlan,
    request: RunRequest,
) -> Result<Response, Problem> {
    let run_id = request.run_id().clone();
    admit_run(daemon, plan, request).await?;
    Ok(created(run_id.as_str()))
}

/// Admits `request` (a live-run slot and its id claimed in the journal:
/// [`Reservation::take`]), then lets the plan prepare it (tool servers
/// start: [`RunPlan::prepare`]), then starts the run, and returns once its
/// `run.started` is committed and journaled (what a 201 promises;
/// `POST /v1/chat` then streams it). Nothing is started for a refused run;
/// a run refused after its admission gives its slot and its id back.
pub(super) async fn admit_run(
    daemon: &Daemon,
    plan: &dyn RunPlan,
    request: RunRequest,
) -> Result<(), Problem> {
    let run_id = request.run_id().clone();
    let mut reservation = Reservation::take(daemon, run_id.as_str()).await?;
    let host = daemon.host_parts();
    let started = match plan.prepare(request, &host).await {
        Ok(request) => daemon.engine.start(request).map_err(|e| start_problem(&e)),
        Err(problem) => Err(problem),
    };
    let handle = match started {
        Ok(handle) => handle,
        Err(problem) => {
            reservation.release().await;
            return Err(problem);
        }
    };
    reservation.started();
    if !began(handle).await {
        reservation.release().await;
        return Err(cancelled_before_it_began(daemon, run_id.as_str()));
    }
    drop(reservation);
    journaled(daemon, run_id.as_str()).await
}

/// How long a 201 waits for the journal to hold the run's `run.started`.
const JOURNALED_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Waits until the journal holds the run, so a 201 names a run that a
/// crash right after it cannot lose (recovery then closes it). Past
/// [`JOURNALED_WAIT`] the journal is failing: the run is failing with it,
/// and the 201 still names a live run.
async fn journaled(daemon: &Daemon, id: &str) -> Result<(), Problem> {
    let until = tokio::time::Instant::now() + JOURNALED_WAIT;
    loop {
        let lookup = id.to_owned();
        if daemon.read(move |r| r.run_status(&lookup)).await?.is_some()
            || tokio::time::Instant::now() >= until
        {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
}

/// `POST /v1/runs/{id}/messages`: a follow-up run continuing the completed
/// run `id`. The body is what the factory takes for `POST /v1/runs` (same
/// bounds and problems): its plan runs the follow-up, and its messages are
/// the new messages, appended to `id`'s history as rebuilt from the journal.
pub async fn continue_run(
    State(daemon): State<Arc<Daemon>>,
    UrlPath(id): UrlPath<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, Problem> {
    follow_up_route(&daemon, id, headers, body, FollowUp::Messages).await
}

/// `POST /v1/runs/{id}/compact`: a compaction-only run continuing the
/// completed run `id` (`RunRequest::compaction_only`): one turn summarizing
/// `id`'s history as its plan's `limits.context` says (the defaults over an
/// unbounded window without one); the conversation's next run continues
/// from the compacted history. The body is as for `/messages`; its
/// messages are not used. Answered as `/messages` is: 201 and the run id.
pub async fn compact_run(
    State(daemon): State<Arc<Daemon>>,
    UrlPath(id): UrlPath<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, Problem> {
    follow_up_route(&daemon, id, headers, body, FollowUp::Compaction).await
}

/// What a follow-up route adds to the run it continues.
#[derive(Clone, Copy, PartialEq, Eq)]
enum FollowUp {
    /// The body's messages, then a run as its plan says.
    Messages,
    /// Nothing: a compaction-only run.
    Compaction,
}

async fn follow_up_route(
    daemon: &Daemon,
    id: String,
    headers: HeaderMap,
    body: Body,
    kind: FollowUp,
) -> Result<Response, Problem> {
    if daemon.shutting_down() {
        return Err(shutting_down());
    }
    let text = read_body(&headers, body).await?;
    let plan = daemon.factory.posted(&text)?;
    if daemon.engine.live_run(&id).is_some() {
        return Err(not_continuable(&id, "running"));
    }
    let run_id = plan.run_id().cloned().unwrap_or_else(RunId::generate);
    chat_runs::refuse_reserved(&run_id)?;
    let new_messages = match kind {
        FollowUp::Messages => plan.messages().to_vec(),
        FollowUp::Compaction => Vec::new(),
    };
    let continuation = {
        let reader = Arc::clone(&daemon.reader);
        let limits = daemon.message_limits().clone();
        let (previous, new_run) = (id.clone(), run_id.clone());
        tokio::task::spawn_blocking(move || {
            conversation::continuation(&reader, &previous, &new_messages, &new_run, &limits)
        })
        .await
        .map_err(Problem::journal)?
        .map_err(|e| continue_problem(&id, &e))?
    };
    conversation::check_stored_input(Some(&continuation.reference), continuation.new_messages())
        .map_err(|e| stored_input_problem(&e))?;
    let request = follow_up(plan.as_ref(), run_id, &daemon.host_parts(), continuation)?;
    let request = match kind {
        FollowUp::Messages => request,
        FollowUp::Compaction => request.compaction_only(),
    };
    admit(daemon, plan.as_ref(), request).await
}

/// A follow-up run: the plan's run, starting from `continuation` (the
/// earlier run's history plus the new messages), recording the earlier
/// run's history by reference and the new messages in full.
pub(super) fn follow_up(
    plan: &dyn RunPlan,
    run_id: RunId,
    host: &HostParts,
    continuation: Continuation,
) -> Result<RunRequest, Problem> {
    let request = plan.request(run_id, continuation.history, host)?;
    Ok(request.inherits(continuation.reference, continuation.inherited))
}

/// 413 for input over [`conversation::MAX_STORED_INPUT_BYTES`]: the bound
/// and the size, never the content.
pub(super) fn stored_input_problem(e: &StoredInputError) -> Problem {
    match e {
        StoredInputError::TooLarge { bytes, max } => Problem::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "input-too-large",
            "The run's input is too large to store",
            e.to_string(),
        )
        .with("max_bytes", *max)
        .with("bytes", *bytes),
        StoredInputError::Payload(p) => invalid(p.to_string(), "messages"),
    }
}

fn not_continuable(id: &str, status: &str) -> Problem {
    Problem::new(
        StatusCode::CONFLICT,
        "run-not-continuable",
        "The run cannot be continued",
        format!(
            "the run is {status}; only a completed run can be continued (rule run.continuable)"
        ),
    )
    .with("run_id", id)
    .with("status", status)
}

pub(super) fn continue_problem(id: &str, e: &ContinueError) -> Problem {
    match e {
        ContinueError::UnknownRun { .. } => Problem::unknown_run(id),
        ContinueError::NotContinuable { status, .. } => not_continuable(id, status.as_str()),
        ContinueError::Message(m) => invalid(m.to_string(), "messages"),
        ContinueError::Journal(j) => Problem::journal(j),
        e @ (ContinueError::History { .. } | ContinueError::Decode { .. }) => Problem::new(
            StatusCode::CONFLICT,
            "run-not-continuable",
            "The run cannot be continued",
            e.to_string(),
        )
        .with("run_id", id),
    }
}

/// Whether the run committed its first event (`run.started`): a run
/// cancelled before its task first ran (by a shutdown that began right
/// after the admission) commits nothing, and must not be answered 201.
///
/// Committed, not durable: this only tells a run that began from one that
/// never did. Durability is [`journaled`]'s, which waits for the journal
/// itself and, unlike a durable subscription, still answers 201 for a live
/// run whose journal is failing (a durable subscription would end without
/// an event and turn that into a 409 claiming the run never began).
async fn began(handle: RunHandle) -> bool {
    let log = handle.log().clone();
    let bounds = SubscriptionBounds {
        durability: Durability::Committed,
        ..SubscriptionBounds::default()
    };
    let Ok(mut sub) = log.subscribe(0, bounds) else {
        return log.stats().last_seq > 0;
    };
    tokio::select! {
        biased;
        // Any committed event means it began: the first item is `Evicted`
        // when the run committed past a small retention before this
        // subscription read its replay.
        first = sub.recv() => matches!(first, Some(Ok(_))) || log.stats().last_seq > 0,
        // Dropping the handle detaches the run; joining ends with it.
        _ = handle.join() => log.stats().last_seq > 0,
    }
}

fn cancelled_before_it_began(daemon: &Daemon, id: &str) -> Problem {
    if daemon.shutting_down() {
        return shutting_down().with("run_id", id);
    }
    Problem::new(
        StatusCode::CONFLICT,
        "run-ended",
        "The run ended before it began",
        "the run was cancelled before its first event; nothing was recorded",
    )
    .with("run_id", id)
}

fn created(id: &str) -> Response {
    let mut response = json_response(StatusCode::CREATED, &json!({ "run_id": id }));
    if let Ok(location) = HeaderValue::from_str(&format!("/v1/runs/{id}")) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    response
}

pub(crate) fn invalid(detail: impl Into<String>, path: &str) -> Problem {
    Problem::new(
        StatusCode::BAD_REQUEST,
        "invalid-scenario",
        "Invalid scenario",
        detail,
    )
    .with("path", path)
}

fn internal(detail: impl Into<String>) -> Problem {
    Problem::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal",
        "Internal error",
        detail,
    )
}

/// 403 for a provider the daemon does not run for this client.
pub(crate) fn provider_not_allowed() -> Problem {
    Problem::new(
        StatusCode::FORBIDDEN,
        "provider-not-allowed",
        "Provider not allowed",
        "this daemon runs network providers only as listed with --allow-provider TYPE,KEY_ENV[,BASE_URL]",
    )
    .with("path", "provider")
}

/// `$.history[i]…` (the engine's path) as the scenario's `messages[i]…`.
fn history_path(path: &str) -> String {
    match path.strip_prefix("$.history") {
        Some(rest) => format!("messages{rest}"),
        None => "messages".to_owned(),
    }
}

/// Every way the engine refuses a run, as a problem: 503 shutting down,
/// 409 a live id, 400 naming the scenario member and the rule, 500 for
/// what is the daemon's own fault.
fn start_problem(e: &StartError) -> Problem {
    let rule = |p: Problem, rule: &'static str| p.with("rule", rule);
    match e {
        StartError::ShuttingDown => shutting_down(),
        StartError::DuplicateRun { run_id } => run_exists(run_id.as_str()),
        StartError::InvalidLimit(l) => rule(
            // The engine's own field name: what a host's run factory built
            // from (a scenario's loader refuses its own limits first, by the
            // same rules, naming the scenario member).
            invalid(e.to_string(), &format!("limits.{}", l.field())),
            "engine.limits",
        ),
        StartError::DuplicateTool { .. } => {
            rule(invalid(e.to_string(), "tools"), "run.unique_tools")
        }
        StartError::ApprovalWithoutHandler { .. } => {
            rule(invalid(e.to_string(), "tools"), "run.approval_handler")
        }
        StartError::UnknownProvider { .. } => {
            rule(invalid(e.to_string(), "provider"), "run.provider_known")
        }
        StartError::NoProvider { .. } => {
            rule(invalid(e.to_string(), "provider"), "run.provider_required")
        }
        StartError::EmptyHistory => {
            rule(invalid(e.to_string(), "messages"), "run.history_nonempty")
        }
        StartError::InvalidHistory(m) => {
            invalid(e.to_string(), &history_path(m.path())).with("rule", m.kind().rule())
        }
        // The daemon's log configuration (checked at startup), no runtime,
        // or a refusal this daemon does not know yet.
        _ => internal(e.to_string()),
    }
}

fn summary_json(s: &RunSummary, live: bool) -> Value {
    json!({
        "run_id": s.run_id,
        "status": s.status.as_str(),
        "last_seq": s.last_seq,
        "started_ts": s.started_ts,
        "updated_ts": s.updated_ts,
        "live": live,
    })
}

/// A live run: `running`, its seq from its log, its timestamps from the
/// journal row (which exists from `run.started` on: a posted run is
/// answered once the journal holds it; `null` before).
fn live_json(run: &LiveRun, stored: Option<&RunSummary>) -> Value {
    json!({
        "run_id": run.run_id().as_str(),
        "status": "running",
        "last_seq": run.log().stats().last_seq,
        "started_ts": stored.map(|s| s.started_ts),
        "updated_ts": stored.map(|s| s.updated_ts),
        "live": true,
    })
}

/// Adds `turns` and `usage` (from the journal's totals; zero for a run
/// with none stored yet).
fn with_totals(mut entry: Value, totals: Option<&RunTotals>) -> Value {
    let t = totals.copied().unwrap_or_default();
    if let Some(map) = entry.as_object_mut() {
        map.insert("turns".to_owned(), json!(t.turns));
        map.insert(
            "usage".to_owned(),
            json!({ "input_tokens": t.input_tokens, "output_tokens": t.output_tokens }),
        );
    }
    entry
}

pub use super::run_list::{DEFAULT_PAGE_RUNS, ListQuery, MAX_PAGE_RUNS};

/// `GET /v1/runs?limit=N&after=CURSOR&status=S&conversation=RUN&since=T`:
/// a page of the journal's runs in its order (live ones as live) that pass
/// the filters, each with its turns and usage, and `next`, the cursor of
/// the page after it (`null` on the last page). The journal reads the page
/// from an index at its cursor ([`keel_observers::JournalReader::runs_page`]):
/// its cost does not grow with the store. The last page also lists the live
/// runs not journaled yet, when no filter but `status=running` is set.
pub async fn list_runs(
    State(daemon): State<Arc<Daemon>>,
    Query(query): Query<ListQuery>,
) -> Result<Response, Problem> {
    let page = query.parse()?;
    let journal_query = page.query().clone();
    let stored = daemon.read(move |r| r.runs_page(&journal_query)).await?;
    let next = stored.next.as_ref().map(|c| page.next(c));
    let mut runs: Vec<Value> = Vec::with_capacity(stored.runs.len());
    for listed in &stored.runs {
        let s = &listed.summary;
        // A live run may end (and be journaled) between the two looks.
        let entry = match daemon.engine.live_run(s.run_id.as_str()) {
            Some(run) => live_json(&run, Some(s)),
            None => summary_json(s, false),
        };
        runs.push(with_totals(entry, Some(&listed.totals)));
    }
    if next.is_none() && page.lists_unjournaled_live_runs() {
        runs.extend(unjournaled_live_runs(&daemon).await?);
    }
    Ok(json_response(
        StatusCode::OK,
        &json!({ "runs": runs, "next": next }),
    ))
}

/// The live runs the journal does not hold yet (their `run.started` is not
/// committed to it): at most the daemon's live runs, each looked up by id.
async fn unjournaled_live_runs(daemon: &Daemon) -> Result<Vec<Value>, Problem> {
    let live: Vec<String> = daemon
        .engine
        .live_run_ids()
        .iter()
        .map(|id| id.as_str().to_owned())
        .collect();
    let lookup = live.clone();
    let stored: HashSet<String> = daemon
        .read(move |r| {
            let mut found = HashSet::new();
            for id in &lookup {
                if r.run_status(id)?.is_some() {
                    found.insert(id.clone());
                }
            }
            Ok(found)
        })
        .await?;
    let mut out = Vec::new();
    for id in live.iter().filter(|id| !stored.contains(id.as_str())) {
        if let Some(run) = daemon.engine.live_run(id) {
            out.push(with_totals(live_json(&run, None), None));
        }
    }
    Ok(out)
}

/// `GET /v1/runs/{id}`.
pub async fn run_status(
    State(daemon): State<Arc<Daemon>>,
    UrlPath(id): UrlPath<String>,
) -> Result<Response, Problem> {
    let live = daemon.engine.live_run(&id);
    let lookup = id.clone();
    let stored = daemon.read(move |r| r.run_status(&lookup)).await?;
    match (live, stored) {
        (Some(run), s) => Ok(json_response(StatusCode::OK, &live_json(&run, s.as_ref()))),
        (None, Some(s)) => Ok(json_response(StatusCode::OK, &summary_json(&s, false))),
        (None, None) => Err(Problem::unknown_run(&id)),
    }
}

/// `POST /v1/runs/{id}/cancel`.
pub async fn cancel_run(
    State(daemon): State<Arc<Daemon>>,
    UrlPath(id): UrlPath<String>,
) -> Result<Response, Problem> {
    if let Some(run) = daemon.engine.live_run(&id) {
        run.canceller().cancel();
        return Ok(json_response(
            StatusCode::ACCEPTED,
            &json!({ "run_id": id, "status": "cancelling" }),
        ));
    }
    let lookup = id.clone();
    match daemon.read(move |r| r.run_status(&lookup)).await? {
        Some(s) => Err(Problem::new(
            StatusCode::CONFLICT,
            "run-ended",
            "The run is not live",
            format!("the run is {} and not running in this daemon", s.status),
        )
        .with("run_id", id.as_str())
        .with("status", s.status.as_str())),
        None => Err(Problem::unknown_run(&id)),
    }
}
