//! A continued run's input by reference: where the reference may appear,
//! and `history::rebuild_chain` following references, checked (a missing
//! or altered parent, a cycle, a chain too deep are typed errors naming
//! the rule and the run), from stores whose pages may be short. Logs in
//! the old form (every inherited message repeated) still rebuild.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use keel_eventlog::history::{self, ChainError, HistoryStore, MAX_CHAIN_DEPTH};
use keel_eventlog::*;
use keel_message::{Limits, Message, MessageId, Role, RunId};
use std::collections::HashMap;
use std::sync::Arc;

/// Runs' events by id, served at most `page` events at a time (a store
/// bounded in bytes serves short pages: only an empty one ends a run).
#[derive(Default)]
struct Store {
    runs: HashMap<RunId, Vec<Event>>,
    page: usize,
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
        Ok(events
            .iter()
            .filter(|e| e.seq() > after)
            .take(limit.min(self.page.max(1)))
            .cloned()
            .collect())
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
}

fn id(s: &str) -> RunId {
    RunId::parse(s).unwrap()
}

fn user(id: &str, text: &str) -> Message {
    Message::text(MessageId::parse(id).unwrap(), Role::User, text).unwrap()
}

fn new_log(run: &str) -> RunLog {
    RunLog::new(id(run), LogConfig::default(), Arc::new(SystemClock)).unwrap()
}

fn input(message: Message) -> Payload {
    Payload::RunInput(RunInput {
        message,
        extra: Extra::new(),
    })
}

fn reference(history: HistoryReference) -> Payload {
    Payload::RunInputReference(RunInputReference {
        history,
        extra: Extra::new(),
    })
}

fn started(continues: Option<&str>) -> Payload {
    Payload::RunStarted(RunStarted {
        continues: continues.map(id),
        ..RunStarted::default()
    })
}

/// A completed run of `messages`; continuing `parent` (by reference) if given.
fn run(run: &str, parent: Option<&HistoryReference>, messages: &[Message]) -> RunLog {
    let log = new_log(run);
    log.commit(&started(parent.map(|p| p.run_id.as_str())))
        .unwrap();
    if let Some(parent) = parent {
        log.commit(&reference(parent.clone())).unwrap();
    }
    for m in messages {
        log.commit(&input(m.clone())).unwrap();
    }
    log.commit(&Payload::RunCompleted(RunCompleted::default()))
        .unwrap();
    log
}

fn reference_to(log: &RunLog) -> HistoryReference {
    let events = log.retained_after(0);
    HistoryReference::new(
        log.run_id().clone(),
        events.iter().fold(HistoryHasher::default(), |mut h, e| {
            h.update(e);
            h
        }),
    )
}

/// Three runs, each continuing the one before by reference.
fn chain(page: usize) -> (Store, Vec<Message>) {
    let (a, b, c) = (
        user("m1", "one"),
        user("r2.u1", "two"),
        user("r3.u1", "three"),
    );
    let mut store = Store {
        page,
        ..Store::default()
    };
    let r1 = run("r1", None, std::slice::from_ref(&a));
    let r2 = run("r2", Some(&reference_to(&r1)), std::slice::from_ref(&b));
    let r3 = run("r3", Some(&reference_to(&r2)), std::slice::from_ref(&c));
    for log in [&r1, &r2, &r3] {
        store.add(log);
    }
    (store, vec![a, b, c])
}

fn rebuild(
    store: &Store,
    run: &str,
) -> Result<history::RebuiltChain, ChainError<std::convert::Infallible>> {
    history::rebuild_chain(store, &id(run), &Limits::default())
}

#[test]
fn a_chain_rebuilds_through_its_references_with_short_pages() {
    for page in [1, 2, 512] {
        let (store, messages) = chain(page);
        let rebuilt = rebuild(&store, "r3").unwrap();
        assert_eq!(rebuilt.history, messages, "page {page}");
        assert_eq!(rebuilt.runs, vec![id("r1"), id("r2"), id("r3")]);
        assert_eq!(rebuilt.reference.run_id, id("r3"));
        assert_eq!(rebuilt.reference.last_seq, 4);
        assert_eq!(
            history::chain_runs(&store, &id("r3")).unwrap(),
            rebuilt.runs
        );
    }
    // `rebuild` of one run's events does not follow the reference.
    let (store, _) = chain(512);
    let err = history::rebuild(&store.runs[&id("r3")], &Limits::default()).unwrap_err();
    assert!(
        matches!(err, history::HistoryError::Unresolved { seq: 2, ref parent } if *parent == id("r2"))
    );
    assert!(err.to_string().contains("rule history.reference_resolved"));
    // Given the inherited history, one run's events rebuild the rest.
    let inherited = rebuild(&store, "r2").unwrap().history;
    let after = history::rebuild_after(inherited, &store.runs[&id("r3")], &Limits::default());
    assert_eq!(after.unwrap(), rebuild(&store, "r3").unwrap().history);
}

