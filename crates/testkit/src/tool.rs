//! `ScriptedTool`: a `keel_engine::Tool` that plays back a script.

use crate::script::{ShapeError, known_opt};
use crate::sync::{Signal, lock, scripted_panic};
use keel_engine::{
    Tool, ToolError, ToolFuture, ToolInvocation, ToolOutcome, ToolOutput, ToolPolicy, ToolRetry,
};
use keel_message::{CanonicalJson, MessageError, ToolDefinition, ToolName};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a scripted "hang" (a tool step `{"hang": true}`,
/// [`Fault::HangOn`](crate::Fault::HangOn)) sleeps: one year, far beyond
/// any deadline. It is a sleep rather than a future that never completes
/// so that a test under paused Tokio time cannot wait forever; when it does
/// elapse, the hang ends in an error, never in success.
///
/// ```
/// assert_eq!(keel_testkit::HANG.as_secs(), 365 * 86_400);
/// ```
pub const HANG: Duration = Duration::from_secs(365 * 24 * 60 * 60);

/// The message of the error a [`ScriptedTool`] returns once its script is
/// used up.
///
/// ```
/// use keel_engine::{Tool, ToolInvocation};
/// use keel_message::*;
/// let tool = keel_testkit::ScriptedTool::named("t", vec![])?;
/// let invocation = ToolInvocation {
///     run_id: RunId::parse("run_1")?, turn: 1, call_id: CallId::parse("c1")?,
///     arguments: CanonicalJson::parse("{}")?,
/// };
/// let rt = tokio::runtime::Builder::new_current_thread().build()?;
/// let error = rt.block_on(tool.call(invocation)).unwrap_err();
/// assert_eq!(error.message, keel_testkit::TOOL_SCRIPT_EXHAUSTED);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub const TOOL_SCRIPT_EXHAUSTED: &str = "script exhausted";

/// One scripted answer of a tool, in the scenario-file shape of `KEEL.md`:
///
/// | JSON | meaning |
/// | --- | --- |
/// | `{"ok": <json>}` | success; the result content is the JSON's canonical text, or the string itself for a JSON string |
/// | `{"error": {"message", "outcome"?, "retry"?}}` | a [`ToolError`] (typed when `outcome`/`retry` are given) |
/// | `{"panic": "msg"}` | the tool future panics with `msg` while polled |
/// | `{"hang": true}` | the tool sleeps for [`HANG`] (the engine's timeout should fire first) |
/// | none | [`ToolAction::PanicSync`] ([`ToolStep::panic_sync`]): `Tool::call` itself panics, before returning a future (Rust-only) |
///
/// Any of them may add `"delay_ms": N` to sleep first (`tokio::time::sleep`).
/// Exactly one of `ok`, `error`, `panic`, `hang` is required; unknown
/// members are errors. A synchronous panic has no JSON form on purpose (a
/// scenario file cannot make the host's own call panic), and serializing a
/// step that holds one is an error.
///
/// ```
/// use keel_testkit::{ToolAction, ToolStep};
/// let steps: Vec<ToolStep> = serde_json::from_str(r#"[
///     {"ok": {"temp_c": 3}},
///     {"error": {"message": "timed out", "outcome": "uncertain", "retry": "retryable"}},
///     {"delay_ms": 500, "ok": "late"}
/// ]"#)?;
/// assert_eq!(steps[2], ToolStep::ok(serde_json::json!("late")).after_ms(500));
/// assert!(matches!(steps[1].action, ToolAction::Error(_)));
/// assert!(serde_json::from_str::<ToolStep>(r#"{"ok": 1, "panic": "x"}"#).is_err());
/// assert!(serde_json::from_str::<ToolStep>(r#"{"delay_ms": 5}"#).is_err());
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(try_from = "StepWire")]
pub struct ToolStep {
    /// Milliseconds to sleep before acting.
    pub delay_ms: Option<u64>,
    /// What the invocation does.
    pub action: ToolAction,
}

