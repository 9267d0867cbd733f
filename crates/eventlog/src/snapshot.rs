//! Versioned snapshots and import: a run's events out of and back into a
//! `RunLog`, byte for byte, never renumbered.

use crate::clock::Clock;
use crate::event::{Event, EventDecodeError, SCHEMA_VERSION};
use crate::lifecycle::{LifecycleError, LifecycleTracker, ScopeKey};
use crate::log::{CommitError, ConfigError, LogConfig, RunLog};
use crate::payload::Payload;
use crate::sync::lock;
use keel_message::{CallId, InteractionId, OperationId, RunId};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// A run's retained events plus what is needed to continue the log: the
/// schema version, the last committed sequence, and the open scopes.
///
/// On disk it is JSON Lines: one canonical header line, then each event's
/// canonical line, in order. [`Snapshot::to_jsonl`] and
/// [`Snapshot::from_jsonl`] are inverse byte for byte.
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
    },
    Interaction {
        turn: u64,
        interaction_id: InteractionId,
    },
}

impl From<&ScopeKey> for ScopeRecord {
    fn from(k: &ScopeKey) -> Self {
        match k.clone() {
            ScopeKey::Run => ScopeRecord::Run,
            ScopeKey::Turn(turn) => ScopeRecord::Turn { turn },
            ScopeKey::Model { turn, operation_id } => ScopeRecord::Model { turn, operation_id },
            ScopeKey::Tool { turn, call_id } => ScopeRecord::Tool { turn, call_id },
            ScopeKey::Interaction {
                turn,
                interaction_id,
            } => ScopeRecord::Interaction {
                turn,
                interaction_id,
            },
        }
    }
}

impl From<ScopeRecord> for ScopeKey {
    fn from(r: ScopeRecord) -> Self {
        match r {
            ScopeRecord::Run => ScopeKey::Run,
            ScopeRecord::Turn { turn } => ScopeKey::Turn(turn),
            ScopeRecord::Model { turn, operation_id } => ScopeKey::Model { turn, operation_id },
            ScopeRecord::Tool { turn, call_id } => ScopeKey::Tool { turn, call_id },
            ScopeRecord::Interaction {
                turn,
                interaction_id,
            } => ScopeKey::Interaction {
                turn,
                interaction_id,
            },
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

    /// The JSON Lines form: header, then one line per event, each ending in
    /// `\n`.
    pub fn to_jsonl(&self) -> String {
        let header = serde_json::to_value(&self.header)
            .ok()
            .and_then(|v| keel_message::canonical::to_canonical_string(&v).ok())
            .unwrap_or_default();
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

    /// Parses the JSON Lines form, checking every line and that the events
    /// are exactly `earliest_seq..=last_seq` of one run.
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

/// Decodes line `n` and checks run, contiguity and time order.
fn check_line(
    line: &str,
    n: usize,
    run_id: &RunId,
    previous: &mut u64,
    previous_ts: &mut u64,
) -> Result<Event, ImportError> {
    let event = Event::decode(line).map_err(|source| ImportError::Event { line: n, source })?;
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
        return Err(if found == prev {
            ImportError::Duplicate {
                line: n,
                previous: prev,
                found,
            }
        } else if found < prev {
            ImportError::OutOfOrder {
                line: n,
                previous: prev,
                found,
            }
        } else {
            ImportError::Gap {
                line: n,
                previous: prev,
                found,
            }
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
    Ok(event)
}

impl RunLog {
    /// A snapshot of the retained events and the state needed to continue.
    pub fn snapshot(&self) -> Snapshot {
        let state = lock(&self.shared.state);
        Snapshot {
            header: SnapshotHeader {
                schema: SCHEMA_VERSION.to_owned(),
                run_id: self.shared.run_id.clone(),
                earliest_seq: state.first_seq,
                last_seq: state.last_seq(),
                last_ts: state.last_ts,
                last_turn: state.tracker.last_turn(),
                run_ended: state.tracker.run_ended(),
                open_scopes: state
                    .tracker
                    .open_outermost_first()
                    .iter()
                    .map(ScopeRecord::from)
                    .collect(),
            },
            events: state.entries.iter().map(|e| Arc::clone(&e.event)).collect(),
        }
    }

    /// Rebuilds a log from a snapshot: the same events, byte for byte, and
    /// the next commit gets `last_seq + 1`.
    pub fn restore(
        snapshot: &Snapshot,
        config: LogConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<RunLog, ImportError> {
        config.validate()?;
        let h = &snapshot.header;
        let resumed = LifecycleTracker::resume(
            h.open_scopes.iter().cloned().map(ScopeKey::from).collect(),
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
            log.append_verbatim(snapshot.events.iter().cloned(), 2, true)?;
            let state = lock(&log.shared.state);
            let replayed = (
                state.tracker.open_outermost_first().to_vec(),
                state.tracker.run_ended(),
                state.tracker.last_turn(),
            );
            let claimed = (
                resumed.open_outermost_first().to_vec(),
                resumed.run_ended(),
                resumed.last_turn(),
            );
            if replayed != claimed {
                return Err(ImportError::Inconsistent {
                    expected: format!("open scopes {:?}", claimed.0),
                    found: format!("open scopes {:?}", replayed.0),
                });
            }
            drop(state);
            log
        } else {
            // A window: the events before it are gone, so the header's
            // tracker state is the authority and the window is appended as
            // it was committed (contiguity and canonical form were checked
            // when it was parsed).
            let log =
                RunLog::from_parts(h.run_id.clone(), config, clock, resumed, h.earliest_seq, 0);
            log.append_verbatim(snapshot.events.iter().cloned(), 2, false)?;
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
        log.append_verbatim(events.into_iter(), 1, true)?;
        Ok(log)
    }

    /// Appends already-numbered events, checking size and (when
    /// `check_lifecycle`) the lifecycle exactly as a commit does.
    /// `first_line` numbers errors.
    fn append_verbatim(
        &self,
        events: impl Iterator<Item = Arc<Event>>,
        first_line: usize,
        check_lifecycle: bool,
    ) -> Result<(), ImportError> {
        for (i, event) in events.enumerate() {
            let line = first_line + i;
            let transition = if check_lifecycle {
                let payload: Payload = event
                    .payload()
                    .map_err(|source| ImportError::Event { line, source })?;
                Some(payload.transition())
            } else {
                None
            };
            let committed =
                self.commit_verbatim(&event, transition)
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
