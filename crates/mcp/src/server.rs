//! One configured server over its lifetime in a run: the current
//! connection, restarted after a crash, and closed when the run ends.

use crate::config::ServerConfig;
use crate::connection::{Connection, StderrTail};
use crate::error::McpStartError;
use keel_eventlog::ErrorText;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// The most tools one server contributes; the rest are left out (and the
/// engine's `keel.tools_changed` shows which ones the model got).
pub const TOOLS_MAX: usize = 256;

/// A server and its current connection.
#[derive(Debug)]
pub(crate) struct Server {
    config: ServerConfig,
    current: tokio::sync::Mutex<Option<Arc<Connection>>>,
    closed: AtomicBool,
}

impl Server {
    pub(crate) fn new(config: ServerConfig) -> Server {
        Server {
            config,
            current: tokio::sync::Mutex::new(None),
            closed: AtomicBool::new(false),
        }
    }

    pub(crate) fn config(&self) -> &ServerConfig {
        &self.config
    }

    /// The live connection, starting the server (again) when there is none
    /// or it has closed. Restarts are serialized; a start is bounded by the
    /// startup timeout.
    pub(crate) async fn connection(&self) -> Result<Arc<Connection>, McpStartError> {
        let mut current = self.current.lock().await;
        if let Some(connection) = current.as_ref().filter(|c| !c.is_closed()) {
            return Ok(Arc::clone(connection));
        }
        if self.closed.load(Ordering::Acquire) {
            return Err(McpStartError::Handshake {
                server: self.config.name().clone(),
                reason: "the run has ended and its servers are shut down".to_owned(),
                stderr: String::new(),
            });
        }
        if let Some(dead) = current.take() {
            tracing::warn!(server = %self.config.name(), "MCP server connection closed; restarting");
            dead.close().await;
        }
        let connection = Arc::new(self.open().await?);
        *current = Some(Arc::clone(&connection));
        Ok(connection)
    }

    async fn open(&self) -> Result<Connection, McpStartError> {
        let stderr = Arc::new(StderrTail::default());
        let timeout = self.config.startup_timeout();
        match tokio::time::timeout(timeout, Connection::open(&self.config, Arc::clone(&stderr)))
            .await
        {
            Ok(opened) => opened,
            // Dropping the open future killed the child (kill_on_drop).
            Err(_) => Err(McpStartError::Timeout {
                server: self.config.name().clone(),
                timeout,
                stderr: stderr.screened(),
            }),
        }
    }

    /// Every tool the server lists (all pages), at most [`TOOLS_MAX`], as
    /// JSON in the protocol's shape. Bounded by the startup timeout.
    pub(crate) async fn list(&self) -> Result<Vec<serde_json::Value>, McpStartError> {
        let connection = self.connection().await?;
        let timeout = self.config.startup_timeout();
        let listed = tokio::time::timeout(timeout, connection.peer().list_all_tools()).await;
        let handshake = |reason: String| McpStartError::Handshake {
            server: self.config.name().clone(),
            reason: ErrorText::new(&reason).as_str().to_owned(),
            stderr: connection.stderr(),
        };
        let tools = match listed {
            Err(_) => {
                return Err(McpStartError::Timeout {
                    server: self.config.name().clone(),
                    timeout,
                    stderr: connection.stderr(),
                });
            }
            Ok(Err(e)) => return Err(handshake(format!("tools/list failed: {e}"))),
            Ok(Ok(tools)) => tools,
        };
        if tools.len() > TOOLS_MAX {
            tracing::warn!(server = %self.config.name(), listed = tools.len(), kept = TOOLS_MAX, "MCP server lists more tools than Keel mounts");
        }
        Ok(tools
            .iter()
            .take(TOOLS_MAX)
            .filter_map(|tool| serde_json::to_value(tool).ok())
            .collect())
    }

    /// Forgets `dead` if it is still the current connection, so the next
    /// call starts the server again.
    pub(crate) async fn forget(&self, dead: &Arc<Connection>) {
        let mut current = self.current.lock().await;
        if current.as_ref().is_some_and(|c| Arc::ptr_eq(c, dead))
            && let Some(connection) = current.take()
        {
            connection.close().await;
        }
    }

    /// Shuts the server down for good.
    pub(crate) async fn close(&self) {
        self.closed.store(true, Ordering::Release);
        if let Some(connection) = self.current.lock().await.take() {
            connection.close().await;
        }
    }
}
