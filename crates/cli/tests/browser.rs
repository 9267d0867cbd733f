#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `keel serve` in a real headless browser (Chromium through chromedriver):
//! CORS and EventSource from another origin, the reconnect after the
//! end, a forced disconnect, the built-in viewer (transcript, timeline,
//! approvals, a token, model text rendered as text), and the cross-site
//! and rebinding defences.
//!
//! Without chromium and chromedriver on PATH each test prints a SKIPPED
//! line and passes, except under `CI=true`, where it fails (`.ci/run`
//! installs them). `KEEL_SCREENSHOT=PATH` (relative to the repository
//! root) makes the viewer test write its screenshot of the run page there.

mod common;

use common::browser::{
    Browser, Daemon, Proxy, Site, http, is_run_terminal, start_daemon, tools, wait_until,
};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::time::{Duration, Instant};

const SECS_10: Duration = Duration::from_secs(10);
const SECS_20: Duration = Duration::from_secs(20);

// ------------------------------------------------------------ scenarios

/// `n` text deltas `"w{i} "`, `delay` ms apart, then stop.
fn slow_text(n: usize, delay: u64) -> String {
    let mut items = Vec::new();
    for i in 0..n {
        items.push(json!({"delay_ms": delay}));
        items.push(json!({"text": format!("w{i} ")}));
    }
    items.push(json!({"complete": {"finish": "stop"}}));
    json!({
        "model": "scripted-1",
        "messages": [{"role": "user", "text": "count"}],
        "provider": {"type": "scripted", "calls": [items]}
    })
    .to_string()
}

/// A quick run: two deltas, then stop.
fn quick() -> String {
    slow_text(2, 0)
}

/// A tool that needs approval, then a closing text.
fn gated() -> String {
    json!({
        "model": "scripted-1",
        "messages": [{"role": "user", "text": "open the gate"}],
        "tools": [{"name": "gate", "description": "opens the gate",
                   "parameters": {"type": "object"}, "requires_approval": true,
                   "script": [{"ok": "gate opened: 42"}]}],
        "provider": {"type": "scripted", "calls": [
            [{"text": "Opening the gate."},
             {"tool_call": {"call_id": "g1", "name": "gate", "arguments": {"why": "test"}}},
             {"complete": {"finish": "tool_calls"}}],
            [{"text": "The gate is open."}, {"complete": {"finish": "stop"}}]
        ]}
    })
    .to_string()
}

const SCRIPT_TEXT: &str = "<script>window.__pwned=1</script>";
const IMG_TEXT: &str = "<img src=x onerror=\"window.__pwned=1\">";

/// Model text and tool content that would run script if rendered as HTML.
fn hostile() -> String {
    json!({
        "model": "scripted-1",
        "messages": [{"role": "user", "text": "<b>user</b><img src=u onerror=\"window.__pwned=4\">"}],
        "tools": [{"name": "echo", "description": "echoes",
                   "parameters": {"type": "object"},
                   "script": [{"ok": "<b>bold</b><img src=z onerror=\"window.__pwned=3\">"}]}],
        "provider": {"type": "scripted", "calls": [
            [{"text": "Here: "}, {"text": SCRIPT_TEXT}, {"text": " and "}, {"text": IMG_TEXT},
             {"tool_call": {"call_id": "e1", "name": "echo",
                            "arguments": {"html": "<img src=y onerror=\"window.__pwned=2\">"}}},
             {"complete": {"finish": "tool_calls"}}],
            [{"text": "<svg onload=\"window.__pwned=5\"></svg> done"}, {"complete": {"finish": "stop"}}]
        ]}
    })
    .to_string()
}

// --------------------------------------------------- EventSource in a page

/// Opens an EventSource on `url` in the page; its events are collected
/// in `window.__r`.
async fn open_event_source(b: &Browser, url: &str) {
    b.js(
        r#"
        const r = {open: 0, error: 0, seqs: [], ids: [], kinds: [], states: []};
        window.__r = r;
        const es = new EventSource(arguments[0]);
        window.__es = es;
        es.onopen = () => { r.open++; };
        es.onerror = () => { r.error++; r.states.push(es.readyState); };
        es.onmessage = (e) => {
            const v = JSON.parse(e.data);
            r.seqs.push(v.seq); r.ids.push(e.lastEventId); r.kinds.push(v.kind);
        };
        return true;
        "#,
        vec![json!(url)],
    )
    .await;
}

#[derive(Debug, serde::Deserialize)]
struct EsState {
    open: u64,
    error: u64,
    seqs: Vec<u64>,
    ids: Vec<String>,
    kinds: Vec<String>,
    /// 0 connecting, 1 open, 2 closed.
    state: u64,
}

async fn es_state(b: &Browser) -> EsState {
    let v = b
        .js(
            "const r = window.__r; return {open: r.open, error: r.error, seqs: r.seqs, \
             ids: r.ids, kinds: r.kinds, state: window.__es.readyState};",
            vec![],
        )
        .await;
    serde_json::from_value(v).unwrap()
}

/// Waits until the page's EventSource saw a run terminal.
async fn until_terminal(b: &Browser, within: Duration) -> EsState {
    wait_until("the page to receive the run's terminal", within, || async {
        let s = es_state(b).await;
        s.kinds
            .last()
            .is_some_and(|k| is_run_terminal(k))
            .then_some(s)
    })
    .await
}

/// `seqs` is exactly 1..=last, and the ids match.
fn assert_every_seq_once(s: &EsState, last: u64) {
    let want: Vec<u64> = (1..=last).collect();
    assert_eq!(s.seqs, want, "a gap or a duplicate in what the page got");
    let ids: Vec<String> = want.iter().map(u64::to_string).collect();
    assert_eq!(s.ids, ids, "lastEventId is not the seq");
}

// ------------------------------------------------------------ the viewer

/// The page's text (empty before it has a body).
const BODY_TEXT: &str = "return document.body ? document.body.innerText : '';";

/// Waits until the viewer's `#run-status` says `status`.
async fn wait_run_status(b: &Browser, status: &str, within: Duration) {
    b.wait_js(
        &format!("#run-status to say {status}"),
        within,
        &format!(
            "const s = document.querySelector('#run-status'); \
             return s && s.textContent.trim() === '{status}';"
        ),
    )
    .await;
}

/// Waits until the viewer has applied at least `n` events (`#event-count`).
async fn wait_event_count(b: &Browser, what: &str, n: u64) {
    b.wait_js(
        what,
        SECS_10,
        &format!(
            "const n = document.querySelector('#event-count'); \
             return n && parseInt(n.textContent, 10) >= {n};"
        ),
    )
    .await;
}

/// The viewer reached the last of `events` (`body[data-last-seq]`) and
/// counts every one of them (`#event-count`).
async fn assert_viewer_applied(b: &Browser, events: &[Value]) {
    let last = events.last().unwrap()["seq"].as_u64().unwrap();
    b.wait_js(
        "body[data-last-seq] to reach the terminal",
        SECS_10,
        &format!("return document.body.dataset.lastSeq === '{last}';"),
    )
    .await;
    let applied = b.texts("#event-count").await.concat();
    assert_eq!(applied.trim(), events.len().to_string(), "#event-count");
}

