//! `Progress`: how far the replayed run's log has got, so that replayed
//! tool results and approvals land in the recorded order.

use crate::sync::{Signal, lock};
use keel_eventlog::RunLog;
use std::sync::Mutex;

/// The replayed run's log (read synchronously: what it has committed,
/// not what a follower has seen yet) and whether waiting is over.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    state: Mutex<State>,
    signal: Signal,
}

#[derive(Debug, Default)]
struct State {
    log: Option<RunLog>,
    released: bool,
}

impl Progress {
    /// Starts a replay of the run `log` records.
    pub(crate) fn start(&self, log: RunLog) {
        *lock(&self.state) = State {
            log: Some(log),
            released: false,
        };
        self.signal.changed();
    }

    /// The replayed run committed more: look again.
    pub(crate) fn advanced(&self) {
        self.signal.changed();
    }

    /// Lets every waiter go: the replay diverged, went quiet, or ended,
    /// so the recorded order can no longer be reproduced by waiting.
    pub(crate) fn release_all(&self) {
        lock(&self.state).released = true;
        self.signal.changed();
    }

    /// Waits until the replayed run has committed `seq`.
    pub(crate) async fn reached(&self, seq: u64) {
        self.signal
            .until(|| {
                let state = lock(&self.state);
                state.released
                    || state
                        .log
                        .as_ref()
                        .is_some_and(|l| l.stats().last_seq >= seq)
            })
            .await;
    }
}
