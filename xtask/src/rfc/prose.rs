//! The rules about an RFC's prose rather than its skeleton: no `XXX` debt
//! markers, and the grandfather comment (its exact shape, and only in RFCs
//! older than the format).

use super::markdown::{ProseLine, without_code_spans};
use super::{Rule, Violation};

/// The day the RFC format was adopted (the date of
/// `docs/rfc/implemented/2026-11-30-rfc-process.md`). Only an RFC whose file
/// name is dated before it may carry [`GRANDFATHER_COMMENT`].
pub const FORMAT_ADOPTED: &str = "2026-11-30";

/// The exact line a pre-format RFC whose alternatives cannot be
/// reconstructed from the record carries in place of
/// `## Alternatives considered`.
pub const GRANDFATHER_COMMENT: &str =
    "<!-- rfc-format: alternatives-not-recorded (pre-format RFC) -->";

/// Text that marks a line as an attempt at the grandfather comment: the
/// comment's key phrase anywhere, or its prefix inside an HTML comment.
const GRANDFATHER_PHRASES: [&str; 2] = ["alternatives-not-recorded", "alternatives not recorded"];
const GRANDFATHER_PREFIX: &str = "rfc-format";

/// The longest excerpt of a line quoted in a message.
const EXCERPT_CHARS: usize = 72;

/// What the section rules need to know from the prose.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ProseFacts {
    /// The line of the first grandfather comment (well-formed or not), which
    /// stands in for `## Alternatives considered`.
    pub(crate) grandfather: Option<usize>,
}

/// Checks the prose of one RFC. `date` is the `YYYY-MM-DD` of its file
/// name (None when the name is malformed, which `file-name` reports);
/// `alternatives` is the line of its `## Alternatives considered` heading.
pub(crate) fn check_prose(
    path: &str,
    date: Option<&str>,
    prose: &[ProseLine<'_>],
    alternatives: Option<usize>,
    out: &mut Vec<Violation>,
) -> ProseFacts {
    for line in prose {
        if let Some(column) = debt_marker(line.text) {
            out.push(Violation::at(
                path,
                line.number,
                Rule::DebtMarker,
                format!(
                    "an `XXX` debt marker at column {column}; say what is true now, or \
                     record the open work where it is tracked, instead of a marker"
                ),
            ));
        }
    }
    let grandfather = check_grandfather(path, prose, out);
    if let Some(at) = grandfather {
        check_grandfather_use(path, date, at, alternatives, out);
    }
    ProseFacts { grandfather }
}

/// The 1-based column of a standalone `XXX` outside inline code, if any.
fn debt_marker(line: &str) -> Option<usize> {
    let text = without_code_spans(line);
    let is_word = |c: char| c.is_alphanumeric() || c == '_';
    text.match_indices("XXX").find_map(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + 3..].chars().next();
        let standalone = before.is_none_or(|c| !is_word(c)) && after.is_none_or(|c| !is_word(c));
        standalone.then(|| text[..at].chars().count() + 1)
    })
}

/// Reports grandfather comments that are not exactly [`GRANDFATHER_COMMENT`]
/// or appear twice; returns the line of the first one.
fn check_grandfather(
    path: &str,
    prose: &[ProseLine<'_>],
    out: &mut Vec<Violation>,
) -> Option<usize> {
    let mut first: Option<usize> = None;
    for line in prose {
        let exact = line.text == GRANDFATHER_COMMENT;
        let attempt = exact || is_attempt(line.text);
        if !attempt {
            continue;
        }
        if !exact {
            out.push(Violation::at(
                path,
                line.number,
                Rule::GrandfatherShape,
                format!(
                    "`{}` is not the grandfather comment; write exactly \
                     `{GRANDFATHER_COMMENT}` on a line of its own",
                    excerpt(line.text)
                ),
            ));
        } else if let Some(earlier) = first {
            out.push(Violation::at(
                path,
                line.number,
                Rule::GrandfatherShape,
                format!(
                    "the grandfather comment appears again (first on line {earlier}); keep one"
                ),
            ));
        }
        first.get_or_insert(line.number);
    }
    first
}

/// Whether `line` (outside inline code) tries to be the grandfather comment.
fn is_attempt(line: &str) -> bool {
    let text = without_code_spans(line).to_ascii_lowercase();
    GRANDFATHER_PHRASES.iter().any(|p| text.contains(p))
        || (text.contains("<!--") && text.contains(GRANDFATHER_PREFIX))
}

/// The comment at line `at` is allowed only in a pre-format RFC without an
/// Alternatives section.
fn check_grandfather_use(
    path: &str,
    date: Option<&str>,
    at: usize,
    alternatives: Option<usize>,
    out: &mut Vec<Violation>,
) {
    // Both are validated `YYYY-MM-DD`, so text order is date order.
    if date.is_none_or(|date| date >= FORMAT_ADOPTED) {
        let dated = date.map_or_else(
            || "the file name carries no valid date".to_owned(),
            |date| format!("the RFC is dated {date}"),
        );
        out.push(Violation::at(
            path,
            at,
            Rule::GrandfatherDate,
            format!(
                "the grandfather comment is only for RFCs dated before the format's adoption \
                 ({FORMAT_ADOPTED}), and {dated}; write `## Alternatives considered` instead"
            ),
        ));
    }
    if let Some(section) = alternatives {
        out.push(Violation::at(
            path,
            at,
            Rule::GrandfatherRedundant,
            format!(
                "the grandfather comment stands in for `## Alternatives considered`, which \
                 this RFC has (line {section}); remove the comment"
            ),
        ));
    }
}

fn excerpt(line: &str) -> String {
    let line = line.trim();
    if line.chars().count() <= EXCERPT_CHARS {
        return line.replace('`', "'");
    }
    let cut: String = line.chars().take(EXCERPT_CHARS).collect();
    format!("{}…", cut.replace('`', "'"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debt_markers() {
        assert_eq!(debt_marker("XXX: fix"), Some(1));
        assert_eq!(debt_marker("text (XXX) more"), Some(7));
        assert_eq!(debt_marker("<!-- XXX legacy -->"), Some(6));
        for clean in ["`XXX` in code", "XXXL", "aXXX", "XXXX", "xxx", "X-X-X"] {
            assert_eq!(debt_marker(clean), None, "{clean}");
        }
    }

    #[test]
    fn attempts_at_the_grandfather_comment() {
        for attempt in [
            "<!-- rfc-format: alternatives-not-known -->",
            "<!--rfc-format:alternatives-not-recorded-->",
            "rfc-format: alternatives-not-recorded (pre-format RFC)",
            "<!-- Alternatives not recorded -->",
        ] {
            assert!(is_attempt(attempt), "{attempt}");
        }
        for prose in [
            "The rfc-format gate of the seed.",
            "`<!-- rfc-format: alternatives-not-recorded (pre-format RFC) -->`",
            "<!-- a note -->",
        ] {
            assert!(!is_attempt(prose), "{prose}");
        }
    }

    #[test]
    fn excerpts_are_bounded() {
        let long = "x".repeat(200);
        assert_eq!(excerpt(&long).chars().count(), EXCERPT_CHARS + 1);
        assert_eq!(excerpt(" `a` "), "'a'");
    }
}
