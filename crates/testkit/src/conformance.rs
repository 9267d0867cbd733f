//! A provider conformance suite: run a [`ModelProvider`] and compare what
//! the host's validator makes of its stream with a fixture's expectation.
//!
//! The expectation format is the one of the provider fixtures (`<case>.json`
//! next to `<case>.sse`):
//!
//! ```text
//! {"status": 200, "headers": {...}, "description": "...",
//!  "expect": {"text": "...", "tool_calls": [{"call_id", "name", "arguments"}],
//!             "finish": "stop" | "tool_calls" | "length" | "content_filter" | null,
//!             "usage": {"input_tokens", "output_tokens"} | null,
//!             "problem": {"kind", "retryable", "position"} | null}}
//! ```
//!
//! An adapter's tests replay each fixture's body through the adapter (in
//! any read sizes), then call [`check_stream`] with the fixture's
//! [`Expectation`]. The check starts the provider, reads its raw stream
//! through a [`StreamValidator`] (default limits; the allowlist of
//! [`CheckOptions`]), and compares, in this order, the concatenated text,
//! the finalized tool calls (`call_id`, `name`, arguments as parsed JSON),
//! the finish reason, the usage and the problem (`kind`, `retryable`,
//! host-computed `position`), reporting the first mismatch. A start
//! failure counts as a pristine problem with nothing yielded. Beyond the
//! expectation it requires that a stream ends right after a terminal the
//! provider sent (nothing after `complete` or `fail`).
//!
//! ```
//! use keel_testkit::conformance::*;
//! use keel_testkit::{ScriptItem, ScriptedProvider};
//! use keel_stream::{FinishReason, ProblemKind};
//! # use keel_message::*; use std::sync::Arc;
//! # let history: Arc<[Message]> = vec![Message::text(MessageId::parse("m1")?, Role::User, "Hi")?].into();
//! # let request = ModelRequest::new(OperationIdIssuer::new().issue(), ModelName::parse("m")?, history, Arc::from([]))?;
//!
//! let fixture = Fixture::from_json("text_only", r#"{
//!   "status": 200, "headers": {"content-type": "text/event-stream"}, "description": "two deltas",
//!   "expect": {"text": "Hello there", "tool_calls": [], "finish": "stop",
//!              "usage": {"input_tokens": 5, "output_tokens": 2}, "problem": null}
//! }"#)?;
//! let provider = ScriptedProvider::new(vec![
//!     vec![ScriptItem::text("Hello"), ScriptItem::text(" there"),
//!          ScriptItem::complete_with_usage(FinishReason::Stop, 5, 2)],
//!     vec![ScriptItem::text("Hello"), ScriptItem::complete(FinishReason::Stop)],
//! ]);
//! let rt = tokio::runtime::Builder::new_current_thread().enable_time().build()?;
//! rt.block_on(async {
//!     assert_eq!(check_stream(&provider, request.clone(), &fixture.expect).await, Ok(()));
//!     let failure = check_stream(&provider, request, &fixture.expect).await.unwrap_err();
//!     assert_eq!(failure.to_string(), r#"text: expected "Hello there", got "Hello""#);
//! });
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use keel_message::{CanonicalJson, Limits, ModelRequest, ToolCallPart};
use keel_stream::{
    Completion, FinishReason, MetadataAllowlist, ModelFailure, ModelProvider, ProblemKind,
    ProviderProblem, RawItem, RawStream, RetryPosition, StreamItem, StreamValidator,
    ValidatorConfig,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One provider fixture: the HTTP response a server would send and what a
/// correct adapter yields from it.
///
/// ```
/// use keel_testkit::conformance::Fixture;
/// let f = Fixture::from_json("auth_401", r#"{
///   "status": 401, "headers": {}, "description": "bad key",
///   "expect": {"text": "", "tool_calls": [], "finish": null, "usage": null,
///              "problem": {"kind": "auth", "retryable": false, "position": "pristine"}}
/// }"#)?;
/// assert_eq!((f.name.as_str(), f.status), ("auth_401", 401));
/// assert!(f.body.is_none());
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Fixture {
    /// The case name (the file stem, e.g. `single_tool_call`).
    pub name: String,
    /// The HTTP status.
    pub status: u16,
    /// Response headers, lowercase names.
    pub headers: BTreeMap<String, String>,
    /// What the case exercises.
    pub description: String,
    /// What a correct adapter yields.
    pub expect: Expectation,
    /// The response body (the `.sse` file next to the `.json`), when loaded
    /// from disk and present.
    pub body: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FixtureWire {
    status: u16,
    headers: BTreeMap<String, String>,
    description: String,
    expect: Expectation,
}

/// What a correct adapter yields for one response. Every member is
/// required (use `null` or `[]`); unknown members are errors.
///
/// ```
/// use keel_testkit::conformance::Expectation;
/// let e: Expectation = serde_json::from_str(r#"{"text": "Hi", "tool_calls": [], "finish": "stop", "usage": null, "problem": null}"#)?;
/// assert_eq!(e.text, "Hi");
/// assert!(serde_json::from_str::<Expectation>(r#"{"text": "Hi"}"#).is_err());
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expectation {
    /// The concatenated text yielded (before any failure).
    pub text: String,
    /// The finalized tool calls, in order.
    pub tool_calls: Vec<ExpectedToolCall>,
    /// The completion's finish reason; `null` when the stream failed. A
    /// value this version does not know is refused (rule
    /// `script.known_value`): an expectation names what an adapter yields.
    #[serde(deserialize_with = "crate::script::known_opt")]
    pub finish: Option<FinishReason>,
    /// The completion's usage; `null` when unreported or the stream failed.
    #[serde(deserialize_with = "nullable")]
    pub usage: Option<ExpectedUsage>,
    /// The failure; `null` for a completion.
    #[serde(deserialize_with = "nullable")]
    pub problem: Option<ExpectedProblem>,
}

/// A member that must be present, and may be `null` (serde's derive would
/// otherwise treat a missing `Option` member as `null`).
fn nullable<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d)
}

