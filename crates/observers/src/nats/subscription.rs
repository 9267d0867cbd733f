//! [`RemoteSubscription`]: follows one run from the stream, in seq order,
//! with no gap and no duplicate, until the run's terminal.

use super::handle::{JetStreamHandle, seq_of};
use async_nats::jetstream::consumer;
use futures_util::StreamExt;
use keel_eventlog::{Event, SubscribeError};
use std::sync::Arc;

/// Why a remote subscription ended before the run's terminal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RemoteSubscriptionError {
    /// The next message's seq is not the one after the last delivered.
    #[error("gap in run {run_id}: expected seq {expected}, stream holds {found}")]
    Gap {
        /// The run.
        run_id: String,
        /// The seq that should come next.
        expected: u64,
        /// The seq found.
        found: u64,
    },
    /// A message is not a valid event of this run.
    #[error("invalid event in run {run_id} at stream seq {stream_seq}: {detail}")]
    Invalid {
        /// The run.
        run_id: String,
        /// The stream sequence of the message.
        stream_seq: u64,
        /// Why.
        detail: String,
    },
    /// The NATS client or server failed; resume after the last delivered
    /// seq.
    #[error("jetstream: {detail}; resume after {recovery_cursor}")]
    Nats {
        /// The client's message.
        detail: String,
        /// The last delivered seq.
        recovery_cursor: u64,
    },
}

/// Why a remote subscription could not be opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RemoteSubscribeError {
    /// The cursor is not servable (ahead of the run, or expired from the
    /// stream): the same errors as a local subscription.
    #[error(transparent)]
    Cursor(#[from] SubscribeError),
    /// The stream holds no event of this run, or the id is not a run id.
    #[error("run {run_id} is not in the stream")]
    UnknownRun {
        /// The run.
        run_id: String,
    },
    /// The NATS client or server failed.
    #[error("jetstream: {0}")]
    Nats(String),
}

/// Every event of one run after a cursor, read from JetStream: history,
/// then live, in order, no gap, no duplicate, ending after the run's
/// terminal event.
pub struct RemoteSubscription {
    run_id: String,
    cursor: u64,
    finished: bool,
    messages: consumer::pull::Ordered,
}

impl std::fmt::Debug for RemoteSubscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteSubscription")
            .field("run_id", &self.run_id)
            .field("cursor", &self.cursor)
            .field("finished", &self.finished)
            .finish()
    }
}

/// The messages on `subject` from stream seq `start_sequence` on, through
/// an ordered consumer created for this subscription.
async fn ordered_messages(
    handle: &JetStreamHandle,
    subject: String,
    start_sequence: u64,
) -> Result<consumer::pull::Ordered, RemoteSubscribeError> {
    let consumer = handle
        .stream
        .create_consumer(consumer::pull::OrderedConfig {
            filter_subject: subject,
            deliver_policy: consumer::DeliverPolicy::ByStartSequence { start_sequence },
            ..Default::default()
        })
        .await
        .map_err(|e| RemoteSubscribeError::Nats(e.to_string()))?;
    consumer
        .messages()
        .await
        .map_err(|e| RemoteSubscribeError::Nats(e.to_string()))
}

/// Whether a stored line is an event that ends its run (a line that does
/// not decode is not).
fn is_run_terminal_line(line: &[u8]) -> bool {
    std::str::from_utf8(line)
        .ok()
        .and_then(|t| Event::decode(t).ok())
        .is_some_and(|e| e.kind().is_run_terminal())
}

