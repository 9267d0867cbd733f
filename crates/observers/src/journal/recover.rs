//! Recovery of abandoned runs: [`SqliteJournal::recover_abandoned`].
//!
//! [`SqliteJournal::recover_abandoned`]: super::SqliteJournal::recover_abandoned

use super::hosts::{self, Liveness};
use super::{JournalError, SqliteJournal};
use crate::observer::ObserverError;
use keel_eventlog::{
    ENTRY_OVERHEAD_BYTES, Event, LogConfig, Payload, RunLog, SystemClock, recovery,
};
use keel_message::RunId;
use rusqlite::{Connection, OpenFlags, OptionalExtension, TransactionBehavior, params};
use std::collections::HashMap;
use std::fs::File;
use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

/// What [`SqliteJournal::recover_abandoned`] did, run by run.
///
/// [`SqliteJournal::recover_abandoned`]: super::SqliteJournal::recover_abandoned
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct RecoveryReport {
    /// Runs this call closed, in the order they were closed: children
    /// before parents, otherwise the journal's run order.
    pub recovered: Vec<RecoveredRun>,
    /// Running runs it left alone, and why.
    pub skipped: Vec<SkippedRun>,
    /// Stale host lock files removed (hosts that are gone).
    pub swept_host_files: usize,
}

impl RecoveryReport {
    /// Skipped runs that need someone's attention: everything but runs
    /// owned by a live host (this one included) and runs another recoverer
    /// took first.
    pub fn needs_attention(&self) -> impl Iterator<Item = &SkippedRun> {
        self.skipped.iter().filter(|s| {
            !matches!(
                s.reason,
                SkipReason::OwnedByLiveHost { .. }
                    | SkipReason::OwnedByThisHost
                    | SkipReason::ClaimedElsewhere
            )
        })
    }
}

/// One run recovery closed.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RecoveredRun {
    /// The run.
    pub run_id: RunId,
    /// The host that owned it (gone), or `None` when no host was recorded
    /// (a run journaled before schema version 2).
    pub previous_owner: Option<String>,
    /// The terminals appended, innermost first, exactly as journaled:
    /// their seqs follow the stored prefix with no gap. A host with other
    /// durable observers (NATS) can offer them these events too.
    pub terminals: Vec<Arc<Event>>,
}

/// A running run recovery did not close.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SkippedRun {
    /// The run, as its `runs` row names it: a row whose id is not a run
    /// id is skipped too ([`SkipReason::Corrupt`]), and named all the same.
    pub run_id: String,
    /// Why.
    pub reason: SkipReason,
}

/// Why a running run was not recovered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SkipReason {
    /// Its owner's lock is held: the host is running and will finish it.
    #[error("owned by live host {host}")]
    OwnedByLiveHost {
        /// The owner's host id.
        host: String,
    },
    /// This journal owns it (a run this host is still writing).
    #[error("owned by this host")]
    OwnedByThisHost,
    /// Another recoverer claimed it first, or it changed (it ended, or an
    /// event was appended) between the read and the claim.
    #[error("claimed by another recoverer, or it changed meanwhile")]
    ClaimedElsewhere,
    /// Its stored events cannot be restored into a log (a broken line, a
    /// lifecycle violation, a `runs` row that disagrees): nothing was
    /// written for it and its owner was left as it was.
    #[error("its stored prefix cannot be restored (rule recovery.importable): {detail}")]
    Corrupt {
        /// What is wrong (rule, line and seq numbers, never content).
        detail: String,
    },
    /// `owners.host` is not a host id ([`valid_host_id`](crate::valid_host_id)); no path is built
    /// from it and nothing was written.
    #[error("owners.host of this run is not a host id (rule recovery.host_id)")]
    InvalidOwner,
    /// The owner's lock file could not be checked (an I/O error other
    /// than its absence).
    #[error("cannot check host {host}'s lock file: {detail}")]
    HostCheckFailed {
        /// The owner's host id.
        host: String,
        /// The I/O error.
        detail: String,
    },
    /// Claimed, but a terminal could not be committed or journaled; the
    /// run stays owned by this host, and recovery resumes from what was
    /// stored once this host is gone.
    #[error("claimed, but {appended} terminal(s) journaled before: {detail}")]
    AppendFailed {
        /// Terminals journaled before the failure.
        appended: usize,
        /// The log's or the journal's error.
        detail: String,
    },
}

/// A running run as the scan found it.
struct Running {
    run_id: String,
    last_seq: u64,
    owner: Option<String>,
}

/// A running run whose id is a run id, and the parent its `run.started`
/// names (a sub-run's): what the recovery order needs.
struct Scanned {
    running: Running,
    id: RunId,
    parent: Option<RunId>,
}