/// An expected finalized tool call.
///
/// ```
/// use keel_testkit::conformance::ExpectedToolCall;
/// let c: ExpectedToolCall = serde_json::from_str(r#"{"call_id": "c1", "name": "f", "arguments": {"a": 1}}"#)?;
/// assert_eq!(c.arguments["a"], 1);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectedToolCall {
    /// The call id.
    pub call_id: String,
    /// The tool name.
    pub name: String,
    /// The parsed arguments.
    pub arguments: Value,
}

/// Expected token counts.
///
/// ```
/// use keel_testkit::conformance::ExpectedUsage;
/// let u: ExpectedUsage = serde_json::from_str(r#"{"input_tokens": 88, "output_tokens": 24}"#)?;
/// assert_eq!(u.input_tokens, 88);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectedUsage {
    /// Tokens read.
    pub input_tokens: u64,
    /// Tokens generated.
    pub output_tokens: u64,
}

/// An expected failure.
///
/// ```
/// use keel_testkit::conformance::ExpectedProblem;
/// use keel_stream::{ProblemKind, RetryPosition};
/// let p: ExpectedProblem = serde_json::from_str(r#"{"kind": "overloaded", "retryable": true, "position": "partial"}"#)?;
/// assert_eq!((p.kind, p.position), (ProblemKind::Overloaded, RetryPosition::Partial));
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectedProblem {
    /// The problem kind (a known one: rule `script.known_value`).
    #[serde(deserialize_with = "crate::script::known")]
    pub kind: ProblemKind,
    /// Whether it is retryable.
    pub retryable: bool,
    /// The host-computed retry position (a known one).
    #[serde(deserialize_with = "crate::script::known")]
    pub position: RetryPosition,
}

/// A fixture file that could not be read or parsed.
///
/// ```
/// use keel_testkit::conformance::{Fixture, FixtureError};
/// let err = Fixture::load(std::path::Path::new("/no/such/case.json")).unwrap_err();
/// assert!(matches!(err, FixtureError::Io { .. }));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FixtureError {
    /// Reading a file or directory failed.
    #[error("reading {path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A `.json` file does not match the expectation schema.
    #[error("parsing {path}: {source}")]
    Json {
        /// The path.
        path: PathBuf,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
}

