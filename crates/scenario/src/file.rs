//! Scenario files: the JSON that `keel run` takes (KEEL.md, "Scenario
//! files"), loaded strictly.
//!
//! Loading happens in two steps, and both report where the problem is:
//!
//! 1. **Shape.** The text is deserialized through `serde_path_to_error`
//!    into wire structs that deny unknown members at every level (the
//!    provider's `calls` and the tools' `script`s use `keel-testkit`'s
//!    [`ScriptItem`] and [`ToolStep`], which do the same). A syntax error
//!    names the line and column; a shape error names the JSON path too.
//!    Each message is `{"role", "text"}` or `{"role", "parts": [...]}`
//!    with text, image, file and reasoning parts ([`crate::messages`]).
//! 2. **Rules.** Names, ids, messages, tool definitions, metadata
//!    namespaces and limits are checked with the constructors of
//!    `keel-message`, `keel-stream` and `keel-engine`, and an error names
//!    the JSON path of the offending member.
//!
//! What the loader does *not* reject is a script that is malformed as a
//! stream (text after `complete`, a duplicate `call_id`, a call to a tool
//! that does not exist): those reach the engine exactly as a misbehaving
//! provider's output would, and end up in the log as typed failures.

use keel_engine::{
    ContextPolicy, EngineLimits, LimitField, OnToolFailure, PartialRetry, RetryPolicy, ToolPolicy,
};
use keel_message::{CanonicalJson, EnvVarName, Limits, ModelName, RunId, ToolDefinition, ToolName};
use keel_providers::{ConnectOptions, ProviderConfigError, ProviderKind};
use keel_stream::MetadataAllowlist;
use keel_testkit::{ScriptItem, ToolStep};
use serde::Deserialize;
use serde_json::Value;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::builtins::Builtin;

mod agent;
pub use agent::AgentScenario;

/// Why a scenario file was refused. Every variant names the file; the
/// others also name the line and column, the JSON path, or both.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The file could not be read (missing, unreadable, not UTF-8).
    #[error("{file}: cannot read the scenario: {source}")]
    Read {
        /// The file.
        file: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is larger than [`SCENARIO_MAX_BYTES`].
    #[error("{file}: the scenario is over {max} bytes (rule scenario.max_bytes)")]
    TooLarge {
        /// The file.
        file: PathBuf,
        /// The bound.
        max: u64,
    },
    /// The text is not JSON.
    #[error("{file}:{line}:{column}: invalid JSON: {message}")]
    Syntax {
        /// The file.
        file: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// serde_json's message.
        message: String,
    },
    /// Valid JSON of the wrong shape: an unknown or missing member, a
    /// value of the wrong type.
    #[error("{file}:{line}:{column}: at {path}: {message}")]
    Shape {
        /// The file.
        file: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// The JSON path (`provider.calls[0][1].complete`).
        path: String,
        /// What is wrong.
        message: String,
    },
    /// A member breaks a rule (an invalid id or name, a zero limit, two
    /// tools with one name).
    #[error("{file}: at {path}: {message}")]
    Invalid {
        /// The file.
        file: PathBuf,
        /// The JSON path.
        path: String,
        /// What is wrong.
        message: String,
    },
}

/// A loaded, checked scenario.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The run id the scenario asks for, if any.
    pub run_id: Option<RunId>,
    /// The model name passed to the provider.
    pub model: ModelName,
    /// The starting history (ids `m1`, `m2`, … in order).
    pub messages: Vec<keel_message::Message>,
    /// Provider metadata namespaces allowed into events.
    pub allow_metadata: MetadataAllowlist,
    /// The namespaces, as written (for display).
    pub allow_metadata_names: Vec<String>,
    /// Engine limits, defaults where the scenario is silent.
    pub limits: EngineLimits,
    /// Whether the scenario set `limits.approval_timeout_ms` (otherwise a
    /// daemon applies its own default).
    pub approval_timeout_set: bool,
    /// The tools, in file order.
    pub tools: Vec<ToolEntry>,
    /// The provider.
    pub provider: ProviderSpec,
    /// The MCP servers whose tools the run mounts, in file order.
    #[cfg(feature = "mcp")]
    pub mcp_servers: Vec<crate::mcp::McpServerSpec>,
}

/// One entry of `tools`.
#[derive(Debug, Clone)]
pub enum ToolEntry {
    /// A scripted tool: `{name, description, parameters, script, ...}`.
    Scripted {
        /// Name, description and parameters schema.
        definition: ToolDefinition,
        /// One step per invocation, in order.
        script: Vec<ToolStep>,
        /// Approval, failure handling, timeout.
        policy: ToolPolicy,
    },
    /// A built-in tool: `{"builtin": "clock" | "calculator" | "read_file"}`.
    Builtin {
        /// Which one.
        builtin: Builtin,
        /// Approval, failure handling, timeout.
        policy: ToolPolicy,
        /// Its index in `tools`, for error messages.
        index: usize,
    },
    /// A sub-agent: `{name, description, agent: {model, provider, tools,
    /// limits, messages}, ...}`; each call starts a child run whose task
    /// is the call's `task` argument.
    Agent {
        /// Name, description and the `task` parameters schema.
        definition: ToolDefinition,
        /// The child run's model, provider, tools, limits, instructions.
        spec: AgentScenario,
        /// Approval, failure handling, timeout (the timeout cancels the
        /// child).
        policy: ToolPolicy,
    },
}

impl ToolEntry {
    /// The name the model calls it by.
    pub fn name(&self) -> &str {
        match self {
            ToolEntry::Scripted { definition, .. } | ToolEntry::Agent { definition, .. } => {
                definition.name().as_str()
            }
            ToolEntry::Builtin { builtin, .. } => builtin.tool_name(),
        }
    }

