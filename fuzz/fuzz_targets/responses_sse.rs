//! Fuzzes the OpenAI Responses SSE path (framing, event bound, the
//! Responses decoder, key scrub) on arbitrary response bodies, through
//! `keel_providers::fuzzing::decode`, the same steps a live 2xx stream
//! takes.
//!
//! Input: byte 0 says whether an API key is configured (bit 1) and a
//! piece size 1..=64 (bits 2..); byte 1 picks the event bound
//! (64..=4,128 bytes, or the 1 MiB default); the rest is the body.
//!
//! Properties: those of `common/provider.rs` (one terminal, last; the
//! same items whole and in pieces; the key in no failure message or
//! metadata; deltas non-empty and within `delta_bytes`; the validator
//! ends on the terminal), and the reasoning items' sealed values:
//! - every signature and redacted value is `{id}:{lengths}:{encrypted}`
//!   with a token id and a non-empty encrypted value;
//! - a signature's lengths cut the reasoning text just before it (its
//!   deltas since the last non-reasoning item) into summary parts joined
//!   by a blank line, exactly: what the adapter will send back as the
//!   item's `summary` is what it streamed.
#![no_main]

mod common;

use common::provider::check_decoding;
use keel_providers::fuzzing::WireFormat;
use keel_stream::RawItem;
use libfuzzer_sys::fuzz_target;

/// The id, summary lengths and encrypted value of a sealed value.
fn unpack(value: &str) -> (&str, Vec<usize>, &str) {
    let (id, rest) = value.split_once(':').expect("an id");
    let (lengths, encrypted) = rest.split_once(':').expect("lengths");
    assert!(
        !id.is_empty()
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-')),
        "the id is not a token: {id:?}"
    );
    assert!(!encrypted.is_empty(), "no encrypted value");
    let lengths = if lengths.is_empty() {
        Vec::new()
    } else {
        lengths
            .split(',')
            .map(|n| n.parse().expect("a length"))
            .collect()
    };
    (id, lengths, encrypted)
}

fuzz_target!(|data: &[u8]| {
    let [flags, bound, body @ ..] = data else {
        return;
    };
    let items = check_decoding(WireFormat::OpenAiResponses, *flags, *bound, body);
    let mut reasoning = String::new();
    for item in &items {
        match item {
            RawItem::ReasoningDelta(text) => reasoning.push_str(text),
            RawItem::ReasoningSignature(value) => {
                let (_, lengths, _) = unpack(value);
                let joined: usize =
                    lengths.iter().sum::<usize>() + 2 * lengths.len().saturating_sub(1);
                assert_eq!(
                    joined,
                    reasoning.len(),
                    "lengths {lengths:?} do not cut {reasoning:?}"
                );
                let mut rest = reasoning.as_str();
                for (i, len) in lengths.iter().enumerate() {
                    if i > 0 {
                        rest = rest.strip_prefix("\n\n").expect("the separator");
                    }
                    assert!(rest.is_char_boundary(*len), "a cut inside a char");
                    rest = &rest[*len..];
                }
                reasoning.clear();
            }
            RawItem::RedactedReasoning(value) => {
                unpack(value);
                reasoning.clear();
            }
            _ => reasoning.clear(),
        }
    }
});
