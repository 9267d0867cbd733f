//! The SSE decoding path without a network, for `fuzz/` and tests. Not
//! part of the API: hidden from the docs and free to change.
//!
//! [`decode`] runs a response body, delivered in the given pieces, through
//! exactly what a live stream goes through after a 2xx status: the
//! `Events` framing with its event bound, the wire format's decoder, and
//! the key scrub, via the same `step` and `scrubbed` the pump uses. It
//! is synchronous: the body is already in memory, so no poll ever waits.

use crate::anthropic::AnthropicDecoder;
use crate::gemini::{CallIds, GeminiDecoder};
use crate::key::ApiKey;
use crate::openai::OpenAiDecoder;
use crate::pump::{Decoder, Step, scrubbed, step};
use crate::responses::ResponsesDecoder;
use crate::sse::Events;
use bytes::Bytes;
use futures_core::Stream;
use keel_message::Limits;
use keel_stream::RawItem;
use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

/// Which decoder [`decode`] uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireFormat {
    /// OpenAI-compatible chat completions.
    OpenAi,
    /// Anthropic messages.
    Anthropic,
    /// OpenAI Responses API events.
    OpenAiResponses,
    /// Gemini `streamGenerateContent` chunks.
    Gemini,
}

/// What the adapter's raw stream would yield for a 2xx response whose body
/// arrives as `pieces`: every item up to and including the terminal.
pub fn decode(
    format: WireFormat,
    pieces: &[&[u8]],
    max_event_bytes: usize,
    limits: Limits,
    key: Option<ApiKey>,
) -> Vec<RawItem> {
    match format {
        WireFormat::OpenAi => {
            let decoder = OpenAiDecoder::new(limits, "op_fuzz", None, key.clone());
            run(decoder, pieces, max_event_bytes, key.as_ref())
        }
        WireFormat::Anthropic => {
            let decoder = AnthropicDecoder::new(limits, None, key.clone());
            run(decoder, pieces, max_event_bytes, key.as_ref())
        }
        WireFormat::OpenAiResponses => {
            let decoder = ResponsesDecoder::new(limits, "op_fuzz", None, key.clone());
            run(decoder, pieces, max_event_bytes, key.as_ref())
        }
        WireFormat::Gemini => {
            let ids = CallIds::new("op_fuzz", Default::default());
            let decoder = GeminiDecoder::new(limits, ids, None, key.clone());
            run(decoder, pieces, max_event_bytes, key.as_ref())
        }
    }
}

fn run<D: Decoder>(
    mut decoder: D,
    pieces: &[&[u8]],
    max_event_bytes: usize,
    key: Option<&ApiKey>,
) -> Vec<RawItem> {
    let body = futures_util::stream::iter(
        pieces
            .iter()
            .map(|p| Ok::<Bytes, reqwest::Error>(Bytes::copy_from_slice(p)))
            .collect::<Vec<_>>(),
    );
    let mut events = Events::new(body, max_event_bytes);
    let mut cx = Context::from_waker(Waker::noop());
    let mut out = VecDeque::new();
    loop {
        // An in-memory body is always ready; `Pending` would be a framing
        // bug, and is treated as the body's end.
        let next = match Pin::new(&mut events).poll_next(&mut cx) {
            Poll::Ready(next) => next,
            Poll::Pending => None,
        };
        if step(&mut decoder, next, &mut out) != Step::More {
            break;
        }
    }
    out.into_iter().map(|item| scrubbed(item, key)).collect()
}
