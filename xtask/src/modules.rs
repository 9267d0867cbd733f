//! The module-DAG check (`cargo xtask modules check`): inside each library
//! crate under `crates/*/src`, the top-level modules refer to each other
//! without a cycle.
//!
//! # The graph
//!
//! A **node** is a top-level module that lives in its own file or
//! directory: `src/x.rs` or `src/x/` (`src/x/mod.rs`, or `src/x.rs` with
//! submodules in `src/x/`). Every file under `src/x/` belongs to node `x`.
//! The crate root (`lib.rs`), `main.rs`, `src/bin/` and modules written
//! inline in `lib.rs` are not nodes.
//!
//! An **edge** `a -> b` means some file of `a` names a path that lands in
//! `b` (one referring line per edge is reported, the first in file order):
//!
//! - `crate::b…` anywhere: `use` items, grouped `use crate::{b, c::D}`,
//!   paths in expressions and types, `$crate::b` in macros;
//! - `super::…` that climbs to the crate root, resolved against the file's
//!   module path and any inline `mod name { … }` it sits in (`super::b`
//!   from `src/a.rs`, `super::super::b` from `src/a/sub.rs`);
//! - `crate::Name` where the crate root re-exports `Name` from `b`
//!   (`pub use b::Name;` in `lib.rs`): going through the root does not hide
//!   a dependency. Glob re-exports (`pub use b::*`) cannot be traced and are
//!   not followed.
//!
//! Comments (doc comments included, so intra-doc links such as
//! ``[`crate::b::X`]`` do not count) and string and char literals are
//! ignored: a reference in prose compiles to nothing. Test code (`#[cfg(test)]`
//! modules) counts like any other code: a test that needs a sibling module
//! is a dependency too. References from other crates (`keel_x::b`) are not
//! this check's business.
//!
//! A **cycle** is a strongly connected component with more than one node;
//! each is reported with its modules and, for every edge inside it, one
//! `file:line` that creates it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

pub(crate) mod lex;
mod refs;

/// The folder, relative to the repository root, whose subfolders are crates.
pub const CRATES_DIR: &str = "crates";

/// A place in a file: the path (relative to the repository root when the
/// graph was built by [`check`]) and the 1-based line.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Location {
    file: PathBuf,
    line: usize,
}

impl Location {
    /// The file.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// The 1-based line.
    pub fn line(&self) -> usize {
        self.line
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file.display(), self.line)
    }
}

/// One edge of the graph: `from` refers to `to` at `location`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edge {
    from: String,
    to: String,
    location: Location,
}

impl Edge {
    /// The referring module.
    pub fn from(&self) -> &str {
        &self.from
    }

    /// The module referred to.
    pub fn to(&self) -> &str {
        &self.to
    }

    /// The first line of `from` that refers to `to`.
    pub fn location(&self) -> &Location {
        &self.location
    }
}

/// The top-level modules of one library crate and their references.
#[derive(Debug, Clone)]
pub struct ModuleGraph {
    crate_dir: PathBuf,
    nodes: BTreeSet<String>,
    /// `(from, to)` to the first referring location.
    edges: BTreeMap<(String, String), Location>,
}

/// A set of modules that refer to each other in a circle, with one
/// referring line for every edge between them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cycle {
    crate_dir: PathBuf,
    modules: Vec<String>,
    edges: Vec<Edge>,
}

impl Cycle {
    /// The crate's directory (as given to [`ModuleGraph::build`]).
    pub fn crate_dir(&self) -> &Path {
        &self.crate_dir
    }

    /// The modules in the cycle, sorted.
    pub fn modules(&self) -> &[String] {
        &self.modules
    }

    /// Every edge between two modules of the cycle, sorted.
    pub fn edges(&self) -> &[Edge] {
        &self.edges
    }
}

impl fmt::Display for Cycle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{}: module cycle between {}",
            self.crate_dir.display(),
            self.modules.join(", ")
        )?;
        for edge in &self.edges {
            writeln!(f, "  {} -> {}: {}", edge.from, edge.to, edge.location)?;
        }
        Ok(())
    }
}

/// Why the check could not run.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// `ROOT/crates` is not a directory.
    NoCratesDir(PathBuf),
    /// A crate asked for by name has no `src/lib.rs` under `ROOT/crates`.
    UnknownCrate(String),
    /// Reading a directory or a source file failed.
    Io {
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
}

