//! `keel serve`: the HTTP daemon.
//!
//! One process hosts many runs. Each `POST /v1/runs` builds an engine for
//! its scenario (the scenario chooses the provider and tools), with the
//! daemon's one [`SqliteJournal`] as the required observer, and keeps the
//! run's log in a map of live runs until the run has ended and its
//! terminal is journaled. Readers see one history: a live run's events
//! come from its log, with any prefix the log no longer retains read from
//! the journal; a finished run's come from the journal. The contract
//! (routes, cursors, problems, bounds) is
//! `docs/rfc/implemented/2026-11-30-http-contract.md`.
//!
//! Bounds: request bodies at most [`MAX_BODY_BYTES`] (413 beyond);
//! request heads as hyper's HTTP/1 defaults (at most 100 headers and about
//! 400 KiB of buffered head, else the connection is refused); SSE
//! subscriptions [`events::DEFAULT_BOUNDS`] per connection.
//!
//! With `--nats URL`, `GET /v1/runs/{id}/events` (SSE) of a run that is
//! neither live here nor in this daemon's journal is streamed from NATS
//! JetStream (history, then live), with the same cursors, framing and
//! problems; the other routes stay local.

pub mod auth;
pub mod events;
pub mod problem;
pub mod providers;

use crate::args::ServeArgs;
use crate::error::{CliError, EXIT_OK};
use crate::scenario::{self, Scenario, ScenarioError};
use axum::Router;
use axum::body::Body;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use keel_engine::{
    Engine, InteractionDecision, InteractionFuture, InteractionHandler, InteractionRequest,
    RunCanceller, RunRequest, Tool,
};
use keel_eventlog::{LogConfig, RunLog};
use keel_observers::{JournalConfig, JournalReader, RequiredObserver, RunSummary, SqliteJournal};
use problem::Problem;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::{oneshot, watch};

/// Largest request body, in bytes (1 MiB).
pub const MAX_BODY_BYTES: usize = 1 << 20;
/// How long an answer waits for its question to be parked.
const ANSWER_WAIT: Duration = Duration::from_secs(1);
/// The provider name a run's scenario provider is registered under.
const PROVIDER: &str = "scenario";
/// How long shutdown waits for cancelled runs to journal their terminals.
const SHUTDOWN_RUNS: Duration = Duration::from_secs(10);
/// How long shutdown then waits for open connections to finish.
const SHUTDOWN_CONNECTIONS: Duration = Duration::from_secs(5);

/// A run the daemon is executing.
#[derive(Debug, Clone)]
pub struct LiveRun {
    log: RunLog,
    canceller: RunCanceller,
    done: watch::Receiver<bool>,
}

type Pending = Arc<Mutex<HashMap<(String, String), oneshot::Sender<InteractionDecision>>>>;

/// The daemon's shared state.
#[derive(Debug)]
pub struct Daemon {
    journal: Arc<SqliteJournal>,
    reader: Arc<JournalReader>,
    live: Mutex<HashMap<String, LiveRun>>,
    pending: Pending,
    shutting_down: AtomicBool,
    token: Option<Vec<u8>>,
    log_config: LogConfig,
    /// `--nats`: where runs this daemon does not have are read from.
    nats: Option<keel_observers::JetStreamHandle>,
    /// `--allow-provider`: the network providers posted scenarios may use.
    providers: Vec<providers::ProviderAllowance>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Daemon {
    fn live(&self, run_id: &str) -> Option<LiveRun> {
        lock(&self.live).get(run_id).cloned()
    }

    fn shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::SeqCst)
    }

    /// Runs a journal read on the blocking pool.
    async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&JournalReader) -> Result<T, keel_observers::JournalError> + Send + 'static,
    ) -> Result<T, Problem> {
        let reader = Arc::clone(&self.reader);
        match tokio::task::spawn_blocking(move || f(&reader)).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(Problem::journal(e)),
            Err(e) => Err(Problem::journal(e)),
        }
    }
}

