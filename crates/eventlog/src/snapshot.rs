//! Versioned snapshots and import: a run's events out of and back into a
//! `RunLog`, byte for byte, never renumbered.

use crate::clock::Clock;
use crate::config::{ConfigError, LogConfig};
use crate::event::{Event, EventDecodeError, MAX_SAFE, SCHEMA_VERSION};
use crate::kind::Phase;
use crate::lifecycle::{LifecycleError, LifecycleTracker};
use crate::log::{CommitError, RunLog};
use crate::payload::Payload;
use crate::scope::{ScopeKey, Transition};
use crate::sync::lock;
use keel_message::{CallId, InteractionId, OperationId, RunId, ToolName};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// A run's retained events plus what is needed to continue the log: the
/// schema version, the last committed sequence, and the open scopes.
///
/// On disk it is JSON Lines: one canonical header line, then each event's
/// canonical line, in order. [`Snapshot::to_jsonl`] and
/// [`Snapshot::from_jsonl`] are inverse byte for byte. `keel export` writes
/// this format.
///
/// The header's members: `schema` (`keel.events/1`), `run_id`,
/// `earliest_seq`, `last_seq`, `last_ts`, `last_turn` (absent before the
/// first turn), `run_ended`, and `open_scopes`, outermost first, each
/// `{"scope":"run"}`, `{"scope":"turn","turn":N}`,
/// `{"operation_id":…,"scope":"model","turn":N}`,
/// `{"call_id":…,"scope":"tool","tool":…,"turn":N}` or
/// `{"interaction_id":…,"scope":"interaction","turn":N}`. A tool scope's
/// `tool` (the tool its start named, which its terminal must name) is
/// always written; snapshots written before it existed are read without
/// it, but a window restores only with it (see [`RunLog::restore`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    header: SnapshotHeader,
    events: Vec<Arc<Event>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SnapshotHeader {
    schema: String,
    run_id: RunId,
    /// Sequence of the first event in the snapshot (`last_seq + 1` if none).
    earliest_seq: u64,
    last_seq: u64,
    last_ts: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_turn: Option<u64>,
    run_ended: bool,
    /// Outermost first.
    open_scopes: Vec<ScopeRecord>,
}

impl SnapshotHeader {
    /// The header's numbers are ones a log could have written: seqs and
    /// the time within the wire's integer range (2^53 − 1, so the next
    /// commit's `ts = max(clock, last_ts)` stays decodable), and the
    /// window `earliest_seq..=last_seq` starting at 1 or later.
    fn check_bounds(&self) -> Result<(), ImportError> {
        let refuse = |detail: String| Err(ImportError::Header { detail });
        for (field, value) in [
            ("last_seq", self.last_seq),
            ("last_ts", self.last_ts),
            ("earliest_seq", self.earliest_seq),
        ] {
            if value > MAX_SAFE {
                return refuse(format!("{field} {value} is over 2^53 - 1"));
            }
        }
        if let Some(turn) = self.last_turn.filter(|t| *t > MAX_SAFE) {
            return refuse(format!("last_turn {turn} is over 2^53 - 1"));
        }
        if self.earliest_seq == 0 || self.earliest_seq > self.last_seq + 1 {
            return refuse(format!(
                "earliest_seq {} is outside 1..={} (last_seq + 1)",
                self.earliest_seq,
                self.last_seq + 1
            ));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "scope", rename_all = "snake_case", deny_unknown_fields)]
enum ScopeRecord {
    Run,
    Turn {
        turn: u64,
    },
    Model {
        turn: u64,
        operation_id: OperationId,
    },
    Tool {
        turn: u64,
        call_id: CallId,
        /// The tool its start named; always written. Absent in snapshots
        /// written before terminals were checked against it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool: Option<ToolName>,
    },
    Interaction {
        turn: u64,
        interaction_id: InteractionId,
    },
}

impl ScopeRecord {
    /// The record of an open scope whose start named `tool`.
    fn new(k: &ScopeKey, tool: Option<&ToolName>) -> Self {
        match k.clone() {
            ScopeKey::Run => ScopeRecord::Run,
            ScopeKey::Turn(turn) => ScopeRecord::Turn { turn },
            ScopeKey::Model { turn, operation_id } => ScopeRecord::Model { turn, operation_id },
            ScopeKey::Tool { turn, call_id } => ScopeRecord::Tool {
                turn,
                call_id,
                tool: tool.cloned(),
            },
            ScopeKey::Interaction {
                turn,
                interaction_id,
            } => ScopeRecord::Interaction {
                turn,
                interaction_id,
            },
        }
    }

