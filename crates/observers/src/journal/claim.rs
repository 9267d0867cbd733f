//! Run-id claims: [`SqliteJournal::claim_run`] makes a run id this host's
//! in the shared store before a daemon answers for it, so that of any
//! number of daemons on one database exactly one starts a run under an
//! id (rule `run.unique_id`).
//!
//! A claim is an `owners` row (the table run ownership already uses) for
//! a run that has no `runs` row yet. It is made by compare-and-set in one
//! `BEGIN IMMEDIATE` transaction: refused when the run is journaled or a
//! live host holds the id; taken over from a host that is gone (its lock
//! file can be locked, as recovery decides). The writer's `run.started`
//! then finds the row already naming this host and keeps it; the run's
//! terminal removes it, as for any run. A claim whose run never started
//! is removed with [`SqliteJournal::release_claim`].

use super::hosts::{self, Liveness};
use super::{JournalError, SqliteJournal};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

/// What [`SqliteJournal::claim_run`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RunClaim {
    /// The id is this host's now (it was free, this host's own unused
    /// claim, or the claim of a host that is gone).
    Claimed,
    /// A run with this id is journaled.
    Journaled,
    /// Another host that is running (or whose lock file cannot be
    /// checked, or whose id is not one this build mints) holds the id.
    HeldElsewhere,
}

impl SqliteJournal {
    /// Claims `run_id` for this host, atomically across every process on
    /// this database. Blocking (SQLite, up to `busy_timeout` under
    /// contention, and a non-blocking file lock test); from async code
    /// call it on a blocking thread.
    pub fn claim_run(&self, run_id: &str) -> Result<RunClaim, JournalError> {
        self.with_claim_connection(|conn| self.claim_with(conn, run_id))
    }

    fn claim_with(&self, conn: &mut Connection, run_id: &str) -> Result<RunClaim, JournalError> {
        let sql = |op| JournalError::sql(&self.path, op);
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql("begin the run-id claim"))?;
        let journaled: bool = tx
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM runs WHERE run_id = ?1)",
                [run_id],
                |r| r.get(0),
            )
            .map_err(sql("look up the run for a claim"))?;
        if journaled {
            return Ok(RunClaim::Journaled);
        }
        let owner: Option<String> = tx
            .query_row("SELECT host FROM owners WHERE run_id = ?1", [run_id], |r| {
                r.get(0)
            })
            .optional()
            .map_err(sql("look up the run's owner for a claim"))?;
        let own = self.host.id();
        let taken = match owner.as_deref() {
            None => tx.execute(
                "INSERT INTO owners (run_id, host) VALUES (?1, ?2)",
                params![run_id, own],
            ),
            Some(host) if host == own => Ok(1),
            Some(host) if self.host_is_gone(host) => tx.execute(
                "UPDATE owners SET host = ?2 WHERE run_id = ?1 AND host = ?3",
                params![run_id, own, host],
            ),
            Some(_) => return Ok(RunClaim::HeldElsewhere),
        }
        .map_err(sql("record the run-id claim"))?;
        tx.commit().map_err(sql("commit the run-id claim"))?;
        Ok(if taken == 1 {
            RunClaim::Claimed
        } else {
            RunClaim::HeldElsewhere
        })
    }

    /// Removes this host's claim on `run_id` if its run never reached the
    /// journal (no `runs` row); `true` when a claim was removed. Call it
    /// for a claimed id whose run was refused or never began, while no
    /// other admission of the same id can run in this process.
    pub fn release_claim(&self, run_id: &str) -> Result<bool, JournalError> {
        self.with_claim_connection(|conn| {
            let removed = conn
                .execute(
                    "DELETE FROM owners WHERE run_id = ?1 AND host = ?2 \
                     AND NOT EXISTS (SELECT 1 FROM runs WHERE run_id = ?1)",
                    params![run_id, self.host.id()],
                )
                .map_err(JournalError::sql(&self.path, "release a run-id claim"))?;
            Ok(removed == 1)
        })
    }

    /// Runs `f` on the claims' connection (opened on first use, kept; one
    /// claim at a time in this process).
    fn with_claim_connection<T>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, JournalError>,
    ) -> Result<T, JournalError> {
        let mut slot = self
            .claims
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let conn = match slot.take() {
            Some(conn) => conn,
            None => {
                let conn = super::recover::connection(&self.path, self.busy_timeout)?;
                // A claim needs no fsync of its own: the run's
                // `run.started`, committed with the configured
                // `synchronous` before any 201, follows it in the WAL and
                // makes it durable too.
                conn.pragma_update(None, "synchronous", "NORMAL")
                    .map_err(JournalError::sql(&self.path, "set synchronous"))?;
                conn
            }
        };
        f(slot.insert(conn))
    }

    /// Whether the host `id` is gone (its lock file is missing or can be
    /// locked). A value that is not a host id, or a lock file that
    /// cannot be checked, counts as alive: the claim is refused.
    fn host_is_gone(&self, id: &str) -> bool {
        crate::valid_host_id(id)
            && matches!(hosts::liveness(self.host.dir(), id), Ok(Liveness::Gone(_)))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;
    use crate::journal::JournalConfig;
    use crate::observer::RequiredObserver;
    use keel_eventlog::Event;
    use std::sync::Arc;

    fn open(path: &std::path::Path) -> SqliteJournal {
        SqliteJournal::open(path, JournalConfig::default()).unwrap()
    }

    #[tokio::test]
    async fn one_host_claims_an_id_and_a_gone_host_loses_its_claim() {
        let dir = std::env::temp_dir().join(format!("keel-claim-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("keel.db");
        let (a, b) = (open(&path), open(&path));
        assert_eq!(a.claim_run("x").unwrap(), RunClaim::Claimed);
        assert_eq!(a.claim_run("x").unwrap(), RunClaim::Claimed, "its own");
        assert_eq!(b.claim_run("x").unwrap(), RunClaim::HeldElsewhere);
        // A released claim is free again; a journaled run never is.
        assert!(a.release_claim("x").unwrap());
        assert!(!a.release_claim("x").unwrap());
        assert_eq!(b.claim_run("x").unwrap(), RunClaim::Claimed);
        let line = r#"{"kind":"run.started","payload":{},"run_id":"x","seq":1,"ts":1}"#;
        b.observe(&Arc::new(Event::decode(line).unwrap()))
            .await
            .unwrap();
        assert!(!b.release_claim("x").unwrap(), "the run is journaled");
        assert_eq!(a.claim_run("x").unwrap(), RunClaim::Journaled);
        // A claim whose host is gone is taken over.
        assert_eq!(b.claim_run("y").unwrap(), RunClaim::Claimed);
        drop(b);
        assert_eq!(a.claim_run("y").unwrap(), RunClaim::Claimed);
        drop(a);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
