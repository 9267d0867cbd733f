//! [`HistoryHasher`]: the digest a `run.input` reference pins its history
//! with, computed a line at a time (see [`HistoryDigest`]).

use crate::event::Event;
use crate::reference::{HistoryDigest, HistoryReference};
use keel_message::RunId;
use sha2::{Digest, Sha256};
use std::fmt;

/// Digests a run's lines in seq order, one at a time, so a history is
/// checked without holding its events (see [`HistoryDigest`]).
///
/// ```
/// use keel_eventlog::{HistoryHasher, LogConfig, Payload, RunLog, RunStarted, SystemClock};
/// use keel_message::RunId;
/// use std::sync::Arc;
/// let log = RunLog::new(RunId::parse("run_1")?, LogConfig::default(), Arc::new(SystemClock))?;
/// let started = log.commit(&Payload::RunStarted(RunStarted::default()))?;
/// let mut hasher = HistoryHasher::default();
/// hasher.update(&started);
/// assert_eq!(hasher.last_seq(), 1);
/// assert_eq!(hasher.finish(), HistoryHasher::default().finish_with([&*started]));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Default)]
pub struct HistoryHasher {
    sha: Sha256,
    last_seq: u64,
}

impl fmt::Debug for HistoryHasher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HistoryHasher")
            .field("last_seq", &self.last_seq)
            .finish_non_exhaustive()
    }
}

impl HistoryHasher {
    /// Adds the next event's line.
    pub fn update(&mut self, event: &Event) {
        self.sha.update(event.line().as_bytes());
        self.sha.update(b"\n");
        self.last_seq = event.seq();
    }
    /// The seq of the last event added (0 before any).
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }
    /// The digest of every line added.
    pub fn finish(self) -> HistoryDigest {
        let out = self.sha.finalize();
        let mut bytes = [0u8; 32];
        bytes.copy_from_slice(&out);
        HistoryDigest(bytes)
    }
    /// Adds `events`, then [`finish`](Self::finish)es.
    pub fn finish_with<'a>(mut self, events: impl IntoIterator<Item = &'a Event>) -> HistoryDigest {
        events.into_iter().for_each(|e| self.update(e));
        self.finish()
    }
}

impl HistoryReference {
    /// The reference to the lines `hasher` digested of run `run_id`.
    pub fn new(run_id: RunId, hasher: HistoryHasher) -> HistoryReference {
        HistoryReference {
            run_id,
            last_seq: hasher.last_seq(),
            digest: hasher.finish(),
            extra: Default::default(),
        }
    }
}
