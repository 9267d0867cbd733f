//! The schema: version probe (read-only, before anything is written),
//! creation, migration, and the checks shared by the writer and the reader.
//!
//! A new database is created at version 1 and migrated forward in the same
//! transaction, so creation and the migration of an existing store run the
//! same statements.

use super::JournalError;
use rusqlite::{Connection, OpenFlags, OptionalExtension};
use std::path::Path;

/// The schema version this build writes. It reads every version from 1 to
/// this one; a writer migrates an older store in place when it opens it.
pub const SCHEMA_VERSION: u32 = 5;

/// Version 1 to 2: which host owns each running run (see `hosts.rs`).
const V1_TO_V2: &str = "
CREATE TABLE owners (
    run_id TEXT PRIMARY KEY,
    host   TEXT NOT NULL
) WITHOUT ROWID;
";

/// Version 2 to 3: each run's turns and token usage, kept by the writer
/// as it stores `turn.started` and `model.completed`, so that listing runs
/// with their totals reads one row per run. The stored events are summed
/// once here.
const V2_TO_V3: &str = "
ALTER TABLE runs ADD COLUMN turns         INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN input_tokens  INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN output_tokens INTEGER NOT NULL DEFAULT 0;
UPDATE runs SET
    turns = (SELECT count(*) FROM events e
             WHERE e.run_id = runs.run_id AND e.kind = 'turn.started'),
    input_tokens = (SELECT COALESCE(SUM(json_extract(e.line, '$.payload.usage.input_tokens')), 0)
                    FROM events e WHERE e.run_id = runs.run_id AND e.kind = 'model.completed'),
    output_tokens = (SELECT COALESCE(SUM(json_extract(e.line, '$.payload.usage.output_tokens')), 0)
                     FROM events e WHERE e.run_id = runs.run_id AND e.kind = 'model.completed');
";

/// The root of each stored run's `continues` chain, from the `run.started`
/// lines (seq 1): a run that continues none is its own root; a run whose
/// previous run is not stored has that previous run as its root (what the
/// writer records, see `writer.rs`). `UNION` (not `UNION ALL`) so that a
/// malformed cycle ends the recursion. Shared by the version 4 migration
/// and by readers of older stores.
macro_rules! conversation_roots {
    () => {
        "
starts (run_id, prev) AS (
    SELECT run_id, json_extract(line, '$.payload.continues') FROM events
    WHERE seq = 1 AND kind = 'run.started'
),
chain (run_id, root) AS (
    SELECT run_id, COALESCE(prev, run_id) FROM starts
    WHERE prev IS NULL OR prev NOT IN (SELECT run_id FROM starts)
    UNION
    SELECT s.run_id, c.root FROM starts s JOIN chain c ON s.prev = c.run_id
)"
    };
}

/// [`conversation_roots!`] as a constant: the `WITH RECURSIVE` tables
/// `starts` and `chain (run_id, root)`.
pub(crate) const CONVERSATION_ROOTS: &str = conversation_roots!();

/// Version 3 to 4: listing at scale. Each run's conversation (the root of
/// its `continues` chain, chat runs included) is kept in its row, and three
/// indexes serve a page of `GET /v1/runs` from its cursor in the list's
/// order (`started_ts`, `run_id`), alone or under a `status` or a
/// `conversation` filter, without reading every row.
const V3_TO_V4: &str = concat!(
    "ALTER TABLE runs ADD COLUMN conversation TEXT;\n",
    "WITH RECURSIVE",
    conversation_roots!(),
    "
UPDATE runs SET conversation =
    COALESCE((SELECT min(root) FROM chain WHERE chain.run_id = runs.run_id), run_id);
CREATE INDEX runs_by_start ON runs (started_ts, run_id);
CREATE INDEX runs_by_status ON runs (status, started_ts, run_id);
CREATE INDEX runs_by_conversation ON runs (conversation, started_ts, run_id);
"
);

