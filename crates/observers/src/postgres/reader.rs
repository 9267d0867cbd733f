//! [`PgReader`]: the read side, with [`JournalReader`]'s methods and
//! contract.
//!
//! [`JournalReader`]: crate::journal::JournalReader

use super::schema::{self, Found};
use super::{PgUrl, close_off_thread, connect, pg_error};
use crate::history::{RunHistory, RunHistoryError, StoredRun};
use crate::journal::reader::{all_pages, decode_page, successor};
use crate::journal::{
    JournalError, ListedRun, PAGE_BYTES, RunStatus, RunSummary, RunTotals, RunsCursor, RunsPage,
    RunsQuery,
};
use keel_eventlog::Event;
use keel_message::RunId;
use postgres::types::ToSql;
use postgres::{Client, Row};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Lines fetched per round trip while a page fills up to its byte budget.
const FETCH_LINES: i32 = 64;

const SUMMARY: &str = "run_id, last_seq, status, started_ts, updated_ts";

/// A read-only view of a PostgreSQL journal, for the CLI and the daemon.
///
/// It has its own connection, in a read-only session
/// (`default_transaction_read_only`); each call reads one snapshot holding
/// every transaction committed before it began, so whatever a
/// [`PgJournal`](super::PgJournal) acknowledged is visible to a call that
/// starts afterwards. Calls are serialized on its connection; they block
/// (call them on a blocking thread from async code).
pub struct PgReader {
    url: PgUrl,
    client: Mutex<Option<Client>>,
}

