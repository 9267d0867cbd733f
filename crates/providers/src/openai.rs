//! OpenAI Chat Completions streaming, as spoken by OpenAI and by vLLM,
//! Ollama, llama.cpp, LM Studio and other compatible servers.

use crate::http::{
    self, ConfigError, Decoder, Flow, Http, HttpSettings, arguments_or_empty, bad_json, header,
    is_json_object, push_text, safe_code, safe_value,
};
use crate::key::ApiKey;
use keel_message::{Limits, Message, ModelRequest, Part, Role};
use keel_stream::{
    FinishReason, ModelProvider, ProblemKind, RawCompletion, RawItem, RawProblem, RawToolCall,
    RawUsage, StartFuture,
};
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderName, HeaderValue};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// The metadata namespace of this adapter.
pub const OPENAI_NAMESPACE: &str = "openai";

/// The OpenAI API's base URL, the default of [`OpenAiConfig::base_url`].
pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";

/// How to reach an OpenAI-compatible server. Build it from
/// [`Default`] (or [`OpenAiConfig::new`]) and set the fields you need.
///
/// ```
/// use keel_providers::OpenAiConfig;
/// use std::time::Duration;
/// let config = OpenAiConfig {
///     base_url: "http://127.0.0.1:11434/v1".into(),
///     idle_timeout: Duration::from_secs(60),
///     ..OpenAiConfig::default()
/// };
/// assert!(config.api_key.is_none());
/// ```
#[derive(Clone)]
pub struct OpenAiConfig {
    /// The API base; requests go to `{base_url}/chat/completions`. An
    /// absolute `http(s)` URL with no credentials, query or fragment.
    /// Default [`OPENAI_BASE_URL`].
    pub base_url: String,
    /// Sent as `Authorization: Bearer …` when set (local servers often
    /// need none). Default `None`.
    pub api_key: Option<ApiKey>,
    /// The longest wait for a TCP (and TLS) connection. Default 10 s.
    pub connect_timeout: Duration,
    /// The longest wait for the next bytes, before and during the stream.
    /// Default 300 s.
    pub idle_timeout: Duration,
    /// The largest SSE event accepted; a larger one fails the stream with
    /// a `protocol` problem. Default 1 MiB.
    pub max_chunk_bytes: usize,
    /// How much of an error response's body is read. Default 64 KiB.
    pub max_error_body_bytes: usize,
    /// Sent as `max_completion_tokens` when set. Default `None`.
    pub max_completion_tokens: Option<u32>,
    /// Bounds applied while assembling: text deltas are split to
    /// `delta_bytes`, at most `tool_calls_per_stream` tool calls are
    /// assembled, each with at most 2 × `json_bytes` of raw arguments.
    /// Default [`Limits::default`].
    pub limits: Limits,
}

impl Default for OpenAiConfig {
    fn default() -> Self {
        OpenAiConfig {
            base_url: OPENAI_BASE_URL.to_owned(),
            api_key: None,
            connect_timeout: http::DEFAULT_CONNECT_TIMEOUT,
            idle_timeout: http::DEFAULT_IDLE_TIMEOUT,
            max_chunk_bytes: http::DEFAULT_MAX_CHUNK_BYTES,
            max_error_body_bytes: http::DEFAULT_MAX_ERROR_BODY_BYTES,
            max_completion_tokens: None,
            limits: Limits::default(),
        }
    }
}

impl OpenAiConfig {
    /// The defaults with this base URL and key.
    pub fn new(base_url: impl Into<String>, api_key: Option<ApiKey>) -> OpenAiConfig {
        OpenAiConfig {
            base_url: base_url.into(),
            api_key,
            ..OpenAiConfig::default()
        }
    }
}

impl fmt::Debug for OpenAiConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key)
            .field("connect_timeout", &self.connect_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("max_chunk_bytes", &self.max_chunk_bytes)
            .field("max_error_body_bytes", &self.max_error_body_bytes)
            .field("max_completion_tokens", &self.max_completion_tokens)
            .finish_non_exhaustive()
    }
}

/// A [`ModelProvider`] for OpenAI Chat Completions streaming
/// (`POST {base_url}/chat/completions` with `"stream": true`).
///
/// Cheap to clone (one `Arc`); one value serves any number of concurrent
/// calls. See the crate docs for the mapping.
#[derive(Clone)]
pub struct OpenAiCompatible {
    inner: Arc<Inner>,
}

struct Inner {
    http: Http,
    max_completion_tokens: Option<u32>,
    limits: Limits,
}