/// Parks approval requests until `POST .../interactions/{id}` answers
/// them. A cancelled run drops its future, which removes the entry.
struct Approvals {
    pending: Pending,
}

impl std::fmt::Debug for Approvals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Approvals").finish_non_exhaustive()
    }
}

struct PendingGuard {
    pending: Pending,
    key: (String, String),
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
            let decision = rx.await.unwrap_or(InteractionDecision::Denied);
            drop(guard);
            Ok(decision)
        })
    }
}

/// Runs `keel serve` until SIGTERM or Ctrl-C; returns the exit code.
pub fn serve(args: ServeArgs) -> Result<i32, CliError> {
    let token = read_token(&args)?;
    if token.is_none() && !args.listen.ip().is_loopback() {
        return Err(CliError::bad_input(format!(
            "--listen {}: a non-loopback address needs a bearer token (--token-file FILE or KEEL_TOKEN)",
            args.listen
        )));
    }
    let mut log_config = LogConfig::default();
    if let Some(n) = args.log_max_events {
        log_config.max_events = n;
    }
    log_config
        .validate()
        .map_err(|e| CliError::bad_input(format!("--log-max-events: {e}")))?;
    let providers = args
        .allow_provider
        .iter()
        .map(|a| providers::ProviderAllowance::parse(a))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| CliError::bad_input(e.to_string()))?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("keel-serve")
        .build()
        .map_err(|e| CliError::failure(format!("cannot start the async runtime: {e}")))?;
    let result = rt.block_on(serve_async(args, token, log_config, providers));
    rt.shutdown_timeout(Duration::from_secs(1));
    result
}

fn read_token(args: &ServeArgs) -> Result<Option<Vec<u8>>, CliError> {
    let token = match &args.token_file {
        Some(file) => {
            let text = std::fs::read_to_string(file).map_err(|e| {
                CliError::bad_input(format!("--token-file {}: {e}", file.display()))
            })?;
            Some((
                text.trim_end_matches(['\r', '\n']).to_owned(),
                "--token-file",
            ))
        }
        None => std::env::var("KEEL_TOKEN").ok().map(|t| (t, "KEEL_TOKEN")),
    };
    match token {
        None => Ok(None),
        Some((t, from)) => {
            if t.is_empty() || t.bytes().any(|b| !(0x21..=0x7e).contains(&b)) {
                return Err(CliError::bad_input(format!(
                    "{from}: the token must be non-empty printable ASCII without spaces"
                )));
            }
            Ok(Some(t.into_bytes()))
        }
    }
}

async fn serve_async(
    args: ServeArgs,
    token: Option<Vec<u8>>,
    log_config: LogConfig,
    providers: Vec<providers::ProviderAllowance>,
) -> Result<i32, CliError> {
    let db = args.db.db.clone();
    let journal = Arc::new(SqliteJournal::open(&db, JournalConfig::default())?);
    let reader = Arc::new(journal.reader()?);
    let nats = match &args.nats {
        Some(url) => Some(crate::jetstream::connect(url).await?),
        None => None,
    };
    let daemon = Arc::new(Daemon {
        journal,
        reader,
        live: Mutex::new(HashMap::new()),
        pending: Arc::new(Mutex::new(HashMap::new())),
        shutting_down: AtomicBool::new(false),
        token,
        log_config,
        nats,
        providers,
    });
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| CliError::bad_input(format!("--listen {}: {e}", args.listen)))?;
    let addr: SocketAddr = listener
        .local_addr()
        .map_err(|e| CliError::failure(format!("cannot read the bound address: {e}")))?;
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "listening on http://{addr}");
        let _ = out.flush();
    }

    let app = router(Arc::clone(&daemon));
    let (stop_tx, mut stop_rx) = watch::channel(false);
    let mut stop_seen = stop_rx.clone();
    {
        let daemon = Arc::clone(&daemon);
        tokio::spawn(async move {
            wait_for_signal().await;
            eprintln!("keel: shutting down: cancelling live runs");
            shutdown_runs(&daemon).await;
            let _ = stop_tx.send(true);
        });
    }
    let server = axum::serve(listener, app).with_graceful_shutdown(async move {
        let _ = stop_rx.wait_for(|s| *s).await;
    });
    let mut server = Box::pin(server.into_future());
    tokio::select! {
        r = &mut server => r.map_err(|e| CliError::failure(format!("server: {e}")))?,
        () = async {
            // Graceful shutdown began: give open connections a bounded time.
            let _ = stop_seen.wait_for(|s| *s).await;
            tokio::time::sleep(SHUTDOWN_CONNECTIONS).await;
        } => eprintln!("keel: connections still open after {} s; closing them", SHUTDOWN_CONNECTIONS.as_secs()),
    }
    drop(server);
    let journal = Arc::clone(&daemon.journal);
    drop(daemon);
    match Arc::try_unwrap(journal) {
        Ok(journal) => match tokio::task::spawn_blocking(move || journal.close()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("keel: closing the journal: {e}"),
            Err(e) => eprintln!("keel: closing the journal: {e}"),
        },
        Err(journal) => drop(journal),
    }
    Ok(EXIT_OK)
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(mut term), Ok(mut int)) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
            }
            _ => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Stops taking runs, cancels the live ones and waits (bounded) until each
