#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Listing at scale: `JournalReader::runs_page` against the old path (every
//! summary, filtered in memory), its filters, paging while runs are added,
//! and the version 4 migration from empty and from every older version.
#![cfg(feature = "sqlite")]

#[path = "support/fixtures.rs"]
mod fixtures;

use fixtures::{SetClock, TempDir, V1_DDL};
use keel_eventlog::{LogConfig, Payload, RunCompleted, RunLog, RunStarted};
use keel_message::RunId;
use keel_observers::journal::SCHEMA_VERSION;
use keel_observers::{
    JournalConfig, JournalReader, RequiredObserver, RunStatus, RunSummary, RunsCursor, RunsQuery,
    SqliteJournal,
};
use keel_testkit::events as testkit;
use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

/// One run to store: its id, start time, end, and the run it continues.
#[derive(Clone)]
struct Spec {
    id: String,
    ts: u64,
    end: RunStatus,
    continues: Option<&'static str>,
}

fn spec(id: &str, ts: u64, end: RunStatus, continues: Option<&'static str>) -> Spec {
    Spec {
        id: id.to_owned(),
        ts,
        end,
        continues,
    }
}

fn events(s: &Spec) -> Vec<Arc<keel_eventlog::Event>> {
    let log = RunLog::new(
        RunId::parse(&s.id).unwrap(),
        LogConfig::default(),
        Arc::new(SetClock(s.ts)),
    )
    .unwrap();
    let started = Payload::RunStarted(RunStarted {
        continues: s.continues.map(|c| RunId::parse(c).unwrap()),
        ..RunStarted::default()
    });
    let mut out = vec![log.commit(&started).unwrap()];
    match s.end {
        RunStatus::Running => {}
        RunStatus::Completed => out.push(
            log.commit(&Payload::RunCompleted(RunCompleted::default()))
                .unwrap(),
        ),
        RunStatus::Failed => out.push(log.commit(&testkit::run_failed("boom")).unwrap()),
        RunStatus::Cancelled => out.push(log.commit(&testkit::run_cancelled()).unwrap()),
    }
    out
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap()
}

