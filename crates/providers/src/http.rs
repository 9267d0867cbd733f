//! What both adapters share: the HTTP client, the request, error bodies,
//! retry-after headers, safe metadata values, and the pump that turns SSE
//! events into raw items.

use crate::key::ApiKey;
use crate::sse::{Event, EventError, Events};
use bytes::Bytes;
use futures_core::Stream;
use futures_util::StreamExt;
use keel_stream::{ProblemKind, RawItem, RawProblem, RawStream};
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use std::collections::VecDeque;
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

/// Why a provider could not be built from its configuration. Never echoes
/// the base URL (it could carry a credential) or the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The base URL is not an absolute `http` or `https` URL without
    /// credentials, query or fragment.
    #[error("base_url {problem} (rule config.base_url)")]
    InvalidBaseUrl {
        /// What is wrong with it.
        problem: &'static str,
    },
    /// A bound or timeout that must be positive is zero.
    #[error("{field} must be greater than zero (rule config.positive)")]
    Zero {
        /// The configuration field.
        field: &'static str,
    },
    /// The HTTP client could not be built (TLS initialisation).
    #[error("the HTTP client could not be built: {reason}")]
    Client {
        /// Why, as the HTTP library put it.
        reason: String,
    },
}

/// The connection settings both adapters share.
#[derive(Clone)]
pub(crate) struct Http {
    client: reqwest::Client,
    url: reqwest::Url,
    pub(crate) max_chunk_bytes: usize,
    max_error_body_bytes: usize,
    pub(crate) api_key: Option<ApiKey>,
    /// The authentication header, marked sensitive.
    auth: Option<(HeaderName, HeaderValue)>,
    /// Fixed extra headers (e.g. `anthropic-version`).
    extra: Vec<(HeaderName, HeaderValue)>,
}

impl fmt::Debug for Http {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Http")
            .field("url", &self.url.as_str())
            .field("api_key", &self.api_key.as_ref().map(|_| "[redacted]"))
            .field("max_chunk_bytes", &self.max_chunk_bytes)
            .field("max_error_body_bytes", &self.max_error_body_bytes)
            .finish_non_exhaustive()
    }
}

/// What [`Http::new`] needs.
pub(crate) struct HttpSettings<'a> {
    pub(crate) base_url: &'a str,
    pub(crate) path: &'a str,
    pub(crate) api_key: Option<ApiKey>,
    pub(crate) auth: fn(&ApiKey) -> Option<(HeaderName, HeaderValue)>,
    pub(crate) extra: Vec<(HeaderName, HeaderValue)>,
    pub(crate) connect_timeout: Duration,
    pub(crate) idle_timeout: Duration,
    pub(crate) max_chunk_bytes: usize,
    pub(crate) max_error_body_bytes: usize,
}

fn endpoint(base_url: &str, path: &str) -> Result<reqwest::Url, ConfigError> {
    let bad = |problem| ConfigError::InvalidBaseUrl { problem };
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
    let joined = format!("{}/{path}", base.as_str().trim_end_matches('/'));
    reqwest::Url::parse(&joined).map_err(|_| bad("is not an absolute URL"))
}

