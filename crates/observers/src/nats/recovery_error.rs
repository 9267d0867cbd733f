//! [`JetStreamRecoveryError`]: what ownership (heartbeats, owner records)
//! and recovery through JetStream report.

use super::ownership::HOSTS_BUCKET;
use keel_message::IdError;

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

pub(super) fn nats(op: &'static str) -> impl FnOnce(String) -> JetStreamRecoveryError {
    move |detail| JetStreamRecoveryError::Nats { op, detail }
}

pub(super) fn nats_err<E: std::fmt::Display>(
    op: &'static str,
) -> impl FnOnce(E) -> JetStreamRecoveryError {
    move |e| JetStreamRecoveryError::Nats {
        op,
        detail: e.to_string(),
    }
}