/// Version 4 to 5: deletion. What is left of a deleted run (see
/// `delete.rs`): its id, when and by whom it was deleted, and how many
/// events were removed; `keel verify` accepts a link to a run named here.
const V4_TO_V5: &str = "
CREATE TABLE tombstones (
    run_id     TEXT PRIMARY KEY,
    deleted_ts INTEGER NOT NULL,
    who        TEXT    NOT NULL,
    events     INTEGER NOT NULL
) WITHOUT ROWID;
";

/// The first version whose `runs` rows carry the totals.
pub(crate) const TOTALS_VERSION: u32 = 3;

/// The first version whose `runs` rows carry the conversation, with the
/// listing indexes.
pub(crate) const LISTING_VERSION: u32 = 4;

/// The first version with the `tombstones` table.
pub(crate) const TOMBSTONES_VERSION: u32 = 5;

/// `MIGRATIONS[i]` takes a store from version `i + 1` to `i + 2`.
const MIGRATIONS: [&str; (SCHEMA_VERSION - 1) as usize] = [V1_TO_V2, V2_TO_V3, V3_TO_V4, V4_TO_V5];

/// The tables each version must hold.
fn tables(version: u32) -> &'static [&'static str] {
    if version >= TOMBSTONES_VERSION {
        &["runs", "events", "owners", "tombstones"]
    } else if version >= 2 {
        &["runs", "events", "owners"]
    } else {
        &["runs", "events"]
    }
}

/// The DDL of version 1, run in one transaction with the version row.
const CREATE_V1: &str = "
CREATE TABLE keel_schema (
    version INTEGER NOT NULL,
    events  TEXT    NOT NULL
);
CREATE TABLE runs (
    run_id     TEXT PRIMARY KEY,
    last_seq   INTEGER NOT NULL,
    status     TEXT    NOT NULL CHECK (status IN ('running', 'completed', 'failed', 'cancelled')),
    started_ts INTEGER NOT NULL,
    updated_ts INTEGER NOT NULL
);
CREATE TABLE events (
    run_id TEXT    NOT NULL,
    seq    INTEGER NOT NULL,
    kind   TEXT    NOT NULL,
    ts     INTEGER NOT NULL,
    line   TEXT    NOT NULL,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
";

/// What a database holds, as far as the schema goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    /// No file at the path.
    Missing,
    /// A database with no tables at all (new, or its creation never
    /// committed).
    Empty,
    /// A Keel journal of this schema version or an older one (the
    /// version it records).
    Journal(u32),
}

/// Reads the schema version without writing anything: not the database
/// file, not its `-wal`, and no `-wal`/`-shm` file is created.
///
/// When no `-wal` file exists, the database file is the whole database
/// and is read with `immutable=1` (no locks, no side files). When one
/// exists (a writer is running, or one crashed), the file is opened
/// read-only: SQLite never checkpoints or rolls back from a read-only
/// connection, so neither the database nor the WAL changes (the `-shm`
/// index, which already exists in both cases, may be rebuilt).
pub(crate) fn probe(path: &Path) -> Result<Found, JournalError> {
    match std::fs::metadata(path) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Found::Missing),
        Err(source) => {
            return Err(JournalError::Io {
                path: path.to_path_buf(),
                op: "stat database file",
                source,
            });
        }
    }
    let wal = side_file(path, "-wal");
    let live = std::fs::symlink_metadata(&wal).is_ok();
    let uri = file_uri(path, if live { "mode=ro" } else { "immutable=1" });
    let sql = |op| JournalError::sql(path, op);
    let conn = Connection::open_with_flags(
        &uri,
        OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(sql("open read-only to check the schema version"))?;
    let found = inspect(&conn, path);
    // A read-only connection never checkpoints; closing it writes nothing.
    drop(conn);
    found
}

/// `path` with `suffix` appended to its file name (`-wal`, `-shm`).
pub(crate) fn side_file(path: &Path, suffix: &str) -> std::path::PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    name.into()
}

/// A `file:` URI for `path` with the given query, percent-encoding every
/// byte outside `[A-Za-z0-9/._~-]`.
fn file_uri(path: &Path, query: &str) -> String {
    use std::fmt::Write;
    let mut uri = String::from("file:");
    for &b in path.as_os_str().as_encoded_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'/' | b'.' | b'_' | b'~' | b'-') {
            uri.push(char::from(b));
        } else {
            let _ = write!(uri, "%{b:02X}");
        }
    }
    uri.push('?');
    uri.push_str(query);
    uri
}

