//! Compaction in the log, one rule per row through one `check` helper
//! per family: the history fold applying `context.compacted` (the model
//! context: `rebuild`, `rebuild_after`, `finish`) and handing out the
//! transcript (`take_completed`) and the items (`take_items`); the range
//! rule `compaction.range`; the order rule `lifecycle.compaction_order`
//! (commit and import); the wire (byte-identical round trips, the payload
//! rules, an older reader's view).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
use common::*;
use keel_eventlog::history::{self, HistoryError, HistoryFold, HistoryItem, RangeFault};
use keel_eventlog::*;
use keel_message::{CanonicalJson, Limits, Message, MessageId, ModelName, Part, Role};
use keel_testkit::events::ModelAttempt;

fn mid(id: &str) -> MessageId {
    MessageId::parse(id).unwrap()
}

fn text_message(id: &str, role: Role, text: &str) -> Message {
    Message::text(mid(id), role, text).unwrap()
}

fn input(message: Message) -> Payload {
    Payload::RunInput(RunInput {
        message,
        extra: Extra::new(),
    })
}

fn model() -> ModelName {
    ModelName::parse("scripted-1").unwrap()
}

fn call_part(c: &str) -> Part {
    Part::tool_call(
        call(c),
        tool_name("get_weather"),
        CanonicalJson::parse("{}").unwrap(),
    )
    .unwrap()
}

/// Turn `turn`: an answer call `a<turn>` that calls tool `c<turn>`, its
/// result, the turn's end.
fn tool_turn(turn: u64) -> Vec<Payload> {
    let attempt = ModelAttempt::new(turn, op(&format!("a{turn}")));
    let c = format!("c{turn}");
    vec![
        turn_started(turn),
        attempt.started(model()),
        Payload::ToolCall(ToolCall {
            turn,
            operation_id: op(&format!("a{turn}")),
            call_id: call(&c),
            name: tool_name("get_weather"),
            arguments: CanonicalJson::parse("{}").unwrap(),
            extra: Extra::new(),
        }),
        attempt.completed(keel_stream::FinishReason::ToolCalls, None),
        tool_started(turn, &c),
        tool_completed(turn, &c),
        turn_completed(turn),
    ]
}

fn summary(turn: u64, text: &str) -> Message {
    let id = history::compaction_message_id(&run_id(), turn).unwrap();
    Message::text(id, Role::User, text).unwrap()
}

fn compacted(turn: u64, first: &str, last: &str, count: u64) -> Payload {
    Payload::ContextCompacted(ContextCompacted {
        turn,
        operation_id: op(&format!("k{turn}")),
        replaces: CompactedRange {
            first: mid(first),
            last: mid(last),
            count,
            extra: Extra::new(),
        },
        summary: summary(turn, "the story so far"),
        tokens_before: 900,
        tokens_after: 200,
        estimator: TokenEstimator {
            kind: EstimatorKind::Bytes,
            bytes_per_token: 4,
            extra: Extra::new(),
        },
        extra: Extra::new(),
    })
}

/// Turn `turn` opening with compaction call `k<turn>` (its text is the
/// summary) and `outcome` (a `context.compacted` or a failure), then an
/// answer call `a<turn>` with text "done".
fn compacting_turn(turn: u64, outcome: Payload) -> Vec<Payload> {
    let compaction = ModelAttempt::new(turn, op(&format!("k{turn}")));
    let answer = ModelAttempt::new(turn, op(&format!("a{turn}")));
    vec![
        turn_started(turn),
        compaction.compaction_started(model()),
        compaction.text("the story so far"),
        compaction.completed(keel_stream::FinishReason::Stop, None),
        outcome,
        answer.started(model()),
        answer.text("done"),
        answer.completed(keel_stream::FinishReason::Stop, None),
        turn_completed(turn),
    ]
}

