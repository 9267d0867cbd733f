//! The headless-browser harness of `tests/browser.rs`: Chromium driven
//! through chromedriver (WebDriver, with fantoccini), a real `keel serve`,
//! a second web server that plays "another origin", and a TCP proxy that
//! can cut every connection.
//!
//! Every wait is bounded ([`wait_until`]); every process started here is
//! killed on drop.

use super::daemon::Serve;
use super::nats::free_port;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinHandle;

/// The Debian packages that bring both programs.
pub const INSTALL: &str = "apt-get install chromium chromium-driver";

/// Where `chromedriver` and `chromium` are.
#[derive(Debug, Clone)]
pub struct Tools {
    pub chromedriver: PathBuf,
    pub chromium: PathBuf,
}

/// The first `name` on `PATH`.
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// chromedriver and Chromium, or `None` after printing a SKIPPED line
/// (outside CI). Under `CI=true` a missing browser is a failure: CI must
/// run these tests, not skip them.
pub fn tools(test: &str) -> Option<Tools> {
    let chromedriver = find_on_path("chromedriver");
    let chromium = find_on_path("chromium").or_else(|| find_on_path("chromium-browser"));
    match (chromedriver, chromium) {
        (Some(chromedriver), Some(chromium)) => Some(Tools {
            chromedriver,
            chromium,
        }),
        _ if std::env::var("CI").as_deref() == Ok("true") => {
            panic!(
                "{test}: chromium/chromedriver not found on PATH under CI=true; install with: {INSTALL}"
            )
        }
        _ => {
            // Straight to the handle: libtest captures println! of a passing test.
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: {test}: chromium/chromedriver not found; install with: {INSTALL}"
            );
            None
        }
    }
}

