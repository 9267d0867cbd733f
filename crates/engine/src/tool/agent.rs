//! Agent tools: a [`Tool`] whose call is a child run in the same engine.
//! [`AgentSpec`] says what the child runs with (model, provider, tools,
//! limits, system instructions); the engine, not the tool, runs the call
//! (see [`Tool::as_agent`]), so the child's outcome becomes the call's one
//! terminal.

use super::{Tool, ToolError, ToolFuture, ToolInvocation, ToolOutcome, ToolPolicy, ToolRetry};
use crate::config::EngineLimits;
use keel_message::{
    CanonicalJson, Message, MessageError, ModelName, Role, ToolDefinition, ToolName,
};
use keel_stream::ModelProvider;
use std::sync::Arc;

/// Which provider a child run calls.
#[derive(Clone, Default)]
pub(crate) enum AgentProvider {
    /// The parent run's provider.
    #[default]
    Default,
    /// A provider the engine registered under this name.
    Named(String),
    /// The child's own.
    Own(Arc<dyn ModelProvider>),
}

/// What a child run of an [`AgentTool`] runs with: its model, provider,
/// tools, limits and system instructions. Without a provider of its own
/// the child calls its parent's; its tools are added to the engine's, and
/// without limits of its own it runs under the engine's, as any run. The
/// interaction handler and the metadata allowlist are the parent run's.
///
/// ```
/// use keel_engine::{AgentSpec, EngineLimits};
/// use keel_message::*;
/// let spec = AgentSpec::new(ModelName::parse("m")?)
///     .provider_named("scripted")
///     .instructions(vec![Message::text(MessageId::parse("s1")?, Role::System, "Be brief.")?])?
///     .limits(EngineLimits { max_turns: 4, ..EngineLimits::default() });
/// assert_eq!(spec.instruction_messages().len(), 1);
/// let user = Message::text(MessageId::parse("u1")?, Role::User, "Hi")?;
/// let refused = AgentSpec::new(ModelName::parse("m")?).instructions(vec![user]).unwrap_err();
/// assert_eq!(
///     refused.to_string(),
///     "instructions[0] is a user message; agent instructions are system messages only (rule agent.instructions)"
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct AgentSpec {
    model: ModelName,
    provider: AgentProvider,
    instructions: Vec<Message>,
    tools: Vec<Arc<dyn Tool>>,
    limits: Option<EngineLimits>,
}

impl std::fmt::Debug for AgentSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let provider = match &self.provider {
            AgentProvider::Default => "default".to_owned(),
            AgentProvider::Named(name) => format!("named {name}"),
            AgentProvider::Own(_) => "own".to_owned(),
        };
        let tools: Vec<_> = self.tools.iter().map(|t| t.definition().name()).collect();
        f.debug_struct("AgentSpec")
            .field("model", &self.model)
            .field("provider", &provider)
            .field("instructions", &self.instructions.len())
            .field("tools", &tools)
            .field("limits", &self.limits)
            .finish()
    }
}

/// Instructions that are not all system messages.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "instructions[{index}] is a {role} message; agent instructions are system messages only (rule agent.instructions)"
)]
pub struct AgentSpecError {
    index: usize,
    role: &'static str,
}

impl AgentSpecError {
    /// The position of the first message that is not a system message.
    pub fn index(&self) -> usize {
        self.index
    }
}

impl AgentSpec {
    /// A child run of `model`, on its parent's provider, with the
    /// engine's tools and limits and no instructions.
    pub fn new(model: ModelName) -> AgentSpec {
        AgentSpec {
            model,
            provider: AgentProvider::Default,
            instructions: Vec::new(),
            tools: Vec::new(),
            limits: None,
        }
    }
    /// Calls this provider.
    pub fn provider(mut self, provider: Arc<dyn ModelProvider>) -> AgentSpec {
        self.provider = AgentProvider::Own(provider);
        self
    }
    /// Calls the provider the engine registered under `name`.
    pub fn provider_named(mut self, name: impl Into<String>) -> AgentSpec {
        self.provider = AgentProvider::Named(name.into());
        self
    }
    /// The child's history starts with these messages, then the task.
    /// Refused unless every one is a system message: what the child is
    /// asked comes from the call, not from the spec.
    pub fn instructions(mut self, messages: Vec<Message>) -> Result<AgentSpec, AgentSpecError> {
        if let Some((index, m)) = messages
            .iter()
            .enumerate()
            .find(|(_, m)| m.role() != Role::System)
        {
            return Err(AgentSpecError {
                index,
                role: m.role().as_str(),
            });
        }
        self.instructions = messages;
        Ok(self)
    }
    /// Adds a tool of the child's, beside the engine's. An agent tool may
    /// hold agent tools: the children nest, within
    /// `limits.max_sub_run_depth`.
    pub fn tool(mut self, tool: Arc<dyn Tool>) -> AgentSpec {
        self.tools.push(tool);
        self
    }
    /// The child's limits instead of the engine's (the sub-run bounds in
    /// force stay the least of the child's and its ancestors').
    pub fn limits(mut self, limits: EngineLimits) -> AgentSpec {
        self.limits = Some(limits);
        self
    }
    /// The child's model.
    pub fn model(&self) -> &ModelName {
        &self.model
    }
    /// The system messages the child's history starts with.
    pub fn instruction_messages(&self) -> &[Message] {
        &self.instructions
    }
    /// The child's own tools.
    pub fn tools(&self) -> &[Arc<dyn Tool>] {
        &self.tools
    }
    /// The child's own limits, if it has them.
    pub fn own_limits(&self) -> Option<&EngineLimits> {
        self.limits.as_ref()
    }
    pub(crate) fn provider_choice(&self) -> &AgentProvider {
        &self.provider
    }
}

