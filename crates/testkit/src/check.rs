//! The lifecycle checker and event-sequence assertions.

use keel_eventlog::{
    Event, EventDecodeError, EventKind, LifecycleError, LifecycleTracker, Payload, Phase, Scope,
    ScopeKey, Terminal, Transition,
};
use keel_message::RunId;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

/// What a lifecycle-valid run log holds: counts per scope and terminal,
/// and how the run ended. Returned by [`check_lifecycle`] and
/// [`assert_lifecycle`].
///
/// ```
/// use keel_testkit::assert_lifecycle;
/// use keel_eventlog::*;
/// use keel_message::RunId;
/// use std::sync::Arc;
///
/// let log = RunLog::new(RunId::parse("run_1")?, LogConfig::default(), Arc::new(SystemClock))?;
/// let events = [
///     Payload::RunStarted(RunStarted::default()),
///     Payload::TurnStarted(TurnRef { turn: 1, extra: Extra::new() }),
///     Payload::TurnCancelled(TurnRef { turn: 1, extra: Extra::new() }),
///     Payload::RunCancelled(RunCancelled::default()),
/// ]
/// .iter()
/// .map(|p| log.commit(p))
/// .collect::<Result<Vec<_>, _>>()?;
/// let summary = assert_lifecycle(&events);
/// assert_eq!(summary.outcome(), Terminal::Cancelled);
/// assert_eq!(summary.started(Scope::Turn), 1);
/// assert_eq!(summary.terminals(Scope::Turn, Terminal::Cancelled), 1);
/// assert_eq!(summary.terminals(Scope::Turn, Terminal::Completed), 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LifecycleSummary {
    run_id: RunId,
    events: usize,
    outcome: Terminal,
    started: BTreeMap<Scope, usize>,
    terminals: BTreeMap<(Scope, Terminal), usize>,
    text_deltas: usize,
    tool_calls: usize,
}

impl LifecycleSummary {
    /// The run.
    pub fn run_id(&self) -> &RunId {
        &self.run_id
    }
    /// How many events the log holds (= its last sequence).
    pub fn events(&self) -> usize {
        self.events
    }
    /// How the run ended.
    pub fn outcome(&self) -> Terminal {
        self.outcome
    }
    /// How many scopes of this kind started.
    pub fn started(&self, scope: Scope) -> usize {
        self.started.get(&scope).copied().unwrap_or(0)
    }
    /// How many scopes of this kind ended with this terminal.
    pub fn terminals(&self, scope: Scope, terminal: Terminal) -> usize {
        self.terminals.get(&(scope, terminal)).copied().unwrap_or(0)
    }
    /// Every non-zero terminal count.
    pub fn all_terminals(&self) -> &BTreeMap<(Scope, Terminal), usize> {
        &self.terminals
    }
    /// How many `model.text_delta` events the log holds.
    pub fn text_deltas(&self) -> usize {
        self.text_deltas
    }
    /// How many `model.tool_call` events the log holds.
    pub fn tool_calls(&self) -> usize {
        self.tool_calls
    }
}

/// The first rule a run log broke, naming the sequence where it broke.
///
/// ```
/// use keel_testkit::{LifecycleViolation, check_lifecycle};
/// assert_eq!(check_lifecycle(&[]), Err(LifecycleViolation::Empty));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LifecycleViolation {
    /// No events at all (a run log starts with `run.started`).
    #[error("the log is empty")]
    Empty,
    /// Sequences must be 1, 2, 3, … with no gap or repeat.
    #[error("event #{index} has seq {found}, expected {expected} (seqs are contiguous from 1)")]
    Seq {
        /// 0-based position in the slice.
        index: usize,
        /// The sequence that belongs there.
        expected: u64,
        /// The one found.
        found: u64,
    },
    /// Every event must belong to the first event's run.
    #[error("seq {seq} belongs to run {found}, not {expected}")]
    RunId {
        /// The sequence.
        seq: u64,
        /// The run of the first event.
        expected: RunId,
        /// The run found.
        found: RunId,
    },
    /// Timestamps must not decrease within a run.
    #[error("seq {seq} has ts {found}, before the previous event's {previous}")]
    TsBackwards {
        /// The sequence.
        seq: u64,
        /// The previous event's timestamp.
        previous: u64,
        /// This event's timestamp.
        found: u64,
    },
    /// The line must decode, and re-encode to the same bytes.
    #[error("seq {seq} does not round-trip canonically: {error}")]
    NotCanonical {
        /// The sequence.
        seq: u64,
        /// Why.
        error: EventDecodeError,
    },
    /// Decoding the line gave an event other than the one held (its run,
    /// sequence, timestamp or kind differ from the line's).
    #[error("seq {seq}: the event's fields disagree with its line")]
    Envelope {
        /// The sequence.
        seq: u64,
    },
    /// A lifecycle rule: exactly one terminal per started scope, naming
    /// the identity its start named (a tool terminal its tool), nesting,
    /// children before parents, nothing after the run's terminal.
    /// `error.rule()` names the rule.
    #[error("seq {seq} ({kind}): {error}")]
    Lifecycle {
        /// The sequence.
        seq: u64,
        /// The event kind.
        kind: String,
        /// The rule it broke.
        error: LifecycleError,
    },
    /// At the end, these scopes were still open (innermost first); the
    /// run's terminal must close the log.
    #[error("the log ends at seq {last_seq} with {} scope(s) open: {}", open.len(), list(open))]
    Unclosed {
        /// The last sequence.
        last_seq: u64,
        /// The open scopes, innermost first.
        open: Vec<ScopeKey>,
    },
}

