//! A real `keel serve` on 127.0.0.1:0 for the integration tests, and the
//! JSON client they drive it with.
//!
//! [`Serve`] says how to start it (extra arguments, environment, a token,
//! its own journal or a temporary one, stderr inherited or logged, or a
//! host's own binary embedding `keel-serve` instead of `keel serve`);
//! [`Daemon`] is the running process, killed on drop.

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How to start a `keel serve`: `keel serve --db DB --listen 127.0.0.1:0
/// ARGS...`, with KEEL_DB and KEEL_TOKEN cleared and then `env` set.
#[derive(Debug, Default, Clone)]
pub struct Serve {
    args: Vec<String>,
    env: Vec<(String, String)>,
    db: Option<PathBuf>,
    logged: bool,
    host: Option<PathBuf>,
}

impl Serve {
    pub fn new() -> Serve {
        Serve::default()
    }

    /// More arguments after `--listen`.
    pub fn args(mut self, extra: &[&str]) -> Serve {
        self.args.extend(extra.iter().map(|a| (*a).to_owned()));
        self
    }

    /// Sets `name` in the daemon's environment.
    pub fn env(mut self, name: &str, value: &str) -> Serve {
        self.env.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Sets each pair in the daemon's environment, in order.
    pub fn envs(self, pairs: &[(&str, &str)]) -> Serve {
        pairs.iter().fold(self, |s, (k, v)| s.env(k, v))
    }

    /// `KEEL_TOKEN`, when given.
    pub fn token(self, token: Option<&str>) -> Serve {
        match token {
            Some(t) => self.env("KEEL_TOKEN", t),
            None => self,
        }
    }

    /// The journal at `db` (kept after the daemon ends) instead of one in
    /// a temporary directory.
    pub fn db(mut self, db: &Path) -> Serve {
        self.db = Some(db.to_owned());
        self
    }

    /// stderr appended to [`stderr_path`] of the journal (read it with
    /// [`Daemon::stderr`] or [`stderr_of`]) instead of inherited.
    pub fn logged(mut self) -> Serve {
        self.logged = true;
        self
    }

    /// `PROGRAM --db DB --listen 127.0.0.1:0 ARGS...` instead of `keel
    /// serve ...`: a host embedding the daemon (it prints the same
    /// `listening on` line).
    pub fn host(mut self, program: &Path) -> Serve {
        self.host = Some(program.to_owned());
        self
    }

    /// Spawns the daemon and waits for its `listening on` line.
    pub fn start(self) -> Daemon {
        let dir = self.db.is_none().then(|| tempfile::tempdir().unwrap());
        let db = self
            .db
            .clone()
            .unwrap_or_else(|| dir.as_ref().unwrap().path().join("keel.db"));
        let log = self.logged.then(|| stderr_path(&db));
        let stderr = match &log {
            Some(path) => Stdio::from(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .unwrap(),
            ),
            None => Stdio::inherit(),
        };
        let mut cmd = match &self.host {
            Some(program) => Command::new(program),
            None => {
                let mut keel = Command::new(env!("CARGO_BIN_EXE_keel"));
                keel.arg("serve");
                keel
            }
        };
        cmd.arg("--db")
            .arg(&db)
            .args(["--listen", "127.0.0.1:0"])
            .args(&self.args)
            .env_remove("KEEL_DB")
            .env_remove("KEEL_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr);
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        let started = Instant::now();
        let mut child = cmd.spawn().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let Some(base) = line.trim().strip_prefix("listening on ") else {
            let _ = child.kill();
            let _ = child.wait();
            let err = log
                .as_deref()
                .map(|p| std::fs::read_to_string(p).unwrap_or_default())
                .unwrap_or_default();
            panic!(
                "{}: unexpected first line {line:?}; stderr:\n{err}",
                self.name()
            );
        };
        let base = base.to_owned();
        let addr: SocketAddr = base
            .strip_prefix("http://")
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("{}: not an address: {line:?}", self.name()));
        let ready_in = started.elapsed();
        // Keep draining stdout so that a later line never meets a closed pipe.
        std::thread::spawn(move || {
            let mut sink = Vec::new();
            let _ = stdout.read_to_end(&mut sink);
        });
        Daemon {
            child,
            addr,
            base,
            db,
            ready_in,
            log,
            _dir: dir,
        }
    }
}

impl Serve {
    /// What the daemon is called in failures.
    fn name(&self) -> String {
        match &self.host {
            Some(program) => program.display().to_string(),
            None => "keel serve".to_owned(),
        }
    }
}

/// A running `keel serve`; killed (SIGKILL) on drop.
pub struct Daemon {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: SocketAddr,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// Its journal.
    pub db: PathBuf,
    /// From spawn to the `listening on` line (startup recovery included).
    pub ready_in: Duration,
    log: Option<PathBuf>,
    _dir: Option<tempfile::TempDir>,
}

impl Daemon {
    /// The daemon's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// What a daemon started [`Serve::logged`] wrote to stderr so far
    /// (empty for one that inherits stderr).
    pub fn stderr(&self) -> String {
        self.log
            .as_deref()
            .map(|p| std::fs::read_to_string(p).unwrap_or_default())
            .unwrap_or_default()
    }

