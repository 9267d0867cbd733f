//! Deletion and retention, shared by every durable store: what a request
//! covers, the rules it must pass, and the tombstone each deleted run
//! leaves.
//!
//! A store answers a [`DeletionRequest`] in three steps: it reads a
//! [`RunNode`] for each stored run (status, conversation root, links and
//! last event time), calls [`plan`] (pure: this module is the one owner of
//! the rules), then removes the planned runs and records their
//! [`Tombstone`]s in one transaction, all or nothing.
//!
//! # What a request covers
//!
//! - [`DeletionTarget::Run`]: the run and its sub-runs, recursively (a
//!   sub-run's `run.started` names its parent in `parent`).
//! - [`DeletionTarget::Conversation`]: every run whose conversation (the
//!   root of its `continues` chain) is the named run's, and their
//!   sub-runs.
//! - [`DeletionTarget::OlderThan`] (prune): every run tree (a run that is
//!   not a stored run's sub-run, with its sub-runs) whose every run is
//!   closed and whose every run's last event is before the cutoff. The
//!   last event, not the first: a run that started long ago but wrote
//!   until recently is recent data. A tree that another kept run
//!   continues or forks from is kept too, so pruning never breaks a
//!   kept run's history (repeated until nothing changes).
//!
//! # Rules
//!
//! - `deletion.live`: a covered run that is still running (no terminal
//!   stored) refuses the whole request (`keel recover` closes an
//!   abandoned one first). Prune skips such a tree instead.
//! - `deletion.dependents`: a covered run that a stored run outside the
//!   request continues (`continues`) or forks from (`forked_from`)
//!   refuses the request, naming those runs: `--continue` and `--fork`
//!   rebuild a run's history from the run it names, so deleting it alone
//!   would leave them unreadable. Deleting the conversation deletes the
//!   chain. Prune keeps such a tree instead.
//! - `deletion.who`: the actor recorded in the tombstone is at most
//!   [`MAX_WHO_BYTES`] bytes, has no control characters, and does not
//!   look like a credential (keel-stream's secret screening).

use crate::RunStatus;
use crate::journal_error::JournalError;
use keel_message::RunId;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{SystemTime, UNIX_EPOCH};

/// The most bytes of [`Who`].
pub const MAX_WHO_BYTES: usize = 256;

/// Who asked for a deletion, as the tombstone records it: at most
/// [`MAX_WHO_BYTES`] bytes, no control characters, no credential.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Who(String);

impl Who {
    /// Validates `text` (rule `deletion.who`).
    pub fn parse(text: &str) -> Result<Who, DeleteError> {
        let refuse = |detail: &'static str| DeleteError::InvalidWho {
            detail,
            len: text.len(),
        };
        if text.is_empty() {
            return Err(refuse("is empty"));
        }
        if text.len() > MAX_WHO_BYTES {
            return Err(refuse("is longer than 256 bytes"));
        }
        if text.chars().any(char::is_control) {
            return Err(refuse("holds a control character"));
        }
        if keel_stream::secrets::screen_value(text).is_some() {
            return Err(refuse("looks like a credential"));
        }
        Ok(Who(text.to_owned()))
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Who {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Who({:?})", self.0)
    }
}

impl std::fmt::Display for Who {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Which runs a [`DeletionRequest`] names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeletionTarget {
    /// One run and its sub-runs (`keel delete RUN_ID`).
    Run(RunId),
    /// The conversation of this run (`keel delete --conversation RUN_ID`).
    Conversation(RunId),
    /// Every closed run tree whose last event is before this time, in
    /// unix milliseconds (`keel prune --older-than 30d`).
    OlderThan(u64),
}

/// A request to delete runs: what, and who asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeletionRequest {
    target: DeletionTarget,
    who: Who,
}

impl DeletionRequest {
    /// A request for `target` by `who`.
    pub fn new(target: DeletionTarget, who: Who) -> DeletionRequest {
        DeletionRequest { target, who }
    }

    /// What it deletes.
    pub fn target(&self) -> &DeletionTarget {
        &self.target
    }

    /// Who asks.
    pub fn who(&self) -> &Who {
        &self.who
    }
}

/// What a store keeps of a deleted run: its id, when and by whom it was
/// deleted, and how many events were removed. `keel verify` accepts a
/// link to a run a tombstone names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tombstone {
    run_id: RunId,
    deleted_ts: u64,
    who: Who,
    events: u64,
}