    /// The scope and the tool its start named, when recorded.
    fn named(&self) -> (ScopeKey, Option<ToolName>) {
        match self.clone() {
            ScopeRecord::Run => (ScopeKey::Run, None),
            ScopeRecord::Turn { turn } => (ScopeKey::Turn(turn), None),
            ScopeRecord::Model { turn, operation_id } => {
                (ScopeKey::Model { turn, operation_id }, None)
            }
            ScopeRecord::Tool {
                turn,
                call_id,
                tool,
            } => (ScopeKey::Tool { turn, call_id }, tool),
            ScopeRecord::Interaction {
                turn,
                interaction_id,
            } => (
                ScopeKey::Interaction {
                    turn,
                    interaction_id,
                },
                None,
            ),
        }
    }
}

/// Why a snapshot or an import was refused. Nothing is half-applied: a
/// refused import builds no log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ImportError {
    /// The header is missing, malformed, or of another schema.
    #[error("snapshot header: {detail} (rule snapshot.header)")]
    Header {
        /// What is wrong.
        detail: String,
    },
    /// A line is not a valid canonical event.
    #[error("line {line}: {source}")]
    Event {
        /// 1-based line number.
        line: usize,
        /// Why.
        #[source]
        source: EventDecodeError,
    },
    /// An event of another run.
    #[error("line {line}: event of run {found}, expected {expected} (rule import.one_run)")]
    OtherRun {
        /// 1-based line number.
        line: usize,
        /// The run expected.
        expected: RunId,
        /// The run found.
        found: RunId,
    },
    /// A sequence that skips ahead.
    #[error("line {line}: seq {found} after {previous}: gap (rule import.contiguous)")]
    Gap {
        /// 1-based line number.
        line: usize,
        /// The previous sequence.
        previous: u64,
        /// The sequence found.
        found: u64,
    },
    /// A sequence seen before.
    #[error("line {line}: seq {found} after {previous}: duplicate (rule import.contiguous)")]
    Duplicate {
        /// 1-based line number.
        line: usize,
        /// The previous sequence.
        previous: u64,
        /// The sequence found.
        found: u64,
    },
    /// A sequence lower than one already seen.
    #[error("line {line}: seq {found} after {previous}: out of order (rule import.contiguous)")]
    OutOfOrder {
        /// 1-based line number.
        line: usize,
        /// The previous sequence.
        previous: u64,
        /// The sequence found.
        found: u64,
    },
    /// A timestamp lower than the previous event's.
    #[error("line {line}: ts {found} < previous {previous} (rule event.ts_monotonic)")]
    TimeWentBack {
        /// 1-based line number.
        line: usize,
        /// The previous timestamp.
        previous: u64,
        /// The timestamp found.
        found: u64,
    },
    /// An event that breaks the lifecycle.
    #[error("line {line}: {source}")]
    Lifecycle {
        /// 1-based line number.
        line: usize,
        /// Why.
        #[source]
        source: LifecycleError,
    },
    /// The events do not match the header's counts.
    #[error("snapshot says {expected}, found {found} (rule snapshot.consistent)")]
    Inconsistent {
        /// What the header says.
        expected: String,
        /// What the lines say.
        found: String,
    },
    /// An event over the log's size bounds.
    #[error("line {line}: {source}")]
    Commit {
        /// 1-based line number.
        line: usize,
        /// Why.
        #[source]
        source: CommitError,
    },
    /// The target configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The header does not describe the events replayed from it
    /// ([`Snapshot::import_run`]).
    #[error(
        "the header does not describe the file's events (rule snapshot.consistent): they give {replayed}"
    )]
    HeaderMismatch {
        /// The header the events give.
        replayed: String,
    },
    /// A `model.completed` carries metadata in a namespace the importing
    /// side does not allow ([`Snapshot::import_run`]). Namespace names are
    /// validated plain names, safe to show.
    #[error(
        "line {line}: seq {seq}: model.completed metadata namespace $.{namespace} is not allowed here (rule import.metadata_allowlist)"
    )]
    MetadataNotAllowed {
        /// 1-based line number.
        line: usize,
        /// The event's sequence.
        seq: u64,
        /// The first namespace not allowed.
        namespace: String,
    },
}

