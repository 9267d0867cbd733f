//! Per-run composition: a [`RunRequest`]'s own provider, tools, limits,
//! allowlist and handler over the builder's defaults ([`RunDefaults`]),
//! checked before anything is committed. Tool sources are kept as given: their tools are
//! read turn by turn (`run/sources.rs`).

use crate::config::EngineLimits;
use crate::error::StartError;
use crate::interaction::InteractionHandler;
use crate::request::{ProviderChoice, RunRequest};
use crate::source::ToolSource;
use crate::tool_set::ToolSet;
use keel_eventlog::LogConfig;
use keel_message::ToolDefinition;
use keel_stream::{MetadataAllowlist, ModelProvider};
use std::collections::HashMap;
use std::sync::Arc;

/// What the builder set for every run, and a [`RunRequest`] may replace.
pub(crate) struct RunDefaults {
    pub(crate) providers: HashMap<String, Arc<dyn ModelProvider>>,
    pub(crate) tools: Arc<ToolSet>,
    /// `tools`' definitions, computed once.
    pub(crate) definitions: Arc<[ToolDefinition]>,
    pub(crate) limits: EngineLimits,
    /// The logs' retention, which the limits are checked against.
    pub(crate) log_config: LogConfig,
    pub(crate) allowlist: MetadataAllowlist,
    pub(crate) interactions: Option<Arc<dyn InteractionHandler>>,
}

/// What one run calls and under which bounds.
pub(crate) struct RunContext {
    pub(crate) provider: Arc<dyn ModelProvider>,
    /// The fixed tools: the builder's and the request's.
    pub(crate) tools: Arc<ToolSet>,
    pub(crate) definitions: Arc<[ToolDefinition]>,
    /// Read at the start of every turn, after the fixed tools.
    pub(crate) sources: Vec<Arc<dyn ToolSource>>,
    pub(crate) limits: EngineLimits,
    pub(crate) allowlist: MetadataAllowlist,
    pub(crate) interactions: Option<Arc<dyn InteractionHandler>>,
}

/// Resolves `request` against the engine's defaults.
pub(crate) fn compose(
    defaults: &RunDefaults,
    request: &RunRequest,
) -> Result<RunContext, StartError> {
    let provider = match &request.provider {
        ProviderChoice::Own(p) => Arc::clone(p),
        ProviderChoice::Named(name) => defaults
            .providers
            .get(name)
            .cloned()
            .ok_or_else(|| StartError::UnknownProvider { name: name.clone() })?,
        ProviderChoice::Default => match defaults.providers.values().next() {
            Some(p) if defaults.providers.len() == 1 => Arc::clone(p),
            _ => {
                return Err(StartError::NoProvider {
                    registered: defaults.providers.len(),
                });
            }
        },
    };
    let limits = request
        .limits
        .clone()
        .unwrap_or_else(|| defaults.limits.clone());
    limits.validate(&defaults.log_config)?;
    let interactions = request
        .interactions
        .clone()
        .or_else(|| defaults.interactions.clone());
    let (tools, definitions) = if request.tools.is_empty() {
        (
            Arc::clone(&defaults.tools),
            Arc::clone(&defaults.definitions),
        )
    } else {
        let mut tools = ToolSet::clone(&defaults.tools);
        for tool in &request.tools {
            let name = tool.definition().name().clone();
            if !tools.insert(Arc::clone(tool)) {
                return Err(StartError::DuplicateTool { name });
            }
        }
        let definitions = tools.definitions();
        (Arc::new(tools), definitions)
    };
    if interactions.is_none()
        && let Some(tool) = tools.tools().find(|t| t.policy().requires_approval)
    {
        return Err(StartError::ApprovalWithoutHandler {
            name: tool.definition().name().clone(),
        });
    }
    Ok(RunContext {
        provider,
        tools,
        definitions,
        sources: request.sources.clone(),
        limits,
        allowlist: request
            .allowlist
            .clone()
            .unwrap_or_else(|| defaults.allowlist.clone()),
        interactions,
    })
}