impl Tombstone {
    /// A tombstone of `run_id`, deleted at `deleted_ts` (unix ms) by `who`
    /// with `events` events removed.
    pub fn new(run_id: RunId, deleted_ts: u64, who: Who, events: u64) -> Tombstone {
        Tombstone {
            run_id,
            deleted_ts,
            who,
            events,
        }
    }

    /// The deleted run.
    pub fn run_id(&self) -> &RunId {
        &self.run_id
    }

    /// When it was deleted, unix milliseconds.
    pub fn deleted_ts(&self) -> u64 {
        self.deleted_ts
    }

    /// Who deleted it.
    pub fn who(&self) -> &Who {
        &self.who
    }

    /// How many events were removed.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Reads back [`to_json`](Self::to_json)'s form (`None` when a member
    /// is missing or invalid).
    pub fn from_json(value: &serde_json::Value) -> Option<Tombstone> {
        Some(Tombstone {
            run_id: RunId::parse(value["run_id"].as_str()?).ok()?,
            deleted_ts: value["deleted_ts"].as_u64()?,
            who: Who::parse(value["who"].as_str()?).ok()?,
            events: value["events"].as_u64()?,
        })
    }

    /// `{"run_id", "deleted_ts", "who", "events"}`: the form the CLI
    /// prints and the daemon answers.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "run_id": self.run_id.as_str(),
            "deleted_ts": self.deleted_ts,
            "who": self.who.as_str(),
            "events": self.events,
        })
    }
}

/// The longest retention [`OlderThan`] takes: 100 years.
pub const MAX_OLDER_THAN_MS: u64 = 36_500 * DAY_MS;

const DAY_MS: u64 = 86_400_000;

/// A prune's age bound (`keel prune --older-than 30d`,
/// `POST /v1/prune?older_than=30d`): digits, then one unit `s`, `m`, `h`
/// or `d`; from one second to [`MAX_OLDER_THAN_MS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OlderThan {
    ms: u64,
}

impl OlderThan {
    /// Parses `30d`, `12h`, `90m`, `3600s` (rule `prune.older_than`).
    pub fn parse(text: &str) -> Result<OlderThan, OlderThanError> {
        let refuse = |detail: &'static str| OlderThanError {
            detail,
            shown: shown(text),
        };
        let split = text.char_indices().last().map_or(0, |(i, _)| i);
        let (digits, unit) = text.split_at(split);
        let unit_ms = match unit {
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => DAY_MS,
            _ => return Err(refuse("must end in a unit: s, m, h or d")),
        };
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.len() > 12 {
            return Err(refuse("must be 1 to 12 digits then a unit"));
        }
        let count: u64 = digits
            .parse()
            .map_err(|_| refuse("must be 1 to 12 digits then a unit"))?;
        let ms = count.saturating_mul(unit_ms);
        if ms == 0 {
            return Err(refuse("must be at least 1s"));
        }
        if ms > MAX_OLDER_THAN_MS {
            return Err(refuse("must be at most 36500d"));
        }
        Ok(OlderThan { ms })
    }

    /// The age, in milliseconds.
    pub fn millis(self) -> u64 {
        self.ms
    }

    /// The prune target for a store whose clock reads `now_ms` (unix ms):
    /// runs whose last event is before `now_ms - age`.
    pub fn target(self, now_ms: u64) -> DeletionTarget {
        DeletionTarget::OlderThan(now_ms.saturating_sub(self.ms))
    }
}

/// The input as an error may show it: short plain text as is, anything
/// else by its length only.
fn shown(text: &str) -> String {
    if text.len() <= 16 && text.bytes().all(|b| b.is_ascii_graphic()) {
        format!("{text:?}")
    } else {
        format!("of {} bytes", text.len())
    }
}

/// An [`OlderThan`] that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("older_than {shown} {detail} (rule prune.older_than)")]
pub struct OlderThanError {
    detail: &'static str,
    shown: String,
}

impl OlderThanError {
    /// The rule broken: `prune.older_than`.
    pub fn rule(&self) -> &'static str {
        "prune.older_than"
    }
}

