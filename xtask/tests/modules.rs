//! `cargo xtask modules check` over temporary crate trees.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::ScratchDir;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use xtask::modules::{self, ModuleGraph};

/// A scratch repository root, removed on drop.
struct Tree {
    root: PathBuf,
    _dir: ScratchDir,
}

impl Tree {
    fn new() -> Self {
        let dir = ScratchDir::new("modules");
        let root = dir.path().to_path_buf();
        fs::create_dir_all(root.join("crates")).unwrap();
        Tree { root, _dir: dir }
    }

    /// Writes `crates/<krate>/src/<path>`.
    fn file(&self, krate: &str, path: &str, text: &str) -> &Self {
        let path = self.root.join("crates").join(krate).join("src").join(path);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
        self
    }

    fn krate(&self, name: &str) -> PathBuf {
        self.root.join("crates").join(name)
    }
}

/// `(from, to, "file:line")` for every edge, the file relative to the crate.
fn edges(graph: &ModuleGraph) -> Vec<(String, String, String)> {
    graph
        .edges()
        .map(|e| {
            let file = e.location().file().strip_prefix(graph.crate_dir()).unwrap();
            (
                e.from().to_owned(),
                e.to().to_owned(),
                format!("{}:{}", file.display(), e.location().line()),
            )
        })
        .collect()
}

fn edge(from: &str, to: &str, at: &str) -> (String, String, String) {
    (from.to_owned(), to.to_owned(), at.to_owned())
}

#[test]
fn a_cycle_is_found_with_one_line_per_edge() {
    let tree = Tree::new();
    tree.file("k", "lib.rs", "mod a;\nmod b;\nmod c;\n")
        .file("k", "a.rs", "use crate::b::B;\npub struct A;\n")
        .file(
            "k",
            "b.rs",
            "//! b\n\npub struct B(crate::c::C);\nuse crate::c;\n",
        )
        .file(
            "k",
            "c.rs",
            "pub struct C;\nfn f() -> crate::a::A { crate::a::A }\n",
        );
    let graph = ModuleGraph::build(&tree.krate("k")).unwrap();
    let cycles = graph.cycles();
    assert_eq!(cycles.len(), 1);
    assert_eq!(cycles[0].modules(), ["a", "b", "c"]);
    let found: Vec<_> = cycles[0]
        .edges()
        .iter()
        .map(|e| (e.from(), e.to(), e.location().line()))
        .collect();
    // The first referring line of each edge.
    assert_eq!(found, [("a", "b", 1), ("b", "c", 3), ("c", "a", 2)]);
    let shown = cycles[0].to_string();
    assert!(shown.contains("a -> b: "), "{shown}");
    assert!(shown.contains("src/a.rs:1"), "{shown}");
}

#[test]
fn a_dag_passes_and_lib_rs_is_not_a_node() {
    let tree = Tree::new();
    tree.file(
        "k",
        "lib.rs",
        "mod a;\nmod b;\npub use a::A;\npub use b::B;\nfn uses() { crate::a::A; crate::b::B; }\n",
    )
    .file("k", "a.rs", "pub struct A;\n")
    .file("k", "b.rs", "use crate::a::A;\npub struct B(A);\n");
    let graph = ModuleGraph::build(&tree.krate("k")).unwrap();
    assert_eq!(graph.nodes().collect::<Vec<_>>(), ["a", "b"]);
    assert_eq!(edges(&graph), [edge("b", "a", "src/b.rs:1")]);
    assert!(graph.cycles().is_empty());
}

#[test]
fn super_from_a_submodule_resolves_to_a_sibling() {
    let tree = Tree::new();
    tree.file("k", "lib.rs", "mod a;\nmod b;\n")
        // `super::x` from a submodule stays inside `a`: no edge.
        .file(
            "k",
            "a/mod.rs",
            "mod inner;\nmod tests { use super::*; }\npub struct A;\n",
        )
        .file(
            "k",
            "a/inner.rs",
            "use super::A;\nuse super::super::b::B;\n",
        )
        // From a top-level file, `super::` is the root.
        .file("k", "b.rs", "pub struct B;\nfn f() { super::a::A; }\n");
    let graph = ModuleGraph::build(&tree.krate("k")).unwrap();
    assert_eq!(
        edges(&graph),
        [
            edge("a", "b", "src/a/inner.rs:2"),
            edge("b", "a", "src/b.rs:2"),
        ]
    );
    assert_eq!(graph.cycles().len(), 1);
}

#[test]
fn super_inside_an_inline_module_climbs_one_more_level() {
    let tree = Tree::new();
    tree.file("k", "lib.rs", "mod a;\nmod b;\n")
        .file("k", "a.rs", "mod tests {\n    use super::super::b::B;\n}\n")
        .file("k", "b.rs", "pub struct B;\n");
    let graph = ModuleGraph::build(&tree.krate("k")).unwrap();
    assert_eq!(edges(&graph), [edge("a", "b", "src/a.rs:2")]);
}

#[test]
fn grouped_uses_and_root_reexports_are_edges() {
    let tree = Tree::new();
    tree.file(
        "k",
        "lib.rs",
        "mod a;\nmod b;\nmod c;\npub use c::{C as Renamed};\n",
    )
    .file("k", "a.rs", "use crate::{\n    b::B,\n    Renamed,\n};\n")
    .file("k", "b.rs", "pub struct B;\n")
    .file("k", "c.rs", "pub struct C;\n");
    let graph = ModuleGraph::build(&tree.krate("k")).unwrap();
    assert_eq!(
        edges(&graph),
        [edge("a", "b", "src/a.rs:2"), edge("a", "c", "src/a.rs:3"),]
    );
}

