//! The writer thread: owns one connection, turns everything queued into
//! one transaction, commits, then acknowledges (the SQLite writer's loop).
//!
//! A transaction is `BEGIN`, one statement that writes every row
//! (events, runs, owners: [`WRITE_ALL`]), `COMMIT`: three round trips,
//! as a hand-written batched insert. The state of the running runs this
//! writer touched is cached; runs it has not cached are read `FOR UPDATE`
//! first. Another host writing a cached run (recovery, once this host
//! looked gone) cannot be missed: each `runs` update is a compare-and-set
//! on the `last_seq` this writer saw, and a mismatch fails the
//! transaction, which clears the cache and retries each request with its
//! runs read afresh.

use super::PgUrl;
use crate::journal::request::{Applied, Request, fill_batch};
use crate::journal::writer::{NEW_RUN, RunState, continued, counted};
use crate::journal::{RunStatus, RunTotals, StatsCell};
use crate::observer::{BatchError, ObserverError};
use keel_eventlog::{Event, Phase, Scope};
use postgres::{Client, Transaction};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::mpsc;

const SELECT_RUNS: &str = "SELECT run_id, last_seq, status, started_ts, updated_ts, \
     turns, input_tokens, output_tokens FROM runs WHERE run_id = ANY($1) \
     ORDER BY run_id FOR UPDATE";
const SELECT_LINES: &str = "SELECT e.run_id, e.seq, e.line FROM events e \
     JOIN unnest($1::text[], $2::bigint[]) AS k(run_id, seq) \
     ON e.run_id = k.run_id AND e.seq = k.seq";
/// Every row of a transaction in one statement. `$1..$5` the events;
/// `$6..$14` the runs rows with the `last_seq` each was read at (a new
/// row is its own conversation until [`SET_CONVERSATION`] says
/// otherwise; an existing one is updated only if still at that
/// `last_seq`, and a run seen with events is never created again: a run
/// deleted meanwhile is not revived by a stale writer); `$15` this host and `$16` the runs it starts (owners);
/// `$17` the runs that ended (no owner). Returns the `runs` rows written.
const WRITE_ALL: &str = "WITH ev AS (INSERT INTO events (run_id, seq, kind, ts, line) \
     SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::bigint[], $5::text[])), \
     ru AS (INSERT INTO runs AS t (run_id, last_seq, status, started_ts, updated_ts, \
     turns, input_tokens, output_tokens, conversation) \
     SELECT r, s, st, a, u, tu, i, o, r FROM unnest($6::text[], $7::bigint[], $8::text[], \
     $9::bigint[], $10::bigint[], $11::bigint[], $12::bigint[], $13::bigint[], $14::bigint[]) \
     AS x(r, s, st, a, u, tu, i, o, p) \
     WHERE x.p = 0 OR EXISTS (SELECT 1 FROM runs g WHERE g.run_id = x.r) \
     ON CONFLICT (run_id) DO UPDATE SET last_seq = excluded.last_seq, \
     status = excluded.status, updated_ts = excluded.updated_ts, turns = excluded.turns, \
     input_tokens = excluded.input_tokens, output_tokens = excluded.output_tokens \
     WHERE t.last_seq = (SELECT q.p FROM unnest($6::text[], $14::bigint[]) AS q(r, p) \
     WHERE q.r = t.run_id) RETURNING 1), \
     ow AS (INSERT INTO owners (run_id, host) SELECT y.r, $15 FROM unnest($16::text[]) AS y(r) \
     ON CONFLICT (run_id) DO UPDATE SET host = excluded.host), \
     gone AS (DELETE FROM owners WHERE run_id = ANY($17)) \
     SELECT count(*) FROM ru";
const SET_CONVERSATION: &str = "UPDATE runs SET conversation = \
     COALESCE((SELECT p.conversation FROM runs p WHERE p.run_id = $2), $2) WHERE run_id = $1";

/// Above this many cached runs the cache is dropped and reloaded lazily.
const CACHE_MAX_RUNS: usize = 65_536;

