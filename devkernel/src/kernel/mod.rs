//! The kernel: every operation of the protocol, independent of HTTP.
//!
//! Each execution lives behind its own lock ([`ExecCell`]); every mutation appends to the
//! execution's event log and updates the projections in the same critical section. Effects on
//! other executions (session admission, subagent settlement) and on the network (deliveries)
//! run after the lock is released, from the returned [`Followups`].

pub(crate) mod agents;
mod api_keys;
pub(crate) mod approvals;
mod create;
mod delivery;
mod execution;
mod fork;
mod limits;
mod metrics;
mod policy_test;
mod recovery;
pub(crate) mod resources;
mod retention;
mod sessions;
mod step;
mod stream;
mod terminal;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::clock::Clock;
use crate::error::KernelError;
use crate::store::{ExecCell, Recorder, Store};

pub(crate) use agents::AgentRequest;
pub(crate) use api_keys::{CreateKeyRequest, KeyGrant};
pub(crate) use approvals::{DecideRequest, Resolution};
pub(crate) use create::CreateRequest;
pub use create::NewExecution;
pub(crate) use execution::{CompleteRequest, FailRequest, ListQuery};
pub(crate) use fork::ForkRequest;
pub(crate) use policy_test::PolicyTestRequest;
pub(crate) use resources::{BindRequest, Captures, RegisterRequest};
pub(crate) use step::{OutcomeRequest, SubmitRequest};
pub(crate) use stream::DeltaRequest;

/// Webhook deliveries in flight at once unless configured (the Go kernel's default).
pub(crate) const DEFAULT_DISPATCH_CONCURRENCY: usize = 8;

/// Tunables of a kernel instance.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    /// Bootstrap bearer token; `None` = dev mode (anonymous allowed).
    pub(crate) bearer_token: Option<String>,
    /// Lease period when the agent sets none.
    pub(crate) default_lease: Duration,
    /// Delivery attempts before `dispatch_exhausted`.
    pub(crate) max_attempts: u32,
    /// First retry delay.
    pub(crate) backoff_base: Duration,
    /// Largest retry delay (before jitter).
    pub(crate) backoff_cap: Duration,
    /// Webhook HTTP timeout.
    pub(crate) webhook_timeout: Duration,
    /// Approval timeout when the rule sets none.
    pub(crate) approval_timeout: Duration,
    /// How often the reaper looks for expired leases and approvals.
    pub(crate) sweep_interval: Duration,
    /// How long an execution may take before it is cancelled (`deadline_exceeded`).
    pub(crate) execution_deadline: Option<Duration>,
    /// How many webhook deliveries may be in flight at once (Go's `DispatchConcurrency`).
    pub(crate) dispatch_concurrency: usize,
    /// How long an ended execution is kept after its creation (`ZERO`: forever).
    pub(crate) execution_retention: Duration,
    /// How often retention looks for executions to delete (Go's `CleanupInterval`).
    pub(crate) retention_interval: Duration,
    /// Where every time the kernel reads comes from.
    pub(crate) clock: Clock,
    /// Where the event log persists (`None`: memory only).
    pub(crate) data_dir: Option<PathBuf>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            bearer_token: None,
            default_lease: Duration::from_secs(120),
            max_attempts: crate::dispatch_retry::DEFAULT_MAX_ATTEMPTS,
            backoff_base: crate::dispatch_retry::DEFAULT_BASE_DELAY,
            backoff_cap: crate::dispatch_retry::DEFAULT_MAX_DELAY,
            webhook_timeout: Duration::from_secs(30),
            approval_timeout: Duration::from_secs(15 * 60),
            sweep_interval: Duration::from_millis(500),
            execution_deadline: None,
            dispatch_concurrency: DEFAULT_DISPATCH_CONCURRENCY,
            execution_retention: Duration::from_secs(24 * 3600),
            retention_interval: Duration::from_secs(10 * 60),
            clock: Clock::System,
            data_dir: None,
        }
    }
}

/// Who is calling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Principal {
    /// Bearer (or anonymous dev) caller with every scope.
    Admin,
    /// An HMAC-authenticated agent.
    Agent(String),
    /// A scoped API key.
    Key(KeyGrant),
}

/// Work to do once an execution's lock is released.
#[derive(Debug, Default)]
#[must_use]
pub(crate) struct Followups {
    /// Dispatches to deliver: (execution, dispatch).
    pub(crate) deliver: Vec<(Uuid, Uuid)>,
    /// Executions that just reached a terminal state.
    pub(crate) terminal: Vec<Uuid>,
}

