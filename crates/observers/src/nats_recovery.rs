//! Recovery through JetStream (feature `nats`): which host owns a run,
//! whether that host is alive, and closing a run whose host died exactly
//! once, however many recoverers try at the same time.
//!
//! With `--nats`, JetStream is the shared authority for a run's history
//! across hosts; a host's local SQLite journal is that host's copy.
//!
//! # Liveness and ownership
//!
//! Two KV buckets beside the event stream:
//!
//! - [`HOSTS_BUCKET`] (`keel_hosts`): one key `host.<id>` per live host, put
//!   by its [`HostHeartbeat`] every quarter of the bucket's `max_age`
//!   ([`DEFAULT_HOST_TTL`], 4 s, when this crate creates the bucket). A
//!   host that dies, however it dies, stops refreshing its key and the
//!   server expires it within `max_age`: no lease to give back, no clock
//!   shared between hosts. A host that stops cleanly deletes its key.
//! - [`OWNERS_BUCKET`] (`keel_owners`): one key per running run,
//!   `<subject prefix>.<run id>` with `.` and `:` escaped as `=2e` and
//!   `=3a` in each (e.g. `keel=2eruns.run_1`), whose value is the id of the
//!   host that started it. The [`JetStreamObserver`] writes it *before*
//!   it publishes the run's `run.started` (so a run in the stream always has
//!   its owner recorded) and purges it after the run's terminal is acked.
//!
//! A run is **abandoned** when its last event in the stream is not its run
//! terminal and its owner's heartbeat is gone (or no owner is recorded).
//!
//! # Recovery
//!
//! [`JetStreamRecovery::recover`] reads an abandoned run's history from the
//! stream, imports it into a [`RunLog`] (every commit rule checked),
//! commits [`recovery::terminals`] and publishes them in order, one at a
//! time, with the headers the [`JetStreamObserver`] puts on a single
//! event: `Nats-Msg-Id: <run_id>:<seq>` (without the observer's writer
//! token: every recoverer of a run uses the same id, so their terminals
//! deduplicate) and `Nats-Expected-Last-Subject-Sequence` of the event
//! before. Of two recoverers racing on one run, both read the same tail and
//! publish their first terminal against the same expected sequence: the
//! server appends one, and the other's is refused (the subject moved on) or
//! deduplicated (the same message id is stored with the winner's bytes).
//! The loser stops there and reports [`StreamRecovery::RecoveredElsewhere`], so
//! the stream holds one set of terminals with contiguous seqs. Recovery is
//! idempotent: a recovered run ends with `run.failed` (cause kind
//! [`recovery::HOST_LOST`]) and a later call reports it recovered.
//!
//! A host restarting on its own store may hold one event the stream lacks
//! (the journal is the first required observer: event `k` can be fsynced
//! locally and the host killed before JetStream acked it).
//! [`JetStreamRecovery::recover_with_local`] first publishes those events
//! (same ids, same bytes), then the terminals, so the local copy and the
//! stream stay one history. If another recoverer closed the run from the
//! shorter prefix first, the local copy can no longer agree:
//! [`JetStreamRecoveryError::Diverged`] names the seq and nothing is written.
//!
//! # The local copy
//!
//! [`JetStreamRecovery::sync_local`] brings a local store (any
//! [`RequiredObserver`], the SQLite journal in practice) to the lines the
//! stream holds for an ended run, through its normal write path: a host
//! restarting after a kill recovers JetStream first and then copies what
//! JetStream holds, so it never writes a second, different set of
//! terminals.
//!
//! [`JetStreamObserver`]: crate::JetStreamObserver

use crate::nats::{
    JetStreamHandle, Published, RemoteSubscribeError, RemoteSubscription, is_run_terminal,
};
use crate::observer::RequiredObserver;
use async_nats::jetstream::{self, kv};
use bytes::Bytes;
use futures_util::StreamExt;
use keel_eventlog::{
    ENTRY_OVERHEAD_BYTES, Event, LogConfig, Payload, RunLog, SubscribeError, SystemClock, recovery,
};
use keel_message::{IdError, RunId};
use std::sync::Arc;
use std::time::Duration;

/// The KV bucket of host heartbeats.
pub const HOSTS_BUCKET: &str = "keel_hosts";
/// The KV bucket of run owners.
pub const OWNERS_BUCKET: &str = "keel_owners";
/// The heartbeat bucket's `max_age` when this crate creates it: a killed
/// host is found gone at most this long after its last heartbeat.
pub const DEFAULT_HOST_TTL: Duration = Duration::from_secs(4);
/// The shortest `max_age` accepted for the heartbeat bucket.
pub const MIN_HOST_TTL: Duration = Duration::from_millis(400);
/// How often one call re-reads a run whose subject moved while it
/// forwarded local events, before giving up.
const ATTEMPTS: usize = 4;

