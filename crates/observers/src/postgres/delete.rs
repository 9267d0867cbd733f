//! Deletion on PostgreSQL: [`PgJournal::delete_runs`] and the tombstones
//! it leaves ([`PgReader::tombstones`]), with the SQLite journal's
//! semantics (the rules and the planning are [`crate::deletion`]'s).
//!
//! One transaction takes `runs` in `SHARE ROW EXCLUSIVE` mode (every
//! host's writer waits: no run starts, continues a covered run or gets an
//! event meanwhile, while readers go on), reads every run's [`RunNode`],
//! asks [`deletion::plan`] which runs the request covers (or which rule it
//! breaks), removes their `events`, `runs` and `owners` rows and records a
//! `tombstones` row for each: all or nothing. After the commit a plain
//! `VACUUM` of those tables makes the dead rows' space reusable without
//! blocking the writers. The deleted lines are gone from every read at
//! once; their bytes may stay in freed heap space until it is reused, in
//! WAL segments until they are recycled, and in backups and replicas:
//! `VACUUM FULL events` (which blocks every writer while it rewrites the
//! table) and the operator's WAL and backup retention remove them.

use super::reader::PgReader;
use super::{PgJournal, pg_error};
use crate::RunStatus;
use crate::deletion::{self, DeleteError, DeletionRequest, RunLinks, RunNode, Tombstone, Who};
use crate::journal::JournalError;
use keel_message::RunId;
use postgres::{Client, Row};

/// Every stored run with what planning needs: its row and its
/// `run.started` line (seq 1) for the links.
const NODES: &str = "SELECT r.run_id, r.status, r.conversation, r.updated_ts, r.last_seq, e.line \
     FROM runs r LEFT JOIN events e ON e.run_id = r.run_id AND e.seq = 1";

impl PgJournal {
    /// Deletes the runs `request` covers, in one transaction, and returns
    /// their tombstones (in run id order). Refused, with nothing deleted,
    /// when a covered run is running ([`DeleteError::Live`]), when a run
    /// outside the request continues or forks from a covered one
    /// ([`DeleteError::Dependents`]), or when the named run is not stored
    /// ([`DeleteError::NotFound`]); a prune that covers nothing is `Ok`
    /// and empty. If the `VACUUM` after the commit fails, the runs are
    /// deleted and the error is [`DeleteError::Reclaim`] with their
    /// tombstones. Blocking.
    pub fn delete_runs(&self, request: &DeletionRequest) -> Result<Vec<Tombstone>, DeleteError> {
        let deleted_ts = deletion::now_ms();
        let url = self.url.clone();
        let outcome = self.with_service(|client| {
            let tombstones = match delete_in(client, self, request, deleted_ts) {
                Ok(t) => t,
                Err(e) => return Ok(Err(e)),
            };
            if tombstones.is_empty() {
                return Ok(Ok((tombstones, Ok(()))));
            }
            let reclaimed = client
                .batch_execute("VACUUM events, runs, owners")
                .map_err(|e| url.scrub(&e.to_string()));
            Ok(Ok((tombstones, reclaimed)))
        })?;
        let (tombstones, reclaimed) = outcome?;
        match reclaimed {
            Ok(()) => Ok(tombstones),
            Err(reason) => Err(DeleteError::Reclaim {
                deleted: tombstones,
                reason: format!("VACUUM: {reason}"),
            }),
        }
    }
}

impl PgReader {
    /// Every tombstone, in run id order.
    pub fn tombstones(&self) -> Result<Vec<Tombstone>, JournalError> {
        let rows = self.query(
            "read the tombstones",
            "SELECT run_id, deleted_ts, who, events FROM tombstones ORDER BY run_id",
        )?;
        rows.iter()
            .map(|row| tombstone(row).map_err(|d| self.corrupt(d)))
            .collect()
    }
}

/// The transaction: lock, read the nodes, plan, delete, record tombstones.
fn delete_in(
    client: &mut Client,
    journal: &PgJournal,
    request: &DeletionRequest,
    deleted_ts: u64,
) -> Result<Vec<Tombstone>, DeleteError> {
    let err = |op| pg_error(&journal.url, op);
    let mut tx = client.transaction().map_err(err("begin the deletion"))?;
    tx.batch_execute("LOCK TABLE runs IN SHARE ROW EXCLUSIVE MODE")
        .map_err(err("lock the runs for the deletion"))?;
    let rows = tx
        .query(NODES, &[])
        .map_err(err("read the runs to delete"))?;
    let nodes = rows
        .iter()
        .map(node)
        .collect::<Result<Vec<RunNode>, String>>()
        .map_err(|detail| JournalError::PostgresSchema {
            database: journal.url.to_string(),
            detail,
        })?;
    let planned = deletion::plan(request, &nodes)?;
    let tombstones = deletion::tombstones(request, planned, deleted_ts);
    if tombstones.is_empty() {
        return Ok(tombstones);
    }
    let ids: Vec<&str> = tombstones.iter().map(|t| t.run_id().as_str()).collect();
    for table in ["events", "runs", "owners"] {
        tx.execute(
            &format!("DELETE FROM {table} WHERE run_id = ANY($1)"),
            &[&ids],
        )
        .map_err(err("delete the runs"))?;
    }
    let when: Vec<i64> = tombstones.iter().map(|t| big(t.deleted_ts())).collect();
    let who: Vec<&str> = tombstones.iter().map(|t| t.who().as_str()).collect();
    let events: Vec<i64> = tombstones.iter().map(|t| big(t.events())).collect();
    tx.execute(
        "INSERT INTO tombstones (run_id, deleted_ts, who, events) \
         SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::bigint[]) \
         ON CONFLICT (run_id) DO UPDATE SET deleted_ts = excluded.deleted_ts, \
         who = excluded.who, events = excluded.events",
        &[&ids, &when, &who, &events],
    )
    .map_err(err("record the tombstones"))?;
    // Dropping `tx` on an error above rolls it back: nothing deleted.
    tx.commit().map_err(err("commit the deletion"))?;
    Ok(tombstones)
}

fn node(row: &Row) -> Result<RunNode, String> {
    let text = |col: usize| row.try_get::<_, String>(col).map_err(|e| e.to_string());
    let id = |col: usize| RunId::parse(&text(col)?).map_err(|e| format!("runs column {col}: {e}"));
    let line: Option<String> = row.try_get(5).map_err(|e| e.to_string())?;
    Ok(RunNode {
        run_id: id(0)?,
        status: RunStatus::parse(&text(1)?).ok_or("runs.status is not a status")?,
        conversation: id(2)?,
        links: line
            .as_deref()
            .map(RunLinks::from_started_line)
            .unwrap_or_default(),
        last_event_us: count(row, 3)?,
        events: count(row, 4)?,
    })
}

fn count(row: &Row, col: usize) -> Result<u64, String> {
    let v: i64 = row.try_get(col).map_err(|e| e.to_string())?;
    u64::try_from(v).map_err(|_| format!("column {col} is {v}"))
}

fn tombstone(row: &Row) -> Result<Tombstone, String> {
    let run_id: String = row.try_get(0).map_err(|e| e.to_string())?;
    let who: String = row.try_get(2).map_err(|e| e.to_string())?;
    Ok(Tombstone::new(
        RunId::parse(&run_id).map_err(|e| format!("tombstones.run_id: {e}"))?,
        count(row, 1)?,
        Who::parse(&who).map_err(|e| format!("tombstones.who: {e}"))?,
        count(row, 3)?,
    ))
}

fn big(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}
