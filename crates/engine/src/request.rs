//! What a run is asked to do ([`RunRequest`]), how it ended
//! ([`RunOutcome`]), and the handle on a started run ([`RunHandle`]).

use crate::cancel::CancelToken;
use crate::config::EngineLimits;
use crate::error::FailureCause;
use crate::interaction::InteractionHandler;
use crate::source::ToolSource;
use crate::tool::Tool;
use keel_eventlog::{
    ChatRun, ForkedFrom, HistoryReference, ParentLink, RunLog, SubscribeError, Subscription,
    SubscriptionBounds,
};
use keel_message::{Message, MessageError, MessageId, ModelName, Role, RunId};
use keel_stream::{MetadataAllowlist, ModelProvider, Usage};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// Which provider a run calls.
#[derive(Clone)]
pub(crate) enum ProviderChoice {
    /// The builder's only provider.
    Default,
    /// A provider the builder registered under this name.
    Named(String),
    /// The run's own.
    Own(Arc<dyn ModelProvider>),
}

/// What a run is asked to do, and what it brings of its own: provider,
/// tools and tool sources, limits, metadata allowlist, approval handler.
/// Whatever it leaves out comes from the [`EngineBuilder`](crate::EngineBuilder);
/// its tools are added to the builder's (a name given twice is refused),
/// and its sources' tools come after both, turn by turn.
///
/// ```
/// use keel_engine::{EngineLimits, RunRequest};
/// use keel_message::*;
/// let request = RunRequest::new(
///     RunId::parse("run_1")?,
///     ModelName::parse("m")?,
///     vec![Message::text(MessageId::parse("m1")?, Role::User, "Hi")?],
/// )
/// .provider_named("hello")
/// .limits(EngineLimits { max_turns: 4, ..EngineLimits::default() });
/// assert_eq!(request.run_id().as_str(), "run_1");
/// # Ok::<(), keel_message::MessageError>(())
/// ```
#[derive(Clone)]
pub struct RunRequest {
    pub(crate) run_id: RunId,
    pub(crate) model: ModelName,
    pub(crate) history: Vec<Message>,
    pub(crate) provider: ProviderChoice,
    pub(crate) tools: Vec<Arc<dyn Tool>>,
    pub(crate) sources: Vec<Arc<dyn ToolSource>>,
    pub(crate) limits: Option<EngineLimits>,
    pub(crate) allowlist: Option<MetadataAllowlist>,
    pub(crate) interactions: Option<Arc<dyn InteractionHandler>>,
    pub(crate) continues: Option<RunId>,
    pub(crate) forked_from: Option<ForkedFrom>,
    pub(crate) chat: Option<ChatRun>,
    pub(crate) inherits: Option<Inheritance>,
    pub(crate) compaction: CompactionRequest,
    /// Set by the engine when the run is a sub-run (never by a host).
    pub(crate) parent: Option<ParentRun>,
}

/// A sub-run's place under its parent: the link its `run.started`
/// records, its depth, the sub-run bounds in force over its ancestors, and
/// how it records the parent's `tool.sub_run` before it starts. The
/// parent's handle on the child (cancel, await) is in the parent's
/// registry of children, not here.
#[derive(Clone)]
pub(crate) struct ParentRun {
    pub(crate) link: ParentLink,
    /// The child's depth: 1 for a child of a run the host started.
    pub(crate) depth: u32,
    /// The least `max_sub_run_depth` over the ancestors.
    pub(crate) max_depth: u32,
    /// The least `max_sub_runs` over the ancestors.
    pub(crate) max_sub_runs: u32,
    pub(crate) linker: Arc<dyn LinkParent>,
}

/// Resolves to whether the parent's `tool.sub_run` is in its log.
pub(crate) type LinkFuture = Pin<Box<dyn Future<Output = bool> + Send>>;

/// Records, in the parent's log, the `tool.sub_run` that names a child:
/// the first thing the child's task does, before its `run.started`.
pub(crate) trait LinkParent: Send + Sync {
    /// Commits the link (and waits until it is durable, or the parent's
    /// observers refused it). Safe to drop at any point: the link is then
    /// in the log exactly when [`is_linked`](Self::is_linked) says so.
    fn link(&self) -> LinkFuture;
    /// Whether the link is in the parent's log.
    fn is_linked(&self) -> bool;
}

