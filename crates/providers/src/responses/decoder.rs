//! The Responses stream state machine: typed events (the `type` of each
//! data payload) to text deltas, reasoning (summary deltas closed by the
//! item's sealed value), function calls assembled per output item, and
//! one terminal at `response.completed`, `response.incomplete`,
//! `response.failed` or `error`. Unknown event types are ignored.

use super::errors::{ErrorBody, classify_stream_error};
use super::sealed::{SUMMARY_SEPARATOR, is_packable_id, pack};
use crate::decode::{
    arguments_or_empty, finish_with_calls, max_arguments_bytes, namespaced, push_reasoning,
    push_text,
};
use crate::key::ApiKey;
use crate::openai::OPENAI_NAMESPACE;
use crate::problem::{bad_json, fail, protocol, too_many_calls};
use crate::pump::{Decoder, Flow};
use crate::screen::{keep_facts, safe_code};
use keel_message::Limits;
use keel_stream::{
    FinishReason, ProblemKind, RawCompletion, RawItem, RawProblem, RawToolCall, RawUsage,
};
use serde::Deserialize;
use serde_json::Value;
use std::collections::{BTreeMap, VecDeque};

#[derive(Deserialize)]
#[serde(tag = "type")]
enum Event {
    #[serde(rename = "response.created")]
    Created {
        #[serde(default)]
        response: Option<ResponseWire>,
    },
    #[serde(rename = "response.in_progress")]
    InProgress {
        #[serde(default)]
        response: Option<ResponseWire>,
    },
    #[serde(rename = "response.output_item.added")]
    ItemAdded { output_index: u64, item: Item },
    #[serde(rename = "response.output_item.done")]
    ItemDone { output_index: u64, item: Item },
    #[serde(rename = "response.output_text.delta")]
    TextDelta { delta: String },
    #[serde(rename = "response.refusal.delta")]
    RefusalDelta { delta: String },
    #[serde(rename = "response.function_call_arguments.delta")]
    ArgumentsDelta { output_index: u64, delta: String },
    #[serde(rename = "response.function_call_arguments.done")]
    ArgumentsDone {
        output_index: u64,
        arguments: String,
    },
    #[serde(rename = "response.reasoning_summary_text.delta")]
    SummaryDelta {
        output_index: u64,
        summary_index: u64,
        delta: String,
    },
    #[serde(rename = "response.completed")]
    Completed { response: ResponseWire },
    #[serde(rename = "response.incomplete")]
    Incomplete { response: ResponseWire },
    #[serde(rename = "response.failed")]
    Failed { response: ResponseWire },
    #[serde(rename = "error")]
    Error(ErrorBody),
    #[serde(other)]
    Unknown,
}

