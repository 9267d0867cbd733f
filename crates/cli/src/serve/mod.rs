//! `keel serve`: the HTTP daemon.
//!
//! One process, one [`Engine`]: it is built at startup with the daemon's
//! [`SqliteJournal`] as its required observer, the log retention of
//! `--log-max-events` and the daemon's [`Approvals`] as the default
//! interaction handler. Each `POST /v1/runs` turns its scenario into a
//! [`RunRequest`](keel_engine::RunRequest) with
//! [`launch::run_request`](crate::launch::run_request) (the scenario brings
//! its own provider, tools, limits and metadata allowlist; the daemon adds
//! its approvals and `--approval-timeout-ms`) and starts it on that engine.
//! The daemon keeps no registry of its own: status, list, cancel, answers
//! and event streams look runs up with [`Engine::live_run`], and a run
//! leaves the engine only after its terminal was offered to the journal.
//! Readers see one history: a live run's events come from its log, with
//! any prefix the log no longer retains read from the journal; a finished
//! run's come from the journal. The contract (routes, cursors, problems,
//! bounds) is `docs/rfc/implemented/2026-11-30-http-contract.md`.
//!
//! Bounds: request bodies at most [`MAX_BODY_BYTES`] (413 beyond);
//! request heads as hyper's HTTP/1 defaults (at most 100 headers and about
//! 400 KiB of buffered head, else the connection is refused); SSE
//! subscriptions [`events::DEFAULT_BOUNDS`] per connection; at most
//! `--max-live-runs` runs at once (503 `too-many-live-runs` beyond), each
//! approval unanswered for at most its timeout, so the pending approvals
//! are bounded too. Against hostile clients (issue #22): connection caps
//! at accept, before the token check, that close the oldest connection
//! which never showed the token to make room ([`admission`]); header,
//! body, idle and write timeouts and a small socket send buffer
//! (`conn.rs`, [`timed_io`], [`body_timeout`]); caps on event streams
//! ([`stream_caps`]); a paged `GET /v1/runs`. Every bound is a flag
//! ([`limits`]) and tabled in `docs/SECURITY.md` ("Hostile clients").
//!
//! Shutdown (SIGTERM or Ctrl-C): [`Engine::shutdown`] with
//! `--shutdown-timeout-ms` refuses new runs (503 `shutting-down`, decided
//! under the lock the engine's registry takes, so no run slips past it),
//! cancels every live run and waits while they journal their terminals.
//! Runs whose journal did not get the whole history are named on stderr
//! ("left for recovery") and the exit code is 1; otherwise 0.
//!
//! With `--nats URL`, `GET /v1/runs/{id}/events` (SSE) of a run that is
//! neither live here nor in this daemon's journal is streamed from NATS
//! JetStream (history, then live), with the same cursors, framing and
//! problems; the other routes stay local.

pub mod admission;
pub mod agui;
pub mod approvals;
pub mod auth;
pub mod body_timeout;
pub mod chat;
pub mod chat_runs;
mod conn;
pub mod cross_site;
pub mod events;
pub mod limits;
mod mcp;
pub mod problem;
pub mod providers;
mod recovery;
mod reservation;
pub mod runs;
pub mod sse_data;
pub mod stream_caps;
pub mod timed_io;
pub mod viewer;

use crate::args::ServeArgs;
use crate::error::{CliError, EXIT_FAILED, EXIT_OK};
use crate::launch::Launch;
use approvals::Approvals;
use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use cross_site::{AllowedOrigin, CrossSitePolicy};
use keel_engine::{Engine, EngineShutdown, InteractionHandler, MIN_CLOSING_DEADLINE};
use keel_eventlog::LogConfig;
use keel_observers::{JournalConfig, JournalReader, RequiredObserver, SqliteJournal};
use problem::Problem;
use serde_json::Value;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Largest request body, in bytes (1 MiB).
pub const MAX_BODY_BYTES: usize = 1 << 20;
/// How long shutdown waits for open connections once the runs are done.
const SHUTDOWN_CONNECTIONS: Duration = Duration::from_secs(5);

/// The daemon's bounds and defaults, from the flags.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `--max-live-runs`.
    pub max_live_runs: usize,
    /// `--approval-timeout-ms`: for scenarios that set none.
    pub default_approval_timeout: Duration,
    /// `--shutdown-timeout-ms`.
    pub shutdown_timeout: Duration,
    /// `--log-max-events` and the other log defaults.
    pub log_config: LogConfig,
    /// The connection caps and timeouts (`--max-connections`, …).
    pub connections: limits::ConnectionLimits,
    /// The event stream caps (`--max-streams`, `--max-streams-per-run`).
    pub streams: limits::StreamLimits,
    /// `--mcp`: the MCP servers posted scenarios may use.
    #[cfg(feature = "mcp")]
    pub mcp_servers: Vec<keel_mcp::ServerConfig>,
}

