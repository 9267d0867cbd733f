//! The engine's view of a server: a [`ToolSource`] whose tools are the
//! server's, read anew at the start of every turn.

use crate::config::{ServerConfig, ServerName};
use crate::connection::Connection;
use crate::error::McpStartError;
use crate::flatten::flatten;
use crate::naming::qualified_name;
use crate::server::Server;
use keel_engine::{
    CloseFuture, Tool, ToolError, ToolFuture, ToolInvocation, ToolListFuture, ToolOutcome,
    ToolOutput, ToolPolicy, ToolRetry, ToolSource,
};
use keel_eventlog::ErrorText;
use keel_message::{CanonicalJson, Limits, ToolDefinition};
use rmcp::ServiceError;
use rmcp::model::{CallToolRequestParams, CallToolResponse};
use serde_json::Value;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

/// A started server, as a source of tools for one run.
///
/// Dropping it kills a child that is still running; [`ToolSource::close`]
/// (which the engine awaits when the run ends) closes its stdin first and
/// gives it two seconds to exit.
pub struct McpToolSource {
    label: String,
    server: Arc<Server>,
    output_bytes: usize,
    last: Arc<Mutex<Vec<Arc<dyn Tool>>>>,
}

impl std::fmt::Debug for McpToolSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpToolSource")
            .field("label", &self.label)
            .field("output_bytes", &self.output_bytes)
            .finish_non_exhaustive()
    }
}

impl McpToolSource {
    /// Starts the server, runs the handshake and reads its tool list, all
    /// within the entry's startup timeout. `output_cap` bounds a result's
    /// text beside the entry's `max_output_bytes` (pass the run's
    /// `limits.part_bytes`, so a cut result always fits a message part).
    pub async fn start(
        config: ServerConfig,
        output_cap: usize,
    ) -> Result<McpToolSource, McpStartError> {
        let output_bytes = config.max_output_bytes().min(output_cap);
        let timeout = config.startup_timeout();
        let server = Arc::new(Server::new(config));
        let listed = match tokio::time::timeout(timeout, server.list()).await {
            Ok(listed) => listed,
            Err(_) => Err(McpStartError::Timeout {
                server: server.config().name().clone(),
                timeout,
                stderr: String::new(),
            }),
        };
        let listed = match listed {
            Ok(listed) => listed,
            Err(e) => {
                server.close().await;
                return Err(e);
            }
        };
        let tools = mount(&server, &listed, output_bytes);
        Ok(McpToolSource {
            label: format!("mcp:{}", server.config().name()),
            server,
            output_bytes,
            last: Arc::new(Mutex::new(tools)),
        })
    }

    /// The server's name.
    pub fn server_name(&self) -> &ServerName {
        self.server.config().name()
    }

    /// The tools as of the last list.
    pub fn current_tools(&self) -> Vec<Arc<dyn Tool>> {
        self.last.lock().map(|t| t.clone()).unwrap_or_default()
    }
}

impl ToolSource for McpToolSource {
    fn name(&self) -> &str {
        &self.label
    }

    fn tools(&self) -> ToolListFuture {
        let server = Arc::clone(&self.server);
        let last = Arc::clone(&self.last);
        let output_bytes = self.output_bytes;
        Box::pin(async move {
            match server.list().await {
                Ok(listed) => {
                    let tools = mount(&server, &listed, output_bytes);
                    if let Ok(mut last) = last.lock() {
                        last.clone_from(&tools);
                    }
                    tools
                }
                Err(e) => {
                    // The server could not be listed (or restarted): its
                    // last tools stay, and their calls fail one by one.
                    tracing::warn!(error = %e, "MCP tools/list failed; keeping the last list");
                    last.lock().map(|t| t.clone()).unwrap_or_default()
                }
            }
        })
    }

    fn close(&self) -> CloseFuture {
        let server = Arc::clone(&self.server);
        Box::pin(async move { server.close().await })
    }
}

/// The tools a list describes. A tool whose schema Keel cannot take (not an
/// object schema, over the JSON bounds) is left out with a warning; a
/// qualified name already taken in this list is left out too.
fn mount(server: &Arc<Server>, listed: &[Value], output_bytes: usize) -> Vec<Arc<dyn Tool>> {
    let mut names = HashSet::new();
    let mut tools: Vec<Arc<dyn Tool>> = Vec::with_capacity(listed.len());
    for raw in listed {
        let Some(remote) = raw.get("name").and_then(Value::as_str) else {
            continue;
        };
        let Some(definition) = definition(server.config(), remote, raw) else {
            tracing::warn!(server = %server.config().name(), "MCP tool left out: its definition breaks Keel's bounds");
            continue;
        };
        if !names.insert(definition.name().clone()) {
            continue;
        }
        tools.push(Arc::new(McpTool {
            policy: server.config().policy_for(remote),
            definition,
            remote: remote.to_owned(),
            server: Arc::clone(server),
            output_bytes,
        }));
    }
    tools
}

fn definition(config: &ServerConfig, remote: &str, raw: &Value) -> Option<ToolDefinition> {
    let limits = Limits::default_ref();
    let mut description = raw
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let mut end = description.len().min(limits.tool_description_bytes);
    while !description.is_char_boundary(end) {
        end -= 1;
    }
    description.truncate(end);
    let schema = match raw.get("inputSchema") {
        Some(schema @ Value::Object(_)) => schema,
        _ => &Value::Object(serde_json::Map::new()),
    };
    let parameters = CanonicalJson::from_value(schema).ok()?;
    ToolDefinition::new(
        qualified_name(config.name(), remote),
        &description,
        parameters,
    )
    .ok()
}

