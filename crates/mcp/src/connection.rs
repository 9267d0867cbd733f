//! One live connection to a server: the child process or HTTP session, the
//! rmcp client over it, and the tail of the child's stderr.
//!
//! A stdio server is a child Keel spawns itself (not rmcp's helper), so
//! that its environment is exactly [`DEFAULT_ENV`] plus the entry's
//! names, its stderr is drained into a bounded, screened tail (a full pipe
//! would stall the server), and it is killed if the connection is dropped.

use crate::config::{DEFAULT_ENV, ServerConfig, Transport};
use crate::error::McpStartError;
use keel_eventlog::ErrorText;
use keel_message::EnvVarName;
use rmcp::model::{ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use std::collections::VecDeque;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, ChildStderr, Command};

/// How much of a child's stderr is kept, in bytes (the newest part).
pub const STDERR_TAIL_BYTES: usize = 2048;

/// The largest JSON-RPC message accepted from a server, in bytes. A result
/// is cut to `max_output_bytes` after it is read; this bounds the read.
pub const MESSAGE_MAX_BYTES: usize = 16 << 20;

/// How long a failed handshake waits for the rest of the child's stderr.
const STDERR_SETTLE: Duration = Duration::from_millis(500);

/// How long a closing server gets to exit after its stdin closes.
const EXIT_GRACE: Duration = Duration::from_secs(2);

/// The client side's handler: it answers nothing, and identifies Keel.
#[derive(Debug, Clone)]
pub(crate) struct KeelClient;

impl ClientHandler for KeelClient {
    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        // rmcp drops its cached list; the next turn's tools/list reads anew.
        tracing::debug!("MCP server sent notifications/tools/list_changed");
        std::future::ready(())
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("keel", env!("CARGO_PKG_VERSION")),
        )
    }
}

/// The newest [`STDERR_TAIL_BYTES`] of a child's stderr.
#[derive(Debug, Default)]
pub(crate) struct StderrTail(Mutex<VecDeque<String>>);

impl StderrTail {
    fn push(&self, line: String) {
        let Ok(mut lines) = self.0.lock() else { return };
        lines.push_back(line);
        while lines.iter().map(String::len).sum::<usize>() > STDERR_TAIL_BYTES && lines.len() > 1 {
            lines.pop_front();
        }
    }

    /// The tail, screened for secrets and bounded.
    pub(crate) fn screened(&self) -> String {
        let joined = match self.0.lock() {
            Ok(lines) => lines.iter().cloned().collect::<Vec<_>>().join("\n"),
            Err(_) => String::new(),
        };
        let start = joined.len().saturating_sub(STDERR_TAIL_BYTES);
        let start = (start..=joined.len())
            .find(|&i| joined.is_char_boundary(i))
            .unwrap_or(joined.len());
        ErrorText::new(joined[start..].trim()).as_str().to_owned()
    }
}

/// A live connection.
pub(crate) struct Connection {
    service: RunningService<RoleClient, KeelClient>,
    child: tokio::sync::Mutex<Option<Child>>,
    stderr: Arc<StderrTail>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("closed", &self.is_closed())
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// Starts the server and runs the handshake (no time bound: the caller
    /// bounds it, and dropping the future kills the child).
    /// `stderr` is filled while the handshake runs, so a caller whose
    /// time bound ran out can still report it.
    pub(crate) async fn open(
        config: &ServerConfig,
        stderr: Arc<StderrTail>,
    ) -> Result<Connection, McpStartError> {
        match config.transport() {
            Transport::Stdio { program, args } => open_stdio(config, program, args, stderr).await,
            Transport::Http { url } => open_http(config, url, stderr).await,
        }
    }

    /// The client.
    pub(crate) fn peer(&self) -> &rmcp::Peer<RoleClient> {
        self.service.peer()
    }

    /// The transport closed (the child exited, the session ended).
    pub(crate) fn is_closed(&self) -> bool {
        self.service.is_closed() || self.service.peer().is_transport_closed()
    }

