//! Small shared-state helpers: poison-tolerant locking and a "state
//! changed" signal that async waiters can await.

use std::sync::{Mutex, MutexGuard};
use tokio::sync::Notify;

/// Locks, recovering from poisoning: a test helper's recorded state stays
/// readable even after a scripted panic elsewhere.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Wakes every waiter whenever shared state changes.
#[derive(Debug, Default)]
pub(crate) struct Signal(Notify);

impl Signal {
    /// Tells every waiter to look again.
    pub(crate) fn changed(&self) {
        self.0.notify_waiters();
    }

    /// Waits until `done()` holds. Registers before each check, so a change
    /// between the check and the wait is not missed.
    pub(crate) async fn until(&self, mut done: impl FnMut() -> bool) {
        loop {
            let notified = self.0.notified();
            if done() {
                return;
            }
            notified.await;
        }
    }
}

/// Panics with `message` as the payload (a `String`, as `panic!` gives).
// Panicking is the purpose: scripted panics test that the engine and the
// observer pipeline catch them.
#[allow(clippy::panic)]
pub(crate) fn scripted_panic(message: String) -> ! {
    std::panic::panic_any(message)
}
