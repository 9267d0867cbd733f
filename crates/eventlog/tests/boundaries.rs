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

/// A snapshot's header line as JSON, and the event lines after it.
fn header_and_body(text: &str) -> (serde_json::Value, &str) {
    let (header, body) = text.split_once('\n').unwrap();
    (serde_json::from_str(header).unwrap(), body)
}

/// `header` over `body`.
fn with_header(header: &serde_json::Value, body: &str) -> String {
    format!("{header}\n{body}")
}

/// A header's `last_turn` of exactly 2^53 − 1 is in range; one more is
/// refused (rule snapshot.header).
#[test]
fn a_snapshot_last_turn_of_exactly_2_53_minus_1_parses() {
    let log = log();
    commit_all(&log, &[run_started(), turn_started(1)]);
    let text = log.snapshot().to_jsonl();
    let (mut header, body) = header_and_body(&text);
    let max_safe = (1u64 << 53) - 1;
    header["last_turn"] = max_safe.into();
    let parsed = Snapshot::from_jsonl(&with_header(&header, body)).unwrap();
    assert_eq!(parsed.events().len(), 2);
    header["last_turn"] = (max_safe + 1).into();
    let err = Snapshot::from_jsonl(&with_header(&header, body)).unwrap_err();
    assert!(matches!(err, ImportError::Header { .. }), "{err:?}");
}

/// `text` with its line `n` (1-based) replaced by `{}`.
fn spoil_line(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text
        .lines()
        .enumerate()
        .map(|(i, l)| if i + 1 == n { "{}" } else { l })
        .collect();
    lines.join("\n") + "\n"
}

/// Errors number the lines of the input from 1: a snapshot's header is
/// line 1, so its first event is line 2; an import's first line is 1.
#[test]
fn snapshot_and_import_errors_name_the_bad_line() {
    let log = log();
    commit_all(&log, &[run_started(), turn_started(1), note()]);
    let text = log.snapshot().to_jsonl();
    for n in [2, 3] {
        match Snapshot::from_jsonl(&spoil_line(&text, n)) {
            Err(ImportError::Event { line, .. }) => assert_eq!(line, n),
            other => panic!("line {n} spoiled: {other:?}"),
        }
    }
    let lines: Vec<String> = log
        .retained_after(0)
        .iter()
        .map(|e| e.line().to_owned())
        .collect();
    for n in [1, 2] {
        let spoiled = spoil_line(&lines.join("\n"), n);
        match RunLog::import(
            run_id(),
            spoiled.lines(),
            LogConfig::default(),
            std::sync::Arc::new(SystemClock),
        ) {
            Err(ImportError::Event { line, .. }) => assert_eq!(line, n),
            other => panic!("import line {n} spoiled: {other:?}"),
        }
    }
}

/// A log that keeps 10 events, with turn 1's model call `op_1` started
/// and 20 deltas of it committed (so its snapshot is a window).
fn window_log() -> RunLog {
    let log = log_with(LogConfig {
        max_events: 10,
        max_open_scopes: 4,
        ..LogConfig::default()
    })
    .0;
    commit_all(
        &log,
        &[run_started(), turn_started(1), model_started(1, "op_1")],
    );
    for _ in 0..20 {
        log.commit(&delta(1, "op_1", "d")).unwrap();
    }
    log
}

fn restore_text(text: &str) -> Result<RunLog, ImportError> {
    RunLog::restore(
        &Snapshot::from_jsonl(text).unwrap(),
        LogConfig::default(),
        std::sync::Arc::new(SystemClock),
    )
}

/// A window whose header says a model call is still open while the
/// window ends it: refused, naming the line that ends it.
#[test]
fn a_window_contradicting_its_header_names_the_line() {
    let log = window_log();
    log.commit(&model_completed(1, "op_1")).unwrap();
    let text = log.snapshot().to_jsonl();
    let (mut header, body) = header_and_body(&text);
    header["open_scopes"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"scope": "model", "turn": 1, "operation_id": "op_1"}));
    let n = text.lines().count();
    match restore_text(&with_header(&header, body)) {
        Err(ImportError::Inconsistent { expected, .. }) => {
            assert!(
                expected.starts_with(&format!("line {n}'s model.completed")),
                "{expected}"
            );
        }
        other => panic!("{other:?}"),
    }
}

