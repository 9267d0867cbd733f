//! A local replay server for the adapters' tests: serves canned HTTP
//! responses on 127.0.0.1 in controlled write sizes, records each request,
//! can cut a body short, and reports when the client closed the
//! connection.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use keel_message::*;
use keel_testkit::conformance::Fixture;
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// How the body is framed on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// `transfer-encoding: chunked`, one HTTP chunk per write: the client
    /// reads exactly the write sizes.
    Chunked,
    /// No length, `connection: close`: the body ends at EOF.
    Close,
    /// `content-length`.
    Length,
}

/// One canned response.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub framing: Framing,
    /// Bytes per write (0: the whole body in one write).
    pub split: usize,
    /// Write only this many body bytes, then drop the connection abruptly
    /// (chunked: no terminating chunk).
    pub cut_after: Option<usize>,
    /// After writing the body (without ending it: no terminating chunk),
    /// keep the connection open until the client closes it.
    pub hold: bool,
    /// Wait this long before the status line.
    pub delay: Duration,
}

impl Reply {
    pub fn sse(body: impl Into<Vec<u8>>) -> Reply {
        Reply {
            status: 200,
            headers: vec![(
                "content-type".into(),
                "text/event-stream; charset=utf-8".into(),
            )],
            body: body.into(),
            framing: Framing::Chunked,
            split: 0,
            cut_after: None,
            hold: false,
            delay: Duration::ZERO,
        }
    }

    pub fn json(status: u16, body: impl Into<Vec<u8>>) -> Reply {
        Reply {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body: body.into(),
            framing: Framing::Length,
            ..Reply::sse(Vec::new())
        }
    }

    /// The fixture's status, headers and body; a 200 is chunked in
    /// `split`-byte writes, an error is sent with a content-length.
    pub fn fixture(fixture: &Fixture, split: usize) -> Reply {
        Reply {
            status: fixture.status,
            headers: fixture
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            body: fixture.body.clone().expect("fixture body").into_bytes(),
            framing: if fixture.status == 200 {
                Framing::Chunked
            } else {
                Framing::Length
            },
            split,
            cut_after: None,
            hold: false,
            delay: Duration::ZERO,
        }
    }

    pub fn split(mut self, split: usize) -> Reply {
        self.split = split;
        self
    }

    pub fn framing(mut self, framing: Framing) -> Reply {
        self.framing = framing;
        self
    }

    pub fn header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.into(), value.into()));
        self
    }

    pub fn cut_after(mut self, bytes: usize) -> Reply {
        self.cut_after = Some(bytes);
        self
    }

    pub fn hold(mut self) -> Reply {
        self.hold = true;
        self
    }
}

/// What the server received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    /// Lowercase names.
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
}

impl Recorded {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("request body is JSON")
    }
}

pub struct Server {
    pub addr: SocketAddr,
    connections: Arc<AtomicUsize>,
    requests: Arc<Mutex<Vec<Recorded>>>,
    closed: watch::Receiver<usize>,
}

impl Server {
    /// Serves `replies` in order, one per request, on as many connections
    /// as the client opens (a connection the client keeps alive carries
    /// several).
    pub async fn start(replies: Vec<Reply>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (closed_tx, closed) = watch::channel(0usize);
        let closed_tx = Arc::new(closed_tx);
        let recorded = Arc::clone(&requests);
        let replies = Arc::new(Mutex::new(VecDeque::from(replies)));
        let connections = Arc::new(AtomicUsize::new(0));
        let accepted = Arc::clone(&connections);
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                accepted.fetch_add(1, Ordering::SeqCst);
                let replies = Arc::clone(&replies);
                let recorded = Arc::clone(&recorded);
                let closed_tx = Arc::clone(&closed_tx);
                tokio::spawn(async move {
                    serve(socket, replies, recorded, closed_tx).await;
                });
            }
        });
        Server {
            addr,
            requests,
            closed,
            connections,
        }
    }

    pub async fn one(reply: Reply) -> Server {
        Server::start(vec![reply]).await
    }

    /// `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }

    /// Waits until `n` held connections have been closed by the client.
    pub async fn wait_closed(&self, n: usize, within: Duration) -> bool {
        let mut closed = self.closed.clone();
        matches!(
            tokio::time::timeout(within, closed.wait_for(|c| *c >= n)).await,
            Ok(Ok(_))
        )
    }
}

