//! Run a [`rebuno::Agent`] on AWS Lambda.
//!
//! ```no_run
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     // REBUNO_URL and REBUNO_AGENT_SECRET come from the function's environment.
//!     let agent = rebuno::Agent::builder("hello")
//!         .handler(|name: String| async move { Ok::<_, rebuno::HandlerError>(format!("hello, {name}")) })
//!         .build()?;
//!     rebuno_lambda::run(agent).await?;
//!     Ok(())
//! }
//! ```
//!
//! [`run`] serves the agent's webhook behind a **Function URL**, **API Gateway** (REST and HTTP
//! APIs) or an **Application Load Balancer**: lambda_http turns each event into an
//! `http::Request` and the agent sees the webhook exactly as the kernel sent it. `GET` and
//! `HEAD` answer `200 ok` for health checks; everything else goes to
//! [`Agent::handle`](rebuno::Agent::handle), which answers on any path.
//!
//! # Keeping the run alive after the `200`
//!
//! The kernel wants its webhook acknowledged at once, and the agent then runs the execution in
//! the background. Lambda freezes the sandbox as soon as the handler returns, and a frozen
//! `tokio::spawn` makes no progress until the next invocation thaws it, if one ever comes. So
//! the default [`BackgroundMode::Extension`] registers an **internal extension** in the same
//! process. For each invocation it waits until the run acknowledged by that invocation is done
//! (matched by request id, never by order), and only then lets Lambda freeze the sandbox.
//! The caller has had its `200` long before. This is AWS's documented way to run code after
//! the response
//! ([blog post](https://aws.amazon.com/blogs/compute/running-code-after-returning-a-response-from-an-aws-lambda-function/)).
//!
//! What that means in practice:
//!
//! * The **function timeout** bounds each dispatch's run (at most 15 minutes), and you are
//!   billed until the run ends. The adapter hands the invocation's deadline to the run as a
//!   [`rebuno::rt::Deadline`]: from 5 s before it ([`Run::deadline_margin`] changes that), the
//!   run starts no new step, lets the step in
//!   flight record its outcome, and ends the dispatch without failing the execution. The kernel
//!   re-delivers once the lease expires, so register Lambda agents with a short
//!   `lease_timeout_seconds` (at least 10), and the next invocation replays what was recorded.
//!   A single step must fit in the margin to be recorded before the freeze.
//! * Resource checkpoints taken on completion run inside the same held continuation, so a
//!   driver's `checkpoint` must finish within the function timeout too.
//! * While a run holds its sandbox, new webhooks go to other sandboxes (Lambda scales out).
//! * [`BackgroundMode::Inline`] runs the execution before responding. It needs no extension,
//!   but the kernel's delivery stays open for the whole run (the kernel gives up after 30 s and
//!   retries), so use it only for short runs.
//!
//! # Which Tokio runtime
//!
//! A function of up to 1,769 MB gets at most one vCPU of CPU time, and an agent is I/O-bound,
//! so prefer `#[tokio::main(flavor = "current_thread")]`: everything (the runtime client, the
//! extension, the background runs) then shares one thread, and no request or response wakes a
//! worker on another core. It costs less CPU per step than the multi-thread default and starts
//! no worker threads at cold start (BENCHMARKS.md in the repository measures both). The
//! multi-thread runtime works too, and pays off only with several vCPUs and CPU-heavy tools.
//!
//! # Limits
//!
//! Lambda and its front doors enforce the transport limits themselves, so the adapter adds none
//! of its own: a Function URL or API Gateway caps the request (6 MB synchronous payload, API
//! Gateway 10 MB and a 29 s integration timeout by default, ALB 1 MB with a multi-value header
//! limit), there are no idle or slow connections to the function (the event arrives whole),
//! and concurrency is the function's reserved concurrency. What the core enforces on every
//! host applies here too: a body over 64 KiB gets `413`, a malformed payload `400`, a bad
//! signature `401`, all before anything runs. A panic in the handler fails the execution at
//! once with its message (`agent_error: handler panicked: ...`); a panic elsewhere in the
//! function ends the invocation with an error, and the kernel re-delivers after the lease.
//!
//! # Deploying
//!
//! Build with `cargo lambda build --release` and deploy with `cargo lambda deploy --enable-function-url`;
//! point the kernel's `webhook_url` for the agent at the Function URL (or the API Gateway / ALB
//! route). See `deploy/lambda/README.md` in the repository for the whole procedure.

