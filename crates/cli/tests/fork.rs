#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `keel run SCENARIO --fork RUN_ID --at SEQ [--message TEXT]` and
//! `keel runs --tree RUN_ID`: a fork starts from the parent's history as
//! its log rebuilds it through SEQ (message by message), the parent's
//! stored lines do not change, forks of forks work, the tree shows them,
//! and a seq that is not a fork point is refused naming the rule.

mod common;

use common::{Sandbox, text};
use serde_json::Value;

/// A scenario whose model calls `get_weather` for `city`, then answers.
fn weather(run_id: &str, city: &str) -> String {
    common::weather_scenario(
        run_id,
        city,
        &format!("Weather in {city}?"),
        &format!("{city}: 3 °C."),
    )
}

/// A scenario whose model answers `answer` (its messages are not used by a fork).
fn answers(run_id: &str, answer: &str) -> String {
    serde_json::json!({
        "run_id": run_id,
        "model": "scripted-1",
        "messages": [{"role": "user", "text": "not used by a fork"}],
        "provider": {"type": "scripted", "calls": [
            [{"text": answer}, {"complete": {"finish": "stop"}}]
        ]}
    })
    .to_string()
}

/// `keel events RUN_ID`: its stored lines, exactly.
fn lines(sb: &Sandbox, run_id: &str) -> String {
    sb.ok(&["events", run_id])
}

/// The seq of the first event of `kind` in `run_id`'s lines.
fn seq_of(sb: &Sandbox, run_id: &str, kind: &str) -> u64 {
    lines(sb, run_id)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|e| e["kind"] == kind)
        .map(|e| e["seq"].as_u64().unwrap())
        .unwrap_or_else(|| panic!("no {kind} in {run_id}"))
}

/// `run_id`'s history rebuilt from its stored lines 1..=`seq` alone.
fn history_through(sb: &Sandbox, run_id: &str, seq: u64) -> Vec<Value> {
    let events: Vec<keel_eventlog::Event> = lines(sb, run_id)
        .lines()
        .map(|l| keel_eventlog::Event::decode(l).unwrap())
        .take_while(|e| e.seq() <= seq)
        .collect();
    keel_eventlog::history::rebuild(&events, &keel_message::Limits::default())
        .unwrap()
        .iter()
        .map(|m| serde_json::to_value(m).unwrap())
        .collect()
}

fn fork(sb: &Sandbox, file: &std::path::Path, args: &[&str]) -> std::process::Output {
    let mut all = vec!["--fork"];
    all.extend_from_slice(args);
    sb.run(file, &all)
}

