//! The agent: a signed webhook that acknowledges at once and runs its handler in the background.

mod builder;
mod dispatch;
mod failure;
mod future;
mod handler;
mod refusals;
mod registry;
mod route;
mod run;

use std::convert::Infallible;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::task::{Context, Poll};

use bytes::Bytes;
use serde_json::Value;

pub use self::builder::AgentBuilder;
pub use self::dispatch::Dispatch;
pub use self::future::ResponseFuture;
use self::handler::ErasedHandler;
use self::registry::Registry;
pub use self::route::Route;
use crate::Secret;
use crate::body::Body;
use crate::error::BoxError;
use crate::kernel::KernelClient;
use crate::rt::{MaybeSend, Runtime, Spawner};

/// A Rebuno agent served as a webhook.
///
/// The kernel POSTs a signed dispatch; the agent checks the signature, answers `200` at once and
/// runs the handler as background work, submitting every tool call and step to the kernel.
/// A re-delivered dispatch runs the handler again from the top, and recorded steps replay.
///
/// `Agent` is a cheap handle (an `Arc` inside): clone it freely, no need to wrap it.
///
/// ```no_run
/// # async fn demo() -> rebuno::Result<()> {
/// #[derive(serde::Deserialize)]
/// struct Input { name: String }
///
/// let agent = rebuno::Agent::builder("hello")
///     .secret("dev-secret")
///     .base_url("http://127.0.0.1:8080")
///     .handler(|input: Input| async move { Ok::<_, rebuno::HandlerError>(format!("hello, {}", input.name)) })
///     .build()?;
/// // Serve it: `rebuno_hyper::serve(listener, agent)`, `rebuno_lambda::run(agent)`,
/// // `rebuno_workers::fetch(&agent, req, &env, &ctx)`, or as a tower Service behind any router.
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Agent {
    inner: Arc<Inner>,
}

struct Inner {
    config: Config,
    secret: Secret,
    /// The secret before a rotation, still accepted on webhooks (never used to sign).
    previous_secret: Option<Secret>,
    kernel: KernelClient,
    runtime: Runtime,
    handler: Arc<dyn ErasedHandler>,
    registry: Registry,
    /// Rate limits on the log lines of refused webhooks.
    refusals: refusals::Refusals,
    metadata_published: AtomicBool,
    closed: AtomicBool,
}

/// The webhook secrets: the one the agent signs with, and during a rotation the one before.
struct Secrets {
    current: Secret,
    previous: Option<Secret>,
}

/// What the builder assembled around the settings.
struct Parts {
    kernel: KernelClient,
    runtime: Runtime,
    handler: Arc<dyn ErasedHandler>,
}

/// Settings that are not secrets.
#[derive(Debug)]
struct Config {
    agent_id: String,
    webhook_path: String,
    description: Option<String>,
    input_schema: Option<Value>,
    output_schema: Option<Value>,
    base_url: String,
}

impl Inner {
    fn new(config: Config, secrets: Secrets, parts: Parts) -> Self {
        Self {
            config,
            secret: secrets.current,
            previous_secret: secrets.previous,
            kernel: parts.kernel,
            runtime: parts.runtime,
            handler: parts.handler,
            registry: Registry::default(),
            refusals: refusals::Refusals::default(),
            metadata_published: AtomicBool::new(false),
            closed: AtomicBool::new(false),
        }
    }
}

impl Agent {
    /// Starts configuring the agent registered with the kernel as `agent_id`.
    pub fn builder(agent_id: impl Into<String>) -> AgentBuilder {
        AgentBuilder::new(agent_id.into())
    }

    /// The agent id.
    pub fn id(&self) -> &str {
        &self.inner.config.agent_id
    }

    /// The configured webhook path.
    pub fn webhook_path(&self) -> &str {
        &self.inner.config.webhook_path
    }

    /// The kernel URL the agent talks to.
    pub fn base_url(&self) -> &str {
        &self.inner.config.base_url
    }

    /// How many executions this process is running right now.
    pub fn in_flight(&self) -> usize {
        self.inner.registry.len()
    }

    /// Waits until every run in flight has finished (superseded runs stop on their own).
    pub async fn join(&self) {
        self.inner.registry.idle().await;
    }

    /// Stops accepting dispatches (new webhooks get `503`, which the kernel retries later) and
    /// waits for the runs in flight, for hosts that drive [`fetch`](Self::fetch) themselves.
    /// Waits as long as the runs take; [`close_within`](Self::close_within) bounds the wait.
    pub async fn close(&self) {
        self.inner
            .closed
            .store(true, std::sync::atomic::Ordering::Release);
        self.join().await;
    }

    /// [`close`](Self::close) with a bound: stops accepting dispatches and waits at most
    /// `limit` for the runs in flight.
    ///
    /// Runs still going when the limit passes are not cancelled here; the process exiting ends
    /// them, and the kernel re-delivers each one when its lease expires (recorded steps replay).
    /// Mount the agent in axum and call this after axum's graceful shutdown returns:
    ///
    /// ```no_run
    /// # async fn demo(agent: rebuno::Agent) {
    /// // axum::serve(listener, app).with_graceful_shutdown(signal).await?; then:
    /// if let Err(error) = agent.close_within(std::time::Duration::from_secs(25)).await {
    ///     eprintln!("{error}"); // "2 runs still in flight after 25s; ..."
    /// }
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Timeout`](crate::ErrorKind::Timeout) naming how many runs were still in
    /// flight.
    pub async fn close_within(&self, limit: std::time::Duration) -> crate::Result<()> {
        let drained = std::pin::pin!(self.close());
        let timer = self.inner.runtime.sleep(limit);
        match futures_util::future::select(drained, timer).await {
            futures_util::future::Either::Left(((), _)) => Ok(()),
            futures_util::future::Either::Right(((), _)) => Err(crate::Error::new(
                crate::ErrorKind::Timeout,
                format!(
                    "{} runs still in flight after {limit:?}; the kernel re-delivers them when \
                     their leases expire",
                    self.in_flight()
                ),
            )),
        }
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.inner.closed.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Web-standard entry point: verifies and acknowledges the webhook, and hands the background
    /// run to the request's [`Spawner`] extension if it has one, else to the agent's runtime.
    pub async fn fetch<B>(&self, request: http::Request<B>) -> http::Response<Body>
    where
        B: http_body::Body<Data = Bytes> + MaybeSend + 'static,
        B::Error: Into<BoxError>,
    {
        let spawner = request.extensions().get::<Spawner>().cloned();
        let Dispatch {
            response,
            background,
        } = self.handle(request).await;
        if let Some(task) = background {
            match spawner {
                Some(spawner) => spawner.spawn(task),
                None => self.inner.runtime.spawn(task),
            }
        }
        response
    }
}

impl fmt::Debug for Agent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Agent")
            .field("id", &self.inner.config.agent_id)
            .field("base_url", &self.inner.config.base_url)
            .field("webhook_path", &self.inner.config.webhook_path)
            .field("in_flight", &self.in_flight())
            .finish_non_exhaustive()
    }
}

impl<B> tower_service::Service<http::Request<B>> for Agent
where
    B: http_body::Body<Data = Bytes> + MaybeSend + 'static,
    B::Error: Into<BoxError>,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> ResponseFuture {
        let agent = self.clone();
        ResponseFuture::new(async move { Ok(agent.fetch(request).await) })
    }
}
