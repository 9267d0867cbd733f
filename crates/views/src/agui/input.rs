//! AG-UI's `RunAgentInput` (`@ag-ui/core` 1.0.0), the body a client
//! (`@ag-ui/client`'s `HttpAgent`, CopilotKit) posts to run an agent,
//! checked and read into what Keel acts on.
//!
//! The thread is a Keel conversation and its history is Keel's, rebuilt
//! from the log: of the posted `messages` only the new input is read
//! ([`NewInput`]). Member by member:
//!
//! | member | read as |
//! | --- | --- |
//! | `threadId` (required) | a [`ChatId`] (1 to 64 bytes of `[A-Za-z0-9_-]`): the conversation |
//! | `runId` (required) | an [`AguiRunId`] (1 to [`InputLimits::max_id_bytes`] bytes, no control characters): echoed in `RUN_STARTED`/`RUN_FINISHED`, never a Keel run id |
//! | `messages` (required) | at most [`InputLimits::max_messages`]; each an object with a string `id` (bounded as ids are) and a known `role`; only the new input is read (below) |
//! | `tools` | at most [`InputLimits::max_tools`] frontend tools ([`FrontendToolSpec`]): `name` a Keel tool name, unique; `description` a string; `parameters` absent (then `{"type":"object"}`) or an object schema of at most [`InputLimits::max_opaque_bytes`] canonical bytes |
//! | `context` | at most [`InputLimits::max_context`] entries `{description, value}` (strings); with a new user message they become its first text part, `Context:\n- {description}: {value}` a line each |
//! | `resume` | at most [`InputLimits::max_resume`] entries: `interruptId` a Keel interaction id, `status` `resolved` with `payload.approved` a boolean, or `cancelled` (denied); each id once |
//! | `state`, `forwardedProps` | any JSON value (null is absent) of at most [`InputLimits::max_opaque_bytes`] canonical bytes; accepted, not used |
//! | `parentRunId`, `protocolVersion` | strings (bounded as ids are); accepted, not used |
//! | anything else | ignored (the schema's objects are loose) |
//!
//! The new input, from the end of `messages`:
//!
//! - a last message with role `user`: a new Keel run's user message
//!   ([`NewInput::User`]): its `content`, a string or content parts —
//!   `text`, `image` and `document` (a `data` source, or a `url` source
//!   for an image), and the legacy `binary` part (`mimeType` with `data`
//!   or `url`, `filename`) — under `crate::user_media`'s rules (the same
//!   as `POST /v1/chat`'s files); `audio`, `video` and `file` sources are
//!   refused. At most `limits.media_parts_per_message` media parts, and
//!   at least one non-empty text or one media part. The parts: the
//!   context part, the media parts, then the text parts in order.
//! - trailing `tool` messages and/or `resume` entries: answers to the
//!   live run ([`NewInput::Answers`]): each tool message's `toolCallId`
//!   (a Keel call id, each once) and `content` (a string, or `text`
//!   parts only, joined) — a tool message with `error` carries the error
//!   text as its content.
//! - anything else (a last assistant message without `resume`, no
//!   messages at all) is refused: there is nothing to run.
//!
//! Every refusal is an [`InputError`] naming the member's path (e.g.
//! `messages[2].content[0].source.value`), the rule, and sizes — never
//! the content. The parse never panics (the fuzz target `agui_input`
//! feeds it arbitrary bytes).

use crate::user_media::{MediaRefusal, MediaSource, user_media_part};
use keel_eventlog::ChatId;
use keel_message::{CallId, InteractionId, Limits, Part, ToolDefinition, ToolName};
use serde_json::{Map, Value};
use std::fmt;

mod members;
mod messages;
#[cfg(test)]
mod tests;

/// The most bytes an AG-UI `runId` (and every other client id) may have.
pub const AGUI_ID_MAX_BYTES: usize = 128;

/// The bounds a `RunAgentInput` is read under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputLimits {
    /// Most `messages` (1000).
    pub max_messages: usize,
    /// Most `tools` (128).
    pub max_tools: usize,
    /// Most `context` entries (64).
    pub max_context: usize,
    /// Most `resume` entries (64).
    pub max_resume: usize,
    /// Most bytes of any client id: `runId`, a message's `id`,
    /// `parentRunId`, `protocolVersion` (128, at most [`AGUI_ID_MAX_BYTES`]).
    pub max_id_bytes: usize,
    /// Most canonical JSON bytes of `state`, of `forwardedProps` and of
    /// each tool's `parameters` (64 KiB).
    pub max_opaque_bytes: usize,
    /// The message bounds the new user message is built under (text,
    /// image and file sizes, media parts per message).
    pub message: Limits,
}