#[test]
fn a_fork_starts_from_the_parents_history_and_leaves_the_parent_alone() {
    let sb = Sandbox::new();
    let parent = sb.write("p.json", &weather("tree_1", "Oslo"));
    assert_eq!(sb.run(&parent, &[]).status.code(), Some(0));
    let before = lines(&sb, "tree_1");
    let at = seq_of(&sb, "tree_1", "turn.completed");

    let f1 = sb.write("f1.json", &answers("tree_f1", "Tomorrow: 5 °C."));
    let out = fork(
        &sb,
        &f1,
        &[
            "tree_1",
            "--at",
            &at.to_string(),
            "--message",
            "And tomorrow?",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
    assert_eq!(lines(&sb, "tree_1"), before, "the parent's lines changed");

    // The fork's history: the parent's rebuild through `at`, message by
    // message, then the new message and the fork's answer.
    let want = history_through(&sb, "tree_1", at);
    let got = common::rebuilt_history(&sb.db(), "tree_f1");
    assert_eq!(got.len(), want.len() + 2, "{got:#?}");
    for (i, message) in want.iter().enumerate() {
        assert_eq!(&got[i], message, "message {i}");
    }
    assert_eq!(got[want.len()]["parts"][0]["text"], "And tomorrow?");
    assert_eq!(got[want.len()]["id"], "tree_f1.u1");
    assert_eq!(got[want.len() + 1]["parts"][0]["text"], "Tomorrow: 5 °C.");
    let first: Value = serde_json::from_str(lines(&sb, "tree_f1").lines().next().unwrap()).unwrap();
    assert_eq!(
        first["payload"]["forked_from"],
        serde_json::json!({"run_id": "tree_1", "seq": at})
    );
    assert!(first["payload"].get("continues").is_none());
    let own = common::stored_inputs(&sb.db(), "tree_f1");
    assert_eq!(own[0]["history"]["last_seq"], at);

    // A fork of the fork, at its run.completed, without a message; and a
    // second fork of the parent at its input.
    let end = seq_of(&sb, "tree_f1", "run.completed");
    let f2 = sb.write("f2.json", &answers("tree_f2", "Still 5 °C."));
    let out = fork(&sb, &f2, &["tree_f1", "--at", &end.to_string()]);
    assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
    let got2 = common::rebuilt_history(&sb.db(), "tree_f2");
    assert_eq!(got2[..got.len()], got[..]);
    assert_eq!(got2[got.len()]["parts"][0]["text"], "Still 5 °C.");
    let input = seq_of(&sb, "tree_1", "turn.started") - 1;
    let f3 = sb.write("f3.json", &answers("tree_f3", "Oslo: warm."));
    let out = fork(&sb, &f3, &["tree_1", "--at", &input.to_string()]);
    assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
    let got3 = common::rebuilt_history(&sb.db(), "tree_f3");
    assert_eq!(got3[0]["parts"][0]["text"], "Weather in Oslo?");
    assert_eq!(got3.len(), 2, "{got3:#?}");
    assert_eq!(lines(&sb, "tree_1"), before, "the parent's lines changed");

    // A continuation of a fork, for the tree.
    let c = sb.write("c.json", &answers("tree_c", "ok"));
    let out = sb.run(&c, &["--continue", "tree_f2", "--message", "Thanks"]);
    assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));

    let tree = sb.ok(&["runs", "--tree", "tree_f2"]);
    let expected = format!(
        "tree_1  completed\n  tree_f1  completed  forked at {at}\n    tree_f2  completed  forked at {end}\n      tree_c  completed  continues\n  tree_f3  completed  forked at {input}\n"
    );
    assert_eq!(tree, expected);
    assert_eq!(sb.ok(&["runs", "--tree", "tree_1"]), expected);
    let listing = sb.ok(&["runs"]);
    assert!(
        listing.contains(&format!("forked from tree_1 at {at}")),
        "{listing}"
    );
    let verify = sb.ok(&["verify"]);
    assert!(
        verify.contains("5 ok, 0 incomplete, 0 violations"),
        "{verify}"
    );

    // An export of a fork of a fork carries its chain and imports on an
    // empty store, rebuilding to the same history.
    let exported = sb.ok(&["export", "tree_f2"]);
    let file = sb.write("f2.jsonl", &exported);
    let other = Sandbox::new();
    let out = common::keel()
        .args(["import", file.to_str().unwrap()])
        .args(other.db_args())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
    assert_eq!(other.ok(&["export", "tree_f2"]), exported);
    assert_eq!(common::rebuilt_history(&other.db(), "tree_f2"), got2);
}