impl Settings {
    /// Checks the flags.
    pub fn from_args(args: &ServeArgs) -> Result<Settings, CliError> {
        let mut log_config = LogConfig::default();
        if let Some(n) = args.log_max_events {
            log_config.max_events = n;
        }
        log_config
            .validate()
            .map_err(|e| CliError::bad_input(format!("--log-max-events: {e}")))?;
        if args.max_live_runs == 0 {
            return Err(CliError::bad_input("--max-live-runs: must be at least 1"));
        }
        if args.approval_timeout_ms == 0 {
            return Err(CliError::bad_input(
                "--approval-timeout-ms: must be at least 1",
            ));
        }
        let floor = MIN_CLOSING_DEADLINE.as_millis();
        if u128::from(args.shutdown_timeout_ms) < floor {
            return Err(CliError::bad_input(format!(
                "--shutdown-timeout-ms: must be at least {floor} (MIN_CLOSING_DEADLINE)"
            )));
        }
        #[cfg(not(feature = "mcp"))]
        if !args.mcp.is_empty() {
            return Err(CliError::bad_input(
                "--mcp: this keel was built without the `mcp` feature",
            ));
        }
        let mut connections = limits::ConnectionLimits::from_args(args)
            .map_err(|e| CliError::bad_input(e.to_string()))?;
        if let Some(open_files) = limits::soft_file_limit()
            && let Some(was) = connections.fit_file_limit(open_files)
        {
            eprintln!(
                "keel: --max-connections {was} lowered to {} to fit the open-file limit {open_files}",
                connections.max_connections()
            );
        }
        Ok(Settings {
            #[cfg(feature = "mcp")]
            mcp_servers: crate::mcp::parse_flags(&args.mcp)
                .map_err(|e| CliError::bad_input(e.to_string()))?,
            max_live_runs: args.max_live_runs,
            default_approval_timeout: Duration::from_millis(args.approval_timeout_ms),
            shutdown_timeout: Duration::from_millis(args.shutdown_timeout_ms),
            log_config,
            connections,
            streams: limits::StreamLimits::from_args(args)
                .map_err(|e| CliError::bad_input(e.to_string()))?,
        })
    }
}

