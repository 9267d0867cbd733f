//! Conversations: a follow-up run continues a completed run with a new
//! user message. Its history is the earlier run's, rebuilt from the
//! journal (`keel_eventlog::history::rebuild`), plus the new message; the
//! run records which run it continues. Shared by `keel run --continue` and
//! `POST /v1/runs/{id}/messages`.

use keel_eventlog::{Event, EventDecodeError, Payload, history};
use keel_message::{Limits, Message, MessageError, Role, RunId};
use keel_observers::{JournalError, JournalReader, RunStatus, RunSummary};

/// Lines read per journal page.
const PAGE: usize = 512;

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
    /// The stored run does not rebuild into a history.
    #[error("run {run_id} cannot be continued: {source}")]
    History {
        /// The run.
        run_id: String,
        /// Why.
        #[source]
        source: history::HistoryError,
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

/// A follow-up run's starting point.
#[derive(Debug, Clone)]
pub struct Continuation {
    /// The run continued.
    pub previous: RunId,
    /// Its history plus the new message.
    pub history: Vec<Message>,
}

/// Rebuilds `previous`'s history from `reader` and appends `follow_up`
/// (the new messages, in order), re-identified as messages of `new_run`
/// (`history::follow_up_message_id`) so ids stay unique.
pub fn continuation(
    reader: &JournalReader,
    previous: &str,
    follow_up: &[Message],
    new_run: &RunId,
    limits: &Limits,
) -> Result<Continuation, ContinueError> {
    let summary = reader
        .run_status(previous)?
        .ok_or_else(|| ContinueError::UnknownRun {
            run_id: previous.to_owned(),
        })?;
    continuable(&summary)?;
    let events = stored_events(reader, previous)?;
    let mut history =
        history::rebuild(&events, limits).map_err(|source| ContinueError::History {
            run_id: previous.to_owned(),
            source,
        })?;
    for (i, message) in follow_up.iter().enumerate() {
        let id = history::follow_up_message_id(new_run, i + 1)?;
        history.push(Message::new_with(
            id,
            message.role(),
            message.parts().to_vec(),
            limits,
        )?);
    }
    let previous =
        events
            .first()
            .map(|e| e.run_id().clone())
            .ok_or_else(|| ContinueError::UnknownRun {
                run_id: previous.to_owned(),
            })?;
    Ok(Continuation { previous, history })
}

/// The follow-up message of `keel run --continue RUN_ID --message TEXT`.
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
            run_id: summary.run_id.clone(),
            status,
        }),
    }
}

/// Every stored event of `run_id`, decoded, in order.
fn stored_events(reader: &JournalReader, run_id: &str) -> Result<Vec<Event>, ContinueError> {
    let mut events: Vec<Event> = Vec::new();
    loop {
        let after = events.last().map_or(0, Event::seq);
        let page = reader.events_after(run_id, after, PAGE)?;
        let n = page.len();
        for line in page {
            let event = Event::decode(&line).map_err(|source| ContinueError::Decode {
                run_id: run_id.to_owned(),
                source,
            })?;
            events.push(event);
        }
        if n < PAGE {
            return Ok(events);
        }
    }
}

/// The run a stored run continues, from its `run.started`.
pub fn continued_run(reader: &JournalReader, run_id: &str) -> Result<Option<RunId>, ContinueError> {
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
