//! # keel-scenario: scenario files to runs
//!
//! A scenario file is the JSON description of an agent that `keel run`
//! takes and `keel serve` accepts as a posted body (KEEL.md, "Scenario
//! files"): the model, the provider (scripted, or a network adapter with
//! its key in a named environment variable), the tools (scripted,
//! built-ins, MCP servers), the limits and the messages. This crate loads
//! one strictly ([`file`](mod@file): every refusal names the JSON path and the rule)
//! and turns it into a [`keel_engine::RunRequest`] ([`launch`]).
//!
//! What it is not: it owns no run semantics (the engine does), no HTTP
//! (`keel-serve`, whose `ScenarioFactory` uses this crate) and no command
//! line (`keel-cli`). Rules it checks are called, not restated: names and
//! messages are `keel-message`'s constructors, limits are
//! `EngineLimits::check`, key variables are `EnvVarName`s, provider types
//! are `ProviderKind`s, metadata namespaces are `keel-stream`'s.
//!
//! Neighbours: it composes `keel-testkit` (the scripted provider and tools
//! a scenario describes: a recorded decision,
//! `docs/rfc/implemented/2026-11-30-cli-scripted-provider.md`),
//! `keel-providers` (the network adapters), `keel-mcp` (feature `mcp`)
//! and `keel-observers` (a continuation's history, rebuilt from the journal).
//!
//! ```
//! use std::path::Path;
//! let text = r#"{
//!   "model": "scripted-1",
//!   "provider": {"type": "scripted", "calls": [[{"text": "hi"}, {"complete": {"finish": "stop"}}]]},
//!   "messages": [{"role": "user", "text": "hello"}]
//! }"#;
//! let scenario = keel_scenario::file::parse(Path::new("inline.json"), text).unwrap();
//! assert_eq!(scenario.model.as_str(), "scripted-1");
//! assert_eq!(scenario.messages.len(), 1);
//! ```
#![deny(missing_docs)]

pub mod allowance;
pub mod builtins;
pub mod clock;
pub mod file;
pub mod launch;
#[cfg(feature = "mcp")]
pub mod mcp;
pub mod messages;

pub use file::{ProviderSpec, Scenario, ScenarioError, ToolEntry};
