//! The writer thread: owns the read-write connection, turns everything
//! queued into one transaction, commits, then acknowledges.

use super::request::{Applied, Request, fill_batch};
use super::{RunStatus, RunTotals, StatsCell};
use crate::observer::{BatchError, ObserverError};
use keel_eventlog::{Event, Payload, Phase, Scope};
use keel_message::RunId;
use rusqlite::{Connection, OptionalExtension, params};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TryRecvError;

/// How long the writer polls for the next request before parking.
const SPIN: Duration = Duration::from_micros(50);

/// Above this many cached runs the cache is dropped and reloaded lazily.
const CACHE_MAX_RUNS: usize = 65_536;

const SELECT_RUN: &str = "SELECT last_seq, status, started_ts, updated_ts, \
     turns, input_tokens, output_tokens FROM runs WHERE run_id = ?1";
const SELECT_LINE: &str = "SELECT line FROM events WHERE run_id = ?1 AND seq = ?2";
const INSERT_EVENT: &str =
    "INSERT INTO events (run_id, seq, kind, ts, line) VALUES (?1, ?2, ?3, ?4, ?5)";
/// A new row is its own conversation until [`SET_CONVERSATION`] says
/// otherwise (a `run.started` that continues another run).
const UPSERT_RUN: &str = "INSERT INTO runs (run_id, last_seq, status, started_ts, updated_ts, \
     turns, input_tokens, output_tokens, conversation) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?1) \
     ON CONFLICT (run_id) DO UPDATE SET last_seq = excluded.last_seq, \
     status = excluded.status, updated_ts = excluded.updated_ts, turns = excluded.turns, \
     input_tokens = excluded.input_tokens, output_tokens = excluded.output_tokens";
/// A run that continues `?2` is in `?2`'s conversation (`?2` itself when
/// `?2` is not stored: the same root the version 4 migration computes).
const SET_CONVERSATION: &str = "UPDATE runs SET conversation = \
     COALESCE((SELECT p.conversation FROM runs p WHERE p.run_id = ?2), ?2) WHERE run_id = ?1";
/// `run.started` makes the host that journals it the run's owner.
const UPSERT_OWNER: &str = "INSERT INTO owners (run_id, host) VALUES (?1, ?2) \
     ON CONFLICT (run_id) DO UPDATE SET host = excluded.host";
/// A run that ended has no owner: `owners` only lists running runs.
const DELETE_OWNER: &str = "DELETE FROM owners WHERE run_id = ?1";

/// What the journal holds for one run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RunState {
    pub(crate) last_seq: u64,
    pub(crate) status: RunStatus,
    pub(crate) started_ts: u64,
    pub(crate) updated_ts: u64,
    pub(crate) totals: RunTotals,
}

/// The state of a run with nothing stored.
pub(crate) const NEW_RUN: RunState = RunState {
    last_seq: 0,
    status: RunStatus::Running,
    started_ts: 0,
    updated_ts: 0,
    totals: RunTotals {
        turns: 0,
        input_tokens: 0,
        output_tokens: 0,
    },
};

/// `totals` after `event`: a `turn.started` counts a turn, a
/// `model.completed` adds its usage (saturating: usage counts are at most
/// 2^53 − 1 each, so only an absurd number of calls could reach the top).
pub(crate) fn counted(totals: RunTotals, event: &Event) -> RunTotals {
    let mut t = totals;
    match event.kind().name().as_ref() {
        "turn.started" => t.turns = t.turns.saturating_add(1),
        "model.completed" => {
            if let Ok(Payload::ModelCompleted(done)) = event.payload()
                && let Some(usage) = done.usage
            {
                t.input_tokens = t.input_tokens.saturating_add(usage.input_tokens());
                t.output_tokens = t.output_tokens.saturating_add(usage.output_tokens());
            }
        }
        _ => {}
    }
    t
}

/// A `run.started` (seq 1) that continues another run.
pub(crate) struct Continued<'e> {
    pub(crate) run: &'e str,
    pub(crate) previous: RunId,
}

/// The run `event` continues, when it is a `run.started` at seq 1 that
/// names one. A duplicate or refused event is filtered out by the caller
/// (only runs stored in this transaction are updated; an already stored
/// run's seq 1 is never stored again).
pub(crate) fn continued(event: &Event) -> Option<Continued<'_>> {
    if event.seq() != 1 || event.kind().name().as_ref() != "run.started" {
        return None;
    }
    match event.payload() {
        Ok(Payload::RunStarted(started)) => started.continues.map(|previous| Continued {
            run: event.run_id().as_str(),
            previous,
        }),
        _ => None,
    }
}

