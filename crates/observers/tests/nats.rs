#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The JetStream required observer, remote subscription and recovery
//! through JetStream against real nats-server processes (each test starts its own on a free loopback port
//! with temp storage, and kills it on drop). Without `nats-server` on PATH
//! each test prints `SKIPPED: nats-server not on PATH` and returns; CI
//! installs it (`.ci/run`).
#![cfg(all(feature = "nats", feature = "sqlite"))]

#[path = "support/nats_server.rs"]
mod nats_server;

use keel_eventlog::{
    Event, Extra, LogConfig, ModelCompleted, ModelStarted, Payload, RunCompleted, RunLog,
    RunStarted, SubscribeError, SystemClock, TextDelta, TurnRef,
};
use keel_message::{ModelName, OperationId, RunId};
use keel_observers::{
    JetStreamObserver, ObserverError, PipelineBuilder, PipelineConfig, RemoteSubscribeError,
    RemoteSubscription, RequiredObserver,
};
use nats_server::{NatsServer, have_nats_server};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

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
                chat: None,
                extra: Extra::new(),
                continues: None,
                forked_from: None,
                parent: None,
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
                purpose: None,
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

// ------------------------------------------------------------ recovery

use keel_eventlog::{
    InteractionStarted, ModelCompleted as Completed, ToolCall, ToolRef, recovery::HOST_LOST,
};
use keel_message::{CallId, CanonicalJson, InteractionId, ToolName};
use keel_observers::{
    HostHeartbeat, JetStreamHandle, JetStreamRecovery, JetStreamRecoveryError, JournalConfig,
    LocalSync, Ownership, SqliteJournal, StreamRecovery, StreamStanding,
};

/// How a run is left open when its host dies.
#[derive(Debug, Clone, Copy)]
enum Open {
    /// run.started only.
    Started,
    /// A model call that streamed `n` deltas.
    Streaming(usize),
    /// A tool in flight.
    Tool,
    /// An approval pending on a tool call.
    Approval,
}

const OPENS: [Open; 5] = [
    Open::Started,
    Open::Streaming(0),
    Open::Streaming(3),
    Open::Tool,
    Open::Approval,
];

impl Run {
    /// The events of a run left open as `open` says.
    fn open(&self, open: Open) -> Vec<Arc<Event>> {
        let mut events = self.start();
        match open {
            Open::Started => events.truncate(1),
            Open::Streaming(n) => events.extend((0..n).map(|i| self.delta(i))),
            Open::Tool | Open::Approval => {
                let call = CallId::parse("call_1").unwrap();
                let tool = ToolName::parse("probe").unwrap();
                events.push(self.commit(Payload::ToolCall(ToolCall {
                    turn: 1,
                    operation_id: self.op.clone(),
                    call_id: call.clone(),
                    name: tool.clone(),
                    arguments: CanonicalJson::parse("{}").unwrap(),
                    extra: Extra::new(),
                })));
                events.push(self.commit(Payload::ModelCompleted(Completed {
                    turn: 1,
                    operation_id: self.op.clone(),
                    finish: keel_stream::FinishReason::ToolCalls,
                    usage: None,
                    metadata: None,
                    extra: Extra::new(),
                })));
                if matches!(open, Open::Approval) {
                    events.push(self.commit(Payload::InteractionStarted(InteractionStarted {
                        turn: 1,
                        interaction_id: InteractionId::parse("approve_1").unwrap(),
                        request: "approve probe?".to_owned(),
                        call_id: Some(call),
                        extra: Extra::new(),
                    })));
                } else {
                    events.push(self.commit(Payload::ToolStarted(ToolRef {
                        turn: 1,
                        call_id: call,
                        tool,
                        extra: Extra::new(),
                    })));
                }
            }
        }
        events
    }
}

/// A connection of its own (a recoverer on another gateway).
async fn handle(server: &NatsServer) -> JetStreamHandle {
    JetStreamHandle::connect(server.config()).await.unwrap()
}