/// What a request asks of compaction beyond the policy's threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum CompactionRequest {
    /// Compact when the estimate reaches the threshold (the default).
    #[default]
    Threshold,
    /// Compact before the first answer call whatever the estimate.
    First,
    /// One turn holding only the compaction; the run's final message is
    /// the summary.
    Only,
}

/// The part of a continued run's history it inherits from the run it
/// continues: recorded as a reference, not copied.
#[derive(Debug, Clone)]
pub(crate) struct Inheritance {
    /// What `run.input`'s reference form records.
    pub(crate) reference: HistoryReference,
    /// How many of the history's first messages are inherited.
    pub(crate) messages: usize,
}

impl std::fmt::Debug for RunRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let provider = match &self.provider {
            ProviderChoice::Default => "default".to_owned(),
            ProviderChoice::Named(name) => format!("named {name}"),
            ProviderChoice::Own(_) => "own".to_owned(),
        };
        f.debug_struct("RunRequest")
            .field("run_id", &self.run_id)
            .field("model", &self.model)
            .field("messages", &self.history.len())
            .field("provider", &provider)
            .field("tools", &self.tools.len())
            .field(
                "sources",
                &self.sources.iter().map(|s| s.name()).collect::<Vec<_>>(),
            )
            .field("limits", &self.limits)
            .field("continues", &self.continues)
            .field("forked_from", &self.forked_from)
            .field("chat", &self.chat)
            .field("inherits", &self.inherits)
            .field("compaction", &self.compaction)
            .field("parent", &self.parent.as_ref().map(|p| &p.link))
            .finish_non_exhaustive()
    }
}

