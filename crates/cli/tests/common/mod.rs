#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, dead_code)]
//! Helpers shared by the `keel` binary's integration tests.

pub mod browser;
pub mod daemon;
pub mod example_bin;
pub mod frontends;
pub mod mcp;
pub mod nats;
pub mod sse;

use assert_cmd::Command;
use std::path::{Path, PathBuf};

/// The built `keel` binary.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_keel")
}

/// A `keel` command with a clean environment for the journal path.
pub fn keel() -> Command {
    let mut cmd = Command::new(bin());
    cmd.env_remove("KEEL_DB").env("NO_COLOR", "1");
    cmd
}

/// `examples/NAME` at the repository root.
pub fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(name)
}

/// A temporary directory with a journal path inside.
pub struct Sandbox {
    pub dir: tempfile::TempDir,
}

impl Sandbox {
    pub fn new() -> Sandbox {
        Sandbox {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn db(&self) -> PathBuf {
        self.path("keel.db")
    }

    /// `--db <sandbox db>` as arguments.
    pub fn db_args(&self) -> [String; 2] {
        ["--db".to_owned(), self.db().display().to_string()]
    }

    /// Writes `text` to `name` in the sandbox and returns the path.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    /// `keel run FILE --db DB [extra...]`.
    pub fn run(&self, scenario: &Path, extra: &[&str]) -> std::process::Output {
        keel()
            .arg("run")
            .arg(scenario)
            .args(self.db_args())
            .args(extra)
            .output()
            .unwrap()
    }

    /// `keel <args...> --db DB`, asserting success, returning stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = keel().args(args).args(self.db_args()).output().unwrap();
        assert!(
            out.status.success(),
            "keel {args:?} failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// The single run's id (from `keel runs`).
    pub fn run_ids(&self) -> Vec<String> {
        self.ok(&["runs"])
            .lines()
            .map(|l| l.split_whitespace().next().unwrap().to_owned())
            .collect()
    }
}

/// `keel verify --db DB`: it succeeds; its summary line.
pub fn verify_summary(db: &Path) -> String {
    let out = std::process::Command::new(bin())
        .arg("verify")
        .arg("--db")
        .arg(db)
        .env_remove("KEEL_DB")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "keel verify failed: {stdout}");
    stdout.lines().last().unwrap_or_default().to_owned()
}

/// stdout and stderr of `out` as text.
pub fn text(out: &std::process::Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A tiny deterministic generator (xorshift64*), seeded from
/// `KEEL_TEST_SEED` or the clock; the seed is printed so a failure can be
/// replayed.
pub struct Rng(u64);

impl Rng {
    pub fn from_env(name: &str) -> Rng {
        let seed = std::env::var("KEEL_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
            });
        eprintln!("{name}: KEEL_TEST_SEED={seed}");
        Rng(seed | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `lo..=hi`.
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

/// The `kind` of a canonical line.
pub fn kind(line: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    v["kind"].as_str().unwrap().to_owned()
}

// ---- a local server replaying provider transcripts (tests/fixtures) ----

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

/// Status, headers and body of one replayed response.
pub type Response = (u16, Vec<(String, String)>, Vec<u8>);

pub struct Recorded {
    /// (request head, request body), in order.
    pub requests: Vec<(String, String)>,
}

/// Serves one fixture per connection, in order; records each request.
pub fn replay(fixtures: &[&str]) -> (String, Arc<Mutex<Recorded>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let recorded = Arc::new(Mutex::new(Recorded {
        requests: Vec::new(),
    }));
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let responses: Vec<Response> = fixtures
        .iter()
        .map(|name| {
            let meta: serde_json::Value = serde_json::from_str(
                &std::fs::read_to_string(dir.join(format!("{name}.json"))).unwrap(),
            )
            .unwrap();
            let body = std::fs::read(dir.join(format!("{name}.sse"))).unwrap();
            let headers = meta["headers"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
                .collect();
            (meta["status"].as_u64().unwrap() as u16, headers, body)
        })
        .collect();
    let rec = recorded.clone();
    std::thread::spawn(move || {
        for (status, headers, body) in responses {
            let Ok((stream, _)) = listener.accept() else {
                return;
            };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut head = String::new();
            let mut length = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap();
                }
                head.push_str(&line);
            }
            let mut req = vec![0; length];
            reader.read_exact(&mut req).unwrap();
            rec.lock()
                .unwrap()
                .requests
                .push((head, String::from_utf8(req).unwrap()));
            let mut out = stream;
            let mut response = format!(
                "HTTP/1.1 {status} X\r\nconnection: close\r\ncontent-length: {}\r\n",
                body.len()
            );
            for (k, v) in headers {
                response.push_str(&format!("{k}: {v}\r\n"));
            }
            response.push_str("\r\n");
            out.write_all(response.as_bytes()).unwrap();
            out.write_all(&body).unwrap();
            out.flush().unwrap();
        }
    });
    (format!("http://{addr}/v1"), recorded)
}

/// The history stored run `run_id` of `db` rebuilds to (its chain of
/// `run.input` references followed), each message as JSON.
pub fn rebuilt_history(db: &Path, run_id: &str) -> Vec<serde_json::Value> {
    let reader = keel_observers::JournalReader::open(db).unwrap();
    let run = keel_message::RunId::parse(run_id).unwrap();
    let rebuilt =
        keel_observers::conversation::rebuild(&reader, &run, &keel_message::Limits::default())
            .unwrap();
    rebuilt
        .history
        .iter()
        .map(|m| serde_json::to_value(m).unwrap())
        .collect()
}

/// The `run.input` payloads of stored run `run_id` of `db`, as JSON.
pub fn stored_inputs(db: &Path, run_id: &str) -> Vec<serde_json::Value> {
    let reader = keel_observers::JournalReader::open(db).unwrap();
    reader
        .events_after(run_id, 0, 100_000)
        .unwrap()
        .iter()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|e| e["kind"] == "run.input")
        .map(|e| e["payload"].clone())
        .collect()
}

/// A scripted scenario `run_id` whose model calls `get_weather` for
/// `city` (call id `{run_id}_c1`), then answers `answer`; its one user
/// message is `question` (unused when the run continues or forks).
pub fn weather_scenario(run_id: &str, city: &str, question: &str, answer: &str) -> String {
    serde_json::json!({
        "run_id": run_id,
        "model": "scripted-1",
        "messages": [{"role": "user", "text": question}],
        "tools": [{
            "name": "get_weather", "description": "weather", "parameters": {"type": "object"},
            "script": [{"ok": {"city": city, "temp_c": 3}}]
        }],
        "provider": {"type": "scripted", "calls": [
            [{"tool_call": {"call_id": format!("{run_id}_c1"), "name": "get_weather", "arguments": {"city": city}}},
             {"complete": {"finish": "tool_calls"}}],
            [{"text": answer}, {"complete": {"finish": "stop"}}]
        ]}
    })
    .to_string()
}

/// Whether this `keel` has the PostgreSQL store (feature `postgres` of
/// keel-cli, or of keel-observers through the workspace's features).
pub fn built_with_postgres() -> bool {
    let out = keel()
        .args(["runs", "--db", "postgres://probe@127.0.0.1:1/none"])
        .output()
        .unwrap();
    !text(&out).1.contains("rule store.postgres_feature")
}

/// Files under `dir` holding `needle`.
pub fn files_holding(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if std::fs::read(&path)
                .unwrap_or_default()
                .windows(needle.len())
                .any(|w| w == needle.as_bytes())
            {
                out.push(path);
            }
        }
    }
    out
}

/// Which of the journal's files (`db` and its `-wal` and `-shm`) hold
/// `needle`.
pub fn holding(db: &Path, needle: &str) -> Vec<String> {
    ["", "-wal", "-shm"]
        .into_iter()
        .filter(|suffix| {
            let mut name = db.as_os_str().to_owned();
            name.push(suffix);
            std::fs::read(&name)
                .unwrap_or_default()
                .windows(needle.len())
                .any(|w| w == needle.as_bytes())
        })
        .map(|suffix| format!("keel.db{suffix}"))
        .collect()
}
