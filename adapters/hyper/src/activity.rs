//! What a connection is doing: when bytes last moved and how many requests are in flight.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// One connection's activity, shared by its IO, its service and its watchdog.
#[derive(Debug)]
pub(crate) struct Activity {
    /// When the connection was accepted; the stamps below count from it.
    opened: Instant,
    /// Nanoseconds after `opened` when bytes last moved or a request began or ended.
    last_active: AtomicU64,
    /// Nanoseconds after `opened` when the connection last had no request in flight.
    idle_since: AtomicU64,
    in_flight: AtomicUsize,
}

/// A moment's view of an [`Activity`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Snapshot {
    /// Requests being served.
    pub(crate) in_flight: usize,
    /// When bytes last moved or a request began or ended.
    pub(crate) last_active: Instant,
    /// When the last request ended (or the connection opened).
    pub(crate) idle_since: Instant,
}

impl Activity {
    /// A connection accepted now, with no request yet.
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            opened: Instant::now(),
            last_active: AtomicU64::new(0),
            idle_since: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
        })
    }

    /// Records that bytes moved.
    pub(crate) fn touch(&self) {
        self.last_active.store(self.now(), Ordering::Relaxed);
    }

    /// Marks a request as in flight until the returned guard is dropped.
    pub(crate) fn begin(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.touch();
        InFlight(Arc::clone(self))
    }

    /// The current state.
    pub(crate) fn snapshot(&self) -> Snapshot {
        let in_flight = self.in_flight.load(Ordering::Acquire);
        Snapshot {
            in_flight,
            last_active: self.at(self.last_active.load(Ordering::Relaxed)),
            idle_since: self.at(self.idle_since.load(Ordering::Relaxed)),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.opened.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn at(&self, nanos: u64) -> Instant {
        self.opened + Duration::from_nanos(nanos)
    }
}

/// A request in flight on a connection; dropping it ends the request.
#[derive(Debug)]
pub(crate) struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let activity = &self.0;
        let now = activity.now();
        activity.last_active.store(now, Ordering::Relaxed);
        if activity.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            activity.idle_since.store(now, Ordering::Relaxed);
        }
    }
}

/// An IO stream that stamps its connection's [`Activity`] whenever bytes move.
#[derive(Debug)]
pub(crate) struct TrackedIo<T> {
    inner: T,
    activity: Arc<Activity>,
}

impl<T> TrackedIo<T> {
    /// Wraps `inner`, stamping `activity`.
    pub(crate) fn new(inner: T, activity: Arc<Activity>) -> Self {
        Self { inner, activity }
    }

    fn wrote(&self, written: Poll<io::Result<usize>>) -> Poll<io::Result<usize>> {
        if matches!(written, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        written
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for TrackedIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let read = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        read
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for TrackedIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.wrote(written)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.wrote(written)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn requests_and_bytes_stamp_the_activity() {
        let activity = Activity::new();
        let opened = activity.snapshot();
        assert_eq!(opened.in_flight, 0);

        tokio::time::advance(Duration::from_secs(1)).await;
        let request = activity.begin();
        let busy = activity.snapshot();
        assert_eq!(busy.in_flight, 1);
        assert!(busy.last_active > opened.last_active);
        assert_eq!(
            busy.idle_since, opened.idle_since,
            "idle until a request ends"
        );

        tokio::time::advance(Duration::from_secs(1)).await;
        drop(request);
        let done = activity.snapshot();
        assert_eq!(done.in_flight, 0);
        assert_eq!(done.idle_since, done.last_active);
        assert!(done.idle_since > busy.last_active);

        tokio::time::advance(Duration::from_secs(1)).await;
        activity.touch();
        let moved = activity.snapshot();
        assert!(moved.last_active > done.last_active);
        assert_eq!(moved.idle_since, done.idle_since, "bytes are not a request");
    }
}
