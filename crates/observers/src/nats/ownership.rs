//! Liveness and ownership: the host heartbeats ([`HostHeartbeat`], KV
//! bucket [`HOSTS_BUCKET`]) and the run owners ([`Ownership`], KV bucket
//! [`OWNERS_BUCKET`]) that say whether a run's host is alive.

use super::handle::JetStreamHandle;
use super::recovery_error::{JetStreamRecoveryError, nats_err};
use crate::host_id::valid_host_id;
use async_nats::jetstream::{self, kv};
use bytes::Bytes;
use futures_util::StreamExt;
use keel_message::RunId;
use std::time::Duration;

/// How often one call retries after losing a race (a compare-and-set on
/// an owner record; a run's subject that moved while recovery forwarded
/// local events) before giving up.
pub(super) const ATTEMPTS: usize = 4;

/// The KV bucket of host heartbeats.
pub const HOSTS_BUCKET: &str = "keel_hosts";
/// The KV bucket of run owners.
pub const OWNERS_BUCKET: &str = "keel_owners";
/// The heartbeat bucket's `max_age` when this crate creates it: a killed
/// host is found gone at most this long after its last heartbeat.
pub const DEFAULT_HOST_TTL: Duration = Duration::from_secs(4);
/// The shortest `max_age` accepted for the heartbeat bucket.
pub const MIN_HOST_TTL: Duration = Duration::from_millis(400);

fn host_key(id: &str) -> String {
    format!("host.{id}")
}

/// `.` and `:` (a token separator and a character KV keys refuse)
/// escaped as `=2e` and `=3a`; `=` never occurs in a run id or a subject
/// prefix this crate builds.
pub(super) fn escape(text: &str) -> String {
    text.replace('.', "=2e").replace(':', "=3a")
}

/// The owners key of a run: `<subject prefix>.<run id>`, both escaped, so
/// streams with different prefixes do not share records.
pub(super) fn owner_key(prefix: &str, run_id: &RunId) -> String {
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
pub(super) async fn bucket(
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

    /// A host that died between recording a run and publishing its
    /// `run.started` leaves a record with no run: remove it (a live owner's
    /// record stays, its `run.started` may be on its way).
    pub(super) async fn forget_dead_owner(
        &self,
        run: &RunId,
    ) -> Result<(), JetStreamRecoveryError> {
        let key = owner_key(&self.prefix, run);
        let entry = self
            .owners
            .entry(key.clone())
            .await
            .map_err(nats_err("read a run's owner"))?;
        if let Some(entry) = entry.filter(|e| e.operation == kv::Operation::Put) {
            let host = String::from_utf8_lossy(&entry.value).into_owned();
            if !self.is_alive(&host).await? {
                // Only that record: a host claiming the run meanwhile
                // wrote a newer revision, which stays.
                let _ = self
                    .owners
                    .purge_expect_revision(&key, Some(entry.revision))
                    .await;
            }
        }
        Ok(())
    }

    pub(super) async fn forget(&self, run_id: &RunId) -> Result<(), JetStreamRecoveryError> {
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
    }
}
