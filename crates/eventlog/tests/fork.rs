//! Forks: which seqs of a run a fork may start from (rule `fork.point`,
//! one row per seq through one `check` helper), the history a fork starts
//! from (the parent's rebuild through the seq, message by message, read
//! only that far), the reference it records, forks of forks, and the
//! chain rebuild refusing a fork whose `run.started` and reference
//! disagree or whose seq is not a fork point.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
use common::*;
use keel_eventlog::history::{self, ChainError, ForkPoints, HistoryStore};
use keel_eventlog::*;
use keel_message::{CanonicalJson, Limits, Message, MessageId, Role, RunId};
use std::collections::HashMap;
use std::sync::Mutex;

/// Runs' events by id, served at most `page` events at a time; remembers
/// the highest seq it served of each run.
#[derive(Default)]
struct Store {
    runs: HashMap<RunId, Vec<Event>>,
    page: usize,
    served: Mutex<HashMap<RunId, u64>>,
}

impl HistoryStore for Store {
    type Error = std::convert::Infallible;
    fn events_after(
        &self,
        run: &RunId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<Event>, Self::Error> {
        let events = self.runs.get(run).map(Vec::as_slice).unwrap_or_default();
        let page: Vec<Event> = events
            .iter()
            .filter(|e| e.seq() > after)
            .take(limit.min(self.page.max(1)))
            .cloned()
            .collect();
        if let Some(last) = page.last() {
            let mut served = self.served.lock().unwrap();
            let max = served.entry(run.clone()).or_default();
            *max = (*max).max(last.seq());
        }
        Ok(page)
    }
}

impl Store {
    fn add(&mut self, log: &RunLog) {
        let events = log
            .retained_after(0)
            .iter()
            .map(|e| Event::clone(e))
            .collect();
        self.runs.insert(log.run_id().clone(), events);
    }
    fn served(&self, run: &str) -> u64 {
        self.served
            .lock()
            .unwrap()
            .get(&id(run))
            .copied()
            .unwrap_or(0)
    }
}

fn id(s: &str) -> RunId {
    RunId::parse(s).unwrap()
}

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
        arguments: CanonicalJson::parse("{}").unwrap(),
        extra: Extra::new(),
    })
}

fn new_log(run: &str) -> RunLog {
    RunLog::new(
        id(run),
        LogConfig::default(),
        std::sync::Arc::new(SystemClock),
    )
    .unwrap()
}

/// The parent: two inputs, a turn calling a tool, a turn answering, done.
fn parent_payloads() -> Vec<Payload> {
    vec![
        run_started(),                         // 1
        input(user("m0", "You are terse.")),   // 2
        input(user("m1", "Weather in Oslo?")), // 3
        turn_started(1),                       // 4
        model_started(1, "o1"),                // 5
        delta(1, "o1", "checking"),            // 6
        tool_call(1, "o1", "c1"),              // 7
        model_completed(1, "o1"),              // 8
        tool_started(1, "c1"),                 // 9
        tool_completed(1, "c1"),               // 10
        turn_completed(1),                     // 11
        turn_started(2),                       // 12
        model_started(2, "o2"),                // 13
        delta(2, "o2", "Sunny"),               // 14
        model_completed(2, "o2"),              // 15
        turn_completed(2),                     // 16
        run_completed(),                       // 17
    ]
}

fn parent() -> RunLog {
    let log = new_log("p");
    commit_all(&log, &parent_payloads());
    log
}

fn reference(history: HistoryReference) -> Payload {
    Payload::RunInputReference(RunInputReference {
        history,
        extra: Extra::new(),
    })
}

fn forked(run: &str, seq: u64) -> Payload {
    Payload::RunStarted(RunStarted {
        forked_from: Some(ForkedFrom::new(id(run), seq)),
        ..RunStarted::default()
    })
}

