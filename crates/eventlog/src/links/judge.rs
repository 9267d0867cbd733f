//! The three link rules over what [`super::LinkCheck`] read.

use super::{CallLink, LinkReport, RunLinks, ToolEnd};
use super::{ChildGap, LinkViolation, ParentGap, TerminalGap};
use crate::kind::Terminal;
use crate::recovery::HOST_LOST;
use keel_message::{CallId, RunId};
use std::collections::{BTreeMap, BTreeSet};

type Runs = BTreeMap<RunId, RunLinks>;

/// What a link's other end is.
enum End<'a> {
    /// Stored (and, for a child, pointing back).
    Stored(&'a RunLinks),
    /// Not stored, and tolerated: the call ended `host_lost` or not at all.
    Unstarted,
    /// Not stored: deleted, as a tombstone says.
    Deleted,
}

/// Every rule, runs in id order: parents first, then each run's links
/// (child known, then terminals), then terminals naming unlinked children.
pub(super) fn judge(runs: &Runs, deleted: &BTreeSet<RunId>) -> Result<LinkReport, LinkViolation> {
    let mut report = LinkReport {
        runs: runs.len(),
        ..LinkReport::default()
    };
    for (child, run) in runs {
        if let Some((parent, call_id)) = &run.parent {
            if !runs.contains_key(parent) && deleted.contains(parent) {
                report.to_deleted += 1;
                continue;
            }
            parent_known(runs, child, parent, call_id)?;
        }
    }
    for (parent, run) in runs {
        for link in run.links.values() {
            match child_known(runs, deleted, parent, link)? {
                End::Stored(child) => {
                    terminal_agrees(parent, link, child)?;
                    report.sub_runs += 1;
                }
                End::Unstarted => report.unstarted += 1,
                End::Deleted => report.to_deleted += 1,
            }
        }
        if let Some(stray) = run.unlinked_refs.first() {
            return Err(LinkViolation::TerminalDisagrees {
                parent: parent.clone(),
                child: stray.named.clone(),
                call_id: stray.call_id.clone(),
                gap: TerminalGap::NoLink,
            });
        }
    }
    Ok(report)
}

/// `links.parent_known` for `child`, whose `parent` is `parent`/`call_id`.
fn parent_known(
    runs: &Runs,
    child: &RunId,
    parent: &RunId,
    call_id: &CallId,
) -> Result<(), LinkViolation> {
    let violation = |gap| LinkViolation::ParentUnknown {
        parent: parent.clone(),
        child: child.clone(),
        call_id: call_id.clone(),
        gap,
    };
    let Some(stored) = runs.get(parent) else {
        return Err(violation(ParentGap::NotStored));
    };
    let Some(link) = stored.links.values().find(|l| &l.child == child) else {
        return Err(violation(ParentGap::NoLink));
    };
    if &link.call_id != call_id {
        return Err(violation(ParentGap::OtherCall {
            linked: link.call_id.clone(),
        }));
    }
    if comes_back(runs, child) {
        return Err(violation(ParentGap::Cycle));
    }
    Ok(())
}

/// Whether following `parent` links from `start` reaches `start` again.
/// At most one step per run, so a cycle not through `start` ends too.
fn comes_back(runs: &Runs, start: &RunId) -> bool {
    let mut at = start;
    for _ in 0..runs.len() {
        match runs.get(at).and_then(|r| r.parent.as_ref()) {
            Some((parent, _)) if parent == start => return true,
            Some((parent, _)) => at = parent,
            None => return false,
        }
    }
    false
}

/// `links.child_known` for `link` of `parent`: the child run when it is
/// stored and points back, or why its absence is tolerated.
fn child_known<'a>(
    runs: &'a Runs,
    deleted: &BTreeSet<RunId>,
    parent: &RunId,
    link: &CallLink,
) -> Result<End<'a>, LinkViolation> {
    let violation = |gap| LinkViolation::ChildUnknown {
        parent: parent.clone(),
        child: link.child.clone(),
        call_id: link.call_id.clone(),
        gap,
    };
    let Some(child) = runs.get(&link.child) else {
        if deleted.contains(&link.child) {
            return Ok(End::Deleted);
        }
        let tolerated = link.end.as_ref().is_none_or(host_lost);
        return if tolerated {
            Ok(End::Unstarted)
        } else {
            Err(violation(ChildGap::NotStored))
        };
    };
    match &child.parent {
        Some((run_id, call_id)) if run_id == parent && call_id == &link.call_id => {
            Ok(End::Stored(child))
        }
        Some((run_id, call_id)) => Err(violation(ChildGap::OtherParent {
            run_id: run_id.clone(),
            call_id: call_id.clone(),
        })),
        None => Err(violation(ChildGap::NoParent)),
    }
}

/// Whether a linked call's terminal is the one recovery writes when the
/// host died: its `sub_run.cause` has kind `host_lost`.
fn host_lost(end: &ToolEnd) -> bool {
    end.sub_run
        .as_ref()
        .and_then(|r| r.cause.as_ref())
        .and_then(|c| c.kind.as_deref())
        == Some(HOST_LOST)
}

/// `links.terminal_agrees` for `link` of `parent` and its stored `child`.
fn terminal_agrees(parent: &RunId, link: &CallLink, child: &RunLinks) -> Result<(), LinkViolation> {
    let violation = |gap| LinkViolation::TerminalDisagrees {
        parent: parent.clone(),
        child: link.child.clone(),
        call_id: link.call_id.clone(),
        gap,
    };
    // A call still in flight agrees with any state of its child.
    let Some(end) = &link.end else {
        return Ok(());
    };
    if host_lost(end) {
        return Ok(());
    }
    let named = match &end.sub_run {
        None => return Err(violation(TerminalGap::Unnamed)),
        Some(named) => named,
    };
    if named.run_id != link.child {
        return Err(violation(TerminalGap::NamesOther {
            named: named.run_id.clone(),
        }));
    }
    let Some(child_end) = &child.end else {
        return Err(violation(TerminalGap::ChildOpen { tool: end.terminal }));
    };
    if child_end.terminal != end.terminal {
        return Err(violation(TerminalGap::Mismatch {
            tool: end.terminal,
            child: child_end.terminal,
        }));
    }
    // The engine leaves the cause out when the terminal would not fit with
    // it; one it records is the child's.
    if end.terminal == Terminal::Failed && named.cause.is_some() && named.cause != child_end.cause {
        return Err(violation(TerminalGap::CauseDiffers));
    }
    Ok(())
}
