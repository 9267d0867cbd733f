//! Scripted stream items: one model call as a scenario file writes it.

use keel_stream::{
    FinishReason, ProblemKind, RawCompletion, RawItem, RawProblem, RawToolCall, RawUsage, WireEnum,
};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use std::fmt;
use std::time::Duration;

/// One item of a scripted model call, in the scenario-file shape of
/// `KEEL.md` ("Scenario files"):
///
/// | JSON | variant |
/// | --- | --- |
/// | `{"text": "..."}` | [`Text`](Self::Text) |
/// | `{"reasoning": "..."}` | [`Reasoning`](Self::Reasoning): a reasoning delta |
/// | `{"reasoning_signature": "..."}` | [`ReasoningSignature`](Self::ReasoningSignature): closes the open reasoning part |
/// | `{"redacted_reasoning": "..."}` | [`RedactedReasoning`](Self::RedactedReasoning): an opaque part, whole |
/// | `{"tool_call": {"call_id", "name", "arguments"}}` (or `"arguments_raw": "<text>"`) | [`ToolCall`](Self::ToolCall) |
/// | `{"complete": {"finish", "usage"?, "metadata"?}}` | [`Complete`](Self::Complete) |
/// | `{"fail": {"kind", "message", "retryable", "retry_after_ms"?}}` | [`Fail`](Self::Fail) |
/// | `{"delay_ms": N}` | [`DelayMs`](Self::DelayMs) |
/// | `{"disconnect": true}` | [`Disconnect`](Self::Disconnect): the stream ends with no terminal |
/// | none | [`Panic`](Self::Panic): the stream panics when polled there (Rust-only, for fault tests) |
///
/// Unknown members and unknown item names are errors. [`Panic`](Self::Panic)
/// has no JSON form on purpose: a scenario file cannot make the host
/// panic, and serializing a script that holds one is an error. What the loader
/// does **not** reject is a script that is malformed as a *stream*: an
/// empty text or reasoning delta, a signature with no reasoning part open
/// (or a second one), an opaque value that is not printable ASCII, an
/// invalid call id or tool name, arguments that are not a
/// JSON object (or, with `arguments_raw`, not JSON at all), a duplicate
/// `call_id`, items after `complete`, a missing terminal. Those reach the
/// host exactly as a misbehaving provider would send them, and the host's
/// [`StreamValidator`](keel_stream::StreamValidator) must turn them into a
/// `protocol` failure.
///
/// ```
/// use keel_testkit::ScriptItem;
/// use keel_stream::{FinishReason, RawItem};
///
/// let call: Vec<ScriptItem> = serde_json::from_str(r#"[
///     {"text": "Checking."},
///     {"tool_call": {"call_id": "c1", "name": "get_weather", "arguments": {"city": "Oslo"}}},
///     {"complete": {"finish": "tool_calls", "usage": {"input_tokens": 12, "output_tokens": 7}}}
/// ]"#)?;
/// assert_eq!(call[0], ScriptItem::text("Checking."));
/// assert_eq!(call[1].to_raw(), Some(RawItem::tool_call("c1", "get_weather", r#"{"city":"Oslo"}"#)));
///
/// // Malformed on purpose is fine for the loader ...
/// let bad: ScriptItem = serde_json::from_str(
///     r#"{"tool_call": {"call_id": "c2", "name": "f", "arguments_raw": "{not json"}}"#,
/// )?;
/// assert_eq!(bad.to_raw(), Some(RawItem::tool_call("c2", "f", "{not json")));
/// // ... but a misspelled member is not.
/// assert!(serde_json::from_str::<ScriptItem>(r#"{"text": "a", "extra": 1}"#).is_err());
/// assert!(serde_json::from_str::<ScriptItem>(r#"{"complete": {"finsh": "stop"}}"#).is_err());
/// // Nor is a finish reason or problem kind this version does not know.
/// let unknown = serde_json::from_str::<ScriptItem>(r#"{"complete": {"finish": "paused"}}"#);
/// assert!(unknown.unwrap_err().to_string().contains("rule script.known_value"));
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(try_from = "ItemWire")]
pub enum ScriptItem {
    /// A text delta (may be empty, on purpose).
    Text(String),
    /// A reasoning delta (may be empty, on purpose).
    Reasoning(String),
    /// The signature of the open reasoning part (any text, on purpose).
    ReasoningSignature(String),
    /// A redacted reasoning part's opaque value (any text, on purpose).
    RedactedReasoning(String),
    /// A finalized tool call.
    ToolCall(ScriptToolCall),
    /// The normal end of the stream.
    Complete(ScriptComplete),
    /// The abnormal end of the stream.
    Fail(ScriptFail),
    /// Wait this many milliseconds (with `tokio::time::sleep`) before the
    /// next item.
    DelayMs(u64),
    /// End the stream here with no terminal, as a dropped connection does.
    Disconnect,
    /// Panic with this message while the stream is polled, at this point of
    /// the script (what came before was yielded; nothing after is). For
    /// testing that a host catches a panicking provider stream; a panic in
    /// the synchronous part of `start` is
    /// [`ScriptedProvider::with_start_panic`](crate::ScriptedProvider::with_start_panic).
    /// Not accepted from JSON.
    ///
    /// ```
    /// use keel_testkit::ScriptItem;
    /// let item = ScriptItem::panic("provider bug");
    /// assert_eq!(item.to_raw(), None);
    /// assert!(serde_json::to_string(&item).is_err(), "no wire form");
    /// assert!(serde_json::from_str::<ScriptItem>(r#"{"panic": "x"}"#).is_err());
    /// ```
    Panic(String),
}

