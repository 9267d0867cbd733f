//! The tree follower over run trees committed by hand (live logs, a store,
//! or both): resuming from every cursor, the causal holds, children not
//! yet started or never started, the bound, and refused cursors.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

use super::source::RunSource;
use super::*;
use crate::follow::RunFollower;
use crate::tree_cursor::MAX_CURSOR_ENTRIES;
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use keel_eventlog::{
    Durability, Extra, LogConfig, ParentLink, RunLog, RunStarted, SubRunStarted,
    SubscriptionBounds, SystemClock,
};
use keel_message::CanonicalJson;
use keel_observers::{RunHistory, RunHistoryError, RunStatus, StoredRun};
use keel_testkit::events::{self, ToolUse};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

const BOUNDS: SubscriptionBounds = keel_eventlog::SubscriptionBounds {
    max_events: 4096,
    max_bytes: 8 << 20,
    durability: Durability::Durable,
};

/// A store filled by hand: what is in it is durable.
#[derive(Default)]
struct Store {
    events: Mutex<Vec<Arc<Event>>>,
}

impl RunHistory for Store {
    fn name(&self) -> &str {
        "test"
    }
    fn stored(&self, run_id: &RunId) -> Result<Option<StoredRun>, RunHistoryError> {
        let events = self.events.lock().unwrap();
        let last = events.iter().rfind(|e| e.run_id() == run_id);
        Ok(last.map(|e| StoredRun::new(e.seq(), RunStatus::Running)))
    }
    fn read_after(
        &self,
        run_id: &RunId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<Arc<Event>>, RunHistoryError> {
        let events = self.events.lock().unwrap();
        Ok(events
            .iter()
            .filter(|e| e.run_id() == run_id && e.seq() > after)
            .take(limit)
            .cloned()
            .collect())
    }
}

/// The runs a follower can open: the live logs registered, and the store
/// when there is one.
#[derive(Default)]
struct Hand {
    live: Mutex<HashMap<RunId, RunLog>>,
    store: Option<Arc<Store>>,
}

impl RunSource for Hand {
    fn open(
        &self,
        run_id: RunId,
        after: u64,
        bounds: SubscriptionBounds,
    ) -> BoxFuture<'static, Result<RunFollower, FollowError>> {
        let log = self.live.lock().unwrap().get(&run_id).cloned();
        let history = self.store.clone().map(|s| s as Arc<dyn RunHistory>);
        Box::pin(RunFollower::open(run_id, after, bounds, log, history))
    }
}

fn id(text: &str) -> RunId {
    RunId::parse(text).unwrap()
}

fn call(text: &str) -> CallId {
    CallId::parse(text).unwrap()
}

fn tool(turn: u64, call_id: &str) -> ToolUse {
    ToolUse::new(
        turn,
        call(call_id),
        keel_message::ToolName::parse("agent").unwrap(),
    )
}

fn sub_run(turn: u64, call_id: &str, child: &str) -> Payload {
    Payload::ToolSubRun(SubRunStarted {
        turn,
        call_id: call(call_id),
        run_id: id(child),
        extra: Extra::new(),
    })
}

fn child_started(parent: &str, call_id: &str) -> Payload {
    Payload::RunStarted(RunStarted {
        parent: Some(ParentLink::new(id(parent), call(call_id))),
        ..RunStarted::default()
    })
}

