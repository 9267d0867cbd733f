//! Following `run.input` references: the history of a continued run is
//! the history of the run it references, checked against the reference
//! (that run exists, ends at the referenced seq, and its lines digest to
//! the referenced digest), plus its own events.

use super::fork::{ForkPointError, ForkPoints};
use super::{HistoryError, HistoryFold};
use crate::event::Event;
use crate::hasher::HistoryHasher;
use crate::lifecycle::REFERENCE_SEQ;
use crate::payload::{ForkedFrom, Payload};
use crate::reference::HistoryReference;
use keel_message::{Limits, Message, RunId};
use std::collections::HashSet;

/// The longest chain of references [`rebuild_chain`] follows: a run may
/// inherit through at most this many runs behind it. One more than the
/// number of runs a chat conversation may hold, so every run of a
/// conversation can be continued.
pub const MAX_CHAIN_DEPTH: usize = 10_001;

/// Events read per page while a run is streamed.
const PAGE_EVENTS: usize = 512;

/// A store [`rebuild_chain`] reads from: a run's events a page at a time.
pub trait HistoryStore {
    /// Why a read failed.
    type Error: std::error::Error + Send + Sync + 'static;

    /// At most `limit` events of `run_id` with `seq > after`, in seq order.
    /// A page may hold fewer (a store bounds its pages in bytes too): only
    /// an empty page means there are no more.
    fn events_after(
        &self,
        run_id: &RunId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<Event>, Self::Error>;
}

/// Why a chain of references does not rebuild. Each names the rule, the
/// run and, where there is one, the seq.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChainError<E: std::error::Error + 'static> {
    /// The store failed.
    #[error("reading run {run_id}: {source}")]
    Store {
        /// The run being read.
        run_id: RunId,
        /// Why.
        #[source]
        source: E,
    },
    /// One run's log does not rebuild.
    #[error("run {run_id}: {source}")]
    History {
        /// The run.
        run_id: RunId,
        /// Why.
        #[source]
        source: HistoryError,
    },
    /// The run asked for has no events.
    #[error("run {run_id} has no stored events (rule history.run_known)")]
    Unknown {
        /// The run.
        run_id: RunId,
    },
    /// A reference names a run that has no events in the store.
    #[error(
        "run {run_id} seq 2 references run {parent}, which is not stored (rule history.reference_known)"
    )]
    MissingParent {
        /// The referencing run.
        run_id: RunId,
        /// The run it names.
        parent: RunId,
    },
    /// The referenced run does not end at the referenced seq.
    #[error(
        "run {run_id} seq 2 references run {parent} through seq {expected}, but its last event is seq {found} (rule history.reference_last_seq)"
    )]
    LastSeq {
        /// The referencing run.
        run_id: RunId,
        /// The run it names.
        parent: RunId,
        /// The seq referenced.
        expected: u64,
        /// The referenced run's last seq.
        found: u64,
    },
    /// The referenced run's lines do not digest to the referenced digest:
    /// it was altered after it was referenced.
    #[error(
        "run {run_id} seq 2 references run {parent} with a digest its stored lines do not have (rule history.reference_digest)"
    )]
    Digest {
        /// The referencing run.
        run_id: RunId,
        /// The run it names.
        parent: RunId,
    },
    /// `run.started` names another run in `continues` than the reference
    /// (or none).
    #[error(
        "run {run_id} continues {} but seq 2 references run {parent} (rule history.reference_continues)",
        .continues.as_ref().map_or("nothing", RunId::as_str)
    )]
    Continues {
        /// The referencing run.
        run_id: RunId,
        /// What `run.started` names.
        continues: Option<RunId>,
        /// What the reference names.
        parent: RunId,
    },
    /// The references lead back to a run already in the chain.
    #[error(
        "run {run_id} seq 2 references run {parent}, which is already in its chain (rule history.reference_acyclic)"
    )]
    Cycle {
        /// The referencing run.
        run_id: RunId,
        /// The run it names.
        parent: RunId,
    },
    /// A run's stored events skip or repeat a seq.
    #[error("run {run_id} has seq {found} where seq {expected} belongs (rule history.contiguous)")]
    Gap {
        /// The run.
        run_id: RunId,
        /// The seq due.
        expected: u64,
        /// The seq found.
        found: u64,
    },
    /// `run.started` names a fork (`forked_from`) that is not the run and
    /// seq the reference names, or names both a fork and a continuation.
    #[error(
        "run {run_id} is forked from run {} at seq {} but seq 2 references run {parent} through seq {last_seq}{} (rule history.reference_forked_from)",
        .forked_from.run_id, .forked_from.seq,
        if *.continues { " and run.started also names a run it continues" } else { "" }
    )]
    ForkedFrom {
        /// The referencing run.
        run_id: RunId,
        /// What `run.started` names.
        forked_from: ForkedFrom,
        /// Whether `run.started` names `continues` too.
        continues: bool,
        /// The run the reference names.
        parent: RunId,
        /// The seq the reference names.
        last_seq: u64,
    },
    /// A fork's seq is not a fork point of the run it names
    /// ([`ForkPoints`]), or that run has no event there.
    #[error("run {run_id}: {source}")]
    ForkPoint {
        /// The run forked from.
        run_id: RunId,
        /// Why.
        #[source]
        source: ForkPointError,
    },
    /// The chain is longer than [`MAX_CHAIN_DEPTH`].
    #[error("run {run_id} inherits through more than {max} runs (rule history.chain_depth)")]
    TooDeep {
        /// The run asked for.
        run_id: RunId,
        /// The bound.
        max: usize,
    },
}

