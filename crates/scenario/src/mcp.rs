//! MCP servers for a run (the `mcp` feature): a scenario's `mcp_servers`
//! checked into specs, resolved against what the host provides, and
//! started as tool sources for one run.
//!
//! An entry is either a full server entry (`command` or `url`, see
//! `keel_mcp::ServerEntry`) or a bare `{"name": "files"}`, which means the
//! server the host provides under that name (`keel serve --mcp`). A posted
//! scenario (untrusted) may use only the operator's servers: a bare name
//! from the list, or an entry identical to the listed one. Anything else is
//! refused before any server is started. See RFC `2026-12-02-mcp-tools`.

use keel_engine::{RunRequest, ToolSource};
use keel_mcp::{McpToolSource, ServerConfig, ServerEntry, ServerName};
use serde_json::Value;
use std::collections::HashSet;
use std::sync::Arc;

/// The most entries `mcp_servers` (or `--mcp`) holds.
pub const MCP_SERVERS_MAX: usize = 16;

/// One checked `mcp_servers` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpServerSpec {
    /// A full entry.
    Configured(ServerConfig),
    /// A bare name: the host's server of that name.
    Named(ServerName),
}

impl McpServerSpec {
    /// The server's name.
    pub fn name(&self) -> &ServerName {
        match self {
            McpServerSpec::Configured(c) => c.name(),
            McpServerSpec::Named(n) => n,
        }
    }
}

/// A rule an entry broke: the JSON path below `mcp_servers` and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryError {
    /// `mcp_servers[1].env[0]`.
    pub path: String,
    /// What is wrong (names the rule, never echoes a value).
    pub message: String,
}

/// Checks `entries`. `withheld` names variables no entry may pass on (the
/// scenario's provider key variable).
pub fn check_entries(
    entries: &[Value],
    withheld: &[&str],
) -> Result<Vec<McpServerSpec>, EntryError> {
    if entries.len() > MCP_SERVERS_MAX {
        return Err(EntryError {
            path: "mcp_servers".to_owned(),
            message: format!(
                "at most {MCP_SERVERS_MAX} MCP servers per run; {} given (rule mcp.servers_max)",
                entries.len()
            ),
        });
    }
    let mut specs = Vec::with_capacity(entries.len());
    let mut names = HashSet::new();
    for (i, value) in entries.iter().enumerate() {
        let spec = check_entry(value, withheld).map_err(|(member, message)| EntryError {
            path: join(&format!("mcp_servers[{i}]"), &member),
            message,
        })?;
        if !names.insert(spec.name().clone()) {
            return Err(EntryError {
                path: format!("mcp_servers[{i}].name"),
                message: format!(
                    "a second MCP server named {} (rule mcp.server_name_unique)",
                    spec.name()
                ),
            });
        }
        specs.push(spec);
    }
    Ok(specs)
}

fn join(base: &str, member: &str) -> String {
    if member.is_empty() {
        base.to_owned()
    } else {
        format!("{base}.{member}")
    }
}

fn check_entry(value: &Value, withheld: &[&str]) -> Result<McpServerSpec, (String, String)> {
    let entry: ServerEntry = serde_json::from_value(value.clone()).map_err(|e| {
        (
            String::new(),
            keel_message::decode::elide_values(&format!("not a server entry: {e}")),
        )
    })?;
    let bare = ServerEntry {
        name: entry.name.clone(),
        ..ServerEntry::default()
    };
    // The path goes before the message, so the message leaves it out.
    let located = |e: keel_mcp::McpConfigError| {
        let message = format!("{} (rule {})", e.message(), e.rule());
        (e.path().to_owned(), message)
    };
    if entry == bare {
        return ServerName::parse(&entry.name)
            .map(McpServerSpec::Named)
            .map_err(located);
    }
    ServerConfig::from_entry(&entry, withheld)
        .map(McpServerSpec::Configured)
        .map_err(located)
}

/// Why a scenario's servers cannot be used here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// A bare name the host does not provide.
    #[error(
        "MCP server {server} is not provided here (rule mcp.server_allowed; `keel serve --mcp NAME=…` lists the servers a scenario may name)"
    )]
    NotProvided {
        /// The server.
        server: ServerName,
    },
    /// A posted entry that differs from the operator's.
    #[error(
        "MCP server {server} is not one this daemon allows (rule mcp.server_allowed: a posted scenario names a server listed with --mcp, or repeats its entry exactly)"
    )]
    NotAllowed {
        /// The server.
        server: ServerName,
    },
}

