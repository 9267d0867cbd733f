//! Another crate's example binary (e.g. keel-serve's `embedded_host`),
//! for tests that start it as a process.
//!
//! `cargo test --workspace` (and CI) builds every example in the same
//! invocation, with the same features: the binary beside this test's
//! `deps` folder is then used as it is. When it is missing or older than
//! a workspace source (a run filtered to one test of this crate), it is
//! built here with `cargo build -p keel-cli -p PACKAGE --example NAME`:
//! selecting keel-cli keeps the features those of this crate's test
//! build, so nothing else is compiled again.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::SystemTime;

/// The built example `name` of `package`, built first when missing or
/// stale.
pub fn example_bin(package: &str, name: &str) -> PathBuf {
    // One build at a time across the tests of a binary.
    static BUILD: Mutex<()> = Mutex::new(());
    let _guard = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(Path::parent).unwrap();
    let bin = profile_dir
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    let built = std::fs::metadata(&bin).and_then(|m| m.modified()).ok();
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    if built.is_none_or(|at| newest_source(&workspace) > at) {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
        // This test's profile: `debug` is `dev`'s folder.
        let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") | None => "dev",
            Some(other) => other,
        };
        let out = Command::new(cargo)
            .args(["build", "--quiet", "--profile", profile])
            .args(["-p", "keel-cli", "-p", package, "--example", name])
            .current_dir(&workspace)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "building the {name} example of {package}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(bin.exists(), "no {}", bin.display());
    bin
}

/// The newest modification time among the workspace's crate sources,
/// assets, examples and manifests, and `Cargo.lock`.
fn newest_source(workspace: &Path) -> SystemTime {
    let mut newest = modified(&workspace.join("Cargo.lock"));
    let crates = std::fs::read_dir(workspace.join("crates")).unwrap();
    for krate in crates.flatten() {
        newest = newest.max(modified(&krate.path().join("Cargo.toml")));
        for dir in ["src", "assets", "examples"] {
            newest = newest.max(newest_in(&krate.path().join(dir)));
        }
    }
    newest
}

fn newest_in(dir: &Path) -> SystemTime {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return SystemTime::UNIX_EPOCH;
    };
    entries
        .flatten()
        .map(|entry| match entry.file_type() {
            Ok(t) if t.is_dir() => newest_in(&entry.path()),
            _ => modified(&entry.path()),
        })
        .max()
        .unwrap_or(SystemTime::UNIX_EPOCH)
}

fn modified(path: &Path) -> SystemTime {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .unwrap_or(SystemTime::UNIX_EPOCH)
}
