//! The Chat Completions stream state machine: chunks to text and
//! reasoning deltas, tool calls assembled by index, and one terminal at
//! `[DONE]`.

use super::OPENAI_NAMESPACE;
use super::errors::{ErrorBody, classify_stream_error};
use crate::decode::{
    arguments_or_empty, finish_with_calls, is_json_object, max_arguments_bytes, namespaced,
    push_reasoning, push_text,
};
use crate::key::ApiKey;
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
struct Chunk {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    model: Option<Value>,
    #[serde(default)]
    system_fingerprint: Option<Value>,
    #[serde(default)]
    service_tier: Option<Value>,
    #[serde(default)]
    choices: Option<Vec<Choice>>,
    #[serde(default)]
    usage: Option<UsageWire>,
    #[serde(default)]
    error: Option<ErrorBody>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default)]
    delta: Option<Delta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    refusal: Option<String>,
    /// DeepSeek, llama.cpp, LM Studio and older vLLM.
    #[serde(default)]
    reasoning_content: Option<String>,
    /// vLLM, Ollama, OpenRouter.
    #[serde(default)]
    reasoning: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<ToolCallDelta>>,
}

impl Delta {
    /// The chunk's reasoning: `reasoning_content` when it has text, else
    /// `reasoning`. Servers that moved from one name to the other send
    /// both with the same text in one chunk; taking one never doubles it.
    fn reasoning(&self) -> Option<&str> {
        self.reasoning_content
            .as_deref()
            .filter(|text| !text.is_empty())
            .or(self.reasoning.as_deref())
    }
}

#[derive(Deserialize)]
struct ToolCallDelta {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<FunctionDelta>,
}

#[derive(Deserialize)]
struct FunctionDelta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Deserialize)]
struct UsageWire {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
}

#[derive(Default)]
struct CallAcc {
    id: String,
    name: String,
    arguments: String,
}

#[derive(Default)]
struct Facts {
    id: Option<String>,
    model: Option<String>,
    system_fingerprint: Option<String>,
    service_tier: Option<String>,
    request_id: Option<String>,
}

/// The Chat Completions stream state machine.
pub(crate) struct OpenAiDecoder {
    limits: Limits,
    operation_id: String,
    key: Option<ApiKey>,
    calls: BTreeMap<u64, CallAcc>,
    last_call: Option<u64>,
    finish: Option<FinishReason>,
    emitted_calls: bool,
    usage: Option<RawUsage>,
    facts: Facts,
}

impl OpenAiDecoder {
    pub(crate) fn new(
        limits: Limits,
        operation_id: &str,
        request_id: Option<String>,
        key: Option<ApiKey>,
    ) -> Self {
        OpenAiDecoder {
            limits,
            operation_id: operation_id.to_owned(),
            key,
            calls: BTreeMap::new(),
            last_call: None,
            finish: None,
            emitted_calls: false,
            usage: None,
            facts: Facts {
                request_id,
                ..Facts::default()
            },
        }
    }

    fn remember(&mut self, chunk: &Chunk) {
        keep_facts(
            [
                (&mut self.facts.id, &chunk.id),
                (&mut self.facts.model, &chunk.model),
                (
                    &mut self.facts.system_fingerprint,
                    &chunk.system_fingerprint,
                ),
                (&mut self.facts.service_tier, &chunk.service_tier),
            ],
            self.key.as_ref(),
        );
    }

    fn metadata(&self) -> Option<Value> {
        namespaced(
            OPENAI_NAMESPACE,
            &[
                ("id", &self.facts.id),
                ("model", &self.facts.model),
                ("system_fingerprint", &self.facts.system_fingerprint),
                ("service_tier", &self.facts.service_tier),
                ("request_id", &self.facts.request_id),
            ],
        )
    }

