//! Cross-site and DNS-rebinding defences, checked before anything else.
//!
//! A loopback daemon without a token is reachable by every web page the
//! user's browser opens. Three rules keep such pages out, each decided
//! from the request head alone, before a body is read or a run started:
//!
//! - **Host** (rule `http.host_allowed`): on a loopback listener the
//!   `Host` header must name a loopback host (`localhost`, `127.0.0.1`,
//!   `[::1]`, any port) or one listed with `--public-host`; else 421. A
//!   page on a rebinding name (`attacker.example` resolving to 127.0.0.1)
//!   sends its own name, so it reads nothing.
//! - **Origin** (rule `http.origin_allowed`): a request carrying `Origin`
//!   must come from the daemon's own origin (`http://` or `https://` plus
//!   the request's `Host`) or from one listed with `--allow-origin`; else
//!   403. Browsers send `Origin` on every cross-origin request and on
//!   same-origin POSTs.
//! - **Content type** (rule `http.json_body`): every state-changing
//!   request (anything but GET, HEAD and OPTIONS) must say
//!   `Content-Type: application/json`, body or not; else 415. A form or
//!   `text/plain` POST is a "simple" request a cross-site page may send
//!   without a preflight; a JSON one needs the preflight that CORS then
//!   decides.
//!
//! - **One reading of the head** (rule `http.unambiguous_head`): a
//!   request whose target is in absolute form (`GET http://host/path`),
//!   or that repeats `Host` or `Origin`, is refused with 400 before the
//!   rules above: its target and its `Host` may disagree, and two
//!   `Origin`s may be read differently by a proxy and by this daemon.
//!   Browsers send neither; a strict proxy could.
//!
//! CORS itself (preflights, `Access-Control-Allow-Origin` for the listed
//! origins, never `*`) is [`cors_layer`], on `tower-http`'s `CorsLayer`.
//! The decision is [`CrossSitePolicy::check`], a pure function of the
//! head's bytes (fuzzed by `fuzz/fuzz_targets/http_cross_site.rs`); the
//! middleware is [`defend`].

use super::problem::Problem;
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use std::time::Duration;
use tower_http::cors::{AllowOrigin, CorsLayer};

/// Longest `--allow-origin` or `--public-host` value, in bytes (a DNS
/// name is at most 253; scheme and port add a little).
pub const MAX_NAME_BYTES: usize = 300;
/// Hosts a loopback listener always serves (the port is not compared: a
/// rebinding page can use the daemon's port, but not its name).
const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];
/// How long a browser may cache a preflight answer.
const PREFLIGHT_MAX_AGE: Duration = Duration::from_secs(600);

/// A bad `--allow-origin` or `--public-host` value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CrossSiteConfigError {
    /// `--allow-origin` is not `http(s)://host[:port]`.
    #[error(
        "--allow-origin {value:?}: not an origin ({why}); expected scheme://host[:port] with scheme http or https, no path, no wildcard"
    )]
    Origin {
        /// The value given.
        value: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// `--public-host` is not `host[:port]`.
    #[error("--public-host {value:?}: not a host ({why}); expected host[:port]")]
    Host {
        /// The value given.
        value: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A value over [`MAX_NAME_BYTES`].
    #[error("{flag}: {len} bytes, over the bound of {max} (MAX_NAME_BYTES)")]
    TooLong {
        /// The flag.
        flag: &'static str,
        /// The value's length.
        len: usize,
        /// The bound.
        max: usize,
    },
}

/// Why a request was refused. The texts name the rule, never the value
/// the request sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CrossSiteRefusal {
    /// No `Host` header, or one that is not `host[:port]`.
    #[error("the request has no valid Host header (rule http.host_allowed)")]
    HostMissing,
    /// `Host` names a host this daemon does not serve.
    #[error(
        "the Host header names a host this daemon does not serve: on a loopback listener only localhost, 127.0.0.1, [::1] and --public-host names are served (rule http.host_allowed)"
    )]
    HostNotAllowed,
    /// `Origin` is neither the daemon's own nor listed.
    #[error(
        "requests from this Origin are refused: it is not the daemon's own origin and not listed with --allow-origin (rule http.origin_allowed)"
    )]
    OriginNotAllowed,
    /// A state-changing request without `Content-Type: application/json`.
    #[error(
        "state-changing requests must send Content-Type: application/json, with or without a body (rule http.json_body)"
    )]
    NotJson,
    /// The request target is in absolute form (`http://host/path`) or
    /// authority form, which the `Host` check would not see.
    #[error(
        "the request target must be a path (origin form), not an absolute URL (rule http.unambiguous_head)"
    )]
    AbsoluteTarget,
    /// More than one `Host` header.
    #[error("the request carries more than one Host header (rule http.unambiguous_head)")]
    RepeatedHost,
    /// More than one `Origin` header.
    #[error("the request carries more than one Origin header (rule http.unambiguous_head)")]
    RepeatedOrigin,
}

