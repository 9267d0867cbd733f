//! Server-Sent Events framing over a response body, with a bound on the
//! bytes of one event.
//!
//! Framing (lines, `data:` with or without one leading space, comments,
//! CR/LF/CRLF, UTF-8 split across reads) is the `sse-stream` crate's. It
//! buffers an event until its blank line and has no size bound of its own,
//! so the body goes through [`Bounded`] first: a byte counter that knows
//! only where blank lines are, and stops the stream once one event block
//! (everything since the last blank line, comments included) passes
//! `max_event_bytes`. It hands on the bytes before the crossing point, so
//! every event that completed before it is still parsed and delivered;
//! then it reports [`BodyError::Oversized`]. What the parser holds is thus
//! never more than one bound's worth.

use bytes::Bytes;
use futures_core::Stream;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Why the body stopped before its end.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BodyError {
    /// One event block passed the bound.
    #[error("an event is larger than {max} bytes")]
    Oversized {
        /// The bound.
        max: usize,
    },
    /// Reading the body failed (connection reset, timeout, bad framing).
    #[error("reading the response body failed")]
    Transport(#[source] reqwest::Error),
}

/// Counts the bytes of the current event block.
#[derive(Debug, Clone)]
pub(crate) struct BlockCounter {
    max: usize,
    /// Bytes since the last blank line.
    in_block: usize,
    /// The previous byte ended a line (or nothing was read yet).
    at_line_start: bool,
    /// The previous byte was CR (a following LF belongs to it).
    after_cr: bool,
}

impl BlockCounter {
    pub(crate) fn new(max: usize) -> Self {
        BlockCounter {
            max,
            in_block: 0,
            at_line_start: true,
            after_cr: false,
        }
    }

    /// Scans `bytes`; returns the offset of the first byte that makes the
    /// current block pass the bound, if any.
    pub(crate) fn scan(&mut self, bytes: &[u8]) -> Option<usize> {
        for (i, &b) in bytes.iter().enumerate() {
            if self.after_cr && b == b'\n' {
                // The LF of a CRLF: the line already ended at the CR.
                self.after_cr = false;
                continue;
            }
            self.after_cr = b == b'\r';
            if b == b'\n' || b == b'\r' {
                if self.at_line_start {
                    // A blank line: the block is over.
                    self.in_block = 0;
                    continue;
                }
                self.at_line_start = true;
            } else {
                self.at_line_start = false;
            }
            self.in_block += 1;
            if self.in_block > self.max {
                return Some(i);
            }
        }
        None
    }
}

/// The response body with the event bound applied; see the module docs.
pub(crate) struct Bounded<S> {
    inner: Option<S>,
    counter: BlockCounter,
    /// The bound was crossed: report it on the next poll.
    oversized: bool,
}

impl<S> Bounded<S> {
    pub(crate) fn new(inner: S, max_event_bytes: usize) -> Self {
        Bounded {
            inner: Some(inner),
            counter: BlockCounter::new(max_event_bytes),
            oversized: false,
        }
    }
}

impl<S> Stream for Bounded<S>
where
    S: Stream<Item = Result<Bytes, reqwest::Error>> + Unpin,
{
    type Item = Result<Bytes, BodyError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.oversized {
            this.oversized = false;
            this.inner = None;
            return Poll::Ready(Some(Err(BodyError::Oversized {
                max: this.counter.max,
            })));
        }
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(None);
        };
        match Pin::new(inner).poll_next(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(None) => {
                this.inner = None;
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(e))) => {
                this.inner = None;
                Poll::Ready(Some(Err(BodyError::Transport(e))))
            }
            Poll::Ready(Some(Ok(mut bytes))) => match this.counter.scan(&bytes) {
                None => Poll::Ready(Some(Ok(bytes))),
                Some(at) => {
                    // Hand on what came before the crossing; the error follows.
                    this.inner = None;
                    if at == 0 {
                        return Poll::Ready(Some(Err(BodyError::Oversized {
                            max: this.counter.max,
                        })));
                    }
                    this.oversized = true;
                    bytes.truncate(at);
                    Poll::Ready(Some(Ok(bytes)))
                }
            },
        }
    }
}

