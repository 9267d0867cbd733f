//! [`Engine`]: the registry of live runs, starting a run, lookup by run
//! id, and shutdown.

use crate::cancel::CancelToken;
use crate::compose::{RunDefaults, compose};
use crate::error::StartError;
use crate::follow::{FOLLOW_BOUNDS, FollowError, RunFollower};
use crate::request::{RunCanceller, RunHandle, RunRequest};
use crate::run::{
    ChildRun, Children, FinalOutcome, RunEnded, RunEnv, RunTies, Runner, StartChild,
    commit_cancelled_terminals,
};
use keel_eventlog::{Clock, RunLog, SubscriptionBounds};
use keel_message::{Limits, Message, RunId, ToolName};
use keel_observers::{RunHistory, ShutdownReport};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

struct LiveEntry {
    cancel: CancelToken,
    log: RunLog,
    ended: watch::Receiver<Option<RunEnded>>,
    /// The parent run, for a sub-run.
    parent: Option<RunId>,
    /// 0 for a run the host started, its parent's + 1 for a sub-run.
    depth: u32,
    /// The run's children (shared with its task).
    children: Arc<Children>,
}

#[derive(Default)]
struct Registry {
    runs: HashMap<RunId, LiveEntry>,
    shutting_down: bool,
}

/// The engine's state: the defaults runs compose over, what run tasks
/// share ([`RunEnv`]), and the registry of live runs.
pub(crate) struct EngineInner {
    defaults: RunDefaults,
    env: Arc<RunEnv>,
    clock: Arc<dyn Clock>,
    /// Where followers read what a live log no longer retains, and runs
    /// that are not live.
    history: Option<Arc<dyn RunHistory>>,
    registry: Mutex<Registry>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl EngineInner {
    pub(crate) fn new(
        defaults: RunDefaults,
        env: RunEnv,
        clock: Arc<dyn Clock>,
        history: Option<Arc<dyn RunHistory>>,
    ) -> EngineInner {
        EngineInner {
            defaults,
            env: Arc::new(env),
            clock,
            history,
            registry: Mutex::new(Registry::default()),
        }
    }

    fn retire(&self, run_id: &RunId) {
        lock(&self.registry).runs.remove(run_id);
    }
}

/// A run the engine is executing, found by [`Engine::live_run`].
#[derive(Debug, Clone)]
pub struct LiveRun {
    run_id: RunId,
    log: RunLog,
    canceller: RunCanceller,
    ended: watch::Receiver<Option<RunEnded>>,
}

impl LiveRun {
    /// The run's id.
    pub fn run_id(&self) -> &RunId {
        &self.run_id
    }
    /// The run's authoritative log.
    pub fn log(&self) -> &RunLog {
        &self.log
    }
    /// A canceller for the run.
    pub fn canceller(&self) -> RunCanceller {
        self.canceller.clone()
    }
    /// Waits until the run task has ended: its terminals are committed and
    /// were offered to the observers.
    pub async fn ended(&self) {
        let mut ended = self.ended.clone();
        let _ = ended.wait_for(Option::is_some).await;
    }
}

/// Hosts many runs at once over one observer pipeline; each run is
/// composed from its [`RunRequest`] and the builder's defaults. Cloning
/// gives another handle to the same engine.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<EngineInner>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field(
                "providers",
                &self.inner.defaults.providers.keys().collect::<Vec<_>>(),
            )
            .field("tools", &self.inner.defaults.tools.names())
            .field("live_runs", &self.live_runs())
            .finish()
    }
}

/// A run just spawned: the handle a parent keeps on it, and its task.
struct Launched {
    child: ChildRun,
    task: tokio::task::JoinHandle<crate::request::RunReport>,
}

impl StartChild for Engine {
    fn start_child(&self, request: RunRequest) -> Result<ChildRun, StartError> {
        // The parent waits on the child's registry entry, not on the task.
        self.launch(request).map(|launched| launched.child)
    }
}

/// What [`Engine::shutdown`] achieved.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EngineShutdown {
    /// Runs that ended within the deadline.
    pub runs_ended: usize,
    /// Runs still running at the deadline: their terminals were committed
    /// to their logs, which were then shut down.
    pub runs_abandoned: usize,
    /// Runs whose history some required observer did not acknowledge in
    /// full (abandoned runs included): their stores hold a prefix without
    /// the terminals, to be recovered.
    pub unacknowledged: Vec<RunId>,
    /// What the observer pipeline achieved.
    pub observers: ShutdownReport,
}

impl Engine {
    pub(crate) fn from_inner(inner: EngineInner) -> Engine {
        Engine {
            inner: Arc::new(inner),
        }
    }

    /// Starts a run on the current Tokio runtime. Refused, with nothing
    /// committed, when the engine is shutting down, the id is live, or the
    /// request does not compose (see [`StartError`]).
    pub fn start(&self, request: RunRequest) -> Result<RunHandle, StartError> {
        let launched = self.launch(request)?;
        Ok(RunHandle {
            run_id: launched.child.run_id,
            log: launched.child.log,
            cancel: launched.child.cancel,
            task: launched.task,
        })
    }