/// Recovery through JetStream failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JetStreamRecoveryError {
    /// The run id is not an id (it becomes part of a subject and a key).
    #[error("not a run id: {0}")]
    RunId(#[from] IdError),
    /// The NATS client or server failed.
    #[error("jetstream: {op}: {detail}")]
    Nats {
        /// What was being done.
        op: &'static str,
        /// The client's or server's message.
        detail: String,
    },
    /// The heartbeat bucket exists without a `max_age`: a dead host's
    /// heartbeat would never expire.
    #[error(
        "KV bucket {HOSTS_BUCKET} has no max_age (rule recovery.host_ttl): recreate it with one"
    )]
    NoHostTtl,
    /// A host id is not 1 to 64 ASCII letters, digits, `_` or `-`.
    #[error("the host id is not 1 to 64 of [A-Za-z0-9_-] (rule recovery.host_id)")]
    InvalidHostId,
    /// A heartbeat needs a tokio runtime to run on.
    #[error("no tokio runtime to run the host heartbeat on (rule recovery.runtime)")]
    NoRuntime,
    /// The stream no longer holds the run's first events (retention).
    #[error(
        "run {run_id}: the stream's first event is seq {earliest}, not 1 (rule recovery.whole_history)"
    )]
    Incomplete {
        /// The run.
        run_id: String,
        /// The first seq the stream holds.
        earliest: u64,
    },
    /// The run's events cannot be restored into a log.
    #[error("run {run_id}: its history cannot be restored (rule recovery.importable): {detail}")]
    Corrupt {
        /// The run.
        run_id: String,
        /// What is wrong (rules and seqs, never content).
        detail: String,
    },
    /// The local copy and the stream hold different events at one seq:
    /// nothing was written.
    #[error(
        "run {run_id}: the local copy and the stream differ at seq {seq} (rule recovery.same_history)"
    )]
    Diverged {
        /// The run.
        run_id: String,
        /// The first seq that differs (or that only one side holds).
        seq: u64,
    },
    /// The local store refused an event copied from the stream.
    #[error("run {run_id}: the local store refused seq {seq}: {detail}")]
    LocalRefused {
        /// The run.
        run_id: String,
        /// The refused seq.
        seq: u64,
        /// The store's error.
        detail: String,
    },
    /// The run's subject kept moving while this call forwarded events.
    #[error("run {run_id}: the stream kept moving; gave up after {attempts} attempts")]
    Contended {
        /// The run.
        run_id: String,
        /// Attempts made.
        attempts: usize,
    },
}

fn nats(op: &'static str) -> impl FnOnce(String) -> JetStreamRecoveryError {
    move |detail| JetStreamRecoveryError::Nats { op, detail }
}

fn nats_err<E: std::fmt::Display>(op: &'static str) -> impl FnOnce(E) -> JetStreamRecoveryError {
    move |e| JetStreamRecoveryError::Nats {
        op,
        detail: e.to_string(),
    }
}

/// Whether `id` can be a host id: 1 to 64 of `[A-Za-z0-9_-]`.
pub fn valid_host_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'))
}

fn host_key(id: &str) -> String {
    format!("host.{id}")
}

/// `.` and `:` (a token separator and a character KV keys refuse)
/// escaped as `=2e` and `=3a`; `=` never occurs in a run id or a subject
/// prefix this crate builds.
fn escape(text: &str) -> String {
    text.replace('.', "=2e").replace(':', "=3a")
}

/// The owners key of a run: `<subject prefix>.<run id>`, both escaped, so
/// streams with different prefixes do not share records.
fn owner_key(prefix: &str, run_id: &RunId) -> String {
    format!("{}.{}", escape(prefix), escape(run_id.as_str()))
}

fn run_of_key(prefix: &str, key: &str) -> Option<RunId> {
    let (head, run) = key.split_once('.')?;
    if head != escape(prefix) {
        return None;
    }
    RunId::parse(&run.replace("=2e", ".").replace("=3a", ":"))
        .ok()
        .filter(|id| owner_key(prefix, id) == key)
}

// ------------------------------------------------------------ ownership

/// The two KV buckets: host heartbeats and run owners.
#[derive(Clone)]
pub struct Ownership {
    context: jetstream::Context,
    /// The event stream's subject prefix (the owners keys' first token).
    prefix: String,
    hosts: kv::Store,
    owners: kv::Store,
    ttl: Duration,
}

