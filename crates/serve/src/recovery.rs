//! Recovery at startup: `keel serve` closes the runs a killed predecessor
//! left running before it takes requests, so a follower that resumes with
//! `Last-Event-ID` gets the recovery terminals from the journal and then
//! the end of the stream.
//!
//! Without `--nats`: [`Store::recover_abandoned`] (the store's own
//! ownership of runs, for SQLite OS locks on host files beside it; claim,
//! then recover).
//!
//! With `--nats`, JetStream is the authority and this store one host's
//! copy, so recovery goes JetStream first:
//!
//! 1. For every run this store shows `running`: the run is recovered in
//!    JetStream ([`JetStreamRecovery::recover_with_local`]: the local
//!    events the stream lacks are published first, then the terminals).
//!    Its owner there is almost always this store's previous process,
//!    whose heartbeat outlives it by up to the heartbeat TTL: an owner
//!    that looks alive is waited for, once, at most the TTL plus
//!    [`OWNER_MARGIN`] for all runs together.
//! 2. The store then copies what JetStream holds
//!    ([`JetStreamRecovery::sync_local`], through the journal's write
//!    path), whoever recovered the run: one history, never a second set of
//!    terminals.
//! 3. Runs the stream does not hold at all are recovered in the store
//!    ([`Store::recover_abandoned`]), but only when every run the
//!    stream holds was settled: a local recovery must not close a run that
//!    JetStream will close differently.
//! 4. A background sweep then recovers, in JetStream only, runs other
//!    hosts abandoned (their owner records in `keel_owners`), each once it
//!    has been seen abandoned for [`GRACE_TTLS`] heartbeat TTLs: a killed
//!    host restarting on its store gets the first chance. (`keel serve`
//!    publishes to JetStream before it journals, so its store is always a
//!    prefix of the stream; a store written journal first, as `keel run
//!    --nats` does, may hold one event the stream lacks, which only its
//!    own host can forward: see [`keel_observers::nats`].)
//!
//! Runs are recovered children first (a sub-run before its parent), so
//! each child's `run.failed` is committed before the parent's `tool.failed`
//! of the call that started it.
//!
//! One stderr line per recovered run.

use crate::error::ServeError;
use keel_eventlog::recovery;
use keel_observers::{
    JetStreamHandle, JetStreamRecovery, LocalSync, RecoveryReport, RequiredObserver, RunStatus,
    Store, StreamRecovery, StreamStanding,
};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How much longer than the heartbeat TTL startup waits for the owner of a
/// stored run to be found gone.
pub(crate) const OWNER_MARGIN: Duration = Duration::from_secs(1);
/// How many heartbeat TTLs the sweep waits, after first finding a run
/// abandoned, before it recovers it.
pub(crate) const GRACE_TTLS: u32 = 2;

/// What startup recovery did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RecoverySummary {
    /// Runs this process closed (in JetStream, or in the store).
    pub recovered: usize,
    /// Runs another recoverer closed in JetStream, copied into the store.
    pub copied: usize,
    /// Runs left running (owned by a live host, or a failure named on
    /// stderr).
    pub left: usize,
}

/// Recovers the runs a dead host left running (see the module docs); with
/// `nats`, also starts the background sweep. `Err` is a failure of the
/// store or of NATS as a whole; one run's trouble is a stderr line.
pub(crate) async fn recover_at_startup(
    journal: &Arc<Store>,
    nats: Option<&JetStreamHandle>,
) -> Result<RecoverySummary, ServeError> {
    let Some(handle) = nats else {
        let report = recover_locally(journal).await?;
        return Ok(RecoverySummary {
            recovered: report.recovered.len(),
            left: report.needs_attention().count(),
            ..RecoverySummary::default()
        });
    };
    let recovery = JetStreamRecovery::open(handle.clone())
        .await
        .map_err(|e| ServeError::Recovery(format!("--nats: recovery: {e}")))?;
    let mut summary = RecoverySummary::default();
    let (not_in_stream, unsettled) = recover_stored(journal, &recovery, &mut summary).await?;
    if unsettled == 0 {
        if not_in_stream > 0 {
            let report = recover_locally(journal).await?;
            summary.recovered += report.recovered.len();
            summary.left += report.needs_attention().count();
        }
    } else {
        eprintln!(
            "keel: {unsettled} stored run(s) not settled in JetStream: local-only recovery skipped until the next start"
        );
        summary.left += unsettled + not_in_stream;
    }
    tokio::spawn(sweep(recovery));
    Ok(summary)
}

