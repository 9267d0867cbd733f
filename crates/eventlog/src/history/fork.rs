//! Fork points: the seqs of a run's log a fork may start from (rule
//! `fork.point`). The one owner of the rule: a fork's creation
//! (`keel run --fork`, `POST /v1/runs/{id}/fork`, the library call) and
//! the chain rebuild of a fork both ask [`ForkPoints`].
//!
//! A fork point is a seq where the history rebuilt so far is whole:
//! - the last `run.input` (message or reference) before the first turn;
//! - a `turn.completed`;
//! - a `model.completed` of an answer call (not a compaction call) whose
//!   answer called no tool;
//! - a `run.completed`.
//!
//! Anything else is refused naming the seq, its event kind and the scope
//! open there; a seq past the run's last event is `fork.seq_known`.

use super::HistoryError;
use crate::event::Event;
use crate::kind::EventKind;
use crate::lifecycle::LifecycleTracker;
use crate::payload::{ModelStarted, Payload};

/// The most scopes the description of an open scope tracks: beyond it the
/// refusal names no scope (the log itself is refused elsewhere).
const MAX_TRACKED_SCOPES: usize = 4096;

/// Why a seq is not a fork point of a run. Names the rule, the seq and
/// the kind of the event there; nothing of its content.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ForkPointError {
    /// The seq's event is not one a fork may start after.
    #[error("seq {seq} is {kind}: {why} (rule fork.point)")]
    Point {
        /// The seq asked for.
        seq: u64,
        /// The kind of its event.
        kind: String,
        /// Why it is not a fork point: the scope open there, or which
        /// condition it misses.
        why: String,
    },
    /// The run has no event at the seq.
    #[error("seq {seq} is past the run's last event, seq {last} (rule fork.seq_known)")]
    SeqKnown {
        /// The seq asked for.
        seq: u64,
        /// The run's last seq (0 for none).
        last: u64,
    },
}

impl ForkPointError {
    /// The rule broken: `fork.point` or `fork.seq_known`.
    pub fn rule(&self) -> &'static str {
        match self {
            ForkPointError::Point { .. } => "fork.point",
            ForkPointError::SeqKnown { .. } => "fork.seq_known",
        }
    }
}

/// What the last event folded in is, as a fork point.
#[derive(Debug, Clone)]
enum Verdict {
    /// A fork point.
    Point,
    /// A `run.input` before the first turn: a fork point when the next
    /// event is not another `run.input`.
    Input,
    /// Not a fork point, and why.
    Refused(String),
}

/// Decides whether a seq of a run is a fork point, fed the run's events
/// in order from seq 1 through that seq ([`ForkPoints::push`]), then
/// asked with the event after it, if any ([`ForkPoints::check`]).
///
/// ```
/// use keel_eventlog::history::ForkPoints;
/// use keel_eventlog::*;
/// use keel_message::{Message, MessageId, Role, RunId};
/// use std::sync::Arc;
/// let log = RunLog::new(RunId::parse("run_1")?, LogConfig::default(), Arc::new(SystemClock))?;
/// log.commit(&Payload::RunStarted(RunStarted::default()))?;
/// let hi = Message::text(MessageId::parse("m1")?, Role::User, "Hi")?;
/// log.commit(&Payload::RunInput(RunInput { message: hi, extra: Extra::new() }))?;
/// log.commit(&Payload::TurnStarted(TurnRef { turn: 1, extra: Extra::new() }))?;
/// let events = log.retained_after(0);
///
/// let mut points = ForkPoints::default();
/// points.push(&events[0])?;
/// let refused = points.check(1, Some(&events[1])).unwrap_err();
/// assert_eq!(refused.rule(), "fork.point");
/// points.push(&events[1])?;
/// assert!(points.check(2, Some(&events[2])).is_ok());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct ForkPoints {
    scopes: LifecycleTracker,
    last_seq: u64,
    last_kind: Option<EventKind>,
    turn_seen: bool,
    answer_call: bool,
    attempt_called_tools: bool,
    verdict: Verdict,
}

impl Default for ForkPoints {
    fn default() -> ForkPoints {
        ForkPoints {
            scopes: LifecycleTracker::new(MAX_TRACKED_SCOPES),
            last_seq: 0,
            last_kind: None,
            turn_seen: false,
            answer_call: true,
            attempt_called_tools: false,
            verdict: Verdict::Refused("no event".to_owned()),
        }
    }
}