    /// The slot a tool-call delta belongs to: its `index`; without one
    /// (some compatible servers), the call with the same id, a new slot
    /// for a new id, else the call last touched.
    fn slot(&self, delta: &ToolCallDelta) -> u64 {
        if let Some(index) = delta.index {
            return index;
        }
        if let Some(id) = delta.id.as_deref().filter(|id| !id.is_empty()) {
            if let Some((&index, _)) = self.calls.iter().find(|(_, c)| c.id == id) {
                return index;
            }
            return self.calls.keys().next_back().map_or(0, |&i| i + 1);
        }
        self.last_call.unwrap_or(0)
    }

    fn tool_delta(&mut self, delta: ToolCallDelta, out: &mut VecDeque<RawItem>) -> Flow {
        if self.finish.is_some() {
            return protocol(out, "tool call delta after finish_reason");
        }
        let slot = self.slot(&delta);
        if !self.calls.contains_key(&slot) && self.calls.len() >= self.limits.tool_calls_per_stream
        {
            return too_many_calls(out, self.limits.tool_calls_per_stream);
        }
        let max_arguments = max_arguments_bytes(&self.limits);
        let call = self.calls.entry(slot).or_default();
        self.last_call = Some(slot);
        if let Some(id) = delta.id.filter(|id| !id.is_empty())
            && call.id.is_empty()
        {
            call.id = id;
        }
        if let Some(function) = delta.function {
            if let Some(name) = function.name.filter(|n| !n.is_empty())
                && call.name.is_empty()
            {
                call.name = name;
            }
            if let Some(fragment) = function.arguments {
                if call.arguments.len() + fragment.len() > max_arguments {
                    return protocol(
                        out,
                        format!("tool call arguments over {max_arguments} bytes"),
                    );
                }
                call.arguments.push_str(&fragment);
            }
        }
        Flow::More
    }

    /// Emits the assembled calls in index order. After a `length` or
    /// `content_filter` finish, calls whose arguments are not a complete
    /// JSON object were cut off and are dropped.
    fn emit_calls(&mut self, finish: &FinishReason, out: &mut VecDeque<RawItem>) {
        let interrupted = matches!(finish, FinishReason::Length | FinishReason::ContentFilter);
        for (index, call) in std::mem::take(&mut self.calls) {
            let arguments = arguments_or_empty(call.arguments);
            if interrupted && !is_json_object(&arguments) {
                continue;
            }
            let call_id = if call.id.is_empty() {
                format!("call_{}_{index}", self.operation_id)
            } else {
                call.id
            };
            out.push_back(RawItem::ToolCall(RawToolCall {
                call_id,
                name: call.name,
                arguments,
            }));
            self.emitted_calls = true;
        }
    }

    fn complete(&mut self, out: &mut VecDeque<RawItem>) -> Flow {
        let Some(finish) = self.finish.clone() else {
            return protocol(out, "stream ended with [DONE] before any finish_reason");
        };
        out.push_back(RawItem::Completion(RawCompletion {
            finish: finish_with_calls(finish, self.emitted_calls),
            usage: self.usage,
            metadata: self.metadata(),
        }));
        Flow::Done
    }
}

