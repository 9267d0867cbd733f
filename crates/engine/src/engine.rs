//! `EngineBuilder`, `Engine` and `RunHandle`.

use crate::cancel::CancelToken;
use crate::config::EngineLimits;
use crate::error::{BuildError, FailureCause, StartError};
use crate::interaction::InteractionHandler;
use crate::run::Runner;
use crate::tool::Tool;
use keel_eventlog::{
    Clock, LogConfig, RunLog, SubscribeError, Subscription, SubscriptionBounds, SystemClock,
};
use keel_message::{Limits, Message, ModelName, RunId, ToolDefinition, ToolName};
use keel_observers::{
    BestEffortObserver, Pipeline, PipelineBuilder, PipelineConfig, RequiredObserver, ShutdownReport,
};
use keel_stream::{MetadataAllowlist, ModelProvider, Usage, ValidatorConfig};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

/// Composes an [`Engine`]: providers, tools, observers (in order), the
/// metadata allowlist, the clock, limits and log retention.
pub struct EngineBuilder {
    providers: Vec<(String, Arc<dyn ModelProvider>)>,
    tools: Vec<Arc<dyn Tool>>,
    pipeline: PipelineBuilder,
    allowlist: MetadataAllowlist,
    clock: Arc<dyn Clock>,
    limits: EngineLimits,
    message_limits: Limits,
    log_config: LogConfig,
    validator: ValidatorConfig,
    interactions: Option<Arc<dyn InteractionHandler>>,
}

impl std::fmt::Debug for EngineBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineBuilder")
            .field(
                "providers",
                &self.providers.iter().map(|(n, _)| n).collect::<Vec<_>>(),
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
        }
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
        self.providers.push((name.into(), provider));
        self
    }
    /// Registers a tool.
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
    /// Provider metadata namespaces allowed into events.
    pub fn allow_metadata(mut self, allowlist: MetadataAllowlist) -> Self {
        self.allowlist = allowlist;
        self
    }
    /// The clock events are stamped with.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }
    /// Run limits and the retry policy.
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
    /// The interaction handler (needed when a tool requires approval).
    pub fn interaction_handler(mut self, handler: Arc<dyn InteractionHandler>) -> Self {
        self.interactions = Some(handler);
        self
    }

    /// Checks the composition and builds the engine. Starts one thread per
    /// best-effort observer.
    pub fn build(self) -> Result<Engine, BuildError> {
        if self.providers.is_empty() {
            return Err(BuildError::NoProvider);
        }
        let mut providers = HashMap::new();
        for (name, p) in self.providers {
            if providers.insert(name.clone(), p).is_some() {
                return Err(BuildError::DuplicateProvider { name });
            }
        }
        let mut tools: HashMap<ToolName, Arc<dyn Tool>> = HashMap::new();
        let mut definitions: Vec<ToolDefinition> = Vec::new();
        for tool in self.tools {
            let def = tool.definition().clone();
            if tool.policy().requires_approval && self.interactions.is_none() {
                return Err(BuildError::ApprovalWithoutHandler {
                    name: def.name().clone(),
                });
            }
            if tools.insert(def.name().clone(), tool).is_some() {
                return Err(BuildError::DuplicateTool {
                    name: def.name().clone(),
                });
            }
            definitions.push(def);
        }
        let l = &self.limits;
        let invalid =
            |field, value: String, rule| Err(BuildError::InvalidLimit { field, value, rule });
        if l.max_turns == 0 {
            return invalid("max_turns", l.max_turns.to_string(), "at least 1");
        }
        if l.max_parallel_tools == 0 {
            return invalid("max_parallel_tools", "0".into(), "at least 1");
        }
        if l.max_parallel_tools.saturating_add(2) > self.log_config.max_open_scopes {
            // Each running tool (or its approval) is a scope, beside the
            // run and the turn; more would break `limits.open_scopes`
            // mid-run.
            return invalid(
                "max_parallel_tools",
                l.max_parallel_tools.to_string(),
                "at most log.max_open_scopes - 2",
            );
        }
        if l.max_tool_calls_per_turn == 0 {
            return invalid("max_tool_calls_per_turn", "0".into(), "at least 1");
        }
        if l.retry.max_attempts == 0 {
            return invalid("retry.max_attempts", "0".into(), "at least 1");
        }
        if !(l.retry.multiplier.is_finite() && l.retry.jitter.is_finite()) {
            return invalid("retry", "non-finite".into(), "finite multiplier and jitter");
        }
        if l.model_call_timeout.is_zero() || l.tool_call_timeout.is_zero() {
            return invalid("timeouts", "0".into(), "non-zero");
        }
        self.log_config.validate()?;
        Ok(Engine {
            inner: Arc::new(EngineInner {
                providers,
                tools,
                definitions: definitions.into(),
                pipeline: self.pipeline.build(),
                allowlist: self.allowlist,
                clock: self.clock,
                limits: self.limits,
                message_limits: self.message_limits,
                log_config: self.log_config,
                validator: self.validator,
                interactions: self.interactions,
                runs: Mutex::new(HashMap::new()),
                shutting_down: std::sync::atomic::AtomicBool::new(false),
            }),
        })
    }
}