/// The assistant's text in the transcript, joined.
async fn assistant_text(b: &Browser) -> String {
    b.texts("#transcript .message[data-role=assistant] .text")
        .await
        .concat()
}

// ------------------------------------------------------------------ tests

/// 1. A page on an allowed origin follows a run with EventSource
/// (`?named=false`); a page on an origin not listed gets nothing.
#[tokio::test(flavor = "multi_thread")]
async fn another_origin_follows_a_run_only_when_allowed() {
    let Some(tools) = tools("another_origin_follows_a_run_only_when_allowed") else {
        return;
    };
    let allowed = Site::start().await;
    let other = Site::start().await;
    let daemon = start_daemon(&["--allow-origin", &allowed.origin], &[]);
    let b = Browser::start(&tools).await;

    // The run streams for about 1.5 s: the page follows it live.
    let run = daemon.create(&slow_text(15, 100), None).await;
    let url = daemon.url(&format!("/v1/runs/{run}/events?named=false"));
    b.goto(&allowed.url("/page")).await;
    open_event_source(&b, &url).await;
    let s = until_terminal(&b, SECS_20).await;
    b.js("window.__es.close(); return true;", vec![]).await;
    let last = daemon.run(&run, None).await["last_seq"].as_u64().unwrap();
    assert_eq!(s.kinds.last().unwrap(), "run.completed");
    assert_every_seq_once(&s, last);
    assert_eq!(s.open, 1);

    // A page on an origin not listed: the EventSource fails, no message.
    b.goto(&other.url("/page")).await;
    open_event_source(&b, &url).await;
    let s = wait_until("the blocked EventSource to close", SECS_10, || async {
        let s = es_state(&b).await;
        (s.state == 2).then_some(s)
    })
    .await;
    assert!(s.seqs.is_empty(), "a blocked page read events: {s:?}");
    assert_eq!(s.open, 0, "{s:?}");
    assert!(s.error >= 1);
    // fetch() is blocked too (a TypeError, no body).
    let got = b
        .js_async(
            "const done = arguments[arguments.length - 1];
             fetch(arguments[0]).then(r => r.text()).then(t => done('read: ' + t),
                                                          e => done('blocked: ' + e.name));",
            vec![json!(daemon.url(&format!("/v1/runs/{run}")))],
        )
        .await;
    assert_eq!(got, json!("blocked: TypeError"));

    // The CORS answer names the origin, never `*`.
    let r = http()
        .get(&url)
        .header("origin", &allowed.origin)
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.headers()
            .get("access-control-allow-origin")
            .map(|v| v.to_str().unwrap()),
        Some(allowed.origin.as_str())
    );
    let vary = r.headers().get_all("vary").iter();
    let vary: Vec<String> = vary
        .map(|v| v.to_str().unwrap().to_ascii_lowercase())
        .collect();
    assert!(
        vary.iter().any(|v| v.contains("origin")),
        "no Vary: Origin: {vary:?}"
    );
    let r = http()
        .get(&url)
        .header("origin", &other.origin)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert!(r.headers().get("access-control-allow-origin").is_none());
    b.close().await;
}

