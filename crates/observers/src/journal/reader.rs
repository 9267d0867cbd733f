//! The read side: runs, events after a cursor, run status.
//! [`JournalReader`] implements `RunHistory`; its pages are bounded in
//! lines and in bytes (`PAGE_BYTES`, plus the line that reaches it, and at
//! least one line when one follows), and `is_last_page` tells an empty
//! page, the only end of a run's stored lines.

use super::schema::{self, Found};
use super::{JournalError, RunStatus};
use crate::history::{RunHistory, RunHistoryError, StoredRun};
use keel_eventlog::Event;
use keel_message::RunId;
use rusqlite::{Connection, OpenFlags, OptionalExtension};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One run as the journal knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunSummary {
    /// The run id.
    pub run_id: RunId,
    /// The last stored sequence; events `1..=last_seq` are all stored.
    pub last_seq: u64,
    /// From the run's lifecycle events.
    pub status: RunStatus,
    /// `ts` of the run's first event (seq 1).
    pub started_ts: u64,
    /// Greatest `ts` stored for the run.
    pub updated_ts: u64,
}

/// What a run's stored events add up to (see [`JournalReader::totals`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunTotals {
    /// `turn.started` events.
    pub turns: u64,
    /// `usage.input_tokens` summed over `model.completed` events.
    pub input_tokens: u64,
    /// `usage.output_tokens` summed over `model.completed` events.
    pub output_tokens: u64,
}

/// A read-only view of a journal, for the CLI and the daemon.
///
/// It has its own connection, so it reads while a [`SqliteJournal`]
/// (in this process or another) writes: WAL readers never block the
/// writer and are never blocked by it. Every call reads one consistent
/// snapshot holding exactly the transactions committed before it began,
/// so anything an `observe` call has acknowledged is visible to a call
/// that starts afterwards. The connection is `query_only`; the reader
/// never writes a row. `JournalReader` is `Send + Sync`; calls are
/// serialized on its connection (open one per thread for parallel reads).
///
/// [`SqliteJournal`]: super::SqliteJournal
#[derive(Debug)]
pub struct JournalReader {
    path: PathBuf,
    conn: Mutex<Connection>,
    /// The schema version when opened (a writer may migrate the file
    /// later; everything this reader asks works on every version from
    /// this one up).
    pub(super) version: u32,
}

impl JournalReader {
    /// Opens the journal at `path` for reading.
    ///
    /// Refuses, without touching the file: no file or a database without
    /// tables ([`JournalError::NotFound`]), a newer schema
    /// ([`JournalError::NewerSchema`]), a database that is not a journal.
    pub fn open(path: impl AsRef<Path>) -> Result<JournalReader, JournalError> {
        let path = path.as_ref();
        match schema::probe(path)? {
            Found::Missing | Found::Empty => {
                return Err(JournalError::NotFound {
                    path: path.to_path_buf(),
                });
            }
            Found::Journal(_) => {}
        }
        let sql = |op| {
            let path = path.to_path_buf();
            move |source| JournalError::Sqlite { path, op, source }
        };
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(sql("open for reading"))?;
        conn.busy_timeout(Duration::from_secs(5))
            .map_err(sql("set busy_timeout"))?;
        conn.pragma_update(None, "query_only", true)
            .map_err(sql("set query_only"))?;
        // Re-check on the connection we keep (the file may have changed
        // since the probe).
        let version = match schema::inspect(&conn, path)? {
            Found::Journal(version) => version,
            Found::Missing | Found::Empty => {
                return Err(JournalError::NotFound {
                    path: path.to_path_buf(),
                });
            }
        };
        Ok(JournalReader {
            path: path.to_path_buf(),
            conn: Mutex::new(conn),
            version,
        })
    }

