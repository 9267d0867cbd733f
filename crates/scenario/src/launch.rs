//! From a scenario to a run: the one path `keel run` and `keel serve`
//! share. The scenario's provider, tools, limits and metadata allowlist
//! become a [`RunRequest`] the host's one engine starts; the host brings
//! the approval handler, where `read_file` is confined, and its default
//! approval timeout.

use crate::file::{AgentScenario, ProviderSpec, Scenario, ToolEntry};
use keel_engine::{AgentSpec, AgentTool, EngineLimits, InteractionHandler, RunRequest, Tool};
use keel_message::RunId;
use keel_observers::conversation::{Continuation, Fork};
use keel_providers::ApiKey;
use keel_stream::ModelProvider;
use keel_testkit::{ScriptedProvider, ScriptedTool};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// What the host adds to a scenario.
#[derive(Clone)]
pub struct Launch<'a> {
    /// Where `read_file` is confined (`--files`); without it the built-in
    /// refuses every path.
    pub files: Option<&'a Path>,
    /// Who answers approvals.
    pub approvals: Arc<dyn InteractionHandler>,
    /// The approval timeout when the scenario sets none (a daemon's
    /// default); `None` keeps the engine's.
    pub default_approval_timeout: Option<Duration>,
}

impl std::fmt::Debug for Launch<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Launch")
            .field("files", &self.files)
            .field("default_approval_timeout", &self.default_approval_timeout)
            .finish_non_exhaustive()
    }
}

/// Why a scenario could not become a run. Values are never echoed: the
/// provider's message names the variable or the bound, not a key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LaunchError {
    /// The provider could not be built (a missing key variable, a bad
    /// base URL).
    #[error("provider: {0}")]
    Provider(String),
    /// A built-in tool could not be built.
    #[error("at tools[{index}]: {message}")]
    Tool {
        /// Its index in `tools`.
        index: usize,
        /// Why.
        message: String,
    },
    /// Something inside an agent tool's `agent` could not be built (its
    /// provider, one of its own tools, its instructions).
    #[error("at {path}: {message}")]
    Agent {
        /// The scenario member at fault (`tools[2].agent.provider`).
        path: String,
        /// Why.
        message: String,
    },
}

impl LaunchError {
    /// The scenario member at fault: `provider` or `tools[i]`.
    pub fn path(&self) -> String {
        match self {
            LaunchError::Provider(_) => "provider".to_owned(),
            LaunchError::Tool { index, .. } => format!("tools[{index}]"),
            LaunchError::Agent { path, .. } => path.clone(),
        }
    }

    /// What is wrong, without where.
    fn message(&self) -> &str {
        match self {
            LaunchError::Provider(message)
            | LaunchError::Tool { message, .. }
            | LaunchError::Agent { message, .. } => message,
        }
    }

    /// This error, raised inside the `agent` of `tools[index]`.
    fn within_agent(self, index: usize) -> LaunchError {
        LaunchError::Agent {
            path: format!("tools[{index}].agent.{}", self.path()),
            message: self.message().to_owned(),
        }
    }
}

/// The run `scenario` asks for, under `run_id`.
pub fn run_request(
    scenario: &Scenario,
    run_id: RunId,
    launch: &Launch<'_>,
) -> Result<RunRequest, LaunchError> {
    request_from(scenario, run_id, launch, scenario.messages.clone())
}

/// A follow-up run: the scenario's provider, tools and limits, starting
/// from `continuation` (the earlier run's history plus the new message)
/// instead of the scenario's messages, recording the earlier run's
/// history by reference and the new message in full.
pub fn follow_up_request(
    scenario: &Scenario,
    run_id: RunId,
    launch: &Launch<'_>,
    continuation: Continuation,
) -> Result<RunRequest, LaunchError> {
    let request = request_from(scenario, run_id, launch, continuation.history)?;
    Ok(request.inherits(continuation.reference, continuation.inherited))
}

/// A fork: the scenario's provider, tools and limits, starting from
/// `fork` (the parent's history through the fork's seq plus the new
/// messages) instead of the scenario's messages (none of them is used,
/// system ones included: the parent's history carries its own),
/// recording `forked_from` and the parent's history by reference.
pub fn fork_request(
    scenario: &Scenario,
    run_id: RunId,
    launch: &Launch<'_>,
    fork: Fork,
) -> Result<RunRequest, LaunchError> {
    let request = request_from(scenario, run_id, launch, fork.history)?;
    Ok(request.forks(fork.reference, fork.inherited))
}

