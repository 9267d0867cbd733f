//! # keel-serve: the daemon as a library
//!
//! The HTTP surface of Keel over one [`Engine`]: runs (`POST /v1/runs`,
//! follow-ups, forks and their tree, compaction, cancel, status, a paged
//! list), SSE event streams with resume, the embedded run viewer, the AI
//! SDK's `POST /v1/chat` for `useChat`, AG-UI streams, the AG-UI agent
//! endpoint `POST /v1/agui` for `HttpAgent` and CopilotKit (with frontend
//! tools), approvals, recovery at startup and a graceful shutdown. `keel
//! serve` is this crate plus a command line; a Rust host
//! embeds the same daemon with its own provider and tools.
//!
//! What it is not: it decides no run semantics (the engine does), holds
//! no storage format (the SQLite journal's) and maps no frontend protocol
//! itself (`keel-views` does; this crate frames it as SSE). What a posted
//! body becomes is a [`RunFactory`]'s decision: posted scenario files are
//! [`ScenarioFactory`] (feature `scenario`, on by default), a host's own
//! Rust code is another factory (`examples/embedded_host.rs`).
//!
//! Neighbours: `keel-engine` (the one engine every run starts on),
//! `keel-observers` (the journal, required observer and reader; JetStream
//! with `--nats`), `keel-views` (the AI SDK and AG-UI mappings),
//! `keel-scenario` (behind `scenario`). No clap: `keel-cli` maps its flags
//! onto [`ServeConfig`].
//!
//! One [`Server`], one [`Engine`]: it is built at startup from the host's
//! [`EngineBuilder`](keel_engine::EngineBuilder) with the daemon's store
//! ([`Store`], at [`ServeConfig::db`]) as its required
//! observer (JetStream's first, with `nats`), the log retention of
//! `log_max_events` and the daemon's approvals as the interaction handler.
//! The daemon keeps no registry of its own: status, list, cancel, answers
//! and event streams look runs up with [`Engine::live_run`], and a run
//! leaves the engine only after its terminal was offered to the journal.
//! Readers see one history: a live run's events come from its log, with
//! any prefix the log no longer retains read from the journal; a finished
//! run's come from the journal. The contract (routes, cursors, problems,
//! bounds) is `docs/rfc/implemented/2026-11-30-http-contract.md`.
//!
//! Bounds: request bodies at most [`MAX_BODY_BYTES`] (413 beyond);
//! request heads as hyper's HTTP/1 defaults; SSE subscriptions
//! [`events::DEFAULT_BOUNDS`] per connection; at most `max_live_runs` runs
//! at once (503 `too-many-live-runs` beyond), each approval unanswered for
//! at most its timeout. Against hostile clients (issue #22): connection
//! caps at accept, before the token check ([`admission`]); header, body,
//! idle and write timeouts and a small socket send buffer ([`timed_io`],
//! [`body_timeout`]); caps on event streams ([`stream_caps`]); a paged
//! `GET /v1/runs`. Every bound is a [`ServeConfig`] field (a flag of
//! `keel serve`), tabled in `docs/SECURITY.md` ("Hostile clients").
//!
//! Shutdown ([`Server::run`]'s signal): [`Engine::shutdown`] with
//! `shutdown_timeout` refuses new runs (503 `shutting-down`), cancels every
//! live run and waits while they journal their terminals; the report names
//! the runs whose journal did not get the whole history.
//!
//! With `nats`, `GET /v1/runs/{id}/events` of a run that is neither live
//! here nor in this daemon's journal is streamed from NATS JetStream.
//!
//! ```no_run
//! use keel_serve::{ScenarioFactory, ServeConfig, Server};
//! use std::sync::Arc;
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let config = ServeConfig::new("127.0.0.1:0".parse()?, "keel.db");
//! let factory = Arc::new(ScenarioFactory::new(Vec::new()));
//! let server = Server::bind(config, keel_engine::Engine::builder(), factory).await?;
//! println!("listening on http://{}", server.local_addr());
//! let report = server.run(async { let _ = tokio::signal::ctrl_c().await; }).await;
//! assert!(report.unacknowledged.is_empty());
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

pub mod admission;
pub mod agui;
pub mod agui_agent;
pub mod approvals;
pub mod auth;
pub mod body_timeout;
pub mod chat;
mod chat_files;
pub mod chat_runs;
mod chat_start;
pub mod config;
mod conn;
pub mod cross_site;
pub mod delete;
pub mod error;
pub mod events;
mod events_tree;
pub mod factory;
pub mod fork;
pub mod frontend_tools;
pub mod limits;
pub mod nats_connect;
mod otel;
pub mod problem;
mod recovery;
mod reservation;
pub mod run_list;
pub mod runs;
#[cfg(feature = "scenario")]
pub mod scenario_factory;
mod server;
pub mod sse_data;
pub mod stream_caps;
pub mod timed_io;
mod tree_follow;
pub mod viewer;