impl Default for InputLimits {
    fn default() -> InputLimits {
        InputLimits {
            max_messages: 1000,
            max_tools: 128,
            max_context: 64,
            max_resume: 64,
            max_id_bytes: AGUI_ID_MAX_BYTES,
            max_opaque_bytes: 64 << 10,
            message: Limits::default(),
        }
    }
}

/// Why a `RunAgentInput` was refused: where, which rule, and why (sizes
/// and positions, never the content).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {detail} (rule {rule})")]
pub struct InputError {
    path: String,
    rule: &'static str,
    detail: String,
}

impl InputError {
    pub(crate) fn new(
        path: impl Into<String>,
        rule: &'static str,
        detail: impl Into<String>,
    ) -> Self {
        InputError {
            path: path.into(),
            rule,
            detail: detail.into(),
        }
    }

    /// The member's path, e.g. `messages[2].content[0].source.value`
    /// (`$` is the whole body).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The rule broken, e.g. `agui.input.thread_id`.
    pub fn rule(&self) -> &'static str {
        self.rule
    }

    /// What the member must be, with the offending size when a bound was
    /// broken.
    pub fn detail(&self) -> &str {
        &self.detail
    }
}

/// An AG-UI run id as the client sent it: 1 to [`AGUI_ID_MAX_BYTES`]
/// bytes without control characters. Only echoed back; never a Keel run
/// id.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AguiRunId(Box<str>);

impl AguiRunId {
    /// Checks `text` against the rule; the error is the rule's detail
    /// (the length, or the offset of a control character).
    pub fn parse(text: &str) -> Result<AguiRunId, String> {
        members::check_client_id(text, AGUI_ID_MAX_BYTES)?;
        Ok(AguiRunId(text.into()))
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for AguiRunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AguiRunId({:?})", &*self.0)
    }
}

impl fmt::Display for AguiRunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A tool the client declares (`tools[i]`): a frontend tool, executed by
/// the client. Its definition is checked as every Keel tool's is.
#[derive(Debug, Clone, PartialEq)]
pub struct FrontendToolSpec {
    definition: ToolDefinition,
}

impl FrontendToolSpec {
    /// The tool's name.
    pub fn name(&self) -> &ToolName {
        self.definition.name()
    }

    /// What the model is told the tool does.
    pub fn description(&self) -> &str {
        self.definition.description()
    }

    /// The JSON Schema of its arguments (an object schema).
    pub fn parameters(&self) -> &keel_message::CanonicalJson {
        self.definition.parameters()
    }

    /// The tool as a Keel tool definition.
    pub fn definition(&self) -> &ToolDefinition {
        &self.definition
    }
}

/// A frontend tool's result the client posts (a trailing `tool` message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientToolResult {
    call_id: CallId,
    content: String,
    error: bool,
    index: usize,
}

impl ClientToolResult {
    /// The call it answers (`toolCallId`).
    pub fn call_id(&self) -> &CallId {
        &self.call_id
    }

    /// What the tool returned: its text, or its `error` when it failed.
    pub fn content(&self) -> &str {
        &self.content
    }

    /// Whether the client reported the call failed (the message's `error`).
    pub fn is_error(&self) -> bool {
        self.error
    }

    /// Its position in `messages` (for a refusal naming
    /// `messages[i].toolCallId`).
    pub fn index(&self) -> usize {
        self.index
    }
}

/// The answer an approval gets: the `decision` a Keel
/// `interaction.completed` records (`approved` or `denied`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InteractionDecisionWire {
    /// `resolved` with `payload.approved: true`.
    Approved,
    /// `resolved` with `payload.approved: false`, or `cancelled`.
    Denied,
}

impl InteractionDecisionWire {
    /// `approved` or `denied`.
    pub fn as_str(self) -> &'static str {
        match self {
            InteractionDecisionWire::Approved => "approved",
            InteractionDecisionWire::Denied => "denied",
        }
    }
}

