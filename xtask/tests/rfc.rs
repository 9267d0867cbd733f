//! `cargo xtask rfc check` / `rfc index` over temporary `docs/rfc` trees.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::ScratchDir;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use xtask::rfc::{self, Rule};

// ---------------------------------------------------------------------------
// Fixtures

const PROPOSED: &str = "\
# RFC: Example proposal

Status: proposed

## Problem

Something is hard today.

## Proposal

Make it easy.

## Alternatives considered

Leave it hard.

## Acceptance criteria

- It is easy.

## Risks

None known.
";

const IMPLEMENTED: &str = "\
# RFC: Example decision

Status: implemented

## Problem

Something was hard.

## Decision

It is easy now.

## Alternatives considered

Leaving it hard.

## Consequences

Users do less work.
";

const REJECTED: &str = "\
# RFC: Example rejection

Status: rejected

## Problem

Something is hard.

## Proposal

Make it easy by magic.

## Alternatives considered

Leave it hard.

## Why rejected

There is no magic.
";

const P: &str = "proposed/2026-01-01-example.md";
const I: &str = "implemented/2026-01-02-example.md";
const R: &str = "rejected/2026-01-03-example.md";

/// A temporary repository root with an empty `docs/rfc`, removed on drop.
struct Tree {
    root: PathBuf,
    _dir: ScratchDir,
}

impl Tree {
    fn new() -> Self {
        let dir = ScratchDir::new("rfc");
        let root = dir.path().to_path_buf();
        fs::create_dir_all(root.join(rfc::RFC_DIR)).unwrap();
        Tree { root, _dir: dir }
    }

