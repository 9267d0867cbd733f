//! The configuration both adapters share: one [`ProviderConfig`] generic
//! over the wire format's own options, its defaults, its `Debug`
//! redaction and its bounds.

use crate::error::ProviderConfigError;
use crate::http::endpoint;
use crate::key::ApiKey;
use keel_message::Limits;
use std::fmt;
use std::time::Duration;

/// Default connect timeout.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default idle (read) timeout: the longest wait for the next bytes.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// Default bound on one SSE event, in bytes (1 MiB).
pub const DEFAULT_MAX_CHUNK_BYTES: usize = 1 << 20;
/// Default bound on the error body read from a failed response (64 KiB).
pub const DEFAULT_MAX_ERROR_BODY_BYTES: usize = 64 << 10;

/// How to reach a provider: the settings every wire format shares, and
/// `W`, what only that wire format has. Use it through
/// [`OpenAiConfig`](crate::OpenAiConfig) and
/// [`AnthropicConfig`](crate::AnthropicConfig): build one from
/// [`Default`] (or [`ProviderConfig::new`]) and set the fields you need.
///
/// `Debug` prints the key as `[redacted]`, and the base URL only when it
/// passes the base URL rule (a URL with credentials, a query or a fragment
/// prints as `[redacted]`).
#[derive(Clone)]
pub struct ProviderConfig<W> {
    /// The API base; requests go to `{base_url}/chat/completions`
    /// (OpenAI), `{base_url}/messages` (Anthropic) or
    /// `{base_url}/responses` (OpenAI Responses),
    /// `{base_url}/models/{model}:streamGenerateContent?alt=sse` (Gemini).
    /// An absolute
    /// `http(s)` URL with no credentials, query or fragment; `https`
    /// needs the `rustls` feature. Default: the provider's public API.
    pub base_url: String,
    /// Sent in the wire format's authentication header when set (local
    /// servers often need none). Default `None`.
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
    /// Bounds applied while assembling: text deltas are split to
    /// `delta_bytes`, at most `tool_calls_per_stream` tool calls are
    /// assembled, each with at most 2 × `json_bytes` of raw arguments.
    /// Default [`Limits::default`].
    pub limits: Limits,
    /// What only this wire format has
    /// ([`OpenAiOptions`](crate::OpenAiOptions),
    /// [`AnthropicOptions`](crate::AnthropicOptions),
    /// [`ResponsesOptions`](crate::ResponsesOptions),
    /// [`GeminiOptions`](crate::GeminiOptions)).
    pub wire: W,
}

impl<W> ProviderConfig<W> {
    /// The shared defaults with this base URL and wire options.
    pub(crate) fn defaults(base_url: &str, wire: W) -> Self {
        ProviderConfig {
            base_url: base_url.to_owned(),
            api_key: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_chunk_bytes: DEFAULT_MAX_CHUNK_BYTES,
            max_error_body_bytes: DEFAULT_MAX_ERROR_BODY_BYTES,
            limits: Limits::default(),
            wire,
        }
    }

    /// Refuses a zero timeout or bound (rule `config.positive`).
    pub(crate) fn check_bounds(&self) -> Result<(), ProviderConfigError> {
        for (field, zero) in [
            ("connect_timeout", self.connect_timeout.is_zero()),
            ("idle_timeout", self.idle_timeout.is_zero()),
            ("max_chunk_bytes", self.max_chunk_bytes == 0),
            ("max_error_body_bytes", self.max_error_body_bytes == 0),
        ] {
            if zero {
                return Err(ProviderConfigError::Zero { field });
            }
        }
        Ok(())
    }
}

impl<W> ProviderConfig<W>
where
    Self: Default,
{
    /// The defaults with this base URL and key.
    pub fn new(base_url: impl Into<String>, api_key: Option<ApiKey>) -> Self {
        ProviderConfig {
            base_url: base_url.into(),
            api_key,
            ..Self::default()
        }
    }
}

impl<W: fmt::Debug> fmt::Debug for ProviderConfig<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let base_url = if endpoint::is_valid_base(&self.base_url) {
            self.base_url.as_str()
        } else {
            "[redacted]"
        };
        f.debug_struct("ProviderConfig")
            .field("base_url", &base_url)
            .field("api_key", &self.api_key)
            .field("connect_timeout", &self.connect_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("max_chunk_bytes", &self.max_chunk_bytes)
            .field("max_error_body_bytes", &self.max_error_body_bytes)
            .field("wire", &self.wire)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn debug_hides_the_key_and_a_base_url_with_credentials() {
        let mut config = ProviderConfig::defaults("http://127.0.0.1:8080/v1", ());
        config.api_key = Some(ApiKey::new("sk-debug-secret-1").unwrap());
        let shown = format!("{config:?}");
        assert!(shown.contains("http://127.0.0.1:8080/v1"), "{shown}");
        assert!(!shown.contains("sk-debug-secret-1"), "{shown}");
        for hidden in [
            "http://user:pw-secret@host/v1",
            "http://host/v1?key=pw-secret",
        ] {
            config.base_url = hidden.to_owned();
            let shown = format!("{config:?}");
            assert!(!shown.contains("pw-secret"), "{shown}");
        }
    }

    #[test]
    fn zero_bounds_are_refused_by_name() {
        let ok = ProviderConfig::defaults("http://h/v1", ());
        assert_eq!(ok.check_bounds(), Ok(()));
        let mut config = ok.clone();
        config.max_error_body_bytes = 0;
        assert_eq!(
            config.check_bounds(),
            Err(ProviderConfigError::Zero {
                field: "max_error_body_bytes"
            })
        );
        let mut config = ok;
        config.connect_timeout = Duration::ZERO;
        assert_eq!(
            config.check_bounds(),
            Err(ProviderConfigError::Zero {
                field: "connect_timeout"
            })
        );
    }
}
