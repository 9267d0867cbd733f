#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Property: any raw item sequence either validates as a well-formed stream
//! (any number of deltas and tool calls, then exactly one terminal, last) or
//! yields exactly one typed error and nothing after it. Checked against an
//! independent oracle, item by item, on the validator and on
//! `ValidatedStream`.

mod common;

use common::*;
use keel_message::{Bound, LimitExceeded, Limits};
use keel_stream::*;
use proptest::prelude::*;
use serde_json::json;

/// A raw item, labelled with what makes it valid or not.
#[derive(Debug, Clone)]
enum Case {
    Text(TextKind),
    Call {
        id: u8,
        id_ok: bool,
        name_ok: bool,
        args: ArgsKind,
    },
    Complete {
        finish: FinishReason,
        usage: UsageKind,
        meta: MetaKind,
    },
    Fail(ProblemKind),
}

#[derive(Debug, Clone, Copy)]
enum TextKind {
    Ok,
    Empty,
    TooBig,
}
#[derive(Debug, Clone, Copy)]
enum ArgsKind {
    Ok,
    NotJson,
    NotObject,
    TooBig,
}
#[derive(Debug, Clone, Copy)]
enum UsageKind {
    None,
    Ok,
    Overflow,
}
#[derive(Debug, Clone, Copy)]
enum MetaKind {
    None,
    Ok,
    Dropped,
    Secret,
    NotObject,
}

const DELTA_BYTES: usize = 16;
const MAX_CALLS: usize = 3;

fn limits() -> Limits {
    Limits {
        delta_bytes: DELTA_BYTES,
        tool_calls_per_stream: MAX_CALLS,
        json_bytes: 64,
        ..Limits::default()
    }
}

fn case() -> impl Strategy<Value = Case> {
    let text = prop_oneof![
        6 => Just(TextKind::Ok),
        1 => Just(TextKind::Empty),
        1 => Just(TextKind::TooBig),
    ]
    .prop_map(Case::Text);
    let args = prop_oneof![
        6 => Just(ArgsKind::Ok),
        1 => Just(ArgsKind::NotJson),
        1 => Just(ArgsKind::NotObject),
        1 => Just(ArgsKind::TooBig),
    ];
    let call = (
        0u8..5,
        prop::bool::weighted(0.9),
        prop::bool::weighted(0.9),
        args,
    )
        .prop_map(|(id, id_ok, name_ok, args)| Case::Call {
            id,
            id_ok,
            name_ok,
            args,
        });
    let finish = prop_oneof![
        Just(FinishReason::Stop),
        Just(FinishReason::ToolCalls),
        Just(FinishReason::Length),
        Just(FinishReason::ContentFilter),
    ];
    let usage = prop_oneof![
        2 => Just(UsageKind::None),
        4 => Just(UsageKind::Ok),
        1 => Just(UsageKind::Overflow),
    ];
    let meta = prop_oneof![
        3 => Just(MetaKind::None),
        3 => Just(MetaKind::Ok),
        1 => Just(MetaKind::Dropped),
        1 => Just(MetaKind::Secret),
        1 => Just(MetaKind::NotObject),
    ];
    let complete = (finish, usage, meta).prop_map(|(finish, usage, meta)| Case::Complete {
        finish,
        usage,
        meta,
    });
    let fail = prop_oneof![
        Just(ProblemKind::Overloaded),
        Just(ProblemKind::RateLimited),
        Just(ProblemKind::Unavailable),
        Just(ProblemKind::Protocol),
    ]
    .prop_map(Case::Fail);
    prop_oneof![5 => text, 4 => call, 1 => complete, 1 => fail]
}

