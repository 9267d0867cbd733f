//! One type for "the durable store", whichever it is: [`StoreLocation`]
//! (where it is, parsed from `--db` or `KEEL_DB`), [`Store`] (the required
//! observer that journals runs, owns them and recovers abandoned ones) and
//! [`StoreReader`] (its read side, a [`RunHistory`]). The daemon and the
//! CLI hold these, so they run on any store this build has.
//!
//! The durable stores are SQLite ([`SqliteJournal`], [`JournalReader`])
//! and, with the feature `postgres`, PostgreSQL (`PgJournal`, `PgReader`).
//! Each store is one arm of each enum, and every method is a `match` with
//! one arm per store that forwards to the store's own method of the same
//! name and signature: a store that keeps that contract is added by adding
//! its arms.
//!
//! A location is a URL only when it starts with a scheme and `://`:
//! `postgres://` and `postgresql://` (any case) name PostgreSQL (a
//! `PgUrl`; without the feature `postgres`, refused with
//! `StoreLocationError::PostgresNotBuilt`), and any other scheme is
//! refused ([`StoreLocationError::UnknownScheme`], naming the scheme only:
//! a mistyped URL is never taken for a file name, which errors would then
//! print with its password). Anything else (a one-letter "scheme" is a
//! Windows drive) is a SQLite path. A location's `Display` and `Debug`
//! never show a password.

use crate::deletion::{DeleteError, DeletionRequest, Tombstone};
use crate::history::{RunHistory, RunHistoryError, StoredRun};
use crate::journal::{
    JournalConfig, JournalError, JournalReader, JournalStats, RecoveryReport, RunClaim, RunStatus,
    RunSummary, RunTotals, RunsPage, RunsQuery, SqliteJournal,
};
use crate::observer::{ObserveBatchFuture, ObserveFuture, RequiredObserver};
#[cfg(feature = "postgres")]
use crate::postgres::{PgJournal, PgReader, PgUrl, PgUrlError};
use keel_eventlog::Event;
use keel_message::RunId;
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The URL schemes that name a PostgreSQL store (compared ignoring case).
pub const POSTGRES_SCHEMES: [&str; 2] = ["postgres", "postgresql"];

/// Where a durable store is. Two PostgreSQL locations are equal when
/// they show the same (the URL without its password).
#[derive(Clone)]
#[non_exhaustive]
#[allow(
    clippy::large_enum_variant,
    reason = "one per process or configuration, not worth a box on every access"
)]
pub enum StoreLocation {
    /// A SQLite journal file.
    Sqlite(PathBuf),
    /// A PostgreSQL database.
    #[cfg(feature = "postgres")]
    Postgres(PgUrl),
}

impl PartialEq for StoreLocation {
    fn eq(&self, other: &StoreLocation) -> bool {
        match (self, other) {
            (StoreLocation::Sqlite(a), StoreLocation::Sqlite(b)) => a == b,
            #[cfg(feature = "postgres")]
            (StoreLocation::Postgres(a), StoreLocation::Postgres(b)) => {
                a.to_string() == b.to_string()
            }
            #[cfg(feature = "postgres")]
            _ => false,
        }
    }
}

impl Eq for StoreLocation {}

/// Why a store location was refused. Never holds the location's text
/// (it may carry a password).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreLocationError {
    /// The location is empty.
    #[error("the store location is empty (rule store.location)")]
    Empty,
    /// A `postgres://` location in a build without the PostgreSQL store.
    #[cfg(not(feature = "postgres"))]
    #[error(
        "a PostgreSQL store (postgres://…) needs keel built with the feature `postgres` (rule store.postgres_feature)"
    )]
    PostgresNotBuilt,
    /// A `postgres://` location the PostgreSQL driver refused.
    #[cfg(feature = "postgres")]
    #[error(transparent)]
    Postgres(#[from] PgUrlError),
    /// A URL whose scheme names no store this build knows.
    #[error(
        "unknown store scheme {scheme:?}: a store is a SQLite path or a postgres:// URL (rule store.scheme)"
    )]
    UnknownScheme {
        /// The scheme, before `://` (at most 32 characters shown).
        scheme: String,
    },
}

