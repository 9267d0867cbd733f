//! The per-lifecycle section skeleton: which `##` sections an RFC must have,
//! which it may not, and in what order.

use super::markdown::{ProseLine, h2};
use super::prose::ProseFacts;
use super::{Lifecycle, Rule, Violation};

pub(crate) const PROBLEM: &str = "Problem";
pub(crate) const ALTERNATIVES: &str = "Alternatives considered";
const PROPOSAL: &str = "Proposal";
const ACCEPTANCE: &str = "Acceptance criteria";
const RISKS: &str = "Risks";
const DECISION: &str = "Decision";
const CONSEQUENCES: &str = "Consequences";
const WHY_REJECTED: &str = "Why rejected";

/// One `##` heading outside fenced code.
#[derive(Debug)]
pub(crate) struct Heading {
    pub(crate) text: String,
    /// 1-based line number.
    pub(crate) line: usize,
    /// Whether anything but blank lines follows before the next `##`.
    has_content: bool,
}

impl Heading {
    /// The `##` headings among `prose`, each with whether its section has
    /// content (a fenced block counts).
    pub(crate) fn collect(prose: &[ProseLine<'_>]) -> Vec<Heading> {
        let mut headings: Vec<Heading> = Vec::new();
        for line in prose {
            if !line.opens_fence
                && let Some(text) = h2(line.text)
            {
                headings.push(Heading {
                    text,
                    line: line.number,
                    has_content: false,
                });
            } else if !line.text.trim().is_empty()
                && let Some(h) = headings.last_mut()
            {
                h.has_content = true;
            }
        }
        headings
    }
}

/// Checks the skeleton of one RFC in `lifecycle`. A grandfather comment in
/// `facts` stands in for `## Alternatives considered` (its own rules are
/// checked with the prose).
pub(crate) fn check_sections(
    path: &str,
    lifecycle: Lifecycle,
    headings: &[Heading],
    facts: ProseFacts,
    out: &mut Vec<Violation>,
) {
    check_problem_first(path, headings, out);
    check_required(path, lifecycle, headings, facts, out);
    for h in headings {
        if let Some((rule, message)) = misplaced(lifecycle, &h.text) {
            out.push(Violation::at(path, h.line, rule, message));
        }
    }
    if lifecycle == Lifecycle::Rejected {
        check_rejected_shape(path, headings, out);
    }
    check_hygiene(path, headings, out);
}

fn check_problem_first(path: &str, headings: &[Heading], out: &mut Vec<Violation>) {
    match headings.first() {
        Some(first) if first.text == PROBLEM => {}
        Some(first) if headings.iter().any(|h| h.text == PROBLEM) => out.push(Violation::at(
            path,
            first.line,
            Rule::ProblemNotFirst,
            format!(
                "the first `##` section is `## {}`; `## Problem` must come first",
                first.text
            ),
        )),
        _ => out.push(missing(path, Rule::ProblemMissing, PROBLEM, headings)),
    }
}

fn check_required(
    path: &str,
    lifecycle: Lifecycle,
    headings: &[Heading],
    facts: ProseFacts,
    out: &mut Vec<Violation>,
) {
    let mut required = Vec::new();
    if facts.grandfather.is_none() {
        required.push((ALTERNATIVES, Rule::AlternativesMissing));
    }
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
        if !headings.iter().any(|h| h.text == name) {
            out.push(missing(path, rule, name, headings));
        }
    }
}

/// The rule a `## text` heading breaks by being in `lifecycle`, if any.
fn misplaced(lifecycle: Lifecycle, text: &str) -> Option<(Rule, String)> {
    let folder = lifecycle.folder();
    let (rule, why) = match (lifecycle, text) {
        (Lifecycle::Implemented, PROPOSAL | ACCEPTANCE | RISKS) => (
            Rule::ProposalEraHeading,
            "is a proposal-era heading, allowed only in proposed/; an implemented RFC \
             states shipped reality under `## Decision` and `## Consequences`",
        ),
        (Lifecycle::Rejected, ACCEPTANCE | RISKS) => (
            Rule::ProposalEraHeading,
            "is allowed only in proposed/; a rejected RFC keeps Problem, Proposal and \
             Alternatives considered, and says why under `## Why rejected`",
        ),
        (Lifecycle::Proposed | Lifecycle::Implemented, WHY_REJECTED) => (
            Rule::WhyRejectedMisplaced,
            "belongs only to RFCs in rejected/",
        ),
        (Lifecycle::Proposed | Lifecycle::Rejected, DECISION) => (
            Rule::DecisionMisplaced,
            "states shipped reality and belongs only to RFCs in implemented/; a proposal \
             (kept as it stood, if rejected) says what would be built under `## Proposal`",
        ),
        (Lifecycle::Proposed | Lifecycle::Rejected, CONSEQUENCES) => (
            Rule::ConsequencesMisplaced,
            "states what is true of shipped work and belongs only to RFCs in implemented/; \
             before shipping it is `## Acceptance criteria` or `## Risks` (proposed/), \
             after a rejection `## Why rejected`",
        ),
        _ => return None,
    };
    Some((
        rule,
        format!("`## {text}` {why}, but this RFC is in {folder}/"),
    ))
}

/// A rejected RFC is the proposal as it stood with `## Why rejected`
/// appended: the verdict is its last `##` section.
fn check_rejected_shape(path: &str, headings: &[Heading], out: &mut Vec<Violation>) {
    let Some(at) = headings.iter().position(|h| h.text == WHY_REJECTED) else {
        return; // why-rejected-missing
    };
    if let Some(after) = headings.get(at + 1) {
        out.push(Violation::at(
            path,
            after.line,
            Rule::RejectedShape,
            format!(
                "`## {}` follows `## Why rejected` (line {}); a rejected RFC keeps the \
                 proposal as it stood and appends `## Why rejected` as its last section",
                after.text, headings[at].line
            ),
        ));
    }
}

fn check_hygiene(path: &str, headings: &[Heading], out: &mut Vec<Violation>) {
    for (i, h) in headings.iter().enumerate() {
        if let Some(earlier) = headings[..i].iter().find(|e| e.text == h.text) {
            out.push(Violation::at(
                path,
                h.line,
                Rule::DuplicateHeading,
                format!(
                    "`## {}` appears again (first on line {})",
                    h.text, earlier.line
                ),
            ));
        }
        if !h.has_content {
            out.push(Violation::at(
                path,
                h.line,
                Rule::EmptySection,
                format!("`## {}` has no content", h.text),
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
    use super::super::markdown::prose_lines;
    use super::*;

    fn headings(text: &str) -> Vec<String> {
        let lines: Vec<&str> = text.lines().collect();
        Heading::collect(&prose_lines(&lines))
            .into_iter()
            .map(|h| h.text)
            .collect()
    }

    #[test]
    fn heading_parsing_ignores_fences_and_closing_hashes() {
        let text = "# RFC: T\n\n## Problem ##\n\n```md\n## Proposal\n```\n\n## C#\nx\n";
        assert_eq!(headings(text), ["Problem", "C#"]);
    }

    #[test]
    fn tilde_fence_needs_matching_close() {
        let text = "## Problem\n~~~~\n```\n## Risks\n~~~~\nbody\n";
        assert_eq!(headings(text), ["Problem"]);
    }

    #[test]
    fn a_fence_is_content() {
        let lines: Vec<&str> = "## Problem\n```\ncode\n```\n## Empty\n".lines().collect();
        let found: Vec<bool> = Heading::collect(&prose_lines(&lines))
            .iter()
            .map(|h| h.has_content)
            .collect();
        assert_eq!(found, [true, false]);
    }
}