#[test]
fn a_seq_that_is_not_a_fork_point_is_refused_naming_the_rule() {
    let sb = Sandbox::new();
    let parent = sb.write("p.json", &weather("pt_1", "Oslo"));
    assert_eq!(sb.run(&parent, &[]).status.code(), Some(0));
    let before = lines(&sb, "pt_1");
    let tool = seq_of(&sb, "pt_1", "tool.started").to_string();
    let called = seq_of(&sb, "pt_1", "model.completed").to_string();
    let next = sb.write("n.json", &answers("pt_f", "no"));
    let rows: Vec<(Vec<&str>, Vec<String>)> = vec![
        (
            vec!["pt_1", "--at", &tool],
            vec![
                format!("seq {tool} is tool.started: inside open tool pt_1_c1"),
                "(rule fork.point)".into(),
            ],
        ),
        (
            vec!["pt_1", "--at", &called, "--message", "hm"],
            vec![
                format!("seq {called} is model.completed: its answer called tools"),
                "(rule fork.point)".into(),
            ],
        ),
        (
            vec!["pt_1", "--at", "999"],
            vec!["(rule fork.seq_known)".into()],
        ),
        (
            vec!["pt_none", "--at", "3"],
            vec!["no stored run pt_none (rule run.known)".into()],
        ),
    ];
    for (args, needles) in rows {
        let out = fork(&sb, &next, &args);
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stdout}\n{stderr}");
        for needle in needles {
            assert!(
                stderr.contains(&needle),
                "{args:?}: {needle} not in {stderr}"
            );
        }
    }
    // --at without --fork, --message without --fork or --continue, and
    // --fork with --continue are refused by the parser.
    for args in [
        vec!["--at", "3"],
        vec!["--message", "hi"],
        vec![
            "--fork",
            "pt_1",
            "--at",
            "3",
            "--continue",
            "pt_1",
            "--message",
            "x",
        ],
    ] {
        assert_eq!(sb.run(&next, &args).status.code(), Some(2), "{args:?}");
    }
    assert_eq!(lines(&sb, "pt_1"), before);
    assert_eq!(sb.run_ids(), ["pt_1"], "a refused fork stores nothing");
    let out = sb.run(&next, &[]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "the refused fork's run id is free"
    );
}

// ------------------------------------------------------------------ HTTP

use common::daemon::{Daemon, Serve, client, get_json, get_text, post, wait_status};

/// `run`'s stored lines over HTTP.
async fn http_lines(c: &reqwest::Client, d: &Daemon, run: &str) -> String {
    get_text(c, d, &format!("/v1/runs/{run}/events?format=jsonl")).await
}

fn seq_in(lines: &str, kind: &str) -> u64 {
    lines
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|e| e["kind"] == kind)
        .map(|e| e["seq"].as_u64().unwrap())
        .unwrap()
}

