//! The read side: `keel events`, `keel runs`, `keel verify`.

use crate::args::{DbArgs, EventsArgs, RunsArgs};
use crate::error::{CliError, EXIT_FAILED, EXIT_OK};
use keel_eventlog::{Event, Terminal};
use keel_observers::conversation;
use keel_observers::{JournalReader, RunStatus, RunSummary, is_last_page};
use keel_testkit::{LifecycleViolation, check_lifecycle_lines};
use std::io::{BufWriter, Write};
use std::time::Duration;

/// Lines read from the journal per query (a page also ends at
/// `keel_observers::PAGE_BYTES`).
pub const PAGE: usize = 1024;

/// How often `keel events --follow` polls the journal.
pub const FOLLOW_POLL: Duration = Duration::from_millis(100);

/// A write to stdout failed: a closed pipe ends the command quietly.
fn write_error(e: std::io::Error) -> CliError {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        CliError {
            code: EXIT_OK,
            message: String::new(),
        }
    } else {
        CliError::failure(format!("writing to stdout: {e}"))
    }
}

/// Every stored line of `run_id` after `after`, in order.
pub fn all_lines(
    reader: &JournalReader,
    run_id: &str,
    after: u64,
) -> Result<Vec<String>, CliError> {
    Ok(reader.all_lines_after(run_id, after)?)
}

fn known_run(reader: &JournalReader, run_id: &str) -> Result<RunSummary, CliError> {
    reader.run_status(run_id)?.ok_or_else(|| {
        CliError::bad_input(format!(
            "unknown run {run_id} in {} (see `keel runs`)",
            reader.path().display()
        ))
    })
}

/// `keel events RUN_ID [--after N] [--follow]`.
pub fn events(args: EventsArgs) -> Result<i32, CliError> {
    let reader = JournalReader::open(&args.db.db)?;
    let mut status = known_run(&reader, &args.run_id)?;
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut cursor = args.after;
    loop {
        // `status` was read before these pages, so once the run is over
        // and the cursor reaches its last_seq, everything was printed.
        loop {
            let page = reader.events_after(&args.run_id, cursor, PAGE)?;
            for line in &page {
                out.write_all(line.as_bytes()).map_err(write_error)?;
                out.write_all(b"\n").map_err(write_error)?;
            }
            cursor = keel_observers::journal::page_end(cursor, &page);
            if is_last_page(&page, PAGE) {
                break;
            }
        }
        out.flush().map_err(write_error)?;
        let done = status.status != RunStatus::Running && cursor >= status.last_seq;
        if !args.follow || done {
            return Ok(EXIT_OK);
        }
        std::thread::sleep(FOLLOW_POLL);
        status = known_run(&reader, &args.run_id)?;
    }
}

/// How many turns a run's lines start.
fn turns(lines: &[String]) -> usize {
    // Canonical lines sort keys, so `kind` comes first.
    lines
        .iter()
        .filter(|l| l.starts_with(r#"{"kind":"turn.started","#))
        .count()
}

/// `keel runs`: every stored run, or with `--conversation` one
/// conversation's chain, first to last.
pub fn runs(args: RunsArgs) -> Result<i32, CliError> {
    let reader = JournalReader::open(&args.db.db)?;
    let all = reader.runs()?;
    let mut continues: Vec<Option<String>> = Vec::with_capacity(all.len());
    for run in &all {
        let previous = conversation::continued_run(&reader, run.run_id.as_str())
            .map_err(|e| CliError::failure(e.to_string()))?;
        continues.push(previous.map(|p| p.as_str().to_owned()));
    }
    let shown: Vec<usize> = match &args.conversation {
        None => (0..all.len()).collect(),
        Some(id) => {
            known_run(&reader, id)?;
            chain(&all, &continues, id)
        }
    };
    let width = shown
        .iter()
        .map(|&i| all[i].run_id.as_str().len())
        .max()
        .unwrap_or(0);
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    for i in shown {
        let run = &all[i];
        let lines = all_lines(&reader, run.run_id.as_str(), 0)?;
        let duration = Duration::from_micros(run.updated_ts.saturating_sub(run.started_ts));
        let turns = turns(&lines);
        let follows = continues[i]
            .as_ref()
            .map(|p| format!("  continues {p}"))
            .unwrap_or_default();
        writeln!(
            out,
            "{:<width$}  {:<9}  {:>3} {}  {:>5} {}  {}{follows}",
            run.run_id,
            run.status.as_str(),
            turns,
            if turns == 1 { "turn " } else { "turns" },
            run.last_seq,
            if run.last_seq == 1 {
                "event "
            } else {
                "events"
            },
            crate::time::human(duration),
        )
        .map_err(write_error)?;
    }
    out.flush().map_err(write_error)?;
    Ok(EXIT_OK)
}

/// The indices of `id`'s conversation, first to last: back through the
/// runs it continues, then forward through the runs continuing it (the
/// first follow-up, when a run was continued more than once).
fn chain(all: &[RunSummary], continues: &[Option<String>], id: &str) -> Vec<usize> {
    let index = |id: &str| all.iter().position(|r| r.run_id.as_str() == id);
    let mut back = Vec::new();
    let mut at = index(id);
    while let Some(i) = at {
        if back.contains(&i) {
            break;
        }
        back.push(i);
        at = continues[i].as_deref().and_then(index);
    }
    back.reverse();
    let mut last = back.last().copied();
    while let Some(l) = last {
        let next =
            (0..all.len()).find(|&j| continues[j].as_deref() == Some(all[l].run_id.as_str()));
        match next {
            Some(j) if !back.contains(&j) => {
                back.push(j);
                last = Some(j);
            }
            _ => break,
        }
    }
    back
}

/// What `verify` found wrong with one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The run.
    pub run_id: String,
    /// The sequence where it broke (0 when it is about the run as a whole).
    pub seq: u64,
    /// The rule's name.
    pub rule: &'static str,
    /// What is wrong.
    pub detail: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "run {} seq {}: rule {}: {}",
            self.run_id, self.seq, self.rule, self.detail
        )
    }
}