impl Http {
    pub(crate) fn new(s: HttpSettings<'_>) -> Result<Http, ConfigError> {
        for (field, zero) in [
            ("connect_timeout", s.connect_timeout.is_zero()),
            ("idle_timeout", s.idle_timeout.is_zero()),
            ("max_chunk_bytes", s.max_chunk_bytes == 0),
            ("max_error_body_bytes", s.max_error_body_bytes == 0),
        ] {
            if zero {
                return Err(ConfigError::Zero { field });
            }
        }
        let url = endpoint(s.base_url, s.path)?;
        let client = reqwest::Client::builder()
            .connect_timeout(s.connect_timeout)
            .read_timeout(s.idle_timeout)
            // A redirect could carry the key's header to another host.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("keel-providers/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ConfigError::Client {
                reason: error_chain(&e.without_url()),
            })?;
        let auth = s.api_key.as_ref().and_then(s.auth);
        Ok(Http {
            client,
            url,
            max_chunk_bytes: s.max_chunk_bytes,
            max_error_body_bytes: s.max_error_body_bytes,
            api_key: s.api_key,
            auth,
            extra: s.extra,
        })
    }

    /// The endpoint URL.
    pub(crate) fn url(&self) -> &str {
        self.url.as_str()
    }

    /// Sends `body` and returns the response once its status and headers
    /// are in, or the problem that kept it from starting. A non-2xx status
    /// is classified by `classify` from the status, headers and (bounded)
    /// body.
    pub(crate) async fn send(
        &self,
        body: Vec<u8>,
        classify: fn(u16, &HeaderMap, &[u8]) -> RawProblem,
    ) -> Result<reqwest::Response, RawProblem> {
        let mut request = self
            .client
            .post(self.url.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "text/event-stream");
        if let Some((name, value)) = &self.auth {
            request = request.header(name.clone(), value.clone());
        }
        for (name, value) in &self.extra {
            request = request.header(name.clone(), value.clone());
        }
        let response = request
            .body(body)
            .send()
            .await
            .map_err(|e| self.scrub_problem(transport_problem(&e, "sending the request")))?;
        let status = response.status().as_u16();
        if response.status().is_success() {
            let json = response
                .headers()
                .get(CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| {
                    v.trim()
                        .to_ascii_lowercase()
                        .starts_with("application/json")
                });
            if json {
                return Err(RawProblem::new(
                    ProblemKind::Protocol,
                    format!(
                        "HTTP {status} with content-type application/json, not an event stream (was \"stream\": true ignored?)"
                    ),
                    false,
                ));
            }
            return Ok(response);
        }
        let headers = response.headers().clone();
        let body = self.read_bounded(response).await;
        Err(self.scrub_problem(classify(status, &headers, &body)))
    }

    /// Reads at most `max_error_body_bytes` of a body; a read error or
    /// timeout ends it early (the error body is only a hint).
    async fn read_bounded(&self, mut response: reqwest::Response) -> Vec<u8> {
        let mut body = Vec::new();
        while let Ok(Some(chunk)) = response.chunk().await {
            let room = self.max_error_body_bytes - body.len();
            body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            if body.len() >= self.max_error_body_bytes {
                break;
            }
        }
        body
    }

    /// `problem` with the key scrubbed from its message.
    pub(crate) fn scrub_problem(&self, mut problem: RawProblem) -> RawProblem {
        if let Some(key) = &self.api_key
            && let std::borrow::Cow::Owned(clean) = key.scrub(&problem.message)
        {
            problem.message = clean;
        }
        problem
    }
}

/// The error and its sources, joined with `: `.
pub(crate) fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut out = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        let text = e.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = e.source();
    }
    out
}

/// A transport failure (no HTTP status): `timeout` when a timeout fired,
/// else `unavailable`; both retryable.
pub(crate) fn transport_problem(error: &reqwest::Error, doing: &str) -> RawProblem {
    let detail = error_chain_without_url(error);
    if error.is_timeout() {
        RawProblem::new(
            ProblemKind::Timeout,
            format!("timed out {doing}: {detail}"),
            true,
        )
    } else if error.is_connect() {
        RawProblem::new(
            ProblemKind::Unavailable,
            format!("could not connect: {detail}"),
            true,
        )
    } else {
        RawProblem::new(
            ProblemKind::Unavailable,
            format!("connection failed {doing}: {detail}"),
            true,
        )
    }
}

/// The sources of a reqwest error (its own `Display` names the URL).
fn error_chain_without_url(error: &reqwest::Error) -> String {
    let mut out = String::new();
    let mut source = std::error::Error::source(error);
    while let Some(e) = source {
        let text = e.to_string();
        if !out.contains(&text) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&text);
        }
        source = e.source();
    }
    if out.is_empty() {
        out.push_str(if error.is_timeout() {
            "operation timed out"
        } else {
            "transport error"
        });
    }
    out
}

// ------------------------------------------------------------ headers ----

/// A header's value as text, if present and visible ASCII.
pub(crate) fn header<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

/// The delay a response asks for: `retry-after-ms` (milliseconds), else
/// `retry-after` (seconds, possibly fractional; an HTTP date is ignored),
/// else the longest `x-ratelimit-reset-*` duration (`1s`, `475ms`, `6m0s`)
/// among the limits whose `x-ratelimit-remaining-*` is `0`. A delay over
/// [`MAX_RETRY_AFTER`] is ignored.
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    if let Some(ms) = header(headers, "retry-after-ms").and_then(parse_decimal) {
        return within_bound(ms / 1000.0);
    }
    if let Some(seconds) = header(headers, "retry-after").and_then(parse_decimal) {
        return within_bound(seconds);
    }
    ["requests", "tokens"]
        .iter()
        .filter(|limit| header(headers, &format!("x-ratelimit-remaining-{limit}")) == Some("0"))
        .filter_map(|limit| {
            header(headers, &format!("x-ratelimit-reset-{limit}")).and_then(parse_go_duration)
        })
        .max()
}