#[test]
fn comments_strings_and_doc_comments_do_not_count() {
    let tree = Tree::new();
    let a = "//! See [`crate::b::B`].\n\
             /// Like [`crate::b::B`].\n\
             // use crate::b::B;\n\
             /* crate::b::B /* nested */ crate::b::B */\n\
             const S: &str = \"crate::b::B\";\n\
             const R: &str = r#\"crate::b::B \"quoted\"\"#;\n\
             const Q: char = '\"';\n\
             const T: &str = \"after the quote char: crate::b::B\";\n\
             pub struct A;\n";
    tree.file("k", "lib.rs", "mod a;\nmod b;\n")
        .file("k", "a.rs", a)
        .file("k", "b.rs", "pub struct B(crate::a::A);\n");
    let graph = ModuleGraph::build(&tree.krate("k")).unwrap();
    assert_eq!(edges(&graph), [edge("b", "a", "src/b.rs:1")]);
    assert!(graph.cycles().is_empty());
}

#[test]
fn check_walks_every_library_crate_and_skips_binaries() {
    let tree = Tree::new();
    tree.file("good", "lib.rs", "mod a;\n")
        .file("good", "a.rs", "")
        .file("bad", "lib.rs", "mod x;\nmod y;\n")
        .file("bad", "x.rs", "use crate::y::Y;\npub struct X;\n")
        .file("bad", "y.rs", "use super::x::X;\npub struct Y;\n")
        // A binary-only crate is not checked.
        .file("bin", "main.rs", "mod p;\nmod q;\n")
        .file("bin", "p.rs", "use crate::q::Q;\npub struct P;\n")
        .file("bin", "q.rs", "use crate::p::P;\npub struct Q;\n");
    let report = modules::check(&tree.root).unwrap();
    assert_eq!(report.graphs().len(), 2);
    assert!(!report.is_ok());
    assert_eq!(report.cycles().len(), 1);
    let cycle = &report.cycles()[0];
    assert_eq!(cycle.crate_dir(), Path::new("crates/bad"));
    assert_eq!(cycle.modules(), ["x", "y"]);
    assert_eq!(
        cycle.edges()[1].location().to_string(),
        "crates/bad/src/y.rs:1"
    );
}

#[test]
fn the_command_exits_1_on_a_cycle_and_0_on_a_dag() {
    let tree = Tree::new();
    tree.file("k", "lib.rs", "mod a;\nmod b;\n")
        .file("k", "a.rs", "use crate::b::B;\npub struct A;\n")
        .file("k", "b.rs", "pub struct B;\n");
    let run = |root: &Path| {
        Command::new(env!("CARGO_BIN_EXE_xtask"))
            .args(["modules", "check", "--root"])
            .arg(root)
            .output()
            .unwrap()
    };
    let ok = run(&tree.root);
    assert_eq!(ok.status.code(), Some(0), "{ok:?}");
    tree.file("k", "b.rs", "use crate::a::A;\npub struct B;\n");
    let bad = run(&tree.root);
    assert_eq!(bad.status.code(), Some(1), "{bad:?}");
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(stderr.contains("module cycle between a, b"), "{stderr}");
    assert!(stderr.contains("b -> a: "), "{stderr}");
    let missing = run(&tree.root.join("nowhere"));
    assert_eq!(missing.status.code(), Some(2), "{missing:?}");
}

#[test]
fn crates_can_be_named() {
    let tree = Tree::new();
    tree.file("good", "lib.rs", "mod a;\n")
        .file("good", "a.rs", "")
        .file("bad", "lib.rs", "mod x;\nmod y;\n")
        .file("bad", "x.rs", "use crate::y::Y;\n")
        .file("bad", "y.rs", "use crate::x::X;\n");
    let only = |names: &[&str]| {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        modules::check_crates(&tree.root, &names)
    };
    let good = only(&["good"]).unwrap();
    assert_eq!(good.graphs().len(), 1);
    assert!(good.is_ok());
    assert!(!only(&["good", "bad"]).unwrap().is_ok());
    let err = only(&["nope"]).unwrap_err();
    assert!(
        matches!(err, modules::Error::UnknownCrate(ref n) if n == "nope"),
        "{err}"
    );

    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_xtask"))
            .args(["modules", "check", "--root"])
            .arg(&tree.root)
            .args(args)
            .output()
            .unwrap()
            .status
            .code()
    };
    assert_eq!(run(&["--crate", "good"]), Some(0));
    assert_eq!(run(&["--crate", "good", "--crate", "bad"]), Some(1));
    assert_eq!(run(&[]), Some(1));
    assert_eq!(run(&["--crate", "nope"]), Some(2));
    assert_eq!(run(&["--crate"]), Some(2));
}

/// The repository itself: the crates whose cycles are gone stay acyclic.
#[test]
fn stream_eventlog_and_mcp_have_no_module_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let only = ["stream", "eventlog", "mcp"].map(str::to_owned);
    let report = modules::check_crates(root, &only).unwrap();
    assert_eq!(report.graphs().len(), 3);
    let offending: Vec<String> = report.cycles().iter().map(ToString::to_string).collect();
    assert!(offending.is_empty(), "{}", offending.join("\n"));
}