impl fmt::Debug for OpenAiCompatible {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiCompatible")
            .field("http", &self.inner.http)
            .finish_non_exhaustive()
    }
}

fn bearer(key: &ApiKey) -> Option<(HeaderName, HeaderValue)> {
    let mut value = HeaderValue::from_str(&format!("Bearer {}", key.expose())).ok()?;
    value.set_sensitive(true);
    Some((AUTHORIZATION, value))
}

impl OpenAiCompatible {
    /// A provider for `config`. Fails on a bad base URL, a zero bound or
    /// timeout, or when the TLS client cannot be built.
    pub fn new(config: OpenAiConfig) -> Result<OpenAiCompatible, ConfigError> {
        let http = Http::new(HttpSettings {
            base_url: &config.base_url,
            path: "chat/completions",
            api_key: config.api_key,
            auth: bearer,
            extra: Vec::new(),
            connect_timeout: config.connect_timeout,
            idle_timeout: config.idle_timeout,
            max_chunk_bytes: config.max_chunk_bytes,
            max_error_body_bytes: config.max_error_body_bytes,
        })?;
        Ok(OpenAiCompatible {
            inner: Arc::new(Inner {
                http,
                max_completion_tokens: config.max_completion_tokens,
                limits: config.limits,
            }),
        })
    }

    /// The endpoint requests go to.
    pub fn endpoint(&self) -> &str {
        self.inner.http.url()
    }
}

impl ModelProvider for OpenAiCompatible {
    fn start(&self, request: ModelRequest) -> StartFuture {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move {
            let body = request_body(&request, inner.max_completion_tokens);
            let body = serde_json::to_vec(&body).map_err(|e| bad_json("the request", &e))?;
            let response = inner.http.send(body, classify_http).await?;
            let request_id = header(response.headers(), "x-request-id")
                .and_then(|v| safe_value(v, inner.http.api_key.as_ref()));
            let decoder = OpenAiDecoder::new(
                inner.limits.clone(),
                request.operation_id().as_str(),
                request_id,
                inner.http.api_key.clone(),
            );
            Ok(http::pump(response, &inner.http, decoder))
        })
    }
}

// ------------------------------------------------------------ request ----

