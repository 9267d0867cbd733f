//! `ScriptedProvider`: a `ModelProvider` that plays back scripts.

use crate::script::{ScriptFail, ScriptItem};
use crate::sync::{Signal, lock, scripted_panic};
use futures_core::Stream;
use keel_message::{ModelRequest, ProviderTag};
use keel_stream::{ModelProvider, ProblemKind, RawItem, RawProblem, RawStream, StartFuture};
use std::collections::VecDeque;
use std::future::Future as _;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

/// The message of the problem a [`ScriptedProvider`] fails to start with
/// once every scripted call has been used.
///
/// ```
/// use keel_stream::ModelProvider;
/// # use keel_message::*; use std::sync::Arc;
/// # let history: Arc<[Message]> = vec![Message::text(MessageId::parse("m1")?, Role::User, "Hi")?].into();
/// # let request = ModelRequest::new(OperationIdIssuer::new().issue(), ModelName::parse("m")?, history, Arc::from([]))?;
/// let provider = keel_testkit::ScriptedProvider::new(vec![]);
/// let rt = tokio::runtime::Builder::new_current_thread().build()?;
/// let Err(problem) = rt.block_on(provider.start(request)) else { unreachable!() };
/// assert_eq!(problem.message, keel_testkit::SCRIPT_EXHAUSTED);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub const SCRIPT_EXHAUSTED: &str = "script exhausted";

/// A [`ModelProvider`] that answers each [`start`](ModelProvider::start)
/// with the next scripted call, in order.
///
/// - Each call's stream yields the [`RawItem`] of every [`ScriptItem`] in
///   order, exactly as scripted (malformed items and items after a
///   terminal included: judging them is the host validator's job).
/// - `delay_ms` sleeps with `tokio::time::sleep`, so paused time
///   (`#[tokio::test(start_paused = true)]`) makes delays instant and
///   deterministic. Polling a delay needs a Tokio runtime with time
///   enabled.
/// - `disconnect` ends the stream there, with no terminal.
/// - [`ScriptItem::Panic`] panics while the stream is polled, at that point
///   of the script; [`with_start_panic`](Self::with_start_panic) panics in
///   the synchronous part of `start` itself (before any future exists).
///   Both are for testing that a host contains a panicking provider.
/// - Once every call is used, `start` fails with a [`RawProblem`] of kind
///   `other`, message [`SCRIPT_EXHAUSTED`], not retryable.
/// - The stream is a plain state machine: no task is spawned, so dropping
///   it (or the start future) stops it and nothing runs afterwards.
///
/// A [`ProviderHandle`] ([`handle`](Self::handle)) counts starts and
/// counts streams dropped before they finished, which is how a test sees
/// that cancellation dropped the provider stream. It keeps the requests
/// themselves only when asked to with
/// [`recording_requests`](Self::recording_requests): a long-lived provider
/// (the `keel` daemon serving a scripted scenario) would otherwise hold
/// every history it was ever sent.
///
/// ```
/// use keel_testkit::{ScriptItem, ScriptedProvider};
/// use keel_stream::*;
/// use keel_message::*;
/// use std::sync::Arc;
///
/// let provider = ScriptedProvider::new(vec![vec![
///     ScriptItem::text("Hi"),
///     ScriptItem::DelayMs(50),
///     ScriptItem::complete(FinishReason::Stop),
/// ]])
/// .recording_requests();
/// let handle = provider.handle();
/// let history: Arc<[Message]> = vec![Message::text(MessageId::parse("m1")?, Role::User, "Hello")?].into();
/// let request = ModelRequest::new(OperationIdIssuer::new().issue(), ModelName::parse("scripted-1")?, history, Arc::from([]))?;
///
/// let rt = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build()?;
/// rt.block_on(async {
///     let mut stream = provider.start(request.clone()).await.expect("scripted");
///     let mut items = Vec::new();
///     while let Some(item) = std::future::poll_fn(|cx| stream.as_mut().poll_next(cx)).await {
///         items.push(item);
///     }
///     assert_eq!(items, vec![RawItem::text("Hi"), RawItem::complete(FinishReason::Stop)]);
///     // The script is used up: the next start fails.
///     let Err(problem) = provider.start(request).await else { panic!("exhausted") };
///     assert_eq!((problem.kind, problem.message.as_str()), (ProblemKind::Other, "script exhausted"));
/// });
/// assert_eq!((handle.started(), handle.requests().len(), handle.dropped()), (2, 2, 0));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct ScriptedProvider {
    shared: Arc<Shared>,
    start_failures: bool,
    /// 1-based numbers of the `start` calls that panic synchronously.
    start_panics: Vec<usize>,
}

