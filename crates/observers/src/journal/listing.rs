//! A page of the run list: [`JournalReader::runs_page`], the one owner of
//! the list's query. From schema version 4 a page reads at most
//! `limit + 1` rows of an index (`runs_by_start`, `runs_by_status`,
//! `runs_by_conversation`), starting at its cursor, whatever the number of
//! stored runs; a store opened at an older version is answered by the same
//! query without the indexes (and its conversations from the stored
//! `run.started` lines).

use super::reader::{JournalReader, RunSummary, RunTotals, non_negative, summary};
use super::schema::{self, CONVERSATION_ROOTS};
use super::{JournalError, RunStatus};
use rusqlite::types::Value;

/// Where a page starts: after the run with this start time and id, in the
/// list's order (`started_ts`, then `run_id`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunsCursor {
    /// `started_ts` of the last run of the previous page.
    pub started_ts: u64,
    /// Its id.
    pub run_id: String,
}

impl RunsCursor {
    /// The cursor just after `run`.
    pub fn after(run: &RunSummary) -> RunsCursor {
        RunsCursor {
            started_ts: run.started_ts,
            run_id: run.run_id.to_string(),
        }
    }
}

/// Which runs a page lists, and how many. Every filter is optional; they
/// combine (a run is listed when it passes all of them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunsQuery {
    /// Most runs on the page (a `limit` of 0 reads nothing).
    pub limit: usize,
    /// Only runs after this cursor.
    pub after: Option<RunsCursor>,
    /// Only runs of this status.
    pub status: Option<RunStatus>,
    /// Only runs of the conversation of this run: the runs whose
    /// `continues` chain has the same root as this run's (chat runs
    /// continue one another, so a chat conversation is one chain). A run
    /// not stored names no conversation: the page is empty.
    pub conversation: Option<String>,
    /// Only runs whose first event's `ts` is at or after this (unix
    /// microseconds, the unit of [`RunSummary::started_ts`]).
    pub since_ts: Option<u64>,
}

impl RunsQuery {
    /// The first page of every run, up to `limit`.
    pub fn first(limit: usize) -> RunsQuery {
        RunsQuery {
            limit,
            after: None,
            status: None,
            conversation: None,
            since_ts: None,
        }
    }
}

/// One run of a page: its summary and its totals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedRun {
    /// As [`JournalReader::run_status`] reads it.
    pub summary: RunSummary,
    /// As [`JournalReader::totals`] reads it.
    pub totals: RunTotals,
}

/// A page of [`JournalReader::runs_page`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunsPage {
    /// The runs, in the list's order.
    pub runs: Vec<ListedRun>,
    /// The cursor of the next page, when a run passing the filters follows
    /// this page's last (`None` on the last page).
    pub next: Option<RunsCursor>,
}

/// The columns of a listed run: its summary, then its totals (kept in the
/// row from version 3, summed from its events before).
const COLUMNS_KEPT: &str = "r.run_id, r.last_seq, r.status, r.started_ts, r.updated_ts, \
     r.turns, r.input_tokens, r.output_tokens";
const COLUMNS_SUMMED: &str = "r.run_id, r.last_seq, r.status, r.started_ts, r.updated_ts, \
     (SELECT count(*) FROM events e WHERE e.run_id = r.run_id AND e.kind = 'turn.started'), \
     (SELECT COALESCE(SUM(json_extract(e.line, '$.payload.usage.input_tokens')), 0) \
      FROM events e WHERE e.run_id = r.run_id AND e.kind = 'model.completed'), \
     (SELECT COALESCE(SUM(json_extract(e.line, '$.payload.usage.output_tokens')), 0) \
      FROM events e WHERE e.run_id = r.run_id AND e.kind = 'model.completed')";

/// The conversation root of run `?`: the kept column from version 4, the
/// `continues` chain of the stored `run.started` lines before.
const ROOT_KEPT: &str = "(SELECT c.conversation FROM runs c WHERE c.run_id = ?)";
const ROOT_OF_RUN: &str = "(SELECT COALESCE((SELECT min(root) FROM chain \
     WHERE chain.run_id = c.run_id), c.run_id) FROM runs c WHERE c.run_id = ?)";
const ROOT_OF_ROW: &str = "COALESCE((SELECT min(root) FROM chain WHERE chain.run_id = r.run_id), \
     r.run_id)";

impl JournalReader {
    /// A page of the stored runs in the list's order (`started_ts`, then
    /// `run_id`): the first `query.limit` runs after `query.after` that
    /// pass its filters, and the cursor of the next page when one follows.
    ///
    /// From schema version 4 this reads at most `limit + 1` index entries
    /// and rows past the cursor (one index per filter; the `since` bound
    /// and the cursor are one range of it), so its cost does not grow with
    /// the store; a conversation filter also reads the named run's row.
    /// One snapshot: a run stored while a client pages lands after the
    /// cursor or before it, never twice (a run's `started_ts` and id never
    /// change).
    pub fn runs_page(&self, query: &RunsQuery) -> Result<RunsPage, JournalError> {
        let (sql, params) = self.page_sql(query);
        let limit = query.limit;
        let mut runs = self.with("list a page of runs", |conn| {
            let mut stmt = conn.prepare_cached(&sql)?;
            let rows = stmt.query_map(rusqlite::params_from_iter(params), listed)?;
            rows.collect::<rusqlite::Result<Vec<ListedRun>>>()
        })?;
        let next = if runs.len() > limit {
            runs.truncate(limit);
            runs.last().map(|r| RunsCursor::after(&r.summary))
        } else {
            None
        };
        Ok(RunsPage { runs, next })
    }

