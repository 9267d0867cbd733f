//! NATS JetStream: a required observer that publishes every event to a
//! shared, durable stream, and a remote subscription that follows a run
//! from it (feature `nats`).
//!
//! # Layout
//!
//! One stream (default `KEEL_EVENTS`, subjects `keel.runs.>`, file
//! storage, one replica unless configured) holds every run; run `R`'s
//! events are the messages on subject `keel.runs.R`, in seq order, one
//! canonical line per message, with no gap and no duplicate.
//!
//! # Contract of [`JetStreamObserver`]
//!
//! - **`Ok` means JetStream acked.** `observe` returns `Ok(())` only after
//!   the server's `PubAck` for the event (or after it found the same bytes
//!   already stored under the same run and seq). What a `PubAck` means for
//!   durability depends on the stream's storage, replicas and the server's
//!   sync settings: see `docs/rfc/implemented/2026-11-30-jetstream.md`.
//! - **Deduplication.** Each message carries `Nats-Msg-Id:
//!   <run_id>:<seq>:<writer>`, `<writer>` a NUID drawn when the observer
//!   is created. A retried publish (e.g. after the pipeline's deadline
//!   dropped a future whose publish did land) is answered by the server as
//!   a duplicate; the observer then reads the stored message and returns
//!   `Ok` only if its bytes are identical, [`ObserverError::Conflict`]
//!   otherwise. A retry the duplicate window does not cover (another
//!   observer's, or a late one) is recognised by the expected sequence
//!   below: the same bytes just after the run's known tail, or at the
//!   tail, are `Ok`. (Recovery, [`crate::nats_recovery`], publishes with
//!   `<run_id>:<seq>`.)
//! - **One writer per run.** Each publish carries
//!   `Nats-Expected-Last-Subject-Sequence`: the stream sequence of the
//!   run's previous event as this observer last saw it acked (0 for seq 1).
//!   A second writer to the same run (another engine, or this one after
//!   another wrote) gets the server's "wrong last sequence" error, which
//!   is reported as [`ObserverError::Conflict`] (unless the stored event
//!   at the run's tail has exactly the offered bytes: then it is a retry,
//!   `Ok`). Limitation: outside the duplicate window, a retry of an event
//!   *older* than the run's tail is reported as a conflict (the engine only
//!   retries the event that failed, which is the tail).
//! - **Contiguity.** An event more than one past the run's last stored seq
//!   is [`ObserverError::Gap`] and nothing is published.
//! - **Batches.** [`observe_batch`](RequiredObserver::observe_batch)
//!   publishes a run's consecutive events back to back (up to 256 in
//!   flight) and then awaits the `PubAck`s in order; the first refusal at
//!   index `k` is `BatchError { acknowledged: k, .. }` and nothing after it
//!   counts. The expected last *subject* sequence cannot be computed ahead:
//!   the stream is shared by every run, so the stream sequence an event
//!   will get depends on what other runs publish meanwhile, and a guessed
//!   value that happened to match after a refused message would let the
//!   next one in behind a gap. So only the first message of a batch
//!   carries `Nats-Expected-Last-Subject-Sequence` (the run's known tail,
//!   as for one event); each next one carries `Nats-Expected-Last-Msg-Id`
//!   = the id of the message before it in the batch, which names this
//!   observer (`<writer>`), so the server stores it only if the stream's
//!   last message is this observer's previous event of the run. By
//!   induction every stored message of a batch directly follows the
//!   previous one on the run's subject, with nothing of another writer in
//!   between, and once one is refused none after it can be stored (its id
//!   was never stored). The price: any other message stored in between
//!   (another host's run; a concurrent run on this connection is held off
//!   by a lock while a batch is sent) breaks the chain at that point; that
//!   is not a refusal: the acknowledged prefix is kept and the rest is
//!   published again as a new batch, from the known tail.
//! - **Server down.** Publishes wait for the client to reconnect; the
//!   pipeline's deadline (or the observer's own ack timeout) bounds the
//!   wait and the event is refused with a typed error. Nothing is ever
//!   renumbered: a later retry of the same event is deduplicated.
//! - **Cancel safety.** Dropping the future at any point leaves either no
//!   message or exactly the event's message; a retry is `Ok` either way.
//! - **Ownership.** Before it publishes a run's `run.started`, the observer
//!   records its host as the run's owner (KV bucket
//!   [`OWNERS_BUCKET`](crate::nats_recovery::OWNERS_BUCKET)) and keeps that
//!   host's heartbeat alive (KV bucket
//!   [`HOSTS_BUCKET`](crate::nats_recovery::HOSTS_BUCKET)); after the
//!   run's terminal is acked it removes the record. A run whose host died
//!   is then found abandoned and closed by
//!   [`JetStreamRecovery`](crate::nats_recovery::JetStreamRecovery).

