//! Fuzzes `StreamValidator` over arbitrary raw item sequences, checked
//! against a small model of the stream rules.
//!
//! Items are built from the input: text deltas, reasoning deltas,
//! signatures and redacted parts (opaque values from a valid and invalid
//! vocabulary, or raw text), tool calls (ids, names and
//! arguments drawn from valid and invalid vocabularies, or raw bytes),
//! completions (every finish, usage, metadata from arbitrary JSON) and
//! failures (every problem kind, arbitrary messages). Small limits are
//! picked half of the time so the bounds are reached.
//!
//! Properties:
//! - once a terminal is accepted or a violation is reported, every later
//!   item is refused with `AfterTerminal`, and `is_terminated` holds;
//! - `position()` is `Partial` exactly when a text delta, reasoning item
//!   or tool call was accepted;
//! - an accepted reasoning delta is the raw text, non-empty, within
//!   `delta_bytes`; a signature is accepted only right after a reasoning
//!   delta (else the violation says which rule: no open part, signed
//!   twice, after a redacted part); an accepted signature or redacted value
//!   is the raw value, printable ASCII, within `opaque_bytes`;
//! - an accepted text delta is the raw text, non-empty, within
//!   `delta_bytes`; an accepted tool call has a fresh call id, object
//!   arguments that are the canonical form of the raw arguments, and the
//!   stream holds at most `tool_calls_per_stream` of them;
//! - `tool_calls` finishes only after a tool call, `stop` never after one
//!   (the default policy);
//! - an accepted failure's message is within `problem_message_bytes`, is
//!   not flagged by the secret screen, and carries the validator's
//!   position;
//! - a violation's message does not change when the letters and digits of
//!   the item's text or argument string values are rotated: it never
//!   echoes content.
#![no_main]

use keel_message::{CanonicalJson, Limits};
use keel_stream::{
    FinishReason, MetadataAllowlist, ProblemKind, RawCompletion, RawItem, RawProblem, RawToolCall,
    RawUsage, RetryPosition, StreamItem, StreamValidator, StreamViolation, ValidatorConfig,
};
use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use std::collections::HashSet;
use std::time::Duration;

mod common;

const IDS: &[&str] = &[
    "call_1",
    "call_2",
    "toolu_01A",
    "c",
    "",
    "call 1",
    "call_1\n",
    "é",
];
const NAMES: &[&str] = &[
    "get_weather",
    "calc",
    "a",
    "",
    "bad name",
    "x.y",
    "-",
    "get-weather",
];
const ARGUMENTS: &[&str] = &[
    "{}",
    r#"{"city":"Paris"}"#,
    r#"{"b":1,"a":[true,null,2.5e3]}"#,
    r#"{"a":1,"a":2}"#,
    "[]",
    "1",
    "",
    "{",
    r#"{"n":9007199254740993}"#,
    r#"{"s":"\ud800"}"#,
    r#"{"nested":{"deep":[[[[{}]]]]}}"#,
];
const OPAQUE: &[&str] = &[
    "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxDYiZY",
    "RWNyeXB0ZWQ=",
    "s",
    "",
    "has space",
    "tab\t",
    "é",
    "~!{}",
];
const METADATA: &[&str] = &[
    r#"{"openai":{"id":"chatcmpl-1","model":"gpt-4o"}}"#,
    r#"{"anthropic":{"id":"msg_1"},"other":{"x":1}}"#,
    r#"{"openai":{"api_key":"sk-proj-abcdefghijklmnopqrstuvwxyz012345"}}"#,
    r#"{"openai":{"note":"AKIAIOSFODNN7EXAMPLE"}}"#,
    r#"{"openai":1}"#,
    "[]",
    "{}",
];

fn pick<'a>(u: &mut Unstructured<'_>, words: &[&'a str]) -> Result<String> {
    if u.ratio(1, 4)? {
        // Raw text, valid UTF-8 by construction.
        let s: String = u.arbitrary()?;
        return Ok(s);
    }
    Ok((*u.choose(words)?).to_owned())
}