impl StoreLocation {
    /// Parses `text`: a `postgres://` or `postgresql://` URL is PostgreSQL,
    /// another `scheme://` is refused, anything else is a SQLite path.
    pub fn parse(text: &str) -> Result<StoreLocation, StoreLocationError> {
        if text.is_empty() {
            return Err(StoreLocationError::Empty);
        }
        match url_scheme(text) {
            None => Ok(StoreLocation::Sqlite(PathBuf::from(text))),
            Some(scheme)
                if POSTGRES_SCHEMES
                    .iter()
                    .any(|s| s.eq_ignore_ascii_case(scheme)) =>
            {
                postgres(scheme, text)
            }
            Some(scheme) => Err(StoreLocationError::UnknownScheme {
                scheme: scheme.chars().take(32).collect(),
            }),
        }
    }

    /// The SQLite file, for a SQLite store.
    pub fn sqlite_path(&self) -> Option<&Path> {
        match self {
            StoreLocation::Sqlite(path) => Some(path),
            #[cfg(feature = "postgres")]
            StoreLocation::Postgres(_) => None,
        }
    }
}

/// A `postgres://` location (its scheme lower-cased for the driver).
#[cfg(feature = "postgres")]
fn postgres(scheme: &str, text: &str) -> Result<StoreLocation, StoreLocationError> {
    let rest = text.get(scheme.len()..).unwrap_or_default();
    let url = PgUrl::parse(&format!("{}{rest}", scheme.to_ascii_lowercase()))?;
    Ok(StoreLocation::Postgres(url))
}

/// Without the feature `postgres`: refused.
#[cfg(not(feature = "postgres"))]
fn postgres(_scheme: &str, _text: &str) -> Result<StoreLocation, StoreLocationError> {
    Err(StoreLocationError::PostgresNotBuilt)
}

/// The scheme of `text` when it starts with one followed by `://`
/// (RFC 3986: a letter, then letters, digits, `+`, `-`, `.`).
fn url_scheme(text: &str) -> Option<&str> {
    let (scheme, _) = text.split_once("://")?;
    let mut chars = scheme.chars();
    let first = chars.next()?;
    // One letter is a Windows drive (`C://dir`), not a scheme.
    let valid = scheme.len() > 1
        && first.is_ascii_alphabetic()
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    valid.then_some(scheme)
}

impl std::str::FromStr for StoreLocation {
    type Err = StoreLocationError;
    fn from_str(text: &str) -> Result<StoreLocation, StoreLocationError> {
        StoreLocation::parse(text)
    }
}

/// A path is a SQLite location (whatever it reads like).
impl From<PathBuf> for StoreLocation {
    fn from(path: PathBuf) -> StoreLocation {
        StoreLocation::Sqlite(path)
    }
}

/// A path is a SQLite location (whatever it reads like).
impl From<&Path> for StoreLocation {
    fn from(path: &Path) -> StoreLocation {
        StoreLocation::Sqlite(path.to_path_buf())
    }
}

/// The path, or the URL without its password.
impl fmt::Display for StoreLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreLocation::Sqlite(path) => write!(f, "{}", path.display()),
            #[cfg(feature = "postgres")]
            StoreLocation::Postgres(url) => write!(f, "{url}"),
        }
    }
}

/// As `Display`, tagged with the store.
impl fmt::Debug for StoreLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreLocation::Sqlite(path) => f.debug_tuple("Sqlite").field(path).finish(),
            #[cfg(feature = "postgres")]
            StoreLocation::Postgres(url) => f.debug_tuple("Postgres").field(url).finish(),
        }
    }
}

/// A durable store, open for writing: a [`RequiredObserver`] with
/// ownership of runs and recovery. See [`SqliteJournal`] for the contract
/// every store keeps.
#[derive(Debug)]
#[non_exhaustive]
#[allow(
    clippy::large_enum_variant,
    reason = "one per process or configuration, not worth a box on every access"
)]
pub enum Store {
    /// The SQLite journal.
    Sqlite(SqliteJournal),
    /// The PostgreSQL journal.
    #[cfg(feature = "postgres")]
    Postgres(PgJournal),
}

impl Store {
    /// Opens (creating if needed) the store at `location`. Blocking; from
    /// async code, call it on a blocking thread.
    pub fn open(location: &StoreLocation, config: JournalConfig) -> Result<Store, JournalError> {
        match location {
            StoreLocation::Sqlite(path) => SqliteJournal::open(path, config).map(Store::Sqlite),
            #[cfg(feature = "postgres")]
            StoreLocation::Postgres(url) => PgJournal::open(url, config).map(Store::Postgres),
        }
    }

