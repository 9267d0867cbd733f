#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `keel serve --otlp`: a run with a model retry, a failed tool, an
//! approval and a sub-run, exported to a real OTLP/HTTP receiver
//! (`tests/frontends/otlp_receiver.py`: oteltest's HttpSink, pinned in
//! requirements.txt, decoding with the official OTLP protobuf classes).
//! The span tree, names and attributes are checked; by default no content
//! attribute and no byte of the run's text reaches the receiver; with
//! `--otlp-content` the content arrives, screened.

mod common;

use common::daemon::{Daemon, Serve, client, create, get_text, post, wait_status};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Content attribute names (the GenAI conventions' and keel's).
const CONTENT_ATTRIBUTES: [&str; 6] = [
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
    "keel.interaction.request",
    "keel.interaction.decision",
];

/// Distinctive text of the run: none of it may reach the receiver by
/// default.
const MARKERS: [&str; 7] = [
    "PROMPTMARK",
    "PARTIALMARK",
    "ANSWERMARK",
    "ARGMARK",
    "RESULTMARK",
    "TOOLERRMARK",
    "CHILDMARK",
];

/// A credential shape keel's screening knows (an OpenAI project key).
fn planted_secret() -> String {
    format!("{}{}", "sk-proj-", "a1B2".repeat(8))
}

/// The receiver's process and the requests it printed.
struct Receiver {
    child: Child,
    port: u16,
    requests: Arc<Mutex<Vec<Value>>>,
}

