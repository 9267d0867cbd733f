//! Proptest strategies for Keel values, streams, scripts and event logs.
//!
//! Every strategy builds its values through the public constructors, so
//! each value it yields satisfies the constructor's rules (malformed
//! *streams* are deliberate and documented per strategy). They shrink the
//! way proptest's collection and `prop_oneof!` strategies do.
//!
//! ```
//! use keel_testkit::strategies;
//! use proptest::prelude::*;
//! use proptest::test_runner::TestRunner;
//!
//! let mut runner = TestRunner::deterministic();
//! runner.run(&strategies::event_run(), |payloads| {
//!     // Every generated run commits cleanly into a log ...
//!     let log = keel_eventlog::RunLog::new(
//!         keel_message::RunId::parse("run_1").expect("valid"),
//!         keel_eventlog::LogConfig::default(),
//!         std::sync::Arc::new(keel_testkit::ManualClock::default()),
//!     ).expect("default config");
//!     let events = payloads.iter().map(|p| log.commit(p).expect("valid run")).collect::<Vec<_>>();
//!     // ... and passes the lifecycle checker.
//!     prop_assert!(keel_testkit::check_lifecycle(&events).is_ok());
//!     Ok(())
//! })?;
//! # Ok::<(), proptest::test_runner::TestError<Vec<keel_eventlog::Payload>>>(())
//! ```

use crate::interaction::{InteractionStep, ScriptedInteractions};
use crate::observer::Fault;
use crate::provider::ScriptedProvider;
use crate::script::ScriptItem;
use crate::tool::{ScriptedTool, ToolStep};
use keel_engine::{OnToolFailure, ToolPolicy};
use keel_eventlog::{
    Cause, ErrorText, Extra, InteractionCompleted, InteractionFailed, InteractionRef,
    InteractionStarted, LifecycleTracker, ModelCompleted, ModelFailed, ModelRef, ModelStarted,
    Payload, ProblemRecord, RunCancelled, RunCompleted, RunFailed, RunStarted, ScopeKey, TextDelta,
    ToolCall, ToolCompleted, ToolFailed, ToolOutcome, ToolRef, ToolRetry, TurnFailed, TurnRef,
};
use keel_message::{
    CallId, CanonicalJson, InteractionId, Message, MessageId, ModelName, ModelRequest, OperationId,
    Part, Role, ToolDefinition, ToolName,
};
use keel_stream::{
    FinishReason, ProblemKind, RawCompletion, RawItem, RawProblem, RawUsage, RetryPosition, Usage,
};
use proptest::collection::{btree_map, btree_set, vec};
use proptest::option;
use proptest::prelude::*;
use proptest::sample::{Index, select};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// Non-empty printable text (no control or format characters), up to 24
/// chars, multi-byte characters included.
fn text() -> impl Strategy<Value = String> {
    "\\PC{1,24}"
}

fn id_text() -> impl Strategy<Value = String> {
    "[A-Za-z0-9_]{1,12}"
}

fn tool_name() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9_]{0,15}"
}

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i32>().prop_map(Value::from),
        "\\PC{0,12}".prop_map(Value::from),
    ]
}

/// A JSON object with up to three members of simple values.
fn json_object() -> impl Strategy<Value = Value> {
    btree_map("[a-z_]{1,8}", json_leaf(), 0..4)
        .prop_map(|members| Value::Object(members.into_iter().collect()))
}

fn canonical_args() -> impl Strategy<Value = CanonicalJson> {
    json_object().prop_filter_map("canonical JSON object", |v| {
        CanonicalJson::from_value(&v).ok()
    })
}

/// One valid [`Message`]: a `system`, `user` or `assistant` text message,
/// an `assistant` message with tool calls (and maybe text), or a `tool`
/// message of results. Message and call ids are random, so a set of
/// messages drawn independently need not form a valid history: use
/// [`history`] for that.
///
/// ```
/// use proptest::prelude::*;
/// use proptest::strategy::ValueTree;
/// let mut runner = proptest::test_runner::TestRunner::deterministic();
/// let message = keel_testkit::strategies::message().new_tree(&mut runner).expect("tree").current();
/// assert!(!message.parts().is_empty());
/// ```
pub fn message() -> impl Strategy<Value = Message> {
    let role = select(vec![Role::System, Role::User, Role::Assistant]);
    let texty = (id_text(), role, vec(text(), 1..3)).prop_filter_map(
        "valid text message",
        |(id, role, texts)| {
            let parts = texts
                .iter()
                .map(|t| Part::text(t))
                .collect::<Result<Vec<_>, _>>()
                .ok()?;
            Message::new(MessageId::parse(&format!("m_{id}")).ok()?, role, parts).ok()
        },
    );
    let calls = (
        id_text(),
        vec(text(), 0..2),
        vec((tool_name(), canonical_args()), 1..4),
    )
        .prop_filter_map("valid assistant message", |(id, texts, calls)| {
            let mut parts = Vec::new();
            for t in &texts {
                parts.push(Part::text(t).ok()?);
            }
            for (n, (name, args)) in calls.into_iter().enumerate() {
                parts.push(
                    Part::tool_call(
                        CallId::parse(&format!("{id}_c{n}")).ok()?,
                        ToolName::parse(&name).ok()?,
                        args,
                    )
                    .ok()?,
                );
            }
            Message::new(
                MessageId::parse(&format!("m_{id}")).ok()?,
                Role::Assistant,
                parts,
            )
            .ok()
        });
    let results = (id_text(), vec(("\\PC{0,24}", any::<bool>()), 1..3)).prop_filter_map(
        "valid tool message",
        |(id, results)| {
            let mut parts = Vec::new();
            for (n, (content, is_error)) in results.iter().enumerate() {
                parts.push(
                    Part::tool_result(
                        CallId::parse(&format!("{id}_c{n}")).ok()?,
                        content,
                        *is_error,
                    )
                    .ok()?,
                );
            }
            Message::new(
                MessageId::parse(&format!("m_{id}")).ok()?,
                Role::Tool,
                parts,
            )
            .ok()
        },
    );
    prop_oneof![3 => texty, 2 => calls, 1 => results]
}

/// One user → assistant (→ tool results) exchange, before ids are assigned.
type Exchange = (
    String,
    Vec<String>,
    Vec<(String, CanonicalJson, String, bool)>,
);

fn exchange() -> impl Strategy<Value = Exchange> {
    (
        text(),
        vec(text(), 0..2),
        vec(
            (tool_name(), canonical_args(), "\\PC{0,24}", any::<bool>()),
            0..3,
        ),
    )
}

