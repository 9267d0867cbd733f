//! [`ServeError`]: why a daemon did not start.

use crate::config::ServeConfigError;
use crate::cross_site;
use keel_observers::JournalError;
use std::net::SocketAddr;

/// Why a daemon did not start. Messages name the setting, never a token
/// or a credential.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The configuration was refused.
    #[error(transparent)]
    Config(#[from] ServeConfigError),
    /// An `allow_origin` or `public_host` entry was refused.
    #[error(transparent)]
    CrossSite(#[from] cross_site::CrossSiteConfigError),
    /// The journal could not be opened or recovered.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// NATS could not be reached (the URL is named without credentials).
    #[error("{0}")]
    Nats(String),
    /// The OTLP exporter could not be started.
    #[cfg(feature = "otel")]
    #[error(transparent)]
    Otel(#[from] keel_observers::OtelError),
    /// Recovery at startup failed.
    #[error("{0}")]
    Recovery(String),
    /// The engine refused the daemon's configuration.
    #[error("cannot build the engine: {0}")]
    Engine(String),
    /// The listener could not be bound.
    #[error("--listen {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

impl ServeError {
    /// Whether the host's input is at fault (a setting, an address, NATS
    /// unreachable), not the machine (`keel serve` exits 2 then).
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            ServeError::Config(_)
                | ServeError::CrossSite(_)
                | ServeError::Nats(_)
                | ServeError::Engine(_)
                | ServeError::Listen { .. }
        )
    }
}
