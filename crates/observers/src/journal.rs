//! The SQLite journal: the embedded default durable store.
//!
//! [`SqliteJournal`] is a [`RequiredObserver`] that stores every event's
//! canonical line in a SQLite file, keyed by `(run_id, seq)`, and
//! [`JournalReader`] reads it back for the CLI and the daemon (while the
//! writer runs, from this process or another).
//!
//! # Durability contract
//!
//! - **`Ok` means committed.** [`observe`](RequiredObserver::observe)
//!   returns `Ok(())` only after the SQLite transaction that holds the
//!   event (or that found the same bytes already stored) has committed.
//!   Nothing is acknowledged before its commit, and a transaction that
//!   fails is never acknowledged: every event in it gets an error.
//! - **`synchronous=FULL` by default.** The database is in WAL mode, and
//!   with [`Synchronous::Full`] each commit fsyncs the WAL before it
//!   returns (on macOS with `F_FULLFSYNC`, `PRAGMA fullfsync`). An
//!   acknowledged event survives a process crash, a kernel crash and a
//!   power loss, on storage that honours fsync.
//!   [`Synchronous::Normal`] skips that fsync (the WAL is synced at
//!   checkpoints): acknowledged events survive a process crash but the
//!   last commits may be lost on power loss or kernel crash. The database
//!   is never corrupted, and never holds a gap, in either mode.
//! - **Group commit.** One writer thread owns the read-write connection.
//!   `observe` queues `(event, ack)` on a bounded channel and waits for the
//!   ack. The writer takes everything queued (up to
//!   [`JournalConfig::max_batch`] events or [`JournalConfig::max_batch_bytes`]),
//!   from any number of runs, into one `BEGIN IMMEDIATE … COMMIT`
//!   transaction: one fsync for the whole batch, then it acknowledges each
//!   event. Under load, batches grow by themselves (events queue while the
//!   previous commit syncs), so throughput does not rest on one fsync per
//!   event. A single run that waits for each ack before offering its next
//!   event still gets one commit per event: that is the latency of its
//!   durability, not a throughput bound shared with other runs.
//! - **Batches of one run.**
//!   [`observe_batch`](RequiredObserver::observe_batch) queues the whole
//!   batch as one request, never split: it joins the same grouped
//!   transaction as everything else queued (a batch alone may exceed
//!   `max_batch`). Its events are applied in order with the checks below;
//!   the first refused one, at index `k`, ends the batch: the `k` before it
//!   commit, nothing after it is looked at, and the answer is
//!   [`BatchError`]` { acknowledged: k, .. }`. A transaction that fails
//!   acknowledges none of the batch. The answer comes only after the
//!   commit, as for `observe`.
//! - **Contiguity: a journal never holds a gap.** Per run, the first
//!   stored event is seq 1 and each next one is `last_seq + 1`; anything
//!   else is [`ObserverError::Gap`] and nothing is written for it.
//! - **Idempotent retry, typed conflict.** Offering an event whose
//!   `(run_id, seq)` is stored with the same bytes is `Ok` (delivery is at
//!   least once); different bytes are [`ObserverError::Conflict`] and the
//!   stored row is kept.
//! - **One bad event does not sink its batch.** A refusal (gap, conflict)
//!   writes nothing for that event and the rest of the batch commits. If
//!   the transaction itself fails (I/O error, disk full, a constraint), it
//!   is rolled back and each event is retried in a transaction of its own,
//!   so only the events that cannot be stored get
//!   [`ObserverError::Failed`] (a batch is retried whole, in one
//!   transaction of its own).
//! - **Cancel safety.** Dropping an `observe` or `observe_batch` future (a
//!   pipeline deadline) never half-applies anything: the event (the batch,
//!   up to its first refusal) is either committed whole by the writer or
//!   not at all, and offering it again is `Ok` either way.
//! - **Shutdown.** [`SqliteJournal::close`] (or dropping the journal)
//!   stops taking events, lets the writer commit and acknowledge everything
//!   already queued, then closes the connection, which checkpoints the WAL.
//! - **Schema.** The file records its schema version in `keel_schema`
//!   (with the event format, `keel.events/1`); `runs.last_seq` is the last
//!   committed sequence of each run. A file whose schema is newer than
//!   this build's is refused with [`JournalError::NewerSchema`] before
//!   anything is written: the version is read with a connection that
//!   cannot write and creates no `-wal`/`-shm` file, ahead of the
//!   `journal_mode=WAL` pragma and any `CREATE`.
//!
//! # Reading it back, and tests under paused time
//!
//! [`JournalReader`] is a [`RunHistory`](crate::RunHistory): give it to
//! the engine (`EngineBuilder::history`) and `Engine::subscribe` reads
//! from it what a live run's log no longer retains.
//!
//! The journal acknowledges in real time: the writer thread commits and
//! fsyncs while the caller's task waits. Under Tokio's paused time
//! (`#[tokio::test(start_paused = true)]`) a runtime with nothing else to
//! do jumps its clock to the next timer, the pipeline's deadline, before
//! the writer answers, so a run fails on seq 1 with
//! [`ObserverError::DeadlineExceeded`] (pinned by
//! `crates/engine/tests/follow.rs`). Use the journal in real-time tests;
//! under paused time use `keel_testkit::MemoryJournal`, which has the same
//! storage rules and answers at once.
//!
//! # Tables (schema version 5)
//!
//! ```sql
//! CREATE TABLE keel_schema (version INTEGER NOT NULL, events TEXT NOT NULL);
//! CREATE TABLE runs (run_id TEXT PRIMARY KEY, last_seq INTEGER NOT NULL,
//!     status TEXT NOT NULL, -- running | completed | failed | cancelled
//!     started_ts INTEGER NOT NULL, updated_ts INTEGER NOT NULL,
//!     -- version 3: `turn.started` events, `model.completed` usage summed
//!     turns INTEGER NOT NULL DEFAULT 0, input_tokens INTEGER NOT NULL DEFAULT 0,
//!     output_tokens INTEGER NOT NULL DEFAULT 0);
//! CREATE TABLE events (run_id TEXT NOT NULL, seq INTEGER NOT NULL,
//!     kind TEXT NOT NULL, ts INTEGER NOT NULL, line TEXT NOT NULL,
//!     PRIMARY KEY (run_id, seq)) WITHOUT ROWID;
//! -- only running runs: set by a claim or `run.started`, removed by the run terminal
//! CREATE TABLE owners (run_id TEXT PRIMARY KEY, host TEXT NOT NULL) WITHOUT ROWID;
//! -- version 4: runs.conversation and the listing indexes (see listing.rs)
//! -- version 5: what is left of a deleted run (see delete.rs)
//! CREATE TABLE tombstones (run_id TEXT PRIMARY KEY, deleted_ts INTEGER NOT NULL,
//!     who TEXT NOT NULL, events INTEGER NOT NULL) WITHOUT ROWID;
//! ```
//!
//! `line` holds the canonical line byte for byte; `kind` and `ts` are
//! copies for queries. `runs` is updated in the same transaction as the
//! events, so `runs.last_seq` always equals the greatest stored seq and
//! the totals always equal what the stored events add up to. A version 1
//! to 4 store is migrated in place, in one transaction (version 3 sums the
//! stored events once); readers read versions 1 to 5; an older binary
//! refuses a newer version.
//!
//! # Deletion
//!
//! [`SqliteJournal::delete_runs`] removes the runs a
//! [`DeletionRequest`](crate::deletion::DeletionRequest) covers in one
//! transaction, leaves a tombstone for each, and reclaims the freed pages
//! (`secure_delete`, `VACUUM`, `wal_checkpoint(TRUNCATE)`), so none of a
//! deleted run's bytes stays in the database or its side files.
//!
//! # Ownership and recovery
//!
//! Each open `SqliteJournal` is a host with a random id that holds an
//! exclusive OS lock on `<db>.hosts/<host>.lock` for its lifetime (the
//! kernel releases it the moment the process dies). A run is abandoned
//! when it is running and has no owner, or its owner's lock file is
//! missing or can be locked. [`SqliteJournal::recover_abandoned`] claims
//! each abandoned run by compare-and-set (the owner must still be the dead
//! host, the run still at the same `last_seq`), restores its log from the
//! stored lines and journals `keel_eventlog::recovery::terminals` through
//! the writer, so seqs continue with no gap or reuse. It is idempotent, and
//! of any number of recoverers exactly one closes a run.
//!
//! Before a run starts, [`SqliteJournal::claim_run`] can claim its id for
//! this host (an `owners` row with no `runs` row yet, by the same kind of
//! compare-and-set): of any number of hosts on one store only one claims
//! an id, and none claims a journaled one.
//!
//! # Example
//!
//! ```
//! use keel_eventlog::*;
//! use keel_observers::journal::{JournalConfig, JournalReader, RunStatus, SqliteJournal};
//! use keel_observers::RequiredObserver;
//! use std::sync::Arc;
//!
//! let dir = std::env::temp_dir().join(format!("keel-doc-journal-{}", std::process::id()));
//! std::fs::create_dir_all(&dir)?;
//! let path = dir.join("keel.db");
//! let journal = SqliteJournal::open(&path, JournalConfig::default())?;
//! let log = RunLog::new(keel_message::RunId::parse("run_1")?, LogConfig::default(), Arc::new(SystemClock))?;
//! let rt = tokio::runtime::Builder::new_current_thread().build()?;
//! for payload in [
//!     Payload::RunStarted(RunStarted::default()),
//!     Payload::RunCompleted(RunCompleted::default()),
//! ] {
//!     let event = log.commit(&payload)?;
//!     rt.block_on(journal.observe(&event))?; // Ok: committed and fsynced
//! }
//! let reader = JournalReader::open(&path)?;
//! assert_eq!(reader.events_after("run_1", 0, 100)?.len(), 2);
//! assert_eq!(reader.run_status("run_1")?.map(|r| r.status), Some(RunStatus::Completed));
//! journal.close()?;
//! # drop(reader);
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod claim;
mod delete;
pub(crate) mod hosts;
mod listing;
pub(crate) mod reader;
pub(crate) mod recover;
pub(crate) mod request;
mod schema;
pub(crate) mod writer;