/// `POST /v1/runs/{id}/fork?at=SEQ`: 201 and a run starting from the
/// parent's history through SEQ (the parent unchanged); a bad `at` is 400
/// naming rule fork.at, a seq that is not a fork point 409 naming the
/// rule, an unknown run 404; a cross-site post starts nothing; the tree
/// route lists the fork under its parent.
#[tokio::test(flavor = "multi_thread")]
async fn the_fork_route_forks_and_refuses_with_typed_problems() {
    let d = Serve::new().start();
    let c = client();
    let r = post(&c, &d, "/v1/runs", weather("hp_1", "Oslo")).await;
    assert_eq!(r.status(), 201);
    wait_status(&c, &d, "hp_1", "completed").await;
    let before = http_lines(&c, &d, "hp_1").await;
    let at = seq_in(&before, "turn.completed");
    let path = |query: &str| format!("/v1/runs/hp_1/fork{query}");

    let r = post(
        &c,
        &d,
        &path(&format!("?at={at}")),
        answers("hp_f", "Bergen: 2 °C."),
    )
    .await;
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["run_id"], "hp_f");
    wait_status(&c, &d, "hp_f", "completed").await;
    assert_eq!(http_lines(&c, &d, "hp_1").await, before);
    let events: Vec<keel_eventlog::Event> = before
        .lines()
        .map(|l| keel_eventlog::Event::decode(l).unwrap())
        .take_while(|e| e.seq() <= at)
        .collect();
    let want: Vec<Value> =
        keel_eventlog::history::rebuild(&events, &keel_message::Limits::default())
            .unwrap()
            .iter()
            .map(|m| serde_json::to_value(m).unwrap())
            .collect();
    let got = common::rebuilt_history(&d.db, "hp_f");
    assert_eq!(got[..want.len()], want[..]);
    // The body's messages are the new messages.
    assert_eq!(got[want.len()]["parts"][0]["text"], "not used by a fork");
    assert_eq!(got[want.len()]["id"], "hp_f.u1");

    // The AG-UI prelude of a join after the fork's input: the snapshot is
    // the parent's history through `at`, then the fork's own message.
    let body = c
        .get(d.url("/v1/runs/hp_f/agui"))
        .header("last-event-id", "3")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let snapshot: Value = body
        .split("\n\n")
        .map(|block| {
            let data: String = block
                .lines()
                .filter_map(|l| l.strip_prefix("data: "))
                .collect();
            serde_json::from_str::<Value>(&data).unwrap_or_default()
        })
        .find(|e| e["type"] == "MESSAGES_SNAPSHOT")
        .unwrap_or_else(|| panic!("no snapshot in {body}"));
    let ids: Vec<&str> = snapshot["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    // AG-UI gives each tool result its own message: `<id>.<call id>`.
    assert_eq!(want.len(), 3);
    assert_eq!(
        ids,
        ["m1", "hp_1.t1.a", "hp_1.t1.t.hp_1_c1", "hp_f.u1"],
        "{snapshot}"
    );

    let tool = seq_in(&before, "tool.started");
    let rows: Vec<(String, u16, &str, &str)> = vec![
        (path(""), 400, "invalid-fork-point", "fork.at"),
        (path("?at="), 400, "invalid-fork-point", "fork.at"),
        (path("?at=abc"), 400, "invalid-fork-point", "fork.at"),
        (path("?at=0"), 400, "invalid-fork-point", "fork.at"),
        (path("?at=-1"), 400, "invalid-fork-point", "fork.at"),
        (path("?at=3&at=4"), 400, "invalid-fork-point", "fork.at"),
        (
            path(&format!("?at={}", "9".repeat(21))),
            400,
            "invalid-fork-point",
            "fork.at",
        ),
        (
            path(&format!("?at={tool}")),
            409,
            "fork-point-refused",
            "fork.point",
        ),
        (path("?at=999"), 409, "fork-point-refused", "fork.seq_known"),
        (
            "/v1/runs/nope/fork?at=3".to_owned(),
            404,
            "run-not-found",
            "",
        ),
    ];
    for (url, status, kind, rule) in rows {
        let r = post(&c, &d, &url, answers("hp_refused", "no")).await;
        assert_eq!(r.status(), status, "{url}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["type"], format!("urn:keel:problem:{kind}"), "{url}: {v}");
        if !rule.is_empty() {
            assert_eq!(v["rule"], rule, "{url}: {v}");
            let detail = v["detail"].as_str().unwrap();
            assert!(
                detail.contains(&format!("(rule {rule})")),
                "{url}: {detail}"
            );
        }
    }
    let r = post(
        &c,
        &d,
        &path(&format!("?at={tool}")),
        answers("hp_refused", "no"),
    )
    .await;
    let v: Value = r.json().await.unwrap();
    assert!(
        v["detail"]
            .as_str()
            .unwrap()
            .contains("is tool.started: inside open tool hp_1_c1"),
        "{v}"
    );

    // Cross-site: a simple post and another origin's start nothing.
    let bare = reqwest::Client::builder().build().unwrap();
    let url = d.url(&path(&format!("?at={at}")));
    let r = bare
        .post(&url)
        .header("content-type", "text/plain")
        .body(answers("hp_simple", "x"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 415);
    let r = bare
        .post(&url)
        .header("origin", "http://evil.example")
        .header("content-type", "application/json")
        .body(answers("hp_evil", "x"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);

    let tree = get_json(&c, &d, "/v1/runs/hp_f/tree").await;
    assert_eq!(
        tree,
        serde_json::json!({"runs": [
            {"run_id": "hp_1", "status": "completed", "depth": 0},
            {"run_id": "hp_f", "status": "completed", "depth": 1,
             "forked_from": {"run_id": "hp_1", "seq": at}}
        ], "truncated": false})
    );
    assert_eq!(get_json(&c, &d, "/v1/runs/nope/tree").await["status"], 404);
    let listed = get_json(&c, &d, "/v1/runs").await;
    assert_eq!(listed["runs"].as_array().unwrap().len(), 2, "{listed}");
}