impl Error {
    fn io(path: &Path, source: io::Error) -> Self {
        Error::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NoCratesDir(path) => write!(f, "{} is not a directory", path.display()),
            Error::UnknownCrate(name) => {
                write!(f, "no library crate {CRATES_DIR}/{name} (no src/lib.rs)")
            }
            Error::Io { path, source } => write!(f, "{}: {source}", path.display()),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            Error::NoCratesDir(_) | Error::UnknownCrate(_) => None,
        }
    }
}

/// What [`check`] found: every library crate's graph and every cycle.
#[derive(Debug, Clone)]
pub struct Report {
    graphs: Vec<ModuleGraph>,
    cycles: Vec<Cycle>,
}

impl Report {
    /// The graphs, one per library crate, sorted by directory.
    pub fn graphs(&self) -> &[ModuleGraph] {
        &self.graphs
    }

    /// Every cycle in every crate.
    pub fn cycles(&self) -> &[Cycle] {
        &self.cycles
    }

    /// No cycle anywhere.
    pub fn is_ok(&self) -> bool {
        self.cycles.is_empty()
    }
}

/// Builds the graph of every library crate (a directory with `src/lib.rs`)
/// under `root/crates` and finds the cycles. Paths in the report are
/// relative to `root`.
pub fn check(root: &Path) -> Result<Report, Error> {
    check_crates(root, &[])
}

/// As [`check`], for only the crates whose directory under `root/crates`
/// is named in `only` (all of them when `only` is empty).
pub fn check_crates(root: &Path, only: &[String]) -> Result<Report, Error> {
    let crates = root.join(CRATES_DIR);
    if !crates.is_dir() {
        return Err(Error::NoCratesDir(crates));
    }
    let is_library = |dir: &Path| dir.join("src").join("lib.rs").is_file();
    if let Some(unknown) = only.iter().find(|name| !is_library(&crates.join(name))) {
        return Err(Error::UnknownCrate(unknown.clone()));
    }
    let wanted = |dir: &PathBuf| {
        only.is_empty()
            || dir
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| only.iter().any(|o| o == n))
    };
    let mut dirs: Vec<PathBuf> = read_dir(&crates)?
        .into_iter()
        .filter(|dir| is_library(dir) && wanted(dir))
        .collect();
    dirs.sort();
    let mut graphs = Vec::new();
    for dir in dirs {
        let relative = dir.strip_prefix(root).unwrap_or(&dir).to_path_buf();
        graphs.push(ModuleGraph::build_as(&dir, relative)?);
    }
    let cycles = graphs.iter().flat_map(ModuleGraph::cycles).collect();
    Ok(Report { graphs, cycles })
}

impl ModuleGraph {
    /// Builds the graph of the library crate in `crate_dir` (the directory
    /// holding `src/lib.rs`); locations are paths under `crate_dir`.
    pub fn build(crate_dir: &Path) -> Result<ModuleGraph, Error> {
        ModuleGraph::build_as(crate_dir, crate_dir.to_path_buf())
    }

    /// Builds from `dir`, naming files as if the crate were at `shown`.
    fn build_as(dir: &Path, shown: PathBuf) -> Result<ModuleGraph, Error> {
        let src = dir.join("src");
        let mut nodes = BTreeSet::new();
        let mut files: Vec<(String, PathBuf)> = Vec::new();
        for entry in read_dir(&src)? {
            let Some(name) = node_name(&entry) else {
                continue;
            };
            nodes.insert(name.clone());
            if entry.is_dir() {
                for file in rust_files(&entry)? {
                    files.push((name.clone(), file));
                }
            } else {
                files.push((name, entry));
            }
        }
        files.sort();
        let root_file = src.join("lib.rs");
        let root_tokens = lex::tokens(&read(&root_file)?);
        let reexports: BTreeMap<String, String> = refs::reexports(&root_tokens)
            .into_iter()
            .filter(|r| nodes.contains(&r.from))
            .map(|r| (r.name, r.from))
            .collect();
        let mut edges = BTreeMap::new();
        for (node, file) in &files {
            let module_path = module_path(&src, file);
            let tokens = lex::tokens(&read(file)?);
            for reference in refs::root_refs(&tokens, &module_path) {
                let target = if nodes.contains(&reference.name) {
                    Some(&reference.name)
                } else {
                    reexports.get(&reference.name)
                };
                let Some(target) = target.filter(|t| *t != node) else {
                    continue;
                };
                let shown_file = shown.join(file.strip_prefix(dir).unwrap_or(file));
                edges
                    .entry((node.clone(), target.clone()))
                    .or_insert(Location {
                        file: shown_file,
                        line: reference.line,
                    });
            }
        }
        Ok(ModuleGraph {
            crate_dir: shown,
            nodes,
            edges,
        })
    }

    /// The crate's directory.
    pub fn crate_dir(&self) -> &Path {
        &self.crate_dir
    }

