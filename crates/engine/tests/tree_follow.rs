//! `TreeFollower` over real sub-runs: a root that delegates to two agent
//! tools in parallel, one of which delegates again, journaled to SQLite
//! (the engine's history) with small logs, followed while the children
//! are live (dropped and resumed along the way), then resumed from every
//! cursor of the recorded stream.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use keel_engine::*;
use keel_eventlog::{Event, LogConfig, Payload, SubRunRef};
use keel_message::*;
use keel_observers::{JournalConfig, RunHistory, SqliteJournal};
use keel_stream::FinishReason;
use keel_testkit::{ScriptItem, ScriptedProvider};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

fn model() -> ModelName {
    ModelName::parse("scripted-1").unwrap()
}

/// A turn of `deltas` text deltas, 2 ms apart, then `finish`.
fn talking(deltas: usize, mut then: Vec<ScriptItem>) -> Vec<ScriptItem> {
    let mut items: Vec<ScriptItem> = (0..deltas)
        .flat_map(|i| {
            [
                ScriptItem::delay(Duration::from_millis(2)),
                ScriptItem::text(format!("w{i} ")),
            ]
        })
        .collect();
    items.append(&mut then);
    items
}

fn delegating(calls: &[(&str, &str)]) -> Vec<ScriptItem> {
    let mut items: Vec<ScriptItem> = calls
        .iter()
        .map(|(call, tool)| ScriptItem::tool_call(*call, *tool, json!({"task": "look"})))
        .collect();
    items.push(ScriptItem::complete(FinishReason::ToolCalls));
    talking(3, items)
}

fn answering(deltas: usize) -> Vec<ScriptItem> {
    talking(deltas, vec![ScriptItem::complete(FinishReason::Stop)])
}

fn agent(name: &str, spec: AgentSpec) -> Arc<dyn Tool> {
    Arc::new(AgentTool::for_task(ToolName::parse(name).unwrap(), "delegates a task", spec).unwrap())
}

fn scripted(turns: Vec<Vec<ScriptItem>>) -> Arc<ScriptedProvider> {
    Arc::new(ScriptedProvider::new(turns))
}

/// root → (researcher → checker, reviewer), all talking while the others
/// do.
fn start(engine: &Engine) -> RunHandle {
    let checker = AgentSpec::new(model()).provider(scripted(vec![answering(12)]));
    let researcher = AgentSpec::new(model())
        .provider(scripted(vec![
            delegating(&[("r1", "checker")]),
            answering(6),
        ]))
        .tool(agent("checker", checker));
    let reviewer = AgentSpec::new(model()).provider(scripted(vec![answering(20)]));
    let root = scripted(vec![
        delegating(&[("c1", "researcher"), ("c2", "reviewer")]),
        answering(4),
    ]);
    let user = Message::text(MessageId::parse("u1").unwrap(), Role::User, "Plan it.").unwrap();
    let request = RunRequest::new(RunId::parse("run_root").unwrap(), model(), vec![user])
        .provider(root)
        .tool(agent("researcher", researcher))
        .tool(agent("reviewer", reviewer));
    engine.start(request).unwrap()
}

fn engine(dir: &tempfile::TempDir) -> (Engine, Arc<dyn RunHistory>) {
    let journal =
        Arc::new(SqliteJournal::open(dir.path().join("k.db"), JournalConfig::default()).unwrap());
    let reader: Arc<dyn RunHistory> = Arc::new(journal.reader().unwrap());
    let engine = Engine::builder()
        .required_observer(journal)
        .history(Arc::clone(&reader))
        // Small logs: a resumed follower reads the journal, then the log.
        .log_config(LogConfig {
            max_events: 12,
            max_open_scopes: 8,
            ..LogConfig::default()
        })
        .build()
        .unwrap();
    (engine, reader)
}

async fn next(follower: &mut TreeFollower) -> Option<TreeEvent> {
    tokio::time::timeout(Duration::from_secs(20), follower.next())
        .await
        .expect("the tree stream stalled")
        .map(|e| e.unwrap())
}

fn per_run(events: &[TreeEvent]) -> BTreeMap<String, Vec<u64>> {
    let mut runs: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for e in events {
        runs.entry(e.run_id.to_string())
            .or_default()
            .push(e.event.seq());
    }
    runs
}

