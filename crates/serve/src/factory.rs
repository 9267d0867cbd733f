//! What a posted body becomes: the [`RunFactory`] a daemon is built with.
//!
//! The daemon owns the HTTP surface (admission, ids, continuation, the
//! chat's runs, streams); a factory owns what an agent *is*: it turns a
//! body into a [`RunPlan`], and a plan into a [`RunRequest`] once the
//! daemon has chosen the run id and the history. Posted scenario files are
//! one factory (`ScenarioFactory`, feature `scenario`); a host's own Rust
//! code (its provider, its tools) is another: see
//! `examples/embedded_host.rs`.

use crate::problem::Problem;
use keel_engine::{InteractionHandler, RunRequest};
use keel_message::{Limits, Message, RunId};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// A boxed future a [`RunPlan`] returns (object-safe async).
pub type PlanFuture<'a> = Pin<Box<dyn Future<Output = Result<RunRequest, Problem>> + Send + 'a>>;

/// What the daemon adds to every run: its approvals (the interaction
/// handler its approval routes answer) and its default approval timeout.
#[derive(Clone)]
pub struct HostParts {
    approvals: Arc<dyn InteractionHandler>,
    default_approval_timeout: Duration,
    message_limits: Limits,
}

impl std::fmt::Debug for HostParts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostParts")
            .field("default_approval_timeout", &self.default_approval_timeout)
            .field("message_limits", &self.message_limits)
            .finish_non_exhaustive()
    }
}

impl HostParts {
    pub(crate) fn new(
        approvals: Arc<dyn InteractionHandler>,
        default_approval_timeout: Duration,
        message_limits: Limits,
    ) -> HostParts {
        HostParts {
            approvals,
            default_approval_timeout,
            message_limits,
        }
    }

    /// The engine's message limits (part sizes, JSON depth): what tool
    /// results and messages a factory builds must fit.
    pub fn message_limits(&self) -> &Limits {
        &self.message_limits
    }

    /// The daemon's interaction handler: set it on every request
    /// ([`RunRequest::interaction_handler`]), or approvals posted to the
    /// daemon never reach the run.
    pub fn approvals(&self) -> Arc<dyn InteractionHandler> {
        Arc::clone(&self.approvals)
    }

    /// `--approval-timeout-ms`: for runs that set none of their own.
    pub fn default_approval_timeout(&self) -> Duration {
        self.default_approval_timeout
    }
}

/// One body's run, checked and not started.
pub trait RunPlan: Send + Sync + std::fmt::Debug {
    /// The run id the body names; `None` lets the daemon generate one.
    fn run_id(&self) -> Option<&RunId> {
        None
    }

    /// The messages the body brings: a new run's whole input, or what a
    /// follow-up (`POST /v1/runs/{id}/messages`) appends to the history.
    fn messages(&self) -> &[Message];

    /// The model name (`POST /v1/chat` refuses a body naming another).
    fn model(&self) -> &str;

    /// The provider's type name (`POST /v1/chat` refuses a body naming
    /// another).
    fn provider_type(&self) -> &str;

    /// The run under `run_id`, starting from `history` (the plan's
    /// messages, or a continuation's rebuilt history plus them). Called
    /// before admission: nothing may be started here.
    fn request(
        &self,
        run_id: RunId,
        history: Vec<Message>,
        host: &HostParts,
    ) -> Result<RunRequest, Problem>;

    /// Called once the run is admitted (its slot and id are held), right
    /// before it starts: what has side effects (tool server processes)
    /// starts here. A failure gives the slot and id back.
    fn prepare<'a>(&'a self, request: RunRequest, host: &'a HostParts) -> PlanFuture<'a> {
        let _ = host;
        Box::pin(std::future::ready(Ok(request)))
    }
}

/// What the daemon runs: posted bodies, and the chat agent.
pub trait RunFactory: Send + Sync + std::fmt::Debug {
    /// `POST /v1/runs` and `POST /v1/runs/{id}/messages`: the body (UTF-8,
    /// at most `MAX_BODY_BYTES`) as a plan, or the problem that refuses it
    /// (a 4xx naming the member at fault).
    fn posted(&self, body: &str) -> Result<Box<dyn RunPlan>, Problem>;

    /// The agent `POST /v1/chat` runs; `None` answers 404
    /// `chat-not-configured`.
    fn chat_agent(&self) -> Option<Arc<dyn RunPlan>>;
}