/// What the lock file of one owner said, asked once per call.
enum Host {
    Alive,
    /// Gone; the lock is held here (if the file exists) until the sweep.
    Gone {
        _lock: Option<File>,
    },
    Unknown(String),
}

impl SqliteJournal {
    /// Recovers every abandoned run of this store: a run whose journal
    /// shows it `running` while no live host owns it (no owner recorded,
    /// or its owner's lock file is gone or can be locked).
    ///
    /// For each one, children before parents (a sub-run before the run
    /// whose call started it, deepest first:
    /// [`recovery::children_first`]), otherwise in the journal's run
    /// order (start time): read its stored lines and
    /// restore them into a [`RunLog`] ([`RunLog::import`], every commit
    /// rule checked; a run that fails is [`SkipReason::Corrupt`] and is not
    /// touched); claim it in one `BEGIN IMMEDIATE` transaction that makes
    /// this host the owner only if the owner is still the one found gone
    /// and `last_seq` has not moved (so of two recoverers only one closes
    /// a run; the other reports [`SkipReason::ClaimedElsewhere`]); then
    /// commit [`recovery::terminals`] in order and journal each event
    /// through this journal's writer, exactly as `observe` does: the seqs
    /// continue the stored prefix with no gap or reuse, and the run ends
    /// `failed` (rule `run.host_lost`). Finally, host lock files of gone
    /// hosts are removed.
    ///
    /// Idempotent: a second call finds nothing to do. Runs owned by a live
    /// host, this one included, are skipped. The terminals go to this
    /// journal only; [`RecoveredRun::terminals`] hands them to the caller
    /// for other observers.
    ///
    /// Blocking (SQLite, file locks, and waiting for the writer's
    /// commits); from async code call it on a blocking thread. `Err` is a
    /// failure of the store as a whole (opening a connection, the scan, a
    /// claim); what one run's events say never is.
    pub fn recover_abandoned(&self) -> Result<RecoveryReport, JournalError> {
        let mut conn = connection(&self.path, self.busy_timeout)?;
        let own = self.host.id();
        let dir = self.host.dir();
        let mut hosts: HashMap<String, Host> = HashMap::new();
        let mut report = RecoveryReport::default();
        for run in running_runs(&conn, &self.path)? {
            let verdict = match owner_state(&run, own, dir, &mut hosts) {
                Ok(()) => self.recover_run(&mut conn, &run)?,
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
        // Release the locks of gone hosts before sweeping their files.
        drop(hosts);
        report.swept_host_files = hosts::sweep(dir, own);
        Ok(report)
    }

    /// Restores, claims and closes one abandoned run. The outer `Err` is a
    /// store failure; the inner one why this run was skipped.
    fn recover_run(
        &self,
        conn: &mut Connection,
        run: &Running,
    ) -> Result<Result<RecoveredRun, SkipReason>, JournalError> {
        // Read again, in one snapshot: the run as it is now and its lines.
        let Some((run, lines)) = stored_run(conn, &self.path, run)? else {
            return Ok(Err(SkipReason::ClaimedElsewhere));
        };
        let run = &run;
        let log = match restore(run, &lines) {
            Ok(log) => log,
            Err(detail) => return Ok(Err(SkipReason::Corrupt { detail })),
        };
        let terminals = match open_terminals(&log) {
            Ok(terminals) => terminals,
            Err(reason) => return Ok(Err(reason)),
        };
        if !claim(conn, &self.path, run, self.host.id())? {
            return Ok(Err(SkipReason::ClaimedElsewhere));
        }
        Ok(close_run(&log, &terminals, run.owner.clone(), |events| {
            block_on(self.journal_all(events))
        }))
    }

    /// Journals the terminals as one batch: one transaction (one fsync
    /// for the run's terminals, not one each). `Err` names how many were
    /// acknowledged before the first refusal.
    async fn journal_all(&self, events: &[Arc<Event>]) -> Result<(), (usize, ObserverError)> {
        self.append_batch(events)
            .await
            .map_err(|e| (e.acknowledged, e.source))
    }
}

/// The terminals that close `log`'s open scopes; a running run whose
/// stored events close every scope is [`SkipReason::Corrupt`].
pub(crate) fn open_terminals(log: &RunLog) -> Result<Vec<Payload>, SkipReason> {
    let terminals = recovery::terminals(log);
    if terminals.is_empty() {
        return Err(SkipReason::Corrupt {
            detail: "runs.status is running but the stored events close every scope".to_owned(),
        });
    }
    Ok(terminals)
}

/// Commits `terminals` to the claimed run's `log` and journals them with
/// `journal` (which names how many were acknowledged when it fails).
pub(crate) fn close_run(
    log: &RunLog,
    terminals: &[Payload],
    previous_owner: Option<String>,
    journal: impl FnOnce(&[Arc<Event>]) -> Result<(), (usize, ObserverError)>,
) -> Result<RecoveredRun, SkipReason> {
    let mut events = Vec::with_capacity(terminals.len());
    for payload in terminals {
        match log.commit(payload) {
            Ok(event) => events.push(event),
            Err(e) => {
                return Err(SkipReason::AppendFailed {
                    appended: 0,
                    detail: e.to_string(),
                });
            }
        }
    }
    if let Err((appended, error)) = journal(&events) {
        return Err(SkipReason::AppendFailed {
            appended,
            detail: error.to_string(),
        });
    }
    Ok(RecoveredRun {
        run_id: log.run_id().clone(),
        previous_owner,
        terminals: events,
    })
}

/// `Ok` when `run`'s owner is gone (or none is recorded), else why not.
fn owner_state(
    run: &Running,
    own: &str,
    dir: &Path,
    hosts: &mut HashMap<String, Host>,
) -> Result<(), SkipReason> {
    let Some(owner) = &run.owner else {
        return Ok(());
    };
    if owner == own {
        return Err(SkipReason::OwnedByThisHost);
    }
    if !crate::valid_host_id(owner) {
        return Err(SkipReason::InvalidOwner);
    }
    let state = hosts
        .entry(owner.clone())
        .or_insert_with(|| match hosts::liveness(dir, owner) {
            Ok(Liveness::Alive) => Host::Alive,
            Ok(Liveness::Gone(file)) => Host::Gone { _lock: file },
            Err(e) => Host::Unknown(e.to_string()),
        });
    match state {
        Host::Gone { .. } => Ok(()),
        Host::Alive => Err(SkipReason::OwnedByLiveHost {
            host: owner.clone(),
        }),
        Host::Unknown(detail) => Err(SkipReason::HostCheckFailed {
            host: owner.clone(),
            detail: detail.clone(),
        }),
    }
}

/// A read-write connection of its own (the writer thread owns the other).
pub(super) fn connection(
    path: &Path,
    busy_timeout: std::time::Duration,
) -> Result<Connection, JournalError> {
    let sql = |op| JournalError::sql(path, op);
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(sql("open for recovery"))?;
    conn.busy_timeout(busy_timeout)
        .map_err(sql("set busy_timeout"))?;
    Ok(conn)
}

/// The running runs, in recovery order: children before parents
/// ([`recovery::children_first`]), otherwise by start time. A row whose id
/// is not a run id is nobody's parent and comes last (it is skipped as
/// corrupt).
fn running_runs(conn: &Connection, path: &Path) -> Result<Vec<Running>, JournalError> {
    let sql = |source| JournalError::Sqlite {
        path: path.to_path_buf(),
        op: "list running runs",
        source,
    };
    let mut stmt = conn
        .prepare(
            "SELECT r.run_id, r.last_seq, o.host, e.line FROM runs r \
             LEFT JOIN owners o ON o.run_id = r.run_id \
             LEFT JOIN events e ON e.run_id = r.run_id AND e.seq = 1 \
             WHERE r.status = 'running' ORDER BY r.started_ts, r.run_id",
        )
        .map_err(sql)?;
    let rows = stmt
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, Option<String>>(2)?,
                r.get::<_, Option<String>>(3)?,
            ))
        })
        .map_err(sql)?;
    let (mut runs, mut unnamed) = (Vec::new(), Vec::new());
    for row in rows {
        let (run_id, last_seq, owner, first_line) = row.map_err(sql)?;
        let last_seq = u64::try_from(last_seq).map_err(|_| JournalError::Corrupt {
            path: path.to_path_buf(),
            detail: format!("runs.last_seq of {run_id} is {last_seq}"),
        })?;
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

/// `run` as it is now, with every stored line in seq order, read in one
/// snapshot; `None` when it changed since the scan (it ended, or its owner
/// is another host now).
fn stored_run(
    conn: &mut Connection,
    path: &Path,
    run: &Running,
) -> Result<Option<(Running, Vec<String>)>, JournalError> {
    let sql = |source| JournalError::Sqlite {
        path: path.to_path_buf(),
        op: "read a run's events for recovery",
        source,
    };
    let tx = conn.transaction().map_err(sql)?;
    let now: Option<(i64, String, Option<String>)> = tx
        .query_row(
            "SELECT r.last_seq, r.status, o.host FROM runs r \
             LEFT JOIN owners o ON o.run_id = r.run_id WHERE r.run_id = ?1",
            [&run.run_id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()
        .map_err(sql)?;
    let Some((last_seq, status, owner)) = now else {
        return Ok(None);
    };
    if status != "running" || owner != run.owner {
        return Ok(None);
    }
    let lines = {
        let mut stmt = tx
            .prepare_cached("SELECT line FROM events WHERE run_id = ?1 ORDER BY seq")
            .map_err(sql)?;
        let rows = stmt.query_map([&run.run_id], |r| r.get(0)).map_err(sql)?;
        rows.collect::<Result<Vec<String>, _>>().map_err(sql)?
    };
    tx.commit().map_err(sql)?;
    let last_seq = u64::try_from(last_seq).map_err(|_| JournalError::Corrupt {
        path: path.to_path_buf(),
        detail: format!("runs.last_seq of {} is {last_seq}", run.run_id),
    })?;
    let now = Running {
        run_id: run.run_id.clone(),
        last_seq,
        owner,
    };
    Ok(Some((now, lines)))
}

/// The run's log, restored from its stored lines, or what is wrong.
fn restore(run: &Running, lines: &[String]) -> Result<RunLog, String> {
    restore_lines(&run.run_id, run.last_seq, lines)
}

/// A run's log restored from its `last_seq` stored lines (every commit
/// rule checked), or what is wrong; shared with the PostgreSQL journal.
pub(crate) fn restore_lines(
    run_id: &str,
    last_seq: u64,
    lines: &[String],
) -> Result<RunLog, String> {
    if u64::try_from(lines.len()).ok() != Some(last_seq) {
        return Err(format!(
            "runs.last_seq is {} but {} events are stored (rule runs.last_seq)",
            last_seq,
            lines.len()
        ));
    }
    let run_id = RunId::parse(run_id).map_err(|e| format!("runs.run_id: {e}"))?;
    RunLog::import(
        run_id,
        lines.iter().map(String::as_str),
        import_config(lines),
        Arc::new(SystemClock),
    )
    .map_err(|e| e.to_string())
}

/// A log configuration that holds every stored line (so nothing is
/// evicted and the model positions see every delta) whatever bounds the
/// host that wrote them had, with room for the terminals.
fn import_config(lines: &[String]) -> LogConfig {
    let base = LogConfig::default();
    let largest = lines.iter().map(String::len).max().unwrap_or(0);
    let stored: usize = lines
        .iter()
        .map(|l| l.len().saturating_add(ENTRY_OVERHEAD_BYTES))
        .fold(0, usize::saturating_add);
    // No more scopes can be open than were started.
    let max_open_scopes = base.max_open_scopes.max(lines.len().saturating_add(1));
    let max_event_bytes = base.max_event_bytes.max(largest);
    let reserve = max_open_scopes
        .saturating_mul(base.max_terminal_bytes.saturating_add(ENTRY_OVERHEAD_BYTES));
    LogConfig {
        max_events: lines
            .len()
            .saturating_add(max_open_scopes)
            .saturating_add(1),
        max_bytes: stored
            .saturating_add(max_event_bytes)
            .saturating_add(ENTRY_OVERHEAD_BYTES)
            .saturating_add(reserve),
        max_event_bytes,
        max_terminal_bytes: base.max_terminal_bytes,
        max_open_scopes,
    }
}

/// Makes this host the owner of `run` if the owner is still the one found
/// gone (or still none) and the run is still `running` at the same
/// `last_seq`. `true` when this call claimed it.
fn claim(
    conn: &mut Connection,
    path: &Path,
    run: &Running,
    own: &str,
) -> Result<bool, JournalError> {
    let sql = |op| JournalError::sql(path, op);
    let last_seq = i64::try_from(run.last_seq).unwrap_or(i64::MAX);
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(sql("begin the claim"))?;
    let unchanged = "EXISTS (SELECT 1 FROM runs WHERE run_id = ?1 \
                     AND status = 'running' AND last_seq = ?3)";
    let changed = match &run.owner {
        Some(owner) => tx.execute(
            &format!("UPDATE owners SET host = ?2 WHERE run_id = ?1 AND host = ?4 AND {unchanged}"),
            params![run.run_id, own, last_seq, owner],
        ),
        None => tx.execute(
            &format!(
                "INSERT INTO owners (run_id, host) SELECT ?1, ?2 WHERE NOT EXISTS \
                 (SELECT 1 FROM owners WHERE run_id = ?1) AND {unchanged}"
            ),
            params![run.run_id, own, last_seq],
        ),
    }
    .map_err(sql("claim an abandoned run"))?;
    tx.commit().map_err(sql("commit the claim"))?;
    Ok(changed == 1)
}

/// Wakes the thread blocked in [`block_on`].
struct ThreadWaker(std::thread::Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Drives `future` to completion on this thread. The journal's queue and
/// acknowledgement are runtime-agnostic channels, so no async runtime is
/// needed (nor entered: this works inside one, blocking its thread).
pub(crate) fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        std::thread::park();
    }
}
