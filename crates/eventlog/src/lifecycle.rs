//! The lifecycle tracker: every started scope gets exactly one terminal,
//! naming the identity its start named; scopes nest, and nothing follows
//! the run's terminal.

use crate::kind::{Phase, Terminal};
use crate::payload::{Extra, InteractionRef, ModelRef, Payload, RunCancelled, ToolRef, TurnRef};
use crate::scope::{ScopeKey, Transition};
use keel_message::{OperationId, ToolName};

mod compaction;
mod sub_run;
use compaction::CompactionOrder;
use sub_run::SubRunScope;

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
    /// A terminal that names another identity than its start: a
    /// `tool.completed` / `tool.failed` / `tool.cancelled` whose `tool` is
    /// not the one its `tool.started` named. (Turn, operation id, call id
    /// and interaction id are part of the [`ScopeKey`]: a terminal that
    /// names another one names another scope, which is
    /// [`TerminalWithoutStart`](Self::TerminalWithoutStart).)
    #[error(
        "{key} started with {field} {started}, its terminal names {ended} (rule lifecycle.same_identity)"
    )]
    IdentityMismatch {
        /// The scope.
        key: ScopeKey,
        /// The member that differs (`tool`).
        field: &'static str,
        /// What the start named (a tool name: `^[A-Za-z0-9_-]{1,64}$`).
        /// Boxed, not a `String`, to keep the error (and every `Result`
        /// carrying it) small.
        started: Box<str>,
        /// What the terminal names.
        ended: Box<str>,
    },
    /// A `run.input` in its reference form anywhere but right after
    /// `run.started` (seq 2): a run inherits one history, before its own
    /// messages.
    #[error(
        "run.input by reference at seq {seq}; it may only be the event right after run.started, seq 2 (rule lifecycle.input_reference)"
    )]
    InputReferenceNotFirst {
        /// Where it was.
        seq: u64,
    },
    /// A `context.compacted` that does not directly follow the
    /// `model.completed` of the compaction call it names, or a
    /// `context.compaction_failed` that does not follow that call's
    /// terminal (each once per call, in the call's turn).
    #[error(
        "{kind} names operation {operation_id}, which is not a compaction call of this turn that just ended (rule lifecycle.compaction_order)"
    )]
    CompactionOrder {
        /// `context.compacted` or `context.compaction_failed`.
        kind: &'static str,
        /// The operation it names.
        operation_id: OperationId,
    },
    /// A `tool.sub_run` for a tool call whose scope is not open (never
    /// started, or already ended).
    #[error("tool.sub_run for {key}, which is not open (rule lifecycle.sub_run_scope)")]
    SubRunOutsideScope {
        /// The tool scope the link names.
        key: ScopeKey,
    },
    /// A second `tool.sub_run` for one tool call: a call starts at most
    /// one child run.
    #[error(
        "second tool.sub_run for {key}; a call starts one child run (rule lifecycle.sub_run_scope)"
    )]
    SecondSubRun {
        /// The tool scope the links name.
        key: ScopeKey,
    },
    /// A snapshot's open tool scope that does not name its tool, in a
    /// window whose start event is gone: its terminal could not be checked
    /// or built.
    #[error("{key} does not record the {field} its start named (rule lifecycle.same_identity)")]
    IdentityMissing {
        /// The scope.
        key: ScopeKey,
        /// The member that is missing (`tool`).
        field: &'static str,
    },
}

