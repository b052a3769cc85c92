//! The `llm_call` step behind one provider request: begin, then record, fail or stream deltas.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;

use super::delta::Delta;
use super::record::Record;
use tracing::Instrument;

use crate::context::{Effect, ExecutionContext, missing_step_id, record_decision, replayed};
use crate::error::{Error, ErrorKind, Result};
use crate::idempotency::Idempotency;
use crate::refusal::{Refusal, RefusalKind};
use crate::spans::record_step_end;
use crate::wire::{Captures, Decision, StepDecision};

/// What the kernel decided for a provider request.
#[derive(Debug)]
pub(super) enum Begin {
    /// No execution, or a body that is not a JSON object: send it untouched.
    Bypass,
    /// The call was recorded before: serve the record.
    Replay(Record),
    /// The kernel refused the call: answer as the provider would.
    Refused(Refusal),
    /// Send it, then record the answer on this step. `stream` is the body's `"stream": true`.
    Proceed { step: LlmStep, stream: bool },
}

/// A proceeding `llm_call` step, with its `rebuno.step` span (open until the answer is
/// recorded or the step dropped).
#[derive(Debug, Clone)]
pub(super) struct LlmStep {
    context: ExecutionContext,
    id: String,
    span: Arc<StepSpan>,
}

/// The step's span, shared by the step's clones (the response body holds one): when the last
/// lets go, the span closes and its export is scheduled, as after any other step, so a process
/// killed after an LLM call with no step behind it still leaves the call in the trace.
#[derive(Debug)]
struct StepSpan {
    span: tracing::Span,
    runtime: crate::rt::Runtime,
}

impl Drop for StepSpan {
    fn drop(&mut self) {
        drop(std::mem::replace(&mut self.span, tracing::Span::none()));
        crate::observe::after_step(&self.runtime);
    }
}

/// Submits the `llm_call` step for `body` (target = its `model`, args = the whole body).
pub(super) async fn begin(context: Option<ExecutionContext>, body: &Bytes) -> Result<Begin> {
    let (Some(context), Some(payload)) = (context, json_object(body)) else {
        return Ok(Begin::Bypass);
    };
    let target = target(&payload);
    let stream = payload.get("stream") == Some(&Value::Bool(true));
    let effect = Effect {
        kind: "llm_call",
        target: &target,
        args: payload,
        idempotency: Idempotency::SafeToRetry,
        resources: &[],
    };
    let span = context.step_span(&effect);
    let decision = match context.submit(&effect).instrument(span.clone()).await {
        Ok(decision) => decision,
        Err(error) => {
            record_step_end(&span, Err(&error));
            return refused(error);
        }
    };
    record_decision(&span, &decision);
    let runtime = context.kernel().runtime().clone();
    let begun = start(context, decision, &target, stream, &span);
    match &begun {
        Ok(Begin::Proceed { .. }) => {} // the step's record or failure ends its span
        Ok(_) => record_step_end(&span, Ok(())),
        Err(error) => record_step_end(&span, Err(error)),
    }
    if !matches!(begun, Ok(Begin::Proceed { .. })) {
        drop(span); // a replay or a refusal: the span ends here
        crate::observe::after_step(&runtime);
    }
    begun.or_else(refused)
}

/// What the kernel's decision means for the provider request.
fn start(
    context: ExecutionContext,
    decision: StepDecision,
    target: &str,
    stream: bool,
    span: &tracing::Span,
) -> Result<Begin> {
    match decision.decision {
        Decision::Replay => {
            replayed(decision, target).map(|result| Begin::Replay(Record::from_value(&result)))
        }
        Decision::Proceed => match decision.step_id {
            Some(id) if !id.is_empty() => Ok(Begin::Proceed {
                step: LlmStep {
                    span: Arc::new(StepSpan {
                        span: span.clone(),
                        runtime: context.kernel().runtime().clone(),
                    }),
                    context,
                    id,
                },
                stream,
            }),
            _ => Err(missing_step_id()),
        },
        _ => Err(context.refusal(decision)),
    }
}

/// The request body as a JSON object, if it is one.
fn json_object(body: &Bytes) -> Option<Value> {
    serde_json::from_slice::<Value>(body)
        .ok()
        .filter(Value::is_object)
}

/// The step's target: the body's `model` as text (`""` when absent or empty, as in Python).
fn target(payload: &Value) -> String {
    match payload.get("model") {
        None | Some(Value::Null | Value::Bool(false)) => String::new(),
        Some(Value::String(model)) => model.clone(),
        Some(other) => other.to_string(),
    }
}

