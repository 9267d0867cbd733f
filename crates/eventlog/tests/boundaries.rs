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

/// The most events a subscriber at `after = 3` can fall behind by and
/// still be served whole, with `max_events` as given.
fn events_behind_and_still_served(max_events: usize) -> u64 {
    let bounds = SubscriptionBounds {
        max_events,
        ..Default::default()
    };
    let mut served = 0;
    for behind in 1..=(max_events as u64 + 3) {
        let log = log();
        commit_all(
            &log,
            &[run_started(), turn_started(1), model_started(1, "op_1")],
        );
        let mut sub = log.subscribe(3, bounds).unwrap();
        for _ in 0..behind {
            log.commit(&delta(1, "op_1", "x")).unwrap();
        }
        match drain(&mut sub) {
            (seqs, None) if seqs.len() as u64 == behind => served = behind,
            (_, Some(TryRecvError::Ended(SubscriptionError::SlowConsumer { .. }))) => break,
            other => panic!("behind by {behind}: {other:?}"),
        }
    }
    served
}

/// A subscriber exactly at its event bound is still served; one more
/// event behind and it is a slow consumer.
#[test]
fn a_subscriber_exactly_at_its_event_bound_is_served() {
    for max_events in [1, 3, 8] {
        assert_eq!(
            events_behind_and_still_served(max_events),
            max_events as u64,
            "max_events {max_events}"
        );
    }
}

#[test]
fn subscription_debug_names_the_run_and_its_bounds() {
    let log = log();
    let sub = log.subscribe(0, SubscriptionBounds::default()).unwrap();
    let shown = format!("{sub:?}");
    assert!(shown.starts_with("Subscription"), "{shown}");
    assert!(
        shown.contains("run_1") && shown.contains("bounds"),
        "{shown}"
    );
}

/// Commits `run.started` and `notes` notes of 1,000 bytes under `config`.
fn filled(config: LogConfig, notes: usize) -> RunLog {
    let log = log_with(config).0;
    log.commit(&run_started()).unwrap();
    for _ in 0..notes {
        log.commit(&note_of(1_000)).unwrap();
    }
    log
}

/// Retained bytes exactly at `max_bytes` evict nothing; one byte less
/// of room evicts the oldest event.
#[test]
fn retained_bytes_exactly_at_max_bytes_evict_nothing() {
    let roomy = LogConfig {
        max_event_bytes: 2_000,
        max_terminal_bytes: MIN_TERMINAL_BYTES,
        max_open_scopes: 1,
        ..LogConfig::default()
    };
    let total = filled(roomy.clone(), 20).stats().retained_bytes;
    let exact = LogConfig {
        max_bytes: total,
        ..roomy.clone()
    };
    exact.validate().unwrap();
    let stats = filled(exact, 20).stats();
    assert_eq!((stats.evicted, stats.retained_bytes), (0, total));
    let tight = LogConfig {
        max_bytes: total - 1,
        ..roomy
    };
    let stats = filled(tight, 20).stats();
    assert_eq!((stats.evicted, stats.earliest_seq), (1, 2));
}

/// The snapshot of a log with nothing committed (`earliest_seq` 1,
/// `last_seq` 0: the window is exactly one past the end) reads back and
/// restores.
#[test]
fn the_snapshot_of_an_empty_log_reads_back() {
    let text = log().snapshot().to_jsonl();
    let snapshot = Snapshot::from_jsonl(&text).unwrap();
    assert_eq!((snapshot.earliest_seq(), snapshot.events().len()), (1, 0));
    let restored = RunLog::restore(
        &snapshot,
        LogConfig::default(),
        std::sync::Arc::new(SystemClock),
    )
    .unwrap();
    assert_eq!(restored.commit(&run_started()).unwrap().seq(), 1);
}