/// Where a rebuilt chain ends: the history and the reference a run
/// continuing it records.
#[derive(Debug, Clone, PartialEq)]
pub struct RebuiltChain {
    /// The history the run ended with, inherited messages first.
    pub history: Vec<Message>,
    /// The run's id, its last seq and the digest of its lines.
    pub reference: HistoryReference,
    /// The runs of the chain, the root first and the run asked for last.
    pub runs: Vec<RunId>,
}

/// Rebuilds the history `run_id` ended with, following `run.input`
/// references through `store` (checked: [`ChainError`]), under the message
/// bounds the runs used; with the reference a run continuing it records.
///
/// Memory: the chain's run ids (at most [`MAX_CHAIN_DEPTH`]) and one page
/// of events at a time, beside the history itself. Logs that repeat their
/// input in full (written before references) rebuild as they are.
///
/// ```
/// use keel_eventlog::history::{self, HistoryStore};
/// use keel_eventlog::*;
/// use keel_message::{Limits, Message, MessageId, Role, RunId};
/// use std::sync::Arc;
///
/// struct Logs(Vec<RunLog>);
/// impl HistoryStore for Logs {
///     type Error = std::convert::Infallible;
///     fn events_after(&self, run: &RunId, after: u64, limit: usize) -> Result<Vec<Event>, Self::Error> {
///         let log = self.0.iter().find(|l| l.run_id() == run);
///         Ok(log.map_or_else(Vec::new, |l| {
///             l.retained_after(after).iter().take(limit).map(|e| (**e).clone()).collect()
///         }))
///     }
/// }
/// let clock = Arc::new(SystemClock);
/// let hi = Message::text(MessageId::parse("m1")?, Role::User, "Hi")?;
/// let first = RunLog::new(RunId::parse("run_1")?, LogConfig::default(), clock.clone())?;
/// first.commit(&Payload::RunStarted(RunStarted::default()))?;
/// first.commit(&Payload::RunInput(RunInput { message: hi.clone(), extra: Extra::new() }))?;
/// first.commit(&Payload::RunCompleted(RunCompleted::default()))?;
/// let end = history::rebuild_chain(&Logs(vec![first.clone()]), first.run_id(), &Limits::default())?;
///
/// let again = Message::text(MessageId::parse("run_2.u1")?, Role::User, "Again")?;
/// let second = RunLog::new(RunId::parse("run_2")?, LogConfig::default(), clock)?;
/// second.commit(&Payload::RunStarted(RunStarted { continues: Some(first.run_id().clone()), ..RunStarted::default() }))?;
/// second.commit(&Payload::RunInputReference(RunInputReference { history: end.reference, extra: Extra::new() }))?;
/// second.commit(&Payload::RunInput(RunInput { message: again.clone(), extra: Extra::new() }))?;
/// let logs = Logs(vec![first, second.clone()]);
/// let rebuilt = history::rebuild_chain(&logs, second.run_id(), &Limits::default())?;
/// assert_eq!(rebuilt.history, vec![hi, again]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn rebuild_chain<S: HistoryStore + ?Sized>(
    store: &S,
    run_id: &RunId,
    limits: &Limits,
) -> Result<RebuiltChain, ChainError<S::Error>> {
    rebuild_until(store, run_id, None, limits)
}

