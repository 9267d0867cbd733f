//! A run's conversation history, rebuilt from its log.
//!
//! The log is the authority, so the history a run ends with (its input,
//! then for each turn the assistant message of the model call that
//! completed and the tool results) can be rebuilt from its events alone,
//! value for value: the message ids the engine mints and the result texts
//! it feeds back (a denial, a failed approval) are defined here, and the
//! engine uses the same definitions. A follow-up run starts from this
//! history plus its new message; its log records that history by
//! reference ([`crate::RunInputReference`]), and [`rebuild_chain`] follows
//! the references, checked, through any store ([`HistoryStore`]). A fork
//! starts from a run's history through a seq instead ([`ForkPoints`]
//! decides which seqs may be, [`rebuild_fork_point`] rebuilds it).

use crate::event::Event;
use crate::payload::{ContextCompacted, ErrorText, Payload};
use crate::reference::HistoryReference;

mod assistant;
mod chain;
mod compaction;
mod fork;
pub use assistant::AssistantDraft;
pub use chain::{
    ChainError, HistoryStore, MAX_CHAIN_DEPTH, RebuiltChain, chain_runs, rebuild_chain,
};
pub use compaction::RangeFault;
pub use fork::{ForkPointError, ForkPoints, rebuild_fork_point};
use keel_message::{
    CallId, ImagePart, Limits, Message, MessageError, MessageId, Part, Role, RunId, ToolCallPart,
};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

/// What the model is told when its call was denied approval.
pub const DENIED_RESULT: &str = "denied";

/// What the model is told of a call that was cancelled, when its turn
/// still completes: a sub-run cancelled by its call's own timeout ends in
/// `tool.cancelled`, and the model is owed a result for every call it made.
/// (A run cancelled as a whole never completes the turn, so its
/// cancelled calls never reach a history.)
pub const CANCELLED_RESULT: &str = "the call was cancelled (rule tool.cancelled)";

/// What the model is told when a result does not fit `limits.part_bytes`.
const OVERSIZED_RESULT: &str = "tool result exceeded limits.part_bytes";

/// What the model is told when an approval failed (handler error, panic,
/// timeout): the interaction's recorded error.
pub fn approval_failed_result(error: &ErrorText) -> String {
    format!("approval failed: {}", error.as_str())
}

/// The tool result part the model is given for `content`; a content over
/// `limits.part_bytes` becomes a short error result instead.
pub fn tool_result_part(
    call_id: &CallId,
    content: &str,
    is_error: bool,
    limits: &Limits,
) -> Result<Part, MessageError> {
    tool_result_part_with_images(call_id, content, is_error, Vec::new(), limits)
}

/// As [`tool_result_part`], with the images the tool returned (in order).
/// A result that does not fit its bounds becomes the same short error
/// result, without the images.
pub fn tool_result_part_with_images(
    call_id: &CallId,
    content: &str,
    is_error: bool,
    images: Vec<ImagePart>,
    limits: &Limits,
) -> Result<Part, MessageError> {
    let part = if images.is_empty() {
        Part::tool_result_with(call_id.clone(), content, is_error, limits)
    } else {
        Part::tool_result_with_images(call_id.clone(), content, is_error, images, limits)
    };
    part.or_else(|_| Part::tool_result_with(call_id.clone(), OVERSIZED_RESULT, true, limits))
}

/// The id of the message a turn adds: the assistant's answer (`Role::Assistant`)
/// or the tool results (`Role::Tool`). Unique across runs: it names the run
/// (or, for a run id too long to fit, a 64-bit hash of it) and the turn.
///
/// ```
/// use keel_eventlog::history::turn_message_id;
/// use keel_message::{Role, RunId};
/// let id = turn_message_id(&RunId::parse("run_1")?, 2, Role::Assistant)?;
/// assert_eq!(id.as_str(), "run_1.t2.a");
/// # Ok::<(), keel_message::MessageError>(())
/// ```
pub fn turn_message_id(run_id: &RunId, turn: u64, role: Role) -> Result<MessageId, MessageError> {
    let suffix = match role {
        Role::Tool => "t",
        _ => "a",
    };
    scoped_id(run_id, &format!("t{turn}.{suffix}"))
}

