//! Replay: re-run a recorded run against the current code, with no
//! network and no side effect, and compare the two logs.
//!
//! A [`Recording`] reads a run's events (a production run exported with
//! `keel export`, or a test's). From it:
//!
//! - [`ReplayProvider`] serves the recorded model call attempts in order;
//! - [`ReplayTools`] answers tool calls by call id with the recorded
//!   results and failures;
//! - [`ReplayApprovals`] answers approvals with the recorded decisions;
//! - [`Recording::request`] builds the [`RunRequest`] with the recorded
//!   inputs and all three;
//! - [`replay`] starts it on an engine, cancels it where the recorded run
//!   was cancelled, and returns its events;
//! - [`compare`] finds the first event at which the logs differ
//!   ([`Divergence`]), ignoring `ts`, `run_id` and run-derived ids.
//!
//! ```
//! use keel_testkit::replay::{Recording, compare, replay};
//! # fn lines() -> Vec<&'static str> { vec![] }
//! # async fn demo(engine: keel_engine::Engine, lines: Vec<&str>) -> Result<(), Box<dyn std::error::Error>> {
//! let recording = Recording::from_lines(lines)?;
//! let request = recording.request(keel_message::RunId::parse("run_replay")?)?;
//! let replayed = replay(&engine, request, &recording).await?;
//! if let Err(divergence) = compare(recording.events(), &replayed) {
//!     println!("{divergence}");
//! }
//! # Ok(()) }
//! ```

mod compare;
mod progress;
mod provider;
mod recording;
mod tools;

pub use compare::{Divergence, compare};
pub use provider::{ReplayProvider, UNRECORDED_MODEL_CALL};
pub use recording::Recording;
pub use tools::{ReplayApprovals, ReplayTools, UNRECORDED_APPROVAL, UNRECORDED_CALL};

use keel_engine::{Engine, RunRequest};
use keel_eventlog::Event;
use keel_message::{Message, MessageError, RunId};
use std::sync::Arc;

/// Why a run cannot be replayed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// No events.
    #[error("the recording has no events (rule replay.events)")]
    Empty,
    /// The events are not one run's, contiguous from seq 1.
    #[error("event {seq} of the recording is {found} (rule replay.one_run: one run, seqs from 1)")]
    NotOneRun {
        /// The seq expected.
        seq: u64,
        /// The run and seq found there.
        found: String,
    },
    /// An event did not decode.
    #[error("event {seq} of the recording does not decode: {detail} (rule replay.decodable)")]
    Decode {
        /// Its seq.
        seq: u64,
        /// Why.
        detail: String,
    },
    /// The first event is not `run.started`.
    #[error("the recording does not start with run.started (rule replay.run_started)")]
    NoRunStarted,
    /// No model is named by `run.started` or any `model.started`.
    #[error("the recording names no model (rule replay.model)")]
    NoModel,
    /// The run inherits a history by reference and none was given.
    #[error(
        "the recorded run inherits the history of run {run_id} by reference: give it with Recording::request_inheriting (rule replay.input_reference)"
    )]
    InheritedHistory {
        /// The run whose history it inherits.
        run_id: String,
    },
    /// A replayed tool definition could not be built.
    #[error("replayed tool: {0}")]
    Tool(String),
    /// The replayed run could not start.
    #[error("the replayed run did not start: {0}")]
    Start(String),
    /// The replayed run's events could not be followed.
    #[error("the replayed run's events could not be read: {0}")]
    Follow(String),
}