impl RunRequest {
    /// A run of `model` from `history`, with everything else from the
    /// builder (its only provider, its tools, limits and handler).
    pub fn new(run_id: RunId, model: ModelName, history: Vec<Message>) -> RunRequest {
        RunRequest {
            run_id,
            model,
            history,
            provider: ProviderChoice::Default,
            tools: Vec::new(),
            sources: Vec::new(),
            limits: None,
            allowlist: None,
            interactions: None,
            continues: None,
            forked_from: None,
            chat: None,
            inherits: None,
            compaction: CompactionRequest::Threshold,
            parent: None,
        }
    }
    /// A run of `model` on one user message, `question`, under a fresh
    /// [`RunId::generate`] id (the message's id is `m1`). Fails only if the
    /// text breaks a message bound (see `keel_message::Limits`).
    ///
    /// ```
    /// use keel_engine::RunRequest;
    /// use keel_message::{ModelName, Role};
    /// let request = RunRequest::from_question(ModelName::parse("m")?, "Weather in Oslo?")?;
    /// assert_eq!(request.history().len(), 1);
    /// assert_eq!(request.history()[0].role(), Role::User);
    /// assert!(request.run_id().as_str().starts_with("run_"));
    /// # Ok::<(), keel_message::MessageError>(())
    /// ```
    pub fn from_question(model: ModelName, question: &str) -> Result<RunRequest, MessageError> {
        let message = Message::text(MessageId::parse("m1")?, Role::User, question)?;
        Ok(RunRequest::new(RunId::generate(), model, vec![message]))
    }
    /// Records that this run continues `previous` (a follow-up in a
    /// conversation: `run.started` names it). The history is the
    /// caller's: typically `history::rebuild` of the previous run plus the
    /// new message.
    pub fn continues(mut self, previous: RunId) -> RunRequest {
        self.continues = Some(previous);
        self
    }
    /// Marks this run as run `chat.n` of the chat conversation `chat.id`:
    /// `run.started` records it (its `chat` member), so a chat host can
    /// tell the runs it started from any other run of the same name.
    pub fn chat_run(mut self, chat: ChatRun) -> RunRequest {
        self.chat = Some(chat);
        self
    }
    /// Records that this run continues the run `reference` names and that
    /// the first `inherited_messages` messages of its history are that
    /// run's history (`keel_eventlog::history::rebuild_chain` of it). The
    /// log then records them as one `run.input` reference and only the
    /// messages after them in full, so a follow-up stores what is new; the
    /// model still gets the whole history. A count over the history's
    /// length fails the run before any turn (rule
    /// `request.inherited_messages`).
    ///
    /// ```
    /// use keel_engine::RunRequest;
    /// use keel_eventlog::HistoryReference;
    /// use keel_message::*;
    /// let reference = HistoryReference {
    ///     run_id: RunId::parse("run_1")?,
    ///     last_seq: 9,
    ///     digest: format!("sha256:{}", "0".repeat(64)).parse()?,
    ///     extra: Default::default(),
    /// };
    /// let history = vec![Message::text(MessageId::parse("m1")?, Role::User, "Hi")?];
    /// let request = RunRequest::new(RunId::parse("run_2")?, ModelName::parse("m")?, history)
    ///     .inherits(reference, 0);
    /// assert_eq!(request.continued_run().map(|r| r.as_str()), Some("run_1"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn inherits(
        mut self,
        reference: HistoryReference,
        inherited_messages: usize,
    ) -> RunRequest {
        self.continues = Some(reference.run_id.clone());
        self.forked_from = None;
        self.inherits = Some(Inheritance {
            reference,
            messages: inherited_messages,
        });
        self
    }
    /// Records that this run is a fork of the run `reference` names at
    /// `reference.last_seq` (`run.started`'s `forked_from`, no
    /// `continues`) and that the first `inherited_messages` messages of
    /// its history are that run's history through that seq
    /// (`keel_eventlog::history::rebuild_fork_point`). As with
    /// [`inherits`](Self::inherits), the log records them as one
    /// `run.input` reference and only the messages after them in full.
    ///
    /// ```
    /// use keel_engine::RunRequest;
    /// use keel_eventlog::HistoryReference;
    /// use keel_message::*;
    /// let reference = HistoryReference {
    ///     run_id: RunId::parse("run_1")?,
    ///     last_seq: 9,
    ///     digest: format!("sha256:{}", "0".repeat(64)).parse()?,
    ///     extra: Default::default(),
    /// };
    /// let history = vec![Message::text(MessageId::parse("m1")?, Role::User, "Hi")?];
    /// let request = RunRequest::new(RunId::parse("run_2")?, ModelName::parse("m")?, history)
    ///     .forks(reference, 1);
    /// let fork = request.forked_from().expect("a fork");
    /// assert_eq!((fork.run_id.as_str(), fork.seq), ("run_1", 9));
    /// assert_eq!(request.continued_run(), None);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn forks(mut self, reference: HistoryReference, inherited_messages: usize) -> RunRequest {
        self.continues = None;
        self.forked_from = Some(ForkedFrom::new(
            reference.run_id.clone(),
            reference.last_seq,
        ));
        self.inherits = Some(Inheritance {
            reference,
            messages: inherited_messages,
        });
        self
    }
    /// Compacts the history before the first answer call whatever the
    /// estimate (`true`), as the policy in the limits says
    /// (`EngineLimits::context`; without one, [`ContextPolicy::new`]'s
    /// defaults over an unbounded window, so only a policy's window can
    /// fail the run). `false` restores the default: compact at the
    /// policy's threshold.
    ///
    /// [`ContextPolicy::new`]: crate::ContextPolicy::new
    pub fn compact_first(mut self, first: bool) -> RunRequest {
        self.compaction = if first {
            CompactionRequest::First
        } else {
            CompactionRequest::Threshold
        };
        self
    }

    /// A compaction-only run: one turn holding the compaction call and its
    /// `context.compacted`, then `run.completed`; its final message is the
    /// summary. Continue a run with it (see [`RunRequest::inherits`]) and
    /// the conversation's next run starts from the compacted history. A
    /// compaction that fails, or a history with nothing to compact, fails
    /// the run naming the rule.
    pub fn compaction_only(mut self) -> RunRequest {
        self.compaction = CompactionRequest::Only;
        self
    }

    /// Calls the provider the builder registered under `name`.
    pub fn provider_named(mut self, name: impl Into<String>) -> RunRequest {
        self.provider = ProviderChoice::Named(name.into());
        self
    }
    /// Calls this run's own provider.
    pub fn provider(mut self, provider: Arc<dyn ModelProvider>) -> RunRequest {
        self.provider = ProviderChoice::Own(provider);
        self
    }
    /// Adds a tool for this run only, beside the builder's.
    pub fn tool(mut self, tool: Arc<dyn Tool>) -> RunRequest {
        self.tools.push(tool);
        self
    }
    /// Adds a source of tools that may change between turns (an MCP
    /// server's list), after the sources already added. Its tools are
    /// read at the start of every turn and come after the fixed tools; a
    /// name already taken is skipped. The engine calls its `close` once
    /// when the run ends (see [`ToolSource`]).
    pub fn tool_source(mut self, source: Arc<dyn ToolSource>) -> RunRequest {
        self.sources.push(source);
        self
    }
    /// This run's limits instead of the builder's.
    pub fn limits(mut self, limits: EngineLimits) -> RunRequest {
        self.limits = Some(limits);
        self
    }
    /// This run's metadata allowlist instead of the builder's.
    pub fn allow_metadata(mut self, allowlist: MetadataAllowlist) -> RunRequest {
        self.allowlist = Some(allowlist);
        self
    }
    /// This run's interaction handler instead of the builder's.
    pub fn interaction_handler(mut self, handler: Arc<dyn InteractionHandler>) -> RunRequest {
        self.interactions = Some(handler);
        self
    }
    /// The run's id.
    pub fn run_id(&self) -> &RunId {
        &self.run_id
    }
    /// The model name passed to the provider.
    pub fn model(&self) -> &ModelName {
        &self.model
    }
    /// The starting history.
    pub fn history(&self) -> &[Message] {
        &self.history
    }
    /// The run this one continues, if any.
    pub fn continued_run(&self) -> Option<&RunId> {
        self.continues.as_ref()
    }
    /// The run and seq this run was forked from, if it is a fork.
    pub fn forked_from(&self) -> Option<&ForkedFrom> {
        self.forked_from.as_ref()
    }
    /// The chat conversation this run belongs to, if a chat host set one.
    pub fn chat(&self) -> Option<&ChatRun> {
        self.chat.as_ref()
    }
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunOutcome {
    /// The model stopped calling tools (or, for a
    /// [`compaction_only`](RunRequest::compaction_only) run, the
    /// compaction completed).
    Completed {
        /// The last assistant message (a compaction-only run's: the
        /// summary).
        final_message: Message,
        /// Usage summed over every model call that reported it.
        usage: Usage,
        /// The whole history the run ended with: its input, then each
        /// turn's assistant message and tool results, in order (what
        /// `keel_eventlog::history::rebuild` gives from the log). A
        /// compaction replaced a range of it by its summary: this is the
        /// model context, the log holds every message. A follow-up run
        /// starts from it plus its new message.
        transcript: Vec<Message>,
    },
    /// It failed; `cause` says why.
    Failed {
        /// Why.
        cause: FailureCause,
    },
    /// It was cancelled.
    Cancelled,
}

