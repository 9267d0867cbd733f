//! The RFC workflow: the format check (`cargo xtask rfc check`) and the index
//! generator (`cargo xtask rfc index`).
//!
//! The contract enforced here is written down in `docs/rfc/README.md`; every
//! [`Rule`] is named there, and a test keeps the two in sync.

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

mod document;
mod index;
mod markdown;
mod prose;
mod readme;
mod sections;
mod tree;

pub use document::{Document, check_document};
pub use index::render_index;
pub use prose::{FORMAT_ADOPTED, GRANDFATHER_COMMENT};
pub use readme::check_readme;

/// The RFC directory, relative to the repository root.
pub const RFC_DIR: &str = "docs/rfc";
/// The generated index, relative to [`RFC_DIR`].
pub const INDEX_FILE: &str = "INDEX.md";
/// The curated front door, relative to [`RFC_DIR`]; not an RFC.
pub const README_FILE: &str = "README.md";

/// Where an RFC is in its life; each value is a folder under `docs/rfc/` and
/// the only word its `Status:` line may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Lifecycle {
    /// Under discussion, or accepted but not shipped yet.
    Proposed,
    /// Shipped; the text describes the system as it is.
    Implemented,
    /// Decided against; the proposal is kept as it was, plus why.
    Rejected,
}

impl Lifecycle {
    /// Every lifecycle, in index order.
    pub const ALL: [Lifecycle; 3] = [
        Lifecycle::Proposed,
        Lifecycle::Implemented,
        Lifecycle::Rejected,
    ];

    /// The folder name under `docs/rfc/`, which is also the status word.
    pub fn folder(self) -> &'static str {
        match self {
            Lifecycle::Proposed => "proposed",
            Lifecycle::Implemented => "implemented",
            Lifecycle::Rejected => "rejected",
        }
    }

    /// The only value the `Status:` line of an RFC in this folder may have.
    pub fn status(self) -> &'static str {
        self.folder()
    }

    /// The lifecycle whose folder is `name`, if any.
    pub fn from_folder(name: &str) -> Option<Lifecycle> {
        Lifecycle::ALL.into_iter().find(|l| l.folder() == name)
    }

    fn heading(self) -> &'static str {
        match self {
            Lifecycle::Proposed => "Proposed",
            Lifecycle::Implemented => "Implemented",
            Lifecycle::Rejected => "Rejected",
        }
    }
}

impl fmt::Display for Lifecycle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.folder())
    }
}

/// A rule of the RFC format; its [`name`](Rule::name) is what `rfc check`
/// prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Rule {
    /// An RFC file is not named `YYYY-MM-DD-slug.md` with a real date.
    FileName,
    /// A topic folder inside a lifecycle folder is not a lowercase slug.
    TopicName,
    /// A Markdown file under `docs/rfc/` sits outside the lifecycle folders.
    StrayFile,
    /// The same RFC file name exists in more than one place.
    DuplicateRfc,
    /// The file is not valid UTF-8.
    NotUtf8,
    /// The first line is not `# RFC: <title>`.
    TitleMissing,
    /// The first non-blank line after the title is not a `Status:` line.
    StatusMissing,
    /// The `Status:` line carries a date.
    StatusDated,
    /// The `Status:` value is not exactly one of the lifecycle words.
    StatusInvalid,
    /// The `Status:` value names a different lifecycle than the folder.
    StatusFolderMismatch,
    /// No `## Problem` section.
    ProblemMissing,
    /// The first `##` section is not `## Problem`.
    ProblemNotFirst,
    /// No `## Alternatives considered` section.
    AlternativesMissing,
    /// No `## Proposal` section in `proposed/` or `rejected/`.
    ProposalMissing,
    /// No `## Decision` section in `implemented/`.
    DecisionMissing,
    /// No `## Consequences` section in `implemented/`.
    ConsequencesMissing,
    /// No `## Why rejected` section in `rejected/`.
    WhyRejectedMissing,
    /// A proposal-era heading outside `proposed/`.
    ProposalEraHeading,
    /// A `## Why rejected` section outside `rejected/`.
    WhyRejectedMisplaced,
    /// A `## Decision` section outside `implemented/`.
    DecisionMisplaced,
    /// A `## Consequences` section outside `implemented/`.
    ConsequencesMisplaced,
    /// A rejected RFC whose `## Why rejected` is not appended after the
    /// frozen proposal as its last section.
    RejectedShape,
    /// The same `##` heading appears twice.
    DuplicateHeading,
    /// A `##` section has no content.
    EmptySection,
    /// An `XXX` debt marker in the prose.
    DebtMarker,
    /// The grandfather comment in an RFC dated on or after the format's
    /// adoption ([`FORMAT_ADOPTED`]).
    GrandfatherDate,
    /// A comment that tries to be the grandfather comment but is not exactly
    /// [`GRANDFATHER_COMMENT`] on a line of its own, or appears twice.
    GrandfatherShape,
    /// Both `## Alternatives considered` and the grandfather comment.
    GrandfatherRedundant,
    /// An index-shaped table row (one that lists an RFC file) in the curated
    /// `docs/rfc/README.md`.
    ReadmeIndexRow,
    /// `docs/rfc/INDEX.md` does not exist.
    IndexMissing,
    /// `docs/rfc/INDEX.md` differs from what `rfc index` generates.
    IndexStale,
}

