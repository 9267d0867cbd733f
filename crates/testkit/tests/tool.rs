//! ScriptedTool: results, errors, delays, panics, hangs, exhaustion and
//! the handle's accounting.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use keel_engine::{
    OnToolFailure, Tool, ToolError, ToolInvocation, ToolOutcome, ToolPolicy, ToolRetry,
};
use keel_message::{CallId, CanonicalJson, RunId};
use keel_testkit::*;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

fn invocation(call: &str) -> ToolInvocation {
    ToolInvocation {
        run_id: RunId::parse("run_1").unwrap(),
        turn: 1,
        call_id: CallId::parse(call).unwrap(),
        arguments: CanonicalJson::parse(r#"{"city":"Oslo"}"#).unwrap(),
    }
}

#[tokio::test]
async fn ok_steps_give_canonical_text_or_the_string_itself() {
    let tool = ScriptedTool::named(
        "get_weather",
        vec![
            ToolStep::ok(json!({"z": 1, "a": [1.0, "ø"]})),
            ToolStep::ok(json!("plain text, not JSON-quoted")),
            ToolStep::ok(json!(null)),
            ToolStep::ok(json!(3)),
        ],
    )
    .unwrap();
    let mut out = Vec::new();
    for n in 0..4 {
        out.push(
            tool.call(invocation(&format!("c{n}")))
                .await
                .unwrap()
                .into_content(),
        );
    }
    assert_eq!(
        out,
        [
            r#"{"a":[1,"ø"],"z":1}"#,
            "plain text, not JSON-quoted",
            "null",
            "3"
        ]
    );
    let calls = tool.handle().calls();
    assert_eq!(calls.len(), 4);
    assert_eq!(calls[2].call_id.as_str(), "c2");
    assert_eq!(calls[0].arguments.as_str(), r#"{"city":"Oslo"}"#);
}

#[tokio::test]
async fn error_steps_are_tool_errors() {
    let tool = ScriptedTool::named(
        "t",
        vec![
            ToolStep::error("plain"),
            ToolStep::typed_error("timed out", ToolOutcome::Uncertain, ToolRetry::Retryable),
        ],
    )
    .unwrap();
    assert_eq!(
        tool.call(invocation("c1")).await,
        Err(ToolError::new("plain"))
    );
    assert_eq!(
        tool.call(invocation("c2")).await,
        Err(ToolError::typed(
            "timed out",
            ToolOutcome::Uncertain,
            ToolRetry::Retryable
        ))
    );
    assert_eq!(
        tool.call(invocation("c3")).await,
        Err(ToolError::new(TOOL_SCRIPT_EXHAUSTED))
    );
    assert_eq!(tool.handle().completed(), 3);
}

#[tokio::test(start_paused = true)]
async fn delays_use_tokio_time() {
    let tool = ScriptedTool::named(
        "t",
        vec![
            ToolStep::ok(json!("late")).after_ms(500),
            ToolStep::error("later").after_ms(250),
        ],
    )
    .unwrap();
    let t0 = Instant::now();
    assert_eq!(tool.call(invocation("c1")).await.unwrap().content(), "late");
    assert_eq!(t0.elapsed(), Duration::from_millis(500));
    assert!(tool.call(invocation("c2")).await.is_err());
    assert_eq!(t0.elapsed(), Duration::from_millis(750));
}

#[tokio::test]
async fn a_panic_step_panics_inside_the_future() {
    let tool = ScriptedTool::named("t", vec![ToolStep::panic("boom")]).unwrap();
    let handle = tool.handle();
    let future = tool.call(invocation("c1"));
    // Building the future does not panic; running it does.
    let joined = tokio::spawn(future).await;
    let panic = joined.unwrap_err().into_panic();
    assert_eq!(
        panic.downcast_ref::<String>().map(String::as_str),
        Some("boom")
    );
    assert_eq!(
        (handle.panicked(), handle.cancelled(), handle.completed()),
        (1, 0, 0)
    );
}

#[tokio::test(start_paused = true)]
async fn a_hang_outlasts_any_timeout_and_its_drop_is_a_cancellation() {
    let tool = ScriptedTool::named("t", vec![ToolStep::hang(), ToolStep::ok(json!(1))]).unwrap();
    let handle = tool.handle();
    let t0 = Instant::now();
    let timed_out =
        tokio::time::timeout(Duration::from_secs(3600), tool.call(invocation("c1"))).await;
    assert!(timed_out.is_err());
    assert_eq!(t0.elapsed(), Duration::from_secs(3600));
    assert_eq!((handle.cancelled(), handle.completed()), (1, 0));
    // The next step is unaffected.
    assert_eq!(tool.call(invocation("c2")).await.unwrap().content(), "1");
    // And a hang left alone ends (in an error) only after HANG.
    let tool = ScriptedTool::named("t", vec![ToolStep::hang()]).unwrap();
    let t0 = Instant::now();
    assert!(tool.call(invocation("c3")).await.is_err());
    assert_eq!(t0.elapsed(), HANG);
}

#[tokio::test(start_paused = true)]
async fn cancelling_a_running_tool_is_counted_and_awaitable() {
    let tool =
        Arc::new(ScriptedTool::named("t", vec![ToolStep::ok(json!(1)).after_ms(10_000)]).unwrap());
    let handle = tool.handle();
    let running = {
        let tool = Arc::clone(&tool);
        tokio::spawn(async move { tool.call(invocation("c1")).await })
    };
    handle.wait_called(1).await;
    running.abort();
    handle.wait_cancelled(1).await;
    assert_eq!(
        (handle.cancelled(), handle.completed(), handle.remaining()),
        (1, 0, 0)
    );
}

#[test]
fn policy_and_definition() {
    let tool = ScriptedTool::named("rm_rf", vec![]).unwrap();
    assert_eq!(tool.policy(), ToolPolicy::default());
    assert_eq!(tool.definition().name().as_str(), "rm_rf");
    assert_eq!(
        tool.definition().parameters().as_str(),
        r#"{"type":"object"}"#
    );
    let policy = ToolPolicy {
        on_failure: OnToolFailure::EndRun,
        requires_approval: true,
        timeout: Some(Duration::from_secs(1)),
        idempotent: true,
    };
    let tool = tool.with_policy(policy.clone());
    assert_eq!(tool.policy(), policy);
    assert!(ScriptedTool::named("no spaces", vec![]).is_err());
    let _: Arc<dyn Tool> = Arc::new(tool);
}

#[test]
fn a_scenario_tool_script_loads() {
    let script: Vec<ToolStep> = serde_json::from_str(
        r#"[{"ok": {"temp_c": 3}},
            {"error": {"message": "timed out", "outcome": "uncertain", "retry": "retryable"}},
            {"delay_ms": 500, "ok": "late"}]"#,
    )
    .unwrap();
    let tool = ScriptedTool::named("get_weather", script).unwrap();
    assert_eq!(tool.handle().remaining(), 3);
}

/// `ToolStep::panic_sync` panics in `Tool::call` itself, before a future
/// exists; the invocation is kept and counted as panicked, never as
/// cancelled; the next step is unaffected.
#[tokio::test]
async fn a_panic_sync_step_panics_in_call_itself() {
    let tool = ScriptedTool::named(
        "t",
        vec![
            ToolStep::panic_sync("tool call bug").after_ms(1_000),
            ToolStep::ok(json!("fine")),
        ],
    )
    .unwrap();
    let handle = tool.handle();
    let caught =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| tool.call(invocation("c1"))));
    let payload = caught.err().expect("call itself panics");
    assert_eq!(
        payload.downcast_ref::<String>().map(String::as_str),
        Some("tool call bug")
    );
    assert_eq!(
        (
            handle.calls().len(),
            handle.panicked(),
            handle.cancelled(),
            handle.completed()
        ),
        (1, 1, 0, 0)
    );
    assert_eq!(tool.call(invocation("c2")).await, Ok("fine".into()));
    assert_eq!((handle.calls().len(), handle.completed()), (2, 1));
}

