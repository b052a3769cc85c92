//! [`DurableLlm`]: a tower service that makes provider requests durable, and its layer.

use std::future::Future;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::{StreamExt, TryStreamExt};
use http_body_util::BodyDataStream;
use tower_service::Service;

use super::body::LlmBody;
use super::record::{Record, is_event_stream, refusal_response};
use super::step::{Begin, LlmStep, begin};
use super::tee::Tee;
use crate::context::{ExecutionContext, current};
use crate::error::{BoxError, Error, ErrorKind, Result, error_chain};
use crate::retry::{GaveUp, HttpStatus, Next, RetryPolicy};
use crate::rt::{BoxFuture, MaybeSend};
use crate::transport::{ByteStream, SharedTransport, StreamingFuture, Transport, TransportError};

/// How long a provider call may take by default, body included.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// Provider requests made durable: each one is an `llm_call` step of the current execution.
///
/// It is a [`tower_service::Service`] over `http::Request<Bytes>` answering
/// `http::Response<`[`LlmBody`]`>`, wrapping the service that reaches the provider: a
/// [`Transport`] (with [`DurableLlm::from_transport`]) or any tower service (with
/// [`DurableLlm::new`] or [`DurableLlmLayer`]).
/// See the [module docs](crate::llm) for what happens to each request.
///
/// ```no_run
/// # #[cfg(feature = "reqwest")]
/// # async fn demo() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// use rebuno::llm::DurableLlm;
/// let llm = DurableLlm::from_transport(rebuno::transport::ReqwestTransport::new()?);
/// let request = http::Request::post("https://api.openai.com/v1/chat/completions")
///     .header("content-type", "application/json")
///     .body(r#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}"#.into())?;
/// let answer = llm.send(request).await?.into_body().text().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct DurableLlm<S = TransportService> {
    inner: S,
    context: Option<ExecutionContext>,
    include_usage: bool,
    retry: RetryPolicy,
}

impl DurableLlm<TransportService> {
    /// Sends through a [`Transport`] (calls time out after [`DEFAULT_TIMEOUT`]; see
    /// [`TransportService::timeout`]): `DurableLlm::new(TransportService::new(transport))`.
    pub fn from_transport(transport: impl Transport + 'static) -> Self {
        Self::new(TransportService::new(transport))
    }

    /// [`from_transport`](Self::from_transport) over an already shared transport.
    #[cfg(all(
        not(target_arch = "wasm32"),
        any(feature = "reqwest", feature = "rt-tokio")
    ))]
    pub(crate) fn from_shared_transport(transport: SharedTransport) -> Self {
        Self::new(TransportService::shared(transport))
    }
}

