//! [`JetStreamRecovery`]: reads an abandoned run's history from the
//! stream, imports it into a log, and publishes the terminals that close
//! it, exactly once across racing recoverers; brings a local copy to what
//! the stream holds.

use super::handle::{JetStreamHandle, Published};
use super::ownership::{ATTEMPTS, Ownership};
use super::recovery_error::{JetStreamRecoveryError, nats, nats_err};
use super::subscription::{RemoteSubscribeError, RemoteSubscription};
use crate::observer::RequiredObserver;
use keel_eventlog::{
    ENTRY_OVERHEAD_BYTES, Event, LogConfig, Payload, RunLog, SubscribeError, SystemClock, recovery,
};
use keel_message::RunId;
use std::sync::Arc;

// ------------------------------------------------------------ recovery

/// Where a run stands in the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StreamStanding {
    /// The stream holds no event of the run.
    NotInStream,
    /// Its last event is its run terminal; `by_recovery` when that is a
    /// recovery's `run.failed` (cause kind [`recovery::HOST_LOST`]).
    Ended {
        /// Whether a recovery ended it.
        by_recovery: bool,
    },
    /// Open, and its owner's heartbeat is alive.
    Owned {
        /// The owner.
        host: String,
    },
    /// Open, and no live host owns it.
    Abandoned {
        /// The recorded owner (gone), or `None` when none is recorded.
        owner: Option<String>,
    },
}

/// What [`JetStreamRecovery::recover`] did.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum StreamRecovery {
    /// This call closed the run.
    Recovered(RecoveredInStream),
    /// Another recoverer closed it: before this call, or while it tried
    /// (`appended` of this call's terminals landed before the other's; 0
    /// unless the race was lost after the first terminal).
    RecoveredElsewhere {
        /// This call's terminals in the stream.
        appended: usize,
    },
    /// Its owner is alive: nothing was written.
    OwnerAlive {
        /// The owner.
        host: String,
    },
    /// It ended (not by recovery): nothing to do.
    NotAbandoned,
    /// The stream holds no event of it.
    NotInStream,
}

/// A run this call closed in the stream.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RecoveredInStream {
    /// The run.
    pub run_id: RunId,
    /// The owner that was gone, or `None` when none was recorded.
    pub previous_owner: Option<String>,
    /// Local events the stream lacked, published first
    /// ([`JetStreamRecovery::recover_with_local`]).
    pub forwarded: Vec<Arc<Event>>,
    /// The terminals published, innermost first, seqs contiguous.
    pub terminals: Vec<Arc<Event>>,
}

/// What [`JetStreamRecovery::sync_local`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LocalSync {
    /// The local copy lacked this many events; they were written to it.
    Copied {
        /// Events written.
        events: usize,
    },
    /// The local copy already holds every event of the stream.
    InStep,
    /// The run has not ended in the stream: nothing was copied.
    StreamOpen,
    /// The stream holds no event of it.
    NotInStream,
}

/// The last message of a run's subject.
struct Tail {
    stream_seq: u64,
    event: Event,
}

/// Recovery of abandoned runs through JetStream (see the module docs).
#[derive(Debug, Clone)]
pub struct JetStreamRecovery {
    handle: JetStreamHandle,
    ownership: Ownership,
}

impl JetStreamRecovery {
    /// Opens the buckets ([`Ownership::open`]).
    pub async fn open(
        handle: JetStreamHandle,
    ) -> Result<JetStreamRecovery, JetStreamRecoveryError> {
        let ownership = Ownership::open(&handle).await?;
        Ok(JetStreamRecovery::new(handle, ownership))
    }

    /// Over buckets already open.
    pub fn new(handle: JetStreamHandle, ownership: Ownership) -> JetStreamRecovery {
        JetStreamRecovery { handle, ownership }
    }

    /// The buckets.
    pub fn ownership(&self) -> &Ownership {
        &self.ownership
    }

    /// Where `run_id` stands (no write).
    pub async fn standing(&self, run_id: &str) -> Result<StreamStanding, JetStreamRecoveryError> {
        let run = RunId::parse(run_id)?;
        match self.tail(&run).await? {
            None => Ok(StreamStanding::NotInStream),
            Some(tail) => self.standing_of(&run, &tail).await,
        }
    }