fn item(u: &mut Unstructured<'_>) -> Result<RawItem> {
    Ok(match u.int_in_range(0..=13u8)? {
        0..=3 => RawItem::TextDelta(u.arbitrary()?),
        10 | 11 => RawItem::ReasoningDelta(u.arbitrary()?),
        12 => RawItem::ReasoningSignature(pick(u, OPAQUE)?),
        13 => RawItem::RedactedReasoning(pick(u, OPAQUE)?),
        4..=6 => RawItem::ToolCall(RawToolCall {
            call_id: pick(u, IDS)?,
            name: pick(u, NAMES)?,
            arguments: pick(u, ARGUMENTS)?,
        }),
        7 | 8 => RawItem::Completion(RawCompletion {
            // Mostly known reasons; now and then one only a stored event
            // may carry (rule stream.known_value refuses it live).
            finish: match FinishReason::KNOWN.get(usize::from(u.int_in_range(0u8..=4)?)) {
                Some(known) => known.clone(),
                None => FinishReason::from_wire("paused").expect("a well-formed word"),
            },
            usage: if u.arbitrary()? {
                Some(RawUsage {
                    input_tokens: u.arbitrary()?,
                    output_tokens: u.arbitrary()?,
                })
            } else {
                None
            },
            metadata: if u.arbitrary()? {
                serde_json::from_str(&pick(u, METADATA)?).ok()
            } else {
                None
            },
        }),
        _ => RawItem::Failure(RawProblem {
            kind: u.choose(&ProblemKind::ALL)?.clone(),
            message: u.arbitrary()?,
            retryable: u.arbitrary()?,
            retry_after: if u.arbitrary()? {
                Some(Duration::from_millis(u.arbitrary()?))
            } else {
                None
            },
        }),
    })
}

fn limits(u: &mut Unstructured<'_>) -> Result<Limits> {
    let mut limits = Limits::default();
    if u.arbitrary()? {
        limits.delta_bytes = u.int_in_range(1..=64)?;
        limits.tool_calls_per_stream = u.int_in_range(1..=4)?;
        limits.json_bytes = u.int_in_range(2..=256)?;
        limits.json_depth = u.int_in_range(0..=4)?;
        limits.problem_message_bytes = u.int_in_range(16..=128)?;
        limits.metadata_bytes = u.int_in_range(2..=256)?;
        limits.opaque_bytes = u.int_in_range(1..=48)?;
    }
    Ok(limits)
}

/// The same item with the letters and digits of its content rotated.
fn rotated(item: &RawItem) -> RawItem {
    match item {
        RawItem::TextDelta(text) => RawItem::TextDelta(common::rotate_all(text)),
        RawItem::ReasoningDelta(text) => RawItem::ReasoningDelta(common::rotate_all(text)),
        RawItem::ReasoningSignature(value) => {
            RawItem::ReasoningSignature(common::rotate_all(value))
        }
        RawItem::RedactedReasoning(value) => RawItem::RedactedReasoning(common::rotate_all(value)),
        RawItem::ToolCall(call) => RawItem::ToolCall(RawToolCall {
            arguments: common::rotate_string_values(&call.arguments, None),
            ..call.clone()
        }),
        other => other.clone(),
    }
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(limits) = limits(&mut u) else { return };
    let allowlist = MetadataAllowlist::new(["openai", "anthropic"]).expect("valid namespaces");
    let mut validator = StreamValidator::new(
        ValidatorConfig::default(),
        limits.clone(),
        allowlist.clone(),
    );
    // The model.
    let mut ended = false;
    let mut partial = false;
    let mut call_ids: HashSet<String> = HashSet::new();
    let mut reasoning = Reasoning::Closed;

    while !u.is_empty() {
        let Ok(raw) = item(&mut u) else { break };
        // A twin validator in the same state, for the echo check.
        let twin_raw = rotated(&raw);
        let position_before = validator.position();
        let result = validator.accept(raw.clone());
        if ended {
            assert!(
                matches!(result, Err(StreamViolation::AfterTerminal)),
                "an item after the end was not refused as AfterTerminal: {result:?}"
            );
            continue;
        }
        let reasoning_before = reasoning;
        reasoning = Reasoning::Closed;
        if let RawItem::ReasoningSignature(_) = &raw {
            check_signature_rule(reasoning_before, &result);
        }
        match &result {
            Ok(StreamItem::ReasoningDelta(delta)) => {
                let RawItem::ReasoningDelta(text) = &raw else {
                    panic!("a reasoning delta from {raw:?}")
                };
                assert_eq!(delta.text(), text);
                assert!(!text.is_empty() && text.len() <= limits.delta_bytes);
                reasoning = Reasoning::Open;
                partial = true;
            }
            Ok(StreamItem::ReasoningSignature(value)) => {
                let RawItem::ReasoningSignature(raw_value) = &raw else {
                    panic!("a signature from {raw:?}")
                };
                check_opaque(value.as_str(), raw_value, &limits);
                reasoning = Reasoning::Signed;
                partial = true;
            }
            Ok(StreamItem::RedactedReasoning(value)) => {
                let RawItem::RedactedReasoning(raw_value) = &raw else {
                    panic!("a redacted part from {raw:?}")
                };
                check_opaque(value.as_str(), raw_value, &limits);
                reasoning = Reasoning::Redacted;
                partial = true;
            }
            Ok(StreamItem::TextDelta(delta)) => {
                let RawItem::TextDelta(text) = &raw else {
                    panic!("a text delta from {raw:?}")
                };
                assert_eq!(delta.text(), text);
                assert!(!text.is_empty() && text.len() <= limits.delta_bytes);
                partial = true;
            }
            Ok(StreamItem::ToolCall(call)) => {
                let RawItem::ToolCall(rc) = &raw else {
                    panic!("a tool call from {raw:?}")
                };
                assert!(
                    call_ids.insert(rc.call_id.clone()),
                    "a repeated call id was accepted"
                );
                assert!(call_ids.len() <= limits.tool_calls_per_stream);
                let canonical = CanonicalJson::parse_with(&rc.arguments, &limits)
                    .expect("accepted arguments parse");
                assert!(canonical.is_object());
                assert_eq!(call.arguments().as_str(), canonical.as_str());
                partial = true;
            }
            Ok(StreamItem::Completion(c)) => {
                assert!(c.finish().is_known(), "an unknown finish accepted live");
                match c.finish() {
                    FinishReason::ToolCalls => {
                        assert!(!call_ids.is_empty(), "tool_calls finish without calls")
                    }
                    FinishReason::Stop => assert!(call_ids.is_empty(), "stop after tool calls"),
                    _ => {}
                }
                ended = true;
            }
            Ok(StreamItem::Failure(f)) => {
                let message = f.problem().message();
                assert!(
                    message.len() <= limits.problem_message_bytes,
                    "problem message over its bound"
                );
                assert!(
                    keel_stream::secrets::screen_value(message).is_none(),
                    "a failure message still screens as a secret: {message:?}"
                );
                assert_eq!(f.position(), position_before);
                ended = true;
            }
            Err(violation) => {
                ended = true;
                let mut twin = StreamValidator::new(
                    ValidatorConfig::default(),
                    limits.clone(),
                    allowlist.clone(),
                );
                replay(&mut twin, &call_ids, partial, reasoning_before);
                if let Err(twin_violation) = twin.accept(twin_raw) {
                    assert_eq!(
                        violation.to_string(),
                        twin_violation.to_string(),
                        "a violation's message depends on content"
                    );
                }
            }
        }
        assert_eq!(validator.is_terminated(), ended);
        let expected = if partial {
            RetryPosition::Partial
        } else {
            RetryPosition::Pristine
        };
        assert_eq!(validator.position(), expected);
    }
});