fn failed(turn: u64, rule: CompactionRule) -> Payload {
    Payload::ContextCompactionFailed(ContextCompactionFailed {
        turn,
        operation_id: op(&format!("k{turn}")),
        rule,
        detail: ErrorText::new("the summary was larger"),
        tokens_before: 900,
        extra: Extra::new(),
    })
}

/// The inputs every fold row starts from: a system message and "Hi".
fn inputs() -> Vec<Payload> {
    vec![
        run_started(),
        input(text_message("m0", Role::System, "be brief")),
        input(text_message("m1", Role::User, "Hi")),
    ]
}

/// Commits `payloads` on `run_1` (the log checks the lifecycle and the
/// compaction order, not the range).
fn committed(payloads: &[Payload]) -> Vec<std::sync::Arc<Event>> {
    let log = log();
    commit_all(&log, payloads);
    log.retained_after(0)
}

/// The ids of `messages`, in order.
fn ids(messages: &[Message]) -> Vec<String> {
    messages
        .iter()
        .map(|m| m.id().as_str().to_owned())
        .collect()
}

/// What a fold row must give.
enum Want {
    /// The model context's ids, and the transcript's.
    History {
        context: &'static [&'static str],
        transcript: &'static [&'static str],
    },
    /// A `compaction.range` refusal with this fault, at the seq of the
    /// `context.compacted`.
    Range(RangeFault),
}

/// Folds `inputs()` then `body` four ways: `rebuild`, `rebuild_after`
/// (nothing inherited), a fold whose messages are taken as they complete
/// (the transcript, and `finish` of nothing left), and a fold whose items
/// are taken (its messages are the transcript, its compactions the ones
/// in `body`).
fn check(row: &str, body: Vec<Payload>, want: Want) {
    let mut payloads = inputs();
    payloads.extend(body);
    let events = committed(&payloads);
    let limits = Limits::default();
    let rebuilt = history::rebuild(&events, &limits);
    let after = history::rebuild_after(Vec::new(), &events, &limits);
    match want {
        Want::History {
            context,
            transcript,
        } => {
            assert_eq!(ids(&rebuilt.unwrap()), context, "row {row}: rebuild");
            assert_eq!(ids(&after.unwrap()), context, "row {row}: rebuild_after");
            let mut fold = HistoryFold::new(limits.clone());
            let mut taken = Vec::new();
            for event in &events {
                fold.push(event).unwrap();
                taken.extend(fold.take_completed());
            }
            assert_eq!(ids(&taken), transcript, "row {row}: transcript");
            assert_eq!(fold.finish().unwrap(), Vec::<Message>::new(), "row {row}");
            let mut fold = HistoryFold::new(limits);
            let mut items = Vec::new();
            for event in &events {
                fold.push(event).unwrap();
                items.extend(fold.take_items());
            }
            let messages: Vec<Message> = items
                .iter()
                .filter_map(|i| match i {
                    HistoryItem::Message(m) => Some(m.clone()),
                    _ => None,
                })
                .collect();
            assert_eq!(ids(&messages), transcript, "row {row}: items");
            let compactions = items
                .iter()
                .filter(|i| matches!(i, HistoryItem::Compaction { .. }))
                .count();
            let recorded = events
                .iter()
                .filter(|e| e.kind() == &EventKind::ContextCompacted)
                .count();
            assert_eq!(compactions, recorded, "row {row}: compaction items");
        }
        Want::Range(fault) => {
            let seq = events
                .iter()
                .rev()
                .find(|e| e.kind() == &EventKind::ContextCompacted)
                .map(|e| e.seq())
                .unwrap();
            for result in [rebuilt, after] {
                match result {
                    Err(HistoryError::CompactionRange {
                        seq: at, fault: f, ..
                    }) => {
                        assert_eq!((at, &f), (seq, &fault), "row {row}");
                    }
                    other => panic!("row {row}: expected compaction.range, got {other:?}"),
                }
            }
        }
    }
}

