#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The PostgreSQL journal against a real server each test starts
//! (`keel_testkit::pg::TempPostgres`): storage, idempotency, conflicts,
//! gaps, batching, a failed transaction, concurrency, run status and
//! totals, schema refusal and migrations, claims, recovery across hosts,
//! the run list, and errors that never show the password.
#![cfg(feature = "postgres")]

#[path = "support/fixtures.rs"]
mod fixtures;

use fixtures::{Want, assert_want, event, note, observe_notes_concurrently, rt};
use keel_eventlog::Event;
use keel_observers::postgres::{PG_SCHEMA_VERSION, PgJournal, PgReader, PgUrl};
use keel_observers::{
    BatchError, JournalConfig, JournalError, ObserverError, RequiredObserver, RunClaim, RunStatus,
    RunsCursor, RunsQuery, SkipReason,
};
use keel_testkit::pg::{PASSWORD, TempPostgres};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

// ---------------------------------------------------------------- helpers

fn url(text: &str) -> PgUrl {
    PgUrl::parse(text).unwrap()
}

fn open(pg: &TempPostgres) -> PgJournal {
    PgJournal::open(&url(&pg.url()), JournalConfig::default()).unwrap()
}

fn admin(pg: &TempPostgres) -> postgres::Client {
    postgres::Client::connect(&pg.url(), postgres::NoTls).unwrap()
}

fn lines(reader: &PgReader, run: &str) -> Vec<String> {
    reader.events_after(run, 0, usize::MAX).unwrap()
}

/// Locks `runs` from another session for `hold`, so the writer's next
/// transaction waits and what is offered meanwhile queues into one batch.
fn lock_runs_for(pg: &TempPostgres, hold: Duration) -> std::thread::JoinHandle<()> {
    let (ready, wait) = mpsc::channel();
    let text = pg.url();
    let handle = std::thread::spawn(move || {
        let mut client = postgres::Client::connect(&text, postgres::NoTls).unwrap();
        let mut tx = client.transaction().unwrap();
        tx.batch_execute("LOCK TABLE runs IN EXCLUSIVE MODE")
            .unwrap();
        ready.send(()).unwrap();
        std::thread::sleep(hold);
        tx.commit().unwrap();
    });
    wait.recv().unwrap();
    handle
}

// ------------------------------------------------- append, retry, conflict, gap

struct AppendRow {
    name: &'static str,
    offers: &'static [(u64, &'static str, Want)],
    stored: &'static [&'static str],
}

fn check_append(rows: &[AppendRow]) {
    let Some(pg) = TempPostgres::start() else {
        return;
    };
    let journal = open(&pg);
    let reader = journal.reader().unwrap();
    let rt = rt();
    for (i, row) in rows.iter().enumerate() {
        let run = format!("run_{i}");
        for &(seq, text, want) in row.offers {
            let got = rt.block_on(journal.observe(&note(&run, seq, text)));
            assert_want(row.name, &run, seq, &got, want);
        }
        let want: Vec<String> = row
            .stored
            .iter()
            .enumerate()
            .map(|(i, text)| note(&run, i as u64 + 1, text).line().to_owned())
            .collect();
        assert_eq!(lines(&reader, &run), want, "{}: stored lines", row.name);
        let last = reader.run_status(&run).unwrap().map_or(0, |s| s.last_seq);
        assert_eq!(last, row.stored.len() as u64, "{}: last_seq", row.name);
    }
    drop(reader);
    journal.close().unwrap();
}

#[test]
fn append_retry_conflict_and_gap() {
    use Want::*;
    check_append(&[
        AppendRow {
            name: "in order",
            offers: &[(1, "a", Ok), (2, "b", Ok), (3, "c", Ok)],
            stored: &["a", "b", "c"],
        },
        AppendRow {
            name: "same bytes again is ok",
            offers: &[(1, "a", Ok), (2, "b", Ok), (1, "a", Ok), (2, "b", Ok)],
            stored: &["a", "b"],
        },
        AppendRow {
            name: "other bytes conflict, the stored row is kept",
            offers: &[(1, "a", Ok), (1, "x", Conflict), (2, "b", Ok)],
            stored: &["a", "b"],
        },
        AppendRow {
            name: "a gap is refused",
            offers: &[(1, "a", Ok), (3, "c", Gap(1)), (2, "b", Ok)],
            stored: &["a", "b"],
        },
        AppendRow {
            name: "a first event past seq 1 is a gap",
            offers: &[(2, "b", Gap(0))],
            stored: &[],
        },
    ]);
}

// --------------------------------------------------------------- batches