/// Refusals become an answer; any other error stays an error.
fn refused(error: Error) -> Result<Begin> {
    let reason = || error.reason().map(str::to_owned);
    let kind = match error.kind() {
        ErrorKind::Blocked => RefusalKind::Blocked,
        ErrorKind::Terminated => RefusalKind::Terminated,
        ErrorKind::LeaseSuperseded => RefusalKind::LeaseSuperseded,
        ErrorKind::Policy => RefusalKind::Denied,
        ErrorKind::RateLimited => RefusalKind::RateLimited,
        _ => return Err(error),
    };
    Ok(Begin::Refused(Refusal::new(kind, reason())))
}

impl LlmStep {
    /// The W3C `traceparent` naming this step in its execution's trace.
    pub(super) fn traceparent(&self) -> Option<String> {
        crate::spans::traceparent(self.context.id(), &self.id)
    }

    /// The attempts of this call's request under `policy`, bounded by the execution's deadlines.
    pub(super) fn attempts(&self, policy: &crate::retry::RetryPolicy) -> crate::retry::Attempts {
        self.context.attempts(policy, Idempotency::SafeToRetry)
    }

    /// Whether the run may no longer write (superseded, or the execution ended).
    pub(super) fn stopped(&self) -> bool {
        self.context.guard().is_err()
    }

    /// The step's `rebuno.step` span.
    pub(super) fn span(&self) -> &tracing::Span {
        &self.span.span
    }

    /// Milliseconds on the host's clock (drives the delta flush timer).
    pub(super) fn now(&self) -> u64 {
        self.context.kernel().runtime().unix_millis()
    }

    /// Records the answer as the step's result.
    pub(super) async fn record(&self, record: &Record) -> Result<()> {
        self.context.guard()?;
        let captures = Captures::default();
        let recorded = self
            .context
            .record_success(&self.id, &record.to_value(), &captures)
            .await;
        record_step_end(&self.span.span, recorded.as_ref().map(|_| ()));
        recorded
    }

    /// Fails the step with `{"message"}` (see [`error_chain`](crate::error::error_chain)). Only control flow is
    /// reported; other errors are logged, since the caller is already handling the failure
    /// that caused this.
    pub(super) async fn fail(&self, message: String) -> Result<()> {
        self.span.span.record("outcome", "failed");
        self.span.span.record("failure_reason", message.as_str());
        let captures = Captures::default();
        match self
            .context
            .record_failure(&self.id, &message, &captures)
            .await
        {
            Some(control_flow) => Err(control_flow),
            None => Ok(()),
        }
    }

    /// Publishes live deltas in order. Best-effort: a failure is logged and the rest dropped.
    pub(super) async fn publish(&self, deltas: Vec<Delta>) {
        let context = &self.context;
        for delta in deltas {
            if context.guard().is_err() {
                return;
            }
            let sent = context
                .kernel()
                .stream_delta(
                    context.id(),
                    &self.id,
                    context.lease(),
                    delta.seq,
                    &delta.data,
                )
                .await;
            if let Err(error) = sent {
                tracing::debug!(%error, step_id = %self.id, seq = delta.seq, "stream delta not published");
                // Deltas are best effort: only control flow (a superseded lease) counts here, and
                // an unanswered publish must not mark the kernel lost for the whole run.
                if error.is_control_flow() {
                    let _ = context.note(error);
                }
                return;
            }
        }
    }

    /// Hands `work` to the execution to run before its next step (see `Tee`'s drop).
    pub(super) fn defer(&self, work: crate::rt::BoxFuture<'static, ()>) {
        self.context.defer(work);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_failure_is_described_with_its_sources() {
        let inner = std::io::Error::other("connection reset");
        let outer = crate::transport::TransportError::new(
            crate::transport::TransportErrorKind::Other,
            inner,
        );
        assert_eq!(
            crate::error::error_chain(&outer),
            "request failed: connection reset"
        );
    }

    #[test]
    fn the_target_is_the_model_as_text() {
        assert_eq!(target(&json!({"model": "gpt-4o"})), "gpt-4o");
        assert_eq!(target(&json!({"messages": []})), "");
        assert_eq!(target(&json!({"model": null})), "");
        assert_eq!(target(&json!({"model": 7})), "7");
    }

    #[test]
    fn only_json_objects_are_intercepted() {
        assert!(json_object(&Bytes::from_static(b"{\"model\":\"m\"}")).is_some());
        for body in [&b""[..], b"[1]", b"not json", b"\"text\""] {
            assert!(json_object(&Bytes::copy_from_slice(body)).is_none());
        }
    }
}
