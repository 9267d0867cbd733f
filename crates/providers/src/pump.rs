//! The pump: a 2xx response's body as SSE events, each given to the wire
//! format's [`Decoder`], their raw items out with the key scrubbed, and
//! exactly one terminal, after which nothing more is read.

use crate::http::failure::transport_problem;
use crate::key::{ApiKey, scrub_problem};
use crate::sse::{Event, EventError, Events};
use bytes::Bytes;
use futures_core::Stream;
use futures_util::StreamExt;
use keel_stream::{ProblemKind, RawItem, RawProblem, RawStream};
use std::collections::VecDeque;
use std::time::Duration;

/// A wire format's state machine: SSE events in, raw items out.
pub(crate) trait Decoder: Send + 'static {
    /// Handles one event, pushing what it yields to `out`. Returns
    /// [`Flow::Done`] once it pushed its terminal (completion or failure).
    fn event(&mut self, name: Option<&str>, data: &str, out: &mut VecDeque<RawItem>) -> Flow;

    /// The body ended normally: push the terminal (a completion if the
    /// stream was complete, else the `unavailable` failure).
    fn end(&mut self, out: &mut VecDeque<RawItem>);
}

/// Whether a decoder wants more events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    /// Keep going.
    More,
    /// A terminal was pushed; stop reading.
    Done,
}

/// How long the end of a body is awaited after the terminal event.
const TAIL_WAIT: Duration = Duration::from_millis(20);

struct Pump<S: Stream<Item = Result<Bytes, reqwest::Error>> + Unpin, D> {
    events: Option<Events<S>>,
    /// The events after the decoder's terminal: read for at most
    /// [`TAIL_WAIT`], so that a body whose end follows its terminator
    /// (as it does with every well-behaved server) is read to its end and
    /// its connection goes back to the pool; then dropped.
    tail: Option<Events<S>>,
    decoder: D,
    out: VecDeque<RawItem>,
    key: Option<ApiKey>,
}

/// The raw stream of a response whose status was 2xx: SSE events from
/// the body, each given to `decoder`; ends right after the terminal.
/// Dropping it drops the response body and with it the connection; the
/// connection is reused only when the body ended (within [`TAIL_WAIT`]
/// of the terminal event).
pub(crate) fn pump<D: Decoder>(
    response: reqwest::Response,
    max_chunk_bytes: usize,
    decoder: D,
    key: Option<ApiKey>,
) -> RawStream {
    let body = response.bytes_stream().boxed();
    let state = Pump {
        events: Some(Events::new(body, max_chunk_bytes)),
        tail: None,
        decoder,
        out: VecDeque::new(),
        key,
    };
    Box::pin(futures_util::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(item) = st.out.pop_front() {
                return Some((scrubbed(item, st.key.as_ref()), st));
            }
            let Some(events) = st.events.as_mut() else {
                if let Some(mut tail) = st.tail.take() {
                    let _ = tokio::time::timeout(TAIL_WAIT, tail.next()).await;
                }
                return None;
            };
            let next = events.next().await;
            match step(&mut st.decoder, next, &mut st.out) {
                Step::More => {}
                Step::Terminal => st.tail = st.events.take(),
                Step::Ended => st.events = None,
            }
        }
    }))
}

/// What [`step`] left the event stream in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Read the next event.
    More,
    /// The decoder pushed its terminal: read nothing more (a tail may
    /// still be drained).
    Terminal,
    /// The body ended or failed; its terminal is in `out`.
    Ended,
}

/// One result of the event stream, given to the decoder: an event is
/// decoded, an early end becomes its failure, the body's end lets the
/// decoder close the stream. The one place both the pump and
/// [`crate::fuzzing`] turn events into raw items.
pub(crate) fn step<D: Decoder>(
    decoder: &mut D,
    next: Option<Result<Event, EventError>>,
    out: &mut VecDeque<RawItem>,
) -> Step {
    match next {
        Some(Ok(event)) => match decoder.event(event.name.as_deref(), &event.data, out) {
            Flow::Done => Step::Terminal,
            Flow::More => Step::More,
        },
        Some(Err(error)) => {
            out.push_back(RawItem::Failure(match error {
                EventError::Oversized { max } => RawProblem::new(
                    ProblemKind::Protocol,
                    format!(
                        "oversized chunk: an SSE event is larger than {max} bytes (max_chunk_bytes)"
                    ),
                    false,
                ),
                EventError::Transport(e) => transport_problem(&e, "reading the event stream"),
                EventError::Framing => RawProblem::new(
                    ProblemKind::Protocol,
                    "the event stream is not valid UTF-8 SSE",
                    false,
                ),
            }));
            Step::Ended
        }
        None => {
            decoder.end(out);
            Step::Ended
        }
    }
}

/// `item` with the API key scrubbed from a failure's message (a server
/// may echo the request's credentials in an error).
pub(crate) fn scrubbed(item: RawItem, key: Option<&ApiKey>) -> RawItem {
    match item {
        RawItem::Failure(problem) => RawItem::Failure(scrub_problem(problem, key)),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::panic)]
    use super::*;

    struct Echo;
    impl Decoder for Echo {
        fn event(&mut self, _: Option<&str>, data: &str, out: &mut VecDeque<RawItem>) -> Flow {
            out.push_back(RawItem::text(data));
            if data == "stop" {
                out.push_back(RawItem::complete(keel_stream::FinishReason::Stop));
                return Flow::Done;
            }
            Flow::More
        }
        fn end(&mut self, out: &mut VecDeque<RawItem>) {
            out.push_back(RawItem::Failure(RawProblem::new(
                ProblemKind::Unavailable,
                "ended",
                true,
            )));
        }
    }

    fn event(data: &str) -> Option<Result<Event, EventError>> {
        Some(Ok(Event {
            name: None,
            data: data.to_owned(),
        }))
    }

    #[test]
    fn steps_end_at_the_terminal_the_error_or_the_end() {
        let mut out = VecDeque::new();
        assert_eq!(step(&mut Echo, event("a"), &mut out), Step::More);
        assert_eq!(step(&mut Echo, event("stop"), &mut out), Step::Terminal);
        let oversized = Some(Err(EventError::Oversized { max: 8 }));
        assert_eq!(step(&mut Echo, oversized, &mut out), Step::Ended);
        let Some(RawItem::Failure(p)) = out.back() else {
            panic!("{out:?}")
        };
        assert_eq!(p.kind, ProblemKind::Protocol);
        assert!(p.message.contains("max_chunk_bytes"), "{}", p.message);
        assert_eq!(step(&mut Echo, None, &mut out), Step::Ended);
        assert!(matches!(out.back(), Some(RawItem::Failure(p)) if p.message == "ended"));
    }

    #[test]
    fn only_failures_are_scrubbed_of_the_key() {
        let Ok(key) = ApiKey::new("k-secret-9") else {
            panic!()
        };
        let failure = RawItem::Failure(RawProblem::new(ProblemKind::Other, "x k-secret-9", false));
        let RawItem::Failure(p) = scrubbed(failure, Some(&key)) else {
            panic!()
        };
        assert_eq!(p.message, "x [redacted]");
        assert_eq!(scrubbed(RawItem::text("t"), Some(&key)), RawItem::text("t"));
    }
}
