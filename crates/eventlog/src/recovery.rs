//! Recovery terminals: what closes a run whose host died with scopes open.
//!
//! The journal of a killed host holds a contiguous prefix of the run whose
//! started scopes have no terminal. Recovery restores the run's log from
//! that prefix and appends, innermost first and continuing its sequence,
//! one failed terminal per open scope, each naming the loss of the host
//! (rule `run.host_lost`, cause kind [`HOST_LOST`]): a tool in flight is
//! `uncertain` (nobody knows whether its effect happened), unless its
//! `tool.started` recorded `"idempotent": true`: then it is retryable
//! (`retry: "retryable"`, no outcome: whether the effect happened does not
//! matter, repeating it is safe); a model call closes at the position the
//! log shows. A tool call that started a sub-run (`tool.sub_run`) names its
//! child in the terminal: `"sub_run": {"run_id": <child>, "cause": {"kind":
//! "host_lost"}}`, the mark the cross-run link check (`crate::links`)
//! tolerates whatever state the child was left in. Recover a tree's
//! children before their parents, so each child's `run.failed` is
//! committed before its parent's `tool.failed`.

use crate::log::RunLog;
use crate::payload::{
    Cause, ErrorText, Extra, InteractionFailed, ModelFailed, Payload, ProblemRecord, RunFailed,
    SubRunRef, ToolFailed, ToolOutcome, ToolRetry, TurnFailed,
};
use crate::scope::ScopeKey;
use keel_message::{CallId, OperationId, RunId};
use keel_stream::{ProblemKind, ProviderProblem, RetryPosition};
use std::collections::{HashMap, HashSet};

/// The `tool.started` member that marks an idempotent tool's call
/// (`"idempotent": true`).
pub const IDEMPOTENT: &str = "idempotent";

/// The cause kind of every recovery terminal of the run and its turn.
pub const HOST_LOST: &str = "host_lost";

const HOST_LOST_TEXT: &str =
    "the host running this run was lost before it ended (rule run.host_lost)";

/// The terminals that close every open scope of `log`, innermost first:
/// commit them in order (through the observers) to recover the run.
/// Empty when the run has ended.
///
/// ```
/// use keel_eventlog::*;
/// use keel_message::RunId;
/// use std::sync::Arc;
/// let log = RunLog::new(RunId::parse("run_1")?, LogConfig::default(), Arc::new(SystemClock))?;
/// log.commit(&Payload::RunStarted(RunStarted::default()))?;
/// log.commit(&Payload::TurnStarted(TurnRef { turn: 1, extra: Extra::new() }))?;
/// let kinds: Vec<String> = recovery::terminals(&log).iter().map(|p| p.kind().to_string()).collect();
/// assert_eq!(kinds, ["turn.failed", "run.failed"]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn terminals(log: &RunLog) -> Vec<Payload> {
    let open = log.open_scope_starts();
    if open.is_empty() {
        return Vec::new();
    }
    let with_output = attempts_with_output(log);
    let idempotent = idempotent_calls(log);
    let children = linked_children(log);
    let error = ErrorText::new(HOST_LOST_TEXT);
    let cause = Cause {
        kind: Some(HOST_LOST.to_owned()),
        ..Cause::default()
    };
    open.iter()
        .map(|scope| match scope.key() {
            ScopeKey::Run => Payload::RunFailed(RunFailed {
                error: error.clone(),
                cause: Some(cause.clone()),
                extra: Extra::new(),
            }),
            ScopeKey::Turn(turn) => Payload::TurnFailed(TurnFailed {
                turn: *turn,
                error: error.clone(),
                cause: Some(cause.clone()),
                extra: Extra::new(),
            }),
            ScopeKey::Model { turn, operation_id } => Payload::ModelFailed(ModelFailed {
                turn: *turn,
                operation_id: operation_id.clone(),
                problem: ProblemRecord::from(&ProviderProblem::new(
                    ProblemKind::Unavailable,
                    HOST_LOST_TEXT,
                    false,
                )),
                position: if with_output.contains(operation_id) {
                    RetryPosition::Partial
                } else {
                    RetryPosition::Pristine
                },
                extra: Extra::new(),
            }),
            ScopeKey::Tool { turn, call_id } => match scope.tool() {
                Some(tool) => Payload::ToolFailed(ToolFailed {
                    turn: *turn,
                    call_id: call_id.clone(),
                    tool: tool.clone(),
                    error: error.clone(),
                    outcome: (!idempotent.contains(call_id)).then_some(ToolOutcome::Uncertain),
                    retry: idempotent.contains(call_id).then_some(ToolRetry::Retryable),
                    extra: sub_run_extra(children.get(scope.key()), &cause),
                }),
                // A tool scope opened without its name (a resumed tracker
                // given bare keys) can only be cancelled by name-less means.
                None => scope.cancelled(),
            },
            ScopeKey::Interaction {
                turn,
                interaction_id,
            } => Payload::InteractionFailed(InteractionFailed {
                turn: *turn,
                interaction_id: interaction_id.clone(),
                error: error.clone(),
                extra: Extra::new(),
            }),
        })
        .collect()
}