impl Fixture {
    /// Parses a fixture's `.json` text; `body` stays `None`.
    pub fn from_json(name: &str, json: &str) -> Result<Fixture, serde_json::Error> {
        let wire: FixtureWire = serde_json::from_str(json)?;
        Ok(Fixture {
            name: name.to_owned(),
            status: wire.status,
            headers: wire.headers,
            description: wire.description,
            expect: wire.expect,
            body: None,
        })
    }

    /// Loads `<case>.json` and, when it exists, the `<case>.sse` body next
    /// to it.
    pub fn load(json_path: &Path) -> Result<Fixture, FixtureError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| FixtureError::Io { path, source }
        };
        let json = std::fs::read_to_string(json_path).map_err(io(json_path))?;
        let name = json_path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut fixture =
            Fixture::from_json(&name, &json).map_err(|source| FixtureError::Json {
                path: json_path.to_path_buf(),
                source,
            })?;
        let body_path = json_path.with_extension("sse");
        if body_path.exists() {
            fixture.body = Some(std::fs::read_to_string(&body_path).map_err(io(&body_path))?);
        }
        Ok(fixture)
    }

    /// Loads every `*.json` fixture in `dir`, sorted by name.
    ///
    /// ```
    /// let none = keel_testkit::conformance::Fixture::load_dir(std::path::Path::new("/no/such/dir"));
    /// assert!(none.is_err());
    /// ```
    pub fn load_dir(dir: &Path) -> Result<Vec<Fixture>, FixtureError> {
        let io = |source| FixtureError::Io {
            path: dir.to_path_buf(),
            source,
        };
        let mut paths = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(io)? {
            let path = entry.map_err(io)?.path();
            if path.extension().is_some_and(|e| e == "json") {
                paths.push(path);
            }
        }
        paths.sort();
        paths.iter().map(|p| Fixture::load(p)).collect()
    }
}

/// How [`check_stream_with`] validates: the validator's limits, config and
/// metadata allowlist. [`Default`]: default limits and config, an empty
/// allowlist.
///
/// ```
/// use keel_testkit::conformance::CheckOptions;
/// use keel_stream::MetadataAllowlist;
/// let options = CheckOptions::default().with_allowlist(MetadataAllowlist::new(["openai"])?);
/// assert!(options.allowlist.contains("openai"));
/// # Ok::<(), keel_stream::MetadataError>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct CheckOptions {
    /// Bounds the validator enforces.
    pub limits: Limits,
    /// Validator policy.
    pub validator: ValidatorConfig,
    /// Metadata namespaces kept in completions.
    pub allowlist: MetadataAllowlist,
}

impl CheckOptions {
    /// The same options with this allowlist.
    pub fn with_allowlist(mut self, allowlist: MetadataAllowlist) -> CheckOptions {
        self.allowlist = allowlist;
        self
    }
}

/// What a provider's stream amounted to once validated: see [`observe`].
///
/// ```
/// use keel_testkit::conformance::Observed;
/// let nothing = Observed::default();
/// assert_eq!((nothing.text.as_str(), nothing.finish(), nothing.usage()), ("", None, None));
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observed {
    /// Every validated item, ending with exactly one terminal.
    pub items: Vec<StreamItem>,
    /// The text deltas, concatenated.
    pub text: String,
    /// The finalized tool calls, in order.
    pub tool_calls: Vec<ToolCallPart>,
    /// The completion, if the stream completed.
    pub completion: Option<Completion>,
    /// The failure (provider, start, or protocol violation), if it failed.
    pub failure: Option<ModelFailure>,
    /// The first raw item the provider yielded after its own terminal, if
    /// any (there should be none).
    pub after_terminal: Option<RawItem>,
}

impl Observed {
    /// The finish reason, when the stream completed.
    pub fn finish(&self) -> Option<FinishReason> {
        self.completion.as_ref().map(Completion::finish)
    }

