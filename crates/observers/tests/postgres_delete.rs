#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Deletion on the PostgreSQL journal, with the SQLite journal's rules
//! (`delete.rs`): `PgJournal::delete_runs` removes every row of the runs a
//! request covers (no table holds their text afterwards), keeps every
//! other run byte-identical, records tombstones, and refuses what the
//! rules refuse with nothing changed. Each case runs on a database of its
//! own on one server the test starts.
#![cfg(feature = "postgres")]

use keel_eventlog::{Clock, ForkedFrom, LogConfig, ParentLink, Payload, RunLog, RunStarted};
use keel_message::{CallId, ModelName, OperationId, RunId};
use keel_observers::deletion::{DeletionRequest, DeletionTarget, Who};
use keel_observers::postgres::{PgJournal, PgReader, PgUrl};
use keel_observers::{JournalConfig, RequiredObserver, RunsQuery};
use keel_stream::FinishReason;
use keel_testkit::events as testkit;
use keel_testkit::pg::TempPostgres;
use std::sync::Arc;

#[derive(Debug)]
struct SetClock(u64);

impl Clock for SetClock {
    fn now_micros(&self) -> u64 {
        self.0
    }
}

/// A run to store: id, time of every event (ms), whether it is still
/// running, and its links.
#[derive(Clone, Default)]
struct Spec {
    id: &'static str,
    ms: u64,
    running: bool,
    continues: Option<&'static str>,
    forked_from: Option<&'static str>,
    parent: Option<&'static str>,
}

fn id(s: &str) -> RunId {
    RunId::parse(s).unwrap()
}

fn marker(id: &str) -> String {
    format!("MARKER<{id}>-").repeat(60)
}

fn events(s: &Spec) -> Vec<Arc<keel_eventlog::Event>> {
    let log = RunLog::new(
        id(s.id),
        LogConfig::default(),
        Arc::new(SetClock(s.ms * 1000)),
    )
    .unwrap();
    let started = Payload::RunStarted(RunStarted {
        continues: s.continues.map(id),
        forked_from: s.forked_from.map(|f| ForkedFrom::new(id(f), 1)),
        parent: s
            .parent
            .map(|p| ParentLink::new(id(p), CallId::parse("call_1").unwrap())),
        ..RunStarted::default()
    });
    let model = testkit::ModelAttempt::new(1, OperationId::parse("op_1").unwrap());
    let mut payloads = vec![
        started,
        testkit::turn_started(1),
        model.started(ModelName::parse("m").unwrap()),
        model.text(marker(s.id)),
    ];
    if !s.running {
        payloads.extend([
            model.completed(FinishReason::Stop, None),
            testkit::turn_completed(1),
            testkit::run_completed(),
        ]);
    }
    testkit::commit_all(&log, &payloads).unwrap()
}

fn fixture() -> Vec<Spec> {
    let s = |id, ms| Spec {
        id,
        ms,
        ..Spec::default()
    };
    vec![
        s("run_a", 1_000),
        Spec {
            continues: Some("run_a"),
            ..s("run_b", 2_000)
        },
        Spec {
            parent: Some("run_b"),
            ..s("run_bs", 2_000)
        },
        s("run_c", 3_000),
        Spec {
            running: true,
            ..s("run_live", 500)
        },
        s("run_d", 4_000),
        Spec {
            forked_from: Some("run_d"),
            ..s("run_df", 9_000)
        },
    ]
}

struct Case {
    name: &'static str,
    target: DeletionTarget,
    expected: Result<&'static [&'static str], &'static str>,
}

fn cases() -> Vec<Case> {
    use DeletionTarget::{Conversation, OlderThan, Run};
    let case = |name, target, expected| Case {
        name,
        target,
        expected,
    };
    vec![
        case("a lone run", Run(id("run_c")), Ok(&["run_c"][..])),
        case(
            "a run with its sub-run",
            Run(id("run_b")),
            Ok(&["run_b", "run_bs"][..]),
        ),
        case(
            "a conversation from its last run",
            Conversation(id("run_b")),
            Ok(&["run_a", "run_b", "run_bs"][..]),
        ),
        case(
            "a continued run alone",
            Run(id("run_a")),
            Err("deletion.dependents"),
        ),
        case(
            "a forked run alone",
            Run(id("run_d")),
            Err("deletion.dependents"),
        ),
        case("a running run", Run(id("run_live")), Err("deletion.live")),
        case(
            "a run not stored",
            Run(id("run_zz")),
            Err("deletion.not_found"),
        ),
        case(
            "prune: closed trees older than 3.5 s",
            OlderThan(3_500),
            Ok(&["run_a", "run_b", "run_bs", "run_c"][..]),
        ),
        case("prune covering nothing", OlderThan(900), Ok(&[][..])),
    ]
}

