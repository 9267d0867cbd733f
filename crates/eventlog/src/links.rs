//! Cross-run links: a sub-run's `run.started` names its parent and call
//! (`parent`), the parent's log names the child back (`tool.sub_run`, then
//! the `sub_run` member of the call's terminal). [`LinkCheck`] reads a
//! store's runs and checks that the links hold both ways and that the
//! two ends agree on how the child ended:
//!
//! - `links.parent_known`: a child's `parent` names a stored run holding a
//!   `tool.sub_run` of that (started) call naming the child, and following
//!   parents never comes back to the run;
//! - `links.child_known`: a `tool.sub_run` names a stored run whose
//!   `parent` points back. Tolerated when the child is absent and the
//!   call's terminal is `host_lost` (the host died between the link and
//!   the child's start) or the call has not ended (the child may still be
//!   starting);
//! - `links.terminal_agrees`: child `run.completed` ↔ `tool.completed`,
//!   `run.failed` ↔ `tool.failed` (its `sub_run.cause`, when recorded, the
//!   child's cause), `run.cancelled` ↔ `tool.cancelled`; the terminal's `sub_run`
//!   names the child, and a call's terminal never comes while its child
//!   is open. A `host_lost` tool terminal agrees with anything.
//!
//! It checks links only: each run's own lifecycle is the per-run checks'
//! job (`keel verify` runs those first).
//!
//! A run deleted from the store leaves a tombstone
//! ([`LinkCheck::tombstone`]): a link to it (a parent naming a deleted
//! child, a child naming a deleted parent) is not a violation, and is
//! counted in [`LinkReport::to_deleted`].
//!
//! ```
//! use keel_eventlog::links::LinkCheck;
//! use keel_eventlog::*;
//! use keel_message::{CallId, RunId, ToolName};
//! use std::sync::Arc;
//!
//! let (parent, child, call) = (RunId::parse("run_p")?, RunId::parse("run_c")?, CallId::parse("c1")?);
//! let p = RunLog::new(parent.clone(), LogConfig::default(), Arc::new(SystemClock))?;
//! p.commit(&Payload::RunStarted(RunStarted::default()))?;
//! p.commit(&Payload::TurnStarted(TurnRef { turn: 1, extra: Extra::new() }))?;
//! let tool = ToolName::parse("researcher")?;
//! p.commit(&Payload::ToolStarted(ToolRef { turn: 1, call_id: call.clone(), tool, extra: Extra::new() }))?;
//! p.commit(&Payload::ToolSubRun(SubRunStarted { turn: 1, call_id: call.clone(), run_id: child.clone(), extra: Extra::new() }))?;
//! let c = RunLog::new(child.clone(), LogConfig::default(), Arc::new(SystemClock))?;
//! let parent_link = ParentLink::new(parent.clone(), call.clone());
//! c.commit(&Payload::RunStarted(RunStarted { parent: Some(parent_link), ..RunStarted::default() }))?;
//!
//! let mut check = LinkCheck::new();
//! for event in p.retained_after(0).iter().chain(c.retained_after(0).iter()) {
//!     check.push(event);
//! }
//! // Both still running: the link holds.
//! assert_eq!(check.finish()?.sub_runs(), 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::event::Event;
use crate::kind::{EventKind, Scope, Terminal};
use crate::payload::{Cause, Payload, SubRunRef};
use crate::scope::ScopeKey;
use keel_message::{CallId, RunId};
use std::collections::{BTreeMap, BTreeSet, HashSet};

mod judge;
mod violation;
pub use violation::{ChildGap, LinkViolation, ParentGap, TerminalGap};

/// Reads runs' events (each run's in order; runs in any order, even
/// interleaved), then [`finish`](Self::finish) checks the links between
/// them. It keeps, per run, its parent link, how it ended, its open tool
/// calls and its links: memory grows with runs and links, not events.
#[derive(Debug, Default)]
pub struct LinkCheck {
    runs: BTreeMap<RunId, RunLinks>,
    /// Runs deleted from the store (their tombstones).
    deleted: BTreeSet<RunId>,
}

/// What one run says about its links.
#[derive(Debug, Default)]
struct RunLinks {
    /// Its `run.started`'s `parent`: the parent run and call.
    parent: Option<(RunId, CallId)>,
    /// How it ended, with its `run.failed` cause.
    end: Option<RunEnd>,
    /// Tool calls started and not yet ended.
    open_calls: HashSet<ScopeKey>,
    /// Its `tool.sub_run`s, by call scope.
    links: BTreeMap<ScopeKey, CallLink>,
    /// Tool terminals naming a sub-run their call never linked.
    unlinked_refs: Vec<UnlinkedRef>,
}

/// A run's terminal.
#[derive(Debug, Clone, PartialEq)]
struct RunEnd {
    terminal: Terminal,
    cause: Option<Cause>,
}

/// A `tool.sub_run` and how its call ended.
#[derive(Debug)]
struct CallLink {
    call_id: CallId,
    child: RunId,
    end: Option<ToolEnd>,
}

