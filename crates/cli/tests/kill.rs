#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `keel serve` killed with SIGKILL at random points (a seeded RNG:
//! `KEEL_TEST_SEED` replays a failure) and restarted on the same store:
//! the restart recovers every run the kill left open before it listens.
//!
//! - `fifty_kill_points_leave_no_incomplete_run`: one daemon, its own
//!   SQLite store (recovery by OS host locks). After each restart `keel
//!   verify` reports 0 incomplete, every stored run is one lifecycle-valid
//!   history (every started scope has exactly one terminal, seqs 1, 2, 3,
//!   … with none skipped or reused), a run complete before the kill is
//!   byte for byte what it was, a run left open got exactly the recovery
//!   terminals after its prefix, and a client that followed a run before
//!   the kill resumes with `Last-Event-ID` and receives the recovery
//!   terminals and then the end of the stream.
//! - `two_gateways_on_one_jetstream_recover_each_run_once`: one
//!   nats-server, two `keel serve --nats` each with its own store; one is
//!   killed at a time and restarted after a random pause while the other
//!   is up (whose sweep may recover the runs first, or race the restart).
//!   Every run ends with exactly one set of terminals in JetStream, and
//!   every store that holds it holds the same lines byte for byte.

mod common;

use common::daemon::{Daemon, Serve, client_builder, stderr_of};
use common::nats::{NatsServer, have_nats_server};
use common::{Rng, kind, sse, verify_summary};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

// ------------------------------------------------------------ the daemon

/// A `keel serve` process on port 0 over `db`, stderr appended to
/// `<db>.stderr`.
fn daemon(db: &Path, extra: &[&str]) -> Daemon {
    Serve::new().db(db).args(extra).logged().start()
}

fn client() -> reqwest::Client {
    client_builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

// ------------------------------------------------------------ the runs

/// What a posted run does.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// Text deltas with pauses between them.
    SlowText,
    /// A tool that takes a while, then a second turn.
    SlowTool,
    /// A tool that needs an approval nobody gives.
    Approval,
    /// Three quick deltas.
    Quick,
}

const KINDS: [Kind; 4] = [Kind::SlowText, Kind::SlowTool, Kind::Approval, Kind::Quick];

fn scenario(run_id: &str, kind: Kind, rng: &mut Rng) -> String {
    let stop = json!({"complete": {"finish": "stop"}});
    let (tools, calls) = match kind {
        Kind::SlowText | Kind::Quick => {
            let (n, delay) = match kind {
                Kind::SlowText => (rng.between(4, 10), rng.between(5, 40)),
                _ => (3, 0),
            };
            let mut items = Vec::new();
            for i in 0..n {
                if delay > 0 {
                    items.push(json!({"delay_ms": delay}));
                }
                items.push(json!({"text": format!("d{i} ")}));
            }
            items.push(stop.clone());
            (json!([]), json!([items]))
        }
        Kind::SlowTool | Kind::Approval => {
            let approval = matches!(kind, Kind::Approval);
            let delay = rng.between(20, 200);
            let tool = json!({
                "name": "work", "description": "slow work",
                "parameters": {"type": "object"}, "requires_approval": approval,
                "script": [{"delay_ms": delay, "ok": "done"}]
            });
            let first = json!([
                {"text": "working "},
                {"tool_call": {"call_id": "c1", "name": "work", "arguments": {}}},
                {"complete": {"finish": "tool_calls"}}
            ]);
            let second = json!([{"text": "done."}, stop.clone()]);
            (json!([tool]), json!([first, second]))
        }
    };
    json!({
        "run_id": run_id,
        "model": "scripted-1",
        "messages": [{"role": "user", "text": "go"}],
        "tools": tools,
        "provider": {"type": "scripted", "calls": calls}
    })
    .to_string()
}

/// POSTs a run; `true` once it is answered 201.
async fn post(c: &reqwest::Client, d: &str, body: String) -> bool {
    match c.post(format!("{d}/v1/runs")).body(body).send().await {
        Ok(r) => r.status() == 201,
        Err(_) => false,
    }
}

/// A client following a run: the last seq it received (0: none).
struct Follower {
    last: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

fn follow(c: &reqwest::Client, base: &str, run_id: &str) -> Follower {
    let last = Arc::new(AtomicU64::new(0));
    let (c, url, seen) = (
        c.clone(),
        format!("{base}/v1/runs/{run_id}/events"),
        Arc::clone(&last),
    );
    let task = tokio::spawn(async move {
        let Ok(r) = c.get(url).send().await else {
            return;
        };
        if r.status() != 200 {
            return;
        }
        sse::read_sse(r, |m| {
            if let Some(id) = m.id {
                seen.store(id, Ordering::SeqCst);
            }
            false
        })
        .await;
    });
    Follower { last, task }
}

// ------------------------------------------------------------ the store

/// Every run's status and lines, read directly (no daemon needed).
fn stored(db: &Path) -> BTreeMap<String, (String, Vec<String>)> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let runs: Vec<(String, String)> = conn
        .prepare("SELECT run_id, status FROM runs")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let mut lines = conn
        .prepare("SELECT line FROM events WHERE run_id = ?1 ORDER BY seq")
        .unwrap();
    runs.into_iter()
        .map(|(run, status)| {
            let l: Vec<String> = lines
                .query_map([&run], |r| r.get(0))
                .unwrap()
                .map(Result::unwrap)
                .collect();
            (run, (status, l))
        })
        .collect()
}