/// A valid request history: an optional system message, then one to four
/// exchanges of a user message, an assistant reply (text and/or tool
/// calls) and, when it called tools, a tool message answering every call.
/// Message ids `m1`, `m2`, … and call ids are unique, so any history it
/// yields is accepted by [`ModelRequest::new`].
///
/// ```
/// use proptest::strategy::{Strategy, ValueTree};
/// let mut runner = proptest::test_runner::TestRunner::deterministic();
/// let history = keel_testkit::strategies::history().new_tree(&mut runner).expect("tree").current();
/// assert!(history.len() >= 2);
/// ```
pub fn history() -> impl Strategy<Value = Vec<Message>> {
    (option::weighted(0.3, text()), vec(exchange(), 1..5))
        .prop_filter_map("valid history", |(system, exchanges)| {
            build_history(system, exchanges)
        })
}

fn build_history(system: Option<String>, exchanges: Vec<Exchange>) -> Option<Vec<Message>> {
    let mut out = Vec::new();
    let mut next_id = 0u32;
    let mut id = || {
        next_id += 1;
        MessageId::parse(&format!("m{next_id}"))
    };
    if let Some(system) = system {
        out.push(Message::text(id().ok()?, Role::System, &system).ok()?);
    }
    for (x, (user, reply, calls)) in exchanges.into_iter().enumerate() {
        out.push(Message::text(id().ok()?, Role::User, &user).ok()?);
        let mut parts = Vec::new();
        for t in &reply {
            parts.push(Part::text(t).ok()?);
        }
        let mut results = Vec::new();
        for (n, (name, args, content, is_error)) in calls.into_iter().enumerate() {
            let call_id = CallId::parse(&format!("call_{x}_{n}")).ok()?;
            parts.push(Part::tool_call(call_id.clone(), ToolName::parse(&name).ok()?, args).ok()?);
            results.push(Part::tool_result(call_id, &content, is_error).ok()?);
        }
        if parts.is_empty() {
            parts.push(Part::text("ok").ok()?);
        }
        out.push(Message::new(id().ok()?, Role::Assistant, parts).ok()?);
        if !results.is_empty() {
            out.push(Message::new(id().ok()?, Role::Tool, results).ok()?);
        }
    }
    Some(out)
}