/// The request body for `request`.
pub(crate) fn request_body(request: &ModelRequest, max_completion_tokens: Option<u32>) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model().as_str()));
    body.insert(
        "messages".into(),
        Value::Array(request.history().iter().flat_map(messages).collect()),
    );
    if !request.tools().is_empty() {
        let tools = request
            .tools()
            .iter()
            .map(|tool| {
                let mut function = Map::new();
                function.insert("name".into(), json!(tool.name().as_str()));
                if !tool.description().is_empty() {
                    function.insert("description".into(), json!(tool.description()));
                }
                function.insert("parameters".into(), tool.parameters().to_value());
                json!({"type": "function", "function": function})
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(max) = max_completion_tokens {
        body.insert("max_completion_tokens".into(), json!(max));
    }
    body.insert("stream".into(), json!(true));
    body.insert("stream_options".into(), json!({"include_usage": true}));
    Value::Object(body)
}

/// One Keel message as Chat Completions messages (a tool message becomes
/// one `role: tool` message per result).
fn messages(message: &Message) -> Vec<Value> {
    match message.role() {
        Role::System => vec![json!({"role": "system", "content": message.joined_text()})],
        Role::User => vec![json!({"role": "user", "content": message.joined_text()})],
        Role::Assistant => {
            let text = message.joined_text();
            let calls: Vec<Value> = message
                .tool_calls()
                .map(|call| {
                    json!({
                        "id": call.call_id().as_str(),
                        "type": "function",
                        "function": {"name": call.name().as_str(), "arguments": call.arguments().as_str()},
                    })
                })
                .collect();
            let mut out = Map::new();
            out.insert("role".into(), json!("assistant"));
            out.insert(
                "content".into(),
                if text.is_empty() {
                    Value::Null
                } else {
                    json!(text)
                },
            );
            if !calls.is_empty() {
                out.insert("tool_calls".into(), Value::Array(calls));
            }
            vec![Value::Object(out)]
        }
        Role::Tool => message
            .parts()
            .iter()
            .filter_map(|part| match part {
                Part::ToolResult(result) => Some(json!({
                    "role": "tool",
                    "tool_call_id": result.call_id().as_str(),
                    "content": result.content(),
                })),
                _ => None,
            })
            .collect(),
    }
}

// ------------------------------------------------------------- errors ----

#[derive(Deserialize)]
struct ErrorEnvelope {
    error: Option<ErrorBody>,
}

#[derive(Deserialize, Default)]
struct ErrorBody {
    #[serde(default)]
    message: Option<Value>,
    #[serde(default, rename = "type")]
    kind: Option<Value>,
    #[serde(default)]
    code: Option<Value>,
}

fn text_of(value: &Option<Value>) -> Option<&str> {
    match value {
        Some(Value::String(s)) => Some(s),
        _ => None,
    }
}

fn is_context_length(code: Option<&str>, message: &str) -> bool {
    code == Some("context_length_exceeded")
        || message.contains("maximum context length")
        || message.contains("context_length_exceeded")
}

/// The problem for a non-2xx response.
pub(crate) fn classify_http(status: u16, headers: &HeaderMap, body: &[u8]) -> RawProblem {
    let error = serde_json::from_slice::<ErrorEnvelope>(body)
        .ok()
        .and_then(|e| e.error)
        .unwrap_or_default();
    let code = text_of(&error.code).and_then(safe_code);
    let kind_name = text_of(&error.kind).and_then(safe_code);
    let message = text_of(&error.message).unwrap_or("");
    let overloaded = code.is_some_and(|c| c.contains("overloaded"))
        || kind_name.is_some_and(|t| t.contains("overloaded"))
        || message.to_ascii_lowercase().contains("overloaded");
    let (kind, retryable) = match status {
        401 | 403 => (ProblemKind::Auth, false),
        408 => (ProblemKind::Timeout, true),
        400 | 404 | 413 | 422 if is_context_length(code, message) => {
            (ProblemKind::ContextLength, false)
        }
        400 | 404 | 413 | 422 => (ProblemKind::InvalidRequest, false),
        429 if code == Some("insufficient_quota") => (ProblemKind::RateLimited, false),
        429 => (ProblemKind::RateLimited, true),
        503 | 529 if overloaded || status == 529 => (ProblemKind::Overloaded, true),
        500..=599 => (ProblemKind::Unavailable, true),
        300..=399 => (ProblemKind::Other, false),
        _ => (ProblemKind::InvalidRequest, false),
    };
    let retryable = http::should_retry(headers).unwrap_or(retryable);
    let mut problem = RawProblem::new(
        kind,
        problem_message(Some(status), code.or(kind_name), message),
        retryable,
    );
    problem.retry_after = http::retry_after(headers);
    problem
}

fn problem_message(status: Option<u16>, code: Option<&str>, message: &str) -> String {
    let mut out = match status {
        Some(status) => format!("HTTP {status}"),
        None => "stream error".to_owned(),
    };
    if let Some(code) = code {
        out.push(' ');
        out.push_str(code);
    }
    if !message.is_empty() {
        out.push_str(": ");
        out.push_str(message);
    }
    out
}

/// The problem for an `{"error": …}` chunk inside a 200 stream.
fn classify_stream_error(error: &ErrorBody) -> RawProblem {
    let code = text_of(&error.code).and_then(safe_code);
    let kind_name = text_of(&error.kind).and_then(safe_code);
    let message = text_of(&error.message).unwrap_or("");
    let any = |needle: &str| {
        code.is_some_and(|c| c.contains(needle)) || kind_name.is_some_and(|t| t.contains(needle))
    };
    let (kind, retryable) = if is_context_length(code, message) {
        (ProblemKind::ContextLength, false)
    } else if any("overloaded") {
        (ProblemKind::Overloaded, true)
    } else if any("rate_limit") {
        (ProblemKind::RateLimited, true)
    } else if any("invalid_request") {
        (ProblemKind::InvalidRequest, false)
    } else if any("timeout") {
        (ProblemKind::Timeout, true)
    } else {
        // `server_error` and anything unknown: a transient fault.
        (ProblemKind::Unavailable, true)
    };
    RawProblem::new(
        kind,
        problem_message(None, code.or(kind_name), message),
        retryable,
    )
}

// ------------------------------------------------------------- stream ----

#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    model: Option<Value>,
    #[serde(default)]
    system_fingerprint: Option<Value>,
    #[serde(default)]
    service_tier: Option<Value>,
    #[serde(default)]
    choices: Option<Vec<Choice>>,
    #[serde(default)]
    usage: Option<UsageWire>,
    #[serde(default)]
    error: Option<ErrorBody>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default)]
    delta: Option<Delta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    refusal: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<ToolCallDelta>>,
}