fn raw(case: &Case) -> RawItem {
    match *case {
        Case::Text(TextKind::Ok) => text("héllo"),
        Case::Text(TextKind::Empty) => text(""),
        Case::Text(TextKind::TooBig) => text(&"x".repeat(DELTA_BYTES + 1)),
        Case::Call {
            id,
            id_ok,
            name_ok,
            args,
        } => call(
            &if id_ok {
                format!("call_{id}")
            } else {
                format!("call {id}")
            },
            if name_ok {
                "get_weather"
            } else {
                "get weather"
            },
            match args {
                ArgsKind::Ok => r#"{"city": "Oslo"}"#.to_owned(),
                ArgsKind::NotJson => r#"{"city": "#.to_owned(),
                ArgsKind::NotObject => r#"["Oslo"]"#.to_owned(),
                ArgsKind::TooBig => format!(r#"{{"city":"{}"}}"#, "O".repeat(64)),
            }
            .as_str(),
        ),
        Case::Complete {
            ref finish,
            usage,
            meta,
        } => complete_with(
            finish.clone(),
            match usage {
                UsageKind::None => None,
                UsageKind::Ok => Some((12, 7)),
                UsageKind::Overflow => Some((u64::MAX, 1)),
            },
            match meta {
                MetaKind::None => None,
                MetaKind::Ok => Some(json!({"openai": {"request_id": "req_1"}})),
                MetaKind::Dropped => Some(json!({"debug": {"authorization": "x"}})),
                MetaKind::Secret => Some(json!({"openai": {"cookie": "x"}})),
                MetaKind::NotObject => Some(json!("openai")),
            },
        ),
        Case::Fail(ref kind) => RawItem::fail(kind.clone(), "provider problem", true),
    }
}

/// The expected outcome of one item: `Ok(type)` or `Err(rule)`.
type Outcome = Result<&'static str, &'static str>;

fn rule(v: &StreamViolation) -> &'static str {
    match v {
        StreamViolation::EmptyDelta => "empty_delta",
        StreamViolation::OverBound(LimitExceeded { bound, .. }) => match bound {
            Bound::DeltaBytes => "over.delta_bytes",
            Bound::ToolCallsPerStream => "over.tool_calls_per_stream",
            Bound::JsonBytes => "over.json_bytes",
            _ => "over.other",
        },
        StreamViolation::InvalidCallId(_) => "invalid_call_id",
        StreamViolation::InvalidToolName(_) => "invalid_tool_name",
        StreamViolation::DuplicateCallId { .. } => "duplicate_call_id",
        StreamViolation::ArgumentsNotJson { .. } => "arguments_not_json",
        StreamViolation::ArgumentsNotObject => "arguments_not_object",
        StreamViolation::AfterTerminal => "after_terminal",
        StreamViolation::FinishWithoutToolCalls => "finish_without_tool_calls",
        StreamViolation::StopAfterToolCalls => "stop_after_tool_calls",
        StreamViolation::UsageOverflow(_) => "usage_overflow",
        StreamViolation::Metadata(_) => "metadata",
        StreamViolation::NoTerminal => "no_terminal",
        _ => "other",
    }
}

/// The oracle: what each item must produce, written from the rules, not
/// from the validator.
fn oracle(cases: &[Case], allow_stop: bool) -> (Vec<Outcome>, Option<&'static str>) {
    let mut over = false;
    let mut ids = std::collections::HashSet::new();
    let mut out = Vec::new();
    for case in cases {
        let outcome: Outcome = if over {
            Err("after_terminal")
        } else {
            match *case {
                Case::Text(TextKind::Ok) => Ok("text_delta"),
                Case::Text(TextKind::Empty) => Err("empty_delta"),
                Case::Text(TextKind::TooBig) => Err("over.delta_bytes"),
                Case::Call {
                    id,
                    id_ok,
                    name_ok,
                    args,
                } => {
                    if !id_ok {
                        Err("invalid_call_id")
                    } else if !name_ok {
                        Err("invalid_tool_name")
                    } else if ids.contains(&id) {
                        Err("duplicate_call_id")
                    } else if ids.len() + 1 > MAX_CALLS {
                        Err("over.tool_calls_per_stream")
                    } else {
                        match args {
                            ArgsKind::Ok => {
                                ids.insert(id);
                                Ok("tool_call")
                            }
                            ArgsKind::NotJson => Err("arguments_not_json"),
                            ArgsKind::NotObject => Err("arguments_not_object"),
                            ArgsKind::TooBig => Err("over.json_bytes"),
                        }
                    }
                }
                Case::Complete {
                    ref finish,
                    usage,
                    meta,
                } => {
                    if *finish == FinishReason::ToolCalls && ids.is_empty() {
                        Err("finish_without_tool_calls")
                    } else if *finish == FinishReason::Stop && !ids.is_empty() && !allow_stop {
                        Err("stop_after_tool_calls")
                    } else if matches!(usage, UsageKind::Overflow) {
                        Err("usage_overflow")
                    } else if matches!(meta, MetaKind::Secret | MetaKind::NotObject) {
                        Err("metadata")
                    } else {
                        Ok("completion")
                    }
                }
                Case::Fail(_) => Ok("failure"),
            }
        };
        if matches!(outcome, Err(_) | Ok("completion" | "failure")) {
            over = true;
        }
        out.push(outcome);
    }
    let end = (!over).then_some("no_terminal");
    (out, end)
}