/// A `runs` row as SQLite returns it, before its values are checked.
struct StoredRow {
    last_seq: i64,
    status: String,
    started_ts: i64,
    updated_ts: i64,
    turns: i64,
    input_tokens: i64,
    output_tokens: i64,
}

/// A transaction that did not commit: which step failed and why.
#[derive(Debug)]
struct TxError {
    op: &'static str,
    cause: String,
}

fn at(op: &'static str) -> impl FnOnce(rusqlite::Error) -> TxError {
    move |e| TxError {
        op,
        cause: e.to_string(),
    }
}

/// The fate of one event inside a transaction that commits.
enum Outcome {
    /// Inserted.
    Stored,
    /// Already stored with the same bytes.
    Duplicate,
    /// Refused (conflict, gap, out of range); nothing written for it.
    Refused(ObserverError),
}

pub(crate) struct Writer {
    pub(crate) path: PathBuf,
    pub(crate) conn: Connection,
    pub(crate) rx: mpsc::Receiver<Request>,
    pub(crate) max_batch: usize,
    pub(crate) max_batch_bytes: usize,
    pub(crate) stats: Arc<StatsCell>,
    /// This host's id, recorded as the owner of the runs it starts.
    host: Arc<str>,
    /// Committed state of runs this writer has touched or looked up. Valid
    /// while no other connection commits: checked with `data_version` at
    /// the start of every transaction.
    cache: HashMap<Box<str>, RunState>,
    /// Past this many cached runs the cache is dropped (memory bound);
    /// [`CACHE_MAX_RUNS`] but for tests.
    cache_max_runs: usize,
    data_version: Option<i64>,
}

impl Writer {
    pub(crate) fn new(
        path: PathBuf,
        conn: Connection,
        rx: mpsc::Receiver<Request>,
        max_batch: usize,
        max_batch_bytes: usize,
        stats: Arc<StatsCell>,
        host: Arc<str>,
    ) -> Writer {
        Writer {
            path,
            conn,
            rx,
            max_batch,
            max_batch_bytes,
            stats,
            host,
            cache: HashMap::new(),
            cache_max_runs: CACHE_MAX_RUNS,
            data_version: None,
        }
    }

    /// Runs until every sender is gone and the queue is drained, then
    /// closes the connection (which checkpoints the WAL).
    pub(crate) fn run(mut self) -> Result<(), super::JournalError> {
        let mut batch: Vec<Request> = Vec::with_capacity(self.max_batch.min(4096));
        while let Some(first) = self.next_request() {
            fill_batch(
                &mut batch,
                first,
                &mut self.rx,
                self.max_batch,
                self.max_batch_bytes,
            );
            self.process(&mut batch);
        }
        let path = self.path;
        self.conn
            .close()
            .map_err(|(_, source)| super::JournalError::Sqlite {
                path,
                op: "close the writer connection",
                source,
            })
    }

    /// The next request: polls for up to [`SPIN`] (yielding the CPU between
    /// polls) before parking. A run offers its next event as soon as it has
    /// its ack, so the request usually arrives within microseconds; catching
    /// it without a park/unpark round trip saves a thread wake-up per commit.
    fn next_request(&mut self) -> Option<Request> {
        let deadline = Instant::now() + SPIN;
        loop {
            match self.rx.try_recv() {
                Ok(request) => return Some(request),
                Err(TryRecvError::Disconnected) => return None,
                Err(TryRecvError::Empty) if Instant::now() < deadline => {
                    std::thread::yield_now();
                }
                Err(TryRecvError::Empty) => return self.rx.blocking_recv(),
            }
        }
    }