#[derive(Deserialize)]
struct ToolCallDelta {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<FunctionDelta>,
}

#[derive(Deserialize)]
struct FunctionDelta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Deserialize)]
struct UsageWire {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
}

#[derive(Default)]
struct CallAcc {
    id: String,
    name: String,
    arguments: String,
}

#[derive(Default)]
struct Facts {
    id: Option<String>,
    model: Option<String>,
    system_fingerprint: Option<String>,
    service_tier: Option<String>,
    request_id: Option<String>,
}

/// The Chat Completions stream state machine.
pub(crate) struct OpenAiDecoder {
    limits: Limits,
    operation_id: String,
    key: Option<ApiKey>,
    calls: BTreeMap<u64, CallAcc>,
    last_call: Option<u64>,
    finish: Option<FinishReason>,
    emitted_calls: bool,
    usage: Option<RawUsage>,
    facts: Facts,
}

fn fail(out: &mut VecDeque<RawItem>, problem: RawProblem) -> Flow {
    out.push_back(RawItem::Failure(problem));
    Flow::Done
}

fn protocol(out: &mut VecDeque<RawItem>, message: impl Into<String>) -> Flow {
    fail(out, RawProblem::new(ProblemKind::Protocol, message, false))
}

impl OpenAiDecoder {
    pub(crate) fn new(
        limits: Limits,
        operation_id: &str,
        request_id: Option<String>,
        key: Option<ApiKey>,
    ) -> Self {
        OpenAiDecoder {
            limits,
            operation_id: operation_id.to_owned(),
            key,
            calls: BTreeMap::new(),
            last_call: None,
            finish: None,
            emitted_calls: false,
            usage: None,
            facts: Facts {
                request_id,
                ..Facts::default()
            },
        }
    }

    fn remember(&mut self, chunk: &Chunk) {
        let key = self.key.as_ref();
        let fact = |value: &Option<Value>| match value {
            Some(Value::String(s)) => safe_value(s, key),
            _ => None,
        };
        for (slot, value) in [
            (&mut self.facts.id, &chunk.id),
            (&mut self.facts.model, &chunk.model),
            (
                &mut self.facts.system_fingerprint,
                &chunk.system_fingerprint,
            ),
            (&mut self.facts.service_tier, &chunk.service_tier),
        ] {
            if let Some(v) = fact(value) {
                *slot = Some(v);
            }
        }
    }

    fn metadata(&self) -> Option<Value> {
        let mut ns = Map::new();
        for (name, value) in [
            ("id", &self.facts.id),
            ("model", &self.facts.model),
            ("system_fingerprint", &self.facts.system_fingerprint),
            ("service_tier", &self.facts.service_tier),
            ("request_id", &self.facts.request_id),
        ] {
            if let Some(v) = value {
                ns.insert(name.into(), json!(v));
            }
        }
        (!ns.is_empty()).then(|| json!({ OPENAI_NAMESPACE: ns }))
    }

    /// The slot a tool-call delta belongs to: its `index`; without one
    /// (some compatible servers), the call with the same id, a new slot
    /// for a new id, else the call last touched.
    fn slot(&self, delta: &ToolCallDelta) -> u64 {
        if let Some(index) = delta.index {
            return index;
        }
        if let Some(id) = delta.id.as_deref().filter(|id| !id.is_empty()) {
            if let Some((&index, _)) = self.calls.iter().find(|(_, c)| c.id == id) {
                return index;
            }
            return self.calls.keys().next_back().map_or(0, |&i| i + 1);
        }
        self.last_call.unwrap_or(0)
    }

    fn tool_delta(&mut self, delta: ToolCallDelta, out: &mut VecDeque<RawItem>) -> Flow {
        if self.finish.is_some() {
            return protocol(out, "tool call delta after finish_reason");
        }
        let slot = self.slot(&delta);
        if !self.calls.contains_key(&slot) && self.calls.len() >= self.limits.tool_calls_per_stream
        {
            return protocol(
                out,
                format!(
                    "more than {} tool calls in one stream (tool_calls_per_stream)",
                    self.limits.tool_calls_per_stream
                ),
            );
        }
        let max_arguments = self.limits.json_bytes.saturating_mul(2);
        let call = self.calls.entry(slot).or_default();
        self.last_call = Some(slot);
        if let Some(id) = delta.id.filter(|id| !id.is_empty())
            && call.id.is_empty()
        {
            call.id = id;
        }
        if let Some(function) = delta.function {
            if let Some(name) = function.name.filter(|n| !n.is_empty())
                && call.name.is_empty()
            {
                call.name = name;
            }
            if let Some(fragment) = function.arguments {
                if call.arguments.len() + fragment.len() > max_arguments {
                    return protocol(
                        out,
                        format!("tool call arguments over {max_arguments} bytes"),
                    );
                }
                call.arguments.push_str(&fragment);
            }
        }
        Flow::More
    }

