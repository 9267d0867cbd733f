//! Deletion on the SQLite journal: [`SqliteJournal::delete_runs`] and the
//! tombstones it leaves ([`JournalReader::tombstones`]).
//!
//! One `BEGIN IMMEDIATE` transaction reads every run's [`RunNode`], asks
//! [`deletion::plan`](crate::deletion::plan) which runs the request
//! covers (or which rule it breaks), removes their `events`, `runs` and
//! `owners` rows and records a `tombstones` row for each: all or nothing.
//! The connection deletes with `secure_delete` on (freed cells and pages
//! are zeroed), then `VACUUM` rebuilds the file without the freed pages
//! and `wal_checkpoint(TRUNCATE)` copies it back and empties the WAL, so
//! no byte of a deleted run's lines is left in the database, its `-wal`
//! or its `-shm` (the shared-memory index holds no row content).

use super::reader::JournalReader;
use super::schema::TOMBSTONES_VERSION;
use super::{JournalError, RunStatus, SqliteJournal};
use crate::deletion::{self, DeleteError, DeletionRequest, RunLinks, RunNode, Tombstone, Who};
use keel_message::RunId;
use rusqlite::{Connection, Transaction, TransactionBehavior, params};
use std::path::Path;
use std::time::{Duration, Instant};

/// Every stored run with what planning needs: its row, and its
/// `run.started` line (seq 1) for the links.
const NODES: &str = "SELECT r.run_id, r.status, COALESCE(r.conversation, r.run_id), \
     r.updated_ts, r.last_seq, e.line \
     FROM runs r LEFT JOIN events e ON e.run_id = r.run_id AND e.seq = 1";

impl SqliteJournal {
    /// Deletes the runs `request` covers, in one transaction, and returns
    /// their tombstones (in run id order). Refused, with nothing deleted,
    /// when a covered run is running ([`DeleteError::Live`]), when a run
    /// outside the request continues or forks from a covered one
    /// ([`DeleteError::Dependents`]), or when the named run is not stored
    /// ([`DeleteError::NotFound`]); a prune that covers nothing is `Ok`
    /// and empty. After the commit, the freed pages are reclaimed (see the
    /// module docs); if that fails the runs are deleted and the error is
    /// [`DeleteError::Reclaim`], with their tombstones.
    ///
    /// Blocking (SQLite, up to `busy_timeout` under contention, and a
    /// `VACUUM` of the whole file): from async code call it on a blocking
    /// thread.
    pub fn delete_runs(&self, request: &DeletionRequest) -> Result<Vec<Tombstone>, DeleteError> {
        let mut conn = super::recover::connection(&self.path, self.busy_timeout)?;
        let sql = |op| JournalError::sql(&self.path, op);
        conn.pragma_update(None, "secure_delete", true)
            .map_err(sql("set secure_delete"))?;
        let deleted_ts = deletion::now_ms();
        let tombstones = delete_in(&mut conn, &self.path, request, deleted_ts)?;
        if tombstones.is_empty() {
            return Ok(tombstones);
        }
        match reclaim(&conn, self.busy_timeout) {
            Ok(()) => Ok(tombstones),
            Err(reason) => Err(DeleteError::Reclaim {
                deleted: tombstones,
                reason,
            }),
        }
    }
}

impl JournalReader {
    /// Every tombstone, in run id order (none before schema version 5).
    pub fn tombstones(&self) -> Result<Vec<Tombstone>, JournalError> {
        if self.version < TOMBSTONES_VERSION && !self.has_tombstones_table()? {
            return Ok(Vec::new());
        }
        self.with("read the tombstones", |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT run_id, deleted_ts, who, events FROM tombstones ORDER BY run_id",
            )?;
            let rows = stmt.query_map([], tombstone)?;
            rows.collect()
        })
    }

    /// Whether a writer migrated the file to version 5 since this reader
    /// opened it.
    fn has_tombstones_table(&self) -> Result<bool, JournalError> {
        self.with("read the schema catalog", |conn| {
            conn.query_row(
                "SELECT EXISTS (SELECT 1 FROM sqlite_master \
                 WHERE type = 'table' AND name = 'tombstones')",
                [],
                |r| r.get(0),
            )
        })
    }
}

