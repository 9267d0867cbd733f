//! The in-file rules: header block and per-lifecycle section skeleton.

use super::{Lifecycle, Rule, Violation};

const PROBLEM: &str = "Problem";
const ALTERNATIVES: &str = "Alternatives considered";
const PROPOSAL: &str = "Proposal";
const ACCEPTANCE: &str = "Acceptance criteria";
const RISKS: &str = "Risks";
const DECISION: &str = "Decision";
const CONSEQUENCES: &str = "Consequences";
const WHY_REJECTED: &str = "Why rejected";

/// What the index needs from one RFC file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Document {
    /// The title from a well-formed `# RFC: <title>` first line.
    pub title: Option<String>,
    /// The value of the `Status:` line, trimmed, if there is one.
    pub status: Option<String>,
}

#[derive(Debug)]
struct Heading {
    text: String,
    /// 1-based line number.
    line: usize,
    has_content: bool,
}

/// Checks one RFC's text against the rules of its lifecycle folder.
///
/// `path` is only used to label violations.
pub fn check_document(path: &str, lifecycle: Lifecycle, text: &str) -> (Document, Vec<Violation>) {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut doc = Document::default();

    // Title: the first line. When it is missing or malformed, the first
    // non-blank line stands in for it so that the Status line is still found.
    let first_non_blank = lines.iter().position(|line| !line.trim().is_empty());
    let first = lines.first().copied().unwrap_or("");
    doc.title = parse_title(first);
    if doc.title.is_none() {
        let found = match first_non_blank {
            None => "the file is empty".to_owned(),
            Some(0) => format!("the first line is `{}`", first.trim_end()),
            Some(i) => format!(
                "the first line is blank (the text starts on line {})",
                i + 1
            ),
        };
        out.push(Violation::new(
            path,
            Rule::TitleMissing,
            format!("{found}; an RFC starts with `# RFC: <title>`"),
        ));
    }

    // Status: the first non-blank line after the title (or the first
    // non-blank line itself, if the title is missing and the file opens with
    // its Status line).
    let title_at = if doc.title.is_some() {
        0
    } else {
        first_non_blank.unwrap_or(0)
    };
    let status_at = match lines.get(title_at) {
        Some(line) if doc.title.is_none() && looks_like_status(line) => Some(title_at),
        _ => lines
            .iter()
            .enumerate()
            .skip(title_at + 1)
            .find(|(_, line)| !line.trim().is_empty())
            .map(|(i, _)| i),
    };
    let status_line = status_at.and_then(|i| lines.get(i).map(|line| (i + 1, *line)));
    check_status(path, lifecycle, status_line, &mut doc, &mut out);

    // Sections.
    let headings = headings(&lines);
    check_sections(path, lifecycle, &headings, &mut out);

    (doc, out)
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

fn check_status(
    path: &str,
    lifecycle: Lifecycle,
    line: Option<(usize, &str)>,
    doc: &mut Document,
    out: &mut Vec<Violation>,
) {
    let expected = format!("`Status: {}`", lifecycle.status());
    let Some((number, line)) = line else {
        out.push(Violation::new(
            path,
            Rule::StatusMissing,
            format!("no Status line; after the title write {expected}"),
        ));
        return;
    };
    let Some(rest) = line.strip_prefix("Status:") else {
        if looks_like_status(line) {
            doc.status = Some(line.trim().to_owned());
            out.push(Violation::new(
                path,
                Rule::StatusInvalid,
                format!(
                    "line {number} is `{}`; write exactly {expected}",
                    line.trim()
                ),
            ));
        } else {
            out.push(Violation::new(
                path,
                Rule::StatusMissing,
                format!(
                    "the first non-blank line after the title (line {number}) is `{}`, \
                     not a Status line; write {expected} there",
                    line.trim()
                ),
            ));
        }
        return;
    };
    let value = rest.trim();
    doc.status = Some(value.to_owned());
    if has_date(value) {
        out.push(Violation::new(
            path,
            Rule::StatusDated,
            format!(
                "line {number} is `{}`; the Status line carries no date (the file name \
                 holds the proposal date, git history the rest); write {expected}",
                line.trim()
            ),
        ));
        return;
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
        out.push(Violation::new(
            path,
            Rule::StatusInvalid,
            format!("line {number}: {why}; write {expected}"),
        ));
        return;
    };
    if status != lifecycle {
        out.push(Violation::new(
            path,
            Rule::StatusFolderMismatch,
            format!(
                "line {number} says `Status: {status}` but the file is in {}/; \
                 move the file to {status}/ (git mv) or write {expected}",
                lifecycle.folder()
            ),
        ));
    }
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

/// The `##` headings outside fenced code blocks, with whether each section
/// has any content before the next `##` heading.
fn headings(lines: &[&str]) -> Vec<Heading> {
    let mut headings: Vec<Heading> = Vec::new();
    let mut fence: Option<(u8, usize)> = None;
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start_matches(' ');
        let indent = line.len() - trimmed.len();
        if let Some((ch, len)) = fence {
            let run = trimmed.bytes().take_while(|&b| b == ch).count();
            let closes = indent <= 3
                && run >= len
                && trimmed
                    .get(run..)
                    .is_some_and(|rest| rest.trim().is_empty());
            if closes {
                fence = None;
            }
            continue;
        }
        if indent <= 3 {
            if let Some(open) = fence_open(trimmed) {
                fence = Some(open);
                if let Some(h) = headings.last_mut() {
                    h.has_content = true;
                }
                continue;
            }
            if let Some(text) = h2(trimmed) {
                headings.push(Heading {
                    text,
                    line: i + 1,
                    has_content: false,
                });
                continue;
            }
        }
        if !line.trim().is_empty()
            && let Some(h) = headings.last_mut()
        {
            h.has_content = true;
        }
    }
    headings
}

fn fence_open(line: &str) -> Option<(u8, usize)> {
    let ch = *line.as_bytes().first()?;
    if ch != b'`' && ch != b'~' {
        return None;
    }
    let run = line.bytes().take_while(|&b| b == ch).count();
    (run >= 3).then_some((ch, run))
}

fn h2(line: &str) -> Option<String> {
    let text = line.strip_prefix("## ")?.trim();
    // An optional closing sequence of `#`s, preceded by a space.
    let without_closing = text.trim_end_matches('#');
    let text = if without_closing.len() < text.len()
        && (without_closing.is_empty() || without_closing.ends_with(' '))
    {
        without_closing.trim_end()
    } else {
        text
    };
    Some(text.to_owned())
}

fn check_sections(
    path: &str,
    lifecycle: Lifecycle,
    headings: &[Heading],
    out: &mut Vec<Violation>,
) {
    let find = |name: &str| headings.iter().find(|h| h.text == name);

    // Problem first.
    match headings.first() {
        Some(first) if first.text == PROBLEM => {}
        Some(first) if find(PROBLEM).is_some() => out.push(Violation::new(
            path,
            Rule::ProblemNotFirst,
            format!(
                "the first `##` section is `## {}` (line {}); `## Problem` must come first",
                first.text, first.line
            ),
        )),
        _ => out.push(missing(path, Rule::ProblemMissing, PROBLEM, headings)),
    }

    // Required sections.
    let mut required = vec![(ALTERNATIVES, Rule::AlternativesMissing)];
    match lifecycle {
        Lifecycle::Proposed => required.push((PROPOSAL, Rule::ProposalMissing)),
        Lifecycle::Implemented => {
            required.push((DECISION, Rule::DecisionMissing));
            required.push((CONSEQUENCES, Rule::ConsequencesMissing));
        }
        Lifecycle::Rejected => {
            required.push((PROPOSAL, Rule::ProposalMissing));
            required.push((WHY_REJECTED, Rule::WhyRejectedMissing));
        }
    }
    for (name, rule) in required {
        if find(name).is_none() {
            out.push(missing(path, rule, name, headings));
        }
    }

    // Headings that belong to another lifecycle.
    for h in headings {
        let text = h.text.as_str();
        match lifecycle {
            Lifecycle::Proposed => {}
            Lifecycle::Implemented if matches!(text, PROPOSAL | ACCEPTANCE | RISKS) => {
                out.push(Violation::new(
                    path,
                    Rule::ProposalEraHeading,
                    format!(
                        "`## {text}` (line {}) is a proposal-era heading, allowed only in \
                         proposed/; an implemented RFC states shipped reality under \
                         `## Decision` and `## Consequences`",
                        h.line
                    ),
                ));
            }
            Lifecycle::Rejected if matches!(text, ACCEPTANCE | RISKS) => {
                out.push(Violation::new(
                    path,
                    Rule::ProposalEraHeading,
                    format!(
                        "`## {text}` (line {}) is allowed only in proposed/; a rejected RFC \
                         keeps Problem, Proposal and Alternatives considered, and says why \
                         under `## Why rejected`",
                        h.line
                    ),
                ));
            }
            Lifecycle::Implemented | Lifecycle::Rejected => {}
        }
        if text == WHY_REJECTED && lifecycle != Lifecycle::Rejected {
            out.push(Violation::new(
                path,
                Rule::WhyRejectedMisplaced,
                format!(
                    "`## Why rejected` (line {}) belongs only to RFCs in rejected/, \
                     but this one is in {}/",
                    h.line,
                    lifecycle.folder()
                ),
            ));
        }
    }

    // Duplicates and empty sections.
    for (i, h) in headings.iter().enumerate() {
        if let Some(earlier) = headings[..i].iter().find(|e| e.text == h.text) {
            out.push(Violation::new(
                path,
                Rule::DuplicateHeading,
                format!(
                    "`## {}` appears on line {} and again on line {}",
                    h.text, earlier.line, h.line
                ),
            ));
        }
        if !h.has_content {
            out.push(Violation::new(
                path,
                Rule::EmptySection,
                format!("`## {}` (line {}) has no content", h.text, h.line),
            ));
        }
    }
}

/// A "section missing" violation, with a hint when a near miss is present.
fn missing(path: &str, rule: Rule, name: &str, headings: &[Heading]) -> Violation {
    let lower = name.to_ascii_lowercase();
    let first_word = lower.split(' ').next().unwrap_or("");
    let near = headings.iter().find(|h| {
        let text = h.text.to_ascii_lowercase();
        text == lower
            || text.split(' ').next() == Some(first_word)
            || (name == PROBLEM && matches!(text.as_str(), "context" | "motivation" | "background"))
    });
    let hint = match near {
        Some(h) => format!(
            " (found `## {}` on line {}; the heading must be exactly `## {name}`)",
            h.text, h.line
        ),
        None => String::new(),
    };
    Violation::new(path, rule, format!("no `## {name}` section{hint}"))
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
    fn heading_parsing_ignores_fences_and_closing_hashes() {
        let text = "# RFC: T\n\n## Problem ##\n\n```md\n## Proposal\n```\n\n## C#\nx\n";
        let lines: Vec<&str> = text.lines().collect();
        let found: Vec<String> = headings(&lines).into_iter().map(|h| h.text).collect();
        assert_eq!(found, ["Problem", "C#"]);
    }

    #[test]
    fn tilde_fence_needs_matching_close() {
        let text = "## Problem\n~~~~\n```\n## Risks\n~~~~\nbody\n";
        let lines: Vec<&str> = text.lines().collect();
        let found: Vec<String> = headings(&lines).into_iter().map(|h| h.text).collect();
        assert_eq!(found, ["Problem"]);
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
