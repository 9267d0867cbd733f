//! Stable event kind names: [`Scope`] (run, turn, model, tool,
//! interaction), [`Terminal`], [`Phase`] and [`EventKind`]. A
//! well-formed kind this version does not know is kept as an extension
//! kind, unless its last segment is a lifecycle phase: that is refused,
//! since its meaning for the lifecycle cannot be guessed.

use std::fmt;
use std::sync::Arc;

/// A lifecycle scope. Scopes nest `run ⊃ turn ⊃ {model, tool, interaction}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    /// The whole run.
    Run,
    /// One turn: a model call and the tool calls it asked for.
    Turn,
    /// One model call attempt, identified by its operation id.
    Model,
    /// One tool call, identified by its call id.
    Tool,
    /// One interaction with the host (for example an approval).
    Interaction,
}

impl Scope {
    /// All scopes, outermost first.
    pub const ALL: [Scope; 5] = [
        Scope::Run,
        Scope::Turn,
        Scope::Model,
        Scope::Tool,
        Scope::Interaction,
    ];

    /// The wire prefix: `run`, `turn`, `model`, `tool`, `interaction`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Run => "run",
            Scope::Turn => "turn",
            Scope::Model => "model",
            Scope::Tool => "tool",
            Scope::Interaction => "interaction",
        }
    }

    /// The scope that directly contains this one (`None` for the run).
    pub fn parent(self) -> Option<Scope> {
        match self {
            Scope::Run => None,
            Scope::Turn => Some(Scope::Run),
            Scope::Model | Scope::Tool | Scope::Interaction => Some(Scope::Turn),
        }
    }
}

/// How a scope ends. Exactly one terminal per started scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Terminal {
    /// It finished as intended.
    Completed,
    /// It failed; the payload says why.
    Failed,
    /// It was cancelled; history up to here is kept.
    Cancelled,
}

impl Terminal {
    /// All terminals.
    pub const ALL: [Terminal; 3] = [Terminal::Completed, Terminal::Failed, Terminal::Cancelled];

    /// The wire suffix: `completed`, `failed` or `cancelled`.
    pub fn as_str(self) -> &'static str {
        match self {
            Terminal::Completed => "completed",
            Terminal::Failed => "failed",
            Terminal::Cancelled => "cancelled",
        }
    }
}

/// A lifecycle phase: started, or one of the terminals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    /// `<scope>.started`.
    Started,
    /// `<scope>.completed|failed|cancelled`.
    Ended(Terminal),
}

/// The stable name of an event: `run.started`, `model.text_delta`, …
///
/// Kinds are additive within a protocol major version. An unknown kind
/// whose last segment is a lifecycle phase (`started`, `completed`,
/// `failed`, `cancelled`) is an error, because its meaning for the
/// lifecycle cannot be guessed; any other well-formed unknown kind is kept
/// as [`EventKind::Extension`] with its payload, so newer logs stay
/// readable and round-trip byte for byte.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// A lifecycle event.
    Lifecycle(Scope, Phase),
    /// `model.text_delta`: a piece of model text.
    TextDelta,
    /// `model.tool_call`: a finalized tool call from the model.
    ToolCall,
    /// `model.reasoning_delta`: a piece of model reasoning text (the one
    /// durable reasoning token stream).
    ReasoningDelta,
    /// `model.reasoning_end`: a reasoning part closed, with its provider
    /// and signature, or a redacted part, whole.
    ReasoningEnd,
    /// `run.input`: one message of the run's input history, recorded in
    /// order after `run.started` and before the first turn.
    RunInput,
    /// `context.compacted`: a range of the history replaced by a summary.
    ContextCompacted,
    /// `context.compaction_failed`: a compaction that changed nothing.
    ContextCompactionFailed,
    /// `tool.sub_run`: a tool call started a child run (committed in the
    /// parent's log, inside the call's open scope).
    ToolSubRun,
    /// A kind this version does not know, kept opaque.
    Extension(Arc<str>),
}

/// Why a kind name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KindError {
    /// Not of the form `segment(.segment)+` with segments `[a-z][a-z0-9_]*`,
    /// at most 64 bytes.
    #[error(
        "event kind is malformed (rule kind.syntax: dotted lowercase segments, at most 64 bytes; {len} bytes given)"
    )]
    Malformed {
        /// Length of the offending name.
        len: usize,
    },
    /// A lifecycle-shaped kind this version does not know.
    #[error("unknown lifecycle kind {name} (rule kind.lifecycle_known)")]
    UnknownLifecycle {
        /// The kind name (it passed the syntax rule, so it is safe to show).
        name: String,
    },
}

const KIND_MAX_BYTES: usize = 64;

impl EventKind {
    /// A lifecycle kind.
    pub fn lifecycle(scope: Scope, phase: Phase) -> EventKind {
        EventKind::Lifecycle(scope, phase)
    }