/// The run status lives beside [`RunHistory`](crate::RunHistory) (it
/// needs no SQLite); named here as before.
pub use crate::history::RunStatus;
pub use crate::journal_error::JournalError;
pub use claim::RunClaim;
pub use listing::{ListedRun, RunsCursor, RunsPage, RunsQuery};
pub use reader::{JournalReader, PAGE_BYTES, RunSummary, RunTotals, is_last_page, page_end};
pub use recover::{RecoveredRun, RecoveryReport, SkipReason, SkippedRun};
pub use schema::SCHEMA_VERSION;

use crate::observer::{
    BatchError, ObserveBatchFuture, ObserveFuture, ObserverError, RequiredObserver,
};
use keel_eventlog::Event;
use rusqlite::{Connection, OpenFlags};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::sync::mpsc;

/// How hard each commit syncs. See the module's durability contract.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Synchronous {
    /// `PRAGMA synchronous=FULL` (and `fullfsync`): every commit fsyncs the
    /// WAL before it is acknowledged. The default.
    #[default]
    Full,
    /// `PRAGMA synchronous=NORMAL`: the WAL is fsynced at checkpoints only.
    /// Acknowledged events survive a process crash, not a power loss.
    Normal,
}

impl Synchronous {
    fn pragma(self) -> &'static str {
        match self {
            Synchronous::Full => "FULL",
            Synchronous::Normal => "NORMAL",
        }
    }
}