impl CrossSiteRefusal {
    /// The problem answered.
    pub fn problem(self) -> Problem {
        let (status, name, title) = match self {
            CrossSiteRefusal::HostMissing | CrossSiteRefusal::HostNotAllowed => (
                StatusCode::MISDIRECTED_REQUEST,
                "host-not-allowed",
                "Host not served",
            ),
            CrossSiteRefusal::OriginNotAllowed => (
                StatusCode::FORBIDDEN,
                "origin-not-allowed",
                "Origin refused",
            ),
            CrossSiteRefusal::NotJson => (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported-media-type",
                "Content-Type must be application/json",
            ),
            CrossSiteRefusal::AbsoluteTarget => (
                StatusCode::BAD_REQUEST,
                "absolute-target",
                "Absolute-form request target refused",
            ),
            CrossSiteRefusal::RepeatedHost | CrossSiteRefusal::RepeatedOrigin => (
                StatusCode::BAD_REQUEST,
                "repeated-header",
                "Repeated Host or Origin header",
            ),
        };
        Problem::new(status, name, title, self.to_string())
    }
}

/// A `host[:port]` the daemon serves: lowercase, the port optional.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authority {
    host: String,
    port: Option<u16>,
}

impl Authority {
    /// Parses `host[:port]` (an IPv6 literal in brackets), as a `Host`
    /// header carries it. Hosts are compared lowercase.
    pub fn parse(bytes: &[u8]) -> Result<Authority, &'static str> {
        let text = std::str::from_utf8(bytes).map_err(|_| "not UTF-8")?;
        if text.is_empty() {
            return Err("empty");
        }
        let (host, port) = if let Some(rest) = text.strip_prefix('[') {
            let end = rest.find(']').ok_or("an IPv6 literal without ]")?;
            let (literal, after) = rest.split_at(end);
            (
                format!("[{literal}]"),
                after.strip_prefix(']').unwrap_or(after),
            )
        } else {
            match text.find(':') {
                Some(i) => (text[..i].to_owned(), &text[i..]),
                None => (text.to_owned(), ""),
            }
        };
        let port = match port {
            "" => None,
            p => Some(
                p.strip_prefix(':')
                    .filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
                    .and_then(|d| d.parse::<u16>().ok())
                    .ok_or("a port that is not a number up to 65535")?,
            ),
        };
        let name_ok = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_');
        let literal_ok = |b: u8| b.is_ascii_hexdigit() || matches!(b, b':' | b'.' | b'[' | b']');
        let valid = if host.starts_with('[') {
            host.len() > 2 && host.bytes().all(literal_ok)
        } else {
            !host.is_empty() && host.bytes().all(name_ok)
        };
        if !valid {
            return Err("a host with characters a host name cannot have");
        }
        Ok(Authority {
            host: host.to_ascii_lowercase(),
            port,
        })
    }

    /// Whether `other` (a request's `Host`) is this one: same host, and
    /// the same port when this one names a port.
    fn covers(&self, other: &Authority) -> bool {
        self.host == other.host && self.port.is_none_or(|p| other.port == Some(p))
    }
}

/// A normalized origin: `scheme://host[:port]`, lowercase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedOrigin(String);