    /// Writes `text` at `rel`, relative to `docs/rfc`.
    fn write(&self, rel: &str, text: &str) {
        let path = self.rfc_dir().join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    fn rfc_dir(&self) -> PathBuf {
        self.root.join(rfc::RFC_DIR)
    }

    fn index_path(&self) -> PathBuf {
        self.rfc_dir().join(rfc::INDEX_FILE)
    }

    fn write_index(&self) {
        rfc::write_index(&self.root).unwrap();
    }

    /// Violations as (path relative to docs/rfc, rule name) pairs.
    fn violations(&self) -> Vec<(String, String)> {
        rfc::check(&self.root)
            .unwrap()
            .violations
            .into_iter()
            .map(|v| {
                let path = v
                    .path()
                    .strip_prefix(&format!("{}/", rfc::RFC_DIR))
                    .unwrap_or(v.path())
                    .to_owned();
                (path, v.rule().name().to_owned())
            })
            .collect()
    }
}

/// What to do with `INDEX.md` after the RFC files are written.
#[derive(Clone, Copy)]
enum Index {
    /// Generate it, so only the RFC rules can fire.
    Fresh,
    /// Leave it out.
    Missing,
    /// Generate it, then edit it by hand.
    HandEdited,
}

/// The one helper every case goes through: builds a tree from `files` (paths
/// relative to `docs/rfc`), prepares the index, runs the check and returns
/// the violations sorted by (path, rule-name), stable within those.
fn check(files: &[(&str, String)], index: Index) -> Vec<rfc::Violation> {
    let tree = Tree::new();
    for (rel, text) in files {
        tree.write(rel, text);
    }
    match index {
        Index::Fresh => tree.write_index(),
        Index::Missing => {}
        Index::HandEdited => {
            tree.write_index();
            let mut text = fs::read_to_string(tree.index_path()).unwrap();
            text.push_str("| [Hand-added](x.md) | proposed | `x.md` |\n");
            fs::write(tree.index_path(), text).unwrap();
        }
    }
    let mut found = rfc::check(&tree.root).unwrap().violations;
    found.sort_by(|a, b| (a.path(), a.rule().name()).cmp(&(b.path(), b.rule().name())));
    found
}

/// A violation as a (path relative to docs/rfc, rule name) pair.
fn pair(v: &rfc::Violation) -> (String, String) {
    let path = v
        .path()
        .strip_prefix(&format!("{}/", rfc::RFC_DIR))
        .unwrap_or(v.path());
    (path.to_owned(), v.rule().name().to_owned())
}

fn valid_tree() -> Vec<(&'static str, String)> {
    vec![
        (P, PROPOSED.to_owned()),
        (I, IMPLEMENTED.to_owned()),
        (R, REJECTED.to_owned()),
    ]
}

/// `text` with `from` replaced by `to`, asserting that `from` occurs.
fn edit(text: &str, from: &str, to: &str) -> String {
    assert!(text.contains(from), "fixture lacks {from:?}");
    text.replacen(from, to, 1)
}

/// Moves the `## Problem` section (heading and its one paragraph) after the
/// section that follows it.
fn problem_second(text: &str, next: &str) -> String {
    let problem_start = text.find("## Problem").unwrap();
    let next_start = text.find(&format!("## {next}")).unwrap();
    let problem = &text[problem_start..next_start];
    let rest = &text[next_start..];
    let next_end = rest[3..].find("## ").map_or(rest.len(), |i| i + 3);
    format!(
        "{}{}{}{}",
        &text[..problem_start],
        &rest[..next_end],
        problem,
        &rest[next_end..]
    )
}

struct Case {
    name: &'static str,
    files: Vec<(&'static str, String)>,
    index: Index,
    /// Exactly the (path relative to docs/rfc, rule) pairs expected.
    expect: Vec<(&'static str, &'static str)>,
    /// For a case with one expected violation: text on the line it must
    /// point at (the first line of that file containing it), so the printed
    /// violation starts with `docs/rfc/<path>:<line>: <rule>: `.
    at: Option<&'static str>,
}

fn case(name: &'static str, path: &'static str, text: String, expect: &[&'static str]) -> Case {
    Case {
        name,
        files: vec![(path, text)],
        index: Index::Fresh,
        expect: expect.iter().map(|rule| (path, *rule)).collect(),
        at: None,
    }
}

/// A seeded defect: `text` at `path` breaks exactly `rule`, on the first
/// line containing `at`.
fn defect(
    name: &'static str,
    path: &'static str,
    text: String,
    rule: &'static str,
    at: &'static str,
) -> Case {
    Case {
        at: Some(at),
        ..case(name, path, text, &[rule])
    }
}

/// IMPLEMENTED as a pre-format RFC whose alternatives were not recorded: the
/// grandfather comment where `## Alternatives considered` would be.
fn grandfathered() -> String {
    edit(
        IMPLEMENTED,
        "## Alternatives considered\n\nLeaving it hard.\n",
        &format!("{}\n", rfc::GRANDFATHER_COMMENT),
    )
}

/// A curated README in the shape of the real one: prose, a format table, a
/// rule table and a link to an RFC in running text.
const README: &str = "\
# RFCs

The list of RFCs is [INDEX.md](INDEX.md); the process is in
[the RFC process RFC](implemented/2026-11-30-rfc-process.md).

| section | `proposed/` | `implemented/` | `rejected/` |
| --- | --- | --- | --- |
| `## Decision` | — | required | — |

| rule | what it requires |
| --- | --- |
| `file-name` | an RFC file is named `YYYY-MM-DD-slug.md`, with a real date |

```
| [Example](implemented/2026-01-02-example.md) | implemented | `docs/rfc/implemented/2026-01-02-example.md` |
```
";

fn with_readme(readme: String) -> Vec<(&'static str, String)> {
    let mut files = valid_tree();
    files.push(("README.md", readme));
    files
}

/// Seeded defects for the rules the first checker missed (issue #22):
/// Decision and Consequences only in implemented/, and rejected/ keeps the
/// frozen proposal with the verdict appended.
fn placement_cases() -> Vec<Case> {
    vec![
        // Decision and Consequences only in implemented/.
        defect(
            "decision in proposed/",
            P,
            edit(
                PROPOSED,
                "## Alternatives",
                "## Decision\n\nWe do it.\n\n## Alternatives",
            ),
            "decision-misplaced",
            "## Decision",
        ),
        defect(
            "decision in rejected/",
            R,
            edit(
                REJECTED,
                "## Alternatives",
                "## Decision\n\nWe did not.\n\n## Alternatives",
            ),
            "decision-misplaced",
            "## Decision",
        ),
        defect(
            "consequences in rejected/",
            R,
            edit(
                REJECTED,
                "## Why rejected",
                "## Consequences\n\nNone.\n\n## Why rejected",
            ),
            "consequences-misplaced",
            "## Consequences",
        ),
        defect(
            "consequences in proposed/",
            P,
            format!("{PROPOSED}\n## Consequences\n\nUsers do less work.\n"),
            "consequences-misplaced",
            "## Consequences",
        ),
        // rejected/ keeps the frozen proposal with the verdict appended.
        defect(
            "a section after why rejected",
            R,
            format!("{REJECTED}\n## Prior art\n\nOthers tried magic.\n"),
            "rejected-shape",
            "## Prior art",
        ),
        defect(
            "why rejected before the proposal",
            R,
            edit(
                edit(REJECTED, "\n## Why rejected\n\nThere is no magic.\n", "").as_str(),
                "## Proposal",
                "## Why rejected\n\nThere is no magic.\n\n## Proposal",
            ),
            "rejected-shape",
            "## Proposal",
        ),
        case(
            "free sections before why rejected",
            R,
            edit(
                REJECTED,
                "## Why rejected",
                "## Prior art\n\nOthers.\n\n## Why rejected",
            ),
            &[],
        ),
    ]
}

/// Seeded defects (#22): `XXX` debt markers, and `XXX` quoted as code.
fn debt_marker_cases() -> Vec<Case> {
    vec![
        // XXX debt markers.
        defect(
            "XXX debt marker",
            I,
            edit(
                IMPLEMENTED,
                "It is easy now.",
                "It is easy now. XXX: say how.",
            ),
            "debt-marker",
            "XXX",
        ),
        defect(
            "XXX debt marker in an HTML comment",
            P,
            edit(
                PROPOSED,
                "Make it easy.",
                "Make it easy.\n\n<!-- XXX: legacy RFC body format -->",
            ),
            "debt-marker",
            "XXX",
        ),
        case(
            "XXX quoted as code is not a marker",
            I,
            edit(
                IMPLEMENTED,
                "It is easy now.",
                "The marker `XXX` is banned.\n\n```text\nXXX: legacy\n```",
            ),
            &[],
        ),
    ]
}

/// Seeded defects (#22): the grandfather comment's date fence, its exact
/// shape, and never beside the section.
fn grandfather_cases() -> Vec<Case> {
    let comment = rfc::GRANDFATHER_COMMENT;
    vec![
        // The grandfather comment.
        case("grandfathered pre-format RFC", I, grandfathered(), &[]),
        defect(
            "grandfather comment on the adoption date",
            "implemented/2026-11-30-example.md",
            grandfathered(),
            "grandfather-date",
            "rfc-format",
        ),
        defect(
            "grandfather comment in a post-format RFC",
            "implemented/2026-12-01-example.md",
            grandfathered(),
            "grandfather-date",
            "rfc-format",
        ),
        defect(
            "grandfather comment with other words",
            I,
            grandfathered().replace("alternatives-not-recorded", "alternatives-not-known"),
            "grandfather-shape",
            "rfc-format",
        ),
        defect(
            "grandfather comment without its parenthesis",
            I,
            grandfathered().replace(" (pre-format RFC)", ""),
            "grandfather-shape",
            "rfc-format",
        ),
        defect(
            "grandfather comment indented",
            I,
            grandfathered().replace(comment, &format!("  {comment}")),
            "grandfather-shape",
            "rfc-format",
        ),
        defect(
            "grandfather comment not on a line of its own",
            I,
            grandfathered().replace(comment, &format!("Lost. {comment}")),
            "grandfather-shape",
            "rfc-format",
        ),
        case(
            "grandfather comment twice",
            I,
            format!("{}\n{comment}\n", grandfathered()),
            &["grandfather-shape"],
        ),
        defect(
            "grandfather comment beside the section",
            I,
            format!("{IMPLEMENTED}\n{comment}\n"),
            "grandfather-redundant",
            "rfc-format",
        ),
        case(
            "grandfather comment quoted in a fence or code span",
            "implemented/2026-12-01-example.md",
            format!("{IMPLEMENTED}\n```md\n{comment}\n```\n\nNot `{comment}` either.\n"),
            &[],
        ),
    ]
}

/// Seeded defects (#22): index-shaped rows in the curated README.
fn readme_cases() -> Vec<Case> {
    vec![
        // The curated README.
        Case {
            name: "index-shaped row in the README",
            files: with_readme(format!(
                "{README}\n| [Listed](implemented/2026-01-02-example.md) | implemented | \
                 `docs/rfc/implemented/2026-01-02-example.md` |\n"
            )),
            index: Index::Fresh,
            expect: vec![("README.md", "readme-index-row")],
            at: Some("| [Listed]"),
        },
        Case {
            name: "index-shaped row without a link in the README",
            files: with_readme(format!(
                "{README}\n| Example | proposed | `docs/rfc/proposed/2026-01-01-example.md` |\n"
            )),
            index: Index::Fresh,
            expect: vec![("README.md", "readme-index-row")],
            at: Some("| Example |"),
        },
        Case {
            name: "curated README with format tables",
            files: with_readme(README.to_owned()),
            index: Index::Fresh,
            expect: vec![],
            at: None,
        },
    ]
}

fn cases() -> Vec<Case> {
    [
        title_cases(),
        status_cases(),
        problem_cases(),
        alternatives_cases(),
        proposal_era_cases(),
        required_section_cases(),
        hygiene_cases(),
        layout_name_cases(),
        index_cases(),
        passing_cases(),
        placement_cases(),
        debt_marker_cases(),
        grandfather_cases(),
        readme_cases(),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// The `# RFC: <title>` line.
fn title_cases() -> Vec<Case> {
    vec![
        case(
            "title missing",
            I,
            edit(IMPLEMENTED, "# RFC: Example decision\n\n", ""),
            &["title-missing"],
        ),
        case(
            "title without the RFC prefix",
            I,
            edit(IMPLEMENTED, "# RFC: Example", "# Example"),
            &["title-missing"],
        ),
        case(
            "title empty",
            P,
            edit(PROPOSED, "# RFC: Example proposal", "# RFC: "),
            &["title-missing"],
        ),
        case(
            "title not on the first line",
            R,
            format!("\n{REJECTED}"),
            &["title-missing"],
        ),
    ]
}

/// The Status line.
fn status_cases() -> Vec<Case> {
    vec![
        case(
            "status proposed in implemented/",
            I,
            edit(IMPLEMENTED, "Status: implemented", "Status: proposed"),
            &["status-folder-mismatch"],
        ),
        case(
            "status implemented in proposed/",
            P,
            edit(PROPOSED, "Status: proposed", "Status: implemented"),
            &["status-folder-mismatch"],
        ),
        case(
            "status proposed in rejected/",
            R,
            edit(REJECTED, "Status: rejected", "Status: proposed"),
            &["status-folder-mismatch"],
        ),
        case(
            "status dated",
            I,
            edit(
                IMPLEMENTED,
                "Status: implemented",
                "Status: implemented 2026-01-01",
            ),
            &["status-dated"],
        ),
        case(
            "status dated in parentheses",
            P,
            edit(
                PROPOSED,
                "Status: proposed",
                "Status: proposed (2026-11-30)",
            ),
            &["status-dated"],
        ),
        case(
            "status with extra words",
            I,
            edit(
                IMPLEMENTED,
                "Status: implemented",
                "Status: implemented and shipped",
            ),
            &["status-invalid"],
        ),
        case(
            "status capitalised",
            I,
            edit(IMPLEMENTED, "Status: implemented", "Status: Implemented"),
            &["status-invalid"],
        ),
        case(
            "status outside the enum",
            P,
            edit(PROPOSED, "Status: proposed", "Status: accepted"),
            &["status-invalid"],
        ),
        case(
            "status key lowercase",
            P,
            edit(PROPOSED, "Status: proposed", "status: proposed"),
            &["status-invalid"],
        ),
        case(
            "status missing",
            I,
            edit(IMPLEMENTED, "Status: implemented\n\n", ""),
            &["status-missing"],
        ),
        case(
            "status not the first line after the title",
            I,
            edit(
                IMPLEMENTED,
                "Status: implemented",
                "Summary.\n\nStatus: implemented",
            ),
            &["status-missing"],
        ),
    ]
}

/// `## Problem`, first.
fn problem_cases() -> Vec<Case> {
    vec![
        case(
            "problem missing",
            I,
            edit(IMPLEMENTED, "## Problem\n\nSomething was hard.\n\n", ""),
            &["problem-missing"],
        ),
        case(
            "problem misspelled",
            P,
            edit(PROPOSED, "## Problem", "## Context"),
            &["problem-missing"],
        ),
        case(
            "problem not first in implemented/",
            I,
            problem_second(IMPLEMENTED, "Decision"),
            &["problem-not-first"],
        ),
        case(
            "problem not first in proposed/",
            P,
            problem_second(PROPOSED, "Proposal"),
            &["problem-not-first"],
        ),
    ]
}

/// `## Alternatives considered`, in every lifecycle.
fn alternatives_cases() -> Vec<Case> {
    vec![
        case(
            "alternatives missing in implemented/",
            I,
            edit(
                IMPLEMENTED,
                "## Alternatives considered\n\nLeaving it hard.\n\n",
                "",
            ),
            &["alternatives-missing"],
        ),
        case(
            "alternatives missing in proposed/",
            P,
            edit(
                PROPOSED,
                "## Alternatives considered\n\nLeave it hard.\n\n",
                "",
            ),
            &["alternatives-missing"],
        ),
        case(
            "alternatives missing in rejected/",
            R,
            edit(
                REJECTED,
                "## Alternatives considered\n\nLeave it hard.\n\n",
                "",
            ),
            &["alternatives-missing"],
        ),
        case(
            "alternatives heading capitalised",
            I,
            edit(
                IMPLEMENTED,
                "## Alternatives considered",
                "## Alternatives Considered",
            ),
            &["alternatives-missing"],
        ),
    ]
}

/// Proposal-era headings outside proposed/.
fn proposal_era_cases() -> Vec<Case> {
    vec![
        case(
            "proposal heading in implemented/",
            I,
            format!("{IMPLEMENTED}\n## Proposal\n\nThe plan.\n"),
            &["proposal-era-heading"],
        ),
        case(
            "acceptance criteria heading in implemented/",
            I,
            format!("{IMPLEMENTED}\n## Acceptance criteria\n\n- Done.\n"),
            &["proposal-era-heading"],
        ),
        case(
            "risks heading in implemented/",
            I,
            format!("{IMPLEMENTED}\n## Risks\n\nSome.\n"),
            &["proposal-era-heading"],
        ),
        case(
            "risks heading in rejected/",
            R,
            edit(
                REJECTED,
                "## Why rejected",
                "## Risks\n\nSome.\n\n## Why rejected",
            ),
            &["proposal-era-heading"],
        ),
        case(
            "proposal heading inside a code fence is not a heading",
            I,
            format!("{IMPLEMENTED}\n```md\n## Proposal\n## Risks\n```\n"),
            &[],
        ),
    ]
}

/// The sections each lifecycle requires, and `## Why rejected` elsewhere.
fn required_section_cases() -> Vec<Case> {
    vec![
        case(
            "proposal missing in proposed/",
            P,
            edit(PROPOSED, "## Proposal\n\nMake it easy.\n\n", ""),
            &["proposal-missing"],
        ),
        case(
            "proposal missing in rejected/",
            R,
            edit(REJECTED, "## Proposal\n\nMake it easy by magic.\n\n", ""),
            &["proposal-missing"],
        ),
        case(
            "decision missing",
            I,
            edit(IMPLEMENTED, "## Decision\n\nIt is easy now.\n\n", ""),
            &["decision-missing"],
        ),
        case(
            "consequences missing",
            I,
            edit(
                IMPLEMENTED,
                "\n## Consequences\n\nUsers do less work.\n",
                "",
            ),
            &["consequences-missing"],
        ),
        case(
            "why rejected missing",
            R,
            edit(REJECTED, "\n## Why rejected\n\nThere is no magic.\n", ""),
            &["why-rejected-missing"],
        ),
        case(
            "why rejected in proposed/",
            P,
            format!("{PROPOSED}\n## Why rejected\n\nIt was not.\n"),
            &["why-rejected-misplaced"],
        ),
        case(
            "why rejected in implemented/",
            I,
            format!("{IMPLEMENTED}\n## Why rejected\n\nIt was not.\n"),
            &["why-rejected-misplaced"],
        ),
    ]
}

/// Duplicate and empty sections.
fn hygiene_cases() -> Vec<Case> {
    vec![
        case(
            "duplicate heading",
            I,
            format!("{IMPLEMENTED}\n## Decision\n\nMore.\n"),
            &["duplicate-heading"],
        ),
        case(
            "empty section",
            I,
            edit(IMPLEMENTED, "Users do less work.\n", ""),
            &["empty-section"],
        ),
    ]
}

/// File and folder names, stray and duplicated files.
fn layout_name_cases() -> Vec<Case> {
    vec![
        case(
            "file name without a date",
            "implemented/example.md",
            IMPLEMENTED.to_owned(),
            &["file-name"],
        ),
        case(
            "file name with an impossible date",
            "implemented/2026-02-30-example.md",
            IMPLEMENTED.to_owned(),
            &["file-name"],
        ),
        case(
            "README inside a lifecycle folder is an RFC with a bad name",
            "proposed/README.md",
            PROPOSED.to_owned(),
            &["file-name"],
        ),
        case(
            "valid RFC in a topic folder",
            "implemented/eventlog/2026-01-02-example.md",
            IMPLEMENTED.to_owned(),
            &[],
        ),
        case(
            "CRLF line endings",
            I,
            IMPLEMENTED.replace('\n', "\r\n"),
            &[],
        ),
        Case {
            name: "topic folder not a slug",
            files: vec![(
                "implemented/Event Log/2026-01-02-example.md",
                IMPLEMENTED.to_owned(),
            )],
            index: Index::Fresh,
            expect: vec![("implemented/Event Log", "topic-name")],
            at: None,
        },
        Case {
            name: "markdown outside the lifecycle folders",
            files: vec![
                ("notes.md", "# Notes\n".to_owned()),
                ("accepted/2026-01-01-example.md", IMPLEMENTED.to_owned()),
                ("README.md", "# RFCs\n".to_owned()),
                ("proposed/diagram.svg", "<svg/>".to_owned()),
            ],
            index: Index::Fresh,
            expect: vec![
                ("accepted/2026-01-01-example.md", "stray-file"),
                ("notes.md", "stray-file"),
            ],
            at: None,
        },
        Case {
            name: "same RFC in two lifecycle folders",
            files: vec![
                ("proposed/2026-01-01-example.md", PROPOSED.to_owned()),
                ("implemented/2026-01-01-example.md", IMPLEMENTED.to_owned()),
            ],
            index: Index::Fresh,
            expect: vec![
                ("implemented/2026-01-01-example.md", "duplicate-rfc"),
                ("proposed/2026-01-01-example.md", "duplicate-rfc"),
            ],
            at: None,
        },
    ]
}

/// The generated index.
fn index_cases() -> Vec<Case> {
    vec![
        Case {
            name: "index missing",
            files: valid_tree(),
            index: Index::Missing,
            expect: vec![("INDEX.md", "index-missing")],
            at: None,
        },
        Case {
            name: "index missing on an empty tree",
            files: vec![],
            index: Index::Missing,
            expect: vec![("INDEX.md", "index-missing")],
            at: None,
        },
        Case {
            name: "index edited by hand",
            files: valid_tree(),
            index: Index::HandEdited,
            expect: vec![("INDEX.md", "index-stale")],
            at: None,
        },
    ]
}

/// Trees that pass.
fn passing_cases() -> Vec<Case> {
    vec![
        Case {
            name: "valid tree",
            files: valid_tree(),
            index: Index::Fresh,
            expect: vec![],
            at: None,
        },
        Case {
            name: "empty tree with its index",
            files: vec![],
            index: Index::Fresh,
            expect: vec![],
            at: None,
        },
    ]
}

// ---------------------------------------------------------------------------
// Tests

#[test]
fn every_case_fires_exactly_the_expected_rules() {
    let mut failures = Vec::new();
    for case in cases() {
        let violations = check(&case.files, case.index);
        let mut found: Vec<(String, String)> = violations.iter().map(pair).collect();
        found.sort();
        let mut expect: Vec<(String, String)> = case
            .expect
            .iter()
            .map(|(path, rule)| ((*path).to_owned(), (*rule).to_owned()))
            .collect();
        expect.sort();
        if found != expect {
            failures.push(format!(
                "{}:\n  expected {expect:?}\n  found    {found:?}",
                case.name
            ));
        } else if let Some(problem) = located_wrongly(&case, &violations) {
            failures.push(format!("{}: {problem}", case.name));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// For a case with `at`, why its one violation is not printed as
/// `docs/rfc/<path>:<line>: <rule>: …` with the line of the defect.
fn located_wrongly(case: &Case, violations: &[rfc::Violation]) -> Option<String> {
    let needle = case.at?;
    let [(path, rule)] = case.expect.as_slice() else {
        return Some("`at` needs exactly one expected violation".to_owned());
    };
    let text = &case.files.iter().find(|(p, _)| p == path)?.1;
    let Some(line) = text.lines().position(|l| l.contains(needle)) else {
        return Some(format!("{path} has no line containing {needle:?}"));
    };
    let prefix = format!("{}/{path}:{}: {rule}: ", rfc::RFC_DIR, line + 1);
    let printed = violations.first()?.to_string();
    (!printed.starts_with(&prefix))
        .then(|| format!("printed {printed:?}, expected it to start with {prefix:?}"))
}

#[test]
fn every_rule_has_a_failing_case() {
    let covered: Vec<&str> = cases()
        .iter()
        .flat_map(|case| case.expect.iter().map(|(_, rule)| *rule))
        .collect();
    // not-utf8 needs bytes, not a String: see `invalid_utf8_is_reported`.
    let uncovered: Vec<&str> = Rule::ALL
        .iter()
        .map(|rule| rule.name())
        .filter(|name| *name != "not-utf8" && !covered.contains(name))
        .collect();
    assert!(uncovered.is_empty(), "rules without a case: {uncovered:?}");
}

#[test]
fn invalid_utf8_is_reported() {
    let tree = Tree::new();
    tree.write(I, IMPLEMENTED);
    fs::write(tree.rfc_dir().join(I), b"# RFC: \xff\n").unwrap();
    tree.write_index();
    assert_eq!(tree.violations(), [(I.to_owned(), "not-utf8".to_owned())]);
}

#[test]
fn index_goes_stale_when_an_rfc_is_added() {
    let tree = Tree::new();
    tree.write(I, IMPLEMENTED);
    tree.write_index();
    assert_eq!(tree.violations(), []);
    tree.write(P, PROPOSED);
    assert_eq!(
        tree.violations(),
        [("INDEX.md".to_owned(), "index-stale".to_owned())]
    );
    tree.write_index();
    assert_eq!(tree.violations(), []);
}

#[test]
fn index_goes_stale_when_a_title_changes() {
    let tree = Tree::new();
    tree.write(I, IMPLEMENTED);
    tree.write_index();
    tree.write(
        I,
        &edit(IMPLEMENTED, "Example decision", "Renamed decision"),
    );
    assert_eq!(
        tree.violations(),
        [("INDEX.md".to_owned(), "index-stale".to_owned())]
    );
}

#[test]
fn index_is_deterministic_ordered_by_path_and_idempotent() {
    let tree = Tree::new();
    // Written out of order, in nested topic folders.
    tree.write("implemented/zeta/2026-01-01-z.md", IMPLEMENTED);
    tree.write("implemented/2026-03-01-b.md", IMPLEMENTED);
    tree.write("implemented/2026-02-01-a.md", IMPLEMENTED);
    tree.write(P, PROPOSED);
    let first = rfc::write_index(&tree.root).unwrap();
    assert!(first.changed);
    assert_eq!(first.rfc_count, 4);
    let text = fs::read_to_string(tree.index_path()).unwrap();
    let second = rfc::write_index(&tree.root).unwrap();
    assert!(!second.changed);
    assert_eq!(fs::read_to_string(tree.index_path()).unwrap(), text);

    assert!(text.starts_with("# RFC index\n\nGenerated by `cargo xtask rfc index`"));
    let a = text.find("implemented/2026-02-01-a.md").unwrap();
    let b = text.find("implemented/2026-03-01-b.md").unwrap();
    let z = text.find("implemented/zeta/2026-01-01-z.md").unwrap();
    assert!(a < b && b < z, "{text}");
    assert!(text.contains(
        "| [Example proposal](proposed/2026-01-01-example.md) | proposed | \
         `docs/rfc/proposed/2026-01-01-example.md` |"
    ));
    assert!(text.contains("## Rejected\n\n_None._\n"));
    assert!(text.contains("4 RFCs: 1 proposed, 3 implemented, 0 rejected."));
}

#[test]
fn index_escapes_titles() {
    let tree = Tree::new();
    tree.write(
        I,
        &edit(IMPLEMENTED, "Example decision", "Pipes | and [brackets]"),
    );
    tree.write_index();
    let text = fs::read_to_string(tree.index_path()).unwrap();
    assert!(
        text.contains("| [Pipes \\| and \\[brackets\\]](implemented/2026-01-02-example.md) |"),
        "{text}"
    );
    assert_eq!(tree.violations(), []);
}

#[test]
fn index_with_crlf_line_endings_is_not_stale() {
    let tree = Tree::new();
    tree.write(I, IMPLEMENTED);
    tree.write_index();
    let text = fs::read_to_string(tree.index_path()).unwrap();
    fs::write(tree.index_path(), text.replace('\n', "\r\n")).unwrap();
    assert_eq!(tree.violations(), []);
}

#[test]
fn violation_display_is_path_rule_explanation() {
    let tree = Tree::new();
    tree.write(
        I,
        &edit(
            IMPLEMENTED,
            "Status: implemented",
            "Status: implemented 2026-01-01",
        ),
    );
    tree.write_index();
    let report = rfc::check(&tree.root).unwrap();
    let lines: Vec<String> = report.violations.iter().map(ToString::to_string).collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].starts_with("docs/rfc/implemented/2026-01-02-example.md:3: status-dated: "),
        "{}",
        lines[0]
    );
}

#[test]
fn missing_rfc_dir_is_an_error_not_a_pass() {
    let tree = Tree::new();
    fs::remove_dir_all(tree.rfc_dir()).unwrap();
    assert!(matches!(
        rfc::check(&tree.root),
        Err(rfc::Error::NoRfcDir(_))
    ));
}

#[test]
fn find_root_walks_up_to_docs_rfc() {
    let tree = Tree::new();
    let deep = tree.root.join("crates/a/src");
    fs::create_dir_all(&deep).unwrap();
    assert_eq!(rfc::find_root(&deep), Some(tree.root.clone()));
}

// ---------------------------------------------------------------------------
// The real repository

fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

#[test]
fn real_repo_rfcs_pass_the_check() {
    let report = rfc::check(repo_root()).unwrap();
    let lines: Vec<String> = report.violations.iter().map(ToString::to_string).collect();
    assert!(
        lines.is_empty(),
        "docs/rfc violations:\n{}",
        lines.join("\n")
    );
    assert!(!report.rfcs.is_empty());
}

#[test]
fn readme_documents_every_rule() {
    let readme = fs::read_to_string(repo_root().join(rfc::RFC_DIR).join(rfc::README_FILE)).unwrap();
    let missing: Vec<&str> = Rule::ALL
        .iter()
        .map(|rule| rule.name())
        .filter(|name| !readme.contains(&format!("`{name}`")))
        .collect();
    assert!(missing.is_empty(), "README.md does not name {missing:?}");
    // The grandfather comment and its date fence, exactly as enforced.
    assert!(readme.contains(&format!("```\n{}\n```", rfc::GRANDFATHER_COMMENT)));
    assert!(readme.contains(&format!("dated before\n{}", rfc::FORMAT_ADOPTED)));
}

#[test]
fn rule_summaries_quote_the_enforced_comment_and_date() {
    let shape = Rule::GrandfatherShape.summary();
    assert!(shape.contains(rfc::GRANDFATHER_COMMENT), "{shape}");
    let date = Rule::GrandfatherDate.summary();
    assert!(date.contains(rfc::FORMAT_ADOPTED), "{date}");
}

// ---------------------------------------------------------------------------
// The binary

fn xtask(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn cli_check_exits_1_and_prints_each_violation() {
    let tree = Tree::new();
    tree.write(
        I,
        &edit(IMPLEMENTED, "Status: implemented", "Status: proposed"),
    );
    let root = tree.root.to_str().unwrap();
    let (code, _, stderr) = xtask(&["rfc", "check", "--root", root]);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("docs/rfc/implemented/2026-01-02-example.md:3: status-folder-mismatch: "),
        "{stderr}"
    );
    assert!(
        stderr.contains("docs/rfc/INDEX.md: index-missing: "),
        "{stderr}"
    );
}

#[test]
fn cli_index_then_check_passes() {
    let tree = Tree::new();
    for (rel, text) in valid_tree() {
        tree.write(rel, &text);
    }
    let root = tree.root.to_str().unwrap();
    let (code, stdout, stderr) = xtask(&["rfc", "index", "--root", root]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("wrote docs/rfc/INDEX.md (3 RFCs)"),
        "{stdout}"
    );
    let (code, stdout, stderr) = xtask(&["rfc", "check", "--root", root]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "rfc check: 3 RFCs ok\n");
}

#[test]
fn cli_rejects_bad_arguments_with_exit_2() {
    assert_eq!(xtask(&["rfc", "frobnicate"]).0, 2);
    assert_eq!(xtask(&["rfc", "check", "--root"]).0, 2);
    assert_eq!(xtask(&["nope"]).0, 2);
    let tree = Tree::new();
    let missing = tree.root.join("nowhere");
    assert_eq!(
        xtask(&["rfc", "check", "--root", missing.to_str().unwrap()]).0,
        2
    );
}

#[test]
fn cli_rules_lists_every_rule() {
    let (code, stdout, _) = xtask(&["rfc", "rules"]);
    assert_eq!(code, 0);
    for rule in Rule::ALL {
        assert!(stdout.contains(rule.name()), "{stdout}");
    }
}
