//! Conversations: a follow-up run continues a completed run with a new
//! user message. Its history is the earlier run's, rebuilt from the
//! journal following the references of a chain of continuations
//! (`keel_eventlog::history::rebuild_chain`), plus the new message; the
//! run records the earlier run's history by reference and only the new
//! message in full. Shared by `keel run --continue`,
//! `POST /v1/runs/{id}/messages` and the chat's follow-up runs. A fork
//! ([`fork()`]) starts from a run's history up to a seq instead.

use crate::store::StoreReads;
use crate::{JournalError, JournalReader, RunStatus, RunSummary};
use keel_eventlog::history::{self, ChainError, HistoryStore};
use keel_eventlog::{Event, EventDecodeError, Extra, HistoryReference, Payload, RunInput};
use keel_eventlog::{PayloadError, RunInputReference};
use keel_message::{Limits, Message, MessageError, Role, RunId};

mod fork;
mod tree;
pub use fork::{Fork, ForkError, Origin, fork, origin};
pub use tree::{ConversationTree, MAX_TREE_RUNS, TreeNode, tree};

/// The most bytes of `run.input` payloads one request may cause to be
/// stored: the new messages in full (after their ids are re-minted) and,
/// for a continuation, the reference to what it inherits. A request body
/// is at most 1 MiB, so this refuses only input that grows when stored.
pub const MAX_STORED_INPUT_BYTES: usize = 1 << 20;

/// Why a run cannot be continued. Nothing of the message is echoed.
#[derive(Debug, thiserror::Error)]
pub enum ContinueError {
    /// No stored run has this id.
    #[error("no stored run {run_id} (rule run.known)")]
    UnknownRun {
        /// The id asked for.
        run_id: String,
    },
    /// Only a completed run can be continued.
    #[error(
        "run {run_id} is {status}; only a completed run can be continued (rule run.continuable)"
    )]
    NotContinuable {
        /// The run.
        run_id: String,
        /// Its status.
        status: RunStatus,
    },
    /// The stored run, or a run it inherits from, does not rebuild into a
    /// history (a missing or altered parent, a cycle, a chain too deep, a
    /// line that does not decode).
    #[error("run {run_id} cannot be continued: {source}")]
    History {
        /// The run.
        run_id: String,
        /// Why.
        #[source]
        source: Box<ChainError<StoreError>>,
    },
    /// A stored line did not decode.
    #[error("run {run_id}: a stored line does not decode: {source}")]
    Decode {
        /// The run.
        run_id: String,
        /// Why.
        #[source]
        source: EventDecodeError,
    },
    /// The new message breaks a message rule (empty, over a bound).
    #[error("the message: {0}")]
    Message(#[from] MessageError),
    /// The journal could not be read.
    #[error(transparent)]
    Journal(#[from] JournalError),
}

/// Why a journal page could not be read as events.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The journal failed.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// A stored line did not decode.
    #[error("a stored line does not decode: {0}")]
    Decode(#[from] EventDecodeError),
}

/// A store's reader (a [`JournalReader`] unless named, or a
/// [`StoreReader`](crate::StoreReader)) as a [`HistoryStore`]: pages of
/// decoded events.
#[derive(Debug)]
pub struct JournalStore<'a, R: ?Sized = JournalReader>(pub &'a R);

impl<R: ?Sized> Clone for JournalStore<'_, R> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<R: ?Sized> Copy for JournalStore<'_, R> {}

impl<R: StoreReads + ?Sized> HistoryStore for JournalStore<'_, R> {
    type Error = StoreError;
    fn events_after(
        &self,
        run_id: &RunId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<Event>, StoreError> {
        let lines = self.0.events_after(run_id.as_str(), after, limit)?;
        lines
            .iter()
            .map(|line| Event::decode(line).map_err(StoreError::from))
            .collect()
    }
}

/// Rebuilds the history `run_id` ended with from the journal, following
/// its chain of references (checked); with the reference a run
/// continuing it records.
pub fn rebuild(
    reader: &(impl StoreReads + ?Sized),
    run_id: &RunId,
    limits: &Limits,
) -> Result<history::RebuiltChain, ContinueError> {
    history::rebuild_chain(&JournalStore(reader), run_id, limits).map_err(|source| {
        ContinueError::History {
            run_id: run_id.as_str().to_owned(),
            source: Box::new(source),
        }
    })
}

/// A follow-up run's starting point.
#[derive(Debug, Clone)]
pub struct Continuation {
    /// The run continued.
    pub previous: RunId,
    /// Its history plus the new message.
    pub history: Vec<Message>,
    /// What the run records instead of the first [`inherited`](Self::inherited)
    /// messages of `history`.
    pub reference: HistoryReference,
    /// How many of `history`'s first messages are `previous`'s.
    pub inherited: usize,
}

