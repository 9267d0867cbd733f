//! Fuzzes `CanonicalJson::parse` on arbitrary text.
//!
//! Properties, on success (`Ok(c)`):
//! - idempotent: `CanonicalJson::parse(c.as_str())` is `Ok` and byte-identical;
//! - stable under a value round trip: `CanonicalJson::from_value(&c.to_value())`
//!   gives the same bytes;
//! - plain JSON: `serde_json` parses `c.as_str()` and the value equals
//!   `c.to_value()`;
//! - bounded: `c.len() <= Limits::default().json_bytes`, and `len()` agrees
//!   with `as_str().len()`.
//!
//! On failure (`Err(e)`), no panic and no echo of input:
//! - the error message is byte-identical for the input and for the input
//!   with the letters and digits of every string value rotated (see
//!   `common::rotate_string_values`); object keys may be named;
//! - in particular, when the input is one JSON string literal whose content
//!   is 12+ bytes, the message contains neither the literal nor its content
//!   (unless the rotated input's message contains it too, i.e. it is the
//!   message's own template text: libFuzzer does learn to spell those).
#![no_main]

use keel_message::{CanonicalJson, Limits};
use libfuzzer_sys::fuzz_target;

mod common;

/// Minimum length of a string literal's content for the echo check; short
/// contents could appear in an error template by coincidence.
const ECHO_MIN: usize = 12;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    match CanonicalJson::parse(s) {
        Ok(c) => check_canonical(s, &c),
        Err(e) => check_no_echo(s, &e.to_string()),
    }
});

fn check_canonical(input: &str, c: &CanonicalJson) {
    let text = c.as_str();
    assert_eq!(c.len(), text.len(), "len() disagrees with as_str()");
    let max = Limits::default().json_bytes;
    assert!(
        c.len() <= max,
        "canonical form is {} bytes > json_bytes {max}",
        c.len()
    );

    let again = CanonicalJson::parse(text).unwrap_or_else(|e| {
        panic!("canonical form does not re-parse: {e}\ninput: {input:?}\ncanonical: {text:?}")
    });
    assert_eq!(
        again.as_str(),
        text,
        "canonicalization is not idempotent\ninput: {input:?}"
    );

    let value: serde_json::Value = serde_json::from_str(text).unwrap_or_else(|e| {
        panic!("serde_json rejects the canonical form: {e}\ninput: {input:?}\ncanonical: {text:?}")
    });
    assert_eq!(
        value,
        c.to_value(),
        "to_value() differs from serde_json's reading\ninput: {input:?}\ncanonical: {text:?}"
    );

    let from_value = CanonicalJson::from_value(&value).unwrap_or_else(|e| {
        panic!("from_value rejects the canonical value: {e}\ninput: {input:?}\ncanonical: {text:?}")
    });
    assert_eq!(
        from_value.as_str(),
        text,
        "from_value(to_value()) changes the bytes\ninput: {input:?}"
    );
}

fn check_no_echo(input: &str, display: &str) {
    let rotated = common::rotate_string_values(input, None);
    if rotated == input {
        return;
    }
    let rotated_display = match CanonicalJson::parse(&rotated) {
        Ok(c) => panic!(
            "rotating string values made invalid input valid\ninput: {input:?}\nrotated: {rotated:?}\ncanonical: {:?}",
            c.as_str()
        ),
        Err(e) => e.to_string(),
    };
    assert_eq!(
        display, rotated_display,
        "error message depends on string content (echo)\ninput: {input:?}\nrotated: {rotated:?}"
    );

    let trimmed = input.trim_matches(|c| matches!(c, ' ' | '\t' | '\n' | '\r'));
    let Some(content) = string_literal_content(trimmed) else {
        return;
    };
    if content.len() < ECHO_MIN {
        return;
    }
    for needle in [trimmed, content] {
        assert!(
            !display.contains(needle) || rotated_display.contains(needle),
            "error echoes the input string\ninput: {input:?}\nerror: {display}"
        );
    }
}

/// If `text` is one JSON string literal (possibly invalid inside, or
/// unterminated), the bytes between its quotes; `None` when anything
/// follows the closing quote.
fn string_literal_content(text: &str) -> Option<&str> {
    let rest = text.strip_prefix('"')?;
    let mut escaped = false;
    for (i, b) in rest.bytes().enumerate() {
        if escaped {
            escaped = false;
        } else if b == b'\\' {
            escaped = true;
        } else if b == b'"' {
            return (i + 1 == rest.len()).then(|| &rest[..i]);
        }
    }
    Some(rest)
}
