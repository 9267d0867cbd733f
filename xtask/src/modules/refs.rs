//! Which top-level modules a file's tokens refer to: `crate::x` paths
//! (in `use` trees and in expressions, `$crate::x` in macros too) and
//! `super::` paths that climb to the crate root, resolved against the
//! file's own module path and any inline `mod name { … }` it is inside.
//! Also the crate root's `use` re-exports, so that `crate::Name` can be
//! traced to the module that defines `Name`.

use super::lex::{Kind, Token};

/// A name directly under the crate root that a path lands in, and the line
/// of the path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RootRef {
    pub(crate) name: String,
    pub(crate) line: usize,
}

/// Every root-level name the tokens of a file at `module_path` refer to
/// (`module_path` is the file's module below the crate root, e.g.
/// `["log", "retention"]` for `src/log/retention.rs`). A path that stays
/// inside the file's own top-level module still yields that module's
/// name; the graph drops such self references.
pub(crate) fn root_refs(tokens: &[Token], module_path: &[String]) -> Vec<RootRef> {
    let mut out = Vec::new();
    // Inline modules opened in this file: (name, brace depth inside it).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < tokens.len() {
        let tok = &tokens[i];
        if tok.is_punct('{') {
            depth += 1;
        } else if tok.is_punct('}') {
            if inline.last().is_some_and(|(_, d)| *d == depth) {
                inline.pop();
            }
            depth = depth.saturating_sub(1);
        } else if tok.is_ident("mod")
            && let (Some(name), Some(open)) =
                (tokens.get(i + 1).and_then(Token::ident), tokens.get(i + 2))
            && open.is_punct('{')
        {
            inline.push((name.to_owned(), depth + 1));
        } else if tok.is_ident("crate") && next_is_sep(tokens, i) && !follows_path_sep(tokens, i) {
            heads(tokens, i + 2, tok.line, &mut out);
        } else if tok.is_ident("super") && next_is_sep(tokens, i) && !follows_path_sep(tokens, i) {
            let mut here: Vec<String> = module_path.to_vec();
            here.extend(inline.iter().map(|(name, _)| name.clone()));
            i = climb(tokens, i, here, &mut out);
            continue;
        }
        i += 1;
    }
    out
}

fn next_is_sep(tokens: &[Token], i: usize) -> bool {
    tokens.get(i + 1).is_some_and(|t| t.kind == Kind::PathSep)
}

/// `a::crate` is not a path from the root (it cannot be written, but
/// `a::super` in `foo::super::x` cannot either); guard against it anyway.
fn follows_path_sep(tokens: &[Token], i: usize) -> bool {
    i > 0 && tokens[i - 1].kind == Kind::PathSep
}

/// Resolves `super::super::…::rest` starting at token `i` from the module
/// `here`; returns the index of the first token after the `super`s.
fn climb(tokens: &[Token], mut i: usize, mut here: Vec<String>, out: &mut Vec<RootRef>) -> usize {
    let line = tokens[i].line;
    while tokens.get(i).is_some_and(|t| t.is_ident("super")) && next_is_sep(tokens, i) {
        // `super` above the root is a compile error; stay at the root.
        here.pop();
        i += 2;
    }
    match here.first() {
        Some(top) => out.push(RootRef {
            name: top.clone(),
            line,
        }),
        None => heads(tokens, i, line, out),
    }
    i
}

/// The first segment(s) of the path or use tree starting at token `i`,
/// just below the crate root: `a::b` gives `a`, `{a, b::c, self}` gives
/// `a` and `b`; `*` and `self` give nothing (they name the root itself).
fn heads(tokens: &[Token], i: usize, line: usize, out: &mut Vec<RootRef>) {
    let Some(tok) = tokens.get(i) else {
        return;
    };
    if let Some(name) = tok.ident() {
        if name != "self" {
            out.push(RootRef {
                name: name.to_owned(),
                line,
            });
        }
    } else if tok.is_punct('{') {
        let close = matching_brace(tokens, i);
        for member in split_members(&tokens[i + 1..close]) {
            // Each member of a multi-line group is reported on its own line.
            heads(member, 0, member[0].line, out);
        }
    }
}

/// A name the crate root brings into scope with `use`, and the first path
/// segment it comes from (`pub use problem::{ProviderProblem as P}` gives
/// `P` from `problem`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reexport {
    pub(crate) name: String,
    pub(crate) from: String,
}

