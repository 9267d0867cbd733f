//! A posted run's MCP servers: resolved against `--mcp` before anything
//! starts (403 `mcp-server-not-allowed`), then started for the run (502
//! `mcp-server-unavailable` when one does not start, naming it). See
//! `crate::mcp` for the rule.

use super::Daemon;
use super::problem::Problem;
use crate::scenario::Scenario;
#[cfg(feature = "mcp")]
use axum::http::StatusCode;
use keel_engine::RunRequest;

/// The servers one run will start, already allowed.
#[derive(Debug, Default)]
pub(super) struct McpPlan {
    #[cfg(feature = "mcp")]
    configs: Vec<keel_mcp::ServerConfig>,
}

impl McpPlan {
    /// Resolves the scenario's servers; `posted` scenarios get only the
    /// operator's. Nothing is started.
    #[cfg(feature = "mcp")]
    pub(super) fn resolve(
        daemon: &Daemon,
        scenario: &Scenario,
        posted: bool,
    ) -> Result<McpPlan, Problem> {
        let trust = if posted {
            crate::mcp::Trust::Client
        } else {
            crate::mcp::Trust::Operator
        };
        let configs =
            crate::mcp::resolve(&scenario.mcp_servers, &daemon.settings.mcp_servers, trust)
                .map_err(|e| {
                    Problem::new(
                        StatusCode::FORBIDDEN,
                        "mcp-server-not-allowed",
                        "MCP server not allowed",
                        e.to_string(),
                    )
                    .with("path", "mcp_servers")
                    .with("server", e.server().as_str())
                })?;
        Ok(McpPlan { configs })
    }

    /// Without the `mcp` feature a scenario has no servers.
    #[cfg(not(feature = "mcp"))]
    pub(super) fn resolve(
        _daemon: &Daemon,
        _scenario: &Scenario,
        _posted: bool,
    ) -> Result<McpPlan, Problem> {
        Ok(McpPlan::default())
    }

    /// Starts the servers and adds them to `request`.
    pub(super) async fn start(self, request: RunRequest) -> Result<RunRequest, Problem> {
        #[cfg(feature = "mcp")]
        if !self.configs.is_empty() {
            let part_bytes = keel_message::Limits::default().part_bytes;
            return crate::mcp::start(request, &self.configs, part_bytes)
                .await
                .map_err(|e| {
                    Problem::new(
                        StatusCode::BAD_GATEWAY,
                        "mcp-server-unavailable",
                        "MCP server did not start",
                        e.to_string(),
                    )
                    .with("server", e.server().as_str())
                });
        }
        Ok(request)
    }
}