    /// Where the store is.
    pub fn location(&self) -> StoreLocation {
        match self {
            Store::Sqlite(journal) => StoreLocation::Sqlite(journal.path().to_path_buf()),
            #[cfg(feature = "postgres")]
            Store::Postgres(journal) => StoreLocation::Postgres(journal.url().clone()),
        }
    }

    /// This host's id: what the store records as the owner of the runs it
    /// starts.
    pub fn host_id(&self) -> &str {
        match self {
            Store::Sqlite(journal) => journal.host_id(),
            #[cfg(feature = "postgres")]
            Store::Postgres(journal) => journal.host_id(),
        }
    }

    /// A reader of the same store, with its own connection.
    pub fn reader(&self) -> Result<StoreReader, JournalError> {
        match self {
            Store::Sqlite(journal) => journal.reader().map(StoreReader::Sqlite),
            #[cfg(feature = "postgres")]
            Store::Postgres(journal) => journal.reader().map(StoreReader::Postgres),
        }
    }

    /// The writer's counters.
    pub fn stats(&self) -> JournalStats {
        match self {
            Store::Sqlite(journal) => journal.stats(),
            #[cfg(feature = "postgres")]
            Store::Postgres(journal) => journal.stats(),
        }
    }

    /// Claims `run_id` for this host ([`SqliteJournal::claim_run`]).
    pub fn claim_run(&self, run_id: &str) -> Result<RunClaim, JournalError> {
        match self {
            Store::Sqlite(journal) => journal.claim_run(run_id),
            #[cfg(feature = "postgres")]
            Store::Postgres(journal) => journal.claim_run(run_id),
        }
    }

    /// Removes this host's claim on a run that never started
    /// ([`SqliteJournal::release_claim`]).
    pub fn release_claim(&self, run_id: &str) -> Result<bool, JournalError> {
        match self {
            Store::Sqlite(journal) => journal.release_claim(run_id),
            #[cfg(feature = "postgres")]
            Store::Postgres(journal) => journal.release_claim(run_id),
        }
    }

    /// Closes the runs dead hosts left running
    /// ([`SqliteJournal::recover_abandoned`]).
    pub fn recover_abandoned(&self) -> Result<RecoveryReport, JournalError> {
        match self {
            Store::Sqlite(journal) => journal.recover_abandoned(),
            #[cfg(feature = "postgres")]
            Store::Postgres(journal) => journal.recover_abandoned(),
        }
    }

    /// Deletes the runs `request` covers, in one transaction, and returns
    /// their tombstones ([`SqliteJournal::delete_runs`]).
    pub fn delete_runs(&self, request: &DeletionRequest) -> Result<Vec<Tombstone>, DeleteError> {
        match self {
            Store::Sqlite(journal) => journal.delete_runs(request),
            #[cfg(feature = "postgres")]
            Store::Postgres(journal) => journal.delete_runs(request),
        }
    }

    /// Commits what is queued and closes the store
    /// ([`SqliteJournal::close`]).
    pub fn close(self) -> Result<(), JournalError> {
        match self {
            Store::Sqlite(journal) => journal.close(),
            #[cfg(feature = "postgres")]
            Store::Postgres(journal) => journal.close(),
        }
    }
}

impl From<SqliteJournal> for Store {
    fn from(journal: SqliteJournal) -> Store {
        Store::Sqlite(journal)
    }
}

/// The store's own contract ([`SqliteJournal`]'s module documentation).
impl RequiredObserver for Store {
    fn name(&self) -> &str {
        match self {
            Store::Sqlite(journal) => journal.name(),
            #[cfg(feature = "postgres")]
            Store::Postgres(journal) => journal.name(),
        }
    }

    fn observe<'a>(&'a self, event: &'a Arc<Event>) -> ObserveFuture<'a> {
        match self {
            Store::Sqlite(journal) => journal.observe(event),
            #[cfg(feature = "postgres")]
            Store::Postgres(journal) => journal.observe(event),
        }
    }

    fn observe_batch<'a>(&'a self, events: &'a [Arc<Event>]) -> ObserveBatchFuture<'a> {
        match self {
            Store::Sqlite(journal) => journal.observe_batch(events),
            #[cfg(feature = "postgres")]
            Store::Postgres(journal) => journal.observe_batch(events),
        }
    }
}