impl Snapshot {
    /// The schema version (`keel.events/1`).
    pub fn schema(&self) -> &str {
        &self.header.schema
    }
    /// The run.
    pub fn run_id(&self) -> &RunId {
        &self.header.run_id
    }
    /// The last committed sequence when the snapshot was taken.
    pub fn last_seq(&self) -> u64 {
        self.header.last_seq
    }
    /// The first sequence the snapshot holds.
    pub fn earliest_seq(&self) -> u64 {
        self.header.earliest_seq
    }
    /// The events, oldest first.
    pub fn events(&self) -> &[Arc<Event>] {
        &self.events
    }

    /// The snapshot of a whole run (or a run's prefix) from its events,
    /// seqs 1, 2, 3, …: exactly what [`RunLog::snapshot`] gives for a log
    /// that holds those events and has evicted none. Checks what
    /// [`RunLog::import`] checks, except the log's bounds (sizes, open
    /// scopes): one run, contiguous from 1, timestamps in order, the
    /// lifecycle (identities included). Errors number the events from 1.
    ///
    /// ```
    /// use keel_eventlog::*;
    /// use keel_message::RunId;
    /// use std::sync::Arc;
    /// let run = RunId::parse("run_1")?;
    /// let log = RunLog::new(run.clone(), LogConfig::default(), Arc::new(SystemClock))?;
    /// log.commit(&Payload::RunStarted(RunStarted::default()))?;
    /// log.commit(&Payload::TurnStarted(TurnRef { turn: 1, extra: Extra::new() }))?;
    /// let snap = Snapshot::from_events(run.clone(), log.retained_after(0))?;
    /// assert_eq!(snap, log.snapshot());
    /// // Not from seq 1: refused.
    /// assert!(Snapshot::from_events(run, log.retained_after(1)).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_events(
        run_id: RunId,
        events: impl IntoIterator<Item = Arc<Event>>,
    ) -> Result<Snapshot, ImportError> {
        let mut tracker = LifecycleTracker::new(usize::MAX);
        let mut previous = 0;
        let mut previous_ts = 0;
        let mut kept = Vec::new();
        for (i, event) in events.into_iter().enumerate() {
            let line = i + 1;
            // An `Event` is canonical by construction (decoded or
            // committed); what a file's lines need beyond that is here.
            check_event(&event, line, &run_id, &mut previous, &mut previous_ts)?;
            let payload: Payload = event
                .payload()
                .map_err(|source| ImportError::Event { line, source })?;
            crate::lifecycle::check_position(&payload, event.seq())
                .and_then(|()| tracker.apply_payload(&payload))
                .map_err(|source| ImportError::Lifecycle { line, source })?;
            kept.push(event);
        }
        Ok(Snapshot {
            header: header_of(run_id, 1, previous, previous_ts, &tracker),
            events: kept,
        })
    }

    /// The JSON Lines form: header, then one line per event, each ending in
    /// `\n`.
    pub fn to_jsonl(&self) -> String {
        let header = self.header_line();
        let mut out = String::with_capacity(
            header.len()
                + 1
                + self
                    .events
                    .iter()
                    .map(|e| e.line().len() + 1)
                    .sum::<usize>(),
        );
        out.push_str(&header);
        out.push('\n');
        for e in &self.events {
            out.push_str(e.line());
            out.push('\n');
        }
        out
    }

    /// The header's canonical line (no trailing newline).
    pub(crate) fn header_line(&self) -> String {
        serde_json::to_value(&self.header)
            .ok()
            .and_then(|v| keel_message::canonical::to_canonical_string(&v).ok())
            .unwrap_or_default()
    }

    /// Parses the JSON Lines form, checking every line and that the events
    /// are exactly `earliest_seq..=last_seq` of one run. Errors number the
    /// lines of `text` from 1 (the header is line 1).
    pub fn from_jsonl(text: &str) -> Result<Snapshot, ImportError> {
        let mut lines = text.lines();
        let first = lines.next().ok_or_else(|| ImportError::Header {
            detail: "empty input".into(),
        })?;
        let header: SnapshotHeader =
            serde_json::from_str(first).map_err(|e| ImportError::Header {
                detail: keel_message::decode::elide_values(&e.to_string()),
            })?;
        if header.schema != SCHEMA_VERSION {
            return Err(ImportError::Header {
                detail: format!("schema is not {SCHEMA_VERSION}"),
            });
        }
        header.check_bounds()?;
        let mut events = Vec::new();
        let mut previous = header.earliest_seq.saturating_sub(1);
        let mut previous_ts = 0;
        for (i, line) in lines.enumerate() {
            let n = i + 2;
            let event = check_line(line, n, &header.run_id, &mut previous, &mut previous_ts)?;
            events.push(Arc::new(event));
        }
        if previous != header.last_seq {
            return Err(ImportError::Inconsistent {
                expected: format!("last_seq {}", header.last_seq),
                found: format!("last event {previous}"),
            });
        }
        Ok(Snapshot { header, events })
    }
}

