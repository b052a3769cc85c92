//! One durable effect: submit, then run the body, replay, or refuse, as the kernel decides.

use std::future::Future;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tracing::Instrument;

use std::sync::{Arc, Mutex};

use super::{Exclusive, ExecutionContext, Scoped, StepScope};
use crate::error::{BoxError, Error, ErrorKind, Result, find_rebuno};
use crate::idempotency::Idempotency;
use crate::kernel::api::StepSubmission;
use crate::retry::{Attempts, Bound, GaveUp, Next, RetryPolicy};
use crate::wire::{Captures, Decision, ResourceGeneration, StepDecision, error_message};

/// A step as the SDK submits it.
#[derive(Debug)]
pub(crate) struct Effect<'a> {
    pub(crate) kind: &'static str,
    pub(crate) target: &'a str,
    pub(crate) args: Value,
    pub(crate) idempotency: Idempotency,
    pub(crate) resources: &'a [String],
}

/// What a proceeding step runs under: its name, idempotency and retry policy.
struct Live<'a> {
    target: &'a str,
    idempotency: Idempotency,
    retry: Option<&'a RetryPolicy>,
}

/// What an effect produced: a live value, or the recorded one.
#[derive(Debug)]
pub(crate) enum Outcome<R> {
    Live(R),
    Replayed(Value),
}

impl<R: DeserializeOwned> Outcome<R> {
    /// The value, decoding a recorded one into `R`.
    pub(crate) fn into_value(self, target: &str) -> Result<R> {
        match self {
            Self::Live(value) => Ok(value),
            Self::Replayed(recorded) => serde_json::from_value(recorded).map_err(|e| {
                Error::serde(
                    &format!("the recorded result of {target} does not fit its type"),
                    e,
                )
            }),
        }
    }
}

impl ExecutionContext {
    /// Submits `effect`; on `proceed` runs `body` (again, as `retry` allows, while it fails;
    /// once without a policy) and records its last outcome. The call counts as in flight for suspension while it
    /// runs, and holds the effects lock while resources are registered.
    pub(crate) async fn run_effect<R, Fut>(
        &self,
        effect: Effect<'_>,
        retry: Option<&RetryPolicy>,
        body: impl FnMut() -> Fut,
    ) -> Result<Outcome<R>>
    where
        R: Serialize,
        Fut: Future<Output = std::result::Result<R, BoxError>>,
    {
        let span = self.step_span(&effect);
        let in_flight = self.call_started();
        let exclusive = self.exclusive().await;
        let outcome = self
            .decide_and_run(effect, exclusive, retry, body)
            .instrument(span.clone())
            .await;
        crate::spans::record_step_end(&span, outcome.as_ref().map(|_| ()));
        drop(span); // closes it, unless a span inside it lives on
        crate::observe::after_step(self.kernel().runtime());
        self.call_finished(in_flight).await;
        outcome
    }

    /// The `rebuno.step` span of `effect` (see [`crate::spans`]).
    pub(crate) fn step_span(&self, effect: &Effect<'_>) -> tracing::Span {
        tracing::info_span!(
            "rebuno.step",
            execution_id = self.id(),
            kind = effect.kind,
            target = effect.target,
            idempotency = effect.idempotency.as_str(),
            step_id = tracing::field::Empty,
            replayed = tracing::field::Empty,
            outcome = tracing::field::Empty,
            failure_reason = tracing::field::Empty,
            attempts = tracing::field::Empty,
        )
    }

    async fn decide_and_run<R, Fut>(
        &self,
        mut effect: Effect<'_>,
        exclusive: Option<Exclusive>,
        retry: Option<&RetryPolicy>,
        body: impl FnMut() -> Fut,
    ) -> Result<Outcome<R>>
    where
        R: Serialize,
        Fut: Future<Output = std::result::Result<R, BoxError>>,
    {
        // Boxed here and below: a future is as large as its largest state, and these kernel
        // round trips would otherwise sit inline in every caller's future (and in the user's
        // handler) while the tool body, which needs a few bytes, runs for minutes.
        let decision = Box::pin(self.submit(&effect)).await?;
        // The kernel has the arguments now; not held while the body runs (a retry decodes its
        // own copy, kept by the caller).
        effect.args = Value::Null;
        let step_id = decision.step_id.clone().unwrap_or_default();
        record_decision(&tracing::Span::current(), &decision);
        match decision.decision {
            Decision::Replay => replayed(decision, effect.target).map(Outcome::Replayed),
            Decision::Proceed => {
                let due: Vec<_> = decision.resources.into_iter().filter(|r| r.due).collect();
                let step = Arc::new(StepScope {
                    id: step_id,
                    exclusive: Mutex::new(exclusive),
                });
                let live = Live {
                    target: effect.target,
                    idempotency: effect.idempotency,
                    retry,
                };
                self.run_live(live, step, &due, body)
                    .await
                    .map(Outcome::Live)
            }
            _ => Err(self.refusal(decision)),
        }
    }

