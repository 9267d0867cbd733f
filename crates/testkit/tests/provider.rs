//! ScriptedProvider: order, delays under paused time, disconnects,
//! exhaustion, drop accounting, start failures, and what the host's
//! validator makes of malformed scripts.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use keel_message::Limits;
use keel_stream::*;
use keel_testkit::*;
use serde_json::json;
use std::time::Duration;
use tokio::time::Instant;

fn validator() -> StreamValidator {
    StreamValidator::new(
        ValidatorConfig::default(),
        Limits::default(),
        MetadataAllowlist::new(["scripted"]).unwrap(),
    )
}

/// Runs one call through the host-side validator.
async fn validated(provider: &ScriptedProvider, n: u64) -> Vec<StreamItem> {
    let raw = provider.start(request(n)).await.unwrap();
    collect(&mut validate(raw, validator())).await
}

#[tokio::test(start_paused = true)]
async fn calls_play_in_order_and_delays_use_tokio_time() {
    let provider = ScriptedProvider::new(vec![
        vec![
            ScriptItem::text("a"),
            ScriptItem::DelayMs(200),
            ScriptItem::text("b"),
            ScriptItem::complete(FinishReason::Stop),
        ],
        vec![
            ScriptItem::DelayMs(50),
            ScriptItem::complete(FinishReason::Length),
        ],
    ])
    .recording_requests();
    let handle = provider.handle();
    let t0 = Instant::now();
    let mut first = provider.start(request(1)).await.unwrap();
    assert_eq!(next(&mut first).await, Some(RawItem::text("a")));
    assert_eq!(t0.elapsed(), Duration::ZERO);
    assert_eq!(next(&mut first).await, Some(RawItem::text("b")));
    assert_eq!(t0.elapsed(), Duration::from_millis(200));
    assert_eq!(
        next(&mut first).await,
        Some(RawItem::complete(FinishReason::Stop))
    );
    assert_eq!(next(&mut first).await, None);
    let mut second = provider.start(request(2)).await.unwrap();
    assert_eq!(
        collect(&mut second).await,
        vec![RawItem::complete(FinishReason::Length)]
    );
    assert_eq!(t0.elapsed(), Duration::from_millis(250));
    assert_eq!(handle.started(), 2);
    assert_eq!(handle.finished(), 2);
    assert_eq!(handle.dropped(), 0);
    let ops: Vec<String> = handle
        .requests()
        .iter()
        .map(|r| r.operation_id().to_string())
        .collect();
    assert_eq!(ops, ["op_1", "op_2"]);
}

#[tokio::test]
async fn an_exhausted_script_fails_to_start() {
    let provider = ScriptedProvider::new(vec![]);
    let Err(problem) = provider.start(request(1)).await else {
        panic!("no script left")
    };
    assert_eq!(problem.kind, ProblemKind::Other);
    assert_eq!(problem.message, SCRIPT_EXHAUSTED);
    assert!(!problem.retryable);
    assert_eq!(provider.handle().started(), 1);
    assert_eq!(provider.handle().requests().len(), 0, "not recording");
}

/// By default the provider keeps no request: a long-lived scripted
/// provider must not hold every history it was sent. The handle still
/// counts the starts.
#[tokio::test]
async fn a_default_provider_keeps_no_requests() {
    let provider = ScriptedProvider::new(vec![
        vec![ScriptItem::complete(FinishReason::Stop)],
        vec![ScriptItem::complete(FinishReason::Stop)],
    ]);
    let handle = provider.handle();
    for n in 1..=3 {
        // Two scripted calls and one past the end of the script.
        if let Ok(mut stream) = provider.start(request(n)).await {
            collect(&mut stream).await;
        }
    }
    assert!(!handle.is_recording());
    assert_eq!(handle.started(), 3);
    assert_eq!((handle.recorded(), handle.requests().len()), (0, 0));
}

/// `recording_requests` keeps every request, in order, exhausted starts
/// included; clones of the provider share the record.
#[tokio::test]
async fn a_recording_provider_keeps_every_request_in_order() {
    let provider = ScriptedProvider::new(vec![vec![ScriptItem::complete(FinishReason::Stop)]])
        .recording_requests();
    let clone = provider.clone();
    let handle = provider.handle();
    let mut stream = provider.start(request(1)).await.unwrap();
    collect(&mut stream).await;
    assert!(clone.start(request(2)).await.is_err(), "exhausted");
    assert!(handle.is_recording());
    assert_eq!((handle.started(), handle.recorded()), (2, 2));
    let ops: Vec<String> = handle
        .requests()
        .iter()
        .map(|r| r.operation_id().to_string())
        .collect();
    assert_eq!(ops, ["op_1", "op_2"]);
}

