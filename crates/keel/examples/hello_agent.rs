//! hello_agent: a whole Keel host in one file.
//!
//! - the engine, with the OpenAI-compatible adapter as its provider;
//! - a custom tool (`get_weather`) with a `const` [`ToolSpec`] and typed
//!   arguments ([`ToolInvocation::parse_arguments`]);
//! - the SQLite journal as the required observer: the run proceeds only
//!   as fast as its events are durable;
//! - a subscriber (`Engine::subscribe`) that reads the first events,
//!   disconnects, and resumes at its cursor with no gap and no repeat,
//!   from the journal once the run is no longer live.
//!
//! ```sh
//! # No key and no network: a local OpenAI-compatible server in-process.
//! cargo run -p keel --example hello_agent --features providers -- --demo
//! # Any OpenAI-compatible server (Ollama, vLLM, llama.cpp, OpenAI):
//! OPENAI_API_KEY=... cargo run -p keel --example hello_agent --features providers -- \
//!     --base-url http://127.0.0.1:11434/v1 --model llama3.2 --db hello.db
//! ```

use keel::observers::JournalError;
use keel::prelude::*;
use keel::providers::OPENAI_BASE_URL;
use std::error::Error;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The tool the model may call. A bad name or schema here is a compile
/// error, so `definition()` cannot fail at run time.
const WEATHER: ToolSpec = ToolSpec::new(
    "get_weather",
    "Current weather for a city",
    r#"{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}"#,
);

/// The arguments `get_weather` takes.
#[derive(Debug, serde::Deserialize)]
struct WeatherArgs {
    city: String,
}

/// A tool of our own: answers from a table instead of a weather service.
struct Weather {
    definition: ToolDefinition,
}

impl Tool for Weather {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }

    fn call(&self, invocation: ToolInvocation) -> ToolFuture {
        // A bad argument is a typed error the model sees (naming the JSON
        // path, never the value) and may correct.
        let parsed = invocation.parse_arguments::<WeatherArgs>();
        Box::pin(async move {
            let args = parsed?;
            Ok(ToolOutput::new(format!("{}: 3 °C, light rain", args.city)))
        })
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Config {
    /// The server's base URL (`…/v1`); `None` starts the demo server.
    pub base_url: Option<String>,
    /// The model name the server knows.
    pub model: String,
    /// The question.
    pub question: String,
    /// The journal file.
    pub db: PathBuf,
    /// How many events the subscriber reads before it disconnects.
    pub read_before_disconnect: usize,
}

/// What happened.
#[derive(Debug)]
pub struct Summary {
    /// The run.
    pub run_id: RunId,
    /// The model's final answer.
    pub answer: String,
    /// Every seq the subscriber saw, across its two connections.
    pub seen: Vec<u64>,
    /// The cursor it resumed at.
    pub resumed_after: u64,
}

/// Runs one question through the engine and follows it with a resuming
/// subscriber.
pub async fn run(config: Config) -> Result<Summary, Box<dyn Error + Send + Sync>> {
    let base_url = match &config.base_url {
        Some(url) => url.clone(),
        None => start_demo_server().await?,
    };
    let api_key = match std::env::var("OPENAI_API_KEY") {
        Ok(key) => Some(ApiKey::new(&key)?),
        Err(_) => None,
    };
    let provider = OpenAiCompatible::new(OpenAiConfig {
        base_url,
        api_key,
        ..OpenAiConfig::default()
    })?;
    // Opening the journal touches the file system: off the async threads.
    let db = config.db.clone();
    let (journal, reader) = tokio::task::spawn_blocking(move || {
        let journal = SqliteJournal::open(db, JournalConfig::default())?;
        let reader = journal.reader()?;
        Ok::<_, JournalError>((journal, reader))
    })
    .await??;
    let journal = Arc::new(journal);
    let engine = Engine::builder()
        .provider("openai", Arc::new(provider))
        .tool(Arc::new(Weather {
            definition: WEATHER.definition(),
        }))
        .required_observer(journal.clone())
        // Followers read what the live log no longer holds from the journal.
        .history(Arc::new(reader))
        .build()?;

    let request = RunRequest::from_question(ModelName::parse(&config.model)?, &config.question)?;
    let run = engine.start(request)?;
    let run_id = run.run_id().clone();

    // First connection: a few events, then the subscriber goes away.
    let mut seen = Vec::new();
    let mut first = engine.subscribe(&run_id, 0).await?;
    while seen.len() < config.read_before_disconnect {
        match first.next().await {
            Some(event) => seen.push(event?.seq()),
            None => break,
        }
    }
    let resumed_after = first.cursor();
    drop(first);

    // Second connection, once the run is over: resume exactly after the
    // last event delivered. The run is no longer live, so the engine
    // serves it from the journal.
    let outcome = run.join().await;
    let mut second = engine.subscribe(&run_id, resumed_after).await?;
    while let Some(event) = second.next().await {
        seen.push(event?.seq());
    }
    let done = outcome.into_result()?;
    Ok(Summary {
        run_id,
        answer: done.final_message().joined_text(),
        seen,
        resumed_after,
    })
}

/// A local OpenAI-compatible server: the first call asks for the tool,
/// the call that carries the tool's result gets the answer. Returns its
/// base URL.
pub async fn start_demo_server() -> std::io::Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base_url = format!("http://{}/v1", listener.local_addr()?);
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            tokio::spawn(answer(socket));
        }
    });
    Ok(base_url)
}