impl std::fmt::Debug for Ownership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ownership").field("ttl", &self.ttl).finish()
    }
}

/// Opens KV bucket `name`, creating it if it does not exist (another
/// process may create it at the same time). The bucket's stream is created
/// as the KV layout wants it (`KV_<name>`, subjects `$KV.<name>.>`, one
/// value per key, rollups allowed, direct get), without the account query
/// the client's own `create_key_value` sends first, which nats-server 2.9
/// answers in a shape this client does not parse.
async fn bucket(
    context: &jetstream::Context,
    name: &str,
    max_age: Duration,
    replicas: usize,
) -> Result<kv::Store, JetStreamRecoveryError> {
    if let Ok(store) = context.get_key_value(name).await {
        return Ok(store);
    }
    let created = context
        .get_or_create_stream(jetstream::stream::Config {
            name: format!("KV_{name}"),
            subjects: vec![format!("$KV.{name}.>")],
            max_messages_per_subject: 1,
            max_age,
            storage: jetstream::stream::StorageType::File,
            num_replicas: replicas.max(1),
            allow_rollup: true,
            deny_delete: true,
            allow_direct: true,
            discard: jetstream::stream::DiscardPolicy::New,
            ..Default::default()
        })
        .await;
    match context.get_key_value(name).await {
        Ok(store) => Ok(store),
        Err(e) => Err(match created {
            Err(created) => nats_err("create a KV bucket")(created),
            Ok(_) => nats_err("open a KV bucket")(e),
        }),
    }
}

impl Ownership {
    /// Opens both buckets, creating the heartbeat bucket with
    /// [`DEFAULT_HOST_TTL`] if it does not exist.
    pub async fn open(handle: &JetStreamHandle) -> Result<Ownership, JetStreamRecoveryError> {
        Ownership::open_with_ttl(handle, DEFAULT_HOST_TTL).await
    }

    /// Opens both buckets, creating the heartbeat bucket with `max_age`
    /// `ttl` (at least [`MIN_HOST_TTL`]) if it does not exist. An existing
    /// bucket keeps its own `max_age`: that is the one every host uses
    /// ([`host_ttl`](Self::host_ttl)).
    pub async fn open_with_ttl(
        handle: &JetStreamHandle,
        ttl: Duration,
    ) -> Result<Ownership, JetStreamRecoveryError> {
        let context = handle.context().clone();
        let replicas = handle.config().replicas;
        let hosts = bucket(&context, HOSTS_BUCKET, ttl.max(MIN_HOST_TTL), replicas).await?;
        let owners = bucket(&context, OWNERS_BUCKET, Duration::ZERO, replicas).await?;
        let ttl = hosts
            .status()
            .await
            .map_err(nats_err("read the heartbeat bucket"))?
            .max_age();
        if ttl.is_zero() {
            return Err(JetStreamRecoveryError::NoHostTtl);
        }
        Ok(Ownership {
            context,
            prefix: handle.config().subject_prefix.clone(),
            hosts,
            owners,
            ttl,
        })
    }

    /// The heartbeat bucket's `max_age`: how long after its last heartbeat
    /// a dead host still looks alive.
    pub fn host_ttl(&self) -> Duration {
        self.ttl
    }

    /// How often a [`HostHeartbeat`] refreshes its key: a quarter of
    /// [`host_ttl`](Self::host_ttl).
    pub fn heartbeat_interval(&self) -> Duration {
        self.ttl / 4
    }

    /// The host recorded as the owner of `run_id`, if any.
    pub async fn owner(&self, run_id: &RunId) -> Result<Option<String>, JetStreamRecoveryError> {
        let value = self
            .owners
            .get(owner_key(&self.prefix, run_id))
            .await
            .map_err(nats_err("read a run's owner"))?;
        Ok(value.map(|v| String::from_utf8_lossy(&v).into_owned()))
    }

    /// Whether `host`'s heartbeat is in the bucket. A value that is not a
    /// host id has no heartbeat.
    pub async fn is_alive(&self, host: &str) -> Result<bool, JetStreamRecoveryError> {
        if !valid_host_id(host) {
            return Ok(false);
        }
        let value = self
            .hosts
            .get(host_key(host))
            .await
            .map_err(nats_err("read a host's heartbeat"))?;
        Ok(value.is_some())
    }

    /// Every run with an owner recorded: the runs that started and have
    /// not ended (or whose record a crash left behind).
    pub async fn owned_runs(&self) -> Result<Vec<RunId>, JetStreamRecoveryError> {
        let mut keys = self
            .owners
            .keys()
            .await
            .map_err(nats_err("list the owned runs"))?;
        let mut runs = Vec::new();
        while let Some(key) = keys.next().await {
            let key = key.map_err(nats_err("list the owned runs"))?;
            runs.extend(run_of_key(&self.prefix, &key));
        }
        Ok(runs)
    }

