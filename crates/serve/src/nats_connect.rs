//! `--nats URL`: connecting to NATS JetStream for `keel run` (the
//! JetStream required observer) and the daemon (remote subscriptions,
//! publishing, recovery).
//!
//! Error messages name the URL with any `user:password@` or token part
//! removed, never the credentials.

use keel_observers::{JetStreamConfig, JetStreamError, JetStreamHandle};

/// The URL(s) with the userinfo part of each (comma-separated) server
/// replaced by `***`, for messages.
pub fn redact(url: &str) -> String {
    url.split(',')
        .map(|one| {
            let one = one.trim();
            let (scheme, rest) = match one.find("://") {
                Some(i) => (&one[..i + 3], &one[i + 3..]),
                None => ("", one),
            };
            let host_end = rest.find('/').unwrap_or(rest.len());
            match rest[..host_end].rfind('@') {
                Some(at) => format!("{scheme}***@{}", &rest[at + 1..]),
                None => one.to_owned(),
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Removes every credential of `url` from `text`.
fn scrub(text: &str, url: &str) -> String {
    let mut out = text.to_owned();
    for one in url.split(',') {
        let one = one.trim();
        let rest = one.find("://").map_or(one, |i| &one[i + 3..]);
        let host_end = rest.find('/').unwrap_or(rest.len());
        if let Some(at) = rest[..host_end].rfind('@') {
            let userinfo = &rest[..at];
            if !userinfo.is_empty() {
                out = out.replace(userinfo, "***");
            }
        }
    }
    out
}

/// Why NATS could not be used: the message names the URL without its
/// credentials.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NatsConnectError(String);

/// Connects to `url` and ensures the stream; a failure names the URL
/// without credentials.
pub async fn connect(url: &str) -> Result<JetStreamHandle, NatsConnectError> {
    JetStreamHandle::connect(JetStreamConfig::new(url))
        .await
        .map_err(|e| {
            let detail = match &e {
                JetStreamError::Connect { detail, .. } => {
                    format!("cannot connect to NATS at {}: {detail}", redact(url))
                }
                JetStreamError::Stream { stream, detail } => format!(
                    "NATS at {}: cannot ensure JetStream stream {stream}: {detail}",
                    redact(url)
                ),
                other => format!("NATS at {}: {other}", redact(url)),
            };
            NatsConnectError(format!("--nats: {}", scrub(&detail, url)))
        })
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn credentials_are_redacted() {
        assert_eq!(redact("nats://127.0.0.1:4222"), "nats://127.0.0.1:4222");
        assert_eq!(
            redact("nats://u:p@h1:4222, tls://tok@h2:4222"),
            "nats://***@h1:4222,tls://***@h2:4222"
        );
        assert_eq!(redact("a:b@h:1"), "***@h:1");
    }
}
