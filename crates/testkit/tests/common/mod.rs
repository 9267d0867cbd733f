//! Helpers shared by the testkit tests (included with `mod common;`).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use futures_core::Stream;
use keel_eventlog::{LogConfig, Payload, RunLog};
use keel_message::*;
use keel_testkit::ManualClock;
use std::pin::Pin;
use std::sync::Arc;

/// A one-message request with operation id `op_<n>`.
pub fn request(n: u64) -> ModelRequest {
    let history: Arc<[Message]> = vec![
        Message::text(
            MessageId::parse("m1").unwrap(),
            Role::User,
            "Weather in Oslo?",
        )
        .unwrap(),
    ]
    .into();
    ModelRequest::new(
        OperationId::parse(&format!("op_{n}")).unwrap(),
        ModelName::parse("scripted-1").unwrap(),
        history,
        Arc::from([]),
    )
    .unwrap()
}

/// The next item of a stream.
pub async fn next<S: Stream + Unpin + ?Sized>(stream: &mut S) -> Option<S::Item> {
    std::future::poll_fn(|cx| Pin::new(&mut *stream).poll_next(cx)).await
}

/// Every item of a stream.
pub async fn collect<S: Stream + Unpin + ?Sized>(stream: &mut S) -> Vec<S::Item> {
    let mut out = Vec::new();
    while let Some(item) = next(stream).await {
        out.push(item);
    }
    out
}

/// A log for `run_1` on a manual clock.
pub fn log() -> (RunLog, ManualClock) {
    let clock = ManualClock::default();
    let log = RunLog::new(
        RunId::parse("run_1").unwrap(),
        LogConfig::default(),
        Arc::new(clock.clone()),
    )
    .unwrap();
    (log, clock)
}

/// Commits every payload, panicking on refusal.
pub fn commit_all(log: &RunLog, payloads: &[Payload]) -> Vec<Arc<keel_eventlog::Event>> {
    payloads
        .iter()
        .map(|p| {
            log.commit(p)
                .unwrap_or_else(|e| panic!("commit {}: {e}", p.kind()))
        })
        .collect()
}

/// The message of a panic payload (`panic!` with arguments and the
/// testkit's scripted panics give a `String`, a literal `panic!` a `&str`).
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> Option<&str> {
    payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
}

/// Runs `f`, which must panic synchronously, and returns the panic's
/// message.
pub fn sync_panic<T>(f: impl FnOnce() -> T) -> String {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(_) => panic!("expected a synchronous panic"),
        Err(payload) => panic_message(&*payload)
            .unwrap_or("<not a string>")
            .to_owned(),
    }
}
