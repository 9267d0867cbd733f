//! Run-id claims and recovery of abandoned runs on PostgreSQL: the
//! SQLite journal's rules (`claim.rs`, `recover.rs`), with hosts judged by
//! their advisory locks and every compare-and-set a single statement.

use super::host::is_gone;
use super::{PgJournal, pg_error};
use crate::journal::recover::{block_on, close_run, open_terminals, restore_lines};
use crate::journal::{
    JournalError, RecoveredRun, RecoveryReport, RunClaim, SkipReason, SkippedRun,
};
use crate::observer::ObserverError;
use keel_eventlog::{Event, recovery};
use keel_message::RunId;
use postgres::{Client, IsolationLevel};
use std::collections::HashMap;
use std::sync::Arc;

/// A running run as the scan found it.
struct Running {
    run_id: String,
    last_seq: u64,
    owner: Option<String>,
}

/// A running run whose id is a run id, and its parent (a sub-run's).
struct Scanned {
    running: Running,
    id: RunId,
    parent: Option<RunId>,
}

impl PgJournal {
    /// Claims `run_id` for this host, atomically across every host on this
    /// database: refused when the run is journaled or a live host holds the
    /// id; taken over from a host that is gone. Blocking.
    pub fn claim_run(&self, run_id: &str) -> Result<RunClaim, JournalError> {
        let own = self.host.id().to_owned();
        let url = self.url.clone();
        self.with_service(|client| {
            let err = |op| pg_error(&url, op);
            let journaled: bool = client
                .query_one(
                    "SELECT EXISTS (SELECT 1 FROM runs WHERE run_id = $1)",
                    &[&run_id],
                )
                .map_err(err("look up the run for a claim"))?
                .get(0);
            if journaled {
                return Ok(RunClaim::Journaled);
            }
            let owner: Option<String> = client
                .query_opt("SELECT host FROM owners WHERE run_id = $1", &[&run_id])
                .and_then(|r| r.map(|r| r.try_get(0)).transpose())
                .map_err(err("look up the run's owner for a claim"))?;
            let taken = match owner.as_deref() {
                None => client.execute(
                    "INSERT INTO owners (run_id, host) SELECT $1, $2 \
                     WHERE NOT EXISTS (SELECT 1 FROM runs WHERE run_id = $1) \
                     ON CONFLICT (run_id) DO NOTHING",
                    &[&run_id, &own],
                ),
                Some(host) if host == own => Ok(1),
                Some(host)
                    if crate::valid_host_id(host)
                        && is_gone(client, host).map_err(err("check a host's lock"))? =>
                {
                    client.execute(
                        "UPDATE owners SET host = $2 WHERE run_id = $1 AND host = $3 \
                         AND NOT EXISTS (SELECT 1 FROM runs WHERE run_id = $1)",
                        &[&run_id, &own, &host],
                    )
                }
                Some(_) => return Ok(RunClaim::HeldElsewhere),
            }
            .map_err(err("record the run-id claim"))?;
            Ok(if taken == 1 {
                RunClaim::Claimed
            } else {
                RunClaim::HeldElsewhere
            })
        })
    }

    /// Removes this host's claim on `run_id` if its run never reached the
    /// journal; `true` when a claim was removed. Blocking.
    pub fn release_claim(&self, run_id: &str) -> Result<bool, JournalError> {
        let own = self.host.id().to_owned();
        let url = self.url.clone();
        self.with_service(|client| {
            let removed = client
                .execute(
                    "DELETE FROM owners WHERE run_id = $1 AND host = $2 \
                     AND NOT EXISTS (SELECT 1 FROM runs WHERE run_id = $1)",
                    &[&run_id, &own],
                )
                .map_err(pg_error(&url, "release a run-id claim"))?;
            Ok(removed == 1)
        })
    }

