//! The scenario run factory: posted scenario files (`POST /v1/runs`,
//! `/messages`) and the operator's `--chat-scenario` become runs, through
//! `keel-scenario`'s loader and launcher.
//!
//! The factory holds what only the operator may decide: the network
//! providers posted scenarios may use (`--allow-provider`: a client could
//! otherwise point a provider at its own server with any environment
//! variable as the key, `docs/rfc/implemented/2026-11-30-serve-provider-allowlist.md`)
//! and the MCP servers they may start (`--mcp`): resolved before anything
//! starts (403 `mcp-server-not-allowed`), started once the run is admitted
//! (502 `mcp-server-unavailable` naming the server).

use crate::factory::{HostParts, PlanFuture, RunFactory, RunPlan};
use crate::problem::Problem;
use axum::http::StatusCode;
use keel_engine::RunRequest;
use keel_message::{Message, RunId};
use keel_scenario::allowance::{ProviderAllowance, unpermitted_provider};
use keel_scenario::launch::{self, Launch, LaunchError};
use keel_scenario::{Scenario, ScenarioError};
use std::path::Path;
use std::sync::Arc;

/// What a posted scenario is called in problems.
const BODY: &str = "request body";

/// Posted scenario files as runs, with the operator's allowances.
#[derive(Debug, Default)]
pub struct ScenarioFactory {
    providers: Vec<ProviderAllowance>,
    #[cfg(feature = "mcp")]
    mcp_servers: Vec<keel_mcp::ServerConfig>,
    chat: Option<Arc<ScenarioPlan>>,
}