/// 2. After a finished run, the browser opens the stream once in 10 s:
/// the reconnect at the terminal gets 204 and EventSource stops.
#[tokio::test(flavor = "multi_thread")]
async fn a_finished_run_is_streamed_once_in_ten_seconds() {
    let Some(tools) = tools("a_finished_run_is_streamed_once_in_ten_seconds") else {
        return;
    };
    let site = Site::start().await;
    let daemon = start_daemon(&["--allow-origin", &site.origin], &[]);
    let proxy = Proxy::start(daemon.addr).await;
    let run = daemon.create(&quick(), None).await;
    let last = daemon.wait_ended(&run, None).await["last_seq"]
        .as_u64()
        .unwrap();
    let b = Browser::start(&tools).await;
    b.goto(&site.url("/page")).await;
    open_event_source(
        &b,
        &format!("{}/v1/runs/{run}/events?named=false", proxy.base()),
    )
    .await;
    let started = Instant::now();
    // The whole window, not less: a browser that keeps reconnecting
    // (every `retry:` interval) is caught in it.
    let s = until_terminal(&b, SECS_10).await;
    assert_every_seq_once(&s, last);
    tokio::time::sleep(SECS_10.saturating_sub(started.elapsed())).await;
    let s = es_state(&b).await;
    let requests = proxy.requests(&format!("GET /v1/runs/{run}/events"));
    assert_eq!(s.open, 1, "the stream was opened {} times: {s:?}", s.open);
    assert_eq!(
        s.state, 2,
        "EventSource did not stop (readyState {})",
        s.state
    );
    assert_every_seq_once(&s, last);
    // The stream, then at most the one reconnect that got 204.
    assert!(
        (1..=2).contains(&requests),
        "{requests} stream requests in 10 s:\n{}",
        proxy.sent()
    );
    // The reconnect carried the terminal's seq.
    if requests == 2 {
        assert!(
            proxy
                .sent()
                .to_ascii_lowercase()
                .contains(&format!("last-event-id: {last}\r\n")),
            "{}",
            proxy.sent()
        );
    }
    // Same thing straight: a cursor at the terminal gets 204.
    let r = http()
        .get(daemon.url(&format!("/v1/runs/{run}/events")))
        .header("last-event-id", last.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    b.close().await;
}

/// 3. After a forced disconnect mid-run, EventSource's own reconnect
/// with Last-Event-ID gets every seq exactly once.
#[tokio::test(flavor = "multi_thread")]
async fn a_forced_disconnect_loses_and_repeats_nothing() {
    let Some(tools) = tools("a_forced_disconnect_loses_and_repeats_nothing") else {
        return;
    };
    let site = Site::start().await;
    let daemon = start_daemon(&["--allow-origin", &site.origin], &[]);
    let proxy = Proxy::start(daemon.addr).await;
    let b = Browser::start(&tools).await;
    b.goto(&site.url("/page")).await;
    // About 4 s of streaming: 50 deltas 80 ms apart.
    let run = daemon.create(&slow_text(50, 80), None).await;
    open_event_source(
        &b,
        &format!("{}/v1/runs/{run}/events?named=false", proxy.base()),
    )
    .await;
    let before = wait_until("some events before the cut", SECS_10, || async {
        let s = es_state(&b).await;
        (s.seqs.len() >= 8).then_some(s.seqs.len())
    })
    .await;
    let cut = proxy.drop_all();
    assert!(cut >= 1, "no open connection to cut");
    let status = daemon.run(&run, None).await["status"].clone();
    assert_eq!(status, "running", "the run ended before the cut");
    let s = until_terminal(&b, SECS_20).await;
    let last = daemon.run(&run, None).await["last_seq"].as_u64().unwrap();
    assert!(s.error >= 1, "the page never saw the drop: {s:?}");
    assert!(s.open >= 2, "no reconnect: {s:?}");
    assert!(s.seqs.len() > before);
    assert_every_seq_once(&s, last);
    assert!(proxy.accepted() >= 2, "{} connections", proxy.accepted());
    assert!(
        proxy
            .sent()
            .to_ascii_lowercase()
            .contains("last-event-id: "),
        "the reconnect did not send Last-Event-ID"
    );
    b.close().await;
}

/// Resolves `KEEL_SCREENSHOT` (relative paths from the repository root).
fn screenshot_path() -> Option<std::path::PathBuf> {
    let p = std::path::PathBuf::from(std::env::var_os("KEEL_SCREENSHOT")?);
    Some(if p.is_absolute() {
        p
    } else {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(p)
    })
}

/// 4. The viewer shows a finished run's transcript and timeline (and
/// the run list its row); the screenshot of the README.
#[tokio::test(flavor = "multi_thread")]
async fn the_viewer_shows_a_finished_run() {
    let Some(tools) = tools("the_viewer_shows_a_finished_run") else {
        return;
    };
    let daemon = start_daemon(&[], &[]);
    let scenario = std::fs::read_to_string(common::example("weather_tools.json")).unwrap();
    let run = daemon.create(&scenario, None).await;
    let entry = daemon.wait_ended(&run, None).await;
    assert_eq!(entry["status"], "completed");
    let events = daemon.events(&run, None).await;

    let b = Browser::start(&tools).await;
    b.goto(&daemon.url(&format!("/runs/{run}"))).await;
    wait_run_status(&b, "completed", SECS_20).await;
    assert_viewer_applied(&b, &events).await;
    assert_weather_transcript(&b).await;
    assert_timeline(&b, &events).await;

    let png = b.client.screenshot().await.unwrap();
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
    if let Some(path) = screenshot_path() {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(&path, &png).unwrap();
        println!("screenshot: {}", path.display());
    }

    // The run list.
    b.goto(&daemon.url("/")).await;
    let row = format!("table#runs tr.run[data-run-id='{run}'][data-status=completed]");
    b.wait_css(&row, SECS_10).await;
    assert_eq!(
        b.count(&format!("{row} a[href$='/runs/{run}']")).await,
        1,
        "no link to the run page"
    );
    b.close().await;
}

/// A fork's run page links to its parent (`forked from P at seq N`) and
/// shows the conversation's tree, the fork under its parent, each run a
/// link, as text: run ids and a hostile-looking id stay text.
#[tokio::test(flavor = "multi_thread")]
async fn the_viewer_shows_a_forks_parent_and_the_tree() {
    let Some(tools) = tools("the_viewer_shows_a_forks_parent_and_the_tree") else {
        return;
    };
    let daemon = start_daemon(&[], &[]);
    let parent = daemon.create(&quick(), None).await;
    daemon.wait_ended(&parent, None).await;
    let events = daemon.events(&parent, None).await;
    let at = events
        .iter()
        .find(|e| e["kind"] == "turn.completed")
        .map(|e| e["seq"].as_u64().unwrap())
        .unwrap();
    let fork = |run_id: &str| {
        let mut body: Value = serde_json::from_str(&quick()).unwrap();
        body["run_id"] = json!(run_id);
        body["messages"] = json!([{"role": "user", "text": "<b>again</b>"}]);
        body.to_string()
    };
    for (from, id) in [(parent.as_str(), "fork_a"), ("fork_a", "fork_b")] {
        let from_at = if from == parent { at } else { 3 };
        let r = http()
            .post(daemon.url(&format!("/v1/runs/{from}/fork?at={from_at}")))
            .header("content-type", "application/json")
            .body(fork(id))
            .send()
            .await
            .unwrap();
        let status = r.status();
        assert_eq!(status, 201, "{}", r.text().await.unwrap());
        daemon.wait_ended(id, None).await;
    }

    let b = Browser::start(&tools).await;
    b.goto(&daemon.url("/runs/fork_b")).await;
    wait_run_status(&b, "completed", SECS_20).await;
    b.wait_css("#run-parent:not([hidden]) a[href$='/runs/fork_a']", SECS_10)
        .await;
    let line = b.texts("#run-parent").await.concat();
    assert_eq!(line.trim(), "forked from fork_a at seq 3");
    b.wait_css("#tree-panel:not([hidden]) li.tree-run", SECS_10)
        .await;
    let ids: Vec<String> = b
        .js(
            "return [...document.querySelectorAll('#tree li.tree-run')].map(li => li.dataset.runId);",
            vec![],
        )
        .await
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids, [parent.as_str(), "fork_a", "fork_b"]);
    // Nested: fork_b's item sits inside fork_a's, inside the parent's.
    let nested = format!(
        "#tree > li[data-run-id='{parent}'] > ul > li[data-run-id='fork_a'] > ul > li[data-run-id='fork_b']"
    );
    assert_eq!(b.count(&nested).await, 1, "not nested");
    // Each other run links to its page; this run is not a link.
    assert_eq!(b.count("#tree a[href$='/runs/fork_a']").await, 1);
    assert_eq!(
        b.count(&format!("#tree a[href$='/runs/{parent}']")).await,
        1
    );
    assert_eq!(b.count("#tree a[href$='/runs/fork_b']").await, 0);
    let tree = b.texts("#tree").await.concat();
    assert!(
        tree.contains(&format!("fork_a completed · forked at seq {at}")),
        "{tree}"
    );
    // The fork's message is text, not markup.
    assert_eq!(b.count("#transcript b").await, 0);
    let user = b
        .texts("#transcript .message[data-role=user] .text")
        .await
        .concat();
    assert!(user.contains("<b>again</b>"), "{user:?}");
    // A root run with nothing forked from it shows neither.
    let lone = daemon.create(&slow_text(1, 0), None).await;
    daemon.wait_ended(&lone, None).await;
    b.goto(&daemon.url(&format!("/runs/{lone}"))).await;
    wait_run_status(&b, "completed", SECS_20).await;
    assert_eq!(b.count("#run-parent[hidden]").await, 1);
    assert_eq!(b.count("#tree-panel[hidden]").await, 1);
    b.close().await;
}

/// The transcript of examples/weather_tools.json: the streamed text,
/// joined, the user's question, and the tool calls with their results.
async fn assert_weather_transcript(b: &Browser) {
    let text = assistant_text(b).await;
    for want in [
        "Let me check both cities.",
        "Oslo is 3 °C and overcast; Bergen is 7 °C with rain.",
        "Bergen is 4 °C warmer than Oslo today — but bring an umbrella.",
    ] {
        assert!(
            text.contains(want),
            "{want:?} not in the transcript: {text:?}"
        );
    }
    let user = b
        .texts("#transcript .message[data-role=user] .text")
        .await
        .concat();
    assert!(user.contains("how much warmer is Bergen?"), "{user:?}");
    for (call, tool, result) in [
        ("c1", "get_weather", "overcast"),
        ("c2", "get_weather", "rain"),
        ("c3", "calculator", "4"),
    ] {
        let css = format!(".tool-call[data-call-id={call}][data-tool-name={tool}]");
        let got = b.texts(&format!("{css} .tool-result")).await.concat();
        assert!(got.contains(result), "{css}: result {got:?}");
        let args = b.texts(&format!("{css} .tool-args")).await.concat();
        assert!(!args.is_empty(), "{css}: no arguments shown");
    }
}