impl ForkPoints {
    /// Folds in the run's next event (in order, from seq 1).
    pub fn push(&mut self, event: &Event) -> Result<(), HistoryError> {
        let payload = event.payload().map_err(|e| HistoryError::Undecodable {
            seq: event.seq(),
            detail: e.to_string(),
        })?;
        // Only the description of the open scope depends on it: a log
        // breaking the lifecycle is refused by its own checks.
        let _ = self.scopes.apply_payload(&payload);
        self.verdict = self.verdict_of(&payload);
        self.last_seq = event.seq();
        self.last_kind = Some(event.kind().clone());
        Ok(())
    }

    /// Whether `seq`, the last seq pushed, is a fork point; `next` is the
    /// run's event after it (`None`: it has none yet).
    pub fn check(&self, seq: u64, next: Option<&Event>) -> Result<(), ForkPointError> {
        if seq == 0 || seq != self.last_seq {
            return Err(ForkPointError::SeqKnown {
                seq,
                last: self.last_seq,
            });
        }
        let refuse = |why: String| ForkPointError::Point {
            seq,
            kind: self
                .last_kind
                .as_ref()
                .map_or_else(String::new, |k| k.to_string()),
            why,
        };
        match &self.verdict {
            Verdict::Point => Ok(()),
            Verdict::Refused(why) => Err(refuse(why.clone())),
            Verdict::Input => match next.map(Event::kind) {
                Some(EventKind::RunInput) => Err(refuse(
                    "a later run.input follows it: fork after the last one".to_owned(),
                )),
                Some(_) => Ok(()),
                None => Err(refuse(
                    "the run's input may not be complete: no event follows it".to_owned(),
                )),
            },
        }
    }

    fn verdict_of(&mut self, payload: &Payload) -> Verdict {
        match payload {
            Payload::RunInput(_) | Payload::RunInputReference(_) if !self.turn_seen => {
                return Verdict::Input;
            }
            Payload::TurnStarted(_) => self.turn_seen = true,
            Payload::ModelStarted(p) => {
                self.answer_call = is_answer_call(p);
                self.attempt_called_tools = false;
            }
            Payload::ToolCall(_) => self.attempt_called_tools = true,
            Payload::TurnCompleted(_) | Payload::RunCompleted(_) => return Verdict::Point,
            Payload::ModelCompleted(_) if !self.answer_call => {
                return self.refused("a compaction call, not an answer");
            }
            Payload::ModelCompleted(_) if self.attempt_called_tools => {
                return self.refused("its answer called tools, whose results are not in yet");
            }
            Payload::ModelCompleted(_) => return Verdict::Point,
            _ => {}
        }
        self.refused("")
    }

    /// Refused, naming `why` (if any) and the innermost scope open after
    /// the event.
    fn refused(&self, why: &str) -> Verdict {
        let open = match self.scopes.open_innermost_first().first() {
            Some(scope) => format!("inside open {scope}"),
            None => "no scope open".to_owned(),
        };
        Verdict::Refused(if why.is_empty() {
            open
        } else {
            format!("{why}, {open}")
        })
    }
}

/// Whether `started` opens the turn's answer call: a compaction call's
/// `model.started` carries `purpose` (issue #36, compaction).
fn is_answer_call(started: &ModelStarted) -> bool {
    started.purpose.is_none()
}

/// The history a fork of `run_id` at `seq` starts from: `run_id`'s history
/// as its log rebuilds it through `seq` (following the references behind
/// it, checked, as [`rebuild_chain`](super::rebuild_chain) does), with the
/// reference the fork records at its seq 2 (`last_seq` = `seq`, the digest
/// of `run_id`'s lines 1..=`seq`). Refused unless `seq` is a fork point
/// ([`ChainError::ForkPoint`](super::ChainError::ForkPoint)). Reads
/// `run_id` only through `seq` and the event after it.
pub fn rebuild_fork_point<S: super::HistoryStore + ?Sized>(
    store: &S,
    run_id: &keel_message::RunId,
    seq: u64,
    limits: &keel_message::Limits,
) -> Result<super::RebuiltChain, super::ChainError<S::Error>> {
    super::chain::rebuild_until(store, run_id, Some(seq), limits)
}