    /// Closes `run_id` in the stream if it is abandoned (see the module
    /// docs). Idempotent.
    pub async fn recover(&self, run_id: &str) -> Result<StreamRecovery, JetStreamRecoveryError> {
        self.recover_with_local(run_id, &[]).await
    }

    /// Like [`recover`](Self::recover), for a host that holds a local copy
    /// of the run (`local`: its stored lines, in seq order): the copy must
    /// agree with the stream where both hold an event
    /// ([`JetStreamRecoveryError::Diverged`] otherwise, and nothing is written);
    /// events only the copy holds are published first, then the terminals
    /// computed from the whole.
    pub async fn recover_with_local(
        &self,
        run_id: &str,
        local: &[String],
    ) -> Result<StreamRecovery, JetStreamRecoveryError> {
        let run = RunId::parse(run_id)?;
        for _ in 0..ATTEMPTS {
            let Some(tail) = self.tail(&run).await? else {
                self.ownership.forget_dead_owner(&run).await?;
                return Ok(StreamRecovery::NotInStream);
            };
            let owner = match self.standing_of(&run, &tail).await? {
                StreamStanding::Abandoned { owner } => owner,
                StreamStanding::Ended { by_recovery } => {
                    let _ = self.ownership.forget(&run).await;
                    return Ok(if by_recovery {
                        StreamRecovery::RecoveredElsewhere { appended: 0 }
                    } else {
                        StreamRecovery::NotAbandoned
                    });
                }
                StreamStanding::Owned { host } => return Ok(StreamRecovery::OwnerAlive { host }),
                StreamStanding::NotInStream => return Ok(StreamRecovery::NotInStream),
            };
            let stream = self.history(&run, &tail).await?;
            let forward = local_beyond(&run, &stream, local)?;
            let mut expected = tail.stream_seq;
            if !self.forward(&forward, &mut expected).await? {
                // Someone wrote the run meanwhile: read it again.
                continue;
            }
            let lines = stream.iter().chain(&forward).map(|e| e.line());
            let log = import(&run, lines)?;
            let terminals = commit_terminals(&run, &log)?;
            return self.append(&run, owner, forward, terminals, expected).await;
        }
        Err(JetStreamRecoveryError::Contended {
            run_id: run.to_string(),
            attempts: ATTEMPTS,
        })
    }

    /// Brings a local copy of `run_id` (`local`: its stored lines, in seq
    /// order; `store`: where to write) to the lines the stream holds, once
    /// the run has ended there: the events the copy lacks are offered to
    /// `store` in order, through its normal write path.
    pub async fn sync_local(
        &self,
        store: &dyn RequiredObserver,
        run_id: &str,
        local: &[String],
    ) -> Result<LocalSync, JetStreamRecoveryError> {
        let run = RunId::parse(run_id)?;
        let Some(tail) = self.tail(&run).await? else {
            return Ok(LocalSync::NotInStream);
        };
        if !tail.event.kind().is_run_terminal() {
            return Ok(LocalSync::StreamOpen);
        }
        let stream = self.history(&run, &tail).await?;
        if !local_beyond(&run, &stream, local)?.is_empty() {
            return Err(JetStreamRecoveryError::Diverged {
                run_id: run.to_string(),
                seq: seq_at(stream.len()),
            });
        }
        let missing = stream.get(local.len()..).unwrap_or_default();
        for event in missing {
            store
                .observe(event)
                .await
                .map_err(|e| JetStreamRecoveryError::LocalRefused {
                    run_id: run.to_string(),
                    seq: event.seq(),
                    detail: e.to_string(),
                })?;
        }
        Ok(if missing.is_empty() {
            LocalSync::InStep
        } else {
            LocalSync::Copied {
                events: missing.len(),
            }
        })
    }

    async fn tail(&self, run: &RunId) -> Result<Option<Tail>, JetStreamRecoveryError> {
        let Some((stream_seq, line)) = self
            .handle
            .last_of(run.as_str())
            .await
            .map_err(nats("read a run's last event"))?
        else {
            return Ok(None);
        };
        let event = decode(run, &line, None)?;
        Ok(Some(Tail { stream_seq, event }))
    }

