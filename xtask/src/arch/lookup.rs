//! Where the table's names are looked up: a source tree (the repository, or
//! an in-memory one in the unit tests) and the textual searches over its
//! tokens (`fn name`, `impl … Type { fn method }`, `struct Type`).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use crate::modules::lex::{self, Kind, Token};

/// The files the check reads, by path relative to the repository root.
pub trait SourceTree {
    /// The text of the file at `path`, if it exists.
    fn read(&self, path: &Path) -> Option<String>;
    /// Every `.rs` file under the folder `dir`, relative to `dir`, sorted.
    fn rust_files(&self, dir: &Path) -> Vec<PathBuf>;
}

/// The repository on disk.
#[derive(Debug, Clone)]
pub struct FsTree {
    root: PathBuf,
}

impl FsTree {
    /// The tree under `root`.
    pub fn new(root: &Path) -> Self {
        FsTree {
            root: root.to_path_buf(),
        }
    }
}

impl SourceTree for FsTree {
    fn read(&self, path: &Path) -> Option<String> {
        fs::read_to_string(self.root.join(path)).ok()
    }

    fn rust_files(&self, dir: &Path) -> Vec<PathBuf> {
        let base = self.root.join(dir);
        let mut out = Vec::new();
        let mut pending = vec![base.clone()];
        while let Some(folder) = pending.pop() {
            let Ok(entries) = fs::read_dir(&folder) else {
                continue;
            };
            for path in entries.flatten().map(|entry| entry.path()) {
                if path.is_dir() {
                    pending.push(path);
                } else if path.extension().is_some_and(|ext| ext == "rs")
                    && let Ok(rel) = path.strip_prefix(&base)
                {
                    out.push(rel.to_path_buf());
                }
            }
        }
        out.sort();
        out
    }
}

/// An in-memory tree: path (relative to the root) to text.
impl SourceTree for BTreeMap<PathBuf, String> {
    fn read(&self, path: &Path) -> Option<String> {
        self.get(path).cloned()
    }

    fn rust_files(&self, dir: &Path) -> Vec<PathBuf> {
        self.keys()
            .filter_map(|path| path.strip_prefix(dir).ok())
            .filter(|rel| rel.extension().is_some_and(|ext| ext == "rs"))
            .map(Path::to_path_buf)
            .collect()
    }
}