/// A scripted tool call. `call_id` and `name` are plain strings so that a
/// script can carry invalid ones on purpose.
///
/// ```
/// use keel_testkit::{ScriptArguments, ScriptToolCall};
/// let call: ScriptToolCall = serde_json::from_str(
///     r#"{"call_id": "c1", "name": "get_weather", "arguments": {"city": "Oslo"}}"#,
/// )?;
/// assert_eq!(call.arguments, ScriptArguments::Json(serde_json::json!({"city": "Oslo"})));
/// assert_eq!(call.arguments.to_text(), r#"{"city":"Oslo"}"#);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "ToolCallWire", into = "ToolCallWire")]
pub struct ScriptToolCall {
    /// The call id the "model" mints.
    pub call_id: String,
    /// The tool name it calls.
    pub name: String,
    /// The arguments.
    pub arguments: ScriptArguments,
}

/// Scripted tool-call arguments: a JSON value (`"arguments"`, usually an
/// object) or raw text (`"arguments_raw"`, e.g. `"{not json"`), sent to the
/// host as is.
///
/// ```
/// use keel_testkit::ScriptArguments;
/// assert_eq!(ScriptArguments::Json(serde_json::json!([1, 2])).to_text(), "[1,2]");
/// assert_eq!(ScriptArguments::Raw("{not json".into()).to_text(), "{not json");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScriptArguments {
    /// A JSON value, sent as its compact JSON text.
    Json(Value),
    /// Raw text, sent unchanged.
    Raw(String),
}

impl ScriptArguments {
    /// The argument text the provider sends.
    pub fn to_text(&self) -> String {
        match self {
            ScriptArguments::Json(value) => value.to_string(),
            ScriptArguments::Raw(text) => text.clone(),
        }
    }
}

/// Decodes a wire enum value this version knows; a well-formed unknown one
/// is refused (rule `script.known_value`), so a typo in a script fails at
/// load rather than as a protocol failure at run time.
pub(crate) fn known<'de, D, E>(d: D) -> Result<E, D::Error>
where
    D: Deserializer<'de>,
    E: WireEnum + Deserialize<'de>,
{
    let value = E::deserialize(d)?;
    check_known(value)
}

