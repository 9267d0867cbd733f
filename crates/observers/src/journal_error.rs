//! [`JournalError`]: why a durable store (the SQLite journal, and every
//! store that shares its error) could not be opened, read or written.
//!
//! Its own module, below both the journal and the deletion types
//! (`crate::deletion`, whose `DeleteError` wraps it), so neither depends
//! on the other for it.

use std::path::PathBuf;

/// Why a journal could not be opened, read or closed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    /// The database records a schema version newer than this build's. The
    /// file was not modified.
    #[error(
        "journal {path:?} has schema version {found}, newer than the {supported} this build supports; the file was left untouched"
    )]
    NewerSchema {
        /// The database.
        path: PathBuf,
        /// The version in the file.
        found: u32,
        /// [`SCHEMA_VERSION`](crate::journal::SCHEMA_VERSION).
        supported: u32,
    },
    /// No journal at the path (no file, or a database with no tables).
    #[error("no Keel journal at {path:?}")]
    NotFound {
        /// The path.
        path: PathBuf,
    },
    /// A SQLite database with tables but no `keel_schema`: someone else's
    /// database. It was not modified.
    #[error("{path:?} is a SQLite database but not a Keel journal (no keel_schema table)")]
    NotAJournal {
        /// The database.
        path: PathBuf,
    },
    /// The Keel schema is damaged (a missing table, a bad version row).
    #[error("journal {path:?}: invalid schema: {detail}")]
    InvalidSchema {
        /// The database.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// A stored value is out of range (a negative seq, an unknown status).
    #[error("journal {path:?}: corrupt row: {detail}")]
    Corrupt {
        /// The database.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// SQLite would not switch the database to WAL mode (for example on a
    /// file system without shared memory).
    #[error("journal {path:?}: journal_mode is {mode}, WAL is required")]
    WalUnavailable {
        /// The database.
        path: PathBuf,
        /// The mode SQLite kept.
        mode: String,
    },
    /// A setting out of range.
    #[error("journal config: {field} {detail}")]
    Config {
        /// The field.
        field: &'static str,
        /// The rule.
        detail: &'static str,
    },
    /// The file exists but is not a SQLite database (SQLite's
    /// `SQLITE_NOTADB`): bad input, like [`JournalError::NotAJournal`]. It
    /// was not modified.
    #[error("{path:?} is not a SQLite database (rule journal.sqlite_file), so not a Keel journal")]
    NotSqlite {
        /// The path.
        path: PathBuf,
    },
    /// A SQLite call failed.
    #[error("journal {path:?}: {op}: {source}")]
    Sqlite {
        /// The database.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// A file system call failed.
    #[error("journal {path:?}: {op}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A PostgreSQL call failed (connecting, a query, a commit). The
    /// database is named by its URL without the password, and the detail
    /// never contains the password.
    #[error("postgres journal {database}: {op}: {detail}")]
    Postgres {
        /// The database URL, password removed.
        database: String,
        /// What was being done.
        op: &'static str,
        /// The driver's or the server's message, password removed.
        detail: String,
    },
    /// The PostgreSQL database records a schema version newer than this
    /// build's. Nothing was written.
    #[error(
        "postgres journal {database} has schema version {found}, newer than the {supported} this build supports; nothing was written"
    )]
    PostgresNewerSchema {
        /// The database URL, password removed.
        database: String,
        /// The version in the database.
        found: u32,
        /// The version this build writes.
        supported: u32,
    },
    /// The PostgreSQL database is not a Keel journal (tables of the same
    /// names without `keel_schema`), its Keel schema is damaged, or a
    /// stored value is out of range. Nothing was written.
    #[error("postgres journal {database}: invalid schema or row (rule postgres.schema): {detail}")]
    PostgresSchema {
        /// The database URL, password removed.
        database: String,
        /// What is wrong.
        detail: String,
    },
    /// The writer thread could not be started.
    #[error("journal: cannot start the writer thread: {0}")]
    Spawn(#[source] std::io::Error),
    /// The writer thread panicked; events it had not acknowledged were
    /// answered with [`ObserverError::Closed`](crate::ObserverError::Closed).
    #[error("journal: the writer thread panicked")]
    WriterPanicked,
}
