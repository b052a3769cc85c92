//! [async-openai](https://docs.rs/async-openai) clients whose calls are durable `llm_call`
//! steps (feature `async-openai`, native targets only).
//!
//! async-openai sends every request through a tower service over its
//! [`HttpRequestFactory`] (`Client::with_http_service`, its `middleware` feature).
//! [`DurableLlm`] over such a service is one too: it wraps the one that reaches the provider and makes
//! each call inside an execution a step, with the rules of [`crate::llm`]. A call made before
//! is replayed from the kernel without reaching the provider, a streamed answer is published
//! live and recorded, and a call the kernel refuses comes back as an HTTP error that
//! async-openai reports as [`OpenAIError::ApiError`] with type `rebuno_refusal`, so `?` in a
//! handler fails the execution with the refusal's reason (see
//! [`raise_for_refusal`](crate::llm::raise_for_refusal)).
//!
//! ```no_run
//! use async_openai::config::OpenAIConfig;
//! use async_openai::types::chat::{
//!     ChatCompletionRequestUserMessageArgs, CreateChatCompletionRequestArgs,
//! };
//!
//! async fn handler(question: String) -> Result<String, rebuno::HandlerError> {
//!     // Build it once and clone it into handlers: the execution is found per call.
//!     let openai = rebuno::async_openai::client(OpenAIConfig::new());
//!     let request = CreateChatCompletionRequestArgs::default()
//!         .model("gpt-4o-mini")
//!         .messages([ChatCompletionRequestUserMessageArgs::default()
//!             .content(question)
//!             .build()?
//!             .into()])
//!         .build()?;
//!     let answer = openai.chat().create(request).await?;
//!     Ok(answer.choices[0].message.content.clone().unwrap_or_default())
//! }
//! ```
//!
//! # Layer order
//!
//! With your own tower stack, put [`DurableLlmLayer`](crate::llm::DurableLlmLayer) **outermost**, or at least outside any retry
//! layer such as async-openai's `OpenAIRetryLayer`:
//!
//! ```no_run
//! use async_openai::config::OpenAIConfig;
//! use async_openai::middleware::ReqwestService;
//! use async_openai::middleware::retry::OpenAIRetryLayer;
//! use tower_layer::Layer;
//!
//! let service = rebuno::llm::DurableLlmLayer::new()
//!     .layer(OpenAIRetryLayer::default().layer(ReqwestService::new(reqwest::Client::new())));
//! let openai = async_openai::Client::with_config(OpenAIConfig::new()).with_http_service(service);
//! ```
//!
//! Then a provider retry happens inside one step, so the step records only the final answer,
//! and a refusal (a 429 for `rate_limited`) never reaches the retry layer, so it is never
//! retried and the step never submitted again. With the retry layer outside, every retry would
//! be a new call to the kernel. Note that async-openai's retry layer reports a 429 that is
//! still failing after its last retry as an error, not as a response: such a call is not
//! recorded, and since `llm_call` steps are `safe_to_retry` it is sent again on re-delivery.
//!
//! # Limits
//!
//! - Native only: the module does not exist on `wasm32`. There a `reqwest::Response` can only
//!   come from the browser's `fetch`, so no service can answer with a recorded or refused
//!   response. On wasm use [`crate::llm::fetch`] or rig (`crate::rig`) instead.
//! - Requests without a byte body (uploads, multipart forms, `GET`s) pass through untouched,
//!   as do calls made outside an execution.
//! - Errors of the Rebuno side (a kernel that cannot be reached, a replayed failure) come back
//!   as [`OpenAIError::Boxed`]; the [`crate::Error`] is that error's
//!   [`source()`](std::error::Error::source), so [`HandlerError`](crate::HandlerError) and the
//!   agent runner see its kind.
//! - Rebuno depends on async-openai without its default features, TLS included. To reach an
//!   `https://` provider, depend on async-openai with its defaults yourself, or enable Rebuno's
//!   `rustls` feature.

#![cfg(not(target_arch = "wasm32"))]

use std::fmt;
use std::task::{Context, Poll};

use ::async_openai::config::Config;
use ::async_openai::error::OpenAIError;
use ::async_openai::middleware::retry::{OpenAIRetry, OpenAIRetryLayer};
use ::async_openai::middleware::{HttpRequestFactory, ReqwestService};
use bytes::Bytes;
use futures_util::TryStreamExt;
use tower_service::Service;