/// The longest retry-after delay believed: one day.
const MAX_RETRY_AFTER: f64 = 86_400.0;

fn within_bound(seconds: f64) -> Option<Duration> {
    (seconds.is_finite() && (0.0..=MAX_RETRY_AFTER).contains(&seconds))
        .then(|| Duration::from_secs_f64(seconds))
}

/// A non-negative decimal number (digits and at most one dot).
fn parse_decimal(text: &str) -> Option<f64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return None;
    }
    text.parse().ok()
}

/// A Go-style duration as OpenAI's rate-limit headers write it: `1s`,
/// `475ms`, `6m0s`, `1h2m3.5s`, `20us`.
pub(crate) fn parse_go_duration(text: &str) -> Option<Duration> {
    let mut rest = text;
    let mut total = 0f64;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let number_len = rest
            .bytes()
            .position(|b| !(b.is_ascii_digit() || b == b'.'))
            .unwrap_or(rest.len());
        if number_len == 0 {
            return None;
        }
        let value: f64 = rest[..number_len].parse().ok()?;
        rest = &rest[number_len..];
        let unit_len = rest
            .bytes()
            .position(|b| b.is_ascii_digit() || b == b'.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += value * scale;
    }
    within_bound(total)
}

/// `x-should-retry: true|false`, when the provider sends it.
pub(crate) fn should_retry(headers: &HeaderMap) -> Option<bool> {
    match header(headers, "x-should-retry")? {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    }
}

// ----------------------------------------------------------- metadata ----

/// The longest metadata string value kept.
const METADATA_VALUE_MAX_BYTES: usize = 256;

/// `value` if it is a safe metadata fact: a short string of visible ASCII
/// (no quotes or backslashes) that the secret screen does not flag and
/// that does not contain the key. Anything else is dropped, so that an odd
/// value never fails the stream.
pub(crate) fn safe_value(value: &str, key: Option<&ApiKey>) -> Option<String> {
    let ok = !value.is_empty()
        && value.len() <= METADATA_VALUE_MAX_BYTES
        && value
            .bytes()
            .all(|b| (b.is_ascii_graphic() || b == b' ') && b != b'"' && b != b'\\')
        && keel_stream::secrets::screen_value(value).is_none()
        && key.is_none_or(|k| !value.contains(k.expose()));
    ok.then(|| value.to_owned())
}

/// A short, safe identifier from a provider's error body (an error `type`
/// or `code`): `^[A-Za-z0-9_.:-]{1,64}$`.
pub(crate) fn safe_code(value: &str) -> Option<&str> {
    ((1..=64).contains(&value.len())
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':')))
    .then_some(value)
}

// --------------------------------------------------------------- pump ----

/// A wire format's state machine: SSE events in, raw items out.
pub(crate) trait Decoder: Send + 'static {
    /// Handles one event, pushing what it yields to `out`. Returns
    /// [`Flow::Done`] once it pushed its terminal (completion or failure).
    fn event(&mut self, name: Option<&str>, data: &str, out: &mut VecDeque<RawItem>) -> Flow;

    /// The body ended normally: push the terminal (a completion if the
    /// stream was complete, else the `unavailable` failure).
    fn end(&mut self, out: &mut VecDeque<RawItem>);
}

/// Whether a decoder wants more events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    /// Keep going.
    More,
    /// A terminal was pushed; stop reading.
    Done,
}

/// How long the end of a body is awaited after the terminal event.
const TAIL_WAIT: Duration = Duration::from_millis(20);

struct Pump<S: Stream<Item = Result<Bytes, reqwest::Error>> + Unpin, D> {
    events: Option<Events<S>>,
    /// The events after the decoder's terminal: read for at most
    /// [`TAIL_WAIT`], so that a body whose end follows its terminator
    /// (as it does with every well-behaved server) is read to its end and
    /// its connection goes back to the pool; then dropped.
    tail: Option<Events<S>>,
    decoder: D,
    out: VecDeque<RawItem>,
    key: Option<ApiKey>,
}

