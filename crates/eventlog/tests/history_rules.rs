//! What `history::rebuild` makes of a run's events, one rule per row
//! through one `check` helper: the assistant message of the model call
//! that completed (its text, then its calls; reasoning parts in their
//! stream places), the tool results (with their images) in call
//! order (a denial, a failed approval, an oversized result), the ids the
//! engine mints, and the fold handing messages out as they complete.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
use common::*;
use keel_eventlog::history::{self, HistoryError, HistoryFold};
use keel_eventlog::*;
use keel_message::{
    CanonicalJson, ID_MAX_BYTES, ImageMediaType, ImagePart, Limits, Message, MessageId,
    OpaqueValue, Part, ProviderTag, Role, RunId,
};

fn user(id: &str, text: &str) -> Message {
    Message::text(MessageId::parse(id).unwrap(), Role::User, text).unwrap()
}

fn input(message: Message) -> Payload {
    Payload::RunInput(RunInput {
        message,
        extra: Extra::new(),
    })
}

fn tool_call(turn: u64, o: &str, c: &str) -> Payload {
    Payload::ToolCall(ToolCall {
        turn,
        operation_id: op(o),
        call_id: call(c),
        name: tool_name("get_weather"),
        arguments: CanonicalJson::parse(&format!(r#"{{"call":"{c}"}}"#)).unwrap(),
        extra: Extra::new(),
    })
}

fn call_part(c: &str) -> Part {
    Part::tool_call(
        call(c),
        tool_name("get_weather"),
        CanonicalJson::parse(&format!(r#"{{"call":"{c}"}}"#)).unwrap(),
    )
    .unwrap()
}

fn result_part(c: &str, content: &str, is_error: bool) -> Part {
    Part::tool_result(call(c), content, is_error).unwrap()
}

fn asked(turn: u64, i: &str, c: &str) -> Payload {
    Payload::InteractionStarted(InteractionStarted {
        turn,
        interaction_id: iid(i),
        request: "approval".into(),
        call_id: Some(call(c)),
        extra: Extra::new(),
    })
}

fn decided(turn: u64, i: &str, decision: &str) -> Payload {
    Payload::InteractionCompleted(InteractionCompleted {
        turn,
        interaction_id: iid(i),
        decision: decision.into(),
        extra: Extra::new(),
    })
}

fn approval_failed(turn: u64, i: &str, error: &str) -> Payload {
    Payload::InteractionFailed(InteractionFailed {
        turn,
        interaction_id: iid(i),
        error: ErrorText::new(error),
        extra: Extra::new(),
    })
}

fn tool_output(turn: u64, c: &str, output: &str) -> Payload {
    Payload::ToolCompleted(ToolCompleted {
        turn,
        call_id: call(c),
        tool: tool_name("get_weather"),
        output: output.into(),
        images: Vec::new(),
        extra: Extra::new(),
    })
}

/// `tool.sub_run` of call `c`, naming child run `child`.
fn sub_run(turn: u64, c: &str, child: &str) -> Payload {
    Payload::ToolSubRun(SubRunStarted {
        turn,
        call_id: call(c),
        run_id: RunId::parse(child).unwrap(),
        extra: Extra::new(),
    })
}

/// A tool terminal naming its child run.
fn with_sub_run(mut terminal: Payload, child: &str) -> Payload {
    let extra = match &mut terminal {
        Payload::ToolCompleted(p) => &mut p.extra,
        Payload::ToolFailed(p) => &mut p.extra,
        Payload::ToolCancelled(p) => &mut p.extra,
        other => panic!("not a tool terminal: {other:?}"),
    };
    SubRunRef::new(RunId::parse(child).unwrap()).insert_into(extra);
    terminal
}

fn tool_failed(turn: u64, c: &str) -> Payload {
    tool_failed_as(turn, c, "get_weather")
}

/// `run_1`'s events for `payloads`, from seq 1 (decoded from their lines:
/// the rebuild does not judge the lifecycle, the log does).
fn events(payloads: &[Payload]) -> Vec<Event> {
    payloads
        .iter()
        .enumerate()
        .map(|(i, p)| Event::decode(&line_of(p, i as u64 + 1, 1_767_225_600_000_000)).unwrap())
        .collect()
}

fn message(id: &str, role: Role, parts: Vec<Part>) -> Message {
    Message::new(MessageId::parse(id).unwrap(), role, parts).unwrap()
}

fn assistant(turn: u64, parts: Vec<Part>) -> Message {
    message(&format!("run_1.t{turn}.a"), Role::Assistant, parts)
}

fn results(turn: u64, parts: Vec<Part>) -> Message {
    message(&format!("run_1.t{turn}.t"), Role::Tool, parts)
}

fn text(t: &str) -> Part {
    Part::text(t).unwrap()
}

/// Rebuilds `run.started`, `run.input` "Hi", then `body`, under `limits`;
/// the history must be "Hi" then `expected`, the same through
/// `rebuild`, `rebuild_after` (from nothing inherited) and a fold whose
/// messages are taken as they complete.
fn check(row: &str, body: Vec<Payload>, expected: Vec<Message>, limits: &Limits) {
    let hi = user("m1", "Hi");
    let mut payloads = vec![run_started(), input(hi.clone())];
    payloads.extend(body);
    let events = events(&payloads);
    let mut want = vec![hi];
    want.extend(expected);
    assert_eq!(
        history::rebuild(&events, limits).unwrap(),
        want,
        "row {row}"
    );
    assert_eq!(
        history::rebuild_after(Vec::new(), &events, limits).unwrap(),
        want,
        "row {row}: rebuild_after"
    );
    let mut fold = HistoryFold::new(limits.clone());
    let mut taken = Vec::new();
    for event in &events {
        assert_eq!(fold.push(event).unwrap(), None, "row {row}");
        taken.extend(fold.take_completed());
    }
    assert!(fold.has_input(), "row {row}");
    assert_eq!(fold.finish().unwrap(), Vec::<Message>::new(), "row {row}");
    assert_eq!(taken, want, "row {row}: taken as completed");
}

#[test]
fn history_rules() {
    let limits = Limits::default();
    let rows: Vec<(&str, Vec<Payload>, Vec<Message>)> = vec![
        (
            "the completed call's text, its deltas joined",
            vec![
                turn_started(1),
                model_started(1, "o1"),
                delta(1, "o1", "Sun"),
                delta(1, "o1", "ny"),
                model_completed(1, "o1"),
                turn_completed(1),
            ],
            vec![assistant(1, vec![text("Sunny")])],
        ),
        (
            "a retried model call forgets the attempt before it",
            vec![
                turn_started(1),
                model_started(1, "o1"),
                delta(1, "o1", "stale"),
                tool_call(1, "o1", "c0"),
                model_started(1, "o2"),
                delta(1, "o2", "fresh"),
                model_completed(1, "o2"),
                turn_completed(1),
            ],
            vec![assistant(1, vec![text("fresh")])],
        ),
        (
            "calls only: no text part, then the results in call order",
            vec![
                turn_started(1),
                model_started(1, "o1"),
                tool_call(1, "o1", "c1"),
                tool_call(1, "o1", "c2"),
                model_completed(1, "o1"),
                tool_started(1, "c2"),
                tool_output(1, "c2", "second"),
                tool_started(1, "c1"),
                tool_output(1, "c1", "first"),
                turn_completed(1),
            ],
            vec![
                assistant(1, vec![call_part("c1"), call_part("c2")]),
                results(
                    1,
                    vec![
                        result_part("c1", "first", false),
                        result_part("c2", "second", false),
                    ],
                ),
            ],
        ),
        (
            "text then calls; denied, failed approval, failed tool, approved and cancelled: each an error result",
            vec![
                turn_started(1),
                model_started(1, "o1"),
                delta(1, "o1", "Checking"),
                tool_call(1, "o1", "c1"),
                tool_call(1, "o1", "c2"),
                tool_call(1, "o1", "c3"),
                tool_call(1, "o1", "c4"),
                model_completed(1, "o1"),
                asked(1, "i1", "c1"),
                decided(1, "i1", "denied"),
                asked(1, "i2", "c2"),
                approval_failed(1, "i2", "handler panicked"),
                asked(1, "i3", "c3"),
                decided(1, "i3", "approved"),
                tool_started(1, "c3"),
                tool_cancelled(1, "c3"),
                tool_started(1, "c4"),
                tool_failed(1, "c4"),
                turn_completed(1),
            ],
            vec![
                assistant(
                    1,
                    vec![
                        text("Checking"),
                        call_part("c1"),
                        call_part("c2"),
                        call_part("c3"),
                        call_part("c4"),
                    ],
                ),
                results(
                    1,
                    vec![
                        result_part("c1", history::DENIED_RESULT, true),
                        result_part("c2", "approval failed: handler panicked", true),
                        result_part("c3", history::CANCELLED_RESULT, true),
                        result_part("c4", "timed out", true),
                    ],
                ),
            ],
        ),
        (
            "a sub-run cancelled by its call's timeout: the cancelled result, beside a completed one",
            vec![
                turn_started(1),
                model_started(1, "o1"),
                tool_call(1, "o1", "c1"),
                tool_call(1, "o1", "c2"),
                model_completed(1, "o1"),
                tool_started(1, "c1"),
                tool_started(1, "c2"),
                sub_run(1, "c1", "run_a"),
                sub_run(1, "c2", "run_b"),
                with_sub_run(tool_output(1, "c2", "found it"), "run_b"),
                with_sub_run(tool_cancelled(1, "c1"), "run_a"),
                turn_completed(1),
            ],
            vec![
                assistant(1, vec![call_part("c1"), call_part("c2")]),
                results(
                    1,
                    vec![
                        result_part("c1", history::CANCELLED_RESULT, true),
                        result_part("c2", "found it", false),
                    ],
                ),
            ],
        ),
        (
            "a cancelled call of a cancelled turn reaches no history",
            vec![
                turn_started(1),
                model_started(1, "o1"),
                tool_call(1, "o1", "c1"),
                model_completed(1, "o1"),
                tool_started(1, "c1"),
                tool_cancelled(1, "c1"),
                turn_cancelled(1),
            ],
            vec![assistant(1, vec![call_part("c1")])],
        ),
        (
            "an interaction about no call records nothing",
            vec![
                turn_started(1),
                model_started(1, "o1"),
                tool_call(1, "o1", "c1"),
                model_completed(1, "o1"),
                interaction_started(1, "i1"),
                decided(1, "i1", "denied"),
                tool_started(1, "c1"),
                tool_output(1, "c1", "done"),
                turn_completed(1),
            ],
            vec![
                assistant(1, vec![call_part("c1")]),
                results(1, vec![result_part("c1", "done", false)]),
            ],
        ),
        (
            "a turn.started forgets a cancelled turn's calls and results",
            vec![
                turn_started(1),
                model_started(1, "o1"),
                tool_call(1, "o1", "c1"),
                model_completed(1, "o1"),
                tool_started(1, "c1"),
                tool_output(1, "c1", "late"),
                turn_cancelled(1),
                turn_started(2),
                turn_completed(2),
            ],
            vec![assistant(1, vec![call_part("c1")])],
        ),
        (
            "a turn without calls adds no tool message",
            vec![
                turn_started(1),
                model_started(1, "o1"),
                delta(1, "o1", "a"),
                model_completed(1, "o1"),
                turn_completed(1),
                turn_started(2),
                model_started(2, "o2"),
                delta(2, "o2", "b"),
                model_completed(2, "o2"),
                turn_completed(2),
            ],
            vec![assistant(1, vec![text("a")]), assistant(2, vec![text("b")])],
        ),
    ];
    for (row, body, expected) in rows {
        check(row, body, expected, &limits);
    }
}

#[test]
fn a_result_over_part_bytes_is_replaced_by_a_short_error() {
    let limits = Limits {
        part_bytes: 64,
        ..Limits::default()
    };
    let big = "x".repeat(65);
    check(
        "oversized result",
        vec![
            turn_started(1),
            model_started(1, "o1"),
            tool_call(1, "o1", "c1"),
            model_completed(1, "o1"),
            tool_started(1, "c1"),
            tool_output(1, "c1", &big),
            turn_completed(1),
        ],
        vec![
            assistant(1, vec![call_part("c1")]),
            results(
                1,
                vec![result_part(
                    "c1",
                    "tool result exceeded limits.part_bytes",
                    true,
                )],
            ),
        ],
        &limits,
    );
    // The same bound holds for a fold from an inherited history.
    let events = events(&[
        run_started(),
        input(user("m2", "again")),
        turn_started(1),
        model_started(1, "o1"),
        tool_call(1, "o1", "c1"),
        model_completed(1, "o1"),
        tool_started(1, "c1"),
        tool_output(1, "c1", &big),
        turn_completed(1),
    ]);
    let inherited = vec![user("m1", "Hi")];
    let rebuilt = history::rebuild_after(inherited.clone(), &events, &limits).unwrap();
    assert_eq!(
        rebuilt.last().unwrap().parts(),
        &[result_part(
            "c1",
            "tool result exceeded limits.part_bytes",
            true
        )]
    );
    let mut fold = HistoryFold::after(inherited.clone(), limits.clone());
    assert_eq!(fold.take_completed(), inherited, "inherited first");
    for e in &events {
        fold.push(e).unwrap();
    }
    assert_eq!(fold.finish().unwrap(), rebuilt[1..].to_vec());
}

#[test]
fn a_log_without_input_yields_no_history() {
    let none = events(&[run_started(), turn_started(1), turn_completed(1)]);
    assert_eq!(
        history::rebuild(&none, &Limits::default()),
        Err(HistoryError::NoInput)
    );
    let mut fold = HistoryFold::new(Limits::default());
    for e in &none {
        fold.push(e).unwrap();
    }
    assert!(!fold.has_input());
    let text = format!("{fold:?}");
    assert!(text.starts_with("HistoryFold"), "{text}");
    assert!(text.contains("inputs: 0"), "{text}");
    let mut fold = HistoryFold::new(Limits::default());
    for e in &events(&[
        run_started(),
        input(user("m1", "Hi")),
        input(user("m2", "Ho")),
    ]) {
        fold.push(e).unwrap();
    }
    let text = format!("{fold:?}");
    assert!(
        text.contains("inputs: 2") && text.contains("completed: 2"),
        "{text}"
    );
}

#[test]
fn minted_ids_name_the_run_or_a_hash_of_it() {
    let run = RunId::parse("run_2").unwrap();
    assert_eq!(
        history::turn_message_id(&run, 3, Role::Assistant)
            .unwrap()
            .as_str(),
        "run_2.t3.a"
    );
    assert_eq!(
        history::turn_message_id(&run, 3, Role::Tool)
            .unwrap()
            .as_str(),
        "run_2.t3.t"
    );
    assert_eq!(
        history::follow_up_message_id(&run, 2).unwrap().as_str(),
        "run_2.u2"
    );
    // A run id too long to prefix a message id: a hash of it, per run.
    let long = |c: char| RunId::parse(&c.to_string().repeat(ID_MAX_BYTES)).unwrap();
    let (a, b) = (long('a'), long('b'));
    let id_a = history::follow_up_message_id(&a, 1).unwrap();
    let id_b = history::follow_up_message_id(&b, 1).unwrap();
    for id in [&id_a, &id_b] {
        let (hash, rest) = id.as_str().split_once('.').unwrap();
        assert_eq!(rest, "u1");
        assert_eq!(hash.len(), 17, "{id}");
        assert!(hash.starts_with('h'));
        assert!(hash[1..].bytes().all(|b| b.is_ascii_hexdigit()));
    }
    assert_ne!(id_a, id_b);
    assert_eq!(id_a, history::follow_up_message_id(&a, 1).unwrap());
    assert_eq!(
        history::turn_message_id(&a, 1, Role::Tool)
            .unwrap()
            .as_str(),
        format!("{}.t1.t", id_a.as_str().split_once('.').unwrap().0)
    );
    assert_eq!(
        history::approval_failed_result(&ErrorText::new("boom")),
        "approval failed: boom"
    );
}

#[test]
fn a_digest_is_sha256_of_the_lines_in_lowercase_hex() {
    // Every hex digit in both halves of a byte round-trips.
    let text = format!("sha256:{}", "0123456789abcdef".repeat(4));
    let digest: HistoryDigest = text.parse().unwrap();
    assert_eq!(digest.to_string(), text);
    assert_eq!(format!("{digest:?}"), text);
    assert_eq!(
        serde_json::to_string(&digest).unwrap(),
        format!("\"{text}\"")
    );
    let back: HistoryDigest = serde_json::from_str(&format!("\"{text}\"")).unwrap();
    assert_eq!(back, digest);
    for bad in [
        format!("sha256:{}", "0123456789abcdeF".repeat(4)),
        format!("sha256:{}g", "0".repeat(63)),
        format!("sha256:{}", "0".repeat(63)),
        format!("sha256:{}", "0".repeat(65)),
        format!("sha1:{}", "0".repeat(64)),
    ] {
        assert_eq!(
            bad.parse::<HistoryDigest>(),
            Err(DigestError { len: bad.len() }),
            "{bad}"
        );
        assert!(serde_json::from_str::<HistoryDigest>(&format!("\"{bad}\"")).is_err());
    }

    // The digest of a run's lines: SHA-256 of each line and "\n".
    let events = events(&[run_started(), input(user("m1", "Hi")), run_completed()]);
    let mut hasher = HistoryHasher::default();
    assert_eq!(hasher.last_seq(), 0);
    for e in &events {
        hasher.update(e);
    }
    assert_eq!(hasher.last_seq(), 3);
    let text = format!("{hasher:?}");
    assert!(
        text.starts_with("HistoryHasher") && text.contains("last_seq: 3"),
        "{text}"
    );
    let whole = hasher.clone().finish();
    assert_eq!(HistoryHasher::default().finish_with(&events), whole);
    assert_ne!(
        HistoryHasher::default().finish_with(&events[..2]),
        whole,
        "fewer lines, another digest"
    );
    // Known value: the empty input's SHA-256.
    assert_eq!(
        HistoryHasher::default().finish().to_string(),
        "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
    let reference = HistoryReference::new(RunId::parse("run_1").unwrap(), hasher);
    assert_eq!(reference.last_seq, 3);
    assert_eq!(reference.digest, whole);
}

/// Runs' events by id; the first page of each run is one event (a store
/// bounding pages in bytes), later pages as long as asked. Counts the
/// events it serves.
#[derive(Default)]
struct CountingStore {
    runs: std::collections::HashMap<RunId, Vec<Event>>,
    served: std::cell::Cell<usize>,
}

impl history::HistoryStore for CountingStore {
    type Error = std::convert::Infallible;
    fn events_after(
        &self,
        run: &RunId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<Event>, Self::Error> {
        let events = self.runs.get(run).map(Vec::as_slice).unwrap_or_default();
        let limit = if after == 0 { limit.min(1) } else { limit };
        let page: Vec<Event> = events
            .iter()
            .filter(|e| e.seq() > after)
            .take(limit)
            .cloned()
            .collect();
        self.served.set(self.served.get() + page.len());
        Ok(page)
    }
}

#[test]
fn walking_up_a_chain_reads_two_events_per_run() {
    let log = |run: &str, payloads: &[Payload]| -> Vec<Event> {
        let l = RunLog::new(
            RunId::parse(run).unwrap(),
            LogConfig::default(),
            std::sync::Arc::new(SystemClock),
        )
        .unwrap();
        commit_all(&l, payloads);
        l.retained_after(0)
            .iter()
            .map(|e| Event::clone(e))
            .collect()
    };
    let r1 = log(
        "r1",
        &[
            run_started(),
            input(user("m1", "one")),
            input(user("m2", "two")),
            run_completed(),
        ],
    );
    let digest = HistoryHasher::default().finish_with(&r1);
    let r2 = log(
        "r2",
        &[
            Payload::RunStarted(RunStarted {
                continues: Some(RunId::parse("r1").unwrap()),
                ..RunStarted::default()
            }),
            Payload::RunInputReference(RunInputReference {
                history: HistoryReference {
                    run_id: RunId::parse("r1").unwrap(),
                    last_seq: 4,
                    digest,
                    extra: Extra::new(),
                },
                extra: Extra::new(),
            }),
            input(user("r2.u1", "three")),
            input(user("r2.u2", "four")),
            run_completed(),
        ],
    );
    let mut store = CountingStore::default();
    store.runs.insert(RunId::parse("r1").unwrap(), r1);
    store.runs.insert(RunId::parse("r2").unwrap(), r2);
    let runs = history::chain_runs(&store, &RunId::parse("r2").unwrap()).unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(store.served.get(), 4, "two head events per run");
    let rebuilt =
        history::rebuild_chain(&store, &RunId::parse("r2").unwrap(), &Limits::default()).unwrap();
    assert_eq!(rebuilt.history.len(), 4);
}

#[test]
fn a_continuation_without_new_messages_inherits_the_history() {
    // A run whose only input is its reference still has input.
    let r1 = events(&[run_started(), input(user("m1", "Hi")), run_completed()]);
    let mut hasher = HistoryHasher::default();
    r1.iter().for_each(|e| hasher.update(e));
    let reference = HistoryReference::new(RunId::parse("run_0").unwrap(), hasher);
    let own = events(&[
        Payload::RunStarted(RunStarted {
            continues: Some(RunId::parse("run_0").unwrap()),
            ..RunStarted::default()
        }),
        Payload::RunInputReference(RunInputReference {
            history: reference.clone(),
            extra: Extra::new(),
        }),
        turn_started(1),
        model_started(1, "o1"),
        delta(1, "o1", "Again"),
        model_completed(1, "o1"),
        turn_completed(1),
        run_completed(),
    ]);
    let inherited = vec![user("m1", "Hi")];
    let mut want = inherited.clone();
    want.push(assistant(1, vec![text("Again")]));
    assert_eq!(
        history::rebuild_after(inherited.clone(), &own, &Limits::default()).unwrap(),
        want
    );
    let mut fold = HistoryFold::new(Limits::default());
    assert_eq!(fold.push(&own[0]).unwrap(), None);
    assert_eq!(fold.push(&own[1]).unwrap(), Some(reference.clone()));
    assert!(fold.has_input());
    assert_eq!(
        history::rebuild(&own, &Limits::default()),
        Err(HistoryError::Unresolved {
            seq: 2,
            parent: RunId::parse("run_0").unwrap()
        })
    );
}

fn thinking(turn: u64, o: &str, t: &str) -> Payload {
    Payload::ReasoningDelta(ReasoningDelta {
        turn,
        operation_id: op(o),
        text: t.into(),
        extra: Extra::new(),
    })
}

fn reasoning_end(turn: u64, o: &str, signature: Option<&str>, redacted: Option<&str>) -> Payload {
    Payload::ReasoningEnd(ReasoningEnd {
        turn,
        operation_id: op(o),
        provider: ProviderTag::anthropic(),
        signature: signature.map(|s| OpaqueValue::new(s).unwrap()),
        redacted: redacted.map(|v| OpaqueValue::new(v).unwrap()),
        extra: Extra::new(),
    })
}

fn reasoning(t: &str, signature: Option<&str>) -> Part {
    let signature = signature.map(|s| OpaqueValue::new(s).unwrap());
    Part::reasoning(ProviderTag::anthropic(), t, signature).unwrap()
}

fn redacted(v: &str) -> Part {
    Part::redacted_reasoning(ProviderTag::anthropic(), OpaqueValue::new(v).unwrap())
}

fn png(byte: u8) -> ImagePart {
    let mut bytes = b"\x89PNG\r\n\x1a\n".to_vec();
    bytes.push(byte);
    ImagePart::from_bytes_with(ImageMediaType::Png, &bytes, &Limits::default()).unwrap()
}

fn tool_output_with_images(turn: u64, c: &str, output: &str, images: Vec<ImagePart>) -> Payload {
    let Payload::ToolCompleted(mut p) = tool_output(turn, c, output) else {
        unreachable!()
    };
    p.images = images;
    Payload::ToolCompleted(p)
}

/// Reasoning parts keep their place in the stream relative to text and tool
/// calls; text still joins before the calls of its segment; tool results
/// keep their images.
#[test]
fn reasoning_and_images() {
    let limits = Limits::default();
    let rows: Vec<(&str, Vec<Payload>, Vec<Message>)> = vec![
        (
            "a signed part, then text and a call; the result with its images",
            vec![
                turn_started(1),
                model_started(1, "o1"),
                thinking(1, "o1", "The user "),
                thinking(1, "o1", "wants weather."),
                reasoning_end(1, "o1", Some("EqQBsig"), None),
                delta(1, "o1", "Checking."),
                tool_call(1, "o1", "c1"),
                model_completed(1, "o1"),
                tool_started(1, "c1"),
                tool_output_with_images(1, "c1", "a map", vec![png(1), png(2)]),
                turn_completed(1),
            ],
            vec![
                assistant(
                    1,
                    vec![
                        reasoning("The user wants weather.", Some("EqQBsig")),
                        text("Checking."),
                        call_part("c1"),
                    ],
                ),
                results(
                    1,
                    vec![
                        Part::tool_result_with_images(
                            call("c1"),
                            "a map",
                            false,
                            vec![png(1), png(2)],
                            &limits,
                        )
                        .unwrap(),
                    ],
                ),
            ],
        ),
        (
            "interleaved: reasoning, call, redacted, reasoning unsigned, call",
            vec![
                turn_started(1),
                model_started(1, "o1"),
                thinking(1, "o1", "first"),
                reasoning_end(1, "o1", Some("s1"), None),
                tool_call(1, "o1", "c1"),
                reasoning_end(1, "o1", None, Some("opaque")),
                thinking(1, "o1", "second"),
                reasoning_end(1, "o1", None, None),
                tool_call(1, "o1", "c2"),
                model_completed(1, "o1"),
            ],
            vec![assistant(
                1,
                vec![
                    reasoning("first", Some("s1")),
                    call_part("c1"),
                    redacted("opaque"),
                    reasoning("second", None),
                    call_part("c2"),
                ],
            )],
        ),
        (
            "text, reasoning, text: the reasoning splits the text",
            vec![
                turn_started(1),
                model_started(1, "o1"),
                delta(1, "o1", "a"),
                thinking(1, "o1", "hm"),
                reasoning_end(1, "o1", None, None),
                delta(1, "o1", "b"),
                model_completed(1, "o1"),
            ],
            vec![assistant(
                1,
                vec![text("a"), reasoning("hm", None), text("b")],
            )],
        ),
        (
            "without reasoning, text after a call still joins before it (as before)",
            vec![
                turn_started(1),
                model_started(1, "o1"),
                tool_call(1, "o1", "c1"),
                delta(1, "o1", "after"),
                model_completed(1, "o1"),
            ],
            vec![assistant(1, vec![text("after"), call_part("c1")])],
        ),
        (
            "a retried call forgets the failed attempt's reasoning",
            vec![
                turn_started(1),
                model_started(1, "o1"),
                thinking(1, "o1", "stale"),
                model_started(1, "o2"),
                thinking(1, "o2", "fresh"),
                reasoning_end(1, "o2", Some("s"), None),
                delta(1, "o2", "ok"),
                model_completed(1, "o2"),
            ],
            vec![assistant(
                1,
                vec![reasoning("fresh", Some("s")), text("ok")],
            )],
        ),
        (
            "deltas no part closed are left out",
            vec![
                turn_started(1),
                model_started(1, "o1"),
                delta(1, "o1", "ok"),
                thinking(1, "o1", "dangling"),
                model_completed(1, "o1"),
            ],
            vec![assistant(1, vec![text("ok")])],
        ),
    ];
    for (row, body, expected) in rows {
        check(row, body, expected, &limits);
    }
}

/// A reasoning part over `part_bytes` fails the message, as text does: the
/// engine fails the turn on it, and the rebuild leaves it out the same way.
#[test]
fn reasoning_over_part_bytes_is_not_rebuilt() {
    let limits = Limits {
        part_bytes: 8,
        ..Limits::default()
    };
    check(
        "oversized reasoning",
        vec![
            turn_started(1),
            model_started(1, "o1"),
            thinking(1, "o1", "123456789"),
            reasoning_end(1, "o1", None, None),
            delta(1, "o1", "ok"),
            model_completed(1, "o1"),
        ],
        vec![],
        &limits,
    );
}