/// What one scripted invocation does.
///
/// ```
/// use keel_testkit::{ToolAction, ToolStep};
/// assert_eq!(ToolStep::hang().action, ToolAction::Hang);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum ToolAction {
    /// Succeed with this JSON (a string is the content itself; anything
    /// else its canonical JSON text).
    Ok(Value),
    /// Fail with this error.
    Error(ScriptToolError),
    /// Panic with this message while the invocation future is polled
    /// (after the step's delay, if any).
    Panic(String),
    /// Panic with this message synchronously, in [`Tool::call`] itself,
    /// before any future exists: the case a host's unwind guard around
    /// *polling* the tool future does not cover. The step's delay does not
    /// apply (there is nothing to wait in). Not accepted from JSON.
    PanicSync(String),
    /// Sleep for [`HANG`].
    Hang,
}

/// A scripted tool error: `{"message", "outcome"?, "retry"?}`.
///
/// ```
/// use keel_testkit::ScriptToolError;
/// use keel_engine::{ToolError, ToolOutcome};
/// let e: ScriptToolError = serde_json::from_str(r#"{"message": "gone", "outcome": "definitive"}"#)?;
/// let error = ToolError::from(e);
/// assert_eq!((error.message.as_str(), error.outcome, error.retry), ("gone", Some(ToolOutcome::Definitive), None));
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptToolError {
    /// What went wrong.
    pub message: String,
    /// Whether the effect definitely did not happen (`definitive`) or may
    /// have (`uncertain`); a value this version does not know is refused
    /// (rule `script.known_value`).
    #[serde(
        default,
        deserialize_with = "known_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub outcome: Option<ToolOutcome>,
    /// `retryable` or `not_retryable` (rule `script.known_value`).
    #[serde(
        default,
        deserialize_with = "known_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub retry: Option<ToolRetry>,
}

impl From<ScriptToolError> for ToolError {
    fn from(e: ScriptToolError) -> ToolError {
        ToolError {
            message: e.message,
            outcome: e.outcome,
            retry: e.retry,
        }
    }
}

impl ToolStep {
    /// `{"ok": value}`.
    pub fn ok(value: Value) -> ToolStep {
        ToolStep {
            delay_ms: None,
            action: ToolAction::Ok(value),
        }
    }

    /// `{"error": {"message"}}`: an untyped failure.
    pub fn error(message: impl Into<String>) -> ToolStep {
        ToolStep {
            delay_ms: None,
            action: ToolAction::Error(ScriptToolError {
                message: message.into(),
                outcome: None,
                retry: None,
            }),
        }
    }

    /// `{"error": {"message", "outcome", "retry"}}`: a typed failure.
    pub fn typed_error(
        message: impl Into<String>,
        outcome: ToolOutcome,
        retry: ToolRetry,
    ) -> ToolStep {
        ToolStep {
            delay_ms: None,
            action: ToolAction::Error(ScriptToolError {
                message: message.into(),
                outcome: Some(outcome),
                retry: Some(retry),
            }),
        }
    }

    /// `{"panic": message}`.
    pub fn panic(message: impl Into<String>) -> ToolStep {
        ToolStep {
            delay_ms: None,
            action: ToolAction::Panic(message.into()),
        }
    }

    /// [`ToolAction::PanicSync`]: `Tool::call` panics with `message` before
    /// returning a future (no JSON form).
    ///
    /// ```
    /// use keel_engine::{Tool, ToolInvocation};
    /// use keel_message::*;
    /// use keel_testkit::{ScriptedTool, ToolStep};
    /// let tool = ScriptedTool::named("t", vec![ToolStep::panic_sync("tool bug")])?;
    /// let handle = tool.handle();
    /// let invocation = ToolInvocation {
    ///     run_id: RunId::parse("run_1")?, turn: 1, call_id: CallId::parse("c1")?,
    ///     arguments: CanonicalJson::parse("{}")?,
    /// };
    /// let caught = std::panic::catch_unwind(|| drop(tool.call(invocation)));
    /// assert!(caught.is_err());
    /// assert_eq!((handle.calls().len(), handle.panicked(), handle.cancelled()), (1, 1, 0));
    /// assert!(serde_json::to_string(&ToolStep::panic_sync("x")).is_err(), "no wire form");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn panic_sync(message: impl Into<String>) -> ToolStep {
        ToolStep {
            delay_ms: None,
            action: ToolAction::PanicSync(message.into()),
        }
    }

    /// `{"hang": true}`.
    pub fn hang() -> ToolStep {
        ToolStep {
            delay_ms: None,
            action: ToolAction::Hang,
        }
    }

    /// The same step, sleeping `ms` milliseconds first.
    pub fn after_ms(mut self, ms: u64) -> ToolStep {
        self.delay_ms = Some(ms);
        self
    }
}

