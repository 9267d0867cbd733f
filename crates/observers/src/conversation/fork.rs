//! Forks: a new run starting from a stored run's history as its log
//! rebuilds it up to a seq (a fork point, rule `fork.point`, owned by
//! `keel_eventlog::history::ForkPoints`), plus optional new messages. The
//! parent is only read (through that seq and the event after it); the
//! fork records `forked_from` and the parent's history by reference.
//! Shared by `keel run --fork`, `POST /v1/runs/{id}/fork` and library
//! hosts (`RunRequest::forks`).

use super::{JournalStore, StoreError};
use crate::JournalError;
use crate::store::StoreReads;
use keel_eventlog::history::{self, ChainError, ForkPointError};
use keel_eventlog::{Event, ForkedFrom, HistoryReference, ParentLink, Payload};
use keel_message::{Limits, Message, MessageError, RunId};

/// Why a run cannot be forked at a seq. Nothing of a message is echoed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ForkError {
    /// No stored run has this id.
    #[error("no stored run {run_id} (rule run.known)")]
    UnknownRun {
        /// The id asked for.
        run_id: String,
    },
    /// The seq is not a fork point of the run, or the run has no event
    /// there (rules `fork.point`, `fork.seq_known`).
    #[error("run {run_id} cannot be forked there: {source}")]
    Point {
        /// The run.
        run_id: RunId,
        /// Why.
        #[source]
        source: ForkPointError,
    },
    /// The run, or a run it inherits from, does not rebuild into a
    /// history (a missing or altered parent, a line that does not decode).
    #[error("run {run_id} cannot be forked: {source}")]
    History {
        /// The run.
        run_id: RunId,
        /// Why.
        #[source]
        source: Box<ChainError<StoreError>>,
    },
    /// A new message breaks a message rule (empty, over a bound).
    #[error("the message: {0}")]
    Message(#[from] MessageError),
    /// The journal could not be read.
    #[error(transparent)]
    Journal(#[from] JournalError),
}

impl ForkError {
    /// The rule refused: `run.known`, `fork.point`, `fork.seq_known`, or
    /// `None` for a history, message or journal failure.
    pub fn rule(&self) -> Option<&'static str> {
        match self {
            ForkError::UnknownRun { .. } => Some("run.known"),
            ForkError::Point { source, .. } => Some(source.rule()),
            _ => None,
        }
    }
}

/// A fork's starting point.
#[derive(Debug, Clone)]
pub struct Fork {
    /// The run and seq forked from (what `run.started` records).
    pub forked_from: ForkedFrom,
    /// The parent's history through the seq, plus the new messages.
    pub history: Vec<Message>,
    /// What the fork records instead of the first
    /// [`inherited`](Self::inherited) messages of `history`: the parent,
    /// the seq, and the digest of the parent's lines 1..=seq.
    pub reference: HistoryReference,
    /// How many of `history`'s first messages are the parent's.
    pub inherited: usize,
}

impl Fork {
    /// The messages the fork adds (stored in full).
    pub fn new_messages(&self) -> &[Message] {
        self.history.get(self.inherited..).unwrap_or_default()
    }
}

/// Rebuilds `parent`'s history from `reader` through seq `at` (following
/// the references behind it, checked) and appends `follow_up` (in order),
/// re-identified as messages of `new_run`
/// (`history::follow_up_message_id`). Any stored run may be forked,
/// whatever its status, at a fork point: the lines through it never
/// change.
pub fn fork(
    reader: &(impl StoreReads + ?Sized),
    parent: &str,
    at: u64,
    follow_up: &[Message],
    new_run: &RunId,
    limits: &Limits,
) -> Result<Fork, ForkError> {
    let unknown = || ForkError::UnknownRun {
        run_id: parent.to_owned(),
    };
    reader.run_status(parent)?.ok_or_else(unknown)?;
    let parent = RunId::parse(parent).map_err(|_| unknown())?;
    let rebuilt = history::rebuild_fork_point(&JournalStore(reader), &parent, at, limits).map_err(
        |source| match source {
            ChainError::ForkPoint { run_id, source } if run_id == parent => {
                ForkError::Point { run_id, source }
            }
            source => ForkError::History {
                run_id: parent.clone(),
                source: Box::new(source),
            },
        },
    )?;
    let mut history = rebuilt.history;
    let inherited = history.len();
    history.extend(super::reidentified(follow_up, new_run, limits)?);
    Ok(Fork {
        forked_from: ForkedFrom::new(parent, at),
        history,
        reference: rebuilt.reference,
        inherited,
    })
}

/// Where a stored run comes from, as its `run.started` records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A run of its own.
    Root,
    /// A follow-up of the run named.
    Continues(RunId),
    /// A fork of the run and seq named.
    Fork(ForkedFrom),
    /// A sub-run the named run's call started.
    SubRun(ParentLink),
}

impl Origin {
    /// The run it comes from, if any.
    pub fn parent(&self) -> Option<&RunId> {
        match self {
            Origin::Root => None,
            Origin::Continues(run) => Some(run),
            Origin::Fork(fork) => Some(&fork.run_id),
            Origin::SubRun(link) => Some(&link.run_id),
        }
    }
}

/// Where stored run `run_id` comes from, from its `run.started` (a run
/// without events, or whose first line does not decode, is a root).
pub fn origin(reader: &(impl StoreReads + ?Sized), run_id: &str) -> Result<Origin, JournalError> {
    let first = reader.events_after(run_id, 0, 1)?;
    let started = first
        .first()
        .and_then(|line| Event::decode(line).ok())
        .and_then(|event| event.payload().ok());
    Ok(match started {
        Some(Payload::RunStarted(p)) => match (p.parent, p.forked_from, p.continues) {
            (Some(link), _, _) => Origin::SubRun(link),
            (None, Some(fork), _) => Origin::Fork(fork),
            (None, None, Some(run)) => Origin::Continues(run),
            (None, None, None) => Origin::Root,
        },
        _ => Origin::Root,
    })
}