use crate::nats_recovery::{HostHeartbeat, Ownership};
use crate::observer::{
    BatchError, ObserveBatchFuture, ObserveFuture, ObserverError, RequiredObserver,
};
use async_nats::jetstream::{self, consumer, stream};
use bytes::Bytes;
use futures_util::StreamExt;
use keel_eventlog::{Event, Phase, Scope, SubscribeError};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// The default stream name.
pub const DEFAULT_STREAM: &str = "KEEL_EVENTS";
/// The default subject prefix; run `R` publishes to `<prefix>.R`.
pub const DEFAULT_SUBJECT_PREFIX: &str = "keel.runs";

/// Most messages one batch has in flight before it waits for their acks
/// (the client's default ack window is 5,000, shared by every run).
const MAX_IN_FLIGHT: usize = 256;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Where and how events are published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JetStreamConfig {
    /// Server URL(s), comma separated (e.g. `nats://127.0.0.1:4222`).
    pub url: String,
    /// Stream name. Default [`DEFAULT_STREAM`].
    pub stream: String,
    /// Subject prefix. Default [`DEFAULT_SUBJECT_PREFIX`].
    pub subject_prefix: String,
    /// Replicas of the stream when this observer creates it. Default 1.
    pub replicas: usize,
    /// The stream's duplicate window when created. Default 2 minutes.
    pub duplicate_window: Duration,
    /// How long one publish waits for its `PubAck`. Default 5 s (the
    /// pipeline's deadline may cut it shorter).
    pub ack_timeout: Duration,
    /// Timeout of the initial connection. Default 5 s.
    pub connect_timeout: Duration,
}

impl JetStreamConfig {
    /// The defaults, for `url`.
    pub fn new(url: impl Into<String>) -> JetStreamConfig {
        JetStreamConfig {
            url: url.into(),
            stream: DEFAULT_STREAM.to_owned(),
            subject_prefix: DEFAULT_SUBJECT_PREFIX.to_owned(),
            replicas: 1,
            duplicate_window: Duration::from_secs(120),
            ack_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
        }
    }

    /// The subject of one run.
    pub fn subject(&self, run_id: &str) -> String {
        format!("{}.{run_id}", self.subject_prefix)
    }
}

/// Connecting to NATS or ensuring the stream failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JetStreamError {
    /// The connection could not be established.
    #[error("cannot connect to NATS at {url}: {detail}")]
    Connect {
        /// The URL.
        url: String,
        /// The client's message.
        detail: String,
    },
    /// The stream could not be created or opened.
    #[error("cannot ensure JetStream stream {stream}: {detail}")]
    Stream {
        /// The stream name.
        stream: String,
        /// The server's message.
        detail: String,
    },
}

/// A connection plus the ensured stream; shared by the observer and
/// remote subscriptions.
#[derive(Clone)]
pub struct JetStreamHandle {
    config: JetStreamConfig,
    context: jetstream::Context,
    stream: stream::Stream,
}

impl std::fmt::Debug for JetStreamHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JetStreamHandle")
            .field("config", &self.config)
            .finish()
    }
}

