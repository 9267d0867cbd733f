//! Load client: events per second delivered to N concurrent SSE clients by
//! `keel serve` (N = 1, 64, 512), for a finished run (served from the
//! journal) and for a live run (clients attached before it streams).
//!
//! Run: `cargo bench -p keel-cli --bench sse_load` (release build; prints a
//! table). The daemon is the real binary on 127.0.0.1. Clients follow the
//! default stream (durable events only); `KEEL_SSE_DURABILITY=committed`
//! has them follow `?durability=committed` instead.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use futures_util::StreamExt;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const DELTAS: usize = 2000;

fn scenario(run_id: &str, delay_first_ms: u64) -> String {
    let mut items = vec![format!(r#"{{"delay_ms": {delay_first_ms}}}"#)];
    items.extend((0..DELTAS).map(|i| format!(r#"{{"text": "token {i} "}}"#)));
    items.push(r#"{"complete": {"finish": "stop"}}"#.to_owned());
    format!(
        r#"{{"run_id": "{run_id}", "model": "bench", "messages": [{{"role": "user", "text": "go"}}],
            "provider": {{"type": "scripted", "calls": [[{}]]}}}}"#,
        items.join(",")
    )
}

/// Follows one SSE stream to its end; returns the number of events.
async fn follow(client: reqwest::Client, url: String) -> usize {
    let resp = client.get(url).send().await.unwrap();
    let mut body = resp.bytes_stream();
    let mut events = 0usize;
    let mut tail = Vec::new();
    while let Some(chunk) = body.next().await {
        tail.extend_from_slice(&chunk.unwrap());
        let mut start = 0;
        for i in 0..tail.len() {
            if tail[i] == b'\n' {
                if tail[start..i].starts_with(b"id: ") {
                    events += 1;
                }
                start = i + 1;
            }
        }
        tail.drain(..start);
    }
    events
}

/// The query after `after=0`: `KEEL_SSE_DURABILITY`, when set.
fn durability_query() -> String {
    std::env::var("KEEL_SSE_DURABILITY")
        .map(|d| format!("&durability={d}"))
        .unwrap_or_default()
}

async fn round(base: &str, client: &reqwest::Client, n: usize, live: bool) -> (usize, Duration) {
    let run_id = format!("bench_{}_{n}", if live { "live" } else { "finished" });
    let body = scenario(&run_id, if live { 300 } else { 0 });
    let created = client
        .post(format!("{base}/v1/runs"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(created.status().as_u16(), 201);
    if !live {
        loop {
            let s: serde_json::Value = client
                .get(format!("{base}/v1/runs/{run_id}"))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            if s["status"] == "completed" && s["live"] != true {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let query = durability_query();
    let start = Instant::now();
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            tokio::spawn(follow(
                client.clone(),
                format!("{base}/v1/runs/{run_id}/events?after=0{query}"),
            ))
        })
        .collect();
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    (total, start.elapsed())
}

fn main() {
    let dir = std::env::temp_dir().join(format!("keel-sse-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_keel"))
        .arg("serve")
        .arg("--db")
        .arg(dir.join("bench.db"))
        .args(["--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let base = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap()
        .to_owned();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // Every POST says it is JSON (rule http.json_body).
    let mut json = reqwest::header::HeaderMap::new();
    json.insert(
        reqwest::header::CONTENT_TYPE,
        reqwest::header::HeaderValue::from_static("application/json"),
    );
    let client = reqwest::Client::builder()
        .default_headers(json)
        .build()
        .expect("the HTTP client");
    println!(
        "sse_load: {DELTAS} deltas per run ({} events per client), stream ?after=0{}",
        DELTAS + 7,
        durability_query()
    );
    println!(
        "{:<10} {:>6} {:>12} {:>10} {:>14}",
        "run", "N", "events", "seconds", "events/s"
    );
    for live in [false, true] {
        for n in [1usize, 64, 512] {
            let (events, took) = rt.block_on(round(&base, &client, n, live));
            assert_eq!(events, n * (DELTAS + 7), "every client gets every event");
            println!(
                "{:<10} {:>6} {:>12} {:>10.3} {:>14.0}",
                if live { "live" } else { "finished" },
                n,
                events,
                took.as_secs_f64(),
                events as f64 / took.as_secs_f64()
            );
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}
