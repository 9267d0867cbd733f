//! Frontend tools (`POST /v1/agui`): tools an AG-UI client declares in
//! its `tools` and runs itself. To the engine each is an ordinary
//! [`Tool`] ([`FrontendTool`]); its `call` parks in the daemon's
//! [`FrontendCalls`] until the client's next POST carries the result as a
//! `role: "tool"` message, which [`FrontendCalls::answer`] hands over.
//! The log shows `tool.started` … `tool.completed` with the client's
//! content: the client is the tool's executor, so no interaction events.
//!
//! The registry is the tools' state, not a registry of runs, and is bounded
//! as the approvals are ([`crate::approvals`]): an entry lives exactly as
//! long as the engine's future for the call. The engine drops that future
//! when the call times out (the tool's timeout is the daemon's
//! `--approval-timeout-ms`: a person answers either), when the run is
//! cancelled, and when it ends, and dropping it removes the entry. So the
//! map holds at most one entry per call some live run is waiting for: with
//! `--max-live-runs` N and `limits.max_parallel_tools` P, at most N × P.

use super::lock;
use keel_engine::{Tool, ToolError, ToolFuture, ToolInvocation, ToolOutput, ToolPolicy};
use keel_message::ToolDefinition;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;

/// (run id, call id).
type Key = (String, String);
type PendingMap = Arc<Mutex<HashMap<Key, oneshot::Sender<ClientResult>>>>;

/// What the client reports of a call it ran: a `tool` message's content,
/// or (with its `error`) a failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientResult {
    /// The tool's result, for the model.
    Returned(String),
    /// The tool failed on the client: why (fed back to the model as the
    /// call's failure).
    Failed(String),
}

/// The frontend calls waiting for their client's result (see the module
/// docs for how long an entry lives).
#[derive(Default)]
pub struct FrontendCalls {
    pending: PendingMap,
}

impl std::fmt::Debug for FrontendCalls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrontendCalls")
            .field("pending", &self.pending_count())
            .finish()
    }
}

impl FrontendCalls {
    /// A registry with nothing pending.
    pub fn new() -> FrontendCalls {
        FrontendCalls::default()
    }

    /// How many calls are waiting for their result.
    pub fn pending_count(&self) -> usize {
        lock(&self.pending).len()
    }

    /// Whether call `call_id` of run `run_id` is waiting for its result.
    pub fn is_pending(&self, run_id: &str, call_id: &str) -> bool {
        lock(&self.pending).contains_key(&(run_id.to_owned(), call_id.to_owned()))
    }

    /// Hands the client's result to the call, if it is still waiting;
    /// false otherwise (never called, answered already, timed out, or its
    /// run ended).
    pub fn answer(&self, run_id: &str, call_id: &str, result: ClientResult) -> bool {
        let key = (run_id.to_owned(), call_id.to_owned());
        let sender = lock(&self.pending).remove(&key);
        sender.is_some_and(|tx| tx.send(result).is_ok())
    }

    /// Parks call `key` until it is answered; the entry goes with the
    /// returned future.
    fn park(&self, key: Key) -> impl Future<Output = Option<ClientResult>> + Send + 'static {
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(key.clone(), tx);
        let guard = PendingGuard {
            pending: Arc::clone(&self.pending),
            key,
        };
        async move {
            let result = rx.await.ok();
            drop(guard);
            result
        }
    }
}

/// Removes its entry when the call's future is dropped.
struct PendingGuard {
    pending: PendingMap,
    key: Key,
}

impl Drop for PendingGuard {
    fn drop(&mut self) {
        lock(&self.pending).remove(&self.key);
    }
}

/// A tool the client runs: its `call` waits for the client's result.
pub struct FrontendTool {
    definition: ToolDefinition,
    calls: Arc<FrontendCalls>,
    timeout: Duration,
}