#![cfg_attr(docsrs, feature(doc_cfg))]

mod deadline;
mod error;
mod extension;
mod handler;
mod holds;
mod layer;
mod logging;

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::time::Duration;

use lambda_runtime::tower::Service;
use lambda_runtime::{LambdaInvocation, Runtime};
use rebuno::{Agent, BoxError};

use crate::deadline::DeadlinePolicy;
pub use crate::error::{Error, ErrorKind};
use crate::handler::{Continuation, Handler};
use crate::holds::Holds;
use crate::layer::HoldLayer;
pub use crate::logging::init_logging;

/// The internal extension's default name.
const DEFAULT_EXTENSION_NAME: &str = "rebuno-background";

/// The variables the Lambda runtime needs; lambda_runtime panics without them.
const REQUIRED_ENV: [&str; 4] = [
    "AWS_LAMBDA_FUNCTION_NAME",
    "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
    "AWS_LAMBDA_FUNCTION_VERSION",
    "AWS_LAMBDA_RUNTIME_API",
];

/// How acknowledged runs are kept alive. See the [crate docs](crate).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum BackgroundMode {
    /// Respond at once; an internal extension keeps the sandbox unfrozen until the run that
    /// invocation acknowledged is done.
    #[default]
    Extension,
    /// Run the execution to the end, then respond. No extension; only for runs well under the
    /// kernel's 30 s delivery timeout.
    Inline,
}

/// Serves `agent` as this Lambda function's handler until the Runtime API goes away.
///
/// Returns a [`Run`] to configure; await it to start, inside a Tokio runtime
/// (`#[tokio::main]`). The future is not `Send`: await it in `main` rather than spawning it.
///
/// ```no_run
/// # async fn demo(agent: rebuno::Agent) -> Result<(), rebuno_lambda::Error> {
/// use rebuno_lambda::BackgroundMode;
///
/// rebuno_lambda::run(agent).background_mode(BackgroundMode::Extension).await
/// # }
/// ```
pub fn run(agent: Agent) -> Run {
    Run {
        agent,
        mode: BackgroundMode::default(),
        extension_name: DEFAULT_EXTENSION_NAME.to_owned(),
        deadline_margin: rebuno::rt::Deadline::DEFAULT_MARGIN,
        deadline_policy: DeadlinePolicy::Follow,
    }
}

/// A Lambda handler being configured; await it to run. See [`run`].
///
/// # Errors
///
/// The awaited future fails with [`ErrorKind::Environment`] outside Lambda (a required
/// `AWS_LAMBDA_*` variable is missing), [`ErrorKind::Extension`] when the extension cannot
/// register, and [`ErrorKind::Runtime`] when the Runtime API fails. It does not return
/// otherwise.
#[derive(Debug)]
#[must_use = "a Lambda handler does nothing unless awaited"]
pub struct Run {
    agent: Agent,
    mode: BackgroundMode,
    extension_name: String,
    deadline_margin: Duration,
    deadline_policy: DeadlinePolicy,
}

impl Run {
    /// How acknowledged runs are kept alive; defaults to [`BackgroundMode::Extension`].
    pub fn background_mode(mut self, mode: BackgroundMode) -> Self {
        self.mode = mode;
        self
    }

    /// The internal extension's name (default `rebuno-background`), as shown in Lambda's
    /// logs. It must be unique among the function's extensions.
    pub fn extension_name(mut self, name: impl Into<String>) -> Self {
        self.extension_name = name.into();
        self
    }

    /// How long before the invocation's deadline the run stops starting new steps (default
    /// 5 s). Make it longer than your longest step (an LLM call can take a minute) so the step
    /// in flight can record its outcome before Lambda freezes the sandbox.
    pub fn deadline_margin(mut self, margin: Duration) -> Self {
        self.deadline_margin = margin;
        self
    }

