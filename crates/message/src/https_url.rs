//! [`HttpsUrl`]: an image the provider fetches itself.

use crate::error::{MessageError, MessageErrorKind, UrlProblem};
use std::fmt;
use std::sync::Arc;

/// The longest URL, in bytes (a wire-format constant, like the id rule).
pub const HTTPS_URL_MAX_BYTES: usize = 2048;

/// An `https://` URL with a non-empty host and no credentials before it,
/// of printable ASCII without spaces, at most [`HTTPS_URL_MAX_BYTES`]
/// (rule `message.image_url`).
///
/// A URL can carry a credential (a presigned query), so `Debug` and errors
/// never show it whole: `Debug` shows the host and the length.
///
/// ```
/// use keel_message::HttpsUrl;
/// let url = HttpsUrl::parse("https://example.com/cat.png?sig=abc")?;
/// assert_eq!(url.host(), "example.com");
/// assert_eq!(format!("{url:?}"), "HttpsUrl(https://example.com/…, 35 bytes)");
/// assert!(HttpsUrl::parse("http://example.com/cat.png").is_err());
/// # Ok::<(), keel_message::MessageError>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct HttpsUrl(Arc<str>);

const SCHEME: &str = "https://";

/// The rule `message.image_url`, naming the first problem.
fn url_problem(text: &str) -> Option<UrlProblem> {
    if text.len() > HTTPS_URL_MAX_BYTES {
        return Some(UrlProblem::TooLong {
            len: text.len(),
            max: HTTPS_URL_MAX_BYTES,
        });
    }
    if let Some(offset) = text.bytes().position(|b| !(0x21..=0x7E).contains(&b)) {
        return Some(UrlProblem::Character { offset });
    }
    let Some(rest) = text.strip_prefix(SCHEME) else {
        return Some(UrlProblem::NotHttps);
    };
    let host = host_of(rest);
    if host.is_empty() {
        return Some(UrlProblem::EmptyHost);
    }
    if host.contains('@') {
        return Some(UrlProblem::Credentials);
    }
    None
}

/// The authority: what follows the scheme up to the path, query or fragment.
fn host_of(rest: &str) -> &str {
    rest.split(['/', '?', '#']).next().unwrap_or_default()
}

impl HttpsUrl {
    /// Validates and copies `text`.
    pub fn parse(text: &str) -> Result<HttpsUrl, MessageError> {
        match url_problem(text) {
            Some(problem) => Err(MessageError::new(
                "$",
                MessageErrorKind::ImageUrl { problem },
            )),
            None => Ok(HttpsUrl(Arc::from(text))),
        }
    }

    /// The URL.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The authority (host, and port if any).
    pub fn host(&self) -> &str {
        self.0.strip_prefix(SCHEME).map_or("", host_of)
    }
}

impl fmt::Debug for HttpsUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "HttpsUrl({SCHEME}{}/…, {} bytes)",
            self.host(),
            self.0.len()
        )
    }
}

impl serde::Serialize for HttpsUrl {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for HttpsUrl {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        HttpsUrl::parse(&text).map_err(serde::de::Error::custom)
    }
}
