//! `GET /v1/runs/{id}/events?children=true` over real HTTP: a daemon in
//! this process (`Server`, its SQLite journal in a temporary directory)
//! whose run factory starts a root that delegates to two agent tools, one
//! of which delegates again. The stream is dropped while children run and
//! resumed with `Last-Event-ID`; bad cursors are refused naming the
//! header or parameter, the entry and the rule.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use keel_engine::{AgentSpec, AgentTool, Engine, RunRequest, Tool};
use keel_message::{Message, MessageId, ModelName, Role, RunId, ToolName};
use keel_serve::{HostParts, Problem, RunFactory, RunPlan, ServeConfig, Server};
use keel_stream::FinishReason;
use keel_testkit::{ScriptItem, ScriptedProvider};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

fn model() -> ModelName {
    ModelName::parse("scripted-1").unwrap()
}

fn talking(deltas: usize, mut then: Vec<ScriptItem>) -> Vec<ScriptItem> {
    let mut items: Vec<ScriptItem> = (0..deltas)
        .flat_map(|i| {
            [
                ScriptItem::delay(Duration::from_millis(5)),
                ScriptItem::text(format!("w{i} ")),
            ]
        })
        .collect();
    items.append(&mut then);
    items
}

fn delegating(calls: &[(&str, &str)]) -> Vec<ScriptItem> {
    let mut items: Vec<ScriptItem> = calls
        .iter()
        .map(|(call, tool)| ScriptItem::tool_call(*call, *tool, json!({"task": "look"})))
        .collect();
    items.push(ScriptItem::complete(FinishReason::ToolCalls));
    talking(2, items)
}

fn answering(deltas: usize) -> Vec<ScriptItem> {
    talking(deltas, vec![ScriptItem::complete(FinishReason::Stop)])
}

fn scripted(turns: Vec<Vec<ScriptItem>>) -> Arc<ScriptedProvider> {
    Arc::new(ScriptedProvider::new(turns))
}

fn agent(name: &str, spec: AgentSpec) -> Arc<dyn Tool> {
    Arc::new(AgentTool::for_task(ToolName::parse(name).unwrap(), "delegates a task", spec).unwrap())
}

/// Every posted body: root → (researcher → checker, reviewer).
#[derive(Debug)]
struct TreePlan {
    messages: Vec<Message>,
}

impl RunPlan for TreePlan {
    fn messages(&self) -> &[Message] {
        &self.messages
    }
    fn model(&self) -> &str {
        "scripted-1"
    }
    fn provider_type(&self) -> &str {
        "scripted"
    }
    fn request(
        &self,
        run_id: RunId,
        history: Vec<Message>,
        _host: &HostParts,
    ) -> Result<RunRequest, Problem> {
        let checker = AgentSpec::new(model()).provider(scripted(vec![answering(15)]));
        let researcher = AgentSpec::new(model())
            .provider(scripted(vec![
                delegating(&[("r1", "checker")]),
                answering(5),
            ]))
            .tool(agent("checker", checker));
        let reviewer = AgentSpec::new(model()).provider(scripted(vec![answering(25)]));
        Ok(RunRequest::new(run_id, model(), history)
            .provider(scripted(vec![
                delegating(&[("c1", "researcher"), ("c2", "reviewer")]),
                answering(3),
            ]))
            .tool(agent("researcher", researcher))
            .tool(agent("reviewer", reviewer)))
    }
}

#[derive(Debug)]
struct TreeFactory;

impl RunFactory for TreeFactory {
    fn posted(&self, _body: &str) -> Result<Box<dyn RunPlan>, Problem> {
        let user = Message::text(MessageId::parse("u1").unwrap(), Role::User, "Plan it.").unwrap();
        Ok(Box::new(TreePlan {
            messages: vec![user],
        }))
    }
    fn chat_agent(&self) -> Option<Arc<dyn RunPlan>> {
        None
    }
}

