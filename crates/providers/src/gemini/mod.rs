//! Google Gemini `streamGenerateContent` streaming (`?alt=sse`): the wire
//! format only (request URL and body, call ids, error classification,
//! stream decoding); the shell (`shell.rs`) does the rest.

mod call_ids;
mod content;
mod decoder;
mod errors;
mod request;

pub(crate) use call_ids::CallIds;
pub(crate) use decoder::GeminiDecoder;
use errors::classify_http;
use request::request_body;

use crate::config::ProviderConfig;
use crate::error::ProviderConfigError;
use crate::key::ApiKey;
use crate::shell::{Shell, Wire};
use keel_message::{Limits, ModelName, ModelRequest, ProviderTag};
use keel_stream::{ModelProvider, RawProblem, StartFuture};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;
use std::fmt;

/// The metadata namespace of this adapter.
pub const GEMINI_NAMESPACE: &str = "gemini";

/// The Gemini API's base URL, the default base URL of a [`GeminiConfig`].
pub const GEMINI_BASE_URL: &str = "https://generativelanguage.googleapis.com/v1beta";

/// How to reach the Gemini API (or a compatible server): the shared
/// settings, and [`GeminiOptions`] as its `wire`. A request for model `M`
/// goes to `{base_url}/models/M:streamGenerateContent?alt=sse`; the key is
/// sent as the `x-goog-api-key` header, never in the URL. Build it from
/// [`Default`] (base URL [`GEMINI_BASE_URL`]) or [`ProviderConfig::new`]
/// and set the fields you need.
///
/// ```
/// use keel_providers::{GeminiConfig, GeminiOptions};
/// let config = GeminiConfig {
///     wire: GeminiOptions {
///         thinking_budget_tokens: Some(2048),
///         include_thoughts: true,
///         ..GeminiOptions::default()
///     },
///     ..GeminiConfig::default()
/// };
/// assert_eq!(config.base_url, "https://generativelanguage.googleapis.com/v1beta");
/// ```
pub type GeminiConfig = ProviderConfig<GeminiOptions>;

/// What only the Gemini wire format has: the `wire` of a [`GeminiConfig`].
/// Each set field goes into the request's `generationConfig`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GeminiOptions {
    /// Sent as `generationConfig.maxOutputTokens` when set (zero is
    /// refused, rule `config.positive`). Default `None`.
    pub max_output_tokens: Option<u32>,
    /// Sent as `generationConfig.thinkingConfig.thinkingBudget` when set
    /// (`0` turns thinking off on models that allow it; the model checks
    /// its own range). Default `None`: the model's dynamic thinking.
    pub thinking_budget_tokens: Option<u32>,
    /// Sent as `generationConfig.thinkingConfig.includeThoughts`: the
    /// model streams summaries of its thinking as `thought` parts, which
    /// become reasoning. Default `false`.
    pub include_thoughts: bool,
}

impl Default for GeminiConfig {
    fn default() -> Self {
        ProviderConfig::defaults(GEMINI_BASE_URL, GeminiOptions::default())
    }
}

/// A [`ModelProvider`] for Gemini streaming
/// (`POST {base_url}/models/{model}:streamGenerateContent?alt=sse`).
///
/// Cheap to clone (one `Arc`); one value serves any number of concurrent
/// calls. See the crate docs for the mapping.
#[derive(Clone)]
pub struct Gemini {
    shell: Shell<GeminiOptions>,
}

impl fmt::Debug for Gemini {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.shell.fmt(f)
    }
}

impl Gemini {
    /// A provider for `config`. Fails on a bad base URL, an `https` one
    /// without the `rustls` feature, or a zero bound, timeout or
    /// `max_output_tokens`, or when the HTTP client cannot be built.
    pub fn new(config: GeminiConfig) -> Result<Gemini, ProviderConfigError> {
        Shell::new(config).map(|shell| Gemini { shell })
    }

    /// The models collection, `{base_url}/models`: a request for a model
    /// goes to [`Gemini::url_for`] under it.
    pub fn endpoint(&self) -> &str {
        self.shell.endpoint()
    }

    /// The URL a request for `model` goes to. The name is one path
    /// segment (a leading `models/` is taken off; `/`, `?`, `#` and `%`
    /// are percent-encoded), so no model name changes the host, the path
    /// above it or the query.
    pub fn url_for(&self, model: &ModelName) -> String {
        model_url(self.shell.endpoint_url(), model).to_string()
    }
}

impl ModelProvider for Gemini {
    fn start(&self, request: ModelRequest) -> StartFuture {
        self.shell.start(request)
    }

    /// `gemini`: the reasoning parts this adapter sends back.
    fn provider_tag(&self) -> ProviderTag {
        ProviderTag::gemini()
    }
}

/// `{models}/{model}:streamGenerateContent?alt=sse`.
fn model_url(models: &reqwest::Url, model: &ModelName) -> reqwest::Url {
    let name = model.as_str();
    let name = name.strip_prefix("models/").unwrap_or(name);
    let mut url = models.clone();
    // Always a base: the base URL rule admits only http(s) URLs with a
    // host.
    if let Ok(mut segments) = url.path_segments_mut() {
        segments.push(&format!("{name}:streamGenerateContent"));
    }
    url.set_query(Some("alt=sse"));
    url
}

/// `x-goog-api-key: {key}`.
fn x_goog_api_key(key: &ApiKey) -> Option<(HeaderName, HeaderValue)> {
    let value = HeaderValue::from_str(key.expose()).ok()?;
    Some((HeaderName::from_static("x-goog-api-key"), value))
}

impl Wire for GeminiOptions {
    type Decoder = GeminiDecoder;
    const NAME: &'static str = "Gemini";
    const PATH: &'static str = "models";
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
        x_goog_api_key(key)
    }

    fn extra_headers() -> Vec<(HeaderName, HeaderValue)> {
        Vec::new()
    }

    fn body(&self, request: &ModelRequest) -> Value {
        request_body(request, self)
    }

    fn request_url(
        endpoint: &reqwest::Url,
        request: &ModelRequest,
    ) -> Result<reqwest::Url, RawProblem> {
        Ok(model_url(endpoint, request.model()))
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
    ) -> GeminiDecoder {
        GeminiDecoder::new(limits, CallIds::for_request(request), request_id, key)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_model_is_one_path_segment_and_the_query_is_fixed() {
        let models = reqwest::Url::parse("http://127.0.0.1:1/v1beta/models").unwrap();
        for (model, expected) in [
            (
                "gemini-2.5-flash",
                "http://127.0.0.1:1/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
            ),
            (
                "models/gemini-2.5-pro",
                "http://127.0.0.1:1/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse",
            ),
            (
                "../x?key=k#f",
                "http://127.0.0.1:1/v1beta/models/..%2Fx%3Fkey=k%23f:streamGenerateContent?alt=sse",
            ),
        ] {
            let url = model_url(&models, &ModelName::parse(model).unwrap());
            assert_eq!(url.as_str(), expected, "{model}");
            assert_eq!(url.query(), Some("alt=sse"), "{model}");
        }
    }

    #[test]
    fn a_zero_max_output_tokens_is_refused() {
        let options = GeminiOptions {
            max_output_tokens: Some(0),
            ..GeminiOptions::default()
        };
        assert_eq!(
            options.check(),
            Err(ProviderConfigError::Zero {
                field: "max_output_tokens"
            })
        );
        assert_eq!(GeminiOptions::default().check(), Ok(()));
    }
}