impl RunOutcome {
    /// The outcome as a `Result`: a completed run's final message, usage
    /// and transcript, or why it did not complete.
    ///
    /// ```
    /// use keel_engine::{FailureCause, RunError, RunOutcome};
    /// let failed = RunOutcome::Failed { cause: FailureCause::Internal("x".into()) };
    /// assert_eq!(failed.into_result().unwrap_err().to_string(), "run failed: internal: x");
    /// assert!(matches!(RunOutcome::Cancelled.into_result(), Err(RunError::Cancelled)));
    /// ```
    pub fn into_result(self) -> Result<CompletedRun, RunError> {
        match self {
            RunOutcome::Completed {
                final_message,
                usage,
                transcript,
            } => Ok(CompletedRun {
                final_message,
                usage,
                transcript,
            }),
            RunOutcome::Failed { cause } => Err(RunError::Failed(cause)),
            RunOutcome::Cancelled => Err(RunError::Cancelled),
        }
    }
}

/// A run that completed: see [`RunOutcome::Completed`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompletedRun {
    final_message: Message,
    usage: Usage,
    transcript: Vec<Message>,
}

impl CompletedRun {
    /// The last assistant message.
    pub fn final_message(&self) -> &Message {
        &self.final_message
    }
    /// Usage summed over every model call that reported it.
    pub fn usage(&self) -> &Usage {
        &self.usage
    }
    /// The whole history the run ended with.
    pub fn transcript(&self) -> &[Message] {
        &self.transcript
    }
    /// The transcript, by value (the start of a follow-up run's history).
    pub fn into_transcript(self) -> Vec<Message> {
        self.transcript
    }
}