impl std::fmt::Debug for PgReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgReader")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl PgReader {
    /// Opens the journal at `url` for reading. Refuses a database with no
    /// journal ([`JournalError::NotFound`] is for files; here
    /// [`JournalError::PostgresSchema`]) and a newer schema.
    pub fn open(url: &PgUrl) -> Result<PgReader, JournalError> {
        let mut client = connect(url, "connect for reading")?;
        let checked = client
            .batch_execute("SET default_transaction_read_only = on")
            .map_err(pg_error(url, "make the session read-only"))
            .and_then(|()| schema::inspect(&mut client, url));
        match checked {
            Ok(Found::Journal(_)) => Ok(PgReader {
                url: url.clone(),
                client: Mutex::new(Some(client)),
            }),
            Ok(Found::Empty) => {
                close_off_thread(client);
                Err(JournalError::PostgresSchema {
                    database: url.to_string(),
                    detail: "no Keel journal in this database (no keel_schema table)".to_owned(),
                })
            }
            Err(e) => {
                close_off_thread(client);
                Err(e)
            }
        }
    }

    /// The database URL (shown without its password).
    pub fn url(&self) -> &PgUrl {
        &self.url
    }

    /// Runs `f` on the connection (reconnecting once it broke).
    fn with<T>(
        &self,
        op: &'static str,
        f: impl FnOnce(&mut Client) -> Result<T, postgres::Error>,
    ) -> Result<T, JournalError> {
        let mut slot = self
            .client
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut client = match slot.take() {
            Some(client) if !client.is_closed() => client,
            _ => {
                let mut client = connect(&self.url, "reconnect for reading")?;
                client
                    .batch_execute("SET default_transaction_read_only = on")
                    .map_err(pg_error(&self.url, "make the session read-only"))?;
                client
            }
        };
        let result = f(&mut client).map_err(pg_error(&self.url, op));
        *slot = Some(client);
        result
    }

    /// The rows of `sql` (no parameters), for the other read modules.
    pub(super) fn query(&self, op: &'static str, sql: &str) -> Result<Vec<Row>, JournalError> {
        self.with(op, |c| c.query(sql, &[]))
    }

    pub(super) fn corrupt(&self, detail: String) -> JournalError {
        JournalError::PostgresSchema {
            database: self.url.to_string(),
            detail,
        }
    }

    fn summaries(&self, rows: &[Row]) -> Result<Vec<RunSummary>, JournalError> {
        rows.iter()
            .map(|r| summary(r).map_err(|d| self.corrupt(d)))
            .collect()
    }

    /// Every run, oldest first (by `started_ts`, then id).
    pub fn runs(&self) -> Result<Vec<RunSummary>, JournalError> {
        let sql = format!("SELECT {SUMMARY} FROM runs ORDER BY started_ts, run_id");
        let rows = self.with("list runs", |c| c.query(&sql, &[]))?;
        self.summaries(&rows)
    }

    /// Turns and token usage of every stored run, as kept in its row.
    pub fn totals(&self) -> Result<HashMap<String, RunTotals>, JournalError> {
        let rows = self.with("read run totals", |c| {
            c.query(
                "SELECT run_id, turns, input_tokens, output_tokens FROM runs",
                &[],
            )
        })?;
        self.totals_rows(&rows)
    }

    /// [`PgReader::totals`] summed from the stored events (every event of
    /// every run is read): to check the kept counters.
    pub fn summed_totals(&self) -> Result<HashMap<String, RunTotals>, JournalError> {
        let rows = self.with("sum run totals", |c| {
            c.query(
                "SELECT r.run_id, \
                 (SELECT count(*) FROM events e \
                  WHERE e.run_id = r.run_id AND e.kind = 'turn.started'), \
                 (SELECT COALESCE(SUM((e.line::jsonb #>> '{payload,usage,input_tokens}')::bigint), 0)::bigint \
                  FROM events e WHERE e.run_id = r.run_id AND e.kind = 'model.completed'), \
                 (SELECT COALESCE(SUM((e.line::jsonb #>> '{payload,usage,output_tokens}')::bigint), 0)::bigint \
                  FROM events e WHERE e.run_id = r.run_id AND e.kind = 'model.completed') \
                 FROM runs r",
                &[],
            )
        })?;
        self.totals_rows(&rows)
    }

    fn totals_rows(&self, rows: &[Row]) -> Result<HashMap<String, RunTotals>, JournalError> {
        rows.iter()
            .map(|row| {
                let run: String = row.try_get(0).map_err(|e| self.corrupt(e.to_string()))?;
                let totals = totals_at(row, 1).map_err(|d| self.corrupt(d))?;
                Ok((run, totals))
            })
            .collect()
    }

    /// One run's summary, or `None` if the journal has no event of it.
    pub fn run_status(&self, run_id: &str) -> Result<Option<RunSummary>, JournalError> {
        let sql = format!("SELECT {SUMMARY} FROM runs WHERE run_id = $1");
        let rows = self.with("read run status", |c| c.query(&sql, &[&run_id]))?;
        Ok(self.summaries(&rows)?.into_iter().next())
    }

    /// The stored run named `prefix` then a number (decimal digits, no
    /// leading zero) with the greatest number; with `status`, among the runs
    /// of that status. As [`JournalReader::last_numbered_run`]: one range
    /// of the primary key (ids sort bytewise, `COLLATE "C"`).
    ///
    /// [`JournalReader::last_numbered_run`]: crate::journal::JournalReader::last_numbered_run
    pub fn last_numbered_run(
        &self,
        prefix: &str,
        status: Option<RunStatus>,
    ) -> Result<Option<RunSummary>, JournalError> {
        let Some(upper) = successor(prefix) else {
            return Ok(None);
        };
        let chars = i32::try_from(prefix.chars().count()).unwrap_or(i32::MAX);
        let status = status.map(RunStatus::as_str);
        let sql = format!(
            "SELECT {SUMMARY} FROM runs WHERE run_id >= $1 AND run_id < $2 \
             AND length(run_id) > $3 AND substr(run_id, $3 + 1) ~ '^[1-9][0-9]*$' \
             AND ($4::text IS NULL OR status = $4) \
             ORDER BY length(run_id) DESC, run_id DESC LIMIT 1"
        );
        let rows = self.with("find a numbered run", |c| {
            c.query(&sql, &[&prefix, &upper, &chars, &status])
        })?;
        Ok(self.summaries(&rows)?.into_iter().next())
    }

    /// Up to `limit` canonical lines of `run_id` with `seq > after`, in
    /// order, at most [`PAGE_BYTES`] of them (plus the line that reaches
    /// it). See [`JournalReader::events_after`].
    ///
    /// [`JournalReader::events_after`]: crate::journal::JournalReader::events_after
    pub fn events_after(
        &self,
        run_id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<String>, JournalError> {
        self.events_within(run_id, after, limit, PAGE_BYTES)
    }

    /// Every stored line of `run_id` after `after`, in order, read a page
    /// at a time.
    pub fn all_lines_after(&self, run_id: &str, after: u64) -> Result<Vec<String>, JournalError> {
        all_pages(after, |cursor, limit| {
            self.events_after(run_id, cursor, limit)
        })
    }

    /// [`PgReader::events_after`] with a byte budget of `max_bytes` (at
    /// least one line when one follows). The lines come through a portal
    /// 64 at a time, so rows past the budget are (at most one
    /// fetch) never sent by the server.
    pub fn events_within(
        &self,
        run_id: &str,
        after: u64,
        limit: usize,
        max_bytes: usize,
    ) -> Result<Vec<String>, JournalError> {
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        let sql_limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.with("read events", |c| {
            let mut tx = c.transaction()?;
            let portal = tx.bind(
                "SELECT line FROM events WHERE run_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
                &[&run_id, &after, &sql_limit],
            )?;
            let mut page = Vec::new();
            let mut bytes = 0usize;
            'fetch: loop {
                let rows = tx.query_portal(&portal, FETCH_LINES)?;
                if rows.is_empty() {
                    break;
                }
                for row in rows {
                    if !page.is_empty() && bytes >= max_bytes {
                        break 'fetch;
                    }
                    let line: String = row.try_get(0)?;
                    bytes = bytes.saturating_add(line.len());
                    page.push(line);
                }
            }
            tx.commit()?;
            Ok(page)
        })
    }

    /// A page of the stored runs in the list's order (`started_ts`, then
    /// `run_id`), as [`JournalReader::runs_page`]: at most `limit + 1`
    /// entries of one listing index from the cursor.
    ///
    /// [`JournalReader::runs_page`]: crate::journal::JournalReader::runs_page
    pub fn runs_page(&self, query: &RunsQuery) -> Result<RunsPage, JournalError> {
        let page = PageSql::of(query);
        let rows = self.with("list a page of runs", |c| {
            let params: Vec<&(dyn ToSql + Sync)> = page.params();
            c.query(&page.sql, &params)
        })?;
        let mut runs = rows
            .iter()
            .map(|row| {
                Ok(ListedRun {
                    summary: summary(row)?,
                    totals: totals_at(row, 5)?,
                })
            })
            .collect::<Result<Vec<ListedRun>, String>>()
            .map_err(|d| self.corrupt(d))?;
        let next = if runs.len() > query.limit {
            runs.truncate(query.limit);
            runs.last().map(|r| RunsCursor::after(&r.summary))
        } else {
            None
        };
        Ok(RunsPage { runs, next })
    }
}

