//! The commit path's line building against the reference encodings: the
//! hand-written integer formatter against `format!`, and a line built by
//! [`LineHead`] (whatever sequence and timestamp it expected) against
//! [`Event::assemble`] of [`Payload::to_canonical`] and against the line
//! written with `format!` and the canonical string writer.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::{Event, LineHead, MAX_SAFE, RunTail, digits, push_u64};
use crate::payload::{Extra, Payload, TextDelta};
use keel_message::{OperationId, RunId};
use proptest::prelude::*;

fn formatted(n: u64) -> String {
    let mut s = String::from("x");
    push_u64(&mut s, n);
    s
}

#[test]
fn integers_at_the_edges() {
    let mut edges = vec![0, 1, 9, 10, 11, 99, 100, 101, MAX_SAFE, u64::MAX];
    for p in 1..20 {
        let ten = 10u64.pow(p);
        edges.extend([ten - 1, ten, ten + 1]);
    }
    for n in edges {
        assert_eq!(formatted(n), format!("x{n}"));
        assert_eq!(digits(n), n.to_string().len(), "{n}");
    }
}

fn delta(op: &str, text: &str, turn: u64) -> Payload {
    Payload::TextDelta(TextDelta {
        turn,
        operation_id: OperationId::parse(op).unwrap(),
        text: text.to_owned(),
        extra: Extra::new(),
    })
}

/// The line as the commit path builds it, expecting `seq_guess` and
/// `ts_guess`.
fn built(payload: &Payload, run: &RunId, seq: u64, ts: u64, guess: (u64, u64)) -> Event {
    let transition = payload.transition();
    let encoded = payload.encode(&transition).unwrap();
    let head = LineHead::new(payload.kind(), &encoded, run, guess.0, guess.1);
    let tail = RunTail::new(run);
    let len = head.line_len(&tail, seq, ts);
    let event = head.finish(run.clone(), &tail, seq, ts);
    assert_eq!(event.line().len(), len);
    event
}

/// The reference: the envelope through `format!`, the text through the
/// canonical string writer.
fn reference_line(op: &str, text: &str, turn: u64, run: &str, seq: u64, ts: u64) -> String {
    let mut quoted = String::new();
    keel_message::canonical::write_canonical_str(text, &mut quoted);
    format!(
        r#"{{"kind":"model.text_delta","payload":{{"operation_id":"{op}","text":{quoted},"turn":{turn}}},"run_id":"{run}","seq":{seq},"ts":{ts}}}"#
    )
}

#[test]
fn generic_payloads_build_the_assembled_line() {
    let run = RunId::parse("run_1").unwrap();
    let mut extra = Extra::new();
    extra.insert("zz".into(), serde_json::json!({"b": 1, "a": "\u{1}"}));
    let payloads = [
        Payload::TextDelta(TextDelta {
            turn: 3,
            operation_id: OperationId::parse("op_7").unwrap(),
            text: "with extra".into(),
            extra,
        }),
        Payload::RunStarted(crate::payload::RunStarted::default()),
        Payload::Extension {
            kind: crate::kind::EventKind::parse("x.custom").unwrap(),
            payload: keel_message::CanonicalJson::parse(r#"{"k":[1,2,"\""]}"#).unwrap(),
        },
    ];
    for payload in &payloads {
        let json = payload.to_canonical().unwrap();
        let want = Event::assemble(
            run.clone(),
            12,
            1_700_000_000_000_000,
            payload.kind(),
            &json,
        );
        for guess in [(12, 1_700_000_000_000_000), (9, 0), (123, 7)] {
            let got = built(payload, &run, 12, 1_700_000_000_000_000, guess);
            assert_eq!(got, want);
            assert_eq!(got.payload_json(), json);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn integers_match_format(n in any::<u64>()) {
        prop_assert_eq!(formatted(n), format!("x{n}"));
        prop_assert_eq!(digits(n), n.to_string().len());
    }

    #[test]
    fn text_delta_lines_match_the_reference(
        op in "[a-z][a-z0-9_.:-]{0,20}",
        text in any::<String>().prop_filter("text is never empty", |t| !t.is_empty()),
        turn in 1..=MAX_SAFE,
        seq in 1..=MAX_SAFE,
        ts in 0..=MAX_SAFE,
        seq_guess in 1..=MAX_SAFE,
        ts_guess in 0..=MAX_SAFE,
        guess_right in any::<bool>(),
    ) {
        let run = RunId::parse("run_42").unwrap();
        let payload = delta(&op, &text, turn);
        let guess = if guess_right { (seq, ts) } else { (seq_guess, ts_guess) };
        let event = built(&payload, &run, seq, ts, guess);
        let want = reference_line(&op, &text, turn, "run_42", seq, ts);
        prop_assert_eq!(event.line(), want.as_str());
        let json = payload.to_canonical().unwrap();
        let assembled = Event::assemble(run.clone(), seq, ts, payload.kind(), &json);
        prop_assert_eq!(&event, &assembled);
        prop_assert_eq!(event.payload_json(), json.as_str());
        prop_assert_eq!(Event::decode(event.line()).unwrap(), event);
    }

    #[test]
    fn control_heavy_texts_match_the_reference(
        text in proptest::collection::vec(
            prop_oneof![Just('"'), Just('\\'), (0u8..0x20).prop_map(char::from), Just('é'), Just('a')],
            1..40,
        ),
    ) {
        let text: String = text.into_iter().collect();
        let run = RunId::parse("run_1").unwrap();
        let payload = delta("op_1", &text, 1);
        let event = built(&payload, &run, 100, 99_999, (99, 100_000));
        prop_assert_eq!(event.line(), reference_line("op_1", &text, 1, "run_1", 100, 99_999));
    }
}