/// The `extra` of a recovered tool terminal: the child it linked, if any,
/// with the `host_lost` cause.
fn sub_run_extra(child: Option<&RunId>, cause: &Cause) -> Extra {
    let mut extra = Extra::new();
    if let Some(child) = child {
        let named = SubRunRef {
            run_id: child.clone(),
            cause: Some(cause.clone()),
        };
        named.insert_into(&mut extra);
    }
    extra
}

/// The child each tool call linked (`tool.sub_run`), by call scope.
fn linked_children(log: &RunLog) -> HashMap<ScopeKey, RunId> {
    log.retained_after(0)
        .iter()
        .filter(|e| *e.kind() == crate::kind::EventKind::ToolSubRun)
        .filter_map(|e| match e.payload() {
            Ok(Payload::ToolSubRun(p)) => Some((
                ScopeKey::Tool {
                    turn: p.turn,
                    call_id: p.call_id,
                },
                p.run_id,
            )),
            _ => None,
        })
        .collect()
}

/// Tool calls whose `tool.started` recorded `"idempotent": true`.
fn idempotent_calls(log: &RunLog) -> HashSet<CallId> {
    log.retained_after(0)
        .iter()
        .filter_map(|e| match e.payload() {
            Ok(Payload::ToolStarted(p))
                if p.extra.get(IDEMPOTENT) == Some(&serde_json::Value::Bool(true)) =>
            {
                Some(p.call_id)
            }
            _ => None,
        })
        .collect()
}

/// Model attempts that recorded output (a text delta, reasoning or a tool
/// call): they close `partial`.
fn attempts_with_output(log: &RunLog) -> HashSet<OperationId> {
    log.retained_after(0)
        .iter()
        .filter_map(|e| match e.payload() {
            Ok(Payload::TextDelta(p)) => Some(p.operation_id),
            Ok(Payload::ReasoningDelta(p)) => Some(p.operation_id),
            Ok(Payload::ReasoningEnd(p)) => Some(p.operation_id),
            Ok(Payload::ToolCall(p)) => Some(p.operation_id),
            _ => None,
        })
        .collect()
}

/// Orders `runs` for recovery: every run before its parent, deepest first
/// (a run's depth is how many of its ancestors are among `runs`), runs of
/// one depth keeping their order. Recovering in this order commits each
/// child's `run.failed` before its parent's `tool.failed` of the call that
/// started it, as a live engine would. `parent` reads a run's parent
/// (its `run.started`'s `parent` run, [`parent_of`] for a stored first
/// line). A cycle of parents (only a forged store has one) ends the walk
/// where it comes back.
///
/// ```
/// use keel_eventlog::recovery::children_first;
/// use keel_message::RunId;
/// let id = |s: &str| RunId::parse(s).unwrap();
/// // (run, parent): a root, its child and its grandchild, in start order.
/// let runs = vec![(id("root"), None), (id("child"), Some(id("root"))), (id("grand"), Some(id("child")))];
/// let ordered = children_first(runs, |r| &r.0, |r| r.1.as_ref());
/// let names: Vec<&str> = ordered.iter().map(|r| r.0.as_str()).collect();
/// assert_eq!(names, ["grand", "child", "root"]);
/// ```
pub fn children_first<T>(
    runs: Vec<T>,
    id: impl Fn(&T) -> &RunId,
    parent: impl Fn(&T) -> Option<&RunId>,
) -> Vec<T> {
    let index: HashMap<&RunId, usize> = runs.iter().enumerate().map(|(i, r)| (id(r), i)).collect();
    let parents: Vec<Option<usize>> = runs
        .iter()
        .map(|r| parent(r).and_then(|p| index.get(p).copied()))
        .collect();
    let depths = depths(&parents);
    let mut order: Vec<usize> = (0..runs.len()).collect();
    // Stable: runs of one depth keep their given order.
    order.sort_by_key(|&i| std::cmp::Reverse(depths[i]));
    let mut slots: Vec<Option<T>> = runs.into_iter().map(Some).collect();
    order.into_iter().filter_map(|i| slots[i].take()).collect()
}

/// Each run's number of ancestors, given each run's parent index; every
/// run is walked once (memoized), a cycle stops where it comes back.
fn depths(parents: &[Option<usize>]) -> Vec<usize> {
    let mut depth: Vec<Option<usize>> = vec![None; parents.len()];
    for start in 0..parents.len() {
        let mut path = Vec::new();
        let mut on_path = HashSet::new();
        let mut at = Some(start);
        // Walk up to a run of known depth, the root, or a cycle.
        let mut base = 0;
        while let Some(i) = at {
            if let Some(d) = depth[i] {
                base = d + 1;
                break;
            }
            if !on_path.insert(i) {
                break;
            }
            path.push(i);
            at = parents[i];
        }
        for i in path.into_iter().rev() {
            depth[i] = Some(base);
            base += 1;
        }
    }
    depth.into_iter().map(|d| d.unwrap_or(0)).collect()
}

/// The parent run a stored run's first line (`run.started`) names, if any.
pub fn parent_of(first_line: &str) -> Option<RunId> {
    match crate::event::Event::decode(first_line)
        .ok()?
        .payload()
        .ok()?
    {
        Payload::RunStarted(p) => p.parent.map(|l| l.run_id),
        _ => None,
    }
}