impl LifecycleError {
    /// The name of the rule broken, as the message ends with it:
    /// `lifecycle.same_identity`, `limits.open_scopes`, …
    ///
    /// ```
    /// use keel_eventlog::{LifecycleError, ScopeKey};
    /// let e = LifecycleError::DuplicateStart { key: ScopeKey::Run };
    /// assert_eq!(e.rule(), "lifecycle.unique_start");
    /// assert!(e.to_string().ends_with("(rule lifecycle.unique_start)"));
    /// ```
    pub fn rule(&self) -> &'static str {
        match self {
            LifecycleError::RunNotStarted { .. } => "lifecycle.run_first",
            LifecycleError::TerminalWithoutStart { .. } => "lifecycle.terminal_without_start",
            LifecycleError::SecondTerminal { .. } => "lifecycle.one_terminal",
            LifecycleError::DuplicateStart { .. } => "lifecycle.unique_start",
            LifecycleError::ParentNotOpen { .. } => "lifecycle.nesting",
            LifecycleError::TurnStillOpen { .. } => "lifecycle.one_turn_at_a_time",
            LifecycleError::ChildrenOpen { .. } => "lifecycle.children_first",
            LifecycleError::AfterRunEnded => "lifecycle.nothing_after_run",
            LifecycleError::ScopeNotOpen { .. } => "lifecycle.in_open_scope",
            LifecycleError::TooManyOpen { .. } => "limits.open_scopes",
            LifecycleError::InputReferenceNotFirst { .. } => "lifecycle.input_reference",
            LifecycleError::CompactionOrder { .. } => "lifecycle.compaction_order",
            LifecycleError::SubRunOutsideScope { .. } | LifecycleError::SecondSubRun { .. } => {
                "lifecycle.sub_run_scope"
            }
            LifecycleError::IdentityMismatch { .. } | LifecycleError::IdentityMissing { .. } => {
                "lifecycle.same_identity"
            }
        }
    }
}

/// One open scope as its start event named it: the [`ScopeKey`] and, for
/// a tool scope, the tool. It knows the scope's `cancelled` terminal, which
/// a tracker or log accepts for it (once its children are closed).
///
/// ```
/// use keel_eventlog::*;
/// use keel_message::{CallId, RunId, ToolName};
/// use std::sync::Arc;
///
/// let log = RunLog::new(RunId::parse("run_1")?, LogConfig::default(), Arc::new(SystemClock))?;
/// log.commit(&Payload::RunStarted(RunStarted::default()))?;
/// log.commit(&Payload::TurnStarted(TurnRef { turn: 1, extra: Extra::new() }))?;
/// log.commit(&Payload::ToolStarted(ToolRef {
///     turn: 1,
///     call_id: CallId::parse("c1")?,
///     tool: ToolName::parse("get_weather")?,
///     extra: Extra::new(),
/// }))?;
/// let open = log.open_scope_starts();
/// assert_eq!(open[0].tool().map(|t| t.as_str()), Some("get_weather"));
/// // Cancelling innermost first closes the run; each terminal names what
/// // its start named.
/// for scope in open {
///     log.commit(&scope.cancelled())?;
/// }
/// assert!(log.run_ended());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct OpenScope {
    key: ScopeKey,
    /// Built when the scope is recorded, so a tool scope always has its
    /// tool: the terminal is `tool.cancelled` naming it.
    cancelled: Payload,
}

impl OpenScope {
    /// The scope for `key` as a start naming `tool` opened it; `None` for
    /// a tool scope without its tool (the terminal could not name it).
    /// A tool given for another scope is not part of its identity and is
    /// ignored.
    pub(crate) fn new(key: ScopeKey, tool: Option<&ToolName>) -> Option<OpenScope> {
        let extra = Extra::new;
        let cancelled = match &key {
            ScopeKey::Run => Payload::RunCancelled(RunCancelled::default()),
            ScopeKey::Turn(turn) => Payload::TurnCancelled(TurnRef {
                turn: *turn,
                extra: extra(),
            }),
            ScopeKey::Model { turn, operation_id } => Payload::ModelCancelled(ModelRef {
                turn: *turn,
                operation_id: operation_id.clone(),
                extra: extra(),
            }),
            ScopeKey::Tool { turn, call_id } => Payload::ToolCancelled(ToolRef {
                turn: *turn,
                call_id: call_id.clone(),
                tool: tool?.clone(),
                extra: extra(),
            }),
            ScopeKey::Interaction {
                turn,
                interaction_id,
            } => Payload::InteractionCancelled(InteractionRef {
                turn: *turn,
                interaction_id: interaction_id.clone(),
                extra: extra(),
            }),
        };
        Some(OpenScope { key, cancelled })
    }