    /// The database path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub(super) fn with<T>(
        &self,
        op: &'static str,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> Result<T, JournalError> {
        let conn = self
            .conn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&conn).map_err(|source| match source {
            rusqlite::Error::FromSqlConversionFailure(_, _, e) => JournalError::Corrupt {
                path: self.path.clone(),
                detail: e.to_string(),
            },
            source => JournalError::Sqlite {
                path: self.path.clone(),
                op,
                source,
            },
        })
    }

    /// Every run, oldest first (by `started_ts`, then id).
    pub fn runs(&self) -> Result<Vec<RunSummary>, JournalError> {
        self.with("list runs", |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT run_id, last_seq, status, started_ts, updated_ts FROM runs \
                 ORDER BY started_ts, run_id",
            )?;
            let rows = stmt.query_map([], summary)?;
            rows.collect()
        })
    }

    /// Turns and token usage of every stored run, as its `turn.started`
    /// and `model.completed` events add up. From schema version 3 the
    /// writer keeps them in the `runs` rows (one row read per run); a
    /// store opened at an older version is summed from its events.
    pub fn totals(&self) -> Result<HashMap<String, RunTotals>, JournalError> {
        if self.version < schema::TOTALS_VERSION {
            return self.summed_totals();
        }
        self.with("read run totals", |conn| {
            let mut stmt =
                conn.prepare_cached("SELECT run_id, turns, input_tokens, output_tokens FROM runs")?;
            let rows = stmt.query_map([], totals_row)?;
            rows.collect()
        })
    }

    /// [`JournalReader::totals`] summed from the stored events (every
    /// event of every run is read): for stores older than version 3, and
    /// to check the kept counters.
    pub fn summed_totals(&self) -> Result<HashMap<String, RunTotals>, JournalError> {
        self.with("sum run totals", |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT r.run_id, \
                 (SELECT count(*) FROM events e \
                  WHERE e.run_id = r.run_id AND e.kind = 'turn.started'), \
                 (SELECT COALESCE(SUM(json_extract(e.line, '$.payload.usage.input_tokens')), 0) \
                  FROM events e WHERE e.run_id = r.run_id AND e.kind = 'model.completed'), \
                 (SELECT COALESCE(SUM(json_extract(e.line, '$.payload.usage.output_tokens')), 0) \
                  FROM events e WHERE e.run_id = r.run_id AND e.kind = 'model.completed') \
                 FROM runs r",
            )?;
            let rows = stmt.query_map([], totals_row)?;
            rows.collect()
        })
    }

    /// One run's summary, or `None` if the journal has no event of it.
    pub fn run_status(&self, run_id: &str) -> Result<Option<RunSummary>, JournalError> {
        self.with("read run status", |conn| {
            conn.prepare_cached(
                "SELECT run_id, last_seq, status, started_ts, updated_ts FROM runs \
                 WHERE run_id = ?1",
            )?
            .query_row([run_id], summary)
            .optional()
        })
    }

    /// The stored run named `prefix` then a number `n` (decimal digits,
    /// no leading zero) with the greatest `n`; with `status`, the greatest
    /// among the runs of that status. `chat-x-` finds `chat-x-12` but never
    /// `chat-x-1-2` (a run of conversation `x-1`) nor `chat-x-012`.
    ///
    /// One query on the `runs` primary key: the range of ids that start
    /// with `prefix` (`prefix <= run_id < successor(prefix)`), the numbered
    /// ones ordered by length then text, which is numeric order. An empty
    /// `prefix` finds nothing.
    pub fn last_numbered_run(
        &self,
        prefix: &str,
        status: Option<RunStatus>,
    ) -> Result<Option<RunSummary>, JournalError> {
        let Some(upper) = successor(prefix) else {
            return Ok(None);
        };
        // SQLite's length() and substr() count characters, not bytes.
        let chars = i64::try_from(prefix.chars().count()).unwrap_or(i64::MAX);
        let status = status.map(RunStatus::as_str);
        self.with("find a numbered run", |conn| {
            conn.prepare_cached(LAST_NUMBERED_RUN)?
                .query_row(rusqlite::params![prefix, upper, chars, status], summary)
                .optional()
        })
    }

    /// Up to `limit` canonical lines of `run_id` with `seq > after`, in
    /// sequence order, exactly the bytes observed, and no more than
    /// [`PAGE_BYTES`] of them (see [`JournalReader::events_within`]).
    /// Empty when there are none (or no such run). A page shorter than
    /// `limit` is not the end of the run unless [`is_last_page`] says so;
    /// an empty page is.
    pub fn events_after(
        &self,
        run_id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<String>, JournalError> {
        self.events_within(run_id, after, limit, PAGE_BYTES)
    }

    /// Every stored line of `run_id` after `after`, in order, read a page
    /// at a time (`keel export`, `keel verify`, recovery at startup: the
    /// callers that need a whole run in memory, and bound it themselves).
    pub fn all_lines_after(&self, run_id: &str, after: u64) -> Result<Vec<String>, JournalError> {
        all_pages(after, |cursor, limit| {
            self.events_after(run_id, cursor, limit)
        })
    }

    /// [`JournalReader::events_after`] with a byte budget of `max_bytes`:
    /// the page ends once its lines add up to `max_bytes` or more (the
    /// line that reaches it included), so it holds at most `max_bytes`
    /// plus one line; it always holds the next line when there is one
    /// (even for `max_bytes` 0), so a reader paging with it makes
    /// progress. Rows past the budget are never read from the database.
    pub fn events_within(
        &self,
        run_id: &str,
        after: u64,
        limit: usize,
        max_bytes: usize,
    ) -> Result<Vec<String>, JournalError> {
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        let sql_limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.with("read events", |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT line FROM events WHERE run_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
            )?;
            let mut rows = stmt.query(rusqlite::params![run_id, after, sql_limit])?;
            let mut page = Vec::new();
            let mut bytes = 0usize;
            while page.is_empty() || bytes < max_bytes {
                let Some(row) = rows.next()? else { break };
                let line: String = row.get(0)?;
                bytes = bytes.saturating_add(line.len());
                page.push(line);
            }
            Ok(page)
        })
    }
}

