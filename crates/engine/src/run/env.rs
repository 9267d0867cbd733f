//! [`RunEnv`]: the engine-wide pieces a run task uses, and nothing else:
//! the observer pipeline, the message limits and validator policy every
//! run shares, and the shutdown deadline that can extend a run's closing.
//! The engine holds one and hands each run an `Arc` of it, so the run loop
//! never reaches back into the engine's registry.

use keel_message::Limits;
use keel_observers::Pipeline;
use keel_stream::ValidatorConfig;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::time::Instant;

/// What every run of one engine shares.
pub(crate) struct RunEnv {
    pub(crate) pipeline: Arc<Pipeline>,
    pub(crate) message_limits: Limits,
    pub(crate) validator: ValidatorConfig,
    /// Set by shutdown: closing runs may re-offer their terminals until
    /// then, even past their own closing deadline.
    shutdown_until: Mutex<Option<Instant>>,
}

impl RunEnv {
    pub(crate) fn new(
        pipeline: Pipeline,
        message_limits: Limits,
        validator: ValidatorConfig,
    ) -> Self {
        RunEnv {
            pipeline: Arc::new(pipeline),
            message_limits,
            validator,
            shutdown_until: Mutex::new(None),
        }
    }

    /// Records that the engine is shutting down until `until`.
    pub(crate) fn shutdown_until(&self, until: Instant) {
        *self.shutdown_slot() = Some(until);
    }

    /// The latest instant a closing run may re-offer its terminals until:
    /// its own closing deadline, or the shutdown's when that is later.
    pub(crate) fn closing_until(&self, closing_deadline: Duration) -> Instant {
        let own = Instant::now() + closing_deadline;
        match *self.shutdown_slot() {
            Some(shutdown) => own.max(shutdown),
            None => own,
        }
    }

    fn shutdown_slot(&self) -> MutexGuard<'_, Option<Instant>> {
        self.shutdown_until
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
