//! The map check (`cargo xtask arch check`): ARCHITECTURE.md stays a map
//! (at most [`MAX_LINES`] lines), and every row of its invariant table names
//! an enforcing function and a test that exist.
//!
//! # The table
//!
//! The first Markdown table whose header row starts with `| Invariant |`.
//! Its columns are: the invariant, the enforcing functions, the tests. A
//! cell lists its items as backticked spans (prose around them is allowed);
//! each row needs at least one of each.
//!
//! - An **enforcing function** is a path whose first segment names the
//!   crate (`eventlog` or `keel_eventlog` for `crates/eventlog/src`,
//!   `xtask` for `xtask/src`), then optional module segments (lowercase,
//!   narrowing the search to `src/a/b.rs` and `src/a/b/`), then either
//!   `fn_name`, `Type::method` (some `impl … Type` or `trait Type` block
//!   there has `fn method` directly in its body), or a bare `Type` (a
//!   `struct`, `enum`, `trait`, `type`, `const` or `static` of that name:
//!   `UPPER_CASE` counts as a type).
//! - A **test** is `path/to/file.rs::test_fn`, the path relative to the
//!   repository root: the file holds `fn test_fn`.
//!
//! The search is textual, over the tokens of the source with comments and
//! literals removed (the lexer of the module check), so a name in prose
//! does not count.

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

mod lookup;
#[cfg(test)]
mod tests;

pub use lookup::{FsTree, SourceTree};

/// The file checked, relative to the repository root.
pub const ARCH_FILE: &str = "ARCHITECTURE.md";
/// The most lines the map may have.
pub const MAX_LINES: usize = 450;

/// One thing wrong with the map, at a 1-based line of ARCHITECTURE.md.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    line: usize,
    row: String,
    problem: String,
}

impl Violation {
    /// The 1-based line of ARCHITECTURE.md (0 for the whole file).
    pub fn line(&self) -> usize {
        self.line
    }

    /// The row's invariant, shortened (empty for the whole file).
    pub fn row(&self) -> &str {
        &self.row
    }

    /// What is wrong.
    pub fn problem(&self) -> &str {
        &self.problem
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.row.is_empty() {
            write!(f, "{ARCH_FILE}:{}: {}", self.line, self.problem)
        } else {
            write!(
                f,
                "{ARCH_FILE}:{}: row \"{}\": {}",
                self.line, self.row, self.problem
            )
        }
    }
}

/// What `arch check` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    lines: usize,
    rows: usize,
    violations: Vec<Violation>,
}

impl Report {
    /// The file's line count.
    pub fn lines(&self) -> usize {
        self.lines
    }

    /// The invariant table's row count.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Every violation, in file order.
    pub fn violations(&self) -> &[Violation] {
        &self.violations
    }

    /// Whether nothing is wrong.
    pub fn is_ok(&self) -> bool {
        self.violations.is_empty()
    }
}

/// Why the check could not run.
#[derive(Debug)]
pub enum Error {
    /// Reading ARCHITECTURE.md failed.
    Io {
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { path, source } => write!(f, "{}: {source}", path.display()),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
        }
    }
}

/// Checks `root/ARCHITECTURE.md` against the sources under `root`.
pub fn check(root: &Path) -> Result<Report, Error> {
    let path = root.join(ARCH_FILE);
    let text = fs::read_to_string(&path).map_err(|source| Error::Io { path, source })?;
    Ok(check_text(&text, &FsTree::new(root)))
}

/// Checks the text of an ARCHITECTURE.md against `tree`.
pub fn check_text(text: &str, tree: &dyn SourceTree) -> Report {
    let lines = text.lines().count();
    let mut violations = Vec::new();
    if lines > MAX_LINES {
        violations.push(Violation {
            line: 0,
            row: String::new(),
            problem: format!("{lines} lines, more than the {MAX_LINES} a map may have"),
        });
    }
    let rows = table_rows(text);
    if rows.is_empty() {
        violations.push(Violation {
            line: 0,
            row: String::new(),
            problem: "no invariant table (a header row starting `| Invariant |`)".to_owned(),
        });
    }
    for row in &rows {
        violations.extend(check_row(row, tree));
    }
    Report {
        lines,
        rows: rows.len(),
        violations,
    }
}

/// One row of the invariant table.
#[derive(Debug)]
struct Row {
    line: usize,
    cells: Vec<String>,
}

impl Row {
    /// The invariant, shortened for messages.
    fn label(&self) -> String {
        let text = self.cells.first().map_or("", |c| c.trim());
        match text.char_indices().nth(60) {
            Some((at, _)) => format!("{}…", &text[..at]),
            None => text.to_owned(),
        }
    }
}

/// The rows of the first table whose header's first cell is `Invariant`.
fn table_rows(text: &str) -> Vec<Row> {
    let mut lines = text.lines().enumerate();
    let header = lines.by_ref().find(|(_, line)| {
        split_cells(line).is_some_and(|cells| {
            cells
                .first()
                .is_some_and(|c| c.trim().eq_ignore_ascii_case("invariant"))
        })
    });
    if header.is_none() {
        return Vec::new();
    }
    lines
        .skip(1) // the `|---|` separator
        .map_while(|(index, line)| {
            split_cells(line).map(|cells| Row {
                line: index + 1,
                cells,
            })
        })
        .collect()
}

/// The cells of a table line (`| a | b |`), splitting on `|` not escaped
/// as `\|`; `None` when the line is not a table line.
fn split_cells(line: &str) -> Option<Vec<String>> {
    let inner = line.trim().strip_prefix('|')?;
    let inner = inner.strip_suffix('|').unwrap_or(inner);
    let mut cells = vec![String::new()];
    let mut escaped = false;
    for c in inner.chars() {
        match c {
            '|' if !escaped => cells.push(String::new()),
            _ => {
                if let Some(cell) = cells.last_mut() {
                    cell.push(c);
                }
            }
        }
        escaped = c == '\\';
    }
    Some(cells)
}

/// The backticked spans of a cell.
fn code_spans(cell: &str) -> Vec<&str> {
    cell.split('`').skip(1).step_by(2).collect()
}

fn check_row(row: &Row, tree: &dyn SourceTree) -> Vec<Violation> {
    let problem = |problem: String| Violation {
        line: row.line,
        row: row.label(),
        problem,
    };
    if row.cells.len() != 3 {
        return vec![problem(format!(
            "{} cells, not 3 (invariant | enforcing function | test)",
            row.cells.len()
        ))];
    }
    let mut out = Vec::new();
    let functions = code_spans(&row.cells[1]);
    let tests = code_spans(&row.cells[2]);
    if functions.is_empty() {
        out.push(problem("names no enforcing function".to_owned()));
    }
    if tests.is_empty() {
        out.push(problem("names no test".to_owned()));
    }
    for item in functions {
        if let Err(why) = lookup::find_item(tree, item) {
            out.push(problem(format!("enforcing function `{item}`: {why}")));
        }
    }
    for item in tests {
        if let Err(why) = lookup::find_test(tree, item) {
            out.push(problem(format!("test `{item}`: {why}")));
        }
    }
    out
}