#[test]
fn grouped_requests_share_a_transaction_and_refusals_stay_alone() {
    let Some(pg) = TempPostgres::start() else {
        return;
    };
    let journal = open(&pg);
    let rt = rt();
    rt.block_on(journal.observe(&note("run_b", 1, "b1")))
        .unwrap();
    let before = journal.stats();
    let release = lock_runs_for(&pg, Duration::from_millis(400));
    let offers = [
        (note("run_a", 1, "a1"), Want::Ok),
        (note("run_b", 1, "other"), Want::Conflict),
        (note("run_a", 2, "a2"), Want::Ok),
        (note("run_b", 3, "b3"), Want::Gap(1)),
        (note("run_b", 2, "b2"), Want::Ok),
        (note("run_b", 2, "b2"), Want::Ok),
    ];
    let answers = rt.block_on(futures_util::future::join_all(
        offers.iter().map(|(e, _)| journal.observe(e)),
    ));
    release.join().unwrap();
    for ((event, want), got) in offers.iter().zip(&answers) {
        assert_want("grouped", event.run_id().as_str(), event.seq(), got, *want);
    }
    let after = journal.stats();
    assert_eq!(after.requests - before.requests, offers.len() as u64);
    assert!(
        after.transactions - before.transactions <= 2 && after.largest_batch >= 3,
        "expected the queued requests grouped: {after:?}"
    );
    let reader = journal.reader().unwrap();
    assert_eq!(lines(&reader, "run_a").len(), 2);
    assert_eq!(
        lines(&reader, "run_b"),
        vec![
            note("run_b", 1, "b1").line().to_owned(),
            note("run_b", 2, "b2").line().to_owned()
        ]
    );
    drop(reader);
    journal.close().unwrap();
}

#[test]
fn a_grouped_transaction_stops_at_max_batch() {
    let Some(pg) = TempPostgres::start() else {
        return;
    };
    let mut config = JournalConfig::default();
    config.max_batch = 3;
    let journal = PgJournal::open(&url(&pg.url()), config).unwrap();
    let rt = rt();
    let release = lock_runs_for(&pg, Duration::from_millis(400));
    let events: Vec<Arc<Event>> = (0..7).map(|r| note(&format!("run_{r}"), 1, "x")).collect();
    let answers = rt.block_on(futures_util::future::join_all(
        events.iter().map(|e| journal.observe(e)),
    ));
    release.join().unwrap();
    assert!(answers.iter().all(Result::is_ok), "{answers:?}");
    let stats = journal.stats();
    // Six or seven requests queued behind the lock: the bound is reached,
    // never passed.
    assert_eq!(stats.largest_batch, 3, "{stats:?}");
    assert_eq!(stats.stored, 7);
    journal.close().unwrap();
}

fn batch(run: &str, seqs: std::ops::RangeInclusive<u64>) -> Vec<Arc<Event>> {
    seqs.map(|s| note(run, s, &format!("s{s}"))).collect()
}

#[test]
fn a_batch_keeps_what_precedes_its_first_refusal() {
    let Some(pg) = TempPostgres::start() else {
        return;
    };
    let journal = open(&pg);
    let rt = rt();
    rt.block_on(journal.observe_batch(&batch("run_1", 1..=3)))
        .unwrap();
    // 4, 5 fine, 7 is a gap: 2 acknowledged, 6.. never looked at.
    let mut offered = batch("run_1", 4..=5);
    offered.push(note("run_1", 7, "s7"));
    offered.push(note("run_1", 6, "s6"));
    let got = rt.block_on(journal.observe_batch(&offered));
    match got {
        Err(BatchError {
            acknowledged: 2,
            source:
                ObserverError::Gap {
                    last_stored: 5,
                    seq: 7,
                    ..
                },
        }) => {}
        other => panic!("{other:?}"),
    }
    // The same batch again is accepted whole; a gap at the start
    // acknowledges nothing.
    rt.block_on(journal.observe_batch(&batch("run_1", 1..=5)))
        .unwrap();
    let got = rt.block_on(journal.observe_batch(&batch("run_1", 9..=10)));
    assert!(
        matches!(
            got,
            Err(BatchError {
                acknowledged: 0,
                ..
            })
        ),
        "{got:?}"
    );
    let reader = journal.reader().unwrap();
    assert_eq!(reader.run_status("run_1").unwrap().unwrap().last_seq, 5);
    drop(reader);
    journal.close().unwrap();
}

