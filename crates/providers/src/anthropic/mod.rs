//! Anthropic Messages streaming: the wire format only (request body,
//! error classification, stream decoding); the shell (`shell.rs`) does
//! the rest.

mod content;
mod decoder;
mod errors;
mod request;

pub(crate) use decoder::AnthropicDecoder;
use errors::classify_http;
use request::request_body;

use crate::config::ProviderConfig;
use crate::error::ProviderConfigError;
use crate::key::ApiKey;
use crate::shell::{Shell, Wire};
use keel_message::{Limits, ModelRequest, ProviderTag};
use keel_stream::{ModelProvider, RawProblem, StartFuture};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;
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

/// The smallest [`AnthropicOptions::thinking_budget_tokens`] the API
/// takes.
pub const MIN_THINKING_BUDGET_TOKENS: u32 = 1024;

/// How to reach the Anthropic Messages API (or a compatible server): the
/// shared settings, and [`AnthropicOptions`] as its `wire`. Requests go to
/// `{base_url}/messages`; the key is sent as `x-api-key`. Build it from
/// [`Default`] (base URL [`ANTHROPIC_BASE_URL`]) or
/// [`ProviderConfig::new`] and set the fields you need.
///
/// ```
/// use keel_providers::{AnthropicConfig, AnthropicOptions};
/// let config = AnthropicConfig {
///     wire: AnthropicOptions {
///         max_tokens: 8192,
///         thinking_budget_tokens: Some(4096),
///     },
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
    /// Extended thinking: when set, every request carries
    /// `"thinking": {"type": "enabled", "budget_tokens": N}`. The API
    /// takes at least [`MIN_THINKING_BUDGET_TOKENS`] and less than
    /// `max_tokens`; anything else is refused when the provider is built
    /// (rule `config.thinking_budget_tokens`). Default `None` (no
    /// thinking).
    pub thinking_budget_tokens: Option<u32>,
}

impl Default for AnthropicOptions {
    fn default() -> Self {
        AnthropicOptions {
            max_tokens: DEFAULT_MAX_TOKENS,
            thinking_budget_tokens: None,
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
    pub fn new(config: AnthropicConfig) -> Result<Anthropic, ProviderConfigError> {
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

    /// `anthropic`: the reasoning parts this adapter sends back.
    fn provider_tag(&self) -> ProviderTag {
        ProviderTag::anthropic()
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

    fn check(&self) -> Result<(), ProviderConfigError> {
        if self.max_tokens == 0 {
            return Err(ProviderConfigError::Zero {
                field: "max_tokens",
            });
        }
        match self.thinking_budget_tokens {
            Some(budget) if budget < MIN_THINKING_BUDGET_TOKENS || budget >= self.max_tokens => {
                Err(ProviderConfigError::ThinkingBudget {
                    budget,
                    max_tokens: self.max_tokens,
                })
            }
            _ => Ok(()),
        }
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
        request_body(request, self)
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
