//! # keel-engine: composition and the run loop
//!
//! An [`Engine`] hosts many runs over one set of providers, tools and
//! observers, composed with [`EngineBuilder`]. A run ([`Engine::start`])
//! follows the loop of the design brief: `run.started`, then turns; each
//! turn makes a model call (retried as the [`RetryPolicy`] says, each
//! attempt its own model scope with a fresh operation id), commits every
//! validated stream item, runs the requested tools with bounded
//! parallelism (approval first where a tool requires it), appends the
//! results to the history, and goes on until the model stops calling tools
//! or a limit is hit.
//!
//! A turn's tools are the run's fixed tools (the builder's and the
//! request's), then those of each [`ToolSource`] the request added with
//! [`RunRequest::tool_source`], read at the start of the turn (guarded,
//! within `limits.tool_call_timeout`; a name already taken is skipped).
//! The model request lists exactly that set and the turn's tool calls are
//! resolved against it; what a source changed is recorded as the extension
//! event `keel.tools_changed`, and every source is closed once when the
//! run ends. A tool answers with a [`ToolOutput`], which may record an
//! [`OutputCut`] (kept in `tool.completed` as `output_cut`).
//!
//! A tool may be an [`AgentTool`]: its call is a child run of the same
//! engine (an [`AgentSpec`]: model, provider, tools, limits, system
//! instructions; the task is the call's `task` argument). The parent
//! records `tool.sub_run` naming the child before the child's
//! `run.started` (which names the parent and call back), and the child's
//! end is the call's one terminal, committed after the child's own:
//! completed → `tool.completed` with the final answer, failed →
//! `tool.failed` with the child's cause, cancelled → `tool.cancelled`.
//! A run ends its live children (cancels them and waits) before it
//! commits its own closing terminals, so a tree closes innermost first
//! and no child outlives its parent ([`Engine::live_children`]). Nesting
//! and fan-out are bounded by `limits.max_sub_run_depth` and
//! `limits.max_sub_runs`, the least over the run's ancestors.
//!
//! Every event is committed to the run's [`RunLog`](keel_eventlog::RunLog)
//! first, then dispatched to the observers, one event at a time per run.
//! [`RunHandle::cancel`] drops whatever is in flight (provider stream, tool
//! futures, a pending observer acknowledgement) and commits cancelled
//! terminals innermost first; history is kept. [`Engine::shutdown`] cancels
//! every run, drains the observers and ends subscriptions with a typed end.
//!
//! What it is not: it owns no provider wire format (`keel-providers`), no
//! storage (`keel-observers`), and no CLI or HTTP (`keel-cli`). Tests and
//! demos drive it with `keel-testkit`'s scripted providers and tools.
//!
//! ```
//! # // Doc examples use a tiny inline provider; keel-testkit has richer ones.
//! use keel_engine::*;
//! use keel_message::*;
//! use keel_stream::{FinishReason, ModelProvider, RawItem, RawStream, StartFuture};
//! use std::sync::Arc;
//!
//! struct Hello;
//! impl ModelProvider for Hello {
//!     fn start(&self, _request: ModelRequest) -> StartFuture {
//!         let items = vec![RawItem::text("Hello!"), RawItem::complete(FinishReason::Stop)];
//!         let stream: RawStream = Box::pin(futures_util::stream::iter(items));
//!         Box::pin(async move { Ok(stream) })
//!     }
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
//! let engine = Engine::builder().provider("hello", Arc::new(Hello)).build()?;
//! let run = engine.start(RunRequest::new(
//!     RunId::parse("run_1")?,
//!     ModelName::parse("m")?,
//!     vec![Message::text(MessageId::parse("m1")?, Role::User, "Hi")?],
//! ))?;
//! let log = run.log().clone();
//! match run.join().await {
//!     RunOutcome::Completed { final_message, .. } => assert_eq!(final_message.joined_text(), "Hello!"),
//!     other => panic!("{other:?}"),
//! }
//! let kinds: Vec<String> = log.retained_after(0).iter().map(|e| e.kind().to_string()).collect();
//! assert_eq!(kinds, ["run.started", "run.input", "turn.started", "model.started", "model.text_delta",
//!                    "model.completed", "turn.completed", "run.completed"]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

mod builder;
mod cancel;
mod compose;
mod config;
mod engine;
mod error;
mod follow;
mod guard;
mod interaction;
mod request;
mod run;
mod source;
mod tool;
mod tool_set;
mod tree_cursor;
mod tree_follow;

pub use builder::EngineBuilder;
pub use config::{
    ContextPolicy, DEFAULT_COMPACTION_INSTRUCTION, EngineLimits, LimitError, LimitField,
    MAX_COMPACTION_INSTRUCTION_BYTES, MIN_CLOSING_DEADLINE, PartialRetry, RetryPolicy,
    check_closing_deadline,
};
pub use engine::{Engine, EngineShutdown, LiveRun};
pub use error::{BuildError, FailureCause, StartError};
pub use follow::{FOLLOW_BOUNDS, FollowError, HISTORY_PAGE, RunFollower};
pub use interaction::{
    InteractionDecision, InteractionError, InteractionFuture, InteractionHandler, InteractionKind,
    InteractionRequest,
};
pub use request::{
    CompletedRun, RunCanceller, RunError, RunHandle, RunOutcome, RunReport, RunRequest,
};
pub use source::{CloseFuture, ToolListFuture, ToolSource};
pub use tool::{
    AgentSpec, AgentSpecError, AgentTool, OnToolFailure, OutputCut, Tool, ToolError, ToolFuture,
    ToolInvocation, ToolOutcome, ToolOutput, ToolPolicy, ToolRetry,
};
pub use tree_cursor::{
    CursorEntry, CursorPart, MAX_CURSOR_BYTES, MAX_CURSOR_ENTRIES, MAX_TREE_RUNS, TreeCursor,
    TreeCursorError,
};
pub use tree_follow::{TreeEvent, TreeFollowError, TreeFollower};