/// A durable store's read side: the [`JournalReader`] methods, on any
/// store.
#[derive(Debug)]
#[non_exhaustive]
#[allow(
    clippy::large_enum_variant,
    reason = "one per process or configuration, not worth a box on every access"
)]
pub enum StoreReader {
    /// A SQLite journal's reader.
    Sqlite(JournalReader),
    /// A PostgreSQL journal's reader.
    #[cfg(feature = "postgres")]
    Postgres(PgReader),
}

impl StoreReader {
    /// Opens the store at `location` for reading; a store that holds no
    /// journal is [`JournalError::NotFound`] (nothing is created).
    pub fn open(location: &StoreLocation) -> Result<StoreReader, JournalError> {
        match location {
            StoreLocation::Sqlite(path) => JournalReader::open(path).map(StoreReader::Sqlite),
            #[cfg(feature = "postgres")]
            StoreLocation::Postgres(url) => PgReader::open(url).map(StoreReader::Postgres),
        }
    }

    /// Where the store is.
    pub fn location(&self) -> StoreLocation {
        match self {
            StoreReader::Sqlite(reader) => StoreLocation::Sqlite(reader.path().to_path_buf()),
            #[cfg(feature = "postgres")]
            StoreReader::Postgres(reader) => StoreLocation::Postgres(reader.url().clone()),
        }
    }

    /// Every run, oldest first ([`JournalReader::runs`]).
    pub fn runs(&self) -> Result<Vec<RunSummary>, JournalError> {
        match self {
            StoreReader::Sqlite(reader) => reader.runs(),
            #[cfg(feature = "postgres")]
            StoreReader::Postgres(reader) => reader.runs(),
        }
    }

    /// Turns and token usage of every run ([`JournalReader::totals`]).
    pub fn totals(&self) -> Result<HashMap<String, RunTotals>, JournalError> {
        match self {
            StoreReader::Sqlite(reader) => reader.totals(),
            #[cfg(feature = "postgres")]
            StoreReader::Postgres(reader) => reader.totals(),
        }
    }

    /// The totals summed from the stored events
    /// ([`JournalReader::summed_totals`]).
    pub fn summed_totals(&self) -> Result<HashMap<String, RunTotals>, JournalError> {
        match self {
            StoreReader::Sqlite(reader) => reader.summed_totals(),
            #[cfg(feature = "postgres")]
            StoreReader::Postgres(reader) => reader.summed_totals(),
        }
    }

    /// One run's summary ([`JournalReader::run_status`]).
    pub fn run_status(&self, run_id: &str) -> Result<Option<RunSummary>, JournalError> {
        match self {
            StoreReader::Sqlite(reader) => reader.run_status(run_id),
            #[cfg(feature = "postgres")]
            StoreReader::Postgres(reader) => reader.run_status(run_id),
        }
    }

    /// The numbered run with the greatest number
    /// ([`JournalReader::last_numbered_run`]).
    pub fn last_numbered_run(
        &self,
        prefix: &str,
        status: Option<RunStatus>,
    ) -> Result<Option<RunSummary>, JournalError> {
        match self {
            StoreReader::Sqlite(reader) => reader.last_numbered_run(prefix, status),
            #[cfg(feature = "postgres")]
            StoreReader::Postgres(reader) => reader.last_numbered_run(prefix, status),
        }
    }

