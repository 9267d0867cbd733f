//! Transport errors as typed problems: a reqwest error (no HTTP status)
//! becomes `timeout` or `unavailable`, both retryable, with the error's
//! sources as detail and never its URL.

use keel_stream::{ProblemKind, RawProblem};

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
