//! # A Rust host embeds Keel's daemon
//!
//! What it shows: a host with its own Rust tool (`count_words`) and its
//! own model provider (a deterministic one that calls the tool, then
//! answers with the tool's result) registered on its own
//! [`EngineBuilder`](keel_engine::EngineBuilder), served by `keel-serve`
//! with its own [`RunFactory`]. No scenario file is involved: the factory
//! turns the host's own request body, `{"message": "..."}`, into a run.
//! Everything else is the daemon's: `POST /v1/chat` for the AI SDK's
//! `useChat`, `POST /v1/runs`, SSE at `GET /v1/runs/{id}/events` with
//! resume (`Last-Event-ID`), the run viewer at `/`, approvals, recovery
//! at startup and a graceful shutdown on Ctrl-C.
//!
//! Run it (it builds without keel-serve's default features too):
//!
//! ```text
//! cargo run -p keel-serve --example embedded_host -- --listen 127.0.0.1:7979 --db host.db
//! curl -s -X POST -H 'content-type: application/json' \
//!   -d '{"message": "the quick brown fox"}' http://127.0.0.1:7979/v1/runs
//! curl -sN http://127.0.0.1:7979/v1/runs/RUN_ID/events
//! ```
//!
//! and open <http://127.0.0.1:7979/> for the viewer. `crates/cli/tests/embedded_host.rs`
//! drives it with the pinned `ai` client and SSE resume.

use keel_engine::{Engine, Tool, ToolFuture, ToolInvocation, ToolOutput};
use keel_message::{
    Message, MessageId, ModelName, ModelRequest, Part, Role, RunId, ToolDefinition,
};
use keel_message::{ToolSpec, strict_json};
use keel_serve::{HostParts, Problem, RunFactory, RunPlan, ServeConfig, Server, StatusCode};
use keel_stream::{FinishReason, ModelProvider, RawItem, RawStream, StartFuture};
use serde_json::Value;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// The tool, checked at compile time.
const COUNT_WORDS: ToolSpec = ToolSpec::new(
    "count_words",
    "Counts the words and characters of a text",
    r#"{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}"#,
);
/// What the provider is registered as on the engine builder.
const PROVIDER: &str = "word-counter";
/// The model name runs carry (the provider ignores it).
const MODEL: &str = "counter-1";

/// The host's own tool: plain Rust, run by the engine.
struct WordCounter(ToolDefinition);

#[derive(serde::Deserialize)]
struct CountArgs {
    text: String,
}

impl Tool for WordCounter {
    fn definition(&self) -> &ToolDefinition {
        &self.0
    }

    fn call(&self, invocation: ToolInvocation) -> ToolFuture {
        let args = invocation.parse_arguments::<CountArgs>();
        Box::pin(async move {
            let text = args?.text;
            let (words, chars) = (text.split_whitespace().count(), text.chars().count());
            Ok(ToolOutput::new(format!(
                "{words} words, {chars} characters"
            )))
        })
    }
}

/// The host's own provider, deterministic: asked about a user message it
/// calls `count_words` on it; given the tool's result, it answers with it,
/// a word at a time (as a model streams).
struct CountingModel;

impl ModelProvider for CountingModel {
    fn start(&self, request: ModelRequest) -> StartFuture {
        let items = reply(request.history());
        let stream: RawStream = Box::pin(async_stream::stream! {
            for item in items {
                // A model's pace, so a client can watch the run live.
                tokio::time::sleep(Duration::from_millis(5)).await;
                yield item;
            }
        });
        Box::pin(std::future::ready(Ok(stream)))
    }
}

/// The next turn for `history`: a tool call after a user message, the
/// answer after the tool's result.
fn reply(history: &[Message]) -> Vec<RawItem> {
    let Some(last) = history.last() else {
        return vec![RawItem::complete(FinishReason::Stop)];
    };
    let result = last.parts().iter().find_map(|part| match part {
        Part::ToolResult(result) => Some(result.content().to_owned()),
        _ => None,
    });
    match (last.role(), result) {
        (Role::Tool, Some(counted)) => {
            let answer = format!("The count_words tool says: {counted}.");
            let mut items: Vec<RawItem> = answer.split_inclusive(' ').map(RawItem::text).collect();
            items.push(RawItem::complete(FinishReason::Stop));
            items
        }
        _ => {
            let arguments = serde_json::json!({"text": last.joined_text()}).to_string();
            // One call per turn: the history's length keeps ids distinct.
            let call_id = format!("count-{}", history.len());
            vec![
                RawItem::tool_call(call_id, COUNT_WORDS.definition().name().as_str(), arguments),
                RawItem::complete(FinishReason::ToolCalls),
            ]
        }
    }
}

/// One checked body: the messages a run starts from.
#[derive(Debug)]
struct HostPlan {
    messages: Vec<Message>,
}