    /// The top-level modules, sorted.
    pub fn nodes(&self) -> impl Iterator<Item = &str> {
        self.nodes.iter().map(String::as_str)
    }

    /// Every edge, sorted by `(from, to)`.
    pub fn edges(&self) -> impl Iterator<Item = Edge> + '_ {
        self.edges.iter().map(|((from, to), location)| Edge {
            from: from.clone(),
            to: to.clone(),
            location: location.clone(),
        })
    }

    /// The strongly connected components with more than one module.
    pub fn cycles(&self) -> Vec<Cycle> {
        let mut cycles = Vec::new();
        for component in scc::components(&self.nodes, self.edges.keys()) {
            if component.len() < 2 {
                continue;
            }
            let edges = self
                .edges()
                .filter(|e| component.contains(&e.from) && component.contains(&e.to))
                .collect();
            cycles.push(Cycle {
                crate_dir: self.crate_dir.clone(),
                modules: component.into_iter().collect(),
                edges,
            });
        }
        cycles.sort_by(|a, b| a.modules.cmp(&b.modules));
        cycles
    }
}

mod scc {
    //! Tarjan's strongly connected components; recursive, since a crate has
    //! a few dozen top-level modules at most.

    use std::collections::{BTreeMap, BTreeSet};

    struct State<'a> {
        adjacency: BTreeMap<&'a str, Vec<&'a str>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<BTreeSet<String>>,
    }

    pub(super) fn components<'a>(
        nodes: &'a BTreeSet<String>,
        edges: impl Iterator<Item = &'a (String, String)>,
    ) -> Vec<BTreeSet<String>> {
        let mut adjacency: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (from, to) in edges {
            adjacency.entry(from).or_default().push(to);
        }
        let mut state = State {
            adjacency,
            index: BTreeMap::new(),
            low: BTreeMap::new(),
            stack: Vec::new(),
            on_stack: BTreeSet::new(),
            out: Vec::new(),
        };
        for node in nodes {
            if !state.index.contains_key(node.as_str()) {
                visit(&mut state, node);
            }
        }
        state.out
    }

    fn visit<'a>(state: &mut State<'a>, node: &'a str) {
        let n = state.index.len();
        state.index.insert(node, n);
        state.low.insert(node, n);
        state.stack.push(node);
        state.on_stack.insert(node);
        let next = state.adjacency.get(node).cloned().unwrap_or_default();
        for to in next {
            if !state.index.contains_key(to) {
                visit(state, to);
                let low = state.low[node].min(state.low[to]);
                state.low.insert(node, low);
            } else if state.on_stack.contains(to) {
                let low = state.low[node].min(state.index[to]);
                state.low.insert(node, low);
            }
        }
        if state.low[node] == state.index[node] {
            let mut component = BTreeSet::new();
            while let Some(top) = state.stack.pop() {
                state.on_stack.remove(top);
                component.insert(top.to_owned());
                if top == node {
                    break;
                }
            }
            state.out.push(component);
        }
    }
}

/// The node a `src/` entry is, if any: `x.rs` or a directory `x/`, except
/// the crate roots and `bin/`.
fn node_name(entry: &Path) -> Option<String> {
    let name = entry.file_name()?.to_str()?;
    if entry.is_dir() {
        return (name != "bin").then(|| name.to_owned());
    }
    let stem = name.strip_suffix(".rs")?;
    (!matches!(stem, "lib" | "main")).then(|| stem.to_owned())
}

/// The module path of `file` below the crate root: `src/a.rs` and
/// `src/a/mod.rs` are `[a]`, `src/a/b.rs` is `[a, b]`.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src).unwrap_or(file);
    let mut path: Vec<String> = relative
        .iter()
        .filter_map(|part| part.to_str().map(str::to_owned))
        .collect();
    if let Some(last) = path.pop() {
        let stem = last.strip_suffix(".rs").unwrap_or(&last).to_owned();
        if stem != "mod" {
            path.push(stem);
        }
    }
    path
}

fn read(path: &Path) -> Result<String, Error> {
    fs::read_to_string(path).map_err(|e| Error::io(path, e))
}

fn read_dir(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let entries = fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    entries
        .map(|entry| entry.map(|e| e.path()).map_err(|e| Error::io(dir, e)))
        .collect()
}

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let mut out = Vec::new();
    for entry in read_dir(dir)? {
        if entry.is_dir() {
            out.extend(rust_files(&entry)?);
        } else if entry.extension().is_some_and(|ext| ext == "rs") {
            out.push(entry);
        }
    }
    Ok(out)
}