    /// Its approval, failure handling and timeout.
    pub fn policy(&self) -> &ToolPolicy {
        match self {
            ToolEntry::Scripted { policy, .. }
            | ToolEntry::Builtin { policy, .. }
            | ToolEntry::Agent { policy, .. } => policy,
        }
    }
}

/// The `provider` member.
#[derive(Debug, Clone)]
pub enum ProviderSpec {
    /// `{"type": "scripted", "calls": [[item, ...], ...]}`.
    Scripted {
        /// One list of stream items per model call, in order.
        calls: Vec<Vec<ScriptItem>>,
    },
    /// A network provider (`openai-compatible`, `anthropic`,
    /// `openai-responses`, `gemini`: a [`ProviderKind`]). The key is
    /// read from the named environment variable when the run starts, and
    /// never printed.
    Network {
        /// The `type`.
        kind: ProviderKind,
        /// `base_url`, if given.
        base_url: Option<String>,
        /// The *name* of the environment variable holding the key.
        api_key_env: EnvVarName,
        /// `send_reasoning` (openai-compatible) and
        /// `thinking_budget_tokens` (anthropic, gemini), checked for the
        /// kind.
        options: ConnectOptions,
    },
}

impl ProviderSpec {
    /// The provider type as written in the file.
    pub fn type_name(&self) -> &'static str {
        match self {
            ProviderSpec::Scripted { .. } => "scripted",
            ProviderSpec::Network { kind, .. } => kind.type_name(),
        }
    }
}

// ---- wire shapes (every struct denies unknown members) ----

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScenarioWire {
    #[serde(default)]
    run_id: Option<String>,
    model: String,
    messages: Vec<crate::messages::MessageWire>,
    #[serde(default)]
    allow_metadata: Vec<String>,
    #[serde(default)]
    limits: LimitsWire,
    #[serde(default)]
    tools: Vec<ToolWire>,
    provider: ProviderWire,
    /// Checked by `crate::mcp` (its entries' own shape).
    #[serde(default)]
    mcp_servers: Vec<Value>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct LimitsWire {
    max_turns: Option<u64>,
    max_tool_calls_per_turn: Option<usize>,
    max_parallel_tools: Option<usize>,
    model_timeout_ms: Option<u64>,
    tool_timeout_ms: Option<u64>,
    closing_deadline_ms: Option<u64>,
    approval_timeout_ms: Option<u64>,
    retry: Option<RetryWire>,
    context: Option<ContextWire>,
    max_sub_run_depth: Option<u32>,
    max_sub_runs: Option<u32>,
}

/// `limits.context`: the compaction policy (`window_tokens` required).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ContextWire {
    window_tokens: u64,
    compact_at: Option<f64>,
    keep_turns: Option<usize>,
    bytes_per_token: Option<u32>,
    instruction: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RetryWire {
    max_attempts: Option<u32>,
    initial_backoff_ms: Option<u64>,
    max_backoff_ms: Option<u64>,
    multiplier: Option<f64>,
    jitter: Option<f64>,
    partial: Option<PartialWire>,
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "snake_case")]
enum PartialWire {
    Never,
    Restart,
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "snake_case")]
enum OnFailureWire {
    FeedBack,
    EndRun,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolWire {
    builtin: Option<String>,
    name: Option<String>,
    description: Option<String>,
    parameters: Option<Value>,
    #[serde(default)]
    requires_approval: bool,
    #[serde(default)]
    idempotent: bool,
    timeout_ms: Option<u64>,
    on_failure: Option<OnFailureWire>,
    script: Option<Vec<ToolStep>>,
    /// A sub-agent (checked by [`agent`]); boxed: it holds tools.
    agent: Option<Box<agent::AgentWire>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProviderWire {
    #[serde(rename = "type")]
    kind: String,
    calls: Option<Vec<Vec<ScriptItem>>>,
    base_url: Option<String>,
    api_key_env: Option<String>,
    send_reasoning: Option<bool>,
    thinking_budget_tokens: Option<u32>,
}

/// The largest scenario file `keel run` reads (16 MiB; `keel serve`
/// bounds request bodies at 1 MiB before the loader sees them).
pub const SCENARIO_MAX_BYTES: u64 = 16 << 20;

/// Loads and checks the scenario at `path`.
pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
    use std::io::Read;
    let read = |source| ScenarioError::Read {
        file: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read)?;
    // One byte past the bound tells a file that is too large (or grew).
    let mut bytes = Vec::new();
    file.take(SCENARIO_MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read)?;
    if bytes.len() as u64 > SCENARIO_MAX_BYTES {
        return Err(ScenarioError::TooLarge {
            file: path.to_path_buf(),
            max: SCENARIO_MAX_BYTES,
        });
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        read(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "not UTF-8 (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            ),
        ))
    })?;
    parse(path, &text)
}

/// Parses and checks scenario `text`; `file` names it in errors.
pub fn parse(file: &Path, text: &str) -> Result<Scenario, ScenarioError> {
    strict(file, text)?;
    let mut de = serde_json::Deserializer::from_str(text);
    let wire: ScenarioWire = match serde_path_to_error::deserialize(&mut de) {
        Ok(wire) => wire,
        Err(e) => return Err(shape_error(file, e)),
    };
    if let Err(e) = de.end() {
        return Err(shape_error_plain(file, e));
    }
    check(file, wire)
}

/// The one strict reading ([`keel_message::strict_json`]): a duplicate member
/// anywhere (even inside a free-form value such as a tool's `parameters`),
/// a nesting past the bound or an unsafe integer is refused with its JSON
/// path. Syntax errors are left to the shape step, which names their line
/// and column.
fn strict(file: &Path, text: &str) -> Result<(), ScenarioError> {
    keel_message::strict_json::check(text).map_err(|e| {
        let path = keel_message::strict_json::path(&e);
        ScenarioError::Invalid {
            file: file.to_path_buf(),
            path: match path.strip_prefix("$.") {
                Some(member) => member.to_owned(),
                None => path,
            },
            message: keel_message::strict_json::rule(&e).to_owned(),
        }
    })
}