/// What a function path names after its crate and modules.
enum Target<'a> {
    Function(&'a str),
    Type(&'a str),
    Method(&'a str, &'a str),
}

/// Finds an enforcing function (`crate::module::fn`, `crate::Type::method`,
/// `crate::Type`); the error says what is missing.
pub(super) fn find_item(tree: &dyn SourceTree, item: &str) -> Result<(), String> {
    let segments: Vec<&str> = item.split("::").collect();
    let [krate, rest @ ..] = segments.as_slice() else {
        return Err("empty path".to_owned());
    };
    let src = crate_src(krate);
    let all = tree.rust_files(&src);
    if all.is_empty() {
        return Err(format!(
            "no crate `{krate}` (no .rs file under {})",
            src.display()
        ));
    }
    let split = rest
        .iter()
        .position(|s| s.starts_with(|c: char| c.is_ascii_uppercase()))
        .unwrap_or(rest.len().saturating_sub(1));
    let (modules, named) = rest.split_at(split);
    let target = match named {
        [function] if split == rest.len() - 1 && !is_type(function) => Target::Function(function),
        [ty] => Target::Type(ty),
        [ty, method] => Target::Method(ty, method),
        _ => return Err("expected crate::[module::]fn, Type or Type::method".to_owned()),
    };
    let files = module_files(&all, modules);
    if files.is_empty() {
        return Err(format!(
            "no module `{}` in {}",
            modules.join("::"),
            src.display()
        ));
    }
    let found = files.iter().any(|file| {
        let text = tree.read(&src.join(file)).unwrap_or_default();
        let tokens = lex::tokens(&text);
        match target {
            Target::Function(name) => has_fn(&tokens, name),
            Target::Type(name) => has_type(&tokens, name),
            Target::Method(ty, method) => has_method(&tokens, ty, method),
        }
    });
    if found {
        return Ok(());
    }
    let place = match modules {
        [] => src.display().to_string(),
        _ => format!("{}::{}", krate, modules.join("::")),
    };
    Err(match target {
        Target::Function(name) => format!("no `fn {name}` in {place}"),
        Target::Type(name) => format!("no struct, enum, trait, type or const `{name}` in {place}"),
        Target::Method(ty, method) => format!("no `fn {method}` in an impl of `{ty}` in {place}"),
    })
}

/// Finds a test (`path/file.rs::test_fn`).
pub(super) fn find_test(tree: &dyn SourceTree, item: &str) -> Result<(), String> {
    let Some((path, name)) = item.rsplit_once("::").filter(|(p, _)| p.ends_with(".rs")) else {
        return Err("expected path/to/file.rs::test_fn".to_owned());
    };
    let Some(text) = tree.read(Path::new(path)) else {
        return Err(format!("no file {path}"));
    };
    if has_fn(&lex::tokens(&text), name) {
        Ok(())
    } else {
        Err(format!("no `fn {name}` in {path}"))
    }
}

fn is_type(segment: &str) -> bool {
    segment.starts_with(|c: char| c.is_ascii_uppercase())
}

/// `xtask` is `xtask/src`; `keel_x` and `x` are `crates/x/src`; `keel` is
/// the facade, `crates/keel/src`.
fn crate_src(krate: &str) -> PathBuf {
    if krate == "xtask" {
        return PathBuf::from("xtask/src");
    }
    let name = krate.strip_prefix("keel_").unwrap_or(krate);
    Path::new("crates").join(name).join("src")
}

/// The files of module `a::b` (`a/b.rs` and everything under `a/b/`), or
/// every file for no module.
fn module_files(all: &[PathBuf], modules: &[&str]) -> Vec<PathBuf> {
    if modules.is_empty() {
        return all.to_vec();
    }
    let dir: PathBuf = modules.iter().collect();
    let file = dir.with_extension("rs");
    all.iter()
        .filter(|path| **path == file || path.starts_with(&dir))
        .cloned()
        .collect()
}

fn ident_pair(tokens: &[Token], first: &[&str], second: &str) -> bool {
    tokens.windows(2).any(|pair| {
        pair[0].ident().is_some_and(|word| first.contains(&word)) && pair[1].is_ident(second)
    })
}

fn has_fn(tokens: &[Token], name: &str) -> bool {
    ident_pair(tokens, &["fn"], name)
}

fn has_type(tokens: &[Token], name: &str) -> bool {
    ident_pair(
        tokens,
        &[
            "struct", "enum", "trait", "type", "union", "const", "static",
        ],
        name,
    )
}

/// Whether an item-level `impl` whose self type names `ty` (or `trait ty`)
/// has `fn method` directly in its body.
fn has_method(tokens: &[Token], ty: &str, method: &str) -> bool {
    let mut at = 0;
    while at < tokens.len() {
        let starts_block = match tokens[at].ident() {
            Some("impl") => is_item_start(tokens, at),
            Some("trait") => tokens.get(at + 1).is_some_and(|t| t.is_ident(ty)),
            _ => false,
        };
        if !starts_block {
            at += 1;
            continue;
        }
        let Some(open) = (at..tokens.len()).find(|&i| tokens[i].is_punct('{')) else {
            return false;
        };
        let close = matching_brace(tokens, open);
        if names_self_type(&tokens[at..open], ty) && body_has_fn(&tokens[open..close], method) {
            return true;
        }
        at = open + 1;
    }
    false
}

/// `impl` as an item, not `-> impl Trait` or `arg: impl Trait`.
fn is_item_start(tokens: &[Token], at: usize) -> bool {
    match at.checked_sub(1).map(|i| &tokens[i]) {
        None => true,
        Some(prev) => {
            matches!(prev.kind, Kind::Punct('}' | ';' | ']' | '{')) || prev.is_ident("unsafe")
        }
    }
}

/// The self type of `impl … [for] Type … [where …]` names `ty`.
fn names_self_type(header: &[Token], ty: &str) -> bool {
    let header = match header.iter().position(|t| t.is_ident("where")) {
        Some(end) => &header[..end],
        None => header,
    };
    let self_type = match header.iter().position(|t| t.is_ident("for")) {
        Some(after) => &header[after + 1..],
        None => header,
    };
    self_type.iter().any(|t| t.is_ident(ty))
}

/// The index of the `}` closing the `{` at `open` (or the end).
fn matching_brace(tokens: &[Token], open: usize) -> usize {
    let mut depth = 0usize;
    for (i, token) in tokens.iter().enumerate().skip(open) {
        if token.is_punct('{') {
            depth += 1;
        } else if token.is_punct('}') {
            depth = depth.saturating_sub(1);
            if depth == 0 {
                return i;
            }
        }
    }
    tokens.len()
}

/// `fn method` at depth 1 of a block starting with its `{`.
fn body_has_fn(block: &[Token], method: &str) -> bool {
    let mut depth = 0usize;
    block.windows(2).any(|pair| {
        if pair[0].is_punct('{') {
            depth += 1;
        } else if pair[0].is_punct('}') {
            depth = depth.saturating_sub(1);
        }
        depth == 1 && pair[0].is_ident("fn") && pair[1].is_ident(method)
    })
}
