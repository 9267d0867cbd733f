//! The decode shortcuts against the generic decoder: the text-delta fast
//! path either returns exactly the generic path's event or steps aside, and
//! `Event::decode` (both shortcuts) returns the generic path's result, error
//! included, for generated valid lines and mutations of them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::{Event, EventDecodeError, MAX_SAFE, decode_envelope, text_delta, tool_failed};
use crate::kind::EventKind;
use crate::payload::{Extra, Payload, PayloadError, TextDelta};
use keel_message::{OperationId, RunId};
use proptest::prelude::*;

fn delta_line(op: &str, text: &str, turn: u64, run: &str, seq: u64, ts: u64) -> String {
    let text = {
        let mut s = String::new();
        keel_message::canonical::write_canonical_str(text, &mut s);
        s
    };
    format!(
        r#"{{"kind":"model.text_delta","payload":{{"operation_id":"{op}","text":{text},"turn":{turn}}},"run_id":"{run}","seq":{seq},"ts":{ts}}}"#
    )
}

fn line_of(payload: &str, run: &str, seq: u64, ts: u64) -> String {
    format!(
        r#"{{"kind":"model.text_delta","payload":{payload},"run_id":"{run}","seq":{seq},"ts":{ts}}}"#
    )
}

const OK_PAYLOAD: &str = r#"{"operation_id":"op_1","text":"Hi","turn":1}"#;

/// The fast path steps aside for `line`, and decoding it gives the generic
/// path's result.
fn stepped_aside(line: &str) -> Result<Event, EventDecodeError> {
    assert_eq!(text_delta::decode(line), None, "fast path took {line}");
    agree(line)
}

/// `Event::decode` and `Event::decode_generic` agree on `line`; when a
/// fast path takes it, it gives that same event.
pub(super) fn agree(line: &str) -> Result<Event, EventDecodeError> {
    let generic = Event::decode_generic(line);
    assert_eq!(Event::decode(line), generic, "{line}");
    for fast in [text_delta::decode(line), tool_failed::decode(line)]
        .into_iter()
        .flatten()
    {
        assert_eq!(Ok(&fast), generic.as_ref(), "{line}");
        assert_eq!(fast.line(), line);
    }
    if let Some(envelope) = decode_envelope(line) {
        assert_eq!(envelope, generic, "{line}");
    }
    generic
}

fn taken(line: &str) -> Event {
    let fast = text_delta::decode(line).unwrap_or_else(|| panic!("fast path refused {line}"));
    assert_eq!(agree(line), Ok(fast.clone()));
    fast
}

#[test]
fn takes_a_canonical_delta() {
    let line = delta_line("op_1", "Hi ✓ \u{2028} \u{1F600} \u{7f}", 3, "run_1", 4, 0);
    let e = taken(&line);
    assert_eq!((e.seq(), e.ts(), e.kind()), (4, 0, &EventKind::TextDelta));
    assert_eq!(e.run_id().as_str(), "run_1");
    let Ok(Payload::TextDelta(p)) = e.payload() else {
        panic!("not a delta")
    };
    assert_eq!((p.turn, p.operation_id.as_str()), (3, "op_1"));
}