    /// Commits `batch` in one transaction and acknowledges every request,
    /// only after the commit. If the transaction fails as a whole, each
    /// request is retried in a transaction of its own, so one poisonous
    /// request cannot take the others down with it; a request whose own
    /// transaction fails is refused whole (a batch acknowledges nothing).
    fn process(&mut self, batch: &mut Vec<Request>) {
        match self.transaction(batch) {
            Ok(applied) => {
                self.count_commit(&applied);
                for (request, applied) in batch.drain(..).zip(applied) {
                    request.ack.send(applied.into_result());
                }
            }
            Err(error) => {
                self.abort();
                if batch.len() == 1 {
                    for request in batch.drain(..) {
                        self.refuse(request, &error);
                    }
                    return;
                }
                for request in batch.drain(..) {
                    match self.transaction(std::slice::from_ref(&request)) {
                        Ok(applied) => {
                            self.count_commit(&applied);
                            let result = applied
                                .into_iter()
                                .next()
                                .map_or(Ok(()), Applied::into_result);
                            request.ack.send(result);
                        }
                        Err(error) => {
                            self.abort();
                            self.refuse(request, &error);
                        }
                    }
                }
            }
        }
    }

    /// Answers a request whose transaction failed: nothing of it committed.
    fn refuse(&self, request: Request, error: &TxError) {
        self.stats.count_failed(request.events.len());
        request.ack.send(Err(BatchError {
            acknowledged: 0,
            source: self.failure(error),
        }));
    }

    fn count_commit(&self, applied: &[Applied]) {
        self.stats.count_commit(applied);
    }

    fn failure(&self, error: &TxError) -> ObserverError {
        ObserverError::Failed(format!(
            "sqlite journal {}: {} failed, nothing was committed: {}",
            self.path.display(),
            error.op,
            error.cause
        ))
    }

    /// Rolls back whatever is open and forgets cached state (after a
    /// failed commit SQLite may or may not have kept the transaction).
    fn abort(&mut self) {
        if !self.conn.is_autocommit() {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
        self.cache.clear();
        self.data_version = None;
    }

    /// One `BEGIN IMMEDIATE … COMMIT` over `requests`. `Ok` means
    /// committed; the outcomes are in request order.
    fn transaction<'e>(&mut self, requests: &'e [Request]) -> Result<Vec<Applied>, TxError> {
        self.conn
            .execute_batch("BEGIN IMMEDIATE")
            .map_err(at("begin transaction"))?;
        // Another connection's commit invalidates the cache.
        let version: i64 = self
            .conn
            .query_row("PRAGMA data_version", [], |r| r.get(0))
            .map_err(at("read data_version"))?;
        if self.data_version != Some(version) {
            self.cache.clear();
            self.data_version = Some(version);
        }
        let mut pending: HashMap<&'e str, RunState> = HashMap::new();
        let mut outcomes = Vec::with_capacity(requests.len());
        for request in requests {
            outcomes.push(self.apply_request(&request.events, &mut pending)?);
        }
        let continued: Vec<Continued<'e>> = requests
            .iter()
            .flat_map(|r| r.events.iter())
            .filter_map(|e| continued(e))
            .filter(|c| pending.contains_key(c.run))
            .collect();
        {
            let mut upsert = self
                .conn
                .prepare_cached(UPSERT_RUN)
                .map_err(at("prepare the runs update"))?;
            for (run, state) in &pending {
                upsert
                    .execute(params![
                        run,
                        sql_int(state.last_seq),
                        state.status.as_str(),
                        sql_int(state.started_ts),
                        sql_int(state.updated_ts),
                        sql_int(state.totals.turns),
                        sql_int(state.totals.input_tokens),
                        sql_int(state.totals.output_tokens),
                    ])
                    .map_err(at("update runs"))?;
            }
        }
        self.record_conversations(&continued)?;
        self.conn.execute_batch("COMMIT").map_err(at("commit"))?;
        for (run, state) in pending {
            if state.status == RunStatus::Running {
                self.cache.insert(run.into(), state);
            } else {
                // Ended runs take no more events; reload if ever needed.
                self.cache.remove(run);
            }
        }
        if self.cache.len() > self.cache_max_runs {
            self.cache.clear();
        }
        Ok(outcomes)
    }