    /// The completion's usage, when it completed and reported one.
    pub fn usage(&self) -> Option<ExpectedUsage> {
        self.completion
            .as_ref()
            .and_then(Completion::usage)
            .map(|u| ExpectedUsage {
                input_tokens: u.input_tokens(),
                output_tokens: u.output_tokens(),
            })
    }

    fn push(&mut self, item: StreamItem) {
        match &item {
            StreamItem::TextDelta(delta) => self.text.push_str(delta.text()),
            StreamItem::ToolCall(call) => self.tool_calls.push(call.clone()),
            StreamItem::Completion(done) => self.completion = Some(done.clone()),
            StreamItem::Failure(failure) => self.failure = Some(failure.clone()),
            // Reasoning is compared as items (`items`), not summarized.
            StreamItem::ReasoningDelta(_)
            | StreamItem::ReasoningSignature(_)
            | StreamItem::RedactedReasoning(_) => {}
        }
        self.items.push(item);
    }
}

/// The first way a provider's output differed from its expectation, or
/// broke a generic rule.
///
/// ```
/// use keel_testkit::conformance::ConformanceFailure;
/// let f = ConformanceFailure::Mismatch { field: "finish".into(), expected: "stop".into(), actual: "length".into() };
/// assert_eq!(f.to_string(), "finish: expected stop, got length");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConformanceFailure {
    /// A field differs. `field` is a path such as `tool_calls[1].arguments`
    /// or `problem.position`.
    #[error("{field}: expected {expected}, got {actual}")]
    Mismatch {
        /// Which field.
        field: String,
        /// The expected value, rendered.
        expected: String,
        /// The actual value, rendered.
        actual: String,
    },
    /// The provider yielded an item after its terminal.
    #[error("the stream yielded a {item} item after its terminal; it must end there")]
    ItemAfterTerminal {
        /// The raw item's kind (`text`, `reasoning`, `reasoning_signature`,
        /// `redacted_reasoning`, `tool_call`, `completion`, `failure`).
        item: &'static str,
    },
    /// [`check_secret_free`]: an item carries the secret (the item's
    /// index is named; the secret is not).
    #[error("item {index} ({item}) carries the API key")]
    SecretLeaked {
        /// The item's index in [`Observed::items`].
        index: usize,
        /// The item's kind (`text`, `tool_call`, `completion`, `failure`, …).
        item: &'static str,
    },
    /// [`check_drop_mid_stream`] could not drop mid-stream: the stream
    /// ended (or failed to start) first.
    #[error("the stream ended after {read} item(s), before it could be dropped mid-stream")]
    EndedBeforeDrop {
        /// Items read before it ended.
        read: usize,
    },
}

fn raw_kind(item: &RawItem) -> &'static str {
    match item {
        RawItem::TextDelta(_) => "text",
        RawItem::ReasoningDelta(_) => "reasoning",
        RawItem::ReasoningSignature(_) => "reasoning_signature",
        RawItem::RedactedReasoning(_) => "redacted_reasoning",
        RawItem::ToolCall(_) => "tool_call",
        RawItem::Completion(_) => "completion",
        RawItem::Failure(_) => "failure",
    }
}

async fn next_raw(stream: &mut RawStream) -> Option<RawItem> {
    std::future::poll_fn(|cx| stream.as_mut().poll_next(cx)).await
}

