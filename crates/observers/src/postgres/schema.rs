//! The PostgreSQL schema: versioned migrations in `keel_schema`, checked
//! before anything is written.
//!
//! Version 1 holds the tables (`keel_schema`, `runs`, `events`,
//! `owners`); version 2 adds the listing indexes and the `tombstones`
//! table. A new database is created at version 1 and migrated forward in
//! the same transaction, so creation and an upgrade run the same
//! statements. Hosts opening one database at once are serialized by a
//! transaction-level advisory lock ([`MIGRATION_LOCK`]).

use super::{PgUrl, pg_error};
use crate::journal::JournalError;
use postgres::GenericClient;

/// The schema version this build writes; it reads every version from 1.
pub const PG_SCHEMA_VERSION: u32 = 2;

/// The advisory lock key (`pg_advisory_xact_lock`) that serializes
/// migrations: "keelmigr" as a big-endian integer.
const MIGRATION_LOCK: i64 = 0x6b65_656c_6d69_6772;

/// The tables of version 1. Ids sort bytewise (`COLLATE "C"`) as in
/// SQLite, so cursors and `last_numbered_run` ranges agree on both stores.
const CREATE_V1: &str = r#"
CREATE TABLE keel_schema (
    version INTEGER NOT NULL,
    events  TEXT    NOT NULL
);
CREATE TABLE runs (
    run_id        TEXT COLLATE "C" PRIMARY KEY,
    last_seq      BIGINT NOT NULL CHECK (last_seq >= 0),
    status        TEXT   NOT NULL CHECK (status IN ('running', 'completed', 'failed', 'cancelled')),
    started_ts    BIGINT NOT NULL,
    updated_ts    BIGINT NOT NULL,
    turns         BIGINT NOT NULL DEFAULT 0,
    input_tokens  BIGINT NOT NULL DEFAULT 0,
    output_tokens BIGINT NOT NULL DEFAULT 0,
    conversation  TEXT COLLATE "C" NOT NULL
);
CREATE TABLE events (
    run_id TEXT COLLATE "C" NOT NULL,
    seq    BIGINT NOT NULL,
    kind   TEXT   NOT NULL,
    ts     BIGINT NOT NULL,
    line   TEXT   NOT NULL,
    PRIMARY KEY (run_id, seq)
);
CREATE TABLE owners (
    run_id TEXT COLLATE "C" PRIMARY KEY,
    host   TEXT NOT NULL
);
INSERT INTO keel_schema (version, events) VALUES (1, 'keel.events/1');
"#;

/// Version 1 to 2: the run list's indexes (a page of `GET /v1/runs` reads
/// from its cursor in the list's order, alone or under a status or a
/// conversation filter) and the deletion tombstones.
const V1_TO_V2: &str = r#"
CREATE INDEX runs_by_start ON runs (started_ts, run_id);
CREATE INDEX runs_by_status ON runs (status, started_ts, run_id);
CREATE INDEX runs_by_conversation ON runs (conversation, started_ts, run_id);
CREATE TABLE tombstones (
    run_id     TEXT COLLATE "C" PRIMARY KEY,
    deleted_ts BIGINT NOT NULL,
    who        TEXT   NOT NULL,
    events     BIGINT NOT NULL
);
"#;

/// `MIGRATIONS[i]` takes a database from version `i + 1` to `i + 2`.
const MIGRATIONS: [&str; (PG_SCHEMA_VERSION - 1) as usize] = [V1_TO_V2];

/// What a database holds, as far as the schema goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    /// None of the journal's tables.
    Empty,
    /// A Keel journal at this version (at most [`PG_SCHEMA_VERSION`]).
    Journal(u32),
}

/// Reads the schema version without writing anything; refuses a newer
/// version and a database holding tables of the journal's names without
/// `keel_schema`.
pub(crate) fn inspect(client: &mut impl GenericClient, url: &PgUrl) -> Result<Found, JournalError> {
    let err = |op| pg_error(url, op);
    let row = client
        .query_one(
            "SELECT to_regclass('keel_schema') IS NOT NULL, \
             to_regclass('runs') IS NOT NULL OR to_regclass('events') IS NOT NULL \
             OR to_regclass('owners') IS NOT NULL",
            &[],
        )
        .map_err(err("look for keel_schema"))?;
    let (has_schema, has_tables): (bool, bool) = (row.get(0), row.get(1));
    if !has_schema {
        if has_tables {
            return Err(invalid(
                url,
                "tables named runs, events or owners exist but keel_schema does not: not a Keel journal",
            ));
        }
        return Ok(Found::Empty);
    }
    let rows = client
        .query("SELECT version, events FROM keel_schema", &[])
        .map_err(err("read keel_schema"))?;
    let [row] = rows.as_slice() else {
        return Err(invalid(url, "keel_schema must hold exactly one row"));
    };
    let (Ok(version), Ok(events)) = (row.try_get::<_, i32>(0), row.try_get::<_, String>(1)) else {
        return Err(invalid(
            url,
            "keel_schema.version is not an integer or events not text",
        ));
    };
    let version = u32::try_from(version)
        .ok()
        .filter(|v| *v >= 1)
        .ok_or_else(|| invalid(url, "keel_schema.version is below 1"))?;
    if version > PG_SCHEMA_VERSION {
        return Err(JournalError::PostgresNewerSchema {
            database: url.to_string(),
            found: version,
            supported: PG_SCHEMA_VERSION,
        });
    }
    if events != "keel.events/1" {
        return Err(invalid(url, "keel_schema.events is not keel.events/1"));
    }
    Ok(Found::Journal(version))
}

/// Creates the schema, or migrates an older one, in one transaction under
/// the migration lock (re-reading the version under it).
pub(crate) fn ensure(client: &mut postgres::Client, url: &PgUrl) -> Result<(), JournalError> {
    if inspect(client, url)? == Found::Journal(PG_SCHEMA_VERSION) {
        return Ok(());
    }
    let err = |op| pg_error(url, op);
    let mut tx = client.transaction().map_err(err("begin the migration"))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .map_err(err("take the migration lock"))?;
    let from = match inspect(&mut tx, url)? {
        Found::Empty => {
            tx.batch_execute(CREATE_V1)
                .map_err(err("create the schema"))?;
            1
        }
        Found::Journal(version) => version,
    };
    migrate(&mut tx, url, from)?;
    tx.commit().map_err(err("commit the migration"))
}

/// Runs the migrations from version `from` up to [`PG_SCHEMA_VERSION`].
fn migrate(client: &mut impl GenericClient, url: &PgUrl, from: u32) -> Result<(), JournalError> {
    let err = |op| pg_error(url, op);
    for (index, step) in MIGRATIONS.iter().enumerate() {
        let to = u32::try_from(index).unwrap_or(u32::MAX).saturating_add(2);
        if to <= from {
            continue;
        }
        client
            .batch_execute(step)
            .map_err(err("migrate the schema"))?;
        let version = i32::try_from(to).unwrap_or(i32::MAX);
        client
            .execute("UPDATE keel_schema SET version = $1", &[&version])
            .map_err(err("record the schema version"))?;
    }
    Ok(())
}

fn invalid(url: &PgUrl, detail: &str) -> JournalError {
    JournalError::PostgresSchema {
        database: url.to_string(),
        detail: detail.to_owned(),
    }
}