/// A transaction that did not commit: which step failed and why.
#[derive(Debug)]
struct TxError {
    op: &'static str,
    cause: String,
}

fn at(op: &'static str) -> impl FnOnce(postgres::Error) -> TxError {
    move |e| TxError {
        op,
        cause: match e.as_db_error() {
            Some(db) => format!("{} ({})", db.message(), db.code().code()),
            None => e.to_string(),
        },
    }
}

/// The fate of one event inside a transaction that commits.
enum Outcome {
    Stored,
    Duplicate,
    Refused(ObserverError),
}

/// The rows a transaction writes, gathered while its events are checked.
#[derive(Default)]
struct Rows<'e> {
    run: Vec<&'e str>,
    seq: Vec<i64>,
    kind: Vec<std::borrow::Cow<'static, str>>,
    ts: Vec<i64>,
    line: Vec<&'e str>,
    started: Vec<&'e str>,
    ended: Vec<&'e str>,
}

/// What a transaction knows: the committed state of its runs (cached or
/// read `FOR UPDATE`) and the `last_seq` each was seen at, the stored
/// lines its duplicates are compared with, and what it has applied.
struct Batch<'e> {
    state: HashMap<&'e str, RunState>,
    seen: HashMap<&'e str, u64>,
    stored: HashMap<(&'e str, u64), String>,
    touched: Vec<&'e str>,
    rows: Rows<'e>,
}

pub(crate) struct Writer {
    pub(crate) url: PgUrl,
    pub(crate) client: Client,
    pub(crate) rx: mpsc::Receiver<Request>,
    pub(crate) max_batch: usize,
    pub(crate) max_batch_bytes: usize,
    pub(crate) stats: Arc<StatsCell>,
    /// This host's id, recorded as the owner of the runs it starts.
    pub(crate) host: Arc<str>,
    /// Committed state of running runs this writer wrote.
    pub(crate) cache: HashMap<Box<str>, RunState>,
}

impl Writer {
    /// Runs until every sender is gone and the queue is drained.
    pub(crate) fn run(mut self) -> Result<(), crate::journal::JournalError> {
        let mut batch: Vec<Request> = Vec::with_capacity(self.max_batch.min(4096));
        while let Some(first) = self.rx.blocking_recv() {
            fill_batch(
                &mut batch,
                first,
                &mut self.rx,
                self.max_batch,
                self.max_batch_bytes,
            );
            self.process(&mut batch);
        }
        Ok(())
    }

    /// Commits `batch` in one transaction and acknowledges every request
    /// after the commit; if it fails, the cache is dropped (the failure may
    /// be a run another host wrote) and each request is retried alone, its
    /// runs read afresh: only a request that fails again is refused.
    fn process(&mut self, batch: &mut Vec<Request>) {
        match self.transaction(batch) {
            Ok(applied) => {
                self.stats.count_commit(&applied);
                for (request, applied) in batch.drain(..).zip(applied) {
                    request.ack.send(applied.into_result());
                }
            }
            Err(_) => {
                self.cache.clear();
                for request in batch.drain(..) {
                    match self.transaction(std::slice::from_ref(&request)) {
                        Ok(applied) => {
                            self.stats.count_commit(&applied);
                            let result = applied
                                .into_iter()
                                .next()
                                .map_or(Ok(()), Applied::into_result);
                            request.ack.send(result);
                        }
                        Err(error) => {
                            self.cache.clear();
                            self.refuse(request, &error);
                        }
                    }
                }
            }
        }
    }

    fn refuse(&self, request: Request, error: &TxError) {
        self.stats.count_failed(request.events.len());
        let detail = self.url.scrub(&error.cause);
        request.ack.send(Err(BatchError {
            acknowledged: 0,
            source: ObserverError::Failed(format!(
                "postgres journal {}: {} failed, nothing was committed: {detail}",
                self.url, error.op
            )),
        }));
    }