/// [`Store::recover_abandoned`] on a blocking thread, one stderr
/// line per recovered run and per run that needs attention.
async fn recover_locally(journal: &Arc<Store>) -> Result<RecoveryReport, ServeError> {
    let journal = Arc::clone(journal);
    let report = tokio::task::spawn_blocking(move || journal.recover_abandoned())
        .await
        .map_err(|e| ServeError::Recovery(format!("recovery: {e}")))??;
    for run in &report.recovered {
        let owner = run.previous_owner.as_deref().unwrap_or("none recorded");
        eprintln!(
            "keel: recovered {}: {} terminal(s){} (host {owner} was gone)",
            run.run_id,
            run.terminals.len(),
            seqs(&run.terminals)
        );
    }
    for run in report.needs_attention() {
        eprintln!("keel: not recovered: {}: {}", run.run_id, run.reason);
    }
    Ok(report)
}

fn seqs(events: &[Arc<keel_eventlog::Event>]) -> String {
    match (events.first(), events.last()) {
        (Some(first), Some(last)) => format!(", seq {}..={}", first.seq(), last.seq()),
        _ => String::new(),
    }
}

/// Every run the store shows running, with its stored lines, children
/// before parents ([`recovery::children_first`]: a sub-run is closed
/// before the run whose call started it).
async fn stored_running(journal: &Arc<Store>) -> Result<Vec<(String, Vec<String>)>, ServeError> {
    let journal = Arc::clone(journal);
    tokio::task::spawn_blocking(move || {
        let reader = journal.reader()?;
        let mut runs = Vec::new();
        for run in reader.runs()? {
            if run.status == RunStatus::Running {
                let lines = reader.all_lines_after(run.run_id.as_str(), 0)?;
                let parent = lines.first().and_then(|l| recovery::parent_of(l));
                runs.push(StoredRunning {
                    run_id: run.run_id,
                    parent,
                    lines,
                });
            }
        }
        let ordered = recovery::children_first(runs, |r| &r.run_id, |r| r.parent.as_ref());
        Ok::<_, ServeError>(
            ordered
                .into_iter()
                .map(|r| (r.run_id.to_string(), r.lines))
                .collect(),
        )
    })
    .await
    .map_err(|e| ServeError::Recovery(format!("recovery: {e}")))?
}

/// A run the store shows running, as recovery orders it.
struct StoredRunning {
    run_id: keel_message::RunId,
    /// The run its `run.started` names as its parent (a sub-run's).
    parent: Option<keel_message::RunId>,
    lines: Vec<String>,
}

/// Step 1 and 2 for every stored running run. Returns how many the stream
/// does not hold and how many are not settled.
async fn recover_stored(
    journal: &Arc<Store>,
    recovery: &JetStreamRecovery,
    summary: &mut RecoverySummary,
) -> Result<(usize, usize), ServeError> {
    let deadline = Instant::now() + recovery.ownership().host_ttl() + OWNER_MARGIN;
    let (mut not_in_stream, mut unsettled) = (0, 0);
    for (run_id, lines) in stored_running(journal).await? {
        let outcome = loop {
            match recovery.recover_with_local(&run_id, &lines).await {
                Ok(StreamRecovery::OwnerAlive { .. }) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                other => break other,
            }
        };
        let recovered = match outcome {
            Ok(
                r @ (StreamRecovery::Recovered(_)
                | StreamRecovery::RecoveredElsewhere { .. }
                | StreamRecovery::NotAbandoned),
            ) => r,
            Ok(StreamRecovery::NotInStream) => {
                not_in_stream += 1;
                continue;
            }
            Ok(StreamRecovery::OwnerAlive { host }) => {
                eprintln!("keel: not recovered: {run_id}: owned by live host {host}");
                unsettled += 1;
                continue;
            }
            Ok(other) => {
                eprintln!("keel: not recovered: {run_id}: {other:?}");
                unsettled += 1;
                continue;
            }
            Err(e) => {
                eprintln!("keel: not recovered: {run_id}: {e}");
                unsettled += 1;
                continue;
            }
        };
        match copy_to_store(journal, recovery, &run_id, &lines).await {
            Ok(copied) => {
                report_stored(&run_id, &recovered, copied);
                match recovered {
                    StreamRecovery::Recovered(_) => summary.recovered += 1,
                    _ => summary.copied += 1,
                }
            }
            Err(e) => {
                eprintln!("keel: not recovered: {run_id}: {e}");
                unsettled += 1;
            }
        }
    }
    Ok((not_in_stream, unsettled))
}

