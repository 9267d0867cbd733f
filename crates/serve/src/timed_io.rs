//! A connection's socket with a write timeout and an activity clock: a
//! write the client does not take within `--write-timeout-ms` fails (so
//! hyper closes the connection and drops what it was sending), and every
//! byte read or written moves the clock the idle timeout watches.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// When a connection last moved a byte, shared by its socket and its
/// idle watchdog.
#[derive(Debug)]
pub struct Activity {
    start: Instant,
    /// Milliseconds from `start` to the last byte moved.
    last_ms: AtomicU64,
}

impl Activity {
    /// A clock that starts now.
    pub fn new() -> Arc<Activity> {
        Arc::new(Activity {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
        })
    }

    fn touch(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    fn last(&self) -> Instant {
        self.start + Duration::from_millis(self.last_ms.load(Ordering::Relaxed))
    }

    /// Resolves once no byte has moved for `idle`.
    pub async fn idle_for(&self, idle: Duration) {
        loop {
            let deadline = self.last() + idle;
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

/// `io` whose writes fail after `write_timeout` without progress.
#[derive(Debug)]
pub struct TimedIo<T> {
    io: T,
    write_timeout: Duration,
    /// Armed while a write, flush or shutdown is pending.
    stalled: Option<Pin<Box<Sleep>>>,
    activity: Arc<Activity>,
}

impl<T> TimedIo<T> {
    /// Wraps `io`.
    pub fn new(io: T, write_timeout: Duration, activity: Arc<Activity>) -> TimedIo<T> {
        TimedIo {
            io,
            write_timeout,
            stalled: None,
            activity,
        }
    }

    /// What a pending write becomes: still pending, or a timeout error once
    /// it has waited `write_timeout`.
    fn pending<R>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<R>> {
        let bound = self.write_timeout;
        let sleep = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(bound)));
        ready!(sleep.as_mut().poll(cx));
        self.stalled = None;
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "the client took no byte for {} ms (--write-timeout-ms)",
                bound.as_millis()
            ),
        )))
    }

    /// Disarms the timer after progress; counts written bytes as activity.
    fn progressed<R>(&mut self, done: io::Result<R>, moved: bool) -> Poll<io::Result<R>> {
        self.stalled = None;
        if moved {
            self.activity.touch();
        }
        Poll::Ready(done)
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for TimedIo<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = ready!(Pin::new(&mut this.io).poll_read(cx, buf));
        if buf.filled().len() > before {
            this.activity.touch();
        }
        Poll::Ready(r)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for TimedIo<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.io).poll_write(cx, buf) {
            Poll::Ready(r) => {
                let moved = matches!(r, Ok(n) if n > 0);
                this.progressed(r, moved)
            }
            Poll::Pending => this.pending(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.io).poll_write_vectored(cx, bufs) {
            Poll::Ready(r) => {
                let moved = matches!(r, Ok(n) if n > 0);
                this.progressed(r, moved)
            }
            Poll::Pending => this.pending(cx),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.io).poll_flush(cx) {
            Poll::Ready(r) => this.progressed(r, false),
            Poll::Pending => this.pending(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.io).poll_shutdown(cx) {
            Poll::Ready(r) => this.progressed(r, false),
            Poll::Pending => this.pending(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test(start_paused = true)]
    async fn a_write_nobody_reads_fails_at_its_bound() {
        // A pipe whose reader never reads: 64 bytes fit, then writes block.
        let (writer, _reader) = tokio::io::duplex(64);
        let mut io = TimedIo::new(writer, Duration::from_millis(500), Activity::new());
        let err = io.write_all(&[0u8; 1024]).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(err.to_string().contains("--write-timeout-ms"), "{err}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_reader_that_keeps_up_is_never_timed_out() {
        let (writer, mut reader) = tokio::io::duplex(64);
        let drain = tokio::spawn(async move {
            let mut sink = Vec::new();
            tokio::io::AsyncReadExt::read_to_end(&mut reader, &mut sink)
                .await
                .unwrap();
            sink.len()
        });
        let mut io = TimedIo::new(writer, Duration::from_millis(500), Activity::new());
        io.write_all(&[7u8; 4096]).await.unwrap();
        io.shutdown().await.unwrap();
        drop(io);
        assert_eq!(drain.await.unwrap(), 4096);
    }

    #[tokio::test(start_paused = true)]
    async fn idle_resolves_after_the_last_byte() {
        let activity = Activity::new();
        let started = Instant::now();
        tokio::time::sleep(Duration::from_millis(300)).await;
        activity.touch();
        activity.idle_for(Duration::from_millis(1000)).await;
        assert!(started.elapsed() >= Duration::from_millis(1300));
    }
}
