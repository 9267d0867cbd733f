#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Table tests: one row per malformed-union case, one `check` helper per
//! area. Each row is a raw stream whose last item is the one under test.

mod common;

use common::*;
use keel_message::{Bound, LimitExceeded, Limits};
use keel_stream::*;
use serde_json::json;

type Matcher = fn(&StreamViolation) -> bool;

/// What the last item of a row must produce.
enum Expect {
    Valid,
    Violation(Matcher),
}
use Expect::*;

/// Feeds `items` to a fresh validator: every item but the last must be
/// accepted; the last must match `expect`. After a violation the validator
/// must reject everything as `AfterTerminal` and `end_of_stream` must be
/// `Ok`. The `ValidatedStream` over the same items must yield what the
/// validator accepted up to the first terminal, then (after a violation) one
/// failure of kind `protocol` at the position before the violating item.
fn run_row(
    area: &str,
    name: &str,
    make: &dyn Fn() -> StreamValidator,
    items: Vec<RawItem>,
    expect: Expect,
) {
    let mut v = make();
    let mut expected_stream = Vec::new();
    let (last, prefix) = items.split_last().expect("row has items");
    for (i, item) in prefix.iter().enumerate() {
        let ok = v
            .accept(item.clone())
            .unwrap_or_else(|e| panic!("[{area}/{name}] prefix item {i} rejected: {e}"));
        assert_eq!(
            v.is_terminated(),
            ok.is_terminal(),
            "[{area}/{name}] terminated after prefix item {i}"
        );
        expected_stream.push(ok);
    }
    let position_before = v.position();
    let result = v.accept(last.clone());
    match (expect, result) {
        (Valid, Ok(item)) => {
            assert_eq!(v.is_terminated(), item.is_terminal(), "[{area}/{name}]");
            expected_stream.push(item);
            if let Err(e) = v.end_of_stream() {
                assert_eq!(e, StreamViolation::NoTerminal);
                expected_stream.push(StreamItem::Failure(
                    e.into_failure_with(v.position(), v.limits()),
                ));
            }
        }
        (Valid, Err(e)) => panic!("[{area}/{name}] expected valid, got {e:?}"),
        (Violation(m), Err(e)) => {
            assert!(m(&e), "[{area}/{name}] wrong violation {e:?}");
            assert!(v.is_terminated(), "[{area}/{name}]");
            assert_eq!(v.accept(text("more")), Err(StreamViolation::AfterTerminal));
            assert_eq!(v.end_of_stream(), Ok(()), "[{area}/{name}]");
            let after_terminal = expected_stream.last().is_some_and(StreamItem::is_terminal);
            assert_eq!(
                after_terminal,
                e == StreamViolation::AfterTerminal,
                "[{area}/{name}]"
            );
            if !after_terminal {
                let f = e.clone().into_failure_with(position_before, v.limits());
                assert_eq!(f.kind(), ProblemKind::Protocol, "[{area}/{name}]");
                assert!(!f.problem().retryable());
                assert_eq!(f.problem().message(), e.to_string(), "[{area}/{name}]");
                expected_stream.push(StreamItem::Failure(f));
            } else if let Some(last @ StreamItem::Completion(_)) = expected_stream.last_mut() {
                // ValidatedStream holds a completion until the raw stream
                // ends; an item after it turns the call into this failure.
                *last = StreamItem::Failure(
                    StreamViolation::AfterTerminal.into_failure_with(position_before, v.limits()),
                );
            }
        }
        (Violation(_), Ok(item)) => panic!("[{area}/{name}] expected a violation, got {item:?}"),
    }
    let out = drain(items, make());
    assert_eq!(out, expected_stream, "[{area}/{name}] validated stream");
    assert_eq!(
        out.iter().filter(|i| i.is_terminal()).count(),
        usize::from(out.last().is_some_and(StreamItem::is_terminal)),
        "[{area}/{name}] at most one terminal, and only last"
    );
}