fn list(keys: &[ScopeKey]) -> String {
    let mut out = String::new();
    for (i, key) in keys.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "{key}");
    }
    out
}

/// Checks one run's complete log, in order:
///
/// - it is not empty, and its sequences are contiguous from 1;
/// - every event has the first event's run id;
/// - timestamps never decrease;
/// - every line decodes and re-encodes to the same bytes
///   (`Event::decode(line).line() == line`), as the same event;
/// - the [`LifecycleTracker`] accepts every event's payload in order:
///   exactly one terminal per started scope, naming what its start named
///   (its turn, operation, call or interaction id, and a tool terminal the
///   tool its `tool.started` named: rule `lifecycle.same_identity`),
///   scopes nested run ⊃ turn ⊃ {model, tool, interaction}, children
///   closed before parents, text deltas and tool calls inside an open
///   model call;
/// - at the end every scope is closed, so the run's terminal is last.
///
/// Returns a [`LifecycleSummary`], or the first [`LifecycleViolation`].
///
/// ```
/// use keel_testkit::{LifecycleViolation, check_lifecycle};
/// use keel_eventlog::*;
/// use keel_message::RunId;
/// use std::sync::Arc;
///
/// let log = RunLog::new(RunId::parse("run_1")?, LogConfig::default(), Arc::new(SystemClock))?;
/// let events = vec![
///     log.commit(&Payload::RunStarted(RunStarted::default()))?,
///     log.commit(&Payload::TurnStarted(TurnRef { turn: 1, extra: Extra::new() }))?,
/// ];
/// // The run never ended.
/// let Err(LifecycleViolation::Unclosed { open, .. }) = check_lifecycle(&events) else { panic!() };
/// assert_eq!(open, vec![ScopeKey::Turn(1), ScopeKey::Run]);
/// // A gap.
/// assert!(matches!(check_lifecycle(&events[1..]), Err(LifecycleViolation::Seq { .. })));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn check_lifecycle(events: &[Arc<Event>]) -> Result<LifecycleSummary, LifecycleViolation> {
    let Some(first) = events.first() else {
        return Err(LifecycleViolation::Empty);
    };
    let mut tracker = LifecycleTracker::new(usize::MAX);
    let mut summary = LifecycleSummary {
        run_id: first.run_id().clone(),
        events: events.len(),
        outcome: Terminal::Completed,
        started: BTreeMap::new(),
        terminals: BTreeMap::new(),
        text_deltas: 0,
        tool_calls: 0,
    };
    let mut previous_ts = 0;
    for (index, event) in events.iter().enumerate() {
        check_in_sequence(index, event, &summary.run_id, previous_ts)?;
        previous_ts = event.ts();
        let seq = event.seq();
        let payload = canonical_payload(event)?;
        let transition = payload.transition();
        tracker
            .apply_payload(&payload)
            .map_err(|error| LifecycleViolation::Lifecycle {
                seq,
                kind: event.kind().to_string(),
                error,
            })?;
        count_transition(&mut summary, transition, event.kind());
    }
    let open = tracker.open_innermost_first();
    if !open.is_empty() || !tracker.run_ended() {
        return Err(LifecycleViolation::Unclosed {
            last_seq: events.last().map_or(0, |e| e.seq()),
            open,
        });
    }
    Ok(summary)
}

