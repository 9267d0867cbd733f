//! Why a server could not be started (`McpStartError`). A refused
//! server entry is `McpConfigError`, in `config_error.rs`, below the
//! configuration types that this error names.

use crate::config::ServerName;
use std::time::Duration;

/// Why a server could not be started. Every variant names the server;
/// texts from the server (its stderr, its error messages) are screened for
/// secrets and bounded before they are put here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum McpStartError {
    /// The child process could not be spawned (no such program, not
    /// executable).
    #[error("MCP server {server}: cannot start {program}: {reason} (rule mcp.startup)")]
    Spawn {
        /// The server.
        server: ServerName,
        /// The program.
        program: String,
        /// The operating system's reason.
        reason: String,
    },
    /// Start, `initialize` and the first `tools/list` took longer than
    /// the startup timeout.
    #[error("MCP server {server}: not ready within its startup timeout of {} ms (rule mcp.startup_timeout){}", timeout.as_millis(), stderr_suffix(.stderr))]
    Timeout {
        /// The server.
        server: ServerName,
        /// The bound.
        timeout: Duration,
        /// The end of its stderr, screened.
        stderr: String,
    },
    /// The server closed the connection or answered `initialize` or
    /// `tools/list` with an error.
    #[error("MCP server {server}: {reason} (rule mcp.startup){}", stderr_suffix(.stderr))]
    Handshake {
        /// The server.
        server: ServerName,
        /// What went wrong, screened.
        reason: String,
        /// The end of its stderr, screened.
        stderr: String,
    },
}

impl McpStartError {
    /// The server that failed to start.
    pub fn server(&self) -> &ServerName {
        match self {
            McpStartError::Spawn { server, .. }
            | McpStartError::Timeout { server, .. }
            | McpStartError::Handshake { server, .. } => server,
        }
    }
}

fn stderr_suffix(stderr: &str) -> String {
    if stderr.is_empty() {
        String::new()
    } else {
        format!("; its stderr ends: {stderr}")
    }
}
