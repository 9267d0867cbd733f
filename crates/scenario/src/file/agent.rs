//! A tool's `agent` member: a sub-agent, described as a scenario without
//! a task (KEEL.md, "Contracts for the third round", Sub-runs):
//!
//! ```json
//! {"name": "researcher", "description": "Looks things up",
//!  "agent": {"model": "m", "provider": {...}, "tools": [...],
//!            "limits": {...}, "messages": [{"role": "system", "text": "…"}]}}
//! ```
//!
//! `model` and `provider` are required; `tools` may hold agents again
//! (nesting, bounded at run time by `limits.max_sub_run_depth`);
//! `messages` are the child's instructions, system messages only (the
//! task, the call's `task` argument, is the user message the engine
//! adds). The tool's parameters are fixed (`{"task": string}`), and an
//! agent tool is never `idempotent` (recovery leaves a lost child's
//! call `uncertain`). Every member is checked by the same code as at the
//! top level, and a refusal names the whole JSON path
//! (`tools[2].agent.messages[0]`).

use super::{
    LimitsWire, ProviderWire, RuleError, ToolEntry, ToolWire, check_definition, check_limits,
    check_provider, check_tools, rule,
};
use crate::file::ProviderSpec;
use keel_engine::{EngineLimits, ToolPolicy};
use keel_message::{Limits, Message, ModelName, Role};
use serde::Deserialize;
use serde_json::Value;

/// `agent` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AgentWire {
    model: String,
    provider: ProviderWire,
    #[serde(default)]
    tools: Vec<ToolWire>,
    #[serde(default)]
    limits: LimitsWire,
    #[serde(default)]
    messages: Vec<crate::messages::MessageWire>,
}

/// A checked sub-agent: what each call of its tool starts a child run
/// with. (The provider and limits are boxed: a `ToolEntry` holding one
/// stays the size of the others.)
#[derive(Debug, Clone)]
pub struct AgentScenario {
    model: ModelName,
    provider: Box<ProviderSpec>,
    tools: Vec<ToolEntry>,
    limits: Box<EngineLimits>,
    approval_timeout_set: bool,
    instructions: Vec<Message>,
}

impl AgentScenario {
    /// The child's model.
    pub fn model(&self) -> &ModelName {
        &self.model
    }

    /// The child's provider.
    pub fn provider(&self) -> &ProviderSpec {
        &self.provider
    }

    /// The child's tools, in file order (agents among them: nesting).
    pub fn tools(&self) -> &[ToolEntry] {
        &self.tools
    }

    /// The child's limits: the agent's `limits` over the engine's
    /// defaults, as at the top level (the engine takes the depth, count
    /// and budget bounds as the tightest along the chain).
    pub fn limits(&self) -> &EngineLimits {
        &self.limits
    }

    /// Whether the agent set `limits.approval_timeout_ms` (otherwise a
    /// daemon applies its own default, as for the top level).
    pub fn approval_timeout_set(&self) -> bool {
        self.approval_timeout_set
    }

    /// The child's instructions: system messages (ids `m1`, `m2`, …), the
    /// history before the task.
    pub fn instructions(&self) -> &[Message] {
        &self.instructions
    }
}

/// The parameters schema of every agent tool: one string, the task.
pub(super) fn task_parameters() -> Value {
    keel_engine::AgentTool::task_parameters()
}

/// The agent tool at `here` (`tools[2]`, or deeper): its definition (the
/// fixed `task` schema) and its `agent`, checked.
pub(super) fn check_agent_tool(
    here: &str,
    name: &str,
    description: Option<&str>,
    parameters: Option<&Value>,
    idempotent: bool,
    agent: AgentWire,
    policy: ToolPolicy,
) -> Result<ToolEntry, RuleError> {
    if parameters.is_some() {
        return Err(rule(
            &format!("{here}.parameters"),
            "an agent tool takes no `parameters`: its one argument is `task`, a string (rule scenario.agent_parameters)",
        ));
    }
    if idempotent {
        return Err(rule(
            &format!("{here}.idempotent"),
            "an agent tool is never idempotent: a lost child run stays `uncertain` (rule scenario.agent_idempotent)",
        ));
    }
    let definition = check_definition(here, name, description, Some(&task_parameters()))?;
    let spec = check_agent(&format!("{here}.agent."), agent)?;
    Ok(ToolEntry::Agent {
        definition,
        spec,
        policy,
    })
}

/// `agent` under `prefix` (`tools[2].agent.`): each member checked as at
/// the top level, with the whole path in a refusal.
fn check_agent(prefix: &str, w: AgentWire) -> Result<AgentScenario, RuleError> {
    let within = |(path, message): RuleError| (format!("{prefix}{path}"), message);
    let model =
        ModelName::parse(&w.model).map_err(|e| rule(&format!("{prefix}model"), e.to_string()))?;
    let mut instructions = Vec::with_capacity(w.messages.len());
    for (i, m) in w.messages.iter().enumerate() {
        let message = crate::messages::check_message(i, m, Limits::default_ref())
            .map_err(|e| (format!("{prefix}{}", e.path), e.message))?;
        if message.role() != Role::System {
            return Err(rule(
                &format!("{prefix}messages[{i}]"),
                "an agent's messages are its instructions, system messages only: the task is the user message (rule scenario.agent_instructions)",
            ));
        }
        instructions.push(message);
    }
    let limits = check_limits(&w.limits).map_err(within)?;
    let approval_timeout_set = w.limits.approval_timeout_ms.is_some();
    let tools = check_tools(prefix, w.tools)?;
    let provider = check_provider(w.provider).map_err(within)?;
    Ok(AgentScenario {
        model,
        provider: Box::new(provider),
        tools,
        limits: Box::new(limits),
        approval_timeout_set,
        instructions,
    })
}
