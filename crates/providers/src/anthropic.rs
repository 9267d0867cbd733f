//! Anthropic Messages streaming: the wire format only (request body,
//! error classification, stream decoding); the shell (`shell.rs`) does
//! the rest.

use crate::config::{ConfigError, ProviderConfig};
use crate::decode::{
    arguments_or_empty, finish_with_calls, max_arguments_bytes, namespaced, push_text, text_of,
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
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, VecDeque};
use std::fmt;

/// The metadata namespace of this adapter.
pub const ANTHROPIC_NAMESPACE: &str = "anthropic";

/// The Anthropic API's base URL, the default base URL of an
/// [`AnthropicConfig`].
pub const ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com/v1";

/// The `anthropic-version` header every request carries.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// The default of [`AnthropicOptions::max_tokens`].
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// How to reach the Anthropic Messages API (or a compatible server): the
/// shared settings, and [`AnthropicOptions`] as its `wire`. Requests go to
/// `{base_url}/messages`; the key is sent as `x-api-key`. Build it from
/// [`Default`] (base URL [`ANTHROPIC_BASE_URL`]) or
/// [`ProviderConfig::new`] and set the fields you need.
///
/// ```
/// use keel_providers::{AnthropicConfig, AnthropicOptions};
/// let config = AnthropicConfig {
///     wire: AnthropicOptions { max_tokens: 1024 },
///     ..AnthropicConfig::default()
/// };
/// assert_eq!(config.base_url, "https://api.anthropic.com/v1");
/// ```
pub type AnthropicConfig = ProviderConfig<AnthropicOptions>;

/// What only the Anthropic wire format has: the `wire` of an
/// [`AnthropicConfig`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnthropicOptions {
    /// The request's `max_tokens` (the API requires one; zero is refused).
    /// Default [`DEFAULT_MAX_TOKENS`].
    pub max_tokens: u32,
}

impl Default for AnthropicOptions {
    fn default() -> Self {
        AnthropicOptions {
            max_tokens: DEFAULT_MAX_TOKENS,
        }
    }
}

impl Default for AnthropicConfig {
    fn default() -> Self {
        ProviderConfig::defaults(ANTHROPIC_BASE_URL, AnthropicOptions::default())
    }
}

/// A [`ModelProvider`] for Anthropic Messages streaming
/// (`POST {base_url}/messages` with `"stream": true`).
///
/// Cheap to clone (one `Arc`); one value serves any number of concurrent
/// calls. See the crate docs for the mapping.
#[derive(Clone)]
pub struct Anthropic {
    shell: Shell<AnthropicOptions>,
}

impl fmt::Debug for Anthropic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.shell.fmt(f)
    }
}

impl Anthropic {
    /// A provider for `config`. Fails on a bad base URL, an `https` one
    /// without the `rustls` feature, a zero bound or timeout (or
    /// `max_tokens`), or when the HTTP client cannot be built.
    pub fn new(config: AnthropicConfig) -> Result<Anthropic, ConfigError> {
        Shell::new(config).map(|shell| Anthropic { shell })
    }

    /// The endpoint requests go to.
    pub fn endpoint(&self) -> &str {
        self.shell.endpoint()
    }
}

impl ModelProvider for Anthropic {
    fn start(&self, request: ModelRequest) -> StartFuture {
        self.shell.start(request)
    }
}

/// `x-api-key: {key}`.
fn x_api_key(key: &ApiKey) -> Option<(HeaderName, HeaderValue)> {
    let value = HeaderValue::from_str(key.expose()).ok()?;
    Some((HeaderName::from_static("x-api-key"), value))
}

impl Wire for AnthropicOptions {
    type Decoder = AnthropicDecoder;
    const NAME: &'static str = "Anthropic";
    const PATH: &'static str = "messages";
    const REQUEST_ID_HEADER: &'static str = "request-id";

