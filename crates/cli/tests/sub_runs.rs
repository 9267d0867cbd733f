#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Sub-runs end to end, through the real `keel` binary (issue #37): a
//! scenario's `agent` tools start child runs in the same engine.
//!
//! - `three_children_end_in_three_matching_tool_terminals`: `keel run
//!   examples/delegate.json`: three sub-agents in parallel, one completes,
//!   one fails (its provider refuses), one is cancelled by its own
//!   `timeout_ms`; the parent ends with exactly the three matching tool
//!   terminals, each naming its child (`sub_run`), the failed one with the
//!   child's cause, and `keel verify` is clean on the four runs.
//! - `cancelling_the_parent_closes_every_child_first`: a tree of three
//!   levels under `keel serve`, the root cancelled with `POST
//!   /v1/runs/{id}/cancel`: every child's run terminal is committed (its
//!   `ts`, the commit time in µs) before its parent's tool terminal,
//!   innermost first, and the daemon lists no live run afterwards.
//! - `sigkill_mid_delegation_recovers_the_whole_tree`: `keel serve`
//!   SIGKILLed at seeded random points of a delegation (`KEEL_TEST_SEED`
//!   replays, `KEEL_SUB_KILL_POINTS` sets how many, default 24) and
//!   restarted on the same store: every run of the tree is closed (a child
//!   before its parent's tool), the parent's open agent calls are
//!   `uncertain`, the links hold and `keel verify` (which checks them) is
//!   clean.
//! - `a_posted_agent_needs_its_provider_allowed`: a posted scenario whose
//!   nested agent names a network provider the operator did not allow is
//!   403 before anything runs.
#![cfg(unix)]

mod common;

use common::daemon::{Daemon, Serve, cancel, client, create, get_json, post, wait_status};
use common::{Rng, Sandbox, example, verify_summary};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

// ------------------------------------------------------------ the store

/// One stored run: its status and its events, in seq order.
#[derive(Debug, Clone)]
struct Run {
    status: String,
    events: Vec<Value>,
    lines: Vec<String>,
}

impl Run {
    /// `run.started`'s `parent`: `(run_id, call_id)`.
    fn parent(&self) -> Option<(String, String)> {
        let p = &self.events.first()?["payload"]["parent"];
        Some((
            p["run_id"].as_str()?.to_owned(),
            p["call_id"].as_str()?.to_owned(),
        ))
    }