/// Polls `probe` every 50 ms until it returns `Some`, for at most
/// `within`; panics naming `what` when the time is up.
pub async fn wait_until<T, F, Fut>(what: &str, within: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let until = Instant::now() + within;
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(Instant::now() < until, "timed out after {within:?}: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A reqwest client that never uses a proxy from the environment.
pub fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

/// Kills a process group (the chromedriver started with
/// `process_group(0)`, and the Chromium processes it started).
fn kill_group(pid: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{pid}")])
        .stderr(Stdio::null())
        .status();
}

// ---------------------------------------------------------------- browser

/// A headless Chromium session. The chromedriver process (and with it,
/// its Chromium) is killed on drop.
pub struct Browser {
    pub client: Client,
    driver: Child,
}

impl Browser {
    /// Starts chromedriver on a free loopback port and opens a session.
    /// `rebind.test` resolves to 127.0.0.1 (the DNS-rebinding test); every
    /// other name resolves to nothing, so the browser reaches no network.
    pub async fn start(tools: &Tools) -> Browser {
        use std::os::unix::process::CommandExt;
        let port = free_port();
        let mut driver = Command::new(&tools.chromedriver)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap();
        let status = format!("http://127.0.0.1:{port}/status");
        let http = http();
        let up = Instant::now() + Duration::from_secs(15);
        loop {
            if let Ok(r) = http.get(&status).send().await
                && r.status().is_success()
            {
                break;
            }
            if let Some(exit) = driver.try_wait().unwrap() {
                panic!("chromedriver exited early: {exit}");
            }
            if Instant::now() > up {
                kill_group(driver.id());
                panic!("chromedriver did not answer on port {port}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let caps = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": tools.chromium.display().to_string(),
                "args": [
                    "--headless=new",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--window-size=1280,900",
                    "--host-resolver-rules=MAP rebind.test 127.0.0.1, MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1",
                    "--no-proxy-server",
                    "--no-first-run",
                    "--no-default-browser-check",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                    "--disable-extensions",
                    "--disable-dev-shm-usage",
                ]
            }
        });
        let caps = match caps {
            Value::Object(map) => map,
            _ => unreachable!(),
        };
        let mut connector = hyper_util::client::legacy::connect::HttpConnector::new();
        connector.enforce_http(true);
        let client = match ClientBuilder::new(connector)
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
        {
            Ok(c) => c,
            Err(e) => {
                kill_group(driver.id());
                let _ = driver.wait();
                panic!("no WebDriver session: {e}");
            }
        };
        Browser { client, driver }
    }

    /// Navigates and waits for the page to load.
    pub async fn goto(&self, url: &str) {
        self.client.goto(url).await.unwrap();
    }

    /// Runs `script` (a function body; `arguments` holds `args`) in the page.
    pub async fn js(&self, script: &str, args: Vec<Value>) -> Value {
        self.client
            .execute(script, args)
            .await
            .unwrap_or_else(|e| panic!("script failed: {e}\n{script}"))
    }

    /// Runs `script` asynchronously: its last argument is the callback
    /// that ends it (WebDriver's script timeout bounds it, 30 s).
    pub async fn js_async(&self, script: &str, args: Vec<Value>) -> Value {
        self.client
            .execute_async(script, args)
            .await
            .unwrap_or_else(|e| panic!("async script failed: {e}\n{script}"))
    }

    /// Polls a script until it returns something truthy (not null, false,
    /// 0 or ""), for at most `within`.
    pub async fn wait_js(&self, what: &str, within: Duration, script: &str) -> Value {
        wait_until(what, within, || async {
            let v = self.js(script, vec![]).await;
            let truthy = match &v {
                Value::Null => false,
                Value::Bool(b) => *b,
                Value::Number(n) => n.as_f64() != Some(0.0),
                Value::String(s) => !s.is_empty(),
                _ => true,
            };
            truthy.then_some(v)
        })
        .await
    }

    /// Waits for a CSS selector to match.
    pub async fn wait_css(&self, css: &str, within: Duration) -> fantoccini::elements::Element {
        wait_until(&format!("an element matching {css}"), within, || async {
            self.client.find(Locator::Css(css)).await.ok()
        })
        .await
    }

    /// Text content of every match of `css`.
    pub async fn texts(&self, css: &str) -> Vec<String> {
        let v = self
            .js(
                "return Array.from(document.querySelectorAll(arguments[0])).map(e => e.textContent);",
                vec![json!(css)],
            )
            .await;
        serde_json::from_value(v).unwrap()
    }

    /// Number of matches of `css`.
    pub async fn count(&self, css: &str) -> usize {
        let v = self
            .js(
                "return document.querySelectorAll(arguments[0]).length;",
                vec![json!(css)],
            )
            .await;
        v.as_u64().unwrap() as usize
    }

    /// Ends the session (Chromium exits); the driver is killed on drop.
    pub async fn close(&self) {
        let _ = self.client.clone().close().await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        kill_group(self.driver.id());
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

// ----------------------------------------------------------------- daemon

pub use super::daemon::Daemon;

/// A real `keel serve` (see [`Serve`]) with `EXTRA...`
/// arguments and `env` set, its stderr logged ([`Daemon::stderr`]).
pub fn start_daemon(extra: &[&str], env: &[(&str, &str)]) -> Daemon {
    Serve::new()
        .args(extra)
        .env("NO_COLOR", "1")
        .envs(env)
        .logged()
        .start()
}

/// The API calls of the browser tests (with a bearer token when given).
impl Daemon {
    /// `POST /v1/runs` with a JSON scenario (and a bearer token when
    /// given); the run id of the 201.
    pub async fn create(&self, scenario: &str, token: Option<&str>) -> String {
        let mut req = http()
            .post(self.url("/v1/runs"))
            .header("content-type", "application/json")
            .body(scenario.to_owned());
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let r = req.send().await.unwrap();
        let status = r.status();
        let text = r.text().await.unwrap();
        assert_eq!(status, 201, "POST /v1/runs: {text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        v["run_id"].as_str().unwrap().to_owned()
    }

    /// `GET path` as JSON (with a bearer token when given).
    pub async fn get_json(&self, path: &str, token: Option<&str>) -> Value {
        let mut req = http().get(self.url(path));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let r = req.send().await.unwrap();
        let status = r.status();
        let text = r.text().await.unwrap();
        assert!(status.is_success(), "GET {path}: {status} {text}");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("GET {path}: {e}: {text}"))
    }

    /// Every event of a run (`?format=jsonl`), parsed.
    pub async fn events(&self, run: &str, token: Option<&str>) -> Vec<Value> {
        let mut req =
            http().get(self.url(&format!("/v1/runs/{run}/events?format=jsonl&limit=10000")));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let r = req.send().await.unwrap();
        assert!(r.status().is_success(), "events of {run}: {}", r.status());
        r.text()
            .await
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The run's entry (`GET /v1/runs/{id}`).
    pub async fn run(&self, run: &str, token: Option<&str>) -> Value {
        self.get_json(&format!("/v1/runs/{run}"), token).await
    }

    /// Waits until the run has ended; returns its entry.
    pub async fn wait_ended(&self, run: &str, token: Option<&str>) -> Value {
        wait_until(
            &format!("run {run} to end"),
            Duration::from_secs(30),
            || async {
                let v = self.run(run, token).await;
                let s = v["status"].as_str().unwrap_or_default().to_owned();
                (s != "running" && !s.is_empty()).then_some(v)
            },
        )
        .await
    }

    /// The run ids of `GET /v1/runs`.
    pub async fn run_ids(&self, token: Option<&str>) -> Vec<String> {
        let v = self.get_json("/v1/runs", token).await;
        let list = v
            .get("runs")
            .and_then(Value::as_array)
            .or_else(|| v.as_array())
            .unwrap_or_else(|| panic!("GET /v1/runs: no list in {v}"));
        list.iter()
            .map(|r| r["run_id"].as_str().unwrap().to_owned())
            .collect()
    }
}

/// Whether `kind` is a run terminal.
pub fn is_run_terminal(kind: &str) -> bool {
    matches!(kind, "run.completed" | "run.failed" | "run.cancelled")
}

// ------------------------------------------------------- another origin

/// A web server on another loopback port: another origin. Serves the
/// pages put with [`Site::page`] as HTML; any other path is a blank page.
pub struct Site {
    pub origin: String,
    pages: Arc<Mutex<HashMap<String, String>>>,
    task: JoinHandle<()>,
}

impl Site {
    pub async fn start() -> Site {
        use axum::response::Html;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let origin = format!("http://{}", listener.local_addr().unwrap());
        let pages: Arc<Mutex<HashMap<String, String>>> = Arc::default();
        let served = pages.clone();
        let app = axum::Router::new().fallback(move |uri: axum::http::Uri| {
            let served = served.clone();
            async move {
                let page = served.lock().unwrap().get(uri.path()).cloned();
                Html(page.unwrap_or_else(|| {
                    "<!doctype html><meta charset=utf-8><title>other origin</title><p>blank</p>"
                        .to_owned()
                }))
            }
        });
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Site {
            origin,
            pages,
            task,
        }
    }

    /// Serves `html` at `path`.
    pub fn page(&self, path: &str, html: &str) {
        self.pages
            .lock()
            .unwrap()
            .insert(path.to_owned(), html.to_owned());
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.origin)
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        self.task.abort();
    }
}

// ------------------------------------------------------------------ proxy

struct ProxyState {
    accepted: AtomicUsize,
    conns: Mutex<Vec<JoinHandle<()>>>,
    /// Everything the clients sent (requests are small; capped at 1 MiB).
    sent: Mutex<Vec<u8>>,
    /// Everything the daemon answered (capped at 1 MiB).
    received: Mutex<Vec<u8>>,
}

/// A TCP proxy to a daemon that counts the connections it accepted,
/// records what clients sent, and can drop every open connection.
pub struct Proxy {
    pub addr: SocketAddr,
    state: Arc<ProxyState>,
    task: JoinHandle<()>,
}

impl Proxy {
    pub async fn start(target: SocketAddr) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(ProxyState {
            accepted: AtomicUsize::new(0),
            conns: Mutex::new(Vec::new()),
            sent: Mutex::new(Vec::new()),
            received: Mutex::new(Vec::new()),
        });
        let st = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                st.accepted.fetch_add(1, Ordering::SeqCst);
                let st2 = st.clone();
                let conn = tokio::spawn(async move {
                    let Ok(server) = tokio::net::TcpStream::connect(target).await else {
                        return;
                    };
                    let (mut cr, mut cw) = client.into_split();
                    let (mut sr, mut sw) = server.into_split();
                    let up = pump(&mut cr, &mut sw, &st2.sent);
                    let down = pump(&mut sr, &mut cw, &st2.received);
                    // Either side closing ends the connection.
                    tokio::select! {
                        () = up => {}
                        () = down => {}
                    }
                });
                let mut conns = st.conns.lock().unwrap();
                conns.retain(|c| !c.is_finished());
                conns.push(conn);
            }
        });
        Proxy { addr, state, task }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.state.accepted.load(Ordering::SeqCst)
    }

    /// Closes every open connection (both ends), as a network failure
    /// would; later connections are proxied as before.
    pub fn drop_all(&self) -> usize {
        let conns: Vec<_> = std::mem::take(&mut *self.state.conns.lock().unwrap());
        let open = conns.iter().filter(|c| !c.is_finished()).count();
        for c in conns {
            c.abort();
        }
        open
    }

    /// Everything the daemon answered so far, as text.
    pub fn received(&self) -> String {
        String::from_utf8_lossy(&self.state.received.lock().unwrap()).into_owned()
    }

    /// Everything clients sent so far, as text.
    pub fn sent(&self) -> String {
        String::from_utf8_lossy(&self.state.sent.lock().unwrap()).into_owned()
    }

    /// How many request lines starting `prefix` (e.g. `GET /v1/runs/x/events`)
    /// clients sent.
    pub fn requests(&self, prefix: &str) -> usize {
        self.sent().matches(prefix).count()
    }
}

/// Copies `from` to `to` until either ends, recording what passes.
async fn pump(
    from: &mut tokio::net::tcp::OwnedReadHalf,
    to: &mut tokio::net::tcp::OwnedWriteHalf,
    record: &Mutex<Vec<u8>>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        {
            let mut seen = record.lock().unwrap();
            if seen.len() < 1 << 20 {
                seen.extend_from_slice(&buf[..n]);
            }
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
        self.drop_all();
    }
}