    fn check(&self) -> Result<(), ConfigError> {
        if self.max_tokens == 0 {
            return Err(ConfigError::Zero {
                field: "max_tokens",
            });
        }
        Ok(())
    }

    fn auth(key: &ApiKey) -> Option<(HeaderName, HeaderValue)> {
        x_api_key(key)
    }

    fn extra_headers() -> Vec<(HeaderName, HeaderValue)> {
        vec![(
            HeaderName::from_static("anthropic-version"),
            HeaderValue::from_static(ANTHROPIC_VERSION),
        )]
    }

    fn body(&self, request: &ModelRequest) -> Value {
        request_body(request, self.max_tokens)
    }

    fn classify(status: u16, headers: &HeaderMap, body: &[u8]) -> RawProblem {
        classify_http(status, headers, body)
    }

    fn decoder(
        &self,
        limits: Limits,
        _request: &ModelRequest,
        request_id: Option<String>,
        key: Option<ApiKey>,
    ) -> AnthropicDecoder {
        AnthropicDecoder::new(limits, request_id, key)
    }
}

// ------------------------------------------------------------ request ----

/// The request body for `request`.
pub(crate) fn request_body(request: &ModelRequest, max_tokens: u32) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model().as_str()));
    body.insert("max_tokens".into(), json!(max_tokens));
    let system: Vec<String> = request
        .history()
        .iter()
        .filter(|m| m.role() == Role::System)
        .map(Message::joined_text)
        .collect();
    if !system.is_empty() {
        body.insert("system".into(), json!(system.join("\n\n")));
    }
    let messages: Vec<Value> = request
        .history()
        .iter()
        .filter(|m| m.role() != Role::System)
        .map(message)
        .collect();
    body.insert("messages".into(), Value::Array(messages));
    if !request.tools().is_empty() {
        let tools = request
            .tools()
            .iter()
            .map(|tool| {
                let mut out = Map::new();
                out.insert("name".into(), json!(tool.name().as_str()));
                if !tool.description().is_empty() {
                    out.insert("description".into(), json!(tool.description()));
                }
                out.insert("input_schema".into(), tool.parameters().to_value());
                Value::Object(out)
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    body.insert("stream".into(), json!(true));
    Value::Object(body)
}

/// One Keel message (not a system one) as a Messages API message.
fn message(message: &Message) -> Value {
    let role = match message.role() {
        Role::Assistant => "assistant",
        // Tool results travel in a user message.
        Role::User | Role::Tool | Role::System => "user",
    };
    let content: Vec<Value> = message
        .parts()
        .iter()
        .map(|part| match part {
            Part::Text(text) => json!({"type": "text", "text": text.text()}),
            Part::ToolCall(call) => json!({
                "type": "tool_use",
                "id": call.call_id().as_str(),
                "name": call.name().as_str(),
                "input": call.arguments().to_value(),
            }),
            Part::ToolResult(result) => {
                let mut block = Map::new();
                block.insert("type".into(), json!("tool_result"));
                block.insert("tool_use_id".into(), json!(result.call_id().as_str()));
                block.insert("content".into(), json!(result.content()));
                if result.is_error() {
                    block.insert("is_error".into(), json!(true));
                }
                Value::Object(block)
            }
        })
        .collect();
    json!({"role": role, "content": content})
}

// ------------------------------------------------------------- errors ----

#[derive(Deserialize)]
struct ErrorEnvelope {
    #[serde(default)]
    error: Option<ErrorBody>,
}

#[derive(Deserialize, Default)]
struct ErrorBody {
    #[serde(default, rename = "type")]
    kind: Option<Value>,
    #[serde(default)]
    message: Option<Value>,
}

fn is_context_length(message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    message.contains("prompt is too long")
        || message.contains("exceed context limit")
        || message.contains("context window")
}

/// Kind and retryability from the error `type` (and message), when the
/// type is known.
fn by_type(kind: &str, message: &str) -> Option<(ProblemKind, bool)> {
    Some(match kind {
        "invalid_request_error" if is_context_length(message) => {
            (ProblemKind::ContextLength, false)
        }
        "invalid_request_error" | "not_found_error" | "request_too_large" => {
            (ProblemKind::InvalidRequest, false)
        }
        "authentication_error" | "permission_error" => (ProblemKind::Auth, false),
        "billing_error" => (ProblemKind::Other, false),
        "rate_limit_error" => (ProblemKind::RateLimited, true),
        "overloaded_error" => (ProblemKind::Overloaded, true),
        "timeout_error" => (ProblemKind::Timeout, true),
        "api_error" => (ProblemKind::Unavailable, true),
        _ => return None,
    })
}

fn by_status(status: u16, message: &str) -> (ProblemKind, bool) {
    match status {
        401 | 403 => (ProblemKind::Auth, false),
        408 | 504 => (ProblemKind::Timeout, true),
        400 | 404 | 413 | 422 if is_context_length(message) => (ProblemKind::ContextLength, false),
        400 | 404 | 413 | 422 => (ProblemKind::InvalidRequest, false),
        429 => (ProblemKind::RateLimited, true),
        529 => (ProblemKind::Overloaded, true),
        500..=599 => (ProblemKind::Unavailable, true),
        300..=399 => (ProblemKind::Other, false),
        _ => (ProblemKind::InvalidRequest, false),
    }
}

/// The problem for a non-2xx response. The status decides auth, rate
/// limits and overload; the error `type` refines the rest.
pub(crate) fn classify_http(status: u16, headers: &HeaderMap, body: &[u8]) -> RawProblem {
    let error = serde_json::from_slice::<ErrorEnvelope>(body)
        .ok()
        .and_then(|e| e.error)
        .unwrap_or_default();
    let kind_name = text_of(&error.kind).and_then(safe_code);
    let message = text_of(&error.message).unwrap_or("");
    let (kind, retryable) = match status {
        401 | 403 | 429 | 529 => by_status(status, message),
        _ => kind_name
            .and_then(|k| by_type(k, message))
            .unwrap_or_else(|| by_status(status, message)),
    };
    let retryable = should_retry(headers).unwrap_or(retryable);
    let mut problem = RawProblem::new(
        kind,
        problem_message(Some(status), kind_name, message),
        retryable,
    );
    problem.retry_after = retry_after(headers);
    problem
}

// ------------------------------------------------------------- stream ----

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Event {
    MessageStart {
        message: MessageStart,
    },
    ContentBlockStart {
        index: u64,
        content_block: BlockStart,
    },
    ContentBlockDelta {
        index: u64,
        delta: BlockDelta,
    },
    ContentBlockStop {
        index: u64,
    },
    MessageDelta {
        #[serde(default)]
        delta: Option<MessageDelta>,
        #[serde(default)]
        usage: Option<UsageWire>,
    },
    MessageStop,
    Ping,
    Error {
        #[serde(default)]
        error: Option<ErrorBody>,
    },
    #[serde(other)]
    Unknown,
}

#[derive(Deserialize)]
struct MessageStart {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    model: Option<Value>,
    #[serde(default)]
    usage: Option<UsageWire>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockStart {
    Text {
        #[serde(default)]
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        #[serde(default)]
        input: Option<Value>,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockDelta {
    TextDelta {
        text: String,
    },
    InputJsonDelta {
        partial_json: String,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct MessageDelta {
    #[serde(default)]
    stop_reason: Option<String>,
}

#[derive(Deserialize)]
struct UsageWire {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    service_tier: Option<Value>,
}

enum Block {
    Text,
    Tool {
        id: String,
        name: String,
        /// The `input` of `content_block_start`, used when no
        /// `input_json_delta` follows.
        start_input: Option<Value>,
        json: String,
    },
    /// Thinking, redacted thinking, server tool blocks, anything unknown.
    Ignored,
}

#[derive(Default, Clone, Copy)]
struct Counts {
    input: u64,
    cache_creation: u64,
    cache_read: u64,
    output: u64,
}

/// The Messages stream state machine.
pub(crate) struct AnthropicDecoder {
    limits: Limits,
    key: Option<ApiKey>,
    blocks: BTreeMap<u64, Block>,
    calls: usize,
    emitted_calls: bool,
    stop_reason: Option<String>,
    counts: Option<Counts>,
    id: Option<String>,
    model: Option<String>,
    service_tier: Option<String>,
    request_id: Option<String>,
}

impl AnthropicDecoder {
    pub(crate) fn new(limits: Limits, request_id: Option<String>, key: Option<ApiKey>) -> Self {
        AnthropicDecoder {
            limits,
            key,
            blocks: BTreeMap::new(),
            calls: 0,
            emitted_calls: false,
            stop_reason: None,
            counts: None,
            id: None,
            model: None,
            service_tier: None,
            request_id,
        }
    }

    fn fact(&self, value: &Option<Value>) -> Option<String> {
        safe_fact(value, self.key.as_ref())
    }

    /// Usage counts are cumulative: a later report replaces what it names.
    fn usage(&mut self, usage: &UsageWire) {
        let mut counts = self.counts.unwrap_or_default();
        for (slot, value) in [
            (&mut counts.input, usage.input_tokens),
            (
                &mut counts.cache_creation,
                usage.cache_creation_input_tokens,
            ),
            (&mut counts.cache_read, usage.cache_read_input_tokens),
            (&mut counts.output, usage.output_tokens),
        ] {
            if let Some(v) = value {
                *slot = v;
            }
        }
        self.counts = Some(counts);
        if let Some(tier) = self.fact(&usage.service_tier) {
            self.service_tier = Some(tier);
        }
    }

    fn metadata(&self) -> Option<Value> {
        namespaced(
            ANTHROPIC_NAMESPACE,
            &[
                ("id", &self.id),
                ("model", &self.model),
                ("service_tier", &self.service_tier),
                ("request_id", &self.request_id),
            ],
        )
    }

    fn block_start(&mut self, index: u64, block: BlockStart, out: &mut VecDeque<RawItem>) -> Flow {
        if self.blocks.contains_key(&index) {
            return protocol(out, format!("content block {index} started twice"));
        }
        let block = match block {
            BlockStart::Text { text } => {
                push_text(out, &text, self.limits.delta_bytes);
                Block::Text
            }
            BlockStart::ToolUse { id, name, input } => {
                if self.calls >= self.limits.tool_calls_per_stream {
                    return too_many_calls(out, self.limits.tool_calls_per_stream);
                }
                self.calls += 1;
                Block::Tool {
                    id,
                    name,
                    start_input: input,
                    json: String::new(),
                }
            }
            BlockStart::Other => Block::Ignored,
        };
        self.blocks.insert(index, block);
        Flow::More
    }

    fn block_delta(&mut self, index: u64, delta: BlockDelta, out: &mut VecDeque<RawItem>) -> Flow {
        let max_json = max_arguments_bytes(&self.limits);
        let Some(block) = self.blocks.get_mut(&index) else {
            return protocol(
                out,
                format!("delta for content block {index}, never started"),
            );
        };
        match (block, delta) {
            (Block::Text, BlockDelta::TextDelta { text }) => {
                push_text(out, &text, self.limits.delta_bytes);
            }
            (Block::Tool { json, .. }, BlockDelta::InputJsonDelta { partial_json }) => {
                if json.len() + partial_json.len() > max_json {
                    return protocol(out, format!("tool input JSON over {max_json} bytes"));
                }
                json.push_str(&partial_json);
            }
            // Thinking, signatures, citations, deltas of ignored blocks.
            _ => {}
        }
        Flow::More
    }

    fn block_stop(&mut self, index: u64, out: &mut VecDeque<RawItem>) -> Flow {
        let Some(block) = self.blocks.remove(&index) else {
            return protocol(out, format!("content block {index} stopped, never started"));
        };
        if let Block::Tool {
            id,
            name,
            start_input,
            json,
        } = block
        {
            let arguments = match start_input {
                Some(Value::Object(map)) if json.trim().is_empty() && !map.is_empty() => {
                    Value::Object(map).to_string()
                }
                _ => arguments_or_empty(json),
            };
            out.push_back(RawItem::ToolCall(RawToolCall {
                call_id: id,
                name,
                arguments,
            }));
            self.emitted_calls = true;
        }
        Flow::More
    }

    fn message_stop(&mut self, out: &mut VecDeque<RawItem>) -> Flow {
        if let Some(index) = self.blocks.keys().next() {
            return protocol(out, format!("message_stop with content block {index} open"));
        }
        let Some(reason) = self.stop_reason.as_deref() else {
            return protocol(out, "message_stop without a stop_reason");
        };
        let finish = match reason {
            "end_turn" | "stop_sequence" | "pause_turn" => FinishReason::Stop,
            "tool_use" => FinishReason::ToolCalls,
            "max_tokens" | "model_context_window_exceeded" => FinishReason::Length,
            "refusal" => FinishReason::ContentFilter,
            other => {
                let shown = safe_code(other).unwrap_or("(unprintable)");
                return protocol(out, format!("unknown stop_reason {shown}"));
            }
        };
        let finish = finish_with_calls(finish, self.emitted_calls);
        let usage = self.counts.map(|c| RawUsage {
            input_tokens: c
                .input
                .saturating_add(c.cache_creation)
                .saturating_add(c.cache_read),
            output_tokens: c.output,
        });
        out.push_back(RawItem::Completion(RawCompletion {
            finish,
            usage,
            metadata: self.metadata(),
        }));
        Flow::Done
    }
}

impl Decoder for AnthropicDecoder {
    fn event(&mut self, _name: Option<&str>, data: &str, out: &mut VecDeque<RawItem>) -> Flow {
        let event: Event = match serde_json::from_str(data) {
            Ok(event) => event,
            Err(e) => return fail(out, bad_json("a stream event", &e)),
        };
        match event {
            Event::MessageStart { message } => {
                self.id = self.fact(&message.id);
                self.model = self.fact(&message.model);
                if let Some(usage) = &message.usage {
                    self.usage(usage);
                }
                Flow::More
            }
            Event::ContentBlockStart {
                index,
                content_block,
            } => self.block_start(index, content_block, out),
            Event::ContentBlockDelta { index, delta } => self.block_delta(index, delta, out),
            Event::ContentBlockStop { index } => self.block_stop(index, out),
            Event::MessageDelta { delta, usage } => {
                if let Some(reason) = delta.and_then(|d| d.stop_reason) {
                    self.stop_reason = Some(reason);
                }
                if let Some(usage) = &usage {
                    self.usage(usage);
                }
                Flow::More
            }
            Event::MessageStop => self.message_stop(out),
            Event::Ping | Event::Unknown => Flow::More,
            Event::Error { error } => {
                let error = error.unwrap_or_default();
                let kind_name = text_of(&error.kind).and_then(safe_code);
                let message = text_of(&error.message).unwrap_or("");
                let (kind, retryable) = kind_name
                    .and_then(|k| by_type(k, message))
                    .unwrap_or((ProblemKind::Unavailable, true));
                fail(
                    out,
                    RawProblem::new(kind, problem_message(None, kind_name, message), retryable),
                )
            }
        }
    }

    fn end(&mut self, out: &mut VecDeque<RawItem>) {
        fail(
            out,
            RawProblem::new(
                ProblemKind::Unavailable,
                "the stream ended before message_stop",
                true,
            ),
        );
    }
}