impl AllowedOrigin {
    /// Parses an `--allow-origin` value.
    pub fn parse(value: &str) -> Result<AllowedOrigin, CrossSiteConfigError> {
        if value.len() > MAX_NAME_BYTES {
            return Err(too_long("--allow-origin", value.len()));
        }
        let bad = |why| CrossSiteConfigError::Origin {
            value: value.to_owned(),
            why,
        };
        let (scheme, rest) = value.split_once("://").ok_or_else(|| bad("no scheme"))?;
        let scheme = scheme.to_ascii_lowercase();
        if scheme != "http" && scheme != "https" {
            return Err(bad("the scheme is not http or https"));
        }
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains(['/', '?', '#', '@', '*']) {
            return Err(bad("it has a path, query, user or wildcard"));
        }
        let authority = Authority::parse(rest.as_bytes()).map_err(bad)?;
        Ok(AllowedOrigin(origin_text(&scheme, &authority)))
    }

    /// The origin as a browser sends it.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn origin_text(scheme: &str, authority: &Authority) -> String {
    match authority.port {
        Some(port) => format!("{scheme}://{}:{port}", authority.host),
        None => format!("{scheme}://{}", authority.host),
    }
}

fn too_long(flag: &'static str, len: usize) -> CrossSiteConfigError {
    CrossSiteConfigError::TooLong {
        flag,
        len,
        max: MAX_NAME_BYTES,
    }
}

/// Parses a `--public-host` value.
pub fn parse_public_host(value: &str) -> Result<Authority, CrossSiteConfigError> {
    if value.len() > MAX_NAME_BYTES {
        return Err(too_long("--public-host", value.len()));
    }
    Authority::parse(value.as_bytes()).map_err(|why| CrossSiteConfigError::Host {
        value: value.to_owned(),
        why,
    })
}

/// What the defences look at: the method and three headers, as bytes.
#[derive(Debug, Clone, Copy)]
pub struct RequestHead<'a> {
    /// The method.
    pub method: &'a Method,
    /// `Host`.
    pub host: Option<&'a [u8]>,
    /// `Origin`.
    pub origin: Option<&'a [u8]>,
    /// `Content-Type`.
    pub content_type: Option<&'a [u8]>,
    /// Whether the request target has a scheme or an authority (absolute
    /// or authority form) rather than being a path.
    pub absolute_target: bool,
    /// How many `Host` headers the request carries (`host` is the first).
    pub host_headers: usize,
    /// How many `Origin` headers (`origin` is the first).
    pub origin_headers: usize,
}

impl Default for RequestHead<'_> {
    /// A `GET` of a path with no headers.
    fn default() -> Self {
        RequestHead {
            method: &Method::GET,
            host: None,
            origin: None,
            content_type: None,
            absolute_target: false,
            host_headers: 0,
            origin_headers: 0,
        }
    }
}

/// The daemon's cross-site rules, from its flags.
#[derive(Debug, Clone, Default)]
pub struct CrossSitePolicy {
    /// Check `Host` (a loopback listener, or `--public-host` given).
    check_host: bool,
    public_hosts: Vec<Authority>,
    allowed_origins: Vec<AllowedOrigin>,
}

impl CrossSitePolicy {
    /// The policy for a listener; `loopback` turns the Host rule on
    /// (listing public hosts turns it on for any listener).
    pub fn new(
        loopback: bool,
        public_hosts: Vec<Authority>,
        allowed_origins: Vec<AllowedOrigin>,
    ) -> CrossSitePolicy {
        CrossSitePolicy {
            check_host: loopback || !public_hosts.is_empty(),
            public_hosts,
            allowed_origins,
        }
    }

    /// The `--allow-origin` origins.
    pub fn allowed_origins(&self) -> &[AllowedOrigin] {
        &self.allowed_origins
    }

    /// Decides a request from its head: `Ok` to serve it.
    pub fn check(&self, head: &RequestHead<'_>) -> Result<(), CrossSiteRefusal> {
        if head.absolute_target {
            return Err(CrossSiteRefusal::AbsoluteTarget);
        }
        if head.host_headers > 1 {
            return Err(CrossSiteRefusal::RepeatedHost);
        }
        if head.origin_headers > 1 {
            return Err(CrossSiteRefusal::RepeatedOrigin);
        }
        let host = head.host.map(Authority::parse);
        if self.check_host {
            let host = match &host {
                Some(Ok(h)) => h,
                _ => return Err(CrossSiteRefusal::HostMissing),
            };
            let loopback = LOOPBACK_HOSTS.contains(&host.host.as_str());
            if !loopback && !self.public_hosts.iter().any(|p| p.covers(host)) {
                return Err(CrossSiteRefusal::HostNotAllowed);
            }
        }
        if let Some(origin) = head.origin {
            let own = host.and_then(Result::ok);
            if !self.origin_allowed(origin, own.as_ref()) {
                return Err(CrossSiteRefusal::OriginNotAllowed);
            }
        }
        let safe = matches!(*head.method, Method::GET | Method::HEAD | Method::OPTIONS);
        if !safe && !head.content_type.is_some_and(is_json) {
            return Err(CrossSiteRefusal::NotJson);
        }
        Ok(())
    }

