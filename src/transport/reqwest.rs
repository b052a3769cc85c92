//! [`ReqwestTransport`]: the default [`Transport`] on wasm32 (the host's `fetch`), and on native
//! targets when a proxy variable is set (reqwest honours them).

use std::time::Duration;

use bytes::Bytes;

use futures_util::StreamExt;

use super::{
    ByteStream, StreamingFuture, Transport, TransportError, TransportErrorKind, TransportFuture,
};
use crate::error::BoxError;

/// Sends requests with a shared `reqwest::Client`.
///
/// On native targets it needs a Tokio runtime at call time and never follows redirects. On wasm32
/// it uses the host's `fetch`, which follows redirects; on Cloudflare Workers prefer
/// `rebuno_workers::FetchTransport`, which does not and is smaller.
#[derive(Debug, Clone)]
pub struct ReqwestTransport {
    client: reqwest::Client,
}

impl ReqwestTransport {
    /// A transport with a new connection pool.
    ///
    /// # Errors
    ///
    /// When the TLS backend cannot be initialised.
    pub fn new() -> Result<Self, TransportError> {
        client()
            .map(|client| Self { client })
            .map_err(|e| TransportError::new(TransportErrorKind::Other, e))
    }

    /// A transport over an existing client (its redirect policy should be `none`).
    pub fn with_client(client: reqwest::Client) -> Self {
        Self { client }
    }
}

/// Idle connections kept per host: enough for steady concurrency, without one idle
/// socket (and its buffers) per execution that ever ran concurrently.
#[cfg(not(target_arch = "wasm32"))]
const MAX_IDLE_CONNECTIONS: usize = 32;

#[cfg(not(target_arch = "wasm32"))]
fn client() -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .pool_max_idle_per_host(MAX_IDLE_CONNECTIONS)
        .pool_idle_timeout(std::time::Duration::from_secs(30))
        .build()
}

#[cfg(target_arch = "wasm32")]
fn client() -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder().build()
}

impl Transport for ReqwestTransport {
    fn send(&self, request: http::Request<Bytes>, timeout: Duration) -> TransportFuture {
        let client = self.client.clone();
        Box::pin(async move {
            let response = execute(&client, request, timeout).await?;
            let head = head(&response);
            let body = response.bytes().await.map_err(classify)?;
            head.body(body).map_err(other)
        })
    }

    fn send_streaming(&self, request: http::Request<Bytes>, timeout: Duration) -> StreamingFuture {
        let client = self.client.clone();
        Box::pin(async move {
            let response = execute(&client, request, timeout).await?;
            let head = head(&response);
            let body: ByteStream = Box::pin(
                response
                    .bytes_stream()
                    .map(|chunk| chunk.map_err(|e| Box::new(e) as BoxError)),
            );
            head.body(body).map_err(other)
        })
    }
}

/// Sends `request` with `timeout` over the whole exchange; resolves with the response head.
async fn execute(
    client: &reqwest::Client,
    request: http::Request<Bytes>,
    timeout: Duration,
) -> Result<reqwest::Response, TransportError> {
    let mut request = reqwest::Request::try_from(request).map_err(classify)?;
    *request.timeout_mut() = Some(timeout);
    client.execute(request).await.map_err(classify)
}

/// The response's status and headers.
fn head(response: &reqwest::Response) -> http::response::Builder {
    let mut builder = http::Response::builder().status(response.status());
    if let Some(headers) = builder.headers_mut() {
        headers.extend(
            response
                .headers()
                .iter()
                .map(|(k, v)| (k.clone(), v.clone())),
        );
    }
    builder
}

fn other(error: http::Error) -> TransportError {
    TransportError::new(TransportErrorKind::Other, error)
}

fn classify(error: reqwest::Error) -> TransportError {
    if lacks_tls(&error) {
        return TransportError::new(
            TransportErrorKind::Connect,
            format!(
                "{}: https needs TLS, and reqwest was built without it: enable rebuno's `rustls` feature",
                crate::error::error_chain(&error)
            ),
        );
    }
    let kind = if error.is_timeout() {
        TransportErrorKind::Timeout
    } else if is_connect(&error) {
        TransportErrorKind::Connect
    } else {
        TransportErrorKind::Other
    };
    TransportError::new(kind, error)
}

/// Whether `error` is reqwest refusing an `https://` URL for want of a TLS backend.
fn lacks_tls(error: &reqwest::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(cause) = source {
        if cause.to_string().contains("scheme is not http") {
            return true;
        }
        source = cause.source();
    }
    false
}

#[cfg(not(target_arch = "wasm32"))]
fn is_connect(error: &reqwest::Error) -> bool {
    error.is_connect()
}

#[cfg(target_arch = "wasm32")]
fn is_connect(_: &reqwest::Error) -> bool {
    false
}