impl JetStreamHandle {
    /// Connects (the client then reconnects by itself, forever) and
    /// creates the stream if it does not exist.
    pub async fn connect(config: JetStreamConfig) -> Result<JetStreamHandle, JetStreamError> {
        let client = async_nats::ConnectOptions::new()
            .connection_timeout(config.connect_timeout)
            .max_reconnects(None)
            .connect(config.url.as_str())
            .await
            .map_err(|e| JetStreamError::Connect {
                url: config.url.clone(),
                detail: e.to_string(),
            })?;
        let context = jetstream::ContextBuilder::new()
            .timeout(config.ack_timeout)
            .build(client);
        let stream = context
            .get_or_create_stream(stream::Config {
                name: config.stream.clone(),
                subjects: vec![format!("{}.>", config.subject_prefix)],
                storage: stream::StorageType::File,
                num_replicas: config.replicas,
                duplicate_window: config.duplicate_window,
                ..Default::default()
            })
            .await
            .map_err(|e| JetStreamError::Stream {
                stream: config.stream.clone(),
                detail: e.to_string(),
            })?;
        Ok(JetStreamHandle {
            config,
            context,
            stream,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &JetStreamConfig {
        &self.config
    }

    /// The JetStream context (for tools and benches).
    pub fn context(&self) -> &jetstream::Context {
        &self.context
    }

    /// The last stored message of a run: `(stream_seq, line)`, or `None`
    /// if the run has no message.
    pub(crate) async fn last_of(&self, run_id: &str) -> Result<Option<(u64, Bytes)>, String> {
        match self
            .stream
            .get_last_raw_message_by_subject(&self.config.subject(run_id))
            .await
        {
            Ok(m) => Ok(Some((m.sequence, m.payload))),
            Err(e) if e.kind() == stream::LastRawMessageErrorKind::NoMessageFound => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// What the server answered to the publish of one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Published {
    /// Appended at this stream sequence.
    Stored(u64),
    /// A message with the same `Nats-Msg-Id` is already stored, at this
    /// stream sequence (its bytes may differ).
    Duplicate(u64),
    /// The subject's last stream sequence is not the one expected: someone
    /// else wrote the run.
    WrongLastSequence,
}

/// What ties a published message to what precedes it on the stream.
pub(crate) enum Expect {
    /// `Nats-Expected-Last-Subject-Sequence`: the run's subject ends at
    /// this stream sequence (0: the subject is empty).
    SubjectSequence(u64),
    /// `Nats-Expected-Last-Msg-Id`: the stream's last stored message
    /// carries this id (a message of the same batch, just before).
    LastMessageId(String),
}

/// The server's answer to a publish whose ack was awaited.
pub(crate) enum Answer {
    /// Stored, deduplicated, or the subject moved.
    Published(Published),
    /// The stream's last message is not the one named by
    /// [`Expect::LastMessageId`]: nothing was stored.
    ChainBroken,
}

/// Classifies the server's answer to one publish.
pub(crate) fn answer(
    ack: Result<jetstream::publish::PublishAck, jetstream::context::PublishError>,
) -> Result<Answer, String> {
    use jetstream::context::PublishErrorKind;
    match ack {
        Ok(ack) if ack.duplicate => Ok(Answer::Published(Published::Duplicate(ack.sequence))),
        Ok(ack) => Ok(Answer::Published(Published::Stored(ack.sequence))),
        Err(e) if e.kind() == PublishErrorKind::WrongLastSequence => {
            Ok(Answer::Published(Published::WrongLastSequence))
        }
        Err(e) if e.kind() == PublishErrorKind::WrongLastMessageId => Ok(Answer::ChainBroken),
        Err(e) => Err(e.to_string()),
    }
}

impl JetStreamHandle {
    /// Publishes `event`'s line to its run's subject with `Nats-Msg-Id:
    /// <run_id>:<seq>` and `Nats-Expected-Last-Subject-Sequence:
    /// expected`, and waits for the answer. `Err` is the client's or
    /// server's message for any other failure.
    pub(crate) async fn publish_event(
        &self,
        event: &Event,
        expected: u64,
    ) -> Result<Published, String> {
        let id = format!("{}:{}", event.run_id(), event.seq());
        self.publish_as(event, id, Expect::SubjectSequence(expected))
            .await
    }

    /// [`publish_event`](Self::publish_event) with the given message id and
    /// tie.
    pub(crate) async fn publish_as(
        &self,
        event: &Event,
        id: String,
        expect: Expect,
    ) -> Result<Published, String> {
        let ack = self.send_event(event, id, expect).await;
        match ack {
            Ok(ack) => match answer(ack.await)? {
                Answer::Published(published) => Ok(published),
                Answer::ChainBroken => Err("wrong last message id".to_owned()),
            },
            Err(e) => Err(e.to_string()),
        }
    }

    /// Sends `event`'s line with `Nats-Msg-Id: id` and the `expect` header,
    /// without waiting for the ack: the future yields it.
    pub(crate) async fn send_event(
        &self,
        event: &Event,
        id: String,
        expect: Expect,
    ) -> Result<jetstream::context::PublishAckFuture, jetstream::context::PublishError> {
        let msg = jetstream::message::PublishMessage::build()
            .payload(Bytes::copy_from_slice(event.line().as_bytes()))
            .message_id(id);
        let msg = match expect {
            Expect::SubjectSequence(seq) => msg.expected_last_subject_sequence(seq),
            Expect::LastMessageId(last) => msg.expected_last_message_id(last),
        };
        self.context
            .send_publish(self.config.subject(event.run_id().as_str()), msg)
            .await
    }

    /// The first message on `run_id`'s subject at or after `stream_seq`.
    pub(crate) async fn first_from(
        &self,
        run_id: &str,
        stream_seq: u64,
    ) -> Result<Option<(u64, Bytes)>, String> {
        match self
            .stream
            .get_first_raw_message_by_subject(&self.config.subject(run_id), stream_seq)
            .await
        {
            Ok(m) => Ok(Some((m.sequence, m.payload))),
            Err(e) if e.kind() == stream::RawMessageErrorKind::NoMessageFound => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }

    /// The bytes of the message at `stream_seq`.
    pub(crate) async fn stored_line(&self, stream_seq: u64) -> Result<Bytes, String> {
        self.stream
            .get_raw_message(stream_seq)
            .await
            .map(|m| m.payload)
            .map_err(|e| e.to_string())
    }
}

/// Per run: the last seq this observer saw acked and its stream sequence.
#[derive(Debug, Clone, Copy)]
struct RunState {
    seq: u64,
    stream_seq: u64,
}

/// The JetStream required observer (see the module docs for its contract).
pub struct JetStreamObserver {
    handle: JetStreamHandle,
    name: String,
    /// This observer's own token in its message ids (a NUID).
    writer: String,
    /// Held while one batch sends, so that batches of concurrent runs do
    /// not interleave on the connection (which would break their chains).
    sending: tokio::sync::Mutex<()>,
    runs: Mutex<HashMap<String, RunState>>,
    /// The host this observer records as the owner of the runs it starts
    /// (started on the first `run.started` unless given).
    host: tokio::sync::OnceCell<Arc<HostHeartbeat>>,
}

impl std::fmt::Debug for JetStreamObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JetStreamObserver")
            .field("handle", &self.handle)
            .field("runs", &lock(&self.runs).len())
            .finish()
    }
}

fn seq_of(line: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(line).ok()?;
    Event::decode(text).ok().map(|e| e.seq())
}

pub(crate) fn is_run_terminal(event: &Event) -> bool {
    matches!(
        event.kind().lifecycle_parts(),
        Some((Scope::Run, Phase::Ended(_)))
    )
}

fn is_run_start(event: &Event) -> bool {
    matches!(
        event.kind().lifecycle_parts(),
        Some((Scope::Run, Phase::Started))
    )
}

impl JetStreamObserver {
    /// Connects and ensures the stream.
    pub async fn connect(config: JetStreamConfig) -> Result<JetStreamObserver, JetStreamError> {
        Ok(JetStreamObserver::new(
            JetStreamHandle::connect(config).await?,
        ))
    }

    /// An observer over an existing handle. On the first `run.started` it
    /// starts a [`HostHeartbeat`] of its own (a fresh host id, the
    /// buckets' defaults) on the current tokio runtime; the heartbeat
    /// stops when the observer is dropped.
    pub fn new(handle: JetStreamHandle) -> JetStreamObserver {
        let inbox = handle.context.client().new_inbox();
        let writer = inbox.rsplit('.').next().unwrap_or(&inbox).to_owned();
        JetStreamObserver {
            name: format!("jetstream:{}", handle.config.stream),
            writer,
            sending: tokio::sync::Mutex::new(()),
            handle,
            runs: Mutex::new(HashMap::new()),
            host: tokio::sync::OnceCell::new(),
        }
    }

    /// An observer that records `host` as the owner of the runs it starts.
    pub fn with_host(handle: JetStreamHandle, host: Arc<HostHeartbeat>) -> JetStreamObserver {
        let observer = JetStreamObserver::new(handle);
        // A fresh cell cannot be full.
        let _ = observer.host.set(host);
        observer
    }

    /// The host recorded as the owner of this observer's runs, once there
    /// is one (given, or started by the first `run.started`).
    pub fn host(&self) -> Option<&Arc<HostHeartbeat>> {
        self.host.get()
    }

    /// Records this observer's host as the owner of `event`'s run, before
    /// its `run.started` is published: a recoverer that sees the run in the
    /// stream always finds its owner. A run another live host owns is a
    /// second writer: [`ObserverError::Conflict`], nothing published.
    async fn own(&self, event: &Event) -> Result<(), ObserverError> {
        let host = self
            .host
            .get_or_try_init(|| async {
                let ownership = Ownership::open(&self.handle).await?;
                HostHeartbeat::start(ownership).await.map(Arc::new)
            })
            .await
            .map_err(|e| ObserverError::Failed(format!("jetstream: {e}")))?;
        match host.own(event.run_id()).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(ObserverError::Conflict {
                run_id: event.run_id().to_string(),
                seq: event.seq(),
            }),
            Err(e) => Err(ObserverError::Failed(format!("jetstream: {e}"))),
        }
    }

    /// The handle (to open remote subscriptions on the same connection).
    pub fn handle(&self) -> &JetStreamHandle {
        &self.handle
    }

    /// What this observer knows of the run, else what the stream holds.
    async fn state(&self, event: &Event) -> Result<RunState, ObserverError> {
        let run_id = event.run_id().as_str();
        if let Some(s) = lock(&self.runs).get(run_id).copied() {
            return Ok(s);
        }
        if event.seq() == 1 {
            // Expect an empty subject; the server checks it.
            return Ok(RunState {
                seq: 0,
                stream_seq: 0,
            });
        }
        match self.handle.last_of(run_id).await {
            Ok(None) => Ok(RunState {
                seq: 0,
                stream_seq: 0,
            }),
            Ok(Some((stream_seq, line))) => match seq_of(&line) {
                Some(seq) => Ok(RunState { seq, stream_seq }),
                None => Err(ObserverError::Failed(format!(
                    "stream message {stream_seq} of run {run_id} is not a valid event"
                ))),
            },
            Err(e) => Err(ObserverError::Failed(format!("jetstream: {e}"))),
        }
    }

    fn remember(&self, event: &Event, stream_seq: u64) {
        let mut runs = lock(&self.runs);
        let run_id = event.run_id().as_str();
        if is_run_terminal(event) {
            runs.remove(run_id);
        } else {
            let entry = runs.entry(run_id.to_owned()).or_insert(RunState {
                seq: 0,
                stream_seq: 0,
            });
            if event.seq() > entry.seq {
                *entry = RunState {
                    seq: event.seq(),
                    stream_seq,
                };
            }
        }
    }

    fn conflict(&self, event: &Event) -> ObserverError {
        lock(&self.runs).remove(event.run_id().as_str());
        ObserverError::Conflict {
            run_id: event.run_id().to_string(),
            seq: event.seq(),
        }
    }

    async fn publish(&self, event: &Event) -> Result<(), ObserverError> {
        let run_id = event.run_id().as_str();
        let state = self.state(event).await?;
        if event.seq() > state.seq + 1 {
            return Err(ObserverError::Gap {
                run_id: run_id.to_owned(),
                last_stored: state.seq,
                seq: event.seq(),
            });
        }
        // For an event at or below the known last seq, expecting 0 makes
        // the server refuse it unless it is a deduplicated retry.
        let expected = if event.seq() == state.seq + 1 {
            state.stream_seq
        } else {
            0
        };
        if is_run_start(event) {
            self.own(event).await?;
        }
        let answer = self
            .handle
            .publish_as(event, self.id(event), Expect::SubjectSequence(expected))
            .await;
        self.settle(event, answer, expected).await?;
        if is_run_terminal(event)
            && let Some(host) = self.host.get()
        {
            // Best effort: a stale record of an ended run is harmless.
            let _ = host.release(event.run_id()).await;
        }
        Ok(())
    }

    /// `<run_id>:<seq>:<writer>`: deduplicates this observer's retries,
    /// and names a message no other writer can have stored.
    fn id(&self, event: &Event) -> String {
        format!("{}:{}:{}", event.run_id(), event.seq(), self.writer)
    }

    /// `Ok` when the server's answer shows `event`'s bytes stored at its
    /// seq. `expected` is the subject sequence the publish expected.
    async fn settle(
        &self,
        event: &Event,
        answer: Result<Published, String>,
        expected: u64,
    ) -> Result<(), ObserverError> {
        let line = event.line().as_bytes();
        match answer {
            Ok(Published::Duplicate(stream_seq)) => {
                match self.handle.stored_line(stream_seq).await {
                    Ok(stored) if stored == line => {
                        self.remember(event, stream_seq);
                        Ok(())
                    }
                    Ok(_) => Err(self.conflict(event)),
                    Err(e) => Err(ObserverError::Failed(format!(
                        "jetstream: reading duplicate {stream_seq}: {e}"
                    ))),
                }
            }
            Ok(Published::Stored(stream_seq)) => {
                self.remember(event, stream_seq);
                Ok(())
            }
            Ok(Published::WrongLastSequence) => {
                // Someone else wrote this run, or this is a retry that the
                // duplicate window no longer covers (or of another
                // observer's message): the same bytes just after the
                // expected message, or at the tail, is a retry.
                let run_id = event.run_id().as_str();
                let next = if expected > 0 || event.seq() == 1 {
                    self.handle.first_from(run_id, expected + 1).await
                } else {
                    Ok(None)
                };
                for found in [next, self.handle.last_of(run_id).await] {
                    if let Ok(Some((stream_seq, stored))) = found
                        && stored == line
                        && seq_of(&stored) == Some(event.seq())
                    {
                        self.remember(event, stream_seq);
                        return Ok(());
                    }
                }
                Err(self.conflict(event))
            }
            Err(e) => Err(ObserverError::Failed(format!("jetstream publish: {e}"))),
        }
    }
}

impl JetStreamObserver {
    /// Publishes the batch chain by chain until every event is
    /// acknowledged or one is refused.
    async fn publish_batch(&self, events: &[Arc<Event>]) -> Result<(), BatchError> {
        let mut done = 0;
        while done < events.len() {
            let at = done;
            done += self
                .publish_chain(&events[at..])
                .await
                .map_err(|(k, source)| BatchError {
                    acknowledged: at + k,
                    source,
                })?;
        }
        Ok(())
    }

    /// Publishes a chain from `events[0]` without waiting for each ack and
    /// returns how many leading events are acknowledged (at least one), or
    /// how many were before the refused one. A chain is the longest run of
    /// consecutive seqs of one run (at most [`MAX_IN_FLIGHT`]) starting
    /// just after the run's known tail; anything else (a retry of a known
    /// event, a gap, a lone event) goes the one-event way.
    async fn publish_chain(&self, events: &[Arc<Event>]) -> Result<usize, (usize, ObserverError)> {
        let first = &events[0];
        let state = self.state(first).await.map_err(|e| (0, e))?;
        let len = chain_len(events);
        if first.seq() != state.seq + 1 || len == 1 {
            self.publish(first).await.map_err(|e| (0, e))?;
            return Ok(1);
        }
        let chain = &events[..len];
        if is_run_start(first) {
            self.own(first).await.map_err(|e| (0, e))?;
        }
        let acks = self.send_chain(chain, state.stream_seq).await;
        let acked = self.collect(chain, acks, state.stream_seq).await?;
        if chain[..acked].iter().any(|e| is_run_terminal(e))
            && let Some(host) = self.host.get()
        {
            // Best effort: a stale record of an ended run is harmless.
            let _ = host.release(first.run_id()).await;
        }
        Ok(acked)
    }

    /// Sends the chain's messages back to back: the first expects the
    /// subject to end at `tail`, each next one that the stream's last
    /// message is the one before it. Stops at the first send that fails.
    async fn send_chain(
        &self,
        chain: &[Arc<Event>],
        tail: u64,
    ) -> Vec<Result<jetstream::context::PublishAckFuture, String>> {
        let _sending = self.sending.lock().await;
        let mut acks = Vec::with_capacity(chain.len());
        let mut expect = Expect::SubjectSequence(tail);
        for event in chain {
            let id = self.id(event);
            let sent = self.handle.send_event(event, id.clone(), expect).await;
            let failed = sent.is_err();
            acks.push(sent.map_err(|e| e.to_string()));
            if failed {
                break;
            }
            expect = Expect::LastMessageId(id);
        }
        acks
    }

    /// Awaits the acks in order. A broken chain at index `k` (another
    /// message got in between) is not a refusal: `Ok(k)`, and the caller
    /// goes on from there; nothing after `k` was stored by this chain.
    async fn collect(
        &self,
        chain: &[Arc<Event>],
        acks: Vec<Result<jetstream::context::PublishAckFuture, String>>,
        tail: u64,
    ) -> Result<usize, (usize, ObserverError)> {
        for (i, (event, ack)) in chain.iter().zip(acks).enumerate() {
            let answer = match ack {
                Ok(ack) => answer(ack.await),
                Err(e) => Err(e),
            };
            let published = match answer {
                Ok(Answer::ChainBroken) if i > 0 => return Ok(i),
                Ok(Answer::ChainBroken) => Err("wrong last message id".to_owned()),
                Ok(Answer::Published(published)) => Ok(published),
                Err(e) => Err(e),
            };
            let expected = if i == 0 { tail } else { 0 };
            self.settle(event, published, expected)
                .await
                .map_err(|e| (i, e))?;
        }
        Ok(chain.len())
    }
}

/// How many leading events form one chain: consecutive seqs of one run,
/// no second `run.started` (its owner record comes first), at most
/// [`MAX_IN_FLIGHT`].
fn chain_len(events: &[Arc<Event>]) -> usize {
    let first = &events[0];
    let next = events
        .iter()
        .enumerate()
        .skip(1)
        .take(MAX_IN_FLIGHT - 1)
        .find(|(i, e)| {
            e.run_id() != first.run_id() || e.seq() != first.seq() + *i as u64 || is_run_start(e)
        })
        .map(|(i, _)| i);
    next.unwrap_or(events.len().min(MAX_IN_FLIGHT))
}

impl RequiredObserver for JetStreamObserver {
    fn name(&self) -> &str {
        &self.name
    }

    fn observe<'a>(&'a self, event: &'a Arc<Event>) -> ObserveFuture<'a> {
        Box::pin(self.publish(event))
    }

    /// Publishes the batch without waiting for each `PubAck`, then awaits
    /// them in order: `BatchError { acknowledged: k, .. }` at the first
    /// refusal, nothing after it counted. See the module docs ("Batches").
    fn observe_batch<'a>(&'a self, events: &'a [Arc<Event>]) -> ObserveBatchFuture<'a> {
        Box::pin(self.publish_batch(events))
    }
}

// ------------------------------------------------------------ subscription

/// Why a remote subscription ended before the run's terminal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RemoteSubscriptionError {
    /// The next message's seq is not the one after the last delivered.
    #[error("gap in run {run_id}: expected seq {expected}, stream holds {found}")]
    Gap {
        /// The run.
        run_id: String,
        /// The seq that should come next.
        expected: u64,
        /// The seq found.
        found: u64,
    },
    /// A message is not a valid event of this run.
    #[error("invalid event in run {run_id} at stream seq {stream_seq}: {detail}")]
    Invalid {
        /// The run.
        run_id: String,
        /// The stream sequence of the message.
        stream_seq: u64,
        /// Why.
        detail: String,
    },
    /// The NATS client or server failed; resume after the last delivered
    /// seq.
    #[error("jetstream: {detail}; resume after {recovery_cursor}")]
    Nats {
        /// The client's message.
        detail: String,
        /// The last delivered seq.
        recovery_cursor: u64,
    },
}

/// Why a remote subscription could not be opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RemoteSubscribeError {
    /// The cursor is not servable (ahead of the run, or expired from the
    /// stream): the same errors as a local subscription.
    #[error(transparent)]
    Cursor(#[from] SubscribeError),
    /// The stream holds no event of this run, or the id is not a run id.
    #[error("run {run_id} is not in the stream")]
    UnknownRun {
        /// The run.
        run_id: String,
    },
    /// The NATS client or server failed.
    #[error("jetstream: {0}")]
    Nats(String),
}

/// Every event of one run after a cursor, read from JetStream: history,
/// then live, in order, no gap, no duplicate, ending after the run's
/// terminal event.
pub struct RemoteSubscription {
    run_id: String,
    cursor: u64,
    finished: bool,
    messages: consumer::pull::Ordered,
}

impl std::fmt::Debug for RemoteSubscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteSubscription")
            .field("run_id", &self.run_id)
            .field("cursor", &self.cursor)
            .field("finished", &self.finished)
            .finish()
    }
}

