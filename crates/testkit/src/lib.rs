//! # keel-testkit: test helpers for Keel hosts and adapters
//!
//! This crate provides small, scripted stand-ins for everything a Keel
//! engine talks to, and assertions over what it records, in the spirit of
//! `tokio-test` and `tower-test`: each piece is a mock you script up front
//! plus a handle you query afterwards.
//!
//! - [`ScriptedProvider`] plays back model calls written as [`ScriptItem`]s,
//!   the stream items of a scenario file (`text`, `tool_call`, `complete`,
//!   `fail`, `delay_ms`, `disconnect`), malformed ones included, and for
//!   fault tests panics while polled ([`ScriptItem::Panic`]) or in `start`
//!   itself ([`ScriptedProvider::with_start_panic`]); its
//!   [`ProviderHandle`] counts starts and streams dropped mid-way
//!   (cancellation), and keeps the requests only when asked to
//!   ([`ScriptedProvider::recording_requests`]).
//! - [`ScriptedTool`] answers tool invocations from [`ToolStep`]s (`ok`,
//!   `error`, `delay_ms`, and for fault tests `panic`, `hang` and, Rust
//!   only, [`ToolStep::panic_sync`] in `call` itself); its [`ToolHandle`]
//!   keeps invocations and counts cancelled futures.
//! - [`ScriptedInteractions`] answers interactions (approvals) from
//!   [`InteractionStep`]s: approve, deny, fail, never answer, panic while
//!   polled or in `handle` itself; its [`InteractionsHandle`] keeps what it
//!   was asked and counts answers and abandoned questions.
//! - [`ManualClock`] is a [`Clock`](keel_eventlog::Clock) the test moves.
//! - [`RecordingObserver`] and [`RecordingBestEffort`] keep what they are
//!   given; [`FaultyObserver`] fails, hangs, panics (in its future, or in
//!   `observe` itself) or applies backpressure as its [`Fault`] says;
//!   [`observe_as_batch`] is `observe` for an observer written batch-first.
//! - [`MemoryJournal`] is a durable in-memory required observer with the
//!   SQLite journal's rules (contiguity, idempotent retry, typed conflict)
//!   that is also a [`RunHistory`](keel_observers::RunHistory), so
//!   `Engine::subscribe` follows a run across eviction in a test.
//! - [`check_lifecycle`] / [`assert_lifecycle`] check a run log
//!   (contiguous sequences from 1, one run, non-decreasing timestamps,
//!   canonical round trip, exactly one terminal per scope, nesting, every
//!   scope closed); [`assert_kinds`] checks an exact sequence of kinds.
//! - [`events`] builds a run's lifecycle payloads (run, turns, a model
//!   call with its text and tool calls, a tool's start and end) for tests
//!   that write a run by hand.
//! - [`verify_run`] is `keel verify`'s check of one stored run: its lines
//!   against the journal's status and last sequence.
//! - `strategies` (feature `proptest`) has proptest strategies for
//!   messages, histories, requests, raw streams (valid and malformed),
//!   scripts, whole scripted runs and lifecycle-valid event sequences.
//! - [`replay`] re-runs a recorded run (for example a `keel export`
//!   file) against the current code with no network and no side effect:
//!   [`replay::ReplayProvider`], [`replay::ReplayTools`], replayed
//!   approvals and cancellation, and [`replay::compare`].
//! - [`conformance`] is the provider conformance suite that adapters run
//!   against their wire fixtures.
//!
//! What it is not: it is not a test framework or runner (use `cargo test`,
//! `#[tokio::test]` and proptest as usual), it has no network or file
//! mocks, and nothing in it is meant for production hosts. Delays and hangs
//! sleep with `tokio::time`, so they need a Tokio runtime with time
//! enabled, and paused time (`start_paused = true`) makes them instant and
//! deterministic. Scripts never spawn tasks: dropping a stream or future
//! stops it.
//!
//! **Paused time and durability.** Under `start_paused = true` use
//! [`MemoryJournal`] as the required observer, not `SqliteJournal`: the
//! memory journal acknowledges on the caller's task at once, while the
//! SQLite journal's writer thread commits and fsyncs in real time, and a
//! paused runtime with nothing else to do jumps its clock to the pipeline's
//! deadline first: the run fails on seq 1 with `DeadlineExceeded`
//! (`crates/engine/tests/follow.rs` pins this). Tests that need the real
//! file run in real time.
//!
//! | feature | default | what it adds |
//! | --- | --- | --- |
//! | `proptest` | off | `strategies`: proptest strategies (links proptest) |
//!
//! Without features the crate is the scripted stand-ins, the clock, the
//! observers and the checks: what a downstream test suite needs, and what
//! the `keel` binary plays scenario files with, without proptest.
//!
//! Neighbours: it names all five core crates. `keel-message` (values),
//! `keel-stream` ([`RawItem`](keel_stream::RawItem), the
//! [`ModelProvider`](keel_stream::ModelProvider) trait and the validator),
//! `keel-eventlog` (events, the lifecycle tracker, the clock),
//! `keel-observers` (the observer contracts) and `keel-engine` (the
//! [`Tool`](keel_engine::Tool) and
//! [`InteractionHandler`](keel_engine::InteractionHandler) traits). The
//! engine's own tests and the `keel-providers` adapters' tests use it.
//! [`ScriptItem`] and [`ToolStep`] follow the scenario-file shapes of
//! `KEEL.md` exactly, so a scenario's `provider.calls` and tool `script`s
//! deserialize into them; the synchronous and stream panics above have no
//! scenario form (a scenario cannot make the host panic), and serializing
//! a script that holds one is an error.
//!
//! ```
//! use futures_core::Stream;
//! use keel_testkit::*;
//! use keel_eventlog::*;
//! use keel_message::*;
//! use keel_stream::{FinishReason, MetadataAllowlist, ModelProvider, StreamItem, StreamValidator, ValidatorConfig, validate};
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! // A scripted model call, as a scenario file writes it.
//! let provider = ScriptedProvider::from_json(r#"[[
//!     {"text": "3 °C"}, {"delay_ms": 200}, {"text": " in Oslo."},
//!     {"complete": {"finish": "stop", "usage": {"input_tokens": 12, "output_tokens": 4}}}
//! ]]"#)?;
//! let clock = ManualClock::default();
//! let log = RunLog::new(RunId::parse("run_1")?, LogConfig::default(), Arc::new(clock.clone()))?;
//! let history: Arc<[Message]> = vec![Message::text(MessageId::parse("m1")?, Role::User, "Weather?")?].into();
//! let op = OperationIdIssuer::new().issue();
//! let request = ModelRequest::new(op.clone(), ModelName::parse("scripted-1")?, history, Arc::from([]))?;
//!
//! // A miniature host: validate the stream and commit what it yields.
//! let rt = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build()?;
//! let events = rt.block_on(async {
//!     let extra = Extra::new;
//!     let mut events = vec![
//!         log.commit(&Payload::RunStarted(RunStarted::default()))?,
//!         log.commit(&Payload::TurnStarted(TurnRef { turn: 1, extra: extra() }))?,
//!         log.commit(&Payload::ModelStarted(ModelStarted {
//!             turn: 1, operation_id: op.clone(), model: request.model().clone(), attempt: 1,
//!             purpose: None, extra: extra(),
//!         }))?,
//!     ];
//!     let raw = provider.start(request.clone()).await.expect("scripted call");
//!     let validator = StreamValidator::new(ValidatorConfig::default(), Limits::default(), MetadataAllowlist::empty());
//!     let mut stream = validate(raw, validator);
//!     while let Some(item) = std::future::poll_fn(|cx| std::pin::Pin::new(&mut stream).poll_next(cx)).await {
//!         clock.advance(Duration::from_millis(1));
//!         let payload = match item {
//!             StreamItem::TextDelta(d) => Payload::TextDelta(TextDelta {
//!                 turn: 1, operation_id: op.clone(), text: d.text().into(), extra: extra(),
//!             }),
//!             StreamItem::Completion(c) => Payload::ModelCompleted(ModelCompleted {
//!                 turn: 1, operation_id: op.clone(), finish: c.finish(), usage: c.usage(), metadata: None, extra: extra(),
//!             }),
//!             other => panic!("unexpected {other:?}"),
//!         };
//!         events.push(log.commit(&payload)?);
//!     }
//!     events.push(log.commit(&Payload::TurnCompleted(TurnRef { turn: 1, extra: extra() }))?);
//!     events.push(log.commit(&Payload::RunCompleted(RunCompleted::default()))?);
//!     Ok::<_, CommitError>(events)
//! })?;
//!
//! assert_kinds(&events, &[
//!     "run.started", "turn.started", "model.started",
//!     "model.text_delta", "model.text_delta", "model.completed",
//!     "turn.completed", "run.completed",
//! ]);
//! let summary = assert_lifecycle(&events);
//! assert_eq!(summary.outcome(), Terminal::Completed);
//! assert_eq!(summary.text_deltas(), 2);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod check;
mod clock;
pub mod conformance;
pub mod events;
mod interaction;
mod memory_journal;
mod observer;
#[cfg(all(unix, feature = "pg"))]
#[cfg_attr(docsrs, doc(cfg(feature = "pg")))]
pub mod pg;
mod provider;
pub mod replay;
mod script;
#[cfg(feature = "proptest")]
#[cfg_attr(docsrs, doc(cfg(feature = "proptest")))]
pub mod strategies;
mod sync;
mod tool;
mod verify;

pub use check::{
    LifecycleSummary, LifecycleViolation, assert_kinds, assert_lifecycle, check_lifecycle,
    check_lifecycle_lines, kinds,
};
pub use clock::ManualClock;
pub use interaction::{
    INTERACTION_SCRIPT_EXHAUSTED, InteractionAction, InteractionStep, InteractionsHandle,
    ScriptedInteractions,
};
pub use memory_journal::MemoryJournal;
pub use observer::{
    Fault, FaultyObserver, RecordingBestEffort, RecordingObserver, observe_as_batch,
};
pub use provider::{ProviderHandle, SCRIPT_EXHAUSTED, ScriptedProvider};
pub use script::{
    ScriptArguments, ScriptComplete, ScriptFail, ScriptItem, ScriptToolCall, ScriptUsage,
};
pub use tool::{
    HANG, ScriptToolError, ScriptedTool, TOOL_SCRIPT_EXHAUSTED, ToolAction, ToolHandle, ToolStep,
};
pub use verify::{Verdict, VerifyViolation, verify_run};
