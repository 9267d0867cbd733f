//! [`JetStreamObserver`]: the required observer that publishes each event
//! to its run's subject, with deduplication, one writer per run, batches
//! chained by message id, and the run's owner recorded before its
//! `run.started` (the contract is in the `nats` module docs).

use super::handle::{
    Answer, Expect, JetStreamConfig, JetStreamError, JetStreamHandle, Published, answer, seq_of,
};
use super::ownership::{HostHeartbeat, Ownership};
use crate::observer::{
    BatchError, ObserveBatchFuture, ObserveFuture, ObserverError, RequiredObserver,
};
use async_nats::jetstream;
use keel_eventlog::{Event, Phase, Scope};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// Most messages one batch has in flight before it waits for their acks
/// (the client's default ack window is 5,000, shared by every run).
const MAX_IN_FLIGHT: usize = 256;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
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
            name: format!("jetstream:{}", handle.config().stream),
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
        if event.kind().is_run_terminal() {
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
        if event.kind().is_run_terminal()
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
        if chain[..acked].iter().any(|e| e.kind().is_run_terminal())
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
