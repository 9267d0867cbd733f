//! The real MCP servers the MCP client tests run against, pinned in
//! `tests/frontends` and installed there like the frontends' packages
//! (`npm ci` into `node_modules`, `pip install -r requirements.txt` into
//! `.venv`): `@modelcontextprotocol/server-everything` and
//! `@modelcontextprotocol/server-filesystem` (npm), `mcp-server-time` and
//! the Python SDK `mcp` (PyPI), which runs the fault server
//! `tests/mcp/fault_server.py`.
//!
//! Each helper returns the command that starts a server over stdio
//! (program first), or `None` after a `SKIPPED:` line when node or python3
//! is missing; under `CI=true` that is a failure instead (see
//! `frontends`).

use super::frontends;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// `crates/cli/tests/mcp`.
pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp")
}

fn text(path: &Path) -> String {
    path.display().to_string()
}

/// `node_modules/@modelcontextprotocol/<package>/dist/index.js`; runs
/// `npm ci` again when a `node_modules` made before the MCP servers were
/// pinned lacks it.
fn entry(test: &str, package: &str) -> Option<PathBuf> {
    static LOCK: OnceLock<Mutex<()>> = OnceLock::new();
    let modules = frontends::node_modules(test)?;
    let script = modules
        .join("@modelcontextprotocol")
        .join(package)
        .join("dist/index.js");
    let _guard = LOCK
        .get_or_init(|| Mutex::new(()))
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if !script.exists() {
        let out = Command::new("npm")
            .args(["ci", "--ignore-scripts", "--no-audit", "--no-fund"])
            .current_dir(frontends::dir())
            .output()
            .expect("npm runs");
        assert!(
            out.status.success(),
            "npm ci in {}: {}",
            frontends::dir().display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(script.exists(), "{} after npm ci", script.display());
    Some(script)
}

/// server-everything over stdio: `node .../server-everything/dist/index.js
/// stdio`. Tools `echo(message)`, `get-sum(a, b)`,
/// `trigger-long-running-operation(duration = 10 s, steps = 5)` (progress
/// with a `progressToken`), `get-env` (the whole environment as JSON), ...;
/// it sends `notifications/tools/list_changed` once per tool it adds on
/// `notifications/initialized` (at least one: `simulate-research-query`).
pub fn everything_stdio(test: &str) -> Option<Vec<String>> {
    let script = entry(test, "server-everything")?;
    Some(vec!["node".into(), text(&script), "stdio".into()])
}

/// server-filesystem over stdio, allowed to read and write `dir` only
/// (symlinks resolved): `node .../server-filesystem/dist/index.js DIR`.
/// A client that declares the `roots` capability has its roots replace
/// `dir`.
pub fn filesystem(test: &str, dir: &Path) -> Option<Vec<String>> {
    let script = entry(test, "server-filesystem")?;
    Some(vec!["node".into(), text(&script), text(dir)])
}

/// mcp-server-time over stdio, its local zone fixed: `.venv/bin/mcp-server-time
/// --local-timezone UTC`. Tools `get_current_time(timezone)`,
/// `convert_time(source_timezone, time, target_timezone)`.
pub fn time_server(test: &str) -> Option<Vec<String>> {
    let bin = frontends::venv_bin(test, "mcp-server-time")?;
    Some(vec![text(&bin), "--local-timezone".into(), "UTC".into()])
}

/// The fault server over stdio, logging to `log_path` (JSON lines: calls
/// started, cancellations received; see `tests/mcp/fault_server.py`):
/// `.venv/bin/python3 tests/mcp/fault_server.py --log LOG`. Push
/// `--exit-at-start CODE` or `--hang-initialize` for those faults.
pub fn fault_server(test: &str, log_path: &Path) -> Option<Vec<String>> {
    // mcp-server-time and the SDK come from the same requirements file:
    // its presence says the venv has `mcp`.
    let bin = frontends::venv_bin(test, "mcp-server-time")?;
    let python = bin.with_file_name("python3");
    Some(vec![
        text(&python),
        text(&dir().join("fault_server.py")),
        "--log".into(),
        text(log_path),
    ])
}

/// server-everything's streamable HTTP transport, running; killed on drop.
pub struct HttpServer {
    child: Child,
    /// `127.0.0.1:<port>`.
    pub addr: String,
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts server-everything's streamable HTTP transport on a free port of
/// 127.0.0.1 (`PORT=0 node --import tests/mcp/listen_local.mjs
/// .../server-everything/dist/index.js streamableHttp`; the preload binds
/// it to 127.0.0.1 and reports the port) and waits until it accepts.
/// Returns the guard and the endpoint URL, `http://127.0.0.1:<port>/mcp`.
pub fn everything_http(test: &str) -> Option<(HttpServer, String)> {
    let script = entry(test, "server-everything")?;
    let mut child = Command::new("node")
        .arg("--import")
        .arg(dir().join("listen_local.mjs"))
        .arg(&script)
        .arg("streamableHttp")
        .env("PORT", "0")
        .current_dir(frontends::dir())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("node starts");
    let stderr = child.stderr.take().expect("stderr is piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // Keeps reading to the end, so the server never blocks on stderr.
        let mut tx = Some(tx);
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if let Some(addr) = line.strip_prefix("KEEL_MCP_LISTENING ") {
                if let Some(tx) = tx.take() {
                    let _ = tx.send(Ok(addr.trim().to_owned()));
                }
            } else if let Some(tx) = &tx {
                let _ = tx.send(Err(line));
            }
        }
    });
    let mut server = HttpServer {
        child,
        addr: String::new(),
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut said = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(Ok(addr)) => {
                server.addr = addr;
                break;
            }
            Ok(Err(line)) => said.push(line),
            Err(_) => panic!(
                "{test}: server-everything (streamableHttp) exited or did not listen within 30 s: {}",
                said.join("\n")
            ),
        }
    }
    while std::net::TcpStream::connect(&server.addr).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "{test}: server-everything does not accept on {}",
            server.addr
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let url = format!("http://{}/mcp", server.addr);
    Some((server, url))
}