impl<S> DurableLlm<S> {
    /// Makes what reaches the provider durable. `inner` is whatever your client sends through:
    /// a tower service over `http::Request<Bytes>` ([`TransportService`], your own stack), a rig
    /// HTTP client (feature `rig`: `DurableLlm<H>` is then a rig HTTP client itself), or an
    /// async-openai HTTP service (feature `async-openai`: then it is one of those).
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            context: None,
            include_usage: true,
            retry: RetryPolicy::llm(),
        }
    }

    /// How a request is sent again, inside its step and before the answer is recorded, when
    /// the provider cannot be reached or answers a status the policy retries. The default,
    /// [`RetryPolicy::llm`], retries connection failures, 408, 429 and 5xx up to 5 attempts
    /// within 120 s, waiting at least what a `Retry-After` asks; the last answer is recorded
    /// as it came. [`RetryPolicy::none`] sends each request once. See [`crate::retry`].
    ///
    /// Only [`Service::call`] (and so [`send`](Self::send) and [`fetch`](crate::llm::fetch))
    /// retries; the rig and async-openai integrations send once.
    ///
    /// ```no_run
    /// # fn demo() -> Result<(), rebuno::transport::TransportError> {
    /// use std::time::Duration;
    /// let transport = rebuno::transport::ReqwestTransport::new()?;
    /// let llm = rebuno::llm::DurableLlm::from_transport(transport)
    ///     .retry(rebuno::RetryPolicy::llm().max_elapsed(Duration::from_secs(30)));
    /// # drop(llm); Ok(()) }
    /// ```
    #[must_use]
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// Whether streamed calls ask for their token usage, so the kernel can meter them against
    /// a token budget. On by default: an OpenAI-style stream (a JSON body with `"stream":
    /// true` posted to a `…/completions` path) that does not set
    /// `stream_options.include_usage` is sent with `stream_options.include_usage: true`, which
    /// such providers need to report usage in a stream (others report it unasked). A provider
    /// that answers such a request 400 or 422 (a gateway refusing options it does not know) gets
    /// the request again as the caller built it, within the same step.
    ///
    /// Only what is sent changes: the step's `args` stay the caller's request, so the step id
    /// does not depend on this setting and histories recorded without the option replay.
    /// `false` sends every request as built; a token budget then cannot count a stream that
    /// reports no usage.
    ///
    /// ```no_run
    /// # fn demo() -> Result<(), rebuno::transport::TransportError> {
    /// let transport = rebuno::transport::ReqwestTransport::new()?;
    /// // A provider that rejects `stream_options` with an error other than 400 or 422.
    /// let llm = rebuno::llm::DurableLlm::from_transport(transport).include_usage(false);
    /// # drop(llm); Ok(()) }
    /// ```
    #[must_use]
    pub fn include_usage(mut self, include: bool) -> Self {
        self.include_usage = include;
        self
    }

    /// The execution this service is bound to, if any (see [`bound`](Self::bound)), for the
    /// rig and async-openai integrations.
    #[cfg(any(
        feature = "rig",
        all(feature = "async-openai", not(target_arch = "wasm32"))
    ))]
    pub(crate) fn bound_context(&self) -> Option<&ExecutionContext> {
        self.context.as_ref()
    }

    /// Whether streamed calls ask for their usage (see [`include_usage`](Self::include_usage)),
    /// for the rig and async-openai integrations.
    #[cfg(any(
        feature = "rig",
        all(feature = "async-openai", not(target_arch = "wasm32"))
    ))]
    pub(crate) fn asks_usage(&self) -> bool {
        self.include_usage
    }

    /// The wrapped client or service, unwrapped.
    pub fn into_inner(self) -> S {
        self.inner
    }

    /// Records every call in `context` instead of the execution current when the call is made.
    /// Needed for calls made from a task spawned outside the handler's scope.
    #[must_use]
    pub fn bound(mut self, context: ExecutionContext) -> Self {
        self.context = Some(context);
        self
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// Sends one request through this service. Unlike [`Service::call`], which answers a
    /// provider SDK with a provider-style HTTP error, a refusal comes back as an `Err`, so a
    /// handler can never take it for the provider's answer: with `?`, a denial fails the
    /// execution `policy_denied` and a block, a termination or a superseded lease ends the
    /// dispatch as it should.
    ///
    /// # Errors
    ///
    /// A refusal by the kernel ([`ErrorKind::Policy`](crate::ErrorKind::Policy),
    /// [`ErrorKind::RateLimited`](crate::ErrorKind::RateLimited) or control flow); otherwise as
    /// [`Service::call`]: a provider that could not be reached, a kernel that could not record
    /// the call, or a step that failed before and replays its failure.
    pub async fn send(&self, request: http::Request<Bytes>) -> Result<http::Response<LlmBody>>
    where
        Self: Service<http::Request<Bytes>, Response = http::Response<LlmBody>, Error = Error>
            + Clone,
    {
        // Boxed: the whole durable call would otherwise sit inline in the caller's future (a
        // handler's), which keeps its largest state for as long as the handler runs.
        let mut response = Box::pin(oneshot(self.clone(), request)).await?;
        match response
            .extensions_mut()
            .remove::<crate::refusal::Refusal>()
        {
            Some(refusal) => Err(refusal.into_error()),
            None => Ok(response),
        }
    }
}

/// A [`tower_layer::Layer`] producing [`DurableLlm`] services.
///
/// ```
/// # #[derive(Clone)] struct Provider;
/// # impl tower_service::Service<http::Request<bytes::Bytes>> for Provider {
/// #     type Response = http::Response<http_body_util::Full<bytes::Bytes>>;
/// #     type Error = std::convert::Infallible;
/// #     type Future = std::future::Ready<Result<Self::Response, Self::Error>>;
/// #     fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> { std::task::Poll::Ready(Ok(())) }
/// #     fn call(&mut self, _: http::Request<bytes::Bytes>) -> Self::Future { std::future::ready(Ok(http::Response::default())) }
/// # }
/// use tower_layer::Layer;
/// let durable = rebuno::llm::DurableLlmLayer::new().layer(Provider);
/// ```
#[derive(Debug, Clone)]
pub struct DurableLlmLayer {
    context: Option<ExecutionContext>,
    include_usage: bool,
    retry: RetryPolicy,
}