/// The timeline: a bar per scope of `events`, the failed model attempt
/// and the retry marked.
async fn assert_timeline(b: &Browser, events: &[Value]) {
    let count = |kind: &str| events.iter().filter(|e| e["kind"] == kind).count();
    assert_eq!(b.count("#timeline .bar[data-scope=run]").await, 1);
    assert_eq!(
        b.count("#timeline .bar[data-scope=turn]").await,
        count("turn.started")
    );
    assert_eq!(
        b.count("#timeline .bar[data-scope=model]").await,
        count("model.started")
    );
    assert_eq!(
        b.count("#timeline .bar[data-scope=tool]").await,
        count("tool.started")
    );
    assert_eq!(count("tool.started"), 3);
    assert_eq!(
        b.count("#timeline .bar[data-scope=model][data-state=failed]")
            .await,
        count("model.failed")
    );
    assert!(
        b.count("#timeline .bar[data-scope=model][data-attempt='2']")
            .await
            >= 1,
        "the retry is not marked"
    );
    assert_eq!(
        b.count("#timeline .bar[data-scope=tool][data-state=completed]")
            .await,
        3
    );
}

/// 5. An approval clicked in the page lets the tool run.
#[tokio::test(flavor = "multi_thread")]
async fn an_approval_clicked_in_the_page_runs_the_tool() {
    let Some(tools) = tools("an_approval_clicked_in_the_page_runs_the_tool") else {
        return;
    };
    let daemon = start_daemon(&[], &[]);
    let run = daemon.create(&gated(), None).await;
    let b = Browser::start(&tools).await;
    b.goto(&daemon.url(&format!("/runs/{run}"))).await;
    let approve = b.wait_css(".interaction button.approve", SECS_20).await;
    assert_eq!(b.count(".interaction button.deny").await, 1);
    let kinds = |events: &[Value]| -> Vec<String> {
        events
            .iter()
            .map(|e| e["kind"].as_str().unwrap().to_owned())
            .collect()
    };
    let before = kinds(&daemon.events(&run, None).await);
    assert!(before.iter().any(|k| k == "interaction.started"));
    assert!(
        !before.iter().any(|k| k.starts_with("tool.")),
        "the tool ran before the approval: {before:?}"
    );
    approve.click().await.unwrap();
    wait_run_status(&b, "completed", SECS_20).await;
    let result = b
        .wait_js(
            "the tool's result in the page",
            SECS_10,
            "return Array.from(document.querySelectorAll('.tool-call[data-call-id=g1] .tool-result'))\
             .map(e => e.textContent).join('');",
        )
        .await;
    assert!(
        result.as_str().unwrap().contains("gate opened: 42"),
        "{result}"
    );
    let events = daemon.events(&run, None).await;
    let after = kinds(&events);
    assert!(after.iter().any(|k| k == "tool.completed"), "{after:?}");
    let decided = events
        .iter()
        .find(|e| e["kind"] == "interaction.completed")
        .unwrap_or_else(|| panic!("no interaction.completed: {after:?}"));
    assert!(
        decided.to_string().contains("approved"),
        "not an approval: {decided}"
    );
    assert_eq!(after.last().unwrap(), "run.completed");
    // The buttons are gone once decided.
    b.wait_js(
        "the approve button to go",
        SECS_10,
        "return document.querySelectorAll('.interaction button.approve:not([disabled])').length === 0;",
    )
    .await;
    b.close().await;
}

/// 6. Model and tool content is text, never HTML: no script runs.
#[tokio::test(flavor = "multi_thread")]
async fn model_text_is_shown_as_text() {
    let Some(tools) = tools("model_text_is_shown_as_text") else {
        return;
    };
    let daemon = start_daemon(&[], &[]);
    let run = daemon.create(&hostile(), None).await;
    assert_eq!(daemon.wait_ended(&run, None).await["status"], "completed");
    // The second line of defence: the page's CSP allows no inline script.
    let r = http()
        .get(daemon.url(&format!("/runs/{run}")))
        .send()
        .await
        .unwrap();
    let header = |name: &str| {
        r.headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default()
    };
    let csp = header("content-security-policy");
    assert!(csp.contains("script-src 'self'"), "CSP: {csp:?}");
    assert!(!csp.contains("unsafe-inline"), "CSP: {csp:?}");
    assert_eq!(header("x-content-type-options"), "nosniff");
    let b = Browser::start(&tools).await;
    b.goto(&daemon.url(&format!("/runs/{run}"))).await;
    wait_run_status(&b, "completed", SECS_20).await;
    let text = b.texts(".message .text").await.concat();
    assert!(
        text.contains(SCRIPT_TEXT),
        "{SCRIPT_TEXT} not shown: {text:?}"
    );
    assert!(text.contains(IMG_TEXT), "{IMG_TEXT} not shown: {text:?}");
    assert!(text.contains("<svg onload="), "{text:?}");
    let result = b
        .texts(".tool-call[data-call-id=e1] .tool-result")
        .await
        .concat();
    assert!(result.contains("<img src=z"), "tool result: {result:?}");
    // Give an injected image time to fail and fire its handler.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pwned = b
        .js(
            "return typeof window.__pwned === 'undefined' ? null : window.__pwned;",
            vec![],
        )
        .await;
    assert_eq!(pwned, Value::Null, "a script ran");
    for tag in ["img", "script", "svg", "b"] {
        assert_eq!(
            b.count(&format!("#transcript {tag}, #timeline {tag}"))
                .await,
            0,
            "a <{tag}> element was made from content"
        );
    }
    b.close().await;
}

/// A one-pixel PNG, base64.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";
/// A file name that would run script if rendered as HTML.
const HOSTILE_NAME: &str = "<img src=f onerror=\"window.__pwned=7\">.txt";

/// A user message with an image and a hostile file name; a model that
/// reasons (signed, then a redacted part) before it answers.
fn media_and_reasoning() -> String {
    json!({
        "model": "scripted-1",
        "messages": [{"role": "user", "parts": [
            {"text": "What is this?"},
            {"image": {"media_type": "image/png", "base64": PNG}},
            {"file": {"media_type": "text/plain", "name": HOSTILE_NAME, "base64": "aGVsbG8="}}
        ]}],
        "provider": {"type": "scripted", "calls": [
            [{"reasoning": "A pixel. "}, {"reasoning": SCRIPT_TEXT}, {"reasoning_signature": "c2ln"},
             {"redacted_reasoning": "b3BhcXVl"},
             {"text": "A single pixel."}, {"complete": {"finish": "stop"}}]
        ]}
    })
    .to_string()
}