/// As [`known`], for an optional member (`#[serde(default)]` for absence).
pub(crate) fn known_opt<'de, D, E>(d: D) -> Result<Option<E>, D::Error>
where
    D: Deserializer<'de>,
    E: WireEnum + Deserialize<'de>,
{
    Option::<E>::deserialize(d)?.map(check_known).transpose()
}

fn check_known<E: WireEnum, Er: serde::de::Error>(value: E) -> Result<E, Er> {
    if value.is_known() {
        Ok(value)
    } else {
        Err(Er::custom(format_args!(
            "{} is not a value this version knows (rule script.known_value)",
            E::WHAT
        )))
    }
}

/// A scripted completion: `{"finish", "usage"?, "metadata"?}`.
///
/// ```
/// use keel_testkit::{ScriptComplete, ScriptUsage};
/// use keel_stream::FinishReason;
/// let done: ScriptComplete = serde_json::from_str(
///     r#"{"finish": "stop", "usage": {"input_tokens": 3, "output_tokens": 4}}"#,
/// )?;
/// assert_eq!(done.finish, FinishReason::Stop);
/// assert_eq!(done.usage, Some(ScriptUsage { input_tokens: 3, output_tokens: 4 }));
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptComplete {
    /// Why generation stopped: a known value (rule `script.known_value`;
    /// a script is the live path, which produces known values only).
    #[serde(deserialize_with = "known")]
    pub finish: FinishReason,
    /// Token usage; any counts, even ones the validator will refuse.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<ScriptUsage>,
    /// Provider metadata, namespace → object; any JSON (an explicit
    /// `null` is kept, and the validator refuses it).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub metadata: Option<Value>,
}

/// Scripted token counts.
///
/// ```
/// use keel_testkit::ScriptUsage;
/// let usage: ScriptUsage = serde_json::from_str(r#"{"input_tokens": 12, "output_tokens": 7}"#)?;
/// assert_eq!(usage.input_tokens + usage.output_tokens, 19);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptUsage {
    /// Tokens read.
    pub input_tokens: u64,
    /// Tokens generated.
    pub output_tokens: u64,
}

/// A scripted provider problem: `{"kind", "message", "retryable",
/// "retry_after_ms"?}`.
///
/// ```
/// use keel_testkit::ScriptFail;
/// use keel_stream::ProblemKind;
/// let fail: ScriptFail = serde_json::from_str(
///     r#"{"kind": "rate_limited", "message": "slow down", "retryable": true, "retry_after_ms": 1500}"#,
/// )?;
/// assert_eq!(fail.kind, ProblemKind::RateLimited);
/// assert_eq!(fail.to_raw().retry_after, Some(std::time::Duration::from_millis(1500)));
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptFail {
    /// What went wrong: a known kind (rule `script.known_value`).
    #[serde(deserialize_with = "known")]
    pub kind: ProblemKind,
    /// The provider's message (screened by the host).
    pub message: String,
    /// Whether the provider says a retry may succeed.
    pub retryable: bool,
    /// The provider's retry-after, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
}

impl ScriptFail {
    /// A problem with no retry-after.
    pub fn new(kind: ProblemKind, message: impl Into<String>, retryable: bool) -> ScriptFail {
        ScriptFail {
            kind,
            message: message.into(),
            retryable,
            retry_after_ms: None,
        }
    }

    /// The raw problem a provider reports.
    pub fn to_raw(&self) -> RawProblem {
        RawProblem {
            kind: self.kind.clone(),
            message: self.message.clone(),
            retryable: self.retryable,
            retry_after: self.retry_after_ms.map(Duration::from_millis),
        }
    }
}

impl ScriptItem {
    /// `{"text": text}`.
    pub fn text(text: impl Into<String>) -> ScriptItem {
        ScriptItem::Text(text.into())
    }

    /// `{"reasoning": text}`.
    pub fn reasoning(text: impl Into<String>) -> ScriptItem {
        ScriptItem::Reasoning(text.into())
    }