/// A valid [`ModelRequest`]: operation id `op_<n>`, model `scripted-1`, a
/// [`history`], and up to three tool definitions with distinct names.
///
/// ```
/// use proptest::strategy::{Strategy, ValueTree};
/// let mut runner = proptest::test_runner::TestRunner::deterministic();
/// let request = keel_testkit::strategies::request().new_tree(&mut runner).expect("tree").current();
/// assert_eq!(request.model().as_str(), "scripted-1");
/// ```
pub fn request() -> impl Strategy<Value = ModelRequest> {
    (1u64..1000, history(), btree_set(tool_name(), 0..3)).prop_filter_map(
        "valid request",
        |(n, history, tools)| {
            let tools = tools
                .iter()
                .map(|name| {
                    ToolDefinition::new(
                        ToolName::parse(name).ok()?,
                        "generated tool",
                        CanonicalJson::parse(r#"{"type":"object"}"#).ok()?,
                    )
                    .ok()
                })
                .collect::<Option<Vec<_>>>()?;
            ModelRequest::new(
                OperationId::parse(&format!("op_{n}")).ok()?,
                ModelName::parse("scripted-1").ok()?,
                Arc::from(history),
                Arc::from(tools),
            )
            .ok()
        },
    )
}

/// A non-terminal raw item, valid or not: mostly valid text deltas and
/// tool calls, sometimes an empty delta, an invalid call id or tool name,
/// or arguments that are not JSON, not an object, or have a duplicate key.
fn body_item() -> impl Strategy<Value = RawItem> {
    let valid_call = (id_text(), tool_name(), json_object())
        .prop_map(|(id, name, args)| RawItem::tool_call(id, name, args.to_string()));
    let bad_call = (id_text(), tool_name(), 0u8..5).prop_map(|(id, name, how)| match how {
        0 => RawItem::tool_call("bad id!", name, "{}"),
        1 => RawItem::tool_call(id, "no spaces allowed", "{}"),
        2 => RawItem::tool_call(id, name, "{not json"),
        3 => RawItem::tool_call(id, name, "[1,2]"),
        _ => RawItem::tool_call(id, name, r#"{"a":1,"a":2}"#),
    });
    prop_oneof![
        6 => text().prop_map(RawItem::TextDelta),
        1 => Just(RawItem::text("")),
        4 => valid_call,
        2 => bad_call,
    ]
}

fn finish() -> impl Strategy<Value = FinishReason> {
    select(vec![
        FinishReason::Stop,
        FinishReason::ToolCalls,
        FinishReason::Length,
        FinishReason::ContentFilter,
    ])
}

fn problem_kind() -> impl Strategy<Value = ProblemKind> {
    // `cancelled` is the host's word for a dropped call, not a provider's.
    select(
        ProblemKind::ALL
            .into_iter()
            .filter(|k| *k != ProblemKind::Cancelled)
            .collect::<Vec<_>>(),
    )
}

/// A terminal raw item: a completion (any finish, usage absent, normal or
/// overflowing, metadata absent, allowlistable or not an object) or a
/// failure (any kind but `cancelled`, maybe a retry-after).
fn terminal_item() -> impl Strategy<Value = RawItem> {
    let usage = prop_oneof![
        1 => Just(None),
        3 => (0u64..10_000, 0u64..10_000).prop_map(|(i, o)| Some(RawUsage { input_tokens: i, output_tokens: o })),
        1 => Just(Some(RawUsage { input_tokens: u64::MAX, output_tokens: 1 })),
    ];
    let metadata = prop_oneof![
        3 => Just(None),
        2 => id_text().prop_map(|id| Some(serde_json::json!({"scripted": {"request_id": id}}))),
        1 => Just(Some(Value::String("not an object".into()))),
    ];
    let complete = (finish(), usage, metadata).prop_map(|(finish, usage, metadata)| {
        RawItem::Completion(RawCompletion {
            finish,
            usage,
            metadata,
        })
    });
    let fail = (
        problem_kind(),
        text(),
        any::<bool>(),
        option::weighted(0.2, 0u64..60_000),
    )
        .prop_map(|(kind, message, retryable, after)| {
            RawItem::Failure(RawProblem {
                kind,
                message,
                retryable,
                retry_after: after.map(Duration::from_millis),
            })
        });
    prop_oneof![3 => complete, 2 => fail]
}

/// One raw stream item, valid and malformed mixed: text deltas (some
/// empty), tool calls (some with invalid ids, names or arguments),
/// completions (some with overflowing usage or non-object metadata) and
/// failures.
///
/// ```
/// use proptest::strategy::{Strategy, ValueTree};
/// let mut runner = proptest::test_runner::TestRunner::deterministic();
/// let _item: keel_stream::RawItem = keel_testkit::strategies::raw_item().new_tree(&mut runner).expect("tree").current();
/// ```
pub fn raw_item() -> impl Strategy<Value = RawItem> {
    prop_oneof![3 => body_item(), 1 => terminal_item()]
}

/// A raw stream: up to eight body items (see [`raw_item`]), then usually a
/// terminal (completion or failure) but sometimes none, then sometimes a
/// few more items after it. Run it through a
/// [`StreamValidator`](keel_stream::StreamValidator) to learn which of
/// these a host must accept.
///
/// ```
/// use proptest::strategy::{Strategy, ValueTree};
/// let mut runner = proptest::test_runner::TestRunner::deterministic();
/// let stream = keel_testkit::strategies::raw_stream().new_tree(&mut runner).expect("tree").current();
/// assert!(stream.len() <= 8 + 1 + 2);
/// ```
pub fn raw_stream() -> impl Strategy<Value = Vec<RawItem>> {
    (
        vec(body_item(), 0..8),
        prop_oneof![1 => Just(None), 5 => terminal_item().prop_map(Some)],
        prop_oneof![4 => Just(Vec::new()), 1 => vec(raw_item(), 1..3)],
    )
        .prop_map(|(mut items, terminal, after)| {
            items.extend(terminal);
            items.extend(after);
            items
        })
}

/// One scripted model call (`Vec<ScriptItem>`), valid and malformed mixed:
/// [`raw_stream`]-like items with `delay_ms` items (0–49 ms) sprinkled
/// before some of them, ending with a terminal, a `disconnect`, or nothing,
/// and sometimes items after the end.
///
/// ```
/// use proptest::strategy::{Strategy, ValueTree};
/// let mut runner = proptest::test_runner::TestRunner::deterministic();
/// let call = keel_testkit::strategies::script_call().new_tree(&mut runner).expect("tree").current();
/// let provider = keel_testkit::ScriptedProvider::new(vec![call]);
/// assert_eq!(provider.handle().remaining(), 1);
/// ```
pub fn script_call() -> impl Strategy<Value = Vec<ScriptItem>> {
    let delayed = |item: BoxedStrategy<RawItem>| {
        (option::weighted(0.3, 0u64..50), item).prop_map(|(delay, raw)| {
            let mut out: Vec<ScriptItem> = delay.map(ScriptItem::DelayMs).into_iter().collect();
            out.push(ScriptItem::from_raw(&raw));
            out
        })
    };
    let end = prop_oneof![
        4 => delayed(terminal_item().boxed()),
        1 => Just(vec![ScriptItem::Disconnect]),
        1 => Just(Vec::new()),
    ];
    (
        vec(delayed(body_item().boxed()), 0..6),
        end,
        prop_oneof![4 => Just(Vec::new()), 1 => vec(raw_item(), 1..3)],
    )
        .prop_map(|(body, end, after)| {
            let mut out: Vec<ScriptItem> = body.into_iter().flatten().collect();
            out.extend(end);
            out.extend(after.iter().map(ScriptItem::from_raw));
            out
        })
}

/// A scripted run for an engine: consistent provider calls and tool
/// scripts. See [`scripted_run`].
///
/// ```
/// use keel_testkit::strategies::ScriptedRun;
/// let run = ScriptedRun { calls: vec![], tools: vec![("alpha".into(), vec![])] };
/// assert_eq!(run.scripted_tools().len(), 1);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptedRun {
    /// The provider's calls, in order.
    pub calls: Vec<Vec<ScriptItem>>,
    /// Each tool's name and script.
    pub tools: Vec<(String, Vec<ToolStep>)>,
}

impl ScriptedRun {
    /// A [`ScriptedProvider`] for [`calls`](Self::calls).
    pub fn provider(&self) -> ScriptedProvider {
        ScriptedProvider::new(self.calls.clone())
    }

    /// One [`ScriptedTool`] per entry of [`tools`](Self::tools).
    pub fn scripted_tools(&self) -> Vec<ScriptedTool> {
        self.tools
            .iter()
            .filter_map(|(name, script)| ScriptedTool::named(name, script.clone()).ok())
            .collect()
    }
}

/// The tools [`scripted_run`] calls.
///
/// ```
/// assert_eq!(keel_testkit::strategies::SCRIPTED_RUN_TOOLS, ["alpha", "beta", "gamma"]);
/// ```
pub const SCRIPTED_RUN_TOOLS: [&str; 3] = ["alpha", "beta", "gamma"];

/// A well-formed scripted agent run: one to four turns. Every turn but the
/// last streams some text and one to three tool calls (tools from
/// [`SCRIPTED_RUN_TOOLS`], call ids `t<turn>_c<n>`) and completes with
/// `tool_calls`; the last streams text and completes with `stop`. Some
/// turns are preceded by an extra call that fails `overloaded`, retryable
/// (an engine that retries consumes it; one that doesn't fails the run).
/// Calls may start with a delay. Each tool's script has one step per call
/// to it: mostly `ok`, some typed errors, some delayed, and rarely a
/// `panic` or a `hang`. Some calls start with reasoning: a part signed,
/// unsigned (closed by the next item) or redacted.
///
/// Whatever an engine's limits, policies and cancellation do with it, the
/// resulting log must be lifecycle-valid: that is the property to test.
///
/// ```
/// use proptest::strategy::{Strategy, ValueTree};
/// let mut runner = proptest::test_runner::TestRunner::deterministic();
/// let run = keel_testkit::strategies::scripted_run().new_tree(&mut runner).expect("tree").current();
/// assert!(!run.calls.is_empty());
/// assert_eq!(run.scripted_tools().len(), 3);
/// ```
pub fn scripted_run() -> impl Strategy<Value = ScriptedRun> {
    let call = (
        0usize..SCRIPTED_RUN_TOOLS.len(),
        prop_oneof![12 => Just(0u8), 4 => Just(1u8), 4 => Just(2u8), 1 => Just(3u8), 1 => Just(4u8)],
        0u64..500,
    );
    let reasoning = || option::weighted(0.4, (vec(text(), 1..3), 0u8..3));
    let turn = (
        prop::bool::weighted(0.15),
        option::weighted(0.3, 0u64..300),
        reasoning(),
        vec(text(), 0..3),
        vec(call, 1..4),
    );
    (
        vec(turn, 0..3),
        option::weighted(0.3, 0u64..300),
        reasoning(),
        vec(text(), 1..3),
    )
        .prop_map(|(turns, last_delay, last_reasoning, last_texts)| {
            let mut calls = Vec::new();
            let mut tools: Vec<(String, Vec<ToolStep>)> = SCRIPTED_RUN_TOOLS
                .iter()
                .map(|n| ((*n).to_owned(), Vec::new()))
                .collect();
            for (t, (fail_first, delay, thinking, texts, tool_calls)) in
                turns.into_iter().enumerate()
            {
                if fail_first {
                    calls.push(vec![ScriptItem::fail(
                        ProblemKind::Overloaded,
                        "busy",
                        true,
                    )]);
                }
                let mut items: Vec<ScriptItem> =
                    delay.map(ScriptItem::DelayMs).into_iter().collect();
                items.extend(reasoning_items(thinking));
                items.extend(texts.into_iter().map(ScriptItem::Text));
                for (n, (tool, step, ms)) in tool_calls.into_iter().enumerate() {
                    let name = SCRIPTED_RUN_TOOLS[tool % SCRIPTED_RUN_TOOLS.len()];
                    items.push(ScriptItem::tool_call(
                        format!("t{}_c{n}", t + 1),
                        name,
                        serde_json::json!({"n": n}),
                    ));
                    let step = match step {
                        0 => ToolStep::ok(serde_json::json!({"turn": t + 1, "n": n})),
                        1 => ToolStep::typed_error(
                            "scripted",
                            ToolOutcome::Definitive,
                            ToolRetry::NotRetryable,
                        ),
                        2 => ToolStep::ok(serde_json::json!("late")).after_ms(ms),
                        3 => ToolStep::panic("scripted tool panic"),
                        _ => ToolStep::hang(),
                    };
                    if let Some((_, script)) = tools.get_mut(tool % SCRIPTED_RUN_TOOLS.len()) {
                        script.push(step);
                    }
                }
                items.push(ScriptItem::complete_with_usage(
                    FinishReason::ToolCalls,
                    10,
                    5,
                ));
                calls.push(items);
            }
            let mut last: Vec<ScriptItem> =
                last_delay.map(ScriptItem::DelayMs).into_iter().collect();
            last.extend(reasoning_items(last_reasoning));
            last.extend(last_texts.into_iter().map(ScriptItem::Text));
            last.push(ScriptItem::complete_with_usage(FinishReason::Stop, 10, 5));
            calls.push(last);
            ScriptedRun { calls, tools }
        })
}

/// A call's reasoning: deltas then a signature (`0`), deltas left open
/// for the next item to close (`1`), or a redacted part (`2`).
fn reasoning_items(reasoning: Option<(Vec<String>, u8)>) -> Vec<ScriptItem> {
    let Some((texts, form)) = reasoning else {
        return Vec::new();
    };
    if form == 2 {
        return vec![ScriptItem::redacted_reasoning("cmVkYWN0ZWQ=")];
    }
    let mut items: Vec<ScriptItem> = texts.into_iter().map(ScriptItem::Reasoning).collect();
    if form == 0 {
        items.push(ScriptItem::reasoning_signature("EqQBCgIYAhIMsig"));
    }
    items
}

/// A random [`Fault`] for a [`FaultyObserver`](crate::FaultyObserver):
/// failing, hanging or panicking on an event among the first 40 (or
/// failing from there on), or acknowledging every event after up to 50 ms.
///
/// ```
/// use proptest::strategy::{Strategy, ValueTree};
/// let mut runner = proptest::test_runner::TestRunner::deterministic();
/// let fault = keel_testkit::strategies::fault().new_tree(&mut runner).expect("tree").current();
/// let _observer = keel_testkit::FaultyObserver::new(fault);
/// ```
pub fn fault() -> impl Strategy<Value = Fault> {
    prop_oneof![
        (1u64..40).prop_map(Fault::FailOn),
        (1u64..40).prop_map(Fault::FailFrom),
        (1u64..40).prop_map(Fault::HangOn),
        (1u64..40).prop_map(Fault::PanicOn),
        (0u64..50).prop_map(|ms| Fault::Slow(Duration::from_millis(ms))),
    ]
}

/// Every [`Fault`] kind: what [`fault`] draws, and one time in six
/// [`Fault::PanicSyncOn`] (a panic in `observe` itself, before any future
/// exists) on an event among the first 40.
///
/// ```
/// use keel_testkit::Fault;
/// use proptest::strategy::{Strategy, ValueTree};
/// let mut runner = proptest::test_runner::TestRunner::deterministic();
/// let faults: Vec<Fault> = (0..100)
///     .map(|_| keel_testkit::strategies::any_fault().new_tree(&mut runner).expect("tree").current())
///     .collect();
/// assert!(faults.iter().any(|f| matches!(f, Fault::PanicSyncOn(_))));
/// assert!(faults.iter().any(|f| matches!(f, Fault::PanicOn(_))));
/// ```
pub fn any_fault() -> impl Strategy<Value = Fault> {
    prop_oneof![
        5 => fault(),
        1 => (1u64..40).prop_map(Fault::PanicSyncOn),
    ]
}

/// One scripted answer to an approval, for a [`ScriptedInteractions`]:
/// mostly `approve`, some `deny`, `fail`, `pending` (never answers, so
/// only the approval timeout, the end of the run or a cancellation closes
/// it), `panic` (while polled) and `panic_sync` (in `handle` itself). A
/// third of them wait up to 299 ms first.
///
/// ```
/// use keel_testkit::InteractionAction;
/// use proptest::strategy::{Strategy, ValueTree};
/// let mut runner = proptest::test_runner::TestRunner::deterministic();
/// let steps: Vec<_> = (0..200)
///     .map(|_| keel_testkit::strategies::interaction_step().new_tree(&mut runner).expect("tree").current())
///     .collect();
/// assert!(steps.iter().any(|s| s.action == InteractionAction::Pending));
/// assert!(steps.iter().any(|s| matches!(s.action, InteractionAction::PanicSync(_))));
/// assert!(steps.iter().all(|s| s.delay_ms.is_none_or(|ms| ms < 300)));
/// ```
pub fn interaction_step() -> impl Strategy<Value = InteractionStep> {
    let step = prop_oneof![
        8 => Just(InteractionStep::approve()),
        3 => Just(InteractionStep::deny()),
        2 => Just(InteractionStep::fail("scripted refusal")),
        3 => Just(InteractionStep::pending()),
        1 => Just(InteractionStep::panic("scripted handler panic")),
        1 => Just(InteractionStep::panic_sync("scripted handler panic")),
    ];
    (step, option::weighted(0.3, 0u64..300)).prop_map(|(step, delay)| match delay {
        Some(ms) => step.after_ms(ms),
        None => step,
    })
}

/// A [`ToolPolicy`]: half the tools need approval, about a third end the
/// run when they fail ([`OnToolFailure::EndRun`]), and a
/// fifth have their own timeout (1–999 ms) instead of the engine's.
///
/// ```
/// use proptest::strategy::{Strategy, ValueTree};
/// let mut runner = proptest::test_runner::TestRunner::deterministic();
/// let policies: Vec<_> = (0..100)
///     .map(|_| keel_testkit::strategies::tool_policy().new_tree(&mut runner).expect("tree").current())
///     .collect();
/// assert!(policies.iter().any(|p| p.requires_approval));
/// assert!(policies.iter().any(|p| p.on_failure == keel_engine::OnToolFailure::EndRun));
/// ```
pub fn tool_policy() -> impl Strategy<Value = ToolPolicy> {
    (
        prop::bool::weighted(0.5),
        prop::bool::weighted(0.3),
        option::weighted(0.2, 1u64..1000),
    )
        .prop_map(|(requires_approval, end_run, timeout)| ToolPolicy {
            on_failure: if end_run {
                OnToolFailure::EndRun
            } else {
                OnToolFailure::FeedBack
            },
            requires_approval,
            timeout: timeout.map(Duration::from_millis),
            idempotent: false,
        })
}

/// A tool step that goes wrong: a panic while polled ([`ToolStep::panic`])
/// or in `call` itself ([`ToolStep::panic_sync`]), an untyped error (now,
/// or after up to 499 ms), or a [`hang`](ToolStep::hang).
///
/// ```
/// use keel_testkit::ToolAction;
/// use proptest::strategy::{Strategy, ValueTree};
/// let mut runner = proptest::test_runner::TestRunner::deterministic();
/// let steps: Vec<_> = (0..100)
///     .map(|_| keel_testkit::strategies::hard_tool_step().new_tree(&mut runner).expect("tree").current())
///     .collect();
/// assert!(steps.iter().all(|s| !matches!(s.action, ToolAction::Ok(_))));
/// assert!(steps.iter().any(|s| matches!(s.action, ToolAction::PanicSync(_))));
/// ```
pub fn hard_tool_step() -> impl Strategy<Value = ToolStep> {
    prop_oneof![
        3 => Just(ToolStep::panic_sync("scripted tool panic")),
        3 => Just(ToolStep::panic("scripted tool panic")),
        2 => Just(ToolStep::error("scripted failure")),
        1 => Just(ToolStep::hang()),
        2 => (0u64..500).prop_map(|ms| ToolStep::error("late failure").after_ms(ms)),
    ]
}

/// An `approval_timeout` for `EngineLimits`: half the time short (1–399
/// ms, so pending or slow approvals time out), half the time the default
/// 10 minutes (so the end of the run or a cancellation closes them first).
///
/// ```
/// use proptest::strategy::{Strategy, ValueTree};
/// use std::time::Duration;
/// let mut runner = proptest::test_runner::TestRunner::deterministic();
/// let timeout = keel_testkit::strategies::approval_timeout().new_tree(&mut runner).expect("tree").current();
/// assert!(timeout < Duration::from_millis(400) || timeout == Duration::from_secs(600));
/// ```
pub fn approval_timeout() -> impl Strategy<Value = Duration> {
    prop_oneof![
        (1u64..400).prop_map(Duration::from_millis),
        Just(Duration::from_secs(600)),
    ]
}

/// A [`ScriptedRun`] with the hard cases added, for an engine with an
/// interaction handler: see [`faulty_run`].
///
/// ```
/// use keel_testkit::strategies::{FaultyRun, ScriptedRun};
/// use std::time::Duration;
/// let run = FaultyRun {
///     run: ScriptedRun { calls: vec![], tools: vec![("alpha".into(), vec![])] },
///     policies: vec![keel_engine::ToolPolicy { requires_approval: true, ..Default::default() }],
///     start_panics: vec![1],
///     interactions: vec![keel_testkit::InteractionStep::pending()],
///     approval_timeout: Duration::from_millis(5),
/// };
/// assert!(run.needs_approval());
/// assert_eq!(run.scripted_tools().len(), 1);
/// assert_eq!(run.interactions().interactions_handle().remaining(), 1);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct FaultyRun {
    /// The provider's calls (a [`ScriptItem::Panic`] may sit anywhere in
    /// one of them) and each tool's script (hard steps mixed in).
    pub run: ScriptedRun,
    /// One policy per entry of the run's [`tools`](ScriptedRun::tools), in
    /// order; a missing one is the default.
    pub policies: Vec<ToolPolicy>,
    /// The provider's `start` calls (1-based) that panic synchronously
    /// ([`ScriptedProvider::with_start_panic`]).
    pub start_panics: Vec<usize>,
    /// The interaction handler's script, in the order it is asked.
    pub interactions: Vec<InteractionStep>,
    /// The `EngineLimits::approval_timeout` to run it under.
    pub approval_timeout: Duration,
}

