//! `keel export` and `keel import`: a run as a `keel_eventlog::Snapshot`.
//!
//! The file is exactly the eventlog's snapshot format
//! ([`Snapshot::to_jsonl`] / [`Snapshot::from_jsonl`]): one canonical header
//! line, then the run's events, each its canonical line exactly as stored,
//! each ending in `\n`:
//!
//! ```text
//! {"earliest_seq":1,"last_seq":27,"last_ts":…,"last_turn":3,"open_scopes":[],"run_ended":true,"run_id":"run_1","schema":"keel.events/1"}
//! {"kind":"run.started","payload":{"model":"scripted-1"},"run_id":"run_1","seq":1,"ts":…}
//! …
//! ```
//!
//! Export builds the snapshot with [`Snapshot::from_events`] from every
//! stored line, so the header says where the run's lifecycle stands:
//! `earliest_seq` (always 1: an export is the whole run), `last_seq`,
//! `last_ts`, `last_turn`, `run_ended` and the scopes still open
//! (outermost first, a tool scope with the tool its start named).
//!
//! This replaces the header `keel export` wrote before, of three members
//! (`{"last_seq":N,"run_id":"…","schema":"keel.events/1"}`; the events
//! after it were the same lines): import refuses such a file at line 1,
//! saying it is the older header.
//!
//! Import parses the file with [`Snapshot::from_jsonl`] (header, canonical
//! lines, one run, seqs `earliest_seq..=last_seq` with no gap, duplicate or
//! reordering, timestamps in order), requires the whole run (from seq 1),
//! replays it with [`RunLog::import`] (the lifecycle, every terminal naming
//! what its start named), requires the header to be the one those events
//! give, and only then stores the events through the SQLite journal, which
//! refuses a conflict with what it already holds. Errors name the file's
//! line (the header is line 1). Nothing is renumbered, so export → import
//! → export is byte-identical.

use crate::args::{ExportArgs, ImportArgs};
use crate::commands::history::all_lines;
use crate::error::{CliError, EXIT_OK};
use keel_eventlog::{
    ENTRY_OVERHEAD_BYTES, Event, ImportError, LogConfig, Payload, RunLog, Snapshot, SystemClock,
};
use keel_message::RunId;
use keel_observers::{
    JournalConfig, JournalReader, ObserverError, RequiredObserver, SqliteJournal, Synchronous,
};
use keel_stream::MetadataAllowlist;
use std::io::Write;
use std::sync::Arc;

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
    let broken = |what: String| {
        CliError::failure(format!(
            "run {}: {what}; nothing was exported (run `keel verify`)",
            run.run_id
        ))
    };
    let run_id = RunId::parse(&run.run_id).map_err(|e| broken(format!("run id: {e}")))?;
    let mut events = Vec::with_capacity(lines.len());
    for (i, line) in lines.iter().enumerate() {
        let event =
            Event::decode(line).map_err(|e| broken(format!("stored event {}: {e}", i + 1)))?;
        events.push(Arc::new(event));
    }
    let snapshot = Snapshot::from_events(run_id, events)
        .map_err(|e| broken(format!("the stored events are not one valid run: {e}")))?;
    let text = snapshot.to_jsonl();
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

/// Reads at most `max_bytes` of `path` (one byte more shows a longer
/// input, which is refused whole: `/dev/zero` stops at the bound), as
/// UTF-8.
fn read_bounded(path: &std::path::Path, file: &str, max_bytes: u64) -> Result<String, CliError> {
    use std::io::Read;
    let cannot = |e: std::io::Error| CliError::bad_input(format!("{file}: cannot read: {e}"));
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .map_err(cannot)?
        .take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(cannot)?;
    if bytes.len() as u64 > max_bytes {
        return Err(CliError::bad_input(format!(
            "{file}: longer than {max_bytes} bytes (rule import.input_bytes; raise it with --max-bytes)"
        )));
    }
    String::from_utf8(bytes).map_err(|e| {
        CliError::bad_input(format!(
            "{file}: not UTF-8 at byte {} (rule import.utf8)",
            e.utf8_error().valid_up_to()
        ))
    })
}

/// `keel import FILE`.
pub fn import(args: ImportArgs) -> Result<i32, CliError> {
    let file = args.file.display().to_string();
    let allowlist = MetadataAllowlist::new(&args.allow_metadata)
        .map_err(|e| CliError::bad_input(format!("--allow-metadata: {}", e.kind())))?;
    let text = read_bounded(&args.file, &file, args.max_bytes)?;
    let log = replay(&file, &text)?;
    let imported = log.retained_after(0);
    check_metadata_allowed(&file, &imported, &allowlist)?;

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
        "imported run {}: {} events ({} new, {} already stored) into {db}",
        log.run_id(),
        imported.len(),
        stats.stored,
        stats.duplicates
    );
    Ok(EXIT_OK)
}