    /// `{"reasoning_signature": signature}`.
    pub fn reasoning_signature(signature: impl Into<String>) -> ScriptItem {
        ScriptItem::ReasoningSignature(signature.into())
    }

    /// `{"redacted_reasoning": value}`.
    pub fn redacted_reasoning(value: impl Into<String>) -> ScriptItem {
        ScriptItem::RedactedReasoning(value.into())
    }

    /// `{"tool_call": {"call_id", "name", "arguments"}}` with JSON
    /// arguments (normally an object).
    pub fn tool_call(
        call_id: impl Into<String>,
        name: impl Into<String>,
        arguments: Value,
    ) -> ScriptItem {
        ScriptItem::ToolCall(ScriptToolCall {
            call_id: call_id.into(),
            name: name.into(),
            arguments: ScriptArguments::Json(arguments),
        })
    }

    /// `{"tool_call": {"call_id", "name", "arguments_raw"}}`: the argument
    /// text is sent unchanged, JSON or not.
    pub fn tool_call_raw(
        call_id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> ScriptItem {
        ScriptItem::ToolCall(ScriptToolCall {
            call_id: call_id.into(),
            name: name.into(),
            arguments: ScriptArguments::Raw(arguments.into()),
        })
    }

    /// `{"complete": {"finish": finish}}`.
    pub fn complete(finish: FinishReason) -> ScriptItem {
        ScriptItem::Complete(ScriptComplete {
            finish,
            usage: None,
            metadata: None,
        })
    }

    /// `{"complete": {"finish", "usage"}}`.
    pub fn complete_with_usage(
        finish: FinishReason,
        input_tokens: u64,
        output_tokens: u64,
    ) -> ScriptItem {
        ScriptItem::Complete(ScriptComplete {
            finish,
            usage: Some(ScriptUsage {
                input_tokens,
                output_tokens,
            }),
            metadata: None,
        })
    }

    /// `{"fail": {"kind", "message", "retryable"}}`.
    pub fn fail(kind: ProblemKind, message: impl Into<String>, retryable: bool) -> ScriptItem {
        ScriptItem::Fail(ScriptFail::new(kind, message, retryable))
    }

    /// `{"delay_ms": N}`, from a duration (whole milliseconds, saturating).
    pub fn delay(duration: Duration) -> ScriptItem {
        ScriptItem::DelayMs(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX))
    }

    /// `{"disconnect": true}`.
    pub fn disconnect() -> ScriptItem {
        ScriptItem::Disconnect
    }

    /// [`Panic`](Self::Panic) with this message (no JSON form).
    pub fn panic(message: impl Into<String>) -> ScriptItem {
        ScriptItem::Panic(message.into())
    }

    /// The raw item the provider yields for this script item; `None` for
    /// [`DelayMs`](Self::DelayMs), [`Disconnect`](Self::Disconnect) and
    /// [`Panic`](Self::Panic), which yield nothing.
    ///
    /// ```
    /// use keel_testkit::ScriptItem;
    /// use keel_stream::{FinishReason, RawItem};
    /// assert_eq!(ScriptItem::text("").to_raw(), Some(RawItem::text("")));
    /// assert_eq!(ScriptItem::complete(FinishReason::Stop).to_raw(), Some(RawItem::complete(FinishReason::Stop)));
    /// assert_eq!(ScriptItem::DelayMs(5).to_raw(), None);
    /// ```
    pub fn to_raw(&self) -> Option<RawItem> {
        Some(match self {
            ScriptItem::Text(text) => RawItem::TextDelta(text.clone()),
            ScriptItem::Reasoning(text) => RawItem::ReasoningDelta(text.clone()),
            ScriptItem::ReasoningSignature(s) => RawItem::ReasoningSignature(s.clone()),
            ScriptItem::RedactedReasoning(v) => RawItem::RedactedReasoning(v.clone()),
            ScriptItem::ToolCall(call) => RawItem::ToolCall(RawToolCall {
                call_id: call.call_id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.to_text(),
            }),
            ScriptItem::Complete(done) => RawItem::Completion(RawCompletion {
                finish: done.finish.clone(),
                usage: done.usage.map(|u| RawUsage {
                    input_tokens: u.input_tokens,
                    output_tokens: u.output_tokens,
                }),
                metadata: done.metadata.clone(),
            }),
            ScriptItem::Fail(fail) => RawItem::Failure(fail.to_raw()),
            ScriptItem::DelayMs(_) | ScriptItem::Disconnect | ScriptItem::Panic(_) => {
                return None;
            }
        })
    }

