//! The Messages stream state machine: content blocks to text deltas,
//! reasoning (thinking deltas, their signature, redacted thinking) and
//! tool calls, cumulative usage, and one terminal at `message_stop`.

use super::ANTHROPIC_NAMESPACE;
use super::errors::{ErrorBody, classify_stream_error};
use crate::decode::{
    arguments_or_empty, finish_with_calls, max_arguments_bytes, namespaced, push_reasoning,
    push_text,
};
use crate::key::ApiKey;
use crate::problem::{bad_json, fail, protocol, too_many_calls};
use crate::pump::{Decoder, Flow};
use crate::screen::{safe_code, safe_fact};
use keel_message::Limits;
use keel_stream::{
    FinishReason, ProblemKind, RawCompletion, RawItem, RawProblem, RawToolCall, RawUsage,
};
use serde::Deserialize;
use serde_json::Value;
use std::collections::{BTreeMap, VecDeque};

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Event {
    MessageStart {
        message: MessageStart,
    },
    ContentBlockStart {
        index: u64,
        content_block: BlockStart,
    },
    ContentBlockDelta {
        index: u64,
        delta: BlockDelta,
    },
    ContentBlockStop {
        index: u64,
    },
    MessageDelta {
        #[serde(default)]
        delta: Option<MessageDelta>,
        #[serde(default)]
        usage: Option<UsageWire>,
    },
    MessageStop,
    Ping,
    Error {
        #[serde(default)]
        error: Option<ErrorBody>,
    },
    #[serde(other)]
    Unknown,
}