struct Daemon {
    base: String,
    client: reqwest::Client,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    _dir: tempfile::TempDir,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// A daemon on its own thread and runtime (`Server::run` is not `Send`).
async fn daemon() -> Daemon {
    let dir = tempfile::tempdir().unwrap();
    let config = ServeConfig::new("127.0.0.1:0".parse().unwrap(), dir.path().join("k.db"));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (bound, address) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let server = Server::bind(config, Engine::builder(), Arc::new(TreeFactory))
                .await
                .unwrap();
            bound.send(server.local_addr()).unwrap();
            server
                .run(async move {
                    let _ = stopped.await;
                })
                .await;
        });
    });
    let address = address.recv().unwrap();
    Daemon {
        base: format!("http://{address}"),
        client: reqwest::Client::new(),
        stop: Some(stop),
        _dir: dir,
    }
}

impl Daemon {
    async fn start_tree(&self) -> String {
        let r = self
            .client
            .post(format!("{}/v1/runs", self.base))
            .header("content-type", "application/json")
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
        let v: Value = r.json().await.unwrap();
        v["run_id"].as_str().unwrap().to_owned()
    }

    async fn get(&self, path: &str, last_event_id: Option<&str>) -> reqwest::Response {
        let mut request = self.client.get(format!("{}{path}", self.base));
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id);
        }
        request.send().await.unwrap()
    }

    /// A run's stored lines (JSON Lines page), once it has ended.
    async fn stored(&self, run: &str) -> Vec<u64> {
        let r = self
            .get(&format!("/v1/runs/{run}/events?format=jsonl"), None)
            .await;
        let body = r.text().await.unwrap();
        body.lines()
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["seq"]
                    .as_u64()
                    .unwrap()
            })
            .collect()
    }
}

/// One SSE message of a run event: its `id:` and its line.
#[derive(Debug, Clone)]
struct SseMessage {
    id: String,
    event: String,
    line: Value,
}

/// Reads SSE messages from `response` until it ends or `limit` run
/// events were read (then the connection is dropped).
async fn read_events(mut response: reqwest::Response, limit: usize) -> Vec<SseMessage> {
    let mut out = Vec::new();
    let mut text = String::new();
    while out.len() < limit {
        let chunk = tokio::time::timeout(Duration::from_secs(20), response.chunk())
            .await
            .expect("the stream stalled")
            .unwrap();
        let Some(chunk) = chunk else { break };
        text.push_str(std::str::from_utf8(&chunk).unwrap());
        while let Some(end) = text.find("\n\n") {
            let block: String = text.drain(..end + 2).collect();
            let (mut id, mut event, mut data) = (None, None, None);
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("id: ") {
                    id = Some(v.to_owned());
                } else if let Some(v) = line.strip_prefix("event: ") {
                    event = Some(v.to_owned());
                } else if let Some(v) = line.strip_prefix("data: ") {
                    data = Some(v.to_owned());
                }
            }
            match (id, event, data) {
                (Some(id), Some(event), Some(data)) => out.push(SseMessage {
                    id,
                    event,
                    line: serde_json::from_str(&data).unwrap(),
                }),
                (None, Some(event), data) => panic!("{event}: {data:?}"),
                _ => {}
            }
            if out.len() == limit {
                break;
            }
        }
    }
    out
}