/// Every line after `after`, read with `page` (lines after a cursor, at
/// most a line limit) a page at a time until [`is_last_page`].
pub(crate) fn all_pages(
    after: u64,
    mut page: impl FnMut(u64, usize) -> Result<Vec<String>, JournalError>,
) -> Result<Vec<String>, JournalError> {
    const LINES_PER_PAGE: usize = 1024;
    let mut out = Vec::new();
    let mut cursor = after;
    loop {
        let lines = page(cursor, LINES_PER_PAGE)?;
        let last = is_last_page(&lines, LINES_PER_PAGE);
        cursor = page_end(cursor, &lines);
        out.extend(lines);
        if last {
            return Ok(out);
        }
    }
}

/// Most bytes of lines one page of [`JournalReader::events_after`] (and
/// so of the journal as a [`RunHistory`]) holds before it ends: 256 KiB.
/// A page holds at most this plus one line (a line is at most the log's
/// `max_event_bytes`, 2 MiB by default), whatever its line `limit`: what a
/// reader of the journal (an event stream, a prelude, `keel events`)
/// holds per page is bounded in bytes, not only in lines.
pub const PAGE_BYTES: usize = 256 << 10;
/// The cursor after `page`: the seq of its last line (the journal has no
/// gaps, so this is also `cursor + page.len()`).
pub fn page_end(cursor: u64, page: &[String]) -> u64 {
    match page.last() {
        None => cursor,
        Some(last) => Event::decode(last)
            .map(|e| e.seq())
            .unwrap_or(cursor + page.len() as u64),
    }
}

/// Whether `page`, as [`JournalReader::events_after`] returned it for a
/// `limit`, is the last of the run as stored when it was read: it ended
/// before both its line limit and [`PAGE_BYTES`], so it ended because the
/// stored lines did. A page cut by either bound is not the last (the next
/// read may still be empty).
pub fn is_last_page(page: &[String], limit: usize) -> bool {
    page.len() < limit && page.iter().map(String::len).sum::<usize>() < PAGE_BYTES
}

/// The journal as a run's durable history: [`JournalReader::run_status`]
/// and [`JournalReader::events_after`], each line decoded (with the
/// canonical round-trip check). A page is bounded in bytes as well as in
/// events ([`PAGE_BYTES`]), and ends before a line that does not
/// decode; a read that starts at one is [`RunHistoryError::Corrupt`]. What the writer acknowledged before a call
/// began is in its answer (each call reads one snapshot).
impl RunHistory for JournalReader {
    fn name(&self) -> &str {
        "sqlite"
    }

    fn stored(&self, run_id: &RunId) -> Result<Option<StoredRun>, RunHistoryError> {
        let summary = self
            .run_status(run_id.as_str())
            .map_err(|e| RunHistoryError::read("sqlite", e))?;
        Ok(summary.map(|s| StoredRun::new(s.last_seq, s.status)))
    }

