//! OpenAI Chat Completions streaming, as spoken by OpenAI and by vLLM,
//! Ollama, llama.cpp, LM Studio and other compatible servers: the wire
//! format only (request body, error classification, stream decoding); the
//! shell (`shell.rs`) does the rest.

use crate::config::{ConfigError, ProviderConfig};
use crate::decode::{
    arguments_or_empty, finish_with_calls, is_json_object, max_arguments_bytes, namespaced,
    push_text, text_of,
};
use crate::http::headers::{retry_after, should_retry};
use crate::key::ApiKey;
use crate::problem::{bad_json, fail, problem_message, protocol, too_many_calls};
use crate::pump::{Decoder, Flow};
use crate::screen::{safe_code, safe_fact};
use crate::shell::{Shell, Wire};
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

/// The metadata namespace of this adapter.
pub const OPENAI_NAMESPACE: &str = "openai";

/// The OpenAI API's base URL, the default base URL of an [`OpenAiConfig`].
pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";

/// How to reach an OpenAI-compatible server: the shared settings, and
/// [`OpenAiOptions`] as its `wire`. Requests go to
/// `{base_url}/chat/completions`; the key is sent as
/// `Authorization: Bearer …`. Build it from [`Default`] (base URL
/// [`OPENAI_BASE_URL`]) or [`ProviderConfig::new`] and set the fields you
/// need.
///
/// ```
/// use keel_providers::{OpenAiConfig, OpenAiOptions};
/// use std::time::Duration;
/// let config = OpenAiConfig {
///     base_url: "http://127.0.0.1:11434/v1".into(),
///     idle_timeout: Duration::from_secs(60),
///     wire: OpenAiOptions { max_completion_tokens: Some(512) },
///     ..OpenAiConfig::default()
/// };
/// assert!(config.api_key.is_none());
/// ```
pub type OpenAiConfig = ProviderConfig<OpenAiOptions>;

/// What only the OpenAI wire format has: the `wire` of an
/// [`OpenAiConfig`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenAiOptions {
    /// Sent as `max_completion_tokens` when set. Default `None`.
    pub max_completion_tokens: Option<u32>,
}

impl Default for OpenAiConfig {
    fn default() -> Self {
        ProviderConfig::defaults(OPENAI_BASE_URL, OpenAiOptions::default())
    }
}

/// A [`ModelProvider`] for OpenAI Chat Completions streaming
/// (`POST {base_url}/chat/completions` with `"stream": true`).
///
/// Cheap to clone (one `Arc`); one value serves any number of concurrent
/// calls. See the crate docs for the mapping.
#[derive(Clone)]
pub struct OpenAiCompatible {
    shell: Shell<OpenAiOptions>,
}

impl fmt::Debug for OpenAiCompatible {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.shell.fmt(f)
    }
}

impl OpenAiCompatible {
    /// A provider for `config`. Fails on a bad base URL, an `https` one
    /// without the `rustls` feature, a zero bound or timeout, or when the
    /// HTTP client cannot be built.
    pub fn new(config: OpenAiConfig) -> Result<OpenAiCompatible, ConfigError> {
        Shell::new(config).map(|shell| OpenAiCompatible { shell })
    }

    /// The endpoint requests go to.
    pub fn endpoint(&self) -> &str {
        self.shell.endpoint()
    }
}

impl ModelProvider for OpenAiCompatible {
    fn start(&self, request: ModelRequest) -> StartFuture {
        self.shell.start(request)
    }
}

/// `Authorization: Bearer {key}`.
fn bearer(key: &ApiKey) -> Option<(HeaderName, HeaderValue)> {
    let value = HeaderValue::from_str(&format!("Bearer {}", key.expose())).ok()?;
    Some((AUTHORIZATION, value))
}

impl Wire for OpenAiOptions {
    type Decoder = OpenAiDecoder;
    const NAME: &'static str = "OpenAiCompatible";
    const PATH: &'static str = "chat/completions";
    const REQUEST_ID_HEADER: &'static str = "x-request-id";

    fn check(&self) -> Result<(), ConfigError> {
        Ok(())
    }

    fn auth(key: &ApiKey) -> Option<(HeaderName, HeaderValue)> {
        bearer(key)
    }

    fn extra_headers() -> Vec<(HeaderName, HeaderValue)> {
        Vec::new()
    }

    fn body(&self, request: &ModelRequest) -> Value {
        request_body(request, self.max_completion_tokens)
    }

    fn classify(status: u16, headers: &HeaderMap, body: &[u8]) -> RawProblem {
        classify_http(status, headers, body)
    }

    fn decoder(
        &self,
        limits: Limits,
        request: &ModelRequest,
        request_id: Option<String>,
        key: Option<ApiKey>,
    ) -> OpenAiDecoder {
        OpenAiDecoder::new(limits, request.operation_id().as_str(), request_id, key)
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
    let retryable = should_retry(headers).unwrap_or(retryable);
    let mut problem = RawProblem::new(
        kind,
        problem_message(Some(status), code.or(kind_name), message),
        retryable,
    );
    problem.retry_after = retry_after(headers);
    problem
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
        for (slot, value) in [
            (&mut self.facts.id, &chunk.id),
            (&mut self.facts.model, &chunk.model),
            (
                &mut self.facts.system_fingerprint,
                &chunk.system_fingerprint,
            ),
            (&mut self.facts.service_tier, &chunk.service_tier),
        ] {
            if let Some(v) = safe_fact(value, key) {
                *slot = Some(v);
            }
        }
    }

    fn metadata(&self) -> Option<Value> {
        namespaced(
            OPENAI_NAMESPACE,
            &[
                ("id", &self.facts.id),
                ("model", &self.facts.model),
                ("system_fingerprint", &self.facts.system_fingerprint),
                ("service_tier", &self.facts.service_tier),
                ("request_id", &self.facts.request_id),
            ],
        )
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
            return too_many_calls(out, self.limits.tool_calls_per_stream);
        }
        let max_arguments = max_arguments_bytes(&self.limits);
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
        let Some(finish) = self.finish else {
            return protocol(out, "stream ended with [DONE] before any finish_reason");
        };
        out.push_back(RawItem::Completion(RawCompletion {
            finish: finish_with_calls(finish, self.emitted_calls),
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