/// The transaction: read the nodes, plan, delete, record tombstones.
fn delete_in(
    conn: &mut Connection,
    path: &Path,
    request: &DeletionRequest,
    deleted_ts: u64,
) -> Result<Vec<Tombstone>, DeleteError> {
    let sql = |op| JournalError::sql(path, op);
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(sql("begin the deletion"))?;
    let nodes = nodes(&tx, path)?;
    let planned = deletion::plan(request, &nodes)?;
    let tombstones = deletion::tombstones(request, planned, deleted_ts);
    for t in &tombstones {
        remove(&tx, t).map_err(sql("delete a run"))?;
    }
    // Dropping `tx` on an error above rolls it back: nothing deleted.
    tx.commit().map_err(sql("commit the deletion"))?;
    Ok(tombstones)
}

/// Removes one run's rows and records its tombstone.
fn remove(tx: &Transaction<'_>, t: &Tombstone) -> rusqlite::Result<()> {
    let run_id = t.run_id().as_str();
    for table in ["events", "runs", "owners"] {
        tx.prepare_cached(&format!("DELETE FROM {table} WHERE run_id = ?1"))?
            .execute([run_id])?;
    }
    tx.prepare_cached(
        "INSERT OR REPLACE INTO tombstones (run_id, deleted_ts, who, events) \
         VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(params![
        run_id,
        sql_int(t.deleted_ts()),
        t.who().as_str(),
        sql_int(t.events())
    ])?;
    Ok(())
}

/// Every stored run as a [`RunNode`].
fn nodes(tx: &Transaction<'_>, path: &Path) -> Result<Vec<RunNode>, JournalError> {
    let read = || -> rusqlite::Result<Vec<RunNode>> {
        let mut stmt = tx.prepare(NODES)?;
        let rows = stmt.query_map([], node)?;
        rows.collect()
    };
    read().map_err(|source| match source {
        rusqlite::Error::FromSqlConversionFailure(_, _, e) => JournalError::Corrupt {
            path: path.to_path_buf(),
            detail: e.to_string(),
        },
        source => JournalError::sql(path, "read the runs to delete")(source),
    })
}

fn node(row: &rusqlite::Row<'_>) -> rusqlite::Result<RunNode> {
    let id = |col: usize| -> rusqlite::Result<RunId> {
        let text: String = row.get(col)?;
        RunId::parse(&text).map_err(|e| bad(col, format!("runs column {col}: {e}")))
    };
    let status: String = row.get(1)?;
    let line: Option<String> = row.get(5)?;
    Ok(RunNode {
        run_id: id(0)?,
        status: RunStatus::parse(&status)
            .ok_or_else(|| bad(1, "runs.status is not a status".to_owned()))?,
        conversation: id(2)?,
        links: line
            .as_deref()
            .map(RunLinks::from_started_line)
            .unwrap_or_default(),
        last_event_us: count(row, 3)?,
        events: count(row, 4)?,
    })
}

/// A non-negative integer column.
fn count(row: &rusqlite::Row<'_>, col: usize) -> rusqlite::Result<u64> {
    let v: i64 = row.get(col)?;
    u64::try_from(v).map_err(|_| bad(col, format!("column {col} is {v}")))
}

/// A stored value out of range (read back as [`JournalError::Corrupt`]).
fn bad(col: usize, detail: String) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(
        col,
        rusqlite::types::Type::Text,
        Box::<dyn std::error::Error + Send + Sync>::from(detail),
    )
}

/// `VACUUM` (the file without the freed pages), then
/// `wal_checkpoint(TRUNCATE)` until it completes or `busy_timeout`
/// passes (a reader in the middle of a read holds the WAL).
fn reclaim(conn: &Connection, busy_timeout: Duration) -> Result<(), String> {
    conn.execute_batch("VACUUM")
        .map_err(|e| format!("VACUUM: {e}"))?;
    let deadline = Instant::now() + busy_timeout;
    loop {
        let busy: i64 = conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))
            .map_err(|e| format!("wal_checkpoint(TRUNCATE): {e}"))?;
        if busy == 0 {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(
                "readers kept the WAL busy past busy_timeout: the deleted runs' \
                        pages stay in the WAL until its next checkpoint"
                    .to_owned(),
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn tombstone(row: &rusqlite::Row<'_>) -> rusqlite::Result<Tombstone> {
    let run_id: String = row.get(0)?;
    let who: String = row.get(2)?;
    Ok(Tombstone::new(
        RunId::parse(&run_id).map_err(|e| bad(0, format!("tombstones.run_id: {e}")))?,
        count(row, 1)?,
        Who::parse(&who).map_err(|e| bad(2, format!("tombstones.who: {e}")))?,
        count(row, 3)?,
    ))
}

fn sql_int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}