pub(crate) struct EngineInner {
    pub(crate) providers: HashMap<String, Arc<dyn ModelProvider>>,
    pub(crate) tools: HashMap<ToolName, Arc<dyn Tool>>,
    pub(crate) definitions: Arc<[ToolDefinition]>,
    pub(crate) pipeline: Pipeline,
    pub(crate) allowlist: MetadataAllowlist,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) limits: EngineLimits,
    pub(crate) message_limits: Limits,
    pub(crate) log_config: LogConfig,
    pub(crate) validator: ValidatorConfig,
    pub(crate) interactions: Option<Arc<dyn InteractionHandler>>,
    runs: Mutex<HashMap<RunId, LiveRun>>,
    shutting_down: std::sync::atomic::AtomicBool,
}

struct LiveRun {
    cancel: CancelToken,
    log: RunLog,
    done: watch::Receiver<bool>,
}

/// Hosts many runs at once over one set of providers, tools and
/// observers. Cloning gives another handle to the same engine.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<EngineInner>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field(
                "providers",
                &self.inner.providers.keys().collect::<Vec<_>>(),
            )
            .field("tools", &self.inner.tools.keys().collect::<Vec<_>>())
            .field("live_runs", &self.live_runs())
            .finish()
    }
}

/// What a run is asked to do.
#[derive(Debug, Clone)]
pub struct RunRequest {
    /// The run's id (unique among live runs).
    pub run_id: RunId,
    /// Which registered provider to call.
    pub provider: String,
    /// The model name passed to it.
    pub model: ModelName,
    /// The starting history.
    pub history: Vec<Message>,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunOutcome {
    /// The model stopped calling tools.
    Completed {
        /// The last assistant message.
        final_message: Message,
        /// Usage summed over every model call that reported it.
        usage: Usage,
    },
    /// It failed; `cause` says why.
    Failed {
        /// Why.
        cause: FailureCause,
    },
    /// It was cancelled.
    Cancelled,
}

/// A handle on one run: its id, its log, cancellation and the outcome.
#[derive(Debug)]
pub struct RunHandle {
    run_id: RunId,
    log: RunLog,
    cancel: CancelToken,
    task: tokio::task::JoinHandle<RunOutcome>,
}

impl RunHandle {
    /// The run's id.
    pub fn run_id(&self) -> &RunId {
        &self.run_id
    }
    /// The run's authoritative log.
    pub fn log(&self) -> &RunLog {
        &self.log
    }
    /// Subscribes to the run's events after `after` with default bounds.
    pub fn subscribe(&self, after: u64) -> Result<Subscription, SubscribeError> {
        self.log.subscribe(after, SubscriptionBounds::default())
    }
    /// Subscribes with explicit bounds.
    pub fn subscribe_with(
        &self,
        after: u64,
        bounds: SubscriptionBounds,
    ) -> Result<Subscription, SubscribeError> {
        self.log.subscribe(after, bounds)
    }
    /// Cancels the run: in-flight provider streams and tool futures are
    /// dropped, and cancelled terminals are committed innermost first.
    pub fn cancel(&self) {
        self.cancel.cancel();
    }
    /// A cloneable canceller, for handing to another task.
    pub fn canceller(&self) -> RunCanceller {
        RunCanceller(self.cancel.clone())
    }
    /// Waits for the run to end.
    pub async fn join(self) -> RunOutcome {
        match self.task.await {
            Ok(outcome) => outcome,
            Err(e) => RunOutcome::Failed {
                cause: FailureCause::Internal(format!("run task ended abnormally: {e}")),
            },
        }
    }
}

/// Cancels one run; cheap to clone.
#[derive(Debug, Clone)]
pub struct RunCanceller(CancelToken);

impl RunCanceller {
    /// Cancels the run.
    pub fn cancel(&self) {
        self.0.cancel();
    }
}

/// What [`Engine::shutdown`] achieved.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EngineShutdown {
    /// Runs that ended within the deadline.
    pub runs_ended: usize,
    /// Runs still running at the deadline (their logs were shut down).
    pub runs_abandoned: usize,
    /// What the observer pipeline achieved.
    pub observers: ShutdownReport,
}