/// A run that passed `verify`.
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

/// Checks one stored run: its lines are seqs 1..=last_seq, each decodes
/// and re-encodes byte for byte, all of this run, timestamps never go
/// back, the lifecycle holds (every terminal naming what its start named,
/// a tool terminal its tool), and the status agrees with the terminal. A
/// lifecycle violation names its rule (`lifecycle.same_identity`,
/// `lifecycle.children_first`, …).
pub fn verify_run(run: &RunSummary, lines: &[String]) -> Result<Verdict, Violation> {
    let violation = |seq: u64, rule: &'static str, detail: String| Violation {
        run_id: run.run_id.to_string(),
        seq,
        rule,
        detail,
    };
    if let Some(first) = lines.first()
        && let Ok(event) = Event::decode(first)
        && event.run_id() != &run.run_id
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
            if status != run.status {
                return Err(violation(
                    summary.events() as u64,
                    "runs.status",
                    format!(
                        "the log ends with run.{}, the runs table says {}",
                        outcome_name(summary.outcome()),
                        run.status
                    ),
                ));
            }
            Verdict::Ok
        }
        Err(LifecycleViolation::Unclosed { last_seq, open }) => {
            if run.status != RunStatus::Running {
                return Err(violation(
                    last_seq,
                    "lifecycle.closed",
                    format!(
                        "status {} but {} scope(s) are still open",
                        run.status,
                        open.len()
                    ),
                ));
            }
            Verdict::Incomplete { open: open.len() }
        }
        Err(e) => {
            let (seq, rule) = match &e {
                LifecycleViolation::Empty => (1, "seq.contiguous"),
                LifecycleViolation::Seq { expected, .. } => (*expected, "seq.contiguous"),
                LifecycleViolation::RunId { seq, .. } => (*seq, "event.run_id"),
                LifecycleViolation::TsBackwards { seq, .. } => (*seq, "event.ts_monotonic"),
                LifecycleViolation::NotCanonical { seq, .. } => (*seq, "event.canonical"),
                LifecycleViolation::Envelope { seq } => (*seq, "event.canonical"),
                LifecycleViolation::Lifecycle { seq, error, .. } => (*seq, error.rule()),
                _ => (0, "lifecycle"),
            };
            return Err(violation(seq, rule, e.to_string()));
        }
    };
    if lines.len() as u64 != run.last_seq {
        return Err(violation(
            run.last_seq,
            "runs.last_seq",
            format!(
                "the runs table says last_seq {}, the journal holds {} events",
                run.last_seq,
                lines.len()
            ),
        ));
    }
    Ok(verdict)
}

fn outcome_name(t: Terminal) -> &'static str {
    match t {
        Terminal::Completed => "completed",
        Terminal::Failed => "failed",
        Terminal::Cancelled => "cancelled",
    }
}

/// `keel verify`.
pub fn verify(args: DbArgs) -> Result<i32, CliError> {
    let reader = JournalReader::open(&args.db)?;
    let runs = reader.runs()?;
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let (mut ok, mut incomplete) = (0usize, 0usize);
    for run in &runs {
        let lines = all_lines(&reader, run.run_id.as_str(), 0)?;
        match verify_run(run, &lines) {
            Ok(Verdict::Ok) => {
                ok += 1;
                writeln!(
                    out,
                    "ok          {}  {} events  {}",
                    run.run_id, run.last_seq, run.status
                )
                .map_err(write_error)?;
            }
            Ok(Verdict::Incomplete { open }) => {
                incomplete += 1;
                writeln!(
                    out,
                    "incomplete  {}  {} events  running, {open} scope(s) open (still being written, or its writer stopped)",
                    run.run_id, run.last_seq
                )
                .map_err(write_error)?;
            }
            Err(v) => {
                out.flush().map_err(write_error)?;
                eprintln!("keel verify: {v}");
                return Ok(EXIT_FAILED);
            }
        }
    }
    writeln!(
        out,
        "verify: {} run(s): {ok} ok, {incomplete} incomplete, 0 violations ({})",
        runs.len(),
        args.db.display()
    )
    .map_err(write_error)?;
    out.flush().map_err(write_error)?;
    Ok(EXIT_OK)
}
