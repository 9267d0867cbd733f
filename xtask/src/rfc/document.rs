//! One RFC file: the header block (title and Status line), then the
//! skeleton ([`super::sections`]) and prose ([`super::prose`]) rules.

use super::markdown::prose_lines;
use super::prose::check_prose;
use super::sections::{Heading, check_sections};
use super::tree::check_file_name;
use super::{Lifecycle, Rule, Violation};

/// What the index needs from one RFC file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Document {
    /// The title from a well-formed `# RFC: <title>` first line.
    pub title: Option<String>,
    /// The value of the `Status:` line, trimmed, if there is one.
    pub status: Option<String>,
}

/// Checks one RFC's text against the rules of its lifecycle folder.
///
/// `path` labels the violations; the date in its file name decides whether
/// the grandfather comment is allowed.
pub fn check_document(path: &str, lifecycle: Lifecycle, text: &str) -> (Document, Vec<Violation>) {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut doc = Document {
        title: lines.first().copied().and_then(parse_title),
        status: None,
    };
    let title_at = check_title(path, &lines, doc.title.is_some(), &mut out);
    let status_line = status_line(&lines, title_at, doc.title.is_some());
    doc.status = check_status(path, lifecycle, status_line, &mut out);

    let prose = prose_lines(&lines);
    let headings = Heading::collect(&prose);
    let alternatives = headings
        .iter()
        .find(|h| h.text == super::sections::ALTERNATIVES)
        .map(|h| h.line);
    let facts = check_prose(path, file_date(path), &prose, alternatives, &mut out);
    check_sections(path, lifecycle, &headings, facts, &mut out);
    (doc, out)
}

/// The `YYYY-MM-DD` of a well-named RFC file at `path`.
fn file_date(path: &str) -> Option<&str> {
    let name = path.rsplit('/').next().unwrap_or(path);
    check_file_name(name).ok()?;
    name.get(..10)
}

/// Reports a missing title; returns the index of the line that holds the
/// title, or stands in for it (the first non-blank line) when it is missing,
/// so that the Status line is still found.
fn check_title(path: &str, lines: &[&str], has_title: bool, out: &mut Vec<Violation>) -> usize {
    if has_title {
        return 0;
    }
    let first_non_blank = lines.iter().position(|line| !line.trim().is_empty());
    let first = lines.first().copied().unwrap_or("");
    let found = match first_non_blank {
        None => "the file is empty".to_owned(),
        Some(0) => format!("the first line is `{}`", first.trim_end()),
        Some(i) => format!(
            "the first line is blank (the text starts on line {})",
            i + 1
        ),
    };
    out.push(Violation::at(
        path,
        1,
        Rule::TitleMissing,
        format!("{found}; an RFC starts with `# RFC: <title>`"),
    ));
    first_non_blank.unwrap_or(0)
}

/// The Status line, as (1-based number, text): the first non-blank line
/// after the title, or the stand-in title line itself if the title is
/// missing and the file opens with its Status line.
fn status_line<'a>(
    lines: &[&'a str],
    title_at: usize,
    has_title: bool,
) -> Option<(usize, &'a str)> {
    let at = match lines.get(title_at) {
        Some(line) if !has_title && looks_like_status(line) => Some(title_at),
        _ => lines
            .iter()
            .enumerate()
            .skip(title_at + 1)
            .find(|(_, line)| !line.trim().is_empty())
            .map(|(i, _)| i),
    };
    at.and_then(|i| lines.get(i).map(|line| (i + 1, *line)))
}

fn parse_title(line: &str) -> Option<String> {
    let title = line.strip_prefix("# RFC: ")?.trim();
    (!title.is_empty()).then(|| title.to_owned())
}

/// A line that is trying to be a Status line, however badly.
fn looks_like_status(line: &str) -> bool {
    line.trim_start_matches(|c: char| c.is_whitespace() || matches!(c, '*' | '_' | '-' | '>'))
        .get(..6)
        .is_some_and(|word| word.eq_ignore_ascii_case("status"))
}

/// Checks the Status line; returns its value as written, if there is one.
fn check_status(
    path: &str,
    lifecycle: Lifecycle,
    line: Option<(usize, &str)>,
    out: &mut Vec<Violation>,
) -> Option<String> {
    let expected = format!("`Status: {}`", lifecycle.status());
    let Some((number, line)) = line else {
        out.push(Violation::new(
            path,
            Rule::StatusMissing,
            format!("no Status line; after the title write {expected}"),
        ));
        return None;
    };
    let Some(rest) = line.strip_prefix("Status:") else {
        let looks = looks_like_status(line);
        let (rule, message) = if looks {
            (
                Rule::StatusInvalid,
                format!("`{}`: write exactly {expected}", line.trim()),
            )
        } else {
            (
                Rule::StatusMissing,
                format!(
                    "the first non-blank line after the title is `{}`, not a Status line; \
                     write {expected} there",
                    line.trim()
                ),
            )
        };
        out.push(Violation::at(path, number, rule, message));
        return looks.then(|| line.trim().to_owned());
    };
    let value = rest.trim();
    if let Some((rule, message)) = status_value_problem(value, lifecycle, &expected) {
        out.push(Violation::at(path, number, rule, message));
    }
    Some(value.to_owned())
}