/// Classifies an open database by its `keel_schema` table.
pub(crate) fn inspect(conn: &Connection, path: &Path) -> Result<Found, JournalError> {
    let sql = |op| JournalError::sql(path, op);
    let has_schema_table: bool = conn
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'keel_schema')",
            [],
            |r| r.get(0),
        )
        .map_err(sql("read the schema catalog"))?;
    if !has_schema_table {
        let objects: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'",
                [],
                |r| r.get(0),
            )
            .map_err(sql("read the schema catalog"))?;
        return if objects == 0 {
            Ok(Found::Empty)
        } else {
            Err(JournalError::NotAJournal {
                path: path.to_path_buf(),
            })
        };
    }
    let version: Option<i64> = conn
        .query_row("SELECT max(version) FROM keel_schema", [], |r| r.get(0))
        .optional()
        .map_err(sql("read keel_schema.version"))?
        .flatten();
    let invalid = |detail: String| JournalError::InvalidSchema {
        path: path.to_path_buf(),
        detail,
    };
    let Some(version) = version else {
        return Err(invalid("keel_schema has no version row".to_owned()));
    };
    let version = u32::try_from(version)
        .ok()
        .filter(|v| *v >= 1)
        .ok_or_else(|| invalid(format!("keel_schema.version is {version}")))?;
    if version > SCHEMA_VERSION {
        return Err(JournalError::NewerSchema {
            path: path.to_path_buf(),
            found: version,
            supported: SCHEMA_VERSION,
        });
    }
    for &table in tables(version) {
        let present: bool = conn
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1)",
                [table],
                |r| r.get(0),
            )
            .map_err(sql("read the schema catalog"))?;
        if !present {
            return Err(invalid(format!("table {table} is missing")));
        }
    }
    Ok(Found::Journal(version))
}

/// Creates the schema if the database is empty, or migrates an older one
/// to [`SCHEMA_VERSION`], inside one `BEGIN IMMEDIATE` transaction that
/// re-checks the version under the write lock (another process may have
/// created or upgraded it since the probe). A failed migration rolls back
/// whole: the store stays at its old version.
pub(crate) fn ensure(conn: &Connection, path: &Path) -> Result<(), JournalError> {
    let sql = |op| JournalError::sql(path, op);
    conn.execute_batch("BEGIN IMMEDIATE")
        .map_err(sql("begin the schema transaction"))?;
    let result = (|| {
        let from = match inspect(conn, path)? {
            Found::Journal(version) => version,
            Found::Missing | Found::Empty => {
                conn.execute_batch(CREATE_V1)
                    .map_err(sql("create the schema"))?;
                conn.execute(
                    "INSERT INTO keel_schema (version, events) VALUES (1, ?1)",
                    [keel_eventlog::SCHEMA_VERSION],
                )
                .map_err(sql("record the schema version"))?;
                1
            }
        };
        migrate(conn, path, from)?;
        conn.execute_batch("COMMIT")
            .map_err(sql("commit the schema transaction"))
    })();
    if result.is_err() && !conn.is_autocommit() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    result
}

/// Runs the migrations from version `from` to [`SCHEMA_VERSION`] inside the
/// caller's transaction.
fn migrate(conn: &Connection, path: &Path, from: u32) -> Result<(), JournalError> {
    let sql = |op| JournalError::sql(path, op);
    let start = usize::try_from(from.saturating_sub(1)).unwrap_or(usize::MAX);
    for (i, step) in MIGRATIONS.iter().enumerate().skip(start) {
        conn.execute_batch(step)
            .map_err(sql("migrate the schema"))?;
        let to = u32::try_from(i).unwrap_or(u32::MAX).saturating_add(2);
        conn.execute("UPDATE keel_schema SET version = ?1", [to])
            .map_err(sql("record the schema version"))?;
    }
    Ok(())
}
