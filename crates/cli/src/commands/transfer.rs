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
use keel_eventlog::history::{self, ChainError, HistoryStore};
use keel_eventlog::{
    ENTRY_OVERHEAD_BYTES, Event, ImportError, LogConfig, Payload, RunLog, Snapshot, SystemClock,
};
use keel_message::{Limits, RunId};
use keel_observers::conversation::{JournalStore, StoreError};
use keel_observers::{
    JournalConfig, ObserverError, RequiredObserver, Store, StoreLocation, StoreReader, Synchronous,
};
use keel_stream::MetadataAllowlist;
use std::io::Write;
use std::sync::Arc;

/// `keel export RUN_ID [-o FILE]`.
pub fn export(args: ExportArgs) -> Result<i32, CliError> {
    let reader = StoreReader::open(&args.db.db)?;
    let Some(run) = reader.run_status(&args.run_id)? else {
        return Err(CliError::bad_input(format!(
            "unknown run {} in {} (see `keel runs`)",
            args.run_id, args.db.db
        )));
    };
    let broken = |what: String| {
        CliError::failure(format!(
            "run {}: {what}; nothing was exported (run `keel verify`)",
            run.run_id
        ))
    };
    let run_id = run.run_id.clone();
    // A continued run inherits its history by reference: the file carries
    // the runs it references first, so it is self-contained.
    let runs = history::chain_runs(&JournalStore(&reader), &run_id)
        .map_err(|e| broken(format!("its chain of references: {e}")))?;
    let mut text = String::new();
    for id in &runs {
        text.push_str(&run_snapshot(&reader, id)?.to_jsonl());
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

/// The whole of stored run `run_id` as a snapshot.
fn run_snapshot(reader: &StoreReader, run_id: &RunId) -> Result<Snapshot, CliError> {
    let broken = |what: String| {
        CliError::failure(format!(
            "run {run_id}: {what}; nothing was exported (run `keel verify`)"
        ))
    };
    let last_seq = reader
        .run_status(run_id.as_str())?
        .map_or(0, |summary| summary.last_seq);
    let lines = all_lines(reader, run_id.as_str(), 0)?;
    if lines.len() as u64 != last_seq {
        return Err(CliError::failure(format!(
            "run {run_id}: the journal holds {} events but says last_seq {last_seq} (run `keel verify`)",
            lines.len(),
        )));
    }
    let mut events = Vec::with_capacity(lines.len());
    for (i, line) in lines.iter().enumerate() {
        let event =
            Event::decode(line).map_err(|e| broken(format!("stored event {}: {e}", i + 1)))?;
        events.push(Arc::new(event));
    }
    Snapshot::from_events(run_id.clone(), events)
        .map_err(|e| broken(format!("the stored events are not one valid run: {e}")))
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
    let mut logs = Vec::new();
    for section in sections(&text) {
        logs.push(replay(&file, section, &allowlist)?);
    }
    let db = args.db.db.to_string();
    if let Some(reader) = existing_journal(&args.db.db)? {
        check_chain(&file, &logs, &JournalStore(&reader))?;
        check_no_conflict(&db, &logs, &reader)?;
    } else {
        check_chain(&file, &logs, &NoJournal)?;
    }
    let mut config = JournalConfig::default();
    // One fsync at close instead of one per event: acknowledged events
    // survive a process crash, and the import is repeatable (offering the
    // same bytes again is a no-op).
    config.synchronous = Synchronous::Normal;
    let journal = Store::open(&args.db.db, config)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::failure(format!("cannot start the async runtime: {e}")))?;
    let stored = rt.block_on(store_all(&journal, &logs, &db));
    let stats = journal.stats();
    let closed = journal.close();
    stored?;
    closed?;
    let events: u64 = logs.iter().map(|log| log.stats().last_seq).sum();
    let referenced = match logs.len() {
        1 => String::new(),
        n => format!(" with the {} runs it references", n - 1),
    };
    if let Some(last) = logs.last() {
        println!(
            "imported run {}{referenced}: {events} events ({} new, {} already stored) into {db}",
            last.run_id(),
            stats.stored,
            stats.duplicates
        );
    }
    Ok(EXIT_OK)
}

/// The journal an import checks against: none for a SQLite file that does
/// not exist yet (nothing is created before the checks pass); a database
/// server's is created first if it has none (an empty schema holds no run).
fn existing_journal(location: &StoreLocation) -> Result<Option<StoreReader>, CliError> {
    match location.sqlite_path() {
        Some(path) if !path.exists() => return Ok(None),
        Some(_) => {}
        None => Store::open(location, JournalConfig::default())?.close()?,
    }
    Ok(Some(StoreReader::open(location)?))
}

/// Offers every event of `logs`, in order, to `journal`.
async fn store_all(journal: &Store, logs: &[RunLog], db: &str) -> Result<(), CliError> {
    for event in logs.iter().flat_map(|log| log.retained_after(0)) {
        journal.observe(&event).await.map_err(|e| match e {
            ObserverError::Conflict { run_id, seq } => CliError::bad_input(format!(
                "{db}: run {run_id} seq {seq} is already stored with different bytes; nothing after it was imported"
            )),
            ObserverError::Gap { run_id, last_stored, seq } => CliError::bad_input(format!(
                "{db}: run {run_id} has seq {last_stored} stored, the file offers {seq}: a gap"
            )),
            other => CliError::failure(format!("{db}: storing seq {}: {other}", event.seq())),
        })?;
    }
    Ok(())
}

/// One run's part of an export file: its header line and events.
#[derive(Debug, Clone, Copy)]
struct Section<'a> {
    /// The file's line number of its header.
    first_line: usize,
    /// Its text, header first.
    text: &'a str,
}