    /// One transaction over `requests`. `Ok` means committed; the
    /// outcomes are in request order. A connection that broke is replaced
    /// before the next transaction.
    fn transaction(&mut self, requests: &[Request]) -> Result<Vec<Applied>, TxError> {
        if self.client.is_closed() {
            self.client = self
                .url
                .config()
                .connect(postgres::NoTls)
                .map_err(at("reconnect"))?;
        }
        let host = Arc::clone(&self.host);
        let mut tx = self.client.transaction().map_err(at("begin transaction"))?;
        let mut batch = Batch::load(&mut tx, requests, &self.cache)?;
        let mut outcomes = Vec::with_capacity(requests.len());
        for request in requests {
            outcomes.push(batch.apply_request(&request.events));
        }
        batch.write(&mut tx, &host, requests)?;
        tx.commit().map_err(at("commit"))?;
        for run in &batch.touched {
            match batch.state.get(run) {
                Some(state) if state.status == RunStatus::Running => {
                    self.cache.insert((*run).into(), *state);
                }
                // Ended runs take no more events; reload if ever needed.
                _ => {
                    self.cache.remove(*run);
                }
            }
        }
        if self.cache.len() > CACHE_MAX_RUNS {
            self.cache.clear();
        }
        Ok(outcomes)
    }
}

impl<'e> Batch<'e> {
    /// The state of every run of `requests`: from `cache`, else read and
    /// locked `FOR UPDATE`; and the stored lines of the events at or below
    /// it.
    fn load(
        tx: &mut Transaction<'_>,
        requests: &'e [Request],
        cache: &HashMap<Box<str>, RunState>,
    ) -> Result<Batch<'e>, TxError> {
        let mut runs: Vec<&'e str> = requests
            .iter()
            .flat_map(|r| r.events.iter())
            .map(|e| e.run_id().as_str())
            .collect();
        runs.sort_unstable();
        runs.dedup();
        let mut state = HashMap::with_capacity(runs.len());
        let mut unknown = Vec::new();
        for run in &runs {
            match cache.get(*run) {
                Some(cached) => {
                    state.insert(*run, *cached);
                }
                None => unknown.push(*run),
            }
        }
        if !unknown.is_empty() {
            let rows = tx
                .query(SELECT_RUNS, &[&unknown])
                .map_err(at("read the runs"))?;
            for row in rows {
                let run: String = row.try_get(0).map_err(at("read the runs"))?;
                if let Ok(i) = unknown.binary_search(&run.as_str()) {
                    state.insert(unknown[i], run_state(&row, &run)?);
                }
            }
        }
        let seen = runs
            .iter()
            .map(|r| (*r, state.get(r).map_or(0, |s: &RunState| s.last_seq)))
            .collect();
        let (mut keys_run, mut keys_seq) = (Vec::new(), Vec::new());
        for event in requests.iter().flat_map(|r| r.events.iter()) {
            let run = event.run_id().as_str();
            let last = state.get(run).map_or(0, |s| s.last_seq);
            if event.seq() <= last {
                keys_run.push(run);
                keys_seq.push(i64::try_from(event.seq()).unwrap_or(i64::MAX));
            }
        }
        let mut stored = HashMap::new();
        if !keys_run.is_empty() {
            let rows = tx
                .query(SELECT_LINES, &[&keys_run, &keys_seq])
                .map_err(at("read stored events"))?;
            for row in rows {
                let read = at("read stored events");
                let (run, seq, line): (String, i64, String) =
                    match (row.try_get(0), row.try_get(1), row.try_get(2)) {
                        (Ok(run), Ok(seq), Ok(line)) => (run, seq, line),
                        (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => return Err(read(e)),
                    };
                if let (Ok(i), Ok(seq)) = (runs.binary_search(&run.as_str()), u64::try_from(seq)) {
                    stored.insert((runs[i], seq), line);
                }
            }
        }
        Ok(Batch {
            state,
            seen,
            stored,
            touched: Vec::new(),
            rows: Rows::default(),
        })
    }

