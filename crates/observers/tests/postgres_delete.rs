#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Deletion on the PostgreSQL journal, with the SQLite journal's rules
//! (`delete.rs`): `PgJournal::delete_runs` removes every row of the runs a
//! request covers (no table holds their text afterwards), keeps every
//! other run byte-identical, records tombstones, and refuses what the
//! rules refuse with nothing changed. Each case runs on a database of its
//! own on one server the test starts.
#![cfg(feature = "postgres")]

#[path = "support/deletion_runs.rs"]
mod deletion_runs;
#[path = "support/fixtures.rs"]
mod fixtures;

use deletion_runs::{Case, cases, events, fixture};

use keel_observers::deletion::{DeletionRequest, DeletionTarget, Who};
use keel_observers::postgres::{PgJournal, PgReader, PgUrl};
use keel_observers::{JournalConfig, RequiredObserver, RunsQuery};
use keel_testkit::pg::TempPostgres;

fn marker(id: &str) -> String {
    format!("MARKER<{id}>-").repeat(60)
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
        rt.block_on(journal.observe_batch(&events(&s, marker(s.id))))
            .unwrap();
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
