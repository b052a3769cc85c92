//! Local steps: non-deterministic work (the time, a random choice, a fresh id) recorded so it
//! replays identically.

use std::future::Future;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::context::{Effect, current};
use crate::error::{Error, HandlerError, Result};
use crate::tool::Idempotency;

/// Runs `body` as a durable `local` step named `name`, or returns its recorded result.
///
/// A denial is an [`ErrorKind::Policy`](crate::ErrorKind::Policy) error: unlike a tool's, a step's
/// result is not read by an LLM. Use [`Step`] to set arguments, idempotency or resources.
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
#[derive(Debug, Clone)]
#[must_use = "a Step does nothing until `run` is called"]
pub struct Step {
    name: String,
    args: std::result::Result<Value, String>,
    idempotency: Idempotency,
    resources: Vec<String>,
}

impl Step {
    /// A step named `name` with empty arguments.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            args: Ok(Value::Object(serde_json::Map::new())),
            idempotency: Idempotency::default(),
            resources: Vec::new(),
        }
    }

    /// Arguments recorded with the step: part of its identity, so the same name with other
    /// arguments is another step. The body captures whatever it needs itself.
    pub fn args(mut self, args: impl Serialize) -> Self {
        self.args = serde_json::to_value(args).map_err(|e| e.to_string());
        self
    }

    /// Replay behaviour; the default is [`Idempotency::SafeToRetry`].
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
        let context =
            current().ok_or_else(|| Error::outside_execution(&format!("step {:?}", self.name)))?;
        let args = self.args.map_err(|e| {
            Error::new(
                crate::ErrorKind::Serde,
                format!("step arguments are not JSON: {e}"),
            )
        })?;
        let effect = Effect {
            kind: "local",
            target: &self.name,
            args,
            idempotency: self.idempotency,
            resources: &self.resources,
        };
        let outcome = context
            .run_effect(effect, || async {
                body().await.map_err(|e| e.into().into_inner())
            })
            .await?;
        outcome.into_value(&self.name)
    }
}