    pub fn sigterm(&self) {
        let ok = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok);
    }

    pub fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        wait_exit(&mut self.child, within, "the daemon")
    }

    /// SIGKILL, and reap.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where a logged daemon over `db` appends its stderr: `<db>.stderr`.
pub fn stderr_path(db: &Path) -> PathBuf {
    db.with_extension("stderr")
}

/// What every logged daemon over `db` wrote to stderr.
pub fn stderr_of(db: &Path) -> String {
    std::fs::read_to_string(stderr_path(db)).unwrap_or_default()
}

/// Waits at most `within` for `child` to exit; `what` names it when it
/// does not.
pub fn wait_exit(child: &mut Child, within: Duration, what: &str) -> ExitStatus {
    let until = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < until, "{what} did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A client whose requests say they are JSON (rule http.json_body; GETs
/// ignore it), with no idle connections kept.
pub fn client_builder() -> reqwest::ClientBuilder {
    let mut json = reqwest::header::HeaderMap::new();
    json.insert(
        reqwest::header::CONTENT_TYPE,
        reqwest::header::HeaderValue::from_static("application/json"),
    );
    reqwest::Client::builder()
        .default_headers(json)
        .pool_max_idle_per_host(0)
}

/// [`client_builder`], built.
pub fn client() -> reqwest::Client {
    client_builder().build().unwrap()
}

/// `GET path` on `d`.
pub async fn get(c: &reqwest::Client, d: &Daemon, path: &str) -> reqwest::Response {
    c.get(d.url(path)).send().await.unwrap()
}

/// `GET path` on `d`, the body as JSON.
pub async fn get_json(c: &reqwest::Client, d: &Daemon, path: &str) -> serde_json::Value {
    get(c, d, path).await.json().await.unwrap()
}

/// `GET path` on `d`, the body as text.
pub async fn get_text(c: &reqwest::Client, d: &Daemon, path: &str) -> String {
    get(c, d, path).await.text().await.unwrap()
}

/// `POST path` on `d` with `body`.
pub async fn post(
    c: &reqwest::Client,
    d: &Daemon,
    path: &str,
    body: impl Into<reqwest::Body>,
) -> reqwest::Response {
    c.post(d.url(path)).body(body).send().await.unwrap()
}

/// `POST /v1/runs` with `body`: 201; the run id.
pub async fn create(c: &reqwest::Client, d: &Daemon, body: String) -> String {
    let r = post(c, d, "/v1/runs", body).await;
    assert_eq!(r.status(), 201);
    let v: serde_json::Value = r.json().await.unwrap();
    v["run_id"].as_str().unwrap().to_owned()
}

/// `POST /v1/runs/{run}/cancel`.
pub async fn cancel(c: &reqwest::Client, d: &Daemon, run: &str) -> reqwest::Response {
    c.post(d.url(&format!("/v1/runs/{run}/cancel")))
        .send()
        .await
        .unwrap()
}

/// Polls `GET /v1/runs/{run}` (20 s at most) until the run has ended
/// with status `want`; its entry.
pub async fn wait_status(
    c: &reqwest::Client,
    d: &Daemon,
    run: &str,
    want: &str,
) -> serde_json::Value {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let v: serde_json::Value = get_json(c, d, &format!("/v1/runs/{run}")).await;
        if v["status"] == want && v["live"] == false {
            return v;
        }
        assert!(Instant::now() < until, "status stayed {v}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
