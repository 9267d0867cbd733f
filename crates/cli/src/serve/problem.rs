//! RFC 9457 problem details: every error the daemon returns.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

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
