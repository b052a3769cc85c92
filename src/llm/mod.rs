//! Durable LLM calls: a provider request recorded as an `llm_call` step, replayed on re-delivery
//! instead of being sent again, and refused with an HTTP answer the provider SDK understands.
//!
//! [`DurableLlm`] wraps any [`Transport`]: inside an execution, a request whose body is a JSON
//! object is submitted to the kernel first (target = the body's `model`, args = the whole body).
//! On `proceed` it goes to the provider and the response is recorded as
//! `{"status", "headers": {"content-type"}, "body"}`; on `replay` that record is served again,
//! byte for byte; a refusal (approval pending, denial, rate limit, terminal, superseded) is
//! answered as a 403/429/409 whose body carries `rebuno_refusal: <decision>[ reason=<reason>]`,
//! which [`raise_for_refusal`](crate::raise_for_refusal) recovers. Outside an execution, or for
//! a non-JSON-object body, the request passes through untouched. Streaming is not recorded here.

mod envelope;

use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;

use crate::context::{Effect, current};
use crate::error::{Error, ErrorKind};
use crate::kernel::{
    SharedTransport, Transport, TransportError, TransportErrorKind, TransportFuture,
};
use crate::refusal::{Refusal, RefusalKind};
use crate::tool::Idempotency;

/// A [`Transport`] that makes provider calls durable. See the [module docs](self).
///
/// ```no_run
/// # #[cfg(feature = "reqwest")] fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let provider = rebuno::llm::DurableLlm::new(rebuno::kernel::ReqwestTransport::new()?);
/// // send OpenAI-style requests through `provider` from inside a handler
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct DurableLlm {
    inner: SharedTransport,
}

impl DurableLlm {
    /// Wraps the transport that reaches the provider.
    pub fn new(inner: impl Transport + 'static) -> Self {
        Self {
            inner: SharedTransport::new(inner),
        }
    }
}

impl Transport for DurableLlm {
    fn send(&self, request: http::Request<Bytes>, timeout: Duration) -> TransportFuture {
        let inner = self.inner.clone();
        Box::pin(async move { send(inner, request, timeout).await })
    }
}

async fn send(
    inner: SharedTransport,
    request: http::Request<Bytes>,
    timeout: Duration,
) -> Result<http::Response<Bytes>, TransportError> {
    let (Some(context), Some(body)) = (current(), json_object(request.body())) else {
        return inner.send(request, timeout).await;
    };
    let target = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let effect = Effect {
        kind: "llm_call",
        target: &target,
        args: body,
        idempotency: Idempotency::SafeToRetry,
        resources: &[],
    };
    let call = || async {
        let response = inner
            .send(request, timeout)
            .await
            .map_err(|e| Box::new(e) as crate::BoxError)?;
        Ok(envelope::record(&response))
    };
    match context.run_llm_effect(effect, call).await {
        Ok(outcome) => Ok(envelope::rebuild(outcome.into_recorded())),
        Err(error) => answer_refusal(error),
    }
}

/// The body as a JSON object, if it is one.
fn json_object(body: &Bytes) -> Option<Value> {
    serde_json::from_slice::<Value>(body)
        .ok()
        .filter(Value::is_object)
}

/// Refusals become the provider-style HTTP answer; other errors stay errors.
fn answer_refusal(error: Error) -> Result<http::Response<Bytes>, TransportError> {
    let refusal = match error.kind() {
        ErrorKind::Blocked => Refusal::new(RefusalKind::Blocked, None),
        ErrorKind::Terminated => Refusal::new(RefusalKind::Terminated, None),
        ErrorKind::LeaseSuperseded => Refusal::new(RefusalKind::LeaseSuperseded, None),
        ErrorKind::Policy => Refusal::new(RefusalKind::Denied, error.reason().map(str::to_owned)),
        ErrorKind::RateLimited => {
            Refusal::new(RefusalKind::RateLimited, error.reason().map(str::to_owned))
        }
        _ => return Err(TransportError::new(TransportErrorKind::Other, error)),
    };
    Ok(envelope::refusal(&refusal))
}