    /// Composes, registers and spawns a run (a sub-run when the request's
    /// `parent` is set: its registry entry names the parent).
    fn launch(&self, request: RunRequest) -> Result<Launched, StartError> {
        let handle = tokio::runtime::Handle::try_current().map_err(|_| StartError::NoRuntime)?;
        let context = compose(&self.inner.defaults, &request)?;
        self.check_history(&request.history)?;
        let log = RunLog::new(
            request.run_id.clone(),
            self.inner.defaults.log_config.clone(),
            Arc::clone(&self.inner.clock),
        )
        .map_err(StartError::Log)?;
        let cancel = CancelToken::default();
        let (ended_tx, ended_rx) = watch::channel(None);
        let children = Arc::new(Children::default());
        {
            // One lock for the shutdown flag and the registry: a run is
            // either refused or seen (and cancelled) by shutdown.
            let mut registry = lock(&self.inner.registry);
            if registry.shutting_down {
                return Err(StartError::ShuttingDown);
            }
            if registry.runs.contains_key(&request.run_id) {
                return Err(StartError::DuplicateRun {
                    run_id: request.run_id,
                });
            }
            registry.runs.insert(
                request.run_id.clone(),
                LiveEntry {
                    cancel: cancel.clone(),
                    log: log.clone(),
                    ended: ended_rx.clone(),
                    parent: request.parent.as_ref().map(|p| p.link.run_id.clone()),
                    depth: request.parent.as_ref().map_or(0, |p| p.depth),
                    children: Arc::clone(&children),
                },
            );
        }
        let final_outcome = FinalOutcome::default();
        let child = ChildRun {
            run_id: request.run_id.clone(),
            log: log.clone(),
            cancel: cancel.clone(),
            ended: ended_rx,
            final_outcome: final_outcome.clone(),
        };
        let ties = RunTies {
            children,
            final_outcome,
            starter: Arc::new(self.clone()),
        };
        let runner = Runner::new(Arc::clone(&self.inner.env), context, log, request, ties);
        let engine = Arc::clone(&self.inner);
        let task = handle.spawn(async move {
            let ended = runner.run(cancel).await;
            engine.retire(ended.run_id());
            let _ = ended_tx.send(Some(RunEnded {
                acknowledged: ended.acknowledged(),
            }));
            ended.into_report()
        });
        Ok(Launched { child, task })
    }

    fn check_history(&self, history: &[Message]) -> Result<(), StartError> {
        if history.is_empty() {
            return Err(StartError::EmptyHistory);
        }
        let limits = &self.inner.env.message_limits;
        for (i, m) in history.iter().enumerate() {
            Message::new_with(m.id().clone(), m.role(), m.parts().to_vec(), limits)
                .map_err(|e| StartError::InvalidHistory(e.within(&format!("$.history[{i}]"))))?;
        }
        Ok(())
    }

    /// Whether a run of `request` would have a fixed tool named `name`:
    /// one of the builder's tools or of the request's own (tool sources'
    /// tools are read turn by turn and not counted). A host adding tools a
    /// client declares (AG-UI's frontend tools) refuses a taken name with
    /// it before the run starts, rather than meeting
    /// [`StartError::DuplicateTool`] after its admission.
    pub fn has_tool(&self, request: &RunRequest, name: &ToolName) -> bool {
        self.inner.defaults.tools.get(name).is_some()
            || request.tools.iter().any(|t| t.definition().name() == name)
    }

    /// How many runs are live.
    pub fn live_runs(&self) -> usize {
        lock(&self.inner.registry).runs.len()
    }

    /// The live run with this id, if any.
    pub fn live_run(&self, run_id: &str) -> Option<LiveRun> {
        // A hash lookup, not a scan: the daemon asks this on every stream,
        // status, admission and listed run, with thousands of runs live.
        // Every key is a parsed `RunId`, so text that does not parse is
        // no key.
        let key = RunId::parse(run_id).ok()?;
        let registry = lock(&self.inner.registry);
        registry
            .runs
            .get_key_value(&key)
            .map(|(id, entry)| LiveRun {
                run_id: id.clone(),
                log: entry.log.clone(),
                canceller: RunCanceller(entry.cancel.clone()),
                ended: entry.ended.clone(),
            })
    }

    /// The log of the live run `run_id`, if it is live.
    pub fn log(&self, run_id: &RunId) -> Option<RunLog> {
        let registry = lock(&self.inner.registry);
        registry.runs.get(run_id).map(|entry| entry.log.clone())
    }

    /// The history the engine's followers read (set with
    /// [`EngineBuilder::history`](crate::EngineBuilder::history)).
    pub fn history(&self) -> Option<&Arc<dyn RunHistory>> {
        self.inner.history.as_ref()
    }