/// The id of the summary a compaction in `turn` puts in place of the range
/// it replaces (`context.compacted`'s `summary`): `<run_id>.t<turn>.s` (or
/// `h<hash>.t<turn>.s` for a run id too long to fit). One compaction per
/// turn at most is what keeps it unique.
///
/// ```
/// use keel_eventlog::history::compaction_message_id;
/// use keel_message::RunId;
/// assert_eq!(compaction_message_id(&RunId::parse("run_1")?, 3)?.as_str(), "run_1.t3.s");
/// # Ok::<(), keel_message::MessageError>(())
/// ```
pub fn compaction_message_id(run_id: &RunId, turn: u64) -> Result<MessageId, MessageError> {
    scoped_id(run_id, &format!("t{turn}.s"))
}

/// The id of the `n`th new message (from 1) a follow-up run adds to the
/// history it continues: `<run_id>.u<n>` (or `h<hash>.u<n>` for a run id
/// too long to fit), so ids stay unique across a conversation.
///
/// ```
/// use keel_eventlog::history::follow_up_message_id;
/// use keel_message::RunId;
/// assert_eq!(follow_up_message_id(&RunId::parse("run_2")?, 1)?.as_str(), "run_2.u1");
/// # Ok::<(), keel_message::MessageError>(())
/// ```
pub fn follow_up_message_id(run_id: &RunId, n: usize) -> Result<MessageId, MessageError> {
    scoped_id(run_id, &format!("u{n}"))
}

fn scoped_id(run_id: &RunId, suffix: &str) -> Result<MessageId, MessageError> {
    if let Ok(id) = MessageId::parse(&format!("{run_id}.{suffix}")) {
        return Ok(id);
    }
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    run_id.as_str().hash(&mut hasher);
    Ok(MessageId::parse(&format!(
        "h{:016x}.{suffix}",
        hasher.finish()
    ))?)
}

/// Why a log does not yield a history.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HistoryError {
    /// An event's payload did not decode.
    #[error("event {seq} does not decode: {detail} (rule history.decodable)")]
    Undecodable {
        /// The event.
        seq: u64,
        /// Why (no content quoted).
        detail: String,
    },
    /// The log holds no `run.input`: it was written before inputs were
    /// recorded, or its start was evicted.
    #[error("the log records no input messages (rule history.input_recorded)")]
    NoInput,
    /// The input is a reference to another run's history, which
    /// [`rebuild`] does not follow ([`rebuild_chain`] does).
    #[error(
        "event {seq} inherits the history of run {parent}; rebuild the chain to resolve it (rule history.reference_resolved)"
    )]
    Unresolved {
        /// The `run.input` reference.
        seq: u64,
        /// The run it names.
        parent: RunId,
    },
    /// A `context.compacted` whose range does not fit the history as it
    /// stood: not contiguous, splitting a tool call from its result, or
    /// covering a system message.
    #[error(
        "event {seq}: context.compacted replaces {first}..={last} ({count} messages), which {fault} (rule compaction.range)"
    )]
    CompactionRange {
        /// The `context.compacted`.
        seq: u64,
        /// The range's first message.
        first: MessageId,
        /// The range's last message.
        last: MessageId,
        /// The range's length.
        count: u64,
        /// What is wrong with it.
        fault: RangeFault,
    },
    /// A `run.input` reference anywhere but right after `run.started`.
    #[error(
        "event {seq} is a run.input reference; only seq 2 may be one (rule lifecycle.input_reference)"
    )]
    ReferenceMisplaced {
        /// Where it was.
        seq: u64,
    },
}

/// The turn being rebuilt: the current model attempt and, once a call
/// completed, the calls whose results are awaited.
#[derive(Default)]
struct TurnState {
    /// The current model attempt's message, as its events arrive.
    draft: AssistantDraft,
    /// Whether the current model attempt has a `purpose` (a compaction
    /// call): its message is not the turn's answer.
    purposed: bool,
    /// The completed call's tool calls, in call order.
    awaited: Vec<ToolCallPart>,
    results: HashMap<CallId, Part>,
    /// Which call an interaction asked about.
    interactions: HashMap<String, CallId>,
}

