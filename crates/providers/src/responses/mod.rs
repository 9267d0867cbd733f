//! The OpenAI Responses API streaming (`POST {base}/responses`), stateless:
//! the wire format only (request body, error classification, stream
//! decoding); the shell (`shell.rs`) does the rest.

mod decoder;
mod errors;
mod input;
mod request;
mod sealed;

pub(crate) use decoder::ResponsesDecoder;
use request::request_body;

use crate::config::ProviderConfig;
use crate::error::ProviderConfigError;
use crate::key::ApiKey;
use crate::openai::{OPENAI_BASE_URL, bearer, classify_http};
use crate::shell::{Shell, Wire};
use keel_message::{Limits, ModelRequest, ProviderTag};
use keel_stream::{ModelProvider, RawProblem, StartFuture};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;
use std::fmt;

/// How to reach the OpenAI Responses API: the shared settings, and
/// [`ResponsesOptions`] as its `wire`. Requests go to
/// `{base_url}/responses`; the key is sent as `Authorization: Bearer …`.
/// Build it from [`Default`] (base URL
/// [`OPENAI_BASE_URL`](crate::OPENAI_BASE_URL)) or
/// [`ProviderConfig::new`] and set the fields you need.
///
/// ```
/// use keel_providers::{OpenAiResponsesConfig, ReasoningEffort, ResponsesOptions};
/// let config = OpenAiResponsesConfig {
///     wire: ResponsesOptions {
///         reasoning_effort: Some(ReasoningEffort::High),
///         ..ResponsesOptions::default()
///     },
///     ..OpenAiResponsesConfig::default()
/// };
/// assert_eq!(config.base_url, "https://api.openai.com/v1");
/// ```
pub type OpenAiResponsesConfig = ProviderConfig<ResponsesOptions>;

/// How hard a reasoning model thinks: the request's `reasoning.effort`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReasoningEffort {
    /// `low`.
    Low,
    /// `medium` (the API's default).
    Medium,
    /// `high`.
    High,
}

impl ReasoningEffort {
    /// The wire name: `low`, `medium` or `high`.
    pub fn as_str(self) -> &'static str {
        match self {
            ReasoningEffort::Low => "low",
            ReasoningEffort::Medium => "medium",
            ReasoningEffort::High => "high",
        }
    }
}

/// What only the Responses wire format has: the `wire` of an
/// [`OpenAiResponsesConfig`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResponsesOptions {
    /// Sent as `max_output_tokens` when set (reasoning tokens count
    /// against it); a response cut by it finishes with `length`. Default
    /// `None`.
    pub max_output_tokens: Option<u32>,
    /// When set, every request carries
    /// `"reasoning": {"effort": …, "summary": "auto"}`: the model's
    /// effort, and a readable summary of its reasoning, streamed as
    /// reasoning deltas. Default `None` (the model's own default, no
    /// summary asked for).
    pub reasoning_effort: Option<ReasoningEffort>,
}

impl Default for OpenAiResponsesConfig {
    fn default() -> Self {
        ProviderConfig::defaults(OPENAI_BASE_URL, ResponsesOptions::default())
    }
}

/// A [`ModelProvider`] for OpenAI Responses API streaming
/// (`POST {base_url}/responses` with `"stream": true`, `"store": false`).
///
/// Stateless: every request carries the whole history as `input`, and
/// asks for `reasoning.encrypted_content`, so a reasoning model's
/// reasoning items come back with the stream and go back, byte for byte,
/// with the next request (no `previous_response_id`, nothing stored at
/// OpenAI). Cheap to clone (one `Arc`); one value serves any number of
/// concurrent calls. See the crate docs for the mapping.
#[derive(Clone)]
pub struct OpenAiResponses {
    shell: Shell<ResponsesOptions>,
}

impl fmt::Debug for OpenAiResponses {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.shell.fmt(f)
    }
}

impl OpenAiResponses {
    /// A provider for `config`. Fails on a bad base URL, an `https` one
    /// without the `rustls` feature, a zero bound or timeout, or when the
    /// HTTP client cannot be built.
    pub fn new(config: OpenAiResponsesConfig) -> Result<OpenAiResponses, ProviderConfigError> {
        Shell::new(config).map(|shell| OpenAiResponses { shell })
    }

    /// The endpoint requests go to.
    pub fn endpoint(&self) -> &str {
        self.shell.endpoint()
    }
}

impl ModelProvider for OpenAiResponses {
    fn start(&self, request: ModelRequest) -> StartFuture {
        self.shell.start(request)
    }

    /// `openai-responses`: the reasoning parts this adapter sends back.
    fn provider_tag(&self) -> ProviderTag {
        ProviderTag::openai_responses()
    }
}

impl Wire for ResponsesOptions {
    type Decoder = ResponsesDecoder;
    const NAME: &'static str = "OpenAiResponses";
    const PATH: &'static str = "responses";
    const REQUEST_ID_HEADER: &'static str = "x-request-id";

    fn check(&self) -> Result<(), ProviderConfigError> {
        if self.max_output_tokens == Some(0) {
            return Err(ProviderConfigError::Zero {
                field: "max_output_tokens",
            });
        }
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
    ) -> ResponsesDecoder {
        ResponsesDecoder::new(limits, request.operation_id().as_str(), request_id, key)
    }
}
