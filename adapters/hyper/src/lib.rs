//! Serve a [`rebuno::Agent`] with hyper.
//!
//! ```no_run
//! # async fn demo(agent: rebuno::Agent) -> std::io::Result<()> {
//! let listener = tokio::net::TcpListener::bind("0.0.0.0:5000").await?;
//! rebuno_hyper::serve(listener, agent)
//!     .with_graceful_shutdown(async { tokio::signal::ctrl_c().await.ok(); })
//!     .await
//! # }
//! ```
//!
//! The agent's webhook path answers `POST`; `GET /healthz` answers `200 ok`; anything else `404`.
//! On shutdown the server stops accepting, finishes open connections, then waits for every
//! acknowledged dispatch still running in the background (up to the drain timeout), so a deploy
//! does not cut executions short.

mod gateway;
mod router;

pub use gateway::LlmGateway;

use std::future::{Future, IntoFuture};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use rebuno::Agent;
use rebuno::rt::{Spawner, TokioRuntime};
use tokio::net::TcpListener;

/// How long shutdown waits for background runs by default.
const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// How long an HTTP/1 connection may wait for its next request by default.
const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves `agent` on `listener` until the returned future is dropped or its shutdown signal
/// fires. Await it (it implements [`IntoFuture`]).
pub fn serve(listener: TcpListener, agent: Agent) -> Serve {
    Serve {
        listener,
        agent,
        background: TokioRuntime::new(),
        signal: Box::pin(std::future::pending()),
        drain_timeout: DEFAULT_DRAIN_TIMEOUT,
        idle_timeout: Some(DEFAULT_IDLE_TIMEOUT),
    }
}

/// A server being configured; await it to run. See [`serve`].
#[must_use = "a server does nothing unless awaited"]
pub struct Serve {
    listener: TcpListener,
    agent: Agent,
    background: TokioRuntime,
    signal: Pin<Box<dyn Future<Output = ()> + Send>>,
    drain_timeout: Duration,
    idle_timeout: Option<Duration>,
}

impl std::fmt::Debug for Serve {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Serve")
            .field("addr", &self.listener.local_addr().ok())
            .field("agent", &self.agent)
            .field("drain_timeout", &self.drain_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .finish_non_exhaustive()
    }
}

impl Serve {
    /// Stops gracefully when `signal` resolves.
    pub fn with_graceful_shutdown(
        mut self,
        signal: impl Future<Output = ()> + Send + 'static,
    ) -> Self {
        self.signal = Box::pin(signal);
        self
    }

    /// How long shutdown waits for background runs (default 30 s). Runs still going after that
    /// are dropped; the kernel re-delivers them when their lease expires.
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.drain_timeout = timeout;
        self
    }

    /// How long an HTTP/1 connection may wait for (the headers of) its next request before it
    /// is closed (default 5 s; `None` keeps idle connections open). The kernel opens one
    /// connection per concurrent delivery and keeps it alive; without this, a burst of
    /// deliveries leaves that many idle sockets, each holding its buffers, for as long as the
    /// kernel keeps them.
    pub fn idle_timeout(mut self, timeout: impl Into<Option<Duration>>) -> Self {
        self.idle_timeout = timeout.into();
        self
    }

    /// The address the server listens on.
    ///
    /// # Errors
    ///
    /// When the socket has no local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The tracker of acknowledged runs, to watch or drain them yourself.
    pub fn background(&self) -> TokioRuntime {
        self.background.clone()
    }

    async fn run(self) -> io::Result<()> {
        let Serve {
            listener,
            agent,
            background,
            mut signal,
            drain_timeout,
            idle_timeout,
        } = self;
        let spawner = Spawner(Arc::new(background.clone()));
        let graceful = GracefulShutdown::new();
        let mut builder = auto::Builder::new(TokioExecutor::new());
        // hyper's header-read timeout also runs while a kept-alive connection waits for its
        // next request, so it closes idle connections; it needs a timer to run at all.
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(idle_timeout);
        tracing::info!(addr = ?listener.local_addr().ok(), agent_id = agent.id(), "serving agent");
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    let (stream, peer) = match accepted {
                        Ok(accepted) => accepted,
                        Err(error) => { tracing::warn!(%error, "accept failed"); continue; }
                    };
                    let service = router::Router::new(agent.clone(), spawner.clone());
                    let connection = builder.serve_connection(TokioIo::new(stream), service).into_owned();
                    let connection = graceful.watch(connection);
                    tokio::spawn(async move {
                        if let Err(error) = connection.await {
                            tracing::debug!(%error, %peer, "connection ended with an error");
                        }
                    });
                }
                () = &mut signal => break,
            }
        }
        drop(listener);
        tracing::info!(
            in_flight = background.in_flight(),
            "shutting down: draining connections and runs"
        );
        graceful.shutdown().await;
        if tokio::time::timeout(drain_timeout, background.drain())
            .await
            .is_err()
        {
            tracing::warn!(
                in_flight = background.in_flight(),
                "drain timed out; the kernel will re-deliver"
            );
        }
        Ok(())
    }
}

impl IntoFuture for Serve {
    type Output = io::Result<()>;
    type IntoFuture = Pin<Box<dyn Future<Output = io::Result<()>> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.run())
    }
}