/// One of a server's tools.
struct McpTool {
    definition: ToolDefinition,
    remote: String,
    policy: ToolPolicy,
    server: Arc<Server>,
    output_bytes: usize,
}

impl Tool for McpTool {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }

    fn policy(&self) -> ToolPolicy {
        self.policy.clone()
    }

    fn call(&self, invocation: ToolInvocation) -> ToolFuture {
        let server = Arc::clone(&self.server);
        let remote = self.remote.clone();
        let output_bytes = self.output_bytes;
        // Dropping this future (a timeout, a cancelled run) drops rmcp's
        // request guard, which sends notifications/cancelled for it.
        Box::pin(async move {
            call(
                &server,
                remote,
                invocation.arguments.to_value(),
                output_bytes,
            )
            .await
        })
    }
}

async fn call(
    server: &Server,
    remote: String,
    arguments: Value,
    output_bytes: usize,
) -> Result<ToolOutput, ToolError> {
    let name = server.config().name().clone();
    let connection = server.connection().await.map_err(|e| {
        ToolError::typed(e.to_string(), ToolOutcome::Definitive, ToolRetry::Retryable)
    })?;
    let params = serde_json::from_value::<CallToolRequestParams>(
        serde_json::json!({"name": remote, "arguments": arguments}),
    )
    .map_err(|e| {
        ToolError::typed(
            format!("MCP server {name}: cannot build the call: {e}"),
            ToolOutcome::Definitive,
            ToolRetry::NotRetryable,
        )
    })?;
    match connection.peer().call_tool_once(params).await {
        Ok(CallToolResponse::Complete(result)) => result_output(&name, &result, output_bytes),
        Ok(_) => Err(ToolError::typed(
            format!(
                "MCP server {name} answered with an input request or a task, which Keel does not drive (rule mcp.result_kind)"
            ),
            ToolOutcome::Uncertain,
            ToolRetry::NotRetryable,
        )),
        Err(error) => Err(call_error(server, &connection, error).await),
    }
}

fn result_output(
    name: &ServerName,
    result: &rmcp::model::CallToolResult,
    output_bytes: usize,
) -> Result<ToolOutput, ToolError> {
    let json = serde_json::to_value(result).unwrap_or(Value::Null);
    let flat = flatten(&json, output_bytes).map_err(|e| {
        ToolError::typed(
            format!("MCP server {name}: {e}"),
            ToolOutcome::Uncertain,
            ToolRetry::NotRetryable,
        )
    })?;
    if flat.is_error() {
        // The server ran the tool and reports a failure; MCP does not say
        // whether its effect happened.
        return Err(ToolError::typed(
            flat.into_text(),
            ToolOutcome::Uncertain,
            ToolRetry::NotRetryable,
        ));
    }
    // The images are shared with the flattening, not copied.
    let images = flat.images().to_vec();
    let output = match flat.original_bytes() {
        Some(original) => ToolOutput::cut(flat.into_text(), original),
        None => ToolOutput::new(flat.into_text()),
    };
    Ok(output.with_images(images))
}

async fn call_error(
    server: &Server,
    connection: &Arc<Connection>,
    error: ServiceError,
) -> ToolError {
    let name = server.config().name();
    match error {
        // A JSON-RPC error: the server refused the request (unknown tool,
        // invalid arguments) before running it.
        ServiceError::McpError(e) => ToolError::typed(
            ErrorText::new(&format!(
                "MCP server {name} refused the call (code {}): {}",
                e.code.0, e.message
            ))
            .as_str()
            .to_owned(),
            ToolOutcome::Definitive,
            ToolRetry::NotRetryable,
        ),
        ServiceError::TransportClosed | ServiceError::TransportSend(_) => {
            let stderr = connection.stderr();
            server.forget(connection).await;
            let tail = if stderr.is_empty() {
                String::new()
            } else {
                format!("; its stderr ends: {stderr}")
            };
            ToolError::typed(
                format!(
                    "MCP server {name} exited during the call; it is started again for the next call{tail}"
                ),
                ToolOutcome::Uncertain,
                ToolRetry::Retryable,
            )
        }
        other => ToolError::typed(
            ErrorText::new(&format!("MCP server {name}: {other}"))
                .as_str()
                .to_owned(),
            ToolOutcome::Uncertain,
            ToolRetry::Retryable,
        ),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    /// A 1×1 PNG.
    const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

    fn output(result: Value, bound: usize) -> Result<ToolOutput, ToolError> {
        let result: rmcp::model::CallToolResult = serde_json::from_value(result).unwrap();
        result_output(&ServerName::parse("s").unwrap(), &result, bound)
    }

    /// The image content of a result reaches the tool output as image
    /// parts, beside the text, and the text's cut stays recorded.
    #[test]
    fn image_content_becomes_the_outputs_images() {
        let image = serde_json::json!({"type": "image", "data": PNG, "mimeType": "image/png"});
        let out = output(
            serde_json::json!({"content": [{"type": "text", "text": "a pixel:"}, image]}),
            1024,
        )
        .unwrap();
        assert_eq!(out.content(), "a pixel:");
        assert_eq!(out.output_cut(), None);
        let [part] = out.images() else {
            panic!("{:?}", out.images());
        };
        assert_eq!(part.bytes().map(|b| b.to_base64()).as_deref(), Some(PNG));
        let long = "x".repeat(4000);
        let cut = output(
            serde_json::json!({"content": [{"type": "text", "text": long}, image]}),
            1024,
        )
        .unwrap();
        assert_eq!(cut.images().len(), 1);
        assert_eq!(cut.output_cut().map(|c| c.original_bytes), Some(4000));
        // A failure reported by the server carries no images.
        let failed = output(
            serde_json::json!({"content": [image], "isError": true}),
            1024,
        );
        assert!(failed.is_err());
    }
}