/// Replaces `run`'s event at `seq` by the event a fresh log of the same
/// run commits for `payloads` (everything up to and including it).
fn rewrite(store: &mut Store, run: &str, payloads: &[Payload]) {
    let log = new_log(run);
    for p in payloads {
        log.commit(p).unwrap();
    }
    store.add(&log);
}

#[test]
fn a_broken_chain_is_a_typed_error_naming_the_rule_and_the_run() {
    let assert_rule = |store: &Store, rule: &str, run: &str| {
        let err = rebuild(store, "r3").unwrap_err();
        let text = err.to_string();
        assert!(text.contains(rule), "{text} lacks {rule}");
        assert!(text.contains(run), "{text} lacks {run}");
    };
    // The parent is gone.
    let (mut store, _) = chain(512);
    store.runs.remove(&id("r2"));
    assert_rule(&store, "rule history.reference_known", "r3");
    assert!(matches!(
        rebuild(&store, "r3"),
        Err(ChainError::MissingParent { .. })
    ));
    // The grandparent was altered after it was referenced: same seqs,
    // other bytes.
    let (mut store, _) = chain(512);
    rewrite(
        &mut store,
        "r1",
        &[
            started(None),
            input(user("m1", "ONE")),
            Payload::RunCompleted(RunCompleted::default()),
        ],
    );
    assert!(
        matches!(rebuild(&store, "r3"), Err(ChainError::Digest { ref run_id, ref parent }) if *run_id == id("r2") && *parent == id("r1"))
    );
    assert_rule(&store, "rule history.reference_digest", "r2");
    // The parent grew past the referenced seq.
    let (mut store, _) = chain(512);
    let r2 = &store.runs[&id("r2")];
    let mut longer: Vec<Event> = r2.clone();
    let extra = new_log("r2");
    for e in r2.iter().take(3) {
        extra.commit(&e.payload().unwrap()).unwrap();
    }
    extra.commit(&input(user("x", "extra"))).unwrap();
    extra
        .commit(&Payload::RunCompleted(RunCompleted::default()))
        .unwrap();
    longer.clear();
    longer.extend(extra.retained_after(0).iter().map(|e| Event::clone(e)));
    store.runs.insert(id("r2"), longer);
    assert!(matches!(
        rebuild(&store, "r3"),
        Err(ChainError::LastSeq {
            expected: 4,
            found: 5,
            ..
        })
    ));
    assert_rule(&store, "rule history.reference_last_seq", "r3");
    // A reference whose run.started names another run.
    let (mut store, _) = chain(512);
    let r2_ref = reference_to(&{
        let l = new_log("r2");
        for e in &store.runs[&id("r2")] {
            l.commit(&e.payload().unwrap()).unwrap();
        }
        l
    });
    rewrite(&mut store, "r3", &[started(Some("r1")), reference(r2_ref)]);
    assert_rule(&store, "rule history.reference_continues", "r3");
}

#[test]
fn a_cycle_and_a_chain_too_deep_are_refused_without_reading_histories() {
    let digest: HistoryDigest = format!("sha256:{}", "0".repeat(64)).parse().unwrap();
    let head = |run: &str, parent: &str| {
        let log = new_log(run);
        log.commit(&started(Some(parent))).unwrap();
        log.commit(&reference(HistoryReference {
            run_id: id(parent),
            last_seq: 2,
            digest,
            extra: Extra::new(),
        }))
        .unwrap();
        log
    };
    let mut store = Store {
        page: 512,
        ..Store::default()
    };
    store.add(&head("a", "b"));
    store.add(&head("b", "a"));
    let err = history::rebuild_chain(&store, &id("a"), &Limits::default()).unwrap_err();
    assert!(
        matches!(err, ChainError::Cycle { ref run_id, ref parent } if *run_id == id("b") && *parent == id("a"))
    );
    assert!(err.to_string().contains("rule history.reference_acyclic"));
    // A self-reference is the shortest cycle.
    store.add(&head("s", "s"));
    assert!(matches!(
        history::chain_runs(&store, &id("s")),
        Err(ChainError::Cycle { .. })
    ));

    // MAX_CHAIN_DEPTH runs in a chain rebuild; one more is refused.
    let mut store = Store {
        page: 512,
        ..Store::default()
    };
    let root = run("d0", None, &[user("m1", "root")]);
    store.add(&root);
    for n in 1..=MAX_CHAIN_DEPTH {
        store.add(&head(&format!("d{n}"), &format!("d{}", n - 1)));
    }
    let top = format!("d{}", MAX_CHAIN_DEPTH - 1);
    assert_eq!(
        history::chain_runs(&store, &id(&top)).unwrap().len(),
        MAX_CHAIN_DEPTH
    );
    let too_deep = format!("d{MAX_CHAIN_DEPTH}");
    let err = history::chain_runs(&store, &id(&too_deep)).unwrap_err();
    assert!(matches!(
        err,
        ChainError::TooDeep {
            max: MAX_CHAIN_DEPTH,
            ..
        }
    ));
    assert!(err.to_string().contains("rule history.chain_depth"));
}

