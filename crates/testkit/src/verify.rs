//! `keel verify`'s check of one stored run: its lines against the
//! journal's record of it (status and last sequence).
//!
//! It lives here, next to [`check_lifecycle_lines`], so that the binary's
//! `keel verify` and the engine's property tests run the same check
//! without the engine's tests depending on the binary.

use crate::check::{LifecycleViolation, check_lifecycle_lines};
use keel_eventlog::Event;
use keel_message::RunId;
use keel_observers::{RunStatus, StoredRun};

/// What [`verify_run`] found wrong with one stored run: the first rule it
/// broke.
///
/// ```
/// use keel_message::RunId;
/// use keel_testkit::VerifyViolation;
/// let v = VerifyViolation {
///     run_id: RunId::parse("run_1")?,
///     seq: 3,
///     rule: "seq.contiguous",
///     detail: "a gap".into(),
/// };
/// assert_eq!(v.to_string(), "run run_1 seq 3: rule seq.contiguous: a gap");
/// # Ok::<(), keel_message::IdError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("run {run_id} seq {seq}: rule {rule}: {detail}")]
pub struct VerifyViolation {
    /// The run.
    pub run_id: RunId,
    /// The sequence where it broke (0 when it is about the run as a whole).
    pub seq: u64,
    /// The rule's name (`seq.contiguous`, `event.run_id`,
    /// `event.ts_monotonic`, `event.canonical`, `runs.status`,
    /// `runs.last_seq`, `lifecycle.closed`, or a lifecycle rule such as
    /// `lifecycle.same_identity`).
    pub rule: &'static str,
    /// What is wrong.
    pub detail: String,
}

/// A stored run that passed [`verify_run`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Closed: every scope ended, the status matches the run's terminal.
    Ok,
    /// Still `running` with open scopes (the writer died, or is still
    /// writing): a valid prefix of a run.
    Incomplete {
        /// Scopes still open.
        open: usize,
    },
}

/// Checks one stored run, `run_id` as the journal records it (`stored`:
/// its status and last sequence) with `lines`, its stored lines from seq 1:
/// the lines are seqs 1..=last_seq, each decodes and re-encodes byte for
/// byte, all of this run, timestamps never go back, the lifecycle holds
/// (every terminal naming what its start named, a tool terminal its tool),
/// and the status agrees with the terminal. A lifecycle violation names
/// its rule (`lifecycle.same_identity`, `lifecycle.children_first`, …).
///
/// ```
/// use keel_message::RunId;
/// use keel_observers::{RunStatus, StoredRun};
/// use keel_testkit::{Verdict, verify_run};
/// let run = RunId::parse("run_1")?;
/// let lines = [
///     r#"{"kind":"run.started","payload":{},"run_id":"run_1","seq":1,"ts":5}"#,
///     r#"{"kind":"run.completed","payload":{},"run_id":"run_1","seq":2,"ts":5}"#,
/// ];
/// let stored = StoredRun::new(2, RunStatus::Completed);
/// assert_eq!(verify_run(&run, stored, &lines), Ok(Verdict::Ok));
/// let running = StoredRun::new(1, RunStatus::Running);
/// assert_eq!(verify_run(&run, running, &lines[..1]), Ok(Verdict::Incomplete { open: 1 }));
/// let wrong = verify_run(&run, StoredRun::new(2, RunStatus::Failed), &lines);
/// assert_eq!(wrong.map_err(|v| v.rule), Err("runs.status"));
/// # Ok::<(), keel_message::IdError>(())
/// ```
pub fn verify_run<S: AsRef<str>>(
    run_id: &RunId,
    stored: StoredRun,
    lines: &[S],
) -> Result<Verdict, VerifyViolation> {
    let violation = |seq: u64, rule: &'static str, detail: String| VerifyViolation {
        run_id: run_id.clone(),
        seq,
        rule,
        detail,
    };
    if let Some(first) = lines.first()
        && let Ok(event) = Event::decode(first.as_ref())
        && event.run_id() != run_id
    {
        return Err(violation(
            event.seq(),
            "event.run_id",
            format!("the event belongs to run {}", event.run_id()),
        ));
    }
    let verdict = match check_lifecycle_lines(lines) {
        Ok(summary) => {
            let status = RunStatus::from(summary.outcome());
            if status != stored.status() {
                return Err(violation(
                    summary.events() as u64,
                    "runs.status",
                    format!(
                        "the log ends with run.{}, the runs table says {}",
                        summary.outcome().as_str(),
                        stored.status()
                    ),
                ));
            }
            Verdict::Ok
        }
        Err(LifecycleViolation::Unclosed { last_seq, open }) => {
            if stored.status() != RunStatus::Running {
                return Err(violation(
                    last_seq,
                    "lifecycle.closed",
                    format!(
                        "status {} but {} scope(s) are still open",
                        stored.status(),
                        open.len()
                    ),
                ));
            }
            Verdict::Incomplete { open: open.len() }
        }
        Err(e) => {
            let (seq, rule) = rule_of(&e);
            return Err(violation(seq, rule, e.to_string()));
        }
    };
    if lines.len() as u64 != stored.last_seq() {
        return Err(violation(
            stored.last_seq(),
            "runs.last_seq",
            format!(
                "the runs table says last_seq {}, the journal holds {} events",
                stored.last_seq(),
                lines.len()
            ),
        ));
    }
    Ok(verdict)
}

/// The sequence and `keel verify` rule name of a lifecycle violation
/// other than [`LifecycleViolation::Unclosed`] (which depends on the
/// stored status).
fn rule_of(violation: &LifecycleViolation) -> (u64, &'static str) {
    match violation {
        LifecycleViolation::Empty => (1, "seq.contiguous"),
        LifecycleViolation::Seq { expected, .. } => (*expected, "seq.contiguous"),
        LifecycleViolation::RunId { seq, .. } => (*seq, "event.run_id"),
        LifecycleViolation::TsBackwards { seq, .. } => (*seq, "event.ts_monotonic"),
        LifecycleViolation::NotCanonical { seq, .. } => (*seq, "event.canonical"),
        LifecycleViolation::Envelope { seq } => (*seq, "event.canonical"),
        LifecycleViolation::Lifecycle { seq, error, .. } => (*seq, error.rule()),
        LifecycleViolation::Unclosed { last_seq, .. } => (*last_seq, "lifecycle.closed"),
    }
}