/// The file's runs: a new one begins at every line that is not an event
/// (`{"kind":…`), so a header starts each and a stray line is its own,
/// refused by the snapshot parser.
fn sections(text: &str) -> Vec<Section<'_>> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut first_line = 1;
    let mut offset = 0;
    for (i, line) in text.split_inclusive('\n').enumerate() {
        if i > 0 && !line.starts_with("{\"kind\":") {
            out.push(Section {
                first_line,
                text: &text[start..offset],
            });
            start = offset;
            first_line = i + 1;
        }
        offset += line.len();
    }
    out.push(Section {
        first_line,
        text: &text[start..],
    });
    out
}

/// The file's runs, then the journal's, as one store: the runs a file's
/// references name are in the file or already stored.
struct Overlay<'a, J> {
    logs: &'a [RunLog],
    journal: &'a J,
}

impl<J: HistoryStore<Error = StoreError>> HistoryStore for Overlay<'_, J> {
    type Error = StoreError;
    fn events_after(
        &self,
        run_id: &RunId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<Event>, StoreError> {
        match self.logs.iter().find(|log| log.run_id() == run_id) {
            Some(log) => Ok(log
                .retained_after(after)
                .iter()
                .take(limit)
                .map(|e| Event::clone(e))
                .collect()),
            None => self.journal.events_after(run_id, after, limit),
        }
    }
}

/// A store with no runs: the journal an import creates.
struct NoJournal;

impl HistoryStore for NoJournal {
    type Error = StoreError;
    fn events_after(&self, _: &RunId, _: u64, _: usize) -> Result<Vec<Event>, StoreError> {
        Ok(Vec::new())
    }
}

/// Checks the file's runs form the chain of references of its last run,
/// each reference resolved (in the file or the journal) and matching its
/// run's last seq and digest; one run holding no reference is the plain
/// one-run file.
fn check_chain<J: HistoryStore<Error = StoreError>>(
    file: &str,
    logs: &[RunLog],
    journal: &J,
) -> Result<(), CliError> {
    let Some(last) = logs.last() else {
        return Err(CliError::bad_input(format!(
            "{file}:1: the file holds no run"
        )));
    };
    let mut seen = std::collections::HashSet::new();
    if let Some(log) = logs.iter().find(|log| !seen.insert(log.run_id().clone())) {
        return Err(CliError::bad_input(format!(
            "{file}: run {} appears twice (rule import.one_section_per_run)",
            log.run_id()
        )));
    }
    let store = Overlay { logs, journal };
    let chain = history::rebuild_chain(&store, last.run_id(), &Limits::default());
    match chain {
        Ok(chain) => match logs.iter().find(|log| !chain.runs.contains(log.run_id())) {
            Some(stray) => Err(CliError::bad_input(format!(
                "{file}: run {} is not in the chain of references of run {} (rule import.chain)",
                stray.run_id(),
                last.run_id()
            ))),
            None => Ok(()),
        },
        // A single run that inherits nothing needs no history to import
        // (an early run's log may record no input).
        Err(ChainError::History { .. }) if logs.len() == 1 && !inherits(last) => Ok(()),
        Err(e) => Err(CliError::bad_input(format!(
            "{file}: {e}; nothing was imported"
        ))),
    }
}

