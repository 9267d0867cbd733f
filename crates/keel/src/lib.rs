//! # keel: one dependency for an agent host
//!
//! Keel is the Rust core an LLM agent host is built on: provider-neutral
//! messages, strictly validated model streams, one authoritative,
//! replayable event log per run, and durable plus best-effort observers
//! behind it. This crate is the front door: each module re-exports one of
//! the `keel-*` crates, and [`prelude`] has what a first host uses.
//!
//! | module | crate | what it owns |
//! | --- | --- | --- |
//! | [`message`] | `keel-message` | validated ids and names, messages, tool definitions and [`ToolSpec`](message::ToolSpec), limits, canonical JSON |
//! | [`stream`] | `keel-stream` | the model stream union, the validator, the [`ModelProvider`](stream::ModelProvider) trait |
//! | [`eventlog`] | `keel-eventlog` | events, the bounded [`RunLog`](eventlog::RunLog), subscriptions, snapshots |
//! | [`observers`] | `keel-observers` | required and best-effort observers, the SQLite journal |
//! | [`engine`] | `keel-engine` | [`Engine`](engine::Engine), the run loop, tools, cancellation, shutdown |
//! | `providers` | `keel-providers` | OpenAI-compatible and Anthropic streaming adapters (feature `providers`) |
//! | `mcp` | `keel-mcp` | tools from MCP servers (feature `mcp`) |
//!
//! | feature | default | what it adds |
//! | --- | --- | --- |
//! | `sqlite` | on | `observers::SqliteJournal` (bundled SQLite) |
//! | `tracing` | off | `observers::TracingObserver` |
//! | `nats` | off | JetStream observer, remote subscription and recovery |
//! | `providers` | off | `keel::providers` over plain HTTP (reqwest, no TLS crate); an `https://` base URL is refused at construction (`ProviderConfigError::TlsDisabled`, rule `config.tls`) |
//! | `tls` | off | HTTPS for `keel::providers` (enables `providers` and `keel-providers/rustls`: rustls with aws-lc-rs, never OpenSSL) |
//! | `mcp` | off | `keel::mcp` (rmcp) |
//!
//! What it is not: it has no code of its own beyond re-exports, and it
//! re-exports no test helpers: tests depend on `keel-testkit` as a
//! dev-dependency. A crate that implements one trait (a provider, a tool,
//! an observer) can depend on the one small crate that defines it instead.
//!
//! The runnable host with a real adapter, a custom tool, the journal and a
//! resuming subscriber is `examples/hello_agent.rs`
//! (`cargo run -p keel --example hello_agent --features providers -- --demo`;
//! against a real `https://` endpoint, `--features tls`).
//! The smallest host, with an inline provider:
//!
//! ```
//! use keel::prelude::*;
//! use keel::stream::{FinishReason, RawItem, RawStream, StartFuture};
//! use std::sync::Arc;
//!
//! struct Hello;
//! impl ModelProvider for Hello {
//!     fn start(&self, _request: keel::message::ModelRequest) -> StartFuture {
//!         let items = vec![RawItem::text("Hello!"), RawItem::complete(FinishReason::Stop)];
//!         let stream: RawStream = Box::pin(futures_util::stream::iter(items));
//!         Box::pin(async move { Ok(stream) })
//!     }
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
//! let engine = Engine::builder().provider("hello", Arc::new(Hello)).build()?;
//! let run = engine.start(RunRequest::from_question(ModelName::parse("m")?, "Hi")?)?;
//! let done = run.join().await.into_result()?;
//! assert_eq!(done.final_message().joined_text(), "Hello!");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub use keel_engine as engine;
pub use keel_eventlog as eventlog;
pub use keel_message as message;
pub use keel_observers as observers;
pub use keel_stream as stream;

#[cfg(feature = "providers")]
#[cfg_attr(docsrs, doc(cfg(feature = "providers")))]
pub use keel_providers as providers;

#[cfg(feature = "mcp")]
#[cfg_attr(docsrs, doc(cfg(feature = "mcp")))]
pub use keel_mcp as mcp;

/// What a first host uses: `use keel::prelude::*;`.
pub mod prelude {
    pub use keel_engine::{
        CompletedRun, Engine, EngineBuilder, FailureCause, FollowError, RunError, RunFollower,
        RunHandle, RunOutcome, RunRequest, Tool, ToolError, ToolFuture, ToolInvocation, ToolOutput,
        ToolPolicy,
    };
    pub use keel_eventlog::{Event, RunLog, Subscription};
    pub use keel_message::{
        CanonicalJson, Message, MessageId, ModelName, Role, RunId, ToolDefinition, ToolName,
        ToolSpec,
    };
    pub use keel_observers::{BestEffortObserver, RequiredObserver, RunHistory};
    #[cfg(feature = "sqlite")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
    pub use keel_observers::{JournalConfig, JournalReader, SqliteJournal};
    #[cfg(feature = "providers")]
    #[cfg_attr(docsrs, doc(cfg(feature = "providers")))]
    pub use keel_providers::{Anthropic, AnthropicConfig, ApiKey, OpenAiCompatible, OpenAiConfig};
    pub use keel_stream::ModelProvider;
}