/// The synchronous panic has no scenario form: serializing it is an error,
/// and `{"panic": ...}` in JSON stays the asynchronous one.
#[test]
fn panic_sync_has_no_wire_form() {
    let error = serde_json::to_string(&ToolStep::panic_sync("x")).unwrap_err();
    assert!(error.to_string().contains("no scenario form"), "{error}");
    let step: ToolStep = serde_json::from_str(r#"{"panic": "x"}"#).unwrap();
    assert_eq!(step, ToolStep::panic("x"));
    assert!(serde_json::from_str::<ToolStep>(r#"{"panic_sync": "x"}"#).is_err());
}

/// Rule `script.known_value`: a scripted tool error's outcome and retry are
/// values this version knows; an unknown one is refused at load.
#[test]
fn unknown_tool_outcome_or_retry_is_refused_at_load() {
    for text in [
        r#"{"message": "m", "outcome": "maybe"}"#,
        r#"{"message": "m", "retry": "later"}"#,
    ] {
        let e = serde_json::from_str::<ScriptToolError>(text)
            .unwrap_err()
            .to_string();
        assert!(e.contains("rule script.known_value"), "{e}");
    }
    let ok: ScriptToolError =
        serde_json::from_str(r#"{"message": "m", "outcome": "uncertain"}"#).unwrap();
    assert_eq!((ok.outcome, ok.retry), (Some(ToolOutcome::Uncertain), None));
}