/// Why the chat scenario was refused at startup.
#[derive(Debug, thiserror::Error)]
pub enum ChatScenarioError {
    /// The file did not load.
    #[error("--chat-scenario: {0}")]
    Load(#[from] ScenarioError),
    /// Its provider is a network provider the operator did not allow.
    #[error("--chat-scenario: its provider is neither scripted nor allowed with --allow-provider")]
    ProviderNotAllowed,
    /// One of its MCP servers is neither its own nor the operator's.
    #[cfg(feature = "mcp")]
    #[error("--chat-scenario: {0}")]
    Mcp(#[from] keel_scenario::mcp::ResolveError),
}

impl ScenarioFactory {
    /// A factory running network providers only as `providers` allow.
    pub fn new(providers: Vec<ProviderAllowance>) -> ScenarioFactory {
        ScenarioFactory {
            providers,
            ..ScenarioFactory::default()
        }
    }

    /// `--mcp`: the MCP servers posted scenarios may use.
    #[cfg(feature = "mcp")]
    pub fn mcp_servers(mut self, servers: Vec<keel_mcp::ServerConfig>) -> ScenarioFactory {
        self.mcp_servers = servers;
        self
    }

    /// `--chat-scenario`: the agent `POST /v1/chat` runs (the operator's
    /// own file: its MCP servers start as written). Its provider must be
    /// scripted or allowed.
    pub fn chat_scenario(mut self, file: &Path) -> Result<ScenarioFactory, ChatScenarioError> {
        let scenario = keel_scenario::file::load(file)?;
        if unpermitted_provider(&scenario, &self.providers).is_some() {
            return Err(ChatScenarioError::ProviderNotAllowed);
        }
        let plan = self.plan(scenario, Trust::Operator);
        self.chat = Some(Arc::new(plan.map_err(ChatScenarioError::from_refusal)?));
        Ok(self)
    }

    fn plan(&self, scenario: Scenario, trust: Trust) -> Result<ScenarioPlan, McpRefusal> {
        #[cfg(feature = "mcp")]
        let mcp =
            keel_scenario::mcp::resolve(&scenario.mcp_servers, &self.mcp_servers, trust.mcp())?;
        #[cfg(not(feature = "mcp"))]
        let _ = trust;
        Ok(ScenarioPlan {
            scenario,
            #[cfg(feature = "mcp")]
            mcp,
        })
    }
}

/// Whose scenario it is: a client's gets only the operator's MCP servers.
#[derive(Debug, Clone, Copy)]
enum Trust {
    Client,
    Operator,
}

#[cfg(feature = "mcp")]
impl Trust {
    fn mcp(self) -> keel_scenario::mcp::Trust {
        match self {
            Trust::Client => keel_scenario::mcp::Trust::Client,
            Trust::Operator => keel_scenario::mcp::Trust::Operator,
        }
    }
}

#[cfg(feature = "mcp")]
type McpRefusal = keel_scenario::mcp::ResolveError;
#[cfg(not(feature = "mcp"))]
type McpRefusal = std::convert::Infallible;

impl ChatScenarioError {
    fn from_refusal(e: McpRefusal) -> ChatScenarioError {
        #[cfg(feature = "mcp")]
        return ChatScenarioError::Mcp(e);
        #[cfg(not(feature = "mcp"))]
        match e {}
    }
}

/// 403 for an MCP server a posted scenario may not start.
#[cfg(feature = "mcp")]
fn mcp_problem(e: &keel_scenario::mcp::ResolveError) -> Problem {
    Problem::new(
        StatusCode::FORBIDDEN,
        "mcp-server-not-allowed",
        "MCP server not allowed",
        e.to_string(),
    )
    .with("path", "mcp_servers")
    .with("server", e.server().as_str())
}

impl RunFactory for ScenarioFactory {
    fn posted(&self, body: &str) -> Result<Box<dyn RunPlan>, Problem> {
        let scenario =
            keel_scenario::file::parse(Path::new(BODY), body).map_err(|e| scenario_problem(&e))?;
        // A network provider's key comes from the daemon's environment (never
        // echoed), and only for a provider the operator allowed: checked
        // before the variable is read, so the answer says nothing about the
        // environment.
        if let Some(path) = unpermitted_provider(&scenario, &self.providers) {
            return Err(crate::runs::provider_not_allowed().with("path", path));
        }
        #[cfg(feature = "mcp")]
        let plan = self
            .plan(scenario, Trust::Client)
            .map_err(|e| mcp_problem(&e))?;
        #[cfg(not(feature = "mcp"))]
        let plan = match self.plan(scenario, Trust::Client) {
            Ok(plan) => plan,
            Err(never) => match never {},
        };
        Ok(Box::new(plan))
    }

    fn chat_agent(&self) -> Option<Arc<dyn RunPlan>> {
        self.chat.clone().map(|plan| plan as Arc<dyn RunPlan>)
    }
}

/// A checked scenario with its MCP servers resolved, nothing started.
#[derive(Debug)]
pub struct ScenarioPlan {
    scenario: Scenario,
    #[cfg(feature = "mcp")]
    mcp: Vec<keel_mcp::ServerConfig>,
}

impl RunPlan for ScenarioPlan {
    fn run_id(&self) -> Option<&RunId> {
        self.scenario.run_id.as_ref()
    }

    fn messages(&self) -> &[Message] {
        &self.scenario.messages
    }

    fn model(&self) -> &str {
        self.scenario.model.as_str()
    }

    fn provider_type(&self) -> &str {
        self.scenario.provider.type_name()
    }

    fn request(
        &self,
        run_id: RunId,
        history: Vec<Message>,
        host: &HostParts,
    ) -> Result<RunRequest, Problem> {
        let launch = Launch {
            files: None,
            approvals: host.approvals(),
            default_approval_timeout: Some(host.default_approval_timeout()),
        };
        launch::request_from(&self.scenario, run_id, &launch, history)
            .map_err(|e| launch_problem(&e))
    }

    fn prepare<'a>(&'a self, request: RunRequest, host: &'a HostParts) -> PlanFuture<'a> {
        Box::pin(async move {
            #[cfg(feature = "mcp")]
            if !self.mcp.is_empty() {
                let part_bytes = host.message_limits().part_bytes;
                return keel_scenario::mcp::start(request, &self.mcp, part_bytes)
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
            #[cfg(not(feature = "mcp"))]
            let _ = host;
            Ok(request)
        })
    }
}

/// 400 for a provider or tool that could not be built (the message names
/// the variable or the bound, never a key).
fn launch_problem(e: &LaunchError) -> Problem {
    crate::runs::invalid(e.to_string(), &e.path())
}

/// 400 for a scenario the loader refused, with its line, column and path
/// where known.
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
