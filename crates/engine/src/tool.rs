//! Tools: what the engine runs when the model asks. The [`Tool`] trait
//! returns a [`ToolOutput`] (its text and, when the tool cut it, an
//! `OutputCut` the engine records as `output_cut`) or a [`ToolError`]
//! with its outcome and retry; a [`ToolInvocation`] parses its arguments
//! into the tool's own type without echoing input values.

mod agent;

pub(crate) use agent::AgentProvider;
pub use agent::{AgentSpec, AgentSpecError, AgentTool};

use keel_message::{CallId, CanonicalJson, ImagePart, RunId, ToolDefinition};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

pub use keel_eventlog::{ToolOutcome, ToolRetry};

/// The future a tool returns.
pub type ToolFuture = Pin<Box<dyn Future<Output = Result<ToolOutput, ToolError>> + Send + 'static>>;

// The largest byte count an event can record exactly (2^53 − 1): a cut's
// counts are capped at it so they stay JSON-safe integers.
use keel_message::canonical::MAX_SAFE_INTEGER as MAX_JSON_SAFE;

/// What a tool returns: the result content for the model, the images it
/// returned with it (an MCP server's image content, say), and whether the
/// tool cut it (an MCP server's long answer, say).
///
/// The images are recorded in `tool.completed` (member `"images"`) and fed
/// back in the tool result part; the result must fit the message bounds
/// (`limits.image_bytes` per image, `limits.media_parts_per_message`),
/// or the call is a `tool.failed` naming the bound.
///
/// The engine records a cut in `tool.completed` as the member
/// `"output_cut": {"original_bytes": N, "kept_bytes": M}`. A cut output is
/// still held to `limits.part_bytes`: over it, the call is a `tool.failed`
/// (outcome `uncertain`) like any other output.
///
/// ```
/// use keel_engine::{OutputCut, ToolOutput};
/// let whole = ToolOutput::from("sunny");
/// assert_eq!((whole.content(), whole.output_cut()), ("sunny", None));
/// let cut = ToolOutput::cut("sun", 5);
/// assert_eq!(cut.output_cut(), Some(OutputCut { original_bytes: 5, kept_bytes: 3 }));
/// assert_eq!(cut.into_content(), "sun");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    content: String,
    images: Vec<ImagePart>,
    cut: Option<OutputCut>,
}

/// How much of a tool's output was kept: `kept_bytes` of `original_bytes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutputCut {
    /// The size of the whole output, in bytes.
    pub original_bytes: u64,
    /// The size of what was kept (the content), in bytes.
    pub kept_bytes: u64,
}

impl ToolOutput {
    /// The whole output.
    pub fn new(content: impl Into<String>) -> Self {
        ToolOutput {
            content: content.into(),
            images: Vec::new(),
            cut: None,
        }
    }

    /// What is left of an output of `original_bytes` after a cut; the
    /// kept size is `content`'s length. An `original_bytes` below that is
    /// raised to it, and both counts are capped at 2^53 − 1 (what an event
    /// records exactly).
    pub fn cut(content: impl Into<String>, original_bytes: u64) -> Self {
        let content = content.into();
        let kept_bytes = u64::try_from(content.len())
            .unwrap_or(u64::MAX)
            .min(MAX_JSON_SAFE);
        let original_bytes = original_bytes.min(MAX_JSON_SAFE).max(kept_bytes);
        ToolOutput {
            content,
            images: Vec::new(),
            cut: Some(OutputCut {
                original_bytes,
                kept_bytes,
            }),
        }
    }

    /// This output with `images`, in order, after any it has. Validated
    /// images are shared, not copied.
    ///
    /// ```
    /// use keel_engine::ToolOutput;
    /// use keel_message::{ImageMediaType, ImagePart, Limits};
    /// let png = b"\x89PNG\r\n\x1a\n....";
    /// let image = ImagePart::from_bytes_with(ImageMediaType::Png, png, &Limits::default())?;
    /// let output = ToolOutput::from("a tiny image").with_images(vec![image.clone()]);
    /// assert_eq!(output.images(), [image]);
    /// # Ok::<(), keel_message::MessageError>(())
    /// ```
    pub fn with_images(mut self, images: Vec<ImagePart>) -> Self {
        self.images.extend(images);
        self
    }

    /// The result content.
    pub fn content(&self) -> &str {
        &self.content
    }

    /// The images, in order (empty for a text-only result).
    pub fn images(&self) -> &[ImagePart] {
        &self.images
    }

    /// The cut, if the tool made one.
    pub fn output_cut(&self) -> Option<OutputCut> {
        self.cut
    }

    /// The result content, by value.
    pub fn into_content(self) -> String {
        self.content
    }
}

impl From<String> for ToolOutput {
    fn from(content: String) -> Self {
        ToolOutput::new(content)
    }
}