#[tokio::test]
async fn disconnect_ends_the_stream_without_a_terminal() {
    let provider = ScriptedProvider::new(vec![vec![
        ScriptItem::text("partial"),
        ScriptItem::disconnect(),
        ScriptItem::text("never"),
    ]]);
    let items = validated(&provider, 1).await;
    assert_eq!(items.len(), 2);
    let StreamItem::Failure(failure) = &items[1] else {
        panic!("{items:?}")
    };
    assert_eq!(failure.kind(), ProblemKind::Protocol);
    assert!(failure.problem().message().contains("stream.terminal"));
    assert_eq!(failure.position(), RetryPosition::Partial);
    // The stream ended on its own: finished, not dropped.
    assert_eq!(
        (provider.handle().finished(), provider.handle().dropped()),
        (1, 0)
    );
}

#[tokio::test(start_paused = true)]
async fn dropping_mid_stream_stops_it_and_is_counted() {
    let provider = ScriptedProvider::new(vec![vec![
        ScriptItem::text("a"),
        ScriptItem::DelayMs(60_000),
        ScriptItem::text("b"),
        ScriptItem::complete(FinishReason::Stop),
    ]]);
    let handle = provider.handle();
    let mut stream = provider.start(request(1)).await.unwrap();
    assert_eq!(next(&mut stream).await, Some(RawItem::text("a")));
    // Blocked in the delay; the host gives up.
    let waited = tokio::time::timeout(Duration::from_secs(1), next(&mut stream)).await;
    assert!(waited.is_err());
    drop(stream);
    assert_eq!((handle.dropped(), handle.finished()), (1, 0));
    // Nothing runs after the drop: time passing changes nothing.
    tokio::time::advance(Duration::from_secs(120)).await;
    assert_eq!((handle.dropped(), handle.finished()), (1, 0));
    handle.wait_dropped(1).await;
}

#[tokio::test]
async fn dropping_after_the_terminal_is_not_a_cancellation() {
    let provider = ScriptedProvider::new(vec![
        vec![
            ScriptItem::text("a"),
            ScriptItem::complete(FinishReason::Stop),
        ],
        vec![ScriptItem::text("a")],
    ]);
    let handle = provider.handle();
    // The validated stream drops the raw stream right after the terminal.
    let items = validated(&provider, 1).await;
    assert_eq!(items.len(), 2);
    assert_eq!((handle.dropped(), handle.finished()), (0, 1));
    // A start future dropped unpolled abandons its call.
    drop(provider.start(request(2)));
    assert_eq!((handle.dropped(), handle.started()), (1, 2));
}

#[tokio::test]
async fn malformed_scripts_become_protocol_failures_at_the_host() {
    let cases: Vec<(Vec<ScriptItem>, &str, RetryPosition, usize)> = vec![
        (
            vec![ScriptItem::text("")],
            "stream.delta_nonempty",
            RetryPosition::Pristine,
            1,
        ),
        (
            vec![
                ScriptItem::text("ok"),
                ScriptItem::tool_call_raw("c1", "f", "{not json"),
            ],
            "stream.arguments_json",
            RetryPosition::Partial,
            1,
        ),
        (
            vec![
                ScriptItem::tool_call("c1", "f", json!({})),
                ScriptItem::tool_call("c1", "f", json!({})),
            ],
            "stream.call_id_unique",
            RetryPosition::Partial,
            1,
        ),
        (
            vec![ScriptItem::tool_call("c1", "f", json!([1]))],
            "stream.arguments_object",
            RetryPosition::Pristine,
            1,
        ),
        (
            vec![ScriptItem::complete(FinishReason::ToolCalls)],
            "stream.finish_tool_calls",
            RetryPosition::Pristine,
            // The provider did send its terminal: it finished.
            0,
        ),
    ];
    for (script, rule, position, dropped) in cases {
        let provider = ScriptedProvider::new(vec![script]);
        let items = validated(&provider, 1).await;
        let Some(StreamItem::Failure(failure)) = items.last() else {
            panic!("{items:?}")
        };
        assert_eq!(failure.kind(), ProblemKind::Protocol, "{rule}");
        assert!(
            failure.problem().message().contains(rule),
            "{rule}: {}",
            failure.problem().message()
        );
        assert_eq!(failure.position(), position, "{rule}");
        // The host abandoned the stream at the violation.
        assert_eq!(provider.handle().dropped(), dropped, "{rule}");
    }
}