impl RemoteSubscription {
    /// Opens a subscription to `run_id` after `cursor` (0: from the
    /// start).
    pub async fn open(
        handle: &JetStreamHandle,
        run_id: &str,
        cursor: u64,
    ) -> Result<RemoteSubscription, RemoteSubscribeError> {
        // The id becomes part of a subject: one that is not a run id
        // (`*`, `>`, spaces) could be a wildcard over other runs.
        if keel_message::RunId::parse(run_id).is_err() {
            return Err(RemoteSubscribeError::UnknownRun {
                run_id: run_id.to_owned(),
            });
        }
        let subject = handle.config().subject(run_id);
        let (last_stream_seq, last_line) = match handle.last_of(run_id).await {
            Ok(Some(last)) => last,
            Ok(None) => {
                return Err(RemoteSubscribeError::UnknownRun {
                    run_id: run_id.to_owned(),
                });
            }
            Err(e) => return Err(RemoteSubscribeError::Nats(e)),
        };
        let latest = seq_of(&last_line).ok_or_else(|| {
            RemoteSubscribeError::Nats(format!("stream seq {last_stream_seq} is not an event"))
        })?;
        if cursor > latest {
            return Err(SubscribeError::CursorAhead {
                requested: cursor,
                latest,
            }
            .into());
        }
        let first = handle
            .stream
            .get_first_raw_message_by_subject(&subject, 1)
            .await
            .map_err(|e| RemoteSubscribeError::Nats(e.to_string()))?;
        let earliest = seq_of(&first.payload).ok_or_else(|| {
            RemoteSubscribeError::Nats(format!("stream seq {} is not an event", first.sequence))
        })?;
        if cursor + 1 < earliest {
            return Err(SubscribeError::CursorExpired {
                requested: cursor,
                earliest,
                latest,
                recovery_cursor: earliest - 1,
            }
            .into());
        }
        // Subject seqs are contiguous, so event `cursor + 1` is the
        // `(cursor + 1 - earliest)`-th message on the subject; start at
        // the first one and skip the already-delivered ones.
        let messages = ordered_messages(handle, subject, first.sequence).await?;
        // A cursor at the run's terminal: nothing can follow, end at once
        // (the consumer would otherwise wait for events that never come).
        let finished = cursor == latest && is_run_terminal_line(&last_line);
        Ok(RemoteSubscription {
            run_id: run_id.to_owned(),
            cursor,
            finished,
            messages,
        })
    }

    /// The last delivered seq.
    pub fn cursor(&self) -> u64 {
        self.cursor
    }

    /// The next event; `None` after the run's terminal or after an error.
    pub async fn next(&mut self) -> Option<Result<Arc<Event>, RemoteSubscriptionError>> {
        while !self.finished {
            let msg = match self.messages.next().await {
                Some(Ok(m)) => m,
                Some(Err(e)) => return Some(Err(self.fail_nats(e.to_string()))),
                None => return Some(Err(self.fail_nats("consumer ended".to_owned()))),
            };
            let stream_seq = msg.info().map(|i| i.stream_sequence).unwrap_or(0);
            let event = match std::str::from_utf8(&msg.payload)
                .map_err(|e| e.to_string())
                .and_then(|t| Event::decode(t).map_err(|e| e.to_string()))
            {
                Ok(e) if e.run_id().as_str() == self.run_id => e,
                Ok(e) => {
                    return Some(Err(
                        self.fail_invalid(stream_seq, format!("belongs to run {}", e.run_id()))
                    ));
                }
                Err(detail) => return Some(Err(self.fail_invalid(stream_seq, detail))),
            };
            if event.seq() <= self.cursor {
                continue;
            }
            if event.seq() != self.cursor + 1 {
                self.finished = true;
                return Some(Err(RemoteSubscriptionError::Gap {
                    run_id: self.run_id.clone(),
                    expected: self.cursor + 1,
                    found: event.seq(),
                }));
            }
            self.cursor = event.seq();
            if event.kind().is_run_terminal() {
                self.finished = true;
            }
            return Some(Ok(Arc::new(event)));
        }
        None
    }

    fn fail_nats(&mut self, detail: String) -> RemoteSubscriptionError {
        self.finished = true;
        RemoteSubscriptionError::Nats {
            detail,
            recovery_cursor: self.cursor,
        }
    }

    fn fail_invalid(&mut self, stream_seq: u64, detail: String) -> RemoteSubscriptionError {
        self.finished = true;
        RemoteSubscriptionError::Invalid {
            run_id: self.run_id.clone(),
            stream_seq,
            detail,
        }
    }
}
