//! [`DurableLlm`] over a rig HTTP client: provider requests as durable `llm_call` steps.

use std::future::Future;

use bytes::Bytes;
use futures_util::{TryStreamExt, stream};
use rig_core::http_client::{
    self as rig_http, BoxedStream, HttpClientExt, LazyBody, MultipartForm, Request, Response,
    StreamingResponse,
};
use rig_core::wasm_compat::WasmCompatSend;

use crate::context::current;
use crate::error::BoxError;
use crate::llm::{DurableLlm, LlmBody, durable_call};
use crate::transport::ByteStream;

/// `DurableLlm<H>` over a rig HTTP client is a rig HTTP client whose provider requests are
/// durable: wrap the client rig would use, and connect providers to this one instead.
///
/// Inside an execution (the handler's, found when the request is first polled, or the one
/// given to [`DurableLlm::bound`]) a JSON request becomes an `llm_call` step, as described in
/// [`crate::llm`], its stream asking for token usage unless rig's provider already chose
/// (see [`DurableLlm::include_usage`]). Outside one, and for multipart uploads, requests go to
/// the inner client untouched. A status outside 2xx (a replayed one, or a refusal) is an
/// `Error::InvalidStatusCodeWithDetails` carrying the body, which rig's providers report as a
/// provider response error.
///
/// ```no_run
/// use rig_core::providers::openai::OpenAIConfig;
///
/// # fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let http = rebuno::llm::DurableLlm::new(rig_reqwest::ReqwestClient::default());
/// let openai = OpenAIConfig::new("sk-…")
///     .with_base_url("http://127.0.0.1:11434/v1")
///     .connect(http);
/// let model = openai.chat("llama3");
/// # let _ = model; Ok(()) }
/// ```
impl<H> HttpClientExt for DurableLlm<H>
where
    H: HttpClientExt + Clone + 'static,
{
    fn send<T, U>(
        &self,
        request: Request<T>,
    ) -> impl Future<Output = rig_http::Result<Response<LazyBody<U>>>> + WasmCompatSend + 'static
    where
        T: Into<Bytes> + WasmCompatSend,
        U: From<Bytes> + WasmCompatSend + 'static,
    {
        let request = request.map(Into::into);
        let inner = self.get_ref().clone();
        let bound = self.bound_context().cloned();
        let usage = self.asks_usage();
        async move {
            // Read at first poll, so the handler's execution is the one in scope.
            let Some(context) = bound.or_else(current) else {
                return inner.send(request).await;
            };
            let send = move |request| unary(inner.clone(), request);
            let response = durable_call(Some(context), request, usage, send)
                .await
                .map_err(rig_http::Error::instance)?;
            lazy_response(response).await
        }
    }

    fn send_multipart<U>(
        &self,
        request: Request<MultipartForm>,
    ) -> impl Future<Output = rig_http::Result<Response<LazyBody<U>>>> + WasmCompatSend + 'static
    where
        U: From<Bytes> + WasmCompatSend + 'static,
    {
        // A form has no JSON body, hence no model: it is never a step.
        self.get_ref().send_multipart(request)
    }

    fn send_streaming<T>(
        &self,
        request: Request<T>,
    ) -> impl Future<Output = rig_http::Result<StreamingResponse>> + WasmCompatSend
    where
        T: Into<Bytes> + WasmCompatSend,
    {
        let request = request.map(Into::into);
        let inner = self.get_ref().clone();
        let bound = self.bound_context().cloned();
        let usage = self.asks_usage();
        async move {
            let Some(context) = bound.or_else(current) else {
                return inner.send_streaming(request).await;
            };
            let send = move |request| streaming(inner.clone(), request);
            let response = durable_call(Some(context), request, usage, send)
                .await
                .map_err(rig_http::Error::instance)?;
            streaming_response(response).await
        }
    }
}

/// Sends a request with the inner client's `send`; its body, read lazily, is one chunk.
async fn unary<H: HttpClientExt>(
    inner: H,
    request: Request<Bytes>,
) -> Result<http::Response<ByteStream>, BoxError> {
    match inner.send::<Bytes, Bytes>(request).await {
        Ok(response) => Ok(response.map(|body| {
            // Read when the engine reads it, so a failed read fails the step.
            Box::pin(stream::once(body).map_err(boxed)) as ByteStream
        })),
        Err(error) => answer_of(error),
    }
}

/// Sends a request with the inner client's `send_streaming`.
async fn streaming<H: HttpClientExt>(
    inner: H,
    request: Request<Bytes>,
) -> Result<http::Response<ByteStream>, BoxError> {
    match inner.send_streaming(request).await {
        Ok(response) => Ok(response.map(|body| Box::pin(body.map_err(boxed)) as ByteStream)),
        Err(error) => answer_of(error),
    }
}

/// The provider's answer inside an inner client's non-success error (rig's reqwest client
/// turns every status outside 2xx into one), so that it is recorded like any other answer.
/// Errors without an answer stay errors.
fn answer_of(error: rig_http::Error) -> Result<http::Response<ByteStream>, BoxError> {
    let Some(status) = error.non_success_status() else {
        return Err(boxed(error));
    };
    let body = Bytes::from(error.non_success_body().unwrap_or_default().to_owned());
    let mut response = http::Response::new(Box::pin(stream::iter([Ok(body)])) as ByteStream);
    *response.status_mut() = status;
    if let Some(headers) = error.non_success_headers() {
        *response.headers_mut() = headers.clone();
    }
    Ok(response)
}

/// The engine's answer as rig's `send` returns it: the body read lazily, or the non-success
/// error.
async fn lazy_response<U>(
    response: http::Response<LlmBody>,
) -> rig_http::Result<Response<LazyBody<U>>>
where
    U: From<Bytes> + WasmCompatSend + 'static,
{
    let response = successful(response).await?;
    Ok(response.map(|body| {
        let read = async move { body.bytes().await.map(U::from).map_err(unboxed) };
        Box::pin(read) as LazyBody<U>
    }))
}

/// The engine's answer as rig's `send_streaming` returns it: a replayed event stream comes in
/// 4096-byte chunks, a live one through the recording tee.
async fn streaming_response(
    response: http::Response<LlmBody>,
) -> rig_http::Result<StreamingResponse> {
    let response = successful(response).await?;
    Ok(response.map(|body| Box::pin(body.map_err(unboxed)) as BoxedStream))
}

/// The response, if its status is 2xx; otherwise the non-success error with its body (a
/// refusal's `{"error": {"type": "rebuno_refusal", …}}` included).
async fn successful(
    response: http::Response<LlmBody>,
) -> rig_http::Result<http::Response<LlmBody>> {
    if response.status().is_success() {
        return Ok(response);
    }
    let (parts, body) = response.into_parts();
    let body = body.text().await.map_err(unboxed)?;
    Err(rig_http::Error::non_success_with_details(
        parts.status,
        parts.headers,
        body,
    ))
}

/// A rig error as the engine carries it.
#[cfg(not(target_family = "wasm"))]
fn boxed(error: rig_http::Error) -> BoxError {
    Box::new(error)
}

/// A rig error as the engine carries it. On wasm, rig's errors may hold a value that is not
/// `Send`, so only the message travels.
#[cfg(target_family = "wasm")]
fn boxed(error: rig_http::Error) -> BoxError {
    error.to_string().into()
}

/// An engine error as rig reports a transport failure.
fn unboxed(error: BoxError) -> rig_http::Error {
    rig_http::Error::Instance(error)
}