impl FaultyRun {
    /// A [`ScriptedProvider`] for the calls, panicking on the
    /// [`start_panics`](Self::start_panics).
    pub fn provider(&self) -> ScriptedProvider {
        self.start_panics
            .iter()
            .fold(self.run.provider(), |provider, n| {
                provider.with_start_panic(*n)
            })
    }

    /// One [`ScriptedTool`] per tool, under its policy.
    pub fn scripted_tools(&self) -> Vec<ScriptedTool> {
        self.run
            .tools
            .iter()
            .enumerate()
            .filter_map(|(i, (name, script))| {
                let policy = self.policies.get(i).cloned().unwrap_or_default();
                ScriptedTool::named(name, script.clone())
                    .ok()
                    .map(|tool| tool.with_policy(policy))
            })
            .collect()
    }

    /// A [`ScriptedInteractions`] playing [`interactions`](Self::interactions).
    pub fn interactions(&self) -> ScriptedInteractions {
        ScriptedInteractions::new(self.interactions.clone())
    }

    /// Whether any tool requires approval.
    pub fn needs_approval(&self) -> bool {
        self.policies.iter().any(|p| p.requires_approval)
    }
}

/// A [`scripted_run`] made hard, for the engine's lifecycle property:
///
/// - every tool gets a random [`tool_policy`]: some need approval, some
///   end the run when they fail, some have a short timeout of their own;
/// - up to two tool steps become a [`hard_tool_step`] (panics in `call`
///   or while polled, errors, hangs), beside the rare `panic` and `hang`
///   that [`scripted_run`] already draws;
/// - in about 12% of runs a provider call panics while polled
///   ([`ScriptItem::Panic`] inserted at a random point of a random call),
///   and in about 12% a `start` panics synchronously
///   ([`start_panics`](FaultyRun::start_panics));
/// - approvals are answered by up to nine [`interaction_step`]s (then the
///   handler's script is exhausted and it fails), under an
///   [`approval_timeout`] that is short or long.
///
/// Whatever the engine makes of it (approvals left pending and timing
/// out, a failing `end_run` tool beside a pending approval, panics in
/// every extension point), the log must be lifecycle-valid.
///
/// ```
/// use proptest::strategy::{Strategy, ValueTree};
/// let mut runner = proptest::test_runner::TestRunner::deterministic();
/// let run = keel_testkit::strategies::faulty_run().new_tree(&mut runner).expect("tree").current();
/// assert_eq!(run.policies.len(), run.run.tools.len());
/// assert!(run.start_panics.iter().all(|n| (1..=run.run.calls.len()).contains(n)));
/// ```
pub fn faulty_run() -> impl Strategy<Value = FaultyRun> {
    (
        scripted_run(),
        vec(tool_policy(), SCRIPTED_RUN_TOOLS.len()),
        vec((any::<Index>(), hard_tool_step()), 0..3),
        option::weighted(0.12, (any::<Index>(), any::<Index>())),
        option::weighted(0.12, any::<Index>()),
        vec(interaction_step(), 0..10),
        approval_timeout(),
    )
        .prop_map(
            |(mut run, policies, hard, stream_panic, start_panic, interactions, timeout)| {
                for (at, step) in hard {
                    replace_step(&mut run.tools, at, step);
                }
                if let Some((call, at)) = stream_panic {
                    insert_panic(&mut run.calls, call, at);
                }
                let start_panics = start_panic
                    .filter(|_| !run.calls.is_empty())
                    .map(|n| n.index(run.calls.len()) + 1)
                    .into_iter()
                    .collect();
                FaultyRun {
                    run,
                    policies,
                    start_panics,
                    interactions,
                    approval_timeout: timeout,
                }
            },
        )
}

