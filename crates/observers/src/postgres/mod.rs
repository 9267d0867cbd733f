//! The PostgreSQL journal: the shared durable store for several hosts.
//!
//! [`PgJournal`] is a [`RequiredObserver`] that stores every event's
//! canonical line in a PostgreSQL database, keyed by `(run_id, seq)`, and
//! [`PgReader`] reads it back. Both have the same methods, signatures and
//! contract as [`SqliteJournal`](crate::journal::SqliteJournal) and
//! [`JournalReader`](crate::journal::JournalReader); the differences are
//! the ones below.
//!
//! # Durability contract
//!
//! As the SQLite journal's (see [`crate::journal`]): **`Ok` means
//! committed** (the server's `COMMIT` returned, with the server's
//! `synchronous_commit`, `on` by default: the WAL record is flushed, and
//! on a synchronous standby too when one is configured); **group commit**
//! (one writer thread owns one connection and puts everything queued, up
//! to [`JournalConfig::max_batch`] events or
//! [`JournalConfig::max_batch_bytes`], from any number of runs, into one
//! transaction; an `observe_batch` is one request, never split);
//! **contiguity** (seq 1 first, then `last_seq + 1`, else
//! [`ObserverError::Gap`]); the same bytes again are `Ok`, other bytes
//! [`ObserverError::Conflict`]; **a failed transaction is retried per
//! request**, so only the requests that cannot be stored get
//! [`ObserverError::Failed`]; cancel safety and shutdown as for SQLite.
//! [`JournalConfig::synchronous`] and `busy_timeout` are SQLite settings
//! and are ignored here.
//!
//! A transaction is `BEGIN`, one statement writing every row, `COMMIT`.
//! The writer caches the state of the running runs it writes (runs it has
//! not cached are read `FOR UPDATE` first); every `runs` update is a
//! compare-and-set on the `last_seq` it saw, so another host's commits to
//! one of them (a recovery's terminals) fail the transaction, which is
//! retried per request with the runs read again: two writers never
//! interleave on one run.
//!
//! # Tables (schema version 2)
//!
//! ```sql
//! CREATE TABLE keel_schema (version INTEGER NOT NULL, events TEXT NOT NULL);
//! CREATE TABLE runs (run_id TEXT COLLATE "C" PRIMARY KEY, last_seq BIGINT NOT NULL,
//!     status TEXT NOT NULL, started_ts BIGINT NOT NULL, updated_ts BIGINT NOT NULL,
//!     turns BIGINT NOT NULL, input_tokens BIGINT NOT NULL, output_tokens BIGINT NOT NULL,
//!     conversation TEXT COLLATE "C" NOT NULL);
//! CREATE TABLE events (run_id TEXT COLLATE "C" NOT NULL, seq BIGINT NOT NULL,
//!     kind TEXT NOT NULL, ts BIGINT NOT NULL, line TEXT NOT NULL, PRIMARY KEY (run_id, seq));
//! CREATE TABLE owners (run_id TEXT COLLATE "C" PRIMARY KEY, host TEXT NOT NULL);
//! -- version 2: runs_by_start, runs_by_status, runs_by_conversation; tombstones
//! ```
//!
//! Version 1 is the tables, version 2 the listing indexes and the
//! deletion tombstones. [`PgJournal::open`] reads the version before it
//! writes anything: a newer one is refused
//! ([`JournalError::PostgresNewerSchema`]), as is a database holding
//! tables of these names without `keel_schema`
//! ([`JournalError::PostgresSchema`]); an older one is migrated in one
//! transaction, serialized across hosts by an advisory lock.
//!
//! # Ownership and recovery across hosts, without lock files
//!
//! Each open `PgJournal` is a host with a random id (`h` and 32 hex
//! digits) that holds a **session-level advisory lock**
//! (`pg_advisory_lock`) on a key derived from its id (FNV-1a of
//! `keel.host/<id>`) on one dedicated connection, for its lifetime. The
//! server releases that lock the moment the session ends: the process
//! exited or was killed, its machine or the network went away (once the
//! server notices, by TCP keepalive). A host is **gone** when its lock can
//! be taken (`pg_try_advisory_lock`, released at once).
//!
//! `run.started` records the writing host in `owners`; the run's
//! terminal removes the row. [`PgJournal::recover_abandoned`] closes each
//! running run whose owner is gone (or that has none): it restores the
//! run's log from its stored lines, claims it by **compare-and-set**
//! (`UPDATE owners SET host = me WHERE run_id = $1 AND host = $dead AND`
//! the run is still running at the same `last_seq`; with no owner,
//! `INSERT … ON CONFLICT DO NOTHING`), and journals
//! `keel_eventlog::recovery::terminals` through its own writer. Row locks
//! make the compare-and-set atomic: of any number of recoverers on any
//! number of machines, exactly one changes the row and closes the run; the
//! others report [`SkipReason::ClaimedElsewhere`]. [`PgJournal::claim_run`]
//! claims a run id before the run starts, by the same kind of
//! compare-and-set.
//!
//! A host whose lock connection breaks while it still runs is seen as gone:
//! its runs may be recovered while its writer still writes them. The seqs
//! keep that safe (the first of the two writers to commit seq `n + 1`
//! wins; the other gets [`ObserverError::Conflict`] and its run fails),
//! but the run is ended by recovery. Keep the lock connection's path to
//! the server as reliable as the writer's.
//!
//! # Blocking
//!
//! Every method but `observe`/`observe_batch` blocks on the network; from
//! async code, call them on a blocking thread (`spawn_blocking`), as for
//! SQLite. The driver is the blocking `postgres` crate; its connections are
//! plain TCP or unix sockets (`NoTls`): TLS is not supported yet.

