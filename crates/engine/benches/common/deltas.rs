//! The provider both engine benches drive: `n` text deltas of ~11 bytes,
//! then a completion.

use keel_message::ModelRequest;
use keel_stream::{FinishReason, ModelProvider, RawItem, RawStream, StartFuture};

pub struct Deltas(pub usize);

impl ModelProvider for Deltas {
    fn start(&self, _request: ModelRequest) -> StartFuture {
        let items = (0..self.0)
            .map(|i| RawItem::text(format!("token {i:>4} ")))
            .chain(std::iter::once(RawItem::complete(FinishReason::Stop)));
        let stream: RawStream = Box::pin(futures_util::stream::iter(items));
        Box::pin(async move { Ok(stream) })
    }
}
