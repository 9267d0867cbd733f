#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Validator overhead per item against pass-through.
//!
//! Input: 1,000 text deltas of about 20 bytes, then a completion with usage
//! and one allowlisted metadata namespace (1,001 items). Each variant
//! receives a fresh `Vec<RawItem>` (built outside the timing) and consumes
//! it item by item:
//!
//! - `pass_through`: moves each `RawItem` out and hands it to `black_box`;
//! - `validate`: `StreamValidator::accept` on each item;
//! - `validated_stream`: polls a `ValidatedStream` over the items to its end.
//!
//! Divide the reported time by 1,001 for ns per item.

use criterion::{BatchSize, Criterion, Throughput, black_box, criterion_group, criterion_main};
use futures_core::Stream;
use keel_message::Limits;
use keel_stream::*;
use serde_json::json;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

const DELTAS: usize = 1_000;

fn input() -> Vec<RawItem> {
    let mut items: Vec<RawItem> = (0..DELTAS)
        .map(|i| RawItem::text(format!("token {i:05} of text,")))
        .collect();
    items.push(RawItem::Completion(RawCompletion {
        finish: FinishReason::Stop,
        usage: Some(RawUsage {
            input_tokens: 1_200,
            output_tokens: 1_000,
        }),
        metadata: Some(
            json!({"openai": {"system_fingerprint": "fp_44709d6fcb", "request_id": "req_abc123"}}),
        ),
    }));
    items
}

fn validator() -> StreamValidator {
    StreamValidator::new(
        ValidatorConfig::default(),
        Limits::default(),
        MetadataAllowlist::new(["openai"]).unwrap(),
    )
}

struct Items(std::vec::IntoIter<RawItem>);

impl Stream for Items {
    type Item = RawItem;
    fn poll_next(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<RawItem>> {
        Poll::Ready(self.0.next())
    }
}

fn bench(c: &mut Criterion) {
    let sample = input();
    assert!(
        sample[..DELTAS]
            .iter()
            .all(|i| matches!(i, RawItem::TextDelta(t) if t.len() == 20))
    );
    let mut group = c.benchmark_group("stream_1000_deltas");
    group.throughput(Throughput::Elements(sample.len() as u64));

    group.bench_function("pass_through", |b| {
        b.iter_batched(
            input,
            |items| {
                for item in items {
                    black_box(item);
                }
            },
            BatchSize::SmallInput,
        )
    });

    group.bench_function("validate", |b| {
        b.iter_batched(
            || (input(), validator()),
            |(items, mut v)| {
                for item in items {
                    black_box(v.accept(item).unwrap());
                }
                v.end_of_stream().unwrap();
            },
            BatchSize::SmallInput,
        )
    });

    group.bench_function("validated_stream", |b| {
        let mut cx = Context::from_waker(Waker::noop());
        b.iter_batched(
            || validate(Items(input().into_iter()), validator()),
            |mut stream| {
                while let Poll::Ready(Some(item)) = Pin::new(&mut stream).poll_next(&mut cx) {
                    black_box(item);
                }
            },
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