    async fn standing_of(
        &self,
        run: &RunId,
        tail: &Tail,
    ) -> Result<StreamStanding, JetStreamRecoveryError> {
        if tail.event.kind().is_run_terminal() {
            return Ok(StreamStanding::Ended {
                by_recovery: ended_by_recovery(&tail.event),
            });
        }
        let owner = self.ownership.owner(run).await?;
        if let Some(host) = &owner
            && self.ownership.is_alive(host).await?
        {
            return Ok(StreamStanding::Owned { host: host.clone() });
        }
        Ok(StreamStanding::Abandoned { owner })
    }

    /// Events 1 to the tail's seq, from the stream.
    async fn history(
        &self,
        run: &RunId,
        tail: &Tail,
    ) -> Result<Vec<Arc<Event>>, JetStreamRecoveryError> {
        const OP: &str = "read a run's history";
        let mut sub = RemoteSubscription::open(&self.handle, run.as_str(), 0)
            .await
            .map_err(|e| match e {
                RemoteSubscribeError::Cursor(SubscribeError::CursorExpired {
                    earliest, ..
                }) => JetStreamRecoveryError::Incomplete {
                    run_id: run.to_string(),
                    earliest,
                },
                other => nats_err(OP)(other),
            })?;
        let last = tail.event.seq();
        let wait = self.handle.config().ack_timeout;
        let mut events = Vec::new();
        while sub.cursor() < last {
            match tokio::time::timeout(wait, sub.next()).await {
                Ok(Some(Ok(event))) => events.push(event),
                Ok(Some(Err(e))) => return Err(nats_err(OP)(e)),
                Ok(None) => {
                    return Err(corrupt(
                        run,
                        format!("the run ends at seq {} before its tail", sub.cursor()),
                    ));
                }
                Err(_) => return Err(nats(OP)(format!("no event after seq {}", sub.cursor()))),
            }
        }
        Ok(events)
    }

    /// Publishes the local events the stream lacks, in order. `false` when
    /// the subject moved meanwhile (someone else wrote the run).
    async fn forward(
        &self,
        events: &[Arc<Event>],
        expected: &mut u64,
    ) -> Result<bool, JetStreamRecoveryError> {
        const OP: &str = "publish a local event";
        for event in events {
            match self
                .handle
                .publish_event(event, *expected)
                .await
                .map_err(nats(OP))?
            {
                Published::Stored(stream_seq) => *expected = stream_seq,
                Published::Duplicate(stream_seq) => {
                    let stored = self
                        .handle
                        .stored_line(stream_seq)
                        .await
                        .map_err(nats(OP))?;
                    if stored != event.line().as_bytes() {
                        return Ok(false);
                    }
                    *expected = stream_seq;
                }
                Published::WrongLastSequence => return Ok(false),
            }
        }
        Ok(true)
    }

    /// Publishes the terminals in order; stops at the first one another
    /// recoverer got in before.
    async fn append(
        &self,
        run: &RunId,
        previous_owner: Option<String>,
        forwarded: Vec<Arc<Event>>,
        terminals: Vec<Arc<Event>>,
        mut expected: u64,
    ) -> Result<StreamRecovery, JetStreamRecoveryError> {
        for (appended, event) in terminals.iter().enumerate() {
            match self
                .handle
                .publish_event(event, expected)
                .await
                .map_err(nats("publish a recovery terminal"))?
            {
                Published::Stored(stream_seq) => expected = stream_seq,
                // The seq is taken: under the same message id with another
                // recoverer's bytes, or the subject moved on. The run is
                // the other's to close.
                Published::Duplicate(_) | Published::WrongLastSequence => {
                    return Ok(StreamRecovery::RecoveredElsewhere { appended });
                }
            }
        }
        // Best effort: a stale record of an ended run is harmless.
        let _ = self.ownership.forget(run).await;
        Ok(StreamRecovery::Recovered(RecoveredInStream {
            run_id: run.clone(),
            previous_owner,
            forwarded,
            terminals,
        }))
    }
}

fn corrupt(run: &RunId, detail: String) -> JetStreamRecoveryError {
    JetStreamRecoveryError::Corrupt {
        run_id: run.to_string(),
        detail,
    }
}

