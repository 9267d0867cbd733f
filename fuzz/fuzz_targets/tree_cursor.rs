//! Fuzzes `keel_engine::TreeCursor::parse`, what `keel serve` reads from
//! `Last-Event-ID` and `after` on `GET /v1/runs/{id}/events?children=true`.
//!
//! The first byte picks the input: raw text, or a cursor built from parts
//! (a root seq, then entries of ids from a small vocabulary with seqs,
//! written with or without a defect: a leading zero, a `+`, a missing
//! `:`, an empty id, a space in an id).
//!
//! Properties:
//! - deterministic, never panics;
//! - an accepted cursor displays as the input byte for byte (the form is
//!   canonical), parses again to an equal cursor, lists each run once, at
//!   most `MAX_CURSOR_ENTRIES` of them, within `MAX_CURSOR_BYTES`;
//! - built from parts, it is accepted exactly when the model says so
//!   (no defect, ids distinct, at most `MAX_CURSOR_ENTRIES`), with the
//!   parts' root, ids and seqs in order;
//! - a refusal names a `tree_cursor.*` rule, and neither it nor its
//!   message changes when the input's letters are rotated: it names parts,
//!   positions and sizes, never the text.
#![no_main]

use keel_engine::{MAX_CURSOR_BYTES, MAX_CURSOR_ENTRIES, TreeCursor};
use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use std::collections::HashSet;

const IDS: &[&str] = &["run_a", "run_b", "urn:run:1", "x", "a.b-c_d", "run_root"];

fn rotate_letters(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            'a'..='y' | 'A'..='Y' => char::from(c as u8 + 1),
            'z' => 'a',
            'Z' => 'A',
            other => other,
        })
        .collect()
}

fn check_text(text: &str) {
    let parsed = TreeCursor::parse(text);
    assert_eq!(parsed, TreeCursor::parse(text), "deterministic");
    match parsed {
        Ok(cursor) => {
            assert_eq!(cursor.to_string(), text, "canonical");
            assert_eq!(TreeCursor::parse(&cursor.to_string()).unwrap(), cursor);
            assert!(cursor.entries().len() <= MAX_CURSOR_ENTRIES);
            assert!(text.len() <= MAX_CURSOR_BYTES);
            let ids: HashSet<_> = cursor.entries().iter().map(|e| e.run_id()).collect();
            assert_eq!(ids.len(), cursor.entries().len(), "each run once");
        }
        Err(e) => {
            assert!(e.rule().starts_with("tree_cursor."), "{e}");
            assert!(e.to_string().ends_with(&format!("(rule {})", e.rule())), "{e}");
            let twin = TreeCursor::parse(&rotate_letters(text))
                .expect_err("a rotated refusal is refused");
            assert_eq!(twin, e, "the refusal depends on the text's letters (echo)");
            assert_eq!(twin.to_string(), e.to_string());
        }
    }
}

/// A cursor built from parts; `None` when the model refuses it.
fn built(u: &mut Unstructured<'_>) -> Result<(String, Option<Vec<(String, u64)>>, u64)> {
    let root: u64 = u.arbitrary()?;
    let count = u.int_in_range(0..=MAX_CURSOR_ENTRIES + 2)?;
    let mut text = root.to_string();
    let mut entries = Vec::new();
    let mut accepted = true;
    let mut seen = HashSet::new();
    for i in 0..count {
        // Beyond the vocabulary, ids made distinct by their index.
        let id = match u.int_in_range(0..=IDS.len())? {
            k if k < IDS.len() => IDS[k].to_owned(),
            _ => format!("run_{i}"),
        };
        let seq: u64 = u.arbitrary()?;
        let defect = u.ratio(1, 40)?;
        let entry = if defect {
            accepted = false;
            match u.int_in_range(0..=4)? {
                0 => format!("{id}:0{seq}"),
                1 => format!("{id}:+{seq}"),
                2 => format!("{id}:{seq}:"),
                3 => format!(":{seq}"),
                _ => format!("{id} :{seq}"),
            }
        } else {
            format!("{id}:{seq}")
        };
        accepted &= seen.insert(id.clone());
        text.push(',');
        text.push_str(&entry);
        entries.push((id, seq));
    }
    accepted &= entries.len() <= MAX_CURSOR_ENTRIES;
    Ok((text, accepted.then_some(entries), root))
}

fn run(u: &mut Unstructured<'_>) -> Result<()> {
    if u.arbitrary::<bool>()? {
        let text: String = u.arbitrary()?;
        check_text(&text);
        return Ok(());
    }
    let (text, model, root) = built(u)?;
    check_text(&text);
    match (TreeCursor::parse(&text), model) {
        (Ok(cursor), Some(entries)) => {
            assert_eq!(cursor.root_seq(), root);
            let got: Vec<(String, u64)> = cursor
                .entries()
                .iter()
                .map(|e| (e.run_id().to_string(), e.seq()))
                .collect();
            assert_eq!(got, entries);
        }
        (Err(_), None) => {}
        (got, want) => panic!("{text:?}: got {got:?}, the model says {want:?}"),
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});
