//! The adapter shell both providers share: a wire format ([`Wire`]) plugs
//! its path, authentication header, request body, error classifier and
//! stream decoder into one generic core ([`Shell`]) that checks the
//! configuration, owns the transport and the key, runs a call from request
//! to raw stream, and prints itself with the key redacted.

use crate::config::ProviderConfig;
use crate::error::ProviderConfigError;
use crate::http::client::{Client, ClientSettings};
use crate::http::headers::header;
use crate::http::request::fixed_headers;
use crate::key::{ApiKey, scrub_problem};
use crate::problem::bad_json;
use crate::pump::{Decoder, pump};
use crate::screen::safe_value;
use keel_message::{Limits, ModelRequest};
use keel_stream::{RawProblem, StartFuture};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;
use std::fmt;
use std::sync::Arc;

/// One wire format: what differs between providers. Implemented by each
/// adapter's public options type (the `W` of [`ProviderConfig`]).
pub(crate) trait Wire: fmt::Debug + Send + Sync + 'static {
    /// The stream state machine.
    type Decoder: Decoder;
    /// The provider's name in `Debug` output.
    const NAME: &'static str;
    /// The endpoint's path under the base URL.
    const PATH: &'static str;
    /// The response header that carries the provider's request id.
    const REQUEST_ID_HEADER: &'static str;

    /// Refuses the wire's own bad options.
    fn check(&self) -> Result<(), ProviderConfigError>;
    /// The authentication header for `key` (the shell marks it
    /// sensitive). The one place a wire format reads the key's bytes.
    fn auth(key: &ApiKey) -> Option<(HeaderName, HeaderValue)>;
    /// Fixed headers every request carries besides the authentication.
    fn extra_headers() -> Vec<(HeaderName, HeaderValue)>;
    /// The request body for `request`.
    fn body(&self, request: &ModelRequest) -> Value;
    /// The URL one request goes to: the endpoint (`{base_url}/{PATH}`),
    /// unless the wire format puts part of the request in its URL
    /// (Gemini: the model). Never the key.
    fn request_url(
        endpoint: &reqwest::Url,
        _request: &ModelRequest,
    ) -> Result<reqwest::Url, RawProblem> {
        Ok(endpoint.clone())
    }
    /// The problem for a non-2xx response.
    fn classify(status: u16, headers: &HeaderMap, body: &[u8]) -> RawProblem;
    /// A fresh decoder for one call's stream.
    fn decoder(
        &self,
        limits: Limits,
        request: &ModelRequest,
        request_id: Option<String>,
        key: Option<ApiKey>,
    ) -> Self::Decoder;
}

/// A provider for the wire format `W`. Cheap to clone (one `Arc`).
pub(crate) struct Shell<W> {
    inner: Arc<Inner<W>>,
}

struct Inner<W> {
    client: Client,
    api_key: Option<ApiKey>,
    max_chunk_bytes: usize,
    limits: Limits,
    wire: W,
}

impl<W> Clone for Shell<W> {
    fn clone(&self) -> Self {
        Shell {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<W: Wire> Shell<W> {
    /// A provider for `config`: the wire's options, the bounds, the base
    /// URL and TLS rules, then the client.
    pub(crate) fn new(config: ProviderConfig<W>) -> Result<Shell<W>, ProviderConfigError> {
        config.wire.check()?;
        config.check_bounds()?;
        let auth = config.api_key.as_ref().and_then(W::auth);
        let client = Client::new(ClientSettings {
            base_url: &config.base_url,
            path: W::PATH,
            headers: fixed_headers(auth, W::extra_headers()),
            connect_timeout: config.connect_timeout,
            idle_timeout: config.idle_timeout,
            max_error_body_bytes: config.max_error_body_bytes,
        })?;
        Ok(Shell {
            inner: Arc::new(Inner {
                client,
                api_key: config.api_key,
                max_chunk_bytes: config.max_chunk_bytes,
                limits: config.limits,
                wire: config.wire,
            }),
        })
    }

    /// The endpoint requests go to.
    pub(crate) fn endpoint(&self) -> &str {
        self.inner.client.url()
    }

    /// The endpoint, parsed.
    pub(crate) fn endpoint_url(&self) -> &reqwest::Url {
        self.inner.client.endpoint()
    }

    /// One call: the body sent, the response accepted or classified, its
    /// stream pumped through a fresh decoder; every problem scrubbed of
    /// the key.
    pub(crate) fn start(&self, request: ModelRequest) -> StartFuture {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move {
            let key = inner.api_key.as_ref();
            let body = serde_json::to_vec(&inner.wire.body(&request))
                .map_err(|e| bad_json("the request", &e))?;
            let url = W::request_url(inner.client.endpoint(), &request)?;
            let response = inner
                .client
                .send(&url, body, W::classify)
                .await
                .map_err(|problem| scrub_problem(problem, key))?;
            let request_id =
                header(response.headers(), W::REQUEST_ID_HEADER).and_then(|v| safe_value(v, key));
            let decoder = inner.wire.decoder(
                inner.limits.clone(),
                &request,
                request_id,
                inner.api_key.clone(),
            );
            Ok(pump(
                response,
                inner.max_chunk_bytes,
                decoder,
                inner.api_key.clone(),
            ))
        })
    }
}

impl<W: Wire> fmt::Debug for Shell<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = &self.inner;
        f.debug_struct(W::NAME)
            .field("endpoint", &inner.client.url())
            .field("api_key", &inner.api_key.as_ref().map(|_| "[redacted]"))
            .field("max_chunk_bytes", &inner.max_chunk_bytes)
            .field("max_error_body_bytes", &inner.client.max_error_body_bytes())
            .field("wire", &inner.wire)
            .finish_non_exhaustive()
    }
}
