//! Compactions in the history: the model context's shape (ids, roles and
//! which tool calls each message makes or answers, no content), kept so a
//! `context.compacted` is checked against the history as it stood (rule
//! `compaction.range`) even when the fold's messages were handed out, and
//! the replacement of a range by its summary.

use super::HistoryError;
use crate::payload::ContextCompacted;
use keel_message::{CallId, Message, MessageId, Part, Role};
use std::collections::HashSet;

/// Why a `context.compacted` range does not fit the history (rule
/// `compaction.range`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RangeFault {
    /// `first..=last` is not `count` consecutive messages of the history.
    #[error("is not a contiguous range of the history as it stood")]
    NotContiguous,
    /// The range holds a tool call but not its result, or a result but
    /// not its call.
    #[error("splits tool call {call_id} from its result")]
    SplitsToolCall {
        /// The call cut off from its result.
        call_id: CallId,
    },
    /// The range holds a system message.
    #[error("covers system message {id}")]
    CoversSystem {
        /// The system message.
        id: MessageId,
    },
}

/// One message of the model context, without its content.
#[derive(Debug, Clone)]
struct Entry {
    id: MessageId,
    role: Role,
    /// The tool calls it makes (an assistant message).
    calls: Vec<CallId>,
    /// The tool calls it answers (a tool message).
    results: Vec<CallId>,
}

impl Entry {
    fn of(message: &Message) -> Entry {
        Entry {
            id: message.id().clone(),
            role: message.role(),
            calls: message.tool_calls().map(|c| c.call_id().clone()).collect(),
            results: message
                .parts()
                .iter()
                .filter_map(|p| match p {
                    Part::ToolResult(r) => Some(r.call_id().clone()),
                    _ => None,
                })
                .collect(),
        }
    }
}

/// The model context's shape, in history order.
#[derive(Debug, Clone, Default)]
pub(super) struct ContextIndex {
    entries: Vec<Entry>,
}

impl ContextIndex {
    /// Appends a message the history gained.
    pub(super) fn add(&mut self, message: &Message) {
        self.entries.push(Entry::of(message));
    }

    /// Checks `compacted`'s range (event `seq`) against the context and
    /// replaces it by the summary.
    pub(super) fn compact(
        &mut self,
        seq: u64,
        compacted: &ContextCompacted,
    ) -> Result<(), HistoryError> {
        let range = &compacted.replaces;
        let error = |fault| HistoryError::CompactionRange {
            seq,
            first: range.first.clone(),
            last: range.last.clone(),
            count: range.count,
            fault,
        };
        let ids: Vec<&MessageId> = self.entries.iter().map(|e| &e.id).collect();
        let span = locate(&ids, &range.first, &range.last, range.count)
            .ok_or_else(|| error(RangeFault::NotContiguous))?;
        check_span(&self.entries, span.clone()).map_err(error)?;
        self.entries
            .splice(span, std::iter::once(Entry::of(&compacted.summary)));
        Ok(())
    }
}

/// Where `first..=last`, `count` messages, lies among `ids`: the first
/// position holding `first` whose `count`th message is `last`.
fn locate(
    ids: &[&MessageId],
    first: &MessageId,
    last: &MessageId,
    count: u64,
) -> Option<std::ops::Range<usize>> {
    let count = usize::try_from(count).ok().filter(|c| *c >= 1)?;
    (0..ids.len())
        .filter(|start| ids[*start] == first)
        .map(|start| start..start.saturating_add(count))
        .find(|span| ids.get(span.end - 1).is_some_and(|id| *id == last))
}

/// The range rules beyond contiguity: no system message inside, and no
/// tool call on one side of the boundary with its result on the other.
fn check_span(entries: &[Entry], span: std::ops::Range<usize>) -> Result<(), RangeFault> {
    let inside = &entries[span.clone()];
    if let Some(system) = inside.iter().find(|e| e.role == Role::System) {
        return Err(RangeFault::CoversSystem {
            id: system.id.clone(),
        });
    }
    let calls: HashSet<&CallId> = inside.iter().flat_map(|e| &e.calls).collect();
    let results: HashSet<&CallId> = inside.iter().flat_map(|e| &e.results).collect();
    let outside = entries[..span.start].iter().chain(&entries[span.end..]);
    for entry in outside {
        let split = entry
            .results
            .iter()
            .find(|c| calls.contains(c))
            .or_else(|| entry.calls.iter().find(|c| results.contains(c)));
        if let Some(call_id) = split {
            return Err(RangeFault::SplitsToolCall {
                call_id: call_id.clone(),
            });
        }
    }
    Ok(())
}

/// Replaces `compacted`'s range in `messages` by its summary: the model
/// context a fold's [`finish`](super::HistoryFold::finish) hands out. The
/// range was checked against the whole context when the event was folded
/// in; it is missing here only when the messages it names were taken out
/// of the fold before.
pub(super) fn replace(
    messages: &mut Vec<Message>,
    seq: u64,
    compacted: ContextCompacted,
) -> Result<(), HistoryError> {
    let range = &compacted.replaces;
    let ids: Vec<&MessageId> = messages.iter().map(Message::id).collect();
    let Some(span) = locate(&ids, &range.first, &range.last, range.count) else {
        return Err(HistoryError::CompactionRange {
            seq,
            first: range.first.clone(),
            last: range.last.clone(),
            count: range.count,
            fault: RangeFault::NotContiguous,
        });
    };
    messages.splice(span, std::iter::once(compacted.summary));
    Ok(())
}