/// One SSE event with data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Event {
    /// The `event:` field, if any.
    pub(crate) name: Option<String>,
    /// The data lines joined with LF.
    pub(crate) data: String,
}

/// How reading events ended early.
#[derive(Debug)]
pub(crate) enum EventError {
    /// An event passed the bound.
    Oversized { max: usize },
    /// Transport failure while reading the body.
    Transport(reqwest::Error),
    /// The framing was broken (invalid UTF-8 in a field).
    Framing,
}

/// The SSE events of a body: `Ok(event)` per event with data (blocks with
/// no data field, such as a lone `id:` or `retry:`, are skipped), then
/// `None` at the body's end, or one `Err` and then `None`.
pub(crate) struct Events<S: Stream<Item = Result<Bytes, reqwest::Error>> + Unpin> {
    inner: sse_stream::SseByteStream<Bounded<S>>,
}

impl<S> Events<S>
where
    S: Stream<Item = Result<Bytes, reqwest::Error>> + Unpin,
{
    pub(crate) fn new(body: S, max_event_bytes: usize) -> Self {
        Events {
            inner: sse_stream::SseByteStream::new(Bounded::new(body, max_event_bytes)),
        }
    }
}

impl<S> Stream for Events<S>
where
    S: Stream<Item = Result<Bytes, reqwest::Error>> + Unpin,
{
    type Item = Result<Event, EventError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            let next = match Pin::new(&mut this.inner).poll_next(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(next) => next,
            };
            return Poll::Ready(match next {
                None => None,
                Some(Ok(sse)) => match sse.data {
                    None => continue,
                    Some(data) => Some(Ok(Event {
                        name: sse.event,
                        data,
                    })),
                },
                Some(Err(sse_stream::Error::Body(source))) => {
                    Some(Err(match source.downcast::<BodyError>() {
                        Ok(body) => match *body {
                            BodyError::Oversized { max } => EventError::Oversized { max },
                            BodyError::Transport(e) => EventError::Transport(e),
                        },
                        Err(_) => EventError::Framing,
                    }))
                }
                Some(Err(_)) => Some(Err(EventError::Framing)),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn crossing(max: usize, input: &[u8]) -> Option<usize> {
        BlockCounter::new(max).scan(input)
    }

    #[test]
    fn the_counter_resets_at_blank_lines() {
        assert_eq!(crossing(4, b"ab\n\ncd\n\n"), None);
        assert_eq!(crossing(4, b"ab\r\n\r\ncd\r\n\r\n"), None);
        assert_eq!(crossing(4, b"ab\r\rcd\r\r"), None);
        // "abcde": the fifth byte crosses a 4-byte bound.
        assert_eq!(crossing(4, b"abcde\n\n"), Some(4));
        // Two lines of one block count together (line ends count too).
        assert_eq!(crossing(4, b"ab\ncd\n\n"), Some(4));
        // Blank lines at the start do not count.
        assert_eq!(crossing(3, b"\n\n\n\nab\n\n"), None);
        assert_eq!(crossing(2, b"\n\n\n\nab\n\n"), Some(6));
    }

    #[test]
    fn the_counter_works_across_reads() {
        let input = b"data: 12345\r\n\r\ndata: 1234567\r\n\r\n";
        for split in [1, 2, 3, 7] {
            let mut counter = BlockCounter::new(13);
            let mut crossed = None;
            for (n, piece) in input.chunks(split).enumerate() {
                if let Some(at) = counter.scan(piece) {
                    crossed = Some(n * split + at);
                    break;
                }
            }
            // "data: 1234567\r" is 14 bytes: its CR crosses the bound.
            assert_eq!(crossed, Some(15 + 13), "split {split}");
        }
    }
}
