//! The `tool.failed` fast path against the generic decoder: it takes
//! exactly the canonical lines of its shape whose error text screening
//! leaves unchanged, gives the generic path's event for them, and steps
//! aside for everything else (the generic path then decides).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::tests::{agree, id_strategy, integer_strategy, mutate, text_strategy};
use super::{EventDecodeError, tool_failed};
use crate::payload::{ERROR_TEXT_MAX_BYTES, PayloadError};
use proptest::prelude::*;

/// A `tool.failed` line; `outcome` and `retry` are written when given.
fn failed_line(
    call: &str,
    error: &str,
    outcome: Option<&str>,
    retry: Option<&str>,
    tool: &str,
    turn: u64,
) -> String {
    let mut text = String::new();
    keel_message::canonical::write_canonical_str(error, &mut text);
    let outcome = outcome.map_or(String::new(), |o| format!(r#","outcome":"{o}""#));
    let retry = retry.map_or(String::new(), |r| format!(r#","retry":"{r}""#));
    format!(
        r#"{{"kind":"tool.failed","payload":{{"call_id":"{call}","error":{text}{outcome}{retry},"tool":"{tool}","turn":{turn}}},"run_id":"run_1","seq":5,"ts":7}}"#
    )
}

/// What decoding a line should give.
#[derive(Debug)]
enum Expect {
    /// The fast path takes it.
    Taken,
    /// The fast path steps aside; the generic path accepts it.
    AsideOk,
    /// The fast path steps aside; the generic path refuses it so.
    AsideErr(fn(&EventDecodeError) -> bool),
}

fn check(name: &str, line: &str, expect: Expect) {
    let generic = agree(line);
    let fast = tool_failed::decode(line);
    match expect {
        Expect::Taken => assert!(
            fast.is_some() && generic.is_ok(),
            "{name}: {line} {generic:?}"
        ),
        Expect::AsideOk => assert!(
            fast.is_none() && generic.is_ok(),
            "{name}: {line} {generic:?}"
        ),
        Expect::AsideErr(is) => {
            assert!(fast.is_none(), "{name}: fast path took {line}");
            let err = generic.expect_err(name);
            assert!(is(&err), "{name}: {err:?}");
        }
    }
}

fn not_canonical(e: &EventDecodeError) -> bool {
    matches!(e, EventDecodeError::NotCanonical { .. })
}

const U: Option<&str> = Some("uncertain");
const R: Option<&str> = Some("retryable");

#[test]
fn takes_canonical_lines_with_unchanged_text() {
    let at_bound = "a".repeat(ERROR_TEXT_MAX_BYTES);
    let cases: Vec<(&str, String, Expect)> = vec![
        (
            "all members",
            failed_line("c1", "timed out", U, R, "get_weather", 1),
            Expect::Taken,
        ),
        (
            "no outcome or retry",
            failed_line("c1", "boom", None, None, "t", 3),
            Expect::Taken,
        ),
        (
            "retry only",
            failed_line("c1", "boom", None, Some("not_retryable"), "t", 3),
            Expect::Taken,
        ),
        (
            "definitive",
            failed_line("c1", "boom", Some("definitive"), None, "t", 3),
            Expect::Taken,
        ),
        (
            "escaped text",
            failed_line("c1", "a\n\"b\"\t\\ é", U, R, "t", 1),
            Expect::Taken,
        ),
        (
            "redaction marker",
            failed_line("c1", "key [redacted]", U, R, "t", 1),
            Expect::Taken,
        ),
        (
            "text at the bound",
            failed_line("c1", &at_bound, U, R, "t", 1),
            Expect::Taken,
        ),
        (
            "empty text",
            failed_line("c1", "", U, R, "t", 1),
            Expect::AsideOk,
        ),
        (
            "unknown outcome",
            failed_line("c1", "x", Some("maybe"), R, "t", 1),
            Expect::AsideOk,
        ),
        (
            "unknown retry",
            failed_line("c1", "x", U, Some("later"), "t", 1),
            Expect::AsideOk,
        ),
        (
            "unknown member",
            failed_line("c1", "x", U, R, "t", 1).replace(r#""turn":1}"#, r#""turn":1,"zz":1}"#),
            Expect::AsideOk,
        ),
    ];
    for (name, line, expect) in cases {
        check(name, &line, expect);
    }
}

#[test]
fn leaves_refused_lines_to_the_generic_path() {
    let long = "a".repeat(ERROR_TEXT_MAX_BYTES + 1);
    let cases: Vec<(&str, String, Expect)> = vec![
        (
            "secret in text",
            failed_line("c1", "password=hunter2", U, R, "t", 1),
            Expect::AsideErr(not_canonical),
        ),
        (
            "blanked control",
            failed_line("c1", "a\rb", U, R, "t", 1),
            Expect::AsideErr(not_canonical),
        ),
        (
            "C1 control",
            failed_line("c1", "a\u{85}b", U, R, "t", 1),
            Expect::AsideErr(not_canonical),
        ),
        (
            "over the bound",
            failed_line("c1", &long, U, R, "t", 1),
            Expect::AsideErr(not_canonical),
        ),
        (
            "non-canonical escape",
            failed_line("c1", "A", U, R, "t", 1).replace(r#""error":"A""#, r#""error":"\u0041""#),
            Expect::AsideErr(not_canonical),
        ),
        (
            "turn 0",
            failed_line("c1", "x", U, R, "t", 0),
            Expect::AsideErr(|e| {
                matches!(e, EventDecodeError::Payload(PayloadError::TurnZero { .. }))
            }),
        ),
        (
            "bad tool name",
            failed_line("c1", "x", U, R, "a.b", 1),
            Expect::AsideErr(|_| true),
        ),
        (
            "bad call id",
            failed_line("c 1", "x", U, R, "t", 1),
            Expect::AsideErr(|_| true),
        ),
        (
            "seq 0",
            failed_line("c1", "x", U, R, "t", 1).replace(r#""seq":5"#, r#""seq":0"#),
            Expect::AsideErr(|e| matches!(e, EventDecodeError::Seq { seq: 0 })),
        ),
    ];
    for (name, line, expect) in cases {
        check(name, &line, expect);
    }
}

fn value_strategy(known: &'static [&'static str]) -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        Just(None),
        proptest::sample::select(known).prop_map(|v| Some(v.to_owned())),
        "[a-z_]{1,8}".prop_map(Some),
    ]
}

fn error_strategy() -> impl Strategy<Value = String> {
    prop_oneof![
        text_strategy(),
        text_strategy().prop_map(|t| format!("{t} password=hunter2")),
        text_strategy().prop_map(|t| format!("{t} ghp_{}", "A".repeat(36))),
    ]
}

const OUTCOMES: &[&str] = &["definitive", "uncertain"];
const RETRIES: &[&str] = &["retryable", "not_retryable"];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    /// Generated lines, valid or not in their parts: the fast path takes
    /// exactly the ones the generic path accepts with a non-empty text and
    /// known values, and gives the generic path's event for them.
    #[test]
    fn generated_lines_agree(
        call in id_strategy(),
        error in error_strategy(),
        outcome in value_strategy(OUTCOMES),
        retry in value_strategy(RETRIES),
        tool in id_strategy(),
        turn in integer_strategy(),
    ) {
        let line = failed_line(&call, &error, outcome.as_deref(), retry.as_deref(), &tool, turn);
        let generic = agree(&line);
        let known = |v: &Option<String>, all: &[&str]| v.as_deref().is_none_or(|v| all.contains(&v));
        let expected = generic.is_ok() && !error.is_empty() && known(&outcome, OUTCOMES) && known(&retry, RETRIES);
        prop_assert_eq!(tool_failed::decode(&line).is_some(), expected, "{}", line);
    }

    /// Mutated lines: every result matches the generic path's.
    #[test]
    fn mutated_lines_agree(
        error in error_strategy(),
        edits in proptest::collection::vec((any::<usize>(), any::<u8>(), any::<usize>()), 1..4),
    ) {
        let line = failed_line("call_1", &error, Some("uncertain"), Some("retryable"), "get_weather", 2);
        let _ = agree(&mutate(&line, &edits));
    }
}
