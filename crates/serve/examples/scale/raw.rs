//! The hand-written baseline: raw rusqlite inserting the same canonical
//! lines into a database with the journal's schema and pragmas
//! (WAL, `synchronous=FULL`), in transactions of a fixed size.

use keel_eventlog::Event;
use keel_observers::journal::{JournalConfig, SqliteJournal};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Opens `path` with the journal's schema (the journal creates it, then is
/// closed) and the journal's durability pragmas.
pub fn open(path: &Path) -> Result<rusqlite::Connection, Box<dyn std::error::Error + Send + Sync>> {
    SqliteJournal::open(path, JournalConfig::default())?.close()?;
    let conn = rusqlite::Connection::open(path)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    Ok(conn)
}

/// Inserts every run's events, run after run, in transactions of `batch`
/// (each committed with an fsync), under fresh run ids (`tag` + the run's
/// own id). Returns the time taken.
pub fn write(
    conn: &mut rusqlite::Connection,
    runs: &[Vec<Arc<Event>>],
    batch: usize,
    tag: &str,
) -> Result<Duration, rusqlite::Error> {
    let started = Instant::now();
    for run in runs {
        let Some(first) = run.first() else { continue };
        let run_id = format!("{tag}{}", first.run_id().as_str());
        for chunk in run.chunks(batch.max(1)) {
            let tx = conn.transaction()?;
            {
                let mut insert = tx.prepare_cached(
                    "INSERT INTO events (run_id, seq, kind, ts, line) VALUES (?1, ?2, ?3, ?4, ?5)",
                )?;
                for e in chunk {
                    insert.execute(rusqlite::params![
                        run_id,
                        e.seq() as i64,
                        e.kind().to_string(),
                        e.ts() as i64,
                        e.line()
                    ])?;
                }
            }
            tx.commit()?;
        }
    }
    Ok(started.elapsed())
}