/// The header of a snapshot holding `earliest_seq..=last_seq`, the
/// lifecycle state being `tracker`'s.
fn header_of(
    run_id: RunId,
    earliest_seq: u64,
    last_seq: u64,
    last_ts: u64,
    tracker: &LifecycleTracker,
) -> SnapshotHeader {
    SnapshotHeader {
        schema: SCHEMA_VERSION.to_owned(),
        run_id,
        earliest_seq,
        last_seq,
        last_ts,
        last_turn: tracker.last_turn(),
        run_ended: tracker.run_ended(),
        open_scopes: tracker
            .open_named_outermost_first()
            .map(|(key, tool)| ScopeRecord::new(key, tool))
            .collect(),
    }
}

/// Decodes line `n` and checks run, contiguity and time order.
fn check_line(
    line: &str,
    n: usize,
    run_id: &RunId,
    previous: &mut u64,
    previous_ts: &mut u64,
) -> Result<Event, ImportError> {
    let event = Event::decode(line).map_err(|source| ImportError::Event { line: n, source })?;
    check_event(&event, n, run_id, previous, previous_ts)?;
    Ok(event)
}

/// Checks that event `n` is of `run_id`, follows `previous` and does not
/// go back in time; then advances both.
fn check_event(
    event: &Event,
    n: usize,
    run_id: &RunId,
    previous: &mut u64,
    previous_ts: &mut u64,
) -> Result<(), ImportError> {
    if event.run_id() != run_id {
        return Err(ImportError::OtherRun {
            line: n,
            expected: run_id.clone(),
            found: event.run_id().clone(),
        });
    }
    let found = event.seq();
    let prev = *previous;
    if found != prev + 1 {
        return Err(match found.cmp(&prev) {
            std::cmp::Ordering::Equal => ImportError::Duplicate {
                line: n,
                previous: prev,
                found,
            },
            std::cmp::Ordering::Less => ImportError::OutOfOrder {
                line: n,
                previous: prev,
                found,
            },
            std::cmp::Ordering::Greater => ImportError::Gap {
                line: n,
                previous: prev,
                found,
            },
        });
    }
    if event.ts() < *previous_ts {
        return Err(ImportError::TimeWentBack {
            line: n,
            previous: *previous_ts,
            found: event.ts(),
        });
    }
    *previous = found;
    *previous_ts = event.ts();
    Ok(())
}

impl RunLog {
    /// A snapshot of the retained events and the state needed to continue:
    /// the open scopes, each tool scope with the tool its start named.
    pub fn snapshot(&self) -> Snapshot {
        let state = lock(&self.shared.state);
        Snapshot {
            header: header_of(
                self.shared.run_id.clone(),
                state.first_seq,
                state.last_seq(),
                state.last_ts,
                &state.tracker,
            ),
            events: state.entries.iter().map(|e| Arc::clone(&e.event)).collect(),
        }
    }

