//! The bounded queue behind each best-effort observer: crossbeam-channel in
//! normal builds; under `cfg(loom)` a small Mutex+Condvar channel with the
//! same semantics, so the loom model checks the real close protocol.

#[cfg(not(loom))]
pub(crate) use crossbeam_channel::{Receiver, Sender, TrySendError, bounded};

#[cfg(loom)]
pub(crate) use self::loom_channel::{Receiver, Sender, TrySendError, bounded};

#[cfg(loom)]
mod loom_channel {
    use loom::sync::{Arc, Condvar, Mutex};
    use std::collections::VecDeque;

    struct Inner<T> {
        queue: VecDeque<T>,
        senders: usize,
        capacity: usize,
    }

    struct Shared<T> {
        inner: Mutex<Inner<T>>,
        ready: Condvar,
    }

    pub(crate) struct Sender<T>(Arc<Shared<T>>);
    pub(crate) struct Receiver<T>(Arc<Shared<T>>);

    #[derive(Debug)]
    #[allow(dead_code)] // mirrors crossbeam's; receivers outlive senders here
    pub(crate) enum TrySendError<T> {
        Full(T),
        Disconnected(T),
    }

    pub(crate) fn bounded<T>(capacity: usize) -> (Sender<T>, Receiver<T>) {
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner {
                queue: VecDeque::new(),
                senders: 1,
                capacity,
            }),
            ready: Condvar::new(),
        });
        (Sender(shared.clone()), Receiver(shared))
    }

    impl<T> Sender<T> {
        pub(crate) fn try_send(&self, value: T) -> Result<(), TrySendError<T>> {
            let mut inner = self.0.inner.lock().unwrap_or_else(|e| e.into_inner());
            if inner.queue.len() >= inner.capacity {
                return Err(TrySendError::Full(value));
            }
            inner.queue.push_back(value);
            self.0.ready.notify_one();
            Ok(())
        }
    }

    impl<T> Drop for Sender<T> {
        fn drop(&mut self) {
            let mut inner = self.0.inner.lock().unwrap_or_else(|e| e.into_inner());
            inner.senders -= 1;
            self.0.ready.notify_all();
        }
    }

    impl<T> Receiver<T> {
        /// Blocks for the next value; `Err(())` once empty and every
        /// sender is gone.
        pub(crate) fn recv(&self) -> Result<T, ()> {
            let mut inner = self.0.inner.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                if let Some(v) = inner.queue.pop_front() {
                    return Ok(v);
                }
                if inner.senders == 0 {
                    return Err(());
                }
                inner = self.0.ready.wait(inner).unwrap_or_else(|e| e.into_inner());
            }
        }
    }
}