/// Whether `log`'s input is a reference.
fn inherits(log: &RunLog) -> bool {
    log.retained_after(1)
        .first()
        .is_some_and(|e| matches!(e.payload(), Ok(Payload::RunInputReference(_))))
}

/// Refuses, before anything is stored, a run the journal holds with other
/// bytes than the file, so an import is whole or nothing.
fn check_no_conflict(db: &str, logs: &[RunLog], reader: &StoreReader) -> Result<(), CliError> {
    for log in logs {
        let stored = all_lines(reader, log.run_id().as_str(), 0)?;
        let offered = log.retained_after(0);
        if let Some((seq, _)) = stored
            .iter()
            .zip(offered.iter())
            .enumerate()
            .find(|(_, (stored, offered))| stored.as_str() != offered.line())
        {
            return Err(CliError::bad_input(format!(
                "{db}: run {} seq {} is already stored with different bytes; nothing was imported",
                log.run_id(),
                seq + 1
            )));
        }
    }
    Ok(())
}

/// Parses and checks an export (see the module docs), under the
/// importing side's metadata `allowlist`; the log it gives holds every
/// event of the file (nothing evicted).
fn replay(
    file: &str,
    section: Section<'_>,
    allowlist: &MetadataAllowlist,
) -> Result<RunLog, CliError> {
    let (text, shift) = (section.text, section.first_line - 1);
    let bad = |line: usize, message: String| {
        CliError::bad_input(format!("{file}:{}: {message}", line + shift))
    };
    // `from_jsonl` numbers the section's lines (its header is line 1).
    let snapshot = Snapshot::from_jsonl(text).map_err(|e| match e {
        ImportError::Header { .. } if is_legacy_header(text.lines().next().unwrap_or("")) => bad(
            1,
            format!(
                "the header of an older keel export (last_seq, run_id, schema), not a snapshot header; \
                 this keel reads only the snapshot format: {e}"
            ),
        ),
        e => import_error(file, e, shift, section.first_line),
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
    // `import_run` numbers the events from 1; the header is line 1.
    snapshot
        .import_run(config, Arc::new(SystemClock), allowlist)
        .map_err(|e| import_error(file, e, shift + 1, section.first_line))
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
/// numbers the events). Header and consistency errors are about the
/// run's header line, `header`.
fn import_error(file: &str, e: ImportError, offset: usize, header: usize) -> CliError {
    let line = match &e {
        ImportError::Event { line, .. }
        | ImportError::OtherRun { line, .. }
        | ImportError::Gap { line, .. }
        | ImportError::Duplicate { line, .. }
        | ImportError::OutOfOrder { line, .. }
        | ImportError::TimeWentBack { line, .. }
        | ImportError::Lifecycle { line, .. }
        | ImportError::Commit { line, .. }
        | ImportError::MetadataNotAllowed { line, .. } => Some(line + offset),
        ImportError::Header { .. }
        | ImportError::Inconsistent { .. }
        | ImportError::HeaderMismatch { .. } => Some(header),
        _ => None,
    };
    let message = e.to_string();
    // The error text numbers lines its own way; drop its prefix.
    let mut message = match message.split_once(": ") {
        Some((prefix, rest)) if prefix.starts_with("line ") => rest.to_owned(),
        _ => message,
    };
    if let ImportError::MetadataNotAllowed { namespace, .. } = &e {
        message.push_str(&format!("; allow it with --allow-metadata {namespace}"));
    }
    match line {
        Some(line) => CliError::bad_input(format!("{file}:{line}: {message}")),
        None => CliError::bad_input(format!("{file}: {message}")),
    }
}
