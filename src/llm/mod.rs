//! Durable LLM calls: each provider request is an `llm_call` step, recorded once, replayed on
//! re-delivery instead of being sent again, streamed live to watchers, and subject to policy.
//!
//! The core is [`DurableLlm`], a tower service over `http::Request<Bytes>`. Inside an execution
//! (the handler's, found when the call is first polled, or one given with
//! [`DurableLlm::bound`]), a request whose body is a JSON object becomes a step with
//! `target` = the body's `model` (`""` when absent) and `args` = the whole body, submitted as
//! `safe_to_retry`. The kernel then decides:
//!
//! - **proceed**: the request goes to the provider. A whole answer is read and recorded as
//!   `{"status", "headers": {"content-type"}, "body"}` for every status, 4xx and 5xx included,
//!   and the response handed back is rebuilt from that record, so live and replayed runs see
//!   the same bytes. An answer counts as streamed when its status is below 400 and the request
//!   said `"stream": true` or the answer is `text/event-stream`: its body is read through a tee
//!   that passes every chunk on, publishes the text live (batched per 2000 characters or 50 ms,
//!   in pieces of at most 1750 characters, never splitting a character), and records the
//!   assembled body once, at the end of the stream or when the body is dropped early. An error
//!   while reading fails the step.
//! - **replay**: the record is served again (an event stream in 4096-byte chunks). A call that
//!   failed before fails again with its recorded message.
//! - **refused**: the answer is a provider-style HTTP error, 403 (denied, blocked, terminal),
//!   429 (rate limited) or 409 (superseded), whose body is
//!   `{"error": {"type": "rebuno_refusal", "message": "rebuno_refusal: <decision>[ reason=…]"}}`.
//!   Blocked, terminal and superseded are also remembered by the execution, so a handler that
//!   swallows the provider SDK's error still ends the dispatch correctly;
//!   [`raise_for_refusal`] turns the provider's error back into the
//!   Rebuno one for `?`. That answer is for provider SDKs; the raw paths, [`fetch`] and
//!   [`DurableLlm::send`], return the refusal as an `Err` instead, so it can never be parsed
//!   as a completion.
//!
//! A live call's request gains a W3C `traceparent` naming the execution's trace and the step
//! (see [`crate::spans::traceparent`]), unless it carries one already, and an OpenAI-style
//! stream asks for its token usage (`stream_options.include_usage`, so a token budget counts
//! it; see [`DurableLlm::include_usage`]); nothing else is added, and the step's `args` stay
//! the request as the caller built it. Outside an execution, or for a body that is not a JSON object (an upload, a form), the
//! request passes through untouched. Recorded bodies are text: bytes that are not UTF-8 are
//! recorded as U+FFFD (the Python SDK fails such a call instead). Only the content-type header
//! is recorded, so no credential ever reaches the event log.
//!
//! # Making a client durable
//!
//! One type, [`DurableLlm`], with one constructor: `DurableLlm::new(inner)` wraps whatever the
//! client sends through, and is then that kind of thing itself.
//!
//! - Raw calls: [`fetch`], or [`DurableLlm::send`] on a [`DurableLlm::from_transport`] you keep
//!   (any [`Transport`], e.g. `rebuno_workers::FetchTransport` on Cloudflare Workers).
//! - Any client built on tower and `http` types: `DurableLlm::new(service)`, or
//!   [`DurableLlmLayer`] in front of the service that reaches the provider.
//! - rig (feature `rig`, native and wasm32): `DurableLlm::new(rig_http_client)` is a rig HTTP
//!   client, so every rig provider becomes durable.
//! - async-openai (feature `async-openai`, native): `rebuno::async_openai::client(config)`, or
//!   `DurableLlm::new(service)` as the client's HTTP service.
//! - Clients that only let you set a base URL (genai, ollama-rs, openai-api-rs,
//!   langchain-rust), native: `rebuno_hyper::LlmGateway` hands each dispatch a loopback base
//!   URL and forwards through a [`DurableLlm`] bound to it.
//!
//! The execution is found when a call is first polled, on the polling thread; a call made
//! from a task spawned outside the handler's scope needs [`DurableLlm::bound`] (or
//! [`ExecutionContext::scope`](crate::ExecutionContext::scope)). A streamed body dropped
//! before its end is recorded when the execution next submits a step or ends its dispatch.
//!
//! [`Transport`]: crate::transport::Transport

