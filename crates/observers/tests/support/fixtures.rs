//! Fixtures the SQLite journal's tests share (`delete.rs`, `journal.rs`,
//! `listing.rs`): a temporary directory for a database and a clock the
//! test sets.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use keel_eventlog::Clock;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

/// A unique directory under the system temp dir (named after the test
/// binary and `tag`), removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A new empty directory.
    pub fn new(tag: &str) -> TempDir {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "keel-{}-{tag}-{}-{}",
            env!("CARGO_CRATE_NAME"),
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    /// The journal's database file in it.
    pub fn db(&self) -> PathBuf {
        self.0.join("keel.db")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A clock the test sets: every event gets the same time (microseconds).
#[derive(Debug)]
pub struct SetClock(pub u64);

impl Clock for SetClock {
    fn now_micros(&self) -> u64 {
        self.0
    }
}
