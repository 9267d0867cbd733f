#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Sub-runs in the frontends' protocols, checked with the pinned packages:
//! a run tree of three levels (a child that fails, one cancelled, a
//! grandchild that completes) as keel-views maps it to AG-UI, through
//! `@ag-ui/core`'s `EventSchemas` and `@ag-ui/client`'s `verifyEvents`
//! (1.0.0), and the same stream broken one way at a time, refused.

mod common;

use common::frontends::{self, VERIFY};
use keel_eventlog::Event;
use keel_views::agui::{AguiMapper, AguiTree};
use serde_json::Value;

/// The tree keel-views' own tests use (see its `sub_run` fixture).
fn three_levels() -> Vec<Event> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../views/tests/trees/three_levels.jsonl");
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| Event::decode(l).unwrap())
        .collect()
}

fn tree_stream(events: &[Event]) -> Vec<Value> {
    let mut tree = AguiTree::new();
    events
        .iter()
        .flat_map(|e| tree.map(e).unwrap())
        .map(|e| e.to_value())
        .collect()
}

/// Each stream through the client's schema and `verifyEvents`: `ok` or
/// the refusal.
fn verify(streams: &[Vec<Value>]) -> Vec<String> {
    let out = frontends::run_node(VERIFY, &serde_json::to_string(streams).unwrap());
    serde_json::from_str(out.trim()).unwrap_or_else(|_| panic!("node said {out}"))
}

#[test]
fn a_tree_stream_with_subagents_verifies() {
    if frontends::node_modules("a_tree_stream_with_subagents_verifies").is_none() {
        return;
    }
    let events = three_levels();
    let stream = tree_stream(&events);
    let types: Vec<&str> = stream.iter().filter_map(|e| e["type"].as_str()).collect();
    for ty in ["SUBAGENT_STARTED", "SUBAGENT_FINISHED", "SUBAGENT_ERROR"] {
        assert!(types.contains(&ty), "{ty} in {types:?}");
    }
    // A sub-run followed on its own: RUN_STARTED names its parent run.
    let mut child = AguiMapper::new();
    let alone: Vec<Value> = events
        .iter()
        .filter(|e| e.run_id().as_str() == "run_g")
        .flat_map(|e| child.map(e).unwrap())
        .map(|e| e.to_value())
        .collect();
    assert_eq!(alone[0]["parentRunId"], "run_c");

    // Broken on purpose, the client refuses: a subagent left open at
    // RUN_FINISHED, one finished twice, a child's step closed by the
    // root (its attribution dropped).
    let without = |ty: &str, run: &str| -> Vec<Value> {
        stream
            .iter()
            .filter(|e| !(e["type"] == ty && e["subagentRunId"] == run))
            .cloned()
            .collect()
    };
    let open = without("SUBAGENT_FINISHED", "run_g");
    let mut twice = stream.clone();
    let finished = stream
        .iter()
        .position(|e| e["type"] == "SUBAGENT_FINISHED")
        .unwrap();
    twice.insert(finished + 1, stream[finished].clone());
    let unattributed: Vec<Value> = stream
        .iter()
        .cloned()
        .map(|mut e| {
            if e["type"] == "STEP_FINISHED" && e["subagentRunId"] == "run_c" {
                e.as_object_mut().unwrap().remove("subagentRunId");
            }
            e
        })
        .collect();
    let results = verify(&[stream.clone(), alone, open, twice, unattributed]);
    assert_eq!(results[0], "ok", "{results:?}");
    assert_eq!(results[1], "ok", "{results:?}");
    assert!(
        results[2].contains("subagents are still active"),
        "{results:?}"
    );
    assert!(results[3].contains("no active subagent"), "{results:?}");
    assert!(results[4].contains("STEP_FINISHED"), "{results:?}");
}