/// Reasoning is shown collapsed and marked; the user's image is shown
/// from its bytes through a blob: URL (which the CSP allows, `data:` it
/// does not); the file is listed with type and size, its hostile name as
/// text; nothing a run holds becomes markup.
#[tokio::test(flavor = "multi_thread")]
async fn reasoning_images_and_files_are_shown_safely() {
    let Some(tools) = tools("reasoning_images_and_files_are_shown_safely") else {
        return;
    };
    let daemon = start_daemon(&[], &[]);
    let run = daemon.create(&media_and_reasoning(), None).await;
    assert_eq!(daemon.wait_ended(&run, None).await["status"], "completed");
    let b = Browser::start(&tools).await;
    b.goto(&daemon.url(&format!("/runs/{run}"))).await;
    wait_run_status(&b, "completed", SECS_20).await;

    let states = b
        .js(
            "return Array.from(document.querySelectorAll('#transcript details.reasoning'))\
             .map(d => [d.open, d.dataset.state, d.querySelector('summary').textContent]);",
            vec![],
        )
        .await;
    assert_eq!(
        states,
        json!([
            [false, "signed", "reasoning · signed"],
            [false, "redacted", "reasoning · redacted"]
        ])
    );
    let reasoning = b
        .texts("#transcript details.reasoning .reasoning-text")
        .await;
    assert_eq!(
        reasoning,
        [
            format!("A pixel. {SCRIPT_TEXT}"),
            "redacted by the provider".to_owned()
        ]
    );
    assert!(!b.texts("#transcript").await.concat().contains("b3BhcXVl"));
    assert_eq!(assistant_text(&b).await, "A single pixel.");

    let image = b
        .wait_js(
            "the image to load",
            SECS_10,
            "const i = document.querySelector('#transcript img.media-image');\
             return i && i.complete && i.naturalWidth > 0 ? [i.src, i.naturalWidth, i.alt] : null;",
        )
        .await;
    assert!(image[0].as_str().unwrap().starts_with("blob:"), "{image}");
    assert_eq!(image[1], 1, "the pixel decoded");
    assert_eq!(image[2], "image image/png 70 B");

    assert_eq!(
        b.texts("#transcript .file .file-name").await,
        [HOSTILE_NAME]
    );
    assert_eq!(
        b.texts("#transcript .file .file-type").await,
        ["text/plain"]
    );
    assert_eq!(b.texts("#transcript .file .file-size").await, ["5 B"]);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pwned = b
        .js(
            "return typeof window.__pwned === 'undefined' ? null : window.__pwned;",
            vec![],
        )
        .await;
    assert_eq!(pwned, Value::Null, "a script ran");
    assert_eq!(
        b.count("#transcript img").await,
        1,
        "an <img> made from content"
    );
    assert_eq!(b.count("#transcript script").await, 0);
    b.close().await;
}

/// server-everything's `get-tiny-image`: the MCP image in
/// `tool.completed` is shown beside the tool's result from a blob: URL.
#[tokio::test(flavor = "multi_thread")]
async fn an_mcp_image_is_shown_from_its_bytes() {
    let Some(tools) = tools("an_mcp_image_is_shown_from_its_bytes") else {
        return;
    };
    let Some(everything) = common::mcp::everything_stdio("an_mcp_image_is_shown_from_its_bytes")
    else {
        return;
    };
    // A client's scenario names the operator's server.
    let flag = format!("everything={}", everything.join(" "));
    let daemon = start_daemon(&["--mcp", &flag], &[]);
    let scenario = json!({
        "model": "scripted-1",
        "messages": [{"role": "user", "text": "an image please"}],
        "limits": {"tool_timeout_ms": 20000},
        "mcp_servers": [{"name": "everything"}],
        "provider": {"type": "scripted", "calls": [
            [{"tool_call": {"call_id": "c1", "name": "mcp__everything__get-tiny-image", "arguments": {}}},
             {"complete": {"finish": "tool_calls"}}],
            [{"text": "Here it is."}, {"complete": {"finish": "stop"}}]
        ]}
    });
    let run = daemon.create(&scenario.to_string(), None).await;
    assert_eq!(daemon.wait_ended(&run, None).await["status"], "completed");
    let b = Browser::start(&tools).await;
    b.goto(&daemon.url(&format!("/runs/{run}"))).await;
    wait_run_status(&b, "completed", SECS_20).await;
    let image = b
        .wait_js(
            "the tool's image to load",
            SECS_10,
            "const i = document.querySelector('.tool-call[data-call-id=c1] .tool-images img.media-image');\
             return i && i.complete && i.naturalWidth > 0 ? [i.src, i.alt] : null;",
        )
        .await;
    assert!(image[0].as_str().unwrap().starts_with("blob:"), "{image}");
    assert!(
        image[1].as_str().unwrap().starts_with("image image/png "),
        "{image}"
    );
    b.close().await;
}

/// The same scenario the cross-site pages try to start.
fn drive_by() -> String {
    json!({
        "model": "scripted-1",
        "messages": [{"role": "user", "text": "spend the credits"}],
        "provider": {"type": "scripted", "calls": [[{"text": "x"}, {"complete": {"finish": "stop"}}]]}
    })
    .to_string()
}

/// 7. A cross-site form or `text/plain` POST starts nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_cross_site_post_starts_nothing() {
    let Some(tools) = tools("a_cross_site_post_starts_nothing") else {
        return;
    };
    let site = Site::start().await;
    let daemon = start_daemon(&[], &[]);
    let proxy = Proxy::start(daemon.addr).await;
    let body = drive_by();
    // A text/plain form sends `name=value`: split the JSON so that the
    // `=` lands inside a string and the body is the scenario again.
    let split = body.find("spend").unwrap();
    let (name, value) = (&body[..split], &body[split..]);
    let attr = |s: &str| s.replace('&', "&amp;").replace('\'', "&#39;");
    site.page(
        "/form",
        &format!(
            "<!doctype html><meta charset=utf-8><title>form</title>\
             <form id=f method=post enctype=text/plain action='{}/v1/runs'>\
             <input type=hidden name='{}' value='{}'></form>\
             <script>document.getElementById('f').submit();</script>",
            proxy.base(),
            attr(name),
            attr(value)
        ),
    );
    let b = Browser::start(&tools).await;
    b.goto(&site.url("/form")).await;
    // The browser follows the form to the daemon's answer.
    let base = proxy.base();
    let landed = wait_until("the form's answer to load", SECS_10, || async {
        let url = b.client.current_url().await.ok()?;
        let text = b.js(BODY_TEXT, vec![]).await;
        (url.as_str().starts_with(&base) && !text.as_str()?.is_empty())
            .then(|| text.as_str().unwrap().to_owned())
    })
    .await;
    assert!(
        landed.contains("urn:keel:problem:"),
        "the form was not refused: {landed}"
    );
    let sent = proxy.sent();
    assert!(sent.starts_with("POST /v1/runs "), "{sent}");
    assert!(
        sent.contains("=spend the credits"),
        "the form body is not the scenario: {sent}"
    );

    // A no-cors text/plain fetch: opaque to the page, and refused.
    b.goto(&site.url("/page")).await;
    let got = b
        .js_async(
            "const done = arguments[arguments.length - 1];
             fetch(arguments[0], {method: 'POST', mode: 'no-cors',
                                  headers: {'Content-Type': 'text/plain'}, body: arguments[1]})
               .then(r => done(r.type), e => done('error: ' + e));",
            vec![json!(format!("{base}/v1/runs")), json!(body)],
        )
        .await;
    assert_eq!(got, json!("opaque"));
    assert_eq!(proxy.requests("POST /v1/runs "), 2, "{}", proxy.sent());
    assert!(
        daemon.run_ids(None).await.is_empty(),
        "a cross-site POST started a run"
    );

    b.close().await;
}