/// A completed fork `run` of `at`'s run through `at.last_seq`, adding
/// `messages`.
fn fork(run: &str, at: &HistoryReference, messages: &[Message]) -> RunLog {
    let log = new_log(run);
    log.commit(&forked(at.run_id.as_str(), at.last_seq))
        .unwrap();
    log.commit(&reference(at.clone())).unwrap();
    for m in messages {
        log.commit(&input(m.clone())).unwrap();
    }
    log.commit(&Payload::RunCompleted(RunCompleted::default()))
        .unwrap();
    log
}

fn store_of(logs: &[&RunLog], page: usize) -> Store {
    let mut store = Store {
        page,
        ..Store::default()
    };
    logs.iter().for_each(|log| store.add(log));
    store
}

/// What forking the parent at `seq` must give: `None` for a fork point,
/// else the rule and a phrase of the refusal.
type Expected = Option<(&'static str, &'static str)>;

/// Checks seq `seq` of the parent both ways the rule is asked: fed
/// event by event ([`ForkPoints`]) and through the journal-side call
/// (`rebuild_fork_point`); a fork point's history must be the parent's
/// rebuild through `seq`, message by message, and its reference the
/// digest of lines 1..=`seq`.
fn check(seq: u64, expected: Expected) {
    let parent = parent();
    let events = parent.retained_after(0);
    let mut points = ForkPoints::default();
    events
        .iter()
        .take_while(|e| e.seq() <= seq)
        .for_each(|e| points.push(e).unwrap());
    let next = events.iter().find(|e| e.seq() == seq + 1).map(|e| &**e);
    let fed = points.check(seq, next);
    for page in [1, 3, 512] {
        let store = store_of(&[&parent], page);
        let rebuilt = history::rebuild_fork_point(&store, parent.run_id(), seq, &Limits::default());
        match (expected, rebuilt) {
            (None, Ok(rebuilt)) => {
                fed.clone().unwrap_or_else(|e| panic!("seq {seq}: {e}"));
                let upto: Vec<_> = events.iter().take(seq as usize).cloned().collect();
                let want = history::rebuild(&upto, &Limits::default()).unwrap();
                assert_eq!(rebuilt.history.len(), want.len(), "seq {seq}");
                for (i, (got, want)) in rebuilt.history.iter().zip(&want).enumerate() {
                    assert_eq!(got, want, "seq {seq}: message {i}");
                }
                let digest = HistoryHasher::default().finish_with(upto.iter().map(|e| &**e));
                assert_eq!(rebuilt.reference.last_seq, seq);
                assert_eq!(rebuilt.reference.digest, digest, "seq {seq}");
                assert!(store.served("p") <= seq + 1, "seq {seq}: read past it");
            }
            (Some((rule, phrase)), Err(ChainError::ForkPoint { run_id, source })) => {
                assert_eq!(run_id.as_str(), "p");
                assert_eq!(source.rule(), rule, "seq {seq}: {source}");
                assert_eq!(fed.as_ref().unwrap_err(), &source, "seq {seq}");
                let text = source.to_string();
                assert!(text.contains(&format!("seq {seq}")), "{text}");
                assert!(text.contains(phrase), "seq {seq}: {text}");
                assert!(text.contains(&format!("rule {rule}")), "{text}");
            }
            (expected, got) => panic!("seq {seq}: expected {expected:?}, got {got:?}"),
        }
    }
}