impl From<&str> for ToolOutput {
    fn from(content: &str) -> Self {
        ToolOutput::new(content)
    }
}

/// One invocation of a tool.
#[derive(Debug, Clone)]
pub struct ToolInvocation {
    /// The run.
    pub run_id: RunId,
    /// The turn, from 1.
    pub turn: u64,
    /// The call id the model gave.
    pub call_id: CallId,
    /// The arguments, a canonical JSON object.
    pub arguments: CanonicalJson,
}

impl ToolInvocation {
    /// The arguments as `T`. A mismatch is a typed [`ToolError`]: the effect
    /// did not happen ([`ToolOutcome::Definitive`]) and a call with other
    /// arguments may succeed ([`ToolRetry::Retryable`]), so the model is
    /// told what to fix. Its message names the JSON path of the offending
    /// argument and what was expected there, never the argument's value
    /// (it could be a secret).
    ///
    /// ```
    /// use keel_engine::{ToolInvocation, ToolOutcome, ToolRetry};
    /// use keel_message::{CallId, CanonicalJson, RunId};
    /// #[derive(Debug, serde::Deserialize)]
    /// struct Weather { city: String, days: u8 }
    /// let call = |args: &str| ToolInvocation {
    ///     run_id: RunId::generate(),
    ///     turn: 1,
    ///     call_id: CallId::parse("c1").unwrap(),
    ///     arguments: CanonicalJson::parse(args).unwrap(),
    /// };
    /// let ok: Weather = call(r#"{"city":"Oslo","days":3}"#).parse_arguments()?;
    /// assert_eq!((ok.city.as_str(), ok.days), ("Oslo", 3));
    /// let bad = call(r#"{"city":"Oslo","days":"hunter2"}"#).parse_arguments::<Weather>().unwrap_err();
    /// assert_eq!(bad.message, "arguments at $.days: expected u8 (rule tool.arguments)");
    /// assert_eq!(bad.outcome, Some(ToolOutcome::Definitive));
    /// assert_eq!(bad.retry, Some(ToolRetry::Retryable));
    /// # Ok::<(), keel_engine::ToolError>(())
    /// ```
    pub fn parse_arguments<T: serde::de::DeserializeOwned>(&self) -> Result<T, ToolError> {
        serde_path_to_error::deserialize(self.arguments.to_value()).map_err(|e| {
            let path = json_path(e.path());
            let problem = describe_mismatch(&e.inner().to_string());
            ToolError::typed(
                format!("arguments at {path}: {problem} (rule tool.arguments)"),
                ToolOutcome::Definitive,
                ToolRetry::Retryable,
            )
        })
    }
}

/// `$` for the root, else `$.` and serde_path_to_error's `a.b[0]`.
fn json_path(path: &serde_path_to_error::Path) -> String {
    match path.to_string().as_str() {
        "." => "$".to_owned(),
        rest => format!("$.{rest}"),
    }
}

/// What the deserializer expected, from serde's own message forms, with
/// the part that could quote the input dropped: `invalid type: string
/// "…", expected u8` becomes `expected u8`. A message of another form
/// (a type's custom error, which could quote anything) is not repeated.
fn describe_mismatch(message: &str) -> String {
    const QUOTING: [&str; 5] = [
        "invalid type: ",
        "invalid value: ",
        "invalid length ",
        "unknown variant ",
        "unknown field ",
    ];
    if message.starts_with("missing field `") {
        // The field name comes from the type, not the input.
        return message.to_owned();
    }
    if QUOTING.iter().any(|form| message.starts_with(form))
        && let Some((_, expected)) = message.rsplit_once(", expected ")
    {
        return format!("expected {expected}");
    }
    "does not match the expected type".to_owned()
}

/// A typed tool failure: what went wrong, whether the side effect may have
/// happened, and whether retrying may help.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ToolError {
    /// What went wrong (screened and bounded before it enters an event).
    pub message: String,
    /// Whether the tool's effect definitely did not happen, or may have.
    pub outcome: Option<ToolOutcome>,
    /// Whether retrying may succeed.
    pub retry: Option<ToolRetry>,
}

impl ToolError {
    /// A failure with no typed outcome.
    pub fn new(message: impl Into<String>) -> Self {
        ToolError {
            message: message.into(),
            outcome: None,
            retry: None,
        }
    }

    /// A typed failure.
    pub fn typed(message: impl Into<String>, outcome: ToolOutcome, retry: ToolRetry) -> Self {
        ToolError {
            message: message.into(),
            outcome: Some(outcome),
            retry: Some(retry),
        }
    }
}

/// What a tool failure does to the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnToolFailure {
    /// Feed it back to the model as an error tool result (the default).
    #[default]
    FeedBack,
    /// End the turn and the run as failed, with the call as `cause`.
    EndRun,
}