/// A `resume` entry: the answer to a pending approval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResumeAnswer {
    interrupt_id: InteractionId,
    decision: InteractionDecisionWire,
    index: usize,
}

impl ResumeAnswer {
    /// The interrupt answered: a Keel interaction id.
    pub fn interrupt_id(&self) -> &InteractionId {
        &self.interrupt_id
    }

    /// Approved or denied.
    pub fn decision(&self) -> InteractionDecisionWire {
        self.decision
    }

    /// Its position in `resume` (for a refusal naming `resume[i]`).
    pub fn index(&self) -> usize {
        self.index
    }
}

/// What the posted input asks Keel to do.
#[derive(Debug, Clone, PartialEq)]
pub enum NewInput {
    /// Start the thread's next run with this user message: the context
    /// text part first (when there is context), then the media parts,
    /// then the text parts.
    User {
        /// The message's parts.
        parts: Vec<Part>,
    },
    /// Answer the live run: frontend tool results (trailing `tool`
    /// messages) and approvals (`resume`); at least one of the two.
    Answers {
        /// The results, in message order.
        tool_results: Vec<ClientToolResult>,
        /// The approvals' answers, in `resume` order.
        resume: Vec<ResumeAnswer>,
    },
}

/// A checked `RunAgentInput`.
#[derive(Debug, Clone, PartialEq)]
pub struct RunAgentInput {
    thread_id: ChatId,
    run_id: AguiRunId,
    tools: Vec<FrontendToolSpec>,
    new_input: NewInput,
}

impl RunAgentInput {
    /// Parses and checks a body (see the module documentation).
    pub fn parse(body: &str, limits: &InputLimits) -> Result<RunAgentInput, InputError> {
        let root = keel_message::strict_json::parse(body).map_err(|e| {
            InputError::new(
                keel_message::strict_json::path(&e),
                "agui.input.json",
                keel_message::strict_json::rule(&e),
            )
        })?;
        let Value::Object(root) = root else {
            return Err(InputError::new("$", "agui.input.object", "a JSON object"));
        };
        let thread_id = members::thread_id(&root)?;
        let run_id = members::run_id(&root, limits)?;
        members::accepted_unused(&root, limits)?;
        let tools = members::tools(&root, limits)?;
        let context = members::context(&root, limits)?;
        let resume = members::resume(&root, limits)?;
        let new_input = messages::new_input(&root, &context, resume, limits)?;
        Ok(RunAgentInput {
            thread_id,
            run_id,
            tools,
            new_input,
        })
    }

    /// The conversation (`threadId`).
    pub fn thread_id(&self) -> &ChatId {
        &self.thread_id
    }

    /// The client's run id (`runId`).
    pub fn run_id(&self) -> &AguiRunId {
        &self.run_id
    }

    /// The client's frontend tools (`tools`), in order, names unique.
    pub fn tools(&self) -> &[FrontendToolSpec] {
        &self.tools
    }

    /// What the input asks for.
    pub fn new_input(&self) -> &NewInput {
        &self.new_input
    }
}

/// A member of an object, by name, with `null` read as absent (the
/// schema's optional members).
fn member<'a>(object: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    object.get(name).filter(|v| !v.is_null())
}

/// A `context` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ContextEntry {
    description: String,
    value: String,
}

/// Where a media content part's members are, for a refusal to name.
struct MediaPaths {
    media_type: String,
    source: String,
    file_name: String,
}

/// The Keel part of a media content part (`media_type`, `source`,
/// `file_name`), a refusal naming the member at its path in `paths`.
fn media_part(
    paths: &MediaPaths,
    media_type: &str,
    source: MediaSource<'_>,
    file_name: Option<&str>,
    limits: &Limits,
) -> Result<Part, InputError> {
    user_media_part(media_type, source, file_name, limits).map_err(|refusal| {
        let (path, rule) = match &refusal {
            MediaRefusal::MediaType => (&paths.media_type, "agui.input.media_type"),
            MediaRefusal::DocumentUrl => (&paths.source, "agui.input.document_source"),
            MediaRefusal::Source(kind) => (&paths.source, kind.rule()),
            MediaRefusal::FileName(kind) => (&paths.file_name, kind.rule()),
        };
        InputError::new(path.clone(), rule, refusal.to_string())
    })
}
