#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `keel serve`'s event streams follow a live log with durable events only
//! by default (issue #20): a client is never sent an event a crash could
//! take back, so its cursor is valid on the restarted daemon.
//! `?durability=committed` opts out; any other value is a 400 problem.

mod common;

use common::daemon::{Daemon, Serve, client, create, get, wait_status};
use common::sse::{Sse, read_sse};
use futures_util::StreamExt;
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;

/// A scripted run of `items` (then a stop), as `keel serve` takes it.
fn scripted(run_id: &str, mut items: Vec<serde_json::Value>) -> String {
    items.push(json!({"complete": {"finish": "stop"}}));
    json!({
        "run_id": run_id,
        "model": "scripted-1",
        "messages": [{"role": "user", "text": "go"}],
        "provider": {"type": "scripted", "calls": [items]}
    })
    .to_string()
}

/// A scripted run: a pause of `delay_ms` (so clients attach before it
/// streams), then `deltas` text deltas, then stop.
fn deltas(run_id: &str, deltas: usize, delay_ms: u64) -> String {
    let mut items = vec![json!({"delay_ms": delay_ms})];
    items.extend((0..deltas).map(|i| json!({"text": format!("t{i} ")})));
    scripted(run_id, items)
}

/// Like [`deltas`], each delta after a pause of `gap_ms`: a run that is
/// still streaming when the test kills the daemon.
fn slow_deltas(run_id: &str, deltas: usize, gap_ms: u64) -> String {
    let items = (0..deltas)
        .flat_map(|i| {
            [
                json!({"delay_ms": gap_ms}),
                json!({"text": format!("t{i} ")}),
            ]
        })
        .collect();
    scripted(run_id, items)
}

fn ids(msgs: &[Sse]) -> Vec<u64> {
    msgs.iter().filter_map(|m| m.id).collect()
}

/// The run's events, 1 to the terminal, each once, in order, each `data`
/// the line of its `id`.
fn assert_whole_run(msgs: &[Sse], what: &str) {
    let seqs = ids(msgs);
    let want: Vec<u64> = (1..=seqs.len() as u64).collect();
    assert_eq!(seqs, want, "{what}: a gap, a duplicate or a reordering");
    assert_eq!(msgs.first().unwrap().event, "run.started", "{what}");
    assert_eq!(msgs.last().unwrap().event, "run.completed", "{what}");
    for m in msgs {
        let v: Value = serde_json::from_str(&m.data).unwrap();
        assert_eq!(v["seq"].as_u64(), m.id, "{what}");
        assert_eq!(v["kind"], m.event.as_str(), "{what}");
    }
}

async fn stream(c: &reqwest::Client, d: &Daemon, run: &str, query: &str) -> Vec<Sse> {
    let r = get(c, d, &format!("/v1/runs/{run}/events{query}")).await;
    assert_eq!(r.status(), 200, "{query}");
    read_sse(r, |_| false).await
}

#[tokio::test]
async fn durable_and_committed_streams_both_deliver_the_whole_run_in_order() {
    let d = Serve::new().start();
    let c = client();
    let run = create(&c, &d, deltas("run_both", 300, 300)).await;
    // Both attach while the run waits before its first delta.
    let (durable, explicit, committed) = tokio::join!(
        stream(&c, &d, &run, ""),
        stream(&c, &d, &run, "?durability=durable"),
        stream(&c, &d, &run, "?durability=committed"),
    );
    assert_whole_run(&durable, "default");
    assert_whole_run(&explicit, "durability=durable");
    assert_whole_run(&committed, "durability=committed");
    assert_eq!(durable.len(), 300 + 7);
    let lines = |m: &[Sse]| m.iter().map(|m| m.data.clone()).collect::<Vec<_>>();
    assert_eq!(lines(&durable), lines(&committed));
    assert_eq!(lines(&durable), lines(&explicit));

    // Finished: served from the journal, the same whatever the durability.
    wait_status(&c, &d, &run, "completed").await;
    for query in ["", "?durability=committed", "?durability=durable"] {
        let stored = stream(&c, &d, &run, query).await;
        assert_eq!(lines(&stored), lines(&durable), "{query}");
    }
    // A resumed durable stream continues where the cursor says.
    let rest = stream(&c, &d, &run, "?after=200").await;
    assert_eq!(ids(&rest), (201..=307).collect::<Vec<u64>>());
}

#[tokio::test]
async fn an_invalid_durability_is_a_400_problem_naming_the_parameter() {
    let d = Serve::new().start();
    let c = client();
    let run = create(&c, &d, deltas("run_bad", 3, 0)).await;
    wait_status(&c, &d, &run, "completed").await;
    let long = "x".repeat(300);
    for (path, value) in [
        (format!("/v1/runs/{run}/events"), "eventually"),
        (format!("/v1/runs/{run}/events"), "Durable"),
        (format!("/v1/runs/{run}/events"), ""),
        (format!("/v1/runs/{run}/events"), long.as_str()),
        (format!("/v1/runs/{run}/events?format=jsonl&"), "none"),
        (format!("/v1/runs/{run}/agui"), "fsync"),
    ] {
        let sep = if path.ends_with('&') { "" } else { "?" };
        let r = get(&c, &d, &format!("{path}{sep}durability={value}")).await;
        assert_eq!(r.status(), 400, "{path} {value}");
        assert_eq!(
            r.headers().get("content-type").unwrap(),
            "application/problem+json"
        );
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["type"], "urn:keel:problem:invalid-request", "{v}");
        assert_eq!(v["status"], 400);
        let detail = v["detail"].as_str().unwrap();
        assert_eq!(detail, "durability is not one of durable, committed");
        assert!(!v.to_string().contains(&long[..40]), "the value is echoed");
    }
    // The allowed values, on every format and view.
    for query in [
        "events?durability=durable",
        "events?durability=committed",
        "events?format=jsonl&durability=committed",
        "events?format=jsonl&durability=durable",
        "agui?durability=committed",
    ] {
        let r = get(&c, &d, &format!("/v1/runs/{run}/{query}")).await;
        assert_eq!(r.status(), 200, "{query}");
    }
}

