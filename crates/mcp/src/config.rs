//! Server entries: the JSON shape a scenario's `mcp_servers` holds, and the
//! checked [`ServerConfig`] every other part of the crate takes.

use crate::config_error::McpConfigError;
use keel_engine::{OnToolFailure, ToolPolicy};
use keel_message::EnvVarName;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// The longest server name, in bytes.
pub const SERVER_NAME_MAX_BYTES: usize = 32;
/// The most `command` elements (program plus arguments).
pub const COMMAND_MAX_ITEMS: usize = 64;
/// The longest `command` element, in bytes.
pub const COMMAND_ITEM_MAX_BYTES: usize = 4096;
/// The longest `url`, in bytes.
pub const URL_MAX_BYTES: usize = 2048;
/// The most variables an entry's `env` names.
pub const ENV_MAX_NAMES: usize = 32;
/// The longest variable name, in bytes: keel-message's
/// [`ENV_VAR_NAME_MAX_BYTES`](keel_message::ENV_VAR_NAME_MAX_BYTES).
pub use keel_message::ENV_VAR_NAME_MAX_BYTES as ENV_NAME_MAX_BYTES;
/// The longest per-call or startup timeout: one hour.
pub const TIMEOUT_MAX_MS: u64 = 3_600_000;
/// The startup timeout when an entry sets none.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// The smallest cut bound an entry may set.
pub const OUTPUT_MIN_BYTES: u64 = 1024;
/// The largest cut bound an entry may set.
pub const OUTPUT_MAX_BYTES: u64 = 1 << 20;
/// The cut bound when an entry sets none.
pub const DEFAULT_OUTPUT_BYTES: usize = 256 * 1024;
/// The most per-tool policies an entry holds.
pub const TOOL_POLICIES_MAX: usize = 256;

/// The host variables every child process gets when the host has them.
/// Nothing else reaches a child unless its entry names it.
pub const DEFAULT_ENV: [&str; 5] = ["PATH", "HOME", "LANG", "LC_ALL", "TMPDIR"];

/// Keel's own secrets: no entry may name them, whatever the host adds.
pub const WITHHELD_ENV: [&str; 3] = ["KEEL_TOKEN", "OPENAI_API_KEY", "ANTHROPIC_API_KEY"];

/// One entry of `mcp_servers`, as written. [`ServerConfig::from_entry`]
/// checks it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerEntry {
    /// The server's name: the `<server>` in `mcp__<server>__<tool>`.
    pub name: String,
    /// Program and arguments of a stdio server.
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// The endpoint of a streamable HTTP server.
    #[serde(default)]
    pub url: Option<String>,
    /// Host variables passed to a stdio server, by name.
    #[serde(default)]
    pub env: Option<Vec<String>>,
    /// The per-call timeout, in milliseconds.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// The bound on start, `initialize` and the first `tools/list`.
    #[serde(default)]
    pub startup_timeout_ms: Option<u64>,
    /// The cut bound on one result's flattened text.
    #[serde(default)]
    pub max_output_bytes: Option<u64>,
    /// Per-tool policy, keyed by the server's own tool name.
    #[serde(default)]
    pub tools: Option<BTreeMap<String, ToolPolicyEntry>>,
}

/// A tool's policy, as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolPolicyEntry {
    /// Ask for approval before each call.
    #[serde(default)]
    pub requires_approval: Option<bool>,
    /// This tool's per-call timeout, in milliseconds.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// `feed_back` (the default) or `end_run`.
    #[serde(default)]
    pub on_failure: Option<String>,
}

/// A server name: 1 to 32 bytes of `[a-z0-9_-]`, starting and ending with
/// a letter or digit (rule `mcp.server_name`). It cannot hold `__` or end
/// in `_`, so the first `__` after `mcp__` in a qualified tool name is the
/// separator: server `a_` with tool `x` cannot meet server `a` with tool
/// `_x`.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServerName(Arc<str>);

impl ServerName {
    /// Checks `text`.
    pub fn parse(text: &str) -> Result<ServerName, McpConfigError> {
        let bad = |why: String| McpConfigError::new("name", "mcp.server_name", why);
        if text.is_empty() || text.len() > SERVER_NAME_MAX_BYTES {
            return Err(bad(format!(
                "a server name is 1 to {SERVER_NAME_MAX_BYTES} bytes; {} given",
                text.len()
            )));
        }
        let allowed =
            |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-';
        if let Some(offset) = text.bytes().position(|b| !allowed(b)) {
            return Err(bad(format!(
                "a server name is lowercase letters, digits, `_` and `-`; byte {offset} is not"
            )));
        }
        let edges_ok = text.as_bytes()[0].is_ascii_alphanumeric()
            && text.as_bytes()[text.len() - 1].is_ascii_alphanumeric();
        if !edges_ok || text.contains("__") {
            return Err(bad(
                "a server name starts and ends with a letter or digit and holds no `__`".to_owned(),
            ));
        }
        Ok(ServerName(Arc::from(text)))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ServerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for ServerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ServerName({:?})", &*self.0)
    }
}