impl Drop for PgReader {
    fn drop(&mut self) {
        let client = self
            .client
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(client) = client {
            close_off_thread(client);
        }
    }
}

/// A parameter of a page query.
enum Param {
    Text(String),
    Int(i64),
}

/// A page's SQL and its parameters.
struct PageSql {
    sql: String,
    params: Vec<Param>,
}

impl PageSql {
    fn of(query: &RunsQuery) -> PageSql {
        let mut clauses: Vec<String> = Vec::new();
        let mut params: Vec<Param> = Vec::new();
        let next = |params: &mut Vec<Param>, p: Param| {
            params.push(p);
            format!("${}", params.len())
        };
        if let Some(status) = query.status {
            let n = next(&mut params, Param::Text(status.as_str().to_owned()));
            clauses.push(format!("r.status = {n}"));
        }
        if let Some(run) = &query.conversation {
            let n = next(&mut params, Param::Text(run.clone()));
            clauses.push(format!(
                "r.conversation = (SELECT c.conversation FROM runs c WHERE c.run_id = {n})"
            ));
        }
        if let Some(since) = query.since_ts {
            let n = next(&mut params, Param::Int(big(since)));
            clauses.push(format!("r.started_ts >= {n}"));
        }
        if let Some(after) = &query.after {
            let ts = next(&mut params, Param::Int(big(after.started_ts)));
            let id = next(&mut params, Param::Text(after.run_id.clone()));
            clauses.push(format!("(r.started_ts, r.run_id) > ({ts}, {id})"));
        }
        let filter = if clauses.is_empty() {
            String::new()
        } else {
            format!("WHERE {} ", clauses.join(" AND "))
        };
        let limit = next(
            &mut params,
            Param::Int(big(u64::try_from(query.limit)
                .unwrap_or(u64::MAX)
                .saturating_add(1))),
        );
        let sql = format!(
            "SELECT r.run_id, r.last_seq, r.status, r.started_ts, r.updated_ts, \
             r.turns, r.input_tokens, r.output_tokens FROM runs r {filter}\
             ORDER BY r.started_ts, r.run_id LIMIT {limit}"
        );
        PageSql { sql, params }
    }

    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        self.params
            .iter()
            .map(|p| match p {
                Param::Text(t) => t as &(dyn ToSql + Sync),
                Param::Int(i) => i as &(dyn ToSql + Sync),
            })
            .collect()
    }
}

