//! Decoding values from JSON text with every rule enforced, and the
//! helper that keeps serde's messages from echoing input values.

use crate::error::MessageError;
use serde::de::DeserializeOwned;

/// Why JSON text did not decode into a valid value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The text was not JSON of the expected shape. The message has every
    /// double-quoted span from the input replaced by `"…"`, so no string
    /// value is echoed.
    #[error("JSON shape error at line {line} column {column}: {message}")]
    Json {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What was wrong, with input strings elided.
        message: String,
    },
    /// The JSON had the right shape but broke a rule or bound.
    #[error(transparent)]
    Invalid(#[from] MessageError),
}

/// Replaces every double-quoted span with `"…"`, and the backticked value
/// after `unknown variant`, so that a serde message (`invalid type: string
/// "sk-…"`, ``unknown variant `sk-…` ``) never echoes an input value. Member
/// names (``unknown field `x` ``) and the expected alternatives are kept.
pub fn elide_values(message: &str) -> String {
    let message = elide_quoted_strings(message);
    match message.split_once("unknown variant `") {
        Some((head, rest)) => match rest.split_once('`') {
            Some((_, tail)) => format!("{head}unknown variant `…`{tail}"),
            None => format!("{head}unknown variant `…`"),
        },
        None => message,
    }
}

fn elide_quoted_strings(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut in_quote = false;
    let mut escaped = false;
    for c in message.chars() {
        if in_quote {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_quote = false;
                out.push_str("…\"");
            }
        } else {
            out.push(c);
            if c == '"' {
                in_quote = true;
            }
        }
    }
    if in_quote {
        out.push_str("…\"");
    }
    out
}

pub(crate) fn from_json<T: DeserializeOwned>(json: &str) -> Result<T, DecodeError> {
    serde_json::from_str(json).map_err(|e| {
        let full = e.to_string();
        // serde_json appends " at line L column C"; we carry those as fields.
        let text = full
            .rsplit_once(" at line ")
            .map_or(full.as_str(), |(head, _)| head);
        DecodeError::Json {
            line: e.line(),
            column: e.column(),
            message: elide_values(text),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::elide_values as elide_quoted;

    #[test]
    fn quoted_spans_are_elided() {
        assert_eq!(
            elide_quoted(r#"invalid type: string "sk-abc\"def", expected `id`"#),
            r#"invalid type: string "…", expected `id`"#
        );
        assert_eq!(elide_quoted(r#"open "secret"#), r#"open "…""#);
        assert_eq!(
            elide_quoted("unknown variant `sk-x`, expected `a`"),
            "unknown variant `…`, expected `a`"
        );
    }
}