/// Rebuilds the history a run ended with from its events (in order, from
/// seq 1), under the message bounds the run used. A continued run whose
/// input is a reference ([`RunInputReference`](crate::RunInputReference))
/// does not rebuild from its own events alone: that is
/// [`HistoryError::Unresolved`]; [`rebuild_chain`] follows the reference.
///
/// ```
/// use keel_eventlog::{history, Payload, RunInput, RunLog, LogConfig, RunStarted, SystemClock, Extra};
/// use keel_message::{Message, MessageId, Role, RunId, Limits};
/// use std::sync::Arc;
/// let log = RunLog::new(RunId::parse("run_1")?, LogConfig::default(), Arc::new(SystemClock))?;
/// let hi = Message::text(MessageId::parse("m1")?, Role::User, "Hi")?;
/// log.commit(&Payload::RunStarted(RunStarted::default()))?;
/// log.commit(&Payload::RunInput(RunInput { message: hi.clone(), extra: Extra::new() }))?;
/// let events = log.retained_after(0);
/// assert_eq!(history::rebuild(&events, &Limits::default())?, vec![hi]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn rebuild<E: AsRef<Event>>(
    events: &[E],
    limits: &Limits,
) -> Result<Vec<Message>, HistoryError> {
    let mut fold = HistoryFold::new(limits.clone());
    for event in events {
        let event = event.as_ref();
        if let Some(reference) = fold.push(event)? {
            return Err(HistoryError::Unresolved {
                seq: event.seq(),
                parent: reference.run_id,
            });
        }
    }
    fold.finish()
}

/// Rebuilds like [`rebuild`], from `inherited`: the history a continued
/// run's `run.input` reference names (resolved by the caller, e.g. with
/// [`rebuild_chain`] of the run it names), so the reference is taken as
/// standing for it.
pub fn rebuild_after<E: AsRef<Event>>(
    inherited: Vec<Message>,
    events: &[E],
    limits: &Limits,
) -> Result<Vec<Message>, HistoryError> {
    let mut fold = HistoryFold::after(inherited, limits.clone());
    for event in events {
        fold.push(event.as_ref())?;
    }
    fold.finish()
}

/// What a [`HistoryFold`] hands out, in history order
/// ([`HistoryFold::take_items`]): a message the history gained, or a
/// compaction that replaced a range of the messages before it by a summary.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum HistoryItem {
    /// A message that happened: an input, an answer, a turn's tool results.
    Message(Message),
    /// A `context.compacted` (at `seq`), checked against the history as
    /// it stood (rule `compaction.range`).
    Compaction {
        /// The event's seq.
        seq: u64,
        /// The range it replaces and the summary that replaces it.
        compacted: Box<ContextCompacted>,
    },
}

/// [`rebuild`] one event at a time, for a reader that pages through a
/// long run instead of holding it.
///
/// A compaction never changes a message that was handed out: the fold
/// hands out what happened, in order ([`HistoryItem`]s from
/// [`HistoryFold::take_items`]), and a compaction is an item of its own
/// that a consumer applies to its copy or shows. Two views follow:
///
/// - the **transcript**, every message that happened:
///   [`HistoryFold::take_completed`] hands out each message as soon as an
///   event completes it (a message once completed never changes) and
///   drops the compactions, so the fold holds only the turn in progress
///   and the messages not yet taken (the AG-UI `MESSAGES_SNAPSHOT`);
/// - the **model context**, what the next model request carries:
///   [`HistoryFold::finish`] applies the compactions to the items not
///   taken ([`rebuild`], [`rebuild_after`], [`rebuild_chain`]).
///
/// Either way each compaction is checked when it is folded in, against
/// the whole context (the fold keeps its ids and tool-call links, not its
/// content).
///
/// ```
/// use keel_eventlog::{history::HistoryFold, Payload, RunInput, RunLog, LogConfig, RunStarted, SystemClock, Extra};
/// use keel_message::{Message, MessageId, Role, RunId, Limits};
/// use std::sync::Arc;
/// let log = RunLog::new(RunId::parse("run_1")?, LogConfig::default(), Arc::new(SystemClock))?;
/// let hi = Message::text(MessageId::parse("m1")?, Role::User, "Hi")?;
/// log.commit(&Payload::RunStarted(RunStarted::default()))?;
/// log.commit(&Payload::RunInput(RunInput { message: hi.clone(), extra: Extra::new() }))?;
/// let mut fold = HistoryFold::new(Limits::default());
/// let mut messages = Vec::new();
/// for event in log.retained_after(0) {
///     fold.push(&event)?;
///     messages.extend(fold.take_completed());
/// }
/// assert!(fold.has_input());
/// assert_eq!(messages, vec![hi]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Default)]
pub struct HistoryFold {
    limits: Limits,
    turn: TurnState,
    inputs: usize,
    /// What happened and was not taken yet, in order.
    items: Vec<HistoryItem>,
    /// The model context's shape, for checking compactions.
    context: compaction::ContextIndex,
}