fn shape_error(file: &Path, e: serde_path_to_error::Error<serde_json::Error>) -> ScenarioError {
    let path = match e.path().to_string() {
        // The empty member name at the top level.
        p if p.is_empty() => "\"\"".to_owned(),
        p => p,
    };
    let inner = e.into_inner();
    if inner.is_syntax() || inner.is_eof() || path == "." {
        return shape_error_plain(file, inner);
    }
    ScenarioError::Shape {
        file: file.to_path_buf(),
        line: inner.line(),
        column: inner.column(),
        path,
        message: strip_position(&inner),
    }
}

fn shape_error_plain(file: &Path, e: serde_json::Error) -> ScenarioError {
    if e.is_syntax() || e.is_eof() {
        ScenarioError::Syntax {
            file: file.to_path_buf(),
            line: e.line(),
            column: e.column(),
            message: strip_position(&e),
        }
    } else {
        ScenarioError::Shape {
            file: file.to_path_buf(),
            line: e.line(),
            column: e.column(),
            path: "(top level)".to_owned(),
            message: strip_position(&e),
        }
    }
}

/// serde_json's message without its trailing " at line L column C", and
/// with the input's values elided (`invalid type: string "…"`): a refusal
/// names members and positions, never what was written there (the same
/// loader answers HTTP clients).
fn strip_position(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    keel_message::decode::elide_values(text.strip_suffix(&suffix).unwrap_or(&text))
}

fn check(file: &Path, w: ScenarioWire) -> Result<Scenario, ScenarioError> {
    let invalid = |path: &str, message: String| ScenarioError::Invalid {
        file: file.to_path_buf(),
        path: path.to_owned(),
        message,
    };
    let run_id = match &w.run_id {
        None => None,
        Some(id) => Some(RunId::parse(id).map_err(|e| invalid("run_id", e.to_string()))?),
    };
    let model = ModelName::parse(&w.model).map_err(|e| invalid("model", e.to_string()))?;
    if w.messages.is_empty() {
        return Err(invalid(
            "messages",
            "a run needs at least one message".to_owned(),
        ));
    }
    let mut messages = Vec::with_capacity(w.messages.len());
    for (i, m) in w.messages.iter().enumerate() {
        let message = crate::messages::check_message(i, m, Limits::default_ref())
            .map_err(|e| invalid(&e.path, e.message))?;
        messages.push(message);
    }
    let allow_metadata = MetadataAllowlist::new(&w.allow_metadata).map_err(|e| {
        // The allowlist names the position as `$[i]`.
        let at = e.path().trim_start_matches('$');
        invalid(&format!("allow_metadata{at}"), e.kind().to_string())
    })?;
    let limits = check_limits(&w.limits).map_err(|(path, message)| invalid(&path, message))?;
    let approval_timeout_set = w.limits.approval_timeout_ms.is_some();
    let tools = check_tools("", w.tools).map_err(|(path, message)| invalid(&path, message))?;
    let provider = check_provider(w.provider).map_err(|(path, message)| invalid(&path, message))?;
    #[cfg(feature = "mcp")]
    let mcp_servers =
        check_mcp(&w.mcp_servers, &provider).map_err(|e| invalid(&e.path, e.message))?;
    #[cfg(not(feature = "mcp"))]
    check_mcp(&w.mcp_servers).map_err(|(path, message)| invalid(&path, message))?;
    Ok(Scenario {
        run_id,
        model,
        messages,
        allow_metadata,
        allow_metadata_names: w.allow_metadata,
        limits,
        approval_timeout_set,
        tools,
        provider,
        #[cfg(feature = "mcp")]
        mcp_servers,
    })
}

/// The scenario's MCP servers; the provider's key variable never reaches
/// one.
#[cfg(feature = "mcp")]
fn check_mcp(
    entries: &[Value],
    provider: &ProviderSpec,
) -> Result<Vec<crate::mcp::McpServerSpec>, crate::mcp::EntryError> {
    let withheld: Vec<&str> = match provider {
        ProviderSpec::Network { api_key_env, .. } => vec![api_key_env.as_str()],
        ProviderSpec::Scripted { .. } => Vec::new(),
    };
    crate::mcp::check_entries(entries, &withheld)
}

/// Without the `mcp` feature a scenario names no MCP servers.
#[cfg(not(feature = "mcp"))]
fn check_mcp(entries: &[Value]) -> Result<(), RuleError> {
    if entries.is_empty() {
        Ok(())
    } else {
        Err(rule(
            "mcp_servers",
            "this keel was built without the `mcp` feature",
        ))
    }
}

type RuleError = (String, String);

/// The `tools` under `prefix` (`""` at the top, `tools[2].agent.` in an
/// agent), each checked, their names unique.
fn check_tools(prefix: &str, wires: Vec<ToolWire>) -> Result<Vec<ToolEntry>, RuleError> {
    let mut tools = Vec::with_capacity(wires.len());
    let mut names: HashSet<String> = HashSet::new();
    for (i, t) in wires.into_iter().enumerate() {
        let entry = check_tool(prefix, i, t)?;
        if !names.insert(entry.name().to_owned()) {
            return Err(rule(
                &format!("{prefix}tools[{i}]"),
                format!(
                    "a second tool named {} (tool names are unique)",
                    entry.name()
                ),
            ));
        }
        tools.push(entry);
    }
    Ok(tools)
}

fn rule(path: &str, message: impl Into<String>) -> RuleError {
    (path.to_owned(), message.into())
}