#[test]
fn a_failed_transaction_is_never_acknowledged() {
    let Some(pg) = TempPostgres::start() else {
        return;
    };
    let journal = open(&pg);
    let mut admin = admin(&pg);
    admin
        .batch_execute(
            "CREATE FUNCTION poison() RETURNS trigger AS $$ BEGIN \
               IF NEW.run_id = 'run_poison' THEN RAISE EXCEPTION 'injected fault'; END IF; \
               RETURN NEW; END $$ LANGUAGE plpgsql; \
             CREATE TRIGGER poison BEFORE INSERT ON runs FOR EACH ROW EXECUTE FUNCTION poison();",
        )
        .unwrap();
    let rt = rt();
    let release = lock_runs_for(&pg, Duration::from_millis(400));
    let events = [
        note("run_ok", 1, "a"),
        note("run_ok", 2, "b"),
        note("run_poison", 1, "p"),
        note("run_ok", 3, "c"),
    ];
    let answers = rt.block_on(futures_util::future::join_all(
        events.iter().map(|e| journal.observe(e)),
    ));
    release.join().unwrap();
    assert_want("healthy", "run_ok", 1, &answers[0], Want::Ok);
    assert_want("healthy", "run_ok", 2, &answers[1], Want::Ok);
    assert_want("poisoned", "run_poison", 1, &answers[2], Want::Failed);
    assert_want("healthy", "run_ok", 3, &answers[3], Want::Ok);
    let reader = journal.reader().unwrap();
    assert_eq!(lines(&reader, "run_ok").len(), 3);
    assert!(lines(&reader, "run_poison").is_empty());
    assert_eq!(journal.stats().failed, 1);
    admin.batch_execute("DROP TRIGGER poison ON runs").unwrap();
    rt.block_on(journal.observe(&events[2])).unwrap();
    assert_eq!(lines(&reader, "run_poison").len(), 1);
    drop(reader);
    journal.close().unwrap();
}

#[test]
fn many_concurrent_runs_are_stored_contiguously() {
    const RUNS: usize = 8;
    const EVENTS: u64 = 200;
    let Some(pg) = TempPostgres::start() else {
        return;
    };
    let journal = Arc::new(open(&pg));
    let rt = rt();
    observe_notes_concurrently(&rt, &journal, RUNS, EVENTS);
    let stats = journal.stats();
    assert_eq!(stats.stored, RUNS as u64 * EVENTS);
    assert!(stats.largest_batch > 1, "no group commit: {stats:?}");
    let reader = journal.reader().unwrap();
    assert_eq!(reader.runs().unwrap().len(), RUNS);
    for r in 0..RUNS {
        let run = format!("run_{r}");
        let want: Vec<String> = (1..=EVENTS)
            .map(|seq| note(&run, seq, &format!("r{r}s{seq}")).line().to_owned())
            .collect();
        assert_eq!(lines(&reader, &run), want, "{run}");
        assert_eq!(
            reader.events_after(&run, 100, 50).unwrap(),
            want[100..150].to_vec()
        );
        assert_eq!(reader.all_lines_after(&run, 0).unwrap(), want);
        // A byte budget ends the page after the line that reaches it.
        let first_len = want[0].len();
        assert_eq!(
            reader
                .events_within(&run, 0, 10, first_len + 1)
                .unwrap()
                .len(),
            2
        );
        assert_eq!(reader.events_within(&run, 0, 10, 0).unwrap().len(), 1);
    }
    drop(reader);
    Arc::try_unwrap(journal).unwrap().close().unwrap();
}

// ------------------------------------------------------ status and totals

