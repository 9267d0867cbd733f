//! The crate's errors: one enum per operation family.

use crate::config::ServerName;
use std::time::Duration;

/// Why a server entry was refused: the member at fault (relative to the
/// entry, `env[1]`; empty for the entry itself), the rule, and what is
/// wrong. Values are never echoed, only their sizes (a variable's *name*
/// is said for `mcp.env_secret`: it is one of Keel's own, never a value).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{message} (rule {rule})", if path.is_empty() { String::new() } else { format!("at {path}: ") })]
pub struct McpConfigError {
    path: String,
    rule: &'static str,
    message: String,
}

impl McpConfigError {
    pub(crate) fn new(path: impl Into<String>, rule: &'static str, message: String) -> Self {
        McpConfigError {
            path: path.into(),
            rule,
            message,
        }
    }

    /// The member at fault, relative to the entry (`env[1]`), or empty.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The rule it broke (`mcp.env_name`).
    pub fn rule(&self) -> &'static str {
        self.rule
    }

    /// What is wrong, without the offending value.
    pub fn message(&self) -> &str {
        &self.message
    }
}

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
