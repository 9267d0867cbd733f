//! The cursor's text form: round trips, bounds and every refusal, through
//! one `check` helper.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

use super::*;

/// Parses `text`: with `refusal` `None` it must be accepted and display
/// as the same bytes (the form is canonical); else refused with that rule
/// and message.
fn check(text: &str, refusal: Option<(&str, &str)>) {
    match (TreeCursor::parse(text), refusal) {
        (Ok(cursor), None) => {
            assert_eq!(cursor.to_string(), text, "round trip of {text:?}");
            assert_eq!(text.parse::<TreeCursor>().unwrap(), cursor);
        }
        (Err(e), Some((rule, message))) => {
            assert_eq!(e.rule(), rule, "{text:?}: {e}");
            assert_eq!(e.to_string(), message, "{text:?}");
        }
        (Ok(cursor), Some((rule, _))) => {
            panic!("{text:?} was accepted as {cursor:?}, wanted {rule}")
        }
        (Err(e), None) => panic!("{text:?} was refused: {e}"),
    }
}

fn entries(n: usize, id_len: usize) -> String {
    let mut text = String::from("7");
    for i in 0..n {
        let id = format!("{i:0>width$}", width = id_len);
        text.push_str(&format!(",{id}:{}", u64::MAX));
    }
    text
}

#[test]
fn accepted_cursors_round_trip() {
    for text in [
        "0",
        "42",
        "18446744073709551615",
        "3,run_a:0",
        "3,run_a:0,run_b:17",
        // A run id may hold ':'; the entry splits at its last.
        "3,urn:run:1:5",
        "0,a.b-c_d:1",
    ] {
        check(text, None);
    }
    // The largest cursor: every entry, the longest ids and seqs.
    let largest = entries(MAX_CURSOR_ENTRIES, ID_MAX_BYTES);
    let largest = largest.replacen('7', "18446744073709551615", 1);
    assert_eq!(largest.len(), MAX_CURSOR_BYTES);
    check(&largest, None);
}

#[test]
fn malformed_cursors_are_refused_naming_the_part_and_rule() {
    let seq = "the seq is not a sequence number (decimal digits without a leading zero, at most 18446744073709551615) (rule tree_cursor.seq)";
    let cases: Vec<(String, &str, String)> = vec![
        (String::new(), "tree_cursor.seq", format!("the root seq: {seq}")),
        ("-1".into(), "tree_cursor.seq", format!("the root seq: {seq}")),
        ("+5".into(), "tree_cursor.seq", format!("the root seq: {seq}")),
        ("05".into(), "tree_cursor.seq", format!("the root seq: {seq}")),
        (" 5".into(), "tree_cursor.seq", format!("the root seq: {seq}")),
        ("18446744073709551616".into(), "tree_cursor.seq", format!("the root seq: {seq}")),
        ("184467440737095516150".into(), "tree_cursor.seq", format!("the root seq: {seq}")),
        ("5,run_a:01".into(), "tree_cursor.seq", format!("entry 1: {seq}")),
        ("5,run_a:".into(), "tree_cursor.seq", format!("entry 1: {seq}")),
        ("5,run_a:1,run_b:x".into(), "tree_cursor.seq", format!("entry 2: {seq}")),
        ("5,run_a".into(), "tree_cursor.entry", "entry 1 is not <run_id>:<seq> (rule tree_cursor.entry)".into()),
        ("5,".into(), "tree_cursor.entry", "entry 1 is not <run_id>:<seq> (rule tree_cursor.entry)".into()),
        ("5,run_a:1,".into(), "tree_cursor.entry", "entry 2 is not <run_id>:<seq> (rule tree_cursor.entry)".into()),
        (
            "5,:3".into(),
            "tree_cursor.run_id",
            "entry 1: run id is empty (rule ids.length: 1..=128 bytes) (rule tree_cursor.run_id)".into(),
        ),
        (
            "5,run a:3".into(),
            "tree_cursor.run_id",
            "entry 1: run id has a disallowed character at byte 3 (rule ids.charset: ASCII letters, digits, '_', '-', '.', ':') (rule tree_cursor.run_id)".into(),
        ),
        (
            format!("5,{}:3", "r".repeat(129)),
            "tree_cursor.run_id",
            "entry 1: run id is 129 bytes (rule ids.length: 1..=128 bytes) (rule tree_cursor.run_id)".into(),
        ),
        (
            "5,run_a:1,run_b:2,run_a:3".into(),
            "tree_cursor.duplicate",
            "entry 3 names the run of entry 1 again (rule tree_cursor.duplicate)".into(),
        ),
        (
            entries(MAX_CURSOR_ENTRIES + 1, 1),
            "tree_cursor.max_entries",
            "the cursor has 64 run entries, over 63 (rule tree_cursor.max_entries)".into(),
        ),
        (
            format!("{}0", entries(MAX_CURSOR_ENTRIES, ID_MAX_BYTES).replacen('7', "18446744073709551615", 1)),
            "tree_cursor.max_bytes",
            "the cursor is 9471 bytes, over 9470 (rule tree_cursor.max_bytes)".into(),
        ),
    ];
    for (text, rule, message) in cases {
        check(&text, Some((rule, &message)));
    }
}

#[test]
fn a_refusal_never_holds_the_run_ids_it_read() {
    for text in [
        "5,secret_run:1,secret_run:2",
        "5,secret run:1",
        "5,secret_run:x",
    ] {
        let e = TreeCursor::parse(text).unwrap_err();
        assert!(!e.to_string().contains("secret"), "{e}");
    }
}

#[test]
fn entries_are_kept_in_order_and_moved_in_place() {
    let (a, b) = (
        RunId::parse("run_a").unwrap(),
        RunId::parse("run_b").unwrap(),
    );
    let mut cursor = TreeCursor::new(3);
    cursor.discover(a.clone()).unwrap();
    cursor.discover(b.clone()).unwrap();
    assert_eq!(
        cursor.discover(a.clone()).unwrap_err().rule(),
        "tree_cursor.duplicate"
    );
    assert!(cursor.advance(&a, 9));
    assert!(!cursor.advance(&RunId::parse("run_c").unwrap(), 1));
    cursor.set_root(4);
    assert_eq!(cursor.to_string(), "4,run_a:9,run_b:0");
    assert_eq!(cursor.seq_of(&a), Some(9));
    assert_eq!(cursor.root_seq(), 4);
    cursor.remove(&a);
    assert_eq!(cursor.to_string(), "4,run_b:0");
    assert_eq!(cursor.seq_of(&a), None);
    assert_eq!(cursor.entries()[0].run_id(), &b);
    assert_eq!(cursor.entries()[0].seq(), 0);
}

#[test]
fn a_full_cursor_refuses_another_run() {
    let mut cursor = TreeCursor::new(0);
    for i in 0..MAX_CURSOR_ENTRIES {
        cursor = cursor
            .with_entry(RunId::parse(&format!("run_{i}")).unwrap(), 1)
            .unwrap();
    }
    let e = cursor
        .clone()
        .with_entry(RunId::parse("run_x").unwrap(), 0)
        .unwrap_err();
    assert_eq!(e, TreeCursorError::TooManyEntries { count: 64 });
    // A listed run is a duplicate before the list is full.
    let e = cursor
        .with_entry(RunId::parse("run_0").unwrap(), 0)
        .unwrap_err();
    assert_eq!(e.rule(), "tree_cursor.duplicate");
}
