//! An idle journal costs no CPU: its writer thread spins only briefly for
//! the next request (`SPIN`, 50 µs) and then parks. A writer that kept
//! polling would burn a core for as long as the journal is open.
//!
//! Its own test binary, so no other test's threads share the process CPU
//! time it reads from `/proc/self/stat`.

#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used)]

use keel_observers::{JournalConfig, SqliteJournal};
use std::time::Duration;

/// User plus system time of the whole process, in clock ticks (Linux's
/// `USER_HZ`, 100 a second).
fn cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    // Fields after the command name, which is in parentheses and may hold
    // spaces: state is field 3, utime 14 and stime 15.
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after.split(' ').collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

#[test]
fn an_idle_journal_parks_its_writer() {
    let dir = std::env::temp_dir().join(format!("keel-journal-idle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let journal = SqliteJournal::open(dir.join("keel.db"), JournalConfig::default()).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let before = cpu_ticks();
    std::thread::sleep(Duration::from_millis(1000));
    let used = cpu_ticks() - before;
    drop(journal);
    let _ = std::fs::remove_dir_all(&dir);
    // A parked writer uses nothing (measured: 0 ticks); a polling one most
    // of a core, about 100 ticks in the second (6 even with the machine's
    // two cores shared five ways).
    assert!(used < 3, "an idle journal used {used} ticks of CPU in 1 s");
}