use crate::context::{ExecutionContext, current};
use crate::error::{BoxError, Error};
use crate::llm::{DurableLlm, LlmBody, durable_call, oneshot};
use crate::rt::BoxFuture;
use crate::transport::ByteStream;

/// An async-openai client whose calls are durable: requests go out through a new
/// `reqwest::Client`, with async-openai's default retries inside each step ([`service`]).
///
/// # Example
///
/// See the [module docs](self).
pub fn client<C: Config>(config: C) -> ::async_openai::Client<C> {
    let http = reqwest::Client::new();
    ::async_openai::Client::build(http.clone(), config).with_http_service(service(http))
}

/// The durable service [`client`] uses: sends through `client`, retrying like async-openai's
/// default client (three retries of 429s, 5xx answers and connection errors) inside each step.
/// For a stack of your own, wrap it in [`DurableLlm::new`] or put
/// [`DurableLlmLayer`](crate::llm::DurableLlmLayer) outermost (see [Layer order](self#layer-order)).
pub fn service(client: reqwest::Client) -> DurableLlm<OpenAIRetry<ReqwestService>> {
    DurableLlm::new(tower_layer::Layer::layer(
        &OpenAIRetryLayer::default(),
        ReqwestService::new(client),
    ))
}

/// `DurableLlm<S>` over an async-openai HTTP service (any
/// `Service<HttpRequestFactory, Response = reqwest::Response>`) is such a service, for
/// `async_openai::Client::with_http_service`: every call inside an execution is an `llm_call`
/// step (see the [module docs](self)).
impl<S> Service<HttpRequestFactory> for DurableLlm<S>
where
    S: Service<HttpRequestFactory, Response = reqwest::Response> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Into<OpenAIError>,
{
    type Response = reqwest::Response;
    type Error = OpenAIError;
    type Future = BoxFuture<'static, Result<reqwest::Response, OpenAIError>>;

    /// Always ready: the inner service is made ready when a call reaches it.
    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), OpenAIError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, factory: HttpRequestFactory) -> Self::Future {
        let inner = self.get_ref().clone();
        let bound = self.bound_context().cloned();
        let usage = self.asks_usage();
        // The execution is read at first poll, inside the handler's scope.
        Box::pin(async move { durable(inner, bound.or_else(current), factory, usage).await })
    }
}

/// One async-openai call through the execution, or straight to `inner` outside one; `usage`
/// as [`DurableLlm::include_usage`].
async fn durable<S>(
    inner: S,
    context: Option<ExecutionContext>,
    factory: HttpRequestFactory,
    usage: bool,
) -> Result<reqwest::Response, OpenAIError>
where
    S: Service<HttpRequestFactory, Response = reqwest::Response> + Clone,
    S::Error: Into<OpenAIError>,
{
    if context.is_none() {
        return oneshot(inner, factory).await.map_err(Into::into);
    }
    let Some(request) = to_http(factory.build().await?)? else {
        return oneshot(inner, factory).await.map_err(Into::into);
    };
    // The inner service gets async-openai's own factory, not one rebuilt from the request:
    // a retry layer inside needs a factory to rebuild each attempt, and the factory keeps what
    // `http::Request` cannot carry (reqwest's per-request timeout). Each attempt it builds
    // takes what `durable_call` changed: the body (asking for usage) and the added headers
    // (`traceparent`); a request sent as built goes out through the factory untouched.
    let built = (request.body().clone(), request.headers().clone());
    let send = move |sent: http::Request<Bytes>| {
        let unchanged = (sent.body(), sent.headers()) == (&built.0, &built.1);
        let factory = if unchanged {
            factory.clone()
        } else {
            as_sent(factory.clone(), sent)
        };
        upstream(inner.clone(), factory)
    };
    let response = durable_call(context, request, usage, send)
        .await
        .map_err(rebuno_error)?;
    Ok(to_reqwest(response))
}