    /// The script item that yields `raw`. Tool-call arguments become
    /// [`ScriptArguments::Json`] when their text is exactly the compact
    /// JSON of a value, and [`ScriptArguments::Raw`] otherwise (so
    /// whitespace, duplicate keys and invalid JSON survive unchanged).
    ///
    /// ```
    /// use keel_testkit::{ScriptArguments, ScriptItem};
    /// use keel_stream::RawItem;
    /// let raw = RawItem::tool_call("c1", "f", r#"{"a":1,"a":2}"#);
    /// let item = ScriptItem::from_raw(&raw);
    /// let ScriptItem::ToolCall(call) = &item else { unreachable!() };
    /// assert!(matches!(call.arguments, ScriptArguments::Raw(_)));
    /// assert_eq!(item.to_raw(), Some(raw));
    /// ```
    pub fn from_raw(raw: &RawItem) -> ScriptItem {
        match raw {
            RawItem::TextDelta(text) => ScriptItem::Text(text.clone()),
            RawItem::ReasoningDelta(text) => ScriptItem::Reasoning(text.clone()),
            RawItem::ReasoningSignature(s) => ScriptItem::ReasoningSignature(s.clone()),
            RawItem::RedactedReasoning(v) => ScriptItem::RedactedReasoning(v.clone()),
            RawItem::ToolCall(call) => {
                let arguments = match serde_json::from_str::<Value>(&call.arguments) {
                    Ok(value)
                        if serde_json::to_string(&value).is_ok_and(|t| t == call.arguments) =>
                    {
                        ScriptArguments::Json(value)
                    }
                    _ => ScriptArguments::Raw(call.arguments.clone()),
                };
                ScriptItem::ToolCall(ScriptToolCall {
                    call_id: call.call_id.clone(),
                    name: call.name.clone(),
                    arguments,
                })
            }
            RawItem::Completion(done) => ScriptItem::Complete(ScriptComplete {
                finish: done.finish.clone(),
                usage: done.usage.map(|u| ScriptUsage {
                    input_tokens: u.input_tokens,
                    output_tokens: u.output_tokens,
                }),
                metadata: done.metadata.clone(),
            }),
            RawItem::Failure(problem) => ScriptItem::Fail(ScriptFail {
                kind: problem.kind.clone(),
                message: problem.message.clone(),
                retryable: problem.retryable,
                retry_after_ms: problem
                    .retry_after
                    .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            }),
        }
    }

    /// Whether this item ends the stream when the provider yields it
    /// (`complete`, `fail`); `disconnect` ends it with no terminal and is
    /// not one.
    pub fn is_terminal(&self) -> bool {
        matches!(self, ScriptItem::Complete(_) | ScriptItem::Fail(_))
    }
}

impl From<RawItem> for ScriptItem {
    fn from(raw: RawItem) -> ScriptItem {
        ScriptItem::from_raw(&raw)
    }
}

// ---- serde wire shapes ----

/// Deserializes a member that is present as `Some`, even when it is `null`.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ItemWire {
    Text(String),
    Reasoning(String),
    ReasoningSignature(String),
    RedactedReasoning(String),
    ToolCall(ScriptToolCall),
    Complete(ScriptComplete),
    Fail(ScriptFail),
    DelayMs(u64),
    Disconnect(bool),
}

#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolCallWire {
    call_id: String,
    name: String,
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    arguments: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    arguments_raw: Option<String>,
}