    /// Gives runs no deadline, whatever the invocation's says. For emulators whose deadline
    /// means nothing; on Lambda itself a run then keeps starting steps until the sandbox is
    /// frozen, and a step cut there runs again on the re-delivery.
    ///
    /// Without this, a deadline that is not a Unix timestamp near now is read as the time left
    /// when it is at most 15 minutes (as `cargo lambda watch` sends it) and ignored otherwise,
    /// with a warning either way.
    pub fn ignore_deadline(mut self) -> Self {
        self.deadline_policy = DeadlinePolicy::Ignore;
        self
    }

    async fn start(self) -> Result<(), Error> {
        check_environment(|name| std::env::var(name).ok())?;
        let holds = Holds::default();
        let handler = Handler::new(
            self.agent,
            Continuation::new(self.mode, &holds),
            self.deadline_margin,
            self.deadline_policy,
        );
        let runtime =
            lambda_http::runtime(handler).layer(lambda_runtime::layers::TracingLayer::new());
        tracing::info!(mode = ?self.mode, "starting the rebuno Lambda handler");
        match self.mode {
            BackgroundMode::Inline => serve(runtime).await,
            BackgroundMode::Extension => {
                serve_with_extension(runtime, holds, &self.extension_name).await
            }
        }
    }
}

impl IntoFuture for Run {
    type Output = Result<(), Error>;
    // Not `Send`: lambda_http's runtime service is an opaque type whose future is not known
    // to be `Send`. Await it in `main`; there is nothing to spawn it next to.
    type IntoFuture = Pin<Box<dyn Future<Output = Result<(), Error>>>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.start())
    }
}

/// Runs the Runtime API loop.
async fn serve<S>(runtime: Runtime<S>) -> Result<(), Error>
where
    S: Service<LambdaInvocation, Response = (), Error = BoxError>,
{
    runtime.run().await.map_err(Error::runtime)
}

/// Registers the extension, then runs it next to the Runtime API loop, whose outermost layer
/// holds each invocation until its response is posted.
async fn serve_with_extension<S>(
    runtime: Runtime<S>,
    holds: Holds,
    extension_name: &str,
) -> Result<(), Error>
where
    S: Service<LambdaInvocation, Response = (), Error = BoxError>,
{
    // The extension registers before the runtime's first `/next`, as Lambda requires.
    let extension = extension::register(extension_name, holds.clone()).await?;
    let runtime = serve(runtime.layer(HoldLayer::new(holds)));
    let extension = async { extension.run().await.map_err(Error::extension) };
    tokio::try_join!(runtime, extension).map(|_| ())
}

/// Checks the variables lambda_runtime would otherwise panic over.
fn check_environment(var: impl Fn(&str) -> Option<String>) -> Result<(), Error> {
    let missing: Vec<&str> = REQUIRED_ENV
        .into_iter()
        .filter(|name| var(name).is_none_or(|value| value.is_empty()))
        .collect();
    if !missing.is_empty() {
        return Err(Error::environment(format!(
            "missing {}",
            missing.join(", ")
        )));
    }
    let memory = var("AWS_LAMBDA_FUNCTION_MEMORY_SIZE").unwrap_or_default();
    if memory.parse::<i32>().is_err() {
        return Err(Error::environment(format!(
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE is not a number: {memory:?}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn outside_lambda_is_an_error_not_a_panic() {
        let error = check_environment(env(&[])).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Environment);
        let bad_memory = env(&[
            ("AWS_LAMBDA_FUNCTION_NAME", "f"),
            ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "lots"),
            ("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST"),
            ("AWS_LAMBDA_RUNTIME_API", "127.0.0.1:9001"),
        ]);
        assert!(check_environment(bad_memory).is_err());
    }

    #[test]
    fn a_lambda_environment_passes() {
        let good = env(&[
            ("AWS_LAMBDA_FUNCTION_NAME", "f"),
            ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256"),
            ("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST"),
            ("AWS_LAMBDA_RUNTIME_API", "127.0.0.1:9001"),
        ]);
        assert!(check_environment(good).is_ok());
    }

    #[test]
    fn defaults() {
        assert_eq!(BackgroundMode::default(), BackgroundMode::Extension);
    }
}

/// The README's Rust snippets, compiled as doctests so they cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