    async fn beat(&self, id: &str) -> Result<(), JetStreamRecoveryError> {
        self.hosts
            .put(host_key(id), Bytes::copy_from_slice(id.as_bytes()))
            .await
            .map(|_| ())
            .map_err(nats_err("put a heartbeat"))
    }

    /// Records `host` as the owner of `run_id`, unless another host that is
    /// alive is recorded (a second writer of the run): `false` then, and
    /// the record is left as it is. Compare-and-set on the key's revision,
    /// so of two claimants of a free or dead-owned run one wins.
    async fn claim(&self, run_id: &RunId, host: &str) -> Result<bool, JetStreamRecoveryError> {
        const OP: &str = "record a run's owner";
        let key = owner_key(&self.prefix, run_id);
        let value = Bytes::copy_from_slice(host.as_bytes());
        for _ in 0..ATTEMPTS {
            let revision = match self.owners.entry(key.clone()).await.map_err(nats_err(OP))? {
                None => match self.owners.create(&key, value.clone()).await {
                    Ok(_) => return Ok(true),
                    Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => continue,
                    Err(e) => return Err(nats_err(OP)(e)),
                },
                Some(entry) if entry.operation != kv::Operation::Put => entry.revision,
                Some(entry) if entry.value == value => return Ok(true),
                Some(entry) => {
                    let other = String::from_utf8_lossy(&entry.value).into_owned();
                    if self.is_alive(&other).await? {
                        return Ok(false);
                    }
                    entry.revision
                }
            };
            match self.owners.update(&key, value.clone(), revision).await {
                Ok(_) => return Ok(true),
                Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => continue,
                Err(e) => return Err(nats_err(OP)(e)),
            }
        }
        Ok(false)
    }

    async fn forget(&self, run_id: &RunId) -> Result<(), JetStreamRecoveryError> {
        self.owners
            .purge(owner_key(&self.prefix, run_id))
            .await
            .map_err(nats_err("remove a run's owner"))
    }
}

// ------------------------------------------------------------ heartbeat

/// One host's heartbeat: its key in [`HOSTS_BUCKET`], refreshed by a task
/// on the tokio runtime it was started on until it is stopped or dropped.
pub struct HostHeartbeat {
    id: String,
    ownership: Ownership,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for HostHeartbeat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostHeartbeat")
            .field("id", &self.id)
            .finish()
    }
}

impl HostHeartbeat {
    /// Starts a heartbeat under a fresh host id (`h` and a NUID).
    pub async fn start(ownership: Ownership) -> Result<HostHeartbeat, JetStreamRecoveryError> {
        let inbox = ownership.context.client().new_inbox();
        let nuid = inbox.rsplit('.').next().unwrap_or_default();
        HostHeartbeat::start_as(ownership.clone(), &format!("h{nuid}")).await
    }

    /// Starts a heartbeat under `id` (see [`valid_host_id`]); the first
    /// heartbeat is stored before this returns.
    pub async fn start_as(
        ownership: Ownership,
        id: &str,
    ) -> Result<HostHeartbeat, JetStreamRecoveryError> {
        if !valid_host_id(id) {
            return Err(JetStreamRecoveryError::InvalidHostId);
        }
        let runtime =
            tokio::runtime::Handle::try_current().map_err(|_| JetStreamRecoveryError::NoRuntime)?;
        ownership.beat(id).await?;
        let task = runtime.spawn(beat_forever(ownership.clone(), id.to_owned()));
        Ok(HostHeartbeat {
            id: id.to_owned(),
            ownership,
            task,
        })
    }

    /// The host id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The buckets.
    pub fn ownership(&self) -> &Ownership {
        &self.ownership
    }

    /// Records this host as the owner of `run_id`: `false` (nothing
    /// written) when another live host is recorded as its owner.
    pub async fn own(&self, run_id: &RunId) -> Result<bool, JetStreamRecoveryError> {
        self.ownership.claim(run_id, &self.id).await
    }

    /// Removes the owner record of `run_id` (its run ended).
    pub async fn release(&self, run_id: &RunId) -> Result<(), JetStreamRecoveryError> {
        self.ownership.forget(run_id).await
    }

    /// Stops the heartbeat and deletes its key: from now on the runs this
    /// host owns and did not end are abandoned.
    pub async fn stop(self) -> Result<(), JetStreamRecoveryError> {
        self.task.abort();
        self.ownership
            .hosts
            .purge(host_key(&self.id))
            .await
            .map_err(nats_err("delete a heartbeat"))
    }
}