impl ResolveError {
    /// The server at fault.
    pub fn server(&self) -> &ServerName {
        match self {
            ResolveError::NotProvided { server } | ResolveError::NotAllowed { server } => server,
        }
    }
}

/// Who wrote the scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trust {
    /// The host's operator (`keel run`'s file, `--chat-scenario`): full
    /// entries start as written.
    Operator,
    /// An HTTP client: only the host's servers, as the host lists them.
    Client,
}

/// The configs to start for `specs`, given the host's servers.
pub fn resolve(
    specs: &[McpServerSpec],
    host: &[ServerConfig],
    trust: Trust,
) -> Result<Vec<ServerConfig>, ResolveError> {
    let listed = |name: &ServerName| host.iter().find(|c| c.name() == name);
    specs
        .iter()
        .map(|spec| match spec {
            McpServerSpec::Named(name) => {
                listed(name)
                    .cloned()
                    .ok_or_else(|| ResolveError::NotProvided {
                        server: name.clone(),
                    })
            }
            McpServerSpec::Configured(config) if trust == Trust::Operator => Ok(config.clone()),
            McpServerSpec::Configured(config) => match listed(config.name()) {
                Some(allowed) if allowed == config => Ok(config.clone()),
                _ => Err(ResolveError::NotAllowed {
                    server: config.name().clone(),
                }),
            },
        })
        .collect()
}

/// Starts every server in `configs` (one after another, each within its
/// startup timeout) and adds them to `request` as tool sources. On a
/// failure the servers already started are closed.
pub async fn start(
    request: RunRequest,
    configs: &[ServerConfig],
    part_bytes: usize,
) -> Result<RunRequest, keel_mcp::McpStartError> {
    let mut started: Vec<Arc<McpToolSource>> = Vec::with_capacity(configs.len());
    for config in configs {
        match McpToolSource::start(config.clone(), part_bytes).await {
            Ok(source) => started.push(Arc::new(source)),
            Err(e) => {
                for source in &started {
                    source.close().await;
                }
                return Err(e);
            }
        }
    }
    Ok(started.into_iter().fold(request, |request, source| {
        request.tool_source(source as Arc<dyn ToolSource>)
    }))
}

/// Why a `--mcp` value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--mcp: {0} (expected NAME=COMMAND [ARG…], NAME=URL, or a JSON server entry)")]
pub struct FlagError(String);

/// Parses one `--mcp` value: `NAME=COMMAND ARG…` (split on whitespace),
/// `NAME=http(s)://…`, or a whole JSON server entry (`{"name": …}`) for
/// `env`, timeouts and tool policies.
pub fn parse_flag(text: &str) -> Result<ServerConfig, FlagError> {
    let entry = if text.trim_start().starts_with('{') {
        serde_json::from_str::<ServerEntry>(text).map_err(|e| {
            FlagError(keel_message::decode::elide_values(&format!(
                "not a server entry: {e}"
            )))
        })?
    } else {
        let (name, rest) = text
            .split_once('=')
            .ok_or_else(|| FlagError("no `=` after the server name".to_owned()))?;
        let rest = rest.trim();
        let mut entry = ServerEntry {
            name: name.to_owned(),
            ..ServerEntry::default()
        };
        if rest.starts_with("http://") || rest.starts_with("https://") {
            entry.url = Some(rest.to_owned());
        } else {
            entry.command = Some(rest.split_whitespace().map(str::to_owned).collect());
        }
        entry
    };
    ServerConfig::from_entry(&entry, &[]).map_err(|e| FlagError(e.to_string()))
}

/// Checks a list of `--mcp` values: each parses, names are unique, at most
/// [`MCP_SERVERS_MAX`].
pub fn parse_flags(values: &[String]) -> Result<Vec<ServerConfig>, FlagError> {
    if values.len() > MCP_SERVERS_MAX {
        return Err(FlagError(format!("at most {MCP_SERVERS_MAX} servers")));
    }
    let mut configs: Vec<ServerConfig> = Vec::with_capacity(values.len());
    for value in values {
        let config = parse_flag(value)?;
        if configs.iter().any(|c| c.name() == config.name()) {
            return Err(FlagError(format!(
                "server {} is listed twice",
                config.name()
            )));
        }
        configs.push(config);
    }
    Ok(configs)
}

#[cfg(test)]
mod tests;
