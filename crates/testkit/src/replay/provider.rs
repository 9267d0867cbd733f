//! `ReplayProvider`: serves a recording's model calls in order.

use super::Recording;
use super::recording::{CallEnd, RecordedCall};
use crate::sync::lock;
use futures_core::Stream;
use keel_message::{ModelRequest, ProviderTag};
use keel_stream::{ModelProvider, ProblemKind, RawItem, RawProblem, RawStream, StartFuture};
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

/// The rule a [`ReplayProvider`] names when the replayed run makes more
/// model calls than were recorded.
pub const UNRECORDED_MODEL_CALL: &str = "replay.unrecorded_model_call";

/// A [`ModelProvider`] that serves a [`Recording`]'s model call attempts
/// in log order, one per [`start`](ModelProvider::start), whatever the
/// call's purpose (an answer call, a retry attempt, a compaction call):
///
/// - each attempt's stream yields its recorded text and reasoning deltas,
///   reasoning ends (signature or redacted value) and tool calls, then
///   its terminal: the recorded completion (finish, usage, metadata) or
///   the recorded problem (kind, message, retryable, retry-after), as a
///   stream item;
/// - an attempt recorded as cancelled (or never closed) yields its items
///   and then stalls until the run drops the stream;
/// - a start past the recorded attempts fails with a non-retryable
///   problem naming [`UNRECORDED_MODEL_CALL`].
///
/// The request is not looked at: what the replayed engine sends is
/// judged by comparing the logs ([`compare`](super::compare)). Its
/// provider tag is the recorded one (from the first `model.reasoning_end`,
/// else `scripted`) so that reasoning parts are recorded as they were.
#[derive(Debug, Clone)]
pub struct ReplayProvider {
    calls: Arc<Mutex<VecDeque<RecordedCall>>>,
    tag: ProviderTag,
}

impl ReplayProvider {
    /// A provider serving `recording`'s model calls.
    pub fn new(recording: &Recording) -> ReplayProvider {
        ReplayProvider {
            calls: Arc::new(Mutex::new(recording.calls.iter().cloned().collect())),
            tag: recording
                .provider_tag
                .clone()
                .unwrap_or_else(ProviderTag::scripted),
        }
    }

    /// Recorded calls not served yet.
    pub fn remaining(&self) -> usize {
        lock(&self.calls).len()
    }
}

impl ModelProvider for ReplayProvider {
    fn provider_tag(&self) -> ProviderTag {
        self.tag.clone()
    }

    fn start(&self, _request: ModelRequest) -> StartFuture {
        let Some(call) = lock(&self.calls).pop_front() else {
            return Box::pin(std::future::ready(Err(RawProblem::new(
                ProblemKind::Other,
                format!(
                    "the replayed run made more model calls than were recorded (rule {UNRECORDED_MODEL_CALL})"
                ),
                false,
            ))));
        };
        let stream: RawStream = Box::pin(ReplayStream {
            items: call.items.into(),
            stalls: call.end == CallEnd::Stall,
        });
        Box::pin(std::future::ready(Ok(stream)))
    }
}

/// One recorded attempt's items, then the end or a stall.
struct ReplayStream {
    items: VecDeque<RawItem>,
    stalls: bool,
}

impl Stream for ReplayStream {
    type Item = RawItem;

    fn poll_next(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<RawItem>> {
        let this = self.get_mut();
        match this.items.pop_front() {
            Some(item) => Poll::Ready(Some(item)),
            // A cancelled call stalls: nothing will ever wake it, and the
            // run's cancellation drops it.
            None if this.stalls => Poll::Pending,
            None => Poll::Ready(None),
        }
    }
}