impl Drop for HostHeartbeat {
    /// Stops refreshing; the key expires within the bucket's `max_age`.
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn beat_forever(ownership: Ownership, id: String) {
    let interval = ownership.heartbeat_interval();
    loop {
        tokio::time::sleep(interval).await;
        // A failed beat is retried at the next tick; if the server stays
        // away longer than the TTL, this host's runs become recoverable.
        let _ = ownership.beat(&id).await;
    }
}

// ------------------------------------------------------------ recovery

/// Where a run stands in the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StreamStanding {
    /// The stream holds no event of the run.
    NotInStream,
    /// Its last event is its run terminal; `by_recovery` when that is a
    /// recovery's `run.failed` (cause kind [`recovery::HOST_LOST`]).
    Ended {
        /// Whether a recovery ended it.
        by_recovery: bool,
    },
    /// Open, and its owner's heartbeat is alive.
    Owned {
        /// The owner.
        host: String,
    },
    /// Open, and no live host owns it.
    Abandoned {
        /// The recorded owner (gone), or `None` when none is recorded.
        owner: Option<String>,
    },
}

/// What [`JetStreamRecovery::recover`] did.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum StreamRecovery {
    /// This call closed the run.
    Recovered(RecoveredInStream),
    /// Another recoverer closed it: before this call, or while it tried
    /// (`appended` of this call's terminals landed before the other's; 0
    /// unless the race was lost after the first terminal).
    RecoveredElsewhere {
        /// This call's terminals in the stream.
        appended: usize,
    },
    /// Its owner is alive: nothing was written.
    OwnerAlive {
        /// The owner.
        host: String,
    },
    /// It ended (not by recovery): nothing to do.
    NotAbandoned,
    /// The stream holds no event of it.
    NotInStream,
}

/// A run this call closed in the stream.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RecoveredInStream {
    /// The run.
    pub run_id: String,
    /// The owner that was gone, or `None` when none was recorded.
    pub previous_owner: Option<String>,
    /// Local events the stream lacked, published first
    /// ([`JetStreamRecovery::recover_with_local`]).
    pub forwarded: Vec<Arc<Event>>,
    /// The terminals published, innermost first, seqs contiguous.
    pub terminals: Vec<Arc<Event>>,
}

/// What [`JetStreamRecovery::sync_local`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LocalSync {
    /// The local copy lacked this many events; they were written to it.
    Copied {
        /// Events written.
        events: usize,
    },
    /// The local copy already holds every event of the stream.
    InStep,
    /// The run has not ended in the stream: nothing was copied.
    StreamOpen,
    /// The stream holds no event of it.
    NotInStream,
}

/// The last message of a run's subject.
struct Tail {
    stream_seq: u64,
    event: Event,
}

/// Recovery of abandoned runs through JetStream (see the module docs).
#[derive(Debug, Clone)]
pub struct JetStreamRecovery {
    handle: JetStreamHandle,
    ownership: Ownership,
}

impl JetStreamRecovery {
    /// Opens the buckets ([`Ownership::open`]).
    pub async fn open(
        handle: JetStreamHandle,
    ) -> Result<JetStreamRecovery, JetStreamRecoveryError> {
        let ownership = Ownership::open(&handle).await?;
        Ok(JetStreamRecovery::new(handle, ownership))
    }

    /// Over buckets already open.
    pub fn new(handle: JetStreamHandle, ownership: Ownership) -> JetStreamRecovery {
        JetStreamRecovery { handle, ownership }
    }

    /// The buckets.
    pub fn ownership(&self) -> &Ownership {
        &self.ownership
    }

    /// Where `run_id` stands (no write).
    pub async fn standing(&self, run_id: &str) -> Result<StreamStanding, JetStreamRecoveryError> {
        let run = RunId::parse(run_id)?;
        match self.tail(&run).await? {
            None => Ok(StreamStanding::NotInStream),
            Some(tail) => self.standing_of(&run, &tail).await,
        }
    }

    /// Closes `run_id` in the stream if it is abandoned (see the module
    /// docs). Idempotent.
    pub async fn recover(&self, run_id: &str) -> Result<StreamRecovery, JetStreamRecoveryError> {
        self.recover_with_local(run_id, &[]).await
    }

