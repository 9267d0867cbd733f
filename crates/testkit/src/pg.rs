//! A throwaway PostgreSQL server for tests: [`TempPostgres`].
//!
//! It runs the distribution's own binaries (`initdb`, `pg_ctl`,
//! `createdb`), found on `PATH` and then in `/usr/lib/postgresql/*/bin`:
//! `initdb` into a temporary directory, the server on a free loopback port
//! with its unix socket in that directory, password authentication over
//! TCP (the URL carries the password) and trust over the socket (used to
//! create databases). Everything is stopped and removed on drop.
//!
//! PostgreSQL refuses to run as root, so when the tests run as root the
//! binaries run as `nobody` (through `setpriv`), with the directory handed
//! to it; otherwise they run directly.
//!
//! Without the binaries, [`TempPostgres::start`] prints
//! `SKIPPED: apt-get install postgresql` and returns `None`, except under
//! `CI=true`, where a missing server fails the test.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU64, Ordering};

/// The role the server is initialised with.
pub const USER: &str = "keel";
/// Its password (a test value, required over TCP).
pub const PASSWORD: &str = "keel-test-pw";

/// A running throwaway server; stopped and deleted on drop.
#[derive(Debug)]
pub struct TempPostgres {
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
    /// Run the binaries as `nobody` (we are root).
    as_nobody: bool,
}

/// The binaries [`TempPostgres`] runs, all from one directory.
const TOOLS: [&str; 5] = ["initdb", "pg_ctl", "postgres", "createdb", "pg_dump"];

fn has_tools(dir: &Path) -> bool {
    TOOLS.iter().all(|tool| dir.join(tool).is_file())
}

/// The directory holding the server's binaries: the first on `PATH` that
/// holds them all, else the newest `/usr/lib/postgresql/*/bin`.
pub fn find_bin_dir() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).find(|dir| has_tools(dir)));
    if on_path.is_some() {
        return on_path;
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path().join("bin"))
        .filter(|bin| has_tools(bin))
        .collect();
    versions.sort();
    versions.pop()
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// A fresh directory name under the temp dir.
fn temp_dir() -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    std::env::temp_dir().join(format!(
        "keel-pg-{}-{}-{nanos}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ))
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(54329)
}

impl TempPostgres {
    /// Starts a server, or `None` (after printing `SKIPPED: …`) when the
    /// PostgreSQL binaries are not installed. Panics when they are missing
    /// under `CI=true`, or when the server cannot be started.
    #[allow(clippy::panic, clippy::expect_used, reason = "a test fixture")]
    pub fn start() -> Option<TempPostgres> {
        let Some(bin) = find_bin_dir() else {
            if std::env::var("CI").as_deref() == Ok("true") {
                panic!("PostgreSQL binaries not found under CI=true: apt-get install postgresql");
            }
            println!("SKIPPED: apt-get install postgresql");
            return None;
        };
        let dir = temp_dir();
        std::fs::create_dir_all(&dir).expect("create the server's temp dir");
        let server = TempPostgres {
            dir,
            bin,
            port: free_port(),
            as_nobody: is_root(),
        };
        server.init();
        // A port taken between the probe and the start: try another.
        let mut server = server;
        for attempt in 0..5 {
            if server.try_start() {
                server.create_database("keel");
                return Some(server);
            }
            assert!(attempt < 4, "cannot start PostgreSQL: {}", server.log());
            server.port = free_port();
        }
        None
    }

    #[allow(clippy::expect_used, reason = "a test fixture")]
    fn init(&self) {
        let pwfile = self.dir.join("pw");
        std::fs::write(&pwfile, PASSWORD).expect("write the password file");
        if self.as_nobody {
            chown_nobody(&self.dir);
            chown_nobody(&pwfile);
        }
        let out = self.run(
            "initdb",
            &[
                "-D".as_ref(),
                self.data().as_os_str(),
                "-U".as_ref(),
                USER.as_ref(),
                "--pwfile".as_ref(),
                pwfile.as_os_str(),
                "--auth-local=trust".as_ref(),
                "--auth-host=scram-sha-256".as_ref(),
                "-E".as_ref(),
                "UTF8".as_ref(),
                "--locale=C".as_ref(),
                "--no-sync".as_ref(),
            ],
        );
        assert!(out.status.success(), "initdb failed: {}", text(&out));
    }

    fn try_start(&self) -> bool {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c max_connections=200",
            self.port,
            self.dir.display()
        );
        let out = self.run(
            "pg_ctl",
            &[
                "-D".as_ref(),
                self.data().as_os_str(),
                "-l".as_ref(),
                self.dir.join("server.log").as_os_str(),
                "-w".as_ref(),
                "-o".as_ref(),
                options.as_ref(),
                "start".as_ref(),
            ],
        );
        out.status.success()
    }

    /// Creates database `name` (owned by [`USER`]) and returns its URL.
    pub fn create_database(&self, name: &str) -> String {
        self.client_tool("createdb", name);
        self.url_of(name)
    }

    /// `pg_dump` of database `name` (plain SQL, data included): the bytes
    /// a backup of it would hold.
    pub fn dump(&self, name: &str) -> Vec<u8> {
        self.client_tool("pg_dump", name).stdout
    }

    /// Runs the client program `tool` on database `name` as [`USER`] over
    /// the server's socket directory; panics when it fails.
    #[allow(clippy::panic, reason = "a test fixture")]
    fn client_tool(&self, tool: &str, name: &str) -> Output {
        let port = self.port.to_string();
        let out = self.run(
            tool,
            &[
                "-h".as_ref(),
                self.dir.as_os_str(),
                "-p".as_ref(),
                port.as_ref(),
                "-U".as_ref(),
                USER.as_ref(),
                name.as_ref(),
            ],
        );
        if !out.status.success() {
            panic!("{tool} {name} failed: {}", text(&out));
        }
        out
    }

    /// The URL of database `name` over TCP, with the password.
    pub fn url_of(&self, name: &str) -> String {
        format!(
            "postgres://{USER}:{PASSWORD}@127.0.0.1:{}/{name}",
            self.port
        )
    }

    /// The URL of the database `keel` created at start.
    pub fn url(&self) -> String {
        self.url_of("keel")
    }

    /// The server's TCP port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server log so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// Runs one of the server's binaries (as `nobody` when we are root).
    #[allow(clippy::expect_used, reason = "a test fixture")]
    fn run(&self, tool: &str, args: &[&std::ffi::OsStr]) -> Output {
        let program = self.bin.join(tool);
        let mut cmd = if self.as_nobody {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
                .arg(&program);
            c
        } else {
            Command::new(&program)
        };
        cmd.args(args)
            .current_dir(&self.dir)
            .env_remove("PGPASSWORD")
            .output()
            .expect("run a PostgreSQL binary")
    }
}

impl Drop for TempPostgres {
    fn drop(&mut self) {
        let _ = self.run(
            "pg_ctl",
            &[
                "-D".as_ref(),
                self.data().as_os_str(),
                "-m".as_ref(),
                "immediate".as_ref(),
                "-w".as_ref(),
                "stop".as_ref(),
            ],
        );
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Hands `path` to `nobody:nogroup` (uid/gid 65534).
#[allow(clippy::expect_used, reason = "a test fixture")]
fn chown_nobody(path: &Path) {
    std::os::unix::fs::chown(path, Some(65534), Some(65534)).expect("chown to nobody");
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}