    /// The `--allow-origin` entry an `Origin` header names, if any.
    fn listed(&self, origin: &[u8]) -> Option<&AllowedOrigin> {
        let origin = std::str::from_utf8(origin).ok()?;
        self.allowed_origins
            .iter()
            .find(|o| o.0.eq_ignore_ascii_case(origin))
    }

    fn origin_allowed(&self, origin: &[u8], own: Option<&Authority>) -> bool {
        let Ok(origin) = std::str::from_utf8(origin) else {
            return false;
        };
        if self.listed(origin.as_bytes()).is_some() {
            return true;
        }
        let origin = origin.to_ascii_lowercase();
        own.is_some_and(|own| {
            origin == origin_text("http", own) || origin == origin_text("https", own)
        })
    }
}

/// Whether a `Content-Type` value's media type is `application/json`
/// (parameters such as `charset` allowed).
fn is_json(value: &[u8]) -> bool {
    let media = value.split(|b| *b == b';').next().unwrap_or_default();
    media.trim_ascii().eq_ignore_ascii_case(b"application/json")
}

/// The middleware: refuses what [`CrossSitePolicy::check`] refuses.
pub async fn defend(
    State(policy): State<Arc<CrossSitePolicy>>,
    request: Request,
    next: Next,
) -> Response {
    let headers = request.headers();
    let head = RequestHead {
        method: request.method(),
        host: headers.get(header::HOST).map(HeaderValue::as_bytes),
        origin: headers.get(header::ORIGIN).map(HeaderValue::as_bytes),
        content_type: headers.get(header::CONTENT_TYPE).map(HeaderValue::as_bytes),
        absolute_target: request.uri().scheme().is_some() || request.uri().authority().is_some(),
        host_headers: headers.get_all(header::HOST).iter().count(),
        origin_headers: headers.get_all(header::ORIGIN).iter().count(),
    };
    let listed = head.origin.and_then(|o| policy.listed(o));
    match policy.check(&head) {
        Ok(()) => next.run(request).await,
        Err(refusal) => {
            let mut response = refusal.problem().into_response();
            // A listed page may read why it was refused (a 415, a 421):
            // the refusal carries the CORS headers the API would.
            if let Some(origin) = listed.and_then(|o| HeaderValue::from_str(o.as_str()).ok()) {
                let headers = response.headers_mut();
                headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
                headers.insert(header::VARY, HeaderValue::from_static("origin"));
            }
            response
        }
    }
}

