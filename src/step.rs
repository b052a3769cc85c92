//! Local steps: non-deterministic work (the time, a random choice, a fresh id) recorded so it
//! replays identically.

use std::future::Future;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::context::{Effect, ExecutionContext, current};
use crate::error::{BoxError, Error, HandlerError, Result};
use crate::idempotency::Idempotency;
use crate::retry::{NoRetry, RetryPolicy};

/// Runs `body` as a durable `local` step named `name`, or returns its recorded result.
///
/// A denial is an [`ErrorKind::Policy`](crate::ErrorKind::Policy) error: unlike a tool's, a step's
/// result is not read by an LLM. Use [`Step`] to set arguments, idempotency, resources or a
/// [retry policy](Step::retry); without one the body runs at most once per delivery.
///
/// ```no_run
/// # async fn handler(_: ()) -> Result<u64, rebuno::HandlerError> {
/// let started: u64 = rebuno::step("started_at", || async { Ok::<_, std::io::Error>(1_700_000_000) }).await?;
/// # Ok(started) }
/// ```
///
/// # Errors
///
/// As [`Tool::call`](crate::Tool::call).
pub async fn step<R, E, F, Fut>(name: &str, body: F) -> Result<R>
where
    R: Serialize + DeserializeOwned,
    E: Into<HandlerError>,
    F: FnOnce() -> Fut,
    Fut: Future<Output = std::result::Result<R, E>>,
{
    Step::new(name).run(body).await
}

/// A local step with options. See [`step`].
///
/// `Retry` is [`NoRetry`] until [`retry`](Step::retry) sets a [`RetryPolicy`]; the body is
/// then an `FnMut`, run again while it fails as the policy allows.
#[derive(Debug, Clone)]
#[must_use = "a Step does nothing until `run` is called"]
pub struct Step<Retry = NoRetry> {
    name: String,
    args: std::result::Result<Value, String>,
    idempotency: Idempotency,
    resources: Vec<String>,
    retry: Retry,
}

impl Step {
    /// A step named `name` with empty arguments.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            args: Ok(Value::Object(serde_json::Map::new())),
            idempotency: Idempotency::default(),
            resources: Vec::new(),
            retry: NoRetry,
        }
    }

    /// Runs the body again while it fails, as `policy` allows, before the outcome is recorded
    /// (see [`crate::retry`]); a replay returns the recorded outcome and runs nothing.
    ///
    /// ```no_run
    /// # async fn handler(_: ()) -> Result<String, rebuno::HandlerError> {
    /// use rebuno::{RetryPolicy, Step};
    /// let rate: String = Step::new("fetch_rate")
    ///     .retry(RetryPolicy::new().max_attempts(4))
    ///     .run(|| async { Ok::<_, std::io::Error>("1.08".to_owned()) })
    ///     .await?;
    /// # Ok(rate) }
    /// ```
    pub fn retry(self, policy: RetryPolicy) -> Step<RetryPolicy> {
        Step {
            name: self.name,
            args: self.args,
            idempotency: self.idempotency,
            resources: self.resources,
            retry: policy,
        }
    }

    /// Runs the step durably.
    ///
    /// # Errors
    ///
    /// As [`Tool::call`](crate::Tool::call); [`ErrorKind::Serde`](crate::ErrorKind::Serde) when
    /// the arguments were not JSON.
    pub async fn run<R, E, F, Fut>(self, body: F) -> Result<R>
    where
        R: Serialize + DeserializeOwned,
        E: Into<HandlerError>,
        F: FnOnce() -> Fut,
        Fut: Future<Output = std::result::Result<R, E>>,
    {
        let mut body = Some(body);
        let once = move || {
            let body = body.take();
            async move {
                match body {
                    Some(body) => body().await.map_err(|e| e.into().into_inner()),
                    None => Err(BoxError::from("a step without a retry policy ran twice")),
                }
            }
        };
        let (context, mut owned, NoRetry) = self.start()?;
        let outcome = context.run_effect(owned.effect(), None, once).await?;
        outcome.into_value(&owned.target)
    }
}

impl Step<RetryPolicy> {
    /// Runs the step durably, running `body` again while it fails as the policy allows.
    ///
    /// # Errors
    ///
    /// As [`Tool::call`](crate::Tool::call); [`ErrorKind::Serde`](crate::ErrorKind::Serde) when
    /// the arguments were not JSON. A failure the policy stopped retrying because of a limit
    /// says so.
    pub async fn run<R, E, F, Fut>(self, mut body: F) -> Result<R>
    where
        R: Serialize + DeserializeOwned,
        E: Into<HandlerError>,
        F: FnMut() -> Fut,
        Fut: Future<Output = std::result::Result<R, E>>,
    {
        let (context, mut owned, policy) = self.start()?;
        let each = || {
            let future = body();
            async move { future.await.map_err(|e| e.into().into_inner()) }
        };
        let outcome = context
            .run_effect(owned.effect(), Some(&policy), each)
            .await?;
        outcome.into_value(&owned.target)
    }
}

/// A step's submission, owned until it is handed to the effect funnel.
struct Owned {
    target: String,
    args: Value,
    idempotency: Idempotency,
    resources: Vec<String>,
}

impl Owned {
    /// The effect to submit (its arguments move into it: call once).
    fn effect(&mut self) -> Effect<'_> {
        Effect {
            kind: "local",
            target: &self.target,
            args: std::mem::take(&mut self.args),
            idempotency: self.idempotency,
            resources: &self.resources,
        }
    }
}

impl<Retry> Step<Retry> {
    /// Arguments recorded with the step: part of its identity, so the same name with other
    /// arguments is another step. The body captures whatever it needs itself.
    pub fn args(mut self, args: impl Serialize) -> Self {
        self.args = serde_json::to_value(args).map_err(|e| e.to_string());
        self
    }

    /// Replay behaviour; the default is [`Idempotency::SafeToRetry`]. With a retry policy, an
    /// [`AtMostOnce`](Idempotency::AtMostOnce) body runs again only when its error proves
    /// nothing was sent ([`retry::is_not_sent`](crate::retry::is_not_sent)).
    pub fn idempotency(mut self, idempotency: Idempotency) -> Self {
        self.idempotency = idempotency;
        self
    }

    /// The registered resources the body may change.
    pub fn resources<I, S>(mut self, keys: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.resources = keys.into_iter().map(Into::into).collect();
        self
    }

    /// The current execution, this step's submission and its retry setting.
    fn start(self) -> Result<(ExecutionContext, Owned, Retry)> {
        let context =
            current().ok_or_else(|| Error::outside_execution(&format!("step {:?}", self.name)))?;
        let args = self.args.map_err(|e| {
            Error::new(
                crate::ErrorKind::Serde,
                format!("step arguments are not JSON: {e}"),
            )
        })?;
        let owned = Owned {
            target: self.name,
            args,
            idempotency: self.idempotency,
            resources: self.resources,
        };
        Ok((context, owned, self.retry))
    }
}