impl std::fmt::Debug for HistoryFold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HistoryFold")
            .field("inputs", &self.inputs)
            .field("completed", &self.items.len())
            .finish_non_exhaustive()
    }
}

impl HistoryFold {
    /// A fold from seq 1 under the message bounds the run used.
    pub fn new(limits: Limits) -> HistoryFold {
        HistoryFold {
            limits,
            ..HistoryFold::default()
        }
    }

    /// A fold of a continued run from `inherited`: the history its
    /// `run.input` reference names (resolved by the caller: the model
    /// context the run it continues ended with), handed out first by
    /// [`HistoryFold::take_completed`].
    pub fn after(inherited: Vec<Message>, limits: Limits) -> HistoryFold {
        let mut fold = HistoryFold::new(limits);
        for message in inherited {
            fold.add(message);
        }
        fold
    }

    /// Folds in the run's next event (in order, from seq 1). A `run.input`
    /// reference (only at seq 2) is handed back for the caller to resolve:
    /// its history is what this fold started from ([`HistoryFold::after`]).
    /// A `context.compacted` whose range does not fit the history is
    /// [`HistoryError::CompactionRange`].
    pub fn push(&mut self, event: &Event) -> Result<Option<HistoryReference>, HistoryError> {
        let payload = event.payload().map_err(|e| HistoryError::Undecodable {
            seq: event.seq(),
            detail: e.to_string(),
        })?;
        match payload {
            Payload::RunInput(p) => {
                self.inputs += 1;
                self.add(p.message);
            }
            Payload::RunInputReference(p) => {
                if event.seq() != crate::lifecycle::REFERENCE_SEQ {
                    return Err(HistoryError::ReferenceMisplaced { seq: event.seq() });
                }
                self.inputs += 1;
                return Ok(Some(p.history));
            }
            Payload::ContextCompacted(compacted) => {
                self.context.compact(event.seq(), &compacted)?;
                self.items.push(HistoryItem::Compaction {
                    seq: event.seq(),
                    compacted: Box::new(compacted),
                });
            }
            payload => {
                let mut added = Vec::new();
                apply(
                    &mut self.turn,
                    &mut added,
                    event.run_id(),
                    payload,
                    &self.limits,
                );
                for message in added {
                    self.add(message);
                }
            }
        }
        Ok(None)
    }

    fn add(&mut self, message: Message) {
        self.context.add(&message);
        self.items.push(HistoryItem::Message(message));
    }

    /// The messages completed since the last take, in history order: the
    /// transcript. Compactions are not messages and are dropped here; a
    /// consumer that needs them takes [`HistoryFold::take_items`] instead.
    pub fn take_completed(&mut self) -> Vec<Message> {
        std::mem::take(&mut self.items)
            .into_iter()
            .filter_map(|item| match item {
                HistoryItem::Message(message) => Some(message),
                HistoryItem::Compaction { .. } => None,
            })
            .collect()
    }

    /// The messages and compactions folded in since the last take, in
    /// history order.
    pub fn take_items(&mut self) -> Vec<HistoryItem> {
        std::mem::take(&mut self.items)
    }

    /// Whether a `run.input` (a message or a reference) was folded in:
    /// without one, the log does not yield a history
    /// ([`HistoryError::NoInput`]).
    pub fn has_input(&self) -> bool {
        self.inputs > 0
    }

    /// The model context of what was not taken: the messages, each
    /// compaction applied in order (its range replaced by its summary);
    /// [`HistoryError::NoInput`] when no `run.input` was folded in, and
    /// [`HistoryError::CompactionRange`] when a compaction names messages
    /// that were taken.
    pub fn finish(self) -> Result<Vec<Message>, HistoryError> {
        if !self.has_input() {
            return Err(HistoryError::NoInput);
        }
        let mut messages = Vec::with_capacity(self.items.len());
        for item in self.items {
            match item {
                HistoryItem::Message(message) => messages.push(message),
                HistoryItem::Compaction { seq, compacted } => {
                    compaction::replace(&mut messages, seq, *compacted)?;
                }
            }
        }
        Ok(messages)
    }
}