/// `lines` is one whole, lifecycle-valid run: seqs 1, 2, 3, …, every
/// started scope with exactly one terminal, one run terminal, last.
fn assert_whole(run_id: &str, lines: &[String]) {
    for (i, line) in lines.iter().enumerate() {
        let v: Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["seq"], i as u64 + 1, "{run_id}: seq skipped or reused");
    }
    if let Err(e) = keel_testkit::check_lifecycle_lines(lines) {
        panic!("{run_id}: {e}\n{}", lines.join("\n"));
    }
}

/// The lines past `prefix` are exactly one set of recovery terminals.
fn assert_recovery_terminals(run_id: &str, terminals: &[String]) {
    assert!(!terminals.is_empty(), "{run_id}: no recovery terminal");
    for line in terminals {
        let kind = kind(line);
        assert!(kind.ends_with(".failed"), "{run_id}: {kind} after recovery");
    }
    let last = terminals.last().unwrap();
    assert_eq!(kind(last), "run.failed", "{run_id}");
    assert!(last.contains("host_lost"), "{run_id}: {last}");
}

/// Resumes `run_id` after `last` with `Last-Event-ID` (and a stale
/// `?after=0` the header must win over): the seqs after `last`, to the
/// run's terminal, then the end of the stream.
async fn resume(c: &reqwest::Client, d: &Daemon, run_id: &str, last: u64, want: &[String]) {
    let r = c
        .get(d.url(&format!("/v1/runs/{run_id}/events?after=0")))
        .header("Last-Event-ID", last.to_string())
        .send()
        .await
        .unwrap();
    if last as usize == want.len() {
        // The follower had the terminal: 204, so an EventSource stops.
        assert_eq!(r.status(), 204, "{run_id}: resume at the terminal {last}");
        return;
    }
    assert_eq!(r.status(), 200, "{run_id}: resume after {last}");
    let got = tokio::time::timeout(Duration::from_secs(10), sse::read_sse(r, |_| false))
        .await
        .unwrap_or_else(|_| panic!("{run_id}: the resumed stream did not end"));
    let lines: Vec<&str> = got.iter().map(|m| m.data.as_str()).collect();
    let want: Vec<&str> = want[last as usize..].iter().map(String::as_str).collect();
    assert_eq!(lines, want, "{run_id}: resumed after {last}");
}

// ------------------------------------------------------------ one daemon

/// What was posted before a kill, and what the follower had.
struct Posted {
    /// Runs answered 201.
    accepted: BTreeSet<String>,
    /// The followed run.
    followed: String,
    /// The last seq the follower received (0: none).
    last: u64,
}

/// Posts 2 to 4 runs to `d` (one followed by a client as soon as it is
/// answered 201) and SIGKILLs `d` 0 to 350 ms after the first post.
async fn post_and_kill(i: u64, d: Daemon, c: &reqwest::Client, rng: &mut Rng) -> Posted {
    let bodies: Vec<(String, String)> = (0..rng.between(2, 4))
        .map(|j| {
            let id = format!("k{i}_r{j}");
            let body = scenario(&id, KINDS[rng.between(0, 3) as usize], rng);
            (id, body)
        })
        .collect();
    let followed = bodies[rng.between(0, bodies.len() as u64 - 1) as usize]
        .0
        .clone();
    let poster = {
        let (c, base, followed) = (c.clone(), d.base.clone(), followed.clone());
        tokio::spawn(async move {
            let mut accepted = BTreeSet::new();
            let mut follower = None;
            for (id, body) in bodies {
                if post(&c, &base, body).await {
                    if id == followed {
                        follower = Some(follow(&c, &base, &id));
                    }
                    accepted.insert(id);
                }
            }
            (accepted, follower)
        })
    };
    tokio::time::sleep(Duration::from_millis(rng.between(0, 350))).await;
    d.kill();
    let (accepted, follower) = poster.await.unwrap();
    let last = match follower {
        Some(f) => {
            let _ = tokio::time::timeout(Duration::from_secs(5), f.task).await;
            f.last.load(Ordering::SeqCst)
        }
        None => 0,
    };
    Posted {
        accepted,
        followed,
        last,
    }
}