fn per_run(messages: &[SseMessage]) -> BTreeMap<String, Vec<u64>> {
    let mut runs: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for m in messages {
        runs.entry(m.line["run_id"].as_str().unwrap().to_owned())
            .or_default()
            .push(m.line["seq"].as_u64().unwrap());
    }
    runs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_streams_interleaved_and_resumes_from_last_event_id() {
    let d = daemon().await;
    let root = d.start_tree().await;
    let path = format!("/v1/runs/{root}/events?children=true");
    let first = d.get(&path, None).await;
    assert_eq!(first.status(), 200);
    let mut got = read_events(first, 12).await;
    assert_eq!(got.len(), 12);
    let cut = got.last().unwrap().id.clone();
    assert!(cut.contains(','), "children are running at the cut: {cut}");
    let second = d.get(&path, Some(&cut)).await;
    assert_eq!(second.status(), 200);
    got.extend(read_events(second, usize::MAX).await);

    let runs = per_run(&got);
    assert_eq!(runs.len(), 4, "the root, two children, a grandchild");
    for (run, seqs) in &runs {
        assert_eq!(
            seqs,
            &d.stored(run).await,
            "{run}: every event once, in order"
        );
    }
    for m in &got {
        assert_eq!(m.event, m.line["kind"].as_str().unwrap());
    }
    let children: Vec<&SseMessage> = got.iter().filter(|m| m.event == "tool.sub_run").collect();
    assert_eq!(children.len(), 3);
    let first_child = got
        .iter()
        .position(|m| m.line["run_id"] != root.as_str())
        .unwrap();
    assert!(
        got[first_child..]
            .iter()
            .any(|m| m.line["run_id"] == root.as_str()),
        "the children interleave with the root"
    );
    let last = got.last().unwrap();
    assert_eq!(last.event, "run.completed");
    assert_eq!(last.line["run_id"], root.as_str());
    assert_eq!(
        last.id,
        last.line["seq"].to_string(),
        "nothing left to follow"
    );
    // The client has it all: 204, which stops an EventSource.
    assert_eq!(d.get(&path, Some(&last.id)).await.status(), 204);
    let after = format!("{path}&after={}", last.id);
    assert_eq!(d.get(&after, None).await.status(), 204);
}

/// Refuses `query` (+ `Last-Event-ID`) with 400, naming `parameter` and
/// `rule` (and `entry`, when given).
async fn check(d: &Daemon, query: &str, header: Option<&str>, want: (&str, &str, Option<u64>)) {
    let (parameter, rule, entry) = want;
    let r = d.get(query, header).await;
    assert_eq!(r.status(), 400, "{query} {header:?}");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["parameter"], parameter, "{query} {header:?}: {v}");
    assert_eq!(v["rule"], rule, "{query} {header:?}: {v}");
    assert!(v["detail"].as_str().unwrap().contains(rule), "{v}");
    assert_eq!(v["entry"].as_u64(), entry, "{query} {header:?}: {v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tree_cursors_are_refused_naming_the_member_and_rule() {
    let d = daemon().await;
    let root = d.start_tree().await;
    let other = d.start_tree().await;
    // Both trees to their ends.
    for run in [&root, &other] {
        let path = format!("/v1/runs/{run}/events?children=true");
        read_events(d.get(&path, None).await, usize::MAX).await;
    }
    let path = format!("/v1/runs/{root}/events?children=true");
    for (header, after, want) in [
        (
            Some("5,run a:1"),
            None,
            ("Last-Event-ID", "tree_cursor.run_id", None),
        ),
        (None, Some("5,run_a"), ("after", "tree_cursor.entry", None)),
        (Some("05"), None, ("Last-Event-ID", "tree_cursor.seq", None)),
        (
            Some("3,x:1,x:2"),
            None,
            ("Last-Event-ID", "tree_cursor.duplicate", None),
        ),
        (
            Some(&*format!("3,{root}:1")),
            None,
            ("Last-Event-ID", "tree_cursor.root_listed", Some(1)),
        ),
        (
            None,
            Some(&*format!("3,{other}:1")),
            ("after", "tree_cursor.descendant", Some(1)),
        ),
        (
            Some("3,run_nowhere:0"),
            None,
            ("Last-Event-ID", "follow.known_run", Some(1)),
        ),
    ] {
        let query = match after {
            Some(a) => format!("{path}&after={a}"),
            None => path.clone(),
        };
        check(&d, &query, header, want).await;
    }
    // A listed run's seq past its end.
    let children = read_events(d.get(&path, None).await, usize::MAX).await;
    let child = children
        .iter()
        .find(|m| m.line["run_id"] != root.as_str())
        .unwrap();
    let too_far = format!("3,{}:999", child.line["run_id"].as_str().unwrap());
    check(
        &d,
        &path,
        Some(&too_far),
        ("Last-Event-ID", "follow.cursor_committed", Some(1)),
    )
    .await;
    // The query's own refusals.
    for (query, detail) in [
        (
            format!("/v1/runs/{root}/events?children=maybe"),
            "children is not one of true, false",
        ),
        (
            format!("{path}&format=jsonl"),
            "children=true is served as sse only, not jsonl",
        ),
    ] {
        let r = d.get(&query, None).await;
        assert_eq!(r.status(), 400);
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["detail"], detail);
    }
    // The cursor is bounded in bytes.
    let long = format!("0{}", ",r:1".repeat(3000));
    let r = d.get(&path, Some(&long)).await;
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["rule"], "tree_cursor.max_bytes", "{v}");
}
