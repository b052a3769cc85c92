//! Serve a [`rebuno::Agent`] with hyper.
//!
//! ```no_run
//! # async fn demo(agent: rebuno::Agent) -> std::io::Result<()> {
//! let listener = tokio::net::TcpListener::bind("0.0.0.0:5000").await?;
//! rebuno_hyper::serve(listener, agent)
//!     .with_graceful_shutdown(rebuno_hyper::shutdown_signal()) // Ctrl-C or SIGTERM
//!     .await
//! # }
//! ```
//!
//! The agent's webhook path answers `POST`; `GET /healthz` answers `200 ok`; anything else `404`.
//! Connections speak HTTP/1.1 or HTTP/2 over cleartext (h2c, prior knowledge).
//! On shutdown the server stops accepting, finishes open connections, then waits for every
//! acknowledged dispatch still running in the background (up to the drain timeout), so a deploy
//! does not cut executions short.
//!
//! # Which Tokio runtime
//!
//! The server runs on whatever runtime it is awaited in. An agent is I/O-bound: between
//! requests it does a few microseconds of work. On one or two vCPUs (a small container, a
//! `t4g.small`) a **current-thread** runtime, `#[tokio::main(flavor = "current_thread")]`, costs
//! less CPU per step than the multi-thread default, which wakes its workers across cores for
//! every request and response (BENCHMARKS.md in the repository measures both, `rust` and
//! `rust-ct`). Keep the multi-thread runtime when your tools do CPU-heavy work inline, or use
//! [`rebuno::step`] with `tokio::task::spawn_blocking` for that work.
//!
//! # Limits
//!
//! Every limit has a default sized for webhooks from the kernel and a builder method on
//! [`Serve`]:
//!
//! | Limit | Default | What the client sees when it is hit |
//! |---|---|---|
//! | Open connections ([`Serve::max_connections`]) | 1024 | Nothing is refused: at the limit the server stops accepting, new connections wait in the listen backlog and are served as others close. |
//! | Idle connection ([`Serve::idle_timeout`]) | 5 s | A connection, HTTP/1 or HTTP/2, with no request in flight and no bytes moving for this long is closed: HTTP/1 gets EOF, HTTP/2 gets `GOAWAY` then EOF; dropped 1 s later if it does not finish closing. A request in progress is never cut. |
//! | Request head arrival ([`Serve::header_read_timeout`]) | 10 s | The connection is closed without a response if a request head (request line and headers) takes longer to arrive, counted from the end of the previous request or from the connect. |
//! | Request head size ([`Serve::max_header_bytes`]) | 16 KiB | HTTP/1: `431 Request Header Fields Too Large`, then the connection closes. HTTP/2: it is the advertised `SETTINGS_MAX_HEADER_LIST_SIZE`; a larger header block is refused with `431` or a stream reset. Values below 8 KiB (hyper's minimum) count as 8 KiB. |
//! | Header count ([`Serve::max_headers`]) | 64 | HTTP/1: `431 Request Header Fields Too Large`. (HTTP/2 is bounded by the head size.) |
//! | HTTP/2 streams per connection | 64 | Streams over the limit are refused (`REFUSED_STREAM`); clients queue them. |
//! | HTTP/2 keep-alive | ping after 20 s (or twice the idle timeout, if longer) without frames, 20 s to answer | A client that stops answering pings is disconnected. Pings wait longer than the idle timeout so they never keep an idle connection open. |
//! | Webhook body size | 64 KiB | Enforced by [`rebuno::Agent`] for every host: a body over 64 KiB gets `413`. |
//! | Webhook body arrival | 10 s | Enforced by [`rebuno::Agent`] for every host: a body not received within 10 s gets `408`. |
//!
//! # Accept errors
//!
//! When `accept` fails because the process or system is out of a resource (`EMFILE` when file
//! descriptors run out, `ENFILE`, `ENOBUFS`, `ENOMEM`), the server waits before trying again:
//! 10 ms, doubling up to 1 s, back to 10 ms after the next success. Pending connections wait in
//! the backlog meanwhile. Such an episode logs one `warn` when it starts and one `info` with the
//! number of failed accepts when accepting recovers. Errors about a single pending connection
//! (`ECONNABORTED`, `ECONNRESET`) are retried at once and logged at `debug`.

mod accept;
mod activity;
mod connection;
mod gateway;
mod limits;
mod logging;
mod router;
mod signal;
mod watchdog;

pub use gateway::LlmGateway;
pub use logging::init_logging;
pub use signal::shutdown_signal;

use std::future::{Future, IntoFuture};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use rebuno::Agent;
use rebuno::rt::{Spawner, TokioRuntime};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};

use crate::accept::Backoff;
use crate::limits::Limits;