    /// Parses a kind name.
    pub fn parse(name: &str) -> Result<EventKind, KindError> {
        let well_formed = name.len() <= KIND_MAX_BYTES
            && name.contains('.')
            && name.split('.').all(|seg| {
                let mut bytes = seg.bytes();
                matches!(bytes.next(), Some(b'a'..=b'z'))
                    && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            });
        if !well_formed {
            return Err(KindError::Malformed { len: name.len() });
        }
        match name {
            "model.text_delta" => return Ok(EventKind::TextDelta),
            "model.tool_call" => return Ok(EventKind::ToolCall),
            "model.reasoning_delta" => return Ok(EventKind::ReasoningDelta),
            "model.reasoning_end" => return Ok(EventKind::ReasoningEnd),
            "run.input" => return Ok(EventKind::RunInput),
            "context.compacted" => return Ok(EventKind::ContextCompacted),
            "context.compaction_failed" => return Ok(EventKind::ContextCompactionFailed),
            "tool.sub_run" => return Ok(EventKind::ToolSubRun),
            _ => {}
        }
        let (head, last) = name.rsplit_once('.').unwrap_or((name, ""));
        let phase = match last {
            "started" => Some(Phase::Started),
            "completed" => Some(Phase::Ended(Terminal::Completed)),
            "failed" => Some(Phase::Ended(Terminal::Failed)),
            "cancelled" => Some(Phase::Ended(Terminal::Cancelled)),
            _ => None,
        };
        match phase {
            Some(phase) => match Scope::ALL.iter().find(|s| s.as_str() == head) {
                Some(scope) => Ok(EventKind::Lifecycle(*scope, phase)),
                None => Err(KindError::UnknownLifecycle {
                    name: name.to_owned(),
                }),
            },
            None => Ok(EventKind::Extension(Arc::from(name))),
        }
    }

    /// The stable name.
    pub fn name(&self) -> std::borrow::Cow<'static, str> {
        use std::borrow::Cow;
        match self {
            EventKind::TextDelta => Cow::Borrowed("model.text_delta"),
            EventKind::ToolCall => Cow::Borrowed("model.tool_call"),
            EventKind::ReasoningDelta => Cow::Borrowed("model.reasoning_delta"),
            EventKind::ReasoningEnd => Cow::Borrowed("model.reasoning_end"),
            EventKind::RunInput => Cow::Borrowed("run.input"),
            EventKind::ContextCompacted => Cow::Borrowed("context.compacted"),
            EventKind::ContextCompactionFailed => Cow::Borrowed("context.compaction_failed"),
            EventKind::ToolSubRun => Cow::Borrowed("tool.sub_run"),
            EventKind::Lifecycle(scope, phase) => Cow::Borrowed(lifecycle_name(*scope, *phase)),
            EventKind::Extension(name) => Cow::Owned(name.to_string()),
        }
    }

    /// The scope and phase, for lifecycle kinds.
    pub fn lifecycle_parts(&self) -> Option<(Scope, Phase)> {
        match self {
            EventKind::Lifecycle(s, p) => Some((*s, *p)),
            _ => None,
        }
    }

    /// Whether this is a terminal of some scope.
    pub fn is_terminal(&self) -> bool {
        matches!(self, EventKind::Lifecycle(_, Phase::Ended(_)))
    }

    /// Whether this is the run's terminal (`run.completed`, `run.failed`
    /// or `run.cancelled`): the last event a run's log ever holds.
    ///
    /// ```
    /// use keel_eventlog::EventKind;
    /// assert!(EventKind::parse("run.cancelled")?.is_run_terminal());
    /// assert!(!EventKind::parse("turn.completed")?.is_run_terminal());
    /// # Ok::<(), keel_eventlog::KindError>(())
    /// ```
    pub fn is_run_terminal(&self) -> bool {
        self.run_terminal().is_some()
    }

    /// How the run ended, when this is the run's terminal.
    ///
    /// ```
    /// use keel_eventlog::{EventKind, Terminal};
    /// assert_eq!(EventKind::parse("run.failed")?.run_terminal(), Some(Terminal::Failed));
    /// assert_eq!(EventKind::parse("model.failed")?.run_terminal(), None);
    /// # Ok::<(), keel_eventlog::KindError>(())
    /// ```
    pub fn run_terminal(&self) -> Option<Terminal> {
        match self {
            EventKind::Lifecycle(Scope::Run, Phase::Ended(terminal)) => Some(*terminal),
            _ => None,
        }
    }
}

fn lifecycle_name(scope: Scope, phase: Phase) -> &'static str {
    use Phase::*;
    use Terminal::*;
    match (scope, phase) {
        (Scope::Run, Started) => "run.started",
        (Scope::Run, Ended(Completed)) => "run.completed",
        (Scope::Run, Ended(Failed)) => "run.failed",
        (Scope::Run, Ended(Cancelled)) => "run.cancelled",
        (Scope::Turn, Started) => "turn.started",
        (Scope::Turn, Ended(Completed)) => "turn.completed",
        (Scope::Turn, Ended(Failed)) => "turn.failed",
        (Scope::Turn, Ended(Cancelled)) => "turn.cancelled",
        (Scope::Model, Started) => "model.started",
        (Scope::Model, Ended(Completed)) => "model.completed",
        (Scope::Model, Ended(Failed)) => "model.failed",
        (Scope::Model, Ended(Cancelled)) => "model.cancelled",
        (Scope::Tool, Started) => "tool.started",
        (Scope::Tool, Ended(Completed)) => "tool.completed",
        (Scope::Tool, Ended(Failed)) => "tool.failed",
        (Scope::Tool, Ended(Cancelled)) => "tool.cancelled",
        (Scope::Interaction, Started) => "interaction.started",
        (Scope::Interaction, Ended(Completed)) => "interaction.completed",
        (Scope::Interaction, Ended(Failed)) => "interaction.failed",
        (Scope::Interaction, Ended(Cancelled)) => "interaction.cancelled",
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}
