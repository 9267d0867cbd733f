//! The one strict reading of the JSON a client or an operator hands Keel:
//! every request body `keel serve` takes (scenarios for `POST /v1/runs`
//! and `/messages`, `POST /v1/chat`, interaction answers) and every
//! scenario file is read with [`parse`] before its own checks.
//!
//! It is `keel-message`'s I-JSON parser
//! ([`crate::canonical::parse_value`]): a member name repeated
//! anywhere in the document is refused, naming the JSON path of the
//! repeat, so no reader ever sees a last-wins value (`"approved":false,
//! "approved":true` is not an approval); so are lone surrogates, integers
//! beyond ±(2^53−1), and nesting deeper than [`MAX_DEPTH`] (checked while
//! parsing, so a deep document costs no deep recursion).

use crate::{JsonError, Limits};
use serde_json::Value;

/// The deepest nesting a document may have (`[]` is 1 deep).
pub const MAX_DEPTH: usize = 64;

/// Parses `text` strictly: one JSON value, and nothing after it.
pub fn parse(text: &str) -> Result<Value, JsonError> {
    let limits = Limits {
        json_depth: MAX_DEPTH,
        ..Limits::default()
    };
    crate::canonical::parse_value(text, &limits)
}

/// The rules of [`parse`] beyond syntax, for a reader with a typed
/// parser of its own: `Ok` also for text that is not JSON at all (or holds
/// a lone surrogate), which that parser then refuses with its line and
/// column.
pub fn check(text: &str) -> Result<(), JsonError> {
    match parse(text) {
        Ok(_) | Err(JsonError::Syntax { .. } | JsonError::LoneSurrogate { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

/// The JSON path of what [`parse`] refused (`$` is the whole document).
pub fn path(e: &JsonError) -> String {
    e.path().unwrap_or("$").to_owned()
}

/// What the document must be, naming the rule it broke (never content).
pub fn rule(e: &JsonError) -> &'static str {
    match e {
        JsonError::DuplicateKey { .. } => {
            "an object without duplicate member names (rule json.duplicate_key)"
        }
        JsonError::TooDeep { .. } => "JSON nested at most 64 deep (rule limits.json_depth)",
        JsonError::UnsafeInteger { .. } => "an integer within ±(2^53-1) (rule json.unsafe_integer)",
        JsonError::LoneSurrogate { .. } => {
            "JSON text without lone UTF-16 surrogates (rule json.lone_surrogate)"
        }
        _ => "one JSON value (rule json.syntax)",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicates_are_refused_at_any_depth_with_their_path() {
        let e = parse(r#"{"a":1,"a":2}"#).unwrap_err();
        assert_eq!(path(&e), "$.a");
        assert!(rule(&e).contains("json.duplicate_key"));
        let e = parse(r#"{"m":[{"x":{"approved":false,"approved":true}}]}"#).unwrap_err();
        assert_eq!(path(&e), "$.m[0].x.approved");
        assert!(parse(r#"{"a":{"b":1},"b":{"a":1}}"#).is_ok());
    }

    #[test]
    fn depth_is_bounded_at_max_depth() {
        let nest = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(parse(&nest(MAX_DEPTH)).is_ok());
        let e = parse(&nest(MAX_DEPTH + 1)).unwrap_err();
        assert!(rule(&e).contains("limits.json_depth"), "{e}");
        assert!(parse("{} {}").is_err(), "one value only");
    }

    /// Each refusal names its own rule (cargo-mutants, #32: the unsafe
    /// integer and lone surrogate arms of `rule` were untested).
    #[test]
    fn each_refusal_names_its_rule() {
        let deep = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        for (text, named) in [
            (r#"{"a":1,"a":2}"#, "json.duplicate_key"),
            (deep.as_str(), "limits.json_depth"),
            ("[9007199254740992]", "json.unsafe_integer"),
            (r#"["\ud800"]"#, "json.lone_surrogate"),
            ("[1,]", "json.syntax"),
        ] {
            let e = parse(text).unwrap_err();
            assert!(rule(&e).contains(named), "{text:?}: {}", rule(&e));
        }
        assert!(parse("[9007199254740991]").is_ok(), "2^53-1 is safe");
    }

    /// `check` refuses what only the strict reading refuses, and leaves
    /// what is not JSON (or holds a lone surrogate) to the typed parser.
    #[test]
    fn check_refuses_only_the_strict_rules() {
        assert_eq!(check(r#"{"a":1}"#), Ok(()));
        assert_eq!(check("{"), Ok(()), "not JSON: the typed parser says where");
        assert_eq!(check(r#"["\ud800"]"#), Ok(()));
        for text in [r#"{"a":1,"a":2}"#, "[9007199254740992]"] {
            assert!(check(text).is_err(), "{text}");
        }
    }
}
