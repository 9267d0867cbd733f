//! A nats-server with JetStream for the JetStream tests (`nats.rs`,
//! `delete_nats.rs`): a free loopback port, temporary storage, restartable,
//! killed on drop.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use keel_observers::JetStreamConfig;
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running (or killed, until restarted) nats-server.
pub struct NatsServer {
    child: Option<Child>,
    port: u16,
    /// Its storage directory.
    pub dir: PathBuf,
}

/// Whether `nats-server` is on PATH (a failure under `CI`); prints
/// `SKIPPED: nats-server not on PATH` when it is not.
pub fn have_nats_server() -> bool {
    let found = Command::new("nats-server")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        // CI installs it (`.ci/run`): there a missing server is a failure.
        assert!(
            std::env::var_os("CI").is_none(),
            "nats-server not on PATH in CI"
        );
        println!("SKIPPED: nats-server not on PATH");
    }
    found
}

impl NatsServer {
    /// A server on a free port with storage named after `name`.
    pub fn start(name: &str) -> NatsServer {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir =
            std::env::temp_dir().join(format!("keel-nats-{name}-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut server = NatsServer {
            child: None,
            port,
            dir,
        };
        server.restart();
        server
    }

    /// (Re)starts on the same port and storage directory.
    pub fn restart(&mut self) {
        assert!(self.child.is_none());
        let child = Command::new("nats-server")
            .args(["-js", "-a", "127.0.0.1", "-p"])
            .arg(self.port.to_string())
            .arg("-sd")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(child);
        let start = Instant::now();
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "nats-server did not listen"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the server (storage kept for a restart).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Its client URL.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// A JetStream config for it, with a 2 s ack timeout.
    pub fn config(&self) -> JetStreamConfig {
        let mut c = JetStreamConfig::new(self.url());
        c.ack_timeout = Duration::from_secs(2);
        c
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
