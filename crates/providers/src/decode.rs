//! What both decoders do alike when turning decoded wire values into raw
//! items: text split into bounded deltas, tool-call arguments as sent,
//! the assembly bound, the finish reason after tool calls, and the
//! namespaced metadata object of the completion.

use keel_message::Limits;
use keel_stream::{FinishReason, RawItem};
use serde_json::{Map, Value, json};
use std::collections::VecDeque;

/// Pushes `text` as text deltas of at most `max` bytes each, split at
/// char boundaries; pushes nothing for empty text.
pub(crate) fn push_text(out: &mut VecDeque<RawItem>, text: &str, max: usize) {
    push_pieces(out, text, max, RawItem::text);
}

/// Pushes `text` as reasoning deltas, split as [`push_text`] splits.
pub(crate) fn push_reasoning(out: &mut VecDeque<RawItem>, text: &str, max: usize) {
    push_pieces(out, text, max, RawItem::ReasoningDelta);
}

/// `text` in pieces of at most `max` bytes (at least 4, so that a piece
/// always holds a char), cut at char boundaries, each made an item by
/// `item`; nothing for empty text.
fn push_pieces(
    out: &mut VecDeque<RawItem>,
    text: &str,
    max: usize,
    item: impl Fn(String) -> RawItem,
) {
    let mut rest = text;
    while !rest.is_empty() {
        let mut cut = rest.len().min(max.max(4));
        while !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        let (head, tail) = rest.split_at(cut);
        out.push_back(item(head.to_owned()));
        rest = tail;
    }
}

/// The most raw argument bytes one tool call may assemble: twice the
/// canonical JSON bound (raw JSON may carry whitespace).
pub(crate) fn max_arguments_bytes(limits: &Limits) -> usize {
    limits.json_bytes.saturating_mul(2)
}

/// Tool-call arguments as sent: empty text (a tool without parameters) is
/// the empty object.
pub(crate) fn arguments_or_empty(arguments: String) -> String {
    if arguments.trim().is_empty() {
        "{}".to_owned()
    } else {
        arguments
    }
}

/// Whether `text` parses as a JSON object.
pub(crate) fn is_json_object(text: &str) -> bool {
    matches!(
        serde_json::from_str::<serde_json::Value>(text),
        Ok(serde_json::Value::Object(_))
    )
}

/// The finish reason reported: a `stop` after tool calls is `tool_calls`
/// (some servers finish tool calls with `stop`).
pub(crate) fn finish_with_calls(finish: FinishReason, emitted_calls: bool) -> FinishReason {
    if finish == FinishReason::Stop && emitted_calls {
        FinishReason::ToolCalls
    } else {
        finish
    }
}

/// A JSON member's text, when it is a string.
pub(crate) fn text_of(value: &Option<Value>) -> Option<&str> {
    match value {
        Some(Value::String(s)) => Some(s),
        _ => None,
    }
}

/// `{namespace: {name: value, …}}` for the facts that are known; `None`
/// when none is.
pub(crate) fn namespaced(namespace: &str, facts: &[(&str, &Option<String>)]) -> Option<Value> {
    let ns: Map<String, Value> = facts
        .iter()
        .filter_map(|(name, value)| value.as_ref().map(|v| ((*name).to_owned(), json!(v))))
        .collect();
    (!ns.is_empty()).then(|| json!({ namespace: ns }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_split_at_char_boundaries() {
        let mut out = VecDeque::new();
        push_text(&mut out, "aøbø", 4);
        assert_eq!(
            out.into_iter().collect::<Vec<_>>(),
            vec![RawItem::text("aøb"), RawItem::text("ø")]
        );
        let mut out = VecDeque::new();
        push_text(&mut out, "", 4);
        assert!(out.is_empty());
        // A cut inside a char moves back to its start.
        push_text(&mut out, "aaaøb", 4);
        assert_eq!(
            std::mem::take(&mut out).into_iter().collect::<Vec<_>>(),
            vec![RawItem::text("aaa"), RawItem::text("øb")]
        );
        push_reasoning(&mut out, "aøbø", 4);
        assert_eq!(
            out.into_iter().collect::<Vec<_>>(),
            vec![RawItem::reasoning("aøb"), RawItem::reasoning("ø")]
        );
    }

    #[test]
    fn arguments_and_finish_follow_the_calls() {
        assert_eq!(arguments_or_empty(" \n".into()), "{}");
        assert_eq!(arguments_or_empty("{\"a\":1}".into()), "{\"a\":1}");
        assert!(is_json_object("{\"a\":1}"));
        assert!(!is_json_object("{\"a\":"));
        assert!(!is_json_object("[1]"));
        assert_eq!(
            finish_with_calls(FinishReason::Stop, true),
            FinishReason::ToolCalls
        );
        assert_eq!(
            finish_with_calls(FinishReason::Stop, false),
            FinishReason::Stop
        );
        assert_eq!(
            finish_with_calls(FinishReason::Length, true),
            FinishReason::Length
        );
    }

    #[test]
    fn metadata_holds_only_known_facts() {
        let id = Some("r-1".to_owned());
        assert_eq!(
            namespaced("openai", &[("id", &id), ("model", &None)]),
            Some(json!({"openai": {"id": "r-1"}}))
        );
        assert_eq!(namespaced("openai", &[("id", &None)]), None);
        assert_eq!(text_of(&Some(json!("t"))), Some("t"));
        assert_eq!(text_of(&Some(json!(1))), None);
    }
}
