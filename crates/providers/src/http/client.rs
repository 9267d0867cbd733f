//! The transport: one reqwest client per provider (connect and idle
//! timeouts, no redirects, the user agent, TLS when built with it) and the
//! exchange of one request up to its response's headers.

use super::failure::{error_chain, transport_problem};
use super::{endpoint, request, response};
use crate::error::ProviderConfigError;
use keel_stream::RawProblem;
use reqwest::header::HeaderMap;
use std::time::Duration;

/// What [`Client::new`] needs.
pub(crate) struct ClientSettings<'a> {
    pub(crate) base_url: &'a str,
    /// The wire format's path under the base URL.
    pub(crate) path: &'a str,
    /// The headers every request carries (see [`request::fixed_headers`]).
    pub(crate) headers: HeaderMap,
    pub(crate) connect_timeout: Duration,
    pub(crate) idle_timeout: Duration,
    pub(crate) max_error_body_bytes: usize,
}

/// A provider's connection to its endpoint.
#[derive(Clone)]
pub(crate) struct Client {
    client: reqwest::Client,
    url: reqwest::Url,
    headers: HeaderMap,
    max_error_body_bytes: usize,
}

impl Client {
    /// The client for `s`, after the endpoint rules.
    pub(crate) fn new(s: ClientSettings<'_>) -> Result<Client, ProviderConfigError> {
        let url = endpoint::endpoint(s.base_url, s.path)?;
        let client = reqwest::Client::builder()
            .connect_timeout(s.connect_timeout)
            .read_timeout(s.idle_timeout)
            // A redirect could carry the key's header to another host.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("keel-providers/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ProviderConfigError::Client {
                reason: error_chain(&e.without_url()),
            })?;
        Ok(Client {
            client,
            url,
            headers: s.headers,
            max_error_body_bytes: s.max_error_body_bytes,
        })
    }

    /// The endpoint URL.
    pub(crate) fn url(&self) -> &str {
        self.url.as_str()
    }

    /// The endpoint URL, parsed: what a wire format builds a request's URL
    /// from (see `Wire::request_url`).
    pub(crate) fn endpoint(&self) -> &reqwest::Url {
        &self.url
    }

    /// The bound on an error body read.
    pub(crate) fn max_error_body_bytes(&self) -> usize {
        self.max_error_body_bytes
    }

    /// Sends `body` to `url` (the endpoint, or a URL a wire format built
    /// from it) and returns the response once its status and headers are
    /// in, or the problem that kept it from starting (a non-2xx status is
    /// classified by `classify`). The caller scrubs the key from it.
    pub(crate) async fn send(
        &self,
        url: &reqwest::Url,
        body: Vec<u8>,
        classify: response::Classify,
    ) -> Result<reqwest::Response, RawProblem> {
        let response = request::post(&self.client, url, &self.headers, body)
            .send()
            .await
            .map_err(|e| transport_problem(&e, "sending the request"))?;
        response::accept(response, self.max_error_body_bytes, classify).await
    }
}