/// The highest seq of `run` the journal holds (0 for none).
fn stored_max(conn: &rusqlite::Connection, run: &str) -> u64 {
    conn.query_row(
        "SELECT COALESCE(MAX(seq), 0) FROM events WHERE run_id = ?1",
        [run],
        |r| r.get::<_, i64>(0),
    )
    .unwrap() as u64
}

fn read_only(db: &Path) -> rusqlite::Connection {
    rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap()
}

/// Follows `run`'s stream with `query` and, the moment each event
/// arrives, reads the journal: the events that were not stored yet.
async fn ahead_of_the_journal(d: &Daemon, run: &str, query: &str) -> (Vec<u64>, Vec<u64>) {
    let conn = read_only(&d.db);
    let r = get(&client(), d, &format!("/v1/runs/{run}/events{query}")).await;
    assert_eq!(r.status(), 200);
    let mut body = r.bytes_stream();
    let (mut seen, mut ahead, mut buf) = (Vec::new(), Vec::new(), Vec::new());
    while let Some(chunk) = body.next().await {
        buf.extend_from_slice(&chunk.unwrap());
        // Every complete `id:` line in what arrived, checked against the
        // journal now (a chunk's last event is its highest).
        let end = buf.iter().rposition(|b| *b == b'\n').map_or(0, |p| p + 1);
        let text = String::from_utf8(buf.drain(..end).collect()).unwrap();
        let arrived: Vec<u64> = text
            .lines()
            .filter_map(|l| l.strip_prefix("id: "))
            .map(|v| v.parse().unwrap())
            .collect();
        if let Some(&top) = arrived.last() {
            let stored = stored_max(&conn, run);
            if top > stored {
                ahead.extend(arrived.iter().filter(|&&s| s > stored));
            }
        }
        seen.extend(arrived);
    }
    (seen, ahead)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_event_a_default_stream_sends_is_already_in_the_journal() {
    let d = Serve::new().start();
    let c = client();
    // 2,000 deltas committed at memory speed: a committed stream runs
    // ahead of the journal's fsyncs.
    let run = create(&c, &d, deltas("run_journaled", 2000, 300)).await;
    let (seen, ahead) = ahead_of_the_journal(&d, &run, "").await;
    assert_eq!(seen, (1..=2007).collect::<Vec<u64>>());
    assert!(
        ahead.is_empty(),
        "{} events were sent before the journal held them (first {:?})",
        ahead.len(),
        ahead.first()
    );
    // The JSON Lines page of a live run stops at the watermark too.
    let run = create(&c, &d, slow_deltas("run_paged", 40, 5)).await;
    let conn = read_only(&d.db);
    loop {
        let r = get(&c, &d, &format!("/v1/runs/{run}/events?format=jsonl")).await;
        let stored = stored_max(&conn, &run);
        let latest: u64 = r.headers()["keel-latest"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        let text = r.text().await.unwrap();
        let last = text.lines().count() as u64;
        assert!(last <= stored, "page to {last}, journal to {stored}");
        assert!(
            latest <= stored,
            "Keel-Latest {latest}, journal to {stored}"
        );
        if text.contains("\"run.completed\"") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
}

#[tokio::test]
async fn a_default_cursor_resumes_on_the_restarted_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("keel.db");
    let d = Serve::new().db(&db).start();
    let c = client();
    let run = create(&c, &d, slow_deltas("run_restart", 400, 2)).await;
    let r = get(&c, &d, &format!("/v1/runs/{run}/events")).await;
    let first = read_sse(r, |m| m.id.is_some_and(|s| s >= 60)).await;
    let last = *ids(&first).last().unwrap();
    // SIGKILL mid-run: events after the durable watermark may be lost.
    d.kill();
    let d = Serve::new().db(&db).start();
    // Startup recovery closed the run; the client's cursor is valid (a
    // committed cursor could be ahead of what the journal kept: a 400).
    let r = c
        .get(d.url(&format!("/v1/runs/{run}/events")))
        .header("Last-Event-ID", last.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "cursor {last} after the restart");
    let rest = read_sse(r, |_| false).await;
    let mut all = ids(&first);
    all.extend(ids(&rest));
    assert_eq!(all, (1..=all.len() as u64).collect::<Vec<u64>>());
    assert_eq!(rest.last().unwrap().event, "run.failed");
    let v: Value = serde_json::from_str(&rest.last().unwrap().data).unwrap();
    assert_eq!(v["payload"]["cause"]["kind"], "host_lost", "{v}");
}