/// has ended with its terminal journaled.
async fn shutdown_runs(daemon: &Daemon) {
    daemon.shutting_down.store(true, Ordering::SeqCst);
    let live: Vec<LiveRun> = lock(&daemon.live).values().cloned().collect();
    for run in &live {
        run.canceller.cancel();
    }
    let until = tokio::time::Instant::now() + SHUTDOWN_RUNS;
    for mut run in live {
        if tokio::time::timeout_at(until, run.done.wait_for(|d| *d))
            .await
            .is_err()
        {
            eprintln!("keel: a run did not finish closing in time");
            run.log.shutdown();
        }
    }
}

/// The routes, behind the token check.
pub fn router(daemon: Arc<Daemon>) -> Router {
    Router::new()
        .route("/v1/runs", post(create_run).get(list_runs))
        .route("/v1/runs/{id}", get(run_status))
        .route("/v1/runs/{id}/events", get(events::events))
        .route("/v1/runs/{id}/cancel", post(cancel_run))
        .route(
            "/v1/runs/{id}/interactions/{interaction_id}",
            post(answer_interaction),
        )
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&daemon),
            auth::require_token,
        ))
        .with_state(daemon)
}

async fn not_found() -> Problem {
    Problem::new(
        StatusCode::NOT_FOUND,
        "not-found",
        "No such resource",
        "see docs/rfc/implemented/2026-11-30-http-contract.md for the routes",
    )
}

/// Reads a request body of at most [`MAX_BODY_BYTES`] as UTF-8.
async fn read_body(headers: &HeaderMap, body: Body) -> Result<String, Problem> {
    let too_large = || {
        Problem::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body-too-large",
            "Request body too large",
            format!("the body exceeds {MAX_BODY_BYTES} bytes"),
        )
        .with("max_bytes", MAX_BODY_BYTES)
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > MAX_BODY_BYTES as u64) {
        return Err(too_large());
    }
    let bytes = axum::body::to_bytes(body, MAX_BODY_BYTES)
        .await
        .map_err(|_| too_large())?;
    String::from_utf8(bytes.to_vec()).map_err(|e| {
        Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid-body",
            "Request body is not UTF-8",
            format!("invalid UTF-8 at byte {}", e.utf8_error().valid_up_to()),
        )
    })
}

fn scenario_problem(e: &ScenarioError) -> Problem {
    let base = |detail: String| {
        Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid-scenario",
            "Invalid scenario",
            detail,
        )
    };
    match e {
        ScenarioError::Read { source, .. } => base(source.to_string()),
        e @ ScenarioError::TooLarge { .. } => base(e.to_string()),
        ScenarioError::Syntax {
            line,
            column,
            message,
            ..
        } => base(format!("{line}:{column}: invalid JSON: {message}"))
            .with("line", *line)
            .with("column", *column),
        ScenarioError::Shape {
            line,
            column,
            path,
            message,
            ..
        } => base(format!("{line}:{column}: at {path}: {message}"))
            .with("line", *line)
            .with("column", *column)
            .with("path", path.as_str()),
        ScenarioError::Invalid { path, message, .. } => {
            base(format!("at {path}: {message}")).with("path", path.as_str())
        }
    }
}

