//! `keel export` and `keel import`: a run as JSON Lines.
//!
//! The file is a header line, then the run's events, each its canonical
//! line exactly as stored, each ending in `\n`:
//!
//! ```text
//! {"last_seq":27,"run_id":"run_1","schema":"keel.events/1"}
//! {"kind":"run.started","payload":{"model":"scripted-1"},"run_id":"run_1","seq":1,"ts":…}
//! …
//! ```
//!
//! The header is canonical JSON too (keys sorted, no whitespace). Import
//! checks it, validates every line with `RunLog::import` (canonical round
//! trip, one run, seqs 1, 2, 3, … with no gap, duplicate or reordering,
//! timestamps in order, the lifecycle), and only then stores the events
//! through the SQLite journal, which refuses a conflict with what it
//! already holds. Nothing is renumbered, so export → import → export is
//! byte-identical.

use crate::args::{ExportArgs, ImportArgs};
use crate::commands::history::all_lines;
use crate::error::{CliError, EXIT_OK};
use keel_eventlog::{
    ENTRY_OVERHEAD_BYTES, ImportError, LogConfig, RunLog, SCHEMA_VERSION, SystemClock,
};
use keel_message::RunId;
use keel_observers::{
    JournalConfig, JournalReader, ObserverError, RequiredObserver, SqliteJournal, Synchronous,
};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::sync::Arc;

/// The header line of an export.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportHeader {
    /// The last sequence; the file holds events 1..=last_seq.
    pub last_seq: u64,
    /// The run.
    pub run_id: String,
    /// `keel.events/1`.
    pub schema: String,
}

impl ExportHeader {
    /// The header's canonical line (no newline).
    pub fn line(&self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| keel_message::canonical::to_canonical_string(&v).ok())
            .unwrap_or_default()
    }
}

/// `keel export RUN_ID [-o FILE]`.
pub fn export(args: ExportArgs) -> Result<i32, CliError> {
    let reader = JournalReader::open(&args.db.db)?;
    let Some(run) = reader.run_status(&args.run_id)? else {
        return Err(CliError::bad_input(format!(
            "unknown run {} in {} (see `keel runs`)",
            args.run_id,
            args.db.db.display()
        )));
    };
    let lines = all_lines(&reader, &run.run_id, 0)?;
    if lines.len() as u64 != run.last_seq {
        return Err(CliError::failure(format!(
            "run {}: the journal holds {} events but says last_seq {} (run `keel verify`)",
            run.run_id,
            lines.len(),
            run.last_seq
        )));
    }
    let header = ExportHeader {
        last_seq: run.last_seq,
        run_id: run.run_id.clone(),
        schema: SCHEMA_VERSION.to_owned(),
    };
    let mut text = String::with_capacity(lines.iter().map(|l| l.len() + 1).sum::<usize>() + 96);
    text.push_str(&header.line());
    text.push('\n');
    for line in &lines {
        text.push_str(line);
        text.push('\n');
    }
    match &args.output {
        Some(path) => std::fs::write(path, text.as_bytes())
            .map_err(|e| CliError::failure(format!("{}: cannot write: {e}", path.display())))?,
        None => {
            let mut out = std::io::stdout().lock();
            let written = out.write_all(text.as_bytes()).and_then(|()| out.flush());
            if let Err(e) = written
                && e.kind() != std::io::ErrorKind::BrokenPipe
            {
                return Err(CliError::failure(format!("writing to stdout: {e}")));
            }
        }
    }
    Ok(EXIT_OK)
}