/// Journal settings. Start from [`JournalConfig::default`] and set fields.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct JournalConfig {
    /// Commit sync level. Default [`Synchronous::Full`].
    pub synchronous: Synchronous,
    /// Most events in one transaction. Default 512.
    pub max_batch: usize,
    /// A batch closes once its lines reach this many bytes. Default 16 MiB.
    pub max_batch_bytes: usize,
    /// Requests (an `observe`'s event, or an `observe_batch`'s whole
    /// batch) that may wait for the writer; past it they wait for room
    /// (backpressure, bounded by the pipeline's deadline). Default 4096.
    pub queue_capacity: usize,
    /// How long SQLite waits for a lock held by another connection (a
    /// second process, a checkpoint). Default 5 s.
    pub busy_timeout: Duration,
}

impl Default for JournalConfig {
    fn default() -> Self {
        JournalConfig {
            synchronous: Synchronous::Full,
            max_batch: 512,
            max_batch_bytes: 16 << 20,
            queue_capacity: 4096,
            busy_timeout: Duration::from_secs(5),
        }
    }
}

/// Counters of a journal's writer, for monitoring and benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JournalStats {
    /// Transactions committed.
    pub transactions: u64,
    /// Events answered from committed transactions (stored, duplicate
    /// or refused; an `observe_batch` counts each event up to and
    /// including its first refusal). `requests / transactions` is the
    /// average batch.
    pub requests: u64,
    /// Events inserted.
    pub stored: u64,
    /// Events already stored with the same bytes (idempotent retries).
    pub duplicates: u64,
    /// Events refused (gap, conflict).
    pub refused: u64,
    /// Events answered with [`ObserverError::Failed`] because their
    /// transaction could not commit.
    pub failed: u64,
    /// The most events answered by one committed transaction.
    pub largest_batch: u64,
}