#[test]
fn the_fold_applies_compactions() {
    let one_turn = |outcome: Payload| {
        let mut body = tool_turn(1);
        body.extend(compacting_turn(2, outcome));
        body
    };
    let rows: Vec<(&str, Vec<Payload>, Want)> = vec![
        (
            "the range is replaced by the summary; the transcript keeps it all",
            one_turn(compacted(2, "m1", "run_1.t1.t", 3)),
            Want::History {
                context: &["m0", "run_1.t2.s", "run_1.t2.a"],
                transcript: &["m0", "m1", "run_1.t1.a", "run_1.t1.t", "run_1.t2.a"],
            },
        ),
        (
            "a failed compaction leaves the history as it was",
            one_turn(failed(2, CompactionRule::NotSmaller)),
            Want::History {
                context: &["m0", "m1", "run_1.t1.a", "run_1.t1.t", "run_1.t2.a"],
                transcript: &["m0", "m1", "run_1.t1.a", "run_1.t1.t", "run_1.t2.a"],
            },
        ),
        (
            "a range of one message",
            one_turn(compacted(2, "m1", "m1", 1)),
            Want::History {
                context: &["m0", "run_1.t2.s", "run_1.t1.a", "run_1.t1.t", "run_1.t2.a"],
                transcript: &["m0", "m1", "run_1.t1.a", "run_1.t1.t", "run_1.t2.a"],
            },
        ),
        (
            "a later compaction replaces an earlier summary",
            {
                let mut body = one_turn(compacted(2, "m1", "run_1.t1.t", 3));
                body.extend(compacting_turn(
                    3,
                    compacted(3, "run_1.t2.s", "run_1.t2.a", 2),
                ));
                body
            },
            Want::History {
                context: &["m0", "run_1.t3.s", "run_1.t3.a"],
                transcript: &[
                    "m0",
                    "m1",
                    "run_1.t1.a",
                    "run_1.t1.t",
                    "run_1.t2.a",
                    "run_1.t3.a",
                ],
            },
        ),
        (
            "a count that runs past the last message",
            one_turn(compacted(2, "m1", "run_1.t1.t", 4)),
            Want::Range(RangeFault::NotContiguous),
        ),
        (
            "first and last not count apart",
            one_turn(compacted(2, "m1", "run_1.t1.t", 2)),
            Want::Range(RangeFault::NotContiguous),
        ),
        (
            "a first message the history does not hold",
            one_turn(compacted(2, "m9", "run_1.t1.t", 3)),
            Want::Range(RangeFault::NotContiguous),
        ),
        (
            "a range ending at a call without its result",
            one_turn(compacted(2, "m1", "run_1.t1.a", 2)),
            Want::Range(RangeFault::SplitsToolCall {
                call_id: call("c1"),
            }),
        ),
        (
            "a range starting at a result without its call",
            one_turn(compacted(2, "run_1.t1.t", "run_1.t1.t", 1)),
            Want::Range(RangeFault::SplitsToolCall {
                call_id: call("c1"),
            }),
        ),
        (
            "a range over the system message",
            one_turn(compacted(2, "m0", "m1", 2)),
            Want::Range(RangeFault::CoversSystem { id: mid("m0") }),
        ),
        (
            "a summary already replaced is not in the history any more",
            {
                let mut body = one_turn(compacted(2, "m1", "run_1.t1.t", 3));
                body.extend(compacting_turn(3, compacted(3, "m1", "run_1.t2.a", 3)));
                body
            },
            Want::Range(RangeFault::NotContiguous),
        ),
    ];
    for (row, body, want) in rows {
        check(row, body, want);
    }
}