/// 7b. With the origin allowed, a `text/plain` POST is still refused
/// (415) and starts nothing; the page can read why (the refusal carries
/// its CORS header); the same scenario as JSON starts a run.
#[tokio::test(flavor = "multi_thread")]
async fn an_allowed_pages_text_plain_post_is_a_readable_415() {
    let Some(tools) = tools("an_allowed_pages_text_plain_post_is_a_readable_415") else {
        return;
    };
    let site = Site::start().await;
    let body = drive_by();
    let b = Browser::start(&tools).await;
    b.goto(&site.url("/page")).await;
    let daemon = start_daemon(&["--allow-origin", &site.origin], &[]);
    let proxy = Proxy::start(daemon.addr).await;
    let got = b
        .js_async(
            "const done = arguments[arguments.length - 1];
             fetch(arguments[0], {method: 'POST', headers: {'Content-Type': 'text/plain'},
                                  body: arguments[1]})
               .then(r => done(r.status), e => done('error: ' + e));",
            vec![json!(format!("{}/v1/runs", proxy.base())), json!(body)],
        )
        .await;
    assert_eq!(got, json!(415), "an allowed page's text/plain POST");
    assert_eq!(proxy.requests("POST /v1/runs "), 1, "{}", proxy.sent());
    let answer = proxy.received();
    assert!(answer.starts_with("HTTP/1.1 415 "), "{answer}");
    assert!(
        answer.contains("urn:keel:problem:unsupported-media-type"),
        "{answer}"
    );
    let r = http()
        .post(daemon.url("/v1/runs"))
        .header("origin", &site.origin)
        .header("content-type", "text/plain")
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 415);
    assert!(daemon.run_ids(None).await.is_empty());
    // ... while the same scenario as JSON (after a preflight) starts a run:
    // the body was a real scenario all along.
    let got = b
        .js_async(
            "const done = arguments[arguments.length - 1];
             fetch(arguments[0], {method: 'POST', headers: {'Content-Type': 'application/json'},
                                  body: arguments[1]})
               .then(r => done(r.status), e => done('error: ' + e));",
            vec![json!(daemon.url("/v1/runs")), json!(body)],
        )
        .await;
    assert_eq!(got, json!(201), "an allowed page's JSON POST");
    assert_eq!(daemon.run_ids(None).await.len(), 1);
    b.close().await;
}

/// A raw HTTP/1.1 GET with the given Host; the status code.
fn status_with_host(daemon: &Daemon, path: &str, host: &str) -> u16 {
    let mut s = std::net::TcpStream::connect(daemon.addr).unwrap();
    s.set_read_timeout(Some(SECS_10)).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {out:?}"))
}

/// 8. A foreign Host header is refused; a page on a rebinding name
/// (rebind.test resolving to 127.0.0.1) reads nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_foreign_host_and_a_rebinding_page_read_nothing() {
    let Some(tools) = tools("a_foreign_host_and_a_rebinding_page_read_nothing") else {
        return;
    };
    let daemon = start_daemon(&[], &[]);
    let run = daemon.create(&quick(), None).await;
    daemon.wait_ended(&run, None).await;
    let port = daemon.port();
    for path in [
        "/v1/runs",
        &format!("/v1/runs/{run}/events"),
        "/",
        "/ui/app.js",
    ] {
        let code = status_with_host(&daemon, path, "attacker.example");
        assert!(
            matches!(code, 421 | 403),
            "{path} with a foreign Host: {code}"
        );
        let code = status_with_host(&daemon, path, &format!("attacker.example:{port}"));
        assert!(
            matches!(code, 421 | 403),
            "{path} with a foreign Host: {code}"
        );
    }
    assert_eq!(
        status_with_host(&daemon, "/v1/runs", &format!("127.0.0.1:{port}")),
        200
    );
    assert_eq!(
        status_with_host(&daemon, "/v1/runs", &format!("localhost:{port}")),
        200
    );

    let b = Browser::start(&tools).await;
    b.goto(&format!("http://rebind.test:{port}/")).await;
    let page = b.js(BODY_TEXT, vec![]).await;
    let page = page.as_str().unwrap();
    // The page reached the daemon (its refusal), and is not the viewer.
    assert!(page.contains("host-not-allowed"), "{page:?}");
    assert_eq!(b.count("table#runs, #transcript, #timeline").await, 0);
    let got = b
        .js_async(
            "const done = arguments[arguments.length - 1];
             fetch('/v1/runs').then(r => r.text().then(t => done({status: r.status, body: t})),
                                    e => done({status: 0, body: String(e)}));",
            vec![],
        )
        .await;
    let status = got["status"].as_u64().unwrap();
    let body = got["body"].as_str().unwrap();
    assert!(
        matches!(status, 421 | 403),
        "the rebinding page got {status}: {body}"
    );
    assert!(
        !body.contains(&run),
        "the rebinding page read the run list: {body}"
    );
    b.close().await;
}

/// The viewer works with a token: the page holds no data until the
/// token is saved, then lists and shows the run.
#[tokio::test(flavor = "multi_thread")]
async fn the_viewer_works_with_a_token() {
    let Some(tools) = tools("the_viewer_works_with_a_token") else {
        return;
    };
    let token = "browser-test-token-0123456789";
    let daemon = start_daemon(&[], &[("KEEL_TOKEN", token)]);
    let run = daemon.create(&quick(), Some(token)).await;
    daemon.wait_ended(&run, Some(token)).await;
    let r = http().get(daemon.url("/v1/runs")).send().await.unwrap();
    assert_eq!(r.status(), 401, "the API answered without the token");

    let b = Browser::start(&tools).await;
    b.goto(&daemon.url("/")).await;
    let input = b.wait_css("input#token", SECS_10).await;
    // Without the token the list stays empty (it polls every second).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(b.count("tr.run").await, 0, "runs listed without the token");
    input.send_keys(token).await.unwrap();
    b.wait_css("button#token-save", SECS_10)
        .await
        .click()
        .await
        .unwrap();
    b.wait_css(
        &format!("table#runs tr.run[data-run-id='{run}'][data-status=completed]"),
        SECS_10,
    )
    .await;
    let stored = b
        .js("return sessionStorage.getItem('keel-token');", vec![])
        .await;
    assert_eq!(stored, json!(token));
    // The run page streams with the token (fetch, Authorization).
    b.goto(&daemon.url(&format!("/runs/{run}"))).await;
    wait_run_status(&b, "completed", SECS_20).await;
    let text = assistant_text(&b).await;
    assert!(text.contains("w0 w1"), "{text:?}");
    b.close().await;
}

