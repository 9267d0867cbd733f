//! [`TreeFollower`]: a run and every descendant it starts, merged into one
//! stream of [`TreeEvent`]s with one [`TreeCursor`].
//!
//! Each run is followed by its own [`RunFollower`] (the history, then the
//! live log: no gap, no duplicate). A child is discovered when its
//! parent's `tool.sub_run` is delivered, and followed from its start.
//! Runs interleave as their events come, with two holds that keep the
//! merge causal: a child's events come after the `tool.sub_run` naming it
//! (it is only followed from then), and the parent's terminal of that call
//! (`tool.completed`, `tool.failed`, `tool.cancelled`) waits until the
//! child's run terminal is delivered (or its stream ended without one, or
//! it never started). So a parent's run terminal comes after its
//! children's, and a reader sees a child end before its parent's call
//! does.
//!
//! The cursor of every delivered event resumes the merge exactly after it
//! ([`TreeFollower::open`] with it): each run restarts after its own seq,
//! a listed run's children discovered before it are listed themselves,
//! and a child not discovered yet is found again from its parent's
//! `tool.sub_run`, which lies after the parent's seq. At most
//! [`MAX_TREE_RUNS`] runs are followed at once: discovering one more ends
//! the stream with [`TreeFollowError::TooManyRuns`] before the
//! `tool.sub_run` is delivered.

mod resume;
mod source;

use crate::follow::FollowError;
#[cfg(doc)]
use crate::follow::RunFollower;
use crate::tree_cursor::{MAX_TREE_RUNS, TreeCursor};
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use keel_eventlog::{
    Event, EventDecodeError, EventKind, Payload, Phase, Scope, SubscriptionBounds,
};
use keel_message::{CallId, RunId};
use source::{EngineSource, RunSource, child_stream};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

/// One event of a run tree's merged stream.
#[derive(Debug, Clone)]
pub struct TreeEvent {
    /// The run the event belongs to (the event's own `run_id`).
    pub run_id: RunId,
    /// The run whose `tool.sub_run` started it; `None` for the root.
    pub parent: Option<RunId>,
    /// The event.
    pub event: Arc<Event>,
    /// The cursor right after this event: resuming from it gives what
    /// follows it, nothing again.
    pub cursor: TreeCursor,
}

/// Why a tree follower could not be opened, or ended before every run's
/// terminal.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TreeFollowError {
    /// The root could not be followed from the cursor's root seq. From
    /// `open`.
    #[error(transparent)]
    Root(FollowError),
    /// A listed run could not be followed from its seq (unknown, seq
    /// ahead or expired, the history failing). From `open`.
    #[error("cursor entry {entry}: {source}")]
    Entry {
        /// The 1-based entry.
        entry: usize,
        /// Why.
        source: FollowError,
    },
    /// The cursor lists the root among the other runs. From `open`.
    #[error("cursor entry {entry} names the root run (rule tree_cursor.root_listed)")]
    RootListed {
        /// The 1-based entry.
        entry: usize,
    },
    /// A listed run is not a sub-run of the root (nor of its sub-runs,
    /// within 64 levels). From `open`.
    #[error(
        "cursor entry {entry} names a run that is not a descendant of the root (rule tree_cursor.descendant)"
    )]
    NotDescendant {
        /// The 1-based entry.
        entry: usize,
    },
    /// A run's follower ended with an error. From `next`; the cursor of
    /// the last event delivered resumes.
    #[error("run {run_id}: {source}")]
    Run {
        /// The run.
        run_id: RunId,
        /// Why.
        source: FollowError,
    },
    /// A `tool.sub_run` would make more than [`MAX_TREE_RUNS`] runs
    /// followed at once. From `next`; it was not delivered.
    #[error(
        "run {parent}'s tool.sub_run at seq {seq} would follow more than {MAX_TREE_RUNS} runs at once (rule tree.max_runs)"
    )]
    TooManyRuns {
        /// The run that started one more child.
        parent: RunId,
        /// The seq of its `tool.sub_run`.
        seq: u64,
    },
    /// A child's `run.started` names another parent call than the
    /// `tool.sub_run` that started it. From `next`.
    #[error(
        "run {run_id}'s run.started does not name run {parent}'s call {call_id}, whose tool.sub_run names it (rule tree.parent_agrees)"
    )]
    ParentDisagrees {
        /// The child.
        run_id: RunId,
        /// The run whose `tool.sub_run` named it.
        parent: RunId,
        /// That call.
        call_id: CallId,
    },
    /// A `tool.sub_run` that does not decode. From `next`.
    #[error("run {run_id}'s tool.sub_run at seq {seq} does not decode: {source}")]
    SubRun {
        /// The run.
        run_id: RunId,
        /// Its seq.
        seq: u64,
        /// Why.
        source: EventDecodeError,
    },
}