impl JournalStats {
    /// Average requests per committed transaction.
    pub fn average_batch(&self) -> f64 {
        if self.transactions == 0 {
            0.0
        } else {
            self.requests as f64 / self.transactions as f64
        }
    }
}

/// The live counters behind [`JournalStats`], shared by a writer thread
/// (SQLite or PostgreSQL) and its journal.
#[derive(Debug, Default)]
pub(crate) struct StatsCell {
    transactions: AtomicU64,
    requests: AtomicU64,
    stored: AtomicU64,
    duplicates: AtomicU64,
    refused: AtomicU64,
    failed: AtomicU64,
    largest_batch: AtomicU64,
}

impl StatsCell {
    /// The counters now.
    pub(crate) fn snapshot(&self) -> JournalStats {
        JournalStats {
            transactions: self.transactions.load(Ordering::Relaxed),
            requests: self.requests.load(Ordering::Relaxed),
            stored: self.stored.load(Ordering::Relaxed),
            duplicates: self.duplicates.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            largest_batch: self.largest_batch.load(Ordering::Relaxed),
        }
    }

    /// Counts one committed transaction and what it did with each request.
    pub(crate) fn count_commit(&self, applied: &[request::Applied]) {
        let answered: u64 = applied.iter().map(request::Applied::answered).sum();
        self.transactions.fetch_add(1, Ordering::Relaxed);
        self.requests.fetch_add(answered, Ordering::Relaxed);
        self.largest_batch.fetch_max(answered, Ordering::Relaxed);
        for a in applied {
            self.stored.fetch_add(a.stored, Ordering::Relaxed);
            self.duplicates.fetch_add(a.duplicates, Ordering::Relaxed);
            self.refused
                .fetch_add(u64::from(a.refused.is_some()), Ordering::Relaxed);
        }
    }

    /// Counts `events` answered as failed (their transaction did not commit).
    pub(crate) fn count_failed(&self, events: usize) {
        self.failed.fetch_add(events as u64, Ordering::Relaxed);
    }
}