fn request(target: DeletionTarget) -> DeletionRequest {
    DeletionRequest::new(target, Who::parse("ops@example.com").unwrap())
}

/// Every stored run's lines, in run id order.
fn stored(reader: &PgReader) -> Vec<(String, Vec<String>)> {
    reader
        .runs()
        .unwrap()
        .into_iter()
        .map(|r| {
            let run = r.run_id.to_string();
            let lines = reader.all_lines_after(&run, 0).unwrap();
            (run, lines)
        })
        .collect()
}

/// Rows of any journal table that mention `run`'s id or marker.
fn mentions(admin: &mut postgres::Client, run: &str) -> i64 {
    let marker = format!("%MARKER<{run}>%");
    admin
        .query_one(
            "SELECT (SELECT count(*) FROM events WHERE run_id = $1 OR line LIKE $2) \
             + (SELECT count(*) FROM runs WHERE run_id = $1) \
             + (SELECT count(*) FROM owners WHERE run_id = $1)",
            &[&run, &marker],
        )
        .unwrap()
        .get(0)
}

/// Whether `needle` occurs in `haystack`, byte for byte.
fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

fn check(pg: &TempPostgres, n: usize, case: &Case) {
    let database = format!("del{n}");
    let text = pg.create_database(&database);
    let journal = PgJournal::open(&PgUrl::parse(&text).unwrap(), JournalConfig::default()).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    for s in fixture() {
        rt.block_on(journal.observe_batch(&events(&s))).unwrap();
    }
    let reader = journal.reader().unwrap();
    let mut admin = postgres::Client::connect(&text, postgres::NoTls).unwrap();
    let before = stored(&reader);
    let got = journal.delete_runs(&request(case.target.clone()));
    let after = stored(&reader);
    match (&got, case.expected) {
        (Ok(tombstones), Ok(gone)) => {
            let names: Vec<&str> = tombstones.iter().map(|t| t.run_id().as_str()).collect();
            assert_eq!(names, gone, "{}", case.name);
            for t in tombstones {
                assert_eq!(
                    (t.who().as_str(), t.events()),
                    ("ops@example.com", 7),
                    "{}",
                    case.name
                );
            }
            let listed = reader.runs_page(&RunsQuery::first(100)).unwrap().runs;
            for run in gone {
                assert_eq!(
                    reader.run_status(run).unwrap(),
                    None,
                    "{}: {run}",
                    case.name
                );
                assert!(reader.events_after(run, 0, 100).unwrap().is_empty());
                assert!(!listed.iter().any(|l| l.summary.run_id.as_str() == *run));
                assert_eq!(
                    mentions(&mut admin, run),
                    0,
                    "{}: {run} rows left",
                    case.name
                );
            }
            // What a backup taken now would hold: no text of a deleted run
            // (its id stays in its tombstone and in a parent's link), the
            // text of every other run.
            let dump = pg.dump(&database);
            for run in gone {
                assert!(
                    !contains(&dump, &format!("MARKER<{run}>")),
                    "{}: {run}'s text is in pg_dump",
                    case.name
                );
            }
            for (run, lines) in before
                .iter()
                .filter(|(run, _)| !gone.contains(&run.as_str()))
            {
                assert!(
                    contains(&dump, &format!("MARKER<{run}>")),
                    "{}: {run}",
                    case.name
                );
                assert!(!lines.is_empty(), "{}: {run}", case.name);
            }
            let kept: Vec<_> = before
                .into_iter()
                .filter(|(run, _)| !gone.contains(&run.as_str()))
                .collect();
            assert_eq!(after, kept, "{}: the others byte-identical", case.name);
            assert_eq!(reader.tombstones().unwrap(), *tombstones, "{}", case.name);
        }
        (Err(e), Err(rule)) => {
            assert_eq!(e.rule(), rule, "{}: {e}", case.name);
            assert_eq!(after, before, "{}: nothing deleted", case.name);
            assert!(reader.tombstones().unwrap().is_empty(), "{}", case.name);
        }
        (got, want) => panic!("{}: got {got:?}, want {want:?}", case.name),
    }
    drop(reader);
    journal.close().unwrap();
}

#[test]
fn deletion_follows_the_rules_and_leaves_no_row_of_a_deleted_run() {
    let Some(pg) = TempPostgres::start() else {
        return;
    };
    for (n, case) in cases().iter().enumerate() {
        check(&pg, n, case);
    }
}
