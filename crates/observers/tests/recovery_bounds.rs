#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Recovery reads back a run whatever bounds the host that wrote it had:
//! an abandoned run holding an event larger than the default log's
//! per-event bound is restored and closed, not skipped as corrupt.
#![cfg(feature = "sqlite")]

use keel_eventlog::{LogConfig, RunLog, SystemClock};
use keel_message::{ModelName, OperationId, RunId};
use keel_observers::{JournalConfig, RequiredObserver, SqliteJournal};
use keel_testkit::events::{self, ModelAttempt};
use std::path::PathBuf;
use std::sync::Arc;

/// A directory of its own under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let dir = std::env::temp_dir().join(format!(
            "keel-recovery-bounds-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_run_with_an_event_over_the_default_bound_is_recovered() {
    let dir = TempDir::new();
    let db = dir.0.join("keel.db");
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let big = 3 << 20;
    assert!(big > LogConfig::default().max_event_bytes);
    // The host that wrote the run allowed events of up to 4 MiB.
    let config = LogConfig {
        max_event_bytes: 4 << 20,
        ..LogConfig::default()
    };
    let log = RunLog::new(
        RunId::parse("run_big").unwrap(),
        config,
        Arc::new(SystemClock),
    )
    .unwrap();
    let model = ModelAttempt::new(1, OperationId::parse("op1").unwrap());
    let owner = SqliteJournal::open(&db, JournalConfig::default()).unwrap();
    for payload in [
        events::run_started(),
        events::turn_started(1),
        model.started(ModelName::parse("m").unwrap()),
        model.text("x".repeat(big)),
    ] {
        let event = log.commit(&payload).unwrap();
        rt.block_on(owner.observe(&event)).unwrap();
    }
    // Closing without ending the run abandons it.
    owner.close().unwrap();
    let recoverer = SqliteJournal::open(&db, JournalConfig::default()).unwrap();
    let report = recoverer.recover_abandoned().unwrap();
    assert_eq!(report.recovered.len(), 1, "{report:?}");
    let terminals: Vec<(u64, String)> = report.recovered[0]
        .terminals
        .iter()
        .map(|e| (e.seq(), e.kind().to_string()))
        .collect();
    assert_eq!(
        terminals,
        [
            (5, "model.failed".to_owned()),
            (6, "turn.failed".to_owned()),
            (7, "run.failed".to_owned())
        ]
    );
    // The delta is seen: the attempt closes partial.
    assert!(
        report.recovered[0].terminals[0]
            .line()
            .contains("\"partial\"")
    );
    recoverer.close().unwrap();
}