/// The SQLite journal. See the [module documentation](self) for the
/// durability contract.
///
/// `observe` may be called from any number of tasks at once (one per run,
/// in sequence order per run, as the pipeline does); their events share
/// transactions.
#[derive(Debug)]
pub struct SqliteJournal {
    path: PathBuf,
    queue: Option<mpsc::Sender<request::Request>>,
    writer: Option<JoinHandle<Result<(), JournalError>>>,
    stats: Arc<StatsCell>,
    /// This host's lock file; released after the writer stopped.
    host: hosts::HostLock,
    busy_timeout: Duration,
    /// The connection run-id claims use ([`claim_run`](Self::claim_run)),
    /// opened on the first claim.
    claims: std::sync::Mutex<Option<Connection>>,
}

impl SqliteJournal {
    /// Opens (creating if needed) the journal at `path` and starts its
    /// writer thread.
    ///
    /// Order of work: check the config; read the schema version without
    /// writing anything (refusing a newer schema, a database that is not a
    /// journal, or a damaged one, all with the file untouched); then open
    /// read-write, switch to WAL, set `synchronous`, and create the schema
    /// in one transaction if the database is new (or migrate an older
    /// schema in place, in one transaction); then create and lock this
    /// host's lock file in `<path>.hosts/` (see
    /// [`recover_abandoned`](Self::recover_abandoned)). This call blocks
    /// (file I/O, and up to `busy_timeout` if another process holds the
    /// lock); from async code, call it on a blocking thread.
    pub fn open(
        path: impl AsRef<Path>,
        config: JournalConfig,
    ) -> Result<SqliteJournal, JournalError> {
        let path = path.as_ref().to_path_buf();
        for (field, value) in [
            ("max_batch", config.max_batch),
            ("max_batch_bytes", config.max_batch_bytes),
            ("queue_capacity", config.queue_capacity),
        ] {
            if value == 0 {
                return Err(JournalError::Config {
                    field,
                    detail: "must be at least 1",
                });
            }
        }
        // Before anything that could write: refuse a newer or foreign schema.
        schema::probe(&path)?;
        let conn = open_writer(&path, &config)?;
        let host = hosts::HostLock::acquire(&path)?;
        let stats = Arc::new(StatsCell::default());
        let (queue, rx) = mpsc::channel(config.queue_capacity);
        let writer = writer::Writer::new(
            path.clone(),
            conn,
            rx,
            config.max_batch,
            config.max_batch_bytes,
            Arc::clone(&stats),
            Arc::from(host.id()),
        );
        let handle = std::thread::Builder::new()
            .name("keel-journal".to_owned())
            .spawn(move || writer.run())
            .map_err(JournalError::Spawn)?;
        Ok(SqliteJournal {
            path,
            queue: Some(queue),
            writer: Some(handle),
            stats,
            host,
            busy_timeout: config.busy_timeout,
            claims: std::sync::Mutex::new(None),
        })
    }

    /// This host's id (`h` and 32 lowercase hex digits): what `owners`
    /// records for the runs it starts, and the name of its lock file.
    pub fn host_id(&self) -> &str {
        self.host.id()
    }

    /// The database path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A reader on the same file, with its own connection.
    pub fn reader(&self) -> Result<JournalReader, JournalError> {
        JournalReader::open(&self.path)
    }

    /// The writer's counters.
    pub fn stats(&self) -> JournalStats {
        self.stats.snapshot()
    }

    /// Stops taking events, waits for the writer to commit and acknowledge
    /// everything already queued, and closes the database (checkpointing
    /// the WAL), then releases this host's lock (removing its lock file):
    /// from then on, runs it started and did not end are abandoned, for
    /// [`recover_abandoned`](Self::recover_abandoned) to close. Dropping
    /// the journal does the same and ignores errors. Blocks until the
    /// writer is done.
    pub fn close(mut self) -> Result<(), JournalError> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<(), JournalError> {
        // Dropping the only sender ends the writer's loop once the queue
        // is empty.
        self.queue = None;
        let result = match self.writer.take() {
            Some(handle) => handle.join().unwrap_or(Err(JournalError::WriterPanicked)),
            None => Ok(()),
        };
        // Only once nothing more can be written.
        self.host.release();
        result
    }

