//! `ScriptedInteractions`: a `keel_engine::InteractionHandler` that plays
//! back a script of answers.

use crate::sync::{Signal, lock, scripted_panic};
use keel_engine::{
    InteractionDecision, InteractionError, InteractionFuture, InteractionHandler,
    InteractionRequest,
};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The message of the error a [`ScriptedInteractions`] answers with once
/// its script is used up.
///
/// ```
/// assert_eq!(keel_testkit::INTERACTION_SCRIPT_EXHAUSTED, "script exhausted");
/// ```
pub const INTERACTION_SCRIPT_EXHAUSTED: &str = "script exhausted";

/// One scripted answer: an optional delay, then an [`InteractionAction`].
///
/// ```
/// use keel_testkit::{InteractionAction, InteractionStep};
/// let step = InteractionStep::approve().after_ms(50);
/// assert_eq!((step.delay_ms, step.action), (Some(50), InteractionAction::Approve));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InteractionStep {
    /// Milliseconds to sleep (`tokio::time::sleep`) before acting; not
    /// applied to [`InteractionAction::PanicSync`], which acts before any
    /// future exists.
    pub delay_ms: Option<u64>,
    /// What the handler does.
    pub action: InteractionAction,
}

/// What one scripted interaction does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InteractionAction {
    /// Answer [`InteractionDecision::Approved`].
    Approve,
    /// Answer [`InteractionDecision::Denied`].
    Deny,
    /// Fail with an [`InteractionError`] carrying this message.
    Fail(String),
    /// Never answer: the future stays pending until it is dropped (a
    /// cancellation, or the engine giving up), which the handle counts as
    /// [`cancelled`](InteractionsHandle::cancelled). Unlike a tool's
    /// [`HANG`](crate::HANG) this sets no timer, so under paused time only
    /// the host's own deadline or a cancellation ends it.
    Pending,
    /// Panic with this message while the future is polled (after the
    /// delay, if any).
    Panic(String),
    /// Panic with this message synchronously, in
    /// [`InteractionHandler::handle`] itself, before any future exists: the
    /// case an unwind guard around *polling* the future does not cover.
    PanicSync(String),
}

impl InteractionStep {
    fn of(action: InteractionAction) -> InteractionStep {
        InteractionStep {
            delay_ms: None,
            action,
        }
    }

    /// [`InteractionAction::Approve`].
    pub fn approve() -> InteractionStep {
        Self::of(InteractionAction::Approve)
    }

    /// [`InteractionAction::Deny`].
    pub fn deny() -> InteractionStep {
        Self::of(InteractionAction::Deny)
    }

    /// [`InteractionAction::Fail`].
    pub fn fail(message: impl Into<String>) -> InteractionStep {
        Self::of(InteractionAction::Fail(message.into()))
    }

    /// [`InteractionAction::Pending`].
    pub fn pending() -> InteractionStep {
        Self::of(InteractionAction::Pending)
    }

    /// [`InteractionAction::Panic`]: panics while polled.
    pub fn panic(message: impl Into<String>) -> InteractionStep {
        Self::of(InteractionAction::Panic(message.into()))
    }

    /// [`InteractionAction::PanicSync`]: panics in `handle` itself.
    pub fn panic_sync(message: impl Into<String>) -> InteractionStep {
        Self::of(InteractionAction::PanicSync(message.into()))
    }

    /// The same step, sleeping `ms` milliseconds first.
    pub fn after_ms(mut self, ms: u64) -> InteractionStep {
        self.delay_ms = Some(ms);
        self
    }
}

