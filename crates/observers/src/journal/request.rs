//! What `observe` and `observe_batch` hand the writer thread, and how the
//! writer answers: one request holds one event or a whole batch of one
//! run, and is answered once, after the transaction holding it ended.

use crate::observer::{BatchError, ObserverError};
use keel_eventlog::Event;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

/// Events waiting for their transaction, and where to send the outcome.
///
/// The events are applied in order, each with the journal's per-event
/// checks; the first refused one ends the request (nothing after it is
/// applied), the ones before it commit with the transaction.
pub(crate) struct Request {
    pub(crate) events: Box<[Arc<Event>]>,
    pub(crate) ack: Ack,
}

impl Request {
    /// One event, answered as `observe` answers.
    pub(crate) fn one(
        event: &Arc<Event>,
    ) -> (Request, oneshot::Receiver<Result<(), ObserverError>>) {
        let (ack, answer) = oneshot::channel();
        let request = Request {
            events: Box::new([Arc::clone(event)]),
            ack: Ack::One(ack),
        };
        (request, answer)
    }

    /// A batch, answered as `observe_batch` answers.
    pub(crate) fn batch(
        events: &[Arc<Event>],
    ) -> (Request, oneshot::Receiver<Result<(), BatchError>>) {
        let (ack, answer) = oneshot::channel();
        let request = Request {
            events: events.iter().map(Arc::clone).collect(),
            ack: Ack::Batch(ack),
        };
        (request, answer)
    }

    /// The bytes of its lines (for the writer's batch bound).
    pub(crate) fn bytes(&self) -> usize {
        self.events.iter().map(|e| e.line().len()).sum()
    }
}

/// Where a request's outcome goes.
pub(crate) enum Ack {
    One(oneshot::Sender<Result<(), ObserverError>>),
    Batch(oneshot::Sender<Result<(), BatchError>>),
}

impl Ack {
    /// Sends the outcome; a receiver that is gone (a dropped future) is
    /// fine: what committed stays committed.
    pub(crate) fn send(self, result: Result<(), BatchError>) {
        match self {
            Ack::One(ack) => {
                let _ = ack.send(result.map_err(|e| e.source));
            }
            Ack::Batch(ack) => {
                let _ = ack.send(result);
            }
        }
    }
}

/// What a transaction that commits did with one request.
#[derive(Debug, Default)]
pub(crate) struct Applied {
    /// Events inserted.
    pub(crate) stored: u64,
    /// Events already stored with the same bytes.
    pub(crate) duplicates: u64,
    /// The event that ended the request, if one was refused.
    pub(crate) refused: Option<ObserverError>,
}

impl Applied {
    /// Leading events accepted (stored or duplicate).
    pub(crate) fn accepted(&self) -> usize {
        usize::try_from(self.stored + self.duplicates).unwrap_or(usize::MAX)
    }

    /// Events answered: the accepted ones and the refused one.
    pub(crate) fn answered(&self) -> u64 {
        self.stored + self.duplicates + u64::from(self.refused.is_some())
    }

    /// The request's outcome once its transaction committed.
    pub(crate) fn into_result(self) -> Result<(), BatchError> {
        let acknowledged = self.accepted();
        match self.refused {
            None => Ok(()),
            Some(source) => Err(BatchError {
                acknowledged,
                source,
            }),
        }
    }
}

/// Pushes `first` onto `batch`, then whatever requests are already queued
/// on `rx` while the batch holds fewer than `max_batch` events and
/// `max_batch_bytes` bytes. A request is never split: one
/// `observe_batch` is one transaction, even past the bounds.
pub(crate) fn fill_batch(
    batch: &mut Vec<Request>,
    first: Request,
    rx: &mut mpsc::Receiver<Request>,
    max_batch: usize,
    max_batch_bytes: usize,
) {
    let (mut events, mut bytes) = (first.events.len(), first.bytes());
    batch.push(first);
    while events < max_batch && bytes < max_batch_bytes {
        match rx.try_recv() {
            Ok(request) => {
                events += request.events.len();
                bytes += request.bytes();
                batch.push(request);
            }
            Err(_) => break,
        }
    }
}
