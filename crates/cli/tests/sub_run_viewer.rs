#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The viewer shows a run tree of three levels in real headless Chromium
//! (through chromedriver): a root run whose agent tool `planner` starts a
//! child, whose agent tool `researcher` starts a grandchild. The root's
//! page lists the sub-runs nested by level, each with its status and its
//! own timeline; a child's page names its parent; everything a run says
//! is shown as text.
//!
//! Without chromium and chromedriver on PATH the test prints a SKIPPED
//! line and passes, except under `CI=true` (see `common::browser`).

mod common;

use common::browser::{Browser, start_daemon, tools};
use serde_json::{Value, json};
use std::time::Duration;

const SECS_20: Duration = Duration::from_secs(20);

/// A text that would run script if the page parsed it as HTML.
const HOSTILE: &str = "<img src=x onerror=\"window.__pwned=1\">found";

/// root → `planner` (agent) → `researcher` (agent): three levels.
fn three_levels() -> String {
    let researcher = json!({
        "name": "researcher", "description": "Finds facts.",
        "agent": {
            "model": "scripted-1",
            "provider": {"type": "scripted", "calls": [
                [{"delay_ms": 50}, {"text": HOSTILE}, {"complete": {"finish": "stop"}}]
            ]}
        }
    });
    let planner = json!({
        "name": "planner", "description": "Plans and delegates.",
        "agent": {
            "model": "scripted-1",
            "messages": [{"role": "system", "text": "You plan."}],
            "tools": [researcher],
            "provider": {"type": "scripted", "calls": [
                [{"tool_call": {"call_id": "k2", "name": "researcher", "arguments": {"task": "look"}}},
                 {"complete": {"finish": "tool_calls"}}],
                [{"text": "planned"}, {"complete": {"finish": "stop"}}]
            ]}
        }
    });
    json!({
        "model": "scripted-1",
        "messages": [{"role": "user", "text": "plan it"}],
        "tools": [planner],
        "provider": {"type": "scripted", "calls": [
            [{"tool_call": {"call_id": "k1", "name": "planner", "arguments": {"task": "plan"}}},
             {"complete": {"finish": "tool_calls"}}],
            [{"text": "done"}, {"complete": {"finish": "stop"}}]
        ]}
    })
    .to_string()
}

/// The run started by `run`'s `tool.sub_run` of call `call`.
fn child_of(events: &[Value], call: &str) -> String {
    events
        .iter()
        .find(|e| e["kind"] == "tool.sub_run" && e["payload"]["call_id"] == call)
        .and_then(|e| e["payload"]["run_id"].as_str())
        .unwrap_or_else(|| panic!("no tool.sub_run of {call}"))
        .to_owned()
}

/// The sub-runs the page lists: (run id, depth, status), in page order.
async fn listed(b: &Browser) -> Vec<(String, String, String)> {
    let rows = b
        .js(
            "return [...document.querySelectorAll('#subruns li.subrun')].map(li => \
             [li.dataset.runId, li.dataset.depth, li.dataset.status]);",
            vec![],
        )
        .await;
    rows.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let s = |i: usize| r[i].as_str().unwrap_or_default().to_owned();
            (s(0), s(1), s(2))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_viewer_shows_a_tree_of_three_levels() {
    let Some(tools) = tools("the_viewer_shows_a_tree_of_three_levels") else {
        return;
    };
    let daemon = start_daemon(&[], &[]);
    let root = daemon.create(&three_levels(), None).await;
    let entry = daemon.wait_ended(&root, None).await;
    assert_eq!(entry["status"], "completed", "{entry}");
    let child = child_of(&daemon.events(&root, None).await, "k1");
    daemon.wait_ended(&child, None).await;
    let grandchild = child_of(&daemon.events(&child, None).await, "k2");

    let b = Browser::start(&tools).await;
    b.goto(&daemon.url(&format!("/runs/{root}"))).await;
    b.wait_js(
        "both sub-runs completed",
        SECS_20,
        "return document.querySelectorAll('#subruns li.subrun[data-status=completed]').length === 2;",
    )
    .await;
    assert_eq!(
        listed(&b).await,
        [
            (child.clone(), "1".to_owned(), "completed".to_owned()),
            (grandchild.clone(), "2".to_owned(), "completed".to_owned()),
        ]
    );
    // Nested: the grandchild's item inside the child's, under the panel.
    let nested = format!(
        "#subruns-panel:not([hidden]) #subruns > li[data-run-id='{child}'] > ul > li[data-run-id='{grandchild}']"
    );
    assert_eq!(b.count(&nested).await, 1, "not nested");
    // Each sub-run has its own timeline: its turn and model call at least,
    // and the child its tool call to the grandchild.
    for (run, least) in [(&child, 4), (&grandchild, 2)] {
        let rows = b
            .count(&format!(
                "li[data-run-id='{run}'] > .subrun-timeline .sub-row"
            ))
            .await;
        assert!(rows >= least, "{run}: {rows} timeline rows");
    }
    let child_rows = b
        .texts(&format!(
            "li[data-run-id='{child}'] > .subrun-timeline .tl-label"
        ))
        .await
        .join("|");
    assert!(child_rows.contains("tool researcher · k2"), "{child_rows}");
    let heads = b.texts("#subruns .subrun-tool").await.join("|");
    assert_eq!(heads, "planner · k1|researcher · k2");
    // The grandchild's text is text: no element made of it, no script run.
    let said = b
        .texts(&format!("li[data-run-id='{grandchild}'] > .subrun-text"))
        .await
        .concat();
    assert_eq!(said, HOSTILE);
    assert_eq!(b.count("#subruns img").await, 0);
    let pwned = b.js("return window.__pwned === undefined;", vec![]).await;
    assert_eq!(pwned, json!(true));

    // The child's page names its parent and lists its own sub-run.
    b.goto(&daemon.url(&format!("/runs/{child}"))).await;
    b.wait_css(
        &format!("#run-parent:not([hidden]) a[href$='/runs/{root}']"),
        SECS_20,
    )
    .await;
    let line = b.texts("#run-parent").await.concat();
    assert_eq!(line.trim(), format!("sub-run of {root} (call k1)"));
    b.wait_css(
        &format!("#subruns li.subrun[data-run-id='{grandchild}'][data-status=completed]"),
        SECS_20,
    )
    .await;
    // A run without sub-runs shows no panel.
    b.goto(&daemon.url(&format!("/runs/{grandchild}"))).await;
    b.wait_css("#run-status[data-status=completed]", SECS_20)
        .await;
    assert_eq!(b.count("#subruns-panel[hidden]").await, 1);
    b.close().await;
}