/// Why a deletion was refused or failed. Nothing was deleted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeleteError {
    /// A covered run is still running.
    #[error(
        "run {run_id} is still running (rule deletion.live): end it, or `keel recover` an abandoned one, first"
    )]
    Live {
        /// The running run.
        run_id: RunId,
    },
    /// The named run is not stored.
    #[error("run {run_id} is not stored (rule deletion.not_found)")]
    NotFound {
        /// The run.
        run_id: RunId,
    },
    /// Stored runs outside the request continue or fork from a covered run.
    #[error(
        "run {run_id} is continued or forked by {} other run(s): {} (rule deletion.dependents); delete the conversation, or those runs first",
        dependents.len(),
        list(dependents)
    )]
    Dependents {
        /// The covered run.
        run_id: RunId,
        /// The runs that name it.
        dependents: Vec<RunId>,
    },
    /// The actor is not acceptable (its text is not echoed: it may hold a
    /// secret).
    #[error("deletion actor {detail} ({len} bytes; rule deletion.who)")]
    InvalidWho {
        /// The rule broken.
        detail: &'static str,
        /// The actor's length in bytes.
        len: usize,
    },
    /// The runs were deleted (their tombstones recorded), but the store
    /// could not reclaim the pages that held them: their bytes may stay
    /// in the store's files until its next reclaim.
    #[error(
        "deleted {} run(s), but their freed pages were not reclaimed: {reason}",
        deleted.len()
    )]
    Reclaim {
        /// The tombstones of the deleted runs.
        deleted: Vec<Tombstone>,
        /// Why the reclaim failed.
        reason: String,
    },
    /// A JetStream call failed. The stream has no transaction: the
    /// tombstones are written first and the named run is purged last, so
    /// repeating the request finishes a deletion this error interrupted.
    #[error("deletion on JetStream: {op}: {detail}")]
    JetStream {
        /// What was being done.
        op: &'static str,
        /// The client's or server's message.
        detail: String,
    },
    /// The store failed (nothing was deleted: the transaction rolled back).
    #[error("deletion: {0}")]
    Journal(#[from] JournalError),
}

impl DeleteError {
    /// The rule's name, for problems and exit codes.
    pub fn rule(&self) -> &'static str {
        match self {
            DeleteError::Live { .. } => "deletion.live",
            DeleteError::NotFound { .. } => "deletion.not_found",
            DeleteError::Dependents { .. } => "deletion.dependents",
            DeleteError::InvalidWho { .. } => "deletion.who",
            DeleteError::Reclaim { .. } => "deletion.reclaim",
            DeleteError::JetStream { .. } | DeleteError::Journal(_) => "deletion.store",
        }
    }
}

fn list(ids: &[RunId]) -> String {
    ids.iter().map(RunId::as_str).collect::<Vec<_>>().join(", ")
}

/// The links a run's `run.started` records.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunLinks {
    /// `parent.run_id`: the run this one is a sub-run of.
    pub parent: Option<RunId>,
    /// `continues`: the run this one follows in a conversation.
    pub continues: Option<RunId>,
    /// `forked_from.run_id`: the run this one was forked from.
    pub forked_from: Option<RunId>,
}

impl RunLinks {
    /// The links of a stored `run.started` canonical line (a member that
    /// is absent or not a valid run id is `None`).
    pub fn from_started_line(line: &str) -> RunLinks {
        let Ok(value) = serde_json::from_str::<serde_json::Value>(line) else {
            return RunLinks::default();
        };
        let payload = &value["payload"];
        let id = |v: &serde_json::Value| v.as_str().and_then(|s| RunId::parse(s).ok());
        RunLinks {
            parent: id(&payload["parent"]["run_id"]),
            continues: id(&payload["continues"]),
            forked_from: id(&payload["forked_from"]["run_id"]),
        }
    }
}

/// What [`plan`] needs of one stored run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunNode {
    /// The run.
    pub run_id: RunId,
    /// Its stored status.
    pub status: RunStatus,
    /// The root of its `continues` chain (itself when it continues none).
    pub conversation: RunId,
    /// Its `run.started` links.
    pub links: RunLinks,
    /// Its last stored event's `ts`, unix microseconds.
    pub last_event_us: u64,
    /// How many events it holds.
    pub events: u64,
}

/// A run [`plan`] covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedRun {
    /// The run.
    pub run_id: RunId,
    /// Its events, for the tombstone.
    pub events: u64,
}