fn note() -> Payload {
    Payload::Extension {
        kind: EventKind::parse("test.note").unwrap(),
        payload: CanonicalJson::parse(r#"{"n":1}"#).unwrap(),
    }
}

/// One step of a hand-made tree: a run goes live (its log registered, as
/// the engine registers a child before its parent's `tool.sub_run`), or
/// an event is committed.
#[allow(clippy::large_enum_variant, reason = "a test script of a few steps")]
enum Step {
    Live(&'static str),
    Commit(&'static str, Payload),
}

/// A tree committed by hand.
struct Tree {
    hand: Arc<Hand>,
    logs: HashMap<RunId, RunLog>,
    config: LogConfig,
}

impl Tree {
    fn new(stored: bool) -> Tree {
        Tree {
            hand: Arc::new(Hand {
                live: Mutex::default(),
                store: stored.then(Arc::default),
            }),
            logs: HashMap::new(),
            config: LogConfig::default(),
        }
    }

    fn source(&self) -> Arc<dyn RunSource> {
        Arc::clone(&self.hand) as Arc<dyn RunSource>
    }

    fn log(&mut self, run: &str) -> RunLog {
        let config = self.config.clone();
        self.logs
            .entry(id(run))
            .or_insert_with(|| RunLog::new(id(run), config, Arc::new(SystemClock)).unwrap())
            .clone()
    }

    fn live(&mut self, run: &str) {
        let log = self.log(run);
        self.hand.live.lock().unwrap().insert(id(run), log);
    }

    /// Every run leaves the engine: only the store has them.
    fn retire_all(&self) {
        self.hand.live.lock().unwrap().clear();
    }

    fn commit(&mut self, run: &str, payload: &Payload) -> Arc<Event> {
        let log = self.log(run);
        let event = log.commit(payload).unwrap();
        if let Some(store) = &self.hand.store {
            store.events.lock().unwrap().push(Arc::clone(&event));
        }
        log.mark_durable(event.seq());
        event
    }

    fn apply(&mut self, step: &Step) {
        match step {
            Step::Live(run) => self.live(run),
            Step::Commit(run, payload) => {
                self.commit(run, payload);
            }
        }
    }

    async fn follow(&self, cursor: &str) -> Result<TreeFollower, TreeFollowError> {
        let cursor = TreeCursor::parse(cursor).unwrap();
        TreeFollower::open_from(self.source(), id("run_root"), cursor, BOUNDS).await
    }
}

/// A root that starts two children in parallel (`run_a`, `run_b`); `run_a`
/// starts `run_g`; `run_b` ends first; every run does a little of its own
/// between.
fn script() -> Vec<Step> {
    use Step::{Commit as C, Live};
    let (c1, c2, g1) = (tool(1, "c1"), tool(1, "c2"), tool(1, "g1"));
    vec![
        Live("run_root"),
        C("run_root", events::run_started()),
        C("run_root", events::turn_started(1)),
        C("run_root", c1.started()),
        C("run_root", c2.started()),
        Live("run_a"),
        C("run_root", sub_run(1, "c1", "run_a")),
        C("run_a", child_started("run_root", "c1")),
        Live("run_b"),
        C("run_root", sub_run(1, "c2", "run_b")),
        C("run_root", note()),
        C("run_b", child_started("run_root", "c2")),
        C("run_a", events::turn_started(1)),
        C("run_b", events::turn_started(1)),
        C("run_a", g1.started()),
        Live("run_g"),
        C("run_a", sub_run(1, "g1", "run_g")),
        C("run_g", child_started("run_a", "g1")),
        C("run_b", note()),
        C("run_g", events::turn_started(1)),
        C("run_a", note()),
        C("run_b", events::turn_completed(1)),
        C("run_b", events::run_completed()),
        C("run_root", c2.completed("b done")),
        C("run_g", note()),
        C("run_g", events::turn_completed(1)),
        C("run_g", events::run_completed()),
        C("run_a", g1.completed("g done")),
        C("run_a", events::turn_completed(1)),
        C("run_a", events::run_completed()),
        C("run_root", note()),
        C("run_root", c1.completed("a done")),
        C("run_root", events::turn_completed(1)),
        C("run_root", events::run_completed()),
    ]
}

/// The events ready now, up to `limit` in all; true once it ended.
fn ready(follower: &mut TreeFollower, out: &mut Vec<TreeEvent>, limit: usize) -> bool {
    while out.len() < limit {
        match follower.next().now_or_never() {
            Some(Some(Ok(event))) => out.push(event),
            Some(Some(Err(e))) => panic!("{e}"),
            Some(None) => return true,
            None => return false,
        }
    }
    false
}

/// Runs `steps` live, a follower taking whatever is ready after each
/// step. With `cut`, the follower is dropped right after event `cut` and
/// a new one resumes from that event's cursor (written and read back):
/// the events before the cut and those after it.
fn lockstep(steps: &[Step], cut: Option<usize>) -> (Vec<TreeEvent>, Vec<TreeEvent>) {
    let mut tree = Tree::new(false);
    let (mut before, mut after) = (Vec::new(), Vec::new());
    let mut follower: Option<TreeFollower> = None;
    // A resumed follower may have to wait for a listed run's start.
    let mut reopening: Option<BoxFuture<'static, Result<TreeFollower, TreeFollowError>>> = None;
    let limit = cut.map_or(usize::MAX, |k| k + 1);
    for step in steps {
        tree.apply(step);
        let f = follower.get_or_insert_with(|| tree.follow("0").now_or_never().unwrap().unwrap());
        if before.len() < limit {
            ready(f, &mut before, limit);
            if before.len() == limit {
                let cursor = TreeCursor::parse(&before[limit - 1].cursor.to_string()).unwrap();
                let source = tree.source();
                reopening = Some(Box::pin(TreeFollower::open_from(
                    source,
                    id("run_root"),
                    cursor,
                    BOUNDS,
                )));
            }
        }
        if let Some(opening) = reopening.as_mut()
            && let Some(opened) = opening.as_mut().now_or_never()
        {
            follower = Some(opened.unwrap());
            reopening = None;
        }
        if before.len() == limit && reopening.is_none() {
            ready(follower.as_mut().unwrap(), &mut after, usize::MAX);
        }
    }
    assert!(reopening.is_none(), "the resumed follower opened");
    let f = follower.as_mut().unwrap();
    let out = if before.len() == limit {
        &mut after
    } else {
        &mut before
    };
    assert!(ready(f, out, usize::MAX), "the follower ends with the tree");
    (before, after)
}

/// Each run's seqs in the order delivered.
fn per_run(events: &[TreeEvent]) -> BTreeMap<RunId, Vec<u64>> {
    let mut runs: BTreeMap<RunId, Vec<u64>> = BTreeMap::new();
    for e in events {
        runs.entry(e.run_id.clone())
            .or_default()
            .push(e.event.seq());
    }
    runs
}

fn index_of(events: &[TreeEvent], run: &str, kind: &str, nth: usize) -> usize {
    events
        .iter()
        .enumerate()
        .filter(|(_, e)| e.run_id.as_str() == run && e.event.kind().name() == kind)
        .nth(nth)
        .map(|(i, _)| i)
        .unwrap_or_else(|| panic!("no {kind} #{nth} of {run}"))
}

/// The properties of a whole delivery of `script()`: every event of every
/// run once and in order, tagged with its run and parent; each child after
/// the `tool.sub_run` naming it and ended before its parent's call; runs
/// interleaved; every cursor canonical.
fn check_tree(events: &[TreeEvent]) {
    let runs = per_run(events);
    let want = [("run_a", 8), ("run_b", 5), ("run_g", 5), ("run_root", 12)];
    assert_eq!(runs.len(), want.len(), "{runs:?}");
    for (run, last) in want {
        assert_eq!(runs[&id(run)], (1..=last).collect::<Vec<_>>(), "{run}");
    }
    for e in events {
        assert_eq!(&e.run_id, e.event.run_id());
        let parent = match e.run_id.as_str() {
            "run_root" => None,
            "run_g" => Some(id("run_a")),
            _ => Some(id("run_root")),
        };
        assert_eq!(e.parent, parent, "{}", e.run_id);
        assert_eq!(TreeCursor::parse(&e.cursor.to_string()).unwrap(), e.cursor);
    }
    for (parent, nth, child) in [
        ("run_root", 0, "run_a"),
        ("run_root", 1, "run_b"),
        ("run_a", 0, "run_g"),
    ] {
        let link = index_of(events, parent, "tool.sub_run", nth);
        assert!(index_of(events, child, "run.started", 0) > link, "{child}");
        let ended = index_of(events, child, "run.completed", 0);
        let answered = if child == "run_b" {
            0
        } else if child == "run_a" {
            1
        } else {
            0
        };
        assert!(
            index_of(events, parent, "tool.completed", answered) > ended,
            "{parent}'s call of {child} ended after it"
        );
    }
    let first_child = events.iter().position(|e| e.parent.is_some()).unwrap();
    assert!(
        events[first_child..].iter().any(|e| e.parent.is_none()),
        "the children interleave with the root"
    );
    assert_eq!(events.last().unwrap().cursor.to_string(), "12");
}

/// `before` then `after` deliver `whole` again: per run the same seqs, in
/// order, none twice, and still causal.
fn check_resumed(whole: &[TreeEvent], before: &[TreeEvent], after: &[TreeEvent], cut: usize) {
    let joined: Vec<TreeEvent> = before.iter().chain(after).cloned().collect();
    assert_eq!(per_run(&joined), per_run(whole), "cut after event {cut}");
    check_tree(&joined);
}

#[tokio::test]
async fn every_cursor_of_a_live_tree_resumes_the_rest() {
    let steps = script();
    let (whole, _) = lockstep(&steps, None);
    check_tree(&whole);
    for cut in 0..whole.len() {
        let (before, after) = lockstep(&steps, Some(cut));
        assert_eq!(before.len(), cut + 1);
        check_resumed(&whole, &before, &after, cut);
    }
}

/// The next item, which must come within 10 s.
async fn next_or_stall(follower: &mut TreeFollower) -> Result<TreeEvent, TreeFollowError> {
    tokio::time::timeout(Duration::from_secs(10), follower.next())
        .await
        .expect("the follower stalled")
        .expect("the follower ended")
}

async fn drain(follower: &mut TreeFollower) -> Vec<TreeEvent> {
    let mut out = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(10), follower.next()).await {
            Ok(Some(Ok(event))) => out.push(event),
            Ok(Some(Err(e))) => panic!("{e}"),
            Ok(None) => return out,
            Err(_) => panic!("stalled after {} events", out.len()),
        }
    }
}

fn stored_tree() -> Tree {
    let mut tree = Tree::new(true);
    for step in &script() {
        tree.apply(step);
    }
    tree.retire_all();
    tree
}

#[tokio::test]
async fn every_cursor_of_a_stored_tree_resumes_the_rest() {
    let tree = stored_tree();
    let mut first = tree.follow("0").await.unwrap();
    assert!(!first.is_finished());
    let whole = drain(&mut first).await;
    assert!(first.is_finished());
    check_tree(&whole);
    assert!(tree.follow("12").await.unwrap().is_finished());
    for cut in 0..whole.len() {
        let text = whole[cut].cursor.to_string();
        let after = drain(&mut tree.follow(&text).await.unwrap()).await;
        check_resumed(&whole, &whole[..=cut], &after, cut);
    }
}

#[tokio::test]
async fn a_parents_call_waits_for_its_childs_end() {
    let mut tree = Tree::new(false);
    let c1 = tool(1, "c1");
    for step in [
        Step::Live("run_root"),
        Step::Commit("run_root", events::run_started()),
        Step::Commit("run_root", events::turn_started(1)),
        Step::Commit("run_root", c1.started()),
        Step::Live("run_a"),
        Step::Commit("run_root", sub_run(1, "c1", "run_a")),
        // Committed before anything of the child is: the follower still
        // gives the child's end first.
        Step::Commit("run_root", c1.completed("done")),
    ] {
        tree.apply(&step);
    }
    let mut follower = tree.follow("0").await.unwrap();
    let mut got = Vec::new();
    assert!(!ready(&mut follower, &mut got, usize::MAX));
    assert_eq!(got.len(), 4);
    assert_eq!(follower.cursor().to_string(), "4,run_a:0");
    tree.commit("run_a", &child_started("run_root", "c1"));
    tree.commit("run_a", &events::run_completed());
    assert!(!ready(&mut follower, &mut got, usize::MAX));
    let tail: Vec<(String, u64)> = got[4..]
        .iter()
        .map(|e| (e.run_id.to_string(), e.event.seq()))
        .collect();
    assert_eq!(
        tail,
        [
            ("run_a".to_owned(), 1),
            ("run_a".to_owned(), 2),
            ("run_root".to_owned(), 5)
        ]
    );
    assert_eq!(got.last().unwrap().cursor.to_string(), "5");
}

#[tokio::test]
async fn a_child_not_started_yet_is_looked_for_until_it_is() {
    let mut tree = Tree::new(false);
    let c1 = tool(1, "c1");
    for step in [
        Step::Live("run_root"),
        Step::Commit("run_root", events::run_started()),
        Step::Commit("run_root", events::turn_started(1)),
        Step::Commit("run_root", c1.started()),
        // The link, before the child is registered.
        Step::Commit("run_root", sub_run(1, "c1", "run_late")),
    ] {
        tree.apply(&step);
    }
    let mut follower = tree.follow("0").await.unwrap();
    let mut got = Vec::new();
    for _ in 0..4 {
        got.push(follower.next().await.unwrap().unwrap());
    }
    let waiting = tokio::time::timeout(Duration::from_millis(30), follower.next()).await;
    assert!(waiting.is_err(), "nothing of the child yet");
    tree.live("run_late");
    tree.commit("run_late", &child_started("run_root", "c1"));
    let event = tokio::time::timeout(Duration::from_secs(5), follower.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(event.run_id, id("run_late"));
    assert_eq!(event.parent, Some(id("run_root")));
    assert_eq!(event.cursor.to_string(), "4,run_late:1");
}

#[tokio::test]
async fn a_child_that_never_started_is_dropped_once_its_call_ends() {
    let mut tree = Tree::new(true);
    let c1 = tool(1, "c1");
    for step in [
        Step::Live("run_root"),
        Step::Commit("run_root", events::run_started()),
        Step::Commit("run_root", events::turn_started(1)),
        Step::Commit("run_root", c1.started()),
        Step::Commit("run_root", sub_run(1, "c1", "run_ghost")),
        // The host was lost between the link and the child's start.
        Step::Commit("run_root", c1.failed("host lost", None, None)),
        Step::Commit("run_root", events::turn_failed(1, "host lost")),
        Step::Commit("run_root", events::run_failed("host lost")),
    ] {
        tree.apply(&step);
    }
    tree.retire_all();
    let got = drain(&mut tree.follow("0").await.unwrap()).await;
    assert_eq!(per_run(&got)[&id("run_root")], (1..=7).collect::<Vec<_>>());
    assert_eq!(got.len(), 7);
    assert_eq!(got[3].cursor.to_string(), "4,run_ghost:0");
    assert_eq!(got.last().unwrap().cursor.to_string(), "7");
}

#[tokio::test]
async fn a_stream_that_ends_without_its_terminal_stays_in_the_cursor() {
    let mut tree = Tree::new(true);
    let c1 = tool(1, "c1");
    for step in [
        Step::Live("run_root"),
        Step::Commit("run_root", events::run_started()),
        Step::Commit("run_root", events::turn_started(1)),
        Step::Commit("run_root", c1.started()),
        Step::Live("run_a"),
        Step::Commit("run_root", sub_run(1, "c1", "run_a")),
        Step::Commit("run_a", child_started("run_root", "c1")),
        Step::Commit("run_a", note()),
    ] {
        tree.apply(&step);
    }
    // The host died: neither run ended, neither is live.
    tree.retire_all();
    let mut follower = tree.follow("0").await.unwrap();
    assert_eq!(drain(&mut follower).await.len(), 6);
    assert_eq!(follower.cursor().to_string(), "4,run_a:2");
    let rest = drain(&mut tree.follow("4,run_a:1").await.unwrap()).await;
    let rest: Vec<_> = rest
        .iter()
        .map(|e| (e.run_id.to_string(), e.event.seq()))
        .collect();
    assert_eq!(rest, [("run_a".to_owned(), 2)]);
    assert!(
        drain(&mut tree.follow("4,run_a:2").await.unwrap())
            .await
            .is_empty()
    );
}

#[tokio::test]
async fn a_child_naming_another_call_ends_the_stream() {
    let mut tree = Tree::new(false);
    for step in [
        Step::Live("run_root"),
        Step::Commit("run_root", events::run_started()),
        Step::Commit("run_root", events::turn_started(1)),
        Step::Commit("run_root", tool(1, "c1").started()),
        Step::Live("run_a"),
        Step::Commit("run_root", sub_run(1, "c1", "run_a")),
        Step::Commit("run_a", child_started("run_root", "c2")),
    ] {
        tree.apply(&step);
    }
    let mut follower = tree.follow("0").await.unwrap();
    let mut got = Vec::new();
    let e = loop {
        match next_or_stall(&mut follower).await {
            Ok(event) => got.push(event),
            Err(e) => break e,
        }
    };
    assert_eq!(got.len(), 4);
    assert_eq!(
        e.to_string(),
        "run run_a's run.started does not name run run_root's call c1, whose tool.sub_run names it (rule tree.parent_agrees)"
    );
    assert!(follower.next().await.is_none());
}

#[tokio::test]
async fn more_runs_at_once_than_the_bound_end_the_stream_before_the_link() {
    let mut tree = Tree::new(false);
    tree.config.max_open_scopes = 2 * MAX_TREE_RUNS;
    tree.live("run_root");
    tree.commit("run_root", &events::run_started());
    tree.commit("run_root", &events::turn_started(1));
    for i in 0..MAX_TREE_RUNS {
        let (call_id, child) = (format!("c{i}"), format!("run_c{i}"));
        tree.commit("run_root", &tool(1, &call_id).started());
        tree.live(&child);
        tree.commit("run_root", &sub_run(1, &call_id, &child));
        tree.commit(&child, &child_started("run_root", &call_id));
    }
    let mut follower = tree.follow("0").await.unwrap();
    let mut got = Vec::new();
    let e = loop {
        match next_or_stall(&mut follower).await {
            Ok(event) => got.push(event),
            Err(e) => break e,
        }
    };
    // The 64th child's link is the root's last event: 2 + 2 * 64.
    assert!(
        matches!(&e, TreeFollowError::TooManyRuns { parent, seq: 130 } if parent.as_str() == "run_root"),
        "{e}"
    );
    assert!(e.to_string().ends_with("(rule tree.max_runs)"));
    assert_eq!(follower.cursor().entries().len(), MAX_CURSOR_ENTRIES);
    assert_eq!(follower.cursor().root_seq(), 129);
    let root: Vec<u64> = got
        .iter()
        .filter(|e| e.parent.is_none())
        .map(|e| e.event.seq())
        .collect();
    assert_eq!(root, (1..=129).collect::<Vec<_>>());
    assert!(follower.next().await.is_none());
}

/// Opens the stored tree at `cursor`: `Ok` or the error's text.
async fn check(tree: &Tree, cursor: &str, want: Result<(), &str>) {
    let got = tree
        .follow(cursor)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string());
    assert_eq!(
        got.as_ref().map(|_| ()).map_err(String::as_str),
        want,
        "{cursor}"
    );
}

#[tokio::test]
async fn a_cursor_names_only_runs_of_the_roots_tree_within_their_seqs() {
    let mut tree = stored_tree();
    // Another tree: `run_other` started `run_stray`.
    tree.commit("run_other", &events::run_started());
    tree.commit("run_stray", &child_started("run_other", "c1"));
    for (cursor, want) in [
        ("0", Ok(())),
        ("3,run_a:2,run_g:0", Ok(())),
        // A grandchild whose parent is done (not listed).
        ("3,run_g:4", Ok(())),
        (
            "99",
            Err("cursor 99 is ahead of the run (latest 12) (rule follow.cursor_committed)"),
        ),
        (
            "3,run_root:1",
            Err("cursor entry 1 names the root run (rule tree_cursor.root_listed)"),
        ),
        (
            "3,run_a:2,run_other:1",
            Err(
                "cursor entry 2 names a run that is not a descendant of the root (rule tree_cursor.descendant)",
            ),
        ),
        (
            "3,run_stray:1",
            Err(
                "cursor entry 1 names a run that is not a descendant of the root (rule tree_cursor.descendant)",
            ),
        ),
        (
            "3,run_nowhere:0",
            Err(
                "cursor entry 1: run run_nowhere is neither live nor stored (rule follow.known_run)",
            ),
        ),
        (
            "3,run_a:10",
            Err(
                "cursor entry 1: cursor 10 is ahead of the run (latest 8) (rule follow.cursor_committed)",
            ),
        ),
    ] {
        check(&tree, cursor, want).await;
    }
}