/// An output item (`message`, `function_call`, `reasoning`, or a kind
/// this adapter does not read).
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Item {
    FunctionCall {
        #[serde(default)]
        call_id: Option<String>,
        #[serde(default)]
        name: Option<String>,
        #[serde(default)]
        arguments: Option<String>,
    },
    Reasoning {
        #[serde(default)]
        id: Option<String>,
        #[serde(default)]
        summary: Vec<Summary>,
        #[serde(default)]
        encrypted_content: Option<String>,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct Summary {
    #[serde(default)]
    text: String,
}

#[derive(Deserialize, Default)]
struct ResponseWire {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    model: Option<Value>,
    #[serde(default)]
    service_tier: Option<Value>,
    #[serde(default)]
    usage: Option<UsageWire>,
    #[serde(default)]
    incomplete_details: Option<IncompleteDetails>,
    #[serde(default)]
    error: Option<ErrorBody>,
}

#[derive(Deserialize)]
struct UsageWire {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct IncompleteDetails {
    #[serde(default)]
    reason: Option<String>,
}

/// A function call being assembled.
#[derive(Default)]
struct CallAcc {
    call_id: Option<String>,
    name: Option<String>,
    arguments: String,
}

/// The summary parts of a reasoning item streamed so far: their byte
/// lengths, and the index of the part being streamed.
#[derive(Default)]
struct SummaryAcc {
    lengths: Vec<usize>,
    current: Option<u64>,
}

#[derive(Default)]
struct Facts {
    id: Option<String>,
    model: Option<String>,
    service_tier: Option<String>,
    request_id: Option<String>,
}

/// The Responses stream state machine.
pub(crate) struct ResponsesDecoder {
    limits: Limits,
    operation_id: String,
    key: Option<ApiKey>,
    calls: BTreeMap<u64, CallAcc>,
    calls_emitted: usize,
    summaries: BTreeMap<u64, SummaryAcc>,
    /// The output item whose reasoning delta was the last item pushed: a
    /// signature may close only that one.
    open_reasoning: Option<u64>,
    refused: bool,
    facts: Facts,
}

impl ResponsesDecoder {
    pub(crate) fn new(
        limits: Limits,
        operation_id: &str,
        request_id: Option<String>,
        key: Option<ApiKey>,
    ) -> Self {
        ResponsesDecoder {
            limits,
            operation_id: operation_id.to_owned(),
            key,
            calls: BTreeMap::new(),
            calls_emitted: 0,
            summaries: BTreeMap::new(),
            open_reasoning: None,
            refused: false,
            facts: Facts {
                request_id,
                ..Facts::default()
            },
        }
    }

    fn remember(&mut self, response: &ResponseWire) {
        keep_facts(
            [
                (&mut self.facts.id, &response.id),
                (&mut self.facts.model, &response.model),
                (&mut self.facts.service_tier, &response.service_tier),
            ],
            self.key.as_ref(),
        );
    }

    fn text(&mut self, text: &str, out: &mut VecDeque<RawItem>) {
        if !text.is_empty() {
            self.open_reasoning = None;
            push_text(out, text, self.limits.delta_bytes);
        }
    }

    fn reasoning(&mut self, output_index: u64, text: &str, out: &mut VecDeque<RawItem>) {
        if !text.is_empty() {
            self.open_reasoning = Some(output_index);
            push_reasoning(out, text, self.limits.delta_bytes);
        }
    }

    /// A summary delta: a new summary part is set off from the one
    /// before by the separator; its length is counted for the packing.
    fn summary_delta(
        &mut self,
        output_index: u64,
        summary_index: u64,
        delta: &str,
        out: &mut VecDeque<RawItem>,
    ) {
        if delta.is_empty() {
            return;
        }
        let acc = self.summaries.entry(output_index).or_default();
        let separate = acc.current != Some(summary_index) && !acc.lengths.is_empty();
        if acc.current != Some(summary_index) {
            acc.lengths.push(0);
            acc.current = Some(summary_index);
        }
        if let Some(len) = acc.lengths.last_mut() {
            *len += delta.len();
        }
        if separate {
            self.reasoning(output_index, SUMMARY_SEPARATOR, out);
        }
        self.reasoning(output_index, delta, out);
    }

    /// A reasoning item is done: its summary (when no delta brought it),
    /// then its sealed value as the signature of the reasoning just
    /// streamed, or as a redacted part.
    fn reasoning_done(
        &mut self,
        output_index: u64,
        id: Option<String>,
        summary: Vec<Summary>,
        encrypted: Option<String>,
        out: &mut VecDeque<RawItem>,
    ) -> Flow {
        if !self.summaries.contains_key(&output_index) {
            for (index, part) in (0u64..).zip(&summary) {
                self.summary_delta(output_index, index, &part.text, out);
            }
        }
        let lengths = self
            .summaries
            .remove(&output_index)
            .map(|acc| acc.lengths)
            .unwrap_or_default();
        let Some(encrypted) = encrypted.filter(|e| !e.is_empty()) else {
            // Not asked for, or not a sealed item: nothing to send back.
            return Flow::More;
        };
        let Some(id) = id.filter(|id| is_packable_id(id)) else {
            return protocol(
                out,
                "a reasoning item with encrypted_content has no id of 1 to 256 token bytes (rule responses.reasoning_id)",
            );
        };
        let value = pack(&id, &lengths, &encrypted);
        if self.open_reasoning == Some(output_index) {
            out.push_back(RawItem::ReasoningSignature(value));
        } else {
            out.push_back(RawItem::RedactedReasoning(value));
        }
        self.open_reasoning = None;
        Flow::More
    }

    fn call_added(&mut self, output_index: u64, out: &mut VecDeque<RawItem>) -> Flow {
        if self.calls.contains_key(&output_index) {
            return protocol(out, format!("output item {output_index} added twice"));
        }
        if self.calls.len() + self.calls_emitted >= self.limits.tool_calls_per_stream {
            return too_many_calls(out, self.limits.tool_calls_per_stream);
        }
        self.calls.insert(output_index, CallAcc::default());
        Flow::More
    }

    fn arguments(
        &mut self,
        output_index: u64,
        text: &str,
        replace: bool,
        out: &mut VecDeque<RawItem>,
    ) -> Flow {
        let max = max_arguments_bytes(&self.limits);
        let Some(call) = self.calls.get_mut(&output_index) else {
            return protocol(
                out,
                format!("arguments for output item {output_index}, not an open function call"),
            );
        };
        let len = if replace {
            text.len()
        } else {
            call.arguments.len() + text.len()
        };
        if len > max {
            return protocol(out, format!("function call arguments over {max} bytes"));
        }
        if replace {
            call.arguments.clear();
        }
        call.arguments.push_str(text);
        Flow::More
    }

    /// A function call item is done: emitted with the item's own members,
    /// falling back to what its events assembled.
    fn call_done(&mut self, output_index: u64, done: CallAcc, out: &mut VecDeque<RawItem>) -> Flow {
        if !self.calls.contains_key(&output_index)
            && self.call_added(output_index, out) == Flow::Done
        {
            return Flow::Done;
        }
        if !done.arguments.is_empty()
            && self.arguments(output_index, &done.arguments, true, out) == Flow::Done
        {
            return Flow::Done;
        }
        let call = self.calls.remove(&output_index).unwrap_or_default();
        let call_id = done
            .call_id
            .or(call.call_id)
            .filter(|id| !id.is_empty())
            .unwrap_or_else(|| format!("call_{}_{output_index}", self.operation_id));
        self.open_reasoning = None;
        out.push_back(RawItem::ToolCall(RawToolCall {
            call_id,
            name: done.name.or(call.name).unwrap_or_default(),
            arguments: arguments_or_empty(call.arguments),
        }));
        self.calls_emitted += 1;
        Flow::More
    }

    fn item_added(&mut self, output_index: u64, item: Item, out: &mut VecDeque<RawItem>) -> Flow {
        let Item::FunctionCall {
            call_id,
            name,
            arguments,
        } = item
        else {
            return Flow::More;
        };
        if self.call_added(output_index, out) == Flow::Done {
            return Flow::Done;
        }
        if let Some(call) = self.calls.get_mut(&output_index) {
            call.call_id = call_id;
            call.name = name;
        }
        self.arguments(output_index, &arguments.unwrap_or_default(), true, out)
    }

    fn item_done(&mut self, output_index: u64, item: Item, out: &mut VecDeque<RawItem>) -> Flow {
        match item {
            Item::FunctionCall {
                call_id,
                name,
                arguments,
            } => self.call_done(
                output_index,
                CallAcc {
                    call_id,
                    name,
                    arguments: arguments.unwrap_or_default(),
                },
                out,
            ),
            Item::Reasoning {
                id,
                summary,
                encrypted_content,
            } => self.reasoning_done(output_index, id, summary, encrypted_content, out),
            Item::Other => Flow::More,
        }
    }

    /// The completion of a `response.completed` (`Stop`, or
    /// `tool_calls`, or `content_filter` after a refusal) or of a
    /// `response.incomplete` (`Length` or `ContentFilter`).
    fn complete(
        &mut self,
        response: &ResponseWire,
        finish: FinishReason,
        out: &mut VecDeque<RawItem>,
    ) -> Flow {
        self.remember(response);
        let finish = finish_with_calls(finish, self.calls_emitted > 0);
        let finish = if self.refused && finish == FinishReason::Stop {
            FinishReason::ContentFilter
        } else {
            finish
        };
        let usage = response.usage.as_ref().map(|u| RawUsage {
            input_tokens: u.input_tokens.unwrap_or(0),
            output_tokens: u.output_tokens.unwrap_or(0),
        });
        let metadata = namespaced(
            OPENAI_NAMESPACE,
            &[
                ("id", &self.facts.id),
                ("model", &self.facts.model),
                ("service_tier", &self.facts.service_tier),
                ("request_id", &self.facts.request_id),
            ],
        );
        out.push_back(RawItem::Completion(RawCompletion {
            finish,
            usage,
            metadata,
        }));
        Flow::Done
    }

    fn completed(&mut self, response: &ResponseWire, out: &mut VecDeque<RawItem>) -> Flow {
        if let Some(index) = self.calls.keys().next() {
            return protocol(
                out,
                format!("response.completed with function call {index} not done"),
            );
        }
        self.complete(response, FinishReason::Stop, out)
    }

    /// Calls still open were cut off: they are dropped.
    fn incomplete(&mut self, response: &ResponseWire, out: &mut VecDeque<RawItem>) -> Flow {
        let reason = response
            .incomplete_details
            .as_ref()
            .and_then(|d| d.reason.as_deref());
        let finish = match reason {
            Some("max_output_tokens") => FinishReason::Length,
            Some("content_filter") => FinishReason::ContentFilter,
            Some(other) => {
                let shown = safe_code(other).unwrap_or("(unprintable)");
                return protocol(out, format!("unknown incomplete reason {shown}"));
            }
            None => return protocol(out, "response.incomplete without a reason"),
        };
        self.calls.clear();
        self.complete(response, finish, out)
    }
}

impl Decoder for ResponsesDecoder {
    fn event(&mut self, _name: Option<&str>, data: &str, out: &mut VecDeque<RawItem>) -> Flow {
        let data = data.trim_matches([' ', '\t', '\r', '\n']);
        if data.is_empty() {
            return Flow::More;
        }
        let event: Event = match serde_json::from_str(data) {
            Ok(event) => event,
            Err(e) => return fail(out, bad_json("a stream event", &e)),
        };
        match event {
            Event::Created { response } | Event::InProgress { response } => {
                self.remember(&response.unwrap_or_default());
                Flow::More
            }
            Event::ItemAdded { output_index, item } => self.item_added(output_index, item, out),
            Event::ItemDone { output_index, item } => self.item_done(output_index, item, out),
            Event::TextDelta { delta } => {
                self.text(&delta, out);
                Flow::More
            }
            Event::RefusalDelta { delta } => {
                self.refused = true;
                self.text(&delta, out);
                Flow::More
            }
            Event::ArgumentsDelta {
                output_index,
                delta,
            } => self.arguments(output_index, &delta, false, out),
            Event::ArgumentsDone {
                output_index,
                arguments,
            } => self.arguments(output_index, &arguments, true, out),
            Event::SummaryDelta {
                output_index,
                summary_index,
                delta,
            } => {
                self.summary_delta(output_index, summary_index, &delta, out);
                Flow::More
            }
            Event::Completed { response } => self.completed(&response, out),
            Event::Incomplete { response } => self.incomplete(&response, out),
            Event::Failed { response } => fail(
                out,
                classify_stream_error(&response.error.unwrap_or_default()),
            ),
            Event::Error(error) => fail(out, classify_stream_error(&error)),
            Event::Unknown => Flow::More,
        }
    }

    fn end(&mut self, out: &mut VecDeque<RawItem>) {
        fail(
            out,
            RawProblem::new(
                ProblemKind::Unavailable,
                "the stream ended before response.completed",
                true,
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    /// The items these events yield, then a `response.completed`, up to
    /// the terminal (whose finish is returned), with `delta_bytes` of 8.
    fn check(events: &[Value], expected: &[RawItem], finish: Option<FinishReason>) {
        let limits = Limits {
            delta_bytes: 8,
            ..Limits::default()
        };
        let mut decoder = ResponsesDecoder::new(limits, "op_1", None, None);
        let mut out = VecDeque::new();
        let completed = json!({"type": "response.completed", "response": {"id": "resp_1"}});
        for event in events.iter().chain([&completed]) {
            if decoder.event(None, &event.to_string(), &mut out) == Flow::Done {
                break;
            }
        }
        let mut items: Vec<RawItem> = out.into_iter().collect();
        let terminal = items.pop();
        let got = match terminal {
            Some(RawItem::Completion(c)) => Some(c.finish),
            _ => None,
        };
        assert_eq!(items, expected, "{events:?}");
        assert_eq!(got, finish, "{events:?}");
    }

    fn summary(index: u64, delta: &str) -> Value {
        json!({"type": "response.reasoning_summary_text.delta", "item_id": "rs_1",
               "output_index": 0, "summary_index": index, "delta": delta})
    }

    fn reasoning_done(summary: Value, encrypted: Value) -> Value {
        json!({"type": "response.output_item.done", "output_index": 0, "item":
            {"type": "reasoning", "id": "rs_1", "summary": summary, "encrypted_content": encrypted}})
    }

    #[test]
    fn reasoning_items_become_reasoning_parts_with_their_sealed_value() {
        let r = |t: &str| RawItem::ReasoningDelta(t.to_owned());
        let signed = |s: &str| RawItem::ReasoningSignature(s.to_owned());
        let stop = Some(FinishReason::Stop);
        for (events, expected) in [
            // Two summary parts: set off by a blank line, their lengths
            // packed with the id and the encrypted content.
            (
                vec![
                    summary(0, "**Plan**"),
                    summary(1, "Åse"),
                    summary(1, ""),
                    summary(1, " ok"),
                    reasoning_done(json!([]), json!("gAAA+/=")),
                ],
                vec![
                    r("**Plan**"),
                    r("\n\n"),
                    r("Åse"),
                    r(" ok"),
                    signed("rs_1:8,7:gAAA+/="),
                ],
            ),
            // No summary text: a redacted part.
            (
                vec![reasoning_done(json!([]), json!("gAAA"))],
                vec![RawItem::RedactedReasoning("rs_1::gAAA".into())],
            ),
            // A summary only in the done item: streamed from there.
            (
                vec![reasoning_done(
                    json!([{"type": "summary_text", "text": "A"}, {"type": "summary_text", "text": "B"}]),
                    json!("e"),
                )],
                vec![r("A"), r("\n\n"), r("B"), signed("rs_1:1,1:e")],
            ),
            // No encrypted content (not asked for): the text stays
            // unsigned.
            (
                vec![summary(0, "Hm."), reasoning_done(json!([]), json!(null))],
                vec![r("Hm.")],
            ),
            // Text between the summary and the done item: the value
            // cannot sign it, it comes as a redacted part.
            (
                vec![
                    summary(0, "Hm."),
                    json!({"type": "response.output_text.delta", "delta": "Hi"}),
                    reasoning_done(json!([]), json!("e")),
                ],
                vec![
                    r("Hm."),
                    RawItem::text("Hi"),
                    RawItem::RedactedReasoning("rs_1:3:e".into()),
                ],
            ),
        ] {
            check(&events, &expected, stop.clone());
        }
    }

    #[test]
    fn events_map_to_text_calls_and_finishes() {
        let text = |d: &str| json!({"type": "response.output_text.delta", "delta": d});
        let call_added = json!({"type": "response.output_item.added", "output_index": 1,
            "item": {"type": "function_call", "call_id": "call_a", "name": "f", "arguments": ""}});
        let args = |d: &str| json!({"type": "response.function_call_arguments.delta", "output_index": 1, "delta": d});
        let call_done = |a: &str| {
            json!({"type": "response.output_item.done", "output_index": 1,
            "item": {"type": "function_call", "call_id": "call_a", "name": "f", "arguments": a}})
        };
        let call = |a: &str| {
            RawItem::ToolCall(RawToolCall {
                call_id: "call_a".into(),
                name: "f".into(),
                arguments: a.into(),
            })
        };
        for (events, expected, finish) in [
            (
                vec![text("Hello, world")],
                vec![RawItem::text("Hello, w"), RawItem::text("orld")],
                Some(FinishReason::Stop),
            ),
            // Unknown event types and members are ignored.
            (
                vec![json!({"type": "response.future.thing", "x": 1}), text("A")],
                vec![RawItem::text("A")],
                Some(FinishReason::Stop),
            ),
            // Arguments assembled from deltas, the done item's win.
            (
                vec![
                    call_added.clone(),
                    args("{\"a\""),
                    args(":1}"),
                    call_done(""),
                ],
                vec![call("{\"a\":1}")],
                Some(FinishReason::ToolCalls),
            ),
            (
                vec![call_added.clone(), args("{"), call_done("{\"b\":2}")],
                vec![call("{\"b\":2}")],
                Some(FinishReason::ToolCalls),
            ),
            // A refusal is text, and the finish is content_filter.
            (
                vec![json!({"type": "response.refusal.delta", "delta": "No."})],
                vec![RawItem::text("No.")],
                Some(FinishReason::ContentFilter),
            ),
            // A done item without its added event: emitted all the same.
            (
                vec![call_done("{}")],
                vec![call("{}")],
                Some(FinishReason::ToolCalls),
            ),
            // Completed with a call not done: protocol.
            (vec![call_added.clone()], vec![], None),
            // Arguments for no open call: protocol.
            (vec![args("{}")], vec![], None),
        ] {
            check(&events, &expected, finish);
        }
    }
}