/// The daemon's shared state.
#[derive(Debug)]
pub struct Daemon {
    /// The one engine: every run, and the only registry of live runs.
    engine: Engine,
    journal: Arc<SqliteJournal>,
    reader: Arc<JournalReader>,
    /// The engine's interaction handler (pending approvals).
    approvals: Arc<Approvals>,
    /// One admission at a time (the live-run bound, the id checks).
    admission: tokio::sync::Mutex<()>,
    /// Runs admitted and not started yet (their MCP servers starting).
    reserved: Mutex<reservation::Reserved>,
    token: Option<Vec<u8>>,
    settings: Settings,
    /// `--nats`: where runs this daemon does not have are read from.
    nats: Option<keel_observers::JetStreamHandle>,
    /// `--allow-provider`: the network providers posted scenarios may use.
    providers: Vec<providers::ProviderAllowance>,
    /// `--allow-origin`, `--public-host` and the listener: who may call.
    cross_site: Arc<CrossSitePolicy>,
    /// `--chat-scenario`: the agent `POST /v1/chat` runs.
    chat: Option<Arc<crate::scenario::Scenario>>,
    /// The open event streams (`--max-streams`, `--max-streams-per-run`).
    streams: Arc<stream_caps::StreamCaps>,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Daemon {
    fn shutting_down(&self) -> bool {
        self.engine.is_shutting_down()
    }

    /// What the daemon adds to every posted scenario.
    fn launch(&self) -> Launch<'static> {
        Launch {
            files: None,
            approvals: Arc::clone(&self.approvals) as Arc<dyn InteractionHandler>,
            default_approval_timeout: Some(self.settings.default_approval_timeout),
        }
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

/// Runs `keel serve` until SIGTERM or Ctrl-C; returns the exit code.
pub fn serve(args: ServeArgs) -> Result<i32, CliError> {
    let token = read_token(&args)?;
    if token.is_none() && !args.listen.ip().is_loopback() {
        return Err(CliError::bad_input(format!(
            "--listen {}: a non-loopback address needs a bearer token (--token-file FILE or KEEL_TOKEN)",
            args.listen
        )));
    }
    let settings = Settings::from_args(&args)?;
    let providers = args
        .allow_provider
        .iter()
        .map(|a| providers::ProviderAllowance::parse(a))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| CliError::bad_input(e.to_string()))?;
    let cross_site = cross_site_policy(&args)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("keel-serve")
        .build()
        .map_err(|e| CliError::failure(format!("cannot start the async runtime: {e}")))?;
    let result = rt.block_on(serve_async(args, token, settings, providers, cross_site));
    rt.shutdown_timeout(Duration::from_secs(1));
    result
}

/// The cross-site rules from `--allow-origin`, `--public-host` and the
/// listener's address.
fn cross_site_policy(args: &ServeArgs) -> Result<CrossSitePolicy, CliError> {
    let bad = |e: cross_site::CrossSiteConfigError| CliError::bad_input(e.to_string());
    let origins = args
        .allow_origin
        .iter()
        .map(|o| AllowedOrigin::parse(o))
        .collect::<Result<Vec<_>, _>>()
        .map_err(bad)?;
    let hosts = args
        .public_host
        .iter()
        .map(|h| cross_site::parse_public_host(h))
        .collect::<Result<Vec<_>, _>>()
        .map_err(bad)?;
    Ok(CrossSitePolicy::new(
        args.listen.ip().is_loopback(),
        hosts,
        origins,
    ))
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

/// Opens the journal and builds the one engine over it.
async fn open_daemon(
    args: &ServeArgs,
    token: Option<Vec<u8>>,
    settings: Settings,
    providers: Vec<providers::ProviderAllowance>,
    cross_site: CrossSitePolicy,
) -> Result<Daemon, CliError> {
    let chat = chat::load_template(args.chat_scenario.as_deref(), &providers)?;
    let journal = Arc::new(SqliteJournal::open(&args.db.db, JournalConfig::default())?);
    let reader = Arc::new(journal.reader()?);
    let nats = match &args.nats {
        Some(url) => Some(crate::jetstream::connect(url).await?),
        None => None,
    };
    recovery::recover_at_startup(&journal, nats.as_ref()).await?;
    let approvals = Arc::new(Approvals::new());
    let mut engine = Engine::builder();
    if let Some(handle) = &nats {
        // Posted runs are published to JetStream (owner recorded, heartbeat
        // kept), before the journal: the journal then only holds what the
        // stream acked, so after a kill it is a prefix of the stream, which
        // recovery closes and copies back (serve/recovery.rs).
        engine = engine.required_observer(Arc::new(keel_observers::JetStreamObserver::new(
            handle.clone(),
        )) as Arc<dyn RequiredObserver>);
    }
    let engine = engine
        .required_observer(Arc::clone(&journal) as Arc<dyn RequiredObserver>)
        // Streams read what a live log no longer retains from the journal.
        .history(Arc::clone(&reader) as Arc<dyn keel_observers::RunHistory>)
        .log_config(settings.log_config.clone())
        .interaction_handler(Arc::clone(&approvals) as Arc<dyn InteractionHandler>)
        .build()
        .map_err(|e| CliError::bad_input(format!("cannot build the engine: {e}")))?;
    Ok(Daemon {
        streams: stream_caps::StreamCaps::new(settings.streams),
        engine,
        journal,
        reader,
        approvals,
        admission: tokio::sync::Mutex::new(()),
        reserved: Mutex::default(),
        token,
        settings,
        nats,
        providers,
        cross_site: Arc::new(cross_site),
        chat,
    })
}

async fn serve_async(
    args: ServeArgs,
    token: Option<Vec<u8>>,
    settings: Settings,
    providers: Vec<providers::ProviderAllowance>,
    cross_site: CrossSitePolicy,
) -> Result<i32, CliError> {
    let daemon = Arc::new(open_daemon(&args, token, settings, providers, cross_site).await?);
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
    let (stop_tx, stop_rx) = watch::channel(false);
    let shutdown = {
        let daemon = Arc::clone(&daemon);
        tokio::spawn(async move {
            wait_for_signal().await;
            let report = shutdown_runs(&daemon).await;
            let _ = stop_tx.send(true);
            report
        })
    };
    let config = conn::ConnConfig::new(router(Arc::clone(&daemon)), daemon.settings.connections);
    run_server(listener, config, stop_rx).await;
    // The server stops only after the runs were shut down, unless it
    // failed: then shut them down now.
    let report = if shutdown.is_finished() {
        shutdown
            .await
            .map_err(|e| CliError::failure(format!("shutdown: {e}")))?
    } else {
        shutdown.abort();
        shutdown_runs(&daemon).await
    };
    close_journal(daemon).await;
    Ok(exit_code(&report))
}

/// Serves until `stop` turns true, then gives open connections
/// [`SHUTDOWN_CONNECTIONS`] to finish.
async fn run_server(
    listener: tokio::net::TcpListener,
    config: conn::ConnConfig,
    stop: watch::Receiver<bool>,
) {
    let mut stop_seen = stop.clone();
    let server = conn::accept_loop(listener, config, stop);
    tokio::select! {
        () = server => {}
        () = async {
            // Graceful shutdown began: give open connections a bounded time.
            let _ = stop_seen.wait_for(|s| *s).await;
            tokio::time::sleep(SHUTDOWN_CONNECTIONS).await;
        } => eprintln!("keel: connections still open after {} s; closing them", SHUTDOWN_CONNECTIONS.as_secs()),
    }
}

/// Closes the journal once nothing else holds it (the engine, the
/// routes); otherwise it is dropped with the process.
async fn close_journal(daemon: Arc<Daemon>) {
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
}

/// 0 when every run's whole history reached the journal; otherwise the
/// runs are named on stderr and the code is 1.
fn exit_code(report: &EngineShutdown) -> i32 {
    if report.unacknowledged.is_empty() && report.runs_abandoned == 0 {
        return EXIT_OK;
    }
    eprintln!(
        "keel: {} run(s) left for recovery ({} abandoned at the deadline): their journal lacks events, terminals included",
        report.unacknowledged.len(),
        report.runs_abandoned
    );
    let mut left: Vec<&str> = report.unacknowledged.iter().map(|id| id.as_str()).collect();
    left.sort_unstable();
    for run_id in left {
        eprintln!("keel: left for recovery: {run_id}");
    }
    EXIT_FAILED
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

/// Refuses new runs, cancels the live ones and waits (at most
/// `--shutdown-timeout-ms`) while they journal their terminals.
async fn shutdown_runs(daemon: &Daemon) -> EngineShutdown {
    let live = daemon.engine.live_runs();
    let timeout = daemon.settings.shutdown_timeout;
    eprintln!(
        "keel: shutting down: cancelling {live} live run(s), waiting at most {} ms",
        timeout.as_millis()
    );
    let started = Instant::now();
    let report = daemon.engine.shutdown(timeout).await;
    eprintln!(
        "keel: shutdown: {} run(s) ended, {} abandoned, {} unacknowledged, in {} ms",
        report.runs_ended,
        report.runs_abandoned,
        report.unacknowledged.len(),
        started.elapsed().as_millis()
    );
    report
}

/// The routes: the API behind the token check (inside it, the mark that
/// keeps a connection from being closed to make room, and the stream
/// caps on the event streams), the viewer's assets (which hold no data)
/// outside it, and around both the body timeout, CORS and the cross-site
/// defences, which run first; outermost, every error becomes a problem
/// document.
pub fn router(daemon: Arc<Daemon>) -> Router {
    let caps = Arc::clone(&daemon.streams);
    let capped =
        || axum::middleware::from_fn_with_state(Arc::clone(&caps), stream_caps::limit_streams);
    let api = Router::new()
        .route("/v1/runs", post(runs::create_run).get(runs::list_runs))
        .route("/v1/runs/{id}", get(runs::run_status))
        .route(
            "/v1/runs/{id}/events",
            get(events::events).route_layer(capped()),
        )
        .route(
            "/v1/runs/{id}/agui",
            get(agui::agui_events).route_layer(capped()),
        )
        .route("/v1/runs/{id}/cancel", post(runs::cancel_run))
        .route("/v1/runs/{id}/messages", post(runs::continue_run))
        .route("/v1/chat", post(chat::post_chat))
        .route(
            "/v1/chat/{id}/stream",
            get(chat::resume_stream).route_layer(capped()),
        )
        .route(
            "/v1/runs/{id}/interactions/{interaction_id}",
            post(approvals::answer_interaction),
        )
        .fallback(not_found)
        .layer(axum::middleware::from_fn(admission::mark_authenticated))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&daemon),
            auth::require_token,
        ));
    let body_timeout = body_timeout::BodyTimeout(daemon.settings.connections.body_timeout());
    let mut app = api
        .merge(viewer::routes())
        .layer(axum::middleware::from_fn_with_state(
            body_timeout,
            body_timeout::bound_body,
        ));
    if let Some(cors) = cross_site::cors_layer(&daemon.cross_site, daemon.token.is_some()) {
        app = app.layer(cors);
    }
    app.layer(axum::middleware::from_fn_with_state(
        Arc::clone(&daemon.cross_site),
        cross_site::defend,
    ))
    .layer(axum::middleware::map_response(problem::as_problem))
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
        .map_err(|e| match body_timeout::BodyTimedOut::find(&e) {
            Some(timed_out) => Problem::new(
                StatusCode::REQUEST_TIMEOUT,
                "body-timeout",
                "Request body too slow",
                timed_out.to_string(),
            )
            .with("bound", "body_timeout_ms")
            .with(
                "body_timeout_ms",
                u64::try_from(timed_out.ms()).unwrap_or(u64::MAX),
            ),
            None => too_large(),
        })?;
    String::from_utf8(bytes.to_vec()).map_err(|e| {
        Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid-body",
            "Request body is not UTF-8",
            format!("invalid UTF-8 at byte {}", e.utf8_error().valid_up_to()),
        )
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
