//! `read_file` under a symlink-swap race (issue #22).
//!
//! A thread swaps an entry inside the `--files` root between a benign
//! state and one that leads outside it, as fast as it can, while the tool
//! reads through that entry 10,000 times. The secret outside the root must
//! never appear in any result, success or refusal. The old
//! check-then-open code (`canonicalize`, `starts_with`, then open the path
//! again) leaked in the `file` and `dir` variants.
#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use keel_engine::{Tool, ToolInvocation, ToolPolicy};
use keel_message::{CallId, CanonicalJson, RunId};
use keel_scenario::builtins::Builtin;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

const READS: u64 = 10_000;
const SECRET: &str = "KEEL-RACE-SECRET-5e1c0a";
const BENIGN: &str = "benign text inside the root";

/// A sandbox: `root/` (the `--files` directory), `outside/` (the secret),
/// `stage/` (where the swapper parks the entry that is not in place).
struct Sandbox {
    _dir: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
    stage: PathBuf,
}

impl Sandbox {
    fn new() -> Sandbox {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let (root, outside, stage) = (base.join("root"), base.join("outside"), base.join("stage"));
        for d in [&root, &outside, &stage] {
            std::fs::create_dir(d).unwrap();
        }
        std::fs::write(root.join("benign.txt"), BENIGN).unwrap();
        std::fs::write(outside.join("secret.txt"), SECRET).unwrap();
        std::fs::write(outside.join("f.txt"), SECRET).unwrap();
        Sandbox {
            _dir: dir,
            root,
            outside,
            stage,
        }
    }
}

/// What the reads saw.
#[derive(Debug, Default)]
struct Tally {
    benign: u64,
    refused: u64,
    leaked: u64,
    swaps: u64,
}

fn invocation(path: &str) -> ToolInvocation {
    ToolInvocation {
        run_id: RunId::generate(),
        turn: 1,
        call_id: CallId::parse("c1").unwrap(),
        arguments: CanonicalJson::parse(&serde_json::json!({ "path": path }).to_string()).unwrap(),
    }
}

/// One read through the tool: `Ok(content)` or `Err(message)`.
async fn read(tool: &Arc<dyn Tool>, path: &str) -> Result<String, String> {
    tool.call(invocation(path))
        .await
        .map(|out| out.content().to_owned())
        .map_err(|e| e.message)
}

/// Swaps `target` between the entry first in place (A) and the one parked
/// at `parked` (B) until `stop`, by renames, counting the swaps.
fn swap_until(target: &Path, parked: &Path, stop: &AtomicBool, swaps: &AtomicU64) {
    let a_parked = parked.with_extension("a");
    while !stop.load(Ordering::Relaxed) {
        std::fs::rename(target, &a_parked).unwrap();
        std::fs::rename(parked, target).unwrap();
        std::fs::rename(target, parked).unwrap();
        std::fs::rename(&a_parked, target).unwrap();
        swaps.fetch_add(2, Ordering::Relaxed);
    }
}

/// Checks both states once without a race, then races: the swapper
/// thread against `READS` reads of `path`.
async fn race(sb: &Sandbox, target: &str, path: &str) -> Tally {
    let tool = Builtin::ReadFile
        .tool(ToolPolicy::default(), Some(&sb.root))
        .unwrap();
    let target = sb.root.join(target);
    let parked = sb.stage.join("b");
    // State A reads the benign text; state B is refused as outside.
    assert_eq!(read(&tool, path).await, Ok(BENIGN.to_owned()), "state A");
    std::fs::rename(&target, sb.stage.join("a")).unwrap();
    std::fs::rename(&parked, &target).unwrap();
    let refused = read(&tool, path).await.unwrap_err();
    assert!(refused.contains("outside"), "state B: {refused}");
    std::fs::rename(&target, &parked).unwrap();
    std::fs::rename(sb.stage.join("a"), &target).unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicU64::new(0));
    let swapper = {
        let (stop, swaps) = (stop.clone(), swaps.clone());
        std::thread::spawn(move || swap_until(&target, &parked, &stop, &swaps))
    };
    let mut tally = Tally::default();
    for _ in 0..READS {
        match read(&tool, path).await {
            Ok(text) if text == BENIGN => tally.benign += 1,
            Ok(text) if text.contains(SECRET) => tally.leaked += 1,
            Ok(text) => panic!("read neither the benign nor the secret text: {text:?}"),
            Err(message) if message.contains(SECRET) => tally.leaked += 1,
            Err(_) => tally.refused += 1,
        }
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    tally.swaps = swaps.load(Ordering::Relaxed);
    eprintln!("{path}: {tally:?}");
    tally
}

fn assert_no_leak(tally: &Tally) {
    assert_eq!(tally.benign + tally.refused + tally.leaked, READS);
    assert_eq!(tally.leaked, 0, "the secret leaked: {tally:?}");
}

/// `root/link` alternates between a symlink to `benign.txt` (inside) and
/// one to the secret (outside).
#[tokio::test]
async fn a_symlink_swapped_between_inside_and_outside_never_leaks() {
    let sb = Sandbox::new();
    symlink("benign.txt", sb.root.join("link")).unwrap();
    symlink(sb.outside.join("secret.txt"), sb.stage.join("b")).unwrap();
    assert_no_leak(&race(&sb, "link", "link").await);
}

/// `root/f.txt` alternates between a regular file and a symlink to the
/// secret: the old code checked the file, then opened the symlink.
#[tokio::test]
async fn a_file_swapped_for_an_outside_symlink_never_leaks() {
    let sb = Sandbox::new();
    std::fs::write(sb.root.join("f.txt"), BENIGN).unwrap();
    symlink(sb.outside.join("secret.txt"), sb.stage.join("b")).unwrap();
    assert_no_leak(&race(&sb, "f.txt", "f.txt").await);
}

/// `root/d` alternates between a real directory and a symlink to the
/// outside directory; the read names `d/f.txt`.
#[tokio::test]
async fn a_directory_swapped_for_an_outside_symlink_never_leaks() {
    let sb = Sandbox::new();
    std::fs::create_dir(sb.root.join("d")).unwrap();
    std::fs::write(sb.root.join("d/f.txt"), BENIGN).unwrap();
    symlink(&sb.outside, sb.stage.join("b")).unwrap();
    assert_no_leak(&race(&sb, "d", "d/f.txt").await);
}