impl Rule {
    /// Every rule, in the order the README lists them.
    pub const ALL: [Rule; 31] = [
        Rule::FileName,
        Rule::TopicName,
        Rule::StrayFile,
        Rule::DuplicateRfc,
        Rule::NotUtf8,
        Rule::TitleMissing,
        Rule::StatusMissing,
        Rule::StatusDated,
        Rule::StatusInvalid,
        Rule::StatusFolderMismatch,
        Rule::ProblemMissing,
        Rule::ProblemNotFirst,
        Rule::AlternativesMissing,
        Rule::ProposalMissing,
        Rule::DecisionMissing,
        Rule::ConsequencesMissing,
        Rule::WhyRejectedMissing,
        Rule::ProposalEraHeading,
        Rule::WhyRejectedMisplaced,
        Rule::DecisionMisplaced,
        Rule::ConsequencesMisplaced,
        Rule::RejectedShape,
        Rule::DuplicateHeading,
        Rule::EmptySection,
        Rule::DebtMarker,
        Rule::GrandfatherDate,
        Rule::GrandfatherShape,
        Rule::GrandfatherRedundant,
        Rule::ReadmeIndexRow,
        Rule::IndexMissing,
        Rule::IndexStale,
    ];

    /// The stable name printed in violations.
    pub fn name(self) -> &'static str {
        match self {
            Rule::FileName => "file-name",
            Rule::TopicName => "topic-name",
            Rule::StrayFile => "stray-file",
            Rule::DuplicateRfc => "duplicate-rfc",
            Rule::NotUtf8 => "not-utf8",
            Rule::TitleMissing => "title-missing",
            Rule::StatusMissing => "status-missing",
            Rule::StatusDated => "status-dated",
            Rule::StatusInvalid => "status-invalid",
            Rule::StatusFolderMismatch => "status-folder-mismatch",
            Rule::ProblemMissing => "problem-missing",
            Rule::ProblemNotFirst => "problem-not-first",
            Rule::AlternativesMissing => "alternatives-missing",
            Rule::ProposalMissing => "proposal-missing",
            Rule::DecisionMissing => "decision-missing",
            Rule::ConsequencesMissing => "consequences-missing",
            Rule::WhyRejectedMissing => "why-rejected-missing",
            Rule::ProposalEraHeading => "proposal-era-heading",
            Rule::WhyRejectedMisplaced => "why-rejected-misplaced",
            Rule::DecisionMisplaced => "decision-misplaced",
            Rule::ConsequencesMisplaced => "consequences-misplaced",
            Rule::RejectedShape => "rejected-shape",
            Rule::DuplicateHeading => "duplicate-heading",
            Rule::EmptySection => "empty-section",
            Rule::DebtMarker => "debt-marker",
            Rule::GrandfatherDate => "grandfather-date",
            Rule::GrandfatherShape => "grandfather-shape",
            Rule::GrandfatherRedundant => "grandfather-redundant",
            Rule::ReadmeIndexRow => "readme-index-row",
            Rule::IndexMissing => "index-missing",
            Rule::IndexStale => "index-stale",
        }
    }

    /// A one-line description, printed by `cargo xtask rfc rules`.
    pub fn summary(self) -> &'static str {
        match self {
            Rule::FileName => "an RFC file is named YYYY-MM-DD-slug.md, with a real date",
            Rule::TopicName => "a topic folder is a lowercase slug (a-z, 0-9, single hyphens)",
            Rule::StrayFile => {
                "Markdown under docs/rfc/ is README.md, INDEX.md or an RFC in a lifecycle folder"
            }
            Rule::DuplicateRfc => "an RFC file name exists in exactly one place",
            Rule::NotUtf8 => "an RFC file is UTF-8",
            Rule::TitleMissing => "the first line is `# RFC: <title>`",
            Rule::StatusMissing => "the first non-blank line after the title is `Status: <status>`",
            Rule::StatusDated => "the Status line carries no date",
            Rule::StatusInvalid => {
                "the Status value is exactly one of proposed, implemented, rejected"
            }
            Rule::StatusFolderMismatch => "the Status value matches the lifecycle folder",
            Rule::ProblemMissing => "every RFC has a `## Problem` section",
            Rule::ProblemNotFirst => "`## Problem` is the first `##` section",
            Rule::AlternativesMissing => "every RFC has a `## Alternatives considered` section",
            Rule::ProposalMissing => "proposed/ and rejected/ RFCs have a `## Proposal` section",
            Rule::DecisionMissing => "implemented/ RFCs have a `## Decision` section",
            Rule::ConsequencesMissing => "implemented/ RFCs have a `## Consequences` section",
            Rule::WhyRejectedMissing => "rejected/ RFCs have a `## Why rejected` section",
            Rule::ProposalEraHeading => {
                "`## Acceptance criteria` and `## Risks` appear only in proposed/, \
                 `## Proposal` only in proposed/ and rejected/"
            }
            Rule::WhyRejectedMisplaced => "`## Why rejected` appears only in rejected/",
            Rule::DecisionMisplaced => "`## Decision` appears only in implemented/",
            Rule::ConsequencesMisplaced => "`## Consequences` appears only in implemented/",
            Rule::RejectedShape => {
                "a rejected/ RFC is the frozen proposal with `## Why rejected` appended \
                 as its last `##` section"
            }
            Rule::DuplicateHeading => "no `##` heading appears twice",
            Rule::EmptySection => "no `##` section is empty",
            Rule::DebtMarker => "no `XXX` debt marker in an RFC's prose",
            Rule::GrandfatherDate => {
                "the grandfather comment only in RFCs dated before the format's adoption \
                 (2026-11-30)"
            }
            Rule::GrandfatherShape => {
                "the grandfather comment is exactly \
                 `<!-- rfc-format: alternatives-not-recorded (pre-format RFC) -->` \
                 on a line of its own, once"
            }
            Rule::GrandfatherRedundant => {
                "an RFC has `## Alternatives considered` or the grandfather comment, not both"
            }
            Rule::ReadmeIndexRow => {
                "the curated docs/rfc/README.md has no index-shaped table row (one that \
                 lists an RFC file); the list is INDEX.md"
            }
            Rule::IndexMissing => "docs/rfc/INDEX.md exists",
            Rule::IndexStale => "docs/rfc/INDEX.md is exactly what `cargo xtask rfc index` writes",
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One broken rule, printed as `path:line: rule-name: explanation` (or
/// `path: rule-name: explanation` when the rule is about the file as a whole
/// or something it lacks).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    path: String,
    line: Option<usize>,
    rule: Rule,
    message: String,
}

impl Violation {
    /// A violation of the file as a whole (a name, a missing section).
    pub(crate) fn new(path: &str, rule: Rule, message: impl Into<String>) -> Self {
        Violation {
            path: path.to_owned(),
            line: None,
            rule,
            message: message.into(),
        }
    }

    /// A violation at a 1-based line of the file.
    pub(crate) fn at(path: &str, line: usize, rule: Rule, message: impl Into<String>) -> Self {
        Violation {
            line: Some(line),
            ..Violation::new(path, rule, message)
        }
    }

    /// The offending file, relative to the repository root, `/`-separated.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The 1-based line the violation is on, when it is on one.
    pub fn line(&self) -> Option<usize> {
        self.line
    }

    /// The rule it breaks.
    pub fn rule(&self) -> Rule {
        self.rule
    }

    /// What is wrong and how to fix it.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}: {}: {}", self.path, self.rule, self.message),
            None => write!(f, "{}: {}: {}", self.path, self.rule, self.message),
        }
    }
}