fn make(allow_stop: bool) -> StreamValidator {
    let mut config = ValidatorConfig::default();
    if allow_stop {
        config.stop_after_tool_calls = StopAfterToolCalls::Allow;
    }
    validator(config, limits(), &["openai"])
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn any_sequence_is_a_stream_or_one_error(
        cases in prop::collection::vec(case(), 0..12),
        allow_stop in any::<bool>(),
    ) {
        let (expected, expected_end) = oracle(&cases, allow_stop);
        let items: Vec<RawItem> = cases.iter().map(raw).collect();

        // The validator, item by item, against the oracle.
        let mut v = make(allow_stop);
        let mut accepted: Vec<StreamItem> = Vec::new();
        let mut first_error: Option<StreamViolation> = None;
        let mut valid_seen = false;
        for (item, want) in items.iter().zip(&expected) {
            let before = v.position();
            prop_assert_eq!(before == RetryPosition::Partial, valid_seen);
            let got = v.accept(item.clone());
            match (&got, want) {
                (Ok(i), Ok(t)) => prop_assert_eq!(i.type_name(), *t),
                (Err(e), Err(r)) => prop_assert_eq!(rule(e), *r),
                _ => prop_assert!(false, "got {:?}, oracle says {:?}", got, want),
            }
            match got {
                Ok(item) => {
                    prop_assert!(first_error.is_none(), "accepted after an error");
                    prop_assert!(
                        !accepted.last().is_some_and(StreamItem::is_terminal),
                        "accepted after a terminal"
                    );
                    if let StreamItem::Failure(f) = &item {
                        prop_assert_eq!(f.position(), before);
                    }
                    valid_seen |= matches!(item, StreamItem::TextDelta(_) | StreamItem::ToolCall(_));
                    accepted.push(item);
                }
                Err(e) => {
                    if first_error.is_none() && !accepted.last().is_some_and(StreamItem::is_terminal) {
                        first_error = Some(e.clone());
                        accepted.push(StreamItem::Failure(e.into_failure_with(before, v.limits())));
                    } else {
                        // Everything after the one typed error (or terminal) is
                        // rejected as after-terminal, and nothing is yielded.
                        prop_assert_eq!(e, StreamViolation::AfterTerminal);
                    }
                }
            }
        }
        let end = v.end_of_stream();
        prop_assert_eq!(end.as_ref().err().map(rule), expected_end);
        if let Err(e) = end {
            accepted.push(StreamItem::Failure(e.into_failure_with(v.position(), v.limits())));
        }
        prop_assert!(v.is_terminated());

        // Either a well-formed stream or exactly one typed error: in both
        // cases exactly one terminal, and it is last.
        prop_assert_eq!(accepted.iter().filter(|i| i.is_terminal()).count(), 1);
        prop_assert!(accepted.last().unwrap().is_terminal());
        if let Some(StreamItem::Failure(f)) = accepted.last() {
            let expected_position = if valid_seen { RetryPosition::Partial } else { RetryPosition::Pristine };
            prop_assert_eq!(f.position(), expected_position);
        }

        // ValidatedStream yields exactly that, except that a completion is
        // final only if the raw stream ends right after it: any item after
        // it turns the completion into the after-terminal protocol failure.
        let completion_at = accepted.iter().position(|i| matches!(i, StreamItem::Completion(_)));
        if let Some(at) = completion_at
            && items.len() > at + 1
        {
            let position = if valid_seen { RetryPosition::Partial } else { RetryPosition::Pristine };
            accepted[at] = StreamItem::Failure(
                StreamViolation::AfterTerminal.into_failure_with(position, v.limits()),
            );
            first_error = Some(StreamViolation::AfterTerminal);
        }
        let out = drain(items, make(allow_stop));
        prop_assert_eq!(&out, &accepted);
        if first_error.is_some() || expected_end.is_some() {
            let Some(StreamItem::Failure(f)) = out.last() else { unreachable!() };
            prop_assert_eq!(f.kind(), ProblemKind::Protocol);
            prop_assert!(!f.problem().retryable());
        }
    }
}