impl Decoder for OpenAiDecoder {
    fn event(&mut self, _name: Option<&str>, data: &str, out: &mut VecDeque<RawItem>) -> Flow {
        let data = data.trim_matches([' ', '\t', '\r', '\n']);
        if data.is_empty() {
            return Flow::More;
        }
        if data == "[DONE]" {
            return self.complete(out);
        }
        let chunk: Chunk = match serde_json::from_str(data) {
            Ok(chunk) => chunk,
            Err(e) => return fail(out, bad_json("a stream chunk", &e)),
        };
        if let Some(error) = &chunk.error {
            return fail(out, classify_stream_error(error));
        }
        self.remember(&chunk);
        if let Some(usage) = &chunk.usage {
            self.usage = Some(RawUsage {
                input_tokens: usage.prompt_tokens.unwrap_or(0),
                output_tokens: usage.completion_tokens.unwrap_or(0),
            });
        }
        // We never ask for n > 1: only choice 0 is read.
        for choice in chunk.choices.unwrap_or_default() {
            if choice.index.unwrap_or(0) != 0 {
                continue;
            }
            if let Some(delta) = choice.delta {
                if let Some(reasoning) = delta.reasoning() {
                    push_reasoning(out, reasoning, self.limits.delta_bytes);
                }
                for text in [delta.content, delta.refusal].into_iter().flatten() {
                    push_text(out, &text, self.limits.delta_bytes);
                }
                for call in delta.tool_calls.unwrap_or_default() {
                    if self.tool_delta(call, out) == Flow::Done {
                        return Flow::Done;
                    }
                }
            }
            if let Some(reason) = choice.finish_reason {
                if self.finish.is_some() {
                    continue;
                }
                let finish = match reason.as_str() {
                    "stop" => FinishReason::Stop,
                    "length" => FinishReason::Length,
                    "tool_calls" | "function_call" => FinishReason::ToolCalls,
                    "content_filter" => FinishReason::ContentFilter,
                    other => {
                        let shown = safe_code(other).unwrap_or("(unprintable)");
                        return protocol(out, format!("unknown finish_reason {shown}"));
                    }
                };
                self.emit_calls(&finish, out);
                self.finish = Some(finish);
            }
        }
        Flow::More
    }

    fn end(&mut self, out: &mut VecDeque<RawItem>) {
        if self.finish.is_some() && self.usage.is_some() {
            // Everything but the [DONE] line arrived: the usage chunk is
            // the last one a server sends.
            self.complete(out);
        } else {
            fail(
                out,
                RawProblem::new(
                    ProblemKind::Unavailable,
                    "the stream ended before [DONE]",
                    true,
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    /// The items chunks with these deltas yield, then a `stop` and
    /// `[DONE]`, up to the terminal (left out), with `delta_bytes` of 8.
    fn check(deltas: &[Value], expected: &[RawItem]) {
        let limits = Limits {
            delta_bytes: 8,
            ..Limits::default()
        };
        let mut decoder = OpenAiDecoder::new(limits, "op_1", None, None);
        let mut out = VecDeque::new();
        let chunks = deltas
            .iter()
            .map(|d| json!({"choices": [{"index": 0, "delta": d}]}).to_string())
            .chain([
                json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
                    .to_string(),
                "[DONE]".to_owned(),
            ]);
        for chunk in chunks {
            decoder.event(None, &chunk, &mut out);
        }
        let mut items: Vec<RawItem> = out.into_iter().collect();
        assert!(items.pop().is_some_and(|i| i.is_terminal()), "{items:?}");
        assert_eq!(items, expected, "{deltas:?}");
    }

    #[test]
    fn reasoning_fields_become_reasoning_deltas() {
        let r = |t: &str| RawItem::ReasoningDelta(t.to_owned());
        for (delta, expected) in [
            (
                json!({"reasoning_content": "Ærlig talt"}),
                vec![r("Ærlig t"), r("alt")],
            ),
            (json!({"reasoning": "Hm."}), vec![r("Hm.")]),
            // Both names with the same text: taken once, from
            // reasoning_content.
            (
                json!({"reasoning_content": "A", "reasoning": "A"}),
                vec![r("A")],
            ),
            (
                json!({"reasoning_content": "", "reasoning": "B"}),
                vec![r("B")],
            ),
            (
                json!({"reasoning_content": null, "reasoning": "C"}),
                vec![r("C")],
            ),
            (json!({"reasoning_content": "", "reasoning": ""}), vec![]),
            // Reasoning comes before the chunk's text.
            (
                json!({"content": "Hi", "reasoning_content": "first"}),
                vec![r("first"), RawItem::text("Hi")],
            ),
        ] {
            check(&[delta], &expected);
        }
    }
}
