//! Kernel requests over the Workers `fetch` API.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::{Either, select};
use futures_util::{FutureExt, Stream};
use rebuno::transport::{
    ByteStream, StreamingFuture, Transport, TransportError, TransportErrorKind, TransportFuture,
};
use worker::{AbortController, Fetch, Headers, Method, Request, RequestInit, RequestRedirect};

/// Sends kernel requests with the Workers runtime's own `fetch` ([`worker::Fetch`]).
///
/// Chosen over the core's reqwest transport for size: `worker::Fetch` is already in every
/// Worker, while reqwest's wasm backend adds about 20–27 KB raw (8–11 KB gzipped) for the same
/// JS `fetch` underneath. It also never follows redirects (the kernel protocol forbids it; the
/// reqwest wasm backend always follows them) and aborts timed-out requests with an
/// `AbortController`, so a timeout frees the connection instead of leaking it.
///
/// [`send_streaming`](Transport::send_streaming) streams the answer: it resolves with the
/// response head and hands the body on chunk by chunk as `fetch` reads it (a provider's
/// server-sent events reach a durable LLM call live). Its `timeout` bounds the whole exchange:
/// no head in time fails like [`send`](Transport::send) (`Timeout`, request aborted); a body
/// still arriving when it runs out is aborted and the stream ends with a `Timeout` error, never
/// a silent truncation. Dropping the body early aborts the request. Work inside
/// `ctx.wait_until` is also cut about 30 s after the webhook's response, so a longer stream
/// needs the deadline margin to cover it (see [`Limits`](crate::Limits)).
///
/// ```no_run
/// let builder = rebuno::Agent::builder("hello").transport(rebuno_workers::FetchTransport::new());
/// let llm = rebuno::llm::DurableLlm::from_transport(rebuno_workers::FetchTransport::new());
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

    fn send_streaming(&self, request: http::Request<Bytes>, timeout: Duration) -> StreamingFuture {
        Box::pin(send_streaming(request, timeout))
    }
}

/// Sends `request`, aborting it when `timeout` passes first; the body is read whole.
async fn send(
    request: http::Request<Bytes>,
    timeout: Duration,
) -> Result<http::Response<Bytes>, TransportError> {
    let (mut response, _) = head(request, timeout).await?;
    let builder = builder(&response);
    let body = response.bytes().await.map_err(other)?;
    builder.body(Bytes::from(body)).map_err(other)
}

/// Sends `request` and resolves with the head; the body streams until `timeout` (counted from
/// now) runs out.
async fn send_streaming(
    request: http::Request<Bytes>,
    timeout: Duration,
) -> Result<http::Response<ByteStream>, TransportError> {
    let deadline = js_sys::Date::now() + timeout.as_secs_f64() * 1000.0;
    let (mut response, controller) = head(request, timeout).await?;
    let builder = builder(&response);
    // A fresh timer for what is left: the head's was armed with the head's waker.
    let left = Duration::from_secs_f64(((deadline - js_sys::Date::now()) / 1000.0).max(0.0));
    let body: ByteStream = match response.stream() {
        Ok(inner) => Box::pin(Body {
            inner,
            deadline: worker::Delay::from(left),
            controller: Some(controller),
        }),
        // No body at all (a 204, a HEAD): nothing to stream.
        Err(_) => Box::pin(futures_util::stream::empty()),
    };
    builder.body(body).map_err(other)
}

/// Sends `request` and waits for the response head, aborting the request when `timeout` passes
/// first. The controller aborts the rest of the exchange.
async fn head(
    request: http::Request<Bytes>,
    timeout: Duration,
) -> Result<(worker::Response, AbortController), TransportError> {
    let request = to_worker(request).map_err(other)?;
    let controller = AbortController::default();
    let signal = controller.signal();
    let fetch = Fetch::Request(request);
    let sent = std::pin::pin!(fetch.send_with_signal(&signal));
    match select(sent, worker::Delay::from(timeout)).await {
        Either::Left((Ok(response), _)) => Ok((response, controller)),
        Either::Left((Err(error), _)) => Err(other(error)),
        Either::Right(((), _)) => {
            controller.abort();
            Err(timed_out("no response in time"))
        }
    }
}

/// The response's status and headers.
fn builder(response: &worker::Response) -> http::response::Builder {
    let mut builder = http::Response::builder().status(response.status_code());
    for (name, value) in response.headers().entries() {
        builder = builder.header(name, value);
    }
    builder
}

/// A streamed response body bounded by the exchange's deadline.
struct Body {
    inner: worker::ByteStream,
    deadline: worker::Delay,
    /// Aborts the request on timeout or early drop; `None` once the body ended.
    controller: Option<AbortController>,
}

impl Stream for Body {
    type Item = Result<Bytes, rebuno::BoxError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        let Some(controller) = this.controller.take() else {
            return Poll::Ready(None);
        };
        // Checked first: `worker::ByteStream` ends quietly once aborted, which would pass a
        // truncated body for a whole one.
        if this.deadline.poll_unpin(cx).is_ready() {
            controller.abort();
            return Poll::Ready(Some(Err(timed_out(
                "the response body did not end in time",
            )
            .into())));
        }
        let item = match Pin::new(&mut this.inner).poll_next(cx) {
            Poll::Pending => {
                this.controller = Some(controller);
                return Poll::Pending;
            }
            Poll::Ready(item) => item,
        };
        Poll::Ready(match item {
            Some(Ok(chunk)) => {
                this.controller = Some(controller);
                Some(Ok(Bytes::from(chunk)))
            }
            // A JS error is not `Send`: keep its text.
            Some(Err(error)) => Some(Err(other(error).into())),
            None => None,
        })
    }
}

impl Drop for Body {
    fn drop(&mut self) {
        if let Some(controller) = self.controller.take() {
            controller.abort();
        }
    }
}

/// The timeout error, `what` saying which part did not arrive in time.
fn timed_out(what: &'static str) -> TransportError {
    TransportError::new(TransportErrorKind::Timeout, what)
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

/// A failure after the request may have left: the JS `fetch` does not say whether it connected.
fn other(error: impl std::fmt::Display) -> TransportError {
    TransportError::new(TransportErrorKind::Other, error.to_string())
}
