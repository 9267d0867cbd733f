#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `POST /v1/agui`, the AG-UI agent endpoint, driven end to end by
//! `@ag-ui/client`'s `HttpAgent` (1.0.0, pinned in tests/frontends; the
//! driver is `tests/frontends/agui_agent.mjs`): a conversation of two runs
//! on one `threadId`, a frontend tool round trip, an approval through the
//! interrupt outcome and `resume`, `verifyEvents` clean on every stream,
//! and a response cut mid-run resumed with `Last-Event-ID` (no event lost,
//! none repeated, at every cut position). And from Rust: bad bodies (400
//! naming the member), 409s, the cross-site refusals and the
//! `--max-streams` cap, each refused before a run starts.

mod common;

use common::daemon::{Daemon, Serve, client, get, get_json, get_text, post};
use common::frontends;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The node driver (an ES module importing the pinned packages).
const DRIVER: &str = include_str!("frontends/agui_agent.mjs");

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/agui")
        .join(name)
}

fn agui_daemon(scenario: &str, extra: &[&str]) -> Daemon {
    let file = fixture(scenario);
    Serve::new()
        .args(&["--chat-scenario", file.to_str().unwrap()])
        .args(extra)
        .start()
}

/// Runs the driver in `mode` against `d` on `thread`.
fn drive(d: &Daemon, mode: &str, thread: &str) -> Value {
    let input = json!({"url": d.url("/v1/agui"), "mode": mode, "thread": thread});
    let out = frontends::run_node(DRIVER, &input.to_string());
    serde_json::from_str(out.trim()).unwrap()
}

fn events_of(run: &Value) -> &[Value] {
    run["events"].as_array().unwrap()
}

fn of_type<'a>(run: &'a Value, kind: &str) -> Vec<&'a Value> {
    events_of(run)
        .iter()
        .filter(|e| e["type"] == kind)
        .collect()
}

fn text_of(run: &Value) -> String {
    of_type(run, "TEXT_MESSAGE_CONTENT")
        .iter()
        .map(|e| e["delta"].as_str().unwrap())
        .collect()
}

/// The Keel run a response names (its `CUSTOM` `keel.run`).
fn keel_run(run: &Value) -> String {
    let head = &events_of(run)[..2];
    assert_eq!(head[0]["type"], "RUN_STARTED", "{head:?}");
    assert_eq!(
        (&head[1]["type"], &head[1]["name"]),
        (&json!("CUSTOM"), &json!("keel.run"))
    );
    head[1]["value"]["run_id"].as_str().unwrap().to_owned()
}

