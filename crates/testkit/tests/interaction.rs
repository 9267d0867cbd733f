//! ScriptedInteractions: answers in order, failures, exhaustion, never
//! answering, panics in `handle` itself and while polled, delays, and the
//! handle's accounting.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use keel_engine::{
    InteractionDecision, InteractionError, InteractionHandler, InteractionKind, InteractionRequest,
};
use keel_message::{CallId, CanonicalJson, InteractionId, RunId, ToolName};
use keel_testkit::*;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

fn request(n: u64) -> InteractionRequest {
    InteractionRequest {
        run_id: RunId::parse("run_1").unwrap(),
        turn: 1,
        interaction_id: InteractionId::parse(&format!("i{n}")).unwrap(),
        kind: InteractionKind::Approval {
            call_id: CallId::parse(&format!("c{n}")).unwrap(),
            tool: ToolName::parse("rm").unwrap(),
            arguments: CanonicalJson::parse(r#"{"path":"/tmp/x"}"#).unwrap(),
        },
    }
}

fn asked_ids(handle: &InteractionsHandle) -> Vec<String> {
    handle
        .requests()
        .iter()
        .map(|r| r.interaction_id.to_string())
        .collect()
}

#[tokio::test]
async fn steps_answer_in_order_then_the_script_is_exhausted() {
    let handler = ScriptedInteractions::new(vec![
        InteractionStep::approve(),
        InteractionStep::deny(),
        InteractionStep::fail("user went away"),
    ]);
    let handle = handler.interactions_handle();
    assert_eq!(handle.remaining(), 3);
    let mut answers = Vec::new();
    for n in 1..=4 {
        answers.push(handler.handle(request(n)).await);
    }
    assert_eq!(
        answers,
        vec![
            Ok(InteractionDecision::Approved),
            Ok(InteractionDecision::Denied),
            Err(InteractionError("user went away".into())),
            Err(InteractionError(INTERACTION_SCRIPT_EXHAUSTED.into())),
        ]
    );
    assert_eq!(asked_ids(&handle), ["i1", "i2", "i3", "i4"]);
    assert_eq!(
        handle.decisions(),
        [InteractionDecision::Approved, InteractionDecision::Denied]
    );
    assert_eq!(
        (
            handle.asked(),
            handle.answered(),
            handle.failed(),
            handle.panicked(),
            handle.cancelled(),
            handle.remaining()
        ),
        (4, 2, 2, 0, 0, 0)
    );
}

#[tokio::test]
async fn always_repeats_one_answer() {
    let handler = ScriptedInteractions::always(InteractionStep::deny());
    let handle = handler.interactions_handle();
    for n in 1..=3 {
        assert_eq!(
            handler.handle(request(n)).await,
            Ok(InteractionDecision::Denied)
        );
    }
    assert_eq!((handle.asked(), handle.answered()), (3, 3));
}

#[tokio::test(start_paused = true)]
async fn delays_use_tokio_time() {
    let handler = ScriptedInteractions::new(vec![InteractionStep::approve().after_ms(300)]);
    let t0 = Instant::now();
    assert_eq!(
        handler.handle(request(1)).await,
        Ok(InteractionDecision::Approved)
    );
    assert_eq!(t0.elapsed(), Duration::from_millis(300));
}

/// `pending` never answers, even past any timer; dropping the future is
/// counted as a cancellation and can be awaited.
#[tokio::test(start_paused = true)]
async fn pending_never_answers_and_its_drop_is_a_cancellation() {
    let handler = ScriptedInteractions::new(vec![InteractionStep::pending()]);
    let handle = handler.interactions_handle();
    let future = handler.handle(request(1));
    let waiter = {
        let handle = handle.clone();
        tokio::spawn(async move { handle.wait_cancelled(1).await })
    };
    let outcome = tokio::time::timeout(Duration::from_secs(365 * 86_400), future).await;
    assert!(outcome.is_err(), "still pending after a year: {outcome:?}");
    waiter.await.unwrap();
    assert_eq!(
        (
            handle.asked(),
            handle.answered(),
            handle.failed(),
            handle.cancelled()
        ),
        (1, 0, 0, 1)
    );
}

/// `panic` panics only once the future is polled (building it is fine);
/// `panic_sync` panics in `handle` itself. Both are counted, neither as a
/// cancellation, and the request is kept.
#[tokio::test]
async fn panics_sync_in_handle_or_async_while_polled() {
    let handler = ScriptedInteractions::new(vec![
        InteractionStep::panic("handler future bug"),
        InteractionStep::panic_sync("handler bug").after_ms(1_000),
        InteractionStep::approve(),
    ]);
    let handle = handler.interactions_handle();
    let future = handler.handle(request(1));
    assert_eq!(handle.panicked(), 0, "building the future does not panic");
    let payload = tokio::spawn(future).await.unwrap_err().into_panic();
    assert_eq!(panic_message(&*payload), Some("handler future bug"));
    let message = sync_panic(|| handler.handle(request(2)));
    assert_eq!(message, "handler bug");
    assert_eq!(
        handler.handle(request(3)).await,
        Ok(InteractionDecision::Approved)
    );
    assert_eq!(asked_ids(&handle), ["i1", "i2", "i3"]);
    assert_eq!(
        (
            handle.panicked(),
            handle.cancelled(),
            handle.answered(),
            handle.failed()
        ),
        (2, 0, 1, 0)
    );
}

#[tokio::test]
async fn waiting_for_questions() {
    let handler = ScriptedInteractions::always(InteractionStep::approve());
    let handle = handler.interactions_handle();
    let waiter = {
        let handle = handle.clone();
        tokio::spawn(async move { handle.wait_asked(2).await })
    };
    tokio::task::yield_now().await;
    for n in 1..=2 {
        handler.handle(request(n)).await.unwrap();
    }
    waiter.await.unwrap();
}

#[test]
fn the_handler_is_a_shareable_trait_object() {
    fn assert_send_sync<T: Send + Sync + 'static>() {}
    assert_send_sync::<ScriptedInteractions>();
    assert_send_sync::<InteractionsHandle>();
    let _: Arc<dyn InteractionHandler> = Arc::new(ScriptedInteractions::new(vec![]));
}
