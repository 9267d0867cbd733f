//! Helpers shared by the integration tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use futures_core::Stream;
use keel_message::Limits;
use keel_stream::*;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

/// A raw stream over a vector, always ready.
pub struct Items(pub std::vec::IntoIter<RawItem>);

impl Stream for Items {
    type Item = RawItem;
    fn poll_next(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<RawItem>> {
        Poll::Ready(self.0.next())
    }
}

/// Drains a validated stream over `items` (polling once more after the end
/// to check fusing).
pub fn drain(items: Vec<RawItem>, validator: StreamValidator) -> Vec<StreamItem> {
    let mut stream = validate(Items(items.into_iter()), validator);
    let mut cx = Context::from_waker(Waker::noop());
    let mut out = Vec::new();
    loop {
        match Pin::new(&mut stream).poll_next(&mut cx) {
            Poll::Ready(Some(item)) => out.push(item),
            Poll::Ready(None) => break,
            Poll::Pending => unreachable!("Items is always ready"),
        }
    }
    for _ in 0..3 {
        assert!(matches!(
            Pin::new(&mut stream).poll_next(&mut cx),
            Poll::Ready(None)
        ));
    }
    assert!(futures_core::FusedStream::is_terminated(&stream));
    out
}

pub fn validator(config: ValidatorConfig, limits: Limits, allow: &[&str]) -> StreamValidator {
    StreamValidator::new(config, limits, MetadataAllowlist::new(allow).unwrap())
}

pub fn default_validator() -> StreamValidator {
    validator(
        ValidatorConfig::default(),
        Limits::default(),
        &["openai", "scripted"],
    )
}

pub fn text(t: &str) -> RawItem {
    RawItem::text(t)
}

pub fn call(id: &str, name: &str, args: &str) -> RawItem {
    RawItem::tool_call(id, name, args)
}

pub fn complete(finish: FinishReason) -> RawItem {
    RawItem::complete(finish)
}

pub fn complete_with(
    finish: FinishReason,
    usage: Option<(u64, u64)>,
    metadata: Option<serde_json::Value>,
) -> RawItem {
    RawItem::Completion(RawCompletion {
        finish,
        usage: usage.map(|(input_tokens, output_tokens)| RawUsage {
            input_tokens,
            output_tokens,
        }),
        metadata,
    })
}

pub fn fail(kind: ProblemKind) -> RawItem {
    RawItem::fail(kind, "provider said no", true)
}

/// Builds a string from parts, so that no complete secret-shaped literal
/// sits in the source (secret scanners read test files too).
pub fn fake(parts: &[&str]) -> String {
    parts.concat()
}