    /// A page of a run's lines ([`JournalReader::events_after`]).
    pub fn events_after(
        &self,
        run_id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<String>, JournalError> {
        match self {
            StoreReader::Sqlite(reader) => reader.events_after(run_id, after, limit),
            #[cfg(feature = "postgres")]
            StoreReader::Postgres(reader) => reader.events_after(run_id, after, limit),
        }
    }

    /// Every line of a run after `after` ([`JournalReader::all_lines_after`]).
    pub fn all_lines_after(&self, run_id: &str, after: u64) -> Result<Vec<String>, JournalError> {
        match self {
            StoreReader::Sqlite(reader) => reader.all_lines_after(run_id, after),
            #[cfg(feature = "postgres")]
            StoreReader::Postgres(reader) => reader.all_lines_after(run_id, after),
        }
    }

    /// A page of a run's lines within a byte budget
    /// ([`JournalReader::events_within`]).
    pub fn events_within(
        &self,
        run_id: &str,
        after: u64,
        limit: usize,
        max_bytes: usize,
    ) -> Result<Vec<String>, JournalError> {
        match self {
            StoreReader::Sqlite(reader) => reader.events_within(run_id, after, limit, max_bytes),
            #[cfg(feature = "postgres")]
            StoreReader::Postgres(reader) => reader.events_within(run_id, after, limit, max_bytes),
        }
    }

    /// Every tombstone, in run id order ([`JournalReader::tombstones`]).
    pub fn tombstones(&self) -> Result<Vec<Tombstone>, JournalError> {
        match self {
            StoreReader::Sqlite(reader) => reader.tombstones(),
            #[cfg(feature = "postgres")]
            StoreReader::Postgres(reader) => reader.tombstones(),
        }
    }

    /// A page of the run list ([`JournalReader::runs_page`]).
    pub fn runs_page(&self, query: &RunsQuery) -> Result<RunsPage, JournalError> {
        match self {
            StoreReader::Sqlite(reader) => reader.runs_page(query),
            #[cfg(feature = "postgres")]
            StoreReader::Postgres(reader) => reader.runs_page(query),
        }
    }
}

#[cfg(feature = "postgres")]
impl From<PgJournal> for Store {
    fn from(journal: PgJournal) -> Store {
        Store::Postgres(journal)
    }
}

#[cfg(feature = "postgres")]
impl From<PgReader> for StoreReader {
    fn from(reader: PgReader) -> StoreReader {
        StoreReader::Postgres(reader)
    }
}

impl From<JournalReader> for StoreReader {
    fn from(reader: JournalReader) -> StoreReader {
        StoreReader::Sqlite(reader)
    }
}

/// The store's history ([`JournalReader`]'s `RunHistory`).
impl RunHistory for StoreReader {
    fn name(&self) -> &str {
        match self {
            StoreReader::Sqlite(reader) => RunHistory::name(reader),
            #[cfg(feature = "postgres")]
            StoreReader::Postgres(reader) => RunHistory::name(reader),
        }
    }

    fn stored(&self, run_id: &RunId) -> Result<Option<StoredRun>, RunHistoryError> {
        match self {
            StoreReader::Sqlite(reader) => reader.stored(run_id),
            #[cfg(feature = "postgres")]
            StoreReader::Postgres(reader) => reader.stored(run_id),
        }
    }

