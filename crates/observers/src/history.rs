//! [`RunHistory`]: the read side of a durable store, what a follower reads
//! the prefix of a run from once the run's log no longer retains it.
//!
//! A required observer makes events durable; a store that can also read
//! them back implements this trait, and the engine's follower
//! (`Engine::subscribe` in `keel-engine`) reads from it whatever the live
//! log evicted, or the whole run when it is not live. The SQLite journal's
//! [`JournalReader`](crate::JournalReader) implements it (feature
//! `sqlite`), and so does `keel_testkit::MemoryJournal`.
//!
//! Calls are synchronous and may block (file I/O): the follower runs them
//! on Tokio's blocking pool. What a store returns is checked by the
//! follower (contiguous sequences, the right run), so an implementation
//! only reads.

use keel_eventlog::{Event, Terminal};
use keel_message::RunId;
use std::sync::Arc;

/// A run's status, from its lifecycle events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunStatus {
    /// No run terminal stored yet.
    Running,
    /// `run.completed` stored.
    Completed,
    /// `run.failed` stored.
    Failed,
    /// `run.cancelled` stored.
    Cancelled,
}

impl RunStatus {
    /// The stored name: `running`, `completed`, `failed`, `cancelled`.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
        }
    }

    /// Parses a stored name.
    pub fn parse(text: &str) -> Option<RunStatus> {
        match text {
            "running" => Some(RunStatus::Running),
            "completed" => Some(RunStatus::Completed),
            "failed" => Some(RunStatus::Failed),
            "cancelled" => Some(RunStatus::Cancelled),
            _ => None,
        }
    }

    /// Whether the run's terminal is stored (anything but `Running`).
    pub fn is_ended(self) -> bool {
        self != RunStatus::Running
    }
}

impl From<Terminal> for RunStatus {
    fn from(t: Terminal) -> Self {
        match t {
            Terminal::Completed => RunStatus::Completed,
            Terminal::Failed => RunStatus::Failed,
            Terminal::Cancelled => RunStatus::Cancelled,
        }
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a stored run is: its last stored seq (every event `1..=last_seq`
/// is stored) and its status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredRun {
    last_seq: u64,
    status: RunStatus,
}

impl StoredRun {
    /// A run stored through `last_seq`, with `status`.
    pub fn new(last_seq: u64, status: RunStatus) -> StoredRun {
        StoredRun { last_seq, status }
    }

    /// The last stored sequence.
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// The run's status as stored.
    pub fn status(&self) -> RunStatus {
        self.status
    }
}

/// Why a [`RunHistory`] could not answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunHistoryError {
    /// The store could not be read (I/O, a locked or damaged database).
    #[error("history {store}: {source}")]
    Read {
        /// The store's name ([`RunHistory::name`]).
        store: String,
        /// The store's own error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A stored line of the run after `after` is not a valid event.
    #[error(
        "history {store}: the event of run {run_id} after seq {after} does not decode: {detail}"
    )]
    Corrupt {
        /// The store's name.
        store: String,
        /// The run.
        run_id: String,
        /// The last good seq before the bad line.
        after: u64,
        /// What is wrong (a decode error; never the line itself).
        detail: String,
    },
}

impl RunHistoryError {
    /// A read failure of store `store`.
    pub fn read(
        store: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> RunHistoryError {
        RunHistoryError::Read {
            store: store.into(),
            source: source.into(),
        }
    }
}

/// The read side of a durable store: a run's events after a seq, a page
/// at a time, and where the stored run is. Object safe; share it as
/// `Arc<dyn RunHistory>`.
///
/// Contract: what a call returns was durable when the call began, so an
/// event a required observer acknowledged before the call is in its
/// answer. Calls may block; the engine makes them on Tokio's blocking
/// pool.
pub trait RunHistory: Send + Sync + 'static {
    /// A short stable name for errors.
    fn name(&self) -> &str;

    /// Where run `run_id` is in the store, or `None` when nothing of it is
    /// stored.
    fn stored(&self, run_id: &RunId) -> Result<Option<StoredRun>, RunHistoryError>;

    /// Up to `limit` events of run `run_id` with `seq > after`, in
    /// sequence order; empty when there are none (or no such run). A
    /// store may end a page early (before a damaged line, say), so the
    /// good events before it are served and the next read reports it; a
    /// store that reads from disk also ends it at a byte budget (the
    /// journal: `PAGE_BYTES`), so what a reader holds per page is bounded
    /// in bytes. Only an empty page is the end: a reader pages until one.
    fn read_after(
        &self,
        run_id: &RunId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<Arc<Event>>, RunHistoryError>;
}

/// Any store is a history store for
/// [`keel_eventlog::history::rebuild_chain`], so a continued run's history
/// rebuilds from it, its references followed a page at a time.
impl keel_eventlog::history::HistoryStore for dyn RunHistory {
    type Error = RunHistoryError;
    fn events_after(
        &self,
        run_id: &RunId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<Event>, RunHistoryError> {
        Ok(self
            .read_after(run_id, after, limit)?
            .iter()
            .map(|event| Event::clone(event))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn status_names_round_trip() {
        for status in [
            RunStatus::Running,
            RunStatus::Completed,
            RunStatus::Failed,
            RunStatus::Cancelled,
        ] {
            assert_eq!(RunStatus::parse(status.as_str()), Some(status));
            assert_eq!(status.is_ended(), status != RunStatus::Running);
        }
        assert_eq!(RunStatus::parse("paused"), None);
    }

    #[test]
    fn the_trait_is_object_safe() {
        struct Empty;
        impl RunHistory for Empty {
            fn name(&self) -> &str {
                "empty"
            }
            fn stored(&self, _: &RunId) -> Result<Option<StoredRun>, RunHistoryError> {
                Ok(None)
            }
            fn read_after(
                &self,
                _: &RunId,
                _: u64,
                _: usize,
            ) -> Result<Vec<Arc<Event>>, RunHistoryError> {
                Err(RunHistoryError::read("empty", "offline"))
            }
        }
        let history: Arc<dyn RunHistory> = Arc::new(Empty);
        let run = RunId::parse("run_1").unwrap();
        assert!(matches!(history.stored(&run), Ok(None)));
        let err = history.read_after(&run, 0, 1).err().map(|e| e.to_string());
        assert_eq!(err.as_deref(), Some("history empty: offline"));
    }
}