/// The runs `request` deletes among `runs` (every stored run), in run id
/// order, or the rule it breaks. Pure: the store reads the nodes and
/// deletes what this returns, in one transaction.
pub fn plan(request: &DeletionRequest, runs: &[RunNode]) -> Result<Vec<PlannedRun>, DeleteError> {
    let graph = Graph::new(runs);
    let covered = match request.target() {
        DeletionTarget::Run(run_id) => {
            graph.node(run_id)?;
            graph.with_descendants([run_id.clone()])
        }
        DeletionTarget::Conversation(run_id) => {
            let root = &graph.node(run_id)?.conversation;
            let members = runs
                .iter()
                .filter(|n| &n.conversation == root)
                .map(|n| n.run_id.clone());
            graph.with_descendants(members)
        }
        DeletionTarget::OlderThan(cutoff_ms) => graph.prunable(cutoff_ms.saturating_mul(1000)),
    };
    if !matches!(request.target(), DeletionTarget::OlderThan(_)) {
        graph.check(&covered)?;
    }
    Ok(covered
        .into_iter()
        .filter_map(|id| graph.nodes.get(&id))
        .map(|n| PlannedRun {
            run_id: n.run_id.clone(),
            events: n.events,
        })
        .collect())
}

/// The tombstones of the `planned` runs, deleted at `deleted_ts` by
/// `request`'s [`Who`].
pub(crate) fn tombstones(
    request: &DeletionRequest,
    planned: Vec<PlannedRun>,
    deleted_ts: u64,
) -> Vec<Tombstone> {
    planned
        .into_iter()
        .map(|PlannedRun { run_id, events }| {
            Tombstone::new(run_id, deleted_ts, request.who().clone(), events)
        })
        .collect()
}

/// Now, unix milliseconds.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The stored runs, by id, with each run's sub-runs and dependents.
struct Graph<'a> {
    nodes: BTreeMap<RunId, &'a RunNode>,
    children: BTreeMap<RunId, Vec<RunId>>,
    /// Runs that continue or fork from the key.
    dependents: BTreeMap<RunId, Vec<RunId>>,
}

impl<'a> Graph<'a> {
    fn new(runs: &'a [RunNode]) -> Graph<'a> {
        let nodes: BTreeMap<RunId, &RunNode> = runs.iter().map(|n| (n.run_id.clone(), n)).collect();
        let mut children: BTreeMap<RunId, Vec<RunId>> = BTreeMap::new();
        let mut dependents: BTreeMap<RunId, Vec<RunId>> = BTreeMap::new();
        for n in runs {
            if let Some(parent) = &n.links.parent {
                children
                    .entry(parent.clone())
                    .or_default()
                    .push(n.run_id.clone());
            }
            for named in [&n.links.continues, &n.links.forked_from]
                .into_iter()
                .flatten()
            {
                dependents
                    .entry(named.clone())
                    .or_default()
                    .push(n.run_id.clone());
            }
        }
        Graph {
            nodes,
            children,
            dependents,
        }
    }

    fn node(&self, run_id: &RunId) -> Result<&'a RunNode, DeleteError> {
        self.nodes
            .get(run_id)
            .copied()
            .ok_or_else(|| DeleteError::NotFound {
                run_id: run_id.clone(),
            })
    }

    /// `start` and every stored sub-run below them.
    fn with_descendants(&self, start: impl IntoIterator<Item = RunId>) -> BTreeSet<RunId> {
        let mut seen = BTreeSet::new();
        let mut stack: Vec<RunId> = start.into_iter().collect();
        while let Some(id) = stack.pop() {
            if seen.insert(id.clone())
                && let Some(kids) = self.children.get(&id)
            {
                stack.extend(kids.iter().cloned());
            }
        }
        seen
    }

    /// The rules for an explicit request: no live run, no dependent
    /// outside the request.
    fn check(&self, covered: &BTreeSet<RunId>) -> Result<(), DeleteError> {
        for id in covered {
            if self.nodes.get(id).is_some_and(|n| !n.status.is_ended()) {
                return Err(DeleteError::Live { run_id: id.clone() });
            }
        }
        for id in covered {
            let outside = self.outside_dependents(id, covered);
            if !outside.is_empty() {
                return Err(DeleteError::Dependents {
                    run_id: id.clone(),
                    dependents: outside,
                });
            }
        }
        Ok(())
    }

    fn outside_dependents(&self, id: &RunId, covered: &BTreeSet<RunId>) -> Vec<RunId> {
        let mut outside: Vec<RunId> = self
            .dependents
            .get(id)
            .into_iter()
            .flatten()
            .filter(|d| !covered.contains(*d))
            .cloned()
            .collect();
        outside.sort();
        outside.dedup();
        outside
    }

