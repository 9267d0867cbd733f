//! Tool sources: tools that may change between turns (an MCP server's
//! list), read at the start of every turn.

use crate::tool::Tool;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// The future [`ToolSource::tools`] returns: the source's tools for the
/// next turn.
pub type ToolListFuture = Pin<Box<dyn Future<Output = Vec<Arc<dyn Tool>>> + Send + 'static>>;

/// The future [`ToolSource::close`] returns.
pub type CloseFuture = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// Tools that may change between turns (an MCP server's list).
///
/// A run takes sources with [`RunRequest::tool_source`](crate::RunRequest::tool_source).
/// At the start of every turn, after `turn.started` and before
/// `model.started`, the engine awaits [`tools`](Self::tools) of every
/// source at once, each under the panic guard and within
/// `limits.tool_call_timeout`: a source that panics or takes longer
/// contributes no tools to that turn, and the run goes on. The turn's tool
/// set is the run's fixed tools first, then each source's in the order the
/// sources were given; a name already taken is skipped. The model request
/// of the turn lists exactly that set, and the turn's tool calls are
/// resolved against it.
///
/// When what a source returned differs from what the previous turn saw
/// (for turn 1, from nothing), the turn records the extension event
/// `keel.tools_changed`:
/// `{"turn", "source", "added", "removed", "changed", "skipped"}`, each
/// array the tool names in name order (`changed`: same name, another
/// definition; `skipped`: names an earlier tool of the turn took). An
/// array holds at most 128 names; when one is cut, `"omitted":
/// {"added": n, …}` counts what each cut array left out. A change of
/// `skipped` alone is recorded too, so the log always tells which tool
/// holds each name.
///
/// A source tool whose policy requires approval, in a run with no
/// interaction handler, is not run: its call is a `tool.failed` (outcome
/// `definitive`, not retryable) fed back to the model, whatever its
/// `on_failure` says; the run goes on. (A fixed tool like that refuses the
/// run at start, [`StartError::ApprovalWithoutHandler`](crate::StartError).)
///
/// [`close`](Self::close) is awaited once when the run task ends, however
/// the run ended (completed, failed, cancelled, panicked), after the run's
/// terminal is committed, within `limits.closing_deadline`. A request that
/// [`Engine::start`](crate::Engine::start) refuses never runs, and its
/// sources are not closed by the engine: the caller still holds them.
///
/// ```
/// use keel_engine::{CloseFuture, Tool, ToolListFuture, ToolSource};
/// use std::sync::Arc;
///
/// /// A source with no tools.
/// struct Empty;
/// impl ToolSource for Empty {
///     fn name(&self) -> &str {
///         "empty"
///     }
///     fn tools(&self) -> ToolListFuture {
///         Box::pin(async { Vec::<Arc<dyn Tool>>::new() })
///     }
///     fn close(&self) -> CloseFuture {
///         Box::pin(async {})
///     }
/// }
/// let source: Arc<dyn ToolSource> = Arc::new(Empty);
/// assert_eq!(source.name(), "empty");
/// ```
pub trait ToolSource: Send + Sync + 'static {
    /// Names the source in the log's change record, e.g. `mcp:files`
    /// (at most 64 bytes; a longer name is cut to 64 in the record).
    fn name(&self) -> &str;

    /// The tools for the next turn. Infallible: a source that cannot
    /// refresh returns its last list.
    fn tools(&self) -> ToolListFuture;

    /// Called once when the run ends, whatever its outcome; shuts down
    /// what the source started.
    fn close(&self) -> CloseFuture;
}