/// Starts `provider` with `request` and reads its whole stream through a
/// [`StreamValidator`] built from `options`, as a host would:
///
/// - a start failure becomes a pristine [`ModelFailure`] and nothing else;
/// - each raw item is validated; the first violation ends the stream as a
///   `protocol` failure at the position before it, and the stream is
///   dropped;
/// - a stream that ends with no terminal becomes the `NoTerminal`
///   protocol failure;
/// - after a terminal the provider sent, the stream is polled once more,
///   and what it yields (it should yield nothing) is kept in
///   [`Observed::after_terminal`].
///
/// ```
/// use keel_testkit::conformance::{CheckOptions, observe};
/// use keel_testkit::{ScriptItem, ScriptedProvider};
/// use keel_stream::{ProblemKind, RetryPosition};
/// # use keel_message::*; use std::sync::Arc;
/// # let history: Arc<[Message]> = vec![Message::text(MessageId::parse("m1")?, Role::User, "Hi")?].into();
/// # let request = ModelRequest::new(OperationIdIssuer::new().issue(), ModelName::parse("m")?, history, Arc::from([]))?;
/// let provider = ScriptedProvider::new(vec![vec![ScriptItem::text("a"), ScriptItem::text("")]]);
/// let rt = tokio::runtime::Builder::new_current_thread().enable_time().build()?;
/// let seen = rt.block_on(observe(&provider, request, &CheckOptions::default()));
/// let failure = seen.failure.expect("the empty delta is a violation");
/// assert_eq!((failure.kind(), failure.position()), (ProblemKind::Protocol, RetryPosition::Partial));
/// assert_eq!(seen.text, "a");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub async fn observe(
    provider: &dyn ModelProvider,
    request: ModelRequest,
    options: &CheckOptions,
) -> Observed {
    let mut seen = Observed::default();
    let mut validator = StreamValidator::new(
        options.validator.clone(),
        options.limits.clone(),
        options.allowlist.clone(),
    );
    let mut stream = match provider.start(request).await {
        Ok(stream) => stream,
        Err(raw) => {
            let problem = ProviderProblem::from_raw(raw, &options.limits);
            seen.push(StreamItem::Failure(ModelFailure::at_start(problem)));
            return seen;
        }
    };
    loop {
        let position = validator.position();
        let (item, from_provider) = match next_raw(&mut stream).await {
            Some(raw) => match validator.accept(raw) {
                Ok(item) => (item, true),
                Err(violation) => (
                    StreamItem::Failure(violation.into_failure_with(position, &options.limits)),
                    false,
                ),
            },
            None => match validator.end_of_stream() {
                Ok(()) => break,
                Err(violation) => (
                    StreamItem::Failure(violation.into_failure_with(position, &options.limits)),
                    false,
                ),
            },
        };
        let terminal = item.is_terminal();
        seen.push(item);
        if terminal {
            if from_provider {
                seen.after_terminal = next_raw(&mut stream).await;
            }
            break;
        }
    }
    seen
}

/// Compares `seen` with `expect`, in order: text, tool calls (count, then
/// each `call_id`, `name`, `arguments` compared as canonical JSON), finish,
/// usage, problem (`kind`, `retryable`, `position`); then requires that
/// nothing came after the provider's terminal.
///
/// ```
/// use keel_testkit::conformance::{Expectation, Observed, compare};
/// let expect = Expectation { text: String::new(), tool_calls: vec![], finish: None, usage: None, problem: None };
/// let failure = compare(&expect, &Observed::default()).unwrap_err();
/// assert_eq!(failure.to_string(), "terminal: expected a completion, got none");
/// ```
pub fn compare(expect: &Expectation, seen: &Observed) -> Result<(), ConformanceFailure> {
    if expect.text != seen.text {
        return Err(mismatch(
            "text",
            format!("{:?}", expect.text),
            format!("{:?}", seen.text),
        ));
    }
    compare_tool_calls(&expect.tool_calls, &seen.tool_calls)?;
    let show = |f: Option<FinishReason>| f.map_or("null".to_owned(), |f| f.as_str().to_owned());
    if expect.finish != seen.finish() {
        return Err(mismatch(
            "finish",
            show(expect.finish.clone()),
            show(seen.finish()),
        ));
    }
    let show = |u: Option<ExpectedUsage>| {
        u.map_or("null".to_owned(), |u| {
            format!(
                "{{input_tokens: {}, output_tokens: {}}}",
                u.input_tokens, u.output_tokens
            )
        })
    };
    if expect.usage != seen.usage() {
        return Err(mismatch("usage", show(expect.usage), show(seen.usage())));
    }
    compare_problem(expect.problem.as_ref(), seen)?;
    if let Some(item) = &seen.after_terminal {
        return Err(ConformanceFailure::ItemAfterTerminal {
            item: raw_kind(item),
        });
    }
    Ok(())
}