/// The raw stream of a response whose status was 2xx: SSE events from
/// the body, each given to `decoder`; ends right after the terminal.
/// Dropping it drops the response body and with it the connection; the
/// connection is reused only when the body ended (within [`TAIL_WAIT`]
/// of the terminal event).
pub(crate) fn pump<D: Decoder>(response: reqwest::Response, http: &Http, decoder: D) -> RawStream {
    let body = response.bytes_stream().boxed();
    let state = Pump {
        events: Some(Events::new(body, http.max_chunk_bytes)),
        tail: None,
        decoder,
        out: VecDeque::new(),
        key: http.api_key.clone(),
    };
    Box::pin(futures_util::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(item) = st.out.pop_front() {
                return Some((scrubbed(item, st.key.as_ref()), st));
            }
            let Some(events) = st.events.as_mut() else {
                if let Some(mut tail) = st.tail.take() {
                    let _ = tokio::time::timeout(TAIL_WAIT, tail.next()).await;
                }
                return None;
            };
            let next = events.next().await;
            match step(&mut st.decoder, next, &mut st.out) {
                Step::More => {}
                Step::Terminal => st.tail = st.events.take(),
                Step::Ended => st.events = None,
            }
        }
    }))
}

/// What [`step`] left the event stream in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Read the next event.
    More,
    /// The decoder pushed its terminal: read nothing more (a tail may
    /// still be drained).
    Terminal,
    /// The body ended or failed; its terminal is in `out`.
    Ended,
}

/// One result of the event stream, given to the decoder: an event is
/// decoded, an early end becomes its failure, the body's end lets the
/// decoder close the stream. The one place both the pump and
/// [`crate::fuzzing`] turn events into raw items.
pub(crate) fn step<D: Decoder>(
    decoder: &mut D,
    next: Option<Result<Event, EventError>>,
    out: &mut VecDeque<RawItem>,
) -> Step {
    match next {
        Some(Ok(event)) => match decoder.event(event.name.as_deref(), &event.data, out) {
            Flow::Done => Step::Terminal,
            Flow::More => Step::More,
        },
        Some(Err(error)) => {
            out.push_back(RawItem::Failure(match error {
                EventError::Oversized { max } => RawProblem::new(
                    ProblemKind::Protocol,
                    format!(
                        "oversized chunk: an SSE event is larger than {max} bytes (max_chunk_bytes)"
                    ),
                    false,
                ),
                EventError::Transport(e) => transport_problem(&e, "reading the event stream"),
                EventError::Framing => RawProblem::new(
                    ProblemKind::Protocol,
                    "the event stream is not valid UTF-8 SSE",
                    false,
                ),
            }));
            Step::Ended
        }
        None => {
            decoder.end(out);
            Step::Ended
        }
    }
}

/// `item` with the API key scrubbed from a failure's message (a server
/// may echo the request's credentials in an error).
pub(crate) fn scrubbed(mut item: RawItem, key: Option<&ApiKey>) -> RawItem {
    if let (RawItem::Failure(problem), Some(key)) = (&mut item, key)
        && let std::borrow::Cow::Owned(clean) = key.scrub(&problem.message)
    {
        problem.message = clean;
    }
    item
}

// ----------------------------------------------------- shared helpers ----

/// Pushes `text` as text deltas of at most `max` bytes each, split at
/// char boundaries; pushes nothing for empty text.
pub(crate) fn push_text(out: &mut VecDeque<RawItem>, text: &str, max: usize) {
    let mut rest = text;
    while !rest.is_empty() {
        let mut cut = rest.len().min(max.max(4));
        while !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        let (head, tail) = rest.split_at(cut);
        out.push_back(RawItem::text(head));
        rest = tail;
    }
}

/// A JSON parse failure as a protocol problem. The serde message is not
/// used: for type errors it quotes the input, which is content.
pub(crate) fn bad_json(what: &str, error: &serde_json::Error) -> RawProblem {
    let class = match error.classify() {
        serde_json::error::Category::Io => "an I/O error",
        serde_json::error::Category::Syntax => "a syntax error",
        serde_json::error::Category::Data => "an unexpected shape",
        serde_json::error::Category::Eof => "an unexpected end",
    };
    RawProblem::new(
        ProblemKind::Protocol,
        format!(
            "{what} is not valid JSON: {class} at column {}",
            error.column()
        ),
        false,
    )
}

