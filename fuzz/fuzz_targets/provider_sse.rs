//! Fuzzes both Chat Completions and Anthropic SSE paths (framing, event
//! bound, decoder, key scrub) on arbitrary response bodies, through
//! `keel_providers::fuzzing::decode`, the same steps a live 2xx stream
//! takes.
//!
//! Input: byte 0 picks the wire format (bit 0), whether an API key is
//! configured (bit 1) and a piece size 1..=64 (bits 2..); byte 1 picks the
//! event bound (64..=4,128 bytes, or the 1 MiB default); the rest is the
//! body.
//!
//! Properties: those of `common/provider.rs` (one terminal, last; the
//! same items whole and in pieces; the key in no failure message or
//! metadata; deltas non-empty and within `delta_bytes`; the validator
//! ends on the terminal).
#![no_main]

mod common;

use common::provider::check_decoding;
use keel_providers::fuzzing::WireFormat;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let [flags, bound, body @ ..] = data else {
        return;
    };
    let format = if flags & 1 == 0 {
        WireFormat::OpenAi
    } else {
        WireFormat::Anthropic
    };
    check_decoding(format, *flags, *bound, body);
});
