#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Deletion on the SQLite journal: `SqliteJournal::delete_runs` leaves no
//! byte of a deleted run in the database, its `-wal` or its `-shm`, keeps
//! every other run byte-identical, records tombstones, refuses what the
//! rules refuse with nothing changed, and the version 5 migration.
#![cfg(feature = "sqlite")]

#[path = "support/deletion_runs.rs"]
mod deletion_runs;
#[path = "support/fixtures.rs"]
mod fixtures;

use deletion_runs::{Case, Spec, cases, events, fixture, id};
use fixtures::TempDir;
use keel_observers::deletion::{DeleteError, DeletionRequest, DeletionTarget, Tombstone, Who};
use keel_observers::journal::SCHEMA_VERSION;
use keel_observers::{JournalConfig, JournalReader, RequiredObserver, RunsQuery, SqliteJournal};
use std::path::Path;

/// The marker text of run `id`: distinctive, long enough to need overflow
/// pages.
fn marker(id: &str) -> String {
    format!("MARKER<{id}>-").repeat(600)
}

fn store(journal: &SqliteJournal, specs: &[Spec]) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    for s in specs {
        rt.block_on(journal.observe_batch(&events(s, marker(s.id))))
            .unwrap();
    }
}

fn open(db: &Path) -> SqliteJournal {
    SqliteJournal::open(db, JournalConfig::default()).unwrap()
}

fn request(target: DeletionTarget) -> DeletionRequest {
    DeletionRequest::new(target, Who::parse("ops@example.com").unwrap())
}

/// The bytes of the database and its side files, by suffix.
fn files(db: &Path) -> Vec<(String, Vec<u8>)> {
    ["", "-wal", "-shm"]
        .into_iter()
        .map(|suffix| {
            let mut name = db.as_os_str().to_owned();
            name.push(suffix);
            (suffix.to_owned(), std::fs::read(&name).unwrap_or_default())
        })
        .collect()
}

fn holds(db: &Path, needle: &str) -> Vec<String> {
    files(db)
        .into_iter()
        .filter(|(_, bytes)| bytes.windows(needle.len()).any(|w| w == needle.as_bytes()))
        .map(|(suffix, _)| format!("keel.db{suffix}"))
        .collect()
}

/// Every stored run's lines, by id.
fn stored(reader: &JournalReader) -> Vec<(String, Vec<String>)> {
    reader
        .runs()
        .unwrap()
        .into_iter()
        .map(|r| {
            let lines = reader.all_lines_after(r.run_id.as_str(), 0).unwrap();
            (r.run_id.to_string(), lines)
        })
        .collect()
}