    fn read_after(
        &self,
        run_id: &RunId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<Arc<Event>>, RunHistoryError> {
        match self {
            StoreReader::Sqlite(reader) => reader.read_after(run_id, after, limit),
            #[cfg(feature = "postgres")]
            StoreReader::Postgres(reader) => reader.read_after(run_id, after, limit),
        }
    }
}

/// The reads the conversation functions ([`crate::conversation`]) make,
/// so they take a [`StoreReader`] or a store's own reader alike.
pub trait StoreReads {
    /// One run's summary, or `None` when nothing of it is stored.
    fn run_status(&self, run_id: &str) -> Result<Option<RunSummary>, JournalError>;
    /// Up to `limit` lines of `run_id` after seq `after`, in order.
    fn events_after(
        &self,
        run_id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<String>, JournalError>;
    /// Every run, oldest first.
    fn runs(&self) -> Result<Vec<RunSummary>, JournalError>;
}

impl StoreReads for JournalReader {
    fn run_status(&self, run_id: &str) -> Result<Option<RunSummary>, JournalError> {
        JournalReader::run_status(self, run_id)
    }
    fn events_after(
        &self,
        run_id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<String>, JournalError> {
        JournalReader::events_after(self, run_id, after, limit)
    }
    fn runs(&self) -> Result<Vec<RunSummary>, JournalError> {
        JournalReader::runs(self)
    }
}

impl StoreReads for StoreReader {
    fn run_status(&self, run_id: &str) -> Result<Option<RunSummary>, JournalError> {
        StoreReader::run_status(self, run_id)
    }
    fn events_after(
        &self,
        run_id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<String>, JournalError> {
        StoreReader::events_after(self, run_id, after, limit)
    }
    fn runs(&self) -> Result<Vec<RunSummary>, JournalError> {
        StoreReader::runs(self)
    }
}

/// A borrowed reader reads as the reader (callers holding a
/// `&JournalReader` pass `&reader` as they did when the functions took
/// `&JournalReader`).
impl<R: StoreReads + ?Sized> StoreReads for &R {
    fn run_status(&self, run_id: &str) -> Result<Option<RunSummary>, JournalError> {
        R::run_status(self, run_id)
    }
    fn events_after(
        &self,
        run_id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<String>, JournalError> {
        R::events_after(self, run_id, after, limit)
    }
    fn runs(&self) -> Result<Vec<RunSummary>, JournalError> {
        R::runs(self)
    }
}

/// A shared reader reads as the reader (callers holding an `Arc` pass
/// `&arc` as they did when the functions took `&JournalReader`).
impl<R: StoreReads + ?Sized> StoreReads for Arc<R> {
    fn run_status(&self, run_id: &str) -> Result<Option<RunSummary>, JournalError> {
        R::run_status(self, run_id)
    }
    fn events_after(
        &self,
        run_id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<String>, JournalError> {
        R::events_after(self, run_id, after, limit)
    }
    fn runs(&self) -> Result<Vec<RunSummary>, JournalError> {
        R::runs(self)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    /// What `text` parses to: `Ok` with the location's `Debug` (a SQLite
    /// path, or the URL without its password), or the error.
    fn check(text: &str, expected: Result<&str, StoreLocationError>) {
        let parsed = StoreLocation::parse(text);
        let got = parsed.clone().map(|l| format!("{l:?}"));
        assert_eq!(got, expected.map(str::to_owned), "{text:?}");
        let shown = match &parsed {
            Ok(location) => format!("{location} {location:?}"),
            Err(e) => e.to_string(),
        };
        // Neither a location nor a refusal shows the password.
        assert!(!shown.contains("secret"), "{text:?}: {shown}");
    }

    /// The PostgreSQL locations: parsed by the driver with the feature
    /// `postgres`, refused naming the feature without it.
    #[cfg(feature = "postgres")]
    fn postgres_cases() -> Vec<(&'static str, Result<&'static str, StoreLocationError>)> {
        use crate::postgres::PgUrlError;
        vec![
            (
                "postgres://u:secret@localhost/keel",
                Ok(r#"Postgres(PgUrl("postgres://u:***@localhost/keel"))"#),
            ),
            (
                "postgresql://u:secret@localhost/keel",
                Ok(r#"Postgres(PgUrl("postgresql://u:***@localhost/keel"))"#),
            ),
            (
                "POSTGRES://u:secret@localhost/keel",
                Ok(r#"Postgres(PgUrl("postgres://u:***@localhost/keel"))"#),
            ),
            (
                "PostgreSQL://localhost",
                Ok(r#"Postgres(PgUrl("postgresql://localhost"))"#),
            ),
            (
                "postgres://u:secret@localhost:notaport/keel",
                Err(StoreLocationError::Postgres(PgUrlError::Invalid {
                    len: 43,
                })),
            ),
        ]
    }

    #[cfg(not(feature = "postgres"))]
    fn postgres_cases() -> Vec<(&'static str, Result<&'static str, StoreLocationError>)> {
        use StoreLocationError::PostgresNotBuilt;
        vec![
            ("postgres://u:secret@localhost/keel", Err(PostgresNotBuilt)),
            (
                "postgresql://u:secret@localhost/keel",
                Err(PostgresNotBuilt),
            ),
            ("POSTGRES://u:secret@localhost/keel", Err(PostgresNotBuilt)),
            ("PostgreSQL://localhost", Err(PostgresNotBuilt)),
        ]
    }

    #[test]
    fn locations_parse_by_scheme() {
        use StoreLocationError::*;
        let unknown = |s: &str| UnknownScheme {
            scheme: s.to_owned(),
        };
        let mut cases: Vec<(&str, Result<&str, StoreLocationError>)> = vec![
            ("keel.db", Ok(r#"Sqlite("keel.db")"#)),
            (
                "/var/lib/keel/keel.db",
                Ok(r#"Sqlite("/var/lib/keel/keel.db")"#),
            ),
            ("./runs/keel.db", Ok(r#"Sqlite("./runs/keel.db")"#)),
            ("postgres.db", Ok(r#"Sqlite("postgres.db")"#)),
            ("postgres:/x", Ok(r#"Sqlite("postgres:/x")"#)),
            ("dir/postgres://x", Ok(r#"Sqlite("dir/postgres://x")"#)),
            ("1pg://x", Ok(r#"Sqlite("1pg://x")"#)),
            ("://x", Ok(r#"Sqlite("://x")"#)),
            ("C://keel.db", Ok(r#"Sqlite("C://keel.db")"#)),
            ("", Err(Empty)),
            ("postgress://u:secret@h/k", Err(unknown("postgress"))),
            ("mysql://u:secret@h/k", Err(unknown("mysql"))),
            ("sqlite://keel.db", Err(unknown("sqlite"))),
            ("a+b-c.d://secret", Err(unknown("a+b-c.d"))),
        ];
        cases.extend(postgres_cases());
        for (text, expected) in cases {
            check(text, expected);
        }
        let long = format!("{}://secret", "s".repeat(100));
        check(&long, Err(unknown(&"s".repeat(32))));
    }

    /// A SQLite store through `Store` and `StoreReader`: what it journals
    /// is what its reader (and the journal's own reader) reads, claims and
    /// recovery answer as the journal does.
    #[tokio::test]
    async fn a_sqlite_store_reads_back_what_it_journals() {
        let dir = std::env::temp_dir().join(format!("keel-store-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let location = StoreLocation::parse(dir.join("keel.db").to_str().unwrap()).unwrap();
        assert!(StoreReader::open(&location).is_err(), "nothing there yet");
        let store = Store::open(&location, JournalConfig::default()).unwrap();
        assert_eq!(store.location(), location);
        assert_eq!(store.name(), "sqlite");
        assert!(crate::valid_host_id(store.host_id()));
        assert_eq!(store.claim_run("run_1").unwrap(), RunClaim::Claimed);
        let lines = [
            r#"{"kind":"run.started","payload":{},"run_id":"run_1","seq":1,"ts":10}"#,
            r#"{"kind":"run.completed","payload":{},"run_id":"run_1","seq":2,"ts":20}"#,
        ];
        let events: Vec<Arc<Event>> = lines
            .iter()
            .map(|l| Arc::new(Event::decode(l).unwrap()))
            .collect();
        store.observe(&events[0]).await.unwrap();
        store.observe_batch(&events[1..]).await.unwrap();
        assert_eq!(store.stats().stored, 2);
        let reader = store.reader().unwrap();
        assert_eq!(reader.location(), location);
        let run = RunId::parse("run_1").unwrap();
        let summary = reader.run_status("run_1").unwrap().unwrap();
        assert_eq!(
            (summary.last_seq, summary.status),
            (2, RunStatus::Completed)
        );
        assert_eq!(reader.all_lines_after("run_1", 0).unwrap(), lines);
        assert_eq!(reader.events_within("run_1", 1, 10, 0).unwrap(), lines[1..]);
        assert_eq!(reader.runs().unwrap(), vec![summary.clone()]);
        let page = reader.runs_page(&RunsQuery::first(10)).unwrap();
        assert_eq!(page.runs.len(), 1);
        assert_eq!(reader.totals().unwrap(), reader.summed_totals().unwrap());
        assert_eq!(
            reader.last_numbered_run("run_", None).unwrap(),
            Some(summary)
        );
        let stored = RunHistory::stored(&reader, &run).unwrap().unwrap();
        assert_eq!(stored.last_seq(), 2);
        assert_eq!(reader.read_after(&run, 0, 10).unwrap().len(), 2);
        assert_eq!(RunHistory::name(&reader), "sqlite");
        let journal_reader = JournalReader::open(location.sqlite_path().unwrap()).unwrap();
        let borrowed: &JournalReader = &journal_reader;
        assert_eq!(
            StoreReads::events_after(&borrowed, "run_1", 0, 1).unwrap(),
            lines[..1]
        );
        let own = StoreReader::open(&location).unwrap();
        assert_eq!(
            StoreReads::events_after(&Arc::new(own), "run_1", 0, 1).unwrap(),
            lines[..1]
        );
        assert_eq!(store.claim_run("run_1").unwrap(), RunClaim::Journaled);
        assert_eq!(store.claim_run("run_2").unwrap(), RunClaim::Claimed);
        assert!(store.release_claim("run_2").unwrap());
        assert!(store.recover_abandoned().unwrap().recovered.is_empty());
        drop(reader);
        store.close().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_sqlite_location_shows_its_path() {
        let location = StoreLocation::parse("runs/keel.db").unwrap();
        assert_eq!(location.to_string(), "runs/keel.db");
        assert_eq!(
            StoreLocation::from(PathBuf::from("postgres://x")).sqlite_path(),
            Some(Path::new("postgres://x")),
            "a path is a path"
        );
    }
}