impl Receiver {
    /// Starts the receiver; `None` (after SKIPPED) without python3.
    fn start(test: &str) -> Option<Receiver> {
        common::frontends::venv_bin(test, "otelsink")?;
        let python = common::frontends::dir().join(".venv/bin/python");
        let script = common::frontends::dir().join("otlp_receiver.py");
        let mut child = Command::new(python)
            .arg(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        let port = u16::try_from(first["listening"].as_u64().unwrap()).unwrap();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let sink = requests.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                sink.lock()
                    .unwrap()
                    .push(serde_json::from_str(&line).unwrap());
            }
        });
        Some(Receiver {
            child,
            port,
            requests,
        })
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every span received so far.
    fn spans(&self) -> Vec<Value> {
        let requests = self.requests.lock().unwrap();
        let mut spans = Vec::new();
        for r in requests.iter() {
            for rs in r["request"]["resourceSpans"]
                .as_array()
                .into_iter()
                .flatten()
            {
                for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
                    spans.extend(ss["spans"].as_array().into_iter().flatten().cloned());
                }
            }
        }
        spans
    }

    /// Every request's raw body.
    fn raw_bytes(&self) -> Vec<u8> {
        let requests = self.requests.lock().unwrap();
        let mut all = Vec::new();
        for r in requests.iter() {
            let hex = r["raw_hex"].as_str().unwrap();
            all.extend(
                (0..hex.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()),
            );
        }
        all
    }

    /// Waits (20 s at most) until `n` `invoke_agent` spans arrived.
    fn wait_runs(&self, n: usize) -> Vec<Value> {
        let until = Instant::now() + Duration::from_secs(20);
        loop {
            let spans = self.spans();
            if spans.iter().filter(|s| s["name"] == "invoke_agent").count() >= n {
                return spans;
            }
            assert!(Instant::now() < until, "runs not exported: {spans:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The run: attempt 1 of the first model call fails (retried), then it
/// calls `refund` (needs approval), `lookup` (fails) and `helper` (a
/// sub-run); a last call answers.
fn scenario(run_id: &str) -> String {
    let secret = planted_secret();
    json!({
        "run_id": run_id,
        "model": "scripted-1",
        "messages": [{"role": "user", "text": format!("PROMPTMARK refund A-17, key {secret}")}],
        "limits": {"retry": {"max_attempts": 3, "initial_backoff_ms": 10, "jitter": 0, "partial": "restart"}},
        "tools": [
            {"name": "refund", "description": "Refunds an order.",
             "parameters": {"type": "object"}, "requires_approval": true,
             "script": [{"ok": format!("RESULTMARK refunded, token {secret}")}]},
            {"name": "lookup", "description": "Looks an order up.",
             "parameters": {"type": "object"},
             "script": [{"error": {"message": "TOOLERRMARK reset", "outcome": "uncertain", "retry": "not_retryable"}}]},
            {"name": "helper", "description": "A helper agent.",
             "agent": {"model": "scripted-1", "provider": {"type": "scripted", "calls": [
                 [{"text": "CHILDMARK done"},
                  {"complete": {"finish": "stop", "usage": {"input_tokens": 5, "output_tokens": 2}}}]]}}}
        ],
        "provider": {"type": "scripted", "calls": [
            [{"text": "PARTIALMARK "},
             {"fail": {"kind": "unavailable", "message": "dropped", "retryable": true}}],
            [{"text": "ANSWERMARK on it."},
             {"tool_call": {"call_id": "c1", "name": "refund", "arguments": {"order": "ARGMARK"}}},
             {"tool_call": {"call_id": "c2", "name": "lookup", "arguments": {"order": "A-17"}}},
             {"tool_call": {"call_id": "c3", "name": "helper", "arguments": {"task": "help"}}},
             {"complete": {"finish": "tool_calls", "usage": {"input_tokens": 40, "output_tokens": 12}}}],
            [{"text": "Done."},
             {"complete": {"finish": "stop", "usage": {"input_tokens": 60, "output_tokens": 3}}}]
        ]}
    })
    .to_string()
}

/// Runs [`scenario`] on `d`, approving the refund; waits for its end.
async fn run_to_end(d: &Daemon, run_id: &str) {
    let c = client();
    let run = create(&c, d, scenario(run_id)).await;
    let interaction = pending_interaction(&c, d, &run).await;
    let r = post(
        &c,
        d,
        &format!("/v1/runs/{run}/interactions/{interaction}"),
        r#"{"decision":"approved"}"#,
    )
    .await;
    assert_eq!(r.status(), 200);
    wait_status(&c, d, &run, "completed").await;
}

/// Polls the run's events until an approval is asked; its id.
async fn pending_interaction(c: &reqwest::Client, d: &Daemon, run: &str) -> String {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let path = format!("/v1/runs/{run}/events?format=jsonl&limit=10000");
        for line in get_text(c, d, &path).await.lines() {
            let v: Value = serde_json::from_str(line).unwrap();
            if v["kind"] == "interaction.started" {
                return v["payload"]["interaction_id"].as_str().unwrap().to_owned();
            }
        }
        assert!(Instant::now() < until, "no approval asked");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A span's attribute, as OTLP JSON's `{"stringValue": …}` /
/// `{"intValue": "…"}` unwrapped to a string.
fn attr(span: &Value, key: &str) -> Option<String> {
    let kv = span["attributes"]
        .as_array()?
        .iter()
        .find(|kv| kv["key"] == key)?;
    let v = &kv["value"];
    v["stringValue"]
        .as_str()
        .map(str::to_owned)
        .or_else(|| v["intValue"].as_str().map(str::to_owned))
        .or_else(|| Some(v.to_string()))
}

fn event_names(span: &Value) -> Vec<String> {
    span["events"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| e["name"].as_str().unwrap().to_owned())
        .collect()
}

fn find<'a>(spans: &'a [Value], name: &str) -> Vec<&'a Value> {
    spans.iter().filter(|s| s["name"] == name).collect()
}

/// Status code 2 is STATUS_CODE_ERROR.
fn is_error(span: &Value) -> bool {
    span["status"]["code"] == "STATUS_CODE_ERROR" || span["status"]["code"] == 2
}

/// The span tree, names and attributes of [`scenario`]'s export.
fn check_tree(spans: &[Value], run_id: &str) {
    let runs = find(spans, "invoke_agent");
    assert_eq!(runs.len(), 2, "the run and its sub-run");
    let root = *runs
        .iter()
        .find(|s| attr(s, "keel.run_id").as_deref() == Some(run_id))
        .unwrap();
    let child = *runs
        .iter()
        .find(|s| attr(s, "keel.run_id").as_deref() != Some(run_id))
        .unwrap();
    assert!(
        root["parentSpanId"].as_str().unwrap_or_default().is_empty(),
        "the run is a root"
    );
    assert_eq!(
        attr(root, "gen_ai.operation.name").as_deref(),
        Some("invoke_agent")
    );
    let trace = root["traceId"].as_str().unwrap();
    assert!(spans.iter().all(|s| s["traceId"] == trace), "one trace");
    let root_id = root["spanId"].as_str().unwrap();

    let chats = find(spans, "chat scripted-1");
    assert_eq!(
        chats.len(),
        4,
        "two attempts, a second call, the child's call"
    );
    let ours: Vec<_> = chats
        .iter()
        .filter(|s| s["parentSpanId"] == root_id)
        .collect();
    assert_eq!(ours.len(), 3);
    let failed: Vec<_> = ours.iter().filter(|s| is_error(s)).collect();
    assert_eq!(failed.len(), 1, "the first attempt failed");
    assert_eq!(
        attr(failed[0], "error.type").as_deref(),
        Some("unavailable")
    );
    assert_eq!(attr(failed[0], "keel.attempt").as_deref(), Some("1"));
    let with_usage = ours
        .iter()
        .find(|s| attr(s, "gen_ai.usage.input_tokens").as_deref() == Some("40"))
        .expect("usage on the second call");
    assert_eq!(
        attr(with_usage, "gen_ai.usage.output_tokens").as_deref(),
        Some("12")
    );
    assert_eq!(
        attr(with_usage, "gen_ai.request.model").as_deref(),
        Some("scripted-1")
    );
    assert_eq!(
        attr(with_usage, "gen_ai.operation.name").as_deref(),
        Some("chat")
    );

    let tool = |name: &str| {
        let found = find(spans, &format!("execute_tool {name}"));
        assert_eq!(found.len(), 1, "{name}");
        found[0]
    };
    let (refund, lookup, helper) = (tool("refund"), tool("lookup"), tool("helper"));
    for (span, call) in [(refund, "c1"), (lookup, "c2"), (helper, "c3")] {
        assert_eq!(span["parentSpanId"], root_id);
        assert_eq!(attr(span, "gen_ai.tool.call.id").as_deref(), Some(call));
        assert_eq!(
            attr(span, "gen_ai.operation.name").as_deref(),
            Some("execute_tool")
        );
    }
    assert_eq!(attr(refund, "gen_ai.tool.name").as_deref(), Some("refund"));
    assert!(!is_error(refund));
    assert!(is_error(lookup), "the failed tool's status is error");
    assert_eq!(attr(lookup, "error.type").as_deref(), Some("uncertain"));

    // The sub-run hangs under the parent's execute_tool span.
    assert_eq!(child["parentSpanId"], helper["spanId"]);
    let child_chat = chats
        .iter()
        .find(|s| s["parentSpanId"] == child["spanId"])
        .unwrap();
    assert_eq!(
        attr(child_chat, "gen_ai.usage.input_tokens").as_deref(),
        Some("5")
    );

    // The retry and the approval are events on the run's span.
    let events = event_names(root);
    for want in [
        "keel.retry",
        "keel.interaction.started",
        "keel.interaction.completed",
    ] {
        assert!(events.iter().any(|e| e == want), "{want} in {events:?}");
    }
}

fn no_content(spans: &[Value], raw: &[u8]) {
    for span in spans {
        for key in CONTENT_ATTRIBUTES {
            assert_eq!(
                attr(span, key),
                None,
                "{key} exported without opt-in: {span}"
            );
        }
        for e in span["events"].as_array().into_iter().flatten() {
            let keys: Vec<&str> = e["attributes"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|kv| kv["key"].as_str())
                .collect();
            assert!(
                CONTENT_ATTRIBUTES.iter().all(|k| !keys.contains(k)),
                "content in an event: {e}"
            );
        }
    }
    for marker in MARKERS {
        assert!(
            !contains(raw, marker.as_bytes()),
            "{marker} on the wire without opt-in"
        );
    }
    assert!(!contains(raw, planted_secret().as_bytes()));
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_exports_its_span_tree_without_content() {
    let Some(receiver) = Receiver::start("a_run_exports_its_span_tree_without_content") else {
        return;
    };
    let d = Serve::new().args(&["--otlp", &receiver.url()]).start();
    run_to_end(&d, "run_otel").await;
    let spans = receiver.wait_runs(2);
    check_tree(&spans, "run_otel");
    no_content(&spans, &receiver.raw_bytes());
    let requests = receiver.requests.lock().unwrap();
    assert!(
        requests
            .iter()
            .all(|r| r["content_type"] == "application/x-protobuf")
    );
    let resource = &requests[0]["request"]["resourceSpans"][0]["resource"];
    assert!(
        resource.to_string().contains(r#""stringValue":"keel""#),
        "service.name: {resource}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn content_opt_in_exports_screened_content() {
    let Some(receiver) = Receiver::start("content_opt_in_exports_screened_content") else {
        return;
    };
    let d = Serve::new()
        .args(&["--otlp", &receiver.url(), "--otlp-content"])
        .start();
    run_to_end(&d, "run_otel_content").await;
    let spans = receiver.wait_runs(2);
    check_tree(&spans, "run_otel_content");
    let root = spans
        .iter()
        .find(|s| attr(s, "keel.run_id").as_deref() == Some("run_otel_content"))
        .unwrap();
    let input = attr(root, "gen_ai.input.messages").unwrap();
    assert!(
        input.contains("PROMPTMARK") && input.contains("[redacted]"),
        "{input}"
    );
    let chats = find(&spans, "chat scripted-1");
    let outputs: Vec<String> = chats
        .iter()
        .filter_map(|s| attr(s, "gen_ai.output.messages"))
        .collect();
    assert!(
        outputs
            .iter()
            .any(|o| o.contains("ANSWERMARK") && o.contains("tool_call")),
        "{outputs:?}"
    );
    assert!(
        outputs.iter().any(|o| o.contains("CHILDMARK")),
        "{outputs:?}"
    );
    let refund = find(&spans, "execute_tool refund")[0];
    assert!(
        attr(refund, "gen_ai.tool.call.arguments")
            .unwrap()
            .contains("ARGMARK")
    );
    let result = attr(refund, "gen_ai.tool.call.result").unwrap();
    assert!(
        result.contains("RESULTMARK") && result.contains("[redacted]"),
        "{result}"
    );
    let raw = receiver.raw_bytes();
    assert!(
        !contains(&raw, planted_secret().as_bytes()),
        "the planted secret reached the receiver"
    );
    // A failure's message is never exported, content or not.
    assert!(!contains(&raw, b"TOOLERRMARK"));
}

#[test]
fn a_bad_endpoint_is_refused_before_anything_opens() {
    for (url, rule) in [
        ("ftp://collector:4318", "otlp.endpoint"),
        ("http://user:pw@collector:4318", "otlp.endpoint_credentials"),
        ("http://", "otlp.endpoint"),
    ] {
        let out = common::keel()
            .args(["serve", "--listen", "127.0.0.1:0", "--otlp", url])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{url}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(rule), "{url}: {stderr}");
        assert!(!stderr.contains("pw@"), "credentials echoed: {stderr}");
    }
}