#[test]
fn a_reference_is_only_the_event_after_run_started() {
    let (store, _) = chain(512);
    let r2 = &store.runs[&id("r2")];
    let Payload::RunInputReference(inherited) = r2[1].payload().unwrap() else {
        panic!("seq 2 of a continued run is its reference");
    };
    // At seq 3 a commit is refused and changes nothing.
    let log = new_log("late");
    log.commit(&started(Some("r1"))).unwrap();
    log.commit(&input(user("m1", "first"))).unwrap();
    let err = log
        .commit(&reference(inherited.history.clone()))
        .unwrap_err();
    assert!(
        err.to_string().contains("rule lifecycle.input_reference"),
        "{err}"
    );
    assert_eq!(log.stats().last_seq, 2);
    // Nor does an import or a snapshot take one there.
    let lines: Vec<String> = {
        let l = new_log("late");
        l.commit(&started(Some("r1"))).unwrap();
        l.commit(&input(user("m1", "first"))).unwrap();
        l.retained_after(0)
            .iter()
            .map(|e| e.line().to_owned())
            .collect()
    };
    let misplaced = lines[1].replace(r#""seq":2"#, r#""seq":3"#).replace(
        &Payload::RunInput(RunInput {
            message: user("m1", "first"),
            extra: Extra::new(),
        })
        .to_canonical()
        .unwrap(),
        &reference(inherited.history).to_canonical().unwrap(),
    );
    let event = Event::decode(&misplaced).unwrap();
    let mut all: Vec<Arc<Event>> = lines
        .iter()
        .map(|l| Arc::new(Event::decode(l).unwrap()))
        .collect();
    all.push(Arc::new(event));
    let err = Snapshot::from_events(id("late"), all).unwrap_err();
    assert!(
        err.to_string().contains("rule lifecycle.input_reference"),
        "{err}"
    );
    let all_lines: Vec<&str> = lines
        .iter()
        .map(String::as_str)
        .chain([misplaced.as_str()])
        .collect();
    let err = RunLog::import(
        id("late"),
        all_lines,
        LogConfig::default(),
        Arc::new(SystemClock),
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("rule lifecycle.input_reference"),
        "{err}"
    );
    // And a rebuild refuses one there too.
    let events: Vec<Event> = [lines[0].as_str(), &lines[1], &misplaced]
        .iter()
        .map(|l| Event::decode(l).unwrap())
        .collect();
    let err = history::rebuild(&events, &Limits::default()).unwrap_err();
    assert_eq!(err, history::HistoryError::ReferenceMisplaced { seq: 3 });
}

/// A fixture written by keel before references (`keel run --continue` of
/// `old_1`, then `keel export` of both): `old_2` repeats `old_1`'s history
/// as five `run.input` messages.
fn old_form(run: &str) -> Vec<Event> {
    let text = match run {
        "old_1" => include_str!("fixtures/old_form/old_1.jsonl"),
        _ => include_str!("fixtures/old_form/old_2.jsonl"),
    };
    let snapshot = Snapshot::from_jsonl(text).unwrap();
    snapshot.events().iter().map(|e| Event::clone(e)).collect()
}

#[test]
fn logs_in_the_old_form_still_rebuild() {
    let mut store = Store {
        page: 3,
        ..Store::default()
    };
    store.runs.insert(id("old_1"), old_form("old_1"));
    store.runs.insert(id("old_2"), old_form("old_2"));
    let first = history::rebuild_chain(&store, &id("old_1"), &Limits::default()).unwrap();
    let second = history::rebuild_chain(&store, &id("old_2"), &Limits::default()).unwrap();
    assert_eq!(
        second.runs,
        vec![id("old_2")],
        "the old form references nothing"
    );
    assert_eq!(
        second.history,
        history::rebuild(&store.runs[&id("old_2")], &Limits::default()).unwrap()
    );
    // old_2 starts from old_1's whole history, then its new message.
    assert_eq!(second.history[..first.history.len()], first.history[..]);
    let asked = &second.history[first.history.len()];
    assert_eq!(asked.parts(), user("x", "And Bergen?").parts());
    assert_eq!(second.history.len(), first.history.len() + 4);
    // A run continuing it by reference rebuilds through it.
    let next = run(
        "new_3",
        Some(&second.reference),
        &[user("new_3.u1", "And Tromsø?")],
    );
    store.add(&next);
    let third = history::rebuild_chain(&store, &id("new_3"), &Limits::default()).unwrap();
    assert_eq!(third.history[..second.history.len()], second.history[..]);
    assert_eq!(third.runs, vec![id("old_2"), id("new_3")]);
}