pub use config::{BearerToken, ServeConfig, ServeConfigError, TokenError};
pub use error::ServeError;
pub use factory::{HostParts, RunFactory, RunPlan};
pub use problem::{Problem, StatusCode};
#[cfg(feature = "scenario")]
pub use scenario_factory::ScenarioFactory;
pub use server::Server;

use approvals::Approvals;
use axum::Router;
use axum::body::Body;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, HeaderValue, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use config::Settings;
use cross_site::CrossSitePolicy;
use keel_engine::{Engine, InteractionHandler};
use keel_observers::{Store, StoreReader};
use serde_json::Value;
use std::sync::{Arc, Mutex, MutexGuard};

/// Largest request body, in bytes (1 MiB).
pub const MAX_BODY_BYTES: usize = 1 << 20;

/// The daemon's shared state.
#[derive(Debug)]
pub struct Daemon {
    /// The one engine: every run, and the only registry of live runs.
    engine: Engine,
    journal: Arc<Store>,
    reader: Arc<StoreReader>,
    /// The engine's interaction handler (pending approvals).
    approvals: Arc<Approvals>,
    /// `POST /v1/agui`'s frontend calls waiting for their client.
    frontend_calls: Arc<frontend_tools::FrontendCalls>,
    /// One admission at a time (the live-run bound, the id checks).
    admission: tokio::sync::Mutex<()>,
    /// Runs admitted and not started yet (their tool servers starting).
    reserved: Mutex<reservation::Reserved>,
    token: Option<BearerToken>,
    settings: Settings,
    /// `nats`: where runs this daemon does not have are read from.
    nats: Option<keel_observers::JetStreamHandle>,
    /// What posted bodies and the chat become.
    factory: Arc<dyn RunFactory>,
    /// `allow_origin`, `public_host` and the listener: who may call.
    cross_site: Arc<CrossSitePolicy>,
    /// The open event streams (`max_streams`, `max_streams_per_run`).
    streams: Arc<stream_caps::StreamCaps>,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Daemon {
    fn shutting_down(&self) -> bool {
        self.engine.is_shutting_down()
    }

    /// What the daemon adds to every run a factory builds.
    fn host_parts(&self) -> HostParts {
        HostParts::new(
            Arc::clone(&self.approvals) as Arc<dyn InteractionHandler>,
            self.settings.default_approval_timeout,
            self.engine.message_limits().clone(),
        )
    }

    /// The engine's message limits: what history rebuilt for a view or a
    /// continuation is checked against.
    fn message_limits(&self) -> &keel_message::Limits {
        self.engine.message_limits()
    }

    /// Runs a journal read on the blocking pool.
    async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&StoreReader) -> Result<T, keel_observers::JournalError> + Send + 'static,
    ) -> Result<T, Problem> {
        let reader = Arc::clone(&self.reader);
        match tokio::task::spawn_blocking(move || f(&reader)).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(Problem::journal(e)),
            Err(e) => Err(Problem::journal(e)),
        }
    }
}

/// `GET /v1/runs/{id}/events`: one run ([`events`]), or with
/// `children=true` the run and every sub-run it starts, merged
/// (`events_tree`).
async fn run_events(
    State(daemon): State<Arc<Daemon>>,
    UrlPath(id): UrlPath<String>,
    uri: Uri,
    headers: HeaderMap,
) -> Result<Response, Problem> {
    let request = events::EventsRequest::parse(&uri, &headers)?;
    match request.tree_cursor() {
        Some(cursor) => events_tree::stream(daemon, &id, cursor.clone(), &request).await,
        None => events::one_run(daemon, id, &request).await,
    }
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
        .route(
            "/v1/runs/{id}",
            get(runs::run_status).delete(delete::delete_run),
        )
        .route("/v1/prune", post(delete::prune))
        .route(
            "/v1/runs/{id}/events",
            get(run_events).route_layer(capped()),
        )
        .route(
            "/v1/runs/{id}/agui",
            get(agui::agui_events).route_layer(capped()),
        )
        .route("/v1/runs/{id}/cancel", post(runs::cancel_run))
        .route("/v1/runs/{id}/messages", post(runs::continue_run))
        .route("/v1/runs/{id}/compact", post(runs::compact_run))
        .route("/v1/runs/{id}/fork", post(fork::fork_run))
        .route("/v1/runs/{id}/tree", get(fork::run_tree))
        .route("/v1/chat", post(chat::post_chat))
        .route("/v1/agui", post(agui_agent::post_agui))
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
