//! The frontends' own packages, pinned, installed into project-local
//! folders by the tests themselves: the npm packages of
//! `tests/frontends/package.json` (with its lockfile, `npm ci`) into
//! `tests/frontends/node_modules`, and the PyPI packages of
//! `tests/frontends/requirements.txt` into the venv `tests/frontends/.venv`.
//!
//! Without node/npm or python3, a test prints `SKIPPED:` with the install
//! command and returns; under `CI=true` that is a failure instead.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

const NODE_INSTALL: &str = "apt-get install nodejs npm";
const PYTHON_INSTALL: &str = "apt-get install python3 python3-venv";

/// `crates/cli/tests/frontends`.
pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/frontends")
}

fn ci() -> bool {
    std::env::var("CI").as_deref() == Ok("true")
}

fn missing(test: &str, what: &str, install: &str) -> Option<PathBuf> {
    if ci() {
        panic!("{test}: {what} not available under CI=true; install with: {install}");
    }
    eprintln!("SKIPPED: {test}: {what} not available; install with: {install}");
    None
}

fn runs(program: &str, arg: &str) -> bool {
    Command::new(program)
        .arg(arg)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// One install at a time across the tests of a binary.
fn install_lock() -> &'static Mutex<()> {
    static LOCK: OnceLock<Mutex<()>> = OnceLock::new();
    LOCK.get_or_init(|| Mutex::new(()))
}

/// The `node_modules` folder with the pinned packages, installed with
/// `npm ci` when missing; `None` (after a SKIPPED line) without npm.
pub fn node_modules(test: &str) -> Option<PathBuf> {
    if !runs("node", "--version") || !runs("npm", "--version") {
        return missing(test, "node and npm", NODE_INSTALL);
    }
    let _guard = install_lock().lock().unwrap_or_else(|e| e.into_inner());
    let modules = dir().join("node_modules");
    let marker = modules.join(".package-lock.json");
    if !marker.exists() {
        let out = Command::new("npm")
            .args(["ci", "--ignore-scripts", "--no-audit", "--no-fund"])
            .current_dir(dir())
            .output()
            .expect("npm runs");
        assert!(
            out.status.success(),
            "npm ci in {}: {}",
            dir().display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Some(modules)
}

/// A command of the venv's `bin/` (e.g. `ag-ui-validate`), the venv made
/// and the pinned requirements installed when missing.
pub fn venv_bin(test: &str, name: &str) -> Option<PathBuf> {
    if !runs("python3", "--version") {
        return missing(test, "python3", PYTHON_INSTALL);
    }
    let _guard = install_lock().lock().unwrap_or_else(|e| e.into_inner());
    let venv = dir().join(".venv");
    let bin = venv.join("bin").join(name);
    if !bin.exists() {
        let made = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .output()
            .expect("python3 runs");
        if !made.status.success() {
            return missing(test, "python3 -m venv", PYTHON_INSTALL);
        }
        let out = Command::new(venv.join("bin/pip"))
            .args(["install", "--quiet", "--disable-pip-version-check", "-r"])
            .arg(dir().join("requirements.txt"))
            .output()
            .expect("pip runs");
        assert!(
            out.status.success(),
            "pip install -r requirements.txt: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Some(bin)
}

/// Verifies each stream (a JSON array of AG-UI events) with the client's
/// own schema and `verifyEvents`; prints one result per stream (`ok`, or
/// the refusal). Run with [`run_node`].
pub const VERIFY: &str = r#"
import { verifyEvents } from "@ag-ui/client";
import { EventSchemas } from "@ag-ui/core/schemas";
import { from, lastValueFrom, toArray } from "rxjs";
import { readFileSync } from "node:fs";
const streams = JSON.parse(readFileSync(0, "utf8"));
const results = [];
for (const events of streams) {
  try {
    const parsed = events.map((e) => EventSchemas.parse(e));
    const out = await lastValueFrom(from(parsed).pipe(verifyEvents(false), toArray()));
    results.push(out.length === events.length ? "ok" : `verified ${out.length} of ${events.length}`);
  } catch (e) {
    results.push(String(e && e.message ? e.message : e));
  }
}
console.log(JSON.stringify(results));
"#;

/// Reads `{body, message}` on stdin; prints `{message, types}`: the last
/// snapshot `readUIMessageStream` gives and the chunk types, after every
/// chunk passed the SDK's schema.
pub const ASSEMBLE: &str = r#"
import { readUIMessageStream, uiMessageChunkSchema, parseJsonEventStream } from 'ai';
let input = '';
for await (const piece of process.stdin) input += piece;
const { body, message } = JSON.parse(input);
const bytes = new Response(body).body;
const types = [];
const parsed = parseJsonEventStream({ stream: bytes, schema: uiMessageChunkSchema });
const chunks = parsed.pipeThrough(new TransformStream({
  transform(result, controller) {
    if (!result.success) throw new Error('chunk refused by the schema: ' + result.error);
    types.push(result.value.type);
    controller.enqueue(result.value);
  },
}));
let last;
for await (const snapshot of readUIMessageStream({ message: message ?? undefined, stream: chunks, terminateOnError: true })) {
  last = snapshot;
}
console.log(JSON.stringify({ message: last, types }));
"#;

/// Runs `node script` (an ES module, given as text) in `tests/frontends`
/// with `input` on stdin; returns stdout, panicking with stderr when node
/// fails.
pub fn run_node(script: &str, input: &str) -> String {
    use std::io::Write;
    let file = tempfile::Builder::new()
        .suffix(".mjs")
        .tempfile_in(dir())
        .expect("a script file");
    std::fs::write(file.path(), script).expect("the script is written");
    let mut child = Command::new("node")
        .arg(file.path())
        .current_dir(dir())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("node starts");
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(input.as_bytes()).expect("stdin is written");
    }
    let out = child.wait_with_output().expect("node ends");
    assert!(
        out.status.success(),
        "node failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8(out.stdout).expect("node prints UTF-8")
}
