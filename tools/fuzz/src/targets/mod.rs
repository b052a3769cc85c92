//! The fuzz targets and what they share: request bodies, hex, a transport that must not be
//! called.

pub(crate) mod canonical;
pub(crate) mod kernel;
pub(crate) mod manifest;
pub(crate) mod policy;
pub(crate) mod sse;
pub(crate) mod webhook;

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::Frame;
use http_body_util::BodyExt;
use rebuno::transport::{Transport, TransportError, TransportErrorKind, TransportFuture};

use crate::exec::drive;

/// A request body delivered in the given chunks, optionally failing after some of them and
/// optionally ending with trailers.
#[derive(Debug)]
pub(crate) struct FuzzBody {
    chunks: VecDeque<Bytes>,
    fail_after: Option<usize>,
    sent: usize,
    trailers: bool,
    stall: bool,
}

impl FuzzBody {
    pub(crate) fn new(chunks: Vec<Vec<u8>>, fail_after: Option<usize>, trailers: bool) -> Self {
        Self {
            chunks: chunks.into_iter().map(Bytes::from).collect(),
            fail_after,
            sent: 0,
            trailers,
            stall: false,
        }
    }

    /// The same body, but it never delivers anything (a client that stopped sending).
    pub(crate) fn stalling(mut self) -> Self {
        self.stall = true;
        self
    }

    pub(crate) fn full(bytes: Bytes) -> Self {
        Self {
            chunks: VecDeque::from([bytes]),
            fail_after: None,
            sent: 0,
            trailers: false,
            stall: false,
        }
    }
}

impl http_body::Body for FuzzBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if self.stall {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        if self.fail_after == Some(self.sent) {
            self.fail_after = None;
            return Poll::Ready(Some(Err(std::io::Error::other("body broke (fuzz)"))));
        }
        if let Some(chunk) = self.chunks.pop_front() {
            self.sent += 1;
            return Poll::Ready(Some(Ok(Frame::data(chunk))));
        }
        if std::mem::take(&mut self.trailers) {
            let mut map = http::HeaderMap::new();
            map.insert("x-fuzz-trailer", http::HeaderValue::from_static("1"));
            return Poll::Ready(Some(Ok(Frame::trailers(map))));
        }
        Poll::Ready(None)
    }
}

/// Reads a whole response body.
pub(crate) fn collect<B>(body: B) -> Bytes
where
    B: http_body::Body<Data = Bytes>,
    B::Error: std::fmt::Debug,
{
    match drive(body.collect(), 10_000) {
        Ok(collected) => collected.to_bytes(),
        Err(error) => panic!("response body failed: {error:?}"),
    }
}

/// Decodes hex of either case; `None` for anything else.
pub(crate) fn unhex(text: &[u8]) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    text.chunks_exact(2)
        .map(|pair| {
            let hi = char::from(pair[0]).to_digit(16)?;
            let lo = char::from(pair[1]).to_digit(16)?;
            u8::try_from(hi * 16 + lo).ok()
        })
        .collect()
}

/// A transport that must never be used; counts the attempts so the case can assert on them.
#[derive(Debug, Clone, Default)]
pub(crate) struct UnusedTransport(pub(crate) Arc<AtomicUsize>);

impl Transport for UnusedTransport {
    fn send(&self, _: http::Request<Bytes>, _: Duration) -> TransportFuture {
        self.0.fetch_add(1, Ordering::Relaxed);
        Box::pin(async {
            Err(TransportError::new(
                TransportErrorKind::Connect,
                "this case must not reach the kernel",
            ))
        })
    }
}