/// A [`Tool`] that answers each invocation with the next [`ToolStep`] of
/// its script, in order; once the script is used up every invocation fails
/// with [`TOOL_SCRIPT_EXHAUSTED`].
///
/// Everything happens inside the returned future (no spawned task), so the
/// engine dropping it cancels it; the [`ToolHandle`] counts such
/// cancellations and keeps the invocations received. The one exception is
/// [`ToolAction::PanicSync`], which panics in `call` itself.
///
/// ```
/// use keel_testkit::{ScriptedTool, ToolStep};
/// use keel_engine::{Tool, ToolInvocation};
/// use keel_message::*;
///
/// let tool = ScriptedTool::named("get_weather", vec![
///     ToolStep::ok(serde_json::json!({"temp_c": 3})),
///     ToolStep::ok(serde_json::json!("sunny")),
/// ])?;
/// let handle = tool.handle();
/// let invocation = ToolInvocation {
///     run_id: RunId::parse("run_1")?,
///     turn: 1,
///     call_id: CallId::parse("c1")?,
///     arguments: CanonicalJson::parse(r#"{"city":"Oslo"}"#)?,
/// };
/// let rt = tokio::runtime::Builder::new_current_thread().enable_time().build()?;
/// rt.block_on(async {
///     assert_eq!(tool.call(invocation.clone()).await, Ok(r#"{"temp_c":3}"#.into()));
///     assert_eq!(tool.call(invocation.clone()).await, Ok("sunny".into()));
///     assert_eq!(tool.call(invocation).await.unwrap_err().message, "script exhausted");
/// });
/// assert_eq!((handle.calls().len(), handle.completed(), handle.cancelled()), (3, 3, 0));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct ScriptedTool {
    definition: ToolDefinition,
    policy: ToolPolicy,
    shared: Arc<ToolShared>,
}

/// A view of a [`ScriptedTool`]'s invocations, shared with it.
///
/// ```
/// use keel_testkit::{ScriptedTool, ToolStep};
/// let tool = ScriptedTool::named("noop", vec![ToolStep::ok(serde_json::json!(null))])?;
/// let handle = tool.handle();
/// assert_eq!((handle.calls().len(), handle.remaining()), (0, 1));
/// # Ok::<(), keel_message::MessageError>(())
/// ```
#[derive(Debug, Clone)]
pub struct ToolHandle {
    shared: Arc<ToolShared>,
}

#[derive(Debug, Default)]
struct ToolShared {
    state: Mutex<ToolState>,
    signal: Signal,
}

#[derive(Debug, Default)]
struct ToolState {
    steps: VecDeque<ToolStep>,
    calls: Vec<ToolInvocation>,
    completed: usize,
    cancelled: usize,
    panicked: usize,
}

impl ScriptedTool {
    /// A tool with this definition answering with `script`, under the
    /// default [`ToolPolicy`].
    pub fn new(definition: ToolDefinition, script: Vec<ToolStep>) -> ScriptedTool {
        ScriptedTool {
            definition,
            policy: ToolPolicy::default(),
            shared: Arc::new(ToolShared {
                state: Mutex::new(ToolState {
                    steps: script.into(),
                    ..ToolState::default()
                }),
                signal: Signal::default(),
            }),
        }
    }

