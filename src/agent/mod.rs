//! The agent: a signed webhook that acknowledges at once and runs its handler in the background.

mod builder;
mod dispatch;
mod failure;
mod future;
mod handler;
mod registry;
mod route;
mod run;

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, PoisonError, RwLock};
use std::task::{Context, Poll};

use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

pub use self::builder::AgentBuilder;
pub use self::dispatch::Dispatch;
pub use self::future::ResponseFuture;
use self::handler::{ErasedHandler, FnHandler};
use self::registry::Registry;
pub use self::route::Route;
use crate::Secret;
use crate::body::Body;
use crate::error::{BoxError, HandlerError};
use crate::kernel::KernelClient;
use crate::rt::{MaybeSend, MaybeSync, Runtime, Spawner};

/// A Rebuno agent served as a webhook.
///
/// The kernel POSTs a signed dispatch; the agent checks the signature, answers `200` at once and
/// runs the bound handler as background work, submitting every tool call and step to the kernel.
/// A re-delivered dispatch runs the handler again from the top, and recorded steps replay.
///
/// `Agent` is a cheap handle (an `Arc` inside): clone it freely, no need to wrap it.
///
/// ```no_run
/// # async fn demo() -> rebuno::Result<()> {
/// #[derive(serde::Deserialize)]
/// struct Input { name: String }
///
/// let agent = rebuno::Agent::builder("hello").secret("dev-secret").base_url("http://127.0.0.1:8080").build()?;
/// agent.bind(|input: Input| async move { Ok::<_, rebuno::HandlerError>(format!("hello, {}", input.name)) });
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
    handler: RwLock<Option<Arc<dyn ErasedHandler>>>,
    registry: Registry,
    metadata_published: AtomicBool,
    closed: AtomicBool,
}

/// The webhook secrets: the one the agent signs with, and during a rotation the one before.
struct Secrets {
    current: Secret,
    previous: Option<Secret>,
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
    fn new(config: Config, secrets: Secrets, kernel: KernelClient, runtime: Runtime) -> Self {
        Self {
            config,
            secret: secrets.current,
            previous_secret: secrets.previous,
            kernel,
            runtime,
            handler: RwLock::new(None),
            registry: Registry::default(),
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

    /// Binds the handler: an async function of the execution's input.
    ///
    /// The input is decoded with `serde` (an input that does not fit fails the execution with
    /// `input_invalid: ...`); the output must serialize to JSON and becomes the execution's
    /// output. Binding again replaces the handler for later dispatches.
    pub fn bind<F, Fut, I, O, E>(&self, handler: F)
    where
        F: Fn(I) -> Fut + MaybeSend + MaybeSync + 'static,
        Fut: Future<Output = Result<O, E>> + MaybeSend + 'static,
        I: DeserializeOwned + 'static,
        O: Serialize + 'static,
        E: Into<HandlerError> + 'static,
    {
        let handler: Arc<dyn ErasedHandler> = Arc::new(FnHandler(handler, PhantomData));
        *self
            .inner
            .handler
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Some(handler);
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
    pub async fn close(&self) {
        self.inner
            .closed
            .store(true, std::sync::atomic::Ordering::Release);
        self.join().await;
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

    pub(crate) fn handler(&self) -> Option<Arc<dyn ErasedHandler>> {
        self.inner
            .handler
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
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