#[test]
fn status_totals_and_conversations_follow_the_events() {
    let Some(pg) = TempPostgres::start() else {
        return;
    };
    let journal = open(&pg);
    let rt = rt();
    let usage = |i, o| {
        format!(
            r#"{{"finish":"stop","operation_id":"op","turn":1,"usage":{{"input_tokens":{i},"output_tokens":{o}}}}}"#
        )
    };
    let events = [
        event("chat_1", 1, 10, "run.started", "{}"),
        event("chat_1", 2, 11, "turn.started", r#"{"turn":1}"#),
        event("chat_1", 3, 12, "model.completed", &usage(7, 3)),
        event("chat_1", 4, 13, "model.completed", &usage(1, 1)),
        event("chat_1", 5, 14, "run.completed", "{}"),
        event("chat_2", 1, 20, "run.started", r#"{"continues":"chat_1"}"#),
        event("chat_2", 2, 21, "run.failed", r#"{"error":"boom"}"#),
        event("chat_3", 1, 30, "run.started", r#"{"continues":"chat_2"}"#),
        event("chat_3", 2, 31, "run.cancelled", "{}"),
        event("solo", 1, 40, "run.started", "{}"),
    ];
    for e in &events {
        rt.block_on(journal.observe(e))
            .unwrap_or_else(|err| panic!("{}: {err}", e.line()));
    }
    let reader = journal.reader().unwrap();
    let status = |run: &str| reader.run_status(run).unwrap().map(|s| s.status);
    assert_eq!(status("chat_1"), Some(RunStatus::Completed));
    assert_eq!(status("chat_2"), Some(RunStatus::Failed));
    assert_eq!(status("chat_3"), Some(RunStatus::Cancelled));
    assert_eq!(status("solo"), Some(RunStatus::Running));
    assert_eq!(status("nothing"), None);
    let summary = reader.run_status("chat_1").unwrap().unwrap();
    assert_eq!(
        (summary.started_ts, summary.updated_ts, summary.last_seq),
        (10, 14, 5)
    );
    let totals = reader.totals().unwrap();
    assert_eq!(totals, reader.summed_totals().unwrap());
    let t = totals["chat_1"];
    assert_eq!((t.turns, t.input_tokens, t.output_tokens), (1, 8, 4));
    // One conversation: chat_1 <- chat_2 <- chat_3.
    let mut query = RunsQuery::first(10);
    query.conversation = Some("chat_3".to_owned());
    let page = reader.runs_page(&query).unwrap();
    let ids: Vec<String> = page
        .runs
        .iter()
        .map(|r| r.summary.run_id.to_string())
        .collect();
    assert_eq!(ids, ["chat_1", "chat_2", "chat_3"]);
    // Only running runs have an owner; it is this host.
    let mut admin = admin(&pg);
    let owners: Vec<(String, String)> = admin
        .query("SELECT run_id, host FROM owners", &[])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        owners,
        vec![("solo".to_owned(), journal.host_id().to_owned())]
    );
    drop(reader);
    journal.close().unwrap();
}

// ----------------------------------------------------------------- listing

struct PageRow {
    name: &'static str,
    query: RunsQuery,
    want: &'static [&'static str],
    next: Option<&'static str>,
}

#[test]
fn runs_pages_filter_and_follow_their_cursor() {
    let Some(pg) = TempPostgres::start() else {
        return;
    };
    let journal = open(&pg);
    let rt = rt();
    // (run, started ts, continues, terminal)
    let runs: [(&str, u64, Option<&str>, Option<&str>); 6] = [
        ("a", 100, None, Some("run.completed")),
        ("b", 200, Some("a"), Some("run.completed")),
        ("c", 200, None, None),
        ("d", 300, Some("b"), Some("run.cancelled")),
        ("e", 400, None, Some("run.completed")),
        ("f", 500, None, None),
    ];
    for (run, ts, continues, end) in runs {
        let payload = continues.map_or("{}".to_owned(), |p| format!(r#"{{"continues":"{p}"}}"#));
        rt.block_on(journal.observe(&event(run, 1, ts, "run.started", &payload)))
            .unwrap();
        if let Some(end) = end {
            rt.block_on(journal.observe(&event(run, 2, ts + 1, end, "{}")))
                .unwrap();
        }
    }
    let reader = journal.reader().unwrap();
    let q =
        |limit, after: Option<(u64, &str)>, status, conversation: Option<&str>, since| RunsQuery {
            limit,
            after: after.map(|(started_ts, id)| RunsCursor {
                started_ts,
                run_id: id.to_owned(),
            }),
            status,
            conversation: conversation.map(str::to_owned),
            since_ts: since,
        };
    let rows = [
        PageRow {
            name: "all",
            query: q(10, None, None, None, None),
            want: &["a", "b", "c", "d", "e", "f"],
            next: None,
        },
        PageRow {
            name: "first two",
            query: q(2, None, None, None, None),
            want: &["a", "b"],
            next: Some("b"),
        },
        PageRow {
            name: "after b (same ts as c)",
            query: q(2, Some((200, "b")), None, None, None),
            want: &["c", "d"],
            next: Some("d"),
        },
        PageRow {
            name: "completed",
            query: q(10, None, Some(RunStatus::Completed), None, None),
            want: &["a", "b", "e"],
            next: None,
        },
        PageRow {
            name: "running",
            query: q(1, None, Some(RunStatus::Running), None, None),
            want: &["c"],
            next: Some("c"),
        },
        PageRow {
            name: "conversation of d",
            query: q(10, None, None, Some("d"), None),
            want: &["a", "b", "d"],
            next: None,
        },
        PageRow {
            name: "conversation, completed",
            query: q(10, None, Some(RunStatus::Completed), Some("a"), None),
            want: &["a", "b"],
            next: None,
        },
        PageRow {
            name: "unknown conversation",
            query: q(10, None, None, Some("zz"), None),
            want: &[],
            next: None,
        },
        PageRow {
            name: "since 300",
            query: q(10, None, None, None, Some(300)),
            want: &["d", "e", "f"],
            next: None,
        },
        PageRow {
            name: "limit 0",
            query: q(0, None, None, None, None),
            want: &[],
            next: Some("a"),
        },
    ];
    for row in rows {
        let page = reader.runs_page(&row.query).unwrap();
        let ids: Vec<String> = page
            .runs
            .iter()
            .map(|r| r.summary.run_id.to_string())
            .collect();
        assert_eq!(ids, row.want, "{}", row.name);
        let next = page.next.as_ref().map(|c| c.run_id.as_str());
        // `limit 0` reads one row past nothing: no run listed, and no
        // cursor either (a page has no last run to continue from).
        let want_next = if row.query.limit == 0 { None } else { row.next };
        assert_eq!(next, want_next, "{}: next", row.name);
    }
    drop(reader);
    journal.close().unwrap();
}

#[test]
fn last_numbered_run_reads_numbers_not_text() {
    let Some(pg) = TempPostgres::start() else {
        return;
    };
    let journal = open(&pg);
    let rt = rt();
    for (run, end) in [
        ("chat-x-2", true),
        ("chat-x-10", false),
        ("chat-x-9", true),
        ("chat-x-010", true),
        ("chat-x-1-2", true),
        ("chat-y-99", true),
    ] {
        rt.block_on(journal.observe(&event(run, 1, 1, "run.started", "{}")))
            .unwrap();
        if end {
            rt.block_on(journal.observe(&event(run, 2, 2, "run.completed", "{}")))
                .unwrap();
        }
    }
    let reader = journal.reader().unwrap();
    let found = |prefix, status| {
        reader
            .last_numbered_run(prefix, status)
            .unwrap()
            .map(|s| s.run_id.to_string())
    };
    assert_eq!(found("chat-x-", None).as_deref(), Some("chat-x-10"));
    assert_eq!(
        found("chat-x-", Some(RunStatus::Completed)).as_deref(),
        Some("chat-x-9")
    );
    assert_eq!(found("chat-z-", None), None);
    assert_eq!(found("", None), None);
    drop(reader);
    journal.close().unwrap();
}

// --------------------------------------------------- schema and migrations

/// The version 1 schema as a build of schema version 1 created it.
const V1_SCHEMA: &str = r#"
CREATE TABLE keel_schema (version INTEGER NOT NULL, events TEXT NOT NULL);
CREATE TABLE runs (run_id TEXT COLLATE "C" PRIMARY KEY, last_seq BIGINT NOT NULL CHECK (last_seq >= 0),
    status TEXT NOT NULL CHECK (status IN ('running', 'completed', 'failed', 'cancelled')),
    started_ts BIGINT NOT NULL, updated_ts BIGINT NOT NULL, turns BIGINT NOT NULL DEFAULT 0,
    input_tokens BIGINT NOT NULL DEFAULT 0, output_tokens BIGINT NOT NULL DEFAULT 0,
    conversation TEXT COLLATE "C" NOT NULL);
CREATE TABLE events (run_id TEXT COLLATE "C" NOT NULL, seq BIGINT NOT NULL, kind TEXT NOT NULL,
    ts BIGINT NOT NULL, line TEXT NOT NULL, PRIMARY KEY (run_id, seq));
CREATE TABLE owners (run_id TEXT COLLATE "C" PRIMARY KEY, host TEXT NOT NULL);
INSERT INTO keel_schema (version, events) VALUES (1, 'keel.events/1');
INSERT INTO runs VALUES ('old', 2, 'completed', 5, 6, 0, 0, 0, 'old');
INSERT INTO events VALUES ('old', 1, 'run.started', 5,
    '{"kind":"run.started","payload":{},"run_id":"old","seq":1,"ts":5}');
INSERT INTO events VALUES ('old', 2, 'run.completed', 6,
    '{"kind":"run.completed","payload":{},"run_id":"old","seq":2,"ts":6}');
"#;

fn tables(client: &mut postgres::Client) -> Vec<String> {
    client
        .query(
            "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = 'public' AND c.relkind IN ('r', 'i') ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

#[test]
fn migrations_from_empty_and_from_version_1() {
    let Some(pg) = TempPostgres::start() else {
        return;
    };
    // From empty: the whole history, to the current version.
    let journal = open(&pg);
    let mut admin = admin(&pg);
    let version: i32 = admin
        .query_one("SELECT version FROM keel_schema", &[])
        .unwrap()
        .get(0);
    assert_eq!(version as u32, PG_SCHEMA_VERSION);
    let fresh = tables(&mut admin);
    for want in [
        "runs_by_conversation",
        "runs_by_start",
        "runs_by_status",
        "tombstones",
    ] {
        assert!(fresh.contains(&want.to_owned()), "{want} in {fresh:?}");
    }
    journal.close().unwrap();
    // From version 1, with data: migrated in place, data kept, and the
    // same objects as a fresh database.
    let old = pg.create_database("old");
    let mut old_admin = postgres::Client::connect(&old, postgres::NoTls).unwrap();
    old_admin.batch_execute(V1_SCHEMA).unwrap();
    let journal = PgJournal::open(&url(&old), JournalConfig::default()).unwrap();
    let version: i32 = old_admin
        .query_one("SELECT version FROM keel_schema", &[])
        .unwrap()
        .get(0);
    assert_eq!(version as u32, PG_SCHEMA_VERSION);
    assert_eq!(tables(&mut old_admin), fresh);
    let reader = journal.reader().unwrap();
    assert_eq!(lines(&reader, "old").len(), 2);
    let page = reader.runs_page(&RunsQuery::first(5)).unwrap();
    assert_eq!(page.runs.len(), 1);
    drop(reader);
    // Reopening a current database changes nothing.
    journal.close().unwrap();
    open(&pg).close().unwrap();
}

#[test]
fn newer_or_foreign_schemas_are_refused_with_nothing_written() {
    let Some(pg) = TempPostgres::start() else {
        return;
    };
    let newer = pg.create_database("newer");
    let mut client = postgres::Client::connect(&newer, postgres::NoTls).unwrap();
    client
        .batch_execute(
            "CREATE TABLE keel_schema (version INTEGER NOT NULL, events TEXT NOT NULL); \
             INSERT INTO keel_schema VALUES (99, 'keel.events/1');",
        )
        .unwrap();
    let got = PgJournal::open(&url(&newer), JournalConfig::default());
    match got {
        Err(JournalError::PostgresNewerSchema {
            found: 99,
            supported,
            ..
        }) => {
            assert_eq!(supported, PG_SCHEMA_VERSION)
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        PgReader::open(&url(&newer)),
        Err(JournalError::PostgresNewerSchema { found: 99, .. })
    ));
    assert_eq!(tables(&mut client), ["keel_schema"], "nothing written");
    let foreign = pg.create_database("foreign");
    let mut client = postgres::Client::connect(&foreign, postgres::NoTls).unwrap();
    client.batch_execute("CREATE TABLE runs (x INT)").unwrap();
    let got = PgJournal::open(&url(&foreign), JournalConfig::default());
    assert!(
        matches!(got, Err(JournalError::PostgresSchema { .. })),
        "{got:?}"
    );
    assert_eq!(tables(&mut client), ["runs"], "nothing written");
    // A keel_schema of other column types is refused, not a panic.
    let odd = pg.create_database("odd");
    let mut client = postgres::Client::connect(&odd, postgres::NoTls).unwrap();
    client
        .batch_execute(
            "CREATE TABLE keel_schema (version TEXT, events TEXT); \
             INSERT INTO keel_schema VALUES ('1', 'keel.events/1');",
        )
        .unwrap();
    let got = PgJournal::open(&url(&odd), JournalConfig::default());
    assert!(
        matches!(got, Err(JournalError::PostgresSchema { .. })),
        "{got:?}"
    );
    // A reader of an empty database finds no journal and creates none.
    let empty = pg.create_database("empty");
    assert!(matches!(
        PgReader::open(&url(&empty)),
        Err(JournalError::PostgresSchema { .. })
    ));
    let mut client = postgres::Client::connect(&empty, postgres::NoTls).unwrap();
    assert!(tables(&mut client).is_empty());
    // Config is checked before connecting.
    let mut config = JournalConfig::default();
    config.max_batch = 0;
    assert!(matches!(
        PgJournal::open(&url(&empty), config),
        Err(JournalError::Config {
            field: "max_batch",
            ..
        })
    ));
}

#[test]
fn errors_never_show_the_password() {
    let Some(pg) = TempPostgres::start() else {
        return;
    };
    let wrong = format!(
        "postgres://keel:not-{PASSWORD}@127.0.0.1:{}/keel",
        pg.port()
    );
    let unreachable = format!("postgres://keel:{PASSWORD}@127.0.0.1:1/keel");
    for (text, secret) in [
        (wrong, format!("not-{PASSWORD}")),
        (unreachable, PASSWORD.to_owned()),
    ] {
        let url = url(&text);
        assert!(!format!("{url} {url:?}").contains(&secret));
        let err = PgJournal::open(&url, JournalConfig::default()).unwrap_err();
        let shown = format!("{err} {err:?}");
        assert!(matches!(err, JournalError::Postgres { .. }), "{shown}");
        assert!(!shown.contains(&secret), "{shown}");
        let err = PgReader::open(&url).unwrap_err();
        assert!(!format!("{err} {err:?}").contains(&secret));
    }
}

// --------------------------------------------------- claims and recovery

#[test]
fn one_host_claims_an_id_and_a_gone_host_loses_its_claim() {
    let Some(pg) = TempPostgres::start() else {
        return;
    };
    let (a, b) = (open(&pg), open(&pg));
    assert_ne!(a.host_id(), b.host_id());
    assert_eq!(a.claim_run("x").unwrap(), RunClaim::Claimed);
    assert_eq!(a.claim_run("x").unwrap(), RunClaim::Claimed, "its own");
    assert_eq!(b.claim_run("x").unwrap(), RunClaim::HeldElsewhere);
    assert!(a.release_claim("x").unwrap());
    assert!(!a.release_claim("x").unwrap());
    assert_eq!(b.claim_run("x").unwrap(), RunClaim::Claimed);
    let rt = rt();
    rt.block_on(b.observe(&event("x", 1, 1, "run.started", "{}")))
        .unwrap();
    assert!(!b.release_claim("x").unwrap(), "the run is journaled");
    assert_eq!(a.claim_run("x").unwrap(), RunClaim::Journaled);
    assert_eq!(b.claim_run("y").unwrap(), RunClaim::Claimed);
    b.close().unwrap();
    assert_eq!(
        a.claim_run("y").unwrap(),
        RunClaim::Claimed,
        "its host is gone"
    );
    a.close().unwrap();
}

/// Runs left running by a host that is gone: each a started run with a
/// turn open, so recovery appends the turn's and the run's terminals.
fn abandon_runs(pg: &TempPostgres, runs: usize) -> String {
    let dead = open(pg);
    let rt = rt();
    for r in 0..runs {
        let run = format!("run_{r}");
        rt.block_on(journal_all(
            &dead,
            &[
                event(&run, 1, 1, "run.started", "{}"),
                event(&run, 2, 2, "turn.started", r#"{"turn":1}"#),
            ],
        ));
    }
    let id = dead.host_id().to_owned();
    dead.close().unwrap();
    id
}

async fn journal_all(journal: &PgJournal, events: &[Arc<Event>]) {
    journal.observe_batch(events).await.unwrap();
}

#[test]
fn a_live_hosts_runs_are_left_alone_and_a_gone_hosts_are_closed() {
    let Some(pg) = TempPostgres::start() else {
        return;
    };
    let live = open(&pg);
    let rt = rt();
    rt.block_on(live.observe(&event("mine", 1, 1, "run.started", "{}")))
        .unwrap();
    let dead = abandon_runs(&pg, 1);
    let recoverer = open(&pg);
    let report = recoverer.recover_abandoned().unwrap();
    assert_eq!(report.recovered.len(), 1);
    let recovered = &report.recovered[0];
    assert_eq!(recovered.run_id.as_str(), "run_0");
    assert_eq!(recovered.previous_owner.as_deref(), Some(dead.as_str()));
    let seqs: Vec<u64> = recovered.terminals.iter().map(|e| e.seq()).collect();
    assert_eq!(
        seqs,
        [3, 4],
        "turn then run terminal, after the stored prefix"
    );
    assert!(
        matches!(
            report.skipped.as_slice(),
            [s] if s.run_id == "mine" && matches!(&s.reason, SkipReason::OwnedByLiveHost { host } if host == live.host_id())
        ),
        "{:?}",
        report.skipped
    );
    let own = live.recover_abandoned().unwrap();
    assert!(matches!(own.skipped[0].reason, SkipReason::OwnedByThisHost));
    let reader = recoverer.reader().unwrap();
    let summary = reader.run_status("run_0").unwrap().unwrap();
    assert_eq!((summary.status, summary.last_seq), (RunStatus::Failed, 4));
    // Idempotent.
    assert!(recoverer.recover_abandoned().unwrap().recovered.is_empty());
    drop(reader);
    recoverer.close().unwrap();
    live.close().unwrap();
}

#[test]
fn two_hosts_recovering_at_once_close_each_run_exactly_once() {
    const RUNS: usize = 12;
    const ROUNDS: usize = 4;
    let Some(pg) = TempPostgres::start() else {
        return;
    };
    for round in 0..ROUNDS {
        let db = pg.create_database(&format!("race{round}"));
        let pg_url = url(&db);
        // The dead host, on this round's database.
        let dead = PgJournal::open(&pg_url, JournalConfig::default()).unwrap();
        let rt = rt();
        for r in 0..RUNS {
            let run = format!("run_{r}");
            rt.block_on(journal_all(
                &dead,
                &[
                    event(&run, 1, 1, "run.started", "{}"),
                    event(&run, 2, 2, "turn.started", r#"{"turn":1}"#),
                ],
            ));
        }
        dead.close().unwrap();
        let hosts = [
            PgJournal::open(&pg_url, JournalConfig::default()).unwrap(),
            PgJournal::open(&pg_url, JournalConfig::default()).unwrap(),
        ];
        let barrier = std::sync::Barrier::new(hosts.len());
        let reports: Vec<_> = std::thread::scope(|s| {
            let handles: Vec<_> = hosts
                .iter()
                .map(|h| {
                    let barrier = &barrier;
                    s.spawn(move || {
                        barrier.wait();
                        h.recover_abandoned().unwrap()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut closed: Vec<String> = reports
            .iter()
            .flat_map(|r| r.recovered.iter().map(|x| x.run_id.to_string()))
            .collect();
        closed.sort();
        let mut want: Vec<String> = (0..RUNS).map(|r| format!("run_{r}")).collect();
        want.sort();
        assert_eq!(closed, want, "round {round}: each run closed exactly once");
        for report in &reports {
            assert!(
                report.needs_attention().next().is_none(),
                "{:?}",
                report.skipped
            );
        }
        let reader = hosts[0].reader().unwrap();
        for r in 0..RUNS {
            let run = format!("run_{r}");
            let stored = lines(&reader, &run);
            assert_eq!(
                stored.len(),
                4,
                "round {round}: {run}: one set of terminals"
            );
            assert_eq!(
                reader.run_status(&run).unwrap().unwrap().status,
                RunStatus::Failed
            );
        }
        drop(reader);
        for h in hosts {
            h.close().unwrap();
        }
    }
}

#[test]
fn the_reader_is_a_run_history_and_a_dropped_journal_is_safe_in_async_code() {
    use keel_observers::RunHistory;
    let Some(pg) = TempPostgres::start() else {
        return;
    };
    let rt = rt();
    let pg_url = url(&pg.url());
    // Opened on a blocking thread, used and dropped on the runtime.
    rt.block_on(async move {
        let journal = tokio::task::spawn_blocking({
            let pg_url = pg_url.clone();
            move || PgJournal::open(&pg_url, JournalConfig::default()).unwrap()
        })
        .await
        .unwrap();
        journal
            .observe(&event("h", 1, 1, "run.started", "{}"))
            .await
            .unwrap();
        let reader = tokio::task::spawn_blocking(move || PgReader::open(&pg_url).unwrap())
            .await
            .unwrap();
        let id = keel_message::RunId::parse("h").unwrap();
        let (stored, events) = tokio::task::spawn_blocking(move || {
            let stored = reader.stored(&id).unwrap();
            let events = reader.read_after(&id, 0, 10).unwrap();
            (stored, events, reader)
        })
        .await
        .map(|(s, e, reader)| {
            // Dropped on a runtime thread: must not panic.
            drop(reader);
            (s, e)
        })
        .unwrap();
        assert_eq!(stored.map(|s| s.last_seq()), Some(1));
        assert_eq!(events.len(), 1);
        drop(journal);
    });
}

/// A first host that started run `x` (two events) and then lost its lock
/// session (as a broken connection would), and a second host that has
/// recovered `x` as abandoned: `(first, second)`.
fn recovered_after_lock_loss(
    pg: &TempPostgres,
    rt: &tokio::runtime::Runtime,
) -> (PgJournal, PgJournal) {
    let first = open(pg);
    rt.block_on(journal_all(
        &first,
        &[
            event("x", 1, 1, "run.started", "{}"),
            event("x", 2, 2, "turn.started", r#"{"turn":1}"#),
        ],
    ));
    admin(pg)
        .batch_execute("SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory'")
        .unwrap();
    let second = open(pg);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let report = second.recover_abandoned().unwrap();
        if !report.recovered.is_empty() {
            assert_eq!(report.recovered.len(), 1, "{:?}", report.skipped);
            return (first, second);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never recovered: {:?}",
            report.skipped
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A host whose lock session ended while it still runs is seen as gone:
/// another host recovers its run, and the first host's next event (its
/// cached state now stale) is refused as a conflict, leaving the
/// recovered run as recovery closed it.
#[test]
fn a_host_that_looked_gone_cannot_overwrite_a_recovered_run() {
    let Some(pg) = TempPostgres::start() else {
        return;
    };
    let rt = rt();
    let (first, second) = recovered_after_lock_loss(&pg, &rt);
    let got = rt.block_on(first.observe(&event("x", 3, 3, "turn.completed", r#"{"turn":1}"#)));
    assert_want("stale host", "x", 3, &got, Want::Conflict);
    let reader = second.reader().unwrap();
    let summary = reader.run_status("x").unwrap().unwrap();
    assert_eq!((summary.status, summary.last_seq), (RunStatus::Failed, 4));
    assert_eq!(lines(&reader, "x").len(), 4);
    drop(reader);
    second.close().unwrap();
    first.close().unwrap();
}

/// A run recovered and then deleted while its first host, seen as gone,
/// still writes: that host's next event is refused as a gap from nothing
/// stored, and the run is not revived with a hole.
#[test]
fn a_stale_host_does_not_revive_a_deleted_run() {
    use keel_observers::deletion::{DeletionRequest, DeletionTarget, Who};
    let Some(pg) = TempPostgres::start() else {
        return;
    };
    let rt = rt();
    let (first, second) = recovered_after_lock_loss(&pg, &rt);
    let who = Who::parse("ops").unwrap();
    let x = keel_message::RunId::parse("x").unwrap();
    second
        .delete_runs(&DeletionRequest::new(DeletionTarget::Run(x), who))
        .unwrap();
    let got = rt.block_on(first.observe(&event("x", 3, 3, "turn.completed", r#"{"turn":1}"#)));
    assert_want("stale host", "x", 3, &got, Want::Gap(0));
    let reader = second.reader().unwrap();
    assert_eq!(reader.run_status("x").unwrap(), None);
    assert!(lines(&reader, "x").is_empty());
    drop(reader);
    second.close().unwrap();
    first.close().unwrap();
}
