//! The `streamGenerateContent` stream state machine. Each SSE event is a
//! whole `GenerateContentResponse` chunk: its first candidate's parts
//! become text deltas, reasoning (`thought: true` parts), signatures and
//! whole tool calls; `usageMetadata` is kept (each chunk reports the
//! counts so far); the chunk with a `finishReason` is the terminal. The
//! API sends no end-of-stream event, so a body that ends before a
//! `finishReason` is cut.
//!
//! A `thoughtSignature` becomes, by the part it came on (so that
//! `content.rs` can put it back there):
//!
//! - on a `thought: true` part: the signature of the open reasoning part
//!   (`ReasoningSignature`), or a redacted part when no reasoning text is
//!   open (the validator refuses a signature with nothing to sign);
//! - on any other part (`functionCall`, text): a redacted part
//!   (`RedactedReasoning`) yielded just before that part's own item, so
//!   that it closes any open reasoning and stays next to its part.

use super::GEMINI_NAMESPACE;
use super::call_ids::CallIds;
use super::errors::{ErrorBody, classify_stream_error};
use crate::decode::{
    finish_with_calls, max_arguments_bytes, namespaced, push_reasoning, push_text,
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
use std::collections::VecDeque;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Chunk {
    #[serde(default)]
    candidates: Option<Vec<Candidate>>,
    #[serde(default)]
    usage_metadata: Option<UsageWire>,
    #[serde(default)]
    model_version: Option<Value>,
    #[serde(default)]
    response_id: Option<Value>,
    #[serde(default)]
    prompt_feedback: Option<PromptFeedback>,
    #[serde(default)]
    error: Option<ErrorBody>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Candidate {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default)]
    content: Option<Content>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Content {
    #[serde(default)]
    parts: Option<Vec<WirePart>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WirePart {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    thought: Option<bool>,
    #[serde(default)]
    thought_signature: Option<String>,
    #[serde(default)]
    function_call: Option<FunctionCall>,
}

#[derive(Deserialize)]
struct FunctionCall {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    args: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PromptFeedback {
    #[serde(default)]
    block_reason: Option<String>,
}

#[derive(Deserialize, Default, Clone, Copy)]
#[serde(rename_all = "camelCase")]
struct UsageWire {
    #[serde(default)]
    prompt_token_count: Option<u64>,
    #[serde(default)]
    tool_use_prompt_token_count: Option<u64>,
    #[serde(default)]
    candidates_token_count: Option<u64>,
    #[serde(default)]
    thoughts_token_count: Option<u64>,
}

/// What a `finishReason` means.
enum Finish {
    /// A completion with this finish reason.
    Complete(FinishReason),
    /// A failure: the kind, whether a retry may help.
    Problem(ProblemKind, bool),
}

/// The `finishReason` values, as Keel finishes or problems (the RFC
/// `gemini` table).
fn finish_of(reason: &str) -> Option<Finish> {
    use Finish::{Complete, Problem};
    Some(match reason {
        "STOP" => Complete(FinishReason::Stop),
        "MAX_TOKENS" => Complete(FinishReason::Length),
        "SAFETY"
        | "RECITATION"
        | "BLOCKLIST"
        | "PROHIBITED_CONTENT"
        | "SPII"
        | "IMAGE_SAFETY"
        | "IMAGE_PROHIBITED_CONTENT"
        | "IMAGE_RECITATION" => Complete(FinishReason::ContentFilter),
        "MALFORMED_FUNCTION_CALL"
        | "UNEXPECTED_TOOL_CALL"
        | "TOO_MANY_TOOL_CALLS"
        | "MALFORMED_RESPONSE" => Problem(ProblemKind::Other, true),
        "MISSING_THOUGHT_SIGNATURE" => Problem(ProblemKind::InvalidRequest, false),
        "LANGUAGE" | "OTHER" | "IMAGE_OTHER" | "NO_IMAGE" => Problem(ProblemKind::Other, false),
        _ => return None,
    })
}

/// The Gemini stream state machine.
pub(crate) struct GeminiDecoder {
    limits: Limits,
    key: Option<ApiKey>,
    ids: CallIds,
    calls: usize,
    /// Whether the last item pushed was a reasoning delta: a signature on
    /// a thought part may close it.
    reasoning_open: bool,
    usage: Option<UsageWire>,
    id: Option<String>,
    model: Option<String>,
    request_id: Option<String>,
}

impl GeminiDecoder {
    pub(crate) fn new(
        limits: Limits,
        ids: CallIds,
        request_id: Option<String>,
        key: Option<ApiKey>,
    ) -> Self {
        GeminiDecoder {
            limits,
            key,
            ids,
            calls: 0,
            reasoning_open: false,
            usage: None,
            id: None,
            model: None,
            request_id,
        }
    }

    fn remember(&mut self, chunk: &Chunk) {
        let key = self.key.as_ref();
        if let Some(id) = safe_fact(&chunk.response_id, key) {
            self.id = Some(id);
        }
        if let Some(model) = safe_fact(&chunk.model_version, key) {
            self.model = Some(model);
        }
        // Each chunk reports the counts so far: a later one replaces what
        // it names.
        if let Some(wire) = chunk.usage_metadata {
            let mut usage = self.usage.unwrap_or_default();
            for (slot, value) in [
                (&mut usage.prompt_token_count, wire.prompt_token_count),
                (
                    &mut usage.tool_use_prompt_token_count,
                    wire.tool_use_prompt_token_count,
                ),
                (
                    &mut usage.candidates_token_count,
                    wire.candidates_token_count,
                ),
                (&mut usage.thoughts_token_count, wire.thoughts_token_count),
            ] {
                if value.is_some() {
                    *slot = value;
                }
            }
            self.usage = Some(usage);
        }
    }

    /// Input: prompt plus tool-use prompt tokens. Output: candidate plus
    /// thought tokens (thinking is billed as output).
    fn raw_usage(&self) -> Option<RawUsage> {
        self.usage.map(|u| RawUsage {
            input_tokens: u
                .prompt_token_count
                .unwrap_or(0)
                .saturating_add(u.tool_use_prompt_token_count.unwrap_or(0)),
            output_tokens: u
                .candidates_token_count
                .unwrap_or(0)
                .saturating_add(u.thoughts_token_count.unwrap_or(0)),
        })
    }

    fn metadata(&self) -> Option<Value> {
        namespaced(
            GEMINI_NAMESPACE,
            &[
                ("id", &self.id),
                ("model", &self.model),
                ("request_id", &self.request_id),
            ],
        )
    }

    /// One part of the candidate, in order.
    fn part(&mut self, part: WirePart, out: &mut VecDeque<RawItem>) -> Flow {
        let max = self.limits.delta_bytes;
        if part.thought == Some(true) {
            let text = part.text.unwrap_or_default();
            push_reasoning(out, &text, max);
            self.reasoning_open |= !text.is_empty();
            if let Some(signature) = part.thought_signature {
                out.push_back(if self.reasoning_open {
                    RawItem::ReasoningSignature(signature)
                } else {
                    RawItem::RedactedReasoning(signature)
                });
                self.reasoning_open = false;
            }
            return Flow::More;
        }
        if let Some(signature) = part.thought_signature {
            out.push_back(RawItem::RedactedReasoning(signature));
            self.reasoning_open = false;
        }
        if let Some(call) = part.function_call {
            self.reasoning_open = false;
            return self.call(call, out);
        }
        if let Some(text) = part.text.filter(|t| !t.is_empty()) {
            push_text(out, &text, max);
            self.reasoning_open = false;
        }
        Flow::More
    }

    /// A function call: Gemini sends each one whole.
    fn call(&mut self, call: FunctionCall, out: &mut VecDeque<RawItem>) -> Flow {
        if self.calls >= self.limits.tool_calls_per_stream {
            return too_many_calls(out, self.limits.tool_calls_per_stream);
        }
        self.calls += 1;
        let arguments = match call.args {
            None | Some(Value::Null) => "{}".to_owned(),
            Some(args) => args.to_string(),
        };
        let max_json = max_arguments_bytes(&self.limits);
        if arguments.len() > max_json {
            return protocol(out, format!("function call args over {max_json} bytes"));
        }
        out.push_back(RawItem::ToolCall(RawToolCall {
            call_id: self.ids.issue(call.id.as_deref()),
            name: call.name.unwrap_or_default(),
            arguments,
        }));
        Flow::More
    }

    /// The terminal for a `finishReason`.
    fn finish(&mut self, reason: &str, out: &mut VecDeque<RawItem>) -> Flow {
        let shown = safe_code(reason).unwrap_or("(unprintable)");
        match finish_of(reason) {
            Some(Finish::Complete(finish)) => {
                out.push_back(RawItem::Completion(RawCompletion {
                    finish: finish_with_calls(finish, self.calls > 0),
                    usage: self.raw_usage(),
                    metadata: self.metadata(),
                }));
                Flow::Done
            }
            Some(Finish::Problem(kind, retryable)) => fail(
                out,
                RawProblem::new(
                    kind,
                    format!("the candidate ended with finishReason {shown}"),
                    retryable,
                ),
            ),
            None => protocol(out, format!("unknown finishReason {shown}")),
        }
    }
}

impl Decoder for GeminiDecoder {
    fn event(&mut self, _name: Option<&str>, data: &str, out: &mut VecDeque<RawItem>) -> Flow {
        let chunk: Chunk = match serde_json::from_str(data) {
            Ok(chunk) => chunk,
            Err(e) => return fail(out, bad_json("a stream chunk", &e)),
        };
        if let Some(error) = &chunk.error {
            return fail(out, classify_stream_error(error));
        }
        self.remember(&chunk);
        // Only the first candidate is read (requests ask for one).
        let candidate = chunk
            .candidates
            .into_iter()
            .flatten()
            .find(|c| c.index.unwrap_or(0) == 0);
        let Some(candidate) = candidate else {
            return match chunk.prompt_feedback.and_then(|f| f.block_reason) {
                Some(reason) => {
                    let shown = safe_code(&reason).unwrap_or("(unprintable)");
                    fail(
                        out,
                        RawProblem::new(
                            ProblemKind::ContentFilter,
                            format!("the prompt was blocked (blockReason {shown})"),
                            false,
                        ),
                    )
                }
                None => Flow::More,
            };
        };
        let parts = candidate.content.and_then(|c| c.parts).unwrap_or_default();
        for part in parts {
            if self.part(part, out) == Flow::Done {
                return Flow::Done;
            }
        }
        match candidate.finish_reason.as_deref() {
            Some(reason) => self.finish(reason, out),
            None => Flow::More,
        }
    }

    fn end(&mut self, out: &mut VecDeque<RawItem>) {
        fail(
            out,
            RawProblem::new(
                ProblemKind::Unavailable,
                "the stream ended before a finishReason",
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
    use std::collections::BTreeSet;

    /// The items these chunks yield, terminal included, with
    /// `delta_bytes` of 8.
    fn check(chunks: &[Value], expected: &[RawItem]) {
        let limits = Limits {
            delta_bytes: 8,
            ..Limits::default()
        };
        let ids = CallIds::new("op_1", BTreeSet::new());
        let mut decoder = GeminiDecoder::new(limits, ids, None, None);
        let mut out = VecDeque::new();
        for chunk in chunks {
            if decoder.event(None, &chunk.to_string(), &mut out) == Flow::Done {
                break;
            }
        }
        let items: Vec<RawItem> = out.into_iter().collect();
        assert_eq!(items, expected, "{chunks:?}");
    }

    fn parts(parts: Value) -> Value {
        json!({"candidates": [{"content": {"role": "model", "parts": parts}, "index": 0}]})
    }

    fn finish(reason: &str) -> Value {
        json!({"candidates": [{"content": {"role": "model", "parts": [{"text": ""}]}, "finishReason": reason, "index": 0}]})
    }

    fn done(finish: FinishReason) -> RawItem {
        RawItem::Completion(RawCompletion {
            finish,
            usage: None,
            metadata: None,
        })
    }

    #[test]
    fn signatures_follow_the_part_they_came_on() {
        let r = |t: &str| RawItem::ReasoningDelta(t.to_owned());
        let signed = |s: &str| RawItem::ReasoningSignature(s.to_owned());
        let redacted = |s: &str| RawItem::RedactedReasoning(s.to_owned());
        let call = |id: &str| {
            RawItem::ToolCall(RawToolCall {
                call_id: id.into(),
                name: "f".into(),
                arguments: "{}".into(),
            })
        };
        for (chunks, expected) in [
            // A thought part signs its own text.
            (
                vec![
                    parts(json!([{"text": "Hmm, økay", "thought": true}])),
                    parts(json!([{"text": ".", "thought": true, "thoughtSignature": "S1"}])),
                    finish("STOP"),
                ],
                vec![
                    r("Hmm, øk"),
                    r("ay"),
                    r("."),
                    signed("S1"),
                    done(FinishReason::Stop),
                ],
            ),
            // A signature on a call: redacted, before the call, closing
            // the open reasoning.
            (
                vec![
                    parts(json!([{"text": "Plan.", "thought": true}])),
                    parts(
                        json!([{"functionCall": {"name": "f", "args": {}}, "thoughtSignature": "S2"}, {"functionCall": {"name": "f"}}]),
                    ),
                    finish("STOP"),
                ],
                vec![
                    r("Plan."),
                    redacted("S2"),
                    call("call_op_1_0"),
                    call("call_op_1_1"),
                    done(FinishReason::ToolCalls),
                ],
            ),
            // An empty text part leaves the thought open for its
            // signature.
            (
                vec![
                    parts(json!([{"text": "Plan.", "thought": true}])),
                    parts(json!([{"text": ""}])),
                    parts(json!([{"text": "", "thought": true, "thoughtSignature": "S5"}])),
                    finish("STOP"),
                ],
                vec![r("Plan."), signed("S5"), done(FinishReason::Stop)],
            ),
            // A signature alone on an empty text part at the end, and a
            // signed thought part with no text open.
            (
                vec![
                    parts(json!([{"text": "Hi"}])),
                    parts(json!([{"text": "", "thought": true, "thoughtSignature": "S3"}])),
                    parts(json!([{"text": "", "thoughtSignature": "S4"}])),
                    finish("STOP"),
                ],
                vec![
                    RawItem::text("Hi"),
                    redacted("S3"),
                    redacted("S4"),
                    done(FinishReason::Stop),
                ],
            ),
        ] {
            check(&chunks, &expected);
        }
    }

    #[test]
    fn finish_reasons_are_finishes_or_problems() {
        for (reason, expected) in [
            ("MAX_TOKENS", Some(FinishReason::Length)),
            ("SAFETY", Some(FinishReason::ContentFilter)),
            ("RECITATION", Some(FinishReason::ContentFilter)),
            ("MALFORMED_FUNCTION_CALL", None),
        ] {
            let mut out = VecDeque::new();
            let mut decoder = GeminiDecoder::new(
                Limits::default(),
                CallIds::new("op_1", BTreeSet::new()),
                None,
                None,
            );
            let flow = decoder.event(None, &finish(reason).to_string(), &mut out);
            assert_eq!(flow, Flow::Done);
            match (out.pop_back(), expected) {
                (Some(RawItem::Completion(c)), Some(finish)) => {
                    assert_eq!(c.finish, finish, "{reason}");
                }
                (Some(RawItem::Failure(p)), None) => {
                    assert_eq!((p.kind, p.retryable), (ProblemKind::Other, true));
                    assert!(p.message.contains(reason), "{}", p.message);
                }
                (item, _) => panic!("{reason}: {item:?}"),
            }
        }
    }
}