impl Continuation {
    /// The messages the follow-up adds (stored in full).
    pub fn new_messages(&self) -> &[Message] {
        self.history.get(self.inherited..).unwrap_or_default()
    }
}

/// A request would cause more input to be stored than
/// [`MAX_STORED_INPUT_BYTES`].
#[derive(Debug, thiserror::Error)]
pub enum StoredInputError {
    /// Over the bound.
    #[error(
        "the run's input would store {bytes} bytes, over the {max} a request may store (rule limits.stored_input_bytes)"
    )]
    TooLarge {
        /// What it would store.
        bytes: usize,
        /// The bound.
        max: usize,
    },
    /// A message does not encode as a `run.input` payload.
    #[error(transparent)]
    Payload(#[from] PayloadError),
}

/// The bytes of the `run.input` payloads a run starting from `messages`
/// (after `reference`, for a continuation) stores, checked against
/// [`MAX_STORED_INPUT_BYTES`]. The messages are already bounded (a body,
/// `limits.history_messages`), so they are all counted: the refusal says
/// how much the request would store.
pub fn check_stored_input(
    reference: Option<&HistoryReference>,
    messages: &[Message],
) -> Result<usize, StoredInputError> {
    let reference = reference.map(|history| {
        Payload::RunInputReference(RunInputReference {
            history: history.clone(),
            extra: Extra::new(),
        })
    });
    let mut bytes = match reference {
        Some(payload) => payload.to_canonical()?.len(),
        None => 0,
    };
    for message in messages {
        let payload = Payload::RunInput(RunInput {
            message: message.clone(),
            extra: Extra::new(),
        });
        bytes += payload.to_canonical()?.len();
    }
    if bytes > MAX_STORED_INPUT_BYTES {
        return Err(StoredInputError::TooLarge {
            bytes,
            max: MAX_STORED_INPUT_BYTES,
        });
    }
    Ok(bytes)
}

/// Rebuilds `previous`'s history from `reader` (following its chain of
/// references) and appends `follow_up` (the new messages, in order),
/// re-identified as messages of `new_run`
/// (`history::follow_up_message_id`) so ids stay unique.
pub fn continuation(
    reader: &(impl StoreReads + ?Sized),
    previous: &str,
    follow_up: &[Message],
    new_run: &RunId,
    limits: &Limits,
) -> Result<Continuation, ContinueError> {
    let unknown = || ContinueError::UnknownRun {
        run_id: previous.to_owned(),
    };
    let summary = reader.run_status(previous)?.ok_or_else(unknown)?;
    continuable(&summary)?;
    let previous = RunId::parse(previous).map_err(|_| unknown())?;
    let rebuilt = rebuild(reader, &previous, limits)?;
    let mut history = rebuilt.history;
    let inherited = history.len();
    history.extend(reidentified(follow_up, new_run, limits)?);
    Ok(Continuation {
        previous,
        history,
        reference: rebuilt.reference,
        inherited,
    })
}

/// `follow_up`, re-identified as the new messages of `new_run`
/// (`history::follow_up_message_id`), in order.
fn reidentified(
    follow_up: &[Message],
    new_run: &RunId,
    limits: &Limits,
) -> Result<Vec<Message>, MessageError> {
    follow_up
        .iter()
        .enumerate()
        .map(|(i, message)| {
            let id = history::follow_up_message_id(new_run, i + 1)?;
            Message::new_with(id, message.role(), message.parts().to_vec(), limits)
        })
        .collect()
}

/// The follow-up message of `keel run --continue RUN_ID --message TEXT`
/// (and of `--fork … --message TEXT`).
pub fn user_message(text: &str, limits: &Limits) -> Result<Message, ContinueError> {
    let id = keel_message::MessageId::parse("message")
        .map_err(|e| ContinueError::Message(MessageError::from(e)))?;
    Ok(Message::new_with(
        id,
        Role::User,
        vec![keel_message::Part::text_with(text, limits)?],
        limits,
    )?)
}

fn continuable(summary: &RunSummary) -> Result<(), ContinueError> {
    match summary.status {
        RunStatus::Completed => Ok(()),
        status => Err(ContinueError::NotContinuable {
            run_id: summary.run_id.to_string(),
            status,
        }),
    }
}

/// The run a stored run continues, from its `run.started`.
pub fn continued_run(
    reader: &(impl StoreReads + ?Sized),
    run_id: &str,
) -> Result<Option<RunId>, ContinueError> {
    let first = reader.events_after(run_id, 0, 1)?;
    let Some(line) = first.first() else {
        return Ok(None);
    };
    let event = Event::decode(line).map_err(|source| ContinueError::Decode {
        run_id: run_id.to_owned(),
        source,
    })?;
    Ok(match event.payload() {
        Ok(Payload::RunStarted(p)) => p.continues,
        _ => None,
    })
}
