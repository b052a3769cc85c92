//! How the SDK sends HTTP requests to the kernel.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::Stream;

use crate::error::BoxError;
use crate::rt::BoxFuture;

/// The future a [`Transport`] returns.
pub type TransportFuture = BoxFuture<'static, Result<http::Response<Bytes>, TransportError>>;

/// A response body as a stream of chunks (`Send` on native targets, local on wasm32).
#[cfg(not(target_arch = "wasm32"))]
pub type ByteStream = Pin<Box<dyn Stream<Item = Result<Bytes, BoxError>> + Send>>;
/// A response body as a stream of chunks (`Send` on native targets, local on wasm32).
#[cfg(target_arch = "wasm32")]
pub type ByteStream = Pin<Box<dyn Stream<Item = Result<Bytes, BoxError>>>>;

/// The future [`Transport::send_streaming`] returns: the response head, with its body to come.
pub type StreamingFuture = BoxFuture<'static, Result<http::Response<ByteStream>, TransportError>>;

/// Sends one HTTP request to the kernel and returns the whole response.
///
/// The default is [`ReqwestTransport`](crate::kernel::ReqwestTransport) (feature `reqwest`).
/// Implement this to use another client, for example `worker::Fetch` on Cloudflare Workers or
/// an in-memory kernel in tests. Implementations must not follow redirects.
pub trait Transport: Send + Sync + fmt::Debug {
    /// Sends `request`, giving up after `timeout`.
    fn send(&self, request: http::Request<Bytes>, timeout: Duration) -> TransportFuture;

    /// Sends `request` and resolves as soon as the response head arrives; the body follows as
    /// a stream. `timeout` bounds the whole exchange, body included.
    ///
    /// Used for provider calls that stream (server-sent events) and for the kernel's live
    /// stream. The default waits for the whole body with [`send`](Self::send) and yields it as
    /// one chunk, which is correct but not live: transports that can stream should override it.
    fn send_streaming(&self, request: http::Request<Bytes>, timeout: Duration) -> StreamingFuture {
        let whole = self.send(request, timeout);
        Box::pin(async move {
            let response = whole.await?;
            Ok(response.map(|body| {
                Box::pin(futures_util::stream::once(async move { Ok(body) })) as ByteStream
            }))
        })
    }
}

/// A cheap-to-clone shared [`Transport`].
#[derive(Clone, Debug)]
pub struct SharedTransport(Arc<dyn Transport>);

impl SharedTransport {
    /// Shares `transport`.
    pub fn new(transport: impl Transport + 'static) -> Self {
        Self(Arc::new(transport))
    }

    pub(crate) fn send(&self, request: http::Request<Bytes>, timeout: Duration) -> TransportFuture {
        self.0.send(request, timeout)
    }

    pub(crate) fn send_streaming(
        &self,
        request: http::Request<Bytes>,
        timeout: Duration,
    ) -> StreamingFuture {
        self.0.send_streaming(request, timeout)
    }
}

/// Why a request got no response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TransportErrorKind {
    /// The connection could not be made: the request never reached the kernel.
    Connect,
    /// No response within the timeout: the request may or may not have been processed.
    Timeout,
    /// Anything else after the request may have been sent.
    Other,
}

/// A request that got no HTTP response.
#[derive(Debug)]
pub struct TransportError {
    kind: TransportErrorKind,
    source: BoxError,
}

impl TransportError {
    /// Wraps the underlying client's error.
    pub fn new(kind: TransportErrorKind, source: impl Into<BoxError>) -> Self {
        Self {
            kind,
            source: source.into(),
        }
    }

    /// What went wrong.
    pub fn kind(&self) -> TransportErrorKind {
        self.kind
    }

    /// Whether the kernel certainly never saw the request.
    pub fn is_connect(&self) -> bool {
        self.kind == TransportErrorKind::Connect
    }
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            TransportErrorKind::Connect => f.write_str("could not connect"),
            TransportErrorKind::Timeout => f.write_str("request timed out"),
            TransportErrorKind::Other => f.write_str("request failed"),
        }
    }
}

impl std::error::Error for TransportError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}