/// The messages on `subject` from stream seq `start_sequence` on, through
/// an ordered consumer created for this subscription.
async fn ordered_messages(
    handle: &JetStreamHandle,
    subject: String,
    start_sequence: u64,
) -> Result<consumer::pull::Ordered, RemoteSubscribeError> {
    let consumer = handle
        .stream
        .create_consumer(consumer::pull::OrderedConfig {
            filter_subject: subject,
            deliver_policy: consumer::DeliverPolicy::ByStartSequence { start_sequence },
            ..Default::default()
        })
        .await
        .map_err(|e| RemoteSubscribeError::Nats(e.to_string()))?;
    consumer
        .messages()
        .await
        .map_err(|e| RemoteSubscribeError::Nats(e.to_string()))
}

/// Whether a stored line is an event that ends its run (a line that does
/// not decode is not).
fn is_run_terminal_line(line: &[u8]) -> bool {
    std::str::from_utf8(line)
        .ok()
        .and_then(|t| Event::decode(t).ok())
        .is_some_and(|e| is_run_terminal(&e))
}

impl RemoteSubscription {
    /// Opens a subscription to `run_id` after `cursor` (0: from the
    /// start).
    pub async fn open(
        handle: &JetStreamHandle,
        run_id: &str,
        cursor: u64,
    ) -> Result<RemoteSubscription, RemoteSubscribeError> {
        // The id becomes part of a subject: one that is not a run id
        // (`*`, `>`, spaces) could be a wildcard over other runs.
        if keel_message::RunId::parse(run_id).is_err() {
            return Err(RemoteSubscribeError::UnknownRun {
                run_id: run_id.to_owned(),
            });
        }
        let subject = handle.config.subject(run_id);
        let (last_stream_seq, last_line) = match handle.last_of(run_id).await {
            Ok(Some(last)) => last,
            Ok(None) => {
                return Err(RemoteSubscribeError::UnknownRun {
                    run_id: run_id.to_owned(),
                });
            }
            Err(e) => return Err(RemoteSubscribeError::Nats(e)),
        };
        let latest = seq_of(&last_line).ok_or_else(|| {
            RemoteSubscribeError::Nats(format!("stream seq {last_stream_seq} is not an event"))
        })?;
        if cursor > latest {
            return Err(SubscribeError::CursorAhead {
                requested: cursor,
                latest,
            }
            .into());
        }
        let first = handle
            .stream
            .get_first_raw_message_by_subject(&subject, 1)
            .await
            .map_err(|e| RemoteSubscribeError::Nats(e.to_string()))?;
        let earliest = seq_of(&first.payload).ok_or_else(|| {
            RemoteSubscribeError::Nats(format!("stream seq {} is not an event", first.sequence))
        })?;
        if cursor + 1 < earliest {
            return Err(SubscribeError::CursorExpired {
                requested: cursor,
                earliest,
                latest,
                recovery_cursor: earliest - 1,
            }
            .into());
        }
        // Subject seqs are contiguous, so event `cursor + 1` is the
        // `(cursor + 1 - earliest)`-th message on the subject; start at
        // the first one and skip the already-delivered ones.
        let messages = ordered_messages(handle, subject, first.sequence).await?;
        // A cursor at the run's terminal: nothing can follow, end at once
        // (the consumer would otherwise wait for events that never come).
        let finished = cursor == latest && is_run_terminal_line(&last_line);
        Ok(RemoteSubscription {
            run_id: run_id.to_owned(),
            cursor,
            finished,
            messages,
        })
    }