/// One RFC file as the index lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Path relative to `docs/rfc/`, `/`-separated, e.g. `implemented/2026-11-30-x.md`.
    pub path: String,
    /// The lifecycle folder it sits in.
    pub lifecycle: Lifecycle,
    /// The title from `# RFC: <title>`, if the first line has one.
    pub title: Option<String>,
    /// The value of the `Status:` line, as written, if there is one.
    pub status: Option<String>,
}

impl Entry {
    /// The path relative to the repository root.
    pub fn repo_path(&self) -> String {
        format!("{RFC_DIR}/{}", self.path)
    }
}

/// The outcome of [`check`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// Every RFC found, sorted by path.
    pub rfcs: Vec<Entry>,
    /// Every violation, sorted by path (stable within a file).
    pub violations: Vec<Violation>,
}

impl Report {
    /// Whether the tree passes.
    pub fn is_ok(&self) -> bool {
        self.violations.is_empty()
    }
}

/// What [`write_index`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexWrite {
    /// The index file written.
    pub path: PathBuf,
    /// False when the file already had exactly the generated content.
    pub changed: bool,
    /// How many RFCs it lists.
    pub rfc_count: usize,
}

/// A failure to run the check at all (as opposed to a [`Violation`]).
#[derive(Debug)]
pub enum Error {
    /// `ROOT/docs/rfc` is not a directory.
    NoRfcDir(PathBuf),
    /// No repository root (a directory containing `docs/rfc`) was found.
    RootNotFound,
    /// Reading or writing a file failed.
    Io {
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
}

impl Error {
    pub(crate) fn io(path: &Path, source: io::Error) -> Self {
        Error::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NoRfcDir(path) => write!(f, "{} is not a directory", path.display()),
            Error::RootNotFound => write!(
                f,
                "no repository root found: no directory containing {RFC_DIR} \
                 (pass --root DIR)"
            ),
            Error::Io { path, source } => write!(f, "{}: {source}", path.display()),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            Error::NoRfcDir(_) | Error::RootNotFound => None,
        }
    }
}