#[test]
fn takes_every_canonical_escape() {
    let all: String = (0u8..0x20).map(char::from).chain(['"', '\\']).collect();
    let line = delta_line("op_1", &all, 1, "run_1", 1, 1);
    assert!(line.contains(r#"\u0000"#) && line.contains(r#"\n"#) && line.contains(r#"\u001f"#));
    taken(&line);
}

#[test]
fn refuses_non_canonical_escapes_as_the_generic_path() {
    for escape in [
        r"\/",
        r"\u0041",
        r"\u001F",
        r"\u000a",
        r"\u0022",
        r"\ud83d\ude00",
        r"\x",
    ] {
        let payload = format!(r#"{{"operation_id":"op_1","text":"a{escape}","turn":1}}"#);
        let line = line_of(&payload, "run_1", 1, 1);
        let err = stepped_aside(&line).unwrap_err();
        assert!(
            matches!(
                err,
                EventDecodeError::NotCanonical { .. } | EventDecodeError::Json(_)
            ),
            "{escape}: {err}"
        );
    }
}

#[test]
fn refuses_non_canonical_whitespace_as_the_generic_path() {
    let line = line_of(OK_PAYLOAD, "run_1", 1, 1);
    taken(&line);
    for spaced in [
        line.replacen(",", ", ", 1),
        line.replacen(":", " :", 1),
        format!(" {line}"),
        format!("{line}\n"),
        line.replace("\"turn\":1", "\"turn\": 1"),
    ] {
        let err = stepped_aside(&spaced).unwrap_err();
        assert!(
            matches!(err, EventDecodeError::NotCanonical { .. }),
            "{spaced}: {err}"
        );
    }
}

#[test]
fn refuses_raw_control_characters_as_the_generic_path() {
    let line = delta_line("op_1", "a", 1, "run_1", 1, 1).replace("\"a\"", "\"a\u{1}\"");
    assert!(matches!(
        stepped_aside(&line),
        Err(EventDecodeError::Json(_))
    ));
}

#[test]
fn leaves_unknown_members_to_the_generic_path() {
    // An unknown payload member is kept, by the generic path.
    let payload = r#"{"a_future":1,"operation_id":"op_1","text":"Hi","turn":1}"#;
    let e = stepped_aside(&line_of(payload, "run_1", 1, 1)).unwrap();
    let Ok(Payload::TextDelta(p)) = e.payload() else {
        panic!("not a delta")
    };
    assert_eq!(p.extra.len(), 1);
    let payload = r#"{"operation_id":"op_1","text":"Hi","turn":1,"z":null}"#;
    stepped_aside(&line_of(payload, "run_1", 1, 1)).unwrap();
    // An unknown envelope member is refused.
    let line = line_of(OK_PAYLOAD, "run_1", 1, 1);
    let extra = format!("{},\"x\":1}}", &line[..line.len() - 1]);
    assert!(matches!(
        stepped_aside(&extra),
        Err(EventDecodeError::Envelope {
            detail: "unknown envelope member"
        })
    ));
}

#[test]
fn does_not_screen_delta_text_like_the_generic_path() {
    // Model text is content: neither path screens it (failure text is
    // screened, as `ErrorText`), so a secret-shaped delta decodes alike.
    let key = format!("sk-ant-api03-{}", "Ab1".repeat(20));
    let e = taken(&delta_line("op_1", &format!("key {key}"), 1, "run_1", 1, 1));
    assert!(e.line().contains(&key));
    // Screened failure text that would change is refused by both paths.
    let failed = format!(
        r#"{{"kind":"tool.failed","payload":{{"call_id":"c1","error":"key {key}","tool":"t","turn":1}},"run_id":"run_1","seq":1,"ts":1}}"#
    );
    assert!(matches!(
        stepped_aside(&failed),
        Err(EventDecodeError::NotCanonical { .. })
    ));
}

#[test]
fn refuses_empty_text_and_zero_turn_or_seq_as_the_generic_path() {
    let empty = delta_line("op_1", "", 1, "run_1", 1, 1);
    assert_eq!(stepped_aside(&empty), Err(PayloadError::EmptyText.into()));
    let turn0 = delta_line("op_1", "a", 0, "run_1", 1, 1);
    assert!(matches!(
        stepped_aside(&turn0),
        Err(EventDecodeError::Payload(PayloadError::TurnZero { .. }))
    ));
    let seq0 = delta_line("op_1", "a", 1, "run_1", 0, 1);
    assert_eq!(stepped_aside(&seq0), Err(EventDecodeError::Seq { seq: 0 }));
}

#[test]
fn refuses_out_of_bounds_and_non_shortest_integers_as_the_generic_path() {
    let big = MAX_SAFE + 1;
    taken(&delta_line(
        "op_1", "a", MAX_SAFE, "run_1", MAX_SAFE, MAX_SAFE,
    ));
    let ts = delta_line("op_1", "a", 1, "run_1", 1, big);
    assert_eq!(stepped_aside(&ts), Err(EventDecodeError::Ts { ts: big }));
    let seq = delta_line("op_1", "a", 1, "run_1", big, 1);
    assert_eq!(stepped_aside(&seq), Err(EventDecodeError::Seq { seq: big }));
    // A turn past 2^53 − 1 is not I-JSON: refused like any payload's.
    let turn = delta_line("op_1", "a", big, "run_1", 1, 1);
    assert!(matches!(
        stepped_aside(&turn),
        Err(EventDecodeError::Payload(PayloadError::Json(_)))
    ));
    for line in [
        delta_line("op_1", "a", 1, "run_1", 1, 1).replace("\"seq\":1", "\"seq\":01"),
        delta_line("op_1", "a", 1, "run_1", 1, 1).replace("\"ts\":1", "\"ts\":1.0"),
        delta_line("op_1", "a", 1, "run_1", 1, 1).replace("\"turn\":1", "\"turn\":1e0"),
        delta_line("op_1", "a", 1, "run_1", 1, 1).replace("\"ts\":1", "\"ts\":-0"),
        delta_line("op_1", "a", 1, "run_1", 1, 1).replace("\"ts\":1", "\"ts\":99999999999999999"),
    ] {
        stepped_aside(&line).unwrap_err();
    }
}

#[test]
fn the_encoder_refuses_an_unsafe_turn() {
    let p = Payload::TextDelta(TextDelta {
        turn: MAX_SAFE + 1,
        operation_id: OperationId::parse("op_1").unwrap(),
        text: "a".into(),
        extra: Extra::new(),
    });
    assert!(matches!(p.to_canonical(), Err(PayloadError::Json(_))));
}

#[test]
fn refuses_bad_identifiers_as_the_generic_path() {
    let long = "o".repeat(129);
    for (op, run) in [("op 1", "run_1"), ("", "run_1"), (long.as_str(), "run_1")] {
        let line = delta_line(op, "a", 1, run, 1, 1);
        assert!(
            matches!(stepped_aside(&line), Err(EventDecodeError::Payload(_))),
            "{op}"
        );
    }
    for run in ["run 1", "", long.as_str(), r"run\u005f1"] {
        let line = delta_line("op_1", "a", 1, run, 1, 1);
        stepped_aside(&line).unwrap_err();
    }
    // Escaped, an id is not in canonical form.
    let line = delta_line(r"op\u005f1", "a", 1, "run_1", 1, 1);
    stepped_aside(&line).unwrap_err();
}

#[test]
fn the_envelope_shortcut_only_reads_objects() {
    // serde reads a struct from an array too; the generic path refuses it.
    let array = format!(r#"["model.text_delta",{OK_PAYLOAD},"run_1",1,1]"#);
    assert_eq!(decode_envelope(&array), None);
    assert_eq!(
        agree(&array),
        Err(EventDecodeError::Envelope {
            detail: "not an object"
        })
    );
    // Duplicates and escaped kinds are left to the generic path too.
    let line = line_of(OK_PAYLOAD, "run_1", 1, 1);
    let dup = line.replacen("{\"kind\"", "{\"kind\":\"model.text_delta\",\"kind\"", 1);
    assert_eq!(decode_envelope(&dup), None);
    assert!(matches!(
        agree(&dup),
        Err(EventDecodeError::NotCanonical { .. })
    ));
    let escaped = line.replacen("model.text_delta", r"model.text\u005fdelta", 1);
    assert_eq!(decode_envelope(&escaped), None);
    assert!(matches!(
        agree(&escaped),
        Err(EventDecodeError::NotCanonical { .. })
    ));
}

#[test]
fn deep_payloads_agree() {
    for depth in [60, 63, 64, 65, 125, 126, 127, 128, 129] {
        let deep = "[".repeat(depth) + &"]".repeat(depth);
        let line = format!(
            r#"{{"kind":"turn.started","payload":{{"future":{deep},"turn":1}},"run_id":"run_1","seq":1,"ts":1}}"#
        );
        let _ = agree(&line);
        let ext = format!(
            r#"{{"kind":"x.note","payload":{{"a":{deep}}},"run_id":"run_1","seq":1,"ts":1}}"#
        );
        let _ = agree(&ext);
    }
}

/// Lines of other kinds, for the envelope shortcut's mutations.
const OTHER_LINES: &[&str] = &[
    r#"{"kind":"tool.failed","payload":{"call_id":"c1","error":"timed out","outcome":"uncertain","retry":"retryable","tool":"get_weather","turn":1},"run_id":"run_1","seq":5,"ts":1796189353807197}"#,
    r#"{"kind":"run.started","payload":{},"run_id":"run_1","seq":1,"ts":0}"#,
    r#"{"kind":"turn.started","payload":{"future":{"a":null,"b":[1,2.5]},"turn":1},"run_id":"r","seq":2,"ts":3}"#,
    r#"{"kind":"model.failed","payload":{"operation_id":"op_2","position":"partial","problem":{"kind":"overloaded","message":"busy","retryable":true},"turn":1},"run_id":"run_1","seq":3,"ts":4}"#,
    r#"{"kind":"model.reasoning_delta","payload":{"text":"hmm","turn":1},"run_id":"run_1","seq":3,"ts":4}"#,
];

/// Bytes a mutation inserts or writes: JSON structure, escapes, digits,
/// whitespace, a multi-byte character.
const MUTATION_BYTES: &[&str] = &[
    " ", "\\", "\"", "0", "1", "9", "u", "A", "a", "}", "{", ",", ":", "\n", "é", "-", ".", "e",
    "\\u0041", "\\n", "\u{1}", "null", "[", "]", "_",
];

/// Applies `(position, operation, byte choice)` edits to `line`, at char
/// boundaries: insert, replace one char, or delete one char.
pub(super) fn mutate(line: &str, edits: &[(usize, u8, usize)]) -> String {
    let mut s = line.to_owned();
    for &(pos, op, pick) in edits {
        let boundaries: Vec<usize> = s.char_indices().map(|(i, _)| i).chain([s.len()]).collect();
        let at = boundaries[pos % boundaries.len()];
        let piece = MUTATION_BYTES[pick % MUTATION_BYTES.len()];
        let next = s[at..].chars().next().map_or(0, char::len_utf8);
        match op % 3 {
            0 => s.insert_str(at, piece),
            1 => s.replace_range(at..at + next, piece),
            _ => s.replace_range(at..at + next, ""),
        }
    }
    s
}

pub(super) fn text_strategy() -> impl Strategy<Value = String> {
    "\\PC{1,40}|[\u{0}-\u{1f}\"\\\\\u{7f}\u{2028}\u{fffd}\u{1F600}a]{1,12}|"
}

pub(super) fn id_strategy() -> impl Strategy<Value = String> {
    "[A-Za-z0-9_.:-]{1,12}|[A-Za-z0-9_ \"\\\\]{0,4}"
}

pub(super) fn integer_strategy() -> impl Strategy<Value = u64> {
    prop_oneof![
        0u64..4,
        1u64..1_000_000_000,
        Just(MAX_SAFE),
        Just(MAX_SAFE + 1),
        any::<u64>()
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    /// Generated delta lines, valid or not in their parts: the fast path
    /// takes exactly the valid ones, and gives the generic path's event.
    #[test]
    fn generated_deltas_agree(
        op in id_strategy(),
        text in text_strategy(),
        turn in integer_strategy(),
        run in id_strategy(),
        seq in integer_strategy(),
        ts in integer_strategy(),
    ) {
        let line = delta_line(&op, &text, turn, &run, seq, ts);
        let generic = agree(&line);
        prop_assert_eq!(text_delta::decode(&line).is_some(), generic.is_ok(), "{}", line);
    }

    /// Mutated delta lines: whatever the fast path takes, the generic path
    /// accepts as the same event; every result matches the generic path's,
    /// error included.
    #[test]
    fn mutated_deltas_agree(
        text in text_strategy(),
        turn in 1u64..1000,
        seq in 1u64..1000,
        ts in integer_strategy(),
        edits in proptest::collection::vec((any::<usize>(), any::<u8>(), any::<usize>()), 1..4),
    ) {
        let line = delta_line("op_1", &text, turn, "run_1", seq, ts);
        let _ = agree(&mutate(&line, &edits));
    }

    /// Mutated lines of other kinds through the envelope shortcut.
    #[test]
    fn mutated_lines_of_other_kinds_agree(
        pick in 0..OTHER_LINES.len(),
        edits in proptest::collection::vec((any::<usize>(), any::<u8>(), any::<usize>()), 0..4),
    ) {
        let _ = agree(&mutate(OTHER_LINES[pick], &edits));
    }
}

#[test]
fn committed_deltas_take_the_fast_path() {
    let run = RunId::parse("run_1").unwrap();
    let p = Payload::TextDelta(TextDelta {
        turn: 2,
        operation_id: OperationId::parse("op_9").unwrap(),
        text: "a\"b\\c\n".into(),
        extra: Extra::new(),
    });
    let e = Event::assemble(run, 7, 8, EventKind::TextDelta, &p.to_canonical().unwrap());
    assert_eq!(taken(e.line()), e);
}
