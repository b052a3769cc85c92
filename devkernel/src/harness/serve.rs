//! Serving an agent under test on a loopback port, on the kernel's clock, and moving that
//! clock: [`DevKernel::serve`], [`DevKernel::runtime`], [`DevKernel::advance`].

use std::future::IntoFuture;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::oneshot;

use super::{AgentSpec, DevKernel, DevKernelError, ServedAgent};
use crate::clock::Clock;

/// The secret [`DevKernel::serve`] gives the agents it serves and registers.
const SERVE_SECRET: &str = "dev-secret";

impl DevKernel {
    /// The runtime for an agent under test: Tokio, with this kernel's clock for every wait of
    /// the SDK (heartbeats, retry pauses), so on a [`manual_clock`](crate::DevKernelBuilder::manual_clock)
    /// an agent heartbeats only when [`advance`](Self::advance) moves time. Request timestamps
    /// stay on the system clock, which the kernel checks them against. [`serve`](Self::serve)
    /// uses it on a manual clock; build your own agent with `.runtime(kernel.runtime())` to
    /// do the same.
    pub fn runtime(&self) -> rebuno::rt::Runtime {
        let sleep = crate::clock::KernelSleep(self.kernel.clock().clone());
        rebuno::rt::Runtime::new(
            rebuno::rt::TokioRuntime::new(),
            sleep,
            rebuno::rt::SystemClock::default(),
        )
    }

    /// Builds `agent` against this kernel, serves it with `rebuno-hyper` on `127.0.0.1:0` and
    /// registers it: the shortest way to a test of an agent.
    ///
    /// The builder's base URL is set to [`url`](Self::url) and its secret to `dev-secret`
    /// (both replace what the builder had); everything else, the handler first, is yours.
    /// Shut the server down with [`ServedAgent::shutdown`], which waits for in-flight runs.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), rebuno_devkernel::DevKernelError> {
    /// use rebuno::{Agent, HandlerError};
    /// use rebuno_devkernel::DevKernel;
    /// use serde_json::json;
    ///
    /// let kernel = DevKernel::start().await?;
    /// let served = kernel
    ///     .serve(Agent::builder("hello").handler(|name: String| async move {
    ///         Ok::<_, HandlerError>(format!("hello, {name}"))
    ///     }))
    ///     .await?;
    /// let done = kernel.run("hello", json!("Ada")).await?;
    /// assert_eq!(done.output, Some(json!("hello, Ada")));
    /// served.shutdown().await;
    /// # Ok(()) }
    /// ```
    ///
    /// On a [`manual_clock`](crate::DevKernelBuilder::manual_clock) the agent runs on
    /// [`runtime`](Self::runtime): its heartbeats and retry pauses wait for
    /// [`advance`](Self::advance) like the kernel's leases do.
    ///
    /// # Errors
    ///
    /// [`DevKernelError::Agent`] when the builder does not build (no handler, say),
    /// [`DevKernelError::Bind`] when no port can be bound, and registration errors.
    pub async fn serve(&self, agent: rebuno::AgentBuilder) -> Result<ServedAgent, DevKernelError> {
        let agent = match self.kernel.clock() {
            Clock::Manual(_) => agent.runtime(self.runtime()),
            Clock::System => agent,
        };
        let agent = agent.base_url(self.url()).secret(SERVE_SECRET).build()?;
        let addr = SocketAddr::from(([127, 0, 0, 1], 0));
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| DevKernelError::Bind { addr, source })?;
        let local = listener
            .local_addr()
            .map_err(|source| DevKernelError::Bind { addr, source })?;
        let webhook_url = format!("http://{local}{}", agent.webhook_path());
        let (stop, stopped) = oneshot::channel::<()>();
        let server = rebuno_hyper::serve(listener, agent.clone()).with_graceful_shutdown(async {
            let _ = stopped.await;
        });
        let served = ServedAgent {
            agent,
            webhook_url,
            stop,
            done: tokio::spawn(server.into_future()),
        };
        let spec = AgentSpec::new(served.agent.id(), served.webhook_url(), SERVE_SECRET);
        match self.register_agent(spec) {
            Ok(_) => Ok(served),
            Err(error) => {
                served.shutdown().await;
                Err(error)
            }
        }
    }

    /// Moves a [`manual_clock`](crate::DevKernelBuilder::manual_clock) forward by `by`, then sweeps
    /// at once: leases that ran out are reclaimed and overdue approvals expire before this
    /// returns; deliveries waiting out a backoff that has now passed go ahead. Call it from
    /// the Tokio runtime the kernel runs on: a sweep may start deliveries.
    ///
    /// # Errors
    ///
    /// [`DevKernelError::RealClock`] when the kernel runs on real time.
    pub fn advance(&self, by: Duration) -> Result<(), DevKernelError> {
        if !self.kernel.clock().advance(by) {
            return Err(DevKernelError::RealClock);
        }
        self.kernel.sweep();
        Ok(())
    }
}