/// One HTTP/1.1 exchange of the demo server.
async fn answer(mut socket: tokio::net::TcpStream) -> std::io::Result<()> {
    let request = read_request(&mut socket).await?;
    let body = if request.contains("\"role\":\"tool\"") {
        demo_stream(&[
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":"It is 3 °C"},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":" and raining in Oslo."},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":40,"completion_tokens":9}}"#,
        ])
    } else {
        demo_stream(&[
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":""}}]},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\": \"Oslo\"}"}}]},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":30,"completion_tokens":7}}"#,
        ])
    };
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    socket.write_all(head.as_bytes()).await?;
    socket.write_all(body.as_bytes()).await?;
    socket.shutdown().await
}

/// Server-Sent Events as OpenAI frames them, ending with `[DONE]`.
fn demo_stream(chunks: &[&str]) -> String {
    let mut body: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    body.push_str("data: [DONE]\n\n");
    body
}

/// Reads one request (head and a `content-length` body) as text.
async fn read_request(socket: &mut tokio::net::TcpStream) -> std::io::Result<String> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = socket.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf);
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().to_owned())
                })
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or(0);
            if buf.len() >= end + 4 + length {
                break;
            }
        }
    }
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// `--demo`, `--base-url URL`, `--model NAME`, `--db PATH`, `--question TEXT`.
fn config_from_args() -> Result<Config, String> {
    let mut config = Config {
        base_url: Some(OPENAI_BASE_URL.to_owned()),
        model: "gpt-4.1-mini".to_owned(),
        question: "What is the weather in Oslo?".to_owned(),
        db: PathBuf::from("hello_agent.db"),
        read_before_disconnect: 3,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--demo" => config.base_url = None,
            "--base-url" => config.base_url = Some(value()?),
            "--model" => config.model = value()?,
            "--db" => config.db = PathBuf::from(value()?),
            "--question" => config.question = value()?,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(config)
}

#[allow(
    dead_code,
    reason = "the integration test includes this file and calls run directly"
)]
#[tokio::main]
async fn main() -> Result<(), Box<dyn Error + Send + Sync>> {
    let config = config_from_args()?;
    let db = config.db.clone();
    let summary = run(config).await?;
    println!("run {}: {}", summary.run_id, summary.answer);
    println!(
        "subscriber saw seq 1..={} ({} events), resuming after {}",
        summary.seen.last().copied().unwrap_or(0),
        summary.seen.len(),
        summary.resumed_after
    );
    println!(
        "journal: {} (try `keel events {} --db {}`)",
        db.display(),
        summary.run_id,
        db.display()
    );
    Ok(())
}
