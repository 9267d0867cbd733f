//! The OTLP endpoint: a validated `http://` or `https://` base URL.

use std::fmt;

/// The longest endpoint accepted, in bytes.
pub const MAX_ENDPOINT_BYTES: usize = 2048;

/// The path OTLP/HTTP receivers take traces on.
const TRACES_PATH: &str = "/v1/traces";

/// Why an OTLP endpoint or exporter could not be set up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OtelError {
    /// The endpoint is not an `http://` or `https://` URL with a host.
    #[error("OTLP endpoint must be an http:// or https:// URL with a host (rule otlp.endpoint)")]
    Scheme,
    /// The endpoint is longer than [`MAX_ENDPOINT_BYTES`].
    #[error("OTLP endpoint is {len} bytes, over {MAX_ENDPOINT_BYTES} (rule otlp.endpoint_size)")]
    TooLong {
        /// Its length.
        len: usize,
    },
    /// The endpoint holds a user name or password. Credentials belong in
    /// headers, not in a URL that ends up in logs.
    #[error("OTLP endpoint must not hold credentials (rule otlp.endpoint_credentials)")]
    Credentials,
    /// The endpoint holds a query or fragment: keys sent that way end up
    /// in logs; send them as headers (`OTEL_EXPORTER_OTLP_HEADERS`).
    #[error("OTLP endpoint must not hold a query or fragment (rule otlp.endpoint_query)")]
    Query,
    /// The endpoint holds whitespace or control characters.
    #[error("OTLP endpoint holds whitespace or control characters (rule otlp.endpoint)")]
    Characters,
    /// The exporter could not be built (the detail is the exporter's).
    #[error("OTLP exporter could not be built: {detail}")]
    Exporter {
        /// What the exporter said.
        detail: String,
    },
    /// The export thread could not be started.
    #[error("OTLP export thread could not be started: {detail}")]
    Thread {
        /// What the OS said.
        detail: String,
    },
}

/// Where spans go: the receiver's base URL (as `OTEL_EXPORTER_OTLP_ENDPOINT`,
/// `http://host:4318`) or its full traces URL (ending in `/v1/traces`).
#[derive(Clone, PartialEq, Eq)]
pub struct OtlpEndpoint {
    traces_url: String,
}

impl OtlpEndpoint {
    /// Validates `text`: an `http://` or `https://` URL with a host, no
    /// credentials, query or fragment, no whitespace, at most
    /// [`MAX_ENDPOINT_BYTES`]. Headers (an API key) come from
    /// `OTEL_EXPORTER_OTLP_HEADERS` (or `OTEL_EXPORTER_OTLP_TRACES_HEADERS`),
    /// read by the exporter and never printed.
    pub fn parse(text: &str) -> Result<OtlpEndpoint, OtelError> {
        if text.len() > MAX_ENDPOINT_BYTES {
            return Err(OtelError::TooLong { len: text.len() });
        }
        if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(OtelError::Characters);
        }
        let rest = text
            .strip_prefix("http://")
            .or_else(|| text.strip_prefix("https://"))
            .ok_or(OtelError::Scheme)?;
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        if authority.contains('@') {
            return Err(OtelError::Credentials);
        }
        if rest.contains(['?', '#']) {
            return Err(OtelError::Query);
        }
        if authority.is_empty() || authority.starts_with(':') {
            return Err(OtelError::Scheme);
        }
        let base = text.trim_end_matches('/');
        let traces_url = if base.ends_with(TRACES_PATH) {
            base.to_owned()
        } else {
            format!("{base}{TRACES_PATH}")
        };
        Ok(OtlpEndpoint { traces_url })
    }

    /// The URL spans are posted to (ends in `/v1/traces`).
    pub fn traces_url(&self) -> &str {
        &self.traces_url
    }
}

impl fmt::Debug for OtlpEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("OtlpEndpoint")
            .field(&self.traces_url)
            .finish()
    }
}

impl fmt::Display for OtlpEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.traces_url)
    }
}

impl std::str::FromStr for OtlpEndpoint {
    type Err = OtelError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        OtlpEndpoint::parse(s)
    }
}
