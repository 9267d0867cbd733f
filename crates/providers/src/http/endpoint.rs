//! The endpoint URL: the base URL rule (an absolute `http` or `https` URL
//! with a host and no credentials, query or fragment), the TLS rule
//! (`https` needs the `rustls` feature), then the join with the wire
//! format's path. Both rules apply when the provider is built, so a
//! misconfiguration never waits for the first request.

use crate::error::ProviderConfigError;

/// Whether this build speaks TLS (the `rustls` feature).
const TLS: bool = cfg!(feature = "rustls");

/// `base_url` if it passes the base URL rule.
fn checked_base(base_url: &str) -> Result<reqwest::Url, ProviderConfigError> {
    let bad = |problem| ProviderConfigError::InvalidBaseUrl { problem };
    let base = reqwest::Url::parse(base_url).map_err(|_| bad("is not an absolute URL"))?;
    if !matches!(base.scheme(), "http" | "https") {
        return Err(bad("is not http or https"));
    }
    if !base.username().is_empty() || base.password().is_some() {
        return Err(bad("carries credentials"));
    }
    if base.query().is_some() || base.fragment().is_some() {
        return Err(bad("has a query or fragment"));
    }
    if base.host_str().is_none_or(str::is_empty) {
        return Err(bad("has no host"));
    }
    Ok(base)
}

/// Whether `base_url` passes the base URL rule (so that `Debug` may show
/// it: it carries no credentials or query).
pub(crate) fn is_valid_base(base_url: &str) -> bool {
    checked_base(base_url).is_ok()
}

/// `{base_url}/{path}`, once `base_url` passed both rules.
pub(crate) fn endpoint(base_url: &str, path: &str) -> Result<reqwest::Url, ProviderConfigError> {
    let base = checked_base(base_url)?;
    if base.scheme() == "https" && !TLS {
        return Err(ProviderConfigError::TlsDisabled);
    }
    let joined = format!("{}/{path}", base.as_str().trim_end_matches('/'));
    reqwest::Url::parse(&joined).map_err(|_| ProviderConfigError::InvalidBaseUrl {
        problem: "is not an absolute URL",
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn endpoints_are_checked_and_joined() {
        let url = endpoint("http://127.0.0.1:8080/v1/", "chat/completions").unwrap();
        assert_eq!(url.as_str(), "http://127.0.0.1:8080/v1/chat/completions");
        for bad in [
            "api.openai.com/v1",
            "ftp://host/v1",
            "https://user:pw@host/v1",
            "http://user:pw@host/v1",
            "https://host/v1?key=x",
            "file:///tmp",
        ] {
            let err = endpoint(bad, "messages").unwrap_err();
            assert!(
                matches!(err, ProviderConfigError::InvalidBaseUrl { .. }),
                "{bad}: {err}"
            );
            assert!(!err.to_string().contains(bad), "{err}");
            assert!(!is_valid_base(bad), "{bad}");
        }
    }

    #[cfg(feature = "rustls")]
    #[test]
    fn https_is_accepted_with_tls() {
        let url = endpoint("https://api.anthropic.com/v1", "messages").unwrap();
        assert_eq!(url.as_str(), "https://api.anthropic.com/v1/messages");
    }

    #[cfg(not(feature = "rustls"))]
    #[test]
    fn https_is_refused_without_tls() {
        let err = endpoint("https://api.anthropic.com/v1", "messages").unwrap_err();
        assert_eq!(err, ProviderConfigError::TlsDisabled);
        let text = err.to_string();
        assert!(text.contains("rule config.tls"), "{text}");
        assert!(text.contains("`rustls` feature"), "{text}");
        assert!(!text.contains("api.anthropic.com"), "{text}");
        // The base URL rule comes first: a bad https URL says what is bad.
        assert!(matches!(
            endpoint("https://user:pw@host/v1", "messages"),
            Err(ProviderConfigError::InvalidBaseUrl { .. })
        ));
        // Plain http still works.
        assert!(endpoint("http://127.0.0.1:1/v1", "messages").is_ok());
    }
}
