//! OpenAI Chat Completions streaming, as spoken by OpenAI and by vLLM,
//! Ollama, llama.cpp, LM Studio and other compatible servers: the wire
//! format only (request body, error classification, stream decoding); the
//! shell (`shell.rs`) does the rest.

mod content;
mod decoder;
mod errors;
mod request;

pub(crate) use decoder::OpenAiDecoder;
pub(crate) use errors::classify_http;
use request::request_body;

use crate::config::ProviderConfig;
use crate::error::ProviderConfigError;
use crate::key::ApiKey;
use crate::shell::{Shell, Wire};
use keel_message::{Limits, ModelRequest, ProviderTag};
use keel_stream::{ModelProvider, RawProblem, StartFuture};
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;
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
///     wire: OpenAiOptions {
///         max_completion_tokens: Some(512),
///         send_reasoning: false,
///     },
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
    /// Whether an assistant message's reasoning goes back to the server,
    /// as its `reasoning_content`: only the text of reasoning this adapter
    /// decoded (tagged `openai-compatible`). Default `false`: never sent,
    /// because some servers (DeepSeek) refuse a request that carries it;
    /// turn it on for a server whose chat template reads it.
    pub send_reasoning: bool,
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
    pub fn new(config: OpenAiConfig) -> Result<OpenAiCompatible, ProviderConfigError> {
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

    /// `openai-compatible`: the reasoning parts this adapter may send back.
    fn provider_tag(&self) -> ProviderTag {
        ProviderTag::openai_compatible()
    }
}

/// `Authorization: Bearer {key}` (the Responses adapter sends it too).
pub(crate) fn bearer(key: &ApiKey) -> Option<(HeaderName, HeaderValue)> {
    let value = HeaderValue::from_str(&format!("Bearer {}", key.expose())).ok()?;
    Some((AUTHORIZATION, value))
}

impl Wire for OpenAiOptions {
    type Decoder = OpenAiDecoder;
    const NAME: &'static str = "OpenAiCompatible";
    const PATH: &'static str = "chat/completions";
    const REQUEST_ID_HEADER: &'static str = "x-request-id";

    fn check(&self) -> Result<(), ProviderConfigError> {
        Ok(())
    }

    fn auth(key: &ApiKey) -> Option<(HeaderName, HeaderValue)> {
        bearer(key)
    }

    fn extra_headers() -> Vec<(HeaderName, HeaderValue)> {
        Vec::new()
    }

    fn body(&self, request: &ModelRequest) -> Value {
        request_body(request, self)
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