/// [`rebuild_chain`], reading `run_id` only through seq `until` when one
/// is given (a fork point of it, checked: [`ChainError::ForkPoint`]).
pub(super) fn rebuild_until<S: HistoryStore + ?Sized>(
    store: &S,
    run_id: &RunId,
    until: Option<u64>,
    limits: &Limits,
) -> Result<RebuiltChain, ChainError<S::Error>> {
    let chain = walk_up(store, run_id)?;
    // Where each run is read to: a run forked from is read only through
    // the seq its fork names.
    let bounds: Vec<Option<u64>> = std::iter::once(until)
        .chain(chain.iter().map(|link| link.fork_seq))
        .take(chain.len())
        .collect();
    let mut rebuilt: Option<RebuiltChain> = None;
    let mut runs = Vec::with_capacity(chain.len());
    // Root first: each run's history is the next one's inheritance.
    for (link, bound) in chain.into_iter().zip(bounds).rev() {
        let inherited = match rebuilt {
            Some(parent) => {
                check_reference(&link, &parent.reference)?;
                parent.history
            }
            None => Vec::new(),
        };
        rebuilt = Some(stream_run(store, &link.run, inherited, limits, bound)?);
        runs.push(link.run);
    }
    let mut rebuilt = rebuilt.ok_or_else(|| ChainError::Unknown {
        run_id: run_id.clone(),
    })?;
    rebuilt.runs = runs;
    Ok(rebuilt)
}

/// The runs of `run_id`'s chain of references, the root first and
/// `run_id` last, as their first two events name them (cycles and the
/// depth bound checked; the digests are not: [`rebuild_chain`] checks
/// them). What an export of `run_id` must carry.
pub fn chain_runs<S: HistoryStore + ?Sized>(
    store: &S,
    run_id: &RunId,
) -> Result<Vec<RunId>, ChainError<S::Error>> {
    Ok(walk_up(store, run_id)?
        .into_iter()
        .rev()
        .map(|link| link.run)
        .collect())
}

/// A run of the chain and the reference its seq 2 holds (`None`: its
/// input is its own).
struct Link {
    run: RunId,
    reference: Option<HistoryReference>,
    /// The seq of the parent it was forked at (`None`: not a fork).
    fork_seq: Option<u64>,
}

/// Reads the first two events of each run back from `run_id`, checking
/// for cycles and the depth bound.
fn walk_up<S: HistoryStore + ?Sized>(
    store: &S,
    run_id: &RunId,
) -> Result<Vec<Link>, ChainError<S::Error>> {
    let mut chain: Vec<Link> = Vec::new();
    let mut seen: HashSet<RunId> = HashSet::new();
    let mut at = run_id.clone();
    loop {
        let head = read_head(store, &at)?;
        if head.is_empty() {
            return Err(match chain.last() {
                None => ChainError::Unknown { run_id: at },
                Some(child) => ChainError::MissingParent {
                    run_id: child.run.clone(),
                    parent: at,
                },
            });
        }
        let (reference, fork_seq) = match head_reference(&at, &head)? {
            Some(head) => (Some(head.reference), head.fork_seq),
            None => (None, None),
        };
        seen.insert(at.clone());
        let parent = reference.as_ref().map(|r| r.run_id.clone());
        chain.push(Link {
            run: at.clone(),
            reference,
            fork_seq,
        });
        let Some(parent) = parent else {
            return Ok(chain);
        };
        if seen.contains(&parent) {
            return Err(ChainError::Cycle { run_id: at, parent });
        }
        if chain.len() >= MAX_CHAIN_DEPTH {
            return Err(ChainError::TooDeep {
                run_id: run_id.clone(),
                max: MAX_CHAIN_DEPTH,
            });
        }
        at = parent;
    }
}

/// A run's seq 2 reference and, for a fork, the parent's seq it names.
struct HeadReference {
    reference: HistoryReference,
    fork_seq: Option<u64>,
}

/// The reference among a run's first events, checked against the
/// `continues` or `forked_from` its `run.started` names.
fn head_reference<E: std::error::Error + 'static>(
    run: &RunId,
    head: &[Event],
) -> Result<Option<HeadReference>, ChainError<E>> {
    let payload = |event: &Event| {
        event.payload().map_err(|e| ChainError::History {
            run_id: run.clone(),
            source: HistoryError::Undecodable {
                seq: event.seq(),
                detail: e.to_string(),
            },
        })
    };
    let Some(second) = head.iter().find(|e| e.seq() == REFERENCE_SEQ) else {
        return Ok(None);
    };
    let Payload::RunInputReference(input) = payload(second)? else {
        return Ok(None);
    };
    let (continues, forked_from) = match head.first().map(payload).transpose()? {
        Some(Payload::RunStarted(started)) => (started.continues, started.forked_from),
        _ => (None, None),
    };
    if let Some(forked_from) = forked_from {
        return fork_reference(run, forked_from, continues.is_some(), input.history).map(Some);
    }
    if continues.as_ref() != Some(&input.history.run_id) {
        return Err(ChainError::Continues {
            run_id: run.clone(),
            continues,
            parent: input.history.run_id,
        });
    }
    Ok(Some(HeadReference {
        reference: input.history,
        fork_seq: None,
    }))
}

