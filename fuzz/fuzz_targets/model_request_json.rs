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

use keel_message::ModelRequest;
use libfuzzer_sys::fuzz_target;

mod common;

fuzz_target!(|data: &[u8]| {
    common::check_value(data, "request", ModelRequest::from_json_with);
});
