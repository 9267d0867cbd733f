//! The context arithmetic of compaction, without effects: the token
//! estimator (provider usage where known, else bytes over a ratio) and the
//! choice of the range a summary replaces (never a system message, never
//! the last `keep_turns` turns, never a tool call cut from its result).

use keel_eventlog::EstimatorKind;
use keel_message::{CallId, Message, Part, Role, ToolDefinition};
use std::collections::HashSet;
use std::ops::Range;

/// What the last answer call reported: its input and output tokens, and
/// how many messages of the history they cover (up to and including its
/// assistant message). Reset by a compaction to the compacted estimate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct UsageBase {
    pub(crate) tokens: u64,
    pub(crate) messages: usize,
}

/// A token estimate and how it was made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Estimate {
    pub(crate) tokens: u64,
    pub(crate) kind: EstimatorKind,
}

/// The JSON bytes of `messages` as the log writes them.
pub(crate) fn message_bytes(messages: &[Message]) -> u64 {
    messages
        .iter()
        .map(|m| serde_json::to_vec(m).map_or(0, |b| b.len() as u64))
        .sum()
}

/// The JSON bytes of the tool definitions a request lists.
fn tool_bytes(tools: &[ToolDefinition]) -> u64 {
    tools
        .iter()
        .map(|t| serde_json::to_vec(t).map_or(0, |b| b.len() as u64))
        .sum()
}

/// `bytes` in tokens, rounded up: an estimate never undercounts a byte.
pub(crate) fn tokens_of(bytes: u64, bytes_per_token: u32) -> u64 {
    bytes.div_ceil(u64::from(bytes_per_token.max(1)))
}

/// The estimate of a request of `history` listing `tools`: the usage base
/// plus the bytes of the messages added since, when the base still
/// describes a prefix of the history; else the bytes of the whole request.
pub(crate) fn estimate(
    history: &[Message],
    tools: &[ToolDefinition],
    base: Option<UsageBase>,
    bytes_per_token: u32,
) -> Estimate {
    match base.filter(|b| b.messages <= history.len()) {
        Some(base) => Estimate {
            tokens: base.tokens.saturating_add(tokens_of(
                message_bytes(&history[base.messages..]),
                bytes_per_token,
            )),
            kind: EstimatorKind::Usage,
        },
        None => Estimate {
            tokens: tokens_of(
                message_bytes(history).saturating_add(tool_bytes(tools)),
                bytes_per_token,
            ),
            kind: EstimatorKind::Bytes,
        },
    }
}

/// The range of `history` a summary replaces: the longest run of
/// non-system messages ending right before the kept tail (the last
/// `keep_turns` turns), moved so no tool call and its result fall on
/// different sides of either end. `None` when nothing is left to compact.
pub(crate) fn compaction_range(history: &[Message], keep_turns: usize) -> Option<Range<usize>> {
    let mut end = tail_start(history, keep_turns);
    let mut start = history[..end]
        .iter()
        .rposition(|m| m.role() == Role::System)
        .map_or(0, |i| i + 1);
    // Each move shrinks the range, so this ends within history.len() steps.
    while start < end {
        match split(history, start..end) {
            Some(Split::ResultAfter(call_at)) => end = call_at,
            Some(Split::CallBefore(result_at)) => start = result_at + 1,
            None => return Some(start..end),
        }
    }
    None
}

/// Where the last `keep_turns` turns start. A turn is a user input, or an
/// assistant message with the tool messages that follow it; a system
/// message belongs to no turn.
fn tail_start(history: &[Message], keep_turns: usize) -> usize {
    let mut turns = 0;
    let mut at = history.len();
    for (i, message) in history.iter().enumerate().rev() {
        if turns == keep_turns {
            break;
        }
        match message.role() {
            Role::User | Role::Assistant => {
                turns += 1;
                at = i;
            }
            Role::Tool | Role::System => {}
        }
    }
    at
}

/// How a candidate range cuts a tool call from its result.
enum Split {
    /// A call inside has its result at or after the end: the range must
    /// end before the call (at this index).
    ResultAfter(usize),
    /// A result inside answers a call before the start: the range must
    /// start after that result (at this index).
    CallBefore(usize),
}

fn split(history: &[Message], range: Range<usize>) -> Option<Split> {
    let inside = &history[range.clone()];
    let calls: HashSet<&CallId> = inside.iter().flat_map(calls_of).collect();
    let results: HashSet<&CallId> = inside.iter().flat_map(results_of).collect();
    if let Some(offset) = inside
        .iter()
        .position(|m| calls_of(m).any(|c| !results.contains(c)))
    {
        return Some(Split::ResultAfter(range.start + offset));
    }
    inside
        .iter()
        .rposition(|m| results_of(m).any(|c| !calls.contains(c)))
        .map(|offset| Split::CallBefore(range.start + offset))
}

fn calls_of(message: &Message) -> impl Iterator<Item = &CallId> {
    message.tool_calls().map(|c| c.call_id())
}

fn results_of(message: &Message) -> impl Iterator<Item = &CallId> {
    message.parts().iter().filter_map(|p| match p {
        Part::ToolResult(r) => Some(r.call_id()),
        _ => None,
    })
}

#[cfg(test)]
mod tests;