/// A fork's reference, checked against its `forked_from`: the same run,
/// through the fork's seq, and no `continues` beside it.
fn fork_reference<E: std::error::Error + 'static>(
    run: &RunId,
    forked_from: ForkedFrom,
    continues: bool,
    reference: HistoryReference,
) -> Result<HeadReference, ChainError<E>> {
    if continues || forked_from.run_id != reference.run_id || forked_from.seq != reference.last_seq
    {
        return Err(ChainError::ForkedFrom {
            run_id: run.clone(),
            forked_from,
            continues,
            parent: reference.run_id,
            last_seq: reference.last_seq,
        });
    }
    Ok(HeadReference {
        fork_seq: Some(reference.last_seq),
        reference,
    })
}

/// Streams `run`'s events a page at a time into a rebuild from
/// `inherited`, digesting its lines; its history and the reference to it.
/// With `until`, only through that seq, which must be a fork point.
fn stream_run<S: HistoryStore + ?Sized>(
    store: &S,
    run: &RunId,
    inherited: Vec<Message>,
    limits: &Limits,
    until: Option<u64>,
) -> Result<RebuiltChain, ChainError<S::Error>> {
    let mut rebuild = HistoryFold::after(inherited, limits.clone());
    let mut hasher = HistoryHasher::default();
    let mut points = until.map(|_| ForkPoints::default());
    let mut after_point: Option<Event> = None;
    let history_error = |source| ChainError::History {
        run_id: run.clone(),
        source,
    };
    while after_point.is_none() {
        let limit = until.map_or(PAGE_EVENTS, |seq| page_through(seq, hasher.last_seq()));
        let page = read(store, run, hasher.last_seq(), limit)?;
        if page.is_empty() {
            break;
        }
        for event in page {
            if until.is_some_and(|seq| event.seq() > seq) {
                after_point = Some(event);
                break;
            }
            // Contiguous from 1, so every page moves on and the digest is
            // of the whole run.
            let expected = hasher.last_seq() + 1;
            if event.seq() != expected {
                return Err(ChainError::Gap {
                    run_id: run.clone(),
                    expected,
                    found: event.seq(),
                });
            }
            rebuild.push(&event).map_err(history_error)?;
            hasher.update(&event);
            if let Some(points) = &mut points {
                points.push(&event).map_err(history_error)?;
            }
        }
    }
    if let (Some(seq), Some(points)) = (until, &points) {
        points
            .check(seq, after_point.as_ref())
            .map_err(|source| ChainError::ForkPoint {
                run_id: run.clone(),
                source,
            })?;
    }
    let history = rebuild.finish().map_err(history_error)?;
    Ok(RebuiltChain {
        history,
        reference: HistoryReference::new(run.clone(), hasher),
        runs: Vec::new(),
    })
}

/// How many events to read after `last` to reach seq `until` and the one
/// after it (whether a `run.input` is the last of the input depends on
/// it), at most a page.
fn page_through(until: u64, last: u64) -> usize {
    usize::try_from(until.saturating_sub(last).saturating_add(1))
        .map_or(PAGE_EVENTS, |n| n.min(PAGE_EVENTS))
}

/// Checks `link`'s reference against the run it names, as streamed.
fn check_reference<E: std::error::Error + 'static>(
    link: &Link,
    parent: &HistoryReference,
) -> Result<(), ChainError<E>> {
    let run = &link.run;
    let Some(expected) = &link.reference else {
        return Ok(());
    };
    if expected.last_seq != parent.last_seq {
        return Err(ChainError::LastSeq {
            run_id: run.clone(),
            parent: parent.run_id.clone(),
            expected: expected.last_seq,
            found: parent.last_seq,
        });
    }
    if expected.digest != parent.digest {
        return Err(ChainError::Digest {
            run_id: run.clone(),
            parent: parent.run_id.clone(),
        });
    }
    Ok(())
}

/// A run's events through seq 2 (fewer if it has fewer): a page may be
/// short, so it reads until it has them or a page is empty.
fn read_head<S: HistoryStore + ?Sized>(
    store: &S,
    run: &RunId,
) -> Result<Vec<Event>, ChainError<S::Error>> {
    let mut head: Vec<Event> = Vec::new();
    loop {
        let after = head.last().map_or(0, Event::seq);
        if after >= REFERENCE_SEQ {
            return Ok(head);
        }
        let page = read(store, run, after, (REFERENCE_SEQ - after) as usize)?;
        if page.is_empty() {
            return Ok(head);
        }
        head.extend(page.into_iter().filter(|e| e.seq() > after));
        if head.last().map_or(0, Event::seq) == after {
            return Ok(head);
        }
    }
}

fn read<S: HistoryStore + ?Sized>(
    store: &S,
    run: &RunId,
    after: u64,
    limit: usize,
) -> Result<Vec<Event>, ChainError<S::Error>> {
    store
        .events_after(run, after, limit)
        .map_err(|source| ChainError::Store {
            run_id: run.clone(),
            source,
        })
}