/// An [`InteractionHandler`] that answers each request with the next
/// [`InteractionStep`] of its script, in order; once the script is used up
/// it fails every request with [`INTERACTION_SCRIPT_EXHAUSTED`] (or, built
/// with [`always`](Self::always), repeats one step forever).
///
/// Everything but [`InteractionAction::PanicSync`] happens inside the
/// returned future (no spawned task), so dropping it abandons the
/// question. The [`InteractionsHandle`] keeps every request it was asked
/// and counts answers, failures, panics and abandoned futures.
///
/// ```
/// use keel_engine::{InteractionDecision, InteractionHandler, InteractionKind, InteractionRequest};
/// use keel_message::*;
/// use keel_testkit::{InteractionStep, ScriptedInteractions};
///
/// let handler = ScriptedInteractions::new(vec![InteractionStep::approve(), InteractionStep::deny()]);
/// let handle = handler.interactions_handle();
/// let request = InteractionRequest {
///     run_id: RunId::parse("run_1")?,
///     turn: 1,
///     interaction_id: InteractionId::parse("i1")?,
///     kind: InteractionKind::Approval {
///         call_id: CallId::parse("c1")?,
///         tool: ToolName::parse("rm")?,
///         arguments: CanonicalJson::parse("{}")?,
///     },
/// };
/// let rt = tokio::runtime::Builder::new_current_thread().enable_time().build()?;
/// rt.block_on(async {
///     assert_eq!(handler.handle(request.clone()).await, Ok(InteractionDecision::Approved));
///     assert_eq!(handler.handle(request.clone()).await, Ok(InteractionDecision::Denied));
///     assert!(handler.handle(request).await.is_err(), "script exhausted");
/// });
/// assert_eq!((handle.asked(), handle.answered(), handle.failed()), (3, 2, 1));
/// assert_eq!(handle.requests()[0].interaction_id.as_str(), "i1");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct ScriptedInteractions {
    shared: Arc<Shared>,
}

/// A view of a [`ScriptedInteractions`]' activity, shared with it (clone
/// it freely; every clone sees the same counts).
///
/// ```
/// use keel_testkit::{InteractionStep, ScriptedInteractions};
/// let handle = ScriptedInteractions::new(vec![InteractionStep::pending()]).interactions_handle();
/// assert_eq!((handle.asked(), handle.remaining()), (0, 1));
/// ```
#[derive(Debug, Clone)]
pub struct InteractionsHandle {
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    signal: Signal,
}

#[derive(Debug, Default)]
struct State {
    steps: VecDeque<InteractionStep>,
    /// Used once `steps` is empty ([`ScriptedInteractions::always`]).
    repeat: Option<InteractionStep>,
    requests: Vec<InteractionRequest>,
    decisions: Vec<InteractionDecision>,
    failed: usize,
    panicked: usize,
    cancelled: usize,
}

impl ScriptedInteractions {
    /// A handler answering the `i`-th request with `script[i]`.
    pub fn new(script: Vec<InteractionStep>) -> ScriptedInteractions {
        Self::with_state(State {
            steps: script.into(),
            ..State::default()
        })
    }

    /// A handler answering every request with `step`.
    ///
    /// ```
    /// use keel_testkit::{InteractionStep, ScriptedInteractions};
    /// let handle = ScriptedInteractions::always(InteractionStep::approve()).interactions_handle();
    /// assert_eq!(handle.remaining(), 0, "no finite script");
    /// ```
    pub fn always(step: InteractionStep) -> ScriptedInteractions {
        Self::with_state(State {
            repeat: Some(step),
            ..State::default()
        })
    }

    fn with_state(state: State) -> ScriptedInteractions {
        ScriptedInteractions {
            shared: Arc::new(Shared {
                state: Mutex::new(state),
                signal: Signal::default(),
            }),
        }
    }