    pub(crate) async fn submit(&self, effect: &Effect<'_>) -> Result<StepDecision> {
        self.settle().await;
        self.guard_start()?;
        let submission = StepSubmission {
            kind: effect.kind,
            target: effect.target,
            args: &effect.args,
            idempotency: effect.idempotency.as_str(),
            resources: effect.resources,
        };
        self.kernel()
            .submit_step(self.id(), self.lease(), &submission)
            .await
            .map_err(|e| self.note(e))
    }

    /// Runs the body (with its retries), captures the due checkpoints, and records the outcome
    /// with them.
    async fn run_live<R, Fut>(
        &self,
        live: Live<'_>,
        step: Arc<StepScope>,
        due: &[ResourceGeneration],
        mut body: impl FnMut() -> Fut,
    ) -> Result<R>
    where
        R: Serialize,
        Fut: Future<Output = std::result::Result<R, BoxError>>,
    {
        if step.id.is_empty() {
            return Err(missing_step_id());
        }
        let outcome = match live.retry.filter(|policy| policy.retries()) {
            None => Scoped::in_step(self.clone(), Arc::clone(&step), body()).await,
            // Boxed: the retry state would otherwise sit in every caller's future.
            Some(policy) => Box::pin(self.retrying(policy, live.idempotency, &step, body)).await,
        };
        let recorded = outcome.and_then(|value| match serde_json::to_value(&value) {
            Ok(recorded) => Ok((value, recorded)),
            Err(e) => Err(Box::new(e) as BoxError),
        });
        let (value, recorded) = match recorded {
            Ok(pair) => pair,
            Err(error) => {
                return Err(Box::pin(self.body_failed(live.target, &step.id, due, error)).await);
            }
        };
        self.guard()?;
        let captures = Box::pin(self.capture(due)).await;
        Box::pin(self.record_success(&step.id, &recorded, &captures)).await?;
        Ok(value)
    }

    /// Runs the body until it succeeds or `policy` stops trying (see [`crate::retry`]); a
    /// failure the retries gave up on says why.
    async fn retrying<R, Fut>(
        &self,
        policy: &RetryPolicy,
        idempotency: Idempotency,
        step: &Arc<StepScope>,
        mut body: impl FnMut() -> Fut,
    ) -> std::result::Result<R, BoxError>
    where
        Fut: Future<Output = std::result::Result<R, BoxError>>,
    {
        let mut attempts = self.attempts(policy, idempotency);
        loop {
            let error = match Scoped::in_step(self.clone(), Arc::clone(step), body()).await {
                Ok(value) => return Ok(value),
                Err(error) => error,
            };
            match attempts.after(&*error, None) {
                Next::Retry(_) if self.guard().is_err() => return Err(error),
                Next::Retry(delay) => {
                    let text = crate::error::error_chain(&*error);
                    attempts.wait(&tracing::Span::current(), delay, &text).await;
                }
                Next::Stop(note) => return Err(GaveUp::wrap(error, note)),
            }
        }
    }

    /// The attempts of a step under `policy`, bounded by the earlier of the host's deadline and
    /// the execution's `deadline_at`.
    pub(crate) fn attempts(&self, policy: &RetryPolicy, idempotency: Idempotency) -> Attempts {
        let deadline = self.inner.deadline.map(|deadline| {
            let execution = self.deadline_at().and_then(crate::rt::rfc3339::unix_millis);
            let bound = if execution == Some(deadline.unix_millis()) {
                Bound::Execution
            } else {
                Bound::Host
            };
            (deadline, bound)
        });
        Attempts::start(policy, self.kernel().runtime(), deadline, idempotency)
    }