/// Every message on `run_id`'s subject, raw, in stream order (duplicates
/// and out-of-order seqs included: a subscription would hide them).
async fn stream_lines(handle: &JetStreamHandle, run_id: &str) -> Vec<String> {
    let stream = handle.context().get_stream("KEEL_EVENTS").await.unwrap();
    let subject = handle.config().subject(run_id);
    let mut lines = Vec::new();
    let mut next = 1;
    while let Ok(m) = stream
        .get_first_raw_message_by_subject(&subject, next)
        .await
    {
        lines.push(String::from_utf8(m.payload.to_vec()).unwrap());
        next = m.sequence + 1;
    }
    lines
}

/// Every line of `run_id` in a SQLite journal.
fn journal_lines(journal: &SqliteJournal, run_id: &str) -> Vec<String> {
    journal
        .reader()
        .unwrap()
        .events_after(run_id, 0, 100_000)
        .unwrap()
}

/// `lines` are one whole run: seqs 1, 2, 3, … with no gap or reuse,
/// importable (every lifecycle rule), every scope closed, and exactly
/// `recovered` terminals after the first `prefix` lines, each a recovery's
/// (`host_lost`, a tool `uncertain`). Returns the kinds of the terminals.
fn assert_recovered_once(run_id: &str, lines: &[String], prefix: usize) -> Vec<String> {
    for (i, line) in lines.iter().enumerate() {
        assert_eq!(
            Event::decode(line).unwrap().seq(),
            i as u64 + 1,
            "seq skipped or reused"
        );
    }
    let log = RunLog::import(
        RunId::parse(run_id).unwrap(),
        lines.iter().map(String::as_str),
        LogConfig::default(),
        Arc::new(SystemClock),
    )
    .unwrap();
    assert!(log.open_scope_starts().is_empty(), "a scope left open");
    let terminals = &lines[prefix..];
    let run_ends = lines
        .iter()
        .filter(|l| {
            let e = Event::decode(l).unwrap();
            matches!(
                e.kind().lifecycle_parts(),
                Some((keel_eventlog::Scope::Run, keel_eventlog::Phase::Ended(_)))
            )
        })
        .count();
    assert_eq!(run_ends, 1, "exactly one run terminal");
    let last = Event::decode(&lines[lines.len() - 1]).unwrap();
    assert_eq!(last.kind().name(), "run.failed");
    assert!(last.line().contains(HOST_LOST), "{}", last.line());
    for line in terminals {
        let e = Event::decode(line).unwrap();
        assert!(e.kind().name().ends_with(".failed"), "{}", e.kind().name());
        if e.kind().name() == "tool.failed" {
            assert!(line.contains("\"uncertain\""), "{line}");
        }
    }
    terminals
        .iter()
        .map(|l| Event::decode(l).unwrap().kind().name().into_owned())
        .collect()
}

