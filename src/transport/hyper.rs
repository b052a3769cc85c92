//! [`HyperTransport`]: the default [`Transport`] on native targets, hyper's pooled HTTP/1
//! client (with rustls for `https://` under the `rustls` feature).
//!
//! The SDK already holds every request as an `http::Request` with a parsed URI, which hyper
//! sends as it is. reqwest turns each one into a `url::Url` (formatting and re-parsing the URI,
//! host included) and parses it once more in its redirect layer even when redirects are off; on
//! a kernel step that was about a fifth of the agent's instructions (BENCHMARKS.md).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt as _;
use http_body_util::{BodyDataStream, BodyExt as _, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::{
    ByteStream, StreamingFuture, Transport, TransportError, TransportErrorKind, TransportFuture,
};
use crate::error::BoxError;

#[cfg(feature = "rustls")]
type Connector = hyper_rustls::HttpsConnector<HttpConnector>;
#[cfg(not(feature = "rustls"))]
type Connector = HttpConnector;

/// Idle connections kept per host by default: enough for steady concurrency, without one idle
/// socket (and its buffers) per execution that ever ran concurrently.
pub(crate) const DEFAULT_MAX_IDLE: usize = 32;

/// How long an idle pooled connection is kept.
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Sends requests over a shared pool of HTTP/1 connections (hyper-util's client on Tokio).
///
/// The default transport of agents and of [`llm::fetch`](crate::llm::fetch) on native targets.
/// It never follows redirects and needs a Tokio runtime at call time (either flavour). It reads
/// no proxy settings: when `HTTPS_PROXY`, `HTTP_PROXY` or `ALL_PROXY` is set, the SDK picks
/// [`ReqwestTransport`](super::ReqwestTransport) instead, which honours them.
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let agent = rebuno::Agent::builder("researcher")
///     .transport(rebuno::transport::HyperTransport::new()?)
///     .handler(|input: serde_json::Value| async move { Ok::<_, rebuno::HandlerError>(input) })
///     .build()?;
/// # let _ = agent; Ok(()) }
/// ```
#[derive(Clone)]
pub struct HyperTransport {
    client: Client<Connector, Full<Bytes>>,
    /// Permits for whole-response requests in flight, when limited.
    in_flight: Option<Arc<Semaphore>>,
}

impl std::fmt::Debug for HyperTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HyperTransport").finish_non_exhaustive()
    }
}

impl HyperTransport {
    /// A transport with a new connection pool.
    ///
    /// # Errors
    ///
    /// When the TLS configuration (the platform's certificate verifier) cannot be built.
    pub fn new() -> Result<Self, TransportError> {
        Self::with_pool(DEFAULT_MAX_IDLE, None)
    }

    /// A transport that keeps at most `limit` whole-response requests in flight, and as many
    /// idle connections: a burst of requests (a hundred concurrent tool calls) then waits for a
    /// pooled connection instead of opening and closing one per request. Streaming requests are
    /// not limited. A request that finds no permit within its timeout fails as
    /// [`Connect`](TransportErrorKind::Connect): it was never sent.
    ///
    /// # Errors
    ///
    /// As [`new`](Self::new).
    pub fn with_max_in_flight(limit: usize) -> Result<Self, TransportError> {
        let limit = limit.clamp(1, Semaphore::MAX_PERMITS);
        Self::with_pool(limit, Some(Arc::new(Semaphore::new(limit))))
    }

    fn with_pool(
        max_idle: usize,
        in_flight: Option<Arc<Semaphore>>,
    ) -> Result<Self, TransportError> {
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(IDLE_TIMEOUT)
            .pool_max_idle_per_host(max_idle)
            .pool_timer(TokioTimer::new())
            .build(connector()?);
        Ok(Self { client, in_flight })
    }
}

