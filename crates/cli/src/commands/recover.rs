//! `keel recover`: close the runs a dead host left running.
//!
//! A run is abandoned when the journal shows it `running` and no live host
//! owns it (its host was killed, crashed, or closed the journal before the
//! run ended). `keel recover` appends each one's recovery terminals, rule
//! `run.host_lost`, through its own journal host
//! ([`Store::recover_abandoned`](keel_observers::Store::recover_abandoned)); runs a live process owns (a
//! `keel run` or `keel serve` still going) are left to it.

use crate::args::DbArgs;
use crate::error::{CliError, EXIT_FAILED, EXIT_OK, write_error};
use keel_observers::{JournalConfig, RecoveredRun, RecoveryReport, SkipReason, Store, StoreReader};
use std::io::{BufWriter, Write};
use std::time::{Duration, Instant};

/// `keel recover [--db PATH]`: one line per run recovered (`recovered`)
/// or left alone (`skipped`, with why), then a summary. Exit 0, or 1 when
/// a run needs attention (its stored events cannot be restored, its owner
/// is not a host id, its terminals could not be journaled).
pub fn recover(args: DbArgs) -> Result<i32, CliError> {
    // Refuse a missing, newer or foreign store without creating anything,
    // as the read commands do (exit 2).
    drop(StoreReader::open(&args.db)?);
    let journal = Store::open(&args.db, JournalConfig::default())?;
    let started = Instant::now();
    let report = journal.recover_abandoned()?;
    let took = started.elapsed();
    journal.close()?;
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    print(&mut out, &report, took, &args).map_err(write_error)?;
    out.flush().map_err(write_error)?;
    Ok(if report.needs_attention().next().is_some() {
        EXIT_FAILED
    } else {
        EXIT_OK
    })
}

fn print(
    out: &mut impl Write,
    report: &RecoveryReport,
    took: Duration,
    args: &DbArgs,
) -> std::io::Result<()> {
    for run in &report.recovered {
        writeln!(out, "{}", recovered_line(run))?;
    }
    for run in &report.skipped {
        writeln!(out, "skipped    {}  {}", run.run_id, run.reason)?;
    }
    let terminals: usize = report.recovered.iter().map(|r| r.terminals.len()).sum();
    let live = report
        .skipped
        .iter()
        .filter(|s| {
            matches!(
                s.reason,
                SkipReason::OwnedByLiveHost { .. } | SkipReason::ClaimedElsewhere
            )
        })
        .count();
    let attention = report.needs_attention().count();
    writeln!(
        out,
        "recover: {} run(s) recovered ({terminals} terminal(s) appended), {} skipped ({live} owned by a live host, {attention} need attention) in {} ({})",
        report.recovered.len(),
        report.skipped.len(),
        crate::time::human(took),
        args.db
    )
}

/// `recovered  run_1  3 terminal(s) appended, seq 7..=9 (host h… was gone)`.
fn recovered_line(run: &RecoveredRun) -> String {
    let seqs = match (run.terminals.first(), run.terminals.last()) {
        (Some(first), Some(last)) => format!(", seq {}..={}", first.seq(), last.seq()),
        _ => String::new(),
    };
    let owner = match &run.previous_owner {
        Some(host) => format!("host {host} was gone"),
        None => "no owner was recorded".to_owned(),
    };
    format!(
        "recovered  {}  {} terminal(s) appended{seqs} ({owner})",
        run.run_id,
        run.terminals.len()
    )
}