impl RunPlan for HostPlan {
    fn messages(&self) -> &[Message] {
        &self.messages
    }

    fn model(&self) -> &str {
        MODEL
    }

    fn provider_type(&self) -> &str {
        PROVIDER
    }

    fn request(
        &self,
        run_id: RunId,
        history: Vec<Message>,
        host: &HostParts,
    ) -> Result<keel_engine::RunRequest, Problem> {
        let model = ModelName::parse(MODEL).map_err(|e| internal(&e))?;
        Ok(keel_engine::RunRequest::new(run_id, model, history)
            .provider_named(PROVIDER)
            // The daemon's approvals: its approval routes answer this run.
            .interaction_handler(host.approvals()))
    }
}

/// What posted bodies and the chat become.
#[derive(Debug)]
struct HostFactory {
    chat: Arc<HostPlan>,
}

impl RunFactory for HostFactory {
    fn posted(&self, body: &str) -> Result<Box<dyn RunPlan>, Problem> {
        Ok(Box::new(parse_body(body)?))
    }

    fn chat_agent(&self) -> Option<Arc<dyn RunPlan>> {
        Some(Arc::clone(&self.chat) as Arc<dyn RunPlan>)
    }
}

/// `{"message": "..."}` (a non-empty string, nothing else) as a plan; a
/// bad body is a 400 naming the member at fault by its JSON path.
fn parse_body(body: &str) -> Result<HostPlan, Problem> {
    let root = strict_json::parse(body)
        .map_err(|e| invalid(&strict_json::path(&e), strict_json::rule(&e)))?;
    let Value::Object(root) = root else {
        return Err(invalid("$", "the body must be a JSON object"));
    };
    if let Some(other) = root.keys().find(|k| *k != "message") {
        return Err(invalid(
            &format!("$.{other}"),
            "an unknown member (the body is {\"message\": \"...\"})",
        ));
    }
    let text = match root.get("message") {
        Some(Value::String(text)) if !text.trim().is_empty() => text,
        _ => return Err(invalid("$.message", "a non-empty string")),
    };
    let message = user_message(text).map_err(|e| invalid("$.message", &e.to_string()))?;
    Ok(HostPlan {
        messages: vec![message],
    })
}

fn user_message(text: &str) -> Result<Message, Box<dyn std::error::Error>> {
    Ok(Message::text(
        MessageId::parse("host-user")?,
        Role::User,
        text,
    )?)
}

fn invalid(member: &str, rule: &str) -> Problem {
    Problem::new(
        StatusCode::BAD_REQUEST,
        "invalid-body",
        "Invalid request body",
        format!("at {member}: {rule}"),
    )
    .with("path", member)
}

fn internal(e: &dyn std::fmt::Display) -> Problem {
    Problem::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal",
        "Internal error",
        e.to_string(),
    )
}

/// `--listen ADDR --db PATH_OR_URL`, both optional.
fn config(mut args: impl Iterator<Item = String>) -> Result<ServeConfig, String> {
    let mut config = ServeConfig::new("127.0.0.1:7979".parse().map_err(|_| "address")?, "host.db");
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .ok_or_else(|| format!("{flag}: a value is required"))?;
        match flag.as_str() {
            "--listen" => {
                config.listen = value
                    .parse()
                    .map_err(|e| format!("--listen {value}: {e}"))?
            }
            "--db" => config.db = value.parse().map_err(|e| format!("--db: {e}"))?,
            _ => {
                return Err(format!(
                    "unknown flag {flag} (flags: --listen ADDR --db PATH)"
                ));
            }
        }
    }
    Ok(config)
}

#[tokio::main]
async fn main() -> ExitCode {
    let config = match config(std::env::args().skip(1)) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("embedded_host: {e}");
            return ExitCode::from(2);
        }
    };
    match serve(config).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("embedded_host: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Serves until Ctrl-C, then shuts the runs down.
async fn serve(config: ServeConfig) -> Result<(), Box<dyn std::error::Error>> {
    // The host's engine: its provider and its tool. The daemon adds its
    // journal, retention and approvals when it builds it.
    let engine = Engine::builder()
        .provider(PROVIDER, Arc::new(CountingModel))
        .tool(Arc::new(WordCounter(COUNT_WORDS.definition())));
    let system = Message::text(
        MessageId::parse("host-system")?,
        Role::System,
        "Count the words of what the user says with count_words.",
    )?;
    let chat = Arc::new(HostPlan {
        messages: vec![system],
    });
    let server = Server::bind(config, engine, Arc::new(HostFactory { chat })).await?;
    println!("listening on http://{}", server.local_addr());
    let report = server
        .run(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await;
    match report.unacknowledged.is_empty() {
        true => Ok(()),
        false => Err(format!("{} run(s) left for recovery", report.unacknowledged.len()).into()),
    }
}