    /// Emits the assembled calls in index order. After a `length` or
    /// `content_filter` finish, calls whose arguments are not a complete
    /// JSON object were cut off and are dropped.
    fn emit_calls(&mut self, finish: FinishReason, out: &mut VecDeque<RawItem>) {
        let interrupted = matches!(finish, FinishReason::Length | FinishReason::ContentFilter);
        for (index, call) in std::mem::take(&mut self.calls) {
            let arguments = arguments_or_empty(call.arguments);
            if interrupted && !is_json_object(&arguments) {
                continue;
            }
            let call_id = if call.id.is_empty() {
                format!("call_{}_{index}", self.operation_id)
            } else {
                call.id
            };
            out.push_back(RawItem::ToolCall(RawToolCall {
                call_id,
                name: call.name,
                arguments,
            }));
            self.emitted_calls = true;
        }
    }

    fn complete(&mut self, out: &mut VecDeque<RawItem>) -> Flow {
        let Some(mut finish) = self.finish else {
            return protocol(out, "stream ended with [DONE] before any finish_reason");
        };
        if finish == FinishReason::Stop && self.emitted_calls {
            // Some compatible servers finish tool calls with `stop`.
            finish = FinishReason::ToolCalls;
        }
        out.push_back(RawItem::Completion(RawCompletion {
            finish,
            usage: self.usage,
            metadata: self.metadata(),
        }));
        Flow::Done
    }
}

impl Decoder for OpenAiDecoder {
    fn event(&mut self, _name: Option<&str>, data: &str, out: &mut VecDeque<RawItem>) -> Flow {
        let data = data.trim_matches([' ', '\t', '\r', '\n']);
        if data.is_empty() {
            return Flow::More;
        }
        if data == "[DONE]" {
            return self.complete(out);
        }
        let chunk: Chunk = match serde_json::from_str(data) {
            Ok(chunk) => chunk,
            Err(e) => return fail(out, bad_json("a stream chunk", &e)),
        };
        if let Some(error) = &chunk.error {
            return fail(out, classify_stream_error(error));
        }
        self.remember(&chunk);
        if let Some(usage) = &chunk.usage {
            self.usage = Some(RawUsage {
                input_tokens: usage.prompt_tokens.unwrap_or(0),
                output_tokens: usage.completion_tokens.unwrap_or(0),
            });
        }
        // We never ask for n > 1: only choice 0 is read.
        for choice in chunk.choices.unwrap_or_default() {
            if choice.index.unwrap_or(0) != 0 {
                continue;
            }
            if let Some(delta) = choice.delta {
                for text in [delta.content, delta.refusal].into_iter().flatten() {
                    push_text(out, &text, self.limits.delta_bytes);
                }
                for call in delta.tool_calls.unwrap_or_default() {
                    if self.tool_delta(call, out) == Flow::Done {
                        return Flow::Done;
                    }
                }
            }
            if let Some(reason) = choice.finish_reason {
                if self.finish.is_some() {
                    continue;
                }
                let finish = match reason.as_str() {
                    "stop" => FinishReason::Stop,
                    "length" => FinishReason::Length,
                    "tool_calls" | "function_call" => FinishReason::ToolCalls,
                    "content_filter" => FinishReason::ContentFilter,
                    other => {
                        let shown = safe_code(other).unwrap_or("(unprintable)");
                        return protocol(out, format!("unknown finish_reason {shown}"));
                    }
                };
                self.finish = Some(finish);
                self.emit_calls(finish, out);
            }
        }
        Flow::More
    }

    fn end(&mut self, out: &mut VecDeque<RawItem>) {
        if self.finish.is_some() && self.usage.is_some() {
            // Everything but the [DONE] line arrived: the usage chunk is
            // the last one a server sends.
            self.complete(out);
        } else {
            fail(
                out,
                RawProblem::new(
                    ProblemKind::Unavailable,
                    "the stream ended before [DONE]",
                    true,
                ),
            );
        }
    }
}