/// Step 2: the store copies what JetStream holds. A run another recoverer
/// is still closing is waited for a little.
async fn copy_to_store(
    journal: &Arc<Store>,
    recovery: &JetStreamRecovery,
    run_id: &str,
    lines: &[String],
) -> Result<usize, String> {
    let store: &dyn RequiredObserver = journal.as_ref();
    for _ in 0..50 {
        match recovery.sync_local(store, run_id, lines).await {
            Ok(LocalSync::Copied { events }) => return Ok(events),
            Ok(LocalSync::InStep) => return Ok(0),
            Ok(LocalSync::StreamOpen) => tokio::time::sleep(Duration::from_millis(100)).await,
            Ok(other) => return Err(format!("the stream lost it ({other:?})")),
            Err(e) => return Err(e.to_string()),
        }
    }
    Err("JetStream still shows it open".to_owned())
}

fn report_stored(run_id: &str, recovered: &StreamRecovery, copied: usize) {
    match recovered {
        StreamRecovery::Recovered(r) => {
            let owner = r.previous_owner.as_deref().unwrap_or("none recorded");
            eprintln!(
                "keel: recovered {run_id} in JetStream: {} terminal(s){}, {} local event(s) forwarded first (host {owner} was gone); local store copied {copied}",
                r.terminals.len(),
                seqs(&r.terminals),
                r.forwarded.len(),
            );
        }
        StreamRecovery::NotAbandoned => eprintln!(
            "keel: recovered {run_id}: it had ended in JetStream; local store copied {copied} event(s)"
        ),
        _ => eprintln!(
            "keel: recovered {run_id}: closed in JetStream by another gateway; local store copied {copied} event(s)"
        ),
    }
}

/// Step 4, for the life of the process.
async fn sweep(recovery: JetStreamRecovery) {
    let ttl = recovery.ownership().host_ttl();
    let grace = ttl * GRACE_TTLS;
    let every = (ttl / 2).max(Duration::from_millis(200));
    let mut seen: HashMap<String, Instant> = HashMap::new();
    loop {
        if let Ok(runs) = recovery.ownership().owned_runs().await {
            let mut still = HashMap::new();
            for run in runs {
                let run_id = run.as_str();
                let first = seen.get(run_id).copied();
                if let Some(first) = sweep_one(&recovery, run_id, first, grace).await {
                    still.insert(run_id.to_owned(), first);
                }
            }
            seen = still;
        }
        tokio::time::sleep(every).await;
    }
}

/// One run of the sweep: `Some(first seen abandoned)` while it waits out
/// the grace period.
async fn sweep_one(
    recovery: &JetStreamRecovery,
    run_id: &str,
    first: Option<Instant>,
    grace: Duration,
) -> Option<Instant> {
    match recovery.standing(run_id).await {
        Ok(StreamStanding::Abandoned { .. }) => {
            let first = first.unwrap_or_else(Instant::now);
            if first.elapsed() < grace {
                return Some(first);
            }
            match recovery.recover(run_id).await {
                Ok(StreamRecovery::Recovered(r)) => {
                    let owner = r.previous_owner.as_deref().unwrap_or("none recorded");
                    eprintln!(
                        "keel: recovered {run_id} in JetStream (abandoned by host {owner}): {} terminal(s){}",
                        r.terminals.len(),
                        seqs(&r.terminals)
                    );
                    None
                }
                Ok(_) => None,
                Err(e) => {
                    eprintln!("keel: not recovered: {run_id}: {e}");
                    Some(first)
                }
            }
        }
        // An ended run's stale record, or a dead host's record of a run
        // that never reached the stream: recovery removes it.
        Ok(StreamStanding::Ended { .. } | StreamStanding::NotInStream) => {
            let _ = recovery.recover(run_id).await;
            None
        }
        _ => None,
    }
}