    /// Applies a request's events in order until the first refusal.
    fn apply_request(&mut self, events: &'e [Arc<Event>]) -> Applied {
        let mut applied = Applied::default();
        for event in events {
            match self.apply(event) {
                Outcome::Stored => applied.stored += 1,
                Outcome::Duplicate => applied.duplicates += 1,
                Outcome::Refused(error) => {
                    applied.refused = Some(error);
                    break;
                }
            }
        }
        applied
    }

    /// Checks one event against its run's state and queues its row.
    fn apply(&mut self, event: &'e Event) -> Outcome {
        let run = event.run_id().as_str();
        let state = self.state.get(run).copied().unwrap_or(NEW_RUN);
        let seq = event.seq();
        let (Ok(seq_sql), Ok(ts_sql)) = (i64::try_from(seq), i64::try_from(event.ts())) else {
            return Outcome::Refused(ObserverError::Failed(format!(
                "postgres journal: run {run} seq {seq}: seq or ts exceeds the BIGINT range"
            )));
        };
        if seq <= state.last_seq {
            return self.duplicate_or_conflict(event);
        }
        if seq != state.last_seq + 1 {
            return Outcome::Refused(ObserverError::Gap {
                run_id: run.to_owned(),
                last_stored: state.last_seq,
                seq,
            });
        }
        let rows = &mut self.rows;
        rows.run.push(run);
        rows.seq.push(seq_sql);
        rows.kind.push(event.kind().name());
        rows.ts.push(ts_sql);
        rows.line.push(event.line());
        let status = match event.kind().lifecycle_parts() {
            Some((Scope::Run, Phase::Started)) => {
                rows.started.push(run);
                state.status
            }
            Some((Scope::Run, Phase::Ended(terminal))) => {
                rows.ended.push(run);
                RunStatus::from(terminal)
            }
            _ => state.status,
        };
        if !self.touched.contains(&run) {
            self.touched.push(run);
        }
        self.state.insert(
            run,
            RunState {
                last_seq: seq,
                status,
                started_ts: if state.last_seq == 0 {
                    event.ts()
                } else {
                    state.started_ts
                },
                updated_ts: state.updated_ts.max(event.ts()),
                totals: counted(state.totals, event),
            },
        );
        Outcome::Stored
    }

    /// An event at or below its run's `last_seq`: committed before (its
    /// line was read) or earlier in this transaction.
    fn duplicate_or_conflict(&self, event: &'e Event) -> Outcome {
        let run = event.run_id().as_str();
        let seq = event.seq();
        let earlier = self
            .rows
            .run
            .iter()
            .zip(&self.rows.seq)
            .position(|(r, s)| *r == run && u64::try_from(*s).ok() == Some(seq))
            .and_then(|i| self.rows.line.get(i).copied());
        let stored = earlier.or_else(|| self.stored.get(&(run, seq)).map(String::as_str));
        match stored {
            Some(line) if line == event.line() => Outcome::Duplicate,
            Some(_) => Outcome::Refused(ObserverError::Conflict {
                run_id: run.to_owned(),
                seq,
            }),
            None => Outcome::Refused(ObserverError::Failed(format!(
                "postgres journal: run {run} records a last_seq at or past {seq} but holds no seq {seq}"
            ))),
        }
    }