/// Replaces the step at `at` among all tools' steps (counted across the
/// tools in order) with `step`.
fn replace_step(tools: &mut [(String, Vec<ToolStep>)], at: Index, step: ToolStep) {
    let total: usize = tools.iter().map(|(_, script)| script.len()).sum();
    if total == 0 {
        return;
    }
    let mut n = at.index(total);
    for (_, script) in tools.iter_mut() {
        if let Some(slot) = script.get_mut(n) {
            *slot = step;
            return;
        }
        n -= script.len();
    }
}

/// Inserts a [`ScriptItem::Panic`] into call `call`, before item `at` (or
/// at its end).
fn insert_panic(calls: &mut [Vec<ScriptItem>], call: Index, at: Index) {
    if calls.is_empty() {
        return;
    }
    let n = call.index(calls.len());
    if let Some(items) = calls.get_mut(n) {
        let at = at.index(items.len() + 1);
        items.insert(at, ScriptItem::panic("scripted provider panic"));
    }
}

// ---- event_run ----

#[derive(Debug, Clone)]
struct AttemptShape {
    deltas: Vec<String>,
    failed: bool,
    kind: ProblemKind,
}

#[derive(Debug, Clone)]
struct ToolShape {
    /// 0: no approval; 1: approved; 2: denied; 3: the handler failed.
    approval: u8,
    fails: bool,
    typed: bool,
    order: u8,
    name: usize,
}

