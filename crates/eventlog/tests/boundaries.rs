//! Bounds at their exact values, and the accessors a host reads: an
//! event of exactly `max_event_bytes` is kept, one byte more is refused;
//! a new log has not ended; a snapshot lists its events; `Debug` names
//! the run.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
use common::*;
use keel_eventlog::*;

/// A note whose payload is `n` bytes of text.
fn note_of(n: usize) -> Payload {
    let text = "x".repeat(n);
    Payload::Extension {
        kind: EventKind::parse("test.note").unwrap(),
        payload: keel_message::CanonicalJson::parse(&format!(r#"{{"text":"{text}"}}"#)).unwrap(),
    }
}

#[test]
fn an_event_of_exactly_max_event_bytes_is_kept() {
    let probe = log_with(LogConfig::default()).0;
    probe.commit(&run_started()).unwrap();
    let bytes = probe.commit(&note_of(600)).unwrap().line().len();
    let at_bound = LogConfig {
        max_event_bytes: bytes,
        ..LogConfig::default()
    };
    let log = log_with(at_bound.clone()).0;
    log.commit(&run_started()).unwrap();
    assert_eq!(log.commit(&note_of(600)).unwrap().line().len(), bytes);
    match log.commit(&note_of(601)) {
        Err(CommitError::EventTooLarge { bytes: b, max, .. }) => {
            assert_eq!((b, max), (bytes + 1, bytes));
        }
        other => panic!("one byte over the bound: {other:?}"),
    }
}

#[test]
fn a_new_log_has_not_ended_and_its_terminal_ends_it() {
    let log = log_with(LogConfig::default()).0;
    assert!(!log.run_ended());
    log.commit(&run_started()).unwrap();
    assert!(!log.run_ended());
    log.commit(&Payload::RunCompleted(RunCompleted::default()))
        .unwrap();
    assert!(log.run_ended());
}

#[test]
fn a_snapshot_lists_its_events_and_debug_names_the_run() {
    let log = log_with(LogConfig::default()).0;
    log.commit(&run_started()).unwrap();
    log.commit(&note_of(3)).unwrap();
    let snapshot = log.snapshot();
    let seqs: Vec<u64> = snapshot.events().iter().map(|e| e.seq()).collect();
    assert_eq!(seqs, vec![1, 2]);
    let shown = format!("{log:?}");
    assert!(
        shown.starts_with("RunLog") && shown.contains("run_1"),
        "{shown}"
    );
    assert!(shown.contains("stats"), "{shown}");
}
