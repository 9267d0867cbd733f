//! Streaming runs over the daemon: `keel_serve`'s server with the gated
//! delta model, runs created with `POST /v1/runs`, each followed by one
//! SSE client (`GET /v1/runs/{id}/events`) on its own connection. The
//! delay measured is from the event's `ts` (its commit to the run's log,
//! before the journal) to the moment the client parsed its frame.

use crate::models::{Gate, GatedDeltas};
use crate::stats::{Percentiles, unix_micros};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use keel_engine::{Engine, RunRequest};
use keel_message::{Message, MessageId, ModelName, Role, RunId};
use keel_serve::{HostParts, Problem, RunFactory, RunPlan, ServeConfig, Server, StatusCode};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

type Error = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug)]
struct DeltaPlan {
    messages: Vec<Message>,
}

impl RunPlan for DeltaPlan {
    fn messages(&self) -> &[Message] {
        &self.messages
    }
    fn model(&self) -> &str {
        "scale"
    }
    fn provider_type(&self) -> &str {
        "deltas"
    }
    fn request(
        &self,
        run_id: RunId,
        history: Vec<Message>,
        _host: &HostParts,
    ) -> Result<RunRequest, Problem> {
        let model = ModelName::parse("scale").map_err(|e| {
            Problem::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "Internal error",
                e.to_string(),
            )
        })?;
        Ok(RunRequest::new(run_id, model, history).provider_named("deltas"))
    }
}

#[derive(Debug)]
struct DeltaFactory(Vec<Message>);

impl RunFactory for DeltaFactory {
    fn posted(&self, _body: &str) -> Result<Box<dyn RunPlan>, Problem> {
        Ok(Box::new(DeltaPlan {
            messages: self.0.clone(),
        }))
    }

    fn chat_agent(&self) -> Option<Arc<dyn RunPlan>> {
        None
    }
}

/// What the SSE phase measured.
pub struct SseFigures {
    pub events: usize,
    pub elapsed: Duration,
    pub delays: Percentiles,
}

/// Serves on a loopback port with a journal at `db`, starts `runs` runs of
/// `deltas` deltas through HTTP, follows each over SSE, opens the gate
/// once every stream is open, and waits for every stream to end.
pub async fn measure(
    db: std::path::PathBuf,
    runs: usize,
    deltas: usize,
    pace: Duration,
) -> Result<SseFigures, Error> {
    let (open, gate) = Gate::closed();
    let engine = Engine::builder().provider("deltas", Arc::new(GatedDeltas { deltas, pace, gate }));
    let mut config = ServeConfig::new("127.0.0.1:0".parse()?, db);
    config.max_live_runs = runs + 16;
    config.streams.max_streams = runs + 16;
    config.streams.max_streams_per_run = 4;
    config.connections.max_connections = 2 * runs + 64;
    config.connections.max_connections_per_peer = 2 * runs + 64;
    let user = Message::text(MessageId::parse("u1")?, Role::User, "go")?;
    let server = Server::bind(config, engine, Arc::new(DeltaFactory(vec![user]))).await?;
    let addr = server.local_addr();
    // The server's future stays on this task; the clients drive the runs
    // from another and stop the server when they are done.
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let clients = tokio::spawn(async move {
        let figures = drive(addr, runs, deltas, open).await;
        let _ = stop.send(());
        figures
    });
    server
        .run(async {
            let _ = stopped.await;
        })
        .await;
    clients.await?
}

/// Creates the runs, opens one stream per run, opens the gate once every
/// stream is open, and waits for every stream to end.
async fn drive(
    addr: SocketAddr,
    runs: usize,
    deltas: usize,
    open: tokio::sync::watch::Sender<bool>,
) -> Result<SseFigures, Error> {
    let mut clients = Vec::with_capacity(runs);
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel::<()>(runs);
    for _ in 0..runs {
        let run_id = create_run(addr).await?;
        let ready = ready_tx.clone();
        clients.push(tokio::spawn(follow(addr, run_id, ready)));
    }
    for _ in 0..runs {
        ready_rx
            .recv()
            .await
            .ok_or("a client ended before its stream opened")?;
    }
    let started = Instant::now();
    let _ = open.send(true);
    let mut delays = Vec::with_capacity(runs * (deltas + 8));
    for client in clients {
        delays.extend(client.await??);
    }
    let elapsed = started.elapsed();
    Ok(SseFigures {
        events: delays.len(),
        elapsed,
        delays: Percentiles::of(delays),
    })
}

async fn connect(addr: SocketAddr) -> Result<SendRequest<Full<Bytes>>, Error> {
    let stream = tokio::net::TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    Ok(sender)
}

fn request(addr: SocketAddr, method: &str, path: &str) -> hyper::http::request::Builder {
    hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr.to_string())
}

/// `POST /v1/runs`; the new run's id.
async fn create_run(addr: SocketAddr) -> Result<String, Error> {
    let mut sender = connect(addr).await?;
    let post = request(addr, "POST", "/v1/runs")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(b"{}")))?;
    let response = sender.send_request(post).await?;
    let status = response.status();
    let body = response.into_body().collect().await?.to_bytes();
    if !status.is_success() {
        return Err(format!(
            "POST /v1/runs: {status}: {}",
            String::from_utf8_lossy(&body)
        )
        .into());
    }
    let created: serde_json::Value = serde_json::from_slice(&body)?;
    Ok(created["run_id"].as_str().ok_or("no run_id")?.to_owned())
}

/// Follows one run's SSE stream to its end; the delay of every event
/// (ns from its `ts` to its frame's arrival).
async fn follow(
    addr: SocketAddr,
    run_id: String,
    ready: tokio::sync::mpsc::Sender<()>,
) -> Result<Vec<u64>, Error> {
    let mut sender = connect(addr).await?;
    let get =
        request(addr, "GET", &format!("/v1/runs/{run_id}/events")).body(Full::new(Bytes::new()))?;
    let response = sender.send_request(get).await?;
    if !response.status().is_success() {
        return Err(format!("GET events: {}", response.status()).into());
    }
    let _ = ready.send(()).await;
    let mut body = response.into_body();
    let (mut pending, mut delays) = (String::new(), Vec::new());
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        let now = unix_micros();
        pending.push_str(std::str::from_utf8(&data)?);
        while let Some(end) = pending.find("\n\n") {
            for line in pending[..end].lines() {
                if let Some(delay) = line.strip_prefix("data:").and_then(|d| delay_of(d, now)) {
                    delays.push(delay);
                }
            }
            pending.drain(..end + 2);
        }
    }
    Ok(delays)
}

/// The delay (ns) of an event line received at `now` (µs), if it is one.
fn delay_of(data: &str, now: u64) -> Option<u64> {
    let event: serde_json::Value = serde_json::from_str(data.trim_start()).ok()?;
    let ts = event.get("ts")?.as_u64()?;
    Some(now.saturating_sub(ts) * 1000)
}