#[derive(Debug, Clone)]
struct TurnShape {
    retries: Vec<AttemptShape>,
    last: AttemptShape,
    tools: Vec<ToolShape>,
    tool_failure_ends: bool,
}

#[derive(Debug, Clone)]
struct RunShape {
    turns: Vec<TurnShape>,
    /// Where to cut the run short, and whether a required observer failure
    /// (rather than a cancellation) ends it.
    cut: Option<(Index, bool)>,
}

const EVENT_TOOLS: [&str; 3] = ["get_weather", "search_notes", "calc"];

fn attempt(fail_weight: f64) -> impl Strategy<Value = AttemptShape> {
    (
        vec(text(), 0..4),
        prop::bool::weighted(fail_weight),
        problem_kind(),
    )
        .prop_map(|(deltas, failed, kind)| AttemptShape {
            deltas,
            failed,
            kind,
        })
}

fn run_shape() -> impl Strategy<Value = RunShape> {
    let tool = (
        prop_oneof![6 => Just(0u8), 2 => Just(1u8), 1 => Just(2u8), 1 => Just(3u8)],
        prop::bool::weighted(0.25),
        any::<bool>(),
        any::<u8>(),
        0usize..EVENT_TOOLS.len(),
    )
        .prop_map(|(approval, fails, typed, order, name)| ToolShape {
            approval,
            fails,
            typed,
            order,
            name,
        });
    let turn = (
        vec(attempt(1.0), 0..2),
        attempt(0.15),
        vec(tool, 0..4),
        prop::bool::weighted(0.3),
    )
        .prop_map(|(retries, last, tools, tool_failure_ends)| TurnShape {
            retries,
            last,
            tools,
            tool_failure_ends,
        });
    (
        vec(turn, 1..5),
        option::weighted(0.3, (any::<Index>(), prop::bool::weighted(0.25))),
    )
        .prop_map(|(turns, cut)| RunShape { turns, cut })
}

/// A lifecycle-valid sequence of payloads for one run, as an engine would
/// commit them: `run.started`; one to four turns, each with model call
/// attempts (failed attempts retried, text deltas, tool calls), approval
/// interactions (approved, denied or failed), parallel tool calls ending
/// in any order as completed or failed; turns and the run ending
/// completed, or failed with a `cause` (the model call, or a tool call
/// whose failure ends the run). In about 30% of runs the run is cut short
/// at a random point and every open scope is closed innermost first:
/// cancelled, or (a quarter of those) with the run failed by a required
/// observer.
///
/// Every sequence commits cleanly into a [`RunLog`](keel_eventlog::RunLog)
/// with the default config and passes [`check_lifecycle`](crate::check_lifecycle).
///
/// ```
/// use proptest::strategy::{Strategy, ValueTree};
/// let mut runner = proptest::test_runner::TestRunner::deterministic();
/// let payloads = keel_testkit::strategies::event_run().new_tree(&mut runner).expect("tree").current();
/// assert_eq!(payloads[0].kind().to_string(), "run.started");
/// ```
pub fn event_run() -> impl Strategy<Value = Vec<Payload>> {
    run_shape().prop_filter_map("buildable run", |shape| build_run(&shape))
}