/// Waits for a permit until `deadline`, when requests in flight are limited.
async fn permit(
    in_flight: Option<Arc<Semaphore>>,
    deadline: Instant,
    timeout: Duration,
) -> Result<Option<OwnedSemaphorePermit>, TransportError> {
    let Some(in_flight) = in_flight else {
        return Ok(None);
    };
    match tokio::time::timeout_at(deadline, in_flight.acquire_owned()).await {
        Ok(Ok(permit)) => Ok(Some(permit)),
        // The semaphore is never closed; treat it like the timeout, unsent either way.
        Ok(Err(_)) | Err(_) => Err(TransportError::new(
            TransportErrorKind::Connect,
            format!("no pooled connection free within {timeout:?}"),
        )),
    }
}

fn http_connector() -> HttpConnector {
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    http.enforce_http(false);
    http
}

#[cfg(not(feature = "rustls"))]
fn connector() -> Result<Connector, TransportError> {
    Ok(http_connector())
}

#[cfg(feature = "rustls")]
fn connector() -> Result<Connector, TransportError> {
    Ok(hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls_config()?)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http_connector()))
}

/// rustls with the process's default crypto provider (aws-lc when none is installed) and the
/// platform's certificate verifier, as reqwest's `rustls` feature configures it.
#[cfg(feature = "rustls")]
fn tls_config() -> Result<rustls::ClientConfig, TransportError> {
    use rustls_platform_verifier::BuilderVerifierExt as _;
    let provider = rustls::crypto::CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider()));
    let tls_error = |e: rustls::Error| TransportError::new(TransportErrorKind::Other, e);
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(tls_error)?
        .with_platform_verifier()
        .map_err(tls_error)?
        .with_no_client_auth())
}

impl Transport for HyperTransport {
    fn send(&self, request: http::Request<Bytes>, timeout: Duration) -> TransportFuture {
        let client = self.client.clone();
        let in_flight = self.in_flight.clone();
        Box::pin(async move {
            let deadline = Instant::now() + timeout;
            let _permit = permit(in_flight, deadline, timeout).await?;
            let exchange = async move {
                let response = client.request(request.map(Full::new)).await;
                let (head, body) = response.map_err(classify)?.into_parts();
                let body = body.collect().await.map_err(body_error)?.to_bytes();
                Ok(http::Response::from_parts(head, body))
            };
            tokio::time::timeout_at(deadline, exchange)
                .await
                .unwrap_or_else(|_| Err(timed_out(timeout)))
        })
    }

    fn send_streaming(&self, request: http::Request<Bytes>, timeout: Duration) -> StreamingFuture {
        let pending = self.client.request(request.map(Full::new));
        Box::pin(async move {
            let deadline = Instant::now() + timeout;
            let response = tokio::time::timeout_at(deadline, pending)
                .await
                .map_err(|_| timed_out(timeout))?
                .map_err(classify)?;
            Ok(response.map(|body| until(deadline, timeout, BodyDataStream::new(body))))
        })
    }
}

/// The body's chunks until `deadline`; past it, one timeout error and the end.
fn until(
    deadline: Instant,
    timeout: Duration,
    body: BodyDataStream<hyper::body::Incoming>,
) -> ByteStream {
    let chunks = futures_util::stream::unfold(Some(body), move |body| async move {
        let mut body = body?;
        match tokio::time::timeout_at(deadline, body.next()).await {
            Ok(Some(Ok(chunk))) => Some((Ok(chunk), Some(body))),
            Ok(Some(Err(error))) => Some((Err(Box::new(error) as BoxError), None)),
            Ok(None) => None,
            Err(_) => Some((Err(Box::new(timed_out(timeout)) as BoxError), None)),
        }
    });
    Box::pin(chunks)
}

fn timed_out(timeout: Duration) -> TransportError {
    TransportError::new(
        TransportErrorKind::Timeout,
        format!("no complete response within {timeout:?}"),
    )
}

fn body_error(error: hyper::Error) -> TransportError {
    TransportError::new(TransportErrorKind::Other, error)
}

/// Connect failures never reached the server; anything later may have.
fn classify(error: hyper_util::client::legacy::Error) -> TransportError {
    let kind = if error.is_connect() {
        TransportErrorKind::Connect
    } else {
        TransportErrorKind::Other
    };
    TransportError::new(kind, error)
}