#[derive(Deserialize)]
struct MessageStart {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    model: Option<Value>,
    #[serde(default)]
    usage: Option<UsageWire>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockStart {
    Text {
        #[serde(default)]
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        #[serde(default)]
        input: Option<Value>,
    },
    /// Streams start it with empty `thinking` and `signature`; both come
    /// in deltas.
    Thinking {
        #[serde(default)]
        thinking: String,
        #[serde(default)]
        signature: String,
    },
    /// Comes whole: the opaque `data` is in the start event.
    RedactedThinking { data: String },
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockDelta {
    TextDelta {
        text: String,
    },
    InputJsonDelta {
        partial_json: String,
    },
    ThinkingDelta {
        thinking: String,
    },
    SignatureDelta {
        signature: String,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct MessageDelta {
    #[serde(default)]
    stop_reason: Option<String>,
}

#[derive(Deserialize)]
struct UsageWire {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    service_tier: Option<Value>,
}

enum Block {
    Text,
    Tool {
        id: String,
        name: String,
        /// The `input` of `content_block_start`, used when no
        /// `input_json_delta` follows.
        start_input: Option<Value>,
        json: String,
    },
    /// A thinking block: its deltas are reasoning, its signature closes
    /// the reasoning part.
    Thinking,
    /// Redacted thinking (yielded whole at its start), server tool
    /// blocks, anything unknown.
    Ignored,
}

#[derive(Default, Clone, Copy)]
struct Counts {
    input: u64,
    cache_creation: u64,
    cache_read: u64,
    output: u64,
}

/// The Messages stream state machine.
pub(crate) struct AnthropicDecoder {
    limits: Limits,
    key: Option<ApiKey>,
    blocks: BTreeMap<u64, Block>,
    calls: usize,
    emitted_calls: bool,
    stop_reason: Option<String>,
    counts: Option<Counts>,
    id: Option<String>,
    model: Option<String>,
    service_tier: Option<String>,
    request_id: Option<String>,
}

impl AnthropicDecoder {
    pub(crate) fn new(limits: Limits, request_id: Option<String>, key: Option<ApiKey>) -> Self {
        AnthropicDecoder {
            limits,
            key,
            blocks: BTreeMap::new(),
            calls: 0,
            emitted_calls: false,
            stop_reason: None,
            counts: None,
            id: None,
            model: None,
            service_tier: None,
            request_id,
        }
    }

    fn fact(&self, value: &Option<Value>) -> Option<String> {
        safe_fact(value, self.key.as_ref())
    }

    /// Usage counts are cumulative: a later report replaces what it names.
    fn usage(&mut self, usage: &UsageWire) {
        let mut counts = self.counts.unwrap_or_default();
        for (slot, value) in [
            (&mut counts.input, usage.input_tokens),
            (
                &mut counts.cache_creation,
                usage.cache_creation_input_tokens,
            ),
            (&mut counts.cache_read, usage.cache_read_input_tokens),
            (&mut counts.output, usage.output_tokens),
        ] {
            if let Some(v) = value {
                *slot = v;
            }
        }
        self.counts = Some(counts);
        if let Some(tier) = self.fact(&usage.service_tier) {
            self.service_tier = Some(tier);
        }
    }

    fn metadata(&self) -> Option<Value> {
        namespaced(
            ANTHROPIC_NAMESPACE,
            &[
                ("id", &self.id),
                ("model", &self.model),
                ("service_tier", &self.service_tier),
                ("request_id", &self.request_id),
            ],
        )
    }

    fn block_start(&mut self, index: u64, block: BlockStart, out: &mut VecDeque<RawItem>) -> Flow {
        if self.blocks.contains_key(&index) {
            return protocol(out, format!("content block {index} started twice"));
        }
        let block = match block {
            BlockStart::Text { text } => {
                push_text(out, &text, self.limits.delta_bytes);
                Block::Text
            }
            BlockStart::ToolUse { id, name, input } => {
                if self.calls >= self.limits.tool_calls_per_stream {
                    return too_many_calls(out, self.limits.tool_calls_per_stream);
                }
                self.calls += 1;
                Block::Tool {
                    id,
                    name,
                    start_input: input,
                    json: String::new(),
                }
            }
            BlockStart::Thinking {
                thinking,
                signature,
            } => {
                push_reasoning(out, &thinking, self.limits.delta_bytes);
                if !signature.is_empty() {
                    out.push_back(RawItem::ReasoningSignature(signature));
                }
                Block::Thinking
            }
            BlockStart::RedactedThinking { data } => {
                // Whole at its start; the validator checks the value.
                out.push_back(RawItem::RedactedReasoning(data));
                Block::Ignored
            }
            BlockStart::Other => Block::Ignored,
        };
        self.blocks.insert(index, block);
        Flow::More
    }

    fn block_delta(&mut self, index: u64, delta: BlockDelta, out: &mut VecDeque<RawItem>) -> Flow {
        let max_json = max_arguments_bytes(&self.limits);
        let Some(block) = self.blocks.get_mut(&index) else {
            return protocol(
                out,
                format!("delta for content block {index}, never started"),
            );
        };
        match (block, delta) {
            (Block::Text, BlockDelta::TextDelta { text }) => {
                push_text(out, &text, self.limits.delta_bytes);
            }
            (Block::Tool { json, .. }, BlockDelta::InputJsonDelta { partial_json }) => {
                if json.len() + partial_json.len() > max_json {
                    return protocol(out, format!("tool input JSON over {max_json} bytes"));
                }
                json.push_str(&partial_json);
            }
            (Block::Thinking, BlockDelta::ThinkingDelta { thinking }) => {
                push_reasoning(out, &thinking, self.limits.delta_bytes);
            }
            (Block::Thinking, BlockDelta::SignatureDelta { signature }) => {
                // Passed on as sent: the validator refuses a second one or
                // one with no reasoning open, and checks the value.
                out.push_back(RawItem::ReasoningSignature(signature));
            }
            // Citations, deltas of ignored blocks, mismatched deltas.
            _ => {}
        }
        Flow::More
    }

    fn block_stop(&mut self, index: u64, out: &mut VecDeque<RawItem>) -> Flow {
        let Some(block) = self.blocks.remove(&index) else {
            return protocol(out, format!("content block {index} stopped, never started"));
        };
        if let Block::Tool {
            id,
            name,
            start_input,
            json,
        } = block
        {
            let arguments = match start_input {
                Some(Value::Object(map)) if json.trim().is_empty() && !map.is_empty() => {
                    Value::Object(map).to_string()
                }
                _ => arguments_or_empty(json),
            };
            out.push_back(RawItem::ToolCall(RawToolCall {
                call_id: id,
                name,
                arguments,
            }));
            self.emitted_calls = true;
        }
        Flow::More
    }

    fn message_stop(&mut self, out: &mut VecDeque<RawItem>) -> Flow {
        if let Some(index) = self.blocks.keys().next() {
            return protocol(out, format!("message_stop with content block {index} open"));
        }
        let Some(reason) = self.stop_reason.as_deref() else {
            return protocol(out, "message_stop without a stop_reason");
        };
        let finish = match reason {
            "end_turn" | "stop_sequence" | "pause_turn" => FinishReason::Stop,
            "tool_use" => FinishReason::ToolCalls,
            "max_tokens" | "model_context_window_exceeded" => FinishReason::Length,
            "refusal" => FinishReason::ContentFilter,
            other => {
                let shown = safe_code(other).unwrap_or("(unprintable)");
                return protocol(out, format!("unknown stop_reason {shown}"));
            }
        };
        let finish = finish_with_calls(finish, self.emitted_calls);
        let usage = self.counts.map(|c| RawUsage {
            input_tokens: c
                .input
                .saturating_add(c.cache_creation)
                .saturating_add(c.cache_read),
            output_tokens: c.output,
        });
        out.push_back(RawItem::Completion(RawCompletion {
            finish,
            usage,
            metadata: self.metadata(),
        }));
        Flow::Done
    }
}

impl Decoder for AnthropicDecoder {
    fn event(&mut self, _name: Option<&str>, data: &str, out: &mut VecDeque<RawItem>) -> Flow {
        let event: Event = match serde_json::from_str(data) {
            Ok(event) => event,
            Err(e) => return fail(out, bad_json("a stream event", &e)),
        };
        match event {
            Event::MessageStart { message } => {
                self.id = self.fact(&message.id);
                self.model = self.fact(&message.model);
                if let Some(usage) = &message.usage {
                    self.usage(usage);
                }
                Flow::More
            }
            Event::ContentBlockStart {
                index,
                content_block,
            } => self.block_start(index, content_block, out),
            Event::ContentBlockDelta { index, delta } => self.block_delta(index, delta, out),
            Event::ContentBlockStop { index } => self.block_stop(index, out),
            Event::MessageDelta { delta, usage } => {
                if let Some(reason) = delta.and_then(|d| d.stop_reason) {
                    self.stop_reason = Some(reason);
                }
                if let Some(usage) = &usage {
                    self.usage(usage);
                }
                Flow::More
            }
            Event::MessageStop => self.message_stop(out),
            Event::Ping | Event::Unknown => Flow::More,
            Event::Error { error } => fail(out, classify_stream_error(&error.unwrap_or_default())),
        }
    }

    fn end(&mut self, out: &mut VecDeque<RawItem>) {
        fail(
            out,
            RawProblem::new(
                ProblemKind::Unavailable,
                "the stream ended before message_stop",
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

    /// The items these events yield after a `message_start`, up to the
    /// terminal (left out), with `delta_bytes` of 8.
    fn check(events: &[Value], expected: &[RawItem]) {
        let limits = Limits {
            delta_bytes: 8,
            ..Limits::default()
        };
        let mut decoder = AnthropicDecoder::new(limits, None, None);
        let start = json!({"type": "message_start", "message": {"id": "m", "model": "c"}});
        let mut out = VecDeque::new();
        for event in std::iter::once(&start).chain(events) {
            decoder.event(None, &event.to_string(), &mut out);
        }
        let mut items: Vec<RawItem> = out.into_iter().collect();
        assert!(items.pop().is_some_and(|i| i.is_terminal()), "{items:?}");
        assert_eq!(items, expected, "{events:?}");
    }

    fn start(index: u64, block: Value) -> Value {
        json!({"type": "content_block_start", "index": index, "content_block": block})
    }

    fn delta(index: u64, delta: Value) -> Value {
        json!({"type": "content_block_delta", "index": index, "delta": delta})
    }

    #[test]
    fn thinking_blocks_become_reasoning_items() {
        let thinking = || {
            start(
                0,
                json!({"type": "thinking", "thinking": "", "signature": ""}),
            )
        };
        let think = |t: &str| delta(0, json!({"type": "thinking_delta", "thinking": t}));
        let sign = |s: &str| delta(0, json!({"type": "signature_delta", "signature": s}));
        let r = |t: &str| RawItem::ReasoningDelta(t.to_owned());
        let signed = |s: &str| RawItem::ReasoningSignature(s.to_owned());
        for (events, expected) in [
            // Deltas split to delta_bytes at char boundaries, the
            // signature passed on as sent.
            (
                vec![
                    thinking(),
                    think("Øystein thinks"),
                    think(""),
                    sign("Eq+/="),
                ],
                vec![r("Øystein"), r(" thinks"), signed("Eq+/=")],
            ),
            // A start that carries its text and signature (the
            // non-streaming shape).
            (
                vec![start(
                    0,
                    json!({"type": "thinking", "thinking": "Hm.", "signature": "S1"}),
                )],
                vec![r("Hm."), signed("S1")],
            ),
            // Redacted thinking comes whole at its start.
            (
                vec![start(
                    0,
                    json!({"type": "redacted_thinking", "data": "EmwK/+=="}),
                )],
                vec![RawItem::RedactedReasoning("EmwK/+==".into())],
            ),
            // Deltas of another block's kind are ignored.
            (
                vec![
                    start(0, json!({"type": "text", "text": ""})),
                    sign("S2"),
                    think("no"),
                    delta(0, json!({"type": "text_delta", "text": "yes"})),
                ],
                vec![RawItem::text("yes")],
            ),
            (
                vec![
                    thinking(),
                    delta(0, json!({"type": "text_delta", "text": "no"})),
                ],
                vec![],
            ),
        ] {
            let mut events = events;
            events.push(json!({"type": "content_block_stop", "index": 0}));
            events.push(json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}}));
            events.push(json!({"type": "message_stop"}));
            check(&events, &expected);
        }
    }
}