type Stored = BTreeMap<String, (String, Vec<String>)>;

/// After the restart: every run ended and whole; a run complete before is
/// unchanged; a run left open is its prefix plus one set of recovery
/// terminals, named once on stderr.
fn check_recovered(db: &Path, before: &Stored, after: &Stored) {
    assert!(
        verify_summary(db).contains(" 0 incomplete"),
        "{}",
        verify_summary(db)
    );
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>()
    );
    let log = stderr_of(db);
    for (id, (status, lines)) in after {
        assert_ne!(status, "running", "{id}");
        assert_whole(id, lines);
        let (was, prefix) = &before[id];
        assert_eq!(
            &lines[..prefix.len()],
            &prefix[..],
            "{id}: its prefix changed"
        );
        if was == "running" {
            assert_recovery_terminals(id, &lines[prefix.len()..]);
            let n = log.matches(&format!("keel: recovered {id}:")).count();
            assert_eq!(n, 1, "{id}: one recovery line on stderr:\n{log}");
        } else {
            assert_eq!(lines, prefix, "{id}: a finished run changed");
        }
    }
}

/// One kill point: post runs, follow one, SIGKILL, restart, check.
async fn one_kill_point(i: u64, rng: &mut Rng) -> Point {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("keel.db");
    let c = client();
    let posted = post_and_kill(i, daemon(&db, &[]), &c, rng).await;
    let before = stored(&db);
    let d = daemon(&db, &[]);
    let after = stored(&db);
    check_recovered(&db, &before, &after);
    let was_open = before
        .get(&posted.followed)
        .is_some_and(|(status, _)| status == "running");
    if posted.last > 0 {
        let lines = &after[&posted.followed].1;
        resume(&c, &d, &posted.followed, posted.last, lines).await;
    }
    let restart = d.ready_in;
    d.kill();
    Point {
        open: before.values().filter(|(s, _)| s == "running").count(),
        restart,
        // A 201 is sent once the journal holds `run.started`, so no kill
        // can lose an accepted run.
        lost: posted
            .accepted
            .iter()
            .filter(|id| !after.contains_key(*id))
            .count(),
        resumed_through_recovery: posted.last > 0 && was_open,
    }
}