impl Default for DurableLlmLayer {
    fn default() -> Self {
        Self {
            context: None,
            include_usage: true,
            retry: RetryPolicy::llm(),
        }
    }
}

impl DurableLlmLayer {
    /// A layer recording calls in the execution current when each call is made.
    pub fn new() -> Self {
        Self::default()
    }

    /// How requests are sent again (see [`DurableLlm::retry`]); default [`RetryPolicy::llm`].
    #[must_use]
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// Records every call in `context` (see [`DurableLlm::bound`]).
    #[must_use]
    pub fn bound(mut self, context: ExecutionContext) -> Self {
        self.context = Some(context);
        self
    }

    /// Whether streamed calls ask for their token usage (see [`DurableLlm::include_usage`]);
    /// on by default.
    #[must_use]
    pub fn include_usage(mut self, include: bool) -> Self {
        self.include_usage = include;
        self
    }
}

impl<S> tower_layer::Layer<S> for DurableLlmLayer {
    type Service = DurableLlm<S>;

    fn layer(&self, inner: S) -> DurableLlm<S> {
        DurableLlm {
            inner,
            context: self.context.clone(),
            include_usage: self.include_usage,
            retry: self.retry.clone(),
        }
    }
}

impl<S, B> Service<http::Request<Bytes>> for DurableLlm<S>
where
    S: Service<http::Request<Bytes>, Response = http::Response<B>> + Clone + MaybeSend + 'static,
    S::Future: MaybeSend,
    S::Error: Into<BoxError>,
    B: http_body::Body<Data = Bytes> + MaybeSend + 'static,
    B::Error: Into<BoxError>,
{
    type Response = http::Response<LlmBody>;
    type Error = Error;
    type Future = BoxFuture<'static, Result<http::Response<LlmBody>>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Bytes>) -> Self::Future {
        let inner = self.inner.clone();
        let bound = self.context.clone();
        let retry = self.retry.clone();
        let usage = self.include_usage;
        Box::pin(async move {
            // Read at first poll, so the handler's execution is the one in scope.
            let context = bound.or_else(current);
            let send = move |request| upstream(inner.clone(), request);
            durable_call_with(context, request, &retry, usage, send).await
        })
    }
}

/// Calls a tower service and returns its answer with the body as a byte stream.
async fn upstream<S, B>(
    service: S,
    request: http::Request<Bytes>,
) -> std::result::Result<http::Response<ByteStream>, BoxError>
where
    S: Service<http::Request<Bytes>, Response = http::Response<B>>,
    S::Error: Into<BoxError>,
    B: http_body::Body<Data = Bytes> + MaybeSend + 'static,
    B::Error: Into<BoxError>,
{
    let response = oneshot(service, request).await.map_err(Into::into)?;
    Ok(response.map(|body| Box::pin(BodyDataStream::new(body).map_err(Into::into)) as ByteStream))
}

/// `request` with the step's `traceparent`, unless it carries one of its own.
fn with_traceparent(
    mut request: http::Request<Bytes>,
    traceparent: Option<String>,
) -> http::Request<Bytes> {
    let value = traceparent.and_then(|t| http::HeaderValue::from_str(&t).ok());
    if let Some(value) = value {
        request.headers_mut().entry("traceparent").or_insert(value);
    }
    request
}

/// Calls `service` once, when it is ready.
pub(crate) async fn oneshot<S, R>(
    mut service: S,
    request: R,
) -> std::result::Result<S::Response, S::Error>
where
    S: Service<R>,
{
    std::future::poll_fn(|cx| service.poll_ready(cx)).await?;
    service.call(request).await
}