async fn read_request(socket: &mut TcpStream) -> Option<Recorded> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let method = first.next()?.to_owned();
    let path = first.next()?.to_owned();
    let headers: BTreeMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < length {
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some(Recorded {
        method,
        path,
        headers,
        body,
    })
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

async fn serve(
    mut socket: TcpStream,
    replies: Arc<Mutex<VecDeque<Reply>>>,
    recorded: Arc<Mutex<Vec<Recorded>>>,
    closed: Arc<watch::Sender<usize>>,
) {
    // One connection answers requests in turn while the client keeps it
    // alive and replies are left.
    loop {
        let Some(request) = read_request(&mut socket).await else {
            return;
        };
        recorded.lock().unwrap().push(request);
        let Some(reply) = replies.lock().unwrap().pop_front() else {
            return;
        };
        if !serve_one(&mut socket, reply, &closed).await {
            return;
        }
    }
}

/// Writes one reply; returns whether the connection can carry another.
async fn serve_one(socket: &mut TcpStream, reply: Reply, closed: &watch::Sender<usize>) -> bool {
    if !reply.delay.is_zero() {
        // Wait, but notice a client that gives up meanwhile.
        let mut buf = [0u8; 64];
        tokio::select! {
            () = tokio::time::sleep(reply.delay) => {}
            read = socket.read(&mut buf) => {
                if matches!(read, Ok(0) | Err(_)) {
                    closed.send_modify(|c| *c += 1);
                    return false;
                }
            }
        }
    }
    let mut head = format!("HTTP/1.1 {} {}\r\n", reply.status, reason(reply.status));
    for (name, value) in &reply.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    match reply.framing {
        Framing::Chunked => head.push_str("transfer-encoding: chunked\r\n"),
        Framing::Close => head.push_str("connection: close\r\n"),
        Framing::Length => head.push_str(&format!("content-length: {}\r\n", reply.body.len())),
    }
    head.push_str("\r\n");
    if socket.write_all(head.as_bytes()).await.is_err() {
        return false;
    }
    let body = match reply.cut_after {
        Some(n) => &reply.body[..n.min(reply.body.len())],
        None => &reply.body[..],
    };
    let split = if reply.split == 0 {
        body.len().max(1)
    } else {
        reply.split
    };
    for piece in body.chunks(split) {
        let ok = match reply.framing {
            Framing::Chunked => {
                let mut frame = format!("{:x}\r\n", piece.len()).into_bytes();
                frame.extend_from_slice(piece);
                frame.extend_from_slice(b"\r\n");
                socket.write_all(&frame).await
            }
            Framing::Close | Framing::Length => socket.write_all(piece).await,
        };
        if ok.is_err() || socket.flush().await.is_err() {
            return false;
        }
    }
    if reply.cut_after.is_some() && !reply.hold {
        // Abrupt end: no terminating chunk (the caller drops the socket).
        return false;
    }
    if reply.hold {
        // Wait for the client to go away.
        let mut buf = [0u8; 64];
        loop {
            match socket.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
        closed.send_modify(|c| *c += 1);
        return false;
    }
    if reply.framing == Framing::Chunked && socket.write_all(b"0\r\n\r\n").await.is_err() {
        return false;
    }
    let _ = socket.flush().await;
    if reply.framing == Framing::Close {
        let _ = socket.shutdown().await;
        return false;
    }
    true
}

// ------------------------------------------------------------ fixtures ----

pub fn fixtures_dir(folder: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(folder)
}

pub fn fixture(folder: &str, case: &str) -> Fixture {
    Fixture::load(&fixtures_dir(folder).join(format!("{case}.json"))).unwrap()
}

pub fn all_fixtures(folder: &str) -> Vec<Fixture> {
    let all = Fixture::load_dir(&fixtures_dir(folder)).unwrap();
    assert!(all.len() >= 10, "{folder}: {} fixtures", all.len());
    assert!(all.iter().all(|f| f.body.is_some()));
    all
}

/// The read sizes every fixture is replayed in (0: the whole body).
pub const SPLITS: [usize; 4] = [0, 1, 7, 64];

// ------------------------------------------------------------ requests ----

/// A one-message request for `model`.
pub fn simple_request(model: &str) -> ModelRequest {
    let history: Arc<[Message]> =
        vec![Message::text(MessageId::parse("m1").unwrap(), Role::User, "Hi").unwrap()].into();
    ModelRequest::new(
        OperationIdIssuer::new().issue(),
        ModelName::parse(model).unwrap(),
        history,
        Arc::from([]),
    )
    .unwrap()
}

/// System, user, assistant (text and a tool call), a tool result, a
/// second user message, and two tools.
pub fn rich_request(model: &str) -> ModelRequest {
    let call = Part::tool_call(
        CallId::parse("call_1").unwrap(),
        ToolName::parse("get_weather").unwrap(),
        CanonicalJson::parse(r#"{"city": "Oslo"}"#).unwrap(),
    )
    .unwrap();
    let call2 = Part::tool_call(
        CallId::parse("call_2").unwrap(),
        ToolName::parse("get_time").unwrap(),
        CanonicalJson::parse("{}").unwrap(),
    )
    .unwrap();
    let history: Arc<[Message]> = vec![
        Message::text(MessageId::parse("m0").unwrap(), Role::System, "Be brief.").unwrap(),
        Message::text(
            MessageId::parse("m1").unwrap(),
            Role::User,
            "Weather in Oslo?",
        )
        .unwrap(),
        Message::new(
            MessageId::parse("m2").unwrap(),
            Role::Assistant,
            vec![Part::text("Checking.").unwrap(), call, call2],
        )
        .unwrap(),
        Message::new(
            MessageId::parse("m3").unwrap(),
            Role::Tool,
            vec![
                Part::tool_result(CallId::parse("call_1").unwrap(), r#"{"temp_c":3}"#, false)
                    .unwrap(),
                Part::tool_result(CallId::parse("call_2").unwrap(), "clock broken", true).unwrap(),
            ],
        )
        .unwrap(),
        Message::text(MessageId::parse("m4").unwrap(), Role::User, "Thanks!").unwrap(),
    ]
    .into();
    let tools: Arc<[ToolDefinition]> = vec![
        ToolDefinition::new(
            ToolName::parse("get_weather").unwrap(),
            "Current weather for a city",
            CanonicalJson::parse(
                r#"{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}"#,
            )
            .unwrap(),
        )
        .unwrap(),
        ToolDefinition::new(
            ToolName::parse("get_time").unwrap(),
            "",
            CanonicalJson::parse(r#"{"type":"object"}"#).unwrap(),
        )
        .unwrap(),
    ]
    .into();
    ModelRequest::new(
        OperationIdIssuer::new().issue(),
        ModelName::parse(model).unwrap(),
        history,
        tools,
    )
    .unwrap()
}

/// An SSE body from data payloads (`data: …` + blank line each).
pub fn sse_body<I, S>(events: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    events
        .into_iter()
        .map(|e| format!("data: {}\n\n", e.as_ref()))
        .collect()
}

// ----------------------------------------------------------- reasoning ----

/// The assistant message a host keeps from an observed stream, built by
/// the engine's own [`AssistantDraft`](keel_eventlog::history::AssistantDraft)
/// (reasoning parts tagged `tag`, closed by their signature, a redacted
/// part, or any other item; text; tool calls), as turn 1 of `run_1`.
pub fn assistant_message(seen: &keel_testkit::conformance::Observed, tag: &ProviderTag) -> Message {
    use keel_stream::StreamItem;
    let mut draft = keel_eventlog::history::AssistantDraft::default();
    for item in &seen.items {
        let reasoning = matches!(
            item,
            StreamItem::ReasoningDelta(_) | StreamItem::ReasoningSignature(_)
        );
        if !reasoning && draft.has_open_reasoning() {
            draft.end_reasoning(tag.clone(), None);
        }
        match item {
            StreamItem::TextDelta(d) => draft.push_text(d.text()),
            StreamItem::ReasoningDelta(d) => draft.push_reasoning_delta(d.text()),
            StreamItem::ReasoningSignature(s) => draft.end_reasoning(tag.clone(), Some(s.clone())),
            StreamItem::RedactedReasoning(v) => draft.push_redacted(tag.clone(), v.clone()),
            StreamItem::ToolCall(call) => draft.push_call(call.clone()),
            _ => {}
        }
    }
    draft
        .to_message(&RunId::parse("run_1").unwrap(), 1, &Limits::default())
        .unwrap()
}

/// The reasoning items of an observed stream, in order, as
/// `("delta" | "signature" | "redacted", value)`.
pub fn reasoning_items(seen: &keel_testkit::conformance::Observed) -> Vec<(&'static str, String)> {
    use keel_stream::StreamItem;
    seen.items
        .iter()
        .filter_map(|item| match item {
            StreamItem::ReasoningDelta(d) => Some(("delta", d.text().to_owned())),
            StreamItem::ReasoningSignature(s) => Some(("signature", s.as_str().to_owned())),
            StreamItem::RedactedReasoning(v) => Some(("redacted", v.as_str().to_owned())),
            _ => None,
        })
        .collect()
}

/// `history`, then `more`, as a request for `model` with `tools`.
pub fn continued(request: &ModelRequest, more: Vec<Message>) -> ModelRequest {
    let history: Arc<[Message]> = request.history().iter().cloned().chain(more).collect();
    ModelRequest::new(
        OperationIdIssuer::new().issue(),
        request.model().clone(),
        history,
        request.tools().iter().cloned().collect(),
    )
    .unwrap()
}

/// The data payloads of an SSE body, parsed as JSON (`[DONE]` left out).
pub fn sse_payloads(body: &str) -> Vec<serde_json::Value> {
    body.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(str::trim)
        .filter(|data| *data != "[DONE]")
        .map(|data| serde_json::from_str(data).unwrap())
        .collect()
}

/// A one-pixel PNG, and a minimal PDF.
pub const PNG: &[u8] =
    b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0\x1f\x15\xc4\x89";
pub const PDF: &[u8] = b"%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n";

/// A user message with text, a PNG and a PDF.
pub fn user_with_media(id: &str) -> Message {
    let limits = Limits::default();
    Message::new(
        MessageId::parse(id).unwrap(),
        Role::User,
        vec![
            Part::text("What is in these?").unwrap(),
            Part::image(ImagePart::from_bytes_with(ImageMediaType::Png, PNG, &limits).unwrap()),
            Part::file_with(FileMediaType::Pdf, "report.pdf", PDF, &limits).unwrap(),
        ],
    )
    .unwrap()
}

/// A tool message whose one result carries `text` and a PNG.
pub fn tool_result_with_image(call_id: &str, text: &str) -> Message {
    let limits = Limits::default();
    let image = ImagePart::from_bytes_with(ImageMediaType::Png, PNG, &limits).unwrap();
    Message::new(
        MessageId::parse("t1").unwrap(),
        Role::Tool,
        vec![
            Part::tool_result_with_images(
                CallId::parse(call_id).unwrap(),
                text,
                false,
                vec![image],
                &limits,
            )
            .unwrap(),
        ],
    )
    .unwrap()
}
