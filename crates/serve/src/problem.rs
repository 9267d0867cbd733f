//! RFC 9457 problem details: every error the daemon returns.

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

/// The status [`Problem::new`] takes (the `http` crate's, through axum),
/// so that a host's [`RunFactory`](crate::RunFactory) needs no HTTP
/// dependency of its own to refuse a body.
pub use axum::http::StatusCode;

/// The media type of a problem document.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// One problem: `type`, `title`, `status`, `detail` and extension members.
#[derive(Debug, Clone)]
pub struct Problem {
    status: StatusCode,
    kind: &'static str,
    title: &'static str,
    detail: String,
    extensions: Map<String, Value>,
}

impl Problem {
    /// A problem of `kind` (the last segment of its `type` URI).
    pub fn new(
        status: StatusCode,
        kind: &'static str,
        title: &'static str,
        detail: impl Into<String>,
    ) -> Problem {
        Problem {
            status,
            kind,
            title,
            detail: detail.into(),
            extensions: Map::new(),
        }
    }

    /// Adds an extension member.
    pub fn with(mut self, name: &str, value: impl Into<Value>) -> Problem {
        self.extensions.insert(name.to_owned(), value.into());
        self
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The document.
    pub fn to_json(&self) -> Value {
        let mut doc = Map::new();
        doc.insert(
            "type".to_owned(),
            json!(format!("urn:keel:problem:{}", self.kind)),
        );
        doc.insert("title".to_owned(), json!(self.title));
        doc.insert("status".to_owned(), json!(self.status.as_u16()));
        doc.insert("detail".to_owned(), json!(self.detail));
        for (k, v) in &self.extensions {
            doc.insert(k.clone(), v.clone());
        }
        Value::Object(doc)
    }

    /// 404 for a run the daemon does not know.
    pub fn unknown_run(run_id: &str) -> Problem {
        Problem::new(
            StatusCode::NOT_FOUND,
            "run-not-found",
            "Unknown run",
            "no live or stored run has this id",
        )
        .with("run_id", run_id)
    }

    /// 500 for a journal failure (the message names no content).
    pub fn journal(e: impl std::fmt::Display) -> Problem {
        Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "journal",
            "The journal could not be read",
            e.to_string(),
        )
    }

    /// 400 for a cursor past the last committed sequence.
    pub fn cursor_ahead(requested: u64, latest: u64) -> Problem {
        Problem::new(
            StatusCode::BAD_REQUEST,
            "cursor-ahead",
            "Cursor ahead of the run",
            format!("cursor {requested} is ahead of the run's last sequence {latest}"),
        )
        .with("requested", requested)
        .with("latest", latest)
    }

    /// 410 for a cursor older than anything that can still be served.
    pub fn cursor_expired(requested: u64, earliest: u64, latest: u64) -> Problem {
        let recovery = earliest.saturating_sub(1);
        Problem::new(
            StatusCode::GONE,
            "cursor-expired",
            "Cursor expired",
            format!(
                "the events after {requested} are no longer available: available {earliest}..={latest}; resume after {recovery}"
            ),
        )
        .with("requested", requested)
        .with("earliest", earliest)
        .with("latest", latest)
        .with("recovery_cursor", recovery)
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let body = self.to_json().to_string();
        let mut response = (self.status, body).into_response();
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        response
    }
}

/// The headers an error response keeps when it is rewritten as a problem
/// document: they tell the client what to do next.
const KEPT_HEADERS: [header::HeaderName; 3] =
    [header::ALLOW, header::RETRY_AFTER, header::WWW_AUTHENTICATE];

/// The outermost layer: an error response that is not a problem document
/// already (axum's own 405, a path that is not valid percent-encoded
/// UTF-8, a query it cannot read) becomes one of the same status, so every
/// error the daemon returns is a problem document. The original body is
/// dropped, not echoed: it may quote the request.
pub async fn as_problem(response: Response) -> Response {
    let status = response.status();
    let is_problem = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(PROBLEM_JSON.as_bytes()));
    if is_problem || !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let (kind, title, detail) = match status {
        StatusCode::METHOD_NOT_ALLOWED => (
            "method-not-allowed",
            "Method not allowed",
            "the route does not take this method; the Allow header lists those it takes",
        ),
        StatusCode::BAD_REQUEST => (
            "bad-request",
            "Bad request",
            "the path or query could not be read (for example a bad percent-encoding or a segment that is not UTF-8)",
        ),
        _ => (
            "http-error",
            status.canonical_reason().unwrap_or("HTTP error"),
            "the request could not be served",
        ),
    };
    let mut rewritten = Problem::new(status, kind, title, detail).into_response();
    for name in KEPT_HEADERS {
        if let Some(value) = response.headers().get(&name) {
            rewritten.headers_mut().insert(name, value.clone());
        }
    }
    rewritten
}