/// `keel import FILE`.
pub fn import(args: ImportArgs) -> Result<i32, CliError> {
    let file = args.file.display().to_string();
    let text = std::fs::read_to_string(&args.file)
        .map_err(|e| CliError::bad_input(format!("{file}: cannot read: {e}")))?;
    let body = text.strip_suffix('\n').unwrap_or(&text);
    let mut lines = body.split('\n');
    let first = lines.next().unwrap_or("");
    let bad =
        |line: usize, message: String| CliError::bad_input(format!("{file}:{line}: {message}"));
    let header: ExportHeader = serde_json::from_str(first).map_err(|e| {
        bad(
            1,
            format!(
                "not a keel export header ({}): {}",
                r#"{"last_seq":N,"run_id":"…","schema":"keel.events/1"}"#,
                keel_message::decode::elide_values(&e.to_string())
            ),
        )
    })?;
    if header.schema != SCHEMA_VERSION {
        return Err(bad(
            1,
            format!("schema is not {SCHEMA_VERSION} (this build reads only that)"),
        ));
    }
    let run_id = RunId::parse(&header.run_id).map_err(|e| bad(1, format!("run_id: {e}")))?;
    let events: Vec<&str> = lines.collect();
    if events.is_empty() || (events.len() == 1 && events[0].is_empty()) {
        return Err(bad(1, "the file holds no events".to_owned()));
    }
    // RunLog::import numbers lines from 1 over the events; the file has
    // the header first.
    let total: usize = events.iter().map(|l| l.len()).sum();
    let defaults = LogConfig::default();
    let config = LogConfig {
        max_events: defaults
            .max_events
            .max(events.len() + defaults.max_open_scopes + 1),
        max_bytes: defaults
            .max_bytes
            .saturating_add(total)
            .saturating_add(events.len().saturating_mul(ENTRY_OVERHEAD_BYTES)),
        ..defaults
    };
    let log = RunLog::import(
        run_id.clone(),
        events.iter().copied(),
        config,
        Arc::new(SystemClock),
    )
    .map_err(|e| import_error(&file, e))?;
    let imported = log.retained_after(0);
    if imported.len() as u64 != header.last_seq {
        return Err(bad(
            1,
            format!(
                "the header says last_seq {}, the file holds {} events",
                header.last_seq,
                imported.len()
            ),
        ));
    }

    let mut config = JournalConfig::default();
    // One fsync at close instead of one per event: acknowledged events
    // survive a process crash, and the import is repeatable (offering the
    // same bytes again is a no-op).
    config.synchronous = Synchronous::Normal;
    let db = args.db.db.display().to_string();
    let journal = SqliteJournal::open(&args.db.db, config)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::failure(format!("cannot start the async runtime: {e}")))?;
    let stored = rt.block_on(async {
        for event in &imported {
            journal.observe(event).await.map_err(|e| match e {
                ObserverError::Conflict { run_id, seq } => CliError::bad_input(format!(
                    "{db}: run {run_id} seq {seq} is already stored with different bytes; nothing after it was imported"
                )),
                ObserverError::Gap { run_id, last_stored, seq } => CliError::bad_input(format!(
                    "{db}: run {run_id} has seq {last_stored} stored, the file offers {seq}: a gap"
                )),
                other => CliError::failure(format!("{db}: storing seq {}: {other}", event.seq())),
            })?;
        }
        Ok::<_, CliError>(())
    });
    let stats = journal.stats();
    let closed = journal.close();
    stored?;
    closed?;
    println!(
        "imported run {run_id}: {} events ({} new, {} already stored) into {db}",
        imported.len(),
        stats.stored,
        stats.duplicates
    );
    Ok(EXIT_OK)
}

/// An import refusal, with the file's line number (the header is line 1).
fn import_error(file: &str, e: ImportError) -> CliError {
    let line = match &e {
        ImportError::Event { line, .. }
        | ImportError::OtherRun { line, .. }
        | ImportError::Gap { line, .. }
        | ImportError::Duplicate { line, .. }
        | ImportError::OutOfOrder { line, .. }
        | ImportError::TimeWentBack { line, .. }
        | ImportError::Lifecycle { line, .. }
        | ImportError::Commit { line, .. } => Some(line + 1),
        _ => None,
    };
    let message = e.to_string();
    // The error text numbers event lines from 1; drop its own prefix.
    let message = match message.split_once(": ") {
        Some((prefix, rest)) if prefix.starts_with("line ") => rest.to_owned(),
        _ => message,
    };
    match line {
        Some(line) => CliError::bad_input(format!("{file}:{line}: {message}")),
        None => CliError::bad_input(format!("{file}: {message}")),
    }
}