/// Tool-call arguments as sent: empty text (a tool without parameters) is
/// the empty object.
pub(crate) fn arguments_or_empty(arguments: String) -> String {
    if arguments.trim().is_empty() {
        "{}".to_owned()
    } else {
        arguments
    }
}

/// Whether `text` parses as a JSON object.
pub(crate) fn is_json_object(text: &str) -> bool {
    matches!(
        serde_json::from_str::<serde_json::Value>(text),
        Ok(serde_json::Value::Object(_))
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn go_durations_parse() {
        assert_eq!(parse_go_duration("475ms"), Some(Duration::from_millis(475)));
        assert_eq!(parse_go_duration("1s"), Some(Duration::from_secs(1)));
        assert_eq!(parse_go_duration("6m0s"), Some(Duration::from_secs(360)));
        assert_eq!(
            parse_go_duration("1h2m3.5s"),
            Some(Duration::from_millis(3_723_500))
        );
        for bad in ["", "ms", "5", "5x", "-1s", "1s2", "9999999h"] {
            assert_eq!(parse_go_duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn retry_after_prefers_the_explicit_headers() {
        let mut h = HeaderMap::new();
        h.insert(
            "x-ratelimit-remaining-tokens",
            HeaderValue::from_static("0"),
        );
        h.insert(
            "x-ratelimit-reset-tokens",
            HeaderValue::from_static("475ms"),
        );
        h.insert(
            "x-ratelimit-remaining-requests",
            HeaderValue::from_static("4"),
        );
        h.insert("x-ratelimit-reset-requests", HeaderValue::from_static("9s"));
        assert_eq!(retry_after(&h), Some(Duration::from_millis(475)));
        h.insert("retry-after", HeaderValue::from_static("2"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(2)));
        h.insert("retry-after-ms", HeaderValue::from_static("1500"));
        assert_eq!(retry_after(&h), Some(Duration::from_millis(1500)));
        h.insert("retry-after-ms", HeaderValue::from_static("120000"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(120)));
        let mut long = HeaderMap::new();
        long.insert("retry-after", HeaderValue::from_static("172800"));
        assert_eq!(retry_after(&long), None);
        let mut date = HeaderMap::new();
        date.insert(
            "retry-after",
            HeaderValue::from_static("Wed, 21 Oct 2026 07:28:00 GMT"),
        );
        assert_eq!(retry_after(&date), None);
    }

    #[test]
    fn endpoints_are_checked_and_joined() {
        let url = endpoint("http://127.0.0.1:8080/v1/", "chat/completions").unwrap();
        assert_eq!(url.as_str(), "http://127.0.0.1:8080/v1/chat/completions");
        let url = endpoint("https://api.anthropic.com/v1", "messages").unwrap();
        assert_eq!(url.as_str(), "https://api.anthropic.com/v1/messages");
        for bad in [
            "api.openai.com/v1",
            "ftp://host/v1",
            "https://user:pw@host/v1",
            "https://host/v1?key=x",
            "file:///tmp",
        ] {
            let err = endpoint(bad, "messages").unwrap_err();
            assert!(!err.to_string().contains(bad), "{err}");
        }
    }

    #[test]
    fn text_is_split_at_char_boundaries() {
        let mut out = VecDeque::new();
        push_text(&mut out, "aøbø", 4);
        assert_eq!(
            out.into_iter().collect::<Vec<_>>(),
            vec![RawItem::text("aøb"), RawItem::text("ø")]
        );
        let mut out = VecDeque::new();
        push_text(&mut out, "", 4);
        assert!(out.is_empty());
    }

    #[test]
    fn metadata_values_are_screened() {
        let key = ApiKey::new("local-secret-123").unwrap();
        assert_eq!(
            safe_value("gpt-4.1-mini", None).as_deref(),
            Some("gpt-4.1-mini")
        );
        assert_eq!(safe_value("", None), None);
        assert_eq!(safe_value("a\"b", None), None);
        assert_eq!(safe_value(&"x".repeat(300), None), None);
        let openai_shaped = format!("sk-{}", "a1".repeat(15));
        assert_eq!(safe_value(&openai_shaped, None), None);
        assert_eq!(safe_value("id-local-secret-123", Some(&key)), None);
        assert_eq!(
            safe_code("rate_limit_exceeded"),
            Some("rate_limit_exceeded")
        );
        assert_eq!(safe_code("no spaces"), None);
    }
}