    /// Recovers every abandoned run of this database: running, with no
    /// owner or an owner whose advisory lock can be taken. As
    /// [`SqliteJournal::recover_abandoned`]: children before parents,
    /// restored from the stored lines (a run that fails is
    /// [`SkipReason::Corrupt`] and untouched), claimed by compare-and-set
    /// (exactly one of any number of recoverers closes a run), then
    /// [`recovery::terminals`] journaled through this journal's writer
    /// with no gap or reuse. Idempotent. Blocking. `swept_host_files` is
    /// always 0 (there are no host files).
    ///
    /// [`SqliteJournal::recover_abandoned`]: crate::journal::SqliteJournal::recover_abandoned
    pub fn recover_abandoned(&self) -> Result<RecoveryReport, JournalError> {
        let own = self.host.id().to_owned();
        let mut report = RecoveryReport::default();
        let runs = self.with_service(|client| running_runs(client, self))?;
        let mut gone: HashMap<String, bool> = HashMap::new();
        for run in runs {
            let verdict = match self.owner_state(&run, &own, &mut gone)? {
                Ok(()) => self.recover_run(&run)?,
                Err(reason) => Err(reason),
            };
            match verdict {
                Ok(recovered) => report.recovered.push(recovered),
                Err(reason) => report.skipped.push(SkippedRun {
                    run_id: run.run_id,
                    reason,
                }),
            }
        }
        Ok(report)
    }

    /// `Ok(Ok)` when `run`'s owner is gone (or none is recorded).
    fn owner_state(
        &self,
        run: &Running,
        own: &str,
        gone: &mut HashMap<String, bool>,
    ) -> Result<Result<(), SkipReason>, JournalError> {
        let Some(owner) = &run.owner else {
            return Ok(Ok(()));
        };
        if owner == own {
            return Ok(Err(SkipReason::OwnedByThisHost));
        }
        if !crate::valid_host_id(owner) {
            return Ok(Err(SkipReason::InvalidOwner));
        }
        let is_gone = match gone.get(owner) {
            Some(known) => *known,
            None => {
                let url = self.url.clone();
                let known = self.with_service(|c| {
                    is_gone(c, owner).map_err(pg_error(&url, "check a host's lock"))
                })?;
                gone.insert(owner.clone(), known);
                known
            }
        };
        Ok(if is_gone {
            Ok(())
        } else {
            Err(SkipReason::OwnedByLiveHost {
                host: owner.clone(),
            })
        })
    }

    /// Restores, claims and closes one abandoned run.
    fn recover_run(&self, run: &Running) -> Result<Result<RecoveredRun, SkipReason>, JournalError> {
        let Some((run, lines)) = self.with_service(|c| stored_run(c, self, run))? else {
            return Ok(Err(SkipReason::ClaimedElsewhere));
        };
        let log = match restore_lines(&run.run_id, run.last_seq, &lines) {
            Ok(log) => log,
            Err(detail) => return Ok(Err(SkipReason::Corrupt { detail })),
        };
        let terminals = match open_terminals(&log) {
            Ok(terminals) => terminals,
            Err(reason) => return Ok(Err(reason)),
        };
        if !self.with_service(|c| claim(c, self, &run))? {
            return Ok(Err(SkipReason::ClaimedElsewhere));
        }
        Ok(close_run(&log, &terminals, run.owner.clone(), |events| {
            block_on(self.journal_all(events))
        }))
    }

    async fn journal_all(&self, events: &[Arc<Event>]) -> Result<(), (usize, ObserverError)> {
        self.append_batch(events)
            .await
            .map_err(|e| (e.acknowledged, e.source))
    }
}

/// The running runs, children before parents, otherwise by start time; a
/// row whose id is not a run id comes last.
fn running_runs(client: &mut Client, journal: &PgJournal) -> Result<Vec<Running>, JournalError> {
    let rows = client
        .query(
            "SELECT r.run_id, r.last_seq, o.host, e.line FROM runs r \
             LEFT JOIN owners o ON o.run_id = r.run_id \
             LEFT JOIN events e ON e.run_id = r.run_id AND e.seq = 1 \
             WHERE r.status = 'running' ORDER BY r.started_ts, r.run_id",
            &[],
        )
        .map_err(pg_error(&journal.url, "list running runs"))?;
    let (mut runs, mut unnamed) = (Vec::new(), Vec::new());
    for row in rows {
        let col = |e: postgres::Error| JournalError::PostgresSchema {
            database: journal.url.to_string(),
            detail: format!("a running run's row: {e}"),
        };
        let run_id: String = row.try_get(0).map_err(col)?;
        let last_seq = unsigned_seq(journal, &run_id, row.try_get(1).map_err(col)?)?;
        let owner: Option<String> = row.try_get(2).map_err(col)?;
        let first_line: Option<String> = row.try_get(3).map_err(col)?;
        let parent = first_line.as_deref().and_then(recovery::parent_of);
        let id = RunId::parse(&run_id).ok();
        let running = Running {
            run_id,
            last_seq,
            owner,
        };
        match id {
            Some(id) => runs.push(Scanned {
                running,
                id,
                parent,
            }),
            None => unnamed.push(running),
        }
    }
    let ordered = recovery::children_first(runs, |r| &r.id, |r| r.parent.as_ref());
    let mut out: Vec<Running> = ordered.into_iter().map(|r| r.running).collect();
    out.extend(unnamed);
    Ok(out)
}