    /// Puts each run of `continued` (in commit order, so a chain within
    /// one transaction resolves) in the conversation of the run it
    /// continues.
    fn record_conversations(&self, continued: &[Continued<'_>]) -> Result<(), TxError> {
        if continued.is_empty() {
            return Ok(());
        }
        let mut update = self
            .conn
            .prepare_cached(SET_CONVERSATION)
            .map_err(at("prepare the conversation update"))?;
        for c in continued {
            update
                .execute(params![c.run, c.previous.as_str()])
                .map_err(at("record the run's conversation"))?;
        }
        Ok(())
    }

    /// Applies a request's events in order until the first refusal: the
    /// ones before it stay in the transaction, the ones after it are not
    /// looked at.
    fn apply_request<'e>(
        &mut self,
        events: &'e [Arc<Event>],
        pending: &mut HashMap<&'e str, RunState>,
    ) -> Result<Applied, TxError> {
        let mut applied = Applied::default();
        for event in events {
            match self.apply(event, pending)? {
                Outcome::Stored => applied.stored += 1,
                Outcome::Duplicate => applied.duplicates += 1,
                Outcome::Refused(error) => {
                    applied.refused = Some(error);
                    break;
                }
            }
        }
        Ok(applied)
    }

    /// Checks one event against its run's stored state and inserts it.
    fn apply<'e>(
        &mut self,
        event: &'e Event,
        pending: &mut HashMap<&'e str, RunState>,
    ) -> Result<Outcome, TxError> {
        let run = event.run_id().as_str();
        let state = match pending.get(run) {
            Some(state) => *state,
            None => match self.cache.get(run) {
                Some(state) => *state,
                None => {
                    let state = self.load(run)?;
                    self.cache.insert(run.into(), state);
                    state
                }
            },
        };
        let seq = event.seq();
        let (Ok(seq_sql), Ok(ts_sql)) = (i64::try_from(seq), i64::try_from(event.ts())) else {
            return Ok(Outcome::Refused(ObserverError::Failed(format!(
                "sqlite journal: run {run} seq {seq}: seq or ts exceeds the SQLite integer range"
            ))));
        };
        if seq <= state.last_seq {
            return self.stored(event, seq_sql, state.last_seq);
        }
        if seq != state.last_seq + 1 {
            return Ok(Outcome::Refused(ObserverError::Gap {
                run_id: run.to_owned(),
                last_stored: state.last_seq,
                seq,
            }));
        }
        self.conn
            .prepare_cached(INSERT_EVENT)
            .map_err(at("prepare the event insert"))?
            .execute(params![
                run,
                seq_sql,
                event.kind().name().as_ref(),
                ts_sql,
                event.line()
            ])
            .map_err(at("insert the event"))?;
        let status = self.track_owner(event)?.unwrap_or(state.status);
        let started_ts = if state.last_seq == 0 {
            event.ts()
        } else {
            state.started_ts
        };
        pending.insert(
            run,
            RunState {
                last_seq: seq,
                status,
                started_ts,
                updated_ts: state.updated_ts.max(event.ts()),
                totals: counted(state.totals, event),
            },
        );
        Ok(Outcome::Stored)
    }

    /// The outcome of an event at or below the run's `last_seq`: the same
    /// bytes are a duplicate, other bytes a conflict.
    fn stored(&self, event: &Event, seq_sql: i64, last_seq: u64) -> Result<Outcome, TxError> {
        let run = event.run_id().as_str();
        let seq = event.seq();
        let stored: Option<String> = self
            .conn
            .prepare_cached(SELECT_LINE)
            .map_err(at("prepare the event lookup"))?
            .query_row(params![run, seq_sql], |r| r.get(0))
            .optional()
            .map_err(at("read a stored event"))?;
        Ok(match stored {
            Some(line) if line == event.line() => Outcome::Duplicate,
            Some(_) => Outcome::Refused(ObserverError::Conflict {
                run_id: run.to_owned(),
                seq,
            }),
            None => Outcome::Refused(ObserverError::Failed(format!(
                "sqlite journal: run {run} records last_seq {last_seq} but holds no seq {seq}"
            ))),
        })
    }

    /// Keeps `owners` in step with a stored event: `run.started` makes this
    /// host the owner, the run's terminal removes the row. Returns the
    /// run's new status when the event ends it.
    fn track_owner(&self, event: &Event) -> Result<Option<RunStatus>, TxError> {
        let run = event.run_id().as_str();
        match event.kind().lifecycle_parts() {
            Some((Scope::Run, Phase::Started)) => {
                self.conn
                    .prepare_cached(UPSERT_OWNER)
                    .map_err(at("prepare the owner update"))?
                    .execute(params![run, &*self.host])
                    .map_err(at("record the run's owner"))?;
                Ok(None)
            }
            Some((Scope::Run, Phase::Ended(terminal))) => {
                self.conn
                    .prepare_cached(DELETE_OWNER)
                    .map_err(at("prepare the owner removal"))?
                    .execute([run])
                    .map_err(at("remove the run's owner"))?;
                Ok(Some(RunStatus::from(terminal)))
            }
            _ => Ok(None),
        }
    }

    /// The committed state of `run` (a new run when absent).
    fn load(&self, run: &str) -> Result<RunState, TxError> {
        let row: Option<StoredRow> = self
            .conn
            .prepare_cached(SELECT_RUN)
            .map_err(at("prepare the run lookup"))?
            .query_row([run], |r| {
                Ok(StoredRow {
                    last_seq: r.get(0)?,
                    status: r.get(1)?,
                    started_ts: r.get(2)?,
                    updated_ts: r.get(3)?,
                    turns: r.get(4)?,
                    input_tokens: r.get(5)?,
                    output_tokens: r.get(6)?,
                })
            })
            .optional()
            .map_err(at("read the run's last_seq"))?;
        let Some(StoredRow {
            last_seq,
            status,
            started_ts,
            updated_ts,
            turns,
            input_tokens,
            output_tokens,
        }) = row
        else {
            return Ok(NEW_RUN);
        };
        let corrupt = |what: &str| TxError {
            op: "read the run's last_seq",
            cause: format!("runs row of {run} is corrupt: {what}"),
        };
        Ok(RunState {
            last_seq: u64::try_from(last_seq).map_err(|_| corrupt("last_seq"))?,
            status: RunStatus::parse(&status).ok_or_else(|| corrupt("status"))?,
            started_ts: u64::try_from(started_ts).map_err(|_| corrupt("started_ts"))?,
            updated_ts: u64::try_from(updated_ts).map_err(|_| corrupt("updated_ts"))?,
            totals: RunTotals {
                turns: u64::try_from(turns).map_err(|_| corrupt("turns"))?,
                input_tokens: u64::try_from(input_tokens).map_err(|_| corrupt("input_tokens"))?,
                output_tokens: u64::try_from(output_tokens)
                    .map_err(|_| corrupt("output_tokens"))?,
            },
        })
    }
}