/// The model of where the stream is with reasoning: what the last accepted
/// item did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reasoning {
    Closed,
    Open,
    Signed,
    Redacted,
}

/// A signature is accepted only for an open part; otherwise the violation
/// names the rule the model expects.
fn check_signature_rule(before: Reasoning, result: &std::result::Result<StreamItem, StreamViolation>) {
    let expected = match before {
        Reasoning::Open => return,
        Reasoning::Closed => StreamViolation::SignatureWithoutReasoning,
        Reasoning::Signed => StreamViolation::SignatureRepeated,
        Reasoning::Redacted => StreamViolation::SignatureAfterRedacted,
    };
    assert_eq!(result.as_ref().err(), Some(&expected), "signature after {before:?}");
}

/// An accepted opaque value is the raw value, printable ASCII, within its
/// bound.
fn check_opaque(value: &str, raw: &str, limits: &Limits) {
    assert_eq!(value, raw);
    assert!(!raw.is_empty() && raw.len() <= limits.opaque_bytes);
    assert!(raw.bytes().all(|b| (0x21..=0x7e).contains(&b)));
}

/// Brings a fresh validator to the model's state: the same accepted call
/// ids, partial if text was accepted, and the same reasoning state.
fn replay(
    twin: &mut StreamValidator,
    call_ids: &HashSet<String>,
    partial: bool,
    reasoning: Reasoning,
) {
    let steps: &[RawItem] = &match reasoning {
        Reasoning::Closed => vec![],
        Reasoning::Open => vec![RawItem::reasoning("x")],
        Reasoning::Signed => vec![RawItem::reasoning("x"), RawItem::reasoning_signature("s")],
        Reasoning::Redacted => vec![RawItem::redacted_reasoning("v")],
    };
    for id in call_ids {
        let accepted = twin.accept(RawItem::tool_call(id.clone(), "t", "{}"));
        assert!(
            accepted.is_ok(),
            "replaying an accepted call id failed: {accepted:?}"
        );
    }
    if partial && call_ids.is_empty() && steps.is_empty() {
        let accepted = twin.accept(RawItem::text("x"));
        assert!(
            accepted.is_ok(),
            "replaying a text delta failed: {accepted:?}"
        );
    }
    for step in steps {
        let accepted = twin.accept(step.clone());
        assert!(accepted.is_ok(), "replaying reasoning failed: {accepted:?}");
    }
}