/// The envelope rules of the event at `index`, in order: its seq is
/// `index + 1`, its run is the log's, and its ts is not before the
/// previous event's.
fn check_in_sequence(
    index: usize,
    event: &Event,
    run_id: &RunId,
    previous_ts: u64,
) -> Result<(), LifecycleViolation> {
    let seq = event.seq();
    let expected = u64::try_from(index).unwrap_or(u64::MAX).saturating_add(1);
    if seq != expected {
        return Err(LifecycleViolation::Seq {
            index,
            expected,
            found: seq,
        });
    }
    if event.run_id() != run_id {
        return Err(LifecycleViolation::RunId {
            seq,
            expected: run_id.clone(),
            found: event.run_id().clone(),
        });
    }
    if event.ts() < previous_ts {
        return Err(LifecycleViolation::TsBackwards {
            seq,
            previous: previous_ts,
            found: event.ts(),
        });
    }
    Ok(())
}

/// The event's payload, once its line is shown to be the canonical
/// encoding of the event itself: the line decodes, decodes to an equal
/// event, and its payload decodes.
fn canonical_payload(event: &Event) -> Result<Payload, LifecycleViolation> {
    let seq = event.seq();
    let decoded = Event::decode(event.line())
        .map_err(|error| LifecycleViolation::NotCanonical { seq, error })?;
    if decoded != *event {
        return Err(LifecycleViolation::Envelope { seq });
    }
    decoded
        .payload()
        .map_err(|error| LifecycleViolation::NotCanonical { seq, error })
}

/// Adds an accepted event's transition to the summary: scope starts and
/// terminals by scope (the run's terminal is the outcome), and text deltas
/// and tool calls within scopes.
fn count_transition(summary: &mut LifecycleSummary, transition: Transition, kind: &EventKind) {
    match transition {
        Transition::Lifecycle(key, Phase::Started) => {
            *summary.started.entry(key.scope()).or_default() += 1;
        }
        Transition::Lifecycle(key, Phase::Ended(terminal)) => {
            *summary
                .terminals
                .entry((key.scope(), terminal))
                .or_default() += 1;
            if key == ScopeKey::Run {
                summary.outcome = terminal;
            }
        }
        Transition::Within(_) => match kind {
            EventKind::TextDelta => summary.text_deltas += 1,
            EventKind::ToolCall => summary.tool_calls += 1,
            _ => {}
        },
        Transition::None => {}
    }
}

/// [`check_lifecycle`] over canonical lines (as a journal or `keel events`
/// gives them): each line is decoded first, and a line that does not
/// decode is reported as [`LifecycleViolation::NotCanonical`] with its
/// 1-based position as `seq`.
///
/// ```
/// use keel_testkit::check_lifecycle_lines;
/// let lines = [
///     r#"{"kind":"run.started","payload":{},"run_id":"run_1","seq":1,"ts":5}"#,
///     r#"{"kind":"run.completed","payload":{},"run_id":"run_1","seq":2,"ts":5}"#,
/// ];
/// assert_eq!(check_lifecycle_lines(&lines)?.events(), 2);
/// assert!(check_lifecycle_lines(&[r#"{"seq":1, "kind":"run.started"}"#]).is_err());
/// # Ok::<(), keel_testkit::LifecycleViolation>(())
/// ```
pub fn check_lifecycle_lines<S: AsRef<str>>(
    lines: &[S],
) -> Result<LifecycleSummary, LifecycleViolation> {
    let mut events = Vec::with_capacity(lines.len());
    for (index, line) in lines.iter().enumerate() {
        let event =
            Event::decode(line.as_ref()).map_err(|error| LifecycleViolation::NotCanonical {
                seq: u64::try_from(index).unwrap_or(u64::MAX).saturating_add(1),
                error,
            })?;
        events.push(Arc::new(event));
    }
    check_lifecycle(&events)
}