fn unsigned_seq(journal: &PgJournal, run_id: &str, v: i64) -> Result<u64, JournalError> {
    u64::try_from(v).map_err(|_| JournalError::PostgresSchema {
        database: journal.url.to_string(),
        detail: format!("runs.last_seq of {run_id} is {v}"),
    })
}

/// `run` as it is now with every stored line, in one snapshot; `None`
/// when it changed since the scan (it ended, or has another owner).
fn stored_run(
    client: &mut Client,
    journal: &PgJournal,
    run: &Running,
) -> Result<Option<(Running, Vec<String>)>, JournalError> {
    let err = |op| pg_error(&journal.url, op);
    let mut tx = client
        .build_transaction()
        .isolation_level(IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .map_err(err("begin reading a run for recovery"))?;
    let now = tx
        .query_opt(
            "SELECT r.last_seq, r.status, o.host FROM runs r \
             LEFT JOIN owners o ON o.run_id = r.run_id WHERE r.run_id = $1",
            &[&run.run_id],
        )
        .map_err(err("read a run for recovery"))?;
    let Some(now) = now else {
        return Ok(None);
    };
    let read = err("read a run for recovery");
    let (last_seq, status, owner): (i64, String, Option<String>) =
        match (now.try_get(0), now.try_get(1), now.try_get(2)) {
            (Ok(a), Ok(b), Ok(c)) => (a, b, c),
            (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => return Err(read(e)),
        };
    if status != "running" || owner != run.owner {
        return Ok(None);
    }
    let lines: Vec<String> = tx
        .query(
            "SELECT line FROM events WHERE run_id = $1 ORDER BY seq",
            &[&run.run_id],
        )
        .map_err(err("read a run's events for recovery"))?
        .iter()
        .map(|r| r.try_get(0))
        .collect::<Result<Vec<String>, _>>()
        .map_err(err("read a run's events for recovery"))?;
    tx.commit().map_err(err("end reading a run for recovery"))?;
    let now = Running {
        run_id: run.run_id.clone(),
        last_seq: unsigned_seq(journal, &run.run_id, last_seq)?,
        owner,
    };
    Ok(Some((now, lines)))
}

/// Makes this host the owner of `run` if the owner is still the one found
/// gone (or still none) and the run is still running at the same
/// `last_seq`: one statement, so the row lock makes it atomic across
/// recoverers. `true` when this call claimed it.
fn claim(client: &mut Client, journal: &PgJournal, run: &Running) -> Result<bool, JournalError> {
    let last_seq = i64::try_from(run.last_seq).unwrap_or(i64::MAX);
    let own = journal.host.id();
    let unchanged = "EXISTS (SELECT 1 FROM runs WHERE run_id = $1 \
                     AND status = 'running' AND last_seq = $3)";
    let changed = match &run.owner {
        Some(owner) => client.execute(
            &format!("UPDATE owners SET host = $2 WHERE run_id = $1 AND host = $4 AND {unchanged}"),
            &[&run.run_id, &own, &last_seq, owner],
        ),
        None => client.execute(
            &format!(
                "INSERT INTO owners (run_id, host) SELECT $1, $2 WHERE {unchanged} \
                 ON CONFLICT (run_id) DO NOTHING"
            ),
            &[&run.run_id, &own, &last_seq],
        ),
    }
    .map_err(pg_error(&journal.url, "claim an abandoned run"))?;
    Ok(changed == 1)
}
