//! How the SDK sends HTTP requests to the kernel.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::error::BoxError;
use crate::rt::BoxFuture;

/// The future a [`Transport`] returns.
pub type TransportFuture = BoxFuture<'static, Result<http::Response<Bytes>, TransportError>>;

/// Sends one HTTP request to the kernel and returns the whole response.
///
/// The default is [`ReqwestTransport`](crate::kernel::ReqwestTransport) (feature `reqwest`).
/// Implement this to use another client, for example `worker::Fetch` on Cloudflare Workers or
/// an in-memory kernel in tests. Implementations must not follow redirects.
pub trait Transport: Send + Sync + fmt::Debug {
    /// Sends `request`, giving up after `timeout`.
    fn send(&self, request: http::Request<Bytes>, timeout: Duration) -> TransportFuture;
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
            TransportErrorKind::Connect => f.write_str("could not connect to the kernel"),
            TransportErrorKind::Timeout => f.write_str("kernel request timed out"),
            TransportErrorKind::Other => f.write_str("kernel request failed"),
        }
    }
}

impl std::error::Error for TransportError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}