/// The scenario member an engine limit comes from.
pub fn limit_path(field: LimitField) -> &'static str {
    match field {
        LimitField::MaxTurns => "limits.max_turns",
        LimitField::MaxToolCallsPerTurn => "limits.max_tool_calls_per_turn",
        LimitField::MaxParallelTools => "limits.max_parallel_tools",
        LimitField::ModelCallTimeout => "limits.model_timeout_ms",
        LimitField::ToolCallTimeout => "limits.tool_timeout_ms",
        LimitField::ClosingDeadline => "limits.closing_deadline_ms",
        LimitField::ApprovalTimeout => "limits.approval_timeout_ms",
        LimitField::RetryMaxAttempts => "limits.retry.max_attempts",
        LimitField::RetryInitialBackoff => "limits.retry.initial_backoff_ms",
        LimitField::RetryMultiplier => "limits.retry.multiplier",
        LimitField::RetryJitter => "limits.retry.jitter",
        LimitField::ContextWindowTokens => "limits.context.window_tokens",
        LimitField::ContextCompactAt => "limits.context.compact_at",
        LimitField::ContextBytesPerToken => "limits.context.bytes_per_token",
        LimitField::ContextInstruction => "limits.context.instruction",
    }
}

/// The scenario's limits over the engine's defaults, checked by the
/// engine's own rule set ([`EngineLimits::check`]); a refusal names the
/// member it came from.
fn check_limits(w: &LimitsWire) -> Result<EngineLimits, RuleError> {
    let limits = engine_limits(w);
    limits.check().map_err(|e| {
        rule(
            limit_path(e.field()),
            format!("is {} (rule engine.limits: {})", e.value(), e.rule()),
        )
    })?;
    Ok(limits)
}

/// The members `w` sets, over [`EngineLimits::default`], unchecked.
fn engine_limits(w: &LimitsWire) -> EngineLimits {
    let d = EngineLimits::default();
    let ms = |v: Option<u64>, default: Duration| v.map_or(default, Duration::from_millis);
    EngineLimits {
        max_turns: w.max_turns.unwrap_or(d.max_turns),
        max_tool_calls_per_turn: w
            .max_tool_calls_per_turn
            .unwrap_or(d.max_tool_calls_per_turn),
        max_parallel_tools: w.max_parallel_tools.unwrap_or(d.max_parallel_tools),
        model_call_timeout: ms(w.model_timeout_ms, d.model_call_timeout),
        tool_call_timeout: ms(w.tool_timeout_ms, d.tool_call_timeout),
        closing_deadline: ms(w.closing_deadline_ms, d.closing_deadline),
        approval_timeout: ms(w.approval_timeout_ms, d.approval_timeout),
        retry: w.retry.as_ref().map_or(d.retry, retry_policy),
        context: w.context.as_ref().map(context_policy),
        max_sub_run_depth: w.max_sub_run_depth.unwrap_or(d.max_sub_run_depth),
        max_sub_runs: w.max_sub_runs.unwrap_or(d.max_sub_runs),
    }
}

/// The members `c` sets, over [`ContextPolicy::new`], unchecked.
fn context_policy(c: &ContextWire) -> ContextPolicy {
    let d = ContextPolicy::new(c.window_tokens);
    ContextPolicy {
        compact_at: c.compact_at.unwrap_or(d.compact_at),
        keep_turns: c.keep_turns.unwrap_or(d.keep_turns),
        bytes_per_token: c.bytes_per_token.unwrap_or(d.bytes_per_token),
        instruction: c.instruction.clone().unwrap_or(d.instruction),
        ..d
    }
}

/// The members `r` sets, over [`RetryPolicy::default`], unchecked.
fn retry_policy(r: &RetryWire) -> RetryPolicy {
    let d = RetryPolicy::default();
    let ms = |v: Option<u64>, default: Duration| v.map_or(default, Duration::from_millis);
    RetryPolicy {
        max_attempts: r.max_attempts.unwrap_or(d.max_attempts),
        initial_backoff: ms(r.initial_backoff_ms, d.initial_backoff),
        max_backoff: ms(r.max_backoff_ms, d.max_backoff),
        multiplier: r.multiplier.unwrap_or(d.multiplier),
        jitter: r.jitter.unwrap_or(d.jitter),
        partial: match r.partial {
            None => d.partial,
            Some(PartialWire::Never) => PartialRetry::Never,
            Some(PartialWire::Restart) => PartialRetry::Restart,
        },
    }
}

/// Tool `i` of the `tools` under `prefix`: a built-in, a scripted tool
/// or an agent (exactly one of `builtin`, `script`, `agent`).
fn check_tool(prefix: &str, i: usize, t: ToolWire) -> Result<ToolEntry, RuleError> {
    let here = format!("{prefix}tools[{i}]");
    let at = |member: &str| format!("{here}.{member}");
    let timeout = match t.timeout_ms {
        Some(0) => return Err(rule(&at("timeout_ms"), "must be at least 1")),
        other => other.map(Duration::from_millis),
    };
    let policy = ToolPolicy {
        on_failure: match t.on_failure {
            None | Some(OnFailureWire::FeedBack) => OnToolFailure::FeedBack,
            Some(OnFailureWire::EndRun) => OnToolFailure::EndRun,
        },
        requires_approval: t.requires_approval,
        timeout,
        idempotent: t.idempotent,
    };
    if let Some(id) = &t.builtin {
        return check_builtin(&here, i, id, &t, policy);
    }
    let Some(name) = &t.name else {
        return Err(rule(
            &here,
            "a tool needs `builtin`, or `name` and `script` (a scripted tool) or `agent` (a sub-agent)",
        ));
    };
    match (t.script, t.agent) {
        (Some(_), Some(_)) => Err(rule(
            &here,
            "a tool has exactly one of `script`, `builtin`, `agent` (rule scenario.tool_kind)",
        )),
        (None, None) => Err(rule(
            &here,
            "a scripted tool needs `script` (one step per invocation), a sub-agent `agent`",
        )),
        (Some(script), None) => Ok(ToolEntry::Scripted {
            definition: check_definition(
                &here,
                name,
                t.description.as_deref(),
                t.parameters.as_ref(),
            )?,
            script,
            policy,
        }),
        (None, Some(agent)) => agent::check_agent_tool(
            &here,
            name,
            t.description.as_deref(),
            t.parameters.as_ref(),
            t.idempotent,
            *agent,
            policy,
        ),
    }
}

