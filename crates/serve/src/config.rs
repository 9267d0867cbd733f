//! [`ServeConfig`]: everything a daemon is configured with, as plain data
//! (`keel serve`'s flags map onto it one to one; a host embedding the
//! daemon fills it in code). [`ServeConfig::validate`] checks it whole
//! before anything opens; [`BearerToken`] holds a checked token.

use crate::limits::{ConnectionConfig, ConnectionLimits, LimitsError, StreamConfig, StreamLimits};
use keel_engine::{LimitError, check_closing_deadline};
use keel_eventlog::LogConfig;
use keel_observers::StoreLocation;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// A bearer token every API request must show: non-empty printable ASCII
/// without spaces (what an `Authorization: Bearer` header can carry).
#[derive(Clone, PartialEq, Eq)]
pub struct BearerToken(Vec<u8>);

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never printed: a token in a log is a token given away.
        f.write_str("BearerToken(***)")
    }
}

/// Why a token was refused (the token itself is never echoed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the token must be non-empty printable ASCII without spaces (rule serve.token)")]
pub struct TokenError;

impl BearerToken {
    /// Checks `text`.
    pub fn parse(text: &str) -> Result<BearerToken, TokenError> {
        if text.is_empty() || text.bytes().any(|b| !(0x21..=0x7e).contains(&b)) {
            return Err(TokenError);
        }
        Ok(BearerToken(text.as_bytes().to_vec()))
    }

    /// The token's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// A daemon's configuration. [`Default`] is `keel serve`'s defaults.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Where to listen (`--listen`); port 0 picks a free port.
    pub listen: SocketAddr,
    /// The durable store (`--db`): a SQLite path, or a PostgreSQL URL in a
    /// build with the feature `postgres`.
    pub db: StoreLocation,
    /// The bearer token (`--token-file`, `KEEL_TOKEN`); required on a
    /// non-loopback listener.
    pub token: Option<BearerToken>,
    /// `--log-max-events`: events a live run's log retains.
    pub log_max_events: Option<usize>,
    /// `--nats URL`: runs this daemon does not have are read from there,
    /// and its runs are published there.
    pub nats: Option<String>,
    /// `--allow-origin`: origins (`scheme://host[:port]`) whose pages may call.
    pub allow_origin: Vec<String>,
    /// `--public-host`: host names the daemon answers to besides the listener's.
    pub public_host: Vec<String>,
    /// `--max-live-runs`.
    pub max_live_runs: usize,
    /// `--approval-timeout-ms`: for runs whose factory sets none.
    pub approval_timeout: Duration,
    /// `--shutdown-timeout-ms`: at least
    /// [`MIN_CLOSING_DEADLINE`](keel_engine::MIN_CLOSING_DEADLINE).
    pub shutdown_timeout: Duration,
    /// The connection caps and timeouts (`--max-connections`, …).
    pub connections: ConnectionConfig,
    /// The event stream caps (`--max-streams`, `--max-streams-per-run`).
    pub streams: StreamConfig,
    /// `--otlp URL`: every run's spans exported over OTLP (content only
    /// with `--otlp-content`).
    #[cfg(feature = "otel")]
    pub otel: Option<keel_observers::OtelConfig>,
}

impl Default for ServeConfig {
    fn default() -> ServeConfig {
        ServeConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 7878)),
            db: StoreLocation::Sqlite(PathBuf::from("keel.db")),
            token: None,
            log_max_events: None,
            nats: None,
            allow_origin: Vec::new(),
            public_host: Vec::new(),
            max_live_runs: 1024,
            approval_timeout: Duration::from_millis(300_000),
            shutdown_timeout: Duration::from_millis(30_000),
            connections: ConnectionConfig::default(),
            streams: StreamConfig::default(),
            #[cfg(feature = "otel")]
            otel: None,
        }
    }
}

/// Why a configuration was refused: the setting (by its flag's name) and
/// the rule.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ServeConfigError {
    /// A non-loopback listener without a token.
    #[error(
        "--listen {0}: a non-loopback address needs a bearer token (--token-file FILE or KEEL_TOKEN)"
    )]
    TokenRequired(SocketAddr),
    /// `--log-max-events` refused by the log's own rule.
    #[error("--log-max-events: {0}")]
    Log(String),
    /// A count or duration that must be at least 1.
    #[error("{0}: must be at least 1")]
    Zero(&'static str),
    /// The shutdown timeout under the engine's closing floor
    /// ([`check_closing_deadline`]).
    #[error("--shutdown-timeout-ms: {0}")]
    ShutdownTooShort(#[source] LimitError),
    /// A connection or stream bound.
    #[error(transparent)]
    Limits(#[from] LimitsError),
}

/// The checked settings a daemon runs with.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) max_live_runs: usize,
    pub(crate) default_approval_timeout: Duration,
    pub(crate) shutdown_timeout: Duration,
    pub(crate) log_config: LogConfig,
    pub(crate) connections: ConnectionLimits,
    pub(crate) streams: StreamLimits,
}

impl ServeConfig {
    /// A configuration listening on `listen` with the SQLite journal at
    /// `db`, and every other setting at its default (set
    /// [`ServeConfig::db`] for another store).
    pub fn new(listen: SocketAddr, db: impl Into<PathBuf>) -> ServeConfig {
        ServeConfig {
            listen,
            db: StoreLocation::Sqlite(db.into()),
            ..ServeConfig::default()
        }
    }

    /// Checks every setting; nothing is opened.
    pub fn validate(&self) -> Result<(), ServeConfigError> {
        self.settings().map(|_| ())
    }

    pub(crate) fn settings(&self) -> Result<Settings, ServeConfigError> {
        if self.token.is_none() && !self.listen.ip().is_loopback() {
            return Err(ServeConfigError::TokenRequired(self.listen));
        }
        let mut log_config = LogConfig::default();
        if let Some(n) = self.log_max_events {
            log_config.max_events = n;
        }
        log_config
            .validate()
            .map_err(|e| ServeConfigError::Log(e.to_string()))?;
        if self.max_live_runs == 0 {
            return Err(ServeConfigError::Zero("--max-live-runs"));
        }
        if self.approval_timeout.is_zero() {
            return Err(ServeConfigError::Zero("--approval-timeout-ms"));
        }
        check_closing_deadline(self.shutdown_timeout)
            .map_err(ServeConfigError::ShutdownTooShort)?;
        Ok(Settings {
            max_live_runs: self.max_live_runs,
            default_approval_timeout: self.approval_timeout,
            shutdown_timeout: self.shutdown_timeout,
            log_config,
            connections: ConnectionLimits::from_config(&self.connections)?,
            streams: StreamLimits::from_config(&self.streams)?,
        })
    }
}
