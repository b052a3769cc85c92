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
    ///
    /// A TLS handshake that met a plain-HTTP server (an `https://` URL for a server without
    /// TLS, such as `rebuno-dev`) gets a cause that says so and what to change, in place of
    /// the TLS library's `received corrupt message of type InvalidContentType`.
    pub fn new(kind: TransportErrorKind, source: impl Into<BoxError>) -> Self {
        let source = source.into();
        let source = match plain_http_answer(&*source) {
            Some(detail) => Box::new(PlainHttpAnswer(detail)) as BoxError,
            None => source,
        };
        Self { kind, source }
    }

    /// What went wrong.
    pub fn kind(&self) -> TransportErrorKind {
        self.kind
    }

    /// Whether the kernel certainly never saw the request.
    pub fn is_connect(&self) -> bool {
        self.kind == TransportErrorKind::Connect
    }

    /// Whether the URL was `https://` and the server answered in plain HTTP: a mistake in the
    /// URL that waiting will not fix.
    pub(crate) fn is_plain_http_answer(&self) -> bool {
        self.source.is::<PlainHttpAnswer>()
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

/// What TLS libraries say when a server answers their handshake in plain HTTP: rustls reads
/// `HTTP/1.1 400` as a record of an unknown content type; OpenSSL and BoringSSL call it a wrong
/// version number.
const PLAIN_HTTP_SIGNS: [&str; 3] = [
    "InvalidContentType",
    "wrong version number",
    "WRONG_VERSION_NUMBER",
];

/// The TLS library's text, when `error` (or a cause of it) is a handshake that met plain HTTP.
fn plain_http_answer(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut current = Some(error);
    while let Some(error) = current {
        let text = error.to_string();
        if PLAIN_HTTP_SIGNS.iter().any(|sign| text.contains(sign)) {
            return Some(text);
        }
        current = error.source();
    }
    None
}

/// The cause of a [`TransportError`] for a TLS handshake answered in plain HTTP.
#[derive(Debug)]
struct PlainHttpAnswer(String);

impl fmt::Display for PlainHttpAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the URL is https:// but the server answered in plain HTTP ({}): use http:// in the \
             URL (rebuno-dev serves plain HTTP), or serve the kernel over TLS",
            self.0
        )
    }
}

impl std::error::Error for PlainHttpAnswer {}

impl std::error::Error for TransportError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tls_handshake_answered_in_plain_http_says_what_to_change() {
        let rustls = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "received corrupt message of type InvalidContentType",
        );
        let error = TransportError::new(TransportErrorKind::Connect, rustls);
        let cause = std::error::Error::source(&error).map(ToString::to_string);
        let cause = cause.unwrap_or_default();
        assert!(cause.contains("use http://"), "{cause}");
        assert!(cause.contains("InvalidContentType"), "{cause}");
        assert!(error.is_connect());
        let refused = TransportError::new(TransportErrorKind::Connect, "connection refused");
        let cause = std::error::Error::source(&refused).map(ToString::to_string);
        assert_eq!(cause.as_deref(), Some("connection refused"));
    }
}
