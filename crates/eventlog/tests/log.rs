//! RunLog: sequences, timestamps, retention and its reserve, subscriptions,
//! slow consumers, close and shutdown, snapshots and import.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
use common::*;
use keel_eventlog::*;
use proptest::prelude::*;
use std::sync::Arc;

fn small() -> LogConfig {
    LogConfig {
        max_events: 10,
        max_bytes: 64 << 10,
        max_event_bytes: 4 << 10,
        max_terminal_bytes: MIN_TERMINAL_BYTES,
        max_open_scopes: 4,
    }
}

fn started_model(log: &RunLog) {
    commit_all(
        log,
        &[run_started(), turn_started(1), model_started(1, "op_1")],
    );
}

#[test]
fn sequences_are_contiguous_and_time_never_goes_back() {
    let (log, clock) = log_with(LogConfig::default());
    started_model(&log);
    clock.set(1_000); // the clock jumps backwards
    let e = log.commit(&delta(1, "op_1", "a")).unwrap();
    assert_eq!(e.seq(), 4);
    assert_eq!(e.ts(), 1_767_225_600_000_000, "ts must not decrease");
    clock.set(1_767_225_600_000_500);
    assert_eq!(
        log.commit(&delta(1, "op_1", "b")).unwrap().ts(),
        1_767_225_600_000_500
    );
    // Refused commits (lifecycle, size, payload) do not use a sequence.
    assert!(log.commit(&delta(1, "op_9", "x")).is_err());
    assert!(log.commit(&delta(1, "op_1", "")).is_err());
    let seqs: Vec<u64> = log.retained_after(0).iter().map(|e| e.seq()).collect();
    assert_eq!(seqs, vec![1, 2, 3, 4, 5]);
    assert_eq!(log.commit(&delta(1, "op_1", "c")).unwrap().seq(), 6);
}

/// Config validation, one row per rule.
/// Found by the `event_line` fuzz target: a `ts` past 2^53 − 1 made a
/// line that decoded but was not I-JSON. A clock past it saturates, and
/// the line stays canonical and decodable.
#[test]
fn timestamps_saturate_at_the_largest_safe_integer() {
    let (log, clock) = log_with(LogConfig::default());
    clock.set(u64::MAX);
    let e = log.commit(&run_started()).unwrap();
    assert_eq!(e.ts(), (1 << 53) - 1);
    assert_eq!(Event::decode(e.line()).unwrap().line(), e.line());
    keel_message::CanonicalJson::parse(e.line()).unwrap();
    clock.set(5);
    assert_eq!(log.commit(&turn_started(1)).unwrap().ts(), (1 << 53) - 1);
}

#[test]
fn config_reserve_rule() {
    let check = |row: &str, c: LogConfig, want: Option<&str>| match (c.validate(), want) {
        (Ok(()), None) => {}
        (Err(e), Some(rule)) => assert!(e.to_string().contains(rule), "row {row}: {e}"),
        (got, want) => panic!("row {row}: got {got:?}, wanted {want:?}"),
    };
    check("default", LogConfig::default(), None);
    check("small", small(), None);
    check(
        "zero",
        LogConfig {
            max_events: 0,
            ..small()
        },
        Some("rule log.nonzero"),
    );
    check(
        "bytes below reserve",
        LogConfig {
            max_bytes: 4 << 10,
            ..small()
        },
        Some("rule log.terminal_reserve"),
    );
    check(
        "events below reserve",
        LogConfig {
            max_events: 4,
            ..small()
        },
        Some("rule log.terminal_reserve"),
    );
    check(
        "terminal bound below minimum",
        LogConfig {
            max_terminal_bytes: 1024,
            ..small()
        },
        Some("rule log.terminal_reserve"),
    );
    assert!(
        RunLog::new(
            run_id(),
            LogConfig {
                max_events: 0,
                ..small()
            },
            Arc::new(SystemClock)
        )
        .is_err()
    );
}