mod body;
mod delta;
mod record;
mod service;
mod step;
mod tee;
mod usage;

pub use self::body::LlmBody;
#[cfg(any(
    feature = "rig",
    all(feature = "async-openai", not(target_arch = "wasm32"))
))]
pub(crate) use self::service::durable_call;
#[cfg(all(feature = "async-openai", not(target_arch = "wasm32")))]
pub(crate) use self::service::oneshot;
pub use self::service::{DEFAULT_TIMEOUT, DurableLlm, DurableLlmLayer, TransportService};
pub use crate::refusal::{REFUSAL_TYPE, Refusal, RefusalKind, raise_for_refusal};

/// Sends one provider request durably, the Rust `rebunoFetch`: inside an execution it is an
/// `llm_call` step; outside one it is a plain request.
///
/// Uses the default transport, one shared connection pool per process (hyper's client on
/// native targets, the host's `fetch` on wasm32); keep a [`DurableLlm`] to choose another
/// transport or timeout.
///
/// ```no_run
/// # async fn handler(_: serde_json::Value) -> Result<String, rebuno::HandlerError> {
/// let request = http::Request::post("http://127.0.0.1:11434/v1/chat/completions")
///     .header("content-type", "application/json")
///     .body(r#"{"model":"llama3","messages":[{"role":"user","content":"hi"}]}"#.into())?;
/// let response = rebuno::llm::fetch(request).await?;
/// Ok(response.into_body().text().await?)
/// # }
/// ```
///
/// # Errors
///
/// As [`DurableLlm::send`]: a refusal by the kernel is an `Err` (a denial is
/// [`ErrorKind::Policy`](crate::ErrorKind::Policy)), never a response.
#[cfg(any(
    feature = "reqwest",
    all(feature = "rt-tokio", not(target_arch = "wasm32"))
))]
pub async fn fetch(request: http::Request<bytes::Bytes>) -> crate::Result<http::Response<LlmBody>> {
    // Boxed, so the caller's future keeps the request only (see `DurableLlm::send`).
    Box::pin(shared()?.send(request)).await
}

/// One service per process on native targets (its connection pool is shared), over the
/// default transport ([`HyperTransport`](crate::transport::HyperTransport) with Tokio).
#[cfg(all(
    not(target_arch = "wasm32"),
    any(feature = "reqwest", feature = "rt-tokio")
))]
fn shared() -> crate::Result<DurableLlm> {
    static SHARED: std::sync::OnceLock<DurableLlm> = std::sync::OnceLock::new();
    if let Some(llm) = SHARED.get() {
        return Ok(llm.clone());
    }
    let transport = crate::transport::default_transport(crate::transport::Peer::Provider)
        .ok_or_else(|| crate::Error::new(crate::ErrorKind::Config, "no HTTP client compiled in"))?
        .map_err(config_error)?;
    Ok(SHARED
        .get_or_init(|| DurableLlm::from_shared_transport(transport))
        .clone())
}

/// On wasm32 each call uses the host's `fetch`; there is no pool to share.
#[cfg(all(feature = "reqwest", target_arch = "wasm32"))]
fn shared() -> crate::Result<DurableLlm> {
    crate::transport::ReqwestTransport::new()
        .map(DurableLlm::from_transport)
        .map_err(config_error)
}

#[cfg(any(
    feature = "reqwest",
    all(feature = "rt-tokio", not(target_arch = "wasm32"))
))]
fn config_error(error: crate::transport::TransportError) -> crate::Error {
    crate::Error::new(crate::ErrorKind::Config, "could not build the HTTP client")
        .with_source(error)
}
