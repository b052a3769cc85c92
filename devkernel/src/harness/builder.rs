//! [`DevKernelBuilder`]: the kernel's settings, and starting it.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::agents::register;
use super::{AgentSpec, DevKernel, DevKernelError};
use crate::clock::Clock;
use crate::dispatch_retry::{DispatchRetry, DispatchRetryError};
use crate::kernel::{Config, Kernel};

/// Configures and starts a [`DevKernel`].
#[derive(Debug, Clone)]
pub struct DevKernelBuilder {
    addr: SocketAddr,
    config: Config,
    agents: Vec<AgentSpec>,
}

impl Default for DevKernelBuilder {
    fn default() -> Self {
        Self {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            config: Config::default(),
            agents: Vec::new(),
        }
    }
}

impl DevKernelBuilder {
    /// Listen address (default `127.0.0.1:0`, an ephemeral port).
    #[must_use]
    pub fn addr(mut self, addr: SocketAddr) -> Self {
        self.addr = addr;
        self
    }

    /// Bootstrap bearer token; `None` (the default) is dev mode: requests without
    /// `Authorization` are admitted, a supplied token must still be valid.
    #[must_use]
    pub fn bearer_token(mut self, token: Option<String>) -> Self {
        self.config.bearer_token = token.filter(|t| !t.is_empty());
        self
    }

    /// Lease period for agents that set none (default 120 s).
    #[must_use]
    pub fn default_lease_timeout(mut self, lease: Duration) -> Self {
        self.config.default_lease = lease;
        self
    }