/// The [`ConformanceFailure::Mismatch`] of `field`.
fn mismatch(field: &str, expected: String, actual: String) -> ConformanceFailure {
    ConformanceFailure::Mismatch {
        field: field.to_owned(),
        expected,
        actual,
    }
}

/// The tool-call part of [`compare`]: the count (both sides' call ids
/// shown on a mismatch), then each call in order.
fn compare_tool_calls(
    expect: &[ExpectedToolCall],
    seen: &[ToolCallPart],
) -> Result<(), ConformanceFailure> {
    if expect.len() != seen.len() {
        return Err(mismatch(
            "tool_calls.len",
            format!(
                "{} {:?}",
                expect.len(),
                expect.iter().map(|c| &c.call_id).collect::<Vec<_>>()
            ),
            format!(
                "{} {:?}",
                seen.len(),
                seen.iter()
                    .map(|c| c.call_id().as_str())
                    .collect::<Vec<_>>()
            ),
        ));
    }
    for (i, (want, got)) in expect.iter().zip(seen).enumerate() {
        compare_tool_call(i, want, got)?;
    }
    Ok(())
}

/// Tool call `i`: `call_id`, `name`, then `arguments` as canonical JSON
/// (expected arguments that cannot be canonicalized are compared, and
/// shown, as serde_json writes them).
fn compare_tool_call(
    i: usize,
    want: &ExpectedToolCall,
    got: &ToolCallPart,
) -> Result<(), ConformanceFailure> {
    if want.call_id != got.call_id().as_str() {
        return Err(mismatch(
            &format!("tool_calls[{i}].call_id"),
            format!("{:?}", want.call_id),
            format!("{:?}", got.call_id().as_str()),
        ));
    }
    if want.name != got.name().as_str() {
        return Err(mismatch(
            &format!("tool_calls[{i}].name"),
            format!("{:?}", want.name),
            format!("{:?}", got.name().as_str()),
        ));
    }
    let wanted = CanonicalJson::from_value(&want.arguments)
        .map(|c| c.as_str().to_owned())
        .unwrap_or_else(|_| want.arguments.to_string());
    if wanted != got.arguments().as_str() {
        return Err(mismatch(
            &format!("tool_calls[{i}].arguments"),
            wanted,
            got.arguments().as_str().to_owned(),
        ));
    }
    Ok(())
}

/// The terminal part of [`compare`]: with no problem expected the stream
/// must have completed; otherwise it must have failed with the expected
/// `kind`, `retryable` and `position`, in that order.
fn compare_problem(
    expect: Option<&ExpectedProblem>,
    seen: &Observed,
) -> Result<(), ConformanceFailure> {
    match (expect, &seen.failure) {
        (None, None) => {
            if seen.completion.is_none() {
                return Err(mismatch("terminal", "a completion".into(), "none".into()));
            }
        }
        (Some(want), None) => {
            return Err(mismatch(
                "problem",
                format!("{want:?}"),
                "null (the stream completed)".into(),
            ));
        }
        (None, Some(got)) => {
            return Err(mismatch("problem", "null".into(), got.to_string()));
        }
        (Some(want), Some(got)) => {
            if want.kind != got.kind() {
                return Err(mismatch(
                    "problem.kind",
                    want.kind.to_string(),
                    format!("{} ({})", got.kind(), got.problem().message()),
                ));
            }
            if want.retryable != got.problem().retryable() {
                return Err(mismatch(
                    "problem.retryable",
                    want.retryable.to_string(),
                    got.problem().retryable().to_string(),
                ));
            }
            if want.position != got.position() {
                return Err(mismatch(
                    "problem.position",
                    want.position.to_string(),
                    got.position().to_string(),
                ));
            }
        }
    }
    Ok(())
}