impl Recording {
    /// The request that replays this run under `run_id`: the recorded
    /// model and input messages, `continues` and `chat` as recorded, and a
    /// [`ReplayProvider`], the [`ReplayTools`] and [`ReplayApprovals`].
    /// Add the composition under test (limits, metadata allowlist) to it.
    ///
    /// A run recorded with a history reference (a continued run that
    /// inherits) fails with [`ReplayError::InheritedHistory`]: use
    /// [`request_inheriting`](Self::request_inheriting).
    pub fn request(&self, run_id: RunId) -> Result<RunRequest, ReplayError> {
        if let Some(reference) = &self.reference {
            return Err(ReplayError::InheritedHistory {
                run_id: reference.run_id.to_string(),
            });
        }
        self.request_with(run_id, Vec::new(), ReplayTools::new(self))
    }

    /// As [`request`](Self::request), for a run that inherits a history by
    /// reference: `inherited` is that history (the chain rebuild of the
    /// run it continues); the request records the same reference.
    pub fn request_inheriting(
        &self,
        run_id: RunId,
        inherited: Vec<Message>,
    ) -> Result<RunRequest, ReplayError> {
        self.request_with(run_id, inherited, ReplayTools::new(self))
    }

    /// As [`request_inheriting`](Self::request_inheriting) (with an empty
    /// `inherited` for a run without a reference), with these tools (for
    /// example with a scenario's policies).
    pub fn request_with(
        &self,
        run_id: RunId,
        inherited: Vec<Message>,
        tools: ReplayTools,
    ) -> Result<RunRequest, ReplayError> {
        let inherited_messages = inherited.len();
        let mut history = inherited;
        history.extend(self.inputs.iter().cloned());
        let mut request = RunRequest::new(run_id, self.model.clone(), history)
            .provider(Arc::new(ReplayProvider::new(self)))
            .interaction_handler(Arc::new(ReplayApprovals::new(self)));
        for tool in tools
            .tools()
            .map_err(|e: MessageError| ReplayError::Tool(e.to_string()))?
        {
            request = request.tool(tool);
        }
        if let Some(reference) = &self.reference {
            request = request.inherits(reference.clone(), inherited_messages);
        } else if let Some(previous) = &self.started.continues {
            request = request.continues(previous.clone());
        }
        if let Some(chat) = &self.started.chat {
            request = request.chat_run(chat.clone());
        }
        Ok(request)
    }
}

/// How long [`replay`] waits for the replayed run's next event before it
/// stops holding tool results and approvals back for the recorded order.
pub const QUIET: std::time::Duration = std::time::Duration::from_secs(1);

/// Starts `request` (built by [`Recording::request`]) on `engine`,
/// cancels it once its log reaches [`Recording::cancel_after`] (the
/// recorded cancellation: the replayed run stalls there, as the recorded
/// one did, on a call or approval recorded as cancelled), and returns its
/// events once it has ended.
pub async fn replay(
    engine: &Engine,
    request: RunRequest,
    recording: &Recording,
) -> Result<Vec<Event>, ReplayError> {
    let handle = engine
        .start(request)
        .map_err(|e| ReplayError::Start(e.to_string()))?;
    let mut subscription = handle
        .subscribe(0)
        .map_err(|e| ReplayError::Follow(e.to_string()))?;
    let cancel_after = recording.cancel_after();
    let progress = &recording.progress;
    progress.start(handle.log().clone());
    let mut events = Vec::new();
    loop {
        let next = match tokio::time::timeout(QUIET, subscription.recv()).await {
            Ok(Some(next)) => next,
            Ok(None) => break,
            // Nothing committed for a while: whatever waits for the
            // recorded order would wait forever; let it go.
            Err(_quiet) => {
                progress.release_all();
                continue;
            }
        };
        let event = next.map_err(|e| ReplayError::Follow(e.to_string()))?;
        if cancel_after == Some(event.seq()) {
            handle.cancel();
        }
        let diverged = recording
            .events
            .get(events.len())
            .is_none_or(|r| r.kind() != event.kind());
        if diverged {
            // The order can no longer be the recorded one.
            progress.release_all();
        }
        progress.advanced();
        events.push(Event::clone(&event));
    }
    progress.release_all();
    handle.join().await;
    Ok(events)
}
