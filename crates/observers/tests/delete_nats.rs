#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Deletion on JetStream against a real nats-server (started by the test
//! on a free loopback port with temp storage, killed on drop; without
//! `nats-server` on PATH: `SKIPPED`, a failure under `CI`):
//! `JetStreamHandle::delete_runs` refuses what the rules refuse, leaves no
//! byte of a deleted run in the stream's messages (read raw) nor in the
//! server's store files, keeps every other message byte-identical, and
//! records tombstones in the `keel_tombstones` bucket.
#![cfg(all(feature = "nats", feature = "sqlite"))]

#[path = "support/nats_server.rs"]
mod nats_server;

use keel_eventlog::{Clock, LogConfig, Payload, RunLog, RunStarted};
use keel_message::{ModelName, OperationId, RunId};
use keel_observers::deletion::{DeletionRequest, DeletionTarget, Who};
use keel_observers::{JetStreamConfig, JetStreamHandle, JetStreamObserver, RequiredObserver};
use keel_stream::FinishReason;
use keel_testkit::events as testkit;
use nats_server::{NatsServer, have_nats_server};
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Debug)]
struct SetClock(u64);

impl Clock for SetClock {
    fn now_micros(&self) -> u64 {
        self.0
    }
}

fn id(s: &str) -> RunId {
    RunId::parse(s).unwrap()
}

fn marker(run: &str) -> String {
    format!("MARKER<{run}>")
}

/// Run `run`'s events at `ms` (unix ms), its model streaming its marker;
/// closed unless `running`.
fn events(
    run: &str,
    ms: u64,
    continues: Option<&str>,
    running: bool,
) -> Vec<Arc<keel_eventlog::Event>> {
    let log = RunLog::new(id(run), LogConfig::default(), Arc::new(SetClock(ms * 1000))).unwrap();
    let model = testkit::ModelAttempt::new(1, OperationId::parse("op_1").unwrap());
    let mut payloads = vec![
        Payload::RunStarted(RunStarted {
            continues: continues.map(id),
            ..RunStarted::default()
        }),
        testkit::turn_started(1),
        model.started(ModelName::parse("m").unwrap()),
        model.text(format!("text {}", marker(run))),
    ];
    if !running {
        payloads.extend([
            model.completed(FinishReason::Stop, None),
            testkit::turn_completed(1),
            testkit::run_completed(),
        ]);
    }
    testkit::commit_all(&log, &payloads).unwrap()
}

/// Every message of the stream, read raw: (subject, payload).
async fn messages(handle: &JetStreamHandle) -> Vec<(String, Vec<u8>)> {
    let mut stream = handle
        .context()
        .get_stream(&handle.config().stream)
        .await
        .unwrap();
    let info = stream.info().await.unwrap().state.clone();
    let mut out = Vec::new();
    for seq in info.first_sequence..=info.last_sequence {
        if let Ok(m) = stream.get_raw_message(seq).await {
            out.push((m.subject.to_string(), m.payload.to_vec()));
        }
    }
    out
}

fn contains(bytes: &[u8], needle: &str) -> bool {
    bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// Files under `dir` holding `needle`.
fn files_holding(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if contains(&std::fs::read(&path).unwrap_or_default(), needle) {
                out.push(path);
            }
        }
    }
    out
}

fn request(target: DeletionTarget) -> DeletionRequest {
    DeletionRequest::new(target, Who::parse("ops").unwrap())
}

const RUNS: [&str; 4] = ["a_1", "a_2", "lone", "live"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_on_jetstream_erases_the_runs_and_keeps_the_rest() {
    if !have_nats_server() {
        return;
    }
    let server = NatsServer::start("delete-rules");
    let handle = JetStreamHandle::connect(JetStreamConfig::new(server.url()))
        .await
        .unwrap();
    let observer = JetStreamObserver::new(handle.clone());
    for (run, ms, continues, running) in [
        ("a_1", 1_000, None, false),
        ("a_2", 2_000, Some("a_1"), false),
        ("lone", 3_000, None, false),
        ("live", 500, None, true),
    ] {
        observer
            .observe_batch(&events(run, ms, continues, running))
            .await
            .unwrap();
    }
    let before = messages(&handle).await;
    for run in RUNS {
        assert!(
            before.iter().any(|(_, m)| contains(m, &marker(run))),
            "{run}"
        );
    }

    // Refused: nothing changes.
    for (target, rule) in [
        (DeletionTarget::Run(id("a_1")), "deletion.dependents"),
        (DeletionTarget::Run(id("live")), "deletion.live"),
        (DeletionTarget::Run(id("nope")), "deletion.not_found"),
    ] {
        let e = handle.delete_runs(&request(target)).await.unwrap_err();
        assert_eq!(e.rule(), rule, "{e}");
    }
    assert_eq!(messages(&handle).await, before);
    assert!(handle.tombstones().await.unwrap().is_empty());

    // A run, then a conversation, then a prune that keeps the live run.
    let mut gone: Vec<&str> = Vec::new();
    for (target, deleted) in [
        (DeletionTarget::Run(id("lone")), &["lone"][..]),
        (DeletionTarget::Conversation(id("a_2")), &["a_1", "a_2"][..]),
        (DeletionTarget::OlderThan(u64::MAX / 1000), &[][..]),
    ] {
        let tombstones = handle.delete_runs(&request(target)).await.unwrap();
        let names: Vec<&str> = tombstones.iter().map(|t| t.run_id().as_str()).collect();
        assert_eq!(names, deleted);
        assert!(
            tombstones
                .iter()
                .all(|t| t.events() == 7 && t.who().as_str() == "ops")
        );
        gone.extend(deleted);
        let after = messages(&handle).await;
        let kept: Vec<(String, Vec<u8>)> = before
            .iter()
            .filter(|(subject, _)| !gone.iter().any(|g| subject.ends_with(&format!(".{g}"))))
            .cloned()
            .collect();
        assert_eq!(after, kept, "the other runs' messages, byte for byte");
        for run in &gone {
            assert!(
                !after.iter().any(|(_, m)| contains(m, &marker(run))),
                "{run}"
            );
            let files = files_holding(&server.dir, &marker(run));
            assert!(files.is_empty(), "{run} in {files:?}");
        }
    }
    let recorded: Vec<String> = handle
        .tombstones()
        .await
        .unwrap()
        .iter()
        .map(|t| t.run_id().to_string())
        .collect();
    assert_eq!(recorded, ["a_1", "a_2", "lone"]);
    assert!(!files_holding(&server.dir, &marker("live")).is_empty());
}
