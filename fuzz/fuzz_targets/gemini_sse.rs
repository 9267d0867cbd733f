//! Fuzzes the Gemini SSE path (framing, event bound, the
//! `streamGenerateContent` decoder with its call ids and thought
//! signatures, key scrub) on arbitrary response bodies, through
//! `keel_providers::fuzzing::decode`, the same steps a live 2xx stream
//! takes.
//!
//! Input: byte 0 picks whether an API key is configured (bit 0) and a
//! piece size 1..=128 (bits 1..); byte 1 picks the event bound (64..=4,128
//! bytes, or the 1 MiB default); the rest is the body.
//!
//! Properties:
//! - the raw stream ends with exactly one terminal (completion or
//!   failure), and nothing follows it;
//! - framing does not depend on how the body is split: the body in one
//!   piece and in pieces of the chosen size yield equal items;
//! - the key never appears in a failure message or completion metadata;
//! - every text and reasoning delta is non-empty and within
//!   `delta_bytes`;
//! - every call has a non-empty id (a part without one gets a made
//!   `call_op_fuzz_{n}`);
//! - a reasoning signature only ever follows a reasoning delta (the
//!   decoder yields a redacted part otherwise), so the validator never
//!   refuses the stream for `stream.signature_open_part`;
//! - the stream validator takes the items without panicking, and refuses
//!   everything after a terminal or a violation.
#![no_main]

use keel_message::Limits;
use keel_providers::ApiKey;
use keel_providers::fuzzing::{WireFormat, decode};
use keel_stream::{MetadataAllowlist, RawItem, StreamValidator, ValidatorConfig};
use libfuzzer_sys::fuzz_target;

/// The configured key, when byte 0 asks for one. The seeds spell it in
/// error chunks and metadata, so the fuzzer starts from echoes.
const KEY: &str = "AIzaKeelFuzz-0123456789abcdefghijklm";

fuzz_target!(|data: &[u8]| {
    let [flags, bound, body @ ..] = data else {
        return;
    };
    let key = (flags & 1 != 0).then(|| ApiKey::new(KEY).expect("a valid key"));
    let piece = 1 + usize::from(flags >> 1);
    let max_event_bytes = if *bound < 128 {
        64 + usize::from(*bound) * 32
    } else {
        keel_providers::DEFAULT_MAX_CHUNK_BYTES
    };
    let limits = Limits::default();
    let run = |pieces: &[&[u8]]| {
        decode(
            WireFormat::Gemini,
            pieces,
            max_event_bytes,
            limits.clone(),
            key.clone(),
        )
    };
    let whole = run(&[body]);
    let pieces: Vec<&[u8]> = body.chunks(piece).collect();
    assert_eq!(
        whole,
        run(&pieces),
        "items depend on how the body is split (pieces of {piece})"
    );

    let terminals = whole.iter().filter(|i| i.is_terminal()).count();
    assert_eq!(terminals, 1, "expected exactly one terminal: {whole:?}");
    assert!(
        whole.last().is_some_and(RawItem::is_terminal),
        "the terminal is not last: {whole:?}"
    );

    let mut after_reasoning = false;
    for item in &whole {
        match item {
            RawItem::TextDelta(text) | RawItem::ReasoningDelta(text) => {
                assert!(!text.is_empty(), "empty text or reasoning delta");
                assert!(
                    text.len() <= limits.delta_bytes.max(4),
                    "text or reasoning delta of {} bytes > delta_bytes",
                    text.len()
                );
            }
            RawItem::ReasoningSignature(_) => {
                assert!(after_reasoning, "a signature with no reasoning open: {whole:?}");
            }
            RawItem::ToolCall(call) => {
                assert!(!call.call_id.is_empty(), "an empty call id: {whole:?}");
            }
            RawItem::Failure(problem) if key.is_some() => {
                assert!(
                    !problem.message.contains(KEY),
                    "the key is in a failure message: {:?}",
                    problem.message
                );
            }
            RawItem::Completion(completion) if key.is_some() => {
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
        after_reasoning = matches!(item, RawItem::ReasoningDelta(_));
    }

    let mut validator = StreamValidator::new(
        ValidatorConfig::default(),
        limits,
        MetadataAllowlist::default(),
    );
    let mut ended = false;
    for item in whole {
        let result = validator.accept(item);
        if ended {
            assert!(
                result.is_err(),
                "the validator accepted an item after its end"
            );
        }
        if let Err(violation) = &result {
            assert!(
                !violation.to_string().contains("stream.signature_open_part"),
                "{violation}"
            );
        }
        ended |= result.is_err() || validator.is_terminated();
    }
    assert!(ended, "the validator did not end on the terminal");
});