/// The Keel log of `run` as JSON lines.
async fn log_of(d: &Daemon, run: &str) -> Vec<Value> {
    get_text(&client(), d, &format!("/v1/runs/{run}/events?format=jsonl"))
        .await
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn kinds(log: &[Value]) -> Vec<&str> {
    log.iter().map(|e| e["kind"].as_str().unwrap()).collect()
}

#[tokio::test]
async fn two_runs_on_one_thread_continue_the_conversation() {
    if frontends::node_modules("agui_agent conversation").is_none() {
        return;
    }
    let d = agui_daemon("conversation.json", &[]);
    let out = drive(&d, "conversation", "talk");
    let runs = out["runs"].as_array().unwrap();
    for (i, run) in runs.iter().enumerate() {
        let started = &events_of(run)[0];
        assert_eq!(started["threadId"], "talk");
        assert_eq!(started["runId"], format!("r{}", i + 1), "the client's ids");
        assert_eq!(keel_run(run), format!("chat-talk-{}", i + 1));
        assert_eq!(text_of(run), "One two three four five six.");
        let last = events_of(run).last().unwrap();
        assert_eq!(last["type"], "RUN_FINISHED", "{last}");
        assert_eq!(last["runId"], format!("r{}", i + 1));
        assert_eq!(of_type(run, "RUN_STARTED").len(), 1, "one RUN_STARTED");
        // The last id is the run's last cursor.
        let status = get_json(&client(), &d, &format!("/v1/runs/chat-talk-{}", i + 1)).await;
        assert_eq!(status["status"], "completed");
        assert_eq!(
            run["ids"].as_array().unwrap().last().unwrap(),
            &status["last_seq"]
        );
    }
    // The second run continues the first, by reference.
    let second = log_of(&d, "chat-talk-2").await;
    assert_eq!(
        second[0]["payload"]["continues"], "chat-talk-1",
        "{}",
        second[0]
    );
    assert_eq!(second[0]["payload"]["chat"], json!({"id": "talk", "n": 2}));
    let roles: Vec<&str> = out["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "user", "assistant"]);
}

#[tokio::test]
async fn a_frontend_tool_and_an_approval_round_trip() {
    if frontends::node_modules("agui_agent tools").is_none() {
        return;
    }
    let d = agui_daemon("tools.json", &[]);
    let out = drive(&d, "tools", "shop");
    let runs = out["runs"].as_array().unwrap();
    for run in runs {
        assert_eq!(
            keel_run(run),
            "chat-shop-1",
            "one Keel run behind three responses"
        );
    }
    // 1: the model calls the client's tool; the response ends waiting.
    let call = &of_type(&runs[0], "TOOL_CALL_START")[0];
    assert_eq!(
        (&call["toolCallName"], &call["toolCallId"]),
        (&json!("pick_color"), &json!("c1"))
    );
    let finished = events_of(&runs[0]).last().unwrap();
    assert_eq!(
        finished["outcome"],
        json!({"type": "success", "pendingToolCallIds": ["c1"]}),
        "{finished}"
    );
    assert_eq!(
        out["call"]["function"]["arguments"],
        r#"{"palette":"warm"}"#
    );
    // 2: the client's result goes in; the next call needs approval.
    assert!(
        of_type(&runs[1], "TOOL_CALL_RESULT").is_empty(),
        "the client has its result"
    );
    let completed = of_type(&runs[1], "CUSTOM")
        .into_iter()
        .find(|e| e["name"] == "keel.tool.completed")
        .expect("keel.tool.completed");
    assert_eq!(completed["value"]["call_id"], "c1");
    let finished = events_of(&runs[1]).last().unwrap();
    let interrupts = finished["outcome"]["interrupts"].as_array().unwrap();
    assert_eq!(interrupts.len(), 1, "{finished}");
    assert_eq!(interrupts[0]["reason"], "tool_approval");
    assert_eq!(interrupts[0]["toolCallId"], "c2");
    assert_eq!(interrupts[0]["message"], "Approve refund?");
    // 3: approved through `resume`: the tool runs and the run completes.
    let result = &of_type(&runs[2], "TOOL_CALL_RESULT")[0];
    assert_eq!(
        (&result["toolCallId"], &result["content"]),
        (&json!("c2"), &json!("refunded"))
    );
    assert_eq!(text_of(&runs[2]), "Done: refunded.");
    let finished = events_of(&runs[2]).last().unwrap();
    assert_eq!(
        (&finished["type"], &finished["runId"]),
        (&json!("RUN_FINISHED"), &json!("r3"))
    );
    // The log: the client is the frontend tool's executor (no interaction),
    // the approval is an interaction answered "approved".
    let log = log_of(&d, "chat-shop-1").await;
    let tool = log
        .iter()
        .find(|e| e["kind"] == "tool.completed" && e["payload"]["call_id"] == "c1")
        .unwrap();
    assert_eq!(tool["payload"]["output"], "teal", "{tool}");
    let interactions: Vec<&Value> = log
        .iter()
        .filter(|e| e["kind"].as_str().unwrap().starts_with("interaction."))
        .collect();
    assert_eq!(interactions.len(), 2, "{:?}", kinds(&log));
    assert_eq!(interactions[0]["payload"]["call_id"], "c2");
    assert_eq!(interactions[1]["payload"]["decision"], "approved");
    assert_eq!(log.last().unwrap()["kind"], "run.completed");
}

#[tokio::test]
async fn a_cut_response_resumes_with_last_event_id_losing_and_repeating_nothing() {
    if frontends::node_modules("agui_agent cut").is_none() {
        return;
    }
    let d = agui_daemon("conversation.json", &[]);
    let out = drive(&d, "cut", "cut");
    // The driver compared every stitched stream with the whole run's;
    // here: the cut was mid-run, and the resumes covered many cursors.
    let (cut, whole) = (
        out["cut_messages"].as_u64().unwrap(),
        out["whole_messages"].as_u64().unwrap(),
    );
    assert!(cut < whole, "{out}");
    assert!(out["cursors"].as_array().unwrap().len() > 10, "{out}");
    let types: Vec<&str> = out["types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(
        types
            .iter()
            .filter(|t| **t == "TEXT_MESSAGE_CONTENT")
            .count(),
        6,
        "{types:?}"
    );
    assert_eq!(types.last(), Some(&"RUN_FINISHED"));
}

fn user(id: &str, text: &str) -> Value {
    json!({"id": id, "role": "user", "content": text})
}

fn input(thread: &str, messages: Vec<Value>) -> Value {
    json!({"threadId": thread, "runId": "r1", "messages": messages, "tools": [], "context": [],
           "state": {}, "forwardedProps": {}})
}

async fn refused(resp: reqwest::Response) -> (u16, Value) {
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(json!({"text": text})),
    )
}

/// Posts `body` (with `Last-Event-ID` when given): the status and the
/// problem document.
async fn post_agui(d: &Daemon, body: &str, last_event_id: Option<&str>) -> (u16, Value) {
    let mut request = client().post(d.url("/v1/agui")).body(body.to_owned());
    if let Some(id) = last_event_id {
        request = request.header("last-event-id", id);
    }
    refused(request.send().await.unwrap()).await
}

/// One case: `body` is refused with `status`, a problem naming `path`.
async fn check(d: &Daemon, body: &str, last_event_id: Option<&str>, status: u16, path: &str) {
    let (got, doc) = post_agui(d, body, last_event_id).await;
    assert_eq!(got, status, "{body}: {doc}");
    assert_eq!(doc["path"], path, "{body}: {doc}");
    assert_eq!(doc["status"], status, "{doc}");
}

#[tokio::test]
async fn bad_bodies_are_refused_naming_the_member_before_a_run_starts() {
    let d = agui_daemon("tools.json", &[]);
    let mut clash = input("b", vec![user("u1", "hi")]);
    clash["tools"] =
        json!([{"name": "refund", "description": "Mine", "parameters": {"type": "object"}}]);
    let mut long = input("b", vec![user("u1", "hi")]);
    let description = "d".repeat(keel_message::Limits::default().tool_description_bytes + 1);
    long["tools"] =
        json!([{"name": "pick", "description": description, "parameters": {"type": "object"}}]);
    let mut bad_resume = input("b", vec![user("u1", "hi")]);
    bad_resume["resume"] =
        json!([{"interruptId": "i_1", "status": "resolved", "payload": {"approved": "yes"}}]);
    let cases: Vec<(String, Option<&str>, u16, &str)> = vec![
        ("[1]".to_owned(), None, 400, "$"),
        ("{".to_owned(), None, 400, "$"),
        (
            json!({"runId": "r", "messages": []}).to_string(),
            None,
            400,
            "threadId",
        ),
        (
            input("a/b", vec![user("u1", "hi")]).to_string(),
            None,
            400,
            "threadId",
        ),
        (
            json!({"threadId": "b", "runId": "r", "messages": {}}).to_string(),
            None,
            400,
            "messages",
        ),
        (clash.to_string(), None, 400, "tools[0].name"),
        (long.to_string(), None, 400, "tools[0].description"),
        (
            bad_resume.to_string(),
            None,
            400,
            "resume[0].payload.approved",
        ),
        (
            input("b", vec![user("u1", "hi")]).to_string(),
            Some("soon"),
            400,
            "Last-Event-ID",
        ),
    ];
    for (body, last_event_id, status, path) in &cases {
        check(&d, body, *last_event_id, *status, path).await;
    }
    // Nothing started.
    assert_eq!(get(&client(), &d, "/v1/runs/chat-b-1").await.status(), 404);
    // A resume of a thread with no run, answers to no run: 404.
    let (got, doc) = post_agui(
        &d,
        &input("none", vec![user("u1", "hi")]).to_string(),
        Some("3"),
    )
    .await;
    assert_eq!(
        (got, doc["type"].as_str()),
        (404, Some("urn:keel:problem:conversation-not-found"))
    );
    let answer = json!({"id": "t1", "role": "tool", "toolCallId": "c1", "content": "teal"});
    let body = input("none", vec![user("u1", "hi"), answer]).to_string();
    assert_eq!(post_agui(&d, &body, None).await.0, 404);
}

#[tokio::test]
async fn without_a_chat_agent_the_route_is_not_served() {
    let d = Serve::new().start();
    let (got, doc) = post_agui(&d, &input("a", vec![user("u1", "hi")]).to_string(), None).await;
    assert_eq!(
        (got, doc["type"].as_str()),
        (404, Some("urn:keel:problem:chat-not-configured"))
    );
}

/// Reads a response to its end.
async fn read_all(resp: reqwest::Response) -> String {
    assert_eq!(resp.status(), 200);
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    resp.text().await.unwrap()
}

#[tokio::test]
async fn answers_to_nothing_waiting_and_a_busy_thread_are_409s() {
    let d = agui_daemon("tools.json", &[]);
    let c = client();
    let tools =
        json!([{"name": "pick_color", "description": "Asks", "parameters": {"type": "object"}}]);
    let mut first = input("busy", vec![user("u1", "Refund A-17.")]);
    first["tools"] = tools.clone();
    let sse = read_all(post(&c, &d, "/v1/agui", first.to_string()).await).await;
    assert!(sse.contains(r#""pendingToolCallIds":["c1"]"#), "{sse}");
    // The run waits for the client: a new user message is refused...
    let mut again = input(
        "busy",
        vec![user("u1", "Refund A-17."), user("u2", "And B-2.")],
    );
    again["tools"] = tools.clone();
    let (got, doc) = refused(post(&c, &d, "/v1/agui", again.to_string()).await).await;
    assert_eq!(
        (got, doc["type"].as_str()),
        (409, Some("urn:keel:problem:conversation-busy"))
    );
    assert_eq!(doc["run_id"], "chat-busy-1");
    // ...a result for a call that is not waiting, naming its message...
    let assistant = json!({"id": "a1", "role": "assistant", "toolCalls": [
        {"id": "c1", "type": "function", "function": {"name": "pick_color", "arguments": "{}"}}]});
    let stray = json!({"id": "t9", "role": "tool", "toolCallId": "c9", "content": "x"});
    let mut body = input(
        "busy",
        vec![user("u1", "Refund A-17."), assistant.clone(), stray],
    );
    body["tools"] = tools.clone();
    let (got, doc) = refused(post(&c, &d, "/v1/agui", body.to_string()).await).await;
    assert_eq!(
        (got, doc["type"].as_str()),
        (409, Some("urn:keel:problem:tool-call-not-pending"))
    );
    assert_eq!(doc["path"], "messages[2].toolCallId");
    // ...and so is an answer to an approval nobody asked, with nothing
    // applied: the pending call still waits.
    let teal = json!({"id": "t1", "role": "tool", "toolCallId": "c1", "content": "teal"});
    let mut body = input(
        "busy",
        vec![user("u1", "Refund A-17."), assistant.clone(), teal],
    );
    body["tools"] = tools.clone();
    body["resume"] = json!([{"interruptId": "i_9", "status": "cancelled"}]);
    let (got, doc) = refused(post(&c, &d, "/v1/agui", body.to_string()).await).await;
    assert_eq!(
        (got, doc["type"].as_str()),
        (409, Some("urn:keel:problem:interaction-not-pending"))
    );
    assert_eq!(doc["path"], "resume[0].interruptId");
    let log = log_of(&d, "chat-busy-1").await;
    assert!(
        !kinds(&log).contains(&"tool.completed"),
        "{:?}",
        kinds(&log)
    );
    // The result alone is taken, and the run goes on to the approval.
    body.as_object_mut().unwrap().remove("resume");
    let sse = read_all(post(&c, &d, "/v1/agui", body.to_string()).await).await;
    assert!(sse.contains(r#""type":"interrupt""#), "{sse}");
    // Once the run ended, answers have nothing to answer.
    cancel(&d, "chat-busy-1").await;
    let (got, doc) = refused(post(&c, &d, "/v1/agui", body.to_string()).await).await;
    assert_eq!(
        (got, doc["type"].as_str()),
        (409, Some("urn:keel:problem:run-not-waiting"))
    );
}

async fn cancel(d: &Daemon, run: &str) {
    assert_eq!(
        common::daemon::cancel(&client(), d, run).await.status(),
        202
    );
    let until = Instant::now() + Duration::from_secs(10);
    while get_json(&client(), d, &format!("/v1/runs/{run}")).await["status"] != "cancelled" {
        assert!(Instant::now() < until, "the run did not end");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Sends `head` (a request head, `{port}` filled in) and `body` over a raw
/// connection: the status code.
async fn raw_status(d: &Daemon, head: &str, body: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", d.port()))
        .await
        .unwrap();
    let head = head.replace("{port}", &d.port().to_string());
    let request = format!(
        "{head}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).await.unwrap();
    answer[9..12].parse().unwrap()
}

#[tokio::test]
async fn cross_site_requests_are_refused_before_a_run_starts() {
    let d = agui_daemon("conversation.json", &[]);
    let body = input("site", vec![user("u1", "hi")]).to_string();
    let json = "Content-Type: application/json\r\n";
    let cases = [
        // Another site's page (Origin), a rebinding name (Host), a
        // simple form POST (no JSON content type).
        (
            format!(
                "POST /v1/agui HTTP/1.1\r\nHost: 127.0.0.1:{{port}}\r\nOrigin: http://evil.example\r\n{json}"
            ),
            403,
        ),
        (
            format!("POST /v1/agui HTTP/1.1\r\nHost: evil.example:{{port}}\r\n{json}"),
            421,
        ),
        (
            "POST /v1/agui HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: text/plain\r\n"
                .to_owned(),
            415,
        ),
    ];
    for (head, status) in &cases {
        assert_eq!(raw_status(&d, head, &body).await, *status, "{head}");
    }
    assert_eq!(
        get(&client(), &d, "/v1/runs/chat-site-1").await.status(),
        404,
        "nothing started"
    );
    // The same request from the daemon's own origin is served.
    let own = format!(
        "POST /v1/agui HTTP/1.1\r\nHost: 127.0.0.1:{{port}}\r\nOrigin: http://127.0.0.1:{{port}}\r\n{json}"
    );
    assert_eq!(raw_status(&d, &own, &body).await, 200);
}

#[tokio::test]
async fn with_a_token_the_route_needs_it() {
    let file = fixture("conversation.json");
    let d = Serve::new()
        .args(&["--chat-scenario", file.to_str().unwrap()])
        .token(Some("s3cret-token"))
        .start();
    let body = input("tok", vec![user("u1", "hi")]).to_string();
    let (got, doc) = post_agui(&d, &body, None).await;
    assert_eq!(got, 401, "{doc}");
    assert!(!doc.to_string().contains("s3cret-token"));
    let resp = client()
        .post(d.url("/v1/agui"))
        .bearer_auth("s3cret-token")
        .body(body)
        .send()
        .await
        .unwrap();
    assert!(read_all(resp).await.contains("RUN_FINISHED"));
}

#[tokio::test]
async fn agui_responses_count_toward_max_streams() {
    let d = agui_daemon(
        "slow.json",
        &["--max-streams", "1", "--max-streams-per-run", "1"],
    );
    let c = client();
    // A response held open: its run takes 30 s.
    let first = input("s1", vec![user("u1", "Hi")]).to_string();
    let open = post(&c, &d, "/v1/agui", first).await;
    assert_eq!(open.status(), 200);
    let second = input("s2", vec![user("u1", "Hi")]).to_string();
    let resp = post(&c, &d, "/v1/agui", second.clone()).await;
    assert_eq!(resp.headers().get("retry-after").unwrap(), "5");
    let (status, doc) = refused(resp).await;
    assert_eq!(status, 503, "{doc}");
    assert_eq!(doc["type"], "urn:keel:problem:too-many-streams");
    assert_eq!(doc["bound"], "max_streams");
    assert_eq!(
        get(&c, &d, "/v1/runs/chat-s2-1").await.status(),
        404,
        "refused before a run starts"
    );
    // A resume (Last-Event-ID) takes a slot too.
    let resume = client()
        .post(d.url("/v1/agui"))
        .header("last-event-id", "1")
        .body(input("s1", vec![user("u1", "Hi")]).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resume.status(), 503);
    // A closed response frees its slot.
    drop(open);
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let resp = post(&c, &d, "/v1/agui", second.clone()).await;
        if resp.status() == 200 {
            break;
        }
        assert_eq!(resp.status(), 503);
        assert!(Instant::now() < until, "a closed response kept its slot");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The SSE messages of `sse`: (id, event).
fn messages(sse: &str) -> Vec<(u64, Value)> {
    sse.split("\n\n")
        .filter_map(|block| {
            let id = block.lines().find_map(|l| l.strip_prefix("id: "))?;
            let data = block.lines().find_map(|l| l.strip_prefix("data: "))?;
            Some((id.parse().unwrap(), serde_json::from_str(data).unwrap()))
        })
        .collect()
}

#[tokio::test]
async fn a_resume_at_a_pause_ends_with_the_pause_again() {
    let d = agui_daemon("tools.json", &[]);
    let mut body = input("paused", vec![user("u1", "Refund A-17.")]);
    body["tools"] =
        json!([{"name": "pick_color", "description": "Asks", "parameters": {"type": "object"}}]);
    let first = messages(&read_all(post(&client(), &d, "/v1/agui", body.to_string()).await).await);
    let (cursor, finished) = first.last().unwrap().clone();
    assert_eq!(finished["outcome"]["pendingToolCallIds"], json!(["c1"]));
    // Cut at the pause (the client lost only the closing events): the
    // resume is the head, the turn re-opened and closed, and the pause.
    let resumed = client()
        .post(d.url("/v1/agui"))
        .header("last-event-id", cursor.to_string())
        .body(body.to_string())
        .send();
    let resumed = tokio::time::timeout(Duration::from_secs(10), async {
        read_all(resumed.await.unwrap()).await
    })
    .await
    .expect("the resume at a pause ends");
    let resumed = messages(&resumed);
    let types: Vec<&str> = resumed
        .iter()
        .map(|(_, e)| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        [
            "RUN_STARTED",
            "CUSTOM",
            "STEP_STARTED",
            "STEP_FINISHED",
            "RUN_FINISHED"
        ]
    );
    assert!(resumed.iter().all(|(id, _)| *id == cursor), "{resumed:?}");
    assert_eq!(resumed.last().unwrap().1["outcome"], finished["outcome"]);
    // Beyond the run's last cursor: 400, naming the header.
    let (got, doc) = post_agui(&d, &body.to_string(), Some(&(cursor + 100).to_string())).await;
    assert_eq!(
        (got, doc["path"].as_str()),
        (400, Some("Last-Event-ID")),
        "{doc}"
    );
}

#[tokio::test]
async fn a_tool_message_with_an_error_fails_the_frontend_call() {
    let d = agui_daemon("tools.json", &[]);
    let c = client();
    let tools =
        json!([{"name": "pick_color", "description": "Asks", "parameters": {"type": "object"}}]);
    let mut body = input("err", vec![user("u1", "Refund A-17.")]);
    body["tools"] = tools.clone();
    read_all(post(&c, &d, "/v1/agui", body.to_string()).await).await;
    let assistant = json!({"id": "a1", "role": "assistant", "toolCalls": [
        {"id": "c1", "type": "function", "function": {"name": "pick_color", "arguments": "{}"}}]});
    let failed = json!({"id": "t1", "role": "tool", "toolCallId": "c1", "content": "", "error": "no screen"});
    let mut body = input("err", vec![user("u1", "Refund A-17."), assistant, failed]);
    body["tools"] = tools;
    let sse = read_all(post(&c, &d, "/v1/agui", body.to_string()).await).await;
    assert!(
        sse.contains(r#""type":"interrupt""#),
        "the run went on: {sse}"
    );
    let log = log_of(&d, "chat-err-1").await;
    let failed = log
        .iter()
        .find(|e| e["kind"] == "tool.failed")
        .unwrap_or_else(|| panic!("{:?}", kinds(&log)));
    assert_eq!(failed["payload"]["call_id"], "c1");
    assert!(failed.to_string().contains("no screen"), "{failed}");
    assert!(!kinds(&log).contains(&"tool.completed"));
}