    /// The events of `kind`.
    fn of<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.events.iter().filter(move |e| e["kind"] == kind)
    }

    /// The child each call started (`tool.sub_run`), by call id.
    fn sub_runs(&self) -> BTreeMap<String, String> {
        self.of("tool.sub_run")
            .map(|e| {
                let p = &e["payload"];
                (
                    p["call_id"].as_str().unwrap().to_owned(),
                    p["run_id"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    }

    /// Every tool terminal, by call id (a second one for a call panics).
    fn tool_terminals(&self) -> BTreeMap<String, Value> {
        let mut out = BTreeMap::new();
        for e in &self.events {
            let kind = e["kind"].as_str().unwrap();
            if matches!(kind, "tool.completed" | "tool.failed" | "tool.cancelled") {
                let call = e["payload"]["call_id"].as_str().unwrap().to_owned();
                assert!(
                    out.insert(call.clone(), e.clone()).is_none(),
                    "two terminals for {call}"
                );
            }
        }
        out
    }

    /// The run's terminal event.
    fn terminal(&self) -> &Value {
        let last = self.events.last().unwrap();
        let kind = last["kind"].as_str().unwrap();
        assert!(
            matches!(kind, "run.completed" | "run.failed" | "run.cancelled"),
            "the last event is {kind}"
        );
        last
    }
}

/// Every stored run, read directly (no daemon needed).
fn stored(db: &Path) -> BTreeMap<String, Run> {
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
            let lines: Vec<String> = lines
                .query_map([&run], |r| r.get(0))
                .unwrap()
                .map(Result::unwrap)
                .collect();
            let events = lines
                .iter()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            (
                run,
                Run {
                    status,
                    events,
                    lines,
                },
            )
        })
        .collect()
}

/// The one run without a parent.
fn root(runs: &BTreeMap<String, Run>) -> (&String, &Run) {
    let roots: Vec<_> = runs.iter().filter(|(_, r)| r.parent().is_none()).collect();
    assert_eq!(roots.len(), 1, "one root: {:?}", runs.keys());
    roots[0]
}

fn ts(event: &Value) -> u64 {
    event["ts"].as_u64().unwrap()
}

/// Every link of the tree, both ways: a child's `parent` names a stored
/// run with that call and a `tool.sub_run` naming the child; every
/// `tool.sub_run` names a stored child pointing back (or the host died
/// between the link and the child's start: the call is `host_lost`).
/// Returns (parent, call, child) for every child that started.
fn check_links(runs: &BTreeMap<String, Run>) -> Vec<(String, String, String)> {
    let mut links = Vec::new();
    for (id, run) in runs {
        if let Some((parent, call)) = run.parent() {
            let p = runs
                .get(&parent)
                .unwrap_or_else(|| panic!("{id}: parent {parent} not stored"));
            assert!(
                p.of("tool.started")
                    .any(|e| e["payload"]["call_id"] == call),
                "{id}: {parent} has no call {call}"
            );
            assert_eq!(p.sub_runs().get(&call), Some(id), "{id}: no tool.sub_run");
            links.push((parent, call, id.clone()));
        }
        for (call, child) in run.sub_runs() {
            match runs.get(&child) {
                Some(c) => assert_eq!(c.parent(), Some((id.clone(), call.clone())), "{child}"),
                None => {
                    // Recovery's terminal names the rule `run.host_lost`.
                    let t = &run.tool_terminals()[&call];
                    assert_eq!(t["kind"], "tool.failed", "{id} {call}: {t}");
                    assert!(t.to_string().contains("host_lost"), "{id} {call}: {t}");
                }
            }
        }
    }
    links
}

// ------------------------------------------------------------ three children

#[test]
fn three_children_end_in_three_matching_tool_terminals() {
    let sb = Sandbox::new();
    let out = sb.run(&example("delegate.json"), &[]);
    let (stdout, stderr) = common::text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let runs = stored(&sb.db());
    assert_eq!(runs.len(), 4, "{:?}", runs.keys());
    let (root_id, parent) = root(&runs);
    assert_eq!(parent.terminal()["kind"], "run.completed");
    let terminals = parent.tool_terminals();
    assert_eq!(parent.of("tool.started").count(), 3);
    assert_eq!(terminals.len(), 3, "{terminals:#?}");
    let children = parent.sub_runs();
    assert_eq!(children.len(), 3);
    let want = [
        ("c1", "tool.completed", "run.completed"),
        ("c2", "tool.failed", "run.failed"),
        ("c3", "tool.cancelled", "run.cancelled"),
    ];
    for (call, tool_kind, run_kind) in want {
        let child_id = &children[call];
        let child = &runs[child_id];
        assert_eq!(child.parent(), Some((root_id.clone(), call.to_owned())));
        let end = child.terminal();
        assert_eq!(end["kind"], run_kind, "{call}");
        let t = &terminals[call];
        assert_eq!(t["kind"], tool_kind, "{call}: {t}");
        assert_eq!(t["payload"]["sub_run"]["run_id"], child_id.as_str(), "{t}");
        assert!(ts(end) <= ts(t), "{call}: the child ended after its tool");
        if tool_kind != "tool.failed" {
            assert!(t["payload"]["sub_run"].get("cause").is_none(), "{t}");
        }
        match call {
            "c1" => assert_eq!(t["payload"]["output"], "Oslo is 4 °C and grey."),
            "c2" => {
                let p = &t["payload"];
                assert_eq!(p["sub_run"]["cause"], end["payload"]["cause"], "{t}");
                // The child's model call failed: its cause names it.
                assert!(p["sub_run"]["cause"]["operation_id"].is_string(), "{end}");
                let error = p["error"].as_str().unwrap();
                assert!(
                    error.contains(&format!("sub-run {child_id} failed")),
                    "{error}"
                );
                assert_eq!(p["outcome"], "uncertain");
                assert_eq!(p["retry"], "not_retryable");
            }
            _ => {}
        }
    }
    // The child's instructions, then its task.
    let researcher = &runs[&children["c1"]];
    let inputs: Vec<&Value> = researcher.of("run.input").collect();
    assert_eq!(inputs[0]["payload"]["message"]["role"], "system");
    let task = inputs.last().unwrap()["payload"]["message"].clone();
    assert_eq!(task["role"], "user");
    assert_eq!(task["parts"][0]["text"], "Weather in Oslo now?");
    check_links(&runs);
    let summary = verify_summary(&sb.db());
    assert!(
        summary.contains("4 run(s): 4 ok, 0 incomplete, 0 violations"),
        "{summary}"
    );
}

// ------------------------------------------------------------ cancellation

/// A tree of three levels that stays busy: the root calls `a` and `b`;
/// `a`'s child calls `deep`; every leaf waits 30 s.
fn busy_tree(run_id: &str) -> String {
    let waits = |text: &str| {
        json!({"type": "scripted", "calls": [[
        {"text": text}, {"delay_ms": 30000}, {"complete": {"finish": "stop"}}]]})
    };
    let call = |id: &str, name: &str| json!({"tool_call": {"call_id": id, "name": name, "arguments": {"task": "go"}}});
    let deep = json!({"name": "deep", "agent": {"model": "m", "provider": waits("deep ")}});
    let a = json!({"name": "a", "agent": {"model": "m", "tools": [deep],
        "provider": {"type": "scripted", "calls": [[call("d1", "deep"),
            {"complete": {"finish": "tool_calls"}}]]}}});
    let b = json!({"name": "b", "agent": {"model": "m", "provider": waits("b ")}});
    json!({
        "run_id": run_id, "model": "m",
        "messages": [{"role": "user", "text": "go"}],
        "tools": [a, b],
        "provider": {"type": "scripted", "calls": [[call("c1", "a"), call("c2", "b"),
            {"complete": {"finish": "tool_calls"}}]]}
    })
    .to_string()
}

/// The daemon's runs that are live (`GET /v1/runs`).
async fn live(c: &reqwest::Client, d: &Daemon) -> Vec<String> {
    let page = get_json(c, d, "/v1/runs").await;
    page["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["live"] == true)
        .map(|r| r["run_id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_the_parent_closes_every_child_first() {
    let d = Serve::new().start();
    let c = client();
    let id = create(&c, &d, busy_tree("tree_root")).await;
    // Wait until the whole tree runs: the root, a, b, deep.
    let until = Instant::now() + Duration::from_secs(20);
    while live(&c, &d).await.len() < 4 {
        assert!(
            Instant::now() < until,
            "the tree never ran: {:?}",
            live(&c, &d).await
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(cancel(&c, &d, &id).await.status(), 202);
    wait_status(&c, &d, &id, "cancelled").await;
    assert_eq!(live(&c, &d).await, Vec::<String>::new(), "runs left live");
    let page = get_json(&c, &d, "/v1/runs").await;
    let statuses: Vec<&str> = page["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["cancelled"; 4], "{page}");
    let runs = stored(&d.db);
    assert_eq!(runs.len(), 4);
    let links = check_links(&runs);
    assert_eq!(links.len(), 3, "{links:?}");
    for (parent, call, child) in &links {
        let end = runs[child].terminal();
        assert_eq!(end["kind"], "run.cancelled", "{child}");
        let t = &runs[parent].tool_terminals()[call];
        assert_eq!(t["kind"], "tool.cancelled", "{t}");
        assert_eq!(t["payload"]["sub_run"]["run_id"], child.as_str());
        // Committed first: the child's run terminal, then the tool's.
        assert!(ts(end) <= ts(t), "{child} ended after {parent}'s {call}");
    }
    // Innermost first across runs: `deep` before `a` before the root.
    let a = &runs[&runs[&id].sub_runs()["c1"]];
    let deep = &runs[&a.sub_runs()["d1"]];
    assert!(ts(deep.terminal()) <= ts(a.terminal()));
    assert!(ts(a.terminal()) <= ts(runs[&id].terminal()));
    let summary = verify_summary(&d.db);
    assert!(
        summary.contains("4 run(s): 4 ok, 0 incomplete, 0 violations"),
        "{summary}"
    );
}

// ------------------------------------------------------------ crash

/// A delegation with seeded delays: the root streams, then calls two
/// agents in parallel (`a` calls a scripted tool, then `deep`, a third
/// level), then answers. About 0.3 to 1 s in all.
fn delegation(run_id: &str, rng: &mut Rng) -> String {
    let mut delay = || json!({"delay_ms": rng.between(0, 120)});
    let stop = json!({"complete": {"finish": "stop"}});
    let tools_done = json!({"complete": {"finish": "tool_calls"}});
    let call = |id: &str, name: &str| json!({"tool_call": {"call_id": id, "name": name, "arguments": {"task": "go"}}});
    let deep = json!({"name": "deep", "agent": {"model": "m", "provider": {"type": "scripted",
        "calls": [[delay(), {"text": "deep "}, delay(), {"text": "done"}, stop]]}}});
    let work =
        json!({"name": "work", "script": [{"delay_ms": delay()["delay_ms"], "ok": "worked"}]});
    let a = json!({"name": "a", "agent": {"model": "m", "tools": [work, deep],
        "provider": {"type": "scripted", "calls": [
            [delay(), call("w1", "work"), tools_done],
            [delay(), call("d1", "deep"), tools_done],
            [delay(), {"text": "a done"}, stop]]}}});
    let b = json!({"name": "b", "agent": {"model": "m", "provider": {"type": "scripted",
        "calls": [[delay(), {"text": "b "}, delay(), {"text": "done"}, stop]]}}});
    json!({
        "run_id": run_id, "model": "m",
        "messages": [{"role": "user", "text": "go"}],
        "tools": [a, b],
        "provider": {"type": "scripted", "calls": [
            [delay(), {"text": "delegating"}, call("c1", "a"), call("c2", "b"), tools_done],
            [delay(), {"text": "all done"}, stop]]}
    })
    .to_string()
}

/// What one kill point left and what the restart made of it.
#[derive(Default)]
struct Point {
    /// Runs of the tree stored before the restart.
    runs: usize,
    /// Of those, left open by the kill (all recovered).
    open: usize,
    /// Agent calls of a parent left open (all made `uncertain`).
    uncertain: usize,
}

/// After the restart: every run closed and whole, the ones left open
/// closed as `host_lost` after their prefix, each open agent call
/// `uncertain` and closed after its child, the links intact.
fn check_recovered(before: &BTreeMap<String, Run>, after: &BTreeMap<String, Run>) -> Point {
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>(),
        "the restart lost or made runs"
    );
    let mut point = Point {
        runs: after.len(),
        ..Point::default()
    };
    for (id, run) in after {
        assert_ne!(run.status, "running", "{id}");
        if let Err(e) = keel_testkit::check_lifecycle_lines(&run.lines) {
            panic!("{id}: {e}\n{}", run.lines.join("\n"));
        }
        let was = &before[id];
        assert_eq!(
            run.lines[..was.lines.len()],
            was.lines[..],
            "{id}: prefix changed"
        );
        if was.status != "running" {
            assert_eq!(run.lines, was.lines, "{id}: a finished run changed");
            continue;
        }
        point.open += 1;
        assert_eq!(
            run.terminal()["payload"]["cause"]["kind"],
            "host_lost",
            "{id}"
        );
        let open_before = was.tool_terminals();
        for (call, t) in run.tool_terminals() {
            if open_before.contains_key(&call) {
                continue;
            }
            assert_eq!(t["kind"], "tool.failed", "{id} {call}: {t}");
            assert_eq!(t["payload"]["outcome"], "uncertain", "{id} {call}: {t}");
            if let Some(child) = run.sub_runs().get(&call) {
                point.uncertain += 1;
                if let Some(c) = after.get(child) {
                    assert!(
                        ts(c.terminal()) <= ts(&t),
                        "{child} closed after {id}'s {call}"
                    );
                }
            }
        }
    }
    check_links(after);
    point
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_delegation_recovers_the_whole_tree() {
    let points: u64 = std::env::var("KEEL_SUB_KILL_POINTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24);
    let mut rng = Rng::from_env("sub-kill");
    let started = Instant::now();
    let c = client();
    let mut total = Point::default();
    let mut with_children = 0;
    for i in 0..points {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("keel.db");
        let d = Serve::new().db(&db).logged().start();
        create(&c, &d, delegation(&format!("tree{i}"), &mut rng)).await;
        let after_ms = rng.between(0, 900);
        tokio::time::sleep(Duration::from_millis(after_ms)).await;
        d.kill();
        let before = stored(&db);
        let restarted = Serve::new().db(&db).logged().start();
        let after = stored(&db);
        let point = check_recovered(&before, &after);
        let summary = verify_summary(&db);
        assert!(
            summary.contains(" 0 incomplete, 0 violations"),
            "point {i} (kill after {after_ms} ms): {summary}"
        );
        restarted.kill();
        with_children += usize::from(point.runs > 1);
        total.runs += point.runs;
        total.open += point.open;
        total.uncertain += point.uncertain;
    }
    println!(
        "{points} kill points in {:.1} s: {} run(s) stored, {} left open and recovered, {} open agent call(s) made uncertain; {with_children} point(s) had started children",
        started.elapsed().as_secs_f64(),
        total.runs,
        total.open,
        total.uncertain
    );
    assert!(total.uncertain > 0, "no kill landed inside a delegation");
}

// ------------------------------------------------------------ allowance

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_posted_agent_needs_its_provider_allowed() {
    let d = Serve::new()
        .args(&["--allow-provider", "anthropic,TEAM_KEY"])
        .env("TEAM_KEY", "sk-test-not-used")
        .start();
    let c = client();
    let scenario = |key: &str| {
        json!({
            "model": "m", "messages": [{"role": "user", "text": "go"}],
            "tools": [{"name": "a", "agent": {"model": "m",
                "provider": {"type": "scripted", "calls": []},
                "tools": [{"name": "inner", "agent": {"model": "m",
                    "provider": {"type": "anthropic", "api_key_env": key}}}]}}],
            "provider": {"type": "scripted", "calls": [[{"text": "hi"}, {"complete": {"finish": "stop"}}]]}
        })
        .to_string()
    };
    let r = post(&c, &d, "/v1/runs", scenario("HOME")).await;
    assert_eq!(r.status(), 403);
    let problem: Value = r.json().await.unwrap();
    assert!(
        problem["type"]
            .as_str()
            .unwrap()
            .ends_with("provider-not-allowed"),
        "{problem}"
    );
    assert_eq!(problem["path"], "tools[0].agent.tools[0].agent.provider");
    assert!(stored(&d.db).is_empty(), "a refused scenario ran");
    // The allowed triple runs (the key is read when a child starts).
    let r = post(&c, &d, "/v1/runs", scenario("TEAM_KEY")).await;
    assert_eq!(r.status(), 201);
}