struct Builder {
    out: Vec<Payload>,
    model: ModelName,
    /// The tool of every call made so far, for closing cut-off tool scopes.
    tools: HashMap<CallId, ToolName>,
    /// [`EVENT_TOOLS`], parsed.
    names: Vec<ToolName>,
    /// Model call attempts so far (operation ids count from 1).
    ops: u64,
    /// Input and output tokens over the completed model calls.
    usage: (u64, u64),
}

/// A tool call that runs: its index in the turn, its shape and its id.
type Runnable<'s> = (usize, &'s ToolShape, CallId);

fn build_run(shape: &RunShape) -> Option<Vec<Payload>> {
    let mut b = Builder {
        out: Vec::new(),
        model: ModelName::parse("scripted-1").ok()?,
        tools: HashMap::new(),
        names: EVENT_TOOLS
            .iter()
            .map(|n| ToolName::parse(n).ok())
            .collect::<Option<Vec<_>>>()?,
        ops: 0,
        usage: (0, 0),
    };
    b.out.push(Payload::RunStarted(RunStarted {
        model: Some(b.model.clone()),
        chat: None,
        extra: Extra::new(),
        continues: None,
        forked_from: None,
        parent: None,
    }));
    let mut ended = false;
    for (ti, turn) in shape.turns.iter().enumerate() {
        let t = u64::try_from(ti).ok()? + 1;
        if b.turn(t, turn)? {
            ended = true;
            break;
        }
    }
    if !ended {
        b.out.push(Payload::RunFailed(RunFailed {
            error: ErrorText::new("max_turns reached"),
            cause: None,
            extra: Extra::new(),
        }));
    }
    if let Some((index, observer_failed)) = &shape.cut {
        b.cut(
            index.index(b.out.len().saturating_sub(1)) + 1,
            *observer_failed,
        );
    }
    Some(b.out)
}

impl Builder {
    /// Turn `t`: its model call attempts; then, once one completed, the
    /// turn ends the run (no tools) or runs its tools. `Some(true)` when
    /// the run ended with this turn.
    fn turn(&mut self, t: u64, turn: &TurnShape) -> Option<bool> {
        self.out.push(Payload::TurnStarted(turn_ref(t)));
        let mut completed = false;
        let mut last_op = None;
        for (ai, attempt) in turn.retries.iter().chain([&turn.last]).enumerate() {
            self.ops += 1;
            let op = OperationId::parse(&format!("op_{}", self.ops)).ok()?;
            last_op = Some(op.clone());
            let attempt_no = u32::try_from(ai).ok()? + 1;
            // `|=`: once an attempt completed the turn's model call did,
            // whatever follows.
            completed |= self.model_attempt(t, attempt_no, attempt, &turn.tools, op)?;
        }
        if !completed {
            let cause = Cause {
                operation_id: last_op,
                ..Cause::default()
            };
            self.fail_turn_and_run(t, "model call failed", cause);
            return Some(true);
        }
        if turn.tools.is_empty() {
            self.out.push(Payload::TurnCompleted(turn_ref(t)));
            self.out.push(Payload::RunCompleted(RunCompleted {
                usage: Usage::new(self.usage.0, self.usage.1).ok(),
                extra: Extra::new(),
            }));
            return Some(true);
        }
        // Approvals first, then the approved tools run in parallel.
        let runnable = self.approvals(t, &turn.tools)?;
        self.run_tools(t, runnable, turn.tool_failure_ends)
    }

    /// One model call attempt under `op`: started, its text deltas, then
    /// failed, or the turn's tool calls and completed. `Some(true)` when it
    /// completed.
    fn model_attempt(
        &mut self,
        t: u64,
        attempt_no: u32,
        attempt: &AttemptShape,
        tools: &[ToolShape],
        op: OperationId,
    ) -> Option<bool> {
        self.out.push(Payload::ModelStarted(ModelStarted {
            turn: t,
            operation_id: op.clone(),
            model: self.model.clone(),
            attempt: attempt_no,
            purpose: None,
            extra: Extra::new(),
        }));
        for text in &attempt.deltas {
            self.out.push(Payload::TextDelta(TextDelta {
                turn: t,
                operation_id: op.clone(),
                text: text.clone(),
                extra: Extra::new(),
            }));
        }
        if attempt.failed {
            self.out.push(Payload::ModelFailed(ModelFailed {
                turn: t,
                operation_id: op,
                problem: ProblemRecord {
                    kind: attempt.kind.clone(),
                    message: ErrorText::new("scripted failure"),
                    retryable: true,
                    retry_after_ms: None,
                    extra: Extra::new(),
                },
                position: if attempt.deltas.is_empty() {
                    RetryPosition::Pristine
                } else {
                    RetryPosition::Partial
                },
                extra: Extra::new(),
            }));
            return Some(false);
        }
        self.tool_calls(t, &op, tools)?;
        let output = u64::try_from(attempt.deltas.len()).ok()?;
        self.usage = (self.usage.0 + 10, self.usage.1 + output);
        self.out.push(Payload::ModelCompleted(ModelCompleted {
            turn: t,
            operation_id: op,
            finish: if tools.is_empty() {
                FinishReason::Stop
            } else {
                FinishReason::ToolCalls
            },
            usage: Usage::new(10, output).ok(),
            metadata: None,
            extra: Extra::new(),
        }));
        Some(true)
    }