    /// Like [`recover`](Self::recover), for a host that holds a local copy
    /// of the run (`local`: its stored lines, in seq order): the copy must
    /// agree with the stream where both hold an event
    /// ([`JetStreamRecoveryError::Diverged`] otherwise, and nothing is written);
    /// events only the copy holds are published first, then the terminals
    /// computed from the whole.
    pub async fn recover_with_local(
        &self,
        run_id: &str,
        local: &[String],
    ) -> Result<StreamRecovery, JetStreamRecoveryError> {
        let run = RunId::parse(run_id)?;
        for _ in 0..ATTEMPTS {
            let Some(tail) = self.tail(&run).await? else {
                self.forget_dead_owner(&run).await?;
                return Ok(StreamRecovery::NotInStream);
            };
            let owner = match self.standing_of(&run, &tail).await? {
                StreamStanding::Abandoned { owner } => owner,
                StreamStanding::Ended { by_recovery } => {
                    let _ = self.ownership.forget(&run).await;
                    return Ok(if by_recovery {
                        StreamRecovery::RecoveredElsewhere { appended: 0 }
                    } else {
                        StreamRecovery::NotAbandoned
                    });
                }
                StreamStanding::Owned { host } => return Ok(StreamRecovery::OwnerAlive { host }),
                StreamStanding::NotInStream => return Ok(StreamRecovery::NotInStream),
            };
            let stream = self.history(&run, &tail).await?;
            let forward = local_beyond(&run, &stream, local)?;
            let mut expected = tail.stream_seq;
            if !self.forward(&forward, &mut expected).await? {
                // Someone wrote the run meanwhile: read it again.
                continue;
            }
            let lines = stream.iter().chain(&forward).map(|e| e.line());
            let log = import(&run, lines)?;
            let terminals = commit_terminals(&run, &log)?;
            return self.append(&run, owner, forward, terminals, expected).await;
        }
        Err(JetStreamRecoveryError::Contended {
            run_id: run.to_string(),
            attempts: ATTEMPTS,
        })
    }

    /// Brings a local copy of `run_id` (`local`: its stored lines, in seq
    /// order; `store`: where to write) to the lines the stream holds, once
    /// the run has ended there: the events the copy lacks are offered to
    /// `store` in order, through its normal write path.
    pub async fn sync_local(
        &self,
        store: &dyn RequiredObserver,
        run_id: &str,
        local: &[String],
    ) -> Result<LocalSync, JetStreamRecoveryError> {
        let run = RunId::parse(run_id)?;
        let Some(tail) = self.tail(&run).await? else {
            return Ok(LocalSync::NotInStream);
        };
        if !is_run_terminal(&tail.event) {
            return Ok(LocalSync::StreamOpen);
        }
        let stream = self.history(&run, &tail).await?;
        if !local_beyond(&run, &stream, local)?.is_empty() {
            return Err(JetStreamRecoveryError::Diverged {
                run_id: run.to_string(),
                seq: seq_at(stream.len()),
            });
        }
        let missing = stream.get(local.len()..).unwrap_or_default();
        for event in missing {
            store
                .observe(event)
                .await
                .map_err(|e| JetStreamRecoveryError::LocalRefused {
                    run_id: run.to_string(),
                    seq: event.seq(),
                    detail: e.to_string(),
                })?;
        }
        Ok(if missing.is_empty() {
            LocalSync::InStep
        } else {
            LocalSync::Copied {
                events: missing.len(),
            }
        })
    }

    /// A host that died between recording a run and publishing its
    /// `run.started` leaves a record with no run: remove it (a live owner's
    /// record stays, its `run.started` may be on its way).
    async fn forget_dead_owner(&self, run: &RunId) -> Result<(), JetStreamRecoveryError> {
        let key = owner_key(&self.ownership.prefix, run);
        let entry = self
            .ownership
            .owners
            .entry(key.clone())
            .await
            .map_err(nats_err("read a run's owner"))?;
        if let Some(entry) = entry.filter(|e| e.operation == kv::Operation::Put) {
            let host = String::from_utf8_lossy(&entry.value).into_owned();
            if !self.ownership.is_alive(&host).await? {
                // Only that record: a host claiming the run meanwhile
                // wrote a newer revision, which stays.
                let _ = self
                    .ownership
                    .owners
                    .purge_expect_revision(&key, Some(entry.revision))
                    .await;
            }
        }
        Ok(())
    }

    async fn tail(&self, run: &RunId) -> Result<Option<Tail>, JetStreamRecoveryError> {
        let Some((stream_seq, line)) = self
            .handle
            .last_of(run.as_str())
            .await
            .map_err(nats("read a run's last event"))?
        else {
            return Ok(None);
        };
        let event = decode(run, &line, None)?;
        Ok(Some(Tail { stream_seq, event }))
    }

