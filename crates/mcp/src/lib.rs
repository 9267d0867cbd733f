//! Keel tools from Model Context Protocol servers.
//!
//! **What it is.** A client for MCP servers, built on `rmcp` (the official
//! Rust SDK), that turns each configured server into a
//! [`keel_engine::ToolSource`]: the engine reads the server's tools at the
//! start of every turn (so `notifications/tools/list_changed` takes effect
//! at the next turn, and the engine records the change as
//! `keel.tools_changed`), and each call becomes a `tool.*` scope with
//! Keel's typed outcomes.
//!
//! **What it is not.** Not an MCP server, and not a general MCP SDK: it
//! mounts tools only (no prompts, resources or sampling), and it drives no
//! `input_required` rounds or tasks (such an answer is a typed failure).
//!
//! **Neighbours.** It depends on `keel-engine` for the `Tool` and
//! `ToolSource` traits, `keel-eventlog` for the secret screen on failure
//! text and `keel-message` for names and canonical JSON. `keel-cli` parses
//! a scenario's `mcp_servers` into [`ServerEntry`]s, checks them into
//! [`ServerConfig`]s, and starts one [`McpToolSource`] per server per run.
//!
//! The rules, all in RFC `2026-12-02-mcp-tools`:
//! - **Names**: `mcp__<server>__<tool>`, sanitized and hash-shortened to
//!   the `ToolName` rule ([`qualified_name`]).
//! - **Results**: flattened by stated rules and cut to a bound, the cut
//!   marked in the text and recorded as `output_cut` ([`flatten()`]);
//!   image content becomes the result's image parts within bounds of
//!   their own, a cut said in the text ([`FlattenBounds`]); audio and
//!   other content are placeholders naming their type and size.
//! - **Failures**: `isError` and a crash mid-call are `uncertain`; a
//!   JSON-RPC refusal is `definitive`; a crashed server is started again
//!   for the next call; the engine's per-call timeout drops the call,
//!   which sends `notifications/cancelled`.
//! - **Environment**: a child gets [`DEFAULT_ENV`] plus what its entry
//!   names, never [`WITHHELD_ENV`]; its stderr is kept as a screened tail.
//!
//! ```
//! use keel_mcp::{ServerConfig, ServerEntry, qualified_name};
//!
//! let entry: ServerEntry = serde_json::from_str(
//!     r#"{"name": "files", "command": ["mcp-server-filesystem", "/data"], "env": ["HOME"], "timeout_ms": 20000}"#,
//! )?;
//! let config = ServerConfig::from_entry(&entry, &[])?;
//! assert_eq!(config.policy_for("read_text_file").timeout.map(|t| t.as_millis()), Some(20000));
//! assert_eq!(qualified_name(config.name(), "read_text_file").as_str(), "mcp__files__read_text_file");
//!
//! // Keel's own secrets never reach a server.
//! let leaky: ServerEntry = serde_json::from_str(r#"{"name": "x", "command": ["x"], "env": ["OPENAI_API_KEY"]}"#)?;
//! assert_eq!(ServerConfig::from_entry(&leaky, &[]).unwrap_err().rule(), "mcp.env_secret");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Starting a server is `McpToolSource::start(config, part_bytes).await`;
//! the source then goes to `RunRequest::tool_source`.

#![deny(missing_docs)]

pub mod config;
mod config_error;
mod connection;
mod error;
pub mod flatten;
mod naming;
mod server;
mod source;

pub use config::{
    DEFAULT_ENV, ServerConfig, ServerEntry, ServerName, ToolPolicyEntry, Transport, WITHHELD_ENV,
};
pub use config_error::McpConfigError;
pub use connection::{MESSAGE_MAX_BYTES, STDERR_TAIL_BYTES};
pub use error::McpStartError;
pub use flatten::{FlattenBounds, FlattenError, Flattened, ImageCut, flatten, flatten_with};
pub use naming::qualified_name;
pub use server::TOOLS_MAX;
pub use source::McpToolSource;
