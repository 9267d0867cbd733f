//! NATS JetStream (feature `nats`): a required observer that publishes
//! every event to a shared, durable stream, a remote subscription that
//! follows a run from it, and recovery across hosts: which host owns a
//! run, whether that host is alive, and closing a run whose host died
//! exactly once, however many recoverers try at the same time.
//!
//! By job: `handle` (the connection, the stream and the publish
//! primitives), `observer` ([`JetStreamObserver`]), `subscription`
//! ([`RemoteSubscription`]), `ownership` (host heartbeats and run owners:
//! [`Ownership`], [`HostHeartbeat`]), `recovery` ([`JetStreamRecovery`])
//! and `recovery_error` ([`JetStreamRecoveryError`], shared by ownership
//! and recovery), and `delete` (deletion: `JetStreamHandle::delete_runs`,
//! with feature `sqlite`, whose deletion types it shares).
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
//!   tail, are `Ok`. (Recovery, [`JetStreamRecovery`], publishes with
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
//! - **Batches.** [`observe_batch`](crate::RequiredObserver::observe_batch)
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
//!   records its host as the run's owner (KV bucket [`OWNERS_BUCKET`])
//!   and keeps that host's heartbeat alive (KV bucket [`HOSTS_BUCKET`]);
//!   after the run's terminal is acked it removes the record. A run whose
//!   host died is then found abandoned and closed by
//!   [`JetStreamRecovery`].
//!
//! # Recovery across hosts
//!
//! With `--nats`, JetStream is the shared authority for a run's history
//! across hosts; a host's local SQLite journal is that host's copy.
//!
//! ## Liveness and ownership
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
//! ## Recovery
//!
//! [`JetStreamRecovery::recover`] reads an abandoned run's history from the
//! stream, imports it into a [`RunLog`] (every commit rule checked),
//! commits [`recovery::terminals`](keel_eventlog::recovery::terminals) and publishes them in order, one at a
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
//! [`recovery::HOST_LOST`](keel_eventlog::recovery::HOST_LOST)) and a later call reports it recovered.
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
//! ## The local copy
//!
//! [`JetStreamRecovery::sync_local`] brings a local store (any
//! [`RequiredObserver`], the SQLite journal in practice) to the lines the
//! stream holds for an ended run, through its normal write path: a host
//! restarting after a kill recovers JetStream first and then copies what
//! JetStream holds, so it never writes a second, different set of
//! terminals.
//!
//! [`ObserverError::Conflict`]: crate::ObserverError::Conflict
//! [`ObserverError::Gap`]: crate::ObserverError::Gap
//! [`RequiredObserver`]: crate::RequiredObserver
//! [`RunLog`]: keel_eventlog::RunLog

#[cfg(feature = "sqlite")]
mod delete;
mod handle;
mod observer;
mod ownership;
mod recovery;
mod recovery_error;
mod subscription;

#[cfg(feature = "sqlite")]
pub use delete::TOMBSTONES_BUCKET;
pub use handle::{
    DEFAULT_STREAM, DEFAULT_SUBJECT_PREFIX, JetStreamConfig, JetStreamError, JetStreamHandle,
};
pub use observer::JetStreamObserver;
pub use ownership::{
    DEFAULT_HOST_TTL, HOSTS_BUCKET, HostHeartbeat, MIN_HOST_TTL, OWNERS_BUCKET, Ownership,
};
pub use recovery::{
    JetStreamRecovery, LocalSync, RecoveredInStream, StreamRecovery, StreamStanding,
};
pub use recovery_error::JetStreamRecoveryError;
pub use subscription::{RemoteSubscribeError, RemoteSubscription, RemoteSubscriptionError};