    fn read_after(
        &self,
        run_id: &RunId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<Arc<Event>>, RunHistoryError> {
        let lines = self
            .events_after(run_id.as_str(), after, limit)
            .map_err(|e| RunHistoryError::read("sqlite", e))?;
        decode_page("sqlite", run_id, after, lines)
    }
}

/// A page of stored lines decoded for [`RunHistory::read_after`] (the
/// canonical round-trip check included): the good events before a bad
/// line are served, and a page that starts at a bad line is
/// [`RunHistoryError::Corrupt`]. Shared by the SQLite and PostgreSQL
/// readers.
pub(crate) fn decode_page(
    store: &str,
    run_id: &RunId,
    after: u64,
    lines: Vec<String>,
) -> Result<Vec<Arc<Event>>, RunHistoryError> {
    let mut last = after;
    let mut events = Vec::with_capacity(lines.len());
    // Each line is dropped once decoded: the page is held about once.
    for line in lines {
        match Event::decode(&line) {
            Ok(event) => {
                last = event.seq();
                events.push(Arc::new(event));
            }
            // The good events before a bad line are served; the next
            // read starts at the bad line and fails.
            Err(_) if !events.is_empty() => break,
            Err(e) => {
                return Err(RunHistoryError::Corrupt {
                    store: store.to_owned(),
                    run_id: run_id.to_string(),
                    after: last,
                    detail: e.to_string(),
                });
            }
        }
    }
    Ok(events)
}

/// [`JournalReader::last_numbered_run`]: `?1` the prefix, `?2` its
/// successor, `?3` its length in characters, `?4` the status or NULL.
const LAST_NUMBERED_RUN: &str = "SELECT run_id, last_seq, status, started_ts, updated_ts \
     FROM runs WHERE run_id >= ?1 AND run_id < ?2 \
     AND length(run_id) > ?3 \
     AND substr(run_id, ?3 + 1) NOT GLOB '*[^0-9]*' \
     AND substr(run_id, ?3 + 1, 1) <> '0' \
     AND (?4 IS NULL OR status = ?4) \
     ORDER BY length(run_id) DESC, run_id DESC LIMIT 1";

/// The least string greater than every string that starts with `prefix`
/// (its last character incremented), or `None` when there is none.
pub(crate) fn successor(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    let last = chars.pop()?;
    let next = (u32::from(last) + 1..=u32::from(char::MAX)).find_map(char::from_u32)?;
    chars.push(next);
    Some(chars.into_iter().collect())
}

/// `run_id, turns, input_tokens, output_tokens`.
fn totals_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<(String, RunTotals)> {
    let run_id: String = row.get(0)?;
    let totals = RunTotals {
        turns: non_negative(row.get(1)?, 1, "turns")?,
        input_tokens: non_negative(row.get(2)?, 2, "input_tokens")?,
        output_tokens: non_negative(row.get(3)?, 3, "output_tokens")?,
    };
    Ok((run_id, totals))
}

pub(super) fn non_negative(v: i64, col: usize, name: &str) -> rusqlite::Result<u64> {
    u64::try_from(v).map_err(|_| conversion(col, format!("the {name} total is {v}")))
}

fn conversion(col: usize, detail: String) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(
        col,
        rusqlite::types::Type::Text,
        Box::new(CorruptValue(detail)),
    )
}

#[derive(Debug)]
struct CorruptValue(String);

impl std::fmt::Display for CorruptValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CorruptValue {}

fn unsigned(row: &rusqlite::Row<'_>, col: usize, name: &str) -> rusqlite::Result<u64> {
    let v: i64 = row.get(col)?;
    u64::try_from(v).map_err(|_| conversion(col, format!("runs.{name} is {v}")))
}