/// The nearest of `start` and its ancestors that contains `docs/rfc`.
pub fn find_root(start: &Path) -> Option<PathBuf> {
    start
        .ancestors()
        .find(|dir| dir.join(RFC_DIR).is_dir())
        .map(Path::to_path_buf)
}

/// Validates every RFC under `root/docs/rfc` and the freshness of the index.
pub fn check(root: &Path) -> Result<Report, Error> {
    let scan = tree::scan(root)?;
    let mut violations = scan.violations;
    let readme_path = root.join(RFC_DIR).join(README_FILE);
    match fs::read(&readme_path) {
        Ok(bytes) => violations.extend(check_readme(
            &format!("{RFC_DIR}/{README_FILE}"),
            &String::from_utf8_lossy(&bytes),
        )),
        // The README is the front door, but its absence is not an RFC rule.
        Err(err) if err.kind() == io::ErrorKind::NotFound => {}
        Err(err) => return Err(Error::io(&readme_path, err)),
    }
    let index_path = root.join(RFC_DIR).join(INDEX_FILE);
    let display = format!("{RFC_DIR}/{INDEX_FILE}");
    let expected = render_index(&scan.rfcs);
    match fs::read(&index_path) {
        Ok(bytes) => {
            let actual = String::from_utf8_lossy(&bytes).replace("\r\n", "\n");
            if let Some(message) = index::staleness(&expected, &actual) {
                violations.push(Violation::new(&display, Rule::IndexStale, message));
            }
        }
        Err(err) if err.kind() == io::ErrorKind::NotFound => violations.push(Violation::new(
            &display,
            Rule::IndexMissing,
            "the generated index does not exist; run `cargo xtask rfc index`",
        )),
        Err(err) => return Err(Error::io(&index_path, err)),
    }
    violations.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(Report {
        rfcs: scan.rfcs,
        violations,
    })
}

/// The index `rfc index` would write for `root`.
pub fn generate_index(root: &Path) -> Result<String, Error> {
    Ok(render_index(&tree::scan(root)?.rfcs))
}

/// Writes `root/docs/rfc/INDEX.md`, leaving the file untouched when it is
/// already up to date.
pub fn write_index(root: &Path) -> Result<IndexWrite, Error> {
    let scan = tree::scan(root)?;
    let content = render_index(&scan.rfcs);
    let path = root.join(RFC_DIR).join(INDEX_FILE);
    let changed = match fs::read(&path) {
        Ok(existing) => existing != content.as_bytes(),
        Err(err) if err.kind() == io::ErrorKind::NotFound => true,
        Err(err) => return Err(Error::io(&path, err)),
    };
    if changed {
        fs::write(&path, &content).map_err(|err| Error::io(&path, err))?;
    }
    Ok(IndexWrite {
        path,
        changed,
        rfc_count: scan.rfcs.len(),
    })
}
