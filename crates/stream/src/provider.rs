//! The provider trait and the validating stream adapter.

use crate::failure::RetryPosition;
use crate::item::StreamItem;
use crate::raw::{RawItem, RawProblem};
use crate::validator::StreamValidator;
use futures_core::{FusedStream, Stream};
use keel_message::{ModelRequest, ProviderTag};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// A provider's raw item stream.
pub type RawStream = Pin<Box<dyn Stream<Item = RawItem> + Send + 'static>>;

/// What [`ModelProvider::start`] returns: the raw stream once the provider
/// has accepted the request, or the problem that kept it from starting.
pub type StartFuture =
    Pin<Box<dyn Future<Output = Result<RawStream, RawProblem>> + Send + 'static>>;

/// A model provider: turns a [`ModelRequest`] into a raw item stream.
///
/// The trait is dyn-compatible (`Arc<dyn ModelProvider>`) and needs no
/// async-trait machinery: `start` returns a boxed future.
///
/// **Cancellation.** Dropping the [`StartFuture`] or the [`RawStream`] stops
/// the provider: implementations must hold every resource (connection,
/// task, timer) inside the future or stream, or tie it to them, so that
/// dropping is a complete and safe cancellation. Nothing needs to be
/// awaited to cancel.
///
/// **Retry position.** A start failure (`Err` from the future) is always
/// [`RetryPosition::Pristine`] (see
/// [`ModelFailure::at_start`](crate::ModelFailure::at_start)). Mid-stream,
/// the host's [`StreamValidator`] computes the position; neither
/// [`RawItem`] nor [`RawProblem`] has a field that could claim one.
///
/// Raw items are unvalidated: always read a provider's stream through
/// [`validate`] (or a [`StreamValidator`]).
pub trait ModelProvider: Send + Sync + 'static {
    /// Starts one model call.
    fn start(&self, request: ModelRequest) -> StartFuture;

    /// Which provider the reasoning parts of this provider's streams come
    /// from: the host records it with each part, and an adapter sends a
    /// part back only to a provider of the same tag (a signature is only
    /// valid where it was made). Cheap: called once per model call.
    /// Default [`ProviderTag::custom`].
    fn provider_tag(&self) -> ProviderTag {
        ProviderTag::custom()
    }
}

/// Wraps a raw stream in `validator`. See [`ValidatedStream`].
pub fn validate<S>(stream: S, validator: StreamValidator) -> ValidatedStream<S>
where
    S: Stream<Item = RawItem> + Unpin,
{
    ValidatedStream::new(stream, validator)
}

/// A [`Stream`] of validated [`StreamItem`]s over a raw stream.
///
/// It yields every valid item, and ends with exactly one terminal:
///
/// - the provider's completion, yielded only once the raw stream has
///   ended after it (an item after a completion turns the call into the
///   `AfterTerminal` protocol failure instead), or the provider's failure
///   (with the host-computed position);
/// - or, at the first [`StreamViolation`](crate::StreamViolation), a
///   [`StreamItem::Failure`] of kind `protocol`, not retryable, at the
///   position before the violating item;
/// - or, when the raw stream ends with no terminal, the `NoTerminal`
///   protocol failure. (An adapter for a wire protocol should itself report
///   a stream cut before its terminator as `unavailable`, retryable; the
///   validator sees only that the raw stream ended.)
///
/// After the terminal it yields nothing (it is fused) and has dropped the
/// raw stream, which stops the provider.
///
/// ```
/// use keel_stream::*;
/// use keel_message::Limits;
/// use futures_core::Stream;
/// use std::{pin::Pin, task::{Context, Poll, Waker}};
///
/// // A ready-made raw stream: two items, no terminal.
/// struct Items(std::vec::IntoIter<RawItem>);
/// impl Stream for Items {
///     type Item = RawItem;
///     fn poll_next(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<RawItem>> {
///         Poll::Ready(self.0.next())
///     }
/// }
///
/// let raw = Items(vec![RawItem::text("Hel"), RawItem::text("lo")].into_iter());
/// let validator = StreamValidator::new(ValidatorConfig::default(), Limits::default(), MetadataAllowlist::empty());
/// let mut stream = validate(raw, validator);
/// let mut cx = Context::from_waker(Waker::noop());
/// let mut out = Vec::new();
/// while let Poll::Ready(Some(item)) = Pin::new(&mut stream).poll_next(&mut cx) {
///     out.push(item);
/// }
/// assert_eq!(out.len(), 3);
/// let StreamItem::Failure(failure) = &out[2] else { panic!() };
/// assert_eq!(failure.kind(), ProblemKind::Protocol);
/// assert_eq!(failure.position(), RetryPosition::Partial);
/// ```
#[derive(Debug)]
pub struct ValidatedStream<S> {
    inner: Option<S>,
    validator: StreamValidator,
    /// A completion waiting for the provider stream to end: a completion
    /// is final only if nothing follows it.
    held: Option<StreamItem>,
}

impl<S> ValidatedStream<S>
where
    S: Stream<Item = RawItem> + Unpin,
{
    /// Wraps `stream`.
    pub fn new(stream: S, validator: StreamValidator) -> Self {
        ValidatedStream {
            inner: Some(stream),
            validator,
            held: None,
        }
    }

    /// The retry position so far.
    pub fn position(&self) -> RetryPosition {
        self.validator.position()
    }

    /// The validator (to read its limits or state).
    pub fn validator(&self) -> &StreamValidator {
        &self.validator
    }

    fn finish(&mut self) {
        self.inner = None;
    }
}

impl<S> Stream for ValidatedStream<S>
where
    S: Stream<Item = RawItem> + Unpin,
{
    type Item = StreamItem;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<StreamItem>> {
        let this = self.get_mut();
        loop {
            let Some(inner) = this.inner.as_mut() else {
                return Poll::Ready(None);
            };
            let next = match Pin::new(inner).poll_next(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(next) => next,
            };
            let position = this.validator.position();
            if let Some(completion) = this.held.take() {
                // The stream must end right after a completion; anything
                // else is an item after the terminal (the validator says
                // which rule), and the call fails instead.
                this.finish();
                let item = match next {
                    None => completion,
                    Some(raw) => match this.validator.accept(raw) {
                        Err(violation) => StreamItem::Failure(
                            violation.into_failure_with(position, this.validator.limits()),
                        ),
                        // Unreachable: a terminated validator accepts nothing.
                        Ok(_) => completion,
                    },
                };
                return Poll::Ready(Some(item));
            }
            let result = match next {
                Some(raw) => this.validator.accept(raw),
                None => match this.validator.end_of_stream() {
                    Ok(()) => {
                        this.finish();
                        return Poll::Ready(None);
                    }
                    Err(violation) => Err(violation),
                },
            };
            let item = match result {
                Ok(item @ StreamItem::Completion(_)) => {
                    this.held = Some(item);
                    continue;
                }
                Ok(item) => item,
                Err(violation) => StreamItem::Failure(
                    violation.into_failure_with(position, this.validator.limits()),
                ),
            };
            if item.is_terminal() {
                this.finish();
            }
            return Poll::Ready(Some(item));
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match &self.inner {
            None => (0, Some(0)),
            Some(inner) => (0, inner.size_hint().1.and_then(|n| n.checked_add(1))),
        }
    }
}

impl<S> FusedStream for ValidatedStream<S>
where
    S: Stream<Item = RawItem> + Unpin,
{
    fn is_terminated(&self) -> bool {
        self.inner.is_none()
    }
}