    /// The model call `op` asks for every tool of the turn, recording each
    /// call's tool.
    fn tool_calls(&mut self, t: u64, op: &OperationId, tools: &[ToolShape]) -> Option<()> {
        for (ci, tool) in tools.iter().enumerate() {
            let call_id = CallId::parse(&format!("c{t}_{ci}")).ok()?;
            let name = self.names.get(tool.name)?.clone();
            self.tools.insert(call_id.clone(), name.clone());
            self.out.push(Payload::ToolCall(ToolCall {
                turn: t,
                operation_id: op.clone(),
                call_id,
                name,
                arguments: CanonicalJson::parse(&format!(r#"{{"n":{ci}}}"#)).ok()?,
                extra: Extra::new(),
            }));
        }
        Some(())
    }

    /// The approval interaction of every tool that needs one, in call
    /// order; the calls that may run (no approval needed, or approved).
    fn approvals<'s>(&mut self, t: u64, tools: &'s [ToolShape]) -> Option<Vec<Runnable<'s>>> {
        let mut runnable = Vec::new();
        for (ci, tool) in tools.iter().enumerate() {
            let call_id = CallId::parse(&format!("c{t}_{ci}")).ok()?;
            if tool.approval == 0 {
                runnable.push((ci, tool, call_id));
                continue;
            }
            self.approval(t, ci, tool.approval, &call_id)?;
            if tool.approval == 1 {
                runnable.push((ci, tool, call_id));
            }
        }
        Some(runnable)
    }

    /// The approval interaction for call `ci`: started, then approved (1),
    /// denied (2) or failed (3).
    fn approval(&mut self, t: u64, ci: usize, approval: u8, call_id: &CallId) -> Option<()> {
        let interaction_id = InteractionId::parse(&format!("i{t}_{ci}")).ok()?;
        self.out
            .push(Payload::InteractionStarted(InteractionStarted {
                turn: t,
                interaction_id: interaction_id.clone(),
                request: "approval".into(),
                call_id: Some(call_id.clone()),
                extra: Extra::new(),
            }));
        match approval {
            1 | 2 => self
                .out
                .push(Payload::InteractionCompleted(InteractionCompleted {
                    turn: t,
                    interaction_id,
                    decision: if approval == 1 { "approved" } else { "denied" }.into(),
                    extra: Extra::new(),
                })),
            _ => self.out.push(Payload::InteractionFailed(InteractionFailed {
                turn: t,
                interaction_id,
                error: ErrorText::new("interaction handler failed"),
                extra: Extra::new(),
            })),
        }
        Some(())
    }

    /// Starts every runnable tool in call order, ends them in their shape's
    /// order, then ends the turn, or (when a tool failed and that ends the
    /// turn) the turn and the run with the first failed tool as the cause.
    /// `Some(true)` when the run ended.
    fn run_tools(
        &mut self,
        t: u64,
        mut runnable: Vec<Runnable<'_>>,
        tool_failure_ends: bool,
    ) -> Option<bool> {
        for (_, tool, call_id) in &runnable {
            self.out.push(Payload::ToolStarted(ToolRef {
                turn: t,
                call_id: call_id.clone(),
                tool: self.names.get(tool.name)?.clone(),
                extra: Extra::new(),
            }));
        }
        runnable.sort_by_key(|(ci, tool, _)| (tool.order, *ci));
        let mut failed_tool = None;
        for (ci, tool, call_id) in runnable {
            let name = self.names.get(tool.name)?.clone();
            if tool.fails {
                if failed_tool.is_none() {
                    failed_tool = Some((call_id.clone(), name.clone()));
                }
                self.out.push(Payload::ToolFailed(ToolFailed {
                    turn: t,
                    call_id,
                    tool: name,
                    error: ErrorText::new("scripted tool error"),
                    outcome: tool.typed.then_some(ToolOutcome::Uncertain),
                    retry: tool.typed.then_some(ToolRetry::Retryable),
                    extra: Extra::new(),
                }));
            } else {
                self.out.push(Payload::ToolCompleted(ToolCompleted {
                    turn: t,
                    call_id,
                    tool: name,
                    output: format!("result {ci}"),
                    images: Vec::new(),
                    extra: Extra::new(),
                }));
            }
        }
        if let Some((call_id, tool)) = failed_tool.filter(|_| tool_failure_ends) {
            let cause = Cause {
                call_id: Some(call_id),
                tool: Some(tool),
                ..Cause::default()
            };
            self.fail_turn_and_run(t, "tool call failed", cause);
            return Some(true);
        }
        self.out.push(Payload::TurnCompleted(turn_ref(t)));
        Some(false)
    }
}

fn turn_ref(turn: u64) -> TurnRef {
    TurnRef {
        turn,
        extra: Extra::new(),
    }
}

impl Builder {
    fn fail_turn_and_run(&mut self, turn: u64, error: &str, cause: Cause) {
        self.out.push(Payload::TurnFailed(TurnFailed {
            turn,
            error: ErrorText::new(error),
            cause: Some(cause.clone()),
            extra: Extra::new(),
        }));
        self.out.push(Payload::RunFailed(RunFailed {
            error: ErrorText::new(error),
            cause: Some(cause),
            extra: Extra::new(),
        }));
    }

    /// Keeps the first `keep` payloads (at least `run.started`, never the
    /// run's terminal) and closes what is open, innermost first.
    fn cut(&mut self, keep: usize, observer_failed: bool) {
        if keep >= self.out.len() {
            return;
        }
        self.out.truncate(keep);
        let mut tracker = LifecycleTracker::new(usize::MAX);
        for payload in &self.out {
            // The prefix of a valid run is valid; nothing is refused here.
            let _ = tracker.apply(&payload.transition());
        }
        for key in tracker.open_innermost_first() {
            let payload = match key {
                ScopeKey::Run if observer_failed => Payload::RunFailed(RunFailed {
                    error: ErrorText::new("required observer failed"),
                    cause: Some(Cause {
                        observer: Some("journal".into()),
                        seq: u64::try_from(keep).ok(),
                        ..Cause::default()
                    }),
                    extra: Extra::new(),
                }),
                ScopeKey::Run => Payload::RunCancelled(RunCancelled {
                    reason: Some(ErrorText::new("cancelled by the test")),
                    extra: Extra::new(),
                }),
                ScopeKey::Turn(turn) => Payload::TurnCancelled(turn_ref(turn)),
                ScopeKey::Model { turn, operation_id } => Payload::ModelCancelled(ModelRef {
                    turn,
                    operation_id,
                    extra: Extra::new(),
                }),
                ScopeKey::Tool { turn, call_id } => {
                    let Some(tool) = self.tools.get(&call_id).cloned() else {
                        continue;
                    };
                    Payload::ToolCancelled(ToolRef {
                        turn,
                        call_id,
                        tool,
                        extra: Extra::new(),
                    })
                }
                ScopeKey::Interaction {
                    turn,
                    interaction_id,
                } => Payload::InteractionCancelled(InteractionRef {
                    turn,
                    interaction_id,
                    extra: Extra::new(),
                }),
            };
            self.out.push(payload);
        }
    }
}