fn bad_scenario(detail: String) -> Problem {
    Problem::new(
        StatusCode::BAD_REQUEST,
        "invalid-scenario",
        "Invalid scenario",
        detail,
    )
}

fn build_tools(scenario: &Scenario) -> Result<Vec<Arc<dyn Tool>>, Problem> {
    crate::commands::run::scenario_tools(scenario, None).map_err(|(index, e)| {
        bad_scenario(format!("at tools[{index}]: {e}")).with("path", format!("tools[{index}]"))
    })
}

fn json_response(status: StatusCode, value: &Value) -> Response {
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        value.to_string(),
    )
        .into_response()
}

async fn create_run(
    State(daemon): State<Arc<Daemon>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, Problem> {
    if daemon.shutting_down() {
        return Err(shutting_down());
    }
    let text = read_body(&headers, body).await?;
    let scenario =
        scenario::parse(Path::new("request body"), &text).map_err(|e| scenario_problem(&e))?;
    // The same providers as `keel run`: scripted, or a network adapter
    // whose key comes from the daemon's environment (never echoed) — only
    // one the operator allowed, checked before the variable is read, so the
    // answer says nothing about the environment.
    if !providers::permitted(&scenario.provider, &daemon.providers) {
        return Err(Problem::new(
            StatusCode::FORBIDDEN,
            "provider-not-allowed",
            "Provider not allowed",
            "this daemon runs network providers only as listed with --allow-provider TYPE,KEY_ENV[,BASE_URL]",
        )
        .with("path", "provider"));
    }
    let provider =
        crate::commands::run::build_provider(&scenario.provider, Path::new("request body"))
            .map_err(|e| bad_scenario(e.message).with("path", "provider"))?;
    let tools = build_tools(&scenario)?;
    let run_id = match &scenario.run_id {
        Some(id) => id.clone(),
        None => crate::commands::run::new_run_id().map_err(|e| {
            Problem::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "Internal error",
                e.message,
            )
        })?,
    };
    let id = run_id.as_str().to_owned();
    let stored = {
        let id = id.clone();
        daemon.read(move |r| r.run_status(&id)).await?
    };
    let conflict = || {
        Problem::new(
            StatusCode::CONFLICT,
            "run-exists",
            "Run id already used",
            "a live or stored run has this id; give the scenario another run_id, or leave it out",
        )
        .with("run_id", id.as_str())
    };
    if stored.is_some() {
        return Err(conflict());
    }
    let mut builder = Engine::builder()
        .provider(PROVIDER, provider)
        .required_observer(Arc::clone(&daemon.journal) as Arc<dyn RequiredObserver>)
        .allow_metadata(scenario.allow_metadata.clone())
        .limits(scenario.limits.clone())
        .log_config(daemon.log_config.clone())
        .interaction_handler(Arc::new(Approvals {
            pending: Arc::clone(&daemon.pending),
        }));
    for tool in tools {
        builder = builder.tool(tool);
    }
    let engine = builder.build().map_err(|e| bad_scenario(e.to_string()))?;
    let (done_tx, done_rx) = watch::channel(false);
    let handle = {
        let mut live = lock(&daemon.live);
        if live.contains_key(&id) {
            return Err(conflict());
        }
        let handle = engine
            .start(RunRequest {
                run_id: run_id.clone(),
                provider: PROVIDER.to_owned(),
                model: scenario.model.clone(),
                history: scenario.messages.clone(),
            })
            .map_err(|e| bad_scenario(e.to_string()))?;
        live.insert(
            id.clone(),
            LiveRun {
                log: handle.log().clone(),
                canceller: handle.canceller(),
                done: done_rx,
            },
        );
        handle
    };
    {
        let daemon = Arc::clone(&daemon);
        let id = id.clone();
        tokio::spawn(async move {
            let _outcome = handle.join().await;
            // The run's terminal has been offered to the journal; finish
            // the engine (no best-effort observers to drain) and retire
            // the run from the live map: from now on the journal serves it.
            let _ = engine.shutdown(Duration::from_secs(1)).await;
            drop(engine);
            lock(&daemon.live).remove(&id);
            let _ = done_tx.send(true);
        });
    }
    let mut response = json_response(StatusCode::CREATED, &json!({ "run_id": id }));
    if let Ok(location) = HeaderValue::from_str(&format!("/v1/runs/{id}")) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

fn shutting_down() -> Problem {
    Problem::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "shutting-down",
        "The daemon is shutting down",
        "no new runs are taken",
    )
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

fn live_json(run_id: &str, run: &LiveRun) -> Value {
    let stats = run.log.stats();
    json!({
        "run_id": run_id,
        "status": "running",
        "last_seq": stats.last_seq,
        "live": true,
    })
}

async fn list_runs(State(daemon): State<Arc<Daemon>>) -> Result<Response, Problem> {
    let stored = daemon.read(|r| r.runs()).await?;
    let live: HashMap<String, LiveRun> = lock(&daemon.live).clone();
    let mut runs: Vec<Value> = Vec::with_capacity(stored.len() + live.len());
    for s in &stored {
        match live.get(&s.run_id) {
            Some(run) => runs.push(live_json(&s.run_id, run)),
            None => runs.push(summary_json(s, false)),
        }
    }
    for (id, run) in &live {
        if !stored.iter().any(|s| &s.run_id == id) {
            runs.push(live_json(id, run));
        }
    }
    Ok(json_response(StatusCode::OK, &json!({ "runs": runs })))
}

async fn run_status(
    State(daemon): State<Arc<Daemon>>,
    UrlPath(id): UrlPath<String>,
) -> Result<Response, Problem> {
    if let Some(run) = daemon.live(&id) {
        return Ok(json_response(StatusCode::OK, &live_json(&id, &run)));
    }
    let lookup = id.clone();
    match daemon.read(move |r| r.run_status(&lookup)).await? {
        Some(s) => Ok(json_response(StatusCode::OK, &summary_json(&s, false))),
        None => Err(Problem::unknown_run(&id)),
    }
}

async fn cancel_run(
    State(daemon): State<Arc<Daemon>>,
    UrlPath(id): UrlPath<String>,
) -> Result<Response, Problem> {
    if let Some(run) = daemon.live(&id) {
        run.canceller.cancel();
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

async fn answer_interaction(
    State(daemon): State<Arc<Daemon>>,
    UrlPath((id, interaction_id)): UrlPath<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, Problem> {
    let text = read_body(&headers, body).await?;
    let mut de = serde_json::Deserializer::from_str(&text);
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
    let decision = match answer.decision {
        DecisionWire::Approved => InteractionDecision::Approved,
        DecisionWire::Denied => InteractionDecision::Denied,
    };
    // The engine commits `interaction.started` just before it asks the
    // handler, so an answer may arrive a moment before the question is
    // parked: while the run is live, wait for it a little.
    let key = (id.clone(), interaction_id.clone());
    let until = tokio::time::Instant::now() + ANSWER_WAIT;
    let sender = loop {
        let sender = lock(&daemon.pending).remove(&key);
        if sender.is_some() || daemon.live(&id).is_none() || tokio::time::Instant::now() >= until {
            break sender;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let sent = sender.is_some_and(|tx| tx.send(decision).is_ok());
    match sent {
        true => Ok(json_response(
            StatusCode::OK,
            &json!({ "run_id": id, "interaction_id": interaction_id, "decision": decision.as_str() }),
        )),
        false => Err(Problem::new(
            StatusCode::NOT_FOUND,
            "interaction-not-pending",
            "No such pending interaction",
            "no approval with this id is waiting in this run",
        )
        .with("run_id", id.as_str())
        .with("interaction_id", interaction_id.as_str())),
    }
}
