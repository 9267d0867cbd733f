#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Compaction through the surfaces (issue #36): `keel compact RUN_ID
//! --scenario FILE`, `POST /v1/runs/{id}/compact`, and the storage of a
//! conversation of 200 continued runs that compacts as it goes (linear in
//! its new input; `keel export` of the last run imports on an empty store).

mod common;

use common::daemon::{Serve, client, get_text, post, wait_status};
use common::{Sandbox, keel, rebuilt_history, text, verify_summary};
use keel_engine::{ContextPolicy, Engine, EngineLimits, RunRequest};
use keel_message::{Limits, Message, ModelName, RunId};
use keel_observers::conversation;
use keel_observers::{JournalConfig, JournalReader, RequiredObserver, SqliteJournal};
use keel_stream::FinishReason;
use keel_testkit::{ScriptItem, ScriptedProvider};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// A scenario whose model calls `get_weather` for `city`, then answers.
fn weather(run_id: &str, city: &str) -> String {
    let question = format!("Weather in {city}? {}", "Please be thorough. ".repeat(20));
    common::weather_scenario(run_id, city, &question, &format!("{city}: 3 °C."))
}

/// A scenario whose model answers with a short summary.
fn summarizer(run_id: &str) -> String {
    json!({
        "run_id": run_id,
        "model": "scripted-1",
        "messages": [{"role": "user", "text": "unused"}],
        "limits": {"context": {"window_tokens": 100000, "keep_turns": 2}},
        "provider": {"type": "scripted", "calls": [
            [{"text": "Asked about Oslo: 3 °C."}, {"complete": {"finish": "stop"}}]
        ]}
    })
    .to_string()
}

fn kinds(lines: &str) -> Vec<String> {
    lines
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["kind"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

#[test]
fn keel_compact_summarizes_a_conversation_that_then_continues() {
    let sb = Sandbox::new();
    let out = sb.run(&sb.write("one.json", &weather("w1", "Oslo")), &[]);
    assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
    let second = sb.write("two.json", &weather("w2", "Bergen"));
    let out = sb.run(&second, &["--continue", "w1", "--message", "And Bergen?"]);
    assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
    let before = rebuilt_history(&sb.db(), "w2");
    // Without --scenario: bad input naming it.
    let out = keel()
        .args(["compact", "w2"])
        .args(sb.db_args())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).1.contains("--scenario"), "{:?}", text(&out));
    // An unknown run: bad input.
    let file = sb.write("compact.json", &summarizer("w3"));
    let path = file.display().to_string();
    let out = keel()
        .args(["compact", "nope", "--scenario", &path])
        .args(sb.db_args())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{:?}", text(&out));
    let out = keel()
        .args(["compact", "w2", "--scenario", &path])
        .args(sb.db_args())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
    assert!(
        verify_summary(&sb.db()).contains("3 run(s)"),
        "{}",
        verify_summary(&sb.db())
    );
    let lines = sb.ok(&["events", "w3"]);
    let kinds = kinds(&lines);
    assert!(kinds.contains(&"context.compacted".to_owned()), "{kinds:?}");
    assert!(!kinds.contains(&"tool.started".to_owned()), "{kinds:?}");
    // The compacted history: the summary in place of the first run's
    // four messages and the second's question, then the last two turns
    // (the call with its result, the answer) verbatim.
    let after = rebuilt_history(&sb.db(), "w3");
    assert_eq!(after.len(), before.len() - 4, "{after:?}");
    assert_eq!(after[0]["id"], "w3.t1.s");
    assert_eq!(after[0]["parts"][0]["text"], "Asked about Oslo: 3 °C.");
    assert_eq!(after[1..], before[5..]);
    // The conversation continues from the summary.
    let fourth = sb.write("four.json", &weather("w4", "Tromsø"));
    let out = sb.run(&fourth, &["--continue", "w3", "--message", "And Tromsø?"]);
    assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
    let last = rebuilt_history(&sb.db(), "w4");
    assert_eq!(last[..after.len()], after[..]);
    assert!(verify_summary(&sb.db()).contains("4 run(s)"));
}

#[tokio::test]
async fn post_compact_starts_a_compaction_only_continuation() {
    let d = Serve::new().start();
    let c = client();
    let r = post(&c, &d, "/v1/runs", weather("h1", "Oslo")).await;
    assert_eq!(r.status(), 201);
    wait_status(&c, &d, "h1", "completed").await;
    let r = post(&c, &d, "/v1/runs/h1/messages", weather("h2", "Bergen")).await;
    assert_eq!(r.status(), 201);
    wait_status(&c, &d, "h2", "completed").await;
    let r = post(&c, &d, "/v1/runs/h2/compact", summarizer("h3")).await;
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["run_id"], "h3", "{body}");
    wait_status(&c, &d, "h3", "completed").await;
    let lines = get_text(&c, &d, "/v1/runs/h3/events?format=jsonl").await;
    assert!(
        kinds(&lines).contains(&"context.compacted".to_owned()),
        "{lines}"
    );
    assert_eq!(rebuilt_history(&d.db, "h3")[0]["id"], "h3.t1.s");
    // An unknown run is refused as for /messages.
    let r = post(&c, &d, "/v1/runs/nope/compact", summarizer("h4")).await;
    assert_eq!(r.status(), 404);
}

/// The bytes of one continued run's new message.
const MESSAGE_BYTES: usize = 2 * 1024;

/// What one run stores beyond its new message: `run.started`, the
/// reference, the turn, the model call and its answer, and, when it
/// compacts, the compaction call and its event (both holding the short
/// summary), the terminal.
const RUN_OVERHEAD_BYTES: usize = 3 * 1024;

