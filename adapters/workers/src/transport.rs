//! Kernel requests over the Workers `fetch` API.

use std::time::Duration;

use bytes::Bytes;
use futures_util::future::{Either, select};
use rebuno::kernel::{Transport, TransportError, TransportErrorKind, TransportFuture};
use worker::{AbortController, Fetch, Headers, Method, Request, RequestInit, RequestRedirect};

/// Sends kernel requests with the Workers runtime's own `fetch` ([`worker::Fetch`]).
///
/// Chosen over the core's reqwest transport for size: `worker::Fetch` is already in every
/// Worker, while reqwest's wasm backend adds about 20–27 KB raw (8–11 KB gzipped) for the same
/// JS `fetch` underneath. It also never follows redirects (the kernel protocol forbids it; the
/// reqwest wasm backend always follows them) and aborts timed-out requests with an
/// `AbortController`, so a timeout frees the connection instead of leaking it.
///
/// ```no_run
/// let builder = rebuno::Agent::builder("hello").transport(rebuno_workers::FetchTransport::new());
/// ```
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct FetchTransport;

impl FetchTransport {
    /// The transport; it holds no state.
    pub fn new() -> Self {
        Self
    }
}

impl Transport for FetchTransport {
    fn send(&self, request: http::Request<Bytes>, timeout: Duration) -> TransportFuture {
        Box::pin(send(request, timeout))
    }
}

/// Sends `request`, aborting it when `timeout` passes first.
async fn send(
    request: http::Request<Bytes>,
    timeout: Duration,
) -> Result<http::Response<Bytes>, TransportError> {
    let request = to_worker(request).map_err(other)?;
    let controller = AbortController::default();
    let signal = controller.signal();
    let fetch = Fetch::Request(request);
    let sent = std::pin::pin!(fetch.send_with_signal(&signal));
    match select(sent, worker::Delay::from(timeout)).await {
        Either::Left((Ok(response), _)) => from_worker(response).await,
        Either::Left((Err(error), _)) => Err(other(error)),
        Either::Right(((), _)) => {
            controller.abort();
            Err(TransportError::new(
                TransportErrorKind::Timeout,
                "no response from the kernel in time",
            ))
        }
    }
}

/// Builds the `fetch` request: same method, headers and body, redirects returned as is.
fn to_worker(request: http::Request<Bytes>) -> worker::Result<Request> {
    let (parts, body) = request.into_parts();
    let headers = Headers::new();
    for (name, value) in &parts.headers {
        let value = value
            .to_str()
            .map_err(|_| worker::Error::RustError(format!("header {name} is not visible ASCII")))?;
        headers.append(name.as_str(), value)?;
    }
    let mut init = RequestInit::new();
    init.with_method(Method::from(parts.method.as_str().to_owned()))
        .with_headers(headers)
        .with_redirect(RequestRedirect::Manual);
    if !body.is_empty() {
        init.with_body(Some(js_sys::Uint8Array::from(&body[..]).into()));
    }
    Request::new_with_init(&parts.uri.to_string(), &init)
}

/// Reads the whole response.
async fn from_worker(
    mut response: worker::Response,
) -> Result<http::Response<Bytes>, TransportError> {
    let mut builder = http::Response::builder().status(response.status_code());
    for (name, value) in response.headers().entries() {
        builder = builder.header(name, value);
    }
    let body = response.bytes().await.map_err(other)?;
    builder.body(Bytes::from(body)).map_err(other)
}

/// A failure after the request may have left: the JS `fetch` does not say whether it connected.
fn other(error: impl std::fmt::Display) -> TransportError {
    TransportError::new(TransportErrorKind::Other, error.to_string())
}