/// Why a run did not complete ([`RunOutcome::into_result`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// It failed; the cause is the error's source.
    #[error("run failed: {0}")]
    Failed(#[source] FailureCause),
    /// It was cancelled.
    #[error("run cancelled")]
    Cancelled,
}

/// How a run ended and the history it ended with (its input, then each
/// turn's assistant message and tool results, as far as it got).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunReport {
    outcome: RunOutcome,
    history: Vec<Message>,
}

impl RunReport {
    pub(crate) fn new(outcome: RunOutcome, history: Vec<Message>) -> RunReport {
        RunReport { outcome, history }
    }
    /// How the run ended.
    pub fn outcome(&self) -> &RunOutcome {
        &self.outcome
    }
    /// The history the run held when it ended.
    pub fn history(&self) -> &[Message] {
        &self.history
    }
    /// The outcome, by value.
    pub fn into_outcome(self) -> RunOutcome {
        self.outcome
    }
}

/// A handle on one run: its id, its log, cancellation and the outcome.
#[derive(Debug)]
pub struct RunHandle {
    pub(crate) run_id: RunId,
    pub(crate) log: RunLog,
    pub(crate) cancel: CancelToken,
    pub(crate) task: tokio::task::JoinHandle<RunReport>,
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
        self.join_report().await.outcome
    }
    /// Waits for the run to end; with the history it ended with, however
    /// it ended.
    pub async fn join_report(self) -> RunReport {
        match self.task.await {
            Ok(report) => report,
            Err(e) => RunReport {
                outcome: RunOutcome::Failed {
                    cause: FailureCause::Internal(format!("run task ended abnormally: {e}")),
                },
                history: Vec::new(),
            },
        }
    }
}

/// Cancels one run; cheap to clone.
#[derive(Debug, Clone)]
pub struct RunCanceller(pub(crate) CancelToken);

impl RunCanceller {
    /// Cancels the run.
    pub fn cancel(&self) {
        self.0.cancel();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;
    use std::error::Error as _;

    #[test]
    fn completed_outcome_keeps_message_usage_and_transcript() {
        let question = Message::text(MessageId::parse("m1").unwrap(), Role::User, "Hi").unwrap();
        let answer =
            Message::text(MessageId::parse("m2").unwrap(), Role::Assistant, "Hello").unwrap();
        let outcome = RunOutcome::Completed {
            final_message: answer.clone(),
            usage: Usage::default(),
            transcript: vec![question.clone(), answer.clone()],
        };
        let completed = outcome.into_result().unwrap();
        assert_eq!(completed.final_message(), &answer);
        assert_eq!(completed.usage(), &Usage::default());
        assert_eq!(completed.transcript(), &[question.clone(), answer.clone()]);
        assert_eq!(completed.into_transcript(), vec![question, answer]);
    }

    #[test]
    fn failed_outcome_is_an_error_whose_source_is_the_cause() {
        let cause = FailureCause::Internal("log refused".into());
        let error = RunOutcome::Failed {
            cause: cause.clone(),
        }
        .into_result()
        .unwrap_err();
        assert_eq!(error, RunError::Failed(cause.clone()));
        assert_eq!(error.source().unwrap().to_string(), cause.to_string());
        assert_eq!(
            RunOutcome::Cancelled.into_result(),
            Err(RunError::Cancelled)
        );
    }

    #[test]
    fn from_question_is_one_user_message_under_a_fresh_id() {
        let model = ModelName::parse("m").unwrap();
        let a = RunRequest::from_question(model.clone(), "Weather?").unwrap();
        let b = RunRequest::from_question(model, "Weather?").unwrap();
        assert_ne!(a.run_id(), b.run_id());
        assert_eq!(a.history().len(), 1);
        assert_eq!(a.history()[0].role(), Role::User);
        let too_long = "x".repeat(keel_message::Limits::default().part_bytes + 1);
        assert!(RunRequest::from_question(ModelName::parse("m").unwrap(), &too_long).is_err());
    }
}