#[tokio::test]
async fn items_after_the_terminal_are_played_as_scripted() {
    let provider = ScriptedProvider::new(vec![vec![
        ScriptItem::complete(FinishReason::Stop),
        ScriptItem::text("late"),
    ]]);
    let mut raw = provider.start(request(1)).await.unwrap();
    assert_eq!(
        collect(&mut raw).await,
        vec![RawItem::complete(FinishReason::Stop), RawItem::text("late")]
    );
    // The validator refuses the late item.
    let mut v = validator();
    v.accept(RawItem::complete(FinishReason::Stop)).unwrap();
    assert_eq!(
        v.accept(RawItem::text("late")),
        Err(StreamViolation::AfterTerminal)
    );
}

#[tokio::test]
async fn metadata_and_usage_reach_the_completion() {
    let provider = ScriptedProvider::from_json(
        r#"[[{"text": "hi"},
             {"complete": {"finish": "stop", "usage": {"input_tokens": 12, "output_tokens": 7},
                           "metadata": {"scripted": {"request_id": "r1"}, "other": {"x": 1}}}}]]"#,
    )
    .unwrap();
    let items = validated(&provider, 1).await;
    let StreamItem::Completion(done) = &items[1] else {
        panic!("{items:?}")
    };
    assert_eq!(done.usage().map(|u| u.total()), Some(19));
    assert_eq!(
        done.metadata().to_canonical_string(),
        r#"{"scripted":{"request_id":"r1"}}"#
    );
}

#[tokio::test(start_paused = true)]
async fn start_failures_mode_fails_the_start_future() {
    let provider = ScriptedProvider::new(vec![
        vec![
            ScriptItem::DelayMs(300),
            ScriptItem::Fail(ScriptFail {
                retry_after_ms: Some(1000),
                ..ScriptFail::new(ProblemKind::RateLimited, "slow down", true)
            }),
        ],
        vec![
            ScriptItem::text("a"),
            ScriptItem::fail(ProblemKind::Overloaded, "busy", true),
        ],
    ])
    .with_start_failures();
    let handle = provider.handle();
    let t0 = Instant::now();
    let Err(problem) = provider.start(request(1)).await else {
        panic!("start should fail")
    };
    assert_eq!(t0.elapsed(), Duration::from_millis(300));
    assert_eq!(problem.kind, ProblemKind::RateLimited);
    assert_eq!(problem.retry_after, Some(Duration::from_millis(1000)));
    // A failure after output is still a stream item.
    let items = validated(&provider, 2).await;
    let StreamItem::Failure(failure) = &items[1] else {
        panic!("{items:?}")
    };
    assert_eq!(
        (failure.kind(), failure.position()),
        (ProblemKind::Overloaded, RetryPosition::Partial)
    );
    assert_eq!((handle.finished(), handle.dropped()), (2, 0));
}

#[tokio::test(start_paused = true)]
async fn default_mode_streams_a_leading_failure() {
    let provider = ScriptedProvider::new(vec![vec![ScriptItem::fail(
        ProblemKind::Auth,
        "bad key",
        false,
    )]]);
    let items = validated(&provider, 1).await;
    let [StreamItem::Failure(failure)] = items.as_slice() else {
        panic!("{items:?}")
    };
    assert_eq!(
        (failure.kind(), failure.position()),
        (ProblemKind::Auth, RetryPosition::Pristine)
    );
}

#[tokio::test]
async fn the_handle_waits_and_takes_more_calls() {
    let provider = ScriptedProvider::new(vec![]);
    let handle = provider.handle();
    handle.push_call(vec![ScriptItem::complete(FinishReason::Stop)]);
    assert_eq!(handle.remaining(), 1);
    let waiter = {
        let handle = handle.clone();
        tokio::spawn(async move { handle.wait_started(1).await })
    };
    tokio::task::yield_now().await;
    let mut stream = provider.start(request(1)).await.unwrap();
    waiter.await.unwrap();
    assert_eq!(
        collect(&mut stream).await,
        vec![RawItem::complete(FinishReason::Stop)]
    );
    assert_eq!(handle.remaining(), 0);
}