#[test]
fn fork_points() {
    let rows: Vec<(u64, Expected)> = vec![
        (
            0,
            Some(("fork.seq_known", "past the run's last event, seq 0")),
        ),
        (1, Some(("fork.point", "is run.started: inside open run"))),
        (
            2,
            Some(("fork.point", "is run.input: a later run.input follows it")),
        ),
        (3, None),
        (
            4,
            Some(("fork.point", "is turn.started: inside open turn 1")),
        ),
        (
            5,
            Some(("fork.point", "is model.started: inside open model o1")),
        ),
        (
            6,
            Some(("fork.point", "is model.text_delta: inside open model o1")),
        ),
        (
            7,
            Some(("fork.point", "is model.tool_call: inside open model o1")),
        ),
        (8, Some(("fork.point", "its answer called tools"))),
        (
            9,
            Some((
                "fork.point",
                "is tool.started: inside open tool c1 (turn 1)",
            )),
        ),
        (
            10,
            Some(("fork.point", "is tool.completed: inside open turn 1")),
        ),
        (11, None),
        (
            12,
            Some(("fork.point", "is turn.started: inside open turn 2")),
        ),
        (14, Some(("fork.point", "inside open model o2"))),
        (15, None),
        (16, None),
        (17, None),
        (
            18,
            Some((
                "fork.seq_known",
                "seq 18 is past the run's last event, seq 17",
            )),
        ),
    ];
    for (seq, expected) in rows {
        check(seq, expected);
    }
}

#[test]
fn a_compaction_call_and_an_unfinished_input_are_not_fork_points() {
    let log = new_log("p");
    let mut compaction = model_started(1, "o1");
    if let Payload::ModelStarted(started) = &mut compaction {
        started
            .extra
            .insert("purpose".into(), serde_json::json!("compaction"));
    }
    commit_all(
        &log,
        &[
            run_started(),
            input(user("m1", "Hi")),
            turn_started(1),
            compaction,
            delta(1, "o1", "summary"),
            model_completed(1, "o1"),
        ],
    );
    let store = store_of(&[&log], 512);
    let refused =
        |seq| match history::rebuild_fork_point(&store, log.run_id(), seq, &Limits::default()) {
            Err(ChainError::ForkPoint { source, .. }) => source.to_string(),
            other => panic!("seq {seq}: {other:?}"),
        };
    assert!(refused(6).contains("a compaction call"), "{}", refused(6));
    // A run still recording its input: no event after seq 2 yet.
    let running = new_log("q");
    commit_all(&running, &[run_started(), input(user("m1", "Hi"))]);
    let store = store_of(&[&running], 512);
    let text = match history::rebuild_fork_point(&store, running.run_id(), 2, &Limits::default()) {
        Err(ChainError::ForkPoint { source, .. }) => source.to_string(),
        other => panic!("{other:?}"),
    };
    assert!(
        text.contains("no event follows it (rule fork.point)"),
        "{text}"
    );
}

/// The reference a fork of `log` at `seq` records.
fn point(store: &Store, run: &str, seq: u64) -> history::RebuiltChain {
    history::rebuild_fork_point(store, &id(run), seq, &Limits::default()).unwrap()
}

#[test]
fn forks_and_forks_of_forks_rebuild_through_the_parent_up_to_the_seq() {
    let p = parent();
    let base = store_of(&[&p], 2);
    let at = point(&base, "p", 11);
    let again = user("f.u1", "And tomorrow?");
    let f = fork("f", &at.reference, std::slice::from_ref(&again));
    // f: 1 run.started, 2 reference, 3 run.input, 4 run.completed.
    let with_f = store_of(&[&p, &f], 2);
    let f_end = history::rebuild_chain(&with_f, &id("f"), &Limits::default()).unwrap();
    let mut want = at.history.clone();
    want.push(again.clone());
    assert_eq!(f_end.history, want);
    assert_eq!(f_end.runs, vec![id("p"), id("f")]);
    assert!(
        with_f.served("p") <= 12,
        "the parent is read through seq 11 and one more"
    );

    // A fork of the fork, at f's own input: p through 11, then "And tomorrow?".
    let at_f = point(&with_f, "f", 3);
    assert_eq!(at_f.history, want);
    let other = user("g.u1", "And in Bergen?");
    let g = fork("g", &at_f.reference, std::slice::from_ref(&other));
    let all = store_of(&[&p, &f, &g], 1);
    let g_end = history::rebuild_chain(&all, &id("g"), &Limits::default()).unwrap();
    let mut want_g = want.clone();
    want_g.push(other);
    assert_eq!(g_end.history, want_g);
    assert_eq!(g_end.runs, vec![id("p"), id("f"), id("g")]);
    assert_eq!(
        history::chain_runs(&all, &id("g")).unwrap(),
        vec![id("p"), id("f"), id("g")]
    );
    // f's seq 2 (its reference) is followed by its input: refused.
    match history::rebuild_fork_point(&all, &id("f"), 2, &Limits::default()) {
        Err(ChainError::ForkPoint { source, .. }) => assert_eq!(source.rule(), "fork.point"),
        other => panic!("{other:?}"),
    }
}