    /// Prune: the run trees (roots: runs that are no stored run's sub-run)
    /// that are wholly closed and wholly older than `cutoff_us`, minus the
    /// trees a kept run depends on, until nothing changes.
    fn prunable(&self, cutoff_us: u64) -> BTreeSet<RunId> {
        let mut trees: Vec<BTreeSet<RunId>> = self
            .nodes
            .values()
            .filter(|n| {
                n.links
                    .parent
                    .as_ref()
                    .is_none_or(|p| !self.nodes.contains_key(p))
            })
            .map(|root| self.with_descendants([root.run_id.clone()]))
            .filter(|tree| {
                tree.iter().all(|id| {
                    self.nodes
                        .get(id)
                        .is_some_and(|n| n.status.is_ended() && n.last_event_us < cutoff_us)
                })
            })
            .collect();
        loop {
            let covered: BTreeSet<RunId> = trees.iter().flatten().cloned().collect();
            let before = trees.len();
            trees.retain(|tree| {
                tree.iter()
                    .all(|id| self.outside_dependents(id, &covered).is_empty())
            });
            if trees.len() == before {
                return covered;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> RunId {
        RunId::parse(s).unwrap()
    }

    /// `spec`: `name:status:last_ms[:links]` with links `p=PARENT`,
    /// `c=CONTINUES`, `f=FORKED`, comma-separated.
    fn node(spec: &str) -> RunNode {
        let parts: Vec<&str> = spec.split(':').collect();
        let mut links = RunLinks::default();
        for link in parts
            .get(3)
            .map_or("", |s| s)
            .split(',')
            .filter(|s| !s.is_empty())
        {
            let (k, v) = link.split_once('=').unwrap();
            match k {
                "p" => links.parent = Some(id(v)),
                "c" => links.continues = Some(id(v)),
                "f" => links.forked_from = Some(id(v)),
                _ => panic!("{k}"),
            }
        }
        RunNode {
            run_id: id(parts[0]),
            status: RunStatus::parse(parts[1]).unwrap(),
            conversation: id(parts[0]),
            links,
            last_event_us: parts[2].parse::<u64>().unwrap() * 1000,
            events: 3,
        }
    }

    /// Nodes with each run's conversation root computed from `continues`.
    fn store(specs: &[&str]) -> Vec<RunNode> {
        let mut nodes: Vec<RunNode> = specs.iter().map(|s| node(s)).collect();
        let prev: BTreeMap<RunId, Option<RunId>> = nodes
            .iter()
            .map(|n| (n.run_id.clone(), n.links.continues.clone()))
            .collect();
        for n in &mut nodes {
            let mut root = n.run_id.clone();
            while let Some(Some(p)) = prev.get(&root) {
                root = p.clone();
            }
            n.conversation = root;
        }
        nodes
    }

    fn check(specs: &[&str], target: DeletionTarget, expected: Result<&[&str], &str>) {
        let request = DeletionRequest::new(target.clone(), Who::parse("tester").unwrap());
        let got = plan(&request, &store(specs));
        match (got, expected) {
            (Ok(planned), Ok(want)) => {
                let got: Vec<&str> = planned.iter().map(|p| p.run_id.as_str()).collect();
                assert_eq!(got, want, "{target:?} over {specs:?}");
            }
            (Err(e), Err(rule)) => assert_eq!(e.rule(), rule, "{target:?}: {e}"),
            (got, want) => panic!("{target:?} over {specs:?}: got {got:?}, want {want:?}"),
        }
    }

    #[test]
    fn requests_cover_runs_by_the_rules() {
        use DeletionTarget::{Conversation, OlderThan, Run};
        let chain = ["a:completed:10", "b:completed:20:c=a", "c:completed:30:c=b"];
        let tree = ["p:completed:10", "k:completed:9:p=p", "g:completed:8:p=k"];
        // A run alone, then with its sub-runs.
        check(
            &["a:completed:1", "x:completed:1"],
            Run(id("a")),
            Ok(&["a"]),
        );
        check(&tree, Run(id("p")), Ok(&["g", "k", "p"]));
        check(&tree, Run(id("k")), Ok(&["g", "k"]));
        check(&tree, Run(id("nope")), Err("deletion.not_found"));
        // Live: the run, or one of its sub-runs.
        check(&["a:running:1"], Run(id("a")), Err("deletion.live"));
        check(
            &["p:completed:1", "k:running:1:p=p"],
            Run(id("p")),
            Err("deletion.live"),
        );
        // Dependents: continued or forked from, outside the request.
        check(&chain, Run(id("b")), Err("deletion.dependents"));
        check(&chain, Run(id("c")), Ok(&["c"]));
        check(
            &["a:completed:1", "f:completed:1:f=a"],
            Run(id("a")),
            Err("deletion.dependents"),
        );
        // A conversation: the chain from any member, with sub-runs.
        check(&chain, Conversation(id("b")), Ok(&["a", "b", "c"]));
        check(
            &[
                "a:completed:1",
                "b:completed:2:c=a",
                "s:completed:2:p=b",
                "o:completed:1",
            ],
            Conversation(id("a")),
            Ok(&["a", "b", "s"]),
        );
        check(
            &["a:completed:1", "b:completed:2:c=a", "f:completed:3:f=b"],
            Conversation(id("a")),
            Err("deletion.dependents"),
        );
        check(
            &["a:completed:1", "b:running:2:c=a"],
            Conversation(id("a")),
            Err("deletion.live"),
        );
        check(&chain, Conversation(id("z")), Err("deletion.not_found"));
        // Prune: closed trees whose every run ended before the cutoff.
        check(
            &["a:completed:5", "b:completed:15"],
            OlderThan(10),
            Ok(&["a"]),
        );
        check(&["a:completed:10"], OlderThan(10), Ok(&[]));
        check(&["a:running:1", "b:failed:1"], OlderThan(10), Ok(&["b"]));
        check(&tree, OlderThan(11), Ok(&["g", "k", "p"]));
        check(&tree, OlderThan(10), Ok(&[]));
        check(
            &["p:completed:1", "k:running:1:p=p"],
            OlderThan(10),
            Ok(&[]),
        );
        // Prune keeps what a kept run continues or forks, transitively.
        check(&chain, OlderThan(25), Ok(&[]));
        check(&chain, OlderThan(31), Ok(&["a", "b", "c"]));
        check(
            &["a:completed:1", "f:completed:1:f=a", "g:completed:50:f=f"],
            OlderThan(10),
            Ok(&[]),
        );
        // A sub-run whose parent is not stored is a tree of its own.
        check(&["k:completed:1:p=gone"], OlderThan(10), Ok(&["k"]));
    }

    #[test]
    fn who_is_bounded_and_screened() {
        let key = format!("{}{}", "sk-proj-", "a1B2".repeat(8));
        for (text, ok) in [
            ("ops@example.com", true),
            ("", false),
            ("a\nb", false),
            (&"x".repeat(MAX_WHO_BYTES) as &str, true),
            (&"x".repeat(MAX_WHO_BYTES + 1), false),
            (&key, false),
        ] {
            let got = Who::parse(text);
            assert_eq!(got.is_ok(), ok, "{text:?}");
            if let Err(e) = got {
                assert_eq!(e.rule(), "deletion.who");
                assert!(!e.to_string().contains(&key), "{e}");
            }
        }
    }

    #[test]
    fn older_than_takes_a_count_and_a_unit_within_bounds() {
        for (text, ms) in [
            ("30d", Some(30 * DAY_MS)),
            ("12h", Some(12 * 3_600_000)),
            ("90m", Some(90 * 60_000)),
            ("1s", Some(1_000)),
            ("36500d", Some(MAX_OLDER_THAN_MS)),
            ("36501d", None),
            ("0s", None),
            ("0d", None),
            ("30", None),
            ("d", None),
            ("30D", None),
            ("-3d", None),
            ("3.5d", None),
            ("1234567890123s", None),
            ("30dd", None),
            ("", None),
            ("3é", None),
        ] {
            let got = OlderThan::parse(text);
            assert_eq!(
                got.as_ref().ok().map(|o| o.millis()),
                ms,
                "{text:?}: {got:?}"
            );
            if let Err(e) = got {
                assert!(e.to_string().ends_with("(rule prune.older_than)"), "{e}");
            }
        }
        let age = OlderThan::parse("1s").unwrap();
        assert_eq!(age.target(5_000), DeletionTarget::OlderThan(4_000));
        assert_eq!(age.target(10), DeletionTarget::OlderThan(0));
    }

    #[test]
    fn links_are_read_from_the_started_line() {
        let line = r#"{"v":1,"run_id":"c","seq":1,"ts":1,"kind":"run.started","payload":{"continues":"b","forked_from":{"run_id":"f","seq":3},"parent":{"run_id":"p","call_id":"k"}}}"#;
        assert_eq!(
            RunLinks::from_started_line(line),
            RunLinks {
                parent: Some(id("p")),
                continues: Some(id("b")),
                forked_from: Some(id("f")),
            }
        );
        assert_eq!(RunLinks::from_started_line("not json"), RunLinks::default());
    }
}