/// What is wrong with the value of a `Status:` line, if anything.
fn status_value_problem(
    value: &str,
    lifecycle: Lifecycle,
    expected: &str,
) -> Option<(Rule, String)> {
    if has_date(value) {
        return Some((
            Rule::StatusDated,
            format!(
                "`Status: {value}` carries a date (the file name holds the proposal date, \
                 git history the rest); write {expected}"
            ),
        ));
    }
    let Some(status) = Lifecycle::ALL.into_iter().find(|l| l.status() == value) else {
        let first_word = value.split_whitespace().next().unwrap_or("");
        let why = if value.is_empty() {
            "the Status value is empty".to_owned()
        } else if Lifecycle::ALL
            .iter()
            .any(|l| l.status().eq_ignore_ascii_case(first_word))
        {
            format!("`{value}` is not just the status word (lowercase, no other words)")
        } else {
            format!("`{value}` is not one of proposed, implemented, rejected")
        };
        return Some((Rule::StatusInvalid, format!("{why}; write {expected}")));
    };
    (status != lifecycle).then(|| {
        (
            Rule::StatusFolderMismatch,
            format!(
                "`Status: {status}` but the file is in {}/; move the file to {status}/ \
                 (git mv) or write {expected}",
                lifecycle.folder()
            ),
        )
    })
}

/// A year (four digits in a row) or a digit-separator-digit run such as
/// `1/2` or `11.30`.
fn has_date(value: &str) -> bool {
    let bytes = value.as_bytes();
    let mut run = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if b.is_ascii_digit() {
            run += 1;
            if run >= 4 {
                return true;
            }
        } else {
            run = 0;
            let digit_before = i > 0 && bytes[i - 1].is_ascii_digit();
            let digit_after = bytes.get(i + 1).is_some_and(u8::is_ascii_digit);
            if matches!(b, b'-' | b'/' | b'.') && digit_before && digit_after {
                return true;
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(lifecycle: Lifecycle, text: &str) -> Vec<&'static str> {
        check_document("x.md", lifecycle, text)
            .1
            .iter()
            .map(|v| v.rule.name())
            .collect()
    }

    #[test]
    fn date_detection() {
        for dated in [
            "implemented 2026-01-01",
            "implemented (2026)",
            "proposed 11/30",
            "implemented on 30.11",
        ] {
            assert!(has_date(dated), "{dated}");
        }
        for plain in ["implemented", "implemented in v2", "rejected-ish", "a-b"] {
            assert!(!has_date(plain), "{plain}");
        }
    }

    #[test]
    fn title_and_status_on_crlf_with_bom() {
        let text = "\u{feff}# RFC: T\r\n\r\nStatus: proposed\r\n\r\n## Problem\r\np\r\n\
                    ## Proposal\r\np\r\n## Alternatives considered\r\na\r\n";
        let (doc, violations) = check_document("x.md", Lifecycle::Proposed, text);
        assert_eq!(violations, []);
        assert_eq!(doc.title.as_deref(), Some("T"));
        assert_eq!(doc.status.as_deref(), Some("proposed"));
    }

    #[test]
    fn empty_file_reports_header_and_skeleton() {
        assert_eq!(
            rules(Lifecycle::Implemented, ""),
            [
                "title-missing",
                "status-missing",
                "problem-missing",
                "alternatives-missing",
                "decision-missing",
                "consequences-missing"
            ]
        );
    }

    #[test]
    fn bold_status_is_invalid_not_missing() {
        let text = "# RFC: T\n\n**Status:** proposed\n\n## Problem\np\n## Proposal\np\n\
                    ## Alternatives considered\na\n";
        assert_eq!(rules(Lifecycle::Proposed, text), ["status-invalid"]);
    }

    #[test]
    fn near_miss_heading_is_named_in_the_hint() {
        let text = "# RFC: T\n\nStatus: proposed\n\n## Problem\np\n## Proposal\np\n\
                    ## Alternatives Considered\na\n";
        let (_, violations) = check_document("x.md", Lifecycle::Proposed, text);
        assert_eq!(violations.len(), 1);
        assert!(
            violations[0].message.contains(
                "found `## Alternatives Considered` on line 9; the heading must be exactly"
            ),
            "{}",
            violations[0]
        );
    }
}