fn seq_at(index: usize) -> u64 {
    u64::try_from(index).unwrap_or(u64::MAX).saturating_add(1)
}

/// Decodes a line of `run` (at `seq`, when known).
fn decode(run: &RunId, line: &[u8], seq: Option<u64>) -> Result<Event, JetStreamRecoveryError> {
    let text = std::str::from_utf8(line).map_err(|e| {
        corrupt(
            run,
            format!("a line is not UTF-8 at byte {}", e.valid_up_to()),
        )
    })?;
    let event = Event::decode(text).map_err(|e| corrupt(run, e.to_string()))?;
    if event.run_id() != run {
        return Err(corrupt(run, "a line names another run".to_owned()));
    }
    if let Some(seq) = seq.filter(|s| *s != event.seq()) {
        return Err(corrupt(
            run,
            format!("line {seq} holds seq {}", event.seq()),
        ));
    }
    Ok(event)
}

/// The local events past the stream's, after checking that both agree
/// byte for byte where both hold one.
fn local_beyond(
    run: &RunId,
    stream: &[Arc<Event>],
    local: &[String],
) -> Result<Vec<Arc<Event>>, JetStreamRecoveryError> {
    let mut beyond = Vec::new();
    for (i, line) in local.iter().enumerate() {
        match stream.get(i) {
            Some(event) if event.line() == line => {}
            Some(_) => {
                return Err(JetStreamRecoveryError::Diverged {
                    run_id: run.to_string(),
                    seq: seq_at(i),
                });
            }
            None => beyond.push(Arc::new(decode(run, line.as_bytes(), Some(seq_at(i)))?)),
        }
    }
    Ok(beyond)
}

/// Whether `event` (a run terminal) is a recovery's `run.failed`.
fn ended_by_recovery(event: &Event) -> bool {
    matches!(
        event.payload(),
        Ok(Payload::RunFailed(p)) if p.cause.as_ref().and_then(|c| c.kind.as_deref()) == Some(recovery::HOST_LOST)
    )
}

/// The run's log, imported from its lines with every commit rule checked.
fn import<'a>(
    run: &RunId,
    lines: impl Iterator<Item = &'a str> + Clone,
) -> Result<RunLog, JetStreamRecoveryError> {
    RunLog::import(
        run.clone(),
        lines.clone(),
        import_config(lines),
        Arc::new(SystemClock),
    )
    .map_err(|e| corrupt(run, e.to_string()))
}

/// Commits the terminals that close every open scope of `log`.
fn commit_terminals(run: &RunId, log: &RunLog) -> Result<Vec<Arc<Event>>, JetStreamRecoveryError> {
    let payloads = recovery::terminals(log);
    if payloads.is_empty() {
        return Err(corrupt(
            run,
            "the last event is not the run's terminal, yet no scope is open".to_owned(),
        ));
    }
    payloads
        .iter()
        .map(|p| log.commit(p).map_err(|e| corrupt(run, e.to_string())))
        .collect()
}

/// A log configuration that holds every line (nothing evicted, so the
/// model positions see every delta), whatever bounds the host that wrote
/// them had, with room for the terminals.
fn import_config<'a>(lines: impl Iterator<Item = &'a str>) -> LogConfig {
    let base = LogConfig::default();
    let (mut count, mut largest, mut stored) = (0usize, 0usize, 0usize);
    for line in lines {
        count = count.saturating_add(1);
        largest = largest.max(line.len());
        stored = stored.saturating_add(line.len().saturating_add(ENTRY_OVERHEAD_BYTES));
    }
    // No more scopes can be open than were started.
    let max_open_scopes = base.max_open_scopes.max(count.saturating_add(1));
    let max_event_bytes = base.max_event_bytes.max(largest);
    let reserve = max_open_scopes
        .saturating_mul(base.max_terminal_bytes.saturating_add(ENTRY_OVERHEAD_BYTES));
    LogConfig {
        max_events: count.saturating_add(max_open_scopes).saturating_add(1),
        max_bytes: stored
            .saturating_add(max_event_bytes)
            .saturating_add(ENTRY_OVERHEAD_BYTES)
            .saturating_add(reserve),
        max_event_bytes,
        max_terminal_bytes: base.max_terminal_bytes,
        max_open_scopes,
    }
}