/// Requires that no validated item carries `secret` (an API key): not in
/// a text or reasoning delta, a tool call's name or arguments, a
/// completion's metadata, or a failure's message. Each item is searched in
/// its `Debug` form and in the text it would put in the log.
///
/// ```
/// use keel_testkit::conformance::{CheckOptions, ConformanceFailure, check_secret_free, observe};
/// use keel_testkit::{ScriptItem, ScriptedProvider};
/// use keel_stream::FinishReason;
/// # use keel_message::*; use std::sync::Arc;
/// # let history: Arc<[Message]> = vec![Message::text(MessageId::parse("m1")?, Role::User, "Hi")?].into();
/// # let request = ModelRequest::new(OperationIdIssuer::new().issue(), ModelName::parse("m")?, history, Arc::from([]))?;
/// let provider = ScriptedProvider::new(vec![vec![
///     ScriptItem::text("key sk-123"), ScriptItem::complete(FinishReason::Stop),
/// ]]);
/// let rt = tokio::runtime::Builder::new_current_thread().enable_time().build()?;
/// let seen = rt.block_on(observe(&provider, request, &CheckOptions::default()));
/// assert_eq!(check_secret_free(&seen, "sk-999"), Ok(()));
/// assert_eq!(
///     check_secret_free(&seen, "sk-123"),
///     Err(ConformanceFailure::SecretLeaked { index: 0, item: "text" })
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn check_secret_free(seen: &Observed, secret: &str) -> Result<(), ConformanceFailure> {
    for (index, item) in seen.items.iter().enumerate() {
        if logged_text(item).contains(secret) || format!("{item:?}").contains(secret) {
            return Err(ConformanceFailure::SecretLeaked {
                index,
                item: item_kind(item),
            });
        }
    }
    Ok(())
}

/// What `item` would put in the log, as one string.
fn logged_text(item: &StreamItem) -> String {
    match item {
        StreamItem::TextDelta(delta) => delta.text().to_owned(),
        StreamItem::ReasoningDelta(delta) => delta.text().to_owned(),
        StreamItem::ReasoningSignature(signature) => format!("{signature:?}"),
        StreamItem::RedactedReasoning(redacted) => format!("{redacted:?}"),
        StreamItem::ToolCall(call) => format!(
            "{} {} {}",
            call.call_id().as_str(),
            call.name().as_str(),
            call.arguments().as_str()
        ),
        StreamItem::Completion(done) => done.metadata().to_canonical_string(),
        StreamItem::Failure(failure) => failure.to_string(),
    }
}

fn item_kind(item: &StreamItem) -> &'static str {
    match item {
        StreamItem::TextDelta(_) => "text",
        StreamItem::ReasoningDelta(_) => "reasoning",
        StreamItem::ReasoningSignature(_) => "reasoning_signature",
        StreamItem::RedactedReasoning(_) => "redacted_reasoning",
        StreamItem::ToolCall(_) => "tool_call",
        StreamItem::Completion(_) => "completion",
        StreamItem::Failure(_) => "failure",
    }
}

/// Runs `provider` on `request` and checks its validated output against
/// `expect` ([`observe`], then [`compare`]) with default [`CheckOptions`]
/// (default limits, empty allowlist).
///
/// ```
/// use keel_testkit::conformance::{Expectation, ExpectedProblem, check_stream};
/// use keel_testkit::{ScriptItem, ScriptedProvider};
/// use keel_stream::{ProblemKind, RetryPosition};
/// # use keel_message::*; use std::sync::Arc;
/// # let history: Arc<[Message]> = vec![Message::text(MessageId::parse("m1")?, Role::User, "Hi")?].into();
/// # let request = ModelRequest::new(OperationIdIssuer::new().issue(), ModelName::parse("m")?, history, Arc::from([]))?;
/// let provider = ScriptedProvider::new(vec![vec![ScriptItem::fail(ProblemKind::RateLimited, "slow down", true)]]);
/// let expect = Expectation {
///     text: String::new(), tool_calls: vec![], finish: None, usage: None,
///     problem: Some(ExpectedProblem { kind: ProblemKind::RateLimited, retryable: true, position: RetryPosition::Pristine }),
/// };
/// let rt = tokio::runtime::Builder::new_current_thread().enable_time().build()?;
/// assert_eq!(rt.block_on(check_stream(&provider, request, &expect)), Ok(()));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub async fn check_stream(
    provider: &dyn ModelProvider,
    request: ModelRequest,
    expect: &Expectation,
) -> Result<(), ConformanceFailure> {
    check_stream_with(provider, request, expect, &CheckOptions::default()).await
}