/// Why a script item or tool step was refused by the loader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ShapeError(pub(crate) &'static str);

impl fmt::Display for ShapeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl TryFrom<ItemWire> for ScriptItem {
    type Error = ShapeError;

    fn try_from(wire: ItemWire) -> Result<ScriptItem, ShapeError> {
        Ok(match wire {
            ItemWire::Text(text) => ScriptItem::Text(text),
            ItemWire::Reasoning(text) => ScriptItem::Reasoning(text),
            ItemWire::ReasoningSignature(s) => ScriptItem::ReasoningSignature(s),
            ItemWire::RedactedReasoning(v) => ScriptItem::RedactedReasoning(v),
            ItemWire::ToolCall(call) => ScriptItem::ToolCall(call),
            ItemWire::Complete(done) => ScriptItem::Complete(done),
            ItemWire::Fail(fail) => ScriptItem::Fail(fail),
            ItemWire::DelayMs(ms) => ScriptItem::DelayMs(ms),
            ItemWire::Disconnect(true) => ScriptItem::Disconnect,
            ItemWire::Disconnect(false) => {
                return Err(ShapeError(
                    "`disconnect` must be true (leave the item out for no disconnect)",
                ));
            }
        })
    }
}

impl TryFrom<&ScriptItem> for ItemWire {
    type Error = ShapeError;

    fn try_from(item: &ScriptItem) -> Result<ItemWire, ShapeError> {
        Ok(match item {
            ScriptItem::Text(text) => ItemWire::Text(text.clone()),
            ScriptItem::Reasoning(text) => ItemWire::Reasoning(text.clone()),
            ScriptItem::ReasoningSignature(s) => ItemWire::ReasoningSignature(s.clone()),
            ScriptItem::RedactedReasoning(v) => ItemWire::RedactedReasoning(v.clone()),
            ScriptItem::ToolCall(call) => ItemWire::ToolCall(call.clone()),
            ScriptItem::Complete(done) => ItemWire::Complete(done.clone()),
            ScriptItem::Fail(fail) => ItemWire::Fail(fail.clone()),
            ScriptItem::DelayMs(ms) => ItemWire::DelayMs(*ms),
            ScriptItem::Disconnect => ItemWire::Disconnect(true),
            ScriptItem::Panic(_) => {
                return Err(ShapeError(
                    "a `panic` script item has no scenario form (it is for Rust fault tests only)",
                ));
            }
        })
    }
}

/// The scenario shape; a [`ScriptItem::Panic`], which has none, is an
/// error.
impl Serialize for ScriptItem {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        ItemWire::try_from(self)
            .map_err(serde::ser::Error::custom)?
            .serialize(serializer)
    }
}

impl TryFrom<ToolCallWire> for ScriptToolCall {
    type Error = ShapeError;

    fn try_from(call: ToolCallWire) -> Result<ScriptToolCall, ShapeError> {
        let arguments = match (call.arguments, call.arguments_raw) {
            (Some(value), None) => ScriptArguments::Json(value),
            (None, Some(raw)) => ScriptArguments::Raw(raw),
            (Some(_), Some(_)) => {
                return Err(ShapeError(
                    "tool_call has both `arguments` and `arguments_raw`; give one",
                ));
            }
            (None, None) => {
                return Err(ShapeError(
                    "tool_call needs `arguments` (JSON) or `arguments_raw` (text)",
                ));
            }
        };
        Ok(ScriptToolCall {
            call_id: call.call_id,
            name: call.name,
            arguments,
        })
    }
}

impl From<ScriptToolCall> for ToolCallWire {
    fn from(call: ScriptToolCall) -> ToolCallWire {
        let (arguments, arguments_raw) = match call.arguments {
            ScriptArguments::Json(value) => (Some(value), None),
            ScriptArguments::Raw(raw) => (None, Some(raw)),
        };
        ToolCallWire {
            call_id: call.call_id,
            name: call.name,
            arguments,
            arguments_raw,
        }
    }
}