    /// Delivery attempts before `dispatch_exhausted` (default 5, as the Go kernel's
    /// `DispatchMaxAttempts`; 0 counts as 1). A lease expiry uses one too: the reclaimed
    /// dispatch is delivered again as its next attempt. [`dispatch_retry`](Self::dispatch_retry)
    /// sets it with the backoff, checked (`rebuno-dev`: `--dispatch-max-attempts`).
    #[must_use]
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.config.max_attempts = attempts.max(1);
        self
    }

    /// Retry delay: `min(base * 2^(attempt-1), cap)` plus up to 25 % jitter (default 1 s, 30 s,
    /// as the Go kernel's `DispatchBaseDelay` and `DispatchMaxDelay`; a `base` above `cap`
    /// waits `cap` every time). `rebuno-dev`: `--dispatch-base-delay`, `--dispatch-max-delay`.
    #[must_use]
    pub fn retry_backoff(mut self, base: Duration, cap: Duration) -> Self {
        self.config.backoff_base = base;
        self.config.backoff_cap = cap;
        self
    }

    /// Delivery retries all at once, as `rebuno-dev` takes them: each setting `retry` gives
    /// replaces this builder's ([`max_attempts`](Self::max_attempts),
    /// [`retry_backoff`](Self::retry_backoff)), once they are checked together.
    ///
    /// # Errors
    ///
    /// [`DispatchRetryError`] when `max_attempts` is 0 or the base delay is above the max
    /// delay.
    pub fn dispatch_retry(self, retry: DispatchRetry) -> Result<Self, DispatchRetryError> {
        let config = &self.config;
        let (attempts, base, max) =
            retry.checked(config.max_attempts, config.backoff_base, config.backoff_cap)?;
        Ok(self.max_attempts(attempts).retry_backoff(base, max))
    }

    /// Webhook HTTP timeout (default 30 s).
    #[must_use]
    pub fn webhook_timeout(mut self, timeout: Duration) -> Self {
        self.config.webhook_timeout = timeout;
        self
    }

    /// Approval timeout when the rule sets none (default 15 min).
    #[must_use]
    pub fn approval_timeout(mut self, timeout: Duration) -> Self {
        self.config.approval_timeout = timeout;
        self
    }

    /// How long an execution may take: each gets `deadline_at` (creation plus `limit`) and
    /// is cancelled with `deadline_exceeded` when it has not ended by then, as the Go kernel's
    /// `ExecutionDeadlineTimeout` does (default: none).
    #[must_use]
    pub fn execution_deadline(mut self, limit: Duration) -> Self {
        self.config.execution_deadline = Some(limit);
        self
    }

    /// How many webhook deliveries may be in flight at once (default 8, as the Go kernel's
    /// `DispatchConcurrency`; 0 keeps the default). A due dispatch waits for a free worker and
    /// is claimed only then: the wait uses no attempt and starts no lease.
    #[must_use]
    pub fn dispatch_concurrency(mut self, workers: usize) -> Self {
        self.config.dispatch_concurrency = if workers == 0 {
            crate::kernel::DEFAULT_DISPATCH_CONCURRENCY
        } else {
            workers
        };
        self
    }

    /// How long an ended execution is kept (default 24 h, as the Go kernel's
    /// `ExecutionRetention`; `Duration::ZERO` keeps everything). Every 10 minutes of the
    /// kernel's clock, the completed, failed and cancelled executions created longer ago than
    /// this are deleted with their events, steps and approvals, unless their session still has
    /// an execution that is running, blocked, pending or younger. With a
    /// [`data_dir`](Self::data_dir), deleted executions stay deleted across a restart.
    #[must_use]
    pub fn execution_retention(mut self, retention: Duration) -> Self {
        self.config.execution_retention = retention;
        self
    }

    /// Runs the kernel on a manual clock, frozen at the start until [`DevKernel::advance`]
    /// moves it: leases, delivery backoff, approval expiry, rate-limit refill and event
    /// times all read it, so a test of a one-hour approval timeout runs in milliseconds.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), rebuno_devkernel::DevKernelError> {
    /// use std::time::Duration;
    /// let kernel = rebuno_devkernel::DevKernel::builder().manual_clock().start().await?;
    /// kernel.advance(Duration::from_secs(3600))?; // an hour passes for the kernel
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn manual_clock(mut self) -> Self {
        self.config.clock = Clock::manual();
        self
    }

    /// Persists the event log in `dir` (`dir/events.jsonl`) and, at start, rebuilds every
    /// execution from what is already there: work that was in flight when the previous
    /// kernel stopped (or was killed) is reclaimed and delivered again, recorded steps
    /// replay. The default keeps everything in memory.
    ///
    /// Agents and API keys persist too, in `dir/registry.jsonl`: every registration,
    /// deletion, secret rotation, metadata or policy change of an agent and every creation,
    /// rotation or revocation of a key is written there before it answers, and replayed at
    /// start before the executions resume. The file holds the agents' secrets (API keys only
    /// as their tokens' SHA-256), so it is created with mode `0600` on Unix. Agents given
    /// with [`agent`](Self::agent) are registered over the recovered ones, as a
    /// `POST /v0/agents` would.
    #[must_use]
    pub fn data_dir(mut self, dir: impl Into<std::path::PathBuf>) -> Self {
        self.config.data_dir = Some(dir.into());
        self
    }

    /// Registers an agent at start.
    #[must_use]
    pub fn agent(mut self, spec: AgentSpec) -> Self {
        self.agents.push(spec);
        self
    }

    /// Binds the listener, starts the server, the delivery sweeper and registers the agents.
    ///
    /// # Errors
    ///
    /// [`DevKernelError::Bind`] when the address is taken; agent registration errors.
    pub async fn start(self) -> Result<DevKernel, DevKernelError> {
        let kernel = Kernel::new(self.config)?;
        for spec in self.agents {
            register(&kernel, spec)?;
        }
        let listener = tokio::net::TcpListener::bind(self.addr)
            .await
            .map_err(|source| DevKernelError::Bind {
                addr: self.addr,
                source,
            })?;
        let addr = listener
            .local_addr()
            .map_err(|source| DevKernelError::Bind {
                addr: self.addr,
                source,
            })?;
        // Recovered work resumes before anything else can touch it (no request, no sweep).
        kernel.resume();
        let router = crate::http::router(kernel.clone());
        let token = kernel.shutdown_token().clone();
        let server = tokio::spawn(async move {
            let serve =
                axum::serve(listener, router).with_graceful_shutdown(token.cancelled_owned());
            if let Err(error) = serve.await {
                tracing::error!(%error, "dev kernel server failed");
            }
        });
        kernel.spawn_sweeper();
        kernel.spawn_syncer();
        tracing::info!(%addr, "dev kernel listening");
        log_retries(kernel.config());
        Ok(DevKernel {
            kernel,
            addr,
            server: Arc::new(Mutex::new(Some(server))),
        })
    }
}

/// What a failing delivery is retried with: `retries_after_lease_expiry` is how long an agent
/// may stay unreachable once the lease of a run it dropped expires (the backoff between
/// attempts 2 and `max_attempts`, jitter left out).
fn log_retries(config: &Config) {
    let (attempts, base, cap) = (config.max_attempts, config.backoff_base, config.backoff_cap);
    tracing::info!(
        max_attempts = attempts,
        base_delay = ?base,
        max_delay = ?cap,
        retries_after_lease_expiry = ?crate::dispatch_retry::retry_window(attempts, base, cap, 2),
        "webhook delivery retries"
    );
}