fn over(bound: Bound) -> Matcher {
    match bound {
        Bound::DeltaBytes => |e| {
            matches!(
                e,
                StreamViolation::OverBound(LimitExceeded {
                    bound: Bound::DeltaBytes,
                    ..
                })
            )
        },
        Bound::ToolCallsPerStream => |e| {
            matches!(
                e,
                StreamViolation::OverBound(LimitExceeded {
                    bound: Bound::ToolCallsPerStream,
                    ..
                })
            )
        },
        Bound::JsonBytes => |e| {
            matches!(
                e,
                StreamViolation::OverBound(LimitExceeded {
                    bound: Bound::JsonBytes,
                    ..
                })
            )
        },
        Bound::PartBytes => |e| {
            matches!(
                e,
                StreamViolation::OverBound(LimitExceeded {
                    bound: Bound::PartBytes,
                    ..
                })
            )
        },
        Bound::OpaqueBytes => |e| {
            matches!(
                e,
                StreamViolation::OverBound(LimitExceeded {
                    bound: Bound::OpaqueBytes,
                    ..
                })
            )
        },
        Bound::JsonDepth => |e| {
            matches!(
                e,
                StreamViolation::OverBound(LimitExceeded {
                    bound: Bound::JsonDepth,
                    ..
                })
            )
        },
        _ => unreachable!(),
    }
}

fn small_limits() -> Limits {
    Limits {
        delta_bytes: 8,
        tool_calls_per_stream: 2,
        json_bytes: 64,
        json_depth: 3,
        part_bytes: 48,
        opaque_bytes: 16,
        ..Limits::default()
    }
}

#[test]
fn text_deltas() {
    let make = || validator(ValidatorConfig::default(), small_limits(), &[]);
    assert_eq!(
        make().limits(),
        &small_limits(),
        "the validator keeps its limits"
    );
    let check = |name: &str, items: Vec<RawItem>, expect: Expect| {
        run_row("text", name, &make, items, expect)
    };
    check("one byte", vec![text("a")], Valid);
    check("exactly delta_bytes", vec![text("12345678")], Valid);
    check("multibyte within bound", vec![text("åø😀")], Valid);
    check("whitespace only is text", vec![text(" ")], Valid);
    check(
        "empty",
        vec![text("")],
        Violation(|e| *e == StreamViolation::EmptyDelta),
    );
    check(
        "empty after text",
        vec![text("a"), text("")],
        Violation(|e| *e == StreamViolation::EmptyDelta),
    );
    check(
        "one byte over",
        vec![text("123456789")],
        Violation(over(Bound::DeltaBytes)),
    );
    check(
        "multibyte over",
        vec![text("😀😀😀")],
        Violation(over(Bound::DeltaBytes)),
    );
}