/// Values checked to fit when the event was applied; saturates otherwise.
fn sql_int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;
    use crate::journal::JournalConfig;

    /// A writer on a fresh journal file in the temp dir (removed on drop).
    struct Fixture {
        writer: Writer,
        dir: PathBuf,
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    fn fixture(tag: &str) -> Fixture {
        let dir = std::env::temp_dir().join(format!(
            "keel-writer-{tag}-{}-{:?}",
            std::process::id(),
            Instant::now()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("keel.db");
        let conn = super::super::open_writer(&path, &JournalConfig::default()).unwrap();
        let (_queue, rx) = mpsc::channel(1);
        let writer = Writer::new(path, conn, rx, 8, 1 << 20, Arc::default(), Arc::from("h0"));
        Fixture { writer, dir }
    }

    fn event(run: &str, seq: u64, kind: &str) -> Arc<Event> {
        let line = format!(
            r#"{{"kind":"{kind}","payload":{{}},"run_id":"{run}","seq":{seq},"ts":{seq}}}"#
        );
        Arc::new(Event::decode(&line).unwrap())
    }

    /// Commits `events` in one transaction of one request.
    fn commit(writer: &mut Writer, events: &[Arc<Event>]) {
        let (request, _answer) = Request::batch(events);
        let applied = writer.transaction(std::slice::from_ref(&request)).unwrap();
        assert!(applied.iter().all(|a| a.refused.is_none()));
    }

    #[test]
    fn the_cache_keeps_running_runs_and_forgets_ended_ones() {
        let mut f = fixture("cache");
        commit(&mut f.writer, &[event("a", 1, "run.started")]);
        assert_eq!(f.writer.cache.get("a").map(|s| s.last_seq), Some(1));
        commit(&mut f.writer, &[event("a", 2, "run.completed")]);
        assert!(!f.writer.cache.contains_key("a"));
    }

    #[test]
    fn the_cache_is_dropped_past_its_bound_not_at_it() {
        let mut f = fixture("bound");
        f.writer.cache_max_runs = 2;
        for (run, cached) in [("a", 1), ("b", 2), ("c", 0)] {
            commit(&mut f.writer, &[event(run, 1, "run.started")]);
            assert_eq!(f.writer.cache.len(), cached, "after {run}");
        }
    }
}