mod delete;
mod host;
mod reader;
mod recover;
mod schema;
mod url;
mod writer;

pub use reader::PgReader;
pub use schema::PG_SCHEMA_VERSION;
pub use url::{PgUrl, PgUrlError};

use crate::journal::request::Request;
use crate::journal::{JournalConfig, JournalError, JournalStats, StatsCell};
#[cfg(doc)]
use crate::journal::{RecoveryReport, SkipReason};
use crate::observer::{
    BatchError, ObserveBatchFuture, ObserveFuture, ObserverError, RequiredObserver,
};
use keel_eventlog::Event;
use postgres::{Client, NoTls};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use tokio::sync::mpsc;

/// The PostgreSQL journal. See the [module documentation](self) for the
/// durability contract and ownership across hosts.
pub struct PgJournal {
    url: PgUrl,
    queue: Option<mpsc::Sender<Request>>,
    writer: Option<JoinHandle<Result<(), JournalError>>>,
    stats: Arc<StatsCell>,
    host: host::HostLock,
    /// The connection claims and recovery use, opened on first use.
    service: Mutex<Option<Client>>,
}

impl std::fmt::Debug for PgJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgJournal")
            .field("url", &self.url)
            .field("host", &self.host.id())
            .finish_non_exhaustive()
    }
}

impl PgJournal {
    /// Connects, checks the schema (refusing a newer or foreign one with
    /// nothing written), creates or migrates it, takes this host's
    /// advisory lock and starts the writer thread. Blocking.
    pub fn open(url: &PgUrl, config: JournalConfig) -> Result<PgJournal, JournalError> {
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
        let mut client = connect(url, "connect the writer")?;
        if let Err(e) = schema::ensure(&mut client, url) {
            close_off_thread(client);
            return Err(e);
        }
        let host = match host::HostLock::acquire(url) {
            Ok(host) => host,
            Err(e) => {
                close_off_thread(client);
                return Err(e);
            }
        };
        let stats = Arc::new(StatsCell::default());
        let (queue, rx) = mpsc::channel(config.queue_capacity);
        let writer = writer::Writer {
            url: url.clone(),
            client,
            rx,
            max_batch: config.max_batch,
            max_batch_bytes: config.max_batch_bytes,
            stats: Arc::clone(&stats),
            host: Arc::from(host.id()),
            cache: std::collections::HashMap::new(),
        };
        let handle = std::thread::Builder::new()
            .name("keel-pg-journal".to_owned())
            .spawn(move || writer.run())
            .map_err(JournalError::Spawn)?;
        Ok(PgJournal {
            url: url.clone(),
            queue: Some(queue),
            writer: Some(handle),
            stats,
            host,
            service: Mutex::new(None),
        })
    }

    /// This host's id (`h` and 32 lowercase hex digits): what `owners`
    /// records for the runs it starts.
    pub fn host_id(&self) -> &str {
        self.host.id()
    }

    /// The database URL (shown without its password).
    pub fn url(&self) -> &PgUrl {
        &self.url
    }

    /// A reader on the same database, with its own connection. Blocking.
    pub fn reader(&self) -> Result<PgReader, JournalError> {
        PgReader::open(&self.url)
    }