    /// Follows run `run_id` after `after` with [`FOLLOW_BOUNDS`] (durable
    /// events only): the prefix the live log no longer retains from the
    /// engine's history, then the live log, no gap and no duplicate; a run
    /// that is not live from the history alone. See [`RunFollower`].
    ///
    /// Refused with [`FollowError::UnknownRun`] (not live, not in the
    /// history), [`FollowError::CursorAhead`] or
    /// [`FollowError::CursorExpired`] (the events after `after` are
    /// neither retained nor stored). May read the history (on the blocking
    /// pool), hence async.
    pub async fn subscribe(&self, run_id: &RunId, after: u64) -> Result<RunFollower, FollowError> {
        self.subscribe_with(run_id, after, FOLLOW_BOUNDS).await
    }

    /// [`subscribe`](Self::subscribe) with explicit bounds and durability
    /// for the live part (the history's events are durable either way).
    pub async fn subscribe_with(
        &self,
        run_id: &RunId,
        after: u64,
        bounds: SubscriptionBounds,
    ) -> Result<RunFollower, FollowError> {
        let history = self.inner.history.clone();
        RunFollower::open(run_id.clone(), after, bounds, self.log(run_id), history).await
    }

    /// The ids of the live runs that `run_id` started as sub-runs (its
    /// children, not their descendants). A child is live until its task
    /// has ended; its parent waits for that before its own terminals, so
    /// a run that is not live has no live children.
    pub fn live_children(&self, run_id: &RunId) -> Vec<RunId> {
        let registry = lock(&self.inner.registry);
        let children = registry.runs.iter();
        children
            .filter(|(_, e)| e.parent.as_ref() == Some(run_id))
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// The ids of every live run.
    pub fn live_run_ids(&self) -> Vec<RunId> {
        lock(&self.inner.registry).runs.keys().cloned().collect()
    }

    /// The message limits every run's history and parts are checked
    /// against ([`EngineBuilder::message_limits`](crate::EngineBuilder::message_limits)):
    /// what a host rebuilding a history (a view, a continuation) applies.
    pub fn message_limits(&self) -> &Limits {
        &self.inner.env.message_limits
    }

    /// Whether [`shutdown`](Self::shutdown) has begun (new runs are refused).
    pub fn is_shutting_down(&self) -> bool {
        lock(&self.inner.registry).shutting_down
    }

    /// Observer counters.
    pub fn observer_stats(&self) -> keel_observers::PipelineStats {
        self.inner.env.pipeline.stats()
    }

    /// Stops taking runs, cancels every live run and waits (until
    /// `deadline`) for them to commit their cancelled terminals and offer
    /// them to the observers. A run still going at the deadline gets its
    /// terminals committed to its log all the same, then the log is shut
    /// down (its subscribers get a typed end). Then the best-effort
    /// observers are drained with what time is left. The report names
    /// every run whose observers did not acknowledge its whole history.
    pub async fn shutdown(&self, deadline: Duration) -> EngineShutdown {
        let until = Instant::now() + deadline;
        self.inner.env.shutdown_until(until);
        let live: Vec<(RunId, LiveEntry)> = {
            let mut registry = lock(&self.inner.registry);
            registry.shutting_down = true;
            let runs = registry.runs.iter();
            runs.map(|(id, e)| (id.clone(), e.clone_entry())).collect()
        };
        // Every run at once: each one ends its children before its own
        // terminals, so a tree still closes innermost first.
        for (_, entry) in &live {
            entry.cancel.cancel();
        }
        let mut report = EngineShutdown::default();
        let mut abandoned = Vec::new();
        for (run_id, mut entry) in live {
            let ended = tokio::time::timeout_at(until, entry.ended.wait_for(Option::is_some)).await;
            match ended.ok().and_then(|r| r.ok().and_then(|e| *e)) {
                Some(RunEnded { acknowledged }) => {
                    report.runs_ended += 1;
                    if !acknowledged {
                        report.unacknowledged.push(run_id);
                    }
                    entry.log.shutdown();
                }
                None => abandoned.push((run_id, entry)),
            }
        }
        self.abandon(abandoned, &mut report);
        let left = until.saturating_duration_since(Instant::now());
        report.observers = self.inner.env.pipeline.shutdown(left);
        report
    }

    /// Commits the terminals of runs still going at the shutdown deadline,
    /// deepest first (a child's before its parent's, whose call then
    /// closes with the child's terminal), and shuts their logs down.
    fn abandon(&self, mut abandoned: Vec<(RunId, LiveEntry)>, report: &mut EngineShutdown) {
        abandoned.sort_by_key(|(_, entry)| std::cmp::Reverse(entry.depth));
        let part_bytes = self.inner.env.message_limits.part_bytes;
        for (run_id, entry) in abandoned {
            report.runs_abandoned += 1;
            commit_cancelled_terminals(&entry.log, &entry.children, part_bytes);
            report.unacknowledged.push(run_id);
            entry.log.shutdown();
        }
    }
}

impl LiveEntry {
    fn clone_entry(&self) -> LiveEntry {
        LiveEntry {
            cancel: self.cancel.clone(),
            log: self.log.clone(),
            ended: self.ended.clone(),
            parent: self.parent.clone(),
            depth: self.depth,
            children: Arc::clone(&self.children),
        }
    }
}