/// A tool whose call is a child run: the model calls it with a `task`
/// (see [`AgentTool::task_parameters`]) and the engine starts a run of the
/// [`AgentSpec`] whose history is the spec's instructions then the task as
/// a user message. The child's outcome is the call's one terminal: its
/// final answer (bounded by `limits.part_bytes`) as `tool.completed`, its
/// failure as `tool.failed` naming the child's cause, its cancellation as
/// `tool.cancelled`, each with a `sub_run` member naming the child.
///
/// Called outside an engine (directly through [`Tool::call`]) it answers
/// a typed error (rule `sub_run.engine`).
///
/// ```
/// use keel_engine::{AgentSpec, AgentTool, Tool};
/// use keel_message::*;
/// let definition = ToolDefinition::new(
///     ToolName::parse("researcher")?,
///     "Researches a question",
///     CanonicalJson::from_value(&AgentTool::task_parameters())?,
/// )?;
/// let tool = AgentTool::new(definition, AgentSpec::new(ModelName::parse("m")?));
/// assert!(tool.as_agent().is_some());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct AgentTool {
    definition: ToolDefinition,
    spec: AgentSpec,
    policy: ToolPolicy,
}

impl AgentTool {
    /// A tool named and described by `definition` that runs `spec`, under
    /// the default policy.
    pub fn new(definition: ToolDefinition, spec: AgentSpec) -> AgentTool {
        AgentTool {
            definition,
            spec,
            policy: ToolPolicy::default(),
        }
    }
    /// A tool named `name`, described by `description`, whose parameters
    /// are [`task_parameters`](Self::task_parameters): the definition most
    /// hosts write. Refused as [`ToolDefinition::new`] refuses a
    /// description over its bound.
    ///
    /// ```
    /// use keel_engine::{AgentSpec, AgentTool, Tool};
    /// use keel_message::{ModelName, ToolName};
    /// let spec = AgentSpec::new(ModelName::parse("m")?);
    /// let tool = AgentTool::for_task(ToolName::parse("reviewer")?, "Reviews a change", spec)?;
    /// assert_eq!(tool.definition().name().as_str(), "reviewer");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn for_task(
        name: ToolName,
        description: &str,
        spec: AgentSpec,
    ) -> Result<AgentTool, MessageError> {
        let parameters = CanonicalJson::from_value(&Self::task_parameters())?;
        let definition = ToolDefinition::new(name, description, parameters)?;
        Ok(AgentTool::new(definition, spec))
    }
    /// This tool under `policy` (its timeout bounds the child run: at the
    /// timeout the child is cancelled and the call is `tool.cancelled`).
    pub fn with_policy(mut self, policy: ToolPolicy) -> AgentTool {
        self.policy = policy;
        self
    }
    /// The parameter schema an agent tool's definition usually has: one
    /// required string, `task`.
    pub fn task_parameters() -> serde_json::Value {
        serde_json::json!({
            "type": "object",
            "properties": {"task": {"type": "string"}},
            "required": ["task"],
            "additionalProperties": false,
        })
    }
    /// What the child runs with.
    pub fn spec(&self) -> &AgentSpec {
        &self.spec
    }
}

impl Tool for AgentTool {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }
    fn policy(&self) -> ToolPolicy {
        self.policy.clone()
    }
    fn call(&self, _invocation: ToolInvocation) -> ToolFuture {
        let error = ToolError::typed(
            format!(
                "agent tool {} runs only inside an engine run (rule sub_run.engine)",
                self.definition.name()
            ),
            ToolOutcome::Definitive,
            ToolRetry::NotRetryable,
        );
        Box::pin(async move { Err(error) })
    }
    fn as_agent(&self) -> Option<&AgentTool> {
        Some(self)
    }
}
