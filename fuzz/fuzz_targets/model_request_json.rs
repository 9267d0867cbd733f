//! Fuzzes `ModelRequest::from_json_with` under the default limits.
//!
//! Properties, on success (`Ok(m)`):
//! - `serde_json::to_string(&m)` succeeds and decodes again (both through
//!   `ModelRequest::from_json_with` and through serde's `Deserialize`) to a
//!   request equal to `m`;
//! - encoding the decoded request gives byte-identical JSON (the encoding
//!   is a fixed point after one round trip).
//!
//! On failure: no panic, and no echo of content: the error message is
//! byte-identical for the input and for the input with the letters and
//! digits of every `text`, `content` and `description` value, and of every
//! string value inside `arguments`, rotated (see
//! `common::rotate_string_values`). Identifiers and names may be echoed;
//! content may not.
#![no_main]

use keel_message::{Limits, ModelRequest};
use libfuzzer_sys::fuzz_target;

mod common;

/// Members whose values are content that errors must never echo.
const CONTENT: &[&str] = &["text", "content", "description", "arguments"];

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let limits = Limits::default();
    let m = match ModelRequest::from_json_with(s, &limits) {
        Ok(m) => m,
        Err(e) => return check_no_echo(s, &e.to_string(), &limits),
    };
    let json = serde_json::to_string(&m)
        .unwrap_or_else(|e| panic!("valid request does not encode: {e}\ninput: {s:?}"));
    let back = ModelRequest::from_json_with(&json, &limits).unwrap_or_else(|e| {
        panic!("encoded request does not decode: {e}\ninput: {s:?}\nencoded: {json}")
    });
    assert_eq!(
        back, m,
        "round trip changed the request\ninput: {s:?}\nencoded: {json}"
    );
    let via_serde: ModelRequest = serde_json::from_str(&json).unwrap_or_else(|e| {
        panic!("serde Deserialize rejects the encoding: {e}\ninput: {s:?}\nencoded: {json}")
    });
    assert_eq!(
        via_serde, m,
        "serde Deserialize disagrees\ninput: {s:?}\nencoded: {json}"
    );
    let again = serde_json::to_string(&back)
        .unwrap_or_else(|e| panic!("decoded request does not encode: {e}\ninput: {s:?}"));
    assert_eq!(
        again, json,
        "re-encoding is not byte-identical\ninput: {s:?}"
    );
});

fn check_no_echo(input: &str, display: &str, limits: &Limits) {
    let rotated = common::rotate_string_values(input, Some(CONTENT));
    if rotated == input {
        return;
    }
    match ModelRequest::from_json_with(&rotated, limits) {
        Ok(_) => panic!(
            "rotating content made an invalid input valid\ninput: {input:?}\nrotated: {rotated:?}\nerror: {display}"
        ),
        Err(e) => assert_eq!(
            display,
            e.to_string(),
            "error message depends on content (echo)\ninput: {input:?}\nrotated: {rotated:?}"
        ),
    }
}