/// `{"builtin": id, ...}` at `here`: none of the members a built-in
/// defines itself.
fn check_builtin(
    here: &str,
    i: usize,
    id: &str,
    t: &ToolWire,
    policy: ToolPolicy,
) -> Result<ToolEntry, RuleError> {
    let at = |member: &str| format!("{here}.{member}");
    let builtin = Builtin::parse(id).ok_or_else(|| {
        rule(
            &at("builtin"),
            format!(
                "unknown builtin (expected one of {})",
                Builtin::ALL
                    .iter()
                    .map(|b| b.id())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )
    })?;
    for (member, present) in [
        ("name", t.name.is_some()),
        ("description", t.description.is_some()),
        ("parameters", t.parameters.is_some()),
        ("script", t.script.is_some()),
    ] {
        if present {
            return Err(rule(
                &at(member),
                format!("a builtin tool takes no `{member}` (its definition is built in)"),
            ));
        }
    }
    if t.agent.is_some() {
        return Err(rule(
            here,
            "a tool has exactly one of `script`, `builtin`, `agent` (rule scenario.tool_kind)",
        ));
    }
    Ok(ToolEntry::Builtin {
        builtin,
        policy,
        index: i,
    })
}

/// The definition of the tool at `here`: its name, its description (empty
/// when absent) and its parameters schema (`{"type":"object"}` when
/// absent).
fn check_definition(
    here: &str,
    name: &str,
    description: Option<&str>,
    parameters: Option<&Value>,
) -> Result<ToolDefinition, RuleError> {
    let at = |member: &str| format!("{here}.{member}");
    let name = ToolName::parse(name).map_err(|e| rule(&at("name"), e.to_string()))?;
    let parameters = match parameters {
        None => CanonicalJson::parse(r#"{"type":"object"}"#),
        Some(v) => CanonicalJson::from_value(v),
    }
    .map_err(|e| rule(&at("parameters"), e.to_string()))?;
    ToolDefinition::new(name, description.unwrap_or(""), parameters).map_err(|e| {
        // The error's own path is `$.description` or `$.parameters`.
        match e.path().strip_prefix("$.") {
            Some(member) => rule(&at(member), e.kind().to_string()),
            None => rule(here, e.kind().to_string()),
        }
    })
}

/// `scripted, openai-compatible, … or gemini`: every type a file may
/// name, from [`ProviderKind::ALL`].
fn check_provider(p: ProviderWire) -> Result<ProviderSpec, RuleError> {
    if p.kind == "scripted" {
        return check_scripted(p);
    }
    let kind = ProviderKind::parse(&p.kind).map_err(|_| {
        rule(
            "provider.type",
            format!("unknown provider type (expected {})", provider_types()),
        )
    })?;
    if p.calls.is_some() {
        return Err(rule(
            "provider.calls",
            format!("`calls` is for the scripted provider, not {kind}"),
        ));
    }
    if kind == ProviderKind::OpenAiCompatible && p.base_url.is_none() {
        return Err(rule(
            "provider",
            "an openai-compatible provider needs `base_url`",
        ));
    }
    let Some(api_key_env) = p.api_key_env else {
        return Err(rule(
            "provider",
            format!(
                "a {kind} provider needs `api_key_env`, the name of the environment variable holding the key"
            ),
        ));
    };
    // The error never echoes the text: it may be the key itself.
    let api_key_env = EnvVarName::parse(&api_key_env).map_err(|e| {
        rule(
            "provider.api_key_env",
            format!(
                "must be the NAME of an environment variable, not the key ({e}); the key itself never appears in a scenario"
            ),
        )
    })?;
    let options = ConnectOptions {
        send_reasoning: p.send_reasoning.unwrap_or(false),
        thinking_budget_tokens: p.thinking_budget_tokens,
    };
    kind.check_options(&options).map_err(|e| {
        let member = match &e {
            ProviderConfigError::NotForKind { field, .. } => format!("provider.{field}"),
            _ => "provider.thinking_budget_tokens".to_owned(),
        };
        rule(&member, e.to_string())
    })?;
    Ok(ProviderSpec::Network {
        kind,
        base_url: p.base_url,
        api_key_env,
        options,
    })
}

/// `scripted, openai-compatible, … or {last kind}`: every type a file
/// may name, from [`ProviderKind::ALL`].
fn provider_types() -> String {
    let mut names: Vec<&str> = std::iter::once("scripted")
        .chain(ProviderKind::ALL.map(ProviderKind::type_name))
        .collect();
    let last = names.pop().unwrap_or_default();
    format!("{} or {last}", names.join(", "))
}

fn check_scripted(p: ProviderWire) -> Result<ProviderSpec, RuleError> {
    for (member, present) in [
        ("base_url", p.base_url.is_some()),
        ("api_key_env", p.api_key_env.is_some()),
        ("send_reasoning", p.send_reasoning.is_some()),
        ("thinking_budget_tokens", p.thinking_budget_tokens.is_some()),
    ] {
        if present {
            return Err(rule(
                &format!("provider.{member}"),
                format!("the scripted provider takes no `{member}`"),
            ));
        }
    }
    let Some(calls) = p.calls else {
        return Err(rule(
            "provider",
            "the scripted provider needs `calls` (one list of stream items per model call)",
        ));
    };
    Ok(ProviderSpec::Scripted { calls })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn load_str(text: &str) -> Result<Scenario, ScenarioError> {
        parse(Path::new("s.json"), text)
    }

    const MINIMAL: &str = r#"{"model":"m","messages":[{"role":"user","text":"hi"}],
        "provider":{"type":"scripted","calls":[[{"text":"a"},{"complete":{"finish":"stop"}}]]}}"#;

    /// The provider's key variable never reaches an MCP server, whatever
    /// it is called.
    #[cfg(feature = "mcp")]
    #[test]
    fn an_mcp_server_cannot_be_given_the_provider_key() {
        let text = r#"{"model":"m","messages":[{"role":"user","text":"hi"}],
            "provider":{"type":"anthropic","api_key_env":"TEAM_KEY"},
            "mcp_servers":[{"name":"s","command":["srv"],"env":["HOME","TEAM_KEY"]}]}"#;
        let msg = load_str(text).unwrap_err().to_string();
        assert!(msg.contains("at mcp_servers[0].env[1]"), "{msg}");
        assert!(msg.contains("rule mcp.env_secret"), "{msg}");
        let fine = text.replace(r#","TEAM_KEY"]"#, "]");
        assert_eq!(load_str(&fine).unwrap().mcp_servers.len(), 1);
    }

    /// `"idempotent": true` reaches the tool's policy, for scripted and
    /// built-in tools; absent, it is false.
    #[test]
    fn a_tool_may_declare_itself_idempotent() {
        let text = r#"{"model":"m","messages":[{"role":"user","text":"hi"}],
            "tools":[{"name":"put","script":[],"idempotent":true},{"builtin":"clock","idempotent":true},
                     {"name":"post","script":[]}],
            "provider":{"type":"scripted","calls":[]}}"#;
        let idempotent: Vec<bool> = load_str(text)
            .unwrap()
            .tools
            .iter()
            .map(|t| t.policy().idempotent)
            .collect();
        assert_eq!(idempotent, [true, true, false]);
    }

    #[test]
    fn minimal_scenario_loads() {
        let s = load_str(MINIMAL).unwrap();
        assert_eq!(s.messages.len(), 1);
        assert!(matches!(s.provider, ProviderSpec::Scripted { ref calls } if calls.len() == 1));
        assert_eq!(s.limits, EngineLimits::default());
    }

    #[test]
    fn unknown_member_names_path_line_and_column() {
        let text = r#"{"model":"m","messages":[{"role":"user","text":"hi"}],
"provider":{"type":"scripted","calls":[[{"complete":{"finsh":"stop"}}]]}}"#;
        let e = load_str(text).unwrap_err();
        let msg = e.to_string();
        assert!(msg.starts_with("s.json:2:"), "{msg}");
        assert!(msg.contains("provider.calls[0][0].complete"), "{msg}");
        assert!(msg.contains("finsh"), "{msg}");
    }

    /// Found by the `scenario` fuzz target: an empty member name gave a
    /// shape error with an empty path.
    #[test]
    fn oversized_files_are_refused_without_reading_them_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.json");
        let file = std::fs::File::create(&path).unwrap();
        file.set_len(SCENARIO_MAX_BYTES + 1).unwrap();
        let e = load(&path).unwrap_err();
        assert!(matches!(e, ScenarioError::TooLarge { .. }), "{e}");
        assert!(e.to_string().contains("scenario.max_bytes"), "{e}");
        std::fs::write(&path, MINIMAL).unwrap();
        assert!(load(&path).is_ok());
    }

    #[test]
    fn an_empty_member_name_is_named() {
        for text in [r#"{"""#, r#"{"":1}"#] {
            match load_str(text).unwrap_err() {
                ScenarioError::Shape { path, .. } => assert_eq!(path, "\"\"", "{text}"),
                ScenarioError::Syntax { .. } => {}
                other => panic!("{text}: {other}"),
            }
        }
    }

    #[test]
    fn refusals_do_not_echo_values() {
        let secret = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789";
        for text in [
            MINIMAL.replacen("\"model\":\"m\"", &format!("\"model\":[\"{secret}\"]"), 1),
            MINIMAL.replacen(
                "\"type\":\"scripted\"",
                &format!("\"type\":\"{secret}\""),
                1,
            ),
            MINIMAL.replacen(
                "\"finish\":\"stop\"",
                &format!("\"finish\":\"{secret}\""),
                1,
            ),
            MINIMAL.replacen(
                "\"text\":\"a\"",
                &format!("\"text\":7,\"x\":\"{secret}\""),
                1,
            ),
        ] {
            let msg = load_str(&text).unwrap_err().to_string();
            assert!(!msg.contains("sk-proj"), "{msg}");
        }
    }

    #[test]
    fn unknown_top_level_member() {
        let text = MINIMAL.replacen("{\"model\"", "{\"modle\":1,\"model\"", 1);
        let msg = load_str(&text).unwrap_err().to_string();
        assert!(msg.contains("modle"), "{msg}");
    }

    #[test]
    fn syntax_error_names_line_and_column() {
        let msg = load_str("{\n  \"model\": \"m\",,\n}")
            .unwrap_err()
            .to_string();
        assert!(msg.starts_with("s.json:2:"), "{msg}");
        assert!(msg.contains("invalid JSON"), "{msg}");
    }

    #[test]
    fn malformed_tool_script_is_a_loader_error() {
        let text = MINIMAL.replacen(
            "\"provider\"",
            r#""tools":[{"name":"t","script":[{"ok":1},{"delay_ms":5}]}],"provider""#,
            1,
        );
        let msg = load_str(&text).unwrap_err().to_string();
        assert!(msg.contains("tools[0].script[1]"), "{msg}");
    }

    #[test]
    fn builtin_tools_and_extensions() {
        let text = MINIMAL.replacen(
            "\"provider\"",
            r#""tools":[{"builtin":"calculator"},{"builtin":"clock","requires_approval":true},
                {"name":"t","script":[],"timeout_ms":50,"on_failure":"end_run"}],"provider""#,
            1,
        );
        let s = load_str(&text).unwrap();
        assert_eq!(s.tools.len(), 3);
        let bad = MINIMAL.replacen(
            "\"provider\"",
            r#""tools":[{"builtin":"shell"}],"provider""#,
            1,
        );
        assert!(
            load_str(&bad)
                .unwrap_err()
                .to_string()
                .contains("tools[0].builtin")
        );
        let dup = MINIMAL.replacen(
            "\"provider\"",
            r#""tools":[{"builtin":"clock"},{"name":"clock","script":[]}],"provider""#,
            1,
        );
        assert!(load_str(&dup).unwrap_err().to_string().contains("tools[1]"));
    }

    #[test]
    fn unknown_provider_type_is_refused() {
        let text = MINIMAL.replace("\"scripted\"", "\"ollama\"");
        let msg = load_str(&text).unwrap_err().to_string();
        assert!(msg.contains("provider.type"), "{msg}");
    }

    #[test]
    fn network_providers_are_recognised_and_keys_never_echoed() {
        let ok = r#"{"model":"m","messages":[{"role":"user","text":"hi"}],
            "provider":{"type":"anthropic","api_key_env":"ANTHROPIC_API_KEY"}}"#;
        assert_eq!(load_str(ok).unwrap().provider.type_name(), "anthropic");
        let key = r#"{"model":"m","messages":[{"role":"user","text":"hi"}],
            "provider":{"type":"openai-compatible","base_url":"http://127.0.0.1:1/v1","api_key_env":"sk-abcdef0123456789"}}"#;
        let msg = load_str(key).unwrap_err().to_string();
        assert!(msg.contains("provider.api_key_env"), "{msg}");
        assert!(!msg.contains("sk-abc"), "{msg}");
    }

    #[test]
    fn limits_map_to_engine_limits() {
        let text = MINIMAL.replacen(
            "\"provider\"",
            r#""limits":{"max_turns":3,"tool_timeout_ms":250,"retry":{"max_attempts":2,"initial_backoff_ms":10,"jitter":0,"partial":"restart"}},"provider""#,
            1,
        );
        let s = load_str(&text).unwrap();
        assert_eq!(s.limits.max_turns, 3);
        assert_eq!(s.limits.tool_call_timeout, Duration::from_millis(250));
        assert_eq!(s.limits.retry.max_attempts, 2);
        assert_eq!(s.limits.retry.partial, PartialRetry::Restart);
        assert_eq!(s.limits.context, None);
        let context = MINIMAL.replacen(
            "\"provider\"",
            r#""limits":{"context":{"window_tokens":8000,"compact_at":0.5,"keep_turns":3,"bytes_per_token":3,"instruction":"Sum up."}},"provider""#,
            1,
        );
        let policy = load_str(&context).unwrap().limits.context.unwrap();
        assert_eq!(
            policy,
            ContextPolicy {
                window_tokens: 8000,
                compact_at: 0.5,
                keep_turns: 3,
                bytes_per_token: 3,
                instruction: "Sum up.".into(),
            }
        );
        let defaults = MINIMAL.replacen(
            "\"provider\"",
            r#""limits":{"context":{"window_tokens":100}},"provider""#,
            1,
        );
        let policy = load_str(&defaults).unwrap().limits.context.unwrap();
        assert_eq!(policy, ContextPolicy::new(100));
        let missing = MINIMAL.replacen(
            "\"provider\"",
            r#""limits":{"context":{"compact_at":0.5}},"provider""#,
            1,
        );
        let msg = load_str(&missing).unwrap_err().to_string();
        assert!(msg.contains("limits.context"), "{msg}");
        assert!(msg.contains("window_tokens"), "{msg}");
        let zero = MINIMAL.replacen("\"provider\"", r#""limits":{"max_turns":0},"provider""#, 1);
        assert!(
            load_str(&zero)
                .unwrap_err()
                .to_string()
                .contains("limits.max_turns")
        );
    }

    /// Every engine limit rule a file can break is refused at the member
    /// it came from: the loader maps the engine's error, it does not
    /// restate the rules.
    #[test]
    fn each_broken_limit_rule_names_its_member() {
        let rows = [
            (r#"{"max_turns":0}"#, "limits.max_turns"),
            (
                r#"{"max_tool_calls_per_turn":0}"#,
                "limits.max_tool_calls_per_turn",
            ),
            (r#"{"max_parallel_tools":0}"#, "limits.max_parallel_tools"),
            (r#"{"model_timeout_ms":0}"#, "limits.model_timeout_ms"),
            (r#"{"tool_timeout_ms":0}"#, "limits.tool_timeout_ms"),
            (
                r#"{"closing_deadline_ms":499}"#,
                "limits.closing_deadline_ms",
            ),
            (r#"{"approval_timeout_ms":0}"#, "limits.approval_timeout_ms"),
            (
                r#"{"retry":{"max_attempts":0}}"#,
                "limits.retry.max_attempts",
            ),
            (r#"{"retry":{"multiplier":0.5}}"#, "limits.retry.multiplier"),
            (r#"{"retry":{"jitter":1.5}}"#, "limits.retry.jitter"),
            (
                r#"{"retry":{"initial_backoff_ms":20,"max_backoff_ms":10}}"#,
                "limits.retry.initial_backoff_ms",
            ),
            (
                r#"{"context":{"window_tokens":0}}"#,
                "limits.context.window_tokens",
            ),
            (
                r#"{"context":{"window_tokens":9,"compact_at":0}}"#,
                "limits.context.compact_at",
            ),
            (
                r#"{"context":{"window_tokens":9,"compact_at":1.5}}"#,
                "limits.context.compact_at",
            ),
            (
                r#"{"context":{"window_tokens":9,"bytes_per_token":17}}"#,
                "limits.context.bytes_per_token",
            ),
            (
                r#"{"context":{"window_tokens":9,"instruction":""}}"#,
                "limits.context.instruction",
            ),
        ];
        for (limits, member) in rows {
            let text = MINIMAL.replacen(
                "\"provider\"",
                &format!(r#""limits":{limits},"provider""#),
                1,
            );
            match load_str(&text) {
                Err(ScenarioError::Invalid { path, message, .. }) => {
                    assert_eq!(path, member, "{limits}: {message}");
                    assert!(message.contains("rule engine.limits"), "{message}");
                }
                other => panic!("{limits}: {other:?}"),
            }
        }
        let edges = r#"{"closing_deadline_ms":500,"retry":{"multiplier":1,"jitter":1,"initial_backoff_ms":10,"max_backoff_ms":10}}"#;
        let text = MINIMAL.replacen(
            "\"provider\"",
            &format!(r#""limits":{edges},"provider""#),
            1,
        );
        assert!(load_str(&text).is_ok());
    }

    /// A provider's type is a `ProviderKind` and its key variable an
    /// `EnvVarName`: a file naming anything else is refused at the member,
    /// never echoing the value.
    #[test]
    fn provider_type_and_key_variable_are_checked_by_their_types() {
        let provider = |p: &str| {
            MINIMAL.replacen(
                r#""provider":{"type":"scripted","calls":[[{"text":"a"},{"complete":{"finish":"stop"}}]]}"#,
                &format!(r#""provider":{p}"#),
                1,
            )
        };
        let s = load_str(&provider(
            r#"{"type":"anthropic","api_key_env":"_TEAM_KEY2"}"#,
        ))
        .unwrap();
        assert!(matches!(
            s.provider,
            ProviderSpec::Network { kind: ProviderKind::Anthropic, ref api_key_env, options, .. }
                if api_key_env.as_str() == "_TEAM_KEY2" && options == ConnectOptions::default()
        ));
        for (p, expected) in [
            (
                r#"{"type":"openai-compatible","base_url":"http://h/v1","api_key_env":"K","send_reasoning":true}"#,
                ConnectOptions {
                    send_reasoning: true,
                    thinking_budget_tokens: None,
                },
            ),
            (
                r#"{"type":"anthropic","api_key_env":"K","thinking_budget_tokens":2048}"#,
                ConnectOptions {
                    send_reasoning: false,
                    thinking_budget_tokens: Some(2048),
                },
            ),
            // Gemini: no base_url needed (its default), a budget allowed.
            (
                r#"{"type":"gemini","api_key_env":"GEMINI_API_KEY","thinking_budget_tokens":0}"#,
                ConnectOptions {
                    send_reasoning: false,
                    thinking_budget_tokens: Some(0),
                },
            ),
            // No base_url: the type's own endpoint.
            (
                r#"{"type":"openai-responses","api_key_env":"OPENAI_API_KEY"}"#,
                ConnectOptions::default(),
            ),
            (
                r#"{"type":"openai-responses","base_url":"http://127.0.0.1:8080/v1","api_key_env":"K"}"#,
                ConnectOptions::default(),
            ),
        ] {
            let s = load_str(&provider(p)).unwrap();
            assert!(
                matches!(s.provider, ProviderSpec::Network { options, .. } if options == expected),
                "{p}"
            );
        }
        for (p, member, rule) in [
            (
                r#"{"type":"openai","api_key_env":"K"}"#,
                "provider.type",
                "unknown provider type (expected scripted, openai-compatible, anthropic, openai-responses or gemini)",
            ),
            (
                r#"{"type":"anthropic","api_key_env":"2KEY"}"#,
                "provider.api_key_env",
                "env_var_name.leading_digit",
            ),
            (
                r#"{"type":"anthropic","api_key_env":"sk-live-secret"}"#,
                "provider.api_key_env",
                "env_var_name.charset",
            ),
            (
                r#"{"type":"anthropic","api_key_env":"K","send_reasoning":true}"#,
                "provider.send_reasoning",
                "rule config.option_kind",
            ),
            (
                r#"{"type":"openai-compatible","base_url":"http://h/v1","api_key_env":"K","thinking_budget_tokens":2048}"#,
                "provider.thinking_budget_tokens",
                "rule config.option_kind",
            ),
            (
                r#"{"type":"anthropic","api_key_env":"K","thinking_budget_tokens":1000}"#,
                "provider.thinking_budget_tokens",
                "rule config.thinking_budget_tokens",
            ),
            (
                r#"{"type":"gemini","api_key_env":"K","send_reasoning":true}"#,
                "provider.send_reasoning",
                "rule config.option_kind",
            ),
            (
                r#"{"type":"openai-responses","api_key_env":"K","send_reasoning":true}"#,
                "provider.send_reasoning",
                "not an option of an openai-responses provider",
            ),
            (
                r#"{"type":"openai-responses","base_url":"http://h/v1"}"#,
                "provider",
                "a openai-responses provider needs `api_key_env`",
            ),
            (
                r#"{"type":"openai-responses","api_key_env":"sk-proj-secret"}"#,
                "provider.api_key_env",
                "env_var_name.charset",
            ),
            (
                r#"{"type":"scripted","calls":[],"send_reasoning":false}"#,
                "provider.send_reasoning",
                "takes no `send_reasoning`",
            ),
        ] {
            match load_str(&provider(p)) {
                Err(ScenarioError::Invalid { path, message, .. }) => {
                    assert_eq!(path, member, "{p}: {message}");
                    assert!(message.contains(rule), "{message}");
                    assert!(!message.contains("sk-live-secret"), "{message}");
                }
                other => panic!("{p}: {other:?}"),
            }
        }
    }

    #[test]
    fn bad_ids_and_roles_name_their_path() {
        let text = MINIMAL.replacen("{\"model\"", "{\"run_id\":\"a b\",\"model\"", 1);
        assert!(
            load_str(&text)
                .unwrap_err()
                .to_string()
                .contains("at run_id")
        );
        let text = MINIMAL.replace("\"user\"", "\"tool\"");
        assert!(
            load_str(&text)
                .unwrap_err()
                .to_string()
                .contains("messages[0]")
        );
    }
}