/// How Keel reaches a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// A child process speaking JSON-RPC lines on stdin and stdout.
    Stdio {
        /// The program (looked up on the child's `PATH`).
        program: String,
        /// Its arguments.
        args: Vec<String>,
    },
    /// Streamable HTTP at this `http://` or `https://` URL.
    Http {
        /// The endpoint.
        url: String,
    },
}

/// A checked server entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    name: ServerName,
    transport: Transport,
    env: Vec<EnvVarName>,
    call_timeout: Option<Duration>,
    startup_timeout: Duration,
    max_output_bytes: usize,
    tool_policies: BTreeMap<String, ToolPolicy>,
}

impl ServerConfig {
    /// Checks `entry`. `withheld` names host variables no entry may pass
    /// on (the scenario's provider key variable, for one), on top of
    /// [`WITHHELD_ENV`]. Error paths are relative to the entry (`env[1]`).
    pub fn from_entry(
        entry: &ServerEntry,
        withheld: &[&str],
    ) -> Result<ServerConfig, McpConfigError> {
        let name = ServerName::parse(&entry.name)?;
        let transport = transport(entry)?;
        let env = env_names(entry.env.as_deref().unwrap_or_default(), withheld)?;
        if matches!(transport, Transport::Http { .. }) && !env.is_empty() {
            return Err(McpConfigError::new(
                "env",
                "mcp.env_name",
                "`env` is for stdio servers; an HTTP server gets no host variables".to_owned(),
            ));
        }
        let call_timeout = entry
            .timeout_ms
            .map(|ms| timeout("timeout_ms", "mcp.timeout", ms))
            .transpose()?;
        let startup_timeout = entry
            .startup_timeout_ms
            .map(|ms| timeout("startup_timeout_ms", "mcp.startup_timeout", ms))
            .transpose()?
            .unwrap_or(DEFAULT_STARTUP_TIMEOUT);
        let max_output_bytes = match entry.max_output_bytes {
            None => DEFAULT_OUTPUT_BYTES,
            Some(n) if (OUTPUT_MIN_BYTES..=OUTPUT_MAX_BYTES).contains(&n) => n as usize,
            Some(n) => {
                return Err(McpConfigError::new(
                    "max_output_bytes",
                    "mcp.max_output_bytes",
                    format!(
                        "max_output_bytes is {OUTPUT_MIN_BYTES} to {OUTPUT_MAX_BYTES}; {n} given"
                    ),
                ));
            }
        };
        let tool_policies = policies(entry.tools.as_ref(), call_timeout)?;
        Ok(ServerConfig {
            name,
            transport,
            env,
            call_timeout,
            startup_timeout,
            max_output_bytes,
            tool_policies,
        })
    }

    /// The server's name.
    pub fn name(&self) -> &ServerName {
        &self.name
    }

    /// How it is reached.
    pub fn transport(&self) -> &Transport {
        &self.transport
    }

    /// The host variables its entry names (beyond [`DEFAULT_ENV`]).
    pub fn env(&self) -> &[EnvVarName] {
        &self.env
    }

    /// The per-call timeout its entry sets; `None` leaves the run's
    /// `limits.tool_call_timeout`.
    pub fn call_timeout(&self) -> Option<Duration> {
        self.call_timeout
    }

    /// The bound on start, `initialize` and the first `tools/list`.
    pub fn startup_timeout(&self) -> Duration {
        self.startup_timeout
    }

    /// The cut bound on one result's flattened text, in bytes.
    pub fn max_output_bytes(&self) -> usize {
        self.max_output_bytes
    }

    /// The policy of the server's tool `tool` (its own name): the entry's
    /// `tools` member, else the default policy with the entry's timeout.
    pub fn policy_for(&self, tool: &str) -> ToolPolicy {
        self.tool_policies
            .get(tool)
            .cloned()
            .unwrap_or_else(|| ToolPolicy {
                timeout: self.call_timeout,
                ..ToolPolicy::default()
            })
    }
}

fn transport(entry: &ServerEntry) -> Result<Transport, McpConfigError> {
    match (&entry.command, &entry.url) {
        (Some(command), None) => stdio(command),
        (None, Some(url)) => http(url),
        _ => Err(McpConfigError::new(
            "",
            "mcp.transport",
            "a server has exactly one of `command` and `url`".to_owned(),
        )),
    }
}