    /// Writes the gathered rows in one statement, then the conversations
    /// of the runs that continue another. `Err` when a run's row was not at
    /// the `last_seq` this transaction saw (another host wrote it).
    fn write(
        &self,
        tx: &mut Transaction<'_>,
        host: &str,
        requests: &'e [Request],
    ) -> Result<(), TxError> {
        let r = &self.rows;
        if r.run.is_empty() {
            return Ok(());
        }
        let kinds: Vec<&str> = r.kind.iter().map(AsRef::as_ref).collect();
        let runs = RunColumns::of(self);
        // Owners: a run that starts and ends here never gets one.
        let started: Vec<&str> = r
            .started
            .iter()
            .filter(|run| !r.ended.contains(run))
            .copied()
            .collect();
        let written: i64 = tx
            .query_one(
                WRITE_ALL,
                &[
                    &r.run,
                    &r.seq,
                    &kinds,
                    &r.ts,
                    &r.line,
                    &self.touched,
                    &runs.seq,
                    &runs.status,
                    &runs.started,
                    &runs.updated,
                    &runs.turns,
                    &runs.input,
                    &runs.output,
                    &runs.seen,
                    &host,
                    &started,
                    &r.ended,
                ],
            )
            .and_then(|row| row.try_get(0))
            .map_err(at("write the events and runs"))?;
        if usize::try_from(written).ok() != Some(self.touched.len()) {
            return Err(TxError {
                op: "update runs",
                cause: "a run changed since this writer read it (another host wrote it); \
                        retried with its state read again"
                    .to_owned(),
            });
        }
        for c in requests
            .iter()
            .flat_map(|q| q.events.iter())
            .filter_map(|e| continued(e))
            .filter(|c| c_is_new(c.run, r))
        {
            tx.execute(SET_CONVERSATION, &[&c.run, &c.previous.as_str()])
                .map_err(at("record the run's conversation"))?;
        }
        Ok(())
    }
}

/// Whether `run` got rows in this transaction (its `run.started` at seq 1
/// was stored here, not a duplicate).
fn c_is_new(run: &str, rows: &Rows<'_>) -> bool {
    rows.run.contains(&run)
}

/// The `runs` columns of a transaction's touched runs, in order.
struct RunColumns {
    seq: Vec<i64>,
    status: Vec<&'static str>,
    started: Vec<i64>,
    updated: Vec<i64>,
    turns: Vec<i64>,
    input: Vec<i64>,
    output: Vec<i64>,
    seen: Vec<i64>,
}

impl RunColumns {
    fn of(batch: &Batch<'_>) -> RunColumns {
        let mut c = RunColumns {
            seq: Vec::new(),
            status: Vec::new(),
            started: Vec::new(),
            updated: Vec::new(),
            turns: Vec::new(),
            input: Vec::new(),
            output: Vec::new(),
            seen: Vec::new(),
        };
        for run in &batch.touched {
            let s = batch.state.get(run).copied().unwrap_or(NEW_RUN);
            c.seq.push(big(s.last_seq));
            c.status.push(s.status.as_str());
            c.started.push(big(s.started_ts));
            c.updated.push(big(s.updated_ts));
            c.turns.push(big(s.totals.turns));
            c.input.push(big(s.totals.input_tokens));
            c.output.push(big(s.totals.output_tokens));
            c.seen.push(big(batch.seen.get(run).copied().unwrap_or(0)));
        }
        c
    }
}

/// A `runs` row read `FOR UPDATE`, its values checked.
fn run_state(row: &postgres::Row, run: &str) -> Result<RunState, TxError> {
    let corrupt = |what: &str| TxError {
        op: "read the runs",
        cause: format!("runs row of {run} is corrupt: {what}"),
    };
    let unsigned = |col: usize, what: &str| {
        row.try_get::<_, i64>(col)
            .ok()
            .and_then(|v| u64::try_from(v).ok())
            .ok_or_else(|| corrupt(what))
    };
    let status: String = row.try_get(2).map_err(|_| corrupt("status"))?;
    Ok(RunState {
        last_seq: unsigned(1, "last_seq")?,
        status: RunStatus::parse(&status).ok_or_else(|| corrupt("status"))?,
        started_ts: unsigned(3, "started_ts")?,
        updated_ts: unsigned(4, "updated_ts")?,
        totals: RunTotals {
            turns: unsigned(5, "turns")?,
            input_tokens: unsigned(6, "input_tokens")?,
            output_tokens: unsigned(7, "output_tokens")?,
        },
    })
}

/// Values checked to fit when the event was applied; saturates otherwise.
fn big(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}