    /// A handle on this handler's activity. (Not called `handle` as on the
    /// other doubles: that name is [`InteractionHandler::handle`].)
    pub fn interactions_handle(&self) -> InteractionsHandle {
        InteractionsHandle {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Records `request` and takes its step (`None` once exhausted).
    fn take_step(&self, request: InteractionRequest) -> Option<InteractionStep> {
        let step = {
            let mut state = lock(&self.shared.state);
            state.requests.push(request);
            let step = state.steps.pop_front().or_else(|| state.repeat.clone());
            if let Some(InteractionAction::PanicSync(_)) = step.as_ref().map(|s| &s.action) {
                state.panicked += 1;
            }
            step
        };
        self.shared.signal.changed();
        step
    }
}

impl InteractionHandler for ScriptedInteractions {
    fn handle(&self, request: InteractionRequest) -> InteractionFuture {
        let step = self.take_step(request);
        if let Some(InteractionStep {
            action: InteractionAction::PanicSync(message),
            ..
        }) = step
        {
            // Panicking is this step's purpose: the engine must contain a
            // handler that panics before returning its future.
            scripted_panic(message)
        }
        let mut guard = Guard {
            shared: Arc::clone(&self.shared),
            done: false,
        };
        Box::pin(async move {
            let Some(step) = step else {
                return guard.fail(INTERACTION_SCRIPT_EXHAUSTED.to_owned());
            };
            if let Some(ms) = step.delay_ms.filter(|ms| *ms > 0) {
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            match step.action {
                InteractionAction::Approve => guard.answer(InteractionDecision::Approved),
                InteractionAction::Deny => guard.answer(InteractionDecision::Denied),
                InteractionAction::Fail(message) => guard.fail(message),
                InteractionAction::Pending => std::future::pending().await,
                InteractionAction::Panic(message) | InteractionAction::PanicSync(message) => {
                    // (PanicSync never gets here: it panicked in `handle`.)
                    guard.panicked();
                    // Panicking is this step's purpose: the engine must catch it.
                    scripted_panic(message)
                }
            }
        })
    }
}

/// Records how one request ended; dropped unfinished, counts it as
/// cancelled.
struct Guard {
    shared: Arc<Shared>,
    done: bool,
}

impl Guard {
    fn end(&mut self, record: impl FnOnce(&mut State)) {
        self.done = true;
        record(&mut lock(&self.shared.state));
        self.shared.signal.changed();
    }

    fn answer(
        &mut self,
        decision: InteractionDecision,
    ) -> Result<InteractionDecision, InteractionError> {
        self.end(|state| state.decisions.push(decision));
        Ok(decision)
    }

    fn fail(&mut self, message: String) -> Result<InteractionDecision, InteractionError> {
        self.end(|state| state.failed += 1);
        Err(InteractionError(message))
    }

    fn panicked(&mut self) {
        self.end(|state| state.panicked += 1);
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if !self.done {
            lock(&self.shared.state).cancelled += 1;
            self.shared.signal.changed();
        }
    }
}

impl InteractionsHandle {
    /// The requests the handler was asked, in order (exhausted ones and
    /// ones it panicked on included).
    pub fn requests(&self) -> Vec<InteractionRequest> {
        lock(&self.shared.state).requests.clone()
    }

    /// How many times `handle` was called.
    pub fn asked(&self) -> usize {
        lock(&self.shared.state).requests.len()
    }

    /// The decisions it answered with, in order.
    pub fn decisions(&self) -> Vec<InteractionDecision> {
        lock(&self.shared.state).decisions.clone()
    }

    /// How many requests it answered with a decision.
    pub fn answered(&self) -> usize {
        lock(&self.shared.state).decisions.len()
    }

    /// How many requests it failed ([`InteractionAction::Fail`], or the
    /// script used up).
    pub fn failed(&self) -> usize {
        lock(&self.shared.state).failed
    }

    /// How many requests it panicked on, in `handle` itself or while
    /// polled.
    pub fn panicked(&self) -> usize {
        lock(&self.shared.state).panicked
    }

    /// Futures dropped before they answered (a pending question abandoned
    /// by cancellation or a deadline).
    pub fn cancelled(&self) -> usize {
        lock(&self.shared.state).cancelled
    }

    /// Script steps not used yet (0 for [`ScriptedInteractions::always`]).
    pub fn remaining(&self) -> usize {
        lock(&self.shared.state).steps.len()
    }

    /// Waits until `handle` was called at least `n` times.
    pub async fn wait_asked(&self, n: usize) {
        self.shared.signal.until(|| self.asked() >= n).await;
    }

    /// Waits until at least `n` futures were dropped before answering.
    pub async fn wait_cancelled(&self, n: usize) {
        self.shared.signal.until(|| self.cancelled() >= n).await;
    }
}
