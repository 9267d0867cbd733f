//! The proptest strategies yield what they promise.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use keel_eventlog::{Scope, Terminal};
use keel_message::{Limits, Message, ModelName, ModelRequest, OperationId};
use keel_stream::*;
use keel_testkit::strategies;
use keel_testkit::strategies::{
    SCRIPTED_RUN_TOOLS, event_run, fault, history, message, raw_item, raw_stream, script_call,
    scripted_run,
};
use keel_testkit::*;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

fn validator() -> StreamValidator {
    StreamValidator::new(
        ValidatorConfig::default(),
        Limits::default(),
        MetadataAllowlist::new(["scripted"]).unwrap(),
    )
}

/// `n` samples of `strategy`, deterministically.
fn samples<S: Strategy>(strategy: S, n: usize) -> Vec<S::Value> {
    let mut runner = TestRunner::deterministic();
    (0..n)
        .map(|_| strategy.new_tree(&mut runner).unwrap().current())
        .collect()
}

proptest! {
    #[test]
    fn event_runs_commit_cleanly_and_pass_the_checker(payloads in event_run()) {
        let (log, clock) = log();
        let mut events = Vec::new();
        for payload in &payloads {
            clock.advance(std::time::Duration::from_micros(3));
            events.push(log.commit(payload).unwrap_or_else(|e| panic!("{}: {e}", payload.kind())));
        }
        let summary = check_lifecycle(&events).unwrap();
        prop_assert!(log.run_ended());
        prop_assert_eq!(summary.events(), payloads.len());
        // The snapshot restores byte for byte.
        let jsonl = log.snapshot().to_jsonl();
        let lines: Vec<&str> = jsonl.lines().skip(1).collect();
        prop_assert_eq!(lines, events.iter().map(|e| e.line()).collect::<Vec<_>>());
    }

    #[test]
    fn histories_make_valid_requests(history in history()) {
        let built = ModelRequest::new(
            OperationId::parse("op_1").unwrap(),
            ModelName::parse("m").unwrap(),
            Arc::from(history),
            Arc::from([]),
        );
        prop_assert!(built.is_ok(), "{:?}", built.err());
    }

    #[test]
    fn messages_and_requests_round_trip(message in message(), request in strategies::request()) {
        let json = serde_json::to_string(&message).unwrap();
        prop_assert_eq!(serde_json::from_str::<Message>(&json).unwrap(), message);
        let json = serde_json::to_string(&request).unwrap();
        prop_assert_eq!(ModelRequest::from_json_with(&json, &Limits::default()).unwrap(), request);
    }

    #[test]
    fn raw_streams_validate_to_exactly_one_terminal(items in raw_stream()) {
        let mut v = validator();
        let mut terminals = 0;
        for raw in items {
            match v.accept(raw) {
                Ok(item) if item.is_terminal() => terminals += 1,
                Ok(_) => {}
                Err(_) => { terminals += 1; break; }
            }
            if v.is_terminated() { break; }
        }
        if terminals == 0 {
            prop_assert!(v.end_of_stream().is_err());
            terminals += 1;
        }
        prop_assert_eq!(terminals, 1);
    }
}

#[test]
fn event_runs_reach_every_terminal_of_every_scope() {
    let mut seen = BTreeSet::new();
    for payloads in samples(event_run(), 600) {
        let (log, _) = log();
        let events = commit_all(&log, &payloads);
        let summary = check_lifecycle(&events).unwrap();
        for ((scope, terminal), n) in summary.all_terminals() {
            if *n > 0 {
                seen.insert((*scope, *terminal));
            }
        }
    }
    for scope in Scope::ALL {
        for terminal in Terminal::ALL {
            assert!(
                seen.contains(&(scope, terminal)),
                "{scope:?} {terminal:?} never generated"
            );
        }
    }
}