/// What one kill point saw.
struct Point {
    /// Runs the kill left open (all recovered).
    open: usize,
    /// From spawn to listening, recovery included.
    restart: Duration,
    /// Runs answered 201 that never reached the journal.
    lost: usize,
    /// The follower resumed a run the restart recovered.
    resumed_through_recovery: bool,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_kill_points_leave_no_incomplete_run() {
    let points: u64 = std::env::var("KEEL_KILL_POINTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let mut rng = Rng::from_env("kill");
    let started = Instant::now();
    let (mut open, mut with_open, mut lost, mut followed) = (0, 0, 0, 0);
    let (mut slowest, mut total) = (Duration::ZERO, Duration::ZERO);
    for i in 0..points {
        let p = one_kill_point(i, &mut rng).await;
        open += p.open;
        with_open += usize::from(p.open > 0);
        lost += p.lost;
        followed += usize::from(p.resumed_through_recovery);
        slowest = slowest.max(p.restart);
        total += p.restart;
    }
    println!(
        "{points} kill points in {:.1} s: {open} run(s) left open at {with_open} of them, all recovered; {followed} follower(s) resumed through a recovered run; restart to listening (recovery included) mean {} ms, max {} ms; {lost} run(s) answered 201 but never journaled",
        started.elapsed().as_secs_f64(),
        (total / points as u32).as_millis(),
        slowest.as_millis()
    );
    assert_eq!(lost, 0, "runs answered 201 but never journaled");
}

// ------------------------------------------------------------ two gateways

/// The heartbeat TTL of this test (the bucket is created before the
/// gateways start, so they use it instead of the 4 s default).
const TTL: Duration = Duration::from_secs(1);

/// Every message on `run_id`'s subject, raw, in stream order (a
/// duplicate or a second set of terminals would show here).
async fn stream_lines(h: &keel_observers::JetStreamHandle, run_id: &str) -> Vec<String> {
    let stream = h.context().get_stream("KEEL_EVENTS").await.unwrap();
    let subject = h.config().subject(run_id);
    let mut lines = Vec::new();
    let mut next = 1;
    while let Ok(m) = stream
        .get_first_raw_message_by_subject(&subject, next)
        .await
    {
        lines.push(String::from_utf8(m.payload.to_vec()).unwrap());
        next = m.sequence + 1;
    }
    lines
}

/// One gateway: its store, and the process while it runs.
struct Gateway {
    db: PathBuf,
    daemon: Option<Daemon>,
    /// Runs posted to it (answered 201).
    runs: BTreeSet<String>,
}

impl Gateway {
    fn base(&self) -> String {
        self.daemon.as_ref().unwrap().base.clone()
    }
}

/// Checks every run posted so far: in the stream, one history with at
/// most one run terminal and, once ended, every scope closed exactly once
/// (one set of recovery terminals for a recovered run); every store that
/// holds it holds the same lines; an open run is live on its gateway.
async fn check_all(h: &keel_observers::JetStreamHandle, gateways: &[Gateway], c: &reqwest::Client) {
    for g in gateways {
        for run_id in &g.runs {
            let until = Instant::now() + Duration::from_secs(5);
            loop {
                let stream = stream_lines(h, run_id).await;
                let ended = stream.last().is_some_and(|l| {
                    matches!(
                        kind(l).as_str(),
                        "run.completed" | "run.failed" | "run.cancelled"
                    )
                });
                let local = stored(&g.db).remove(run_id).map(|(_, l)| l);
                let agree = local.as_ref() == Some(&stream);
                if ended && agree {
                    assert_whole(run_id, &stream);
                    let run_ends = stream.iter().filter(|l| kind(l) == "run.failed").count();
                    assert!(run_ends <= 1, "{run_id}: two sets of terminals");
                    break;
                }
                if !ended {
                    // Open in the stream: only while its gateway runs it.
                    let live: Value = c
                        .get(format!("{}/v1/runs/{run_id}", g.base()))
                        .send()
                        .await
                        .unwrap()
                        .json()
                        .await
                        .unwrap();
                    if live["live"] == true {
                        break;
                    }
                }
                assert!(
                    Instant::now() < until,
                    "{run_id}: stream and store disagree or the run was left open\nstream: {stream:#?}\nstore: {local:#?}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_on_one_jetstream_recover_each_run_once() {
    if !have_nats_server() {
        assert!(
            std::env::var_os("CI").is_none(),
            "nats-server not on PATH in CI"
        );
        return;
    }
    let server = NatsServer::start();
    const KILLS: u64 = 10;
    let url = server.url();
    let h = keel_observers::JetStreamHandle::connect(keel_observers::JetStreamConfig::new(&url))
        .await
        .unwrap();
    let ownership = keel_observers::Ownership::open_with_ttl(&h, TTL)
        .await
        .unwrap();
    assert_eq!(ownership.host_ttl(), TTL);
    let mut rng = Rng::from_env("kill-nats");
    let dir = tempfile::tempdir().unwrap();
    let args = ["--nats", url.as_str()];
    let mut gateways: Vec<Gateway> = (0..2)
        .map(|g| {
            let db = dir.path().join(format!("g{g}.db"));
            Gateway {
                daemon: Some(daemon(&db, &args)),
                db,
                runs: BTreeSet::new(),
            }
        })
        .collect();
    let c = client();
    let started = Instant::now();
    let mut restarts = Vec::new();
    for i in 0..KILLS {
        for (g, gateway) in gateways.iter_mut().enumerate() {
            for j in 0..rng.between(1, 3) {
                let id = format!("n{i}_g{g}_r{j}");
                let body = scenario(&id, KINDS[rng.between(0, 3) as usize], &mut rng);
                if post(&c, &gateway.base(), body).await {
                    gateway.runs.insert(id);
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.between(0, 300))).await;
        let victim = rng.between(0, 1) as usize;
        gateways[victim].daemon.take().unwrap().kill();
        // Short: the restart recovers; long: the other's sweep does first
        // (grace of 2 TTLs after it finds the owner gone); between: a race.
        let pause = if rng.between(0, 1) == 0 {
            rng.between(0, 500)
        } else {
            rng.between(2500, 4000)
        };
        tokio::time::sleep(Duration::from_millis(pause)).await;
        let restarted = daemon(&gateways[victim].db, &args);
        restarts.push(restarted.ready_in);
        gateways[victim].daemon = Some(restarted);
        let summary = verify_summary(&gateways[victim].db);
        assert!(summary.contains(" 0 incomplete"), "g{victim}: {summary}");
        check_all(&h, &gateways, &c).await;
    }
    let logs: String = gateways.iter().map(|g| stderr_of(&g.db)).collect();
    let by_restart = logs.matches(" in JetStream: ").count();
    let by_sweep = logs.matches(" in JetStream (abandoned by host").count();
    let copied = logs
        .matches("closed in JetStream by another gateway")
        .count();
    assert!(!logs.contains("not recovered"), "{logs}");
    let runs: usize = gateways.iter().map(|g| g.runs.len()).sum();
    println!(
        "{KILLS} kill points, {runs} runs in {:.1} s: {by_restart} recovered by the restarted gateway, {by_sweep} by the other's sweep ({copied} of those copied back at the restart); restart to listening (recovery, waiting out the dead host's heartbeat, included) {:?}",
        started.elapsed().as_secs_f64(),
        restarts.iter().map(|d| d.as_millis()).collect::<Vec<_>>()
    );
}
