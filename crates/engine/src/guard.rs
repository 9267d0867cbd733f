//! Panic guards for the extension points (providers, tools, interaction
//! handlers): a panic in the call that builds a future, or while the
//! future is polled, becomes a value the run loop turns into a typed
//! failure, so every started scope still gets its terminal.

use futures_util::FutureExt;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// An extension point panicked (synchronously or while polled).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Panicked;

/// Calls `start` (the synchronous part) and awaits its future, both under
/// an unwind guard.
pub(crate) async fn guarded<F, T>(start: impl FnOnce() -> F) -> Result<T, Panicked>
where
    F: Future<Output = T>,
{
    // The engine's state is not touched inside these calls, so unwinding
    // through them cannot leave it half-updated.
    let future = catch_unwind(AssertUnwindSafe(start)).map_err(|_| Panicked)?;
    AssertUnwindSafe(future)
        .catch_unwind()
        .await
        .map_err(|_| Panicked)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[allow(clippy::panic)]
    fn boom() -> std::future::Ready<u8> {
        panic!("synchronous")
    }

    #[tokio::test]
    async fn both_parts_are_guarded() {
        assert_eq!(guarded(|| async { 7 }).await, Ok(7));
        assert_eq!(guarded(boom).await, Err(Panicked));
        #[allow(clippy::panic)]
        let polled = guarded(|| async { panic!("asynchronous") }).await;
        assert_eq!(polled, Err::<(), _>(Panicked));
    }
}