impl Followups {
    /// Merges another batch.
    pub(crate) fn extend(&mut self, other: Followups) {
        self.deliver.extend(other.deliver);
        self.terminal.extend(other.terminal);
    }
}

/// The kernel handle: cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct Kernel {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    store: Store,
    sessions: sessions::Sessions,
    limiter: limits::Limiter,
    keys: api_keys::Keys,
    metrics: metrics::Metrics,
    recorder: Recorder,
    config: Config,
    http: reqwest::Client,
    shutdown: CancellationToken,
    /// The leases a data directory kept, until [`Kernel::resume`] takes them up.
    kept_leases: std::sync::Mutex<std::collections::HashMap<uuid::Uuid, crate::store::HeldLease>>,
    /// The delivery workers: a delivery is claimed only with one of them.
    workers: Arc<tokio::sync::Semaphore>,
    /// When retention last ran, and where its deletions persist.
    retention: retention::Retention,
}

impl Kernel {
    /// A kernel with `config`; with a data directory, the agents and API keys of its
    /// registry are back and every execution of its event log is rebuilt (call
    /// [`Kernel::resume`] once the agents given at start are registered).
    pub(crate) fn new(config: Config) -> Result<Self, KernelError> {
        let persisted = recovery::Persisted::open(config.data_dir.as_deref())?;
        let recorder = Recorder {
            clock: config.clock.clone(),
            journal: persisted.journal,
            leases: persisted.leases,
        };
        let http = reqwest::Client::builder()
            .timeout(config.webhook_timeout)
            // Agent servers close idle keep-alive connections after 5 s (uvicorn's default and
            // rebuno-hyper's): drop them first, so no delivery is written to a closing socket.
            .pool_idle_timeout(std::time::Duration::from_secs(4))
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| KernelError::Internal(format!("http client: {e}")))?;
        let workers = Arc::new(tokio::sync::Semaphore::new(
            config
                .dispatch_concurrency
                .clamp(1, tokio::sync::Semaphore::MAX_PERMITS),
        ));
        let retention = retention::Retention::new(config.clock.now(), persisted.deletions);
        let kernel = Self {
            inner: Arc::new(Inner {
                store: Store::new(persisted.registry, persisted.recovered.agents),
                sessions: sessions::Sessions::default(),
                limiter: limits::Limiter::default(),
                keys: api_keys::Keys::new(persisted.recovered.keys),
                metrics: metrics::Metrics::default(),
                recorder,
                config,
                http,
                shutdown: CancellationToken::new(),
                kept_leases: std::sync::Mutex::new(persisted.held),
                workers,
                retention,
            }),
        };
        kernel.restore(persisted.events);
        Ok(kernel)
    }

    pub(crate) fn store(&self) -> &Store {
        &self.inner.store
    }

    pub(crate) fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The kernel's clock.
    pub(crate) fn clock(&self) -> &Clock {
        &self.inner.recorder.clock
    }

    /// How executions record events (clock, journal).
    pub(crate) fn recorder(&self) -> &Recorder {
        &self.inner.recorder
    }

    pub(crate) fn http(&self) -> &reqwest::Client {
        &self.inner.http
    }

    pub(crate) fn shutdown_token(&self) -> &CancellationToken {
        &self.inner.shutdown
    }

    pub(crate) fn metrics(&self) -> &metrics::Metrics {
        &self.inner.metrics
    }

    fn keys(&self) -> &api_keys::Keys {
        &self.inner.keys
    }

    fn sessions(&self) -> &sessions::Sessions {
        &self.inner.sessions
    }

    /// An execution visible to `principal`: `404` if absent, `403` if another agent's.
    pub(crate) fn cell(
        &self,
        id: Uuid,
        principal: &Principal,
    ) -> Result<Arc<ExecCell>, KernelError> {
        let cell = self
            .store()
            .execution(id)
            .ok_or_else(|| KernelError::not_found("execution"))?;
        if let Principal::Agent(agent) = principal
            && *agent != cell.agent_id
        {
            return Err(KernelError::Forbidden);
        }
        Ok(cell)
    }

    /// Runs the followups of a mutation: deliveries, then terminal hooks.
    pub(crate) fn run(&self, followups: Followups) {
        let mut pending = followups;
        // Terminal hooks may produce more followups (admissions, settlements).
        for _ in 0..64 {
            for (execution, dispatch) in std::mem::take(&mut pending.deliver) {
                self.store().mark_live(execution);
                self.spawn_delivery(execution, dispatch);
            }
            let terminal = std::mem::take(&mut pending.terminal);
            if terminal.is_empty() {
                return;
            }
            for id in terminal {
                pending.extend(self.after_terminal(id));
            }
        }
    }
}