/// How long shutdown waits for background runs by default.
const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// Serves `agent` on `listener` until the returned future is dropped or its shutdown signal
/// fires. Await it (it implements [`IntoFuture`]).
pub fn serve(listener: TcpListener, agent: Agent) -> Serve {
    Serve {
        listener,
        agent,
        background: TokioRuntime::new(),
        signal: Box::pin(std::future::pending()),
        drain_timeout: DEFAULT_DRAIN_TIMEOUT,
        limits: Limits::default(),
    }
}

/// A server being configured; await it to run. See [`serve`] and the [crate docs](crate#limits)
/// for the limits it enforces.
#[must_use = "a server does nothing unless awaited"]
pub struct Serve {
    listener: TcpListener,
    agent: Agent,
    background: TokioRuntime,
    signal: Pin<Box<dyn Future<Output = ()> + Send>>,
    drain_timeout: Duration,
    limits: Limits,
}

impl std::fmt::Debug for Serve {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Serve")
            .field("addr", &self.listener.local_addr().ok())
            .field("agent", &self.agent)
            .field("drain_timeout", &self.drain_timeout)
            .field("limits", &self.limits)
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

    /// How long a connection, HTTP/1 or HTTP/2, may sit with no request in flight and no bytes
    /// moving before it is closed (default 5 s; `None` turns this off, leaving the
    /// [header read timeout](Self::header_read_timeout) as the only bound on idle connections).
    /// The kernel opens one connection per concurrent delivery and keeps it alive; without
    /// this, a burst of deliveries leaves that many idle sockets, each holding its buffers.
    /// A request in progress is never cut by it.
    pub fn idle_timeout(mut self, timeout: impl Into<Option<Duration>>) -> Self {
        self.limits.idle_timeout = timeout.into();
        self
    }

    /// How long a request head (request line and headers) may take to arrive, counted from the
    /// connect or the end of the previous request on the connection (default 10 s; `None`
    /// turns it off). A connection that runs over is closed without a response.
    pub fn header_read_timeout(mut self, timeout: impl Into<Option<Duration>>) -> Self {
        self.limits.header_read_timeout = timeout.into();
        self
    }

    /// The most connections served at once (default 1024; 0 counts as 1). At the limit the
    /// server stops accepting: new connections wait in the listen backlog, not refused.
    pub fn max_connections(mut self, max: usize) -> Self {
        self.limits.max_connections = max;
        self
    }

    /// The largest request head, request line and headers, in bytes (default 16 KiB; values
    /// below hyper's 8 KiB minimum count as 8 KiB). HTTP/1 heads over it get `431`; for HTTP/2
    /// it is the advertised header list size.
    pub fn max_header_bytes(mut self, max: usize) -> Self {
        self.limits.max_header_bytes = max;
        self
    }

    /// The most headers in an HTTP/1 request (default 64); a request with more gets `431`.
    pub fn max_headers(mut self, max: usize) -> Self {
        self.limits.max_headers = max;
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
            limits,
        } = self;
        tracing::info!(addr = ?listener.local_addr().ok(), agent_id = agent.id(), "serving agent");
        let context = connection::Context {
            agent,
            spawner: Spawner(Arc::new(background.clone())),
            builder: limits.builder(),
            rules: limits.idle_rules(),
        };
        // Each connection holds a receiver until it is gone: the count of receivers is the count
        // of open connections, and `closed` waits for the last.
        let (shutdown, _) = watch::channel(());
        let slots = Arc::new(Semaphore::new(limits.connection_slots()));
        let mut backoff = Backoff::default();
        loop {
            tokio::select! {
                accepted = accept::accept(&listener, &slots, &mut backoff) => {
                    let Some(accepted) = accepted else { break };
                    context.spawn(accepted, shutdown.subscribe());
                }
                () = &mut signal => break,
            }
        }
        drop(listener);
        tracing::info!(
            connections = shutdown.receiver_count(),
            in_flight = background.in_flight(),
            "shutting down: draining connections and runs"
        );
        shutdown.send_replace(());
        shutdown.closed().await;
        drain(&background, drain_timeout).await;
        Ok(())
    }
}

/// Waits up to `timeout` for the acknowledged runs to finish.
async fn drain(background: &TokioRuntime, timeout: Duration) {
    if tokio::time::timeout(timeout, background.drain())
        .await
        .is_err()
    {
        tracing::warn!(
            in_flight = background.in_flight(),
            "drain timed out; the kernel will re-deliver"
        );
    }
}

impl IntoFuture for Serve {
    type Output = io::Result<()>;
    type IntoFuture = Pin<Box<dyn Future<Output = io::Result<()>> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.run())
    }
}

/// The README's Rust snippets, compiled as doctests so they cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