#[test]
fn the_provider_is_a_shareable_trait_object() {
    fn assert_send_sync<T: Send + Sync + 'static>() {}
    assert_send_sync::<ScriptedProvider>();
    assert_send_sync::<ProviderHandle>();
    let _: std::sync::Arc<dyn ModelProvider> = std::sync::Arc::new(ScriptedProvider::new(vec![]));
}

/// `ScriptItem::Panic` panics while the stream is polled, at its place in
/// the script: what came before is yielded, `start` itself returns
/// normally, and the handle counts a panic (not a drop, not a finish).
#[tokio::test]
async fn a_panic_item_panics_while_the_stream_is_polled() {
    let provider = ScriptedProvider::new(vec![vec![
        ScriptItem::text("partial"),
        ScriptItem::panic("provider stream bug"),
        ScriptItem::complete(FinishReason::Stop),
    ]]);
    let handle = provider.handle();
    // The synchronous part and the start future are fine.
    let mut stream = provider.start(request(1)).await.unwrap();
    assert_eq!(next(&mut stream).await, Some(RawItem::text("partial")));
    assert_eq!(handle.panicked(), 0);
    let joined = tokio::spawn(async move { next(&mut stream).await }).await;
    let payload = joined.unwrap_err().into_panic();
    assert_eq!(panic_message(&*payload), Some("provider stream bug"));
    assert_eq!(
        (
            handle.started(),
            handle.panicked(),
            handle.dropped(),
            handle.finished()
        ),
        (1, 1, 0, 0)
    );
}

/// `with_start_panic(n)` panics in `start` itself, before any future
/// exists, on the n-th start only; it takes no scripted call, so the next
/// start gets the call it would have had.
#[tokio::test]
async fn with_start_panic_panics_synchronously_on_the_nth_start() {
    let provider = ScriptedProvider::new(vec![
        vec![
            ScriptItem::text("first"),
            ScriptItem::complete(FinishReason::Stop),
        ],
        vec![ScriptItem::complete(FinishReason::Length)],
    ])
    .with_start_panic(2)
    .with_start_panic(4)
    .recording_requests();
    let handle = provider.handle();
    let mut first = provider.start(request(1)).await.unwrap();
    assert_eq!(next(&mut first).await, Some(RawItem::text("first")));
    let message = sync_panic(|| provider.start(request(2)));
    assert_eq!(message, "scripted provider panic in start (call 2)");
    assert_eq!(
        (handle.started(), handle.panicked(), handle.remaining()),
        (2, 1, 1)
    );
    // The third start gets the second call; the fourth panics again.
    let mut third = provider.start(request(3)).await.unwrap();
    assert_eq!(
        collect(&mut third).await,
        vec![RawItem::complete(FinishReason::Length)]
    );
    assert_eq!(
        sync_panic(|| provider.start(request(4))),
        "scripted provider panic in start (call 4)"
    );
    // Every start is counted and (recording) kept, panicking ones too.
    assert_eq!(
        (handle.started(), handle.panicked(), handle.recorded()),
        (4, 2, 4)
    );
    drop(first);
    assert_eq!(handle.dropped(), 1, "only the abandoned first stream");
}

#[tokio::test]
async fn scripted_reasoning_is_tagged_scripted_and_validated() {
    let provider = ScriptedProvider::new(vec![
        vec![
            ScriptItem::reasoning("hm"),
            ScriptItem::reasoning_signature("sig"),
            ScriptItem::redacted_reasoning("opaque"),
            ScriptItem::text("ok"),
            ScriptItem::complete(FinishReason::Stop),
        ],
        vec![
            ScriptItem::reasoning_signature("sig"),
            ScriptItem::complete(FinishReason::Stop),
        ],
    ]);
    assert_eq!(provider.provider_tag().as_str(), "scripted");
    let items = validated(&provider, 1).await;
    let names: Vec<_> = items.iter().map(StreamItem::type_name).collect();
    assert_eq!(
        names,
        [
            "reasoning_delta",
            "reasoning_signature",
            "redacted_reasoning",
            "text_delta",
            "completion"
        ]
    );
    // A signature with no part open reaches the host, whose validator
    // refuses it.
    let items = validated(&provider, 2).await;
    let [StreamItem::Failure(f)] = items.as_slice() else {
        panic!("{items:?}")
    };
    assert!(
        f.problem()
            .message()
            .contains("rule stream.signature_open_part")
    );
}
