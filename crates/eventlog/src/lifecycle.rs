//! The lifecycle tracker: every started scope gets exactly one terminal,
//! scopes nest, and nothing follows the run's terminal.

use crate::kind::{Phase, Scope, Terminal};
use keel_message::{CallId, InteractionId, OperationId};
use std::fmt;

/// Which scope an event opens or closes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ScopeKey {
    /// The run (one per log).
    Run,
    /// A turn, by number.
    Turn(u64),
    /// A model call attempt, inside a turn.
    Model {
        /// The enclosing turn.
        turn: u64,
        /// The attempt's operation id.
        operation_id: OperationId,
    },
    /// A tool call, inside a turn.
    Tool {
        /// The enclosing turn.
        turn: u64,
        /// The call id.
        call_id: CallId,
    },
    /// An interaction, inside a turn.
    Interaction {
        /// The enclosing turn.
        turn: u64,
        /// The interaction id.
        interaction_id: InteractionId,
    },
}

impl ScopeKey {
    /// The scope kind.
    pub fn scope(&self) -> Scope {
        match self {
            ScopeKey::Run => Scope::Run,
            ScopeKey::Turn(_) => Scope::Turn,
            ScopeKey::Model { .. } => Scope::Model,
            ScopeKey::Tool { .. } => Scope::Tool,
            ScopeKey::Interaction { .. } => Scope::Interaction,
        }
    }

    /// The key of the directly enclosing scope.
    pub fn parent(&self) -> Option<ScopeKey> {
        match self {
            ScopeKey::Run => None,
            ScopeKey::Turn(_) => Some(ScopeKey::Run),
            ScopeKey::Model { turn, .. }
            | ScopeKey::Tool { turn, .. }
            | ScopeKey::Interaction { turn, .. } => Some(ScopeKey::Turn(*turn)),
        }
    }
}

impl fmt::Display for ScopeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScopeKey::Run => f.write_str("run"),
            ScopeKey::Turn(n) => write!(f, "turn {n}"),
            ScopeKey::Model { turn, operation_id } => {
                write!(f, "model {operation_id} (turn {turn})")
            }
            ScopeKey::Tool { turn, call_id } => write!(f, "tool {call_id} (turn {turn})"),
            ScopeKey::Interaction {
                turn,
                interaction_id,
            } => write!(f, "interaction {interaction_id} (turn {turn})"),
        }
    }
}

/// A lifecycle rule an event broke.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LifecycleError {
    /// The first event of a run must be `run.started`, and only the first.
    #[error("{key} started, but the run has not started (rule lifecycle.run_first)")]
    RunNotStarted {
        /// The scope that tried to start.
        key: ScopeKey,
    },
    /// A terminal for a scope that was never started.
    #[error(
        "{terminal:?} for {key}, which was never started (rule lifecycle.terminal_without_start)"
    )]
    TerminalWithoutStart {
        /// The scope.
        key: ScopeKey,
        /// The terminal given.
        terminal: Terminal,
    },
    /// A second terminal for a scope.
    #[error("{key} already ended; second terminal {terminal:?} (rule lifecycle.one_terminal)")]
    SecondTerminal {
        /// The scope.
        key: ScopeKey,
        /// The second terminal.
        terminal: Terminal,
    },
    /// A start whose id was used before in this run.
    #[error("{key} was already started in this run (rule lifecycle.unique_start)")]
    DuplicateStart {
        /// The scope.
        key: ScopeKey,
    },
    /// A scope started outside its parent (a tool outside an open turn, a
    /// turn while another turn is open).
    #[error("{key} started while {parent} is not open (rule lifecycle.nesting)")]
    ParentNotOpen {
        /// The scope that tried to start.
        key: ScopeKey,
        /// The parent it needs.
        parent: ScopeKey,
    },
    /// A turn started while another turn is still open.
    #[error("{key} started while {open} is still open (rule lifecycle.one_turn_at_a_time)")]
    TurnStillOpen {
        /// The turn that tried to start.
        key: ScopeKey,
        /// The turn that is open.
        open: ScopeKey,
    },
    /// A parent's terminal while children are open.
    #[error(
        "{key} ended while {open_children} child scope(s) are open, first {first} (rule lifecycle.children_first)"
    )]
    ChildrenOpen {
        /// The parent.
        key: ScopeKey,
        /// How many children are open.
        open_children: usize,
        /// The innermost open child.
        first: ScopeKey,
    },
    /// Any event after the run's terminal.
    #[error("event after the run ended (rule lifecycle.nothing_after_run)")]
    AfterRunEnded,
    /// A non-lifecycle event that belongs to a scope which is not open
    /// (a text delta for a model call that is not running).
    #[error("event for {key}, which is not open (rule lifecycle.in_open_scope)")]
    ScopeNotOpen {
        /// The scope the event names.
        key: ScopeKey,
    },
    /// More scopes open at once than the tracker admits.
    #[error("{open} scopes open, the bound is {max} (rule limits.open_scopes)")]
    TooManyOpen {
        /// Open scopes, counting the new one.
        open: usize,
        /// The bound.
        max: usize,
    },
}