    /// A tool named `name`, described as "scripted tool", whose parameters
    /// schema is `{"type":"object"}`.
    pub fn named(name: &str, script: Vec<ToolStep>) -> Result<ScriptedTool, MessageError> {
        let definition = ToolDefinition::new(
            ToolName::parse(name)?,
            "scripted tool",
            CanonicalJson::parse(r#"{"type":"object"}"#)?,
        )?;
        Ok(Self::new(definition, script))
    }

    /// The same tool under `policy` (approval, failure handling, timeout).
    ///
    /// ```
    /// use keel_testkit::ScriptedTool;
    /// use keel_engine::{OnToolFailure, Tool, ToolPolicy};
    /// let tool = ScriptedTool::named("rm", vec![])?.with_policy(ToolPolicy {
    ///     on_failure: OnToolFailure::EndRun,
    ///     requires_approval: true,
    ///     ..ToolPolicy::default()
    /// });
    /// assert!(tool.policy().requires_approval);
    /// # Ok::<(), keel_message::MessageError>(())
    /// ```
    pub fn with_policy(mut self, policy: ToolPolicy) -> ScriptedTool {
        self.policy = policy;
        self
    }

    /// A handle on this tool's invocations.
    pub fn handle(&self) -> ToolHandle {
        ToolHandle {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl Tool for ScriptedTool {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }

    fn policy(&self) -> ToolPolicy {
        self.policy.clone()
    }

    fn call(&self, invocation: ToolInvocation) -> ToolFuture {
        let step = {
            let mut state = lock(&self.shared.state);
            state.calls.push(invocation);
            let step = state.steps.pop_front();
            if step
                .as_ref()
                .is_some_and(|s| matches!(s.action, ToolAction::PanicSync(_)))
            {
                state.panicked += 1;
            }
            step
        };
        self.shared.signal.changed();
        if let Some(ToolStep {
            action: ToolAction::PanicSync(message),
            ..
        }) = step
        {
            // Panicking is this step's purpose: the engine must contain a
            // tool that panics before returning its future.
            scripted_panic(message)
        }
        let mut guard = CallGuard {
            shared: Arc::clone(&self.shared),
            done: false,
        };
        Box::pin(async move {
            let Some(step) = step else {
                guard.end(End::Completed);
                return Err(ToolError::new(TOOL_SCRIPT_EXHAUSTED));
            };
            if let Some(ms) = step.delay_ms.filter(|ms| *ms > 0) {
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            match step.action {
                ToolAction::Ok(value) => {
                    guard.end(End::Completed);
                    content(&value)
                }
                ToolAction::Error(error) => {
                    guard.end(End::Completed);
                    Err(error.into())
                }
                ToolAction::Panic(message) | ToolAction::PanicSync(message) => {
                    // PanicSync never gets here (it panicked in `call`).
                    guard.end(End::Panicked);
                    // Panicking is this step's purpose: the engine must catch it.
                    scripted_panic(message)
                }
                ToolAction::Hang => {
                    tokio::time::sleep(HANG).await;
                    guard.end(End::Completed);
                    Err(ToolError::new("scripted hang ended"))
                }
            }
        })
    }
}

/// The result content of `{"ok": value}`.
fn content(value: &Value) -> Result<ToolOutput, ToolError> {
    match value {
        Value::String(text) => Ok(ToolOutput::new(text.as_str())),
        other => keel_message::canonical::to_canonical_string(other)
            .map(ToolOutput::new)
            .map_err(|e| ToolError::new(format!("scripted result is not canonical JSON: {e}"))),
    }
}

enum End {
    Completed,
    Panicked,
}

/// Counts an invocation as completed, panicked or (dropped first) cancelled.
struct CallGuard {
    shared: Arc<ToolShared>,
    done: bool,
}

impl CallGuard {
    fn end(&mut self, end: End) {
        self.done = true;
        {
            let mut state = lock(&self.shared.state);
            match end {
                End::Completed => state.completed += 1,
                End::Panicked => state.panicked += 1,
            }
        }
        self.shared.signal.changed();
    }
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        if !self.done {
            lock(&self.shared.state).cancelled += 1;
            self.shared.signal.changed();
        }
    }
}

impl ToolHandle {
    /// The invocations received, in order (including ones after the script
    /// was used up).
    pub fn calls(&self) -> Vec<ToolInvocation> {
        lock(&self.shared.state).calls.clone()
    }

    /// Invocation futures dropped before they finished (cancelled, or
    /// abandoned at a timeout).
    pub fn cancelled(&self) -> usize {
        lock(&self.shared.state).cancelled
    }

    /// Invocation futures that returned (success or error).
    pub fn completed(&self) -> usize {
        lock(&self.shared.state).completed
    }

    /// Invocations that panicked as scripted: futures that panicked while
    /// polled ([`ToolAction::Panic`]) plus `call`s that panicked before
    /// returning one ([`ToolAction::PanicSync`]).
    pub fn panicked(&self) -> usize {
        lock(&self.shared.state).panicked
    }

    /// Script steps not used yet.
    pub fn remaining(&self) -> usize {
        lock(&self.shared.state).steps.len()
    }

    /// Waits until the tool has been invoked at least `n` times.
    ///
    /// ```
    /// # let rt = tokio::runtime::Builder::new_current_thread().build()?;
    /// # rt.block_on(async {
    /// let handle = keel_testkit::ScriptedTool::named("t", vec![]).expect("valid").handle();
    /// handle.wait_called(0).await;
    /// # });
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub async fn wait_called(&self, n: usize) {
        self.shared.signal.until(|| self.calls_len() >= n).await;
    }

    /// Waits until at least `n` invocations were cancelled.
    pub async fn wait_cancelled(&self, n: usize) {
        self.shared.signal.until(|| self.cancelled() >= n).await;
    }

    fn calls_len(&self) -> usize {
        lock(&self.shared.state).calls.len()
    }
}

// ---- serde wire shape ----

fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StepWire {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    delay_ms: Option<u64>,
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    ok: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<ScriptToolError>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    panic: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    hang: Option<bool>,
}

impl TryFrom<StepWire> for ToolStep {
    type Error = ShapeError;

    fn try_from(w: StepWire) -> Result<ToolStep, ShapeError> {
        let action = match (w.ok, w.error, w.panic, w.hang) {
            (Some(value), None, None, None) => ToolAction::Ok(value),
            (None, Some(error), None, None) => ToolAction::Error(error),
            (None, None, Some(message), None) => ToolAction::Panic(message),
            (None, None, None, Some(true)) => ToolAction::Hang,
            (None, None, None, Some(false)) => {
                return Err(ShapeError(
                    "`hang` must be true (use `ok` or `error` for an answer)",
                ));
            }
            (None, None, None, None) => {
                return Err(ShapeError(
                    "a tool step needs one of `ok`, `error`, `panic`, `hang`",
                ));
            }
            _ => {
                return Err(ShapeError(
                    "a tool step takes only one of `ok`, `error`, `panic`, `hang`",
                ));
            }
        };
        Ok(ToolStep {
            delay_ms: w.delay_ms,
            action,
        })
    }
}

impl TryFrom<&ToolStep> for StepWire {
    type Error = ShapeError;

    fn try_from(step: &ToolStep) -> Result<StepWire, ShapeError> {
        let mut wire = StepWire {
            delay_ms: step.delay_ms,
            ok: None,
            error: None,
            panic: None,
            hang: None,
        };
        match &step.action {
            ToolAction::Ok(value) => wire.ok = Some(value.clone()),
            ToolAction::Error(error) => wire.error = Some(error.clone()),
            ToolAction::Panic(message) => wire.panic = Some(message.clone()),
            ToolAction::Hang => wire.hang = Some(true),
            ToolAction::PanicSync(_) => {
                return Err(ShapeError(
                    "a synchronous tool panic has no scenario form (it is for Rust fault tests only)",
                ));
            }
        }
        Ok(wire)
    }
}

/// The scenario shape; a [`ToolAction::PanicSync`] step, which has none,
/// is an error.
impl Serialize for ToolStep {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        StepWire::try_from(self)
            .map_err(serde::ser::Error::custom)?
            .serialize(serializer)
    }
}
