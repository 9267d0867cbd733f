//! A hand-written SQLite writer: the baseline `benches/run_process.rs`
//! times `keel run` against, as a whole process.
//!
//! `cargo run --release -p keel-cli --example sqlite_writer -- DB LINES [BATCH]`
//! reads LINES (canonical event lines, one per line, as `keel run --json`
//! prints them), creates the journal's tables (schema version 3) in the
//! new database DB with `journal_mode=WAL` and `synchronous=FULL`, and
//! inserts every line into `events`, BATCH (default 64) per transaction,
//! keeping the run's `runs` row (`last_seq`, `status`) in the same
//! transaction as the journal does. Nothing else: no validation beyond
//! reading each line's header, no observers, no engine.

use rusqlite::{Connection, params};
use std::error::Error;

/// The journal's tables at schema version 3 (see `keel-observers`'
/// `journal.rs`), as one script.
const SCHEMA: &str = "
CREATE TABLE keel_schema (version INTEGER NOT NULL, events TEXT NOT NULL);
CREATE TABLE runs (
    run_id TEXT PRIMARY KEY, last_seq INTEGER NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('running', 'completed', 'failed', 'cancelled')),
    started_ts INTEGER NOT NULL, updated_ts INTEGER NOT NULL,
    turns INTEGER NOT NULL DEFAULT 0, input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0);
CREATE TABLE events (
    run_id TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL,
    ts INTEGER NOT NULL, line TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)) WITHOUT ROWID;
CREATE TABLE owners (run_id TEXT PRIMARY KEY, host TEXT NOT NULL) WITHOUT ROWID;
INSERT INTO keel_schema (version, events) VALUES (3, 'keel.events/1');
";

/// What the writer reads of each line.
#[derive(Debug, serde::Deserialize)]
struct Header {
    run_id: String,
    seq: i64,
    kind: String,
    ts: i64,
}

fn status_after(kind: &str) -> &'static str {
    match kind {
        "run.completed" => "completed",
        "run.failed" => "failed",
        "run.cancelled" => "cancelled",
        _ => "running",
    }
}

fn write(conn: &mut Connection, rows: &[(Header, &str)], batch: usize) -> rusqlite::Result<()> {
    for chunk in rows.chunks(batch) {
        let tx = conn.transaction()?;
        {
            let mut insert = tx.prepare_cached(
                "INSERT INTO events (run_id, seq, kind, ts, line) VALUES (?1, ?2, ?3, ?4, ?5)",
            )?;
            for (h, line) in chunk {
                insert.execute(params![h.run_id, h.seq, h.kind, h.ts, line])?;
            }
            if let (Some((first, _)), Some((last, _))) = (chunk.first(), chunk.last()) {
                tx.execute(
                    "INSERT INTO runs (run_id, last_seq, status, started_ts, updated_ts)
                     VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT (run_id) DO UPDATE SET last_seq = ?2, status = ?3, updated_ts = ?5",
                    params![
                        last.run_id,
                        last.seq,
                        status_after(&last.kind),
                        first.ts,
                        last.ts
                    ],
                )?;
            }
        }
        tx.commit()?;
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(db), Some(lines)) = (args.first(), args.get(1)) else {
        return Err("usage: sqlite_writer DB LINES [BATCH]".into());
    };
    let batch = match args.get(2) {
        Some(b) => b.parse::<usize>()?.max(1),
        None => 64,
    };
    let text = std::fs::read_to_string(lines)?;
    let rows = text
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| Ok((serde_json::from_str::<Header>(l)?, l)))
        .collect::<Result<Vec<_>, serde_json::Error>>()?;
    let mut conn = Connection::open(db)?;
    let mode: String = conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))?;
    if mode != "wal" {
        return Err(format!("journal_mode is {mode}, not wal").into());
    }
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.execute_batch(&format!("BEGIN IMMEDIATE; {SCHEMA} COMMIT;"))?;
    write(&mut conn, &rows, batch)?;
    conn.close().map_err(|(_, e)| e)?;
    println!("{} lines, {batch} per transaction", rows.len());
    Ok(())
}