/// Rebuilds `child` (a fork log made by `make`) over the parent; the
/// chain error's rule text must contain `rule`.
fn refused_chain(make: impl Fn(&HistoryReference) -> RunLog, rule: &str) {
    let p = parent();
    let at = point(&store_of(&[&p], 512), "p", 11);
    let child = make(&at.reference);
    let store = store_of(&[&p, &child], 512);
    let err = history::rebuild_chain(&store, child.run_id(), &Limits::default()).unwrap_err();
    assert!(err.to_string().contains(rule), "{rule}: {err}");
}

#[test]
fn a_fork_that_disagrees_with_its_reference_is_refused() {
    let with_head = |head: Payload| {
        move |at: &HistoryReference| {
            let log = new_log("f");
            log.commit(&head).unwrap();
            log.commit(&reference(at.clone())).unwrap();
            log.commit(&Payload::RunCompleted(RunCompleted::default()))
                .unwrap();
            log
        }
    };
    // forked_from names another seq than the reference.
    refused_chain(
        with_head(forked("p", 10)),
        "rule history.reference_forked_from",
    );
    // forked_from names another run.
    refused_chain(
        with_head(forked("x", 11)),
        "rule history.reference_forked_from",
    );
    // Both a fork and a continuation.
    let both = Payload::RunStarted(RunStarted {
        continues: Some(id("p")),
        forked_from: Some(ForkedFrom::new(id("p"), 11)),
        ..RunStarted::default()
    });
    refused_chain(with_head(both), "also names a run it continues");
    // A reference at a seq that is not a fork point, digest and all right.
    refused_chain(
        |_| {
            let p = parent();
            let upto: Vec<_> = p.retained_after(0).into_iter().take(9).collect();
            let hasher = upto.iter().fold(HistoryHasher::default(), |mut h, e| {
                h.update(e);
                h
            });
            fork("f", &HistoryReference::new(id("p"), hasher), &[])
        },
        "seq 9 is tool.started: inside open tool c1 (turn 1) (rule fork.point)",
    );
    // The parent altered through the seq after the fork.
    let p = parent();
    let at = point(&store_of(&[&p], 512), "p", 11);
    let f = fork("f", &at.reference, &[]);
    let altered = new_log("p");
    let mut payloads = parent_payloads();
    payloads[2] = input(user("m1", "Weather in Bergen?"));
    commit_all(&altered, &payloads);
    let store = store_of(&[&altered, &f], 512);
    let err = history::rebuild_chain(&store, &id("f"), &Limits::default()).unwrap_err();
    assert!(matches!(err, ChainError::Digest { .. }), "{err}");
}

#[test]
fn forked_from_round_trips_and_old_readers_keep_it() {
    let started = forked("p", 11);
    let line = started.to_canonical().unwrap();
    assert_eq!(line, r#"{"forked_from":{"run_id":"p","seq":11}}"#);
    let decoded =
        Payload::from_json(&started.kind(), serde_json::from_str(&line).unwrap()).unwrap();
    assert_eq!(decoded, started);
    // An unknown member inside forked_from is kept.
    let newer = r#"{"forked_from":{"note":1,"run_id":"p","seq":11}}"#;
    let decoded =
        Payload::from_json(&started.kind(), serde_json::from_str(newer).unwrap()).unwrap();
    assert_eq!(decoded.to_canonical().unwrap(), newer);
}
