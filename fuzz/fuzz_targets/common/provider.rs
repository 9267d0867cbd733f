//! The properties every provider SSE decoder is fuzzed for, shared by
//! `provider_sse` and `responses_sse`: the body through
//! `keel_providers::fuzzing::decode`, the same steps a live 2xx stream
//! takes, whole and in pieces.
//!
//! Input header: byte 0 says whether an API key is configured (bit 1)
//! and a piece size 1..=64 (bits 2..); byte 1 picks the event bound
//! (64..=4,128 bytes, or the 1 MiB default); the rest is the body. (Bit 0
//! is left to the target, e.g. to pick a wire format.)
//!
//! Properties:
//! - the raw stream ends with exactly one terminal (completion or
//!   failure), and nothing follows it;
//! - framing does not depend on how the body is split: the body in one
//!   piece and in pieces of the chosen size yield equal items;
//! - the key never appears in a failure message or completion metadata;
//! - every text and reasoning delta is non-empty and within
//!   `delta_bytes`;
//! - the stream validator takes the items without panicking, and refuses
//!   everything after a terminal or a violation.

use keel_message::Limits;
use keel_providers::ApiKey;
use keel_providers::fuzzing::{WireFormat, decode};
use keel_stream::{MetadataAllowlist, RawItem, StreamValidator, ValidatorConfig};

/// The configured key, when byte 0 asks for one. The seeds spell it in
/// error bodies, so the fuzzer starts from echoes.
pub const KEY: &str = "sk-keelfuzz-0123456789abcdefghij";

/// Decodes `body` as `format` under the header's key, piece size and
/// event bound, checks the properties above, and returns the items.
pub fn check_decoding(format: WireFormat, flags: u8, bound: u8, body: &[u8]) -> Vec<RawItem> {
    let key = (flags & 2 != 0).then(|| ApiKey::new(KEY).expect("a valid key"));
    let piece = 1 + usize::from(flags >> 2);
    let max_event_bytes = if bound < 128 {
        64 + usize::from(bound) * 32
    } else {
        keel_providers::DEFAULT_MAX_CHUNK_BYTES
    };
    let limits = Limits::default();
    let whole = decode(
        format,
        &[body],
        max_event_bytes,
        limits.clone(),
        key.clone(),
    );
    let pieces: Vec<&[u8]> = body.chunks(piece).collect();
    let split = decode(
        format,
        &pieces,
        max_event_bytes,
        limits.clone(),
        key.clone(),
    );
    assert_eq!(
        whole, split,
        "items depend on how the body is split (pieces of {piece})"
    );
    check_items(&whole, key.is_some(), &limits);
    validate(&whole, limits);
    whole
}

/// One terminal, last; deltas non-empty and within `delta_bytes`; the key
/// in no failure message or metadata (when one is configured).
fn check_items(whole: &[RawItem], keyed: bool, limits: &Limits) {
    let terminals = whole.iter().filter(|i| i.is_terminal()).count();
    assert_eq!(terminals, 1, "expected exactly one terminal: {whole:?}");
    assert!(
        whole.last().is_some_and(RawItem::is_terminal),
        "the terminal is not last: {whole:?}"
    );
    for item in whole {
        match item {
            RawItem::TextDelta(text) | RawItem::ReasoningDelta(text) => {
                assert!(!text.is_empty(), "empty text or reasoning delta");
                assert!(
                    text.len() <= limits.delta_bytes.max(4),
                    "text or reasoning delta of {} bytes > delta_bytes",
                    text.len()
                );
            }
            RawItem::Failure(problem) if keyed => {
                assert!(
                    !problem.message.contains(KEY),
                    "the key is in a failure message: {:?}",
                    problem.message
                );
            }
            RawItem::Completion(completion) if keyed => {
                let metadata = completion
                    .metadata
                    .as_ref()
                    .map(|m| m.to_string())
                    .unwrap_or_default();
                assert!(
                    !metadata.contains(KEY),
                    "the key is in metadata: {metadata}"
                );
            }
            _ => {}
        }
    }
}

/// The validator takes the items and ends on the terminal; it refuses
/// everything after its end.
fn validate(whole: &[RawItem], limits: Limits) {
    let mut validator = StreamValidator::new(
        ValidatorConfig::default(),
        limits,
        MetadataAllowlist::default(),
    );
    let mut ended = false;
    for item in whole {
        let result = validator.accept(item.clone());
        if ended {
            assert!(
                result.is_err(),
                "the validator accepted an item after its end"
            );
        }
        ended |= result.is_err() || validator.is_terminated();
    }
    assert!(ended, "the validator did not end on the terminal");
}