    /// The writer's counters.
    pub fn stats(&self) -> JournalStats {
        self.stats.snapshot()
    }

    /// Stops taking events, waits for the writer to commit and acknowledge
    /// everything already queued, closes its connection, then releases
    /// this host's advisory lock: from then on, runs it started and did not
    /// end are abandoned, for [`recover_abandoned`](Self::recover_abandoned)
    /// to close. Dropping the journal does the same and ignores errors.
    pub fn close(mut self) -> Result<(), JournalError> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<(), JournalError> {
        self.queue = None;
        let result = match self.writer.take() {
            Some(handle) => handle.join().unwrap_or(Err(JournalError::WriterPanicked)),
            None => Ok(()),
        };
        let service = self
            .service
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(client) = service {
            close_off_thread(client);
        }
        // Only once nothing more can be written.
        self.host.release();
        result
    }

    /// Runs `f` on the service connection (opened on first use; one call
    /// at a time in this process). A connection that failed is dropped, so
    /// the next call connects afresh.
    fn with_service<T>(
        &self,
        f: impl FnOnce(&mut Client) -> Result<T, JournalError>,
    ) -> Result<T, JournalError> {
        let mut slot = self
            .service
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut client = match slot.take() {
            Some(client) if !client.is_closed() => client,
            _ => connect(&self.url, "connect for claims and recovery")?,
        };
        let result = f(&mut client);
        *slot = Some(client);
        result
    }

    async fn enqueue(&self, request: Request) -> Result<(), ObserverError> {
        let queue = self.queue.as_ref().ok_or(ObserverError::Closed)?;
        queue.send(request).await.map_err(|_| ObserverError::Closed)
    }

    async fn append(&self, event: &Arc<Event>) -> Result<(), ObserverError> {
        let (request, answer) = Request::one(event);
        self.enqueue(request).await?;
        answer.await.map_err(|_| ObserverError::Closed)?
    }

    async fn append_batch(&self, events: &[Arc<Event>]) -> Result<(), BatchError> {
        if events.is_empty() {
            return Ok(());
        }
        let (request, answer) = Request::batch(events);
        self.enqueue(request).await.map_err(|source| BatchError {
            acknowledged: 0,
            source,
        })?;
        answer.await.map_err(|_| BatchError {
            acknowledged: 0,
            source: ObserverError::Closed,
        })?
    }
}

impl Drop for PgJournal {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

impl RequiredObserver for PgJournal {
    fn name(&self) -> &str {
        "postgres"
    }

    /// `Ok` once the transaction holding `event` has committed. See the
    /// module's durability contract.
    fn observe<'a>(&'a self, event: &'a Arc<Event>) -> ObserveFuture<'a> {
        Box::pin(self.append(event))
    }

    /// The whole batch in one transaction (joining whatever other runs
    /// have queued), with `observe`'s checks in order; the first refused
    /// one at index `k` is `BatchError { acknowledged: k, .. }`; a
    /// transaction that fails acknowledges none.
    fn observe_batch<'a>(&'a self, events: &'a [Arc<Event>]) -> ObserveBatchFuture<'a> {
        Box::pin(self.append_batch(events))
    }
}

/// A new connection to `url` (no TLS), or an error naming `op`.
pub(crate) fn connect(url: &PgUrl, op: &'static str) -> Result<Client, JournalError> {
    url.config().connect(NoTls).map_err(pg_error(url, op))
}

/// Wraps a driver error: the database named without its password, the
/// message scrubbed of it.
pub(crate) fn pg_error(
    url: &PgUrl,
    op: &'static str,
) -> impl FnOnce(postgres::Error) -> JournalError {
    let database = url.to_string();
    let url = url.clone();
    move |e| {
        // The server's own message (with its SQLSTATE) when there is one.
        let detail = match e.as_db_error() {
            Some(db) => format!("{} ({})", db.message(), db.code().code()),
            None => e.to_string(),
        };
        JournalError::Postgres {
            database,
            op,
            detail: url.scrub(&detail),
        }
    }
}

/// Closes `client` on a thread of its own: the blocking client must not
/// run (nor be dropped) on an async runtime's thread, and a journal or a
/// reader may be dropped on one.
pub(crate) fn close_off_thread(client: Client) {
    let closer = std::thread::Builder::new()
        .name("keel-pg-close".to_owned())
        .spawn(move || drop(client));
    if let Ok(closer) = closer {
        let _ = closer.join();
    }
}
