//! A nats-server with JetStream for the multi-host tests: a free loopback
//! port, temporary storage, killed on drop.

use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Whether `nats-server` is on PATH; prints `SKIPPED: nats-server not on
/// PATH` when it is not.
pub fn have_nats_server() -> bool {
    let found = Command::new("nats-server")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        println!("SKIPPED: nats-server not on PATH");
    }
    found
}

/// A free loopback port (bound, then released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub struct NatsServer {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl NatsServer {
    /// Starts it and waits until it listens.
    pub fn start() -> NatsServer {
        let port = free_port();
        let dir = tempfile::tempdir().unwrap();
        let child = Self::spawn(port, dir.path());
        NatsServer { child, port, dir }
    }

    /// Kills the server (SIGKILL), and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts it again on the same port and storage.
    pub fn restart(&mut self) {
        self.child = Self::spawn(self.port, self.dir.path());
    }

    fn spawn(port: u16, dir: &Path) -> Child {
        let child = Command::new("nats-server")
            .args(["-js", "-a", "127.0.0.1", "-p"])
            .arg(port.to_string())
            .arg("-sd")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let start = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "nats-server did not listen"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        child
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// The server's storage directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