fn check(case: &Case) {
    let dir = TempDir::new("case");
    let db = dir.db();
    let journal = open(&db);
    store(&journal, &fixture());
    let reader = journal.reader().unwrap();
    let before = stored(&reader);
    let got = journal.delete_runs(&request(case.target.clone()));
    let after = stored(&reader);
    match (&got, case.expected) {
        (Ok(tombstones), Ok(gone)) => {
            let names: Vec<&str> = tombstones.iter().map(|t| t.run_id().as_str()).collect();
            assert_eq!(names, gone, "{}", case.name);
            for t in tombstones {
                assert_eq!(t.who().as_str(), "ops@example.com");
                assert_eq!(t.events(), 7, "{}", case.name);
            }
            assert_deleted(&db, &reader, gone, case.name);
            // Every other run byte-identical.
            let kept: Vec<_> = before
                .into_iter()
                .filter(|(run, _)| !gone.contains(&run.as_str()))
                .collect();
            assert_eq!(after, kept, "{}", case.name);
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

/// Nothing of `gone` is left: not found by any read, not in any file.
fn assert_deleted(db: &Path, reader: &JournalReader, gone: &[&str], case: &str) {
    let listed: Vec<String> = reader
        .runs_page(&RunsQuery::first(100))
        .unwrap()
        .runs
        .into_iter()
        .map(|r| r.summary.run_id.to_string())
        .collect();
    for run in gone {
        assert_eq!(reader.run_status(run).unwrap(), None, "{case}: {run}");
        assert!(reader.events_after(run, 0, 100).unwrap().is_empty());
        assert!(!listed.iter().any(|l| l == run), "{case}: {run} listed");
        let found = holds(db, &format!("MARKER<{run}>"));
        assert!(found.is_empty(), "{case}: {run}'s text in {found:?}");
    }
}

#[test]
fn deletion_follows_the_rules_and_leaves_no_byte_of_a_deleted_run() {
    for case in cases() {
        check(&case);
    }
}

#[test]
fn the_byte_search_finds_what_is_stored() {
    // The search itself: before deletion, every marker is in the files.
    let dir = TempDir::new("search");
    let db = dir.db();
    let journal = open(&db);
    store(&journal, &fixture());
    for s in fixture() {
        assert!(
            !holds(&db, &format!("MARKER<{}>", s.id)).is_empty(),
            "{}",
            s.id
        );
    }
    journal.close().unwrap();
}

#[test]
fn a_deleted_run_is_gone_after_reopening_and_its_tombstone_kept() {
    let dir = TempDir::new("reopen");
    let db = dir.db();
    let journal = open(&db);
    store(&journal, &fixture());
    let deleted = journal
        .delete_runs(&request(DeletionTarget::Run(id("run_c"))))
        .unwrap();
    // Deleting it again: it is not stored any more.
    let again = journal.delete_runs(&request(DeletionTarget::Run(id("run_c"))));
    assert!(
        matches!(&again, Err(DeleteError::NotFound { run_id }) if run_id.as_str() == "run_c"),
        "{again:?}"
    );
    journal.close().unwrap();
    assert!(holds(&db, "MARKER<run_c>").is_empty());
    let reader = JournalReader::open(&db).unwrap();
    assert_eq!(reader.run_status("run_c").unwrap(), None);
    assert_eq!(reader.tombstones().unwrap(), deleted);
    let t: &Tombstone = &deleted[0];
    assert_eq!(
        t.to_json()["run_id"],
        serde_json::Value::from("run_c"),
        "{}",
        t.to_json()
    );
}

fn stored_version(db: &Path) -> i64 {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.query_row("SELECT version FROM keel_schema", [], |r| r.get(0))
        .unwrap()
}

fn has_tombstones_table(db: &Path) -> bool {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE name = 'tombstones')",
        [],
        |r| r.get(0),
    )
    .unwrap()
}

#[test]
fn version_5_is_created_from_empty_and_migrated_from_version_4() {
    assert_eq!(SCHEMA_VERSION, 5);
    let dir = TempDir::new("migrate");
    let db = dir.db();
    let journal = open(&db);
    assert_eq!(stored_version(&db), 5);
    assert!(has_tombstones_table(&db));
    store(&journal, &fixture());
    journal.close().unwrap();
    // Back to version 4: what the version 4 schema holds.
    {
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.execute_batch("DROP TABLE tombstones; UPDATE keel_schema SET version = 4;")
            .unwrap();
    }
    let reader = JournalReader::open(&db).unwrap();
    let before = stored(&reader);
    // A reader of version 4 has no tombstones, and changes nothing.
    assert!(reader.tombstones().unwrap().is_empty());
    drop(reader);
    assert_eq!(stored_version(&db), 4);
    let journal = open(&db);
    assert_eq!(stored_version(&db), 5);
    let reader = journal.reader().unwrap();
    assert_eq!(stored(&reader), before);
    let deleted = journal
        .delete_runs(&request(DeletionTarget::Run(id("run_c"))))
        .unwrap();
    assert_eq!(reader.tombstones().unwrap(), deleted);
    drop(reader);
    journal.close().unwrap();
}

#[test]
fn a_refused_deletion_names_the_rule_and_the_dependents() {
    let dir = TempDir::new("refused");
    let db = dir.db();
    let journal = open(&db);
    store(&journal, &fixture());
    let e = journal
        .delete_runs(&request(DeletionTarget::Run(id("run_a"))))
        .unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("deletion.dependents") && text.contains("run_b"),
        "{text}"
    );
    let e = journal
        .delete_runs(&request(DeletionTarget::Run(id("run_live"))))
        .unwrap_err();
    assert!(e.to_string().contains("deletion.live"), "{e}");
    journal.close().unwrap();
}
