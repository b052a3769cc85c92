//! How the SDK sends HTTP requests: to the kernel, to LLM providers, to MCP servers and to an
//! OTLP collector, through one [`Transport`] the host may replace.
//!
//! [`HyperTransport`] (feature `rt-tokio`) is the default on native targets and
//! [`ReqwestTransport`] (feature `reqwest`) on wasm32 or behind a proxy; the Workers adapter
//! brings its own over `worker::Fetch`.

mod default;
mod error;
#[cfg(all(feature = "rt-tokio", not(target_arch = "wasm32")))]
mod hyper;
#[cfg(feature = "reqwest")]
mod reqwest;

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::Stream;

pub(crate) use self::default::{Peer, default_transport};
pub use self::error::{TransportError, TransportErrorKind};
#[cfg(all(feature = "rt-tokio", not(target_arch = "wasm32")))]
pub use self::hyper::HyperTransport;
#[cfg(feature = "reqwest")]
pub use self::reqwest::ReqwestTransport;
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

/// Sends one HTTP request and returns the whole response.
///
/// The default is [`HyperTransport`] on native targets and [`ReqwestTransport`] on wasm32.
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