#[test]
fn tool_calls() {
    let make = || validator(ValidatorConfig::default(), small_limits(), &[]);
    let check = |name: &str, items: Vec<RawItem>, expect: Expect| {
        run_row("tool_call", name, &make, items, expect)
    };
    check(
        "valid",
        vec![call("c1", "get_weather", r#"{"city":"Oslo"}"#)],
        Valid,
    );
    check("empty object", vec![call("c1", "t", "{}")], Valid);
    check(
        "pretty arguments",
        vec![call("c1", "t", "{ \"a\" : [1, 2] }\n")],
        Valid,
    );
    check(
        "provider ids",
        vec![call("call_9bX-1.2:3", "a-b_C9", "{}")],
        Valid,
    );
    check(
        "two distinct",
        vec![call("c1", "t", "{}"), call("c2", "t", "{}")],
        Valid,
    );
    check(
        "duplicate call id",
        vec![
            call("c1", "t", "{}"),
            text("between"),
            call("c1", "u", r#"{"x":1}"#),
        ],
        Violation(
            |e| matches!(e, StreamViolation::DuplicateCallId { call_id } if call_id.as_str() == "c1"),
        ),
    );
    check(
        "empty call id",
        vec![call("", "t", "{}")],
        Violation(|e| matches!(e, StreamViolation::InvalidCallId(_))),
    );
    check(
        "call id with a space",
        vec![call("c 1", "t", "{}")],
        Violation(|e| matches!(e, StreamViolation::InvalidCallId(_))),
    );
    check(
        "empty tool name",
        vec![call("c1", "", "{}")],
        Violation(|e| matches!(e, StreamViolation::InvalidToolName(_))),
    );
    check(
        "tool name with a dot",
        vec![call("c1", "functions.get_weather", "{}")],
        Violation(|e| matches!(e, StreamViolation::InvalidToolName(_))),
    );
    check(
        "tool name too long",
        vec![call("c1", &"n".repeat(65), "{}")],
        Violation(|e| matches!(e, StreamViolation::InvalidToolName(_))),
    );
    check(
        "arguments not JSON",
        vec![call("c1", "t", r#"{"city": "Oslo""#)],
        Violation(|e| matches!(e, StreamViolation::ArgumentsNotJson { .. })),
    );
    check(
        "arguments empty text",
        vec![call("c1", "t", "")],
        Violation(|e| matches!(e, StreamViolation::ArgumentsNotJson { .. })),
    );
    check(
        "arguments with a duplicate member",
        vec![call("c1", "t", r#"{"a":1,"a":2}"#)],
        Violation(|e| matches!(e, StreamViolation::ArgumentsNotJson { .. })),
    );
    check(
        "arguments an array",
        vec![call("c1", "t", "[1,2]")],
        Violation(|e| *e == StreamViolation::ArgumentsNotObject),
    );
    check(
        "arguments a string",
        vec![call("c1", "t", r#""{}""#)],
        Violation(|e| *e == StreamViolation::ArgumentsNotObject),
    );
    check(
        "arguments null",
        vec![call("c1", "t", "null")],
        Violation(|e| *e == StreamViolation::ArgumentsNotObject),
    );
    check(
        "arguments over json_bytes",
        vec![call("c1", "t", &format!(r#"{{"a":"{}"}}"#, "x".repeat(64)))],
        Violation(over(Bound::JsonBytes)),
    );
    check(
        "arguments over part_bytes",
        vec![call("c1", "t", &format!(r#"{{"a":"{}"}}"#, "x".repeat(50)))],
        Violation(over(Bound::PartBytes)),
    );
    check(
        "arguments over json_depth",
        vec![call("c1", "t", r#"{"a":{"b":{"c":{"d":1}}}}"#)],
        Violation(over(Bound::JsonDepth)),
    );
    check(
        "one call over tool_calls_per_stream",
        vec![
            call("c1", "t", "{}"),
            call("c2", "t", "{}"),
            call("c3", "t", "{}"),
        ],
        Violation(over(Bound::ToolCallsPerStream)),
    );
}

#[test]
fn reasoning() {
    let make = || validator(ValidatorConfig::default(), small_limits(), &[]);
    let check = |name: &str, items: Vec<RawItem>, expect: Expect| {
        run_row("reasoning", name, &make, items, expect)
    };
    let think = |t: &str| RawItem::reasoning(t);
    let sign = |s: &str| RawItem::reasoning_signature(s);
    let redact = |v: &str| RawItem::redacted_reasoning(v);
    let without = |e: &StreamViolation| *e == StreamViolation::SignatureWithoutReasoning;
    let twice = |e: &StreamViolation| *e == StreamViolation::SignatureRepeated;
    let after_redacted = |e: &StreamViolation| *e == StreamViolation::SignatureAfterRedacted;
    let invalid = |e: &StreamViolation| {
        matches!(
            e,
            StreamViolation::InvalidOpaque {
                rule: "message.opaque_value",
                ..
            }
        )
    };

    check("one delta", vec![think("a")], Valid);
    check("exactly delta_bytes", vec![think("12345678")], Valid);
    check(
        "deltas then signature",
        vec![think("a"), think("b"), sign("sig")],
        Valid,
    );
    check(
        "signature at opaque_bytes",
        vec![think("a"), sign(&"s".repeat(16))],
        Valid,
    );
    check(
        "unsigned part closed by text",
        vec![think("a"), text("b")],
        Valid,
    );
    check(
        "signed part, then a new part signed",
        vec![think("a"), sign("s1"), think("b"), sign("s2")],
        Valid,
    );
    check("redacted alone", vec![redact("opaque")], Valid);
    check(
        "redacted closes an open part",
        vec![think("a"), redact("v")],
        Valid,
    );
    check(
        "redacted after a signed part",
        vec![think("a"), sign("s"), redact("v")],
        Valid,
    );
    check("redacted twice", vec![redact("v1"), redact("v2")], Valid);
    check(
        "reasoning between calls",
        vec![think("a"), call("c1", "t", "{}"), think("b"), sign("s")],
        Valid,
    );
    check(
        "reasoning after text",
        vec![text("a"), think("b"), sign("s")],
        Valid,
    );

    check(
        "empty reasoning delta",
        vec![think("")],
        Violation(|e| *e == StreamViolation::EmptyReasoningDelta),
    );
    check(
        "empty reasoning delta in an open part",
        vec![think("a"), think("")],
        Violation(|e| *e == StreamViolation::EmptyReasoningDelta),
    );
    check(
        "reasoning delta over delta_bytes",
        vec![think("123456789")],
        Violation(over(Bound::DeltaBytes)),
    );
    check("signature first", vec![sign("s")], Violation(without));
    check(
        "signature after text",
        vec![text("a"), sign("s")],
        Violation(without),
    );
    check(
        "signature after a part closed by text",
        vec![think("a"), text("b"), sign("s")],
        Violation(without),
    );
    check(
        "signature after a tool call",
        vec![think("a"), call("c1", "t", "{}"), sign("s")],
        Violation(without),
    );
    check(
        "signature twice",
        vec![think("a"), sign("s"), sign("s")],
        Violation(twice),
    );
    check(
        "signature after redacted",
        vec![redact("v"), sign("s")],
        Violation(after_redacted),
    );
    check(
        "signature after a part closed by a redacted one",
        vec![think("a"), redact("v"), sign("s")],
        Violation(after_redacted),
    );
    check(
        "signature over opaque_bytes",
        vec![think("a"), sign(&"s".repeat(17))],
        Violation(over(Bound::OpaqueBytes)),
    );
    check(
        "redacted over opaque_bytes",
        vec![redact(&"v".repeat(17))],
        Violation(over(Bound::OpaqueBytes)),
    );
    check(
        "empty signature",
        vec![think("a"), sign("")],
        Violation(invalid),
    );
    check(
        "signature with a space",
        vec![think("a"), sign("a b")],
        Violation(invalid),
    );
    check("redacted not ASCII", vec![redact("vå")], Violation(invalid));
    check("empty redacted", vec![redact("")], Violation(invalid));
    check(
        "after terminal",
        vec![complete(FinishReason::Stop), think("a")],
        Violation(|e| *e == StreamViolation::AfterTerminal),
    );
    check(
        "signature after terminal",
        vec![think("a"), complete(FinishReason::Stop), sign("s")],
        Violation(|e| *e == StreamViolation::AfterTerminal),
    );

    // Each violation names its rule and never echoes the value.
    let secret = "sk-ant-hunter2";
    for (items, rule) in [
        (vec![sign(secret)], "stream.signature_open_part"),
        (
            vec![think("a"), sign(secret), sign(secret)],
            "stream.signature_once",
        ),
        (vec![redact(secret), sign(secret)], "stream.redacted_whole"),
        (vec![think("")], "stream.reasoning_nonempty"),
        (vec![redact(&format!("{secret} x"))], "stream.opaque_value"),
    ] {
        let mut v = default_validator();
        let last = items.len() - 1;
        let mut result = Ok(());
        for (i, item) in items.into_iter().enumerate() {
            let r = v.accept(item).map(|_| ());
            if i == last {
                result = r;
            }
        }
        let e = result.unwrap_err();
        let shown = format!("{e} {e:?}");
        assert!(shown.contains(rule), "{shown}");
        assert!(!shown.contains("hunter2"), "{shown}");
    }
}

#[test]
fn after_terminal() {
    let make = default_validator;
    let check = |name: &str, items: Vec<RawItem>, expect: Expect| {
        run_row("after_terminal", name, &make, items, expect)
    };
    let after = |e: &StreamViolation| *e == StreamViolation::AfterTerminal;
    let terminals = [
        ("completion", complete(FinishReason::Stop)),
        ("failure", fail(ProblemKind::Overloaded)),
    ];
    let followers = [
        ("text", text("late")),
        ("reasoning", RawItem::reasoning("late")),
        ("signature", RawItem::reasoning_signature("late")),
        ("redacted", RawItem::redacted_reasoning("late")),
        ("empty text", text("")),
        ("tool call", call("c9", "t", "{}")),
        ("completion", complete(FinishReason::Stop)),
        ("failure", fail(ProblemKind::Timeout)),
    ];
    for (t, terminal) in &terminals {
        for (f, follower) in &followers {
            check(
                &format!("{f} after {t}"),
                vec![text("hi"), terminal.clone(), follower.clone()],
                Violation(after),
            );
            check(
                &format!("{f} after {t} with nothing before"),
                vec![terminal.clone(), follower.clone()],
                Violation(after),
            );
        }
    }
    check(
        "completion alone",
        vec![complete(FinishReason::Stop)],
        Valid,
    );
    check("failure alone", vec![fail(ProblemKind::Auth)], Valid);

    // After a violation, too (checked by hand: the violation is not last).
    let mut v = default_validator();
    assert_eq!(v.accept(text("")), Err(StreamViolation::EmptyDelta));
    for (_, item) in followers.iter().chain(&terminals) {
        assert_eq!(v.accept(item.clone()), Err(StreamViolation::AfterTerminal));
    }
}

#[test]
fn completions() {
    let forbid = || validator(ValidatorConfig::default(), Limits::default(), &["openai"]);
    let allow = || {
        let mut config = ValidatorConfig::default();
        config.stop_after_tool_calls = StopAfterToolCalls::Allow;
        validator(config, Limits::default(), &["openai"])
    };
    let check = |name: &str, items: Vec<RawItem>, expect: Expect| {
        run_row("completion", name, &forbid, items, expect)
    };
    let c1 = || call("c1", "get_weather", r#"{"city":"Oslo"}"#);
    const MAX: u64 = (1 << 53) - 1;

    check(
        "stop after text",
        vec![text("hi"), complete(FinishReason::Stop)],
        Valid,
    );
    check(
        "length",
        vec![text("hi"), complete(FinishReason::Length)],
        Valid,
    );
    check(
        "content filter",
        vec![complete(FinishReason::ContentFilter)],
        Valid,
    );
    check(
        "tool_calls after a call",
        vec![c1(), complete(FinishReason::ToolCalls)],
        Valid,
    );
    // Rule stream.known_value: only a stored event may carry an unknown
    // finish reason; the live path produces known ones.
    check(
        "unknown finish reason",
        vec![
            text("hi"),
            complete(FinishReason::from_wire("paused").unwrap()),
        ],
        Violation(|e| {
            *e == StreamViolation::UnknownValue {
                what: "finish reason",
            } && e.to_string().contains("rule stream.known_value")
        }),
    );
    check(
        "length after a call",
        vec![c1(), complete(FinishReason::Length)],
        Valid,
    );
    check(
        "content_filter after a call",
        vec![c1(), complete(FinishReason::ContentFilter)],
        Valid,
    );
    check(
        "tool_calls without a call",
        vec![complete(FinishReason::ToolCalls)],
        Violation(|e| *e == StreamViolation::FinishWithoutToolCalls),
    );
    check(
        "tool_calls after text only",
        vec![text("hi"), complete(FinishReason::ToolCalls)],
        Violation(|e| *e == StreamViolation::FinishWithoutToolCalls),
    );
    check(
        "stop after a call (forbidden)",
        vec![c1(), text("done"), complete(FinishReason::Stop)],
        Violation(|e| *e == StreamViolation::StopAfterToolCalls),
    );
    run_row(
        "completion",
        "stop after a call (allowed)",
        &allow,
        vec![c1(), complete(FinishReason::Stop)],
        Valid,
    );
    run_row(
        "completion",
        "tool_calls without a call (allowed policy changes nothing)",
        &allow,
        vec![complete(FinishReason::ToolCalls)],
        Violation(|e| *e == StreamViolation::FinishWithoutToolCalls),
    );

    check(
        "usage zero",
        vec![complete_with(FinishReason::Stop, Some((0, 0)), None)],
        Valid,
    );
    check(
        "usage at the JSON-safe maximum",
        vec![complete_with(FinishReason::Stop, Some((MAX - 1, 1)), None)],
        Valid,
    );
    check(
        "input_tokens overflow",
        vec![complete_with(FinishReason::Stop, Some((MAX + 1, 0)), None)],
        Violation(|e| matches!(e, StreamViolation::UsageOverflow(u) if u.field == "input_tokens")),
    );
    check(
        "output_tokens overflow",
        vec![complete_with(FinishReason::Stop, Some((1, u64::MAX)), None)],
        Violation(|e| matches!(e, StreamViolation::UsageOverflow(u) if u.field == "output_tokens")),
    );
    check(
        "total overflow",
        vec![complete_with(FinishReason::Stop, Some((MAX, 1)), None)],
        Violation(|e| matches!(e, StreamViolation::UsageOverflow(u) if u.field == "total")),
    );

    check(
        "metadata allowed",
        vec![complete_with(
            FinishReason::Stop,
            None,
            Some(json!({"openai": {"system_fingerprint": "fp_44709d6fcb"}})),
        )],
        Valid,
    );
    check(
        "metadata not an object",
        vec![complete_with(
            FinishReason::Stop,
            None,
            Some(json!(["openai"])),
        )],
        Violation(|e| {
            matches!(e, StreamViolation::Metadata(m)
                if *m.kind() == MetadataErrorKind::NotObject && m.path() == "$")
        }),
    );
    check(
        "metadata with a credential",
        vec![complete_with(
            FinishReason::Stop,
            None,
            Some(json!({"openai": {"request": {"api_key": "x"}}})),
        )],
        Violation(|e| matches!(e, StreamViolation::Metadata(m) if m.path() == "$.openai.request")),
    );
    check(
        "metadata: a credential in a namespace nobody allowed is dropped unread",
        vec![complete_with(
            FinishReason::Stop,
            None,
            Some(json!({"debug": {"authorization": "Bearer abcdefgh12345"}, "Not-A-Namespace": 1})),
        )],
        Valid,
    );
}

#[test]
fn metadata_bounds() {
    let limits = Limits {
        metadata_namespaces: 2,
        metadata_keys: 4,
        metadata_depth: 2,
        metadata_bytes: 60,
        ..Limits::default()
    };
    let make = move || validator(ValidatorConfig::default(), limits.clone(), &["a", "b", "c"]);
    let check = |name: &str, meta: serde_json::Value, expect: Expect| {
        run_row(
            "metadata",
            name,
            &make,
            vec![complete_with(FinishReason::Stop, None, Some(meta))],
            expect,
        )
    };
    fn bound(e: &StreamViolation, b: Bound, path: &str) -> bool {
        matches!(e, StreamViolation::Metadata(m)
            if matches!(m.kind(), MetadataErrorKind::Limit(l) if l.bound == b) && m.path() == path)
    }
    check(
        "within every bound",
        json!({"a": {"k": 1, "l": {"m": true}}, "b": {}}),
        Valid,
    );
    check(
        "too many namespaces",
        json!({"a": {}, "b": {}, "c": {}}),
        Violation(|e| bound(e, Bound::MetadataNamespaces, "$")),
    );
    check(
        "unallowed namespaces don't count",
        json!({"a": {}, "b": {}, "zz": {}, "yy": {}}),
        Valid,
    );
    check(
        "too many keys, counted at every depth",
        json!({"a": {"k": {"l": 1, "m": 2}}, "b": {"n": 1, "o": 2}}),
        Violation(|e| bound(e, Bound::MetadataKeys, "$.b.o")),
    );
    check(
        "too deep",
        json!({"a": {"k": {"l": {"m": 1}}}}),
        Violation(|e| bound(e, Bound::MetadataDepth, "$.a.k.l")),
    );
    check(
        "arrays nest too",
        json!({"a": {"k": [[1]]}}),
        Violation(|e| bound(e, Bound::MetadataDepth, "$.a.k[0]")),
    );
    check(
        "too many bytes",
        json!({"a": {"k": "x".repeat(60)}}),
        Violation(|e| bound(e, Bound::MetadataBytes, "$")),
    );
    check(
        "namespace value not an object",
        json!({"a": "x"}),
        Violation(|e| {
            matches!(e, StreamViolation::Metadata(m)
                if *m.kind() == MetadataErrorKind::NamespaceNotObject && m.path() == "$.a")
        }),
    );
    check(
        "unsafe integer",
        json!({"a": {"n": 9007199254740993u64}}),
        Violation(
            |e| matches!(e, StreamViolation::Metadata(m) if matches!(m.kind(), MetadataErrorKind::Json(_))),
        ),
    );
}

#[test]
fn no_terminal() {
    let check = |name: &str, items: Vec<RawItem>| {
        let mut v = default_validator();
        for item in &items {
            v.accept(item.clone()).unwrap();
        }
        let position = v.position();
        assert_eq!(
            v.end_of_stream(),
            Err(StreamViolation::NoTerminal),
            "[{name}]"
        );
        assert!(v.is_terminated());
        assert_eq!(v.accept(text("late")), Err(StreamViolation::AfterTerminal));
        assert_eq!(v.end_of_stream(), Ok(()), "[{name}] reported twice");

        let out = drain(items.clone(), default_validator());
        assert_eq!(out.len(), items.len() + 1, "[{name}]");
        let Some(StreamItem::Failure(f)) = out.last() else {
            panic!("[{name}] {out:?}")
        };
        assert_eq!(f.kind(), ProblemKind::Protocol);
        assert!(!f.problem().retryable());
        assert_eq!(f.position(), position, "[{name}]");
        assert_eq!(
            f.problem().message(),
            StreamViolation::NoTerminal.to_string()
        );
    };
    check("empty stream", vec![]);
    check("text only", vec![text("a"), text("b")]);
    check("tool call only", vec![call("c1", "t", "{}")]);

    // A terminated stream's end is fine.
    let mut v = default_validator();
    v.accept(complete(FinishReason::Stop)).unwrap();
    assert_eq!(v.end_of_stream(), Ok(()));
}

#[test]
fn retry_position() {
    let check = |name: &str, items: Vec<RawItem>, expected: RetryPosition| {
        let mut v = default_validator();
        let mut last = None;
        for item in items.clone() {
            last = Some(v.accept(item));
        }
        let Some(Ok(StreamItem::Failure(f))) = last else {
            panic!("[{name}] {last:?}")
        };
        assert_eq!(f.position(), expected, "[{name}]");
        let out = drain(items, default_validator());
        let Some(StreamItem::Failure(g)) = out.last() else {
            panic!("[{name}]")
        };
        assert_eq!(g, &f, "[{name}] stream and validator agree");
    };
    use RetryPosition::*;
    check(
        "failure first",
        vec![fail(ProblemKind::Overloaded)],
        Pristine,
    );
    check(
        "after one text",
        vec![text("a"), fail(ProblemKind::Overloaded)],
        Partial,
    );
    check(
        "after one call",
        vec![call("c1", "t", "{}"), fail(ProblemKind::Timeout)],
        Partial,
    );
    check(
        "after a reasoning delta",
        vec![RawItem::reasoning("a"), fail(ProblemKind::Overloaded)],
        Partial,
    );
    check(
        "after a redacted part",
        vec![
            RawItem::redacted_reasoning("v"),
            fail(ProblemKind::Overloaded),
        ],
        Partial,
    );
    check(
        "adapter says retryable; still partial",
        vec![
            text("a"),
            RawItem::fail(ProblemKind::Unavailable, "cut", true),
        ],
        Partial,
    );

    // Violations take the position before the violating item.
    let mut v = default_validator();
    assert_eq!(v.position(), Pristine);
    let e = v.accept(call("c1", "bad name", "{}")).unwrap_err();
    assert_eq!(e.into_failure(v.position()).position(), Pristine);
    let mut v = default_validator();
    v.accept(text("a")).unwrap();
    let e = v.accept(text("")).unwrap_err();
    assert_eq!(e.into_failure(v.position()).position(), Partial);

    // A start failure is pristine.
    let f = ModelFailure::at_start(ProviderProblem::new(
        ProblemKind::RateLimited,
        "slow down",
        true,
    ));
    assert_eq!(f.position(), Pristine);
}

#[test]
fn failures_are_validated_problems() {
    let limits = Limits {
        problem_message_bytes: 16,
        ..Limits::default()
    };
    let mut v = validator(ValidatorConfig::default(), limits, &[]);
    let raw = RawProblem {
        kind: ProblemKind::RateLimited,
        message: "Rate limit reached for requests; try again".into(),
        retryable: true,
        retry_after: Some(std::time::Duration::from_secs(17)),
    };
    let Ok(StreamItem::Failure(f)) = v.accept(RawItem::Failure(raw)) else {
        panic!()
    };
    assert_eq!(f.kind(), ProblemKind::RateLimited);
    assert!(f.problem().retryable());
    assert_eq!(
        f.problem().retry_after(),
        Some(std::time::Duration::from_secs(17))
    );
    assert_eq!(f.problem().message(), "Rate limit reach");
    assert!(f.problem().truncated());

    // Rule stream.known_value: a raw problem of an unknown kind is a
    // violation (the protocol failure it becomes names the rule).
    let mut v = default_validator();
    let unknown = ProblemKind::from_wire("quota").unwrap();
    let e = v.accept(fail(unknown)).unwrap_err();
    assert_eq!(
        e,
        StreamViolation::UnknownValue {
            what: "problem kind"
        }
    );
    let failure = e.into_failure(RetryPosition::Pristine);
    assert_eq!(failure.kind(), ProblemKind::Protocol);
    assert!(
        failure
            .problem()
            .message()
            .contains("rule stream.known_value")
    );
}

#[test]
fn violation_messages_never_echo_content() {
    let secretish = "hunter2-and-more";
    let violations = [
        default_validator()
            .accept(call(secretish, "t", "{}"))
            .map(|_| ()),
        default_validator()
            .accept(call("c 1", secretish, "{}"))
            .map(|_| ()),
        default_validator()
            .accept(call("c1", &format!("{secretish} x"), "{}"))
            .map(|_| ()),
        default_validator()
            .accept(call(
                "c1",
                "t",
                &format!(r#"{{"{secretish}":1,"{secretish}":2}}"#),
            ))
            .map(|_| ()),
        default_validator()
            .accept(call("c1", "t", &format!(r#"{{"a": {secretish}}}"#)))
            .map(|_| ()),
        default_validator()
            .accept(call("c1", "t", &format!(r#"["{secretish}"]"#)))
            .map(|_| ()),
        default_validator()
            .accept(complete_with(
                FinishReason::Stop,
                None,
                Some(json!({"openai": {"note": format!("password={secretish}")}})),
            ))
            .map(|_| ()),
    ];
    let mut n = 0;
    for v in violations {
        let Err(e) = v else { continue };
        n += 1;
        let shown = format!("{e} {e:?}");
        // The call id case is valid ("hunter2-and-more" is an id), skip it.
        assert!(!shown.contains("hunter2"), "{shown}");
    }
    assert!(n >= 6, "only {n} rows were violations");
}