/// A tool call of a run: what a child answers.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct RunCall {
    pub(crate) run_id: RunId,
    pub(crate) call_id: CallId,
}

/// What a run's stream gave next, looked at but not delivered.
enum Ahead {
    Event {
        event: Arc<Event>,
        /// The call of a tool terminal (it may have to wait for a child).
        call: Option<CallId>,
    },
    Failed(FollowError),
    Ended,
}

/// One run followed.
struct Member {
    run_id: RunId,
    /// Its parent's call; `None` for the root.
    link: Option<RunCall>,
    stream: BoxStream<'static, Result<Arc<Event>, FollowError>>,
    ahead: Option<Ahead>,
    /// The last seq delivered.
    delivered: u64,
    /// Set when the child may stop looking for its start (see
    /// [`child_stream`]).
    give_up: Arc<AtomicBool>,
}

impl Member {
    fn new(
        run_id: RunId,
        link: Option<RunCall>,
        stream: BoxStream<'static, Result<Arc<Event>, FollowError>>,
        delivered: u64,
    ) -> Member {
        Member {
            run_id,
            link,
            stream,
            ahead: None,
            delivered,
            give_up: Arc::new(AtomicBool::new(false)),
        }
    }
}

/// What to do with the event a member gave.
enum Step {
    Deliver(TreeEvent),
    /// Nothing to deliver from it (a stream ended, a child never started).
    Skip,
    Fail(TreeFollowError),
}

/// Follows a run and every descendant it starts, merged: each run through
/// its own [`RunFollower`], a child from the delivery of the `tool.sub_run`
/// naming it, and a parent's terminal of that call held until the child's
/// run terminal is delivered. Every [`TreeEvent`] carries the
/// [`TreeCursor`] that resumes right after it ([`TreeFollower::open`]):
/// nothing repeated, nothing lost. At most [`MAX_TREE_RUNS`] runs at once.
/// `next` is cancel safe: dropping its future loses no event.
pub struct TreeFollower {
    source: Arc<dyn RunSource>,
    root: RunId,
    bounds: SubscriptionBounds,
    members: Vec<Member>,
    /// The calls whose child's end is not delivered, and that child.
    open_calls: HashMap<RunCall, RunId>,
    /// Runs whose terminal this follower delivered.
    done: HashSet<RunId>,
    cursor: TreeCursor,
    /// Where the next pick starts, so no run starves the others.
    turn: usize,
    failed: bool,
}

impl std::fmt::Debug for TreeFollower {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TreeFollower")
            .field("root", &self.root)
            .field("cursor", &self.cursor)
            .field("following", &self.members.len())
            .field("failed", &self.failed)
            .finish()
    }
}

impl TreeFollower {
    /// Follows run `root` of `engine` and its descendants after `cursor`
    /// (`TreeCursor::new(0)`: from the start), each run's live part under
    /// `bounds`. Refused when the root can't be followed from its seq
    /// ([`TreeFollowError::Root`]), or a listed run is the root, is not its
    /// descendant, or can't be followed from its seq. May read the
    /// history, hence async.
    pub async fn open(
        engine: &crate::Engine,
        root: RunId,
        cursor: TreeCursor,
        bounds: SubscriptionBounds,
    ) -> Result<TreeFollower, TreeFollowError> {
        TreeFollower::open_from(Arc::new(EngineSource(engine.clone())), root, cursor, bounds).await
    }

    pub(crate) async fn open_from(
        source: Arc<dyn RunSource>,
        root: RunId,
        cursor: TreeCursor,
        bounds: SubscriptionBounds,
    ) -> Result<TreeFollower, TreeFollowError> {
        let resumed = resume::resume(source.as_ref(), &root, &cursor, bounds).await?;
        let mut open_calls = HashMap::new();
        let mut members = Vec::with_capacity(resumed.listed.len() + 1);
        // A run whose follower has nothing to give (the cursor is at its
        // terminal, or at the end of a run that is not live) is not
        // followed; it stays in the cursor as it was.
        if !resumed.root.is_finished() {
            let stream = resumed.root.into_stream().boxed();
            members.push(Member::new(root.clone(), None, stream, cursor.root_seq()));
        }
        for listed in resumed.listed {
            if listed.follower.is_finished() {
                continue;
            }
            let delivered = listed.follower.cursor();
            open_calls.insert(listed.link.clone(), listed.run_id.clone());
            members.push(Member::new(
                listed.run_id,
                Some(listed.link),
                listed.follower.into_stream().boxed(),
                delivered,
            ));
        }
        Ok(TreeFollower {
            source,
            root,
            bounds,
            members,
            open_calls,
            done: HashSet::new(),
            cursor,
            turn: 0,
            failed: false,
        })
    }

    /// The root run.
    pub fn root(&self) -> &RunId {
        &self.root
    }