#[test]
fn raw_items_mix_valid_and_malformed() {
    let mut valid = 0;
    let mut invalid = 0;
    for item in samples(raw_item(), 400) {
        match validator().accept(item) {
            Ok(_) => valid += 1,
            Err(_) => invalid += 1,
        }
    }
    assert!(
        valid > 100 && invalid > 30,
        "valid {valid}, invalid {invalid}"
    );
}

#[test]
fn raw_streams_sometimes_lack_a_terminal_and_sometimes_run_past_it() {
    let streams = samples(raw_stream(), 400);
    let no_terminal = streams
        .iter()
        .filter(|s| !s.iter().any(RawItem::is_terminal))
        .count();
    let past_terminal = streams
        .iter()
        .filter(|s| {
            s.iter()
                .position(RawItem::is_terminal)
                .is_some_and(|i| i + 1 < s.len())
        })
        .count();
    assert!(no_terminal > 20, "{no_terminal}");
    assert!(past_terminal > 20, "{past_terminal}");
}

#[tokio::test(start_paused = true)]
async fn scripted_calls_play_through_the_validator() {
    let calls = samples(script_call(), 200);
    let delays = calls
        .iter()
        .flatten()
        .filter(|i| matches!(i, ScriptItem::DelayMs(_)))
        .count();
    let disconnects = calls
        .iter()
        .filter(|c| c.contains(&ScriptItem::Disconnect))
        .count();
    assert!(delays > 20 && disconnects > 5, "{delays} {disconnects}");
    for call in calls {
        // Scripts survive the scenario JSON shape.
        let json = serde_json::to_string(&call).unwrap();
        assert_eq!(
            serde_json::from_str::<Vec<ScriptItem>>(&json).unwrap(),
            call
        );
        let provider = ScriptedProvider::new(vec![call]);
        let raw = provider.start(request(1)).await.unwrap();
        let items = collect(&mut validate(raw, validator())).await;
        assert_eq!(items.iter().filter(|i| i.is_terminal()).count(), 1);
        assert!(items.last().unwrap().is_terminal());
    }
}

#[tokio::test(start_paused = true)]
async fn scripted_runs_are_consistent() {
    for run in samples(scripted_run(), 100) {
        // One tool step per call to that tool.
        let mut calls_per_tool: HashMap<String, usize> = HashMap::new();
        for item in run.calls.iter().flatten() {
            if let ScriptItem::ToolCall(call) = item {
                *calls_per_tool.entry(call.name.clone()).or_default() += 1;
            }
        }
        for (name, steps) in &run.tools {
            assert_eq!(
                calls_per_tool.get(name).copied().unwrap_or(0),
                steps.len(),
                "{name}"
            );
        }
        assert_eq!(run.scripted_tools().len(), SCRIPTED_RUN_TOOLS.len());
        // Every call is a well-formed stream.
        let provider = run.provider();
        for n in 0..run.calls.len() {
            let raw = provider.start(request(n as u64 + 1)).await.unwrap();
            let items = collect(&mut validate(raw, validator())).await;
            let last = items.last().unwrap();
            match last {
                StreamItem::Completion(_) => {}
                StreamItem::Failure(f) => assert_eq!(f.kind(), ProblemKind::Overloaded),
                other => panic!("{other:?}"),
            }
        }
        let last = run.calls.last().unwrap().last().unwrap();
        assert!(matches!(last, ScriptItem::Complete(c) if c.finish == FinishReason::Stop));
    }
}

#[test]
fn faults_cover_every_kind() {
    let faults = samples(fault(), 200);
    let kinds: BTreeSet<&str> = faults
        .iter()
        .map(|f| match f {
            Fault::FailOn(_) => "fail_on",
            Fault::FailFrom(_) => "fail_from",
            Fault::HangOn(_) => "hang_on",
            Fault::PanicOn(_) => "panic_on",
            // Not drawn by `strategies::fault` (yet): a synchronous panic
            // is a targeted test, not a random schedule.
            Fault::PanicSyncOn(_) => "panic_sync_on",
            Fault::Slow(_) => "slow",
        })
        .collect();
    assert_eq!(kinds.len(), 5, "{kinds:?}");
}