    /// Rebuilds a log from a snapshot: the same events, byte for byte, and
    /// the next commit gets `last_seq + 1`, checked against the same open
    /// scopes (a tool terminal against the tool its start named).
    ///
    /// A snapshot of a whole run (`earliest_seq` 1) is replayed through a
    /// fresh tracker and must end where its header says. A window's events
    /// before it are gone, so its header is the authority: each open tool
    /// scope must name its tool there.
    pub fn restore(
        snapshot: &Snapshot,
        config: LogConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<RunLog, ImportError> {
        config.validate()?;
        let h = &snapshot.header;
        h.check_bounds()?;
        let claimed: Vec<(ScopeKey, Option<ToolName>)> =
            h.open_scopes.iter().map(ScopeRecord::named).collect();
        let resumed = LifecycleTracker::resume_named(
            claimed.iter().cloned(),
            h.last_turn,
            h.run_ended,
            config.max_open_scopes,
        )
        .map_err(|source| ImportError::Lifecycle { line: 1, source })?;
        let log = if h.earliest_seq == 1 {
            // The whole run is here: replay it through a fresh tracker, then
            // check the header describes where that replay ends.
            let log = RunLog::from_parts(
                h.run_id.clone(),
                config.clone(),
                clock,
                LifecycleTracker::new(config.max_open_scopes),
                1,
                0,
            );
            log.append_verbatim(snapshot.events.iter().cloned(), 2)?;
            check_replay(&lock(&log.shared.state).tracker, &resumed, &claimed)?;
            log
        } else {
            // A window: the events before it are gone. The state at its
            // start is derived from the header's end state by walking the
            // window backwards; the window is then replayed forwards from
            // it with every lifecycle check, and must end where the header
            // says.
            if let Some((key, _)) = claimed
                .iter()
                .find(|(key, tool)| matches!(key, ScopeKey::Tool { .. }) && tool.is_none())
            {
                let source = LifecycleError::IdentityMissing {
                    key: key.clone(),
                    field: "tool",
                };
                return Err(ImportError::Lifecycle { line: 1, source });
            }
            let start = WindowStart::derive(h, &claimed, &snapshot.events)?;
            let tracker = LifecycleTracker::resume_named(
                start.open,
                start.last_turn,
                start.run_ended,
                config.max_open_scopes,
            )
            .map_err(|source| ImportError::Lifecycle { line: 1, source })?;
            let log =
                RunLog::from_parts(h.run_id.clone(), config, clock, tracker, h.earliest_seq, 0);
            log.append_verbatim(snapshot.events.iter().cloned(), 2)?;
            check_replay(&lock(&log.shared.state).tracker, &resumed, &claimed)?;
            log
        };
        let mut state = lock(&log.shared.state);
        if state.next_seq != h.last_seq + 1 {
            return Err(ImportError::Inconsistent {
                expected: format!("last_seq {}", h.last_seq),
                found: format!("last event {}", state.next_seq - 1),
            });
        }
        state.last_ts = state.last_ts.max(h.last_ts);
        drop(state);
        Ok(log)
    }

    /// Imports a complete run from its event lines (as a journal stores
    /// them), checking everything a commit checks. Sequences must run
    /// 1, 2, 3, … with no gap, duplicate or reordering; nothing is
    /// renumbered.
    ///
    /// For events this host stored itself (a journal, a stream), whose
    /// metadata already passed the allowlist of the run that wrote them.
    /// A run from outside (a file) goes through [`Snapshot::import_run`].
    pub fn import<'a>(
        run_id: RunId,
        lines: impl IntoIterator<Item = &'a str>,
        config: LogConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<RunLog, ImportError> {
        config.validate()?;
        let mut previous = 0;
        let mut previous_ts = 0;
        let mut events = Vec::new();
        for (i, line) in lines.into_iter().enumerate() {
            let event = check_line(line, i + 1, &run_id, &mut previous, &mut previous_ts)?;
            events.push(Arc::new(event));
        }
        let tracker = LifecycleTracker::new(config.max_open_scopes);
        let log = RunLog::from_parts(run_id, config, clock, tracker, 1, 0);
        log.append_verbatim(events.into_iter(), 1)?;
        Ok(log)
    }

    /// Appends already-numbered events, checking size and the lifecycle
    /// exactly as a commit does. `first_line` numbers errors.
    fn append_verbatim(
        &self,
        events: impl Iterator<Item = Arc<Event>>,
        first_line: usize,
    ) -> Result<(), ImportError> {
        for (i, event) in events.enumerate() {
            let line = first_line + i;
            let payload: Payload = event
                .payload()
                .map_err(|source| ImportError::Event { line, source })?;
            let committed =
                self.commit_verbatim(&event, &payload)
                    .map_err(|source| match source {
                        CommitError::Lifecycle(source) => ImportError::Lifecycle { line, source },
                        other => ImportError::Commit {
                            line,
                            source: other,
                        },
                    })?;
            debug_assert_eq!(committed.line(), event.line());
        }
        Ok(())
    }
}

/// The lifecycle state at the start of a window, derived from the
/// header's state at its end: walking the window backwards, a scope's end
/// means it was open before it, and its start means it was not.
struct WindowStart {
    /// Outermost first: the run, turns, then the scopes inside them.
    open: Vec<(ScopeKey, Option<ToolName>)>,
    last_turn: Option<u64>,
    run_ended: bool,
}

impl WindowStart {
    fn derive(
        h: &SnapshotHeader,
        claimed: &[(ScopeKey, Option<ToolName>)],
        events: &[Arc<Event>],
    ) -> Result<WindowStart, ImportError> {
        let mut open = claimed.to_vec();
        let mut last_turn = h.last_turn;
        let mut run_ended = h.run_ended;
        for (i, event) in events.iter().enumerate().rev() {
            let line = i + 2;
            let payload: Payload = event
                .payload()
                .map_err(|source| ImportError::Event { line, source })?;
            let Transition::Lifecycle(key, phase) = payload.transition() else {
                continue;
            };
            let at = open.iter().position(|(k, _)| *k == key);
            match (phase, at) {
                (Phase::Started, Some(at)) => {
                    open.remove(at);
                    if let ScopeKey::Turn(turn) = key {
                        last_turn = turn.checked_sub(1).filter(|t| *t > 0);
                    }
                }
                (Phase::Ended(_), None) => {
                    if key == ScopeKey::Run {
                        run_ended = false;
                    }
                    open.push((key, payload.tool_name().cloned()));
                }
                (Phase::Started, None) | (Phase::Ended(_), Some(_)) => {
                    return Err(ImportError::Inconsistent {
                        expected: format!(
                            "line {line}'s {} to match the open scopes the header ends with",
                            event.kind()
                        ),
                        found: format!(
                            "{key:?} {}",
                            if at.is_some() {
                                "still open"
                            } else {
                                "not open"
                            }
                        ),
                    });
                }
            }
        }
        // Nesting order: the run, then turns, then what runs inside them
        // (a stable sort keeps the header's order within each level).
        open.sort_by_key(|(key, _)| match key {
            ScopeKey::Run => 0,
            ScopeKey::Turn(_) => 1,
            _ => 2,
        });
        Ok(WindowStart {
            open,
            last_turn,
            run_ended,
        })
    }
}

/// A whole run's replay must end where its header says: the same open
/// scopes in the same order, each tool the header names the one its start
/// named (older snapshots name none), the same last turn and run end.
fn check_replay(
    replayed: &LifecycleTracker,
    resumed: &LifecycleTracker,
    claimed: &[(ScopeKey, Option<ToolName>)],
) -> Result<(), ImportError> {
    let named: Vec<(&ScopeKey, Option<&ToolName>)> =
        replayed.open_named_outermost_first().collect();
    let same_scopes = named.len() == claimed.len()
        && named
            .iter()
            .zip(claimed)
            .all(|((key, tool), (claimed_key, claimed_tool))| {
                *key == claimed_key && (claimed_tool.is_none() || claimed_tool.as_ref() == *tool)
            });
    if !same_scopes
        || replayed.run_ended() != resumed.run_ended()
        || replayed.last_turn() != resumed.last_turn()
    {
        let claimed = claimed.iter().map(|(key, tool)| (key, tool.as_ref()));
        return Err(ImportError::Inconsistent {
            expected: describe(claimed, resumed),
            found: describe(named.into_iter(), replayed),
        });
    }
    Ok(())
}

/// `open scopes [run, turn 1, tool c1 (turn 1) naming get_weather], last
/// turn 1, run open`: ids, numbers and tool names only, nothing a run's
/// content could put there.
fn describe<'a>(
    scopes: impl Iterator<Item = (&'a ScopeKey, Option<&'a ToolName>)>,
    tracker: &LifecycleTracker,
) -> String {
    let scopes: Vec<String> = scopes
        .map(|(key, tool)| match tool {
            Some(tool) => format!("{key} naming {tool}"),
            None => key.to_string(),
        })
        .collect();
    format!(
        "open scopes [{}], last turn {:?}, run {}",
        scopes.join(", "),
        tracker.last_turn(),
        if tracker.run_ended() { "ended" } else { "open" }
    )
}