    /// Queues `request` for the writer (waiting for room).
    async fn enqueue(&self, request: request::Request) -> Result<(), ObserverError> {
        let queue = self.queue.as_ref().ok_or(ObserverError::Closed)?;
        queue.send(request).await.map_err(|_| ObserverError::Closed)
    }

    async fn append(&self, event: &Arc<Event>) -> Result<(), ObserverError> {
        let (request, answer) = request::Request::one(event);
        self.enqueue(request).await?;
        // The writer answers only after the transaction committed (or
        // failed); a dropped answer means the writer is gone.
        answer.await.map_err(|_| ObserverError::Closed)?
    }

    /// The whole batch as one request: one transaction, one answer.
    async fn append_batch(&self, events: &[Arc<Event>]) -> Result<(), BatchError> {
        if events.is_empty() {
            return Ok(());
        }
        let closed = |_| BatchError {
            acknowledged: 0,
            source: ObserverError::Closed,
        };
        let (request, answer) = request::Request::batch(events);
        self.enqueue(request).await.map_err(|source| BatchError {
            acknowledged: 0,
            source,
        })?;
        answer.await.map_err(closed)?
    }
}

impl Drop for SqliteJournal {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

impl RequiredObserver for SqliteJournal {
    fn name(&self) -> &str {
        "sqlite"
    }

    /// `Ok` once the transaction holding `event` has committed under the
    /// configured `synchronous` level. See the module's durability contract.
    fn observe<'a>(&'a self, event: &'a Arc<Event>) -> ObserveFuture<'a> {
        Box::pin(self.append(event))
    }

    /// The whole batch in one transaction (joining whatever other runs
    /// have queued): events applied in order with `observe`'s checks;
    /// the first refused one at index `k` leaves the `k` before it
    /// committed and is `BatchError { acknowledged: k, .. }`; a
    /// transaction that fails acknowledges none. `Ok` or `Err` only after
    /// the commit. See the module's durability contract.
    fn observe_batch<'a>(&'a self, events: &'a [Arc<Event>]) -> ObserveBatchFuture<'a> {
        Box::pin(self.append_batch(events))
    }
}

impl JournalError {
    /// Wraps a failed SQLite call on `path` doing `op`; a file that is not
    /// a database at all becomes [`JournalError::NotSqlite`], so a caller
    /// can tell bad input from a failing store.
    pub(crate) fn sql(
        path: &Path,
        op: &'static str,
    ) -> impl FnOnce(rusqlite::Error) -> JournalError {
        let path = path.to_path_buf();
        move |source| {
            if source.sqlite_error_code() == Some(rusqlite::ErrorCode::NotADatabase) {
                JournalError::NotSqlite { path }
            } else {
                JournalError::Sqlite { path, op, source }
            }
        }
    }
}

/// The writer's connection: WAL, `synchronous`, schema created if new.
fn open_writer(path: &Path, config: &JournalConfig) -> Result<Connection, JournalError> {
    let sql = |op| JournalError::sql(path, op);
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(sql("open read-write"))?;
    conn.busy_timeout(config.busy_timeout)
        .map_err(sql("set busy_timeout"))?;
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
        .map_err(sql("set journal_mode=WAL"))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(JournalError::WalUnavailable {
            path: path.to_path_buf(),
            mode,
        });
    }
    conn.pragma_update(None, "synchronous", config.synchronous.pragma())
        .map_err(sql("set synchronous"))?;
    conn.pragma_update(None, "fullfsync", config.synchronous == Synchronous::Full)
        .map_err(sql("set fullfsync"))?;
    conn.set_prepared_statement_cache_capacity(16);
    schema::ensure(&conn, path)?;
    Ok(conn)
}