/// `factory` building requests with `sent`'s body and with the headers `sent` has that they
/// lack.
fn as_sent(factory: HttpRequestFactory, sent: http::Request<Bytes>) -> HttpRequestFactory {
    let (head, body) = sent.into_parts();
    HttpRequestFactory::new(move || {
        let (factory, headers, body) = (factory.clone(), head.headers.clone(), body.clone());
        async move {
            let mut request = factory.build().await?;
            for (name, value) in &headers {
                if !request.headers().contains_key(name) {
                    request.headers_mut().insert(name, value.clone());
                }
            }
            if request.headers().contains_key(http::header::CONTENT_LENGTH) {
                let length = http::HeaderValue::from(body.len());
                request
                    .headers_mut()
                    .insert(http::header::CONTENT_LENGTH, length);
            }
            *request.body_mut() = Some(reqwest::Body::from(body));
            Ok(request)
        }
    })
}

/// The provider side of `durable_call`: the inner service's answer as a byte stream.
async fn upstream<S>(
    inner: S,
    factory: HttpRequestFactory,
) -> Result<http::Response<ByteStream>, BoxError>
where
    S: Service<HttpRequestFactory, Response = reqwest::Response>,
    S::Error: Into<OpenAIError>,
{
    let response = oneshot(inner, factory)
        .await
        .map_err(|e| BoxError::from(e.into()))?;
    Ok(from_reqwest(response))
}

/// A built request as `durable_call` reads it; `None` when its body is a stream (an upload),
/// which cannot be inspected without consuming it.
fn to_http(request: reqwest::Request) -> Result<Option<http::Request<Bytes>>, OpenAIError> {
    let body = match request.body() {
        None => Bytes::new(),
        Some(body) => match body.as_bytes() {
            Some(bytes) => Bytes::copy_from_slice(bytes),
            None => return Ok(None),
        },
    };
    let uri = http::Uri::try_from(request.url().as_str())
        .map_err(|e| OpenAIError::InvalidArgument(format!("request URL: {e}")))?;
    let mut converted = http::Request::new(body);
    *converted.method_mut() = request.method().clone();
    *converted.uri_mut() = uri;
    *converted.version_mut() = request.version();
    *converted.headers_mut() = request.headers().clone();
    Ok(Some(converted))
}

/// A live provider answer, its body as a byte stream.
fn from_reqwest(response: reqwest::Response) -> http::Response<ByteStream> {
    let mut head = http::Response::new(());
    *head.status_mut() = response.status();
    *head.version_mut() = response.version();
    *head.headers_mut() = response.headers().clone();
    let body: ByteStream = Box::pin(response.bytes_stream().map_err(BoxError::from));
    head.map(|()| body)
}

/// The answer `durable_call` settled on (live, replayed or a refusal) as async-openai reads it.
fn to_reqwest(response: http::Response<LlmBody>) -> reqwest::Response {
    reqwest::Response::from(response.map(reqwest::Body::wrap_stream))
}

/// A Rebuno error as async-openai carries it: [`OpenAIError::Boxed`], whose `source()` is the
/// Rebuno error itself (async-openai's boxed variant forwards to the boxed error's source).
fn rebuno_error(error: Error) -> OpenAIError {
    OpenAIError::Boxed(Box::new(Carried(error)))
}

/// Shows a Rebuno error's message and gives the error itself as its source.
#[derive(Debug)]
struct Carried(Error);

impl fmt::Display for Carried {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for Carried {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rebuno_errors_are_the_source_of_the_openai_error() {
        let error = rebuno_error(Error::terminated());
        let source = std::error::Error::source(&error).and_then(|s| s.downcast_ref::<Error>());
        assert_eq!(source.map(Error::kind), Some(crate::ErrorKind::Terminated));
        assert_eq!(error.to_string(), Error::terminated().to_string());
    }

    #[test]
    fn built_requests_keep_their_head_and_body() {
        let client = reqwest::Client::new();
        let request = client
            .post("http://127.0.0.1:9/v1/chat/completions?x=1")
            .header("authorization", "Bearer k")
            .body(r#"{"model":"m"}"#)
            .build();
        let converted = request.ok().and_then(|r| to_http(r).ok().flatten());
        let converted = converted.unwrap_or_default();
        assert_eq!(converted.method(), http::Method::POST);
        assert_eq!(
            converted.uri().to_string(),
            "http://127.0.0.1:9/v1/chat/completions?x=1"
        );
        assert_eq!(converted.headers()["authorization"], "Bearer k");
        assert_eq!(converted.body().as_ref(), br#"{"model":"m"}"#);
    }
}
