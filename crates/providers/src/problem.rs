//! The problems both decoders and classifiers build: the message shape
//! (`HTTP 429 rate_limit_exceeded: …`, `stream error overloaded_error: …`),
//! a terminal failure pushed to the stream, a `protocol` failure, a JSON
//! parse failure that never quotes its input, and the tool-call bound.

use crate::pump::Flow;
use keel_stream::{ProblemKind, RawItem, RawProblem};
use std::collections::VecDeque;

/// `HTTP {status}` (or `stream error` for an error inside a 200 stream),
/// then the provider's safe error code or type, then its message.
pub(crate) fn problem_message(status: Option<u16>, code: Option<&str>, message: &str) -> String {
    let mut out = match status {
        Some(status) => format!("HTTP {status}"),
        None => "stream error".to_owned(),
    };
    if let Some(code) = code {
        out.push(' ');
        out.push_str(code);
    }
    if !message.is_empty() {
        out.push_str(": ");
        out.push_str(message);
    }
    out
}

/// Pushes `problem` as the stream's terminal.
pub(crate) fn fail(out: &mut VecDeque<RawItem>, problem: RawProblem) -> Flow {
    out.push_back(RawItem::Failure(problem));
    Flow::Done
}

/// Pushes a `protocol` failure (not retryable) as the stream's terminal.
pub(crate) fn protocol(out: &mut VecDeque<RawItem>, message: impl Into<String>) -> Flow {
    fail(out, RawProblem::new(ProblemKind::Protocol, message, false))
}

/// The `protocol` failure for one tool call more than `max`
/// (`Limits::tool_calls_per_stream`).
pub(crate) fn too_many_calls(out: &mut VecDeque<RawItem>, max: usize) -> Flow {
    protocol(
        out,
        format!("more than {max} tool calls in one stream (tool_calls_per_stream)"),
    )
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn messages_have_one_shape() {
        assert_eq!(
            problem_message(Some(429), Some("rate_limit"), "slow down"),
            "HTTP 429 rate_limit: slow down"
        );
        assert_eq!(problem_message(None, None, ""), "stream error");
        assert_eq!(problem_message(Some(500), None, ""), "HTTP 500");
    }

    #[test]
    fn bad_json_never_quotes_the_input() {
        let error = serde_json::from_str::<u32>("\"secret-content\"").unwrap_err();
        let problem = bad_json("a chunk", &error);
        assert_eq!(problem.kind, ProblemKind::Protocol);
        assert!(!problem.retryable);
        assert!(
            !problem.message.contains("secret-content"),
            "{}",
            problem.message
        );
        assert!(
            problem
                .message
                .starts_with("a chunk is not valid JSON: an unexpected shape")
        );
    }

    #[test]
    fn failures_are_terminal() {
        let mut out = VecDeque::new();
        assert_eq!(too_many_calls(&mut out, 2), Flow::Done);
        let Some(RawItem::Failure(p)) = out.pop_front() else {
            unreachable!("a failure was pushed")
        };
        assert_eq!(p.kind, ProblemKind::Protocol);
        assert!(
            p.message.contains("more than 2 tool calls"),
            "{}",
            p.message
        );
    }
}