/// Publishes `events` as a live host does (owner recorded, heartbeat on).
async fn publish_open(observer: &JetStreamObserver, events: &[Arc<Event>]) {
    for e in events {
        observer.observe(e).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_left_open_by_a_dead_host_is_recovered_once() {
    if !have_nats_server() {
        return;
    }
    let server = NatsServer::start("dead-host");
    let engine = handle(&server).await;
    // A short heartbeat TTL for the test (the bucket is created here).
    let ownership = Ownership::open_with_ttl(&engine, Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(ownership.host_ttl(), Duration::from_secs(1));
    let host = Arc::new(HostHeartbeat::start(ownership.clone()).await.unwrap());
    let host_id = host.id().to_owned();
    let observer = JetStreamObserver::with_host(engine.clone(), host);
    let run = Run::new("run_dead");
    let events = run.open(Open::Streaming(2));
    publish_open(&observer, &events).await;
    let gateway = JetStreamRecovery::open(handle(&server).await)
        .await
        .unwrap();
    assert_eq!(
        gateway
            .ownership()
            .owner(&RunId::parse("run_dead").unwrap())
            .await
            .unwrap(),
        Some(host_id.clone()),
        "recorded before run.started was published"
    );

    // The host dies (its heartbeat task stops; nothing is cleaned up).
    drop(observer);
    let died = Instant::now();
    // Until the key expires the owner looks alive: nothing is touched.
    match gateway.recover("run_dead").await.unwrap() {
        StreamRecovery::OwnerAlive { host } => assert_eq!(host, host_id),
        other => panic!("expected OwnerAlive, got {other:?}"),
    }
    assert_eq!(stream_lines(&engine, "run_dead").await.len(), events.len());
    wait_abandoned(&gateway, "run_dead", &host_id, died).await;
    let found_gone = died.elapsed();
    let t = Instant::now();
    let recovered = match gateway.recover("run_dead").await.unwrap() {
        StreamRecovery::Recovered(r) => r,
        other => panic!("expected Recovered, got {other:?}"),
    };
    println!(
        "owner found gone {} ms after its death; recovery took {} ms",
        found_gone.as_millis(),
        t.elapsed().as_millis()
    );
    assert_eq!(recovered.previous_owner, Some(host_id));
    assert!(recovered.forwarded.is_empty());
    let kinds: Vec<String> = recovered
        .terminals
        .iter()
        .map(|e| e.kind().name().into_owned())
        .collect();
    assert_eq!(kinds, ["model.failed", "turn.failed", "run.failed"]);
    assert!(recovered.terminals[0].line().contains("\"partial\""));
    let lines = stream_lines(&engine, "run_dead").await;
    let want: Vec<String> = events
        .iter()
        .chain(&recovered.terminals)
        .map(|e| e.line().to_owned())
        .collect();
    assert_eq!(lines, want, "the stream holds the prefix and our terminals");
    assert_recovered_once("run_dead", &lines, events.len());
    assert_idempotent(&server, &gateway, "run_dead", &want).await;
}

/// Polls until `run_id`'s owner `host` is found gone (its heartbeat key
/// expired), at most 5 s after `died`.
async fn wait_abandoned(gateway: &JetStreamRecovery, run_id: &str, host: &str, died: Instant) {
    loop {
        match gateway.standing(run_id).await.unwrap() {
            StreamStanding::Abandoned { owner } => {
                assert_eq!(owner.as_deref(), Some(host));
                return;
            }
            StreamStanding::Owned { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
        assert!(
            died.elapsed() < Duration::from_secs(5),
            "the heartbeat never expired"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `run_id` has no owner record left, and recovering it again, here and
/// from another gateway, writes nothing: the stream still holds `want`. Unknown and invalid ids are
/// typed.
async fn assert_idempotent(
    server: &NatsServer,
    gateway: &JetStreamRecovery,
    run_id: &str,
    want: &[String],
) {
    // The owner record went with the run.
    let run = RunId::parse(run_id).unwrap();
    assert_eq!(gateway.ownership().owner(&run).await.unwrap(), None);
    let owned = gateway.ownership().owned_runs().await.unwrap();
    assert!(!owned.contains(&run));
    let other = JetStreamRecovery::open(handle(server).await).await.unwrap();
    for again in [gateway, &other] {
        assert!(matches!(
            again.recover(run_id).await.unwrap(),
            StreamRecovery::RecoveredElsewhere { appended: 0 }
        ));
        assert_eq!(
            again.standing(run_id).await.unwrap(),
            StreamStanding::Ended { by_recovery: true }
        );
    }
    assert_eq!(stream_lines(&handle(server).await, run_id).await, want);
    assert!(matches!(
        gateway.recover("run_nobody").await.unwrap(),
        StreamRecovery::NotInStream
    ));
    assert!(matches!(
        gateway.recover("run *").await,
        Err(JetStreamRecoveryError::RunId(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_owner_is_alive_is_not_touched() {
    if !have_nats_server() {
        return;
    }
    let server = NatsServer::start("alive");
    let observer = JetStreamObserver::connect(server.config()).await.unwrap();
    let run = Run::new("run_alive");
    let open = run.open(Open::Tool);
    publish_open(&observer, &open).await;
    let host = observer.host().unwrap().id().to_owned();
    let gateway = JetStreamRecovery::open(handle(&server).await)
        .await
        .unwrap();
    // Longer than the heartbeat TTL: the live host keeps its key.
    let until = Instant::now() + gateway.ownership().host_ttl() + Duration::from_millis(500);
    while Instant::now() < until {
        match gateway.recover("run_alive").await.unwrap() {
            StreamRecovery::OwnerAlive { host: h } => assert_eq!(h, host),
            other => panic!("a live host's run was touched: {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // The host goes on and ends the run itself.
    let rest = vec![
        run.commit(Payload::ToolCompleted(keel_eventlog::ToolCompleted {
            turn: 1,
            call_id: CallId::parse("call_1").unwrap(),
            tool: ToolName::parse("probe").unwrap(),
            output: "ok".to_owned(),
            images: Vec::new(),
            extra: Extra::new(),
        })),
        run.commit(Payload::TurnCompleted(TurnRef {
            turn: 1,
            extra: Extra::new(),
        })),
        run.commit(Payload::RunCompleted(RunCompleted::default())),
    ];
    publish_open(&observer, &rest).await;
    assert!(matches!(
        gateway.recover("run_alive").await.unwrap(),
        StreamRecovery::NotAbandoned
    ));
    assert_eq!(
        gateway.standing("run_alive").await.unwrap(),
        StreamStanding::Ended { by_recovery: false }
    );
    let want: Vec<String> = open
        .iter()
        .chain(&rest)
        .map(|e| e.line().to_owned())
        .collect();
    assert_eq!(stream_lines(observer.handle(), "run_alive").await, want);
    let run_id = RunId::parse("run_alive").unwrap();
    assert_eq!(
        gateway.ownership().owner(&run_id).await.unwrap(),
        None,
        "released at the terminal"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_recoverers_racing_close_each_run_once() {
    if !have_nats_server() {
        return;
    }
    const RUNS: usize = 40;
    let server = NatsServer::start("race");
    let observer = JetStreamObserver::connect(server.config()).await.unwrap();
    let mut prefixes = Vec::new();
    for i in 0..RUNS {
        let run = Run::new(&format!("run_race_{i}"));
        let events = run.open(OPENS[i % OPENS.len()]);
        publish_open(&observer, &events).await;
        prefixes.push(events);
    }
    // The host stops: its runs are abandoned at once.
    stop_host(observer).await;

    let a = JetStreamRecovery::open(handle(&server).await)
        .await
        .unwrap();
    let b = JetStreamRecovery::open(handle(&server).await)
        .await
        .unwrap();
    let reader = handle(&server).await;
    let (mut won, mut lost) = (0, 0);
    for (i, prefix) in prefixes.iter().enumerate() {
        let run_id = format!("run_race_{i}");
        let barrier = Arc::new(tokio::sync::Barrier::new(2));
        let race = |r: JetStreamRecovery| {
            let (barrier, run_id) = (Arc::clone(&barrier), run_id.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                r.recover(&run_id).await.unwrap()
            })
        };
        let (x, y) = (race(a.clone()), race(b.clone()));
        let outcomes = [x.await.unwrap(), y.await.unwrap()];
        let recovered: Vec<_> = outcomes
            .iter()
            .filter_map(|o| match o {
                StreamRecovery::Recovered(r) => Some(r),
                _ => None,
            })
            .collect();
        let elsewhere = outcomes
            .iter()
            .filter(|o| matches!(o, StreamRecovery::RecoveredElsewhere { .. }))
            .count();
        assert_eq!(recovered.len() + elsewhere, 2, "run {run_id}: {outcomes:?}");
        let lines = stream_lines(&reader, &run_id).await;
        assert_recovered_once(&run_id, &lines, prefix.len());
        // The one full set in the stream is the winner's, or (a race lost
        // after the first terminal) the two share it seq by seq.
        if let [winner] = recovered.as_slice() {
            let theirs: Vec<&str> = winner.terminals.iter().map(|e| e.line()).collect();
            let stored: Vec<&str> = lines[prefix.len()..].iter().map(String::as_str).collect();
            assert_eq!(stored, theirs, "run {run_id}: the winner's terminals");
        }
        won += recovered.len();
        lost += elsewhere;
        assert!(matches!(
            a.recover(&run_id).await.unwrap(),
            StreamRecovery::RecoveredElsewhere { appended: 0 }
        ));
    }
    println!("{RUNS} races: {won} recovered, {lost} found it recovered by the other");
    assert_eq!(won, RUNS, "exactly one recoverer closes each run");
}

/// A temp directory for SQLite stores, removed on drop.
struct Stores(PathBuf);

impl Stores {
    fn new(name: &str) -> Stores {
        let dir = std::env::temp_dir().join(format!("keel-nats-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Stores(dir)
    }

    fn open(&self, name: &str) -> SqliteJournal {
        SqliteJournal::open(self.0.join(name), JournalConfig::default()).unwrap()
    }
}

impl Drop for Stores {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The host's observer stops (its heartbeat key deleted): its runs are
/// abandoned at once.
async fn stop_host(observer: JetStreamObserver) {
    let host = Arc::clone(observer.host().unwrap());
    drop(observer);
    Arc::into_inner(host).unwrap().stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_copy_ahead_is_forwarded_then_copied_back() {
    if !have_nats_server() {
        return;
    }
    let server = NatsServer::start("ahead");
    let stores = Stores::new("ahead");
    let observer = JetStreamObserver::connect(server.config()).await.unwrap();
    // The host journals every event locally first; its last event never
    // reached JetStream (killed between the two observers).
    let store = stores.open("a.db");
    let run = Run::new("run_ahead");
    let events = run.open(Open::Tool);
    for e in &events {
        store.observe(e).await.unwrap();
    }
    publish_open(&observer, &events[..events.len() - 1]).await;
    stop_host(observer).await;

    // The host restarts: its copy is ahead of the stream by one event.
    let gateway = JetStreamRecovery::open(handle(&server).await)
        .await
        .unwrap();
    let local = journal_lines(&store, "run_ahead");
    let recovered = match gateway
        .recover_with_local("run_ahead", &local)
        .await
        .unwrap()
    {
        StreamRecovery::Recovered(r) => r,
        other => panic!("expected Recovered, got {other:?}"),
    };
    assert_eq!(recovered.forwarded.len(), 1);
    assert_eq!(
        recovered.forwarded[0].line(),
        events[events.len() - 1].line()
    );
    let kinds: Vec<String> = recovered
        .terminals
        .iter()
        .map(|e| e.kind().name().into_owned())
        .collect();
    assert_eq!(kinds, ["tool.failed", "turn.failed", "run.failed"]);
    assert_eq!(
        gateway
            .sync_local(&store, "run_ahead", &local)
            .await
            .unwrap(),
        LocalSync::Copied { events: 3 }
    );
    let stream = stream_lines(&handle(&server).await, "run_ahead").await;
    assert_eq!(journal_lines(&store, "run_ahead"), stream, "byte for byte");
    assert_recovered_once("run_ahead", &stream, events.len());
    // Again: in step, nothing written.
    let local = journal_lines(&store, "run_ahead");
    assert!(matches!(
        gateway
            .recover_with_local("run_ahead", &local)
            .await
            .unwrap(),
        StreamRecovery::RecoveredElsewhere { appended: 0 }
    ));
    assert_eq!(
        gateway
            .sync_local(&store, "run_ahead", &local)
            .await
            .unwrap(),
        LocalSync::InStep
    );
    store.close().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_copies_take_the_terminals_another_gateway_wrote() {
    if !have_nats_server() {
        return;
    }
    let server = NatsServer::start("behind");
    let stores = Stores::new("behind");
    let observer = JetStreamObserver::connect(server.config()).await.unwrap();
    // The host's store and the stream hold the same prefix; a second store
    // holds only its first event.
    let (a, c) = (stores.open("a.db"), stores.open("c.db"));
    let run = Run::new("run_behind");
    let events = run.open(Open::Approval);
    for e in &events {
        a.observe(e).await.unwrap();
    }
    c.observe(&events[0]).await.unwrap();
    publish_open(&observer, &events).await;
    // While the run is open in the stream, nothing is copied.
    let gateway = JetStreamRecovery::open(handle(&server).await)
        .await
        .unwrap();
    let local = journal_lines(&c, "run_behind");
    assert_eq!(
        gateway.sync_local(&c, "run_behind", &local).await.unwrap(),
        LocalSync::StreamOpen
    );
    stop_host(observer).await;

    // Another gateway (no local copy) recovers it; both stores copy.
    assert!(matches!(
        gateway.recover("run_behind").await.unwrap(),
        StreamRecovery::Recovered(_)
    ));
    let stream = stream_lines(&handle(&server).await, "run_behind").await;
    assert_recovered_once("run_behind", &stream, events.len());
    for (store, copied) in [(&a, 3), (&c, stream.len() - 1)] {
        let local = journal_lines(store, "run_behind");
        assert_eq!(
            gateway
                .sync_local(store, "run_behind", &local)
                .await
                .unwrap(),
            LocalSync::Copied { events: copied }
        );
        assert_eq!(journal_lines(store, "run_behind"), stream, "byte for byte");
    }

    // A copy that disagrees is refused, typed, and nothing is written.
    let other = Run::new("run_behind");
    let mut forged: Vec<String> = stream[..2].to_vec();
    forged.push(other.open(Open::Tool)[2].line().to_owned());
    match gateway.sync_local(&c, "run_behind", &forged).await {
        Err(JetStreamRecoveryError::Diverged { seq, .. }) => assert_eq!(seq, 3),
        other => panic!("expected Diverged, got {other:?}"),
    }
    assert_eq!(
        stream_lines(&handle(&server).await, "run_behind").await,
        stream
    );
    a.close().unwrap();
    c.close().unwrap();
}

// ------------------------------------------------------- observe_batch

/// The stream messages of a run's subject: (stream seq, headers, line).
async fn subject_messages(
    handle: &JetStreamHandle,
    run_id: &str,
) -> Vec<(u64, async_nats::HeaderMap, String)> {
    let stream = handle.context().get_stream("KEEL_EVENTS").await.unwrap();
    let subject = handle.config().subject(run_id);
    let mut out = Vec::new();
    let mut from = 1;
    while let Ok(m) = stream
        .get_first_raw_message_by_subject(&subject, from)
        .await
    {
        from = m.sequence + 1;
        let line = String::from_utf8(m.payload.to_vec()).unwrap();
        out.push((m.sequence, m.headers, line));
    }
    out
}

fn header(headers: &async_nats::HeaderMap, name: &str) -> Option<String> {
    headers.get(name).map(|v| v.as_str().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_is_published_without_waiting_per_event_and_acked_in_order() {
    if !have_nats_server() {
        return;
    }
    let server = NatsServer::start("batch");
    let observer = JetStreamObserver::connect(server.config()).await.unwrap();
    let run = Run::new("run_batch");
    let events = run.whole(300);
    // Two batches: the second continues where the first ended (the
    // engine's window), the first crosses the 256-in-flight bound.
    observer.observe_batch(&events[..280]).await.unwrap();
    observer.observe_batch(&events[280..]).await.unwrap();
    let stored = subject_messages(observer.handle(), "run_batch").await;
    let lines: Vec<&str> = stored.iter().map(|(_, _, l)| l.as_str()).collect();
    let want: Vec<&str> = events.iter().map(|e| e.line()).collect();
    assert_eq!(lines, want, "every event once, in order, byte for byte");
    // The chain: the first of a batch expects the subject's tail, each
    // next one the id of the message before it (nothing waited between).
    let ids: Vec<String> = stored
        .iter()
        .map(|(_, h, _)| header(h, "Nats-Msg-Id").unwrap())
        .collect();
    let chained = stored
        .iter()
        .enumerate()
        .skip(1)
        .filter(|(i, (_, h, _))| {
            header(h, "Nats-Expected-Last-Msg-Id").as_deref() == Some(ids[i - 1].as_str())
        })
        .count();
    assert!(chained >= 250, "only {chained} of {} chained", stored.len());
    assert_eq!(
        header(&stored[0].1, "Nats-Expected-Last-Subject-Sequence").as_deref(),
        Some("0")
    );
    // An identical batch offered again: Ok, no copy.
    observer.observe_batch(&events[270..290]).await.unwrap();
    observer.observe_batch(&events[..10]).await.unwrap();
    assert_eq!(
        subject_messages(observer.handle(), "run_batch").await.len(),
        events.len()
    );
    // The run's owner record went with its terminal.
    let mut sub = RemoteSubscription::open(observer.handle(), "run_batch", 0)
        .await
        .unwrap();
    assert_eq!(read_all(&mut sub).await.len(), events.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_stops_at_its_first_refusal() {
    if !have_nats_server() {
        return;
    }
    let server = NatsServer::start("batch-refused");
    let a = JetStreamObserver::connect(server.config()).await.unwrap();
    let run = Run::new("run_refused");
    let events = run.whole(10);
    a.observe_batch(&events[..3]).await.unwrap();
    // A second writer appends its own seq 4 behind A's back.
    let other = Run::new("run_refused");
    let other_events = other.whole(10);
    let b = JetStreamObserver::connect(server.config()).await.unwrap();
    b.observe(&other_events[3]).await.unwrap();
    // A re-offers 2 and 3 (retries, acknowledged), then 4..8: refused at
    // index 2, and nothing after it lands.
    match a.observe_batch(&events[1..8]).await {
        Err(e) => {
            assert_eq!(e.acknowledged, 2, "{e}");
            assert!(
                matches!(e.source, ObserverError::Conflict { seq: 4, .. }),
                "{e}"
            );
        }
        Ok(()) => panic!("the second writer's seq 4 was overwritten"),
    }
    let stored = subject_messages(a.handle(), "run_refused").await;
    let lines: Vec<&str> = stored.iter().map(|(_, _, l)| l.as_str()).collect();
    assert_eq!(
        lines,
        [
            events[0].line(),
            events[1].line(),
            events[2].line(),
            other_events[3].line()
        ]
    );

    // A failure inside a chain: the event at index 3 is too large for the
    // server; the three before it (in the same chain) are acknowledged, nothing after it is.
    let big = Run::new("run_big");
    let mut batch = big.start();
    batch.push(big.delta(0));
    let huge = big.commit(Payload::TextDelta(TextDelta {
        turn: 1,
        operation_id: big.op.clone(),
        text: "x".repeat(1_100_000),
        extra: Extra::new(),
    }));
    batch.push(huge);
    batch.push(big.delta(2));
    a.observe_batch(&batch[..1]).await.unwrap();
    match a.observe_batch(&batch[1..]).await {
        Err(e) => {
            assert_eq!(e.acknowledged, 3, "{e}");
            assert!(matches!(e.source, ObserverError::Failed(_)), "{e}");
        }
        Ok(()) => panic!("a message over max_payload was accepted"),
    }
    let stored = subject_messages(a.handle(), "run_big").await;
    assert_eq!(stored.len(), 4, "only the acknowledged prefix is stored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_batches_of_many_runs_and_hosts_stay_contiguous() {
    if !have_nats_server() {
        return;
    }
    let server = NatsServer::start("batch-concurrent");
    // Two observers (two connections, as two hosts): their batches
    // interleave on the stream, which breaks chains; the rest of a broken
    // chain is published again, never stored out of order.
    let observers = [
        Arc::new(JetStreamObserver::connect(server.config()).await.unwrap()),
        Arc::new(JetStreamObserver::connect(server.config()).await.unwrap()),
    ];
    let mut tasks = Vec::new();
    for r in 0..8 {
        let observer = Arc::clone(&observers[r % 2]);
        tasks.push(tokio::spawn(async move {
            let name = format!("run_many_{r}");
            let run = Run::new(&name);
            let events = run.whole(200);
            for chunk in events.chunks(17 + r) {
                observer.observe_batch(chunk).await.unwrap();
            }
            (name, events)
        }));
    }
    for task in tasks {
        let (name, events) = task.await.unwrap();
        let stored = subject_messages(observers[0].handle(), &name).await;
        let lines: Vec<&str> = stored.iter().map(|(_, _, l)| l.as_str()).collect();
        let want: Vec<&str> = events.iter().map(|e| e.line()).collect();
        assert_eq!(lines, want, "{name}");
    }
}
