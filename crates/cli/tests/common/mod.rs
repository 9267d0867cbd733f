#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, dead_code)]
//! Helpers shared by the `keel` binary's integration tests.

use assert_cmd::Command;
use std::path::{Path, PathBuf};

/// The built `keel` binary.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_keel")
}

/// A `keel` command with a clean environment for the journal path.
pub fn keel() -> Command {
    let mut cmd = Command::new(bin());
    cmd.env_remove("KEEL_DB").env("NO_COLOR", "1");
    cmd
}

/// `examples/NAME` at the repository root.
pub fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(name)
}

/// A temporary directory with a journal path inside.
pub struct Sandbox {
    pub dir: tempfile::TempDir,
}

impl Sandbox {
    pub fn new() -> Sandbox {
        Sandbox {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn db(&self) -> PathBuf {
        self.path("keel.db")
    }

    /// `--db <sandbox db>` as arguments.
    pub fn db_args(&self) -> [String; 2] {
        ["--db".to_owned(), self.db().display().to_string()]
    }

    /// Writes `text` to `name` in the sandbox and returns the path.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    /// `keel run FILE --db DB [extra...]`.
    pub fn run(&self, scenario: &Path, extra: &[&str]) -> std::process::Output {
        keel()
            .arg("run")
            .arg(scenario)
            .args(self.db_args())
            .args(extra)
            .output()
            .unwrap()
    }

    /// `keel <args...> --db DB`, asserting success, returning stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = keel().args(args).args(self.db_args()).output().unwrap();
        assert!(
            out.status.success(),
            "keel {args:?} failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// The single run's id (from `keel runs`).
    pub fn run_ids(&self) -> Vec<String> {
        self.ok(&["runs"])
            .lines()
            .map(|l| l.split_whitespace().next().unwrap().to_owned())
            .collect()
    }
}

/// stdout and stderr of `out` as text.
pub fn text(out: &std::process::Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A tiny deterministic generator (xorshift64*), seeded from
/// `KEEL_TEST_SEED` or the clock; the seed is printed so a failure can be
/// replayed.
pub struct Rng(u64);

impl Rng {
    pub fn from_env(name: &str) -> Rng {
        let seed = std::env::var("KEEL_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
            });
        eprintln!("{name}: KEEL_TEST_SEED={seed}");
        Rng(seed | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `lo..=hi`.
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

/// The `kind` of a canonical line.
pub fn kind(line: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    v["kind"].as_str().unwrap().to_owned()
}
