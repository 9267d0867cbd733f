//! `keel run` with tools from real MCP servers: server-everything and
//! server-filesystem (npm), mcp-server-time (PyPI) and the fault server
//! (the Python SDK), mixed with a scripted model. Every run's history must
//! pass `keel verify`. See RFC 2026-12-02-mcp-tools.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{Sandbox, mcp};
use serde_json::{Value, json};
use std::path::Path;

/// Shaped like a key, so the secret screen redacts it.
const SECRET: &str = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789ABCD";

/// One scripted model call: the tool calls it makes (`(call id, tool,
/// arguments)`); an empty list ends the run with text.
type Turn = Vec<(&'static str, String, Value)>;

/// A scenario: the servers, then one model call per turn, then a final
/// answer.
fn scenario(servers: Value, turns: &[Turn], limits: Value) -> String {
    let mut calls: Vec<Value> = turns
        .iter()
        .map(|calls| {
            let mut items: Vec<Value> = calls
                .iter()
                .map(|(id, name, args)| json!({"tool_call": {"call_id": id, "name": name, "arguments": args}}))
                .collect();
            items.push(json!({"complete": {"finish": "tool_calls"}}));
            Value::Array(items)
        })
        .collect();
    calls.push(json!([{"text": "done"}, {"complete": {"finish": "stop"}}]));
    json!({
        "model": "scripted-1",
        "messages": [{"role": "user", "text": "use the tools"}],
        "limits": limits,
        "mcp_servers": servers,
        "provider": {"type": "scripted", "calls": calls}
    })
    .to_string()
}

/// What one `keel run --json` did.
struct Ran {
    code: i32,
    events: Vec<Value>,
    stderr: String,
    sandbox: Sandbox,
}

impl Ran {
    /// The terminal event of tool call `call_id`.
    fn tool_end(&self, call_id: &str) -> &Value {
        self.events
            .iter()
            .find(|e| {
                let kind = e["kind"].as_str().unwrap_or_default();
                (kind == "tool.completed" || kind == "tool.failed")
                    && e["payload"]["call_id"] == call_id
            })
            .unwrap_or_else(|| {
                panic!(
                    "no terminal for {call_id}: {}\n{}",
                    self.kinds(),
                    self.stderr
                )
            })
    }

    fn output(&self, call_id: &str) -> String {
        let end = self.tool_end(call_id);
        assert_eq!(end["kind"], "tool.completed", "{end}");
        end["payload"]["output"].as_str().unwrap().to_owned()
    }

    fn failure(&self, call_id: &str) -> &Value {
        let end = self.tool_end(call_id);
        assert_eq!(end["kind"], "tool.failed", "{end}");
        &end["payload"]
    }

    fn of_kind(&self, kind: &str) -> Vec<&Value> {
        self.events.iter().filter(|e| e["kind"] == kind).collect()
    }

    fn kinds(&self) -> String {
        let kinds: Vec<&str> = self
            .events
            .iter()
            .filter_map(|e| e["kind"].as_str())
            .collect();
        kinds.join(" ")
    }

    /// The run completed and `keel verify` passes.
    fn verified(self) -> Ran {
        assert_eq!(self.code, 0, "keel run: {}\n{}", self.stderr, self.kinds());
        common::verify_summary(&self.sandbox.db());
        self
    }
}

fn run(text: &str, envs: &[(&str, &str)]) -> Ran {
    let sandbox = Sandbox::new();
    let file = sandbox.write("scenario.json", text);
    let out = common::keel()
        .arg("run")
        .arg(&file)
        .args(sandbox.db_args())
        .arg("--json")
        .envs(envs.iter().copied())
        .output()
        .unwrap();
    let (stdout, stderr) = common::text(&out);
    let events = stdout
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    Ran {
        code: out.status.code().unwrap_or(-1),
        events,
        stderr,
        sandbox,
    }
}

fn server(name: &str, command: Vec<String>) -> Value {
    json!({"name": name, "command": command})
}

fn call(id: &'static str, tool: &str, args: Value) -> (&'static str, String, Value) {
    (id, tool.to_owned(), args)
}

/// The fault server's log: one JSON object a line.
fn fault_log(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn everything_echo_sum_progress_and_an_image() {
    let Some(everything) = mcp::everything_stdio("everything_echo_sum_progress_and_an_image")
    else {
        return;
    };
    let text = scenario(
        json!([server("everything", everything.clone())]),
        &[vec![
            call("c1", "mcp__everything__echo", json!({"message": "hello"})),
            call("c2", "mcp__everything__get-sum", json!({"a": 2, "b": 40})),
            call(
                "c3",
                "mcp__everything__trigger-long-running-operation",
                json!({"duration": 1, "steps": 2}),
            ),
            call("c4", "mcp__everything__get-tiny-image", json!({})),
        ]],
        json!({"tool_timeout_ms": 20000}),
    );
    let ran = run(&text, &[]).verified();
    assert_eq!(ran.output("c1"), "Echo: hello");
    assert!(ran.output("c2").contains("42"), "{}", ran.output("c2"));
    assert!(!ran.output("c3").is_empty());
    // The image arrives as an image part of the result, byte-exact; the
    // text around it stays the text.
    assert_eq!(
        ran.output("c4"),
        "Here's the image you requested:\nThe image above is the MCP logo."
    );
    let images = ran.tool_end("c4")["payload"]["images"].clone();
    let expected = json!([{"media_type": "image/png", "base64": tiny_image(&everything)}]);
    assert_eq!(images, expected);
    // Turn 1 records what the model was offered from the server.
    let changed = ran.of_kind("keel.tools_changed");
    assert_eq!(changed.len(), 1, "{}", ran.kinds());
    let added = changed[0]["payload"]["added"].as_array().unwrap();
    assert!(
        added.iter().any(|n| n == "mcp__everything__echo"),
        "{added:?}"
    );
    assert_eq!(changed[0]["payload"]["source"], "mcp:everything");
}

/// server-everything's `MCP_TINY_IMAGE` (the base64 `get-tiny-image`
/// returns), read from the pinned package next to `command`'s script.
fn tiny_image(command: &[String]) -> String {
    let index = Path::new(&command[1]);
    let source = index.with_file_name("tools").join("get-tiny-image.js");
    let text =
        std::fs::read_to_string(&source).unwrap_or_else(|e| panic!("{}: {e}", source.display()));
    let (_, rest) = text
        .split_once("MCP_TINY_IMAGE = \"")
        .unwrap_or_else(|| panic!("no MCP_TINY_IMAGE in {}", source.display()));
    rest.split('"').next().unwrap_or_default().to_owned()
}

#[test]
fn time_server_results_and_is_error() {
    let Some(time) = mcp::time_server("time_server_results_and_is_error") else {
        return;
    };
    let text = scenario(
        json!([server("time", time)]),
        &[vec![
            call(
                "c1",
                "mcp__time__get_current_time",
                json!({"timezone": "UTC"}),
            ),
            call(
                "c2",
                "mcp__time__get_current_time",
                json!({"timezone": "Not/AZone"}),
            ),
        ]],
        json!({"tool_timeout_ms": 20000}),
    );
    let ran = run(&text, &[]).verified();
    // The server's text item already holds its structuredContent as JSON,
    // so the JSON is not repeated (the flattening rule).
    let now: Value = serde_json::from_str(&ran.output("c1")).unwrap();
    assert_eq!(now["timezone"], "UTC", "{now}");
    // isError: a typed failure, fed back to the model.
    let failed = ran.failure("c2");
    assert_eq!(failed["outcome"], "uncertain", "{failed}");
}

#[test]
fn large_filesystem_outputs_are_cut_and_the_cut_is_recorded() {
    let data = tempfile::tempdir().unwrap();
    let root = data.path().canonicalize().unwrap();
    let big = root.join("big.txt");
    std::fs::write(&big, "0123456789abcdef".repeat(200_000)).unwrap();
    let Some(files) = mcp::filesystem("large_filesystem_outputs_are_cut", &root) else {
        return;
    };
    let entry = json!({"name": "files", "command": files, "max_output_bytes": 65536});
    let text = scenario(
        json!([entry]),
        &[vec![call(
            "c1",
            "mcp__files__read_text_file",
            json!({"path": big.display().to_string()}),
        )]],
        json!({"tool_timeout_ms": 20000}),
    );
    let ran = run(&text, &[]).verified();
    let output = ran.output("c1");
    assert!(output.len() <= 65536, "{}", output.len());
    assert!(output.starts_with("0123456789abcdef"));
    let marker = output.rsplit('\n').next().unwrap();
    assert!(
        marker.starts_with("[output cut: kept ") && marker.ends_with(" bytes]"),
        "{marker}"
    );
    let cut = &ran.tool_end("c1")["payload"]["output_cut"];
    assert_eq!(
        cut["kept_bytes"].as_u64(),
        Some(output.len() as u64),
        "{cut}"
    );
    assert!(
        cut["original_bytes"].as_u64().unwrap() >= 3_200_000,
        "{cut}"
    );
}

#[test]
fn a_call_past_its_timeout_is_uncertain_and_the_server_hears_the_cancel() {
    let sandbox = Sandbox::new();
    let log = sandbox.path("fault.log");
    let Some(fault) = mcp::fault_server("a_call_past_its_timeout", &log) else {
        return;
    };
    let entry = json!({"name": "fault", "command": fault, "tools": {"hang": {"timeout_ms": 1500}}});
    let text = scenario(
        json!([entry]),
        &[
            vec![call("c1", "mcp__fault__hang", json!({}))],
            vec![call(
                "c2",
                "mcp__fault__echo",
                json!({"text": "still here"}),
            )],
        ],
        json!({"tool_timeout_ms": 20000}),
    );
    let ran = run(&text, &[]).verified();
    let failed = ran.failure("c1");
    assert_eq!(failed["outcome"], "uncertain", "{failed}");
    assert!(
        failed["error"].as_str().unwrap().contains("timed out"),
        "{failed}"
    );
    assert_eq!(ran.output("c2"), "still here");
    let entries = fault_log(&log);
    let started = entries
        .iter()
        .find(|e| e["started"] == "hang")
        .expect("the call reached the server");
    let cancelled = entries
        .iter()
        .find(|e| e.get("cancelled").is_some())
        .unwrap_or_else(|| panic!("no notifications/cancelled reached the server: {entries:?}"));
    assert_eq!(cancelled["cancelled"], started["request_id"], "{entries:?}");
    // keel run closed the server (stdin first) before it exited.
    assert!(stopped(&entries), "{entries:?}");
}

#[test]
fn a_crash_mid_call_is_uncertain_and_the_server_is_started_again() {
    let sandbox = Sandbox::new();
    let log = sandbox.path("fault.log");
    let Some(fault) = mcp::fault_server("a_crash_mid_call", &log) else {
        return;
    };
    let secret = SECRET;
    let text = scenario(
        json!([server("fault", fault)]),
        &[
            vec![call(
                "c0",
                "mcp__fault__stderr",
                json!({"line": format!("using key {secret}")}),
            )],
            vec![call("c1", "mcp__fault__crash", json!({}))],
            vec![call("c2", "mcp__fault__echo", json!({"text": "back"}))],
        ],
        json!({"tool_timeout_ms": 20000}),
    );
    let ran = run(&text, &[]).verified();
    let failed = ran.failure("c1");
    assert_eq!(failed["outcome"], "uncertain", "{failed}");
    assert_eq!(failed["retry"], "retryable", "{failed}");
    let error = failed["error"].as_str().unwrap();
    // The stderr tail is in the failure, screened.
    assert!(error.contains("using key [redacted]"), "{error}");
    assert_eq!(ran.output("c2"), "back");
    let starts = fault_log(&log)
        .iter()
        .filter(|e| e["server"] == "started")
        .count();
    assert_eq!(starts, 2, "{:?}", fault_log(&log));
    assert!(!error.contains(secret), "{error}");
}

#[test]
fn a_tool_added_at_run_time_is_offered_at_the_next_turn() {
    let sandbox = Sandbox::new();
    let log = sandbox.path("fault.log");
    let Some(fault) = mcp::fault_server("a_tool_added_at_run_time", &log) else {
        return;
    };
    let text = scenario(
        json!([server("fault", fault)]),
        &[
            vec![call("c1", "mcp__fault__add_tool", json!({"name": "x"}))],
            vec![call("c2", "mcp__fault__late_x", json!({"a": 1}))],
        ],
        json!({"tool_timeout_ms": 20000}),
    );
    let ran = run(&text, &[]).verified();
    assert!(
        ran.output("c2").starts_with("late_x called"),
        "{}",
        ran.output("c2")
    );
    let changes = ran.of_kind("keel.tools_changed");
    assert_eq!(changes.len(), 2, "{}", ran.kinds());
    assert_eq!(changes[1]["payload"]["turn"], 2);
    assert_eq!(
        changes[1]["payload"]["added"],
        json!(["mcp__fault__late_x"])
    );
}

#[test]
fn a_server_gets_a_small_environment_and_never_a_key() {
    let sandbox = Sandbox::new();
    let log = sandbox.path("fault.log");
    let Some(fault) = mcp::fault_server("a_server_gets_a_small_environment", &log) else {
        return;
    };
    let entry = json!({"name": "fault", "command": fault, "env": ["GIVEN_TO_SERVER"]});
    let text = scenario(
        json!([entry]),
        &[vec![call("c1", "mcp__fault__env", json!({}))]],
        json!({"tool_timeout_ms": 20000}),
    );
    let ran = run(
        &text,
        &[
            ("GIVEN_TO_SERVER", "1"),
            ("OPENAI_API_KEY", SECRET),
            ("KEEL_TOKEN", "t"),
            ("HOST_ONLY", "1"),
        ],
    )
    .verified();
    let names: Vec<String> = ran.output("c1").lines().map(str::to_owned).collect();
    let allowed = [
        "PATH",
        "HOME",
        "LANG",
        "LC_ALL",
        "TMPDIR",
        "GIVEN_TO_SERVER",
    ];
    for name in &names {
        assert!(
            allowed.contains(&name.as_str()),
            "{name} reached the server: {names:?}"
        );
    }
    assert!(names.iter().any(|n| n == "GIVEN_TO_SERVER"), "{names:?}");
    for leaked in ["OPENAI_API_KEY", "KEEL_TOKEN", "HOST_ONLY"] {
        assert!(!names.iter().any(|n| n == leaked), "{leaked}: {names:?}");
    }
}

#[test]
fn a_server_that_does_not_start_fails_the_run_start_naming_it() {
    let sandbox = Sandbox::new();
    let log = sandbox.path("fault.log");
    let Some(mut hanging) = mcp::fault_server("a_server_that_does_not_start", &log) else {
        return;
    };
    hanging.push("--hang-initialize".into());
    let cases = [
        (
            json!({"name": "slow", "command": hanging, "startup_timeout_ms": 2000}),
            "MCP server slow: not ready within its startup timeout of 2000 ms",
        ),
        (
            json!({"name": "missing", "command": ["/nonexistent/mcp-server"]}),
            "MCP server missing: cannot start",
        ),
        // A server that says a key on stderr and exits: the tail is in the
        // error, screened.
        (
            json!({"name": "leaky", "command": ["sh", "-c", format!("echo using {SECRET} >&2; exit 3")]}),
            "MCP server leaky: initialize failed",
        ),
    ];
    for (entry, expected) in cases {
        let text = scenario(json!([entry]), &[], json!({}));
        let ran = run(&text, &[]);
        assert_eq!(ran.code, 1, "{}", ran.stderr);
        assert!(ran.stderr.contains(expected), "{}", ran.stderr);
        assert!(!ran.stderr.contains(SECRET), "{}", ran.stderr);
        if expected.contains("leaky") {
            assert!(
                ran.stderr.contains("its stderr ends: using [redacted]"),
                "{}",
                ran.stderr
            );
        }
        // Nothing was committed: the run never started.
        assert!(ran.events.is_empty(), "{}", ran.kinds());
    }
}

#[test]
fn streamable_http_servers_are_mounted_too() {
    let Some((_server, url)) = mcp::everything_http("streamable_http_servers_are_mounted_too")
    else {
        return;
    };
    let text = scenario(
        json!([{"name": "remote", "url": url}]),
        &[vec![call(
            "c1",
            "mcp__remote__echo",
            json!({"message": "over http"}),
        )]],
        json!({"tool_timeout_ms": 20000}),
    );
    let ran = run(&text, &[]).verified();
    assert_eq!(ran.output("c1"), "Echo: over http");
}

/// Polls the fault server's log (10 s at most) until `found` holds.
fn wait_log(path: &Path, what: &str, found: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let entries = fault_log(path);
        if found(&entries) {
            return entries;
        }
        assert!(std::time::Instant::now() < until, "{what}: {entries:?}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn stopped(entries: &[Value]) -> bool {
    entries.iter().any(|e| e["server"] == "stopped")
}

/// The run's events, from the daemon's JSON Lines page.
async fn served_events(c: &reqwest::Client, d: &daemon::Daemon, run: &str) -> Vec<Value> {
    daemon::get_text(
        c,
        d,
        &format!("/v1/runs/{run}/events?format=jsonl&limit=10000"),
    )
    .await
    .lines()
    .map(|l| serde_json::from_str(l).unwrap())
    .collect()
}

use common::daemon;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_runs_posted_scenarios_with_the_operators_servers_only() {
    let sandbox = Sandbox::new();
    let (log, other_log) = (sandbox.path("fault.log"), sandbox.path("other.log"));
    let (Some(everything), Some(fault), Some(other)) = (
        mcp::everything_stdio("serve_runs_posted_scenarios"),
        mcp::fault_server("serve_runs_posted_scenarios", &log),
        mcp::fault_server("serve_runs_posted_scenarios", &other_log),
    ) else {
        return;
    };
    let d = daemon::Serve::new()
        .args(&["--mcp", &format!("everything={}", everything.join(" "))])
        .args(&["--mcp", &server("fault", fault.clone()).to_string()])
        .start();
    let c = daemon::client();
    let turns = [vec![
        call("c1", "mcp__everything__echo", json!({"message": "served"})),
        call("c2", "mcp__fault__echo", json!({"text": "also served"})),
    ]];
    // By name, and the fault server by its exact entry.
    let body = scenario(
        json!([{"name": "everything"}, server("fault", fault)]),
        &turns,
        json!({"tool_timeout_ms": 20000}),
    );
    let run = daemon::create(&c, &d, body).await;
    daemon::wait_status(&c, &d, &run, "completed").await;
    let events = served_events(&c, &d, &run).await;
    let output = |id: &str| {
        let end = events
            .iter()
            .find(|e| e["kind"] == "tool.completed" && e["payload"]["call_id"] == id);
        end.unwrap_or_else(|| panic!("{id}: {events:?}"))["payload"]["output"].clone()
    };
    assert_eq!(output("c1"), "Echo: served");
    assert_eq!(output("c2"), "also served");
    // The run's end shut the server down.
    wait_log(&log, "the server was not shut down after the run", stopped);
    // Another entry under an allowed name, or an unlisted name: 403, and
    // nothing is started.
    for servers in [json!([server("fault", other)]), json!([{"name": "nope"}])] {
        let r = daemon::post(
            &c,
            &d,
            "/v1/runs",
            scenario(servers.clone(), &turns, json!({})),
        )
        .await;
        assert_eq!(r.status(), 403, "{servers}");
        let problem: Value = r.json().await.unwrap();
        assert_eq!(
            problem["type"], "urn:keel:problem:mcp-server-not-allowed",
            "{problem}"
        );
        assert!(
            problem["detail"]
                .as_str()
                .unwrap()
                .contains("rule mcp.server_allowed"),
            "{problem}"
        );
    }
    assert!(!other_log.exists(), "a refused server was started");
    common::verify_summary(&d.db);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_run_cancels_its_call_on_the_server() {
    let sandbox = Sandbox::new();
    let log = sandbox.path("fault.log");
    let Some(fault) = mcp::fault_server("cancelling_a_run_cancels_its_call", &log) else {
        return;
    };
    let d = daemon::Serve::new()
        .args(&["--mcp", &server("fault", fault).to_string()])
        .start();
    let c = daemon::client();
    let turns = [vec![call("c1", "mcp__fault__hang", json!({}))]];
    let run = daemon::create(
        &c,
        &d,
        scenario(
            json!([{"name": "fault"}]),
            &turns,
            json!({"tool_timeout_ms": 60000}),
        ),
    )
    .await;
    let entries = wait_log(&log, "the call never reached the server", |e| {
        e.iter().any(|e| e["started"] == "hang")
    });
    let request_id = entries.iter().find(|e| e["started"] == "hang").unwrap()["request_id"].clone();
    assert!(daemon::cancel(&c, &d, &run).await.status().is_success());
    daemon::wait_status(&c, &d, &run, "cancelled").await;
    let entries = wait_log(&log, "no notifications/cancelled reached the server", |e| {
        e.iter().any(|e| e["cancelled"] == request_id)
    });
    wait_log(&log, "the server was not shut down after the run", stopped);
    let events = served_events(&c, &d, &run).await;
    assert!(
        events.iter().any(|e| e["kind"] == "tool.cancelled"),
        "{events:?} {entries:?}"
    );
    common::verify_summary(&d.db);
}

#[test]
fn a_server_that_dies_between_calls_is_started_again() {
    let sandbox = Sandbox::new();
    let log = sandbox.path("fault.log");
    let Some(fault) = mcp::fault_server("a_server_that_dies_between_calls", &log) else {
        return;
    };
    let text = scenario(
        json!([server("fault", fault)]),
        &[vec![call(
            "c1",
            "mcp__fault__echo",
            json!({"text": "after the kill"}),
        )]],
        json!({"tool_timeout_ms": 20000}),
    );
    // The model thinks for 3 s before it calls: time to kill the server.
    let mut doc: Value = serde_json::from_str(&text).unwrap();
    doc["provider"]["calls"][0]
        .as_array_mut()
        .unwrap()
        .insert(0, json!({"delay_ms": 3000}));
    let text = doc.to_string();
    let running = std::thread::spawn(move || run(&text, &[]));
    // Killed after the start's list and turn 1's, while the model thinks.
    let entries = wait_log(&log, "the server was not listed twice", |e| {
        e.iter().filter(|e| e.get("listed").is_some()).count() >= 2
    });
    let pid = entries.iter().find_map(|e| e["pid"].as_u64()).unwrap();
    let killed = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let ran = running.join().unwrap().verified();
    assert_eq!(ran.output("c1"), "after the kill");
    let starts = fault_log(&log)
        .iter()
        .filter(|e| e["server"] == "started")
        .count();
    assert_eq!(starts, 2, "{:?}", fault_log(&log));
}