/// `v` as a BIGINT (saturating: stored values are at most `i64::MAX`).
fn big(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn unsigned(row: &Row, col: usize, name: &str) -> Result<u64, String> {
    let v: i64 = row.try_get(col).map_err(|e| e.to_string())?;
    u64::try_from(v).map_err(|_| format!("runs.{name} is {v}"))
}

/// `run_id, last_seq, status, started_ts, updated_ts` at columns 0 to 4.
fn summary(row: &Row) -> Result<RunSummary, String> {
    let run_id: String = row.try_get(0).map_err(|e| e.to_string())?;
    let status: String = row.try_get(2).map_err(|e| e.to_string())?;
    Ok(RunSummary {
        run_id: RunId::parse(&run_id).map_err(|e| format!("runs.run_id is not a run id: {e}"))?,
        last_seq: unsigned(row, 1, "last_seq")?,
        status: RunStatus::parse(&status).ok_or_else(|| {
            "runs.status is not one of running, completed, failed, cancelled".to_owned()
        })?,
        started_ts: unsigned(row, 3, "started_ts")?,
        updated_ts: unsigned(row, 4, "updated_ts")?,
    })
}

/// Turns, input and output tokens at columns `at` to `at + 2`.
fn totals_at(row: &Row, at: usize) -> Result<RunTotals, String> {
    Ok(RunTotals {
        turns: unsigned(row, at, "turns")?,
        input_tokens: unsigned(row, at + 1, "input_tokens")?,
        output_tokens: unsigned(row, at + 2, "output_tokens")?,
    })
}

/// The journal as a run's durable history, as [`JournalReader`]'s.
///
/// [`JournalReader`]: crate::journal::JournalReader
impl RunHistory for PgReader {
    fn name(&self) -> &str {
        "postgres"
    }

    fn stored(&self, run_id: &RunId) -> Result<Option<StoredRun>, RunHistoryError> {
        let summary = self
            .run_status(run_id.as_str())
            .map_err(|e| RunHistoryError::read("postgres", e))?;
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
            .map_err(|e| RunHistoryError::read("postgres", e))?;
        decode_page("postgres", run_id, after, lines)
    }
}