/// The compaction call's text and tool calls never become an assistant
/// message, whatever its purpose (an unknown one included).
#[test]
fn a_purposed_call_is_not_an_answer() {
    let compaction = ModelAttempt::new(1, op("k1"));
    let mut body = vec![turn_started(1), compaction.compaction_started(model())];
    body.push(compaction.text("a summary"));
    body.push(compaction.completed(keel_stream::FinishReason::Stop, None));
    body.push(failed(1, CompactionRule::Empty));
    body.push(turn_completed(1));
    check(
        "compaction call without an outcome in the history",
        body.clone(),
        Want::History {
            context: &["m0", "m1"],
            transcript: &["m0", "m1"],
        },
    );
    // An unknown purpose, as a newer writer may record it.
    let mut payloads = inputs();
    payloads.extend(body);
    let lines: Vec<String> = payloads
        .iter()
        .enumerate()
        .map(|(i, p)| {
            line_of(p, i as u64 + 1, 1).replace(r#""purpose":"compaction""#, r#""purpose":"title""#)
        })
        .collect();
    assert!(lines.iter().any(|l| l.contains(r#""purpose":"title""#)));
    let events: Vec<Event> = lines.iter().map(|l| Event::decode(l).unwrap()).collect();
    let rebuilt = history::rebuild(&events, &Limits::default()).unwrap();
    assert_eq!(ids(&rebuilt), ["m0", "m1"]);
}

/// A compaction in a continued run replaces inherited messages: the
/// chain's model context is the summary and what followed.
#[test]
fn a_continued_run_compacts_what_it_inherited() {
    let inherited = vec![
        text_message("m0", Role::System, "be brief"),
        text_message("m1", Role::User, "Hi"),
        Message::new(mid("p.t1.a"), Role::Assistant, vec![call_part("c1")]).unwrap(),
        Message::new(
            mid("p.t1.t"),
            Role::Tool,
            vec![Part::tool_result(call("c1"), "3 C", false).unwrap()],
        )
        .unwrap(),
    ];
    let mut payloads = vec![
        run_started(),
        input(text_message("run_1.u1", Role::User, "More")),
    ];
    payloads.extend(compacting_turn(1, compacted(1, "m1", "run_1.u1", 4)));
    let events = committed(&payloads);
    let context = history::rebuild_after(inherited.clone(), &events, &Limits::default()).unwrap();
    assert_eq!(ids(&context), ["m0", "run_1.t1.s", "run_1.t1.a"]);
    // A fold whose inherited messages were taken cannot apply it.
    let mut fold = HistoryFold::after(inherited, Limits::default());
    assert_eq!(fold.take_completed().len(), 4);
    for event in &events {
        fold.push(event).unwrap();
    }
    assert!(matches!(
        fold.finish(),
        Err(HistoryError::CompactionRange {
            fault: RangeFault::NotContiguous,
            ..
        })
    ));
}

/// Where the compaction events may stand: each row is committed (the
/// log's rule) and imported (the snapshot's, as `keel verify` and import
/// run it) after `inputs()`; `Ok` or the rule and kind refused.
fn check_order(row: &str, body: Vec<Payload>, want: Result<(), (&str, &str)>) {
    let mut payloads = inputs();
    payloads.extend(body);
    let log = log();
    let mut refused = None;
    for payload in &payloads {
        if let Err(e) = log.commit(payload) {
            refused = Some((e, payload.kind().to_string()));
            break;
        }
    }
    match (&want, refused) {
        (Ok(()), None) => {}
        (Err((rule, kind)), Some((CommitError::Lifecycle(e), at))) => {
            assert_eq!((e.rule(), at.as_str()), (*rule, *kind), "row {row}: {e}");
        }
        (_, got) => panic!("row {row}: want {want:?}, got {got:?}"),
    }
    // The same lines through the tracker a verify runs.
    let mut tracker = LifecycleTracker::new(64);
    let result = payloads.iter().try_for_each(|p| {
        tracker
            .apply_payload(p)
            .map_err(|e| (e.rule(), p.kind().to_string()))
    });
    match (want, result) {
        (Ok(()), Ok(())) => {}
        (Err((rule, kind)), Err((r, k))) => assert_eq!((r, k.as_str()), (rule, kind), "row {row}"),
        (want, got) => panic!("row {row}: tracker: want {want:?}, got {got:?}"),
    }
}

#[test]
fn compaction_events_stand_where_the_rule_says() {
    let k = ModelAttempt::new(1, op("k1"));
    let a = ModelAttempt::new(1, op("a1"));
    let stop = || keel_stream::FinishReason::Stop;
    let order = "lifecycle.compaction_order";
    type Row<'a> = (&'a str, Vec<Payload>, Result<(), (&'a str, &'a str)>);
    let rows: Vec<Row<'_>> = vec![
        (
            "compacted right after its call completed",
            vec![
                turn_started(1),
                k.compaction_started(model()),
                k.completed(stop(), None),
                compacted(1, "m1", "m1", 1),
            ],
            Ok(()),
        ),
        (
            "compaction failed after its call failed",
            vec![
                turn_started(1),
                k.compaction_started(model()),
                k.cancelled(),
                failed(1, CompactionRule::ModelFailed),
            ],
            Ok(()),
        ),
        (
            "compaction failed after a refused summary",
            vec![
                turn_started(1),
                k.compaction_started(model()),
                k.completed(stop(), None),
                failed(1, CompactionRule::NotSmaller),
            ],
            Ok(()),
        ),
        (
            "compacted with an event between",
            vec![
                turn_started(1),
                k.compaction_started(model()),
                k.completed(stop(), None),
                tool_started(1, "c1"),
                tool_completed(1, "c1"),
                compacted(1, "m1", "m1", 1),
            ],
            Err((order, "context.compacted")),
        ),
        (
            "compacted naming an answer call",
            vec![
                turn_started(1),
                a.started(model()),
                a.completed(stop(), None),
                Payload::ContextCompacted(match compacted(1, "m1", "m1", 1) {
                    Payload::ContextCompacted(c) => ContextCompacted {
                        operation_id: op("a1"),
                        ..c
                    },
                    _ => unreachable!(),
                }),
            ],
            Err((order, "context.compacted")),
        ),
        (
            "compacted after its call was cancelled",
            vec![
                turn_started(1),
                k.compaction_started(model()),
                k.cancelled(),
                compacted(1, "m1", "m1", 1),
            ],
            Err((order, "context.compacted")),
        ),
        (
            "compaction failed while its call is open",
            vec![
                turn_started(1),
                k.compaction_started(model()),
                failed(1, CompactionRule::ModelFailed),
            ],
            Err((order, "context.compaction_failed")),
        ),
        (
            "a second outcome for one call",
            vec![
                turn_started(1),
                k.compaction_started(model()),
                k.completed(stop(), None),
                compacted(1, "m1", "m1", 1),
                failed(1, CompactionRule::NotSmaller),
            ],
            Err((order, "context.compaction_failed")),
        ),
        (
            "an outcome in the next turn",
            vec![
                turn_started(1),
                k.compaction_started(model()),
                k.completed(stop(), None),
                turn_completed(1),
                turn_started(2),
                Payload::ContextCompactionFailed(ContextCompactionFailed {
                    turn: 2,
                    ..match failed(1, CompactionRule::NotSmaller) {
                        Payload::ContextCompactionFailed(f) => f,
                        _ => unreachable!(),
                    }
                }),
            ],
            Err((order, "context.compaction_failed")),
        ),
        (
            "outside an open turn",
            vec![
                turn_started(1),
                k.compaction_started(model()),
                k.completed(stop(), None),
                turn_completed(1),
                failed(1, CompactionRule::NotSmaller),
            ],
            Err(("lifecycle.in_open_scope", "context.compaction_failed")),
        ),
    ];
    for (row, body, want) in rows {
        check_order(row, body, want);
    }
}

/// Decodes the line of `payload` (event 5 of `run_1`) after `edit`: `Ok`
/// when it decodes and re-encodes byte for byte, else the rule its error
/// names.
fn check_wire(row: &str, payload: &Payload, edit: (&str, &str), want: Result<(), &str>) {
    let line = line_of(payload, 5, 1);
    assert!(line.contains(edit.0), "row {row}: {line}");
    let line = line.replacen(edit.0, edit.1, 1);
    match (Event::decode(&line), want) {
        (Ok(event), Ok(())) => {
            assert_eq!(event.line(), line, "row {row}");
            let decoded = event.payload().unwrap();
            assert_eq!(
                decoded.to_canonical().unwrap(),
                line_payload(&line),
                "row {row}"
            );
        }
        (Err(e), Err(rule)) => {
            assert!(
                e.to_string().contains(&format!("rule {rule}")),
                "row {row}: {e}"
            );
        }
        (got, want) => panic!("row {row}: want {want:?}, got {:?}", got.map(|e| e.seq())),
    }
}

/// The payload text of an event line.
fn line_payload(line: &str) -> String {
    let value: serde_json::Value = serde_json::from_str(line).unwrap();
    keel_message::canonical::to_canonical_string(&value["payload"]).unwrap()
}

#[test]
fn the_wire_round_trips_and_refuses() {
    let done = compacted(2, "m1", "run_1.t1.t", 3);
    let no = failed(2, CompactionRule::NotSmaller);
    let started = ModelAttempt::new(2, op("k2")).compaction_started(model());
    let same = (r#""turn":2"#, r#""turn":2"#);
    type Row<'a> = (
        &'a str,
        &'a Payload,
        (&'a str, &'a str),
        Result<(), &'a str>,
    );
    let rows: Vec<Row<'_>> = vec![
        ("context.compacted as written", &done, same, Ok(())),
        ("context.compaction_failed as written", &no, same, Ok(())),
        ("model.started with its purpose", &started, same, Ok(())),
        (
            "an unknown member is kept",
            &done,
            (r#""operation_id""#, r#""later":[1],"operation_id""#),
            Ok(()),
        ),
        (
            "an unknown estimator kind is kept",
            &done,
            (r#""kind":"bytes""#, r#""kind":"tokenizer""#),
            Ok(()),
        ),
        (
            "an unknown compaction rule is kept",
            &no,
            ("compaction.not_smaller", "compaction.too_slow"),
            Ok(()),
        ),
        (
            "an unknown purpose is kept",
            &started,
            (r#""compaction""#, r#""title""#),
            Ok(()),
        ),
        (
            "a rule outside the compaction namespace",
            &no,
            ("compaction.not_smaller", "not_smaller"),
            Err("payload.schema"),
        ),
        (
            "a range of no message",
            &done,
            (r#""count":3"#, r#""count":0"#),
            Err("payload.compacted_count"),
        ),
        (
            "a range of one message with two ids",
            &done,
            (r#""count":3"#, r#""count":1"#),
            Err("payload.compacted_count"),
        ),
        (
            "a summary that is not a user message",
            &done,
            (r#""role":"user""#, r#""role":"assistant""#),
            Err("payload.summary_role"),
        ),
        (
            "no bytes per token",
            &done,
            (r#""bytes_per_token":4"#, r#""bytes_per_token":0"#),
            Err("payload.bytes_per_token"),
        ),
        (
            "a summary without its message",
            &done,
            (r#""summary""#, r#""summarized""#),
            Err("payload.schema"),
        ),
    ];
    for (row, payload, edit, want) in rows {
        check_wire(row, payload, edit, want);
    }
    assert_eq!(
        CompactionRule::NotSmaller.rule_name(),
        "compaction.not_smaller"
    );
    for kind in ["context.compacted", "context.compaction_failed"] {
        assert_eq!(EventKind::parse(kind).unwrap().name(), kind);
        assert!(!matches!(
            EventKind::parse(kind).unwrap(),
            EventKind::Extension(_)
        ));
    }
}