/// A linked call's terminal.
#[derive(Debug)]
struct ToolEnd {
    terminal: Terminal,
    sub_run: Option<SubRunRef>,
}

/// A tool terminal's `sub_run` on a call without a `tool.sub_run`.
#[derive(Debug)]
struct UnlinkedRef {
    call_id: CallId,
    named: RunId,
}

/// What a clean [`LinkCheck`] saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LinkReport {
    runs: usize,
    sub_runs: usize,
    unstarted: usize,
    to_deleted: usize,
}

impl LinkReport {
    /// The runs read.
    pub fn runs(&self) -> usize {
        self.runs
    }

    /// The links whose child is stored and points back.
    pub fn sub_runs(&self) -> usize {
        self.sub_runs
    }

    /// The links without a stored child that are tolerated: the call's
    /// terminal is `host_lost`, or the call has not ended.
    pub fn unstarted(&self) -> usize {
        self.unstarted
    }

    /// The links (either end) to a run a tombstone names, not stored
    /// because it was deleted.
    pub fn to_deleted(&self) -> usize {
        self.to_deleted
    }
}

impl LinkCheck {
    /// An empty check.
    pub fn new() -> LinkCheck {
        LinkCheck::default()
    }

    /// Reads the next event of its run. Only the kinds that carry links
    /// are decoded (`run.started`, run and tool lifecycle events,
    /// `tool.sub_run`).
    pub fn push(&mut self, event: &Event) {
        let relevant = match event.kind() {
            EventKind::ToolSubRun => true,
            EventKind::Lifecycle(scope, _) => matches!(scope, Scope::Run | Scope::Tool),
            _ => false,
        };
        // An `Event` is checked, payload included, when it is decoded or
        // committed, so its payload decodes again here.
        if let (true, Ok(payload)) = (relevant, event.payload()) {
            let run = self.runs.entry(event.run_id().clone()).or_default();
            run.apply(payload);
        }
    }

    /// Records that `run_id` was deleted (a store's tombstone names it): a
    /// link to it is not a violation while it is not stored.
    pub fn tombstone(&mut self, run_id: RunId) {
        self.deleted.insert(run_id);
    }

    /// Checks every link read; the first violation (runs in id order) is
    /// the error.
    pub fn finish(self) -> Result<LinkReport, LinkViolation> {
        judge::judge(&self.runs, &self.deleted)
    }
}

impl RunLinks {
    fn apply(&mut self, payload: Payload) {
        match payload {
            Payload::RunStarted(p) => self.parent = p.parent.map(|l| (l.run_id, l.call_id)),
            Payload::RunFailed(p) => self.ended(Terminal::Failed, p.cause),
            Payload::RunCompleted(_) => self.ended(Terminal::Completed, None),
            Payload::RunCancelled(_) => self.ended(Terminal::Cancelled, None),
            Payload::ToolStarted(p) => {
                self.open_calls.insert(tool_key(p.turn, &p.call_id));
            }
            Payload::ToolSubRun(p) => {
                let key = tool_key(p.turn, &p.call_id);
                // A link outside a started call is the per-run rule
                // `lifecycle.sub_run_scope`'s to report; here it links
                // nothing, so its child finds no link.
                if self.open_calls.contains(&key) && !self.links.contains_key(&key) {
                    let link = CallLink {
                        call_id: p.call_id,
                        child: p.run_id,
                        end: None,
                    };
                    self.links.insert(key, link);
                }
            }
            Payload::ToolCompleted(p) => {
                self.tool_ended(p.turn, p.call_id, Terminal::Completed, &p.extra);
            }
            Payload::ToolFailed(p) => {
                self.tool_ended(p.turn, p.call_id, Terminal::Failed, &p.extra)
            }
            Payload::ToolCancelled(p) => {
                self.tool_ended(p.turn, p.call_id, Terminal::Cancelled, &p.extra);
            }
            _ => {}
        }
    }

    fn ended(&mut self, terminal: Terminal, cause: Option<Cause>) {
        self.end = Some(RunEnd { terminal, cause });
    }

    fn tool_ended(
        &mut self,
        turn: u64,
        call_id: CallId,
        terminal: Terminal,
        extra: &crate::payload::Extra,
    ) {
        let key = tool_key(turn, &call_id);
        if !self.open_calls.remove(&key) {
            return;
        }
        let sub_run = SubRunRef::from_extra(extra);
        match self.links.get_mut(&key) {
            Some(link) => link.end = Some(ToolEnd { terminal, sub_run }),
            None => {
                if let Some(named) = sub_run {
                    self.unlinked_refs.push(UnlinkedRef {
                        call_id,
                        named: named.run_id,
                    });
                }
            }
        }
    }
}

fn tool_key(turn: u64, call_id: &CallId) -> ScopeKey {
    ScopeKey::Tool {
        turn,
        call_id: call_id.clone(),
    }
}
