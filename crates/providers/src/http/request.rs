//! The request's shape: a JSON `POST` that asks for an event stream, with
//! the provider's fixed headers: the authentication header (always marked
//! sensitive, so that no `Debug` of the request shows it) and the wire
//! format's extras (e.g. `anthropic-version`).

use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};

/// The headers every request of a provider carries, built once.
pub(crate) fn fixed_headers(
    auth: Option<(HeaderName, HeaderValue)>,
    extra: Vec<(HeaderName, HeaderValue)>,
) -> HeaderMap {
    let mut headers = HeaderMap::new();
    if let Some((name, mut value)) = auth {
        value.set_sensitive(true);
        headers.insert(name, value);
    }
    for (name, value) in extra {
        headers.insert(name, value);
    }
    headers
}

/// The `POST` of `body` to `url`.
pub(crate) fn post(
    client: &reqwest::Client,
    url: &reqwest::Url,
    fixed: &HeaderMap,
    body: Vec<u8>,
) -> reqwest::RequestBuilder {
    client
        .post(url.clone())
        .header(CONTENT_TYPE, "application/json")
        .header(ACCEPT, "text/event-stream")
        .headers(fixed.clone())
        .body(body)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use reqwest::header::AUTHORIZATION;

    #[test]
    fn the_auth_header_is_sensitive_and_the_shape_is_fixed() {
        let fixed = fixed_headers(
            Some((AUTHORIZATION, HeaderValue::from_static("Bearer k"))),
            vec![(
                HeaderName::from_static("anthropic-version"),
                HeaderValue::from_static("2023-06-01"),
            )],
        );
        assert!(fixed[AUTHORIZATION].is_sensitive());
        assert!(!fixed["anthropic-version"].is_sensitive());
        let url = reqwest::Url::parse("http://127.0.0.1:1/v1/messages").unwrap();
        let request = post(&reqwest::Client::new(), &url, &fixed, b"{}".to_vec())
            .build()
            .unwrap();
        assert_eq!(request.method(), reqwest::Method::POST);
        let h = request.headers();
        assert_eq!(h[CONTENT_TYPE], "application/json");
        assert_eq!(h[ACCEPT], "text/event-stream");
        assert!(h[AUTHORIZATION].is_sensitive());
        assert_eq!(h["anthropic-version"], "2023-06-01");
        assert!(!format!("{request:?}").contains("Bearer k"));
    }
}