/// One provider request through the execution (see the module docs for the rules), without
/// retries: the shared engine of the client integrations. `send` reaches the provider; it is
/// called again only when a provider refused the usage option (see
/// [`DurableLlm::include_usage`]: `usage`).
#[cfg(any(
    feature = "rig",
    all(feature = "async-openai", not(target_arch = "wasm32"))
))]
pub(crate) async fn durable_call<F, Fut>(
    context: Option<ExecutionContext>,
    request: http::Request<Bytes>,
    usage: bool,
    send: F,
) -> Result<http::Response<LlmBody>>
where
    F: FnMut(http::Request<Bytes>) -> Fut,
    Fut: Future<Output = std::result::Result<http::Response<ByteStream>, BoxError>>,
{
    durable_call_with(context, request, &RetryPolicy::none(), usage, send).await
}

/// [`durable_call`] sending again as `retry` allows (see [`crate::retry`]).
pub(crate) async fn durable_call_with<F, Fut>(
    context: Option<ExecutionContext>,
    request: http::Request<Bytes>,
    retry: &RetryPolicy,
    usage: bool,
    mut send: F,
) -> Result<http::Response<LlmBody>>
where
    F: FnMut(http::Request<Bytes>) -> Fut,
    Fut: Future<Output = std::result::Result<http::Response<ByteStream>, BoxError>>,
{
    let (step, asked_to_stream) = match begin(context, request.body()).await? {
        Begin::Bypass => {
            let response = send(request).await.map_err(provider_error)?;
            return Ok(response.map(LlmBody::from_stream));
        }
        Begin::Replay(record) => {
            let streamed = record.content_type().is_some_and(is_event_stream);
            return Ok(record.into_response(streamed));
        }
        Begin::Refused(refusal) => return Ok(refusal_response(&refusal)),
        Begin::Proceed { step, stream } => (step, stream),
    };
    let request = with_traceparent(request, step.traceparent());
    // Like the Python SDK, a provider that cannot be reached (after the retries) leaves the
    // step open: it is `safe_to_retry`, so a re-delivery sends it again.
    let response = send_asking_usage(&step, request, retry, usage, send).await?;
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let streamed =
        status < 400 && (asked_to_stream || content_type.as_deref().is_some_and(is_event_stream));
    if streamed {
        let content_type = content_type.unwrap_or_else(|| "text/event-stream".to_owned());
        return Ok(streamed_response(
            response.into_body(),
            step,
            status,
            content_type,
        ));
    }
    let content_type = content_type.unwrap_or_else(|| "application/json".to_owned());
    let body = read_all(response.into_body(), &step).await?;
    let record = Record::new(
        status,
        &content_type,
        String::from_utf8_lossy(&body).into_owned(),
    );
    step.record(&record).await?;
    Ok(record.into_response(false))
}

/// Sends `request` (see [`send_retrying`]) asking for its usage when `usage` says so and it is
/// an OpenAI-style stream that leaves it open; if the provider refuses the request that asked,
/// sends it again as the caller built it.
async fn send_asking_usage<F, Fut>(
    step: &LlmStep,
    request: http::Request<Bytes>,
    retry: &RetryPolicy,
    usage: bool,
    mut send: F,
) -> Result<http::Response<ByteStream>>
where
    F: FnMut(http::Request<Bytes>) -> Fut,
    Fut: Future<Output = std::result::Result<http::Response<ByteStream>, BoxError>>,
{
    let Some(asking) = usage.then(|| super::usage::requested(&request)).flatten() else {
        return send_retrying(step, request, retry, send).await;
    };
    let response = send_retrying(step, asking, retry, &mut send).await?;
    if !super::usage::maybe_refused(response.status()) {
        return Ok(response);
    }
    tracing::debug!(
        parent: step.span(),
        status = response.status().as_u16(),
        "the provider refused the request that asked for its usage \
         (stream_options.include_usage); sending it as built"
    );
    drop(response); // frees the connection
    send_retrying(step, request, retry, send).await
}