/// What an event does to the lifecycle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transition {
    /// Opens or closes a scope.
    Lifecycle(ScopeKey, Phase),
    /// Belongs to an open scope without changing it (a text delta or tool
    /// call belongs to its model call).
    Within(ScopeKey),
    /// Affects no scope (extension kinds). Still refused after the run ended.
    None,
}

/// Tracks open scopes for one run and refuses events that break the
/// lifecycle rules. Checking is separate from applying, so a refused event
/// leaves the tracker untouched.
///
/// ```
/// use keel_eventlog::{LifecycleTracker, ScopeKey, Transition, Phase, Terminal};
/// let mut t = LifecycleTracker::new(16);
/// t.apply(&Transition::Lifecycle(ScopeKey::Run, Phase::Started))?;
/// t.apply(&Transition::Lifecycle(ScopeKey::Turn(1), Phase::Started))?;
/// assert_eq!(t.open_innermost_first(), vec![ScopeKey::Turn(1), ScopeKey::Run]);
/// assert!(t.apply(&Transition::Lifecycle(ScopeKey::Run, Phase::Ended(Terminal::Completed))).is_err());
/// # Ok::<(), keel_eventlog::LifecycleError>(())
/// ```
#[derive(Debug, Clone)]
pub struct LifecycleTracker {
    /// Open scopes in start order (innermost last).
    open: Vec<ScopeKey>,
    /// The highest turn started so far: turn numbers only increase.
    last_turn: Option<u64>,
    /// Child scopes started in the current (or last) turn, for the
    /// unique-start rule. Cleared when the next turn starts, so memory is
    /// bounded by one turn's scopes, not the run's length.
    started_in_turn: std::collections::HashSet<ScopeKey>,
    run_started: bool,
    run_ended: bool,
    max_open: usize,
}

impl LifecycleTracker {
    /// A tracker for a run that has not started, admitting at most
    /// `max_open` scopes open at once (the run counts).
    pub fn new(max_open: usize) -> Self {
        LifecycleTracker {
            open: Vec::new(),
            last_turn: None,
            started_in_turn: std::collections::HashSet::new(),
            run_started: false,
            run_ended: false,
            max_open,
        }
    }

    /// Rebuilds a tracker from a snapshot's open scopes (outermost first).
    /// `last_turn` is the highest turn started before the snapshot. Child
    /// scopes that ended before the snapshot are forgotten, so within the
    /// open turn the unique-start rule is enforced against open ones.
    pub fn resume(
        open_outermost_first: Vec<ScopeKey>,
        last_turn: Option<u64>,
        run_ended: bool,
        max_open: usize,
    ) -> Result<Self, LifecycleError> {
        let mut t = LifecycleTracker::new(max_open);
        // Replaying the opens checks nesting, order and the bound.
        for key in open_outermost_first {
            t.apply(&Transition::Lifecycle(key, Phase::Started))?;
        }
        t.run_started = true;
        t.last_turn = t.last_turn.max(last_turn);
        if run_ended {
            if let Some(key) = t.open.last() {
                return Err(LifecycleError::ChildrenOpen {
                    key: ScopeKey::Run,
                    open_children: t.open.len(),
                    first: key.clone(),
                });
            }
            t.run_ended = true;
        }
        Ok(t)
    }