pub(super) fn summary(row: &rusqlite::Row<'_>) -> rusqlite::Result<RunSummary> {
    let status: String = row.get(2)?;
    let run_id: String = row.get(0)?;
    Ok(RunSummary {
        run_id: RunId::parse(&run_id)
            .map_err(|e| conversion(0, format!("runs.run_id is not a run id: {e}")))?,
        last_seq: unsigned(row, 1, "last_seq")?,
        status: RunStatus::parse(&status).ok_or_else(|| {
            conversion(
                2,
                "runs.status is not one of running, completed, failed, cancelled".to_owned(),
            )
        })?,
        started_ts: unsigned(row, 3, "started_ts")?,
        updated_ts: unsigned(row, 4, "updated_ts")?,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;
    use crate::RequiredObserver;
    use crate::journal::{JournalConfig, SqliteJournal};
    use keel_eventlog::{LogConfig, Payload, RunLog, RunStarted, SystemClock};

    #[test]
    fn the_reader_is_a_run_history() {
        let dir = std::env::temp_dir().join(format!("keel-history-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("keel.db");
        let journal = SqliteJournal::open(&path, JournalConfig::default()).unwrap();
        let run = RunId::parse("run_h").unwrap();
        let log = RunLog::new(run.clone(), LogConfig::default(), Arc::new(SystemClock)).unwrap();
        let note = Payload::Extension {
            kind: keel_eventlog::EventKind::parse("test.note").unwrap(),
            payload: keel_message::CanonicalJson::parse("{}").unwrap(),
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let mut lines = Vec::new();
        for payload in [
            Payload::RunStarted(RunStarted::default()),
            note.clone(),
            note,
        ] {
            let event = log.commit(&payload).unwrap();
            rt.block_on(journal.observe(&event)).unwrap();
            lines.push(event.line().to_owned());
        }
        let reader = journal.reader().unwrap();
        let history: &dyn RunHistory = &reader;
        assert_eq!(
            history.stored(&run).unwrap(),
            Some(StoredRun::new(3, RunStatus::Running))
        );
        let unknown = RunId::parse("run_none").unwrap();
        assert_eq!(history.stored(&unknown).unwrap(), None);
        let page = history.read_after(&run, 1, 10).unwrap();
        let read: Vec<&str> = page.iter().map(|e| e.line()).collect();
        assert_eq!(read, [lines[1].as_str(), lines[2].as_str()]);
        assert_eq!(history.read_after(&run, 1, 1).unwrap().len(), 1);
        journal.close().unwrap();

        // A damaged line is a typed error naming the seq before it.
        let conn = Connection::open(&path).unwrap();
        conn.execute("UPDATE events SET line = '{}' WHERE seq = 3", [])
            .unwrap();
        drop(conn);
        // The good events before it are served; a read from it fails.
        let before = history.read_after(&run, 0, 10).unwrap();
        assert_eq!(before.iter().map(|e| e.seq()).collect::<Vec<_>>(), [1, 2]);
        match history.read_after(&run, 2, 10) {
            Err(RunHistoryError::Corrupt {
                after: 2, run_id, ..
            }) => assert_eq!(run_id, "run_h"),
            other => panic!("{other:?}"),
        }
        drop(reader);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Stores a run `id` that started and, with `end`, ended.
    fn store_run(
        journal: &SqliteJournal,
        rt: &tokio::runtime::Runtime,
        id: &str,
        end: Option<Payload>,
    ) {
        let log = RunLog::new(
            RunId::parse(id).unwrap(),
            LogConfig::default(),
            Arc::new(SystemClock),
        )
        .unwrap();
        let payloads = std::iter::once(Payload::RunStarted(RunStarted::default())).chain(end);
        for payload in payloads {
            let event = log.commit(&payload).unwrap();
            rt.block_on(journal.observe(&event)).unwrap();
        }
    }

    #[test]
    fn the_last_numbered_run_is_found_by_number_in_one_range() {
        let dir = tempfile_dir("numbered");
        let path = dir.join("keel.db");
        let journal = SqliteJournal::open(&path, JournalConfig::default()).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let completed = || Some(Payload::RunCompleted(keel_eventlog::RunCompleted::default()));
        let cancelled = || Some(Payload::RunCancelled(keel_eventlog::RunCancelled::default()));
        for (id, end) in [
            ("chat-x-2", completed()),
            ("chat-x-9", completed()),
            ("chat-x-10", cancelled()),
            // Not runs of conversation `x`: another conversation, a
            // leading zero, no number, a neighbour of the prefix.
            ("chat-x-1-99", completed()),
            ("chat-x-0100", completed()),
            ("chat-x-", completed()),
            ("chat-x-7a", completed()),
            ("chat-xy-50", completed()),
            ("chat-x.5", completed()),
        ] {
            store_run(&journal, &rt, id, end);
        }
        let reader = journal.reader().unwrap();
        let last = |prefix: &str, status| {
            reader
                .last_numbered_run(prefix, status)
                .unwrap()
                .map(|s| s.run_id.as_str().to_owned())
        };
        assert_eq!(last("chat-x-", None).as_deref(), Some("chat-x-10"));
        assert_eq!(
            last("chat-x-", Some(RunStatus::Completed)).as_deref(),
            Some("chat-x-9")
        );
        assert_eq!(last("chat-x-", Some(RunStatus::Failed)), None);
        assert_eq!(last("chat-x-1-", None).as_deref(), Some("chat-x-1-99"));
        assert_eq!(last("chat-z-", None), None);
        assert_eq!(last("", None), None);
        // The range is a search of the primary key, not a scan.
        let conn = Connection::open(&path).unwrap();
        let plan: Vec<String> = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {LAST_NUMBERED_RUN}"))
            .unwrap()
            .query_map(
                rusqlite::params!["chat-x-", "chat-x.", 7, None::<String>],
                |r| r.get::<_, String>(3),
            )
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert!(
            plan.iter().any(|p| p.starts_with("SEARCH runs USING")),
            "{plan:?}"
        );
        drop(reader);
        journal.close().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A journal at a fresh path holding run `run_p`: `run.started`, then
    /// `notes` extension events each padded to about `pad` bytes.
    fn padded_run(name: &str, notes: usize, pad: usize) -> (SqliteJournal, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("keel-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let journal = SqliteJournal::open(dir.join("keel.db"), JournalConfig::default()).unwrap();
        let run = RunId::parse("run_p").unwrap();
        let log = RunLog::new(run, LogConfig::default(), Arc::new(SystemClock)).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let note = Payload::Extension {
            kind: keel_eventlog::EventKind::parse("test.note").unwrap(),
            payload: keel_message::CanonicalJson::parse(
                &serde_json::json!({ "pad": "x".repeat(pad) }).to_string(),
            )
            .unwrap(),
        };
        let started = log
            .commit(&Payload::RunStarted(RunStarted::default()))
            .unwrap();
        rt.block_on(journal.observe(&started)).unwrap();
        for _ in 0..notes {
            let event = log.commit(&note).unwrap();
            rt.block_on(journal.observe(&event)).unwrap();
        }
        (journal, dir)
    }

    #[test]
    fn a_page_is_bounded_in_bytes_and_always_makes_progress() {
        // 12 lines of about 0.3 PAGE_BYTES: 3.6 pages, under the line limit.
        let pad = PAGE_BYTES * 3 / 10;
        let (journal, dir) = padded_run("page-bytes", 12, pad);
        let reader = journal.reader().unwrap();
        let page = reader.events_after("run_p", 1, 512).unwrap();
        let bytes: usize = page.iter().map(String::len).sum();
        // The page ends at the line that reaches PAGE_BYTES.
        assert_eq!(page.len(), 4, "{bytes}");
        assert!((PAGE_BYTES..PAGE_BYTES + pad).contains(&bytes), "{bytes}");
        assert!(!is_last_page(&page, 512));
        // A budget below one line still gives that line.
        assert_eq!(reader.events_within("run_p", 1, 512, 0).unwrap().len(), 1);
        assert_eq!(reader.events_within("run_p", 1, 512, 1).unwrap().len(), 1);
        // The line limit still holds under the byte budget.
        assert_eq!(
            reader
                .events_within("run_p", 0, 2, usize::MAX)
                .unwrap()
                .len(),
            2
        );
        // Paging until a page is the last reads every line once, in order.
        let (mut after, mut seen) = (0u64, 0usize);
        loop {
            let page = reader.events_after("run_p", after, 512).unwrap();
            seen += page.len();
            after += page.len() as u64;
            if is_last_page(&page, 512) {
                break;
            }
            assert!(!page.is_empty(), "a page cut short is followed by more");
        }
        assert_eq!((seen, after), (13, 13));
        // The history reads the same pages, decoded.
        let history: &dyn RunHistory = &reader;
        let run = RunId::parse("run_p").unwrap();
        assert_eq!(history.read_after(&run, 1, 512).unwrap().len(), 4);
        assert_eq!(history.read_after(&run, 0, 512).unwrap().len(), 5);
        // Small lines end a page at the line limit, or as the last page.
        let small = reader.events_after("run_p", 0, 1).unwrap();
        assert!(!is_last_page(&small, 1));
        let tail = reader.events_after("run_p", 12, 512).unwrap();
        assert_eq!(tail.len(), 1);
        assert!(is_last_page(&tail, 512));
        assert!(
            !is_last_page(&["x".repeat(PAGE_BYTES)], 512),
            "a line at the budget"
        );
        assert!(is_last_page(&[], 512));
        assert!(is_last_page(&["{}".to_owned()], 2));
        drop(reader);
        journal.close().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn tempfile_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("keel-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_prefix_successor_increments_its_last_character() {
        assert_eq!(successor("chat-x-").as_deref(), Some("chat-x."));
        assert_eq!(successor("a\u{d7ff}").as_deref(), Some("a\u{e000}"));
        assert_eq!(successor(""), None);
        assert_eq!(successor("\u{10ffff}"), None);
    }
}