/// Sends `request` until an answer is not retried: a failure to reach the provider and an
/// error status are tried again as `retry` allows. Returns the answer to record, or the last
/// failure (saying why the retries stopped, when a limit stopped them).
async fn send_retrying<F, Fut>(
    step: &LlmStep,
    request: http::Request<Bytes>,
    retry: &RetryPolicy,
    mut send: F,
) -> Result<http::Response<ByteStream>>
where
    F: FnMut(http::Request<Bytes>) -> Fut,
    Fut: Future<Output = std::result::Result<http::Response<ByteStream>, BoxError>>,
{
    if !retry.retries() {
        return send(request).await.map_err(provider_error);
    }
    let mut attempts = step.attempts(retry);
    loop {
        let answer = send(request.clone()).await;
        let (next, text) = match &answer {
            Err(error) => (attempts.after(&**error, None), error_chain(&**error)),
            Ok(response) if response.status().as_u16() >= 400 => {
                let status = HttpStatus::of(response.status(), response.headers(), step.now());
                (
                    attempts.after(&status, status.retry_after()),
                    status.to_string(),
                )
            }
            Ok(_) => (Next::Stop(None), String::new()),
        };
        match next {
            Next::Retry(_) if step.stopped() => return answer.map_err(provider_error),
            Next::Retry(delay) => {
                drop(answer); // frees the connection of an answer not kept
                attempts.wait(step.span(), delay, &text).await;
            }
            Next::Stop(note) => {
                if let Some(note) = &note {
                    tracing::info!(parent: step.span(), note, "the provider call's retries stopped");
                }
                return answer.map_err(|error| provider_error(GaveUp::wrap(error, note)));
            }
        }
    }
}

/// The live answer of a streamed call: status and content-type, and the body through the tee.
fn streamed_response(
    body: ByteStream,
    step: LlmStep,
    status: u16,
    content_type: String,
) -> http::Response<LlmBody> {
    let header = http::HeaderValue::try_from(content_type.as_str()).ok();
    let tee = Tee::new(body, step, status, content_type);
    let mut response = http::Response::new(LlmBody::from_stream(Box::pin(tee)));
    *response.status_mut() = http::StatusCode::from_u16(status).unwrap_or_default();
    if let Some(header) = header {
        response
            .headers_mut()
            .insert(http::header::CONTENT_TYPE, header);
    }
    response
}

/// Reads a whole answer; a read error fails the step and is returned.
async fn read_all(mut body: ByteStream, step: &LlmStep) -> Result<Vec<u8>> {
    let mut whole = Vec::new();
    while let Some(chunk) = body.next().await {
        match chunk {
            Ok(chunk) => whole.extend_from_slice(&chunk),
            Err(error) => {
                step.fail(crate::error::error_chain(&*error)).await?;
                return Err(provider_error(error));
            }
        }
    }
    Ok(whole)
}

fn provider_error(error: BoxError) -> Error {
    Error::new(
        ErrorKind::Network,
        format!("the provider request failed: {error}"),
    )
    .with_source(error)
}

/// A [`Transport`] as a tower service that streams answers, for [`DurableLlm::new`]
/// ([`DurableLlm::from_transport`] in one call).
#[derive(Debug, Clone)]
pub struct TransportService {
    transport: SharedTransport,
    timeout: Duration,
}

impl TransportService {
    /// Serves requests with `transport`, timing out after [`DEFAULT_TIMEOUT`].
    pub fn new(transport: impl Transport + 'static) -> Self {
        Self::shared(SharedTransport::new(transport))
    }

    /// Serves requests with an already shared transport.
    pub(crate) fn shared(transport: SharedTransport) -> Self {
        Self {
            transport,
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// Sets how long one call may take, body included.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }
}

impl Service<http::Request<Bytes>> for TransportService {
    type Response = http::Response<LlmBody>;
    type Error = TransportError;
    type Future = BoxFuture<'static, std::result::Result<http::Response<LlmBody>, TransportError>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<std::result::Result<(), TransportError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Bytes>) -> Self::Future {
        let pending: StreamingFuture = self.transport.send_streaming(request, self.timeout);
        Box::pin(async move { Ok(pending.await?.map(LlmBody::from_stream)) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARENT: &str = "00-0192f1a0000070008000000000000001-66521f99aa0c6b1c-01";

    #[test]
    fn the_steps_traceparent_goes_on_unless_the_request_has_one() {
        let request = http::Request::new(Bytes::new());
        let sent = with_traceparent(request, Some(PARENT.to_owned()));
        assert_eq!(sent.headers()["traceparent"], PARENT);

        let mut own = http::Request::new(Bytes::new());
        own.headers_mut()
            .insert("traceparent", http::HeaderValue::from_static("00-mine"));
        let sent = with_traceparent(own, Some(PARENT.to_owned()));
        assert_eq!(sent.headers()["traceparent"], "00-mine");

        let sent = with_traceparent(http::Request::new(Bytes::new()), None);
        assert!(sent.headers().get("traceparent").is_none());
    }
}