    /// Records `result` as a proceeding step's outcome.
    pub(crate) async fn record_success(
        &self,
        step_id: &str,
        result: &Value,
        captures: &Captures,
    ) -> Result<()> {
        let answer = self
            .kernel()
            .complete_step(self.id(), step_id, self.lease(), result, captures)
            .await;
        match answer.map_err(|e| self.note(e))?.decision {
            Decision::ExecutionTerminal => Err(self.note(Error::terminated())),
            _ => Ok(()),
        }
    }

    /// Records `{"message"}` as a proceeding step's failure. Returns only control flow (a
    /// superseded or ended run, which must win over the failure being reported); any other
    /// error is logged, since the caller is already reporting the failure that caused this.
    pub(crate) async fn record_failure(
        &self,
        step_id: &str,
        message: &str,
        captures: &Captures,
    ) -> Option<Error> {
        if let Err(stopped) = self.guard() {
            return Some(stopped);
        }
        let recorded = json!({ "message": message });
        let answer = self
            .kernel()
            .fail_step(self.id(), step_id, self.lease(), &recorded, captures)
            .await;
        match answer.map_err(|e| self.note(e)) {
            Err(e) if e.is_control_flow() => Some(e),
            Err(e) => {
                tracing::warn!(error = %e, step_id, "could not record the step failure");
                None
            }
            Ok(_) => None,
        }
    }

    /// Records a failed body (with its due captures: failed calls count) and turns its error
    /// into the one the caller sees.
    async fn body_failed(
        &self,
        target: &str,
        step_id: &str,
        due: &[ResourceGeneration],
        error: BoxError,
    ) -> Error {
        if let Some(found) = find_rebuno(&*error).filter(|e| passes_through(e)) {
            return self.note(found.clone_shallow());
        }
        let message = error.to_string();
        if self.guard().is_ok() {
            let captures = self.capture(due).await;
            if let Some(control_flow) = self.record_failure(step_id, &message, &captures).await {
                return control_flow;
            }
        }
        Error::new(ErrorKind::Tool, format!("{target}: {message}"))
            .with_tool(target, Some(step_id))
            .with_source(error)
    }

    /// The error for a decision that is neither proceed nor replay.
    pub(crate) fn refusal(&self, decision: StepDecision) -> Error {
        let reason = decision.reason.filter(|r| !r.is_empty());
        match decision.decision {
            Decision::Denied => {
                let reason = reason.unwrap_or_else(|| "policy_denied".to_owned());
                Error::new(ErrorKind::Policy, reason.clone())
                    .with_reason(reason)
                    .with_rule_id(decision.rule_id)
            }
            Decision::RateLimited => {
                let reason = reason.unwrap_or_else(|| "rate_limit_exceeded".to_owned());
                Error::new(ErrorKind::RateLimited, reason.clone()).with_reason(reason)
            }
            Decision::Blocked | Decision::ExecutionBlocked => self.note(Error::blocked()),
            Decision::ExecutionTerminal => self.note(Error::terminated()),
            other => Error::new(
                ErrorKind::Protocol,
                format!("unexpected step decision: {other:?}"),
            ),
        }
    }
}

/// Errors a body may return that keep their own meaning instead of failing the step.
fn passes_through(error: &Error) -> bool {
    error.is_control_flow() || matches!(error.kind(), ErrorKind::Policy | ErrorKind::RateLimited)
}

/// The error for a `proceed` that names no step.
pub(crate) fn missing_step_id() -> Error {
    Error::new(ErrorKind::Protocol, "kernel said proceed without a step_id")
}

/// A replayed step's recorded result, or its recorded failure as a tool error.
pub(crate) fn replayed(decision: StepDecision, target: &str) -> Result<Value> {
    match decision.error {
        Some(error) => Err(Error::new(
            ErrorKind::Tool,
            format!("{target}: {}", error_message(&error)),
        )
        .with_tool(target, decision.step_id.as_deref())),
        None => Ok(decision.result.unwrap_or(Value::Null)),
    }
}

/// Records the kernel's answer on a step span: its `step_id` (when one was recorded) and
/// whether it was `replayed`.
pub(crate) fn record_decision(span: &tracing::Span, decision: &StepDecision) {
    if let Some(id) = decision.step_id.as_deref().filter(|id| !id.is_empty()) {
        span.record("step_id", id);
    }
    span.record("replayed", decision.decision == Decision::Replay);
}