impl Engine {
    /// A builder.
    pub fn builder() -> EngineBuilder {
        EngineBuilder::new()
    }

    /// Starts a run on the current Tokio runtime.
    pub fn start(&self, request: RunRequest) -> Result<RunHandle, StartError> {
        let handle = tokio::runtime::Handle::try_current().map_err(|_| StartError::NoRuntime)?;
        if self
            .inner
            .shutting_down
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            return Err(StartError::ShuttingDown);
        }
        let provider = self
            .inner
            .providers
            .get(&request.provider)
            .cloned()
            .ok_or_else(|| StartError::UnknownProvider {
                name: request.provider.clone(),
            })?;
        if request.history.is_empty() {
            return Err(StartError::EmptyHistory);
        }
        for (i, m) in request.history.iter().enumerate() {
            Message::new_with(
                m.id().clone(),
                m.role(),
                m.parts().to_vec(),
                &self.inner.message_limits,
            )
            .map_err(|e| StartError::InvalidHistory(e.within(&format!("$.history[{i}]"))))?;
        }
        let log = RunLog::new(
            request.run_id.clone(),
            self.inner.log_config.clone(),
            Arc::clone(&self.inner.clock),
        )
        .map_err(StartError::Log)?;
        let cancel = CancelToken::default();
        let (done_tx, done_rx) = watch::channel(false);
        {
            let mut runs = self.inner.runs.lock().unwrap_or_else(|e| e.into_inner());
            if runs.contains_key(&request.run_id) {
                return Err(StartError::DuplicateRun {
                    run_id: request.run_id,
                });
            }
            runs.insert(
                request.run_id.clone(),
                LiveRun {
                    cancel: cancel.clone(),
                    log: log.clone(),
                    done: done_rx,
                },
            );
        }
        let runner = Runner::new(
            Arc::clone(&self.inner),
            log.clone(),
            provider,
            request.clone(),
        );
        let engine = Arc::clone(&self.inner);
        let run_cancel = cancel.clone();
        let run_id = request.run_id.clone();
        let task = handle.spawn(async move {
            let outcome = runner.run(run_cancel).await;
            engine
                .runs
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&run_id);
            let _ = done_tx.send(true);
            outcome
        });
        Ok(RunHandle {
            run_id: request.run_id,
            log,
            cancel,
            task,
        })
    }

    /// How many runs are live.
    pub fn live_runs(&self) -> usize {
        self.inner
            .runs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// Observer counters.
    pub fn observer_stats(&self) -> keel_observers::PipelineStats {
        self.inner.pipeline.stats()
    }

    /// Stops taking runs, cancels every live run, waits (until `deadline`)
    /// for them to commit their cancelled terminals, shuts down any log
    /// still open (its subscribers get a typed end), then drains and
    /// flushes the best-effort observers with what time is left.
    pub async fn shutdown(&self, deadline: Duration) -> EngineShutdown {
        let until = tokio::time::Instant::now() + deadline;
        self.inner
            .shutting_down
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let live: Vec<(CancelToken, RunLog, watch::Receiver<bool>)> = self
            .inner
            .runs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .map(|r| (r.cancel.clone(), r.log.clone(), r.done.clone()))
            .collect();
        for (cancel, _, _) in &live {
            cancel.cancel();
        }
        let mut report = EngineShutdown::default();
        for (_, log, mut done) in live {
            let ended = tokio::time::timeout_at(until, done.wait_for(|d| *d)).await;
            if matches!(ended, Ok(Ok(_))) {
                report.runs_ended += 1;
            } else {
                report.runs_abandoned += 1;
            }
            log.shutdown();
        }
        let left = until.saturating_duration_since(tokio::time::Instant::now());
        report.observers = self.inner.pipeline.shutdown(left);
        report
    }
}
