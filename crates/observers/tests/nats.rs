#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The JetStream required observer and remote subscription against real
//! nats-server processes (each test starts its own on a free loopback port
//! with temp storage, and kills it on drop). Without `nats-server` on PATH
//! each test prints `SKIPPED: nats-server not on PATH` and returns; CI
//! installs it (`.ci/run`).
#![cfg(feature = "nats")]

use keel_eventlog::{
    Event, Extra, LogConfig, ModelCompleted, ModelStarted, Payload, RunCompleted, RunLog,
    RunStarted, SubscribeError, SystemClock, TextDelta, TurnRef,
};
use keel_message::{ModelName, OperationId, RunId};
use keel_observers::{
    JetStreamConfig, JetStreamObserver, ObserverError, PipelineBuilder, PipelineConfig,
    RemoteSubscribeError, RemoteSubscription, RequiredObserver,
};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

// ------------------------------------------------------------ the server

struct NatsServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
}

fn have_nats_server() -> bool {
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

impl NatsServer {
    fn start(name: &str) -> NatsServer {
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
    fn restart(&mut self) {
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

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    fn config(&self) -> JetStreamConfig {
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

// ------------------------------------------------------------ the runs

/// A live run: payloads committed one at a time through a real `RunLog`.
struct Run {
    log: RunLog,
    op: OperationId,
    model: ModelName,
}

impl Run {
    fn new(name: &str) -> Run {
        Run {
            log: RunLog::new(
                RunId::parse(name).unwrap(),
                LogConfig::default(),
                Arc::new(SystemClock),
            )
            .unwrap(),
            op: OperationId::parse("op_1").unwrap(),
            model: ModelName::parse("scripted-1").unwrap(),
        }
    }

    fn commit(&self, p: Payload) -> Arc<Event> {
        self.log.commit(&p).unwrap()
    }

    /// run.started, turn.started, model.started: seqs 1..=3.
    fn start(&self) -> Vec<Arc<Event>> {
        vec![
            self.commit(Payload::RunStarted(RunStarted {
                model: Some(self.model.clone()),
                extra: Extra::new(),
                continues: None,
            })),
            self.commit(Payload::TurnStarted(TurnRef {
                turn: 1,
                extra: Extra::new(),
            })),
            self.commit(Payload::ModelStarted(ModelStarted {
                turn: 1,
                operation_id: self.op.clone(),
                model: self.model.clone(),
                attempt: 1,
                extra: Extra::new(),
            })),
        ]
    }

    fn delta(&self, i: usize) -> Arc<Event> {
        self.commit(Payload::TextDelta(TextDelta {
            turn: 1,
            operation_id: self.op.clone(),
            text: format!("delta {i} \"quoted\" \\ ünïcode\n"),
            extra: Extra::new(),
        }))
    }

    fn finish(&self) -> Vec<Arc<Event>> {
        vec![
            self.commit(Payload::ModelCompleted(ModelCompleted {
                turn: 1,
                operation_id: self.op.clone(),
                finish: keel_stream::FinishReason::Stop,
                usage: None,
                metadata: None,
                extra: Extra::new(),
            })),
            self.commit(Payload::TurnCompleted(TurnRef {
                turn: 1,
                extra: Extra::new(),
            })),
            self.commit(Payload::RunCompleted(RunCompleted::default())),
        ]
    }

    fn whole(&self, deltas: usize) -> Vec<Arc<Event>> {
        let mut events = self.start();
        events.extend((0..deltas).map(|i| self.delta(i)));
        events.extend(self.finish());
        events
    }
}

async fn read_all(sub: &mut RemoteSubscription) -> Vec<String> {
    let mut lines = Vec::new();
    while let Some(item) = tokio::time::timeout(Duration::from_secs(5), sub.next())
        .await
        .expect("remote subscription stalled")
    {
        lines.push(item.unwrap().line().to_owned());
    }
    lines
}

// ------------------------------------------------------------ the tests

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_and_read_back_byte_identical_with_resume() {
    if !have_nats_server() {
        return;
    }
    let server = NatsServer::start("roundtrip");
    let observer = JetStreamObserver::connect(server.config()).await.unwrap();
    let run = Run::new("run_roundtrip");
    let events = run.whole(20);
    let lines: Vec<String> = events.iter().map(|e| e.line().to_owned()).collect();

    // Half the run, then a subscriber that follows live.
    for e in &events[..10] {
        observer.observe(e).await.unwrap();
    }
    let mut live = RemoteSubscription::open(observer.handle(), "run_roundtrip", 0)
        .await
        .unwrap();
    let reader = tokio::spawn(async move { read_all(&mut live).await });
    for e in &events[10..] {
        observer.observe(e).await.unwrap();
    }
    assert_eq!(
        reader.await.unwrap(),
        lines,
        "history + live, byte for byte"
    );

    // Resume from a cursor: exactly the rest, no gap, no duplicate.
    let mut resumed = RemoteSubscription::open(observer.handle(), "run_roundtrip", 7)
        .await
        .unwrap();
    assert_eq!(read_all(&mut resumed).await, lines[7..].to_vec());
    assert_eq!(resumed.cursor(), lines.len() as u64);

    // A cursor at the run's terminal ends at once (no waiting for more).
    let latest = lines.len() as u64;
    let mut at_end = RemoteSubscription::open(observer.handle(), "run_roundtrip", latest)
        .await
        .unwrap();
    let ended = tokio::time::timeout(std::time::Duration::from_secs(2), at_end.next()).await;
    assert!(
        matches!(ended, Ok(None)),
        "a cursor at the terminal must end"
    );

    // Same typed errors as a local subscription.
    match RemoteSubscription::open(observer.handle(), "run_roundtrip", latest + 1).await {
        Err(RemoteSubscribeError::Cursor(SubscribeError::CursorAhead {
            requested,
            latest: l,
        })) => assert_eq!((requested, l), (latest + 1, latest)),
        other => panic!("expected CursorAhead, got {other:?}"),
    }
    assert!(matches!(
        RemoteSubscription::open(observer.handle(), "run_nobody", 0).await,
        Err(RemoteSubscribeError::UnknownRun { .. })
    ));
    // Not run ids: wildcards would match the stored run's subject.
    for id in ["*", ">", "run_roundtrip.>", "run *"] {
        assert!(
            matches!(
                RemoteSubscription::open(observer.handle(), id, 0).await,
                Err(RemoteSubscribeError::UnknownRun { .. })
            ),
            "{id}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_is_deduplicated_and_second_writer_rejected() {
    if !have_nats_server() {
        return;
    }
    let server = NatsServer::start("writers");
    let first = JetStreamObserver::connect(server.config()).await.unwrap();
    let run = Run::new("run_writers");
    let events = run.start();
    for e in &events {
        first.observe(e).await.unwrap();
    }
    // A retry of an acked event: Ok, one copy in the stream.
    first.observe(&events[2]).await.unwrap();
    first.observe(&events[1]).await.unwrap();
    // A fresh observer (another process after a crash) retrying seq 3.
    let retrier = JetStreamObserver::connect(server.config()).await.unwrap();
    retrier.observe(&events[2]).await.unwrap();
    let info = first
        .handle()
        .context()
        .get_stream("KEEL_EVENTS")
        .await
        .unwrap()
        .info()
        .await
        .unwrap()
        .clone();
    assert_eq!(info.state.messages, 3, "retries stored no copy");

    // A second writer of the same run (a different RunLog: different ts,
    // so different bytes) starting at seq 1: rejected, typed.
    let other = Run::new("run_writers");
    let other_events = other.start();
    let second = JetStreamObserver::connect(server.config()).await.unwrap();
    for e in &other_events[..1] {
        match second.observe(e).await {
            Err(ObserverError::Conflict { run_id, seq }) => {
                assert_eq!((run_id.as_str(), seq), ("run_writers", 1));
            }
            other => panic!("expected Conflict, got {other:?}"),
        }
    }
    // And one that skips ahead past the stored tail: a gap, nothing sent.
    let _seq4 = other.delta(0);
    let skip = other.delta(1); // seq 5
    match second.observe(&skip).await {
        Err(ObserverError::Gap {
            last_stored, seq, ..
        }) => assert_eq!((last_stored, seq), (3, 5)),
        other => panic!("expected Gap, got {other:?}"),
    }
    // Outside the duplicate window, the expected-last-subject-sequence
    // header alone refuses the second writer.
    let mut short = server.config();
    short.stream = "KEEL_SHORT".to_owned();
    short.subject_prefix = "keel.short".to_owned();
    short.duplicate_window = Duration::from_millis(300);
    let a = JetStreamObserver::connect(short.clone()).await.unwrap();
    for e in &events {
        a.observe(e).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(600)).await;
    let b = JetStreamObserver::connect(short).await.unwrap();
    assert!(matches!(
        b.observe(&other_events[0]).await,
        Err(ObserverError::Conflict { seq: 1, .. })
    ));
    // ... while the same bytes as the run's tail are still a retry.
    b.observe(&events[2]).await.unwrap();
    // The first writer's run is untouched.
    let mut sub = RemoteSubscription::open(first.handle(), "run_writers", 0)
        .await
        .unwrap();
    for e in &events {
        assert_eq!(sub.next().await.unwrap().unwrap().line(), e.line());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_killed_mid_run_then_restarted() {
    if !have_nats_server() {
        return;
    }
    let mut server = NatsServer::start("restart");
    let observer = Arc::new(JetStreamObserver::connect(server.config()).await.unwrap());
    let deadline = Duration::from_millis(500);
    let pipeline = PipelineBuilder::new()
        .config(PipelineConfig {
            required_deadline: deadline,
            ..PipelineConfig::default()
        })
        .required(observer.clone())
        .build();
    let run = Run::new("run_restart");
    let mut acked = Vec::new();
    for e in run.start() {
        pipeline.dispatch(&e).await.unwrap();
        acked.push(e);
    }
    for i in 0..5 {
        let e = run.delta(i);
        pipeline.dispatch(&e).await.unwrap();
        acked.push(e);
    }

    server.kill();
    // The next event: refused with a typed error within the deadline.
    let pending = run.delta(5);
    let t = Instant::now();
    let err = pipeline.dispatch(&pending).await.unwrap_err();
    assert!(
        t.elapsed() < deadline + Duration::from_millis(400),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(err.seq, pending.seq());
    assert!(
        matches!(
            err.source,
            ObserverError::DeadlineExceeded { .. } | ObserverError::Failed(_)
        ),
        "{err}"
    );

    server.restart();
    // The stream holds a contiguous prefix of what was acked (file storage
    // survived the kill; a PubAck'd message may be lost only on an OS
    // crash, see the RFC).
    let reader = JetStreamObserver::connect(server.config()).await.unwrap();
    let stored = {
        let mut sub = RemoteSubscription::open(reader.handle(), "run_restart", 0)
            .await
            .unwrap();
        let mut lines = Vec::new();
        while let Ok(Some(item)) =
            tokio::time::timeout(Duration::from_millis(500), sub.next()).await
        {
            lines.push(item.unwrap().line().to_owned());
        }
        lines
    };
    let acked_lines: Vec<String> = acked.iter().map(|e| e.line().to_owned()).collect();
    assert!(stored.len() >= acked_lines.len(), "acked events survived");
    assert_eq!(stored[..acked_lines.len()], acked_lines[..]);
    // Publishing continues: the refused event is retried (same seq, same
    // bytes; the client reconnects by itself), then the rest of the run.
    let retry_start = Instant::now();
    loop {
        match pipeline.dispatch(&pending).await {
            Ok(()) => break,
            Err(_) if retry_start.elapsed() < Duration::from_secs(10) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("no recovery: {e}"),
        }
    }
    acked.push(pending);
    for e in run.finish() {
        pipeline.dispatch(&e).await.unwrap();
        acked.push(e);
    }
    let mut sub = RemoteSubscription::open(reader.handle(), "run_restart", 0)
        .await
        .unwrap();
    let all = read_all(&mut sub).await;
    let expected: Vec<String> = acked.iter().map(|e| e.line().to_owned()).collect();
    assert_eq!(all, expected, "contiguous, no seq reused, no duplicate");
}
