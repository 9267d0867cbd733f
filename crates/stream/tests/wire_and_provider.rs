#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Wire names and shapes (serde), and the provider trait.

mod common;

use common::*;
use futures_core::Stream;
use keel_message::*;
use keel_stream::*;
use serde_json::json;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Waker};

fn accept_all(items: Vec<RawItem>) -> Vec<StreamItem> {
    let mut v = default_validator();
    items.into_iter().map(|i| v.accept(i).unwrap()).collect()
}

#[test]
fn stream_items_have_tagged_snake_case_wire_shapes() {
    let items = accept_all(vec![
        text("Checking."),
        call("c1", "get_weather", r#"{ "city": "Oslo", "days": 2 }"#),
        complete_with(
            FinishReason::ToolCalls,
            Some((12, 7)),
            Some(json!({"scripted": {"request_id": "r1"}})),
        ),
    ]);
    let lines: Vec<String> = items
        .iter()
        .map(|i| serde_json::to_string(i).unwrap())
        .collect();
    assert_eq!(
        lines,
        [
            r#"{"type":"text_delta","text":"Checking."}"#,
            r#"{"type":"tool_call","call_id":"c1","name":"get_weather","arguments":{"city":"Oslo","days":2}}"#,
            r#"{"type":"completion","finish":"tool_calls","usage":{"input_tokens":12,"output_tokens":7},"metadata":{"scripted":{"request_id":"r1"}}}"#,
        ]
    );
    for (item, line) in items.iter().zip(&lines) {
        assert_eq!(&serde_json::from_str::<StreamItem>(line).unwrap(), item);
    }

    let failure = accept_all(vec![
        text("a"),
        RawItem::fail(ProblemKind::Overloaded, "busy", true),
    ]);
    let line = serde_json::to_string(&failure[1]).unwrap();
    assert_eq!(
        line,
        r#"{"type":"failure","problem":{"kind":"overloaded","message":"busy","retryable":true},"position":"partial"}"#
    );
    assert_eq!(
        serde_json::from_str::<StreamItem>(&line).unwrap(),
        failure[1]
    );

    let bare = accept_all(vec![complete(FinishReason::Stop)]);
    assert_eq!(
        serde_json::to_string(&bare[0]).unwrap(),
        r#"{"type":"completion","finish":"stop"}"#
    );
}

#[test]
fn reasoning_items_have_their_wire_shapes() {
    let items = accept_all(vec![
        RawItem::reasoning("Let me think."),
        RawItem::reasoning_signature("EqQBCgIYAhIM"),
        RawItem::redacted_reasoning("RWNyeXB0ZWQ="),
    ]);
    let lines: Vec<String> = items
        .iter()
        .map(|i| serde_json::to_string(i).unwrap())
        .collect();
    assert_eq!(
        lines,
        [
            r#"{"type":"reasoning_delta","text":"Let me think."}"#,
            r#"{"type":"reasoning_signature","signature":"EqQBCgIYAhIM"}"#,
            r#"{"type":"redacted_reasoning","redacted":"RWNyeXB0ZWQ="}"#,
        ]
    );
    let names: Vec<_> = items.iter().map(StreamItem::type_name).collect();
    assert_eq!(
        names,
        [
            "reasoning_delta",
            "reasoning_signature",
            "redacted_reasoning"
        ]
    );
    for (item, line) in items.iter().zip(&lines) {
        assert_eq!(&serde_json::from_str::<StreamItem>(line).unwrap(), item);
        assert!(!item.is_terminal());
    }
    for bad in [
        r#"{"type":"reasoning_delta","text":""}"#,
        r#"{"type":"reasoning_signature","signature":""}"#,
        r#"{"type":"reasoning_signature","signature":"a b"}"#,
        r#"{"type":"redacted_reasoning","redacted":"x","extra":1}"#,
    ] {
        assert!(serde_json::from_str::<StreamItem>(bad).is_err(), "{bad}");
    }
}

#[test]
fn enums_use_snake_case_names() {
    let s = |v: &dyn erased::Ser| v.json();
    assert_eq!(s(&FinishReason::ContentFilter), r#""content_filter""#);
    assert_eq!(s(&FinishReason::ToolCalls), r#""tool_calls""#);
    assert_eq!(s(&RetryPosition::Pristine), r#""pristine""#);
    let kinds = [
        (ProblemKind::RateLimited, "rate_limited"),
        (ProblemKind::Overloaded, "overloaded"),
        (ProblemKind::Unavailable, "unavailable"),
        (ProblemKind::Timeout, "timeout"),
        (ProblemKind::Auth, "auth"),
        (ProblemKind::InvalidRequest, "invalid_request"),
        (ProblemKind::ContentFilter, "content_filter"),
        (ProblemKind::ContextLength, "context_length"),
        (ProblemKind::Protocol, "protocol"),
        (ProblemKind::Cancelled, "cancelled"),
        (ProblemKind::Other, "other"),
    ];
    for (kind, name) in kinds {
        assert_eq!(s(&kind), format!("\"{name}\""));
        assert_eq!(kind.as_str(), name);
        assert_eq!(
            serde_json::from_str::<ProblemKind>(&format!("\"{name}\"")).unwrap(),
            kind
        );
    }
}

mod erased {
    pub trait Ser {
        fn json(&self) -> String;
    }
    impl<T: serde::Serialize> Ser for T {
        fn json(&self) -> String {
            serde_json::to_string(self).unwrap()
        }
    }
}

#[test]
fn decoding_runs_the_constructors() {
    // Secrets in metadata, unsafe usage, unknown members and empty deltas are
    // refused on the way in, too.
    let bad = [
        r#"{"type":"completion","finish":"stop","metadata":{"openai":{"cookie":"x"}}}"#,
        r#"{"type":"completion","finish":"stop","usage":{"input_tokens":9007199254740992,"output_tokens":0}}"#,
        r#"{"type":"completion","finish":"stop","extra":1}"#,
        r#"{"type":"text_delta","text":""}"#,
        r#"{"type":"tool_call","call_id":"c1","name":"t","arguments":[1]}"#,
        r#"{"type":"failure","problem":{"kind":"other","message":"m","retryable":false},"position":"Middle"}"#,
    ];
    for line in bad {
        assert!(serde_json::from_str::<StreamItem>(line).is_err(), "{line}");
    }
    // Problems are redacted on the way in.
    let p: ProviderProblem = serde_json::from_str(
        r#"{"kind":"auth","message":"bad key sk-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","retryable":false,"retry_after_ms":1500}"#,
    )
    .unwrap();
    assert_eq!(p.message(), "bad key [redacted]");
    assert_eq!(
        p.retry_after(),
        Some(std::time::Duration::from_millis(1500))
    );

    let allow: MetadataAllowlist = serde_json::from_str(r#"["openai","scripted"]"#).unwrap();
    assert_eq!(allow.iter().collect::<Vec<_>>(), ["openai", "scripted"]);
    assert!(serde_json::from_str::<MetadataAllowlist>(r#"["Open AI"]"#).is_err());
}

#[test]
fn allowlist_and_retain() {
    let e = MetadataAllowlist::new(["ok", "9lives"]).unwrap_err();
    assert_eq!(e.path(), "$[1]");
    assert!(matches!(
        e.kind(),
        MetadataErrorKind::InvalidNamespace { .. }
    ));
    assert!(MetadataAllowlist::new([&"a".repeat(33)]).is_err());
    assert!(MetadataAllowlist::new([&"a".repeat(32)]).is_ok());

    let meta = ProviderMetadata::from_value(&json!({
        "openai": {"request_id": "req_1"},
        "zeta": {"n": 1},
        "alpha": {"m": [true, null]}
    }))
    .unwrap();
    assert_eq!(meta.len(), 3);
    assert_eq!(meta.canonical_len(), meta.to_canonical_string().len());
    assert_eq!(
        meta.to_canonical_string(),
        r#"{"alpha":{"m":[true,null]},"openai":{"request_id":"req_1"},"zeta":{"n":1}}"#
    );
    assert_eq!(
        CanonicalJson::from_value(&meta.to_value())
            .unwrap()
            .as_str(),
        meta.to_canonical_string()
    );
    let kept = meta.retain_allowed(&MetadataAllowlist::new(["zeta", "nope"]).unwrap());
    assert_eq!(kept.to_canonical_string(), r#"{"zeta":{"n":1}}"#);
    assert_eq!(kept.canonical_len(), kept.to_canonical_string().len());
    assert_eq!(kept.namespace("zeta").unwrap().as_str(), r#"{"n":1}"#);
    assert!(kept.namespace("openai").is_none());
    assert!(meta.retain_allowed(&MetadataAllowlist::empty()).is_empty());
    assert_eq!(ProviderMetadata::empty().to_canonical_string(), "{}");
    assert_eq!(ProviderMetadata::empty().canonical_len(), 2);

    let e = ProviderMetadata::from_value(&json!({"OpenAI": {}})).unwrap_err();
    assert_eq!(e.path(), "$.OpenAI");
    assert!(matches!(
        e.kind(),
        MetadataErrorKind::InvalidNamespace { .. }
    ));
    let e = ProviderMetadata::from_value(&json!({"open ai": {}})).unwrap_err();
    assert_eq!(e.path(), "$[key#0]");
}

// ---- the provider trait ----

/// A provider that replays a script and records whether its stream was
/// dropped.
struct Scripted {
    items: Vec<RawItem>,
    dropped: Arc<AtomicBool>,
}

struct Tracked {
    items: std::vec::IntoIter<RawItem>,
    dropped: Arc<AtomicBool>,
}

impl Stream for Tracked {
    type Item = RawItem;
    fn poll_next(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<RawItem>> {
        Poll::Ready(self.items.next())
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.dropped.store(true, Ordering::SeqCst);
    }
}

impl ModelProvider for Scripted {
    fn start(&self, request: ModelRequest) -> StartFuture {
        let items = self.items.clone();
        let dropped = Arc::clone(&self.dropped);
        Box::pin(async move {
            if request.model().as_str() == "down" {
                return Err(RawProblem::new(
                    ProblemKind::Unavailable,
                    "connection refused",
                    true,
                ));
            }
            let stream: RawStream = Box::pin(Tracked {
                items: items.into_iter(),
                dropped,
            });
            Ok(stream)
        })
    }
}

fn request(model: &str) -> ModelRequest {
    let history: Arc<[Message]> =
        vec![Message::text(MessageId::parse("m1").unwrap(), Role::User, "Hi").unwrap()].into();
    ModelRequest::new(
        OperationIdIssuer::new().issue(),
        ModelName::parse(model).unwrap(),
        history,
        Arc::from([]),
    )
    .unwrap()
}

fn ready<T>(mut fut: Pin<Box<dyn Future<Output = T> + Send>>) -> T {
    match fut.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("scripted futures are ready"),
    }
}

#[test]
fn providers_are_dyn_and_dropping_the_stream_stops_them() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Arc<dyn ModelProvider>>();
    fn assert_send<T: Send>() {}
    assert_send::<ValidatedStream<RawStream>>();
    assert_send::<StreamItem>();

    let dropped = Arc::new(AtomicBool::new(false));
    let provider: Arc<dyn ModelProvider> = Arc::new(Scripted {
        items: vec![text("a"), complete(FinishReason::Stop), text("never read")],
        dropped: Arc::clone(&dropped),
    });
    // A provider that does not name itself is `custom`.
    assert_eq!(provider.provider_tag().as_str(), "custom");
    let raw = ready(provider.start(request("scripted-1"))).unwrap();
    let mut stream = validate(raw, default_validator());
    let mut cx = Context::from_waker(Waker::noop());
    let mut out = Vec::new();
    while let Poll::Ready(Some(item)) = Pin::new(&mut stream).poll_next(&mut cx) {
        out.push(item);
    }
    assert_eq!(out.len(), 2);
    assert!(out[1].is_terminal());
    assert!(
        dropped.load(Ordering::SeqCst),
        "the raw stream is released at the terminal"
    );

    // Dropping mid-stream drops the provider's stream too.
    let dropped2 = Arc::new(AtomicBool::new(false));
    let provider = Scripted {
        items: vec![text("a"), text("b")],
        dropped: Arc::clone(&dropped2),
    };
    let raw = ready(provider.start(request("scripted-1"))).unwrap();
    let mut stream = validate(raw, default_validator());
    assert!(matches!(
        Pin::new(&mut stream).poll_next(&mut cx),
        Poll::Ready(Some(_))
    ));
    assert_eq!(stream.position(), RetryPosition::Partial);
    drop(stream);
    assert!(dropped2.load(Ordering::SeqCst));

    // A start failure is pristine.
    let Err(problem) = ready(provider.start(request("down"))) else {
        panic!()
    };
    let failure = ModelFailure::at_start(ProviderProblem::from_raw(problem, Limits::default_ref()));
    assert_eq!(failure.position(), RetryPosition::Pristine);
    assert_eq!(failure.kind(), ProblemKind::Unavailable);
    assert!(failure.problem().retryable());
}

/// Additive wire enums (issue #22): a stream item carrying values this
/// version does not know decodes, keeps them and re-encodes byte for byte.
#[test]
fn unknown_enum_values_round_trip_through_items() {
    for line in [
        r#"{"type":"completion","finish":"paused_for_moderation"}"#,
        r#"{"type":"failure","problem":{"kind":"quota","message":"m","retryable":false},"position":"after_tool_calls"}"#,
    ] {
        let item: StreamItem = serde_json::from_str(line).unwrap();
        assert_eq!(serde_json::to_string(&item).unwrap(), line);
    }
    let item: StreamItem =
        serde_json::from_str(r#"{"type":"completion","finish":"paused_for_moderation"}"#).unwrap();
    let StreamItem::Completion(c) = item else {
        panic!("{item:?}")
    };
    assert_eq!(c.finish().as_str(), "paused_for_moderation");
    assert!(!c.finish().is_known());
    // An unknown position reads as the conservative side.
    let position = RetryPosition::from_wire("after_tool_calls").unwrap();
    assert!(position.may_have_output() && RetryPosition::Partial.may_have_output());
    assert!(!RetryPosition::Pristine.may_have_output());
}
