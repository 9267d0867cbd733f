//! [`Server`]: a daemon bound to its listener, from a [`ServeConfig`], the
//! host's engine builder and a [`RunFactory`]; [`Server::run`] serves until
//! the shutdown signal, then shuts the runs down and closes the journal.

use crate::config::ServeConfig;
use crate::cross_site::{self, AllowedOrigin, CrossSitePolicy};
use crate::error::ServeError;
use crate::factory::RunFactory;
use crate::{Daemon, approvals::Approvals, conn, recovery, router, stream_caps};
use keel_engine::{EngineBuilder, EngineShutdown, InteractionHandler};
use keel_observers::{JournalConfig, RequiredObserver, Store};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How long shutdown waits for open connections once the runs are done.
const SHUTDOWN_CONNECTIONS: Duration = Duration::from_secs(5);

/// A daemon bound to its listener, its journal recovered.
#[derive(Debug)]
pub struct Server {
    daemon: Arc<Daemon>,
    listener: tokio::net::TcpListener,
    addr: SocketAddr,
}

impl Server {
    /// Checks `config`, opens and recovers the journal, builds the one
    /// engine from `engine` (the daemon adds its journal, retention and
    /// approvals to it) and binds the listener. Must be called within a
    /// multi-threaded tokio runtime.
    pub async fn bind(
        config: ServeConfig,
        engine: EngineBuilder,
        factory: Arc<dyn RunFactory>,
    ) -> Result<Server, ServeError> {
        let daemon = Arc::new(open_daemon(&config, engine, factory).await?);
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|source| ServeError::Listen {
                addr: config.listen,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| ServeError::Listen {
            addr: config.listen,
            source,
        })?;
        Ok(Server {
            daemon,
            listener,
            addr,
        })
    }

    /// The bound address (the port chosen when `listen` asked for 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves until `shutdown` completes; then refuses new runs, cancels
    /// the live ones and waits (at most `shutdown_timeout`) while they
    /// journal their terminals, gives open connections a few seconds, and
    /// closes the journal. The report names the runs left for recovery.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send + 'static) -> EngineShutdown {
        let Server {
            daemon, listener, ..
        } = self;
        let (stop_tx, stop_rx) = watch::channel(false);
        let shutting = {
            let daemon = Arc::clone(&daemon);
            tokio::spawn(async move {
                shutdown.await;
                let report = shutdown_runs(&daemon).await;
                let _ = stop_tx.send(true);
                report
            })
        };
        let config =
            conn::ConnConfig::new(router(Arc::clone(&daemon)), daemon.settings.connections);
        run_server(listener, config, stop_rx).await;
        // The server stops only after the runs were shut down, unless it
        // failed: then shut them down now.
        let report = match shutting.is_finished() {
            true => match shutting.await {
                Ok(report) => report,
                Err(_) => shutdown_runs(&daemon).await,
            },
            false => {
                shutting.abort();
                shutdown_runs(&daemon).await
            }
        };
        close_journal(daemon).await;
        report
    }
}

/// Opens the journal and builds the one engine over it.
async fn open_daemon(
    config: &ServeConfig,
    engine: EngineBuilder,
    factory: Arc<dyn RunFactory>,
) -> Result<Daemon, ServeError> {
    let mut settings = config.settings()?;
    fit_file_limit(&mut settings.connections);
    let cross_site = cross_site_policy(config)?;
    // On a blocking thread: a store may block on the network (PostgreSQL's
    // blocking client refuses to run on a runtime thread).
    let location = config.db.clone();
    let (journal, reader) = tokio::task::spawn_blocking(move || {
        let journal = Store::open(&location, JournalConfig::default())?;
        let reader = journal.reader()?;
        Ok::<_, ServeError>((Arc::new(journal), Arc::new(reader)))
    })
    .await
    .map_err(|e| ServeError::Recovery(format!("opening the journal: {e}")))??;
    let nats = match &config.nats {
        Some(url) => Some(
            crate::nats_connect::connect(url)
                .await
                .map_err(|e| ServeError::Nats(e.to_string()))?,
        ),
        None => None,
    };
    recovery::recover_at_startup(&journal, nats.as_ref()).await?;
    let approvals = Arc::new(Approvals::new());
    let mut engine = crate::otel::with_exporter(engine, config)?;
    if let Some(handle) = &nats {
        // Posted runs are published to JetStream (owner recorded, heartbeat
        // kept), before the journal: the journal then only holds what the
        // stream acked, so after a kill it is a prefix of the stream, which
        // recovery closes and copies back (recovery.rs).
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
        .map_err(|e| ServeError::Engine(e.to_string()))?;
    Ok(Daemon {
        streams: stream_caps::StreamCaps::new(settings.streams),
        engine,
        journal,
        reader,
        approvals,
        frontend_calls: Arc::new(crate::frontend_tools::FrontendCalls::new()),
        admission: tokio::sync::Mutex::new(()),
        reserved: Mutex::default(),
        token: config.token.clone(),
        settings,
        nats,
        factory,
        cross_site: Arc::new(cross_site),
    })
}

/// Over the open-file limit accept fails, and no connection could be
/// closed to make room: the cap is lowered to fit, and said so.
fn fit_file_limit(connections: &mut crate::limits::ConnectionLimits) {
    if let Some(open_files) = crate::limits::soft_file_limit()
        && let Some(was) = connections.fit_file_limit(open_files)
    {
        eprintln!(
            "keel: --max-connections {was} lowered to {} to fit the open-file limit {open_files}",
            connections.max_connections()
        );
    }
}

/// The cross-site rules from `allow_origin`, `public_host` and the
/// listener's address.
fn cross_site_policy(config: &ServeConfig) -> Result<CrossSitePolicy, ServeError> {
    let origins = config
        .allow_origin
        .iter()
        .map(|o| AllowedOrigin::parse(o))
        .collect::<Result<Vec<_>, _>>()?;
    let hosts = config
        .public_host
        .iter()
        .map(|h| cross_site::parse_public_host(h))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(CrossSitePolicy::new(
        config.listen.ip().is_loopback(),
        hosts,
        origins,
    ))
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

/// Refuses new runs, cancels the live ones and waits (at most
/// `shutdown_timeout`) while they journal their terminals.
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
