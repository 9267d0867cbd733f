//! [`EngineBuilder`]: what every run shares (observers, clock, bounds,
//! retention, validation policy) and the defaults a [`RunRequest`]
//! (crate::RunRequest) may replace (providers, tools, limits, metadata
//! allowlist, interaction handler).

use crate::compose::RunDefaults;
use crate::config::EngineLimits;
use crate::engine::{Engine, EngineInner};
use crate::error::BuildError;
use crate::interaction::InteractionHandler;
use crate::run::RunEnv;
use crate::tool::Tool;
use crate::tool_set::ToolSet;
use keel_eventlog::{Clock, LogConfig, SystemClock};
use keel_message::Limits;
use keel_observers::{
    BestEffortObserver, PipelineBuilder, PipelineConfig, RequiredObserver, RunHistory,
};
use keel_stream::{MetadataAllowlist, ModelProvider, ValidatorConfig};
use std::collections::HashMap;
use std::sync::Arc;

/// A provider registered under a name.
struct NamedProvider {
    name: String,
    provider: Arc<dyn ModelProvider>,
}

/// Composes an [`Engine`]: providers, tools, observers (in order), the
/// metadata allowlist, the clock, limits and log retention. Providers and
/// tools may be left out when every run brings its own.
pub struct EngineBuilder {
    providers: Vec<NamedProvider>,
    tools: Vec<Arc<dyn Tool>>,
    pipeline: PipelineBuilder,
    allowlist: MetadataAllowlist,
    clock: Arc<dyn Clock>,
    limits: EngineLimits,
    message_limits: Limits,
    log_config: LogConfig,
    validator: ValidatorConfig,
    interactions: Option<Arc<dyn InteractionHandler>>,
    history: Option<Arc<dyn RunHistory>>,
}

impl std::fmt::Debug for EngineBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineBuilder")
            .field(
                "providers",
                &self.providers.iter().map(|p| &p.name).collect::<Vec<_>>(),
            )
            .field("tools", &self.tools.len())
            .field("limits", &self.limits)
            .finish()
    }
}

impl Default for EngineBuilder {
    fn default() -> Self {
        EngineBuilder {
            providers: Vec::new(),
            tools: Vec::new(),
            pipeline: PipelineBuilder::new(),
            allowlist: MetadataAllowlist::empty(),
            clock: Arc::new(SystemClock),
            limits: EngineLimits::default(),
            message_limits: Limits::default(),
            log_config: LogConfig::default(),
            validator: ValidatorConfig::default(),
            interactions: None,
            history: None,
        }
    }
}

/// The builder is the way in, so it lives with the builder (the engine
/// module does not depend on how it is composed).
impl Engine {
    /// A builder.
    pub fn builder() -> EngineBuilder {
        EngineBuilder::new()
    }
}

impl EngineBuilder {
    /// A builder with defaults: system clock, default limits and retention,
    /// no metadata namespaces allowed.
    pub fn new() -> Self {
        Self::default()
    }
    /// Registers a provider under `name`.
    pub fn provider(mut self, name: impl Into<String>, provider: Arc<dyn ModelProvider>) -> Self {
        self.providers.push(NamedProvider {
            name: name.into(),
            provider,
        });
        self
    }
    /// Registers a tool every run has.
    pub fn tool(mut self, tool: Arc<dyn Tool>) -> Self {
        self.tools.push(tool);
        self
    }
    /// Adds a required observer after those already added.
    pub fn required_observer(mut self, observer: Arc<dyn RequiredObserver>) -> Self {
        self.pipeline = self.pipeline.required(observer);
        self
    }
    /// Adds a best-effort observer after those already added.
    pub fn best_effort_observer(mut self, observer: Box<dyn BestEffortObserver>) -> Self {
        self.pipeline = self.pipeline.best_effort(observer);
        self
    }
    /// Observer deadlines and queue sizes.
    pub fn pipeline_config(mut self, config: PipelineConfig) -> Self {
        self.pipeline = self.pipeline.config(config);
        self
    }
    /// Provider metadata namespaces allowed into events (the default for
    /// runs that bring no allowlist).
    pub fn allow_metadata(mut self, allowlist: MetadataAllowlist) -> Self {
        self.allowlist = allowlist;
        self
    }
    /// The clock events are stamped with.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }
    /// Run limits and the retry policy (the default for runs that bring
    /// none).
    pub fn limits(mut self, limits: EngineLimits) -> Self {
        self.limits = limits;
        self
    }
    /// Message, request and stream bounds.
    pub fn message_limits(mut self, limits: Limits) -> Self {
        self.message_limits = limits;
        self
    }
    /// Per-run log retention.
    pub fn log_config(mut self, config: LogConfig) -> Self {
        self.log_config = config;
        self
    }
    /// Stream validation policy.
    pub fn validator_config(mut self, config: ValidatorConfig) -> Self {
        self.validator = config;
        self
    }
    /// The interaction handler (needed when a tool requires approval and
    /// the run brings no handler of its own).
    pub fn interaction_handler(mut self, handler: Arc<dyn InteractionHandler>) -> Self {
        self.interactions = Some(handler);
        self
    }
    /// The durable history followers read
    /// ([`Engine::subscribe`](crate::Engine::subscribe)): what a live log
    /// no longer retains, and runs that are not live. Usually the read
    /// side of a required observer added here (the SQLite journal's
    /// `JournalReader`, `keel_testkit::MemoryJournal`); without one a
    /// follower has the live log only.
    pub fn history(mut self, history: Arc<dyn RunHistory>) -> Self {
        self.history = Some(history);
        self
    }

    /// Checks the composition and builds the engine. Starts one thread per
    /// best-effort observer.
    pub fn build(self) -> Result<Engine, BuildError> {
        let mut providers = HashMap::new();
        for p in self.providers {
            if providers.contains_key(&p.name) {
                return Err(BuildError::DuplicateProvider { name: p.name });
            }
            providers.insert(p.name, p.provider);
        }
        let mut tools = ToolSet::default();
        for tool in self.tools {
            let name = tool.definition().name().clone();
            if tool.policy().requires_approval && self.interactions.is_none() {
                return Err(BuildError::ApprovalWithoutHandler { name });
            }
            if !tools.insert(tool) {
                return Err(BuildError::DuplicateTool { name });
            }
        }
        self.limits.validate(&self.log_config)?;
        self.log_config.validate()?;
        let definitions = tools.definitions();
        let defaults = RunDefaults {
            providers,
            tools: Arc::new(tools),
            definitions,
            limits: self.limits,
            log_config: self.log_config,
            allowlist: self.allowlist,
            interactions: self.interactions,
        };
        let env = RunEnv::new(self.pipeline.build(), self.message_limits, self.validator);
        Ok(Engine::from_inner(EngineInner::new(
            defaults,
            env,
            self.clock,
            self.history,
        )))
    }
}