    /// The cursor after the last event delivered (the one opened with,
    /// before any).
    pub fn cursor(&self) -> &TreeCursor {
        &self.cursor
    }

    /// Whether `next` has nothing more to give: every run's stream has
    /// ended (right after `open`: the cursor is at the end of every run it
    /// names, so the client has the whole tree), or it failed.
    pub fn is_finished(&self) -> bool {
        self.failed || self.members.is_empty()
    }

    /// How many runs it follows now (the root while its stream lasts, and
    /// the children whose streams have not ended).
    pub fn following(&self) -> usize {
        self.members.len()
    }

    /// The next event of any run of the tree, waiting for it. `None` once
    /// every run's stream has ended (after its terminal, or, for a run
    /// that is not live, at its history's end), and after an error.
    pub async fn next(&mut self) -> Option<Result<TreeEvent, TreeFollowError>> {
        if self.failed {
            return None;
        }
        loop {
            let index = std::future::poll_fn(|cx| self.poll_pick(cx)).await?;
            match self.take(index) {
                Step::Deliver(event) => return Some(Ok(event)),
                Step::Skip => continue,
                Step::Fail(e) => {
                    self.failed = true;
                    self.members.clear();
                    return Some(Err(e));
                }
            }
        }
    }

    /// The follower as a [`Stream`](futures_core::Stream) of the same
    /// items as [`next`](Self::next).
    pub fn into_stream(
        self,
    ) -> impl futures_core::Stream<Item = Result<TreeEvent, TreeFollowError>> + Send + 'static {
        futures_util::stream::unfold(self, |mut follower| async move {
            let item = follower.next().await?;
            Some((item, follower))
        })
    }

    /// Looks ahead on every run that has nothing looked at, then picks the
    /// first run (from `turn` on) whose next item may be delivered:
    /// `Ready(None)` when no run is left.
    fn poll_pick(&mut self, cx: &mut Context<'_>) -> Poll<Option<usize>> {
        if self.members.is_empty() {
            return Poll::Ready(None);
        }
        let mut waiting = false;
        for member in &mut self.members {
            if member.ahead.is_some() {
                continue;
            }
            member.ahead = match member.stream.poll_next_unpin(cx) {
                Poll::Ready(Some(Ok(event))) => {
                    let call = terminal_call(&event);
                    Some(Ahead::Event { event, call })
                }
                Poll::Ready(Some(Err(e))) => Some(Ahead::Failed(e)),
                Poll::Ready(None) => Some(Ahead::Ended),
                Poll::Pending => {
                    waiting = true;
                    None
                }
            };
        }
        let count = self.members.len();
        let start = self.turn % count;
        self.turn = self.turn.wrapping_add(1);
        let mut held = None;
        for index in (0..count).map(|k| (start + k) % count) {
            match self.waits_for_child(index) {
                None if self.members[index].ahead.is_some() => return Poll::Ready(Some(index)),
                None => {}
                Some(child) => {
                    held.get_or_insert(index);
                    self.let_give_up(&child);
                }
            }
        }
        match held {
            // Every run holds a call for a child that is not followed (a
            // cycle of links in a damaged store): deliver rather than hang.
            Some(index) if !waiting => Poll::Ready(Some(index)),
            _ => Poll::Pending,
        }
    }

    /// The child the member's looked-at tool terminal waits for, if any.
    fn waits_for_child(&self, index: usize) -> Option<RunId> {
        let member = &self.members[index];
        let Some(Ahead::Event {
            call: Some(call_id),
            ..
        }) = &member.ahead
        else {
            return None;
        };
        let call = RunCall {
            run_id: member.run_id.clone(),
            call_id: call_id.clone(),
        };
        self.open_calls.get(&call).cloned()
    }

    /// A child whose parent's call has ended and that delivered nothing
    /// may stop looking for its start.
    fn let_give_up(&self, child: &RunId) {
        if let Some(member) = self.members.iter().find(|m| &m.run_id == child)
            && member.delivered == 0
        {
            member.give_up.store(true, Ordering::Release);
        }
    }

    fn take(&mut self, index: usize) -> Step {
        match self.members[index].ahead.take() {
            Some(Ahead::Event { event, call }) => self.deliver(index, event, call),
            Some(Ahead::Failed(FollowError::UnknownRun { .. }))
                if self.members[index].give_up.load(Ordering::Acquire) =>
            {
                // Its parent's call ended (or the parent's stream did) and
                // it was never found: the host was lost between the link
                // and its start. Nothing of it will ever be there.
                let member = self.members.remove(index);
                self.cursor.remove(&member.run_id);
                self.release(member.link.as_ref());
                Step::Skip
            }
            Some(Ahead::Failed(source)) => Step::Fail(TreeFollowError::Run {
                run_id: self.members[index].run_id.clone(),
                source,
            }),
            Some(Ahead::Ended) | None => {
                let member = self.members.remove(index);
                self.stream_ended(&member);
                Step::Skip
            }
        }
    }

    /// A run's stream ended without its terminal (a run that is not live
    /// and never ended, at its history's end): it stays in the cursor; its
    /// parent's call no longer waits for it, and its children that are not
    /// found yet will not be started by it now.
    fn stream_ended(&mut self, member: &Member) {
        self.release(member.link.as_ref());
        for child in &self.members {
            if child
                .link
                .as_ref()
                .is_some_and(|l| l.run_id == member.run_id)
                && child.delivered == 0
            {
                child.give_up.store(true, Ordering::Release);
            }
        }
    }

    fn release(&mut self, link: Option<&RunCall>) {
        if let Some(link) = link {
            self.open_calls.remove(link);
        }
    }

    fn deliver(&mut self, index: usize, event: Arc<Event>, call: Option<CallId>) -> Step {
        if event.kind() == &EventKind::ToolSubRun {
            match self.discover(index, &event) {
                Ok(()) => {}
                Err(e) => {
                    // Not delivered: the cursor stays before it.
                    self.members[index].ahead = Some(Ahead::Event { event, call });
                    return Step::Fail(e);
                }
            }
        }
        if let Err(e) = self.check_parent(index, &event) {
            return Step::Fail(e);
        }
        let member = &mut self.members[index];
        member.delivered = event.seq();
        let (run_id, link) = (member.run_id.clone(), member.link.clone());
        if link.is_none() {
            self.cursor.set_root(event.seq());
        } else {
            self.cursor.advance(&run_id, event.seq());
        }
        if event.kind().is_run_terminal() {
            let member = self.members.remove(index);
            self.done.insert(member.run_id.clone());
            if link.is_some() {
                self.cursor.remove(&run_id);
            }
            self.release(link.as_ref());
        }
        Step::Deliver(TreeEvent {
            run_id,
            parent: link.map(|l| l.run_id),
            event,
            cursor: self.cursor.clone(),
        })
    }

    /// Starts following the child a `tool.sub_run` of member `index`
    /// names; a child followed already (or done) is not followed again.
    fn discover(&mut self, index: usize, event: &Event) -> Result<(), TreeFollowError> {
        let parent = self.members[index].run_id.clone();
        let started = match event.payload() {
            Ok(Payload::ToolSubRun(started)) => started,
            Ok(_) => return Ok(()),
            Err(source) => {
                return Err(TreeFollowError::SubRun {
                    run_id: parent,
                    seq: event.seq(),
                    source,
                });
            }
        };
        let child = started.run_id;
        if self.done.contains(&child) || self.members.iter().any(|m| m.run_id == child) {
            return Ok(());
        }
        if self.cursor.discover(child.clone()).is_err() {
            return Err(TreeFollowError::TooManyRuns {
                parent,
                seq: event.seq(),
            });
        }
        let link = RunCall {
            run_id: parent,
            call_id: started.call_id,
        };
        let mut member = Member::new(
            child.clone(),
            Some(link.clone()),
            futures_util::stream::empty().boxed(),
            0,
        );
        member.stream = child_stream(
            Arc::clone(&self.source),
            child.clone(),
            self.bounds,
            Arc::clone(&member.give_up),
        );
        self.open_calls.insert(link, child);
        self.members.push(member);
        Ok(())
    }

    /// A child's `run.started` must name the call that started it.
    fn check_parent(&self, index: usize, event: &Event) -> Result<(), TreeFollowError> {
        let member = &self.members[index];
        let Some(link) = member.link.as_ref() else {
            return Ok(());
        };
        if event.kind() != &EventKind::Lifecycle(Scope::Run, Phase::Started) {
            return Ok(());
        }
        let named = match event.payload() {
            Ok(Payload::RunStarted(started)) => started.parent,
            _ => None,
        };
        match named {
            Some(named) if named.run_id == link.run_id && named.call_id == link.call_id => Ok(()),
            _ => Err(TreeFollowError::ParentDisagrees {
                run_id: member.run_id.clone(),
                parent: link.run_id.clone(),
                call_id: link.call_id.clone(),
            }),
        }
    }
}

/// The call of a tool terminal (`tool.completed`, `tool.failed`,
/// `tool.cancelled`); `None` for any other event.
fn terminal_call(event: &Event) -> Option<CallId> {
    if !matches!(
        event.kind(),
        EventKind::Lifecycle(Scope::Tool, Phase::Ended(_))
    ) {
        return None;
    }
    match event.payload().ok()? {
        Payload::ToolCompleted(p) => Some(p.call_id),
        Payload::ToolFailed(p) => Some(p.call_id),
        Payload::ToolCancelled(p) => Some(p.call_id),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