#[test]
fn retention_evicts_oldest_first_within_both_bounds() {
    let (log, _) = log_with(small());
    started_model(&log);
    for i in 0..100 {
        log.commit(&delta(1, "op_1", &format!("delta {i}")))
            .unwrap();
        let s = log.stats();
        assert!(
            s.retained_events <= 10 && s.retained_bytes <= 64 << 10,
            "{s:?}"
        );
        assert_eq!(
            s.earliest_seq + s.retained_events as u64,
            s.last_seq + 1,
            "{s:?}"
        );
    }
    let kept: Vec<u64> = log.retained_after(0).iter().map(|e| e.seq()).collect();
    assert_eq!(kept, (94..=103).collect::<Vec<_>>());
    assert_eq!(log.stats().evicted, 93);

    // Byte bound binding: big deltas.
    let cfg = LogConfig {
        max_events: 1000,
        max_bytes: 40 << 10,
        ..small()
    };
    let (log, _) = log_with(cfg);
    started_model(&log);
    for _ in 0..50 {
        log.commit(&delta(1, "op_1", &"x".repeat(3000))).unwrap();
        assert!(log.stats().retained_bytes <= 40 << 10);
    }
    assert!(log.stats().retained_events < 20);
}

#[test]
fn reserve_keeps_the_whole_closing_tail() {
    // With the log full of the largest events, closing every open scope
    // still fits, and the closing tail is retained in one piece.
    let base = LogConfig {
        max_events: 1000,
        ..small()
    };
    let cfg = LogConfig {
        max_bytes: base.max_event_bytes
            + ENTRY_OVERHEAD_BYTES
            + base.max_open_scopes * (base.max_terminal_bytes + ENTRY_OVERHEAD_BYTES),
        ..base
    };
    cfg.validate().unwrap();
    let (log, _) = log_with(cfg);
    commit_all(
        &log,
        &[
            run_started(),
            turn_started(1),
            model_started(1, "op_1"),
            tool_started(1, "c1"),
        ],
    );
    let big = "y".repeat(3900);
    let last = log.commit(&delta(1, "op_1", &big)).unwrap();
    let huge = ErrorText::new(&"\"".repeat(5000)); // worst case: every byte escaped
    let closing = [
        Payload::ToolFailed(ToolFailed {
            turn: 1,
            call_id: call("c1"),
            tool: tool_name("get_weather"),
            error: huge.clone(),
            outcome: Some(ToolOutcome::Uncertain),
            retry: Some(ToolRetry::NotRetryable),
            extra: Extra::new(),
        }),
        model_cancelled(1, "op_1"),
        Payload::TurnFailed(TurnFailed {
            turn: 1,
            error: huge.clone(),
            cause: None,
            extra: Extra::new(),
        }),
        Payload::RunFailed(RunFailed {
            error: huge,
            cause: Some(Cause {
                observer: Some("o".repeat(128)),
                seq: Some(9),
                ..Cause::default()
            }),
            extra: Extra::new(),
        }),
    ];
    for p in &closing {
        log.commit(p)
            .unwrap_or_else(|e| panic!("{:?}: {e}", p.kind()));
    }
    let tail: Vec<u64> = log
        .retained_after(last.seq() - 1)
        .iter()
        .map(|e| e.seq())
        .collect();
    assert_eq!(tail, (last.seq()..=last.seq() + 4).collect::<Vec<_>>());
}

#[test]
fn subscribe_replays_then_follows_without_gap_or_duplicate() {
    let log = log();
    started_model(&log);
    for cursor in 0..=3 {
        let mut sub = log
            .subscribe(cursor, SubscriptionBounds::default())
            .unwrap();
        log.commit(&delta(1, "op_1", "x")).unwrap();
        let (seqs, end) = drain(&mut sub);
        let last = log.stats().last_seq;
        assert_eq!(seqs, ((cursor + 1)..=last).collect::<Vec<_>>());
        assert_eq!(end, None);
        assert_eq!(sub.cursor(), last);
    }
}

#[test]
fn cursor_errors_carry_recovery_information() {
    let (log, _) = log_with(small());
    started_model(&log);
    for _ in 0..20 {
        log.commit(&delta(1, "op_1", "x")).unwrap();
    }
    let s = log.stats();
    assert_eq!(
        log.subscribe(2, SubscriptionBounds::default()).unwrap_err(),
        SubscribeError::CursorExpired {
            requested: 2,
            earliest: s.earliest_seq,
            latest: s.last_seq,
            recovery_cursor: s.earliest_seq - 1,
        }
    );
    // The recovery cursor works.
    let mut sub = log
        .subscribe(s.earliest_seq - 1, SubscriptionBounds::default())
        .unwrap();
    assert_eq!(drain(&mut sub).0.len(), s.retained_events);
    assert_eq!(
        log.subscribe(s.last_seq + 1, SubscriptionBounds::default())
            .unwrap_err(),
        SubscribeError::CursorAhead {
            requested: s.last_seq + 1,
            latest: s.last_seq
        }
    );
}