    /// Checks `transition` without applying it.
    pub fn check(&self, transition: &Transition) -> Result<(), LifecycleError> {
        if self.run_ended {
            return Err(LifecycleError::AfterRunEnded);
        }
        let (key, phase) = match transition {
            Transition::None => return Ok(()),
            Transition::Within(key) => {
                return if self.open.contains(key) {
                    Ok(())
                } else {
                    Err(LifecycleError::ScopeNotOpen { key: key.clone() })
                };
            }
            Transition::Lifecycle(key, phase) => (key, phase),
        };
        match phase {
            Phase::Started => {
                if *key == ScopeKey::Run {
                    if self.run_started {
                        return Err(LifecycleError::DuplicateStart { key: key.clone() });
                    }
                    return Ok(());
                }
                if !self.run_started {
                    return Err(LifecycleError::RunNotStarted { key: key.clone() });
                }
                let reused = match key {
                    ScopeKey::Turn(n) => self.last_turn.is_some_and(|last| *n <= last),
                    _ => self.started_in_turn.contains(key),
                };
                if reused {
                    return Err(LifecycleError::DuplicateStart { key: key.clone() });
                }
                if let ScopeKey::Turn(_) = key
                    && let Some(open) = self.open.iter().find(|k| matches!(k, ScopeKey::Turn(_)))
                {
                    return Err(LifecycleError::TurnStillOpen {
                        key: key.clone(),
                        open: open.clone(),
                    });
                }
                if let Some(parent) = key.parent()
                    && !self.open.contains(&parent)
                {
                    return Err(LifecycleError::ParentNotOpen {
                        key: key.clone(),
                        parent,
                    });
                }
                if self.open.len() + 1 > self.max_open {
                    return Err(LifecycleError::TooManyOpen {
                        open: self.open.len() + 1,
                        max: self.max_open,
                    });
                }
                Ok(())
            }
            Phase::Ended(terminal) => {
                if !self.open.contains(key) {
                    let ended_before = match key {
                        ScopeKey::Run => self.run_started,
                        ScopeKey::Turn(n) => self.last_turn.is_some_and(|last| *n <= last),
                        _ => self.started_in_turn.contains(key),
                    };
                    return Err(if ended_before {
                        LifecycleError::SecondTerminal {
                            key: key.clone(),
                            terminal: *terminal,
                        }
                    } else {
                        LifecycleError::TerminalWithoutStart {
                            key: key.clone(),
                            terminal: *terminal,
                        }
                    });
                }
                let children: Vec<&ScopeKey> = self
                    .open
                    .iter()
                    .rev()
                    .filter(|k| is_descendant(k, key))
                    .collect();
                if let Some(first) = children.first() {
                    return Err(LifecycleError::ChildrenOpen {
                        key: key.clone(),
                        open_children: children.len(),
                        first: (*first).clone(),
                    });
                }
                Ok(())
            }
        }
    }

    /// Checks and applies `transition`.
    pub fn apply(&mut self, transition: &Transition) -> Result<(), LifecycleError> {
        self.check(transition)?;
        if let Transition::Lifecycle(key, phase) = transition {
            match phase {
                Phase::Started => {
                    match key {
                        ScopeKey::Run => self.run_started = true,
                        ScopeKey::Turn(n) => {
                            self.last_turn = Some(*n);
                            self.started_in_turn.clear();
                        }
                        _ => {
                            self.started_in_turn.insert(key.clone());
                        }
                    }
                    self.open.push(key.clone());
                }
                Phase::Ended(_) => {
                    self.open.retain(|k| k != key);
                    if *key == ScopeKey::Run {
                        self.run_ended = true;
                    }
                }
            }
        }
        Ok(())
    }

    /// Open scopes, innermost (most recently started) first: the order in
    /// which cancellation closes them.
    pub fn open_innermost_first(&self) -> Vec<ScopeKey> {
        self.open.iter().rev().cloned().collect()
    }

    /// Open scopes, outermost first (the order a snapshot records).
    pub fn open_outermost_first(&self) -> &[ScopeKey] {
        &self.open
    }

    /// The highest turn number started so far.
    pub fn last_turn(&self) -> Option<u64> {
        self.last_turn
    }

    /// Whether `run.started` has been applied.
    pub fn run_started(&self) -> bool {
        self.run_started
    }

    /// Whether the run's terminal has been applied.
    pub fn run_ended(&self) -> bool {
        self.run_ended
    }

    /// The bound on open scopes.
    pub fn max_open(&self) -> usize {
        self.max_open
    }
}

fn is_descendant(candidate: &ScopeKey, ancestor: &ScopeKey) -> bool {
    let mut cur = candidate.parent();
    while let Some(p) = cur {
        if &p == ancestor {
            return true;
        }
        cur = p.parent();
    }
    false
}