/// Per-tool policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolPolicy {
    /// What a failure does.
    pub on_failure: OnToolFailure,
    /// Ask the interaction handler for approval before running.
    pub requires_approval: bool,
    /// Overrides the engine's per-call timeout.
    pub timeout: Option<Duration>,
    /// Repeating a call has the same effect as making it once (a read, a
    /// put by key). `tool.started` then records `"idempotent": true`, and
    /// recovery closes a call the host lost mid-way as retryable instead
    /// of `uncertain`. Default false.
    pub idempotent: bool,
}

impl Default for ToolPolicy {
    fn default() -> Self {
        ToolPolicy {
            on_failure: OnToolFailure::FeedBack,
            requires_approval: false,
            timeout: None,
            idempotent: false,
        }
    }
}

/// A tool the engine can run.
///
/// `call` returns a future; the engine runs it inside the run's task with
/// a timeout, catches a panic, and drops it on cancellation, so a tool
/// must be cancel-safe in the same way any future is.
pub trait Tool: Send + Sync + 'static {
    /// What the model is told about the tool.
    fn definition(&self) -> &ToolDefinition;

    /// How failures, approval and timeouts are handled for this tool.
    fn policy(&self) -> ToolPolicy {
        ToolPolicy::default()
    }

    /// Runs one invocation; `Ok` is the result for the model (and the
    /// cut, when the tool shortened it).
    fn call(&self, invocation: ToolInvocation) -> ToolFuture;

    /// The agent tool this is, if it is one: the engine then runs the call
    /// itself, as a child run (see [`AgentTool`]), and never calls
    /// [`call`](Self::call). `None` (the default) for every other tool.
    fn as_agent(&self) -> Option<&AgentTool> {
        None
    }
}

#[cfg(test)]
mod argument_tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code, reason = "only the deserialization is under test")]
    struct Booking {
        guest: Guest,
        rooms: Vec<Room>,
    }
    #[derive(Debug, Deserialize)]
    #[allow(dead_code, reason = "only the deserialization is under test")]
    struct Guest {
        name: String,
        #[serde(deserialize_with = "reject_all")]
        #[serde(default)]
        token: Option<String>,
    }
    #[derive(Debug, Deserialize)]
    #[allow(dead_code, reason = "only the deserialization is under test")]
    enum Room {
        Single,
        Double,
    }

    fn reject_all<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
        let text = String::deserialize(d)?;
        Err(serde::de::Error::custom(format!("token {text} is revoked")))
    }

    fn error_for(arguments: &str) -> ToolError {
        ToolInvocation {
            run_id: RunId::parse("run_1").unwrap(),
            turn: 1,
            call_id: CallId::parse("c1").unwrap(),
            arguments: CanonicalJson::parse(arguments).unwrap(),
        }
        .parse_arguments::<Booking>()
        .unwrap_err()
    }

    #[test]
    fn a_nested_mismatch_names_its_path_and_the_expected_type_only() {
        let e = error_for(r#"{"guest":{"name":"Ann"},"rooms":["Single",{"sk-secret":1}]}"#);
        assert!(
            e.message.starts_with("arguments at $.rooms[1]: expected "),
            "{}",
            e.message
        );
        assert!(!e.message.contains("sk-secret"), "{}", e.message);
        let e = error_for(r#"{"guest":{"name":42},"rooms":[]}"#);
        assert_eq!(
            e.message,
            "arguments at $.guest.name: expected a string (rule tool.arguments)"
        );
        assert_eq!(
            (e.outcome, e.retry),
            (Some(ToolOutcome::Definitive), Some(ToolRetry::Retryable))
        );
    }

    #[test]
    fn values_from_the_input_are_never_repeated() {
        let e = error_for(r#"{"guest":{"name":"Ann"},"rooms":["hunter2"]}"#);
        assert_eq!(
            e.message,
            "arguments at $.rooms[0]: expected `Single` or `Double` (rule tool.arguments)"
        );
        assert!(!e.message.contains("hunter2"), "{}", e.message);
        // An unknown member is named by its path (a key, not a value).
        let e = error_for(r#"{"guest":{"name":"Ann"},"rooms":[],"extra":"hunter2"}"#);
        assert_eq!(
            e.message,
            "arguments at $.extra: expected `guest` or `rooms` (rule tool.arguments)"
        );
        // A type's own error could quote anything: it is not repeated.
        let e = error_for(r#"{"guest":{"name":"Ann","token":"hunter2"},"rooms":[]}"#);
        assert_eq!(
            e.message,
            "arguments at $.guest.token: does not match the expected type (rule tool.arguments)"
        );
    }

    #[test]
    fn a_missing_field_is_named() {
        let e = error_for(r#"{"rooms":[]}"#);
        assert_eq!(
            e.message,
            "arguments at $: missing field `guest` (rule tool.arguments)"
        );
    }
}