    /// The page's SQL and its parameters (one text per combination of
    /// filters, so each is prepared once and cached).
    fn page_sql(&self, query: &RunsQuery) -> (String, Vec<Value>) {
        let kept = self.version >= schema::LISTING_VERSION;
        let mut clauses: Vec<String> = Vec::new();
        let mut params: Vec<Value> = Vec::new();
        if let Some(status) = query.status {
            clauses.push("r.status = ?".to_owned());
            params.push(Value::Text(status.as_str().to_owned()));
        }
        if let Some(run) = &query.conversation {
            let (row, root) = if kept {
                ("r.conversation", ROOT_KEPT)
            } else {
                (ROOT_OF_ROW, ROOT_OF_RUN)
            };
            clauses.push(format!("{row} = {root}"));
            params.push(Value::Text(run.clone()));
        }
        if let Some(since) = query.since_ts {
            clauses.push("r.started_ts >= ?".to_owned());
            params.push(Value::Integer(sql_int(since)));
        }
        if let Some(after) = &query.after {
            // A row value: SQLite serves it as one range of the index.
            clauses.push("(r.started_ts, r.run_id) > (?, ?)".to_owned());
            params.push(Value::Integer(sql_int(after.started_ts)));
            params.push(Value::Text(after.run_id.clone()));
        }
        let with = if query.conversation.is_some() && !kept {
            format!("WITH RECURSIVE {CONVERSATION_ROOTS} ")
        } else {
            String::new()
        };
        let columns = if self.version >= schema::TOTALS_VERSION {
            COLUMNS_KEPT
        } else {
            COLUMNS_SUMMED
        };
        let filter = if clauses.is_empty() {
            String::new()
        } else {
            format!("WHERE {} ", clauses.join(" AND "))
        };
        params.push(Value::Integer(sql_int(
            u64::try_from(query.limit)
                .unwrap_or(u64::MAX)
                .saturating_add(1),
        )));
        let sql = format!(
            "{with}SELECT {columns} FROM runs r {filter}ORDER BY r.started_ts, r.run_id LIMIT ?"
        );
        (sql, params)
    }
}

/// `v` as an SQLite integer (saturating: stored values are at most
/// `i64::MAX`, so a larger bound finds what `i64::MAX` finds).
fn sql_int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn listed(row: &rusqlite::Row<'_>) -> rusqlite::Result<ListedRun> {
    Ok(ListedRun {
        summary: summary(row)?,
        totals: RunTotals {
            turns: non_negative(row.get(5)?, 5, "turns")?,
            input_tokens: non_negative(row.get(6)?, 6, "input_tokens")?,
            output_tokens: non_negative(row.get(7)?, 7, "output_tokens")?,
        },
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;
    use crate::journal::{JournalConfig, SqliteJournal};

    /// SQLite's plan for `query`'s page, one line per step.
    fn plan(reader: &JournalReader, query: &RunsQuery) -> String {
        let (sql, params) = reader.page_sql(query);
        reader
            .with("explain", |conn| {
                let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))?;
                let rows = stmt.query_map(rusqlite::params_from_iter(params), |r| {
                    r.get::<_, String>(3)
                })?;
                rows.collect::<rusqlite::Result<Vec<String>>>()
            })
            .unwrap()
            .join("\n")
    }

    /// Every combination of filters, with and without a cursor, is served
    /// by one of the listing indexes in the list's order: no scan of the
    /// table and no sort of what it read (a page reads `limit + 1` index
    /// entries from its cursor, not every row).
    #[test]
    fn every_page_query_reads_an_index_in_order_from_its_cursor() {
        let dir = std::env::temp_dir().join(format!("keel-listing-plan-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("keel.db");
        let journal = SqliteJournal::open(&path, JournalConfig::default()).unwrap();
        let reader = journal.reader().unwrap();
        let after = RunsCursor {
            started_ts: 5,
            run_id: "run_a".to_owned(),
        };
        for bits in 0..16u8 {
            let query = RunsQuery {
                limit: 50,
                after: (bits & 1 != 0).then(|| after.clone()),
                status: (bits & 2 != 0).then_some(RunStatus::Completed),
                conversation: (bits & 4 != 0).then(|| "run_a".to_owned()),
                since_ts: (bits & 8 != 0).then_some(3),
            };
            let plan = plan(&reader, &query);
            assert!(!plan.contains("TEMP B-TREE"), "{query:?}: sorts\n{plan}");
            let index = match (query.status, &query.conversation) {
                (_, Some(_)) => "runs_by_conversation",
                (Some(_), None) => "runs_by_status",
                (None, None) => "runs_by_start",
            };
            let main = plan
                .lines()
                .find(|l| l.starts_with("SEARCH r ") || l.starts_with("SCAN r "))
                .unwrap_or_default();
            assert!(
                main.starts_with("SEARCH r USING INDEX") || main.starts_with("SCAN r USING INDEX"),
                "{query:?}: {plan}"
            );
            assert!(main.contains(index), "{query:?}: {plan}");
            if query.after.is_some() || query.since_ts.is_some() || index != "runs_by_start" {
                assert!(main.starts_with("SEARCH"), "{query:?}: a range\n{plan}");
            }
        }
        drop(reader);
        journal.close().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