fn stored(reader: &Arc<dyn RunHistory>, run: &RunId) -> Vec<Arc<Event>> {
    reader.read_after(run, 0, 100_000).unwrap()
}

/// Each run once, in order, as stored; four runs with their parents; each
/// child ends before its parent's call does; every cursor canonical.
fn check_tree(events: &[TreeEvent], reader: &Arc<dyn RunHistory>) {
    let runs = per_run(events);
    assert_eq!(runs.len(), 4, "{runs:?}");
    let mut children = Vec::new();
    for e in events {
        assert_eq!(&e.run_id, e.event.run_id());
        assert_eq!(TreeCursor::parse(&e.cursor.to_string()).unwrap(), e.cursor);
        if let Ok(Payload::ToolSubRun(link)) = e.event.payload() {
            children.push((e.run_id.clone(), link.call_id, link.run_id));
        }
    }
    for (run, seqs) in &runs {
        let run = RunId::parse(run).unwrap();
        let want: Vec<u64> = stored(reader, &run).iter().map(|e| e.seq()).collect();
        assert_eq!(seqs, &want, "{run}: every stored event once, in order");
    }
    assert_eq!(children.len(), 3);
    for (parent, call, child) in children {
        let position = |pred: &dyn Fn(&TreeEvent) -> bool| events.iter().position(pred).unwrap();
        let child_end = position(&|e| e.run_id == child && e.event.kind().is_run_terminal());
        let call_end = position(&|e| {
            e.run_id == parent
                && match e.event.payload() {
                    Ok(Payload::ToolCompleted(p)) => {
                        p.call_id == call
                            && SubRunRef::from_extra(&p.extra).unwrap().run_id == child
                    }
                    _ => false,
                }
        });
        assert!(
            child_end < call_end,
            "{child} ends before {parent}'s {call}"
        );
        let child_start = position(&|e| e.run_id == child);
        assert_eq!(events[child_start].parent.as_ref(), Some(&parent));
    }
    let roots = events.iter().filter(|e| e.parent.is_none());
    assert!(roots.clone().all(|e| e.run_id.as_str() == "run_root"));
    let first_child = events.iter().position(|e| e.parent.is_some()).unwrap();
    assert!(
        events[first_child..].iter().any(|e| e.parent.is_none()),
        "children interleave with the root"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_tree_is_followed_resumed_and_replayed_from_every_cursor() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, reader) = engine(&dir);
    let run = start(&engine);
    let root = run.run_id().clone();
    let mut follower = TreeFollower::open(&engine, root.clone(), TreeCursor::new(0), FOLLOW_BOUNDS)
        .await
        .unwrap();
    let mut whole = Vec::new();
    let mut resumed_live = 0;
    while let Some(event) = next(&mut follower).await {
        let live_children = !event.cursor.entries().is_empty();
        whole.push(event);
        // Now and then, drop the stream and resume from its cursor while
        // children are still running.
        if whole.len() % 9 == 0 && live_children {
            let cursor = TreeCursor::parse(&whole.last().unwrap().cursor.to_string()).unwrap();
            follower = TreeFollower::open(&engine, root.clone(), cursor, FOLLOW_BOUNDS)
                .await
                .unwrap();
            resumed_live += 1;
        }
    }
    run.join().await.into_result().unwrap();
    assert!(resumed_live >= 3, "resumed {resumed_live} times mid-tree");
    check_tree(&whole, &reader);
    assert_eq!(
        whole.last().unwrap().cursor.to_string(),
        whole.last().unwrap().event.seq().to_string()
    );

    // Every cursor of the recorded stream resumes exactly the rest.
    for cut in 0..whole.len() {
        let cursor = whole[cut].cursor.clone();
        let mut rest = TreeFollower::open(&engine, root.clone(), cursor, FOLLOW_BOUNDS)
            .await
            .unwrap();
        let mut joined = whole[..=cut].to_vec();
        while let Some(event) = next(&mut rest).await {
            joined.push(event);
        }
        assert_eq!(per_run(&joined), per_run(&whole), "cut after event {cut}");
        check_tree(&joined, &reader);
    }
    drop(engine);
}