/// The run `scenario` describes under `run_id`, starting from `history`
/// instead of the scenario's messages (a daemon's continuation or chat).
pub fn request_from(
    scenario: &Scenario,
    run_id: RunId,
    launch: &Launch<'_>,
    history: Vec<keel_message::Message>,
) -> Result<RunRequest, LaunchError> {
    let provider = build_provider(&scenario.provider)?;
    let limits = with_approval_default(
        &scenario.limits,
        scenario.approval_timeout_set,
        launch.default_approval_timeout,
    );
    let mut request = RunRequest::new(run_id, scenario.model.clone(), history)
        .provider(provider)
        .limits(limits)
        .allow_metadata(scenario.allow_metadata.clone())
        .interaction_handler(Arc::clone(&launch.approvals));
    for tool in tools_of(&scenario.tools, launch)? {
        request = request.tool(tool);
    }
    Ok(request)
}

/// The scenario's provider: scripted, or a network adapter whose key is
/// read from the named environment variable (never printed).
pub fn build_provider(spec: &ProviderSpec) -> Result<Arc<dyn ModelProvider>, LaunchError> {
    match spec {
        ProviderSpec::Scripted { calls } => Ok(Arc::new(ScriptedProvider::new(calls.clone()))),
        ProviderSpec::Network {
            kind,
            base_url,
            api_key_env,
            options,
        } => {
            let bad = |e: &dyn std::fmt::Display| LaunchError::Provider(e.to_string());
            let key = ApiKey::from_env(api_key_env).map_err(|e| bad(&e))?;
            kind.connect_with(base_url.as_deref(), key, options)
                .map_err(|e| bad(&e))
        }
    }
}

/// `limits`, with the host's default approval timeout when the scenario
/// set none.
fn with_approval_default(
    limits: &EngineLimits,
    approval_timeout_set: bool,
    default: Option<Duration>,
) -> EngineLimits {
    let mut limits = limits.clone();
    if let (false, Some(timeout)) = (approval_timeout_set, default) {
        limits.approval_timeout = timeout;
    }
    limits
}

/// The tools of `entries` (scripted, built-ins with `read_file` confined
/// to `launch.files`, agents), in file order.
fn tools_of(entries: &[ToolEntry], launch: &Launch<'_>) -> Result<Vec<Arc<dyn Tool>>, LaunchError> {
    let mut tools: Vec<Arc<dyn Tool>> = Vec::with_capacity(entries.len());
    for (i, entry) in entries.iter().enumerate() {
        match entry {
            ToolEntry::Scripted {
                definition,
                script,
                policy,
            } => tools.push(Arc::new(
                ScriptedTool::new(definition.clone(), script.clone()).with_policy(policy.clone()),
            )),
            ToolEntry::Builtin {
                builtin,
                policy,
                index,
            } => tools.push(builtin.tool(policy.clone(), launch.files).map_err(|e| {
                LaunchError::Tool {
                    index: *index,
                    message: e.to_string(),
                }
            })?),
            ToolEntry::Agent {
                definition,
                spec,
                policy,
            } => {
                let spec = agent_spec(spec, launch).map_err(|e| e.within_agent(i))?;
                tools.push(Arc::new(
                    AgentTool::new(definition.clone(), spec).with_policy(policy.clone()),
                ));
            }
        }
    }
    Ok(tools)
}

/// What each call of an agent tool starts a child run with: its own
/// provider (a scripted one shared by the tool's calls, in order), model,
/// instructions, limits and tools (agents among them).
fn agent_spec(agent: &AgentScenario, launch: &Launch<'_>) -> Result<AgentSpec, LaunchError> {
    let limits = with_approval_default(
        agent.limits(),
        agent.approval_timeout_set(),
        launch.default_approval_timeout,
    );
    let mut spec = AgentSpec::new(agent.model().clone())
        .provider(build_provider(agent.provider())?)
        .instructions(agent.instructions().to_vec())
        .map_err(|e| LaunchError::Agent {
            path: "messages".to_owned(),
            message: e.to_string(),
        })?
        .limits(limits);
    for tool in tools_of(agent.tools(), launch)? {
        spec = spec.tool(tool);
    }
    Ok(spec)
}

/// Why a scenario's MCP servers could not join its run.
#[cfg(feature = "mcp")]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum McpLaunchError {
    /// A server the host does not provide or allow (nothing was started).
    #[error(transparent)]
    Resolve(#[from] crate::mcp::ResolveError),
    /// A server did not start (those started before it were closed).
    #[error(transparent)]
    Start(#[from] keel_mcp::McpStartError),
}

/// Starts the scenario's MCP servers for `request`'s run and adds them as
/// its tool sources. Every server is resolved against `host` (under
/// `trust`) before the first one starts; results are bounded by the
/// engine's `limits.part_bytes`.
#[cfg(feature = "mcp")]
pub async fn with_mcp(
    request: RunRequest,
    scenario: &Scenario,
    host: &[keel_mcp::ServerConfig],
    trust: crate::mcp::Trust,
    limits: &keel_message::Limits,
) -> Result<RunRequest, McpLaunchError> {
    let configs = crate::mcp::resolve(&scenario.mcp_servers, host, trust)?;
    if configs.is_empty() {
        return Ok(request);
    }
    Ok(crate::mcp::start(request, &configs, limits.part_bytes).await?)
}