    /// The child's stderr tail, screened (empty for HTTP).
    pub(crate) fn stderr(&self) -> String {
        self.stderr.screened()
    }

    /// Ends the session; a child gets [`EXIT_GRACE`] after its stdin closes
    /// before it is killed.
    pub(crate) async fn close(&self) {
        // Cancelling the service drops its transport, closing the child's
        // stdin: the way the stdio transport asks a server to exit.
        self.service.cancellation_token().cancel();
        let child = self.child.lock().await.take();
        if let Some(mut child) = child
            && tokio::time::timeout(EXIT_GRACE, child.wait())
                .await
                .is_err()
        {
            let _ = child.kill().await;
        }
    }
}

async fn open_stdio(
    config: &ServerConfig,
    program: &str,
    args: &[String],
    stderr: Arc<StderrTail>,
) -> Result<Connection, McpStartError> {
    let mut command = Command::new(program);
    command
        .args(args)
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for name in DEFAULT_ENV
        .iter()
        .copied()
        .chain(config.env().iter().map(EnvVarName::as_str))
    {
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
    let spawn_error = |reason: String| McpStartError::Spawn {
        server: config.name().clone(),
        program: ErrorText::new(program).as_str().to_owned(),
        reason,
    };
    let mut child = command.spawn().map_err(|e| spawn_error(e.to_string()))?;
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(spawn_error("its stdin or stdout is not a pipe".to_owned()));
    };
    let drained = child
        .stderr
        .take()
        .map(|pipe| tokio::spawn(drain(pipe, Arc::clone(&stderr))));
    let transport =
        AsyncRwTransport::new_client(stdout, stdin).with_max_line_length(MESSAGE_MAX_BYTES);
    let service = match KeelClient.serve(transport).await {
        Ok(service) => service,
        Err(e) => {
            // A server that exits during the handshake has usually said
            // why on stderr: give the drain a moment to reach its end.
            if let Some(drained) = drained {
                let _ = tokio::time::timeout(STDERR_SETTLE, drained).await;
            }
            return Err(McpStartError::Handshake {
                server: config.name().clone(),
                reason: ErrorText::new(&format!("initialize failed: {e}"))
                    .as_str()
                    .to_owned(),
                stderr: stderr.screened(),
            });
        }
    };
    Ok(Connection {
        service,
        child: tokio::sync::Mutex::new(Some(child)),
        stderr,
    })
}

async fn open_http(
    config: &ServerConfig,
    url: &str,
    stderr: Arc<StderrTail>,
) -> Result<Connection, McpStartError> {
    let handshake = |reason: String| McpStartError::Handshake {
        server: config.name().clone(),
        reason: ErrorText::new(&reason).as_str().to_owned(),
        stderr: String::new(),
    };
    let client = reqwest::Client::builder()
        .build()
        .map_err(|e| handshake(format!("cannot build the HTTP client: {e}")))?;
    let transport = StreamableHttpClientTransport::with_client(
        client,
        StreamableHttpClientTransportConfig::with_uri(url.to_owned())
            .max_json_response_size(MESSAGE_MAX_BYTES)
            .max_sse_event_size(MESSAGE_MAX_BYTES),
    );
    let service = KeelClient
        .serve(transport)
        .await
        .map_err(|e| handshake(format!("initialize failed: {e}")))?;
    Ok(Connection {
        service,
        child: tokio::sync::Mutex::new(None),
        stderr,
    })
}

/// Reads the child's stderr to its end, keeping the tail. Lines are cut
/// to the tail's size so one endless line cannot grow memory.
async fn drain(pipe: ChildStderr, tail: Arc<StderrTail>) {
    let mut reader = BufReader::new(pipe);
    let mut line = Vec::new();
    loop {
        line.clear();
        let read = (&mut reader)
            .take(STDERR_TAIL_BYTES as u64)
            .read_until(b'\n', &mut line)
            .await;
        match read {
            Ok(0) | Err(_) => return,
            Ok(_) => tail.push(String::from_utf8_lossy(&line).trim_end().to_owned()),
        }
    }
}