/// A model that writes a short summary when asked to compact, and answers
/// "ok" otherwise: each run's first call is the compaction when there is
/// one, so the script is the same for every run.
fn model() -> Arc<ScriptedProvider> {
    let summary = "The user sent numbered notes; nothing to act on yet. ".repeat(3);
    Arc::new(ScriptedProvider::new(vec![
        vec![
            ScriptItem::text(summary),
            ScriptItem::complete(FinishReason::Stop),
        ],
        vec![
            ScriptItem::text("ok"),
            ScriptItem::complete(FinishReason::Stop),
        ],
    ]))
}

fn stored_bytes(db: &Path, run: Option<&str>) -> usize {
    let conn = rusqlite::Connection::open(db).unwrap();
    let bytes: i64 = match run {
        Some(run) => conn.query_row(
            "SELECT COALESCE(SUM(LENGTH(line)), 0) FROM events WHERE run_id = ?1",
            [run],
            |r| r.get(0),
        ),
        None => conn.query_row(
            "SELECT COALESCE(SUM(LENGTH(line)), 0) FROM events",
            [],
            |r| r.get(0),
        ),
    }
    .unwrap();
    usize::try_from(bytes).unwrap()
}

/// A first run and 199 continuations, each adding one 2 KB message,
/// under a window of 4000 tokens: the bytes each run stored, and how many
/// compacted.
async fn chain(db: &Path) -> (Vec<usize>, usize) {
    let journal = Arc::new(SqliteJournal::open(db, JournalConfig::default()).unwrap());
    let engine = Engine::builder()
        .provider("scripted", model())
        .required_observer(journal.clone() as Arc<dyn RequiredObserver>)
        .limits(EngineLimits {
            context: Some(ContextPolicy::new(4_000)),
            ..EngineLimits::default()
        })
        .build()
        .unwrap();
    let model_name = ModelName::parse("scripted-1").unwrap();
    let limits = Limits::default();
    let mut per_run = Vec::new();
    let mut compactions = 0;
    for n in 0..200 {
        let run = RunId::parse(&format!("s{n}")).unwrap();
        let note = format!("{n:05} {}", "n".repeat(MESSAGE_BYTES - 6));
        let message = conversation::user_message(&note, &limits).unwrap();
        let request = if n == 0 {
            RunRequest::new(run.clone(), model_name.clone(), vec![message])
        } else {
            let reader = JournalReader::open(db).unwrap();
            let previous = format!("s{}", n - 1);
            let c =
                conversation::continuation(&reader, &previous, &[message], &run, &limits).unwrap();
            RunRequest::new(run.clone(), model_name.clone(), c.history)
                .inherits(c.reference, c.inherited)
        };
        let report = engine
            .start(request.provider(model()))
            .unwrap()
            .join_report()
            .await;
        assert!(
            matches!(report.outcome(), keel_engine::RunOutcome::Completed { .. }),
            "run {n}: {:?}",
            report.outcome()
        );
        let lines = JournalReader::open(db)
            .unwrap()
            .all_lines_after(run.as_str(), 0)
            .unwrap();
        compactions += lines
            .iter()
            .filter(|l| l.contains("\"context.compacted\""))
            .count();
        per_run.push(stored_bytes(db, Some(run.as_str())));
        let _: &[Message] = report.history();
    }
    engine.shutdown(Duration::from_secs(5)).await;
    drop(engine);
    let mut journal = journal;
    let until = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match Arc::try_unwrap(journal) {
            Ok(owned) => break owned.close().unwrap(),
            Err(shared) if std::time::Instant::now() < until => {
                journal = shared;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(_) => panic!("the engine still holds the journal after 10 s"),
        }
    }
    (per_run, compactions)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_continued_runs_with_compactions_store_linearly() {
    let sb = Sandbox::new();
    let db = sb.db();
    let (per_run, compactions) = chain(&db).await;
    // The window holds about seven 2 KB messages: the conversation
    // compacts every few runs.
    assert!(compactions >= 30, "{compactions} compactions");
    for (n, bytes) in per_run.iter().enumerate() {
        assert!(
            *bytes <= MESSAGE_BYTES + RUN_OVERHEAD_BYTES,
            "run {n} stored {bytes} bytes"
        );
    }
    let lines = stored_bytes(&db, None);
    assert!(
        lines <= 200 * (MESSAGE_BYTES + RUN_OVERHEAD_BYTES),
        "{lines} bytes of lines"
    );
    println!(
        "200 continued runs of {MESSAGE_BYTES} B with {compactions} compactions: {lines} B of lines ({} B per run, largest run {} B)",
        lines / 200,
        per_run.iter().max().unwrap()
    );
    assert!(
        verify_summary(&db).contains("200 run(s)"),
        "{}",
        verify_summary(&db)
    );
    // The last run's history is bounded by the window, not by the 200
    // messages the conversation took in.
    let last = rebuilt_history(&db, "s199");
    let bytes: usize = last.iter().map(|m| m.to_string().len()).sum();
    assert!(bytes < 4_000 * 4, "{bytes} bytes of history");
    // Export of the last run (its chain of references) imports on an
    // empty store and rebuilds to the same history.
    let file = sb.path("s199.jsonl");
    sb.ok(&["export", "s199", "-o", &file.display().to_string()]);
    let empty = sb.path("empty.db");
    let out = keel()
        .args([
            "import",
            &file.display().to_string(),
            "--db",
            &empty.display().to_string(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
    assert!(
        verify_summary(&empty).contains("200 run(s)"),
        "{}",
        verify_summary(&empty)
    );
    assert_eq!(rebuilt_history(&empty, "s199"), last);
}