/// The `use` items at the top level of the crate root's tokens. Globs
/// (`pub use a::*`) name nothing and are skipped.
pub(crate) fn reexports(tokens: &[Token]) -> Vec<Reexport> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < tokens.len() {
        let tok = &tokens[i];
        if tok.is_punct('{') {
            depth += 1;
        } else if tok.is_punct('}') {
            depth = depth.saturating_sub(1);
        } else if depth == 0 && tok.is_ident("use") {
            let end = tokens[i..]
                .iter()
                .position(|t| t.is_punct(';'))
                .map_or(tokens.len(), |p| i + p);
            use_tree(&tokens[i + 1..end], None, &mut out);
            i = end;
        }
        i += 1;
    }
    out
}

/// Collects the leaves of one use tree; `from` is the first real segment
/// seen so far (`crate`, `self` and a leading `::` are skipped).
fn use_tree(tokens: &[Token], mut from: Option<String>, out: &mut Vec<Reexport>) {
    let mut i = 0;
    let mut last: Option<String> = None;
    while i < tokens.len() {
        let tok = &tokens[i];
        if tok.is_punct('{') {
            let close = matching_brace(tokens, i);
            for member in split_members(&tokens[i + 1..close]) {
                use_tree(member, from.clone(), out);
            }
            return;
        }
        if tok.is_ident("as") {
            if let (Some(alias), Some(from)) = (tokens.get(i + 1).and_then(Token::ident), &from) {
                out.push(Reexport {
                    name: alias.to_owned(),
                    from: from.clone(),
                });
            }
            return;
        }
        if let Some(name) = tok.ident() {
            let is_root = matches!(name, "crate" | "self") && from.is_none();
            if !is_root {
                if from.is_none() {
                    from = Some(name.to_owned());
                }
                last = Some(name.to_owned());
            }
        }
        i += 1;
    }
    // `use a::b::C`: `C` from `a`; a bare `use a` or `use a::self` names the
    // module itself, which is already a node.
    if let (Some(name), Some(from)) = (last, from)
        && name != from
        && name != "self"
    {
        out.push(Reexport { name, from });
    }
}

fn matching_brace(tokens: &[Token], open: usize) -> usize {
    let mut depth = 0usize;
    for (j, t) in tokens.iter().enumerate().skip(open) {
        if t.is_punct('{') {
            depth += 1;
        } else if t.is_punct('}') {
            depth -= 1;
            if depth == 0 {
                return j;
            }
        }
    }
    tokens.len()
}

fn split_members(tokens: &[Token]) -> Vec<&[Token]> {
    let mut members = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (j, t) in tokens.iter().enumerate() {
        if t.is_punct('{') {
            depth += 1;
        } else if t.is_punct('}') {
            depth = depth.saturating_sub(1);
        } else if depth == 0 && t.is_punct(',') {
            members.push(&tokens[start..j]);
            start = j + 1;
        }
    }
    members.push(&tokens[start..]);
    members.retain(|m| !m.is_empty());
    members
}

#[cfg(test)]
mod tests {
    use super::super::lex::tokens;
    use super::*;

    fn names(source: &str, path: &[&str]) -> Vec<String> {
        let path: Vec<String> = path.iter().map(|s| (*s).to_owned()).collect();
        root_refs(&tokens(source), &path)
            .into_iter()
            .map(|r| r.name)
            .collect()
    }

    #[test]
    fn crate_paths_and_groups() {
        let src = "use crate::a::X; use crate::{b, c::{D, E}, self}; fn f() { crate::d::g() }";
        assert_eq!(names(src, &["m"]), ["a", "b", "c", "d"]);
    }

    #[test]
    fn super_resolves_against_the_module_path() {
        assert_eq!(names("use super::x;", &["m"]), ["x"]);
        assert_eq!(names("use super::x;", &["m", "sub"]), ["m"]);
        assert_eq!(names("use super::super::x;", &["m", "sub"]), ["x"]);
        assert_eq!(names("use super::{x, y};", &["m"]), ["x", "y"]);
    }

    #[test]
    fn inline_modules_deepen_super() {
        let src = "mod tests { use super::*; use super::super::y; } use super::z;";
        assert_eq!(names(src, &["m"]), ["m", "y", "z"]);
    }

    #[test]
    fn visibility_is_not_a_path() {
        assert!(names("pub(crate) fn f() {} pub(super) struct S;", &["m"]).is_empty());
    }

    #[test]
    fn reexports_name_their_module() {
        let src = "pub mod a; mod b; pub use a::{X, y::Y as Z}; pub use crate::b::W; \
                   pub use c::*; use std::fmt;";
        let got: Vec<(String, String)> = reexports(&tokens(src))
            .into_iter()
            .map(|r| (r.name, r.from))
            .collect();
        let want = [("X", "a"), ("Z", "a"), ("W", "b"), ("fmt", "std")];
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(n, f)| ((*n).to_owned(), (*f).to_owned()))
            .collect();
        assert_eq!(got, want);
    }
}