fn stdio(command: &[String]) -> Result<Transport, McpConfigError> {
    let bad = |path: String, why: String| McpConfigError::new(path, "mcp.command", why);
    if command.is_empty() || command.len() > COMMAND_MAX_ITEMS {
        return Err(bad(
            "command".to_owned(),
            format!(
                "`command` holds 1 to {COMMAND_MAX_ITEMS} strings; {} given",
                command.len()
            ),
        ));
    }
    for (i, item) in command.iter().enumerate() {
        if item.len() > COMMAND_ITEM_MAX_BYTES || item.contains('\0') || (i == 0 && item.is_empty())
        {
            return Err(bad(
                format!("command[{i}]"),
                format!(
                    "a command string is at most {COMMAND_ITEM_MAX_BYTES} bytes with no NUL, and the program is not empty; this one is {} bytes",
                    item.len()
                ),
            ));
        }
    }
    Ok(Transport::Stdio {
        program: command[0].clone(),
        args: command[1..].to_vec(),
    })
}

fn http(url: &str) -> Result<Transport, McpConfigError> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    let host_ok = rest.is_some_and(|r| !r.is_empty() && !r.starts_with('/'));
    if url.len() > URL_MAX_BYTES
        || !host_ok
        || url.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(McpConfigError::new(
            "url",
            "mcp.url",
            format!(
                "`url` is an http:// or https:// URL of at most {URL_MAX_BYTES} bytes with a host; {} bytes given",
                url.len()
            ),
        ));
    }
    Ok(Transport::Http {
        url: url.to_owned(),
    })
}

fn env_names(names: &[String], withheld: &[&str]) -> Result<Vec<EnvVarName>, McpConfigError> {
    if names.len() > ENV_MAX_NAMES {
        return Err(McpConfigError::new(
            "env",
            "mcp.env_name",
            format!(
                "`env` names at most {ENV_MAX_NAMES} variables; {} given",
                names.len()
            ),
        ));
    }
    let mut checked = Vec::with_capacity(names.len());
    for (i, name) in names.iter().enumerate() {
        let path = format!("env[{i}]");
        let name = EnvVarName::parse(name)
            .map_err(|e| McpConfigError::new(path.as_str(), "mcp.env_name", e.to_string()))?;
        if WITHHELD_ENV.contains(&name.as_str()) || withheld.contains(&name.as_str()) {
            return Err(McpConfigError::new(
                path,
                "mcp.env_secret",
                format!("{name} holds one of Keel's own secrets and never reaches an MCP server"),
            ));
        }
        checked.push(name);
    }
    Ok(checked)
}

fn timeout(path: &str, rule: &'static str, ms: u64) -> Result<Duration, McpConfigError> {
    if ms == 0 || ms > TIMEOUT_MAX_MS {
        return Err(McpConfigError::new(
            path,
            rule,
            format!("{path} is 1 to {TIMEOUT_MAX_MS}; {ms} given"),
        ));
    }
    Ok(Duration::from_millis(ms))
}

fn policies(
    entries: Option<&BTreeMap<String, ToolPolicyEntry>>,
    call_timeout: Option<Duration>,
) -> Result<BTreeMap<String, ToolPolicy>, McpConfigError> {
    let Some(entries) = entries else {
        return Ok(BTreeMap::new());
    };
    if entries.len() > TOOL_POLICIES_MAX {
        return Err(McpConfigError::new(
            "tools",
            "mcp.tool_policy",
            format!(
                "`tools` holds at most {TOOL_POLICIES_MAX} policies; {} given",
                entries.len()
            ),
        ));
    }
    let mut out = BTreeMap::new();
    for (tool, entry) in entries {
        let path = format!("tools.{tool}");
        let on_failure = match entry.on_failure.as_deref() {
            None | Some("feed_back") => OnToolFailure::FeedBack,
            Some("end_run") => OnToolFailure::EndRun,
            Some(_) => {
                return Err(McpConfigError::new(
                    format!("{path}.on_failure"),
                    "mcp.tool_policy",
                    "on_failure is `feed_back` or `end_run`".to_owned(),
                ));
            }
        };
        let timeout = match entry.timeout_ms {
            Some(ms) => Some(self::timeout(
                &format!("{path}.timeout_ms"),
                "mcp.timeout",
                ms,
            )?),
            None => call_timeout,
        };
        let policy = ToolPolicy {
            on_failure,
            requires_approval: entry.requires_approval.unwrap_or(false),
            timeout,
            ..ToolPolicy::default()
        };
        out.insert(tool.clone(), policy);
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