/// Asserts that `events` is one run's complete, lifecycle-valid log (see
/// [`check_lifecycle`]) and returns its summary.
///
/// # Panics
///
/// On the first violation, with the violation and the offending line.
///
/// ```
/// use keel_testkit::assert_lifecycle;
/// use keel_eventlog::*;
/// use keel_message::RunId;
/// use std::sync::Arc;
///
/// let log = RunLog::new(RunId::parse("run_1")?, LogConfig::default(), Arc::new(SystemClock))?;
/// let events = vec![
///     log.commit(&Payload::RunStarted(RunStarted::default()))?,
///     log.commit(&Payload::RunCompleted(RunCompleted::default()))?,
/// ];
/// assert_eq!(assert_lifecycle(&events).outcome(), Terminal::Completed);
/// let unfinished = std::panic::catch_unwind(|| assert_lifecycle(&events[..1]));
/// assert!(unfinished.is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
// Panicking is this function's purpose: it is a test assertion.
#[allow(clippy::panic)]
#[track_caller]
pub fn assert_lifecycle(events: &[Arc<Event>]) -> LifecycleSummary {
    match check_lifecycle(events) {
        Ok(summary) => summary,
        Err(violation) => {
            let seq = match &violation {
                LifecycleViolation::Seq { index, .. } => {
                    events.get(*index).map(|e| e.seq()).unwrap_or(0)
                }
                LifecycleViolation::RunId { seq, .. }
                | LifecycleViolation::TsBackwards { seq, .. }
                | LifecycleViolation::NotCanonical { seq, .. }
                | LifecycleViolation::Envelope { seq }
                | LifecycleViolation::Lifecycle { seq, .. } => *seq,
                LifecycleViolation::Unclosed { last_seq, .. } => *last_seq,
                LifecycleViolation::Empty => 0,
            };
            let line = events
                .iter()
                .find(|e| e.seq() == seq)
                .map(|e| e.line().to_owned())
                .unwrap_or_default();
            panic!(
                "lifecycle violation: {violation}\n  at: {line}\n  kinds: {:?}",
                kinds(events)
            );
        }
    }
}

/// The kind names of `events`, in order.
///
/// ```
/// use keel_testkit::kinds;
/// use keel_eventlog::*;
/// use keel_message::RunId;
/// use std::sync::Arc;
/// let log = RunLog::new(RunId::parse("run_1")?, LogConfig::default(), Arc::new(SystemClock))?;
/// let events = vec![log.commit(&Payload::RunStarted(RunStarted::default()))?];
/// assert_eq!(kinds(&events), ["run.started"]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn kinds(events: &[Arc<Event>]) -> Vec<String> {
    events
        .iter()
        .map(|e| e.kind().name().into_owned())
        .collect()
}

/// Asserts that the kinds of `events` are exactly `expected`, in order.
///
/// # Panics
///
/// When they differ, naming the first differing position and printing
/// both sequences side by side.
///
/// ```
/// use keel_testkit::assert_kinds;
/// use keel_eventlog::*;
/// use keel_message::RunId;
/// use std::sync::Arc;
/// let log = RunLog::new(RunId::parse("run_1")?, LogConfig::default(), Arc::new(SystemClock))?;
/// let events = vec![
///     log.commit(&Payload::RunStarted(RunStarted::default()))?,
///     log.commit(&Payload::RunCancelled(RunCancelled::default()))?,
/// ];
/// assert_kinds(&events, &["run.started", "run.cancelled"]);
/// assert!(std::panic::catch_unwind(|| assert_kinds(&events, &["run.started"])).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
// Panicking is this function's purpose: it is a test assertion.
#[allow(clippy::panic)]
#[track_caller]
pub fn assert_kinds(events: &[Arc<Event>], expected: &[&str]) {
    let actual = kinds(events);
    if actual
        .iter()
        .map(String::as_str)
        .eq(expected.iter().copied())
    {
        return;
    }
    let first = actual
        .iter()
        .zip(expected)
        .position(|(a, e)| a != e)
        .unwrap_or(actual.len().min(expected.len()));
    let mut table = String::new();
    for i in 0..actual.len().max(expected.len()) {
        let a = actual.get(i).map_or("-", String::as_str);
        let e = expected.get(i).copied().unwrap_or("-");
        let mark = if i == first { ">" } else { " " };
        let _ = writeln!(table, "{mark} {:>3}  {e:<24} {a}", i + 1);
    }
    panic!(
        "event kinds differ at seq {} (expected {} events, got {}):\n      {:<24} actual\n{table}",
        first + 1,
        expected.len(),
        actual.len(),
        "expected",
    );
}