    async fn standing_of(
        &self,
        run: &RunId,
        tail: &Tail,
    ) -> Result<StreamStanding, JetStreamRecoveryError> {
        if is_run_terminal(&tail.event) {
            return Ok(StreamStanding::Ended {
                by_recovery: ended_by_recovery(&tail.event),
            });
        }
        let owner = self.ownership.owner(run).await?;
        if let Some(host) = &owner
            && self.ownership.is_alive(host).await?
        {
            return Ok(StreamStanding::Owned { host: host.clone() });
        }
        Ok(StreamStanding::Abandoned { owner })
    }

    /// Events 1 to the tail's seq, from the stream.
    async fn history(
        &self,
        run: &RunId,
        tail: &Tail,
    ) -> Result<Vec<Arc<Event>>, JetStreamRecoveryError> {
        const OP: &str = "read a run's history";
        let mut sub = RemoteSubscription::open(&self.handle, run.as_str(), 0)
            .await
            .map_err(|e| match e {
                RemoteSubscribeError::Cursor(SubscribeError::CursorExpired {
                    earliest, ..
                }) => JetStreamRecoveryError::Incomplete {
                    run_id: run.to_string(),
                    earliest,
                },
                other => nats_err(OP)(other),
            })?;
        let last = tail.event.seq();
        let wait = self.handle.config().ack_timeout;
        let mut events = Vec::new();
        while sub.cursor() < last {
            match tokio::time::timeout(wait, sub.next()).await {
                Ok(Some(Ok(event))) => events.push(event),
                Ok(Some(Err(e))) => return Err(nats_err(OP)(e)),
                Ok(None) => {
                    return Err(corrupt(
                        run,
                        format!("the run ends at seq {} before its tail", sub.cursor()),
                    ));
                }
                Err(_) => return Err(nats(OP)(format!("no event after seq {}", sub.cursor()))),
            }
        }
        Ok(events)
    }

    /// Publishes the local events the stream lacks, in order. `false` when
    /// the subject moved meanwhile (someone else wrote the run).
    async fn forward(
        &self,
        events: &[Arc<Event>],
        expected: &mut u64,
    ) -> Result<bool, JetStreamRecoveryError> {
        const OP: &str = "publish a local event";
        for event in events {
            match self
                .handle
                .publish_event(event, *expected)
                .await
                .map_err(nats(OP))?
            {
                Published::Stored(stream_seq) => *expected = stream_seq,
                Published::Duplicate(stream_seq) => {
                    let stored = self
                        .handle
                        .stored_line(stream_seq)
                        .await
                        .map_err(nats(OP))?;
                    if stored != event.line().as_bytes() {
                        return Ok(false);
                    }
                    *expected = stream_seq;
                }
                Published::WrongLastSequence => return Ok(false),
            }
        }
        Ok(true)
    }

    /// Publishes the terminals in order; stops at the first one another
    /// recoverer got in before.
    async fn append(
        &self,
        run: &RunId,
        previous_owner: Option<String>,
        forwarded: Vec<Arc<Event>>,
        terminals: Vec<Arc<Event>>,
        mut expected: u64,
    ) -> Result<StreamRecovery, JetStreamRecoveryError> {
        for (appended, event) in terminals.iter().enumerate() {
            match self
                .handle
                .publish_event(event, expected)
                .await
                .map_err(nats("publish a recovery terminal"))?
            {
                Published::Stored(stream_seq) => expected = stream_seq,
                // The seq is taken: under the same message id with another
                // recoverer's bytes, or the subject moved on. The run is
                // the other's to close.
                Published::Duplicate(_) | Published::WrongLastSequence => {
                    return Ok(StreamRecovery::RecoveredElsewhere { appended });
                }
            }
        }
        // Best effort: a stale record of an ended run is harmless.
        let _ = self.ownership.forget(run).await;
        Ok(StreamRecovery::Recovered(RecoveredInStream {
            run_id: run.to_string(),
            previous_owner,
            forwarded,
            terminals,
        }))
    }
}

fn corrupt(run: &RunId, detail: String) -> JetStreamRecoveryError {
    JetStreamRecoveryError::Corrupt {
        run_id: run.to_string(),
        detail,
    }
}

fn seq_at(index: usize) -> u64 {
    u64::try_from(index).unwrap_or(u64::MAX).saturating_add(1)
}

/// Decodes a line of `run` (at `seq`, when known).
fn decode(run: &RunId, line: &[u8], seq: Option<u64>) -> Result<Event, JetStreamRecoveryError> {
    let text = std::str::from_utf8(line).map_err(|e| {
        corrupt(
            run,
            format!("a line is not UTF-8 at byte {}", e.valid_up_to()),
        )
    })?;
    let event = Event::decode(text).map_err(|e| corrupt(run, e.to_string()))?;
    if event.run_id() != run {
        return Err(corrupt(run, "a line names another run".to_owned()));
    }
    if let Some(seq) = seq.filter(|s| *s != event.seq()) {
        return Err(corrupt(
            run,
            format!("line {seq} holds seq {}", event.seq()),
        ));
    }
    Ok(event)
}