    /// The scope.
    pub fn key(&self) -> &ScopeKey {
        &self.key
    }

    /// The tool its `tool.started` named: `Some` for tool scopes, `None`
    /// for every other scope.
    pub fn tool(&self) -> Option<&ToolName> {
        match &self.cancelled {
            Payload::ToolCancelled(r) => Some(&r.tool),
            _ => None,
        }
    }

    /// The cancelled terminal for this scope: `run.cancelled`,
    /// `turn.cancelled`, `model.cancelled`, `tool.cancelled` (naming the
    /// tool its start named) or `interaction.cancelled`, with no reason and
    /// no extra members.
    pub fn cancelled(&self) -> Payload {
        self.cancelled.clone()
    }
}

/// Tracks open scopes for one run and refuses events that break the
/// lifecycle rules. Checking is separate from applying, so a refused event
/// leaves the tracker untouched.
///
/// Feed it payloads ([`check_payload`](Self::check_payload),
/// [`apply_payload`](Self::apply_payload)) to have every rule checked: it
/// then remembers, for each open tool scope, the tool its start named, and
/// refuses a terminal naming another (rule `lifecycle.same_identity`).
/// [`check`](Self::check) and [`apply`](Self::apply) take a bare
/// [`Transition`], which carries no tool name: they check everything else,
/// and a tool scope they open has no recorded tool.
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
    /// Beside `open`, index for index: the tool a tool scope's start named
    /// (`None` for other scopes, and for a tool scope opened by a bare
    /// transition). Identities live only while their scope is open.
    tools: Vec<Option<ToolName>>,
    /// The highest turn started so far: turn numbers only increase.
    last_turn: Option<u64>,
    /// Child scopes started in the current (or last) turn, for the
    /// unique-start rule. Cleared when the next turn starts, so memory is
    /// bounded by one turn's scopes, not the run's length.
    started_in_turn: std::collections::HashSet<ScopeKey>,
    /// Where the compaction events of the current turn may stand.
    compactions: CompactionOrder,
    /// Which open tool scopes already recorded their child run.
    sub_runs: SubRunScope,
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
            tools: Vec::new(),
            last_turn: None,
            started_in_turn: std::collections::HashSet::new(),
            compactions: CompactionOrder::default(),
            sub_runs: SubRunScope::default(),
            run_started: false,
            run_ended: false,
            max_open,
        }
    }

    /// Rebuilds a tracker from a snapshot's open scopes (outermost first).
    /// `last_turn` is the highest turn started before the snapshot. Child
    /// scopes that ended before the snapshot are forgotten, so within the
    /// open turn the unique-start rule is enforced against open ones.
    ///
    /// Keys carry no tool names, so the tool scopes resumed here have no
    /// recorded tool (see [`resume_scopes`](Self::resume_scopes)).
    pub fn resume(
        open_outermost_first: Vec<ScopeKey>,
        last_turn: Option<u64>,
        run_ended: bool,
        max_open: usize,
    ) -> Result<Self, LifecycleError> {
        Self::resume_named(
            open_outermost_first.into_iter().map(|key| (key, None)),
            last_turn,
            run_ended,
            max_open,
        )
    }

    /// [`resume`](Self::resume) from open scopes as their starts named
    /// them (from [`open_scopes_innermost_first`](Self::open_scopes_innermost_first)
    /// or [`RunLog::open_scope_starts`](crate::RunLog::open_scope_starts),
    /// reversed): the resumed tracker checks each tool terminal against the
    /// tool its start named.
    pub fn resume_scopes(
        open_outermost_first: Vec<OpenScope>,
        last_turn: Option<u64>,
        run_ended: bool,
        max_open: usize,
    ) -> Result<Self, LifecycleError> {
        Self::resume_named(
            open_outermost_first.into_iter().map(|s| {
                let tool = s.tool().cloned();
                (s.key, tool)
            }),
            last_turn,
            run_ended,
            max_open,
        )
    }

    pub(crate) fn resume_named(
        open_outermost_first: impl IntoIterator<Item = (ScopeKey, Option<ToolName>)>,
        last_turn: Option<u64>,
        run_ended: bool,
        max_open: usize,
    ) -> Result<Self, LifecycleError> {
        let mut t = LifecycleTracker::new(max_open);
        // Replaying the opens checks nesting, order and the bound.
        for (key, tool) in open_outermost_first {
            t.apply_named(&Transition::Lifecycle(key, Phase::Started), tool.as_ref())?;
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

    /// Checks what `payload` does without applying it, its identity
    /// included: a tool terminal must name the tool its start named.
    pub fn check_payload(&self, payload: &Payload) -> Result<(), LifecycleError> {
        self.check_links(payload)?;
        self.check_named(&payload.transition(), payload.tool_name())?;
        self.compactions.check(payload)
    }

    /// Checks and applies what `payload` does (see
    /// [`check_payload`](Self::check_payload)); a tool start's tool is
    /// remembered while its scope is open.
    pub fn apply_payload(&mut self, payload: &Payload) -> Result<(), LifecycleError> {
        self.check_links(payload)?;
        self.compactions.check(payload)?;
        self.apply_named(&payload.transition(), payload.tool_name())?;
        self.apply_order(payload);
        Ok(())
    }

    /// The sub-run link rule (rule `lifecycle.sub_run_scope`), checked
    /// before the transition so a misplaced `tool.sub_run` names it rather
    /// than the generic `lifecycle.in_open_scope`. After the run's
    /// terminal nothing is accepted, whatever it is
    /// (`lifecycle.nothing_after_run`).
    pub(crate) fn check_links(&self, payload: &Payload) -> Result<(), LifecycleError> {
        if self.run_ended {
            return Err(LifecycleError::AfterRunEnded);
        }
        self.sub_runs.check(payload, &self.open)
    }

    /// The compaction order rule alone (rule `lifecycle.compaction_order`),
    /// for the commit path, which checks the transition itself.
    pub(crate) fn check_order(&self, payload: &Payload) -> Result<(), LifecycleError> {
        self.compactions.check(payload)
    }

    /// Records what a committed `payload` changes for the compaction order
    /// rule (every committed event: "right after" is about the last one).
    pub(crate) fn apply_order(&mut self, payload: &Payload) {
        self.compactions.apply(payload);
        self.sub_runs.apply(payload);
    }

    /// Checks `transition` without applying it. A bare transition names no
    /// tool, so the tool identity is not checked (use
    /// [`check_payload`](Self::check_payload)).
    pub fn check(&self, transition: &Transition) -> Result<(), LifecycleError> {
        self.check_named(transition, None)
    }

    /// Checks and applies `transition` (see [`check`](Self::check)).
    pub fn apply(&mut self, transition: &Transition) -> Result<(), LifecycleError> {
        self.apply_named(transition, None)
    }

    /// Checks `transition` of an event naming `tool` (`None`: the event
    /// names none, or the caller does not know it).
    pub(crate) fn check_named(
        &self,
        transition: &Transition,
        tool: Option<&ToolName>,
    ) -> Result<(), LifecycleError> {
        if self.run_ended {
            return Err(LifecycleError::AfterRunEnded);
        }
        match transition {
            Transition::None => Ok(()),
            Transition::Within(key) => {
                if self.open.contains(key) {
                    Ok(())
                } else {
                    Err(LifecycleError::ScopeNotOpen { key: key.clone() })
                }
            }
            Transition::Lifecycle(key, Phase::Started) => self.check_start(key),
            Transition::Lifecycle(key, Phase::Ended(terminal)) => {
                self.check_end(key, *terminal, tool)
            }
        }
    }

    fn check_start(&self, key: &ScopeKey) -> Result<(), LifecycleError> {
        if *key == ScopeKey::Run {
            if self.run_started {
                return Err(LifecycleError::DuplicateStart { key: key.clone() });
            }
            return Ok(());
        }
        if !self.run_started {
            return Err(LifecycleError::RunNotStarted { key: key.clone() });
        }
        if self.started_before(key) {
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

    fn check_end(
        &self,
        key: &ScopeKey,
        terminal: Terminal,
        tool: Option<&ToolName>,
    ) -> Result<(), LifecycleError> {
        let Some(index) = self.open.iter().position(|k| k == key) else {
            return Err(if self.started_before(key) {
                LifecycleError::SecondTerminal {
                    key: key.clone(),
                    terminal,
                }
            } else {
                LifecycleError::TerminalWithoutStart {
                    key: key.clone(),
                    terminal,
                }
            });
        };
        if let (Some(Some(started)), Some(ended)) = (self.tools.get(index), tool)
            && started != ended
        {
            return Err(LifecycleError::IdentityMismatch {
                key: key.clone(),
                field: "tool",
                started: started.as_str().into(),
                ended: ended.as_str().into(),
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

    /// Whether a scope with this key was started before (the run or a
    /// turn: ever; a child: in the current or last turn).
    fn started_before(&self, key: &ScopeKey) -> bool {
        match key {
            ScopeKey::Run => self.run_started,
            ScopeKey::Turn(n) => self.last_turn.is_some_and(|last| *n <= last),
            _ => self.started_in_turn.contains(key),
        }
    }

    /// Checks and applies `transition` of an event naming `tool`.
    pub(crate) fn apply_named(
        &mut self,
        transition: &Transition,
        tool: Option<&ToolName>,
    ) -> Result<(), LifecycleError> {
        self.check_named(transition, tool)?;
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
                    self.tools.push(match key {
                        ScopeKey::Tool { .. } => tool.cloned(),
                        _ => None,
                    });
                }
                Phase::Ended(_) => {
                    if let Some(index) = self.open.iter().position(|k| k == key) {
                        self.open.remove(index);
                        self.tools.remove(index);
                    }
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

    /// Open scopes as their starts named them, innermost first: the order
    /// in which cancellation closes them, each with the terminal that does
    /// ([`OpenScope::cancelled`]).
    ///
    /// Every open scope is listed when the tracker was fed payloads (as a
    /// [`RunLog`](crate::RunLog)'s always is). A tool scope opened by a
    /// bare [`Transition`] or [`resume`](Self::resume) has no recorded
    /// tool, so no terminal can be built for it: it is left out (it is in
    /// [`open_innermost_first`](Self::open_innermost_first)).
    pub fn open_scopes_innermost_first(&self) -> Vec<OpenScope> {
        self.open_named_outermost_first()
            .rev()
            .filter_map(|(key, tool)| OpenScope::new(key.clone(), tool))
            .collect()
    }

    /// Open scopes outermost first, each with the tool its start named.
    pub(crate) fn open_named_outermost_first(
        &self,
    ) -> impl DoubleEndedIterator<Item = (&ScopeKey, Option<&ToolName>)> {
        self.open.iter().zip(self.tools.iter().map(Option::as_ref))
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

/// The seq a `run.input` reference must have: right after `run.started`.
pub(crate) const REFERENCE_SEQ: u64 = 2;

/// Checks that `payload`, committed at `seq`, is not a `run.input`
/// reference out of place (rule `lifecycle.input_reference`).
pub(crate) fn check_position(payload: &Payload, seq: u64) -> Result<(), LifecycleError> {
    match payload {
        Payload::RunInputReference(_) if seq != REFERENCE_SEQ => {
            Err(LifecycleError::InputReferenceNotFirst { seq })
        }
        _ => Ok(()),
    }
}
