//! What the cross-run link check reports: a [`LinkViolation`] naming its
//! rule, both run ids and the call id, and why.

use crate::kind::Terminal;
use keel_message::{CallId, RunId};
use std::fmt;

/// Why a child's `parent` link names no known link (rule
/// `links.parent_known`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ParentGap {
    /// The parent run is not in the store.
    NotStored,
    /// The parent holds no `tool.sub_run`, inside a started call, naming
    /// the child.
    NoLink,
    /// The parent's `tool.sub_run` naming the child is of another call.
    OtherCall {
        /// The call the parent's link is of.
        linked: CallId,
    },
    /// Following `parent` links from the run comes back to it.
    Cycle,
}

impl fmt::Display for ParentGap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParentGap::NotStored => f.write_str("the parent run is not stored"),
            ParentGap::NoLink => {
                f.write_str("the parent holds no tool.sub_run of a started call naming it")
            }
            ParentGap::OtherCall { linked } => {
                write!(f, "the parent's tool.sub_run naming it is of call {linked}")
            }
            ParentGap::Cycle => f.write_str("its chain of parents comes back to it"),
        }
    }
}

/// Why a parent's `tool.sub_run` names no known child (rule
/// `links.child_known`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ChildGap {
    /// The child run is not in the store, and the call's terminal is not
    /// `host_lost` (the only way a link may lack its child).
    NotStored,
    /// The child's `run.started` names no parent.
    NoParent,
    /// The child's `run.started` names another parent run or call.
    OtherParent {
        /// The run its `parent` names.
        run_id: RunId,
        /// The call its `parent` names.
        call_id: CallId,
    },
}

impl fmt::Display for ChildGap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChildGap::NotStored => f.write_str("the child run is not stored"),
            ChildGap::NoParent => f.write_str("the child's run.started names no parent"),
            ChildGap::OtherParent { run_id, call_id } => {
                write!(f, "the child names parent {run_id} call {call_id}")
            }
        }
    }
}

/// Why a parent's tool terminal does not agree with its child's run
/// terminal (rule `links.terminal_agrees`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TerminalGap {
    /// The tool ended (not `host_lost`) while the child has no terminal:
    /// a tool terminal comes after its child's run terminal.
    ChildOpen {
        /// How the tool ended.
        tool: Terminal,
    },
    /// The tool and the child ended differently.
    Mismatch {
        /// How the tool ended.
        tool: Terminal,
        /// How the child ended.
        child: Terminal,
    },
    /// The tool terminal has no `sub_run` member naming the child.
    Unnamed,
    /// The tool terminal's `sub_run` names another run.
    NamesOther {
        /// The run it names.
        named: RunId,
    },
    /// The `tool.failed`'s `sub_run.cause` is present and not the child's
    /// `run.failed` cause (it may be left out when the terminal would not
    /// fit with it).
    CauseDiffers,
    /// The tool terminal names a sub-run, but its call linked none.
    NoLink,
}

impl fmt::Display for TerminalGap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = |t: &Terminal| t.as_str();
        match self {
            TerminalGap::ChildOpen { tool } => {
                write!(f, "tool.{} while the child has not ended", name(tool))
            }
            TerminalGap::Mismatch { tool, child } => {
                write!(
                    f,
                    "tool.{} but the child ended run.{}",
                    name(tool),
                    name(child)
                )
            }
            TerminalGap::Unnamed => f.write_str("the tool terminal has no sub_run member"),
            TerminalGap::NamesOther { named } => {
                write!(f, "the tool terminal's sub_run names {named}")
            }
            TerminalGap::CauseDiffers => {
                f.write_str("tool.failed's sub_run.cause is not the child's run.failed cause")
            }
            TerminalGap::NoLink => {
                f.write_str("the tool terminal names a sub-run its call never linked")
            }
        }
    }
}

/// A cross-run link that does not hold. Each names its rule, the parent
/// run, the child run and the call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LinkViolation {
    /// A child's `parent` names no matching link (rule `links.parent_known`).
    #[error(
        "run {child} names parent {parent} call {call_id}, but {gap} (rule links.parent_known)"
    )]
    ParentUnknown {
        /// The parent its `parent` names.
        parent: RunId,
        /// The child.
        child: RunId,
        /// The call its `parent` names.
        call_id: CallId,
        /// What is missing.
        gap: ParentGap,
    },
    /// A parent's `tool.sub_run` names no child pointing back (rule
    /// `links.child_known`).
    #[error(
        "run {parent} call {call_id} links sub-run {child}, but {gap} (rule links.child_known)"
    )]
    ChildUnknown {
        /// The parent.
        parent: RunId,
        /// The child its link names.
        child: RunId,
        /// The call.
        call_id: CallId,
        /// What is missing.
        gap: ChildGap,
    },
    /// The parent's tool terminal and the child's run terminal disagree
    /// (rule `links.terminal_agrees`).
    #[error(
        "run {parent} call {call_id} and its sub-run {child} disagree: {gap} (rule links.terminal_agrees)"
    )]
    TerminalDisagrees {
        /// The parent.
        parent: RunId,
        /// The child.
        child: RunId,
        /// The call.
        call_id: CallId,
        /// How they disagree.
        gap: TerminalGap,
    },
}

impl LinkViolation {
    /// The rule broken: `links.parent_known`, `links.child_known` or
    /// `links.terminal_agrees`.
    pub fn rule(&self) -> &'static str {
        match self {
            LinkViolation::ParentUnknown { .. } => "links.parent_known",
            LinkViolation::ChildUnknown { .. } => "links.child_known",
            LinkViolation::TerminalDisagrees { .. } => "links.terminal_agrees",
        }
    }

    /// The parent run.
    pub fn parent(&self) -> &RunId {
        match self {
            LinkViolation::ParentUnknown { parent, .. }
            | LinkViolation::ChildUnknown { parent, .. }
            | LinkViolation::TerminalDisagrees { parent, .. } => parent,
        }
    }

    /// The child run.
    pub fn child(&self) -> &RunId {
        match self {
            LinkViolation::ParentUnknown { child, .. }
            | LinkViolation::ChildUnknown { child, .. }
            | LinkViolation::TerminalDisagrees { child, .. } => child,
        }
    }

    /// The parent's call.
    pub fn call_id(&self) -> &CallId {
        match self {
            LinkViolation::ParentUnknown { call_id, .. }
            | LinkViolation::ChildUnknown { call_id, .. }
            | LinkViolation::TerminalDisagrees { call_id, .. } => call_id,
        }
    }
}