/// Refuses a file whose completions carry metadata in a namespace the
/// importing side does not allow: the live path would have dropped it, and
/// an import keeps every event's bytes, so it cannot drop it either.
/// Namespace names are validated plain names, safe to show.
fn check_metadata_allowed(
    file: &str,
    events: &[Arc<Event>],
    allowlist: &MetadataAllowlist,
) -> Result<(), CliError> {
    for event in events {
        let Ok(Payload::ModelCompleted(done)) = event.payload() else {
            continue;
        };
        let namespaces = done.metadata.iter().flat_map(|m| m.namespaces());
        if let Some((name, _)) = namespaces.into_iter().find(|(n, _)| !allowlist.contains(n)) {
            // The header is line 1, and the file is the whole run.
            return Err(CliError::bad_input(format!(
                "{file}:{line}: seq {seq}: model.completed metadata namespace $.{name} is not \
                 allowed here (rule import.metadata_allowlist; allow it with --allow-metadata {name})",
                line = event.seq() + 1,
                seq = event.seq(),
            )));
        }
    }
    Ok(())
}

/// Parses and checks an export (see the module docs); the log it gives
/// holds every event of the file (nothing evicted).
fn replay(file: &str, text: &str) -> Result<RunLog, CliError> {
    let bad =
        |line: usize, message: String| CliError::bad_input(format!("{file}:{line}: {message}"));
    // `from_jsonl` numbers the file's lines (the header is line 1).
    let snapshot = Snapshot::from_jsonl(text).map_err(|e| match e {
        ImportError::Header { .. } if is_legacy_header(text.lines().next().unwrap_or("")) => bad(
            1,
            format!(
                "the header of an older keel export (last_seq, run_id, schema), not a snapshot header; \
                 this keel reads only the snapshot format: {e}"
            ),
        ),
        e => import_error(file, e, 0),
    })?;
    if snapshot.earliest_seq() != 1 {
        return Err(bad(
            1,
            format!(
                "the file holds seqs from {}, not the whole run (import takes a whole run)",
                snapshot.earliest_seq()
            ),
        ));
    }
    if snapshot.events().is_empty() {
        return Err(bad(1, "the file holds no events".to_owned()));
    }
    let events = snapshot.events();
    let total: usize = events.iter().map(|e| e.line().len()).sum();
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
    // `RunLog::import` numbers the events from 1; the header is line 1.
    let log = RunLog::import(
        snapshot.run_id().clone(),
        events.iter().map(|e| e.line()),
        config,
        Arc::new(SystemClock),
    )
    .map_err(|e| import_error(file, e, 1))?;
    let replayed = log.snapshot();
    if replayed != snapshot {
        let header = |s: &Snapshot| {
            s.to_jsonl()
                .lines()
                .next()
                .map(str::to_owned)
                .unwrap_or_default()
        };
        return Err(bad(
            1,
            format!(
                "the header does not describe the file's events (rule snapshot.consistent): they give {}",
                header(&replayed)
            ),
        ));
    }
    Ok(log)
}

/// Whether `line` is the three-member header `keel export` wrote before it
/// wrote snapshots (`{"last_seq":N,"run_id":"…","schema":"keel.events/1"}`).
fn is_legacy_header(line: &str) -> bool {
    match serde_json::from_str::<serde_json::Value>(line) {
        Ok(serde_json::Value::Object(members)) => {
            let mut keys: Vec<&str> = members.keys().map(String::as_str).collect();
            keys.sort_unstable();
            keys == ["last_seq", "run_id", "schema"]
        }
        _ => false,
    }
}

/// An import refusal, with the file's line number: `offset` is added to
/// the error's own line (0 when it numbers the file's lines, 1 when it
/// numbers the events). Header and consistency errors are about line 1.
fn import_error(file: &str, e: ImportError, offset: usize) -> CliError {
    let line = match &e {
        ImportError::Event { line, .. }
        | ImportError::OtherRun { line, .. }
        | ImportError::Gap { line, .. }
        | ImportError::Duplicate { line, .. }
        | ImportError::OutOfOrder { line, .. }
        | ImportError::TimeWentBack { line, .. }
        | ImportError::Lifecycle { line, .. }
        | ImportError::Commit { line, .. } => Some(line + offset),
        ImportError::Header { .. } | ImportError::Inconsistent { .. } => Some(1),
        _ => None,
    };
    let message = e.to_string();
    // The error text numbers lines its own way; drop its prefix.
    let message = match message.split_once(": ") {
        Some((prefix, rest)) if prefix.starts_with("line ") => rest.to_owned(),
        _ => message,
    };
    match line {
        Some(line) => CliError::bad_input(format!("{file}:{line}: {message}")),
        None => CliError::bad_input(format!("{file}: {message}")),
    }
}