impl std::fmt::Debug for FrontendTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrontendTool")
            .field("name", &self.definition.name())
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl FrontendTool {
    /// The client's tool `definition`, parked in `calls`, waiting at most
    /// `timeout` for a result.
    pub fn new(
        definition: ToolDefinition,
        calls: Arc<FrontendCalls>,
        timeout: Duration,
    ) -> FrontendTool {
        FrontendTool {
            definition,
            calls,
            timeout,
        }
    }
}

impl Tool for FrontendTool {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }

    fn policy(&self) -> ToolPolicy {
        ToolPolicy {
            timeout: Some(self.timeout),
            ..ToolPolicy::default()
        }
    }

    fn call(&self, invocation: ToolInvocation) -> ToolFuture {
        let key = (
            invocation.run_id.as_str().to_owned(),
            invocation.call_id.as_str().to_owned(),
        );
        let parked = self.calls.park(key);
        Box::pin(async move {
            // The sender is only dropped unanswered with its entry, which
            // happens when this future is dropped: then nobody reads this.
            match parked.await {
                Some(ClientResult::Returned(content)) => Ok(ToolOutput::new(content)),
                Some(ClientResult::Failed(error)) => Err(ToolError::new(error)),
                None => Err(ToolError::new(
                    "the client's result did not arrive (rule agui.frontend_tool)",
                )),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_message::{CallId, CanonicalJson, RunId, ToolName};

    fn tool(calls: &Arc<FrontendCalls>) -> Result<FrontendTool, Box<dyn std::error::Error>> {
        let definition = ToolDefinition::new(
            ToolName::parse("pick_color")?,
            "Asks the user for a color",
            CanonicalJson::parse(r#"{"type":"object"}"#)?,
        )?;
        Ok(FrontendTool::new(
            definition,
            Arc::clone(calls),
            Duration::from_secs(7),
        ))
    }

    fn invocation(run: &str, call: &str) -> Result<ToolInvocation, Box<dyn std::error::Error>> {
        Ok(ToolInvocation {
            run_id: RunId::parse(run)?,
            turn: 1,
            call_id: CallId::parse(call)?,
            arguments: CanonicalJson::parse("{}")?,
        })
    }

    #[tokio::test]
    async fn a_call_waits_for_the_clients_result_and_its_entry_lives_as_long_as_it()
    -> Result<(), Box<dyn std::error::Error>> {
        let calls = Arc::new(FrontendCalls::new());
        let tool = tool(&calls)?;
        assert_eq!(tool.policy().timeout, Some(Duration::from_secs(7)));
        assert!(!tool.policy().requires_approval);

        // Answered: the call returns the client's content; the entry goes.
        let called = tool.call(invocation("run_a", "c1")?);
        assert!(calls.is_pending("run_a", "c1"));
        assert!(!calls.is_pending("run_b", "c1"), "keyed by run");
        assert!(calls.answer("run_a", "c1", ClientResult::Returned("blue".to_owned())));
        assert_eq!(called.await, Ok(ToolOutput::new("blue")));
        assert_eq!(calls.pending_count(), 0);
        let again = ClientResult::Returned("again".to_owned());
        assert!(!calls.answer("run_a", "c1", again));

        // A failure the client reports is the call's failure.
        let called = tool.call(invocation("run_a", "c3")?);
        assert!(calls.answer("run_a", "c3", ClientResult::Failed("no screen".to_owned())));
        assert_eq!(called.await, Err(ToolError::new("no screen")));

        // Timed out (the engine's timeout drops the future): gone.
        let called = tool.call(invocation("run_a", "c2")?);
        let waited = tokio::time::timeout(Duration::from_millis(10), called).await;
        assert!(waited.is_err());
        assert_eq!(calls.pending_count(), 0);
        assert!(!calls.answer("run_a", "c2", ClientResult::Returned("late".to_owned())));

        // The run ended or was cancelled (dropped unpolled): gone.
        let called = tool.call(invocation("run_b", "c1")?);
        assert_eq!(calls.pending_count(), 1);
        drop(called);
        assert_eq!(calls.pending_count(), 0);
        Ok(())
    }
}