/// Two turns with usage, the second streaming for about 2.5 s.
fn two_turns() -> String {
    let mut second: Vec<Value> = Vec::new();
    for i in 0..25 {
        second.push(json!({"delay_ms": 100}));
        second.push(json!({"text": format!("t{i} ")}));
    }
    second.push(json!({"complete": {"finish": "stop",
                                    "usage": {"input_tokens": 45, "output_tokens": 6}}}));
    json!({
        "model": "scripted-1",
        "messages": [{"role": "user", "text": "two turns"}],
        "tools": [{"name": "note", "description": "notes", "parameters": {"type": "object"},
                   "script": [{"ok": "noted"}]}],
        "provider": {"type": "scripted", "calls": [
            [{"delay_ms": 300}, {"text": "Noting."},
             {"tool_call": {"call_id": "n1", "name": "note", "arguments": {}}},
             {"complete": {"finish": "tool_calls",
                           "usage": {"input_tokens": 300, "output_tokens": 40}}}],
            second
        ]}
    })
    .to_string()
}

/// The run list updates live (running, then completed, without a
/// reload) and shows start, turns and tokens from `GET /v1/runs`.
#[tokio::test(flavor = "multi_thread")]
async fn the_run_list_updates_live_with_turns_and_tokens() {
    let Some(tools) = tools("the_run_list_updates_live_with_turns_and_tokens") else {
        return;
    };
    let daemon = start_daemon(&[], &[]);
    let b = Browser::start(&tools).await;
    b.goto(&daemon.url("/")).await;
    b.wait_css("table#runs", SECS_10).await;
    let run = daemon.create(&two_turns(), None).await;
    let row = format!("table#runs tr.run[data-run-id='{run}']");
    b.wait_css(&format!("{row}[data-status=running]"), SECS_10)
        .await;
    let list = daemon.get_json("/v1/runs", None).await;
    let entry = |list: &Value| -> Value {
        list["runs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["run_id"] == run.as_str())
            .unwrap_or_else(|| panic!("{run} not in {list}"))
            .clone()
    };
    let live = entry(&list);
    assert_eq!(live["status"], "running", "{live}");
    assert!(
        live["started_ts"].is_u64(),
        "a live run without started_ts: {live}"
    );
    // Updated in place: no reload.
    b.js("window.__same_page = true; return true;", vec![])
        .await;
    b.wait_css(&format!("{row}[data-status=completed]"), SECS_20)
        .await;
    assert_eq!(
        b.js("return window.__same_page === true;", vec![]).await,
        json!(true)
    );
    let done = entry(&daemon.get_json("/v1/runs", None).await);
    assert_eq!(done["turns"], 2, "{done}");
    assert_eq!(
        done["usage"],
        json!({"input_tokens": 345, "output_tokens": 46}),
        "{done}"
    );
    let text = b
        .wait_js(
            "the row to show the tokens",
            SECS_10,
            &format!(
                "const r = document.querySelector(\"{row}\"); \
                 return r && r.textContent.includes('345') && r.textContent.includes('46') \
                 ? r.textContent : null;"
            ),
        )
        .await;
    println!("row: {text}");
    b.close().await;
}

/// The viewer's own stream survives a dropped connection: it reconnects
/// with Last-Event-ID and applies every event once (the transcript has
/// each streamed word once, in order).
#[tokio::test(flavor = "multi_thread")]
async fn the_viewer_survives_a_dropped_connection() {
    let Some(tools) = tools("the_viewer_survives_a_dropped_connection") else {
        return;
    };
    let daemon = start_daemon(&[], &[]);
    let proxy = Proxy::start(daemon.addr).await;
    let run = daemon.create(&slow_text(40, 80), None).await;
    let b = Browser::start(&tools).await;
    // The viewer served through the proxy: its stream can be cut.
    b.goto(&format!("{}/runs/{run}", proxy.base())).await;
    wait_event_count(&b, "the viewer to apply some events", 10).await;
    let before = proxy.accepted();
    assert!(proxy.drop_all() >= 1, "no open connection to cut");
    assert_eq!(daemon.run(&run, None).await["status"], "running");
    wait_run_status(&b, "completed", SECS_20).await;
    assert!(proxy.accepted() > before, "the viewer did not reconnect");
    let events = daemon.events(&run, None).await;
    assert_viewer_applied(&b, &events).await;
    let text = assistant_text(&b).await;
    let want: String = (0..40).map(|i| format!("w{i} ")).collect();
    assert_eq!(text.trim(), want.trim(), "lost or repeated text");
    assert_eq!(b.count("#timeline .bar[data-scope=model]").await, 1);
    b.close().await;
}

/// Deny and cancel from the page: a denied tool does not run; the cancel
/// button cancels a running run.
#[tokio::test(flavor = "multi_thread")]
async fn deny_and_cancel_from_the_page() {
    let Some(tools) = tools("deny_and_cancel_from_the_page") else {
        return;
    };
    let daemon = start_daemon(&[], &[]);
    let b = Browser::start(&tools).await;

    let run = daemon.create(&gated(), None).await;
    b.goto(&daemon.url(&format!("/runs/{run}"))).await;
    b.wait_css(".interaction button.deny", SECS_20)
        .await
        .click()
        .await
        .unwrap();
    let ended = daemon.wait_ended(&run, None).await;
    let events = daemon.events(&run, None).await;
    let kinds: Vec<&str> = events.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert!(
        !kinds.contains(&"tool.completed"),
        "a denied tool ran: {kinds:?}"
    );
    let decided = events
        .iter()
        .find(|e| e["kind"] == "interaction.completed")
        .unwrap_or_else(|| panic!("no interaction.completed: {kinds:?}"));
    assert!(decided.to_string().contains("denied"), "{decided}");
    let status = ended["status"].as_str().unwrap().to_owned();
    wait_run_status(&b, &status, SECS_10).await;

    let run = daemon.create(&slow_text(100, 100), None).await;
    b.goto(&daemon.url(&format!("/runs/{run}"))).await;
    wait_event_count(&b, "the run to stream", 5).await;
    b.wait_css("button#cancel", SECS_10)
        .await
        .click()
        .await
        .unwrap();
    wait_run_status(&b, "cancelled", SECS_10).await;
    assert_eq!(daemon.wait_ended(&run, None).await["status"], "cancelled");
    assert!(
        b.count("#timeline .bar[data-scope=run][data-state=cancelled]")
            .await
            == 1
    );
    b.close().await;
}

/// A page on an allowed origin uses the API with a token: the preflight
/// allows `Authorization` and `Content-Type`, `Location` is exposed, and
/// the 401 without the token is readable.
#[tokio::test(flavor = "multi_thread")]
async fn an_allowed_origin_uses_the_api_with_a_token() {
    let Some(tools) = tools("an_allowed_origin_uses_the_api_with_a_token") else {
        return;
    };
    let token = "cross-origin-token-0123456789";
    let site = Site::start().await;
    let daemon = start_daemon(&["--allow-origin", &site.origin], &[("KEEL_TOKEN", token)]);
    let b = Browser::start(&tools).await;
    b.goto(&site.url("/page")).await;
    let got = b
        .js_async(
            "const [base, token, body, done] = arguments;
             (async () => {
               const none = await fetch(base + '/v1/runs');
               const post = await fetch(base + '/v1/runs', {method: 'POST', body,
                 headers: {'Content-Type': 'application/json', 'Authorization': 'Bearer ' + token}});
               const created = await post.json();
               const list = await fetch(base + '/v1/runs',
                 {headers: {'Authorization': 'Bearer ' + token}});
               return {none: none.status, post: post.status, location: post.headers.get('location'),
                       run: created.run_id, list: list.status, listed: await list.text()};
             })().then(done, e => done({error: String(e)}));",
            vec![json!(daemon.base), json!(token), json!(quick())],
        )
        .await;
    assert_eq!(got["none"], 401, "{got}");
    assert_eq!(got["post"], 201, "{got}");
    let run = got["run"].as_str().unwrap();
    assert!(
        got["location"].as_str().is_some_and(|l| l.ends_with(run)),
        "Location not exposed: {got}"
    );
    assert_eq!(got["list"], 200, "{got}");
    assert!(got["listed"].as_str().unwrap().contains(run), "{got}");
    b.close().await;
}

/// A run that fails at once (a non-retryable provider error).
fn failing() -> String {
    json!({
        "model": "scripted-1",
        "messages": [{"role": "user", "text": "fail"}],
        "limits": {"retry": {"max_attempts": 1}},
        "provider": {"type": "scripted", "calls": [
            [{"fail": {"kind": "auth", "message": "no", "retryable": false}}]
        ]}
    })
    .to_string()
}

/// Whether "Show more" is on screen (not only `hidden` as a property: a
/// style that overrides it would show it anyway).
const SHOWN_MORE: &str = "const m = document.getElementById('runs-more'); \
     return getComputedStyle(m).display !== 'none' && m.offsetParent !== null;";

/// The run ids the list shows, top to bottom.
async fn listed(b: &Browser) -> Vec<String> {
    let v = b
        .js(
            "return Array.from(document.querySelectorAll('table#runs tr.run')).map(r => r.dataset.runId);",
            vec![],
        )
        .await;
    serde_json::from_value(v).unwrap()
}

/// Waits until the list shows exactly `expected` (in any order).
async fn wait_listed(b: &Browser, what: &str, expected: &[String]) {
    let mut want = expected.to_vec();
    want.sort();
    wait_until(what, SECS_20, || async {
        let mut got = listed(b).await;
        got.sort();
        (got == want).then_some(())
    })
    .await;
}

/// Submits the list's filter form with these values.
async fn filter(b: &Browser, status: &str, conversation: &str) {
    b.js(
        "document.getElementById('filter-status').value = arguments[0]; \
         document.getElementById('filter-conversation').value = arguments[1]; \
         document.getElementById('filter-since').value = ''; \
         document.querySelector('#list-filters button[type=submit]').click(); return true;",
        vec![json!(status), json!(conversation)],
    )
    .await;
}

/// The run list's filters (status, conversation, since) set the query of
/// `GET /v1/runs` and the page's own URL, and the list pages by `next`
/// with them: one run a page (`/?limit=1`), at most 20 pages a poll, then
/// "Show more". A refused filter is a problem shown as text.
#[tokio::test(flavor = "multi_thread")]
async fn the_run_list_filters_and_pages() {
    let Some(tools) = tools("the_run_list_filters_and_pages") else {
        return;
    };
    let daemon = start_daemon(&[], &[]);
    let mut all = Vec::new();
    for _ in 0..21 {
        all.push(daemon.create(&quick(), None).await);
    }
    let failed = daemon.create(&failing(), None).await;
    all.push(failed.clone());
    for run in &all {
        daemon.wait_ended(run, None).await;
    }
    let first = all[0].clone();
    let r = http()
        .post(daemon.url(&format!("/v1/runs/{first}/messages")))
        .header("content-type", "application/json")
        .body(quick())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let follow_up = r.json::<Value>().await.unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    daemon.wait_ended(&follow_up, None).await;
    all.push(follow_up.clone());

    let b = Browser::start(&tools).await;
    b.goto(&daemon.url("/?limit=1")).await;
    // 20 pages of one run, then the rest on "Show more".
    wait_until("20 runs and more", SECS_20, || async {
        let shown = listed(&b).await.len();
        let more = b.js(SHOWN_MORE, vec![]).await;
        (shown == 20 && more == json!(true)).then_some(())
    })
    .await;
    b.js(
        "document.getElementById('runs-more-button').click(); return true;",
        vec![],
    )
    .await;
    wait_listed(&b, "every run after Show more", &all).await;
    assert_eq!(
        b.js(SHOWN_MORE, vec![]).await,
        json!(false),
        "no longer shown"
    );

    filter(&b, "failed", "").await;
    wait_listed(&b, "the failed run", std::slice::from_ref(&failed)).await;
    let search = b.js("return location.search;", vec![]).await;
    assert_eq!(search, json!("?status=failed&limit=1"));
    let api = daemon.get_json("/v1/runs?status=failed", None).await;
    assert_eq!(api["runs"].as_array().unwrap().len(), 1, "{api}");

    // The conversation of the follow-up: its first run and itself, over
    // two pages.
    filter(&b, "", &follow_up).await;
    wait_listed(&b, "the conversation", &[first.clone(), follow_up.clone()]).await;
    filter(&b, "completed", &first).await;
    wait_listed(
        &b,
        "the completed runs of the conversation",
        &[first.clone(), follow_up.clone()],
    )
    .await;
    filter(&b, "failed", &first).await;
    wait_listed(&b, "no failed run in the conversation", &[]).await;
    b.wait_css("#runs-filtered-empty:not([hidden])", SECS_10)
        .await;

    // `since` from the page's URL: the form shows it, nothing is that new.
    let later = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        + 3_600_000;
    b.goto(&daemon.url(&format!("/?since={later}"))).await;
    b.wait_css("#runs-filtered-empty:not([hidden])", SECS_10)
        .await;
    assert_eq!(listed(&b).await, Vec::<String>::new());
    let since = b
        .js(
            "return document.getElementById('filter-since').value;",
            vec![],
        )
        .await;
    assert!(since.as_str().is_some_and(|s| s.len() >= 16), "{since}");
    b.js(
        "document.getElementById('filter-clear').click(); return true;",
        vec![],
    )
    .await;
    wait_listed(&b, "every run once cleared", &all).await;
    assert_eq!(b.js("return location.search;", vec![]).await, json!(""));

    // A refused filter: the problem, as text.
    filter(&b, "", "<b>not a run id</b>").await;
    let notice = b
        .wait_js(
            "the problem notice",
            SECS_10,
            "const n = document.getElementById('notice'); \
             return n.hidden ? null : n.textContent;",
        )
        .await;
    assert!(
        notice.as_str().unwrap().contains("conversation"),
        "{notice}"
    );
    assert_eq!(b.count("#notice b").await, 0, "rendered as text");
    b.close().await;
}
