//! What offering events to the required observers came to: a refusal
//! ([`DispatchError`]) and a batch's result ([`BatchOutcome`]). The
//! pipeline produces them and the window settles on them, so they sit
//! below both.

use crate::observer::ObserverError;
use keel_message::RunId;

/// What one batch achieved across every required observer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchOutcome {
    /// How many leading events of the batch every required observer
    /// acknowledged.
    pub acknowledged: usize,
    /// The first refusal, when not all of them were.
    pub error: Option<DispatchError>,
}

impl BatchOutcome {
    /// Every one of `len` events acknowledged.
    pub fn all(len: usize) -> BatchOutcome {
        BatchOutcome {
            acknowledged: len,
            error: None,
        }
    }
}

/// A required observer refused an event. The event stays committed in the
/// log under its sequence; later required observers and every best-effort
/// observer did **not** see it (they only see acknowledged events).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("required observer {observer} refused run {run_id} seq {seq}: {source}")]
pub struct DispatchError {
    /// The observer's name.
    pub observer: String,
    /// Its position in construction order.
    pub index: usize,
    /// The run.
    pub run_id: RunId,
    /// The committed sequence it refused.
    pub seq: u64,
    /// Why.
    #[source]
    pub source: ObserverError,
}