/// Stores `specs` (concurrently, so the writer batches them).
fn store(rt: &tokio::runtime::Runtime, journal: &Arc<SqliteJournal>, specs: &[Spec]) {
    rt.block_on(async {
        let mut tasks = Vec::new();
        for chunk in specs.chunks(64) {
            let journal = Arc::clone(journal);
            let chunk = chunk.to_vec();
            tasks.push(tokio::spawn(async move {
                for s in &chunk {
                    journal.observe_batch(&events(s)).await.unwrap();
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
}

fn open(db: &Path) -> Arc<SqliteJournal> {
    Arc::new(SqliteJournal::open(db, JournalConfig::default()).unwrap())
}

/// Every page of `query` (from its first), each run once, in order.
fn all_pages(reader: &JournalReader, query: &RunsQuery) -> Vec<String> {
    let mut query = query.clone();
    let mut out = Vec::new();
    loop {
        let page = reader.runs_page(&query).unwrap();
        assert!(page.runs.len() <= query.limit);
        out.extend(page.runs.iter().map(|r| r.summary.run_id.to_string()));
        match page.next {
            Some(next) => query.after = Some(next),
            None => return out,
        }
    }
}

/// The old path: every summary, filtered in memory.
fn model(all: &[RunSummary], roots: &dyn Fn(&str) -> String, query: &RunsQuery) -> Vec<String> {
    let root = query.conversation.as_deref().map(|c| {
        if all.iter().any(|s| s.run_id.as_str() == c) {
            Some(roots(c))
        } else {
            None
        }
    });
    all.iter()
        .filter(|s| query.status.is_none_or(|st| s.status == st))
        .filter(|s| query.since_ts.is_none_or(|t| s.started_ts >= t))
        .filter(|s| match &root {
            None => true,
            Some(None) => false,
            Some(Some(r)) => roots(s.run_id.as_str()) == *r,
        })
        .map(|s| s.run_id.to_string())
        .collect()
}

/// The conversations of [`fixture`]: the `continues` chain roots.
fn fixture_root(id: &str) -> String {
    match id {
        "run_b" | "run_c" | "run_d" => "run_a".to_owned(),
        "run_y" => "run_gone".to_owned(),
        "run_x" => "run_gone".to_owned(),
        other => other.to_owned(),
    }
}

/// Two chains (`run_a` ← `run_b` ← `run_c` ← `run_d`; `run_x`, `run_y`
/// continuing a run not stored), and loose runs of every status, with
/// equal start times so that the id breaks ties.
fn fixture() -> Vec<Spec> {
    use RunStatus::*;
    let mut specs = vec![
        spec("run_a", 1_000, Completed, None),
        spec("run_b", 2_000, Completed, Some("run_a")),
        spec("run_c", 2_000, Failed, Some("run_b")),
        spec("run_d", 5_000, Running, Some("run_c")),
        spec("run_x", 3_000, Completed, Some("run_gone")),
        spec("run_y", 3_000, Running, Some("run_x")),
    ];
    for i in 0..40u64 {
        let end = [Completed, Failed, Running, Completed][(i % 4) as usize];
        specs.push(spec(
            &format!("run_l{i:02}"),
            1_000 + (i % 7) * 500,
            end,
            None,
        ));
    }
    specs
}

fn query(limit: usize) -> RunsQuery {
    RunsQuery::first(limit)
}

/// One case: `query` pages to what the old path lists.
fn check(reader: &JournalReader, case: &str, query: RunsQuery) {
    let all = reader.runs().unwrap();
    let want = model(&all, &fixture_root, &query);
    let got = all_pages(reader, &query);
    assert_eq!(got, want, "{case}");
}

#[test]
fn every_filter_and_combination_pages_to_what_the_old_path_lists() {
    let dir = TempDir::new("filters");
    let rt = rt();
    let journal = open(&dir.db());
    store(&rt, &journal, &fixture());
    let reader = journal.reader().unwrap();
    let q = |limit, status, conversation: Option<&str>, since| RunsQuery {
        status,
        conversation: conversation.map(str::to_owned),
        since_ts: since,
        ..query(limit)
    };
    use RunStatus::*;
    let cases: Vec<(&str, RunsQuery)> = vec![
        ("all, pages of 1", q(1, None, None, None)),
        ("all, pages of 7", q(7, None, None, None)),
        ("all, one page", q(1000, None, None, None)),
        ("running", q(3, Some(Running), None, None)),
        ("completed", q(5, Some(Completed), None, None)),
        ("failed", q(2, Some(Failed), None, None)),
        ("cancelled: none", q(2, Some(Cancelled), None, None)),
        ("conversation of the root", q(1, None, Some("run_a"), None)),
        (
            "conversation of a later run",
            q(2, None, Some("run_c"), None),
        ),
        (
            "conversation of a missing root",
            q(1, None, Some("run_y"), None),
        ),
        (
            "conversation of an unknown run",
            q(5, None, Some("run_none"), None),
        ),
        (
            "conversation not stored (its root)",
            q(5, None, Some("run_gone"), None),
        ),
        (
            "a loose run is its own conversation",
            q(5, None, Some("run_l03"), None),
        ),
        ("since", q(4, None, None, Some(2_500))),
        ("since, exactly a start", q(4, None, None, Some(3_000))),
        ("since past everything", q(4, None, None, Some(1_000_000))),
        (
            "status and conversation",
            q(1, Some(Completed), Some("run_b"), None),
        ),
        ("status and since", q(3, Some(Running), None, Some(2_000))),
        (
            "conversation and since",
            q(1, None, Some("run_a"), Some(2_000)),
        ),
        ("all three", q(1, Some(Running), Some("run_a"), Some(1_500))),
    ];
    for (case, query) in cases {
        check(&reader, case, query);
    }
    // The model itself is not empty where it should list runs.
    assert_eq!(
        all_pages(&reader, &q(2, None, Some("run_c"), None)),
        ["run_a", "run_b", "run_c", "run_d"]
    );
    assert_eq!(
        all_pages(&reader, &q(2, None, Some("run_gone"), None)),
        Vec::<String>::new(),
        "a conversation is named by a stored run"
    );
    assert_eq!(
        all_pages(&reader, &q(2, None, Some("run_y"), None)),
        ["run_x", "run_y"]
    );
}

#[test]
fn a_page_ends_with_a_cursor_only_when_a_run_follows() {
    let dir = TempDir::new("next");
    let rt = rt();
    let journal = open(&dir.db());
    let reader = journal.reader().unwrap();
    assert_eq!(reader.runs_page(&query(5)).unwrap().next, None);
    store(&rt, &journal, &fixture()[..4]);
    let page = reader.runs_page(&query(4)).unwrap();
    assert_eq!(page.runs.len(), 4);
    assert_eq!(page.next, None, "exactly full, nothing after");
    let page = reader.runs_page(&query(3)).unwrap();
    assert_eq!(
        page.next,
        Some(RunsCursor {
            started_ts: 2_000,
            run_id: "run_c".to_owned()
        })
    );
    assert_eq!(reader.runs_page(&query(0)).unwrap().runs.len(), 0);
}

#[test]
fn paging_ten_thousand_runs_lists_each_once_while_runs_are_added() {
    const RUNS: u64 = 10_000;
    let dir = TempDir::new("ten-thousand");
    let rt = rt();
    let journal = open(&dir.db());
    let specs: Vec<Spec> = (0..RUNS)
        .map(|i| {
            spec(
                &format!("run_{i:05}"),
                1_000 + i / 3,
                RunStatus::Completed,
                None,
            )
        })
        .collect();
    store(&rt, &journal, &specs);
    let reader = journal.reader().unwrap();
    let mut seen: Vec<String> = Vec::new();
    let mut query = query(97);
    let mut added = 0u64;
    loop {
        let page = reader.runs_page(&query).unwrap();
        seen.extend(page.runs.iter().map(|r| r.summary.run_id.to_string()));
        // New runs arrive between pages: some before the cursor (started
        // earlier), some after it (started later), some at its very time.
        let at = query.after.as_ref().map_or(0, |c| c.started_ts);
        let new = [
            spec(
                &format!("run_new_early_{added}"),
                500 + added,
                RunStatus::Running,
                None,
            ),
            spec(
                &format!("run_new_late_{added}"),
                100_000 + added,
                RunStatus::Completed,
                None,
            ),
            spec(
                &format!("run_new_tie_{added}"),
                at,
                RunStatus::Completed,
                None,
            ),
        ];
        store(&rt, &journal, &new);
        added += 1;
        match page.next {
            Some(next) => query.after = Some(next),
            None => break,
        }
    }
    let unique: HashSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "no run listed twice");
    for s in &specs {
        assert!(unique.contains(&s.id), "{} listed", s.id);
    }
    let ordered: Vec<(u64, String)> = {
        let all = reader.runs().unwrap();
        let by_id: std::collections::HashMap<String, u64> = all
            .iter()
            .map(|s| (s.run_id.to_string(), s.started_ts))
            .collect();
        seen.iter().map(|id| (by_id[id], id.clone())).collect()
    };
    assert!(
        ordered.windows(2).all(|w| w[0] < w[1]),
        "in the list's order"
    );
    // Every late run added before the last page was listed.
    assert!(added > 100, "{added} pages");
    assert!(seen.iter().any(|id| id.starts_with("run_new_late_")));
    assert!(!seen.iter().any(|id| id.starts_with("run_new_early_")));
}

// ------------------------------------------------------------ migration

/// What versions 2 and 3 added.
const TO_V2: &str = "
CREATE TABLE owners (run_id TEXT PRIMARY KEY, host TEXT NOT NULL) WITHOUT ROWID;
UPDATE keel_schema SET version = 2;
";
const TO_V3: &str = "
ALTER TABLE runs ADD COLUMN turns         INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN input_tokens  INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN output_tokens INTEGER NOT NULL DEFAULT 0;
UPDATE keel_schema SET version = 3;
";

/// A store at `version` holding [`fixture`], as that version's writer
/// would have stored it.
fn old_store(db: &Path, version: u32) {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    conn.execute_batch(V1_DDL).unwrap();
    if version >= 2 {
        conn.execute_batch(TO_V2).unwrap();
    }
    if version >= 3 {
        conn.execute_batch(TO_V3).unwrap();
    }
    for s in fixture() {
        let events = events(&s);
        for e in &events {
            conn.execute(
                "INSERT INTO events VALUES (?1, ?2, ?3, ?4, ?5)",
                rusqlite::params![
                    e.run_id().as_str(),
                    e.seq() as i64,
                    e.kind().to_string(),
                    e.ts() as i64,
                    e.line()
                ],
            )
            .unwrap();
        }
        let last = events.last().unwrap();
        conn.execute(
            "INSERT INTO runs (run_id, last_seq, status, started_ts, updated_ts) \
             VALUES (?1, ?2, ?3, ?4, ?5)",
            rusqlite::params![
                s.id,
                last.seq() as i64,
                s.end.as_str(),
                s.ts as i64,
                last.ts() as i64
            ],
        )
        .unwrap();
    }
}

fn stored_version(db: &Path) -> i64 {
    rusqlite::Connection::open(db)
        .unwrap()
        .query_row("SELECT max(version) FROM keel_schema", [], |r| r.get(0))
        .unwrap()
}

fn indexes(db: &Path) -> Vec<String> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let mut stmt = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND name LIKE 'runs_by_%' ORDER BY name")
        .unwrap();
    stmt.query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// The filter cases both an old reader and a migrated store answer.
fn migration_cases() -> Vec<(&'static str, RunsQuery)> {
    vec![
        ("all", query(4)),
        (
            "conversation",
            RunsQuery {
                conversation: Some("run_c".to_owned()),
                ..query(1)
            },
        ),
        (
            "conversation of a missing root",
            RunsQuery {
                conversation: Some("run_x".to_owned()),
                ..query(1)
            },
        ),
        (
            "status and since",
            RunsQuery {
                status: Some(RunStatus::Running),
                since_ts: Some(2_000),
                ..query(2)
            },
        ),
    ]
}

#[test]
fn every_older_version_is_listed_as_it_is_then_migrated_to_the_indexes() {
    // Every version before the listing indexes (version 4); later
    // migrations add tables of their own (tests/delete.rs).
    const { assert!(SCHEMA_VERSION >= 4) };
    for version in 1..4 {
        let dir = TempDir::new(&format!("v{version}"));
        let db = dir.db();
        old_store(&db, version);
        // A reader answers pages of the old store as it is, changing nothing.
        let reader = JournalReader::open(&db).unwrap();
        for (case, q) in migration_cases() {
            check(&reader, &format!("v{version} read as is: {case}"), q);
        }
        drop(reader);
        assert_eq!(stored_version(&db), i64::from(version));
        assert!(indexes(&db).is_empty());
        // A writer migrates it: conversations kept, indexes built.
        let journal = open(&db);
        assert_eq!(stored_version(&db), i64::from(SCHEMA_VERSION), "v{version}");
        assert_eq!(
            indexes(&db),
            ["runs_by_conversation", "runs_by_start", "runs_by_status"]
        );
        let reader = journal.reader().unwrap();
        for (case, q) in migration_cases() {
            check(&reader, &format!("v{version} migrated: {case}"), q);
        }
        // A run continuing a migrated one joins its conversation.
        let rt = rt();
        store(
            &rt,
            &journal,
            &[spec("run_e", 6_000, RunStatus::Completed, Some("run_d"))],
        );
        let q = RunsQuery {
            conversation: Some("run_a".to_owned()),
            ..query(10)
        };
        assert_eq!(
            all_pages(&reader, &q),
            ["run_a", "run_b", "run_c", "run_d", "run_e"],
            "v{version}"
        );
    }
}

#[test]
fn a_new_store_is_created_at_the_current_version_with_the_indexes() {
    let dir = TempDir::new("empty");
    let db = dir.db();
    let journal = open(&db);
    assert_eq!(stored_version(&db), i64::from(SCHEMA_VERSION));
    assert_eq!(
        indexes(&db),
        ["runs_by_conversation", "runs_by_start", "runs_by_status"]
    );
    // A chain stored in one transaction resolves in commit order.
    let rt = rt();
    let chain = [
        spec("run_p", 1, RunStatus::Completed, None),
        spec("run_q", 2, RunStatus::Completed, Some("run_p")),
        spec("run_r", 3, RunStatus::Completed, Some("run_q")),
    ];
    let all: Vec<_> = chain.iter().flat_map(events).collect();
    rt.block_on(async {
        let futures: Vec<_> = all
            .chunk_by(|a, b| a.run_id() == b.run_id())
            .map(|run| journal.observe_batch(run))
            .collect();
        for f in futures {
            f.await.unwrap();
        }
    });
    let reader = journal.reader().unwrap();
    let q = RunsQuery {
        conversation: Some("run_r".to_owned()),
        ..query(10)
    };
    assert_eq!(all_pages(&reader, &q), ["run_p", "run_q", "run_r"]);
}