/// The local events past the stream's, after checking that both agree
/// byte for byte where both hold one.
fn local_beyond(
    run: &RunId,
    stream: &[Arc<Event>],
    local: &[String],
) -> Result<Vec<Arc<Event>>, JetStreamRecoveryError> {
    let mut beyond = Vec::new();
    for (i, line) in local.iter().enumerate() {
        match stream.get(i) {
            Some(event) if event.line() == line => {}
            Some(_) => {
                return Err(JetStreamRecoveryError::Diverged {
                    run_id: run.to_string(),
                    seq: seq_at(i),
                });
            }
            None => beyond.push(Arc::new(decode(run, line.as_bytes(), Some(seq_at(i)))?)),
        }
    }
    Ok(beyond)
}

/// Whether `event` (a run terminal) is a recovery's `run.failed`.
fn ended_by_recovery(event: &Event) -> bool {
    matches!(
        event.payload(),
        Ok(Payload::RunFailed(p)) if p.cause.as_ref().and_then(|c| c.kind.as_deref()) == Some(recovery::HOST_LOST)
    )
}

/// The run's log, imported from its lines with every commit rule checked.
fn import<'a>(
    run: &RunId,
    lines: impl Iterator<Item = &'a str> + Clone,
) -> Result<RunLog, JetStreamRecoveryError> {
    RunLog::import(
        run.clone(),
        lines.clone(),
        import_config(lines),
        Arc::new(SystemClock),
    )
    .map_err(|e| corrupt(run, e.to_string()))
}

/// Commits the terminals that close every open scope of `log`.
fn commit_terminals(run: &RunId, log: &RunLog) -> Result<Vec<Arc<Event>>, JetStreamRecoveryError> {
    let payloads = recovery::terminals(log);
    if payloads.is_empty() {
        return Err(corrupt(
            run,
            "the last event is not the run's terminal, yet no scope is open".to_owned(),
        ));
    }
    payloads
        .iter()
        .map(|p| log.commit(p).map_err(|e| corrupt(run, e.to_string())))
        .collect()
}

/// A log configuration that holds every line (nothing evicted, so the
/// model positions see every delta), whatever bounds the host that wrote
/// them had, with room for the terminals.
fn import_config<'a>(lines: impl Iterator<Item = &'a str>) -> LogConfig {
    let base = LogConfig::default();
    let (mut count, mut largest, mut stored) = (0usize, 0usize, 0usize);
    for line in lines {
        count = count.saturating_add(1);
        largest = largest.max(line.len());
        stored = stored.saturating_add(line.len().saturating_add(ENTRY_OVERHEAD_BYTES));
    }
    // No more scopes can be open than were started.
    let max_open_scopes = base.max_open_scopes.max(count.saturating_add(1));
    let max_event_bytes = base.max_event_bytes.max(largest);
    let reserve = max_open_scopes
        .saturating_mul(base.max_terminal_bytes.saturating_add(ENTRY_OVERHEAD_BYTES));
    LogConfig {
        max_events: count.saturating_add(max_open_scopes).saturating_add(1),
        max_bytes: stored
            .saturating_add(max_event_bytes)
            .saturating_add(ENTRY_OVERHEAD_BYTES)
            .saturating_add(reserve),
        max_event_bytes,
        max_terminal_bytes: base.max_terminal_bytes,
        max_open_scopes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_keys_round_trip() {
        let prefix = "keel.runs";
        for id in ["run_1", "a.b:c", "x-y_z.1:2:3", "..", "a=2eb"] {
            let Ok(run) = RunId::parse(id) else { continue };
            let key = owner_key(prefix, &run);
            assert_eq!(key.matches('.').count(), 1, "{key}");
            assert!(!key.contains(':'), "{key}");
            assert_eq!(run_of_key(prefix, &key).as_ref(), Some(&run), "{id}");
            assert_eq!(run_of_key("keel.other", &key), None, "{id}");
        }
        assert_eq!(run_of_key(prefix, "keel=2eruns.a=2"), None);
        assert_eq!(run_of_key(prefix, "a=2"), None);
        assert!(valid_host_id("hABC_1-x"));
        assert!(!valid_host_id("") && !valid_host_id("a.b") && !valid_host_id(&"h".repeat(65)));
    }
}