fn apply(
    turn: &mut TurnState,
    history: &mut Vec<Message>,
    run_id: &RunId,
    payload: Payload,
    limits: &Limits,
) {
    match payload {
        Payload::TurnStarted(_) => *turn = TurnState::default(),
        Payload::ModelStarted(p) => {
            turn.draft = AssistantDraft::default();
            turn.purposed = p.purpose.is_some();
        }
        Payload::TextDelta(p) => turn.draft.push_text(&p.text),
        Payload::ReasoningDelta(p) => turn.draft.push_reasoning_delta(&p.text),
        Payload::ReasoningEnd(p) => match p.redacted {
            Some(value) => turn.draft.push_redacted(p.provider, value),
            None => turn.draft.end_reasoning(p.provider, p.signature),
        },
        Payload::ToolCall(p) => {
            if let Ok(call) = ToolCallPart::new_with(p.call_id, p.name, p.arguments, limits) {
                turn.draft.push_call(call);
            }
        }
        Payload::ModelCompleted(p) => {
            let draft = std::mem::take(&mut turn.draft);
            if turn.purposed {
                // A compaction call's text is a summary, which only a
                // `context.compacted` puts into the history.
                return;
            }
            if let Ok(message) = draft.to_message(run_id, p.turn, limits) {
                history.push(message);
                turn.awaited = draft.calls().cloned().collect();
            }
        }
        Payload::InteractionStarted(p) => {
            if let Some(call_id) = p.call_id {
                turn.interactions
                    .insert(p.interaction_id.as_str().to_owned(), call_id);
            }
        }
        Payload::InteractionCompleted(p) if p.decision == DENIED_RESULT => {
            record(turn, p.interaction_id.as_str(), DENIED_RESULT, limits);
        }
        Payload::InteractionFailed(p) => {
            let text = approval_failed_result(&p.error);
            record(turn, p.interaction_id.as_str(), &text, limits);
        }
        Payload::ToolCompleted(p) => {
            if let Ok(part) =
                tool_result_part_with_images(&p.call_id, &p.output, false, p.images, limits)
            {
                turn.results.insert(p.call_id, part);
            }
        }
        Payload::ToolFailed(p) => result(turn, &p.call_id, p.error.as_str(), true, limits),
        Payload::ToolCancelled(p) => result(turn, &p.call_id, CANCELLED_RESULT, true, limits),
        Payload::TurnCompleted(p) => {
            if let Some(message) = tool_message(run_id, p.turn, turn, limits) {
                history.push(message);
            }
            *turn = TurnState::default();
        }
        _ => {}
    }
}

fn record(turn: &mut TurnState, interaction_id: &str, content: &str, limits: &Limits) {
    if let Some(call_id) = turn.interactions.get(interaction_id).cloned() {
        result(turn, &call_id, content, true, limits);
    }
}

fn result(turn: &mut TurnState, call_id: &CallId, content: &str, is_error: bool, limits: &Limits) {
    if let Ok(part) = tool_result_part(call_id, content, is_error, limits) {
        turn.results.insert(call_id.clone(), part);
    }
}

/// The assistant message of a completed model call without reasoning:
/// its text (if any), then its tool calls. The engine builds every
/// assistant message through an [`AssistantDraft`], as the rebuild does,
/// so a message it could not build (the turn failed on the message rule)
/// is not rebuilt either; this is the draft of `text` and `calls`.
pub fn assistant_message(
    run_id: &RunId,
    turn: u64,
    text: &str,
    calls: &[ToolCallPart],
    limits: &Limits,
) -> Result<Message, MessageError> {
    let mut draft = AssistantDraft::default();
    draft.push_text(text);
    for call in calls {
        draft.push_call(call.clone());
    }
    draft.to_message(run_id, turn, limits)
}

/// The message of a turn's tool results, in call order.
pub fn tool_results_message(
    run_id: &RunId,
    turn: u64,
    results: Vec<Part>,
    limits: &Limits,
) -> Result<Message, MessageError> {
    let id = turn_message_id(run_id, turn, Role::Tool)?;
    Message::new_with(id, Role::Tool, results, limits)
}

/// The tool results of a turn that completed with calls, in call order.
fn tool_message(run_id: &RunId, turn: u64, state: &TurnState, limits: &Limits) -> Option<Message> {
    if state.awaited.is_empty() {
        return None;
    }
    let parts: Vec<Part> = state
        .awaited
        .iter()
        .filter_map(|c| state.results.get(c.call_id()).cloned())
        .collect();
    tool_results_message(run_id, turn, parts, limits).ok()
}