/// A window in which turn 1 ends before the model call inside it: the
/// state at the window's start (run, turn 1, the model call: outermost
/// first) is sound, and the replay refuses the turn's end, on its line.
#[test]
fn a_window_ending_a_turn_before_its_model_call_is_refused_at_that_line() {
    let log = window_log();
    commit_all(&log, &[model_completed(1, "op_1"), turn_completed(1)]);
    let text = log.snapshot().to_jsonl();
    assert!(restore_text(&text).is_ok());
    let swapped = swap_last_two_events(&text);
    let n = swapped.lines().count();
    match restore_text(&swapped) {
        Err(ImportError::Lifecycle { line, source }) => {
            assert_eq!(line, n - 1, "{source}");
            assert!(
                matches!(source, LifecycleError::ChildrenOpen { .. }),
                "{source:?}"
            );
        }
        other => panic!("{other:?}"),
    }
}

/// A whole run's header that claims a later last turn than its events
/// reach is refused, though every other claim holds.
#[test]
fn a_whole_run_header_claiming_another_last_turn_is_refused() {
    let log = log();
    commit_all(&log, &[run_started(), turn_started(1), turn_completed(1)]);
    let text = log.snapshot().to_jsonl();
    assert!(restore_text(&text).is_ok());
    let (mut header, body) = header_and_body(&text);
    header["last_turn"] = 7.into();
    match restore_text(&with_header(&header, body)) {
        Err(ImportError::Inconsistent { expected, found }) => {
            assert!(expected.contains("last turn Some(7)"), "{expected}");
            assert!(found.contains("last turn Some(1)"), "{found}");
        }
        other => panic!("{other:?}"),
    }
}

/// A subscriber at `after = 3` behind by five deltas, with `max_bytes`
/// set `slack` bytes off the four deltas queued behind the next one.
fn behind_five_with_byte_slack(slack: isize) -> (Vec<u64>, Option<TryRecvError>) {
    let log = log();
    commit_all(
        &log,
        &[run_started(), turn_started(1), model_started(1, "op_1")],
    );
    let probe = log_with(LogConfig::default()).0;
    commit_all(
        &probe,
        &[run_started(), turn_started(1), model_started(1, "op_1")],
    );
    let each = probe
        .commit(&delta(1, "op_1", "x"))
        .unwrap()
        .retained_bytes();
    let max_bytes = (4 * each).checked_add_signed(slack).unwrap();
    let bounds = SubscriptionBounds {
        max_bytes,
        ..Default::default()
    };
    let mut sub = log.subscribe(3, bounds).unwrap();
    for _ in 0..5 {
        assert_eq!(
            log.commit(&delta(1, "op_1", "x")).unwrap().retained_bytes(),
            each
        );
    }
    drain(&mut sub)
}

/// The byte bound counts the backlog behind the next event: exactly at
/// it the subscriber is served, one byte over it is a slow consumer.
#[test]
fn a_subscriber_exactly_at_its_byte_bound_is_served() {
    assert_eq!(behind_five_with_byte_slack(0), (vec![4, 5, 6, 7, 8], None));
    assert_eq!(
        behind_five_with_byte_slack(100),
        (vec![4, 5, 6, 7, 8], None)
    );
    match behind_five_with_byte_slack(-1) {
        (seqs, Some(TryRecvError::Ended(SubscriptionError::SlowConsumer { .. }))) => {
            assert_eq!(seqs, Vec::<u64>::new());
        }
        other => panic!("one byte over the bound: {other:?}"),
    }
}

/// A subscription takes, under one lock, every event that fits its byte
/// bound; what it took is delivered even after the log evicts it, and
/// only then does the eviction end the subscription.
#[test]
fn what_a_subscription_took_is_delivered_after_its_eviction() {
    let log = log_with(LogConfig {
        max_events: 4,
        max_open_scopes: 3,
        ..LogConfig::default()
    })
    .0;
    commit_all(
        &log,
        &[run_started(), turn_started(1), model_started(1, "op_1")],
    );
    let each = log.commit(&delta(1, "op_1", "x")).unwrap().retained_bytes();
    let bounds = SubscriptionBounds {
        max_bytes: 4 * each + each / 2,
        ..Default::default()
    };
    let mut sub = log.subscribe(4, bounds).unwrap();
    for _ in 0..3 {
        log.commit(&delta(1, "op_1", "x")).unwrap();
    }
    // One look under the lock takes all three (3 × `each` bytes fit).
    assert_eq!(sub.try_recv().unwrap().seq(), 5);
    for _ in 0..10 {
        log.commit(&delta(1, "op_1", "x")).unwrap();
    }
    assert_eq!(log.stats().earliest_seq, 14);
    match drain(&mut sub) {
        (seqs, Some(TryRecvError::Ended(SubscriptionError::Evicted { earliest, .. }))) => {
            assert_eq!((seqs, earliest), (vec![6, 7], 14));
        }
        other => panic!("{other:?}"),
    }
}