/// CORS for the listed origins: preflights answered, the origin echoed
/// (never `*`, so credentials never meet a wildcard), the headers a
/// client needs allowed (`Authorization` only when the daemon has a
/// token) and exposed. `None` without `--allow-origin`: no CORS headers.
pub fn cors_layer(policy: &CrossSitePolicy, token: bool) -> Option<CorsLayer> {
    if policy.allowed_origins.is_empty() {
        return None;
    }
    let origins: Vec<HeaderValue> = policy
        .allowed_origins
        .iter()
        .filter_map(|o| HeaderValue::from_str(o.as_str()).ok())
        .collect();
    let mut allowed = vec![
        header::CONTENT_TYPE,
        HeaderName::from_static("last-event-id"),
    ];
    if token {
        allowed.push(header::AUTHORIZATION);
    }
    Some(
        CorsLayer::new()
            .allow_origin(AllowOrigin::list(origins))
            .allow_methods([Method::GET, Method::POST, Method::DELETE])
            .allow_headers(allowed)
            .expose_headers([
                header::LOCATION,
                header::RETRY_AFTER,
                header::WWW_AUTHENTICATE,
            ])
            .max_age(PREFLIGHT_MAX_AGE),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Case {
        method: Method,
        host: Option<&'static str>,
        origin: Option<&'static str>,
        content_type: Option<&'static str>,
        expect: Result<(), CrossSiteRefusal>,
    }

    fn case(host: Option<&'static str>, expect: Result<(), CrossSiteRefusal>) -> Case {
        Case {
            method: Method::GET,
            host,
            origin: None,
            content_type: None,
            expect,
        }
    }

    fn check(policy: &CrossSitePolicy, cases: &[Case]) {
        for (i, c) in cases.iter().enumerate() {
            let head = RequestHead {
                method: &c.method,
                host: c.host.map(str::as_bytes),
                origin: c.origin.map(str::as_bytes),
                content_type: c.content_type.map(str::as_bytes),
                host_headers: usize::from(c.host.is_some()),
                origin_headers: usize::from(c.origin.is_some()),
                ..RequestHead::default()
            };
            assert_eq!(
                policy.check(&head),
                c.expect,
                "case {i}: {:?} {:?} {:?}",
                c.host,
                c.origin,
                c.content_type
            );
        }
    }

    fn loopback_policy() -> CrossSitePolicy {
        CrossSitePolicy::new(
            true,
            vec![parse_public_host("keel.internal:8443").unwrap()],
            vec![AllowedOrigin::parse("http://127.0.0.1:5555").unwrap()],
        )
    }

    #[test]
    fn host_rule_serves_loopback_names_and_listed_hosts_only() {
        use CrossSiteRefusal::*;
        check(
            &loopback_policy(),
            &[
                case(Some("127.0.0.1:7878"), Ok(())),
                case(Some("localhost:7878"), Ok(())),
                case(Some("LOCALHOST"), Ok(())),
                case(Some("[::1]:7878"), Ok(())),
                case(Some("keel.internal:8443"), Ok(())),
                case(Some("keel.internal:8444"), Err(HostNotAllowed)),
                case(Some("attacker.example:7878"), Err(HostNotAllowed)),
                case(Some("localhost.attacker.example"), Err(HostNotAllowed)),
                case(Some("127.0.0.1.nip.io"), Err(HostNotAllowed)),
                case(Some("localhost."), Err(HostNotAllowed)),
                case(Some("127.0.0.1:99999"), Err(HostMissing)),
                case(Some("127.0.0.1:"), Err(HostMissing)),
                case(Some("local host"), Err(HostMissing)),
                case(Some(""), Err(HostMissing)),
                case(None, Err(HostMissing)),
            ],
        );
    }

    #[test]
    fn a_non_loopback_listener_leaves_host_to_the_token() {
        let policy = CrossSitePolicy::new(false, vec![], vec![]);
        check(&policy, &[case(Some("keel.example.com"), Ok(()))]);
    }

    #[test]
    fn origin_rule_allows_own_and_listed_origins() {
        use CrossSiteRefusal::*;
        let with_origin = |host, origin, expect| Case {
            method: Method::GET,
            host: Some(host),
            origin: Some(origin),
            content_type: None,
            expect,
        };
        check(
            &loopback_policy(),
            &[
                with_origin("127.0.0.1:7878", "http://127.0.0.1:7878", Ok(())),
                with_origin("localhost:7878", "http://LOCALHOST:7878", Ok(())),
                with_origin("127.0.0.1:7878", "http://127.0.0.1:5555", Ok(())),
                with_origin(
                    "127.0.0.1:7878",
                    "http://127.0.0.1:5556",
                    Err(OriginNotAllowed),
                ),
                with_origin(
                    "127.0.0.1:7878",
                    "https://127.0.0.1:5555",
                    Err(OriginNotAllowed),
                ),
                with_origin(
                    "127.0.0.1:7878",
                    "http://localhost:7878",
                    Err(OriginNotAllowed),
                ),
                with_origin("127.0.0.1:7878", "null", Err(OriginNotAllowed)),
                with_origin(
                    "127.0.0.1:7878",
                    "http://evil.example",
                    Err(OriginNotAllowed),
                ),
            ],
        );
    }

    #[test]
    fn state_changing_requests_need_a_json_content_type() {
        use CrossSiteRefusal::*;
        let post = |content_type, expect| Case {
            method: Method::POST,
            host: Some("127.0.0.1:7878"),
            origin: None,
            content_type,
            expect,
        };
        check(
            &loopback_policy(),
            &[
                post(Some("application/json"), Ok(())),
                post(Some("Application/JSON; charset=utf-8"), Ok(())),
                post(Some("text/plain"), Err(NotJson)),
                post(Some("text/plain; x=application/json"), Err(NotJson)),
                post(Some("application/x-www-form-urlencoded"), Err(NotJson)),
                post(Some("multipart/form-data; boundary=x"), Err(NotJson)),
                post(Some("application/jsonx"), Err(NotJson)),
                post(None, Err(NotJson)),
            ],
        );
    }

    #[test]
    fn an_ambiguous_head_is_refused_before_any_other_rule() {
        let policy = CrossSitePolicy::new(true, vec![], vec![]);
        let good = RequestHead {
            host: Some(b"127.0.0.1:7878"),
            host_headers: 1,
            ..RequestHead::default()
        };
        assert_eq!(policy.check(&good), Ok(()));
        for (head, refusal) in [
            (
                RequestHead {
                    absolute_target: true,
                    ..good
                },
                CrossSiteRefusal::AbsoluteTarget,
            ),
            (
                RequestHead {
                    host_headers: 2,
                    ..good
                },
                CrossSiteRefusal::RepeatedHost,
            ),
            (
                RequestHead {
                    origin: Some(b"http://127.0.0.1:7878"),
                    origin_headers: 2,
                    ..good
                },
                CrossSiteRefusal::RepeatedOrigin,
            ),
        ] {
            assert_eq!(policy.check(&head), Err(refusal));
            assert_eq!(refusal.problem().status(), StatusCode::BAD_REQUEST);
        }
        // On any listener.
        let open = CrossSitePolicy::new(false, vec![], vec![]);
        let absolute = RequestHead {
            absolute_target: true,
            ..good
        };
        assert_eq!(open.check(&absolute), Err(CrossSiteRefusal::AbsoluteTarget));
    }

    /// The middleware takes any target that is not a path as ambiguous:
    /// an authority-form target (`host:port`, an authority without a
    /// scheme) as well as an absolute URL (cargo-mutants, #32: `defend`'s
    /// `||` read as `&&` let `host:port` through).
    #[tokio::test]
    async fn the_middleware_refuses_any_target_that_is_not_a_path() {
        use tower_service::Service;
        let policy = Arc::new(CrossSitePolicy::new(true, vec![], vec![]));
        let app = axum::Router::new()
            .fallback(|| async { "served" })
            .layer(axum::middleware::from_fn_with_state(policy, defend));
        for (target, status) in [
            ("/v1/runs", StatusCode::OK),
            ("http://127.0.0.1:7878/v1/runs", StatusCode::BAD_REQUEST),
            ("127.0.0.1:7878", StatusCode::BAD_REQUEST),
        ] {
            let request = Request::builder()
                .uri(target)
                .header(header::HOST, "127.0.0.1:7878")
                .body(axum::body::Body::empty())
                .unwrap();
            let response = app.clone().call(request).await.unwrap();
            assert_eq!(response.status(), status, "{target}");
        }
    }

    #[test]
    fn flag_values_are_checked() {
        assert_eq!(
            AllowedOrigin::parse("HTTP://Example.COM:80/")
                .unwrap()
                .as_str(),
            "http://example.com:80"
        );
        for bad in [
            "*",
            "null",
            "example.com",
            "ftp://example.com",
            "http://example.com/path",
            "http://user@example.com",
            "http://*.example.com",
            "http://",
        ] {
            let e = AllowedOrigin::parse(bad).unwrap_err();
            assert!(e.to_string().contains("--allow-origin"), "{bad}: {e}");
        }
        assert!(parse_public_host("keel.example.com").is_ok());
        assert!(parse_public_host("a b").is_err());
        let long = "a".repeat(MAX_NAME_BYTES + 1);
        assert!(matches!(
            parse_public_host(&long),
            Err(CrossSiteConfigError::TooLong { len, .. }) if len == MAX_NAME_BYTES + 1
        ));
    }
}