    /// The last delivered seq.
    pub fn cursor(&self) -> u64 {
        self.cursor
    }

    /// The next event; `None` after the run's terminal or after an error.
    pub async fn next(&mut self) -> Option<Result<Arc<Event>, RemoteSubscriptionError>> {
        while !self.finished {
            let msg = match self.messages.next().await {
                Some(Ok(m)) => m,
                Some(Err(e)) => return Some(Err(self.fail_nats(e.to_string()))),
                None => return Some(Err(self.fail_nats("consumer ended".to_owned()))),
            };
            let stream_seq = msg.info().map(|i| i.stream_sequence).unwrap_or(0);
            let event = match std::str::from_utf8(&msg.payload)
                .map_err(|e| e.to_string())
                .and_then(|t| Event::decode(t).map_err(|e| e.to_string()))
            {
                Ok(e) if e.run_id().as_str() == self.run_id => e,
                Ok(e) => {
                    return Some(Err(
                        self.fail_invalid(stream_seq, format!("belongs to run {}", e.run_id()))
                    ));
                }
                Err(detail) => return Some(Err(self.fail_invalid(stream_seq, detail))),
            };
            if event.seq() <= self.cursor {
                continue;
            }
            if event.seq() != self.cursor + 1 {
                self.finished = true;
                return Some(Err(RemoteSubscriptionError::Gap {
                    run_id: self.run_id.clone(),
                    expected: self.cursor + 1,
                    found: event.seq(),
                }));
            }
            self.cursor = event.seq();
            if is_run_terminal(&event) {
                self.finished = true;
            }
            return Some(Ok(Arc::new(event)));
        }
        None
    }

    fn fail_nats(&mut self, detail: String) -> RemoteSubscriptionError {
        self.finished = true;
        RemoteSubscriptionError::Nats {
            detail,
            recovery_cursor: self.cursor,
        }
    }

    fn fail_invalid(&mut self, stream_seq: u64, detail: String) -> RemoteSubscriptionError {
        self.finished = true;
        RemoteSubscriptionError::Invalid {
            run_id: self.run_id.clone(),
            stream_seq,
            detail,
        }
    }
}