/// [`check_stream`] with explicit [`CheckOptions`] (e.g. a metadata
/// allowlist).
///
/// ```
/// use keel_testkit::conformance::{CheckOptions, Expectation, check_stream_with};
/// use keel_testkit::{ScriptItem, ScriptedProvider};
/// use keel_stream::{FinishReason, MetadataAllowlist};
/// # use keel_message::*; use std::sync::Arc;
/// # let history: Arc<[Message]> = vec![Message::text(MessageId::parse("m1")?, Role::User, "Hi")?].into();
/// # let request = ModelRequest::new(OperationIdIssuer::new().issue(), ModelName::parse("m")?, history, Arc::from([]))?;
/// let provider = ScriptedProvider::from_json(r#"[[{"text": "ok"},
///     {"complete": {"finish": "stop", "metadata": {"scripted": {"request_id": "r1"}}}}]]"#)?;
/// let expect = Expectation { text: "ok".into(), tool_calls: vec![], finish: Some(FinishReason::Stop), usage: None, problem: None };
/// let options = CheckOptions::default().with_allowlist(MetadataAllowlist::new(["scripted"])?);
/// let rt = tokio::runtime::Builder::new_current_thread().enable_time().build()?;
/// assert_eq!(rt.block_on(check_stream_with(&provider, request, &expect, &options)), Ok(()));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub async fn check_stream_with(
    provider: &dyn ModelProvider,
    request: ModelRequest,
    expect: &Expectation,
    options: &CheckOptions,
) -> Result<(), ConformanceFailure> {
    let seen = observe(provider, request, options).await;
    compare(expect, &seen)
}

/// Starts `provider`, reads `items` raw items, and drops the stream while
/// it is still open: a provider must allow that at any point (dropping is
/// its cancellation) without panicking or blocking, inside a Tokio
/// runtime. Returns the number of items read; fails with
/// [`ConformanceFailure::EndedBeforeDrop`] if the stream failed to start,
/// ended or yielded a terminal before `items` items were read, so that the
/// drop really happens mid-stream. Pick a case with enough items.
///
/// ```
/// use keel_testkit::conformance::check_drop_mid_stream;
/// use keel_testkit::{ScriptItem, ScriptedProvider};
/// use keel_stream::FinishReason;
/// # use keel_message::*; use std::sync::Arc;
/// # let history: Arc<[Message]> = vec![Message::text(MessageId::parse("m1")?, Role::User, "Hi")?].into();
/// # let request = ModelRequest::new(OperationIdIssuer::new().issue(), ModelName::parse("m")?, history, Arc::from([]))?;
/// let provider = ScriptedProvider::new(vec![vec![
///     ScriptItem::text("a"), ScriptItem::DelayMs(10_000), ScriptItem::complete(FinishReason::Stop),
/// ]]);
/// let handle = provider.handle();
/// let rt = tokio::runtime::Builder::new_current_thread().enable_time().build()?;
/// assert_eq!(rt.block_on(check_drop_mid_stream(&provider, request, 1)), Ok(1));
/// assert_eq!(handle.dropped(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub async fn check_drop_mid_stream(
    provider: &dyn ModelProvider,
    request: ModelRequest,
    items: usize,
) -> Result<usize, ConformanceFailure> {
    let Ok(mut stream) = provider.start(request).await else {
        return Err(ConformanceFailure::EndedBeforeDrop { read: 0 });
    };
    let mut read = 0;
    while read < items {
        match next_raw(&mut stream).await {
            Some(item) => {
                read += 1;
                if item.is_terminal() {
                    return Err(ConformanceFailure::EndedBeforeDrop { read });
                }
            }
            None => return Err(ConformanceFailure::EndedBeforeDrop { read }),
        }
    }
    drop(stream);
    Ok(read)
}
