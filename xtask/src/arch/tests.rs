//! `arch check` over in-memory trees: one `check` helper, a table of good
//! and bad inputs.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::{MAX_LINES, check_text};

/// The sources every case checks against.
fn tree() -> BTreeMap<PathBuf, String> {
    let files = [
        (
            "crates/eventlog/src/log.rs",
            "//! fn in_a_comment() {}\n\
             pub struct RunLog;\n\
             impl RunLog {\n    pub fn commit_head(&self) { fn nested() {} }\n}\n\
             pub(crate) fn check_size() -> impl Iterator<Item = RunLog> { fn helper() {} None.into_iter() }\n\
             impl std::fmt::Display for RunLog { fn fmt(&self) {} }\n\
             const NOTE: &str = \"fn in_a_literal\";\n\
             pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;\n",
        ),
        (
            "crates/eventlog/src/history/chain.rs",
            "pub fn rebuild_chain() {}\n\
             pub trait Store { fn page(&self) {} }\n\
             impl<T: Clone> Store for Wrapper<T> where T: Send { fn page(&self) {} }\n",
        ),
        ("xtask/src/modules.rs", "pub fn check_crates() {}\n"),
        (
            "crates/eventlog/tests/log.rs",
            "#[test]\nfn seq_has_no_gap() {}\n// fn commented_out() {}\n",
        ),
    ];
    files
        .into_iter()
        .map(|(path, text)| (PathBuf::from(path), text.to_owned()))
        .collect()
}

/// The problems `arch check` reports for a document whose table has one
/// row `| rule | functions | tests |`, plus `extra_lines` blank lines.
fn check(functions: &str, tests: &str, extra_lines: usize) -> Vec<String> {
    let doc = format!(
        "# Architecture\n\n| Invariant | Enforced by | Test |\n|---|---|---|\n\
         | seq has no gap \\| ever | {functions} | {tests} |\n\nAfter.\n{}",
        "\n".repeat(extra_lines)
    );
    check_text(&doc, &tree())
        .violations()
        .iter()
        .map(ToString::to_string)
        .collect()
}

const TEST: &str = "`crates/eventlog/tests/log.rs::seq_has_no_gap`";

#[test]
fn good_rows_pass() {
    let good = [
        "`eventlog::log::RunLog::commit_head`",
        "`keel_eventlog::RunLog::commit_head`",
        "`eventlog::log::check_size`, by `eventlog::RunLog`",
        "`eventlog::history::chain::rebuild_chain`",
        "`eventlog::history::rebuild_chain`",
        "`eventlog::Store::page` (trait default)",
        "`eventlog::Wrapper::page`",
        "`xtask::modules::check_crates`",
        "`eventlog::log::MAX_SAFE_INTEGER`",
        "`eventlog::RunLog::fmt`",
    ];
    for functions in good {
        assert_eq!(
            check(functions, TEST, 0),
            Vec::<String>::new(),
            "{functions}"
        );
    }
}

/// `(functions, tests, expected problem)`: each row has exactly one problem.
const BAD: &[(&str, &str, &str)] = &[
    (
        "`eventlog::log::commit_tail`",
        TEST,
        "no `fn commit_tail` in eventlog::log",
    ),
    (
        "`eventlog::RunLog::nested`",
        TEST,
        "no `fn nested` in an impl of `RunLog`",
    ),
    (
        "`eventlog::Wrapper::commit_head`",
        TEST,
        "in an impl of `Wrapper`",
    ),
    (
        "`eventlog::Display::fmt`",
        TEST,
        "no `fn fmt` in an impl of `Display`",
    ),
    (
        "`eventlog::RunLog::helper`",
        TEST,
        "no `fn helper` in an impl of `RunLog`",
    ),
    ("`eventlog::in_a_comment`", TEST, "no `fn in_a_comment`"),
    ("`eventlog::in_a_literal`", TEST, "no `fn in_a_literal`"),
    (
        "`eventlog::RunLogs`",
        TEST,
        "no struct, enum, trait, type or const `RunLogs`",
    ),
    (
        "`eventlog::snapshot::restore`",
        TEST,
        "no module `snapshot`",
    ),
    ("`stream::validator::accept`", TEST, "no crate `stream`"),
    (
        "`eventlog::RunLog::commit_head::x`",
        TEST,
        "expected crate::[module::]fn",
    ),
    ("prose only", TEST, "names no enforcing function"),
    ("`eventlog::log::check_size`", "prose only", "names no test"),
    (
        "`eventlog::log::check_size`",
        "`crates/eventlog/tests/log.rs::gone`",
        "no `fn gone` in",
    ),
    (
        "`eventlog::log::check_size`",
        "`crates/eventlog/tests/log.rs::commented_out`",
        "no `fn commented_out` in",
    ),
    (
        "`eventlog::log::check_size`",
        "`crates/eventlog/tests/nope.rs::x`",
        "no file",
    ),
    (
        "`eventlog::log::check_size`",
        "`seq_has_no_gap`",
        "expected path/to/file.rs",
    ),
];

#[test]
fn bad_rows_name_the_row_and_the_problem() {
    let row = "row \"seq has no gap \\| ever\"";
    for &(functions, tests, expected) in BAD {
        let problems = check(functions, tests, 0);
        assert_eq!(problems.len(), 1, "{functions} / {tests}: {problems:?}");
        assert!(
            problems[0].contains(row) && problems[0].contains(expected),
            "{functions} / {tests}: {problems:?} lacks {expected}"
        );
        assert!(
            problems[0].starts_with("ARCHITECTURE.md:5: "),
            "{problems:?}"
        );
    }
}

#[test]
fn the_line_bound_and_the_table_are_required() {
    let fn_ok = "`eventlog::log::check_size`";
    assert_eq!(check(fn_ok, TEST, MAX_LINES - 7), Vec::<String>::new());
    let long = check(fn_ok, TEST, MAX_LINES - 6);
    assert_eq!(long.len(), 1, "{long:?}");
    assert!(long[0].contains("451 lines, more than the 450"), "{long:?}");

    let no_table = check_text("# Architecture\n\nNo table.\n", &tree());
    assert_eq!(no_table.rows(), 0);
    assert!(
        no_table.violations()[0]
            .problem()
            .contains("no invariant table")
    );

    let two_cells = check_text("| Invariant | F |\n|---|---|\n| a | b |\n", &tree());
    assert!(
        two_cells.violations()[0]
            .problem()
            .contains("2 cells, not 3")
    );
}