#[test]
fn slow_consumer_is_cut_off_and_never_blocks_a_commit() {
    let log = log();
    started_model(&log);
    let bounds = SubscriptionBounds {
        max_events: 3,
        max_bytes: 1 << 20,
        ..Default::default()
    };
    let mut slow = log.subscribe(0, bounds).unwrap();
    let mut fast = log.subscribe(0, bounds).unwrap();
    assert_eq!(slow.try_recv().unwrap().seq(), 1);
    let mut fast_seen = Vec::new();
    for i in 0..50 {
        log.commit(&delta(1, "op_1", "x")).unwrap(); // never waits
        if i % 2 == 0 {
            let (seqs, end) = drain(&mut fast);
            assert_eq!(end, None);
            fast_seen.extend(seqs);
        }
    }
    let (seqs, end) = drain(&mut slow);
    // The replay (2, 3) is delivered, then the typed end.
    assert_eq!(seqs, vec![2, 3]);
    match end {
        Some(TryRecvError::Ended(SubscriptionError::SlowConsumer {
            last_delivered,
            recovery_cursor,
            lag_events,
            max_events,
            ..
        })) => {
            assert_eq!((last_delivered, recovery_cursor, max_events), (3, 3, 3));
            assert_eq!(lag_events, 50);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(slow.try_recv(), Err(TryRecvError::Finished));
    // The fast one stayed within bounds and is complete.
    fast_seen.extend(drain(&mut fast).0);
    assert_eq!(fast_seen, (1..=53).collect::<Vec<_>>());
    // Resuming from the recovery cursor loses nothing.
    let mut again = log.subscribe(3, bounds).unwrap();
    assert_eq!(drain(&mut again).0, (4..=53).collect::<Vec<_>>());
}

#[test]
fn byte_bound_cuts_off_too() {
    let log = log();
    started_model(&log);
    let mut sub = log
        .subscribe(
            3,
            SubscriptionBounds {
                max_events: 1000,
                max_bytes: 2048,
                ..Default::default()
            },
        )
        .unwrap();
    for _ in 0..10 {
        log.commit(&delta(1, "op_1", &"z".repeat(300))).unwrap();
    }
    match drain(&mut sub) {
        (
            seqs,
            Some(TryRecvError::Ended(SubscriptionError::SlowConsumer {
                lag_bytes,
                max_bytes,
                ..
            })),
        ) => {
            assert!(seqs.is_empty());
            assert!(lag_bytes > 2048 && max_bytes == 2048);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn only_the_runs_three_terminals_are_run_terminals() {
    let mut names: Vec<String> = [
        "model.text_delta",
        "model.tool_call",
        "run.input",
        "acme.run_completed",
    ]
    .map(str::to_owned)
    .to_vec();
    for scope in Scope::ALL {
        names.push(format!("{}.started", scope.as_str()));
        for terminal in Terminal::ALL {
            names.push(format!("{}.{}", scope.as_str(), terminal.as_str()));
        }
    }
    let terminals: Vec<&str> = names
        .iter()
        .filter(|n| EventKind::parse(n).unwrap().is_run_terminal())
        .map(String::as_str)
        .collect();
    assert_eq!(terminals, ["run.completed", "run.failed", "run.cancelled"]);
    for terminal in Terminal::ALL {
        let kind = EventKind::parse(&format!("run.{}", terminal.as_str())).unwrap();
        assert_eq!(kind.run_terminal(), Some(terminal));
    }
}

#[test]
fn stream_ends_after_the_run_terminal() {
    let log = log();
    let mut sub = log.subscribe(0, SubscriptionBounds::default()).unwrap();
    commit_all(
        &log,
        &[
            run_started(),
            turn_started(1),
            turn_completed(1),
            run_completed(),
        ],
    );
    let (seqs, end) = drain(&mut sub);
    assert_eq!(seqs, vec![1, 2, 3, 4]);
    assert_eq!(end, Some(TryRecvError::Finished));
    // A subscriber joining after the end replays and ends the same way.
    let mut late = log.subscribe(2, SubscriptionBounds::default()).unwrap();
    assert_eq!(drain(&mut late), (vec![3, 4], Some(TryRecvError::Finished)));
}

#[test]
fn close_and_shutdown_end_streams_with_a_typed_end() {
    for (reason, end) in [
        (EndReason::Closed, RunLog::close as fn(&RunLog)),
        (EndReason::Shutdown, RunLog::shutdown),
    ] {
        let log = log();
        started_model(&log);
        let mut sub = log.subscribe(1, SubscriptionBounds::default()).unwrap();
        end(&log);
        assert_eq!(
            log.commit(&delta(1, "op_1", "late")).unwrap_err(),
            CommitError::Closed(reason)
        );
        let (seqs, got) = drain(&mut sub);
        assert_eq!(seqs, vec![2, 3], "everything committed is delivered first");
        assert_eq!(
            got,
            Some(TryRecvError::Ended(SubscriptionError::Ended {
                reason,
                last_seq: 3
            }))
        );
        assert_eq!(sub.try_recv(), Err(TryRecvError::Finished));
    }
}

#[tokio::test]
async fn async_stream_wakes_on_commit_and_close() {
    use futures_util::StreamExt;
    let log = log();
    let mut sub = log.subscribe(0, SubscriptionBounds::default()).unwrap();
    let producer = {
        let log = log.clone();
        tokio::spawn(async move {
            started_model(&log);
            for _ in 0..100 {
                log.commit(&delta(1, "op_1", "t")).unwrap();
                tokio::task::yield_now().await;
            }
            commit_all(
                &log,
                &[
                    model_completed(1, "op_1"),
                    turn_completed(1),
                    run_completed(),
                ],
            );
        })
    };
    let mut seqs = Vec::new();
    while let Some(item) = sub.next().await {
        seqs.push(item.unwrap().seq());
    }
    producer.await.unwrap();
    assert_eq!(seqs, (1..=106).collect::<Vec<_>>());

    let log2 = self::log();
    let mut sub2 = log2.subscribe(0, SubscriptionBounds::default()).unwrap();
    let closer = {
        let log2 = log2.clone();
        tokio::spawn(async move {
            tokio::task::yield_now().await;
            log2.shutdown();
        })
    };
    let got = sub2.recv().await;
    assert_eq!(
        got,
        Some(Err(SubscriptionError::Ended {
            reason: EndReason::Shutdown,
            last_seq: 0
        }))
    );
    assert_eq!(sub2.recv().await, None);
    closer.await.unwrap();
}

#[test]
fn snapshot_restore_is_byte_identical_and_continues_the_sequence() {
    let (log, _) = log_with(small());
    commit_all(
        &log,
        &[run_started(), turn_started(1), model_started(1, "op_1")],
    );
    for i in 0..20 {
        log.commit(&delta(1, "op_1", &format!("d{i}"))).unwrap();
    }
    let snap = log.snapshot();
    assert_eq!(snap.schema(), SCHEMA_VERSION);
    assert_eq!(snap.last_seq(), 23);
    let text = snap.to_jsonl();
    let parsed = Snapshot::from_jsonl(&text).unwrap();
    assert_eq!(parsed.to_jsonl(), text);
    let restored = RunLog::restore(&parsed, small(), Arc::new(SystemClock)).unwrap();
    let a: Vec<String> = log
        .retained_after(0)
        .iter()
        .map(|e| e.line().to_owned())
        .collect();
    let b: Vec<String> = restored
        .retained_after(0)
        .iter()
        .map(|e| e.line().to_owned())
        .collect();
    assert_eq!(a, b);
    // The restored log continues: same open scopes, next sequence.
    assert_eq!(restored.open_scopes(), log.open_scopes());
    let e = restored.commit(&model_completed(1, "op_1")).unwrap();
    assert_eq!(e.seq(), 24);
    assert!(
        restored.commit(&turn_started(2)).is_err(),
        "turn 1 is still open after restore"
    );
    commit_all(&restored, &[turn_completed(1), run_completed()]);
}

#[test]
fn a_run_from_outside_keeps_to_the_importers_metadata_allowlist() {
    let log = log();
    let mut done = model_completed(1, "op_1");
    if let Payload::ModelCompleted(p) = &mut done {
        p.metadata = Some(
            keel_stream::ProviderMetadata::from_value(&serde_json::json!({
                "openai": {"id": "r1"}, "scripted": {"n": 1}
            }))
            .unwrap(),
        );
    }
    started_model(&log);
    commit_all(&log, &[done, turn_completed(1), run_completed()]);
    let snapshot = log.snapshot();
    let import = |names: &[&str]| {
        snapshot.import_run(
            LogConfig::default(),
            Arc::new(SystemClock),
            &keel_stream::MetadataAllowlist::new(names.iter().copied()).unwrap(),
        )
    };
    let err = import(&["scripted"]).unwrap_err();
    assert!(
        matches!(&err, ImportError::MetadataNotAllowed { line: 4, seq: 4, namespace } if namespace == "openai"),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("$.openai is not allowed here (rule import.metadata_allowlist)"),
        "{err}"
    );
    let whole = import(&["openai", "scripted"]).unwrap();
    assert_eq!(whole.retained_after(0), log.retained_after(0));
    // Events this host stored itself are trusted as they are.
    let lines: Vec<&str> = snapshot.events().iter().map(|e| e.line()).collect();
    assert!(RunLog::import(run_id(), lines, LogConfig::default(), Arc::new(SystemClock)).is_ok());
}

#[test]
fn a_run_from_outside_must_have_the_header_its_events_give() {
    let log = log();
    commit_all(&log, &[run_started(), turn_started(1)]);
    let open = log.snapshot().to_jsonl();
    commit_all(&log, &[turn_completed(1), run_completed()]);
    let ended = log.snapshot().to_jsonl();
    // The finished run's events under the header of the run still open.
    let (open_header, _) = open.split_once('\n').unwrap();
    let (_, ended_events) = ended.split_once('\n').unwrap();
    let forged =
        format!("{open_header}\n{ended_events}").replace(r#""last_seq":2"#, r#""last_seq":4"#);
    let snapshot = Snapshot::from_jsonl(&forged).unwrap();
    let err = snapshot
        .import_run(
            LogConfig::default(),
            Arc::new(SystemClock),
            &keel_stream::MetadataAllowlist::empty(),
        )
        .unwrap_err();
    assert!(
        matches!(&err, ImportError::HeaderMismatch { replayed } if replayed.contains(r#""run_ended":true"#)),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("(rule snapshot.consistent)"),
        "{err}"
    );
}

#[test]
fn import_never_renumbers_and_refuses_bad_sequences() {
    let log = log();
    commit_all(
        &log,
        &[
            run_started(),
            turn_started(1),
            turn_completed(1),
            run_completed(),
        ],
    );
    let lines: Vec<String> = log
        .retained_after(0)
        .iter()
        .map(|e| e.line().to_owned())
        .collect();
    let imported = RunLog::import(
        run_id(),
        lines.iter().map(String::as_str),
        LogConfig::default(),
        Arc::new(SystemClock),
    )
    .unwrap();
    let again: Vec<String> = imported
        .retained_after(0)
        .iter()
        .map(|e| e.line().to_owned())
        .collect();
    assert_eq!(again, lines);
    assert!(imported.run_ended());

    let check = |row: &str, order: &[usize], rule: &str| {
        let picked: Vec<&str> = order.iter().map(|i| lines[*i].as_str()).collect();
        let err = RunLog::import(
            run_id(),
            picked,
            LogConfig::default(),
            Arc::new(SystemClock),
        )
        .unwrap_err();
        assert!(err.to_string().contains(rule), "row {row}: {err}");
    };
    check("gap", &[0, 2], "gap (rule import.contiguous)");
    check(
        "duplicate",
        &[0, 1, 1],
        "duplicate (rule import.contiguous)",
    );
    check(
        "out of order",
        &[0, 1, 2, 1],
        "out of order (rule import.contiguous)",
    );
    check("not from 1", &[1, 2], "gap (rule import.contiguous)");
    let other = RunLog::import(
        keel_message::RunId::parse("run_2").unwrap(),
        lines.iter().map(String::as_str),
        LogConfig::default(),
        Arc::new(SystemClock),
    )
    .unwrap_err();
    assert!(other.to_string().contains("rule import.one_run"), "{other}");
    // A line with its lifecycle broken (turn completed twice, renumbered by hand).
    let forged = lines[2].replace(r#""seq":3"#, r#""seq":4"#);
    let err = RunLog::import(
        run_id(),
        [
            lines[0].as_str(),
            lines[1].as_str(),
            lines[2].as_str(),
            forged.as_str(),
        ],
        LogConfig::default(),
        Arc::new(SystemClock),
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("rule lifecycle.one_terminal"),
        "{err}"
    );
    // Time may not go backwards.
    let back = lines[1].replacen(
        &format!(r#""ts":{}"#, log.retained_after(0)[1].ts()),
        r#""ts":1"#,
        1,
    );
    let err = RunLog::import(
        run_id(),
        [lines[0].as_str(), back.as_str()],
        LogConfig::default(),
        Arc::new(SystemClock),
    )
    .unwrap_err();
    assert!(err.to_string().contains("rule event.ts_monotonic"), "{err}");
}

proptest! {
    /// Any mix of commit sizes keeps both bounds, the window contiguous, and
    /// every subscriber within bounds complete and in order.
    #[test]
    fn bounds_always_hold(sizes in prop::collection::vec(1usize..3000, 1..200), max_events in 6usize..50) {
        let cfg = LogConfig { max_events, max_bytes: 48 << 10, ..small() };
        let (log, _) = log_with(cfg.clone());
        started_model(&log);
        let mut sub = log.subscribe(0, SubscriptionBounds { max_events: 100_000, max_bytes: usize::MAX, ..Default::default() }).unwrap();
        let mut seen = Vec::new();
        for (i, n) in sizes.iter().enumerate() {
            log.commit(&delta(1, "op_1", &"q".repeat(*n))).unwrap();
            let s = log.stats();
            prop_assert!(s.retained_events <= cfg.max_events);
            prop_assert!(s.retained_bytes <= cfg.max_bytes);
            prop_assert_eq!(s.earliest_seq + s.retained_events as u64, s.last_seq + 1);
            if i % 3 == 0 {
                seen.extend(drain(&mut sub).0);
            }
        }
        let (rest, end) = drain(&mut sub);
        seen.extend(rest);
        if end.is_none() {
            prop_assert_eq!(seen, (1..=log.stats().last_seq).collect::<Vec<_>>());
        } else {
            // Cut off because the log evicted what it had not taken: the
            // delivered part is still a gap-free prefix.
            prop_assert_eq!(seen.clone(), (1..=seen.len() as u64).collect::<Vec<_>>());
        }
    }
}

#[test]
fn a_cursor_at_the_final_event_finishes_at_once() {
    let log = log();
    commit_all(&log, &[run_started(), run_completed()]);
    let mut sub = log.subscribe(2, SubscriptionBounds::default()).unwrap();
    assert_eq!(sub.try_recv(), Err(TryRecvError::Finished));
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut sub = log.subscribe(2, SubscriptionBounds::default()).unwrap();
    assert_eq!(rt.block_on(sub.recv()), None);
}

#[test]
fn events_evicted_before_they_were_taken_end_the_subscription_typed() {
    let (log, _) = log_with(LogConfig {
        max_events: 10,
        max_open_scopes: 2,
        ..LogConfig::default()
    });
    // Bounds larger than the log's retention: eviction, not the bounds, cuts it off.
    let mut sub = log
        .subscribe(
            0,
            SubscriptionBounds {
                max_events: 1000,
                max_bytes: usize::MAX,
                ..Default::default()
            },
        )
        .unwrap();
    log.commit(&run_started()).unwrap();
    for _ in 0..20 {
        log.commit(&note()).unwrap();
    }
    let (seqs, end) = drain(&mut sub);
    assert!(seqs.is_empty());
    assert_eq!(
        end,
        Some(TryRecvError::Ended(SubscriptionError::Evicted {
            last_delivered: 0,
            earliest: 12,
            recovery_cursor: 11
        }))
    );
    let mut again = log.subscribe(11, SubscriptionBounds::default()).unwrap();
    assert_eq!(drain(&mut again).0, (12..=21).collect::<Vec<_>>());
}

/// The replay is read from the log in batches as the subscriber goes, not
/// copied at subscribe time: a replay longer than a batch arrives whole
/// and uncounted by the bounds when the log keeps it, and a replay the log
/// evicts before the subscriber reached it ends with `Evicted`.
#[test]
fn a_replay_is_read_as_it_goes_and_its_eviction_ends_typed() {
    let config = LogConfig {
        max_events: 1000,
        max_open_scopes: 2,
        ..LogConfig::default()
    };
    let (log, _) = log_with(config);
    log.commit(&run_started()).unwrap();
    for _ in 1..1000 {
        log.commit(&note()).unwrap();
    }
    // Bounds far below the replay: it does not count.
    let tight = SubscriptionBounds {
        max_events: 2,
        max_bytes: 1024,
        ..SubscriptionBounds::default()
    };
    let mut whole = log.subscribe(0, tight).unwrap();
    assert_eq!(drain(&mut whole), ((1..=1000).collect(), None));
    // Took one batch, then the log moved on by its whole retention.
    let mut behind = log.subscribe(0, SubscriptionBounds::default()).unwrap();
    assert_eq!(behind.try_recv().unwrap().seq(), 1);
    for _ in 0..1000 {
        log.commit(&note()).unwrap();
    }
    let (seqs, end) = drain(&mut behind);
    let last = 1 + seqs.len() as u64;
    assert_eq!(seqs, (2..=last).collect::<Vec<_>>());
    assert!(last < 1000, "read {last} of the replay before the eviction");
    assert_eq!(
        end,
        Some(TryRecvError::Ended(SubscriptionError::Evicted {
            last_delivered: last,
            earliest: 1001,
            recovery_cursor: 1000,
        }))
    );
    assert_eq!(behind.try_recv(), Err(TryRecvError::Finished));
}

#[test]
fn zero_bounds_are_refused_naming_the_bound() {
    let log = log();
    started_model(&log);
    for (bound, bounds) in [
        (
            "max_events",
            SubscriptionBounds {
                max_events: 0,
                ..Default::default()
            },
        ),
        (
            "max_bytes",
            SubscriptionBounds {
                max_bytes: 0,
                ..Default::default()
            },
        ),
    ] {
        let err = log.subscribe(0, bounds).unwrap_err();
        assert_eq!(err, SubscribeError::ZeroBound { bound });
        assert!(
            err.to_string().contains("rule subscription.bounds_nonzero"),
            "{err}"
        );
    }
    assert_eq!(
        log.stats().subscribers,
        0,
        "a refused subscribe counts no subscriber"
    );
    let one = SubscriptionBounds {
        max_events: 1,
        max_bytes: 1,
        ..Default::default()
    };
    let mut sub = log.subscribe(3, one).unwrap();
    log.commit(&delta(1, "op_1", "a")).unwrap();
    assert_eq!(
        sub.try_recv().unwrap().seq(),
        4,
        "bounds of 1 take one live event"
    );
}

/// One policy for an event larger than the byte bound: the next event is
/// always deliverable, and the bound counts the backlog behind it.
#[test]
fn an_event_larger_than_the_byte_bound_reaches_a_consumer_that_keeps_up() {
    let log = log();
    started_model(&log);
    let bounds = SubscriptionBounds {
        max_events: 100,
        max_bytes: 512,
        ..Default::default()
    };
    let mut sub = log.subscribe(3, bounds).unwrap();
    for i in 0..3 {
        let big = log.commit(&delta(1, "op_1", &"x".repeat(2000))).unwrap();
        assert!(big.line().len() > 512);
        assert_eq!(
            sub.try_recv().unwrap().seq(),
            4 + i,
            "a fast consumer gets it"
        );
    }
    // Behind by two large events: the one behind the next is over the bound.
    log.commit(&delta(1, "op_1", &"y".repeat(2000))).unwrap();
    log.commit(&delta(1, "op_1", &"z".repeat(2000))).unwrap();
    match drain(&mut sub) {
        (seqs, Some(TryRecvError::Ended(SubscriptionError::SlowConsumer { lag_bytes, .. }))) => {
            assert!(seqs.is_empty(), "{seqs:?}");
            assert!(lag_bytes > 512, "{lag_bytes}");
        }
        other => panic!("{other:?}"),
    }
}

/// What a subscription buffered stays alive after the log evicts it; an
/// idle subscriber keeps at most its byte bound (but one event) of it.
#[test]
fn an_idle_subscriber_pins_no_more_than_its_byte_bound() {
    let (log, _) = log_with(LogConfig {
        max_events: 50,
        max_open_scopes: 2,
        ..LogConfig::default()
    });
    log.commit(&run_started()).unwrap();
    let mut weak = Vec::new();
    for _ in 0..49 {
        weak.push(Arc::downgrade(&log.commit(&note()).unwrap()));
    }
    let line = weak[0].upgrade().unwrap().line().len();
    let max_bytes = 10 * (line + ENTRY_OVERHEAD_BYTES);
    let mut idle = log
        .subscribe(
            0,
            SubscriptionBounds {
                max_bytes,
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(idle.try_recv().unwrap().seq(), 1);
    // The log moves on by its whole retention; the subscriber sleeps.
    for _ in 0..100 {
        log.commit(&note()).unwrap();
    }
    let pinned = weak.iter().filter(|w| w.upgrade().is_some()).count();
    assert!(
        pinned <= 10,
        "{pinned} evicted events pinned, bound {max_bytes} bytes"
    );
    assert!(pinned >= 1, "the buffer holds what it took");
    drop(idle);
    assert_eq!(weak.iter().filter(|w| w.upgrade().is_some()).count(), 0);
}

/// A header is a claim a log could have written: a `last_ts` past the
/// wire's range would make the restored log's next line undecodable, and
/// a window that does not start at 1 or later is no window.
#[test]
fn a_snapshot_header_out_of_range_is_refused() {
    let (log, _) = log_with(small());
    started_model(&log);
    let text = log.snapshot().to_jsonl();
    let (header, body) = text.split_once('\n').unwrap();
    let mut v: serde_json::Value = serde_json::from_str(header).unwrap();
    let max_safe = (1u64 << 53) - 1;
    // In range: restores, and its next commit decodes.
    v["last_ts"] = max_safe.into();
    let edge = format!(
        "{}\n{body}",
        keel_message::canonical::to_canonical_string(&v).unwrap()
    );
    let restored = RunLog::restore(
        &Snapshot::from_jsonl(&edge).unwrap(),
        small(),
        Arc::new(SystemClock),
    )
    .unwrap();
    let next = restored.commit(&delta(1, "op_1", "a")).unwrap();
    assert_eq!(Event::decode(next.line()).unwrap().ts(), max_safe);
    for (field, value, needle) in [
        (
            "last_ts",
            serde_json::json!(max_safe + 1),
            "last_ts 9007199254740992 is over 2^53 - 1",
        ),
        (
            "earliest_seq",
            serde_json::json!(0),
            "earliest_seq 0 is outside 1..=4",
        ),
        (
            "last_turn",
            serde_json::json!(max_safe + 1),
            "last_turn 9007199254740992 is over",
        ),
    ] {
        let mut bad = v.clone();
        bad[field] = value;
        let tampered = format!("{}\n{body}", serde_json::to_string(&bad).unwrap());
        let err = Snapshot::from_jsonl(&tampered).unwrap_err();
        assert!(
            matches!(err, ImportError::Header { .. }),
            "{field}: {err:?}"
        );
        assert!(err.to_string().contains(needle), "{field}: {err}");
        assert!(err.to_string().contains("rule snapshot.header"), "{err}");
    }
}

/// A window's events are replayed with every lifecycle check, from the
/// state derived from its header: a window that continues is restored, a
/// reordered one (a delta after its model call ended) is refused.
#[test]
fn a_window_snapshot_is_restored_with_lifecycle_checks() {
    let (log, _) = log_with(small());
    started_model(&log);
    for i in 0..20 {
        log.commit(&delta(1, "op_1", &format!("d{i}"))).unwrap();
    }
    log.commit(&model_completed(1, "op_1")).unwrap();
    let snap = log.snapshot();
    assert!(snap.earliest_seq() > 1, "a window");
    let text = snap.to_jsonl();
    let restored = RunLog::restore(
        &Snapshot::from_jsonl(&text).unwrap(),
        small(),
        Arc::new(SystemClock),
    )
    .unwrap();
    commit_all(&restored, &[turn_completed(1), run_completed()]);

    // Swap the last two events: the model call's end, then a delta of it.
    let reordered = swap_last_two_events(&text);
    let n = reordered.lines().count();
    let parsed = Snapshot::from_jsonl(&reordered).unwrap();
    let err = RunLog::restore(&parsed, small(), Arc::new(SystemClock)).unwrap_err();
    assert!(
        matches!(err, ImportError::Lifecycle { line, .. } if line == n),
        "{err:?}"
    );
    // A header that says the model call is still open, over a window that
    // ends it: the two disagree.
    let (header, body) = text.split_once('\n').unwrap();
    let mut v: serde_json::Value = serde_json::from_str(header).unwrap();
    v["open_scopes"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"scope": "model", "turn": 1, "operation_id": "op_1"}));
    let lying = format!("{}\n{body}", serde_json::to_string(&v).unwrap());
    let err = RunLog::restore(
        &Snapshot::from_jsonl(&lying).unwrap(),
        small(),
        Arc::new(SystemClock),
    )
    .unwrap_err();
    assert!(matches!(err, ImportError::Inconsistent { .. }), "{err:?}");
}