/// A view of a [`ScriptedProvider`]'s activity, shared with it (clone it
/// freely; every clone sees the same counts).
///
/// ```
/// use keel_testkit::{ScriptItem, ScriptedProvider};
/// let provider = ScriptedProvider::new(vec![vec![ScriptItem::disconnect()]]);
/// let handle = provider.handle();
/// assert_eq!((handle.started(), handle.dropped(), handle.remaining()), (0, 0, 1));
/// handle.push_call(vec![ScriptItem::text("later")]);
/// assert_eq!(handle.remaining(), 2);
/// ```
#[derive(Debug, Clone)]
pub struct ProviderHandle {
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    signal: Signal,
}

#[derive(Debug, Default)]
struct State {
    calls: VecDeque<Vec<ScriptItem>>,
    /// Whether `start` keeps its requests (off unless asked for).
    recording: bool,
    requests: Vec<ModelRequest>,
    started: usize,
    dropped: usize,
    finished: usize,
    panicked: usize,
}

impl ScriptedProvider {
    /// A provider that answers the `i`-th start with `calls[i]`. It keeps
    /// no requests; see [`recording_requests`](Self::recording_requests).
    pub fn new(calls: Vec<Vec<ScriptItem>>) -> ScriptedProvider {
        ScriptedProvider {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    calls: calls.into(),
                    ..State::default()
                }),
                signal: Signal::default(),
            }),
            start_failures: false,
            start_panics: Vec::new(),
        }
    }

    /// Parses the `calls` array of a scenario's scripted provider
    /// (`[[item, ...], ...]`).
    ///
    /// ```
    /// let provider = keel_testkit::ScriptedProvider::from_json(
    ///     r#"[[{"fail": {"kind": "overloaded", "message": "busy", "retryable": true}}]]"#,
    /// )?;
    /// assert_eq!(provider.handle().remaining(), 1);
    /// # Ok::<(), serde_json::Error>(())
    /// ```
    pub fn from_json(calls: &str) -> Result<ScriptedProvider, serde_json::Error> {
        Ok(Self::new(serde_json::from_str(calls)?))
    }

    /// Makes a call whose script is any delays followed by a `fail` item
    /// fail at *start* instead: the start future sleeps the delays and
    /// returns that problem as `Err`, like an HTTP error status before any
    /// body. By default (without this) the failure is the stream's first
    /// item. The retry position is pristine either way; this only picks
    /// which path through the host a test exercises.
    ///
    /// ```
    /// use keel_testkit::{ScriptItem, ScriptedProvider};
    /// use keel_stream::ProblemKind;
    /// let provider = ScriptedProvider::new(vec![vec![
    ///     ScriptItem::fail(ProblemKind::RateLimited, "slow down", true),
    /// ]])
    /// .with_start_failures();
    /// # let _ = provider;
    /// ```
    pub fn with_start_failures(mut self) -> ScriptedProvider {
        self.start_failures = true;
        self
    }

    /// Makes `start` keep a copy of every [`ModelRequest`] it receives, for
    /// [`ProviderHandle::requests`]. Off by default, because the copies
    /// live as long as the provider: a test that inspects requests asks for
    /// them, a host serving scripted runs does not pay for them. Clones and
    /// handles share the setting.
    ///
    /// ```
    /// use keel_testkit::ScriptedProvider;
    /// let quiet = ScriptedProvider::new(vec![]);
    /// assert!(!quiet.handle().is_recording());
    /// let recording = ScriptedProvider::new(vec![]).recording_requests();
    /// assert!(recording.handle().is_recording());
    /// ```
    pub fn recording_requests(self) -> ScriptedProvider {
        lock(&self.shared.state).recording = true;
        self
    }

    /// Makes the `n`-th call of [`start`](ModelProvider::start) (1-based,
    /// counting every call, exhausted ones included) panic synchronously,
    /// in `start` itself, before it returns a future: the case a host's
    /// unwind guard around *polling* the start future does not cover. That
    /// call is counted as started (and its request recorded when
    /// recording) and as [`panicked`](ProviderHandle::panicked), and takes
    /// no scripted call: the next `start` gets the call this one would
    /// have. Call it again to panic on several starts. The panic payload is
    /// a `String` naming the call.
    ///
    /// ```
    /// use keel_testkit::{ScriptItem, ScriptedProvider};
    /// use keel_stream::{FinishReason, ModelProvider};
    /// # use keel_message::*; use std::sync::Arc;
    /// # let history: Arc<[Message]> = vec![Message::text(MessageId::parse("m1")?, Role::User, "Hi")?].into();
    /// # let request = ModelRequest::new(OperationIdIssuer::new().issue(), ModelName::parse("m")?, history, Arc::from([]))?;
    /// let provider = ScriptedProvider::new(vec![vec![ScriptItem::complete(FinishReason::Stop)]])
    ///     .with_start_panic(1);
    /// let handle = provider.handle();
    /// let caught = std::panic::catch_unwind(|| drop(provider.start(request.clone())));
    /// assert!(caught.is_err(), "the first start panics before returning");
    /// assert_eq!((handle.started(), handle.panicked(), handle.remaining()), (1, 1, 1));
    /// let rt = tokio::runtime::Builder::new_current_thread().build()?;
    /// assert!(rt.block_on(provider.start(request)).is_ok(), "the second gets the script");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_start_panic(mut self, n: usize) -> ScriptedProvider {
        self.start_panics.push(n);
        self
    }

    /// A handle on this provider's activity.
    pub fn handle(&self) -> ProviderHandle {
        ProviderHandle {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl ModelProvider for ScriptedProvider {
    /// `scripted`: its reasoning parts are sent back only to a scripted
    /// provider.
    fn provider_tag(&self) -> ProviderTag {
        ProviderTag::scripted()
    }

    fn start(&self, request: ModelRequest) -> StartFuture {
        let script = match self.take_call(request) {
            Ok(script) => script,
            // Panicking is the purpose: the host must contain a provider
            // that panics before returning its start future.
            Err(n) => scripted_panic(format!("scripted provider panic in start (call {n})")),
        };
        let Some(items) = script else {
            return Box::pin(std::future::ready(Err(RawProblem::new(
                ProblemKind::Other,
                SCRIPT_EXHAUSTED,
                false,
            ))));
        };
        let tracker = Tracker {
            shared: Arc::clone(&self.shared),
            done: false,
        };
        if self.start_failures
            && let Some((delays, fail)) = leading_failure(&items)
        {
            return Box::pin(async move {
                let mut tracker = tracker;
                for ms in delays {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                }
                tracker.finish();
                Err(fail.to_raw())
            });
        }
        let stream: RawStream = Box::pin(ScriptedStream {
            items: items.into(),
            sleep: None,
            tracker,
        });
        Box::pin(std::future::ready(Ok(stream)))
    }
}

impl ScriptedProvider {
    /// Counts one `start` (keeping `request` when recording) and takes its
    /// scripted call, `None` once the script is used up; `Err(n)` when this
    /// `n`-th start is one to panic in (no call is taken then).
    fn take_call(&self, request: ModelRequest) -> Result<Option<Vec<ScriptItem>>, usize> {
        let taken = {
            let mut state = lock(&self.shared.state);
            if state.recording {
                state.requests.push(request);
            }
            state.started += 1;
            let n = state.started;
            if self.start_panics.contains(&n) {
                state.panicked += 1;
                Err(n)
            } else {
                Ok(state.calls.pop_front())
            }
        };
        self.shared.signal.changed();
        taken
    }
}

/// The delays before a leading `fail`, and the failure, if the script
/// starts that way.
fn leading_failure(items: &[ScriptItem]) -> Option<(Vec<u64>, ScriptFail)> {
    let mut delays = Vec::new();
    for item in items {
        match item {
            ScriptItem::DelayMs(ms) => delays.push(*ms),
            ScriptItem::Fail(fail) => return Some((delays, fail.clone())),
            _ => return None,
        }
    }
    None
}

impl ProviderHandle {
    /// How many times `start` was called (including calls after the script
    /// was exhausted).
    pub fn started(&self) -> usize {
        lock(&self.shared.state).started
    }

    /// The requests `start` received, in order, when the provider was
    /// built with [`ScriptedProvider::recording_requests`]; always empty
    /// otherwise (count starts with [`started`](Self::started)).
    pub fn requests(&self) -> Vec<ModelRequest> {
        lock(&self.shared.state).requests.clone()
    }

    /// How many requests are kept (without copying them): equal to
    /// [`started`](Self::started) when recording, 0 otherwise.
    pub fn recorded(&self) -> usize {
        lock(&self.shared.state).requests.len()
    }

    /// Whether the provider keeps its requests
    /// ([`ScriptedProvider::recording_requests`]).
    pub fn is_recording(&self) -> bool {
        lock(&self.shared.state).recording
    }

    /// Streams (or start futures) dropped before they finished. A stream
    /// finishes when it yields a terminal item (`complete`, `fail`) or ends
    /// (script end, `disconnect`); dropping it after that is not counted,
    /// so this counts exactly the calls the host abandoned mid-way
    /// (cancellation, or a validator violation).
    pub fn dropped(&self) -> usize {
        lock(&self.shared.state).dropped
    }

    /// Streams that finished (see [`dropped`](Self::dropped)), plus
    /// start failures from [`ScriptedProvider::with_start_failures`].
    pub fn finished(&self) -> usize {
        lock(&self.shared.state).finished
    }

    /// Scripted panics so far: `start` calls that panicked
    /// ([`ScriptedProvider::with_start_panic`]) plus streams that reached a
    /// [`ScriptItem::Panic`]. A stream that panicked counts here only, not
    /// as finished or dropped.
    pub fn panicked(&self) -> usize {
        lock(&self.shared.state).panicked
    }

    /// Scripted calls not started yet.
    pub fn remaining(&self) -> usize {
        lock(&self.shared.state).calls.len()
    }

    /// Appends one more scripted call.
    pub fn push_call(&self, items: Vec<ScriptItem>) {
        lock(&self.shared.state).calls.push_back(items);
        self.shared.signal.changed();
    }

    /// Waits until `start` has been called at least `n` times.
    ///
    /// ```
    /// # use keel_testkit::ScriptedProvider;
    /// # let rt = tokio::runtime::Builder::new_current_thread().build()?;
    /// # rt.block_on(async {
    /// let handle = ScriptedProvider::new(vec![]).handle();
    /// handle.wait_started(0).await; // already true
    /// # });
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub async fn wait_started(&self, n: usize) {
        self.shared.signal.until(|| self.started() >= n).await;
    }

    /// Waits until at least `n` streams were dropped before finishing.
    pub async fn wait_dropped(&self, n: usize) {
        self.shared.signal.until(|| self.dropped() >= n).await;
    }
}

/// Counts one call as finished or, if dropped first, as dropped.
#[derive(Debug)]
struct Tracker {
    shared: Arc<Shared>,
    done: bool,
}

impl Tracker {
    fn finish(&mut self) {
        if !self.done {
            self.done = true;
            lock(&self.shared.state).finished += 1;
            self.shared.signal.changed();
        }
    }

    /// Counts the call as panicked (so the drop during unwinding is not a
    /// cancellation), then panics with `message`.
    fn panic(&mut self, message: String) -> ! {
        if !self.done {
            self.done = true;
            lock(&self.shared.state).panicked += 1;
            self.shared.signal.changed();
        }
        // Panicking is the purpose: the host must contain a provider stream
        // that panics while polled.
        scripted_panic(message)
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        if !self.done {
            lock(&self.shared.state).dropped += 1;
            self.shared.signal.changed();
        }
    }
}

struct ScriptedStream {
    items: VecDeque<ScriptItem>,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    tracker: Tracker,
}

impl Stream for ScriptedStream {
    type Item = RawItem;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<RawItem>> {
        let this = self.get_mut();
        loop {
            if let Some(sleep) = this.sleep.as_mut() {
                if sleep.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                this.sleep = None;
            }
            match this.items.pop_front() {
                None => {
                    this.tracker.finish();
                    return Poll::Ready(None);
                }
                Some(ScriptItem::Disconnect) => {
                    this.items.clear();
                    this.tracker.finish();
                    return Poll::Ready(None);
                }
                Some(ScriptItem::Panic(message)) => {
                    this.items.clear();
                    this.tracker.panic(message);
                }
                Some(ScriptItem::DelayMs(0)) => {}
                Some(ScriptItem::DelayMs(ms)) => {
                    this.sleep = Some(Box::pin(tokio::time::sleep(Duration::from_millis(ms))));
                }
                Some(item) => {
                    if item.is_terminal() {
                        this.tracker.finish();
                    }
                    if let Some(raw) = item.to_raw() {
                        return Poll::Ready(Some(raw));
                    }
                }
            }
        }
    }
}
