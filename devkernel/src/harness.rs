//! [`DevKernel`]: an in-process kernel on a loopback port, with test-harness methods.

use std::future::IntoFuture;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use uuid::Uuid;

use crate::clock::Clock;
use crate::error::KernelError;
use crate::kernel::{
    AgentRequest, Config, CreateKeyRequest, DecideRequest, ForkRequest, Kernel, NewExecution,
    Principal, Resolution,
};
use crate::model::{
    AgentRecord, Approval, Event, EventKind, Execution, ExecutionStatus, ForkPoints, IssuedApiKey,
    ResourceView, StepRecord,
};
use crate::policy::Policy;
use crate::store::lock;

mod error;

pub use error::DevKernelError;
use error::{LAST_EVENTS, summary, unknown, unknown_agent};

/// The secret [`DevKernel::serve`] gives the agents it serves and registers.
const SERVE_SECRET: &str = "dev-secret";

/// How long [`DevKernel::run`] waits for an execution to end.
const RUN_TIMEOUT: Duration = Duration::from_secs(30);

/// An agent registration: the body of `POST /v0/agents` plus an optional policy bundle.
///
/// ```
/// use rebuno_devkernel::AgentSpec;
/// let spec = AgentSpec::new("hello", "http://127.0.0.1:5000/webhook", "dev-secret")
///     .lease_timeout_seconds(30)
///     .policy_yaml("default_action: allow");
/// # let _ = spec;
/// ```
#[derive(Debug, Clone)]
pub struct AgentSpec {
    pub(crate) id: String,
    pub(crate) webhook_url: String,
    pub(crate) secret: rebuno::Secret,
    pub(crate) lease_timeout_seconds: Option<u64>,
    pub(crate) policy_yaml: Option<String>,
}

impl AgentSpec {
    /// An agent `id` reached at `webhook_url`, sharing `secret`.
    pub fn new(
        id: impl Into<String>,
        webhook_url: impl Into<String>,
        secret: impl Into<String>,
    ) -> Self {
        Self {
            id: id.into(),
            webhook_url: webhook_url.into(),
            secret: rebuno::Secret::new(secret.into()),
            lease_timeout_seconds: None,
            policy_yaml: None,
        }
    }

    /// Lease period in seconds (values below 10 mean the 120 s default).
    #[must_use]
    pub fn lease_timeout_seconds(mut self, seconds: u64) -> Self {
        self.lease_timeout_seconds = Some(seconds);
        self
    }

    /// A policy bundle in the kernel's YAML language. Its `default_action` is `deny` unless it
    /// says `allow`: every tool and LLM call no rule matches is denied (unmatched `local` steps
    /// are allowed), so a bundle that only gates one tool starts with `default_action: allow`.
    #[must_use]
    pub fn policy_yaml(mut self, yaml: impl Into<String>) -> Self {
        self.policy_yaml = Some(yaml.into());
        self
    }

    /// The agent id.
    pub fn id(&self) -> &str {
        &self.id
    }
}

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
    /// dispatch is delivered again as its next attempt. [`DispatchRetry`](crate::DispatchRetry)
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

    /// The delivery attempts, base delay and max delay set so far.
    pub(crate) fn retry_settings(&self) -> (u32, Duration, Duration) {
        let config = &self.config;
        (config.max_attempts, config.backoff_base, config.backoff_cap)
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

fn register(kernel: &Kernel, spec: AgentSpec) -> Result<AgentRecord, DevKernelError> {
    let policy = match &spec.policy_yaml {
        Some(yaml) => Some(Arc::new(Policy::parse(yaml)?)),
        None => None,
    };
    let request = AgentRequest {
        id: spec.id,
        webhook_url: spec.webhook_url,
        secret: spec.secret,
        lease_timeout_seconds: spec
            .lease_timeout_seconds
            .and_then(|s| i64::try_from(s).ok()),
    };
    Ok(kernel.upsert_agent(request, policy)?)
}

/// An in-memory Rebuno kernel serving the `/v0` API on a local port.
///
/// Dropping it (or [`DevKernel::shutdown`]) stops the server and all deliveries.
///
/// ```no_run
/// # async fn demo() -> Result<(), rebuno_devkernel::DevKernelError> {
/// use rebuno_devkernel::{AgentSpec, DevKernel, NewExecution};
/// use std::time::Duration;
///
/// let kernel = DevKernel::start().await?;
/// kernel.register_agent(AgentSpec::new("hello", "http://127.0.0.1:5000/webhook", "dev-secret"))?;
/// let execution = kernel
///     .create_execution(NewExecution::new("hello", serde_json::json!({"name": "Ada"})))
///     .await?;
/// let done = kernel.wait_terminal(execution.id, Duration::from_secs(10)).await?;
/// println!("{:?}", done.output);
/// kernel.shutdown().await;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct DevKernel {
    kernel: Kernel,
    addr: SocketAddr,
    server: Arc<Mutex<Option<JoinHandle<()>>>>,
}

impl DevKernel {
    /// Starts a kernel on `127.0.0.1:0` in dev mode.
    ///
    /// # Errors
    ///
    /// [`DevKernelError::Bind`] when no port can be bound.
    pub async fn start() -> Result<Self, DevKernelError> {
        Self::builder().start().await
    }

    /// A builder for non-default settings.
    pub fn builder() -> DevKernelBuilder {
        DevKernelBuilder::default()
    }

    /// Base URL, e.g. `http://127.0.0.1:41234`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Registers (upserts) an agent, like `POST /v0/agents` (plus an optional policy).
    ///
    /// # Errors
    ///
    /// Validation errors (empty id, URL or secret) and policy compile errors.
    pub fn register_agent(&self, spec: AgentSpec) -> Result<AgentRecord, DevKernelError> {
        register(&self.kernel, spec)
    }

    /// Rotates an agent's secret without downtime: webhooks are signed with `secret` from now
    /// on, and the agent's requests are accepted with the new or the previous secret until
    /// [`retire_previous_secret`](Self::retire_previous_secret). Pair it with an agent built
    /// with `secret(new)` and `previous_secret(old)`.
    ///
    /// # Errors
    ///
    /// The agent is unknown, or `secret` is empty.
    pub fn rotate_secret(
        &self,
        agent_id: &str,
        secret: impl Into<String>,
    ) -> Result<(), DevKernelError> {
        self.kernel
            .rotate_agent_secret(agent_id, rebuno::Secret::new(secret.into()))
            .map_err(|e| self.unknown_agent(e, agent_id))
    }

    /// Ends a rotation: the secret [`rotate_secret`](Self::rotate_secret) replaced is no longer
    /// accepted.
    ///
    /// # Errors
    ///
    /// The agent is unknown.
    pub fn retire_previous_secret(&self, agent_id: &str) -> Result<(), DevKernelError> {
        self.kernel
            .retire_previous_secret(agent_id)
            .map_err(|e| self.unknown_agent(e, agent_id))
    }

    /// Replaces an agent's policy bundle, like `POST /v0/policies/{agent_id}`. As in the Go
    /// kernel, `default_action` is `deny` unless the bundle says `allow`: once an agent has a
    /// bundle, every tool and LLM call no rule matches is denied (`no explicit allow rule
    /// matched`); unmatched `local` steps are allowed.
    ///
    /// ```no_run
    /// # fn demo(kernel: rebuno_devkernel::DevKernel) -> Result<(), rebuno_devkernel::DevKernelError> {
    /// kernel.set_policy("triage", r#"
    /// default_action: allow   # else the agent's other tools and LLM calls are denied
    /// rules:
    ///   - { id: replies, when: { target: send_reply }, then: { decision: require_approval } }
    /// "#)?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// The bundle does not compile, or the agent is unknown.
    pub fn set_policy(&self, agent_id: &str, yaml: &str) -> Result<(), DevKernelError> {
        self.kernel
            .set_policy(agent_id, yaml)
            .map_err(|e| self.unknown_agent(e, agent_id))
    }

    /// Creates an execution, like `POST /v0/executions`; delivery starts at once.
    ///
    /// # Errors
    ///
    /// The same errors the HTTP route maps (unknown agent, invalid session, ...).
    pub async fn create_execution(
        &self,
        request: NewExecution,
    ) -> Result<Execution, DevKernelError> {
        Ok(self.kernel.create_execution(request, &Principal::Admin)?)
    }

    /// An execution snapshot.
    pub fn execution(&self, id: Uuid) -> Option<Execution> {
        self.kernel.execution(id, &Principal::Admin).ok()
    }

    /// The whole event log of an execution (empty if unknown).
    pub fn events(&self, id: Uuid) -> Vec<Event> {
        self.kernel.all_events(id)
    }

    /// The kinds of an execution's events, in log order, for assertions on what happened.
    ///
    /// ```no_run
    /// # fn demo(kernel: rebuno_devkernel::DevKernel, id: uuid::Uuid) {
    /// use rebuno_devkernel::EventKind;
    /// let kinds = kernel.event_kinds(id);
    /// assert_eq!(kinds.iter().filter(|k| **k == EventKind::StepSucceeded).count(), 2);
    /// assert_eq!(kinds.last(), Some(&EventKind::ExecutionCompleted));
    /// # }
    /// ```
    pub fn event_kinds(&self, id: Uuid) -> Vec<EventKind> {
        self.events(id)
            .iter()
            .filter_map(|event| event.kind.parse().ok())
            .collect()
    }

    /// The steps of an execution ordered by step id (empty if unknown).
    pub fn steps(&self, id: Uuid) -> Vec<StepRecord> {
        self.kernel
            .steps(id, &Principal::Admin, false)
            .unwrap_or_default()
    }

    /// An execution's cell, for waiting on it.
    fn cell(&self, id: Uuid) -> Result<Arc<crate::store::ExecCell>, DevKernelError> {
        self.kernel
            .store()
            .execution(id)
            .ok_or(DevKernelError::NotFound(id))
    }

    /// The runtime for an agent under test: Tokio, with this kernel's clock for every wait of
    /// the SDK (heartbeats, retry pauses), so on a [`manual_clock`](DevKernelBuilder::manual_clock)
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

    /// An execution's history for [`replay::check`](crate::replay::check): the execution, its
    /// steps and its event log as the HTTP API serves them, and for a session's later turn the
    /// previous state its handler reads with `rebuno::previous()`. `None` if unknown.
    pub fn history(&self, id: Uuid) -> Option<crate::replay::History> {
        let execution = as_wire(&self.execution(id)?)?;
        let steps = as_wire(&self.steps(id))?;
        let events = as_wire(&self.events(id))?;
        let history = crate::replay::History::new(execution, steps, events);
        if history.execution().parent_execution_id.is_none() {
            return Some(history);
        }
        let previous = self.kernel.previous(id, &Principal::Admin).ok()?;
        Some(history.with_previous(serde_json::json!({ "state": previous })))
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
    /// On a [`manual_clock`](DevKernelBuilder::manual_clock) the agent runs on
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

    /// Creates an execution of `agent_id` with `input` and waits up to 30 s for it to end
    /// (`completed`, `failed` or `cancelled`); see [`serve`](Self::serve) for an example.
    /// For a session, a parent or another timeout, use
    /// [`create_execution`](Self::create_execution) and [`wait_terminal`](Self::wait_terminal).
    /// [`run_completed`](Self::run_completed) also checks that it completed.
    ///
    /// ```no_run
    /// # async fn demo(kernel: rebuno_devkernel::DevKernel) -> Result<(), rebuno_devkernel::DevKernelError> {
    /// let done = kernel.run("hello", serde_json::json!({"name": "Ada"})).await?;
    /// println!("{:?} {:?}", done.status, done.output);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// The errors of [`create_execution`](Self::create_execution) (an unknown agent is named,
    /// with the registered ones); [`DevKernelError::Timeout`] when the execution is still going
    /// after 30 s.
    pub async fn run(
        &self,
        agent_id: &str,
        input: serde_json::Value,
    ) -> Result<Execution, DevKernelError> {
        let created = self
            .create_execution(NewExecution::new(agent_id, input))
            .await
            .map_err(|error| match error {
                DevKernelError::Kernel(error) => self.unknown_agent(error, agent_id),
                other => other,
            })?;
        self.wait_terminal(created.id, RUN_TIMEOUT).await
    }

    /// [`run`](Self::run), for a test that expects the execution to complete: an execution
    /// that failed or was cancelled is an error saying how it ended, why (its
    /// `failure_reason`) and its last events, so the test's `?` prints the cause.
    ///
    /// ```no_run
    /// # async fn demo(kernel: rebuno_devkernel::DevKernel) -> Result<(), Box<dyn std::error::Error>> {
    /// let done = kernel.run_completed("hello", serde_json::json!("Ada")).await?;
    /// assert_eq!(done.output_as::<String>()?, "hello, Ada");
    /// // On failure, `?` returns: execution … of agent "hello" ended without completing:
    /// // it failed: agent_error: …; last events: step.failed `greet` (…), execution.failed (…)
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// Those of [`run`](Self::run), and [`DevKernelError::Ended`] when the execution ended
    /// otherwise than `completed`.
    pub async fn run_completed(
        &self,
        agent_id: &str,
        input: serde_json::Value,
    ) -> Result<Execution, DevKernelError> {
        let done = self.run(agent_id, input).await?;
        if done.status == ExecutionStatus::Completed {
            return Ok(done);
        }
        Err(DevKernelError::Ended {
            waited_for: "completing".to_owned(),
            last_events: self.last_events(done.id),
            execution: Box::new(done),
        })
    }

    /// Waits until the execution is `completed`, `failed` or `cancelled`.
    ///
    /// # Errors
    ///
    /// [`DevKernelError::NotFound`]; [`DevKernelError::Timeout`], which says where the
    /// execution stands and its last events.
    pub async fn wait_terminal(
        &self,
        id: Uuid,
        timeout: Duration,
    ) -> Result<Execution, DevKernelError> {
        self.wait_status(id, timeout, "its end", ExecutionStatus::is_terminal)
            .await
    }

    /// Waits until the execution's status satisfies `done`. An execution that ends (or has
    /// ended) in a status `done` refuses never changes again, so the wait returns at once.
    ///
    /// ```no_run
    /// # async fn demo(kernel: rebuno_devkernel::DevKernel, id: uuid::Uuid) -> Result<(), rebuno_devkernel::DevKernelError> {
    /// use rebuno_devkernel::ExecutionStatus;
    /// let blocked = kernel
    ///     .wait_until(id, std::time::Duration::from_secs(10), |s| s == ExecutionStatus::Blocked)
    ///     .await?; // on a failed execution: "ended without …: it failed: <its failure reason>"
    /// # let _ = blocked;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`DevKernelError::NotFound`]; [`DevKernelError::Ended`] when it ended in a status
    /// `done` refuses; [`DevKernelError::Timeout`]. Both say how the execution stands (status,
    /// failure reason or output) and list its last events.
    pub async fn wait_until(
        &self,
        id: Uuid,
        timeout: Duration,
        done: impl Fn(ExecutionStatus) -> bool,
    ) -> Result<Execution, DevKernelError> {
        self.wait_status(id, timeout, "a status the wait accepts", done)
            .await
    }

    async fn wait_status(
        &self,
        id: Uuid,
        timeout: Duration,
        waited_for: &str,
        done: impl Fn(ExecutionStatus) -> bool,
    ) -> Result<Execution, DevKernelError> {
        let cell = self.cell(id)?;
        let mut status = cell.subscribe();
        // The watch's guard is dropped before the execution is read: holding it while taking
        // the execution's lock deadlocks with `publish`, which sends under that lock.
        let watched = async {
            let settled = status.wait_for(|s| done(*s) || s.is_terminal()).await;
            settled.map(|s| *s)
        };
        match tokio::time::timeout(timeout, watched).await {
            Ok(Ok(reached)) if done(reached) => {
                self.execution(id).ok_or(DevKernelError::NotFound(id))
            }
            Ok(Ok(_)) => Err(self.gave_up(id, waited_for, None)),
            Ok(Err(_)) => Err(DevKernelError::NotFound(id)),
            Err(_) => Err(self.gave_up(id, waited_for, Some(timeout))),
        }
    }

    /// Waits, without polling, until the execution's log holds an event of `kind`, and
    /// returns the first one. An execution that has ended without one never will: the wait
    /// returns at once.
    ///
    /// ```no_run
    /// # async fn demo(kernel: rebuno_devkernel::DevKernel, id: uuid::Uuid) -> Result<(), rebuno_devkernel::DevKernelError> {
    /// use rebuno_devkernel::EventKind;
    /// let granted = kernel.wait_for_event(id, EventKind::ApprovalRequested, std::time::Duration::from_secs(5)).await?;
    /// println!("{}", granted.payload);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`DevKernelError::NotFound`]; [`DevKernelError::Ended`] when the execution ended
    /// without such an event; [`DevKernelError::Timeout`]. Both say how the execution stands
    /// and list its last events.
    pub async fn wait_for_event(
        &self,
        id: Uuid,
        kind: EventKind,
        timeout: Duration,
    ) -> Result<Event, DevKernelError> {
        let cell = self.cell(id)?;
        let mut seq = cell.subscribe_seq();
        let find = || {
            self.events(id)
                .into_iter()
                .find(|e| e.kind == kind.as_str())
        };
        // The terminal event is the last one an execution logs, in the same critical section
        // as its status: ended without the event, it never comes.
        let ended = || self.execution(id).is_none_or(|e| e.status.is_terminal());
        let waited = tokio::time::timeout(timeout, async {
            loop {
                seq.borrow_and_update();
                if let Some(event) = find() {
                    return Some(Ok(event));
                }
                if ended() {
                    return Some(Err(()));
                }
                seq.changed().await.ok()?;
            }
        });
        let waited_for = format!("event `{}`", kind.as_str());
        match waited.await {
            Ok(Some(Ok(event))) => Ok(event),
            Ok(Some(Err(()))) => Err(self.gave_up(id, &waited_for, None)),
            Ok(None) => Err(DevKernelError::NotFound(id)),
            Err(_) => Err(self.gave_up(id, &waited_for, Some(timeout))),
        }
    }

    /// The error of a wait that gave up: [`DevKernelError::Ended`] when the execution has
    /// ended, else [`DevKernelError::Timeout`] after `after`.
    fn gave_up(&self, id: Uuid, waited_for: &str, after: Option<Duration>) -> DevKernelError {
        let Some(execution) = self.execution(id) else {
            return DevKernelError::NotFound(id);
        };
        let (waited_for, last_events) = (waited_for.to_owned(), self.last_events(id));
        let execution = Box::new(execution);
        match after {
            Some(after) if !execution.status.is_terminal() => DevKernelError::Timeout {
                after,
                waited_for,
                execution,
                last_events,
            },
            _ => DevKernelError::Ended {
                waited_for,
                execution,
                last_events,
            },
        }
    }

    /// The execution's last events, one short line each, for an error.
    fn last_events(&self, id: Uuid) -> Vec<String> {
        let events = self.events(id);
        let from = events.len().saturating_sub(LAST_EVENTS);
        events[from..].iter().map(summary).collect()
    }

    /// A kernel `not_found` about an agent, with its id and the registered agents.
    fn unknown_agent(&self, error: KernelError, agent_id: &str) -> DevKernelError {
        unknown_agent(error, agent_id, &self.kernel.agents())
    }

    /// Moves a [`manual_clock`](DevKernelBuilder::manual_clock) forward by `by`, then sweeps
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

    /// Test hook: reclaims the execution's in-flight dispatch now, as if its lease had
    /// expired, and delivers the next attempt (same dispatch id, attempt + 1; when every
    /// delivery worker is busy, as soon as one is free). Calls carrying the old attempt get
    /// `409 lease_superseded` from here on. Returns the new attempt.
    ///
    /// # Errors
    ///
    /// [`DevKernelError::NoLiveDispatch`] when nothing is in flight (or attempts are exhausted).
    pub fn redeliver(&self, id: Uuid) -> Result<u32, DevKernelError> {
        self.kernel
            .redeliver(id, None)
            .ok_or(DevKernelError::NoLiveDispatch(id))
    }

    /// Cancels an execution, like `POST /v0/executions/{id}/cancel`.
    ///
    /// # Errors
    ///
    /// Unknown execution, or already terminal (`409 conflict`).
    pub fn cancel(&self, id: Uuid) -> Result<(), DevKernelError> {
        self.kernel
            .cancel(id, &Principal::Admin)
            .map_err(|e| unknown(e, "execution", id))
    }

    /// Pending approvals, oldest first.
    pub fn approvals(&self) -> Vec<Approval> {
        self.kernel.approvals(None)
    }

    /// Grants an approval (no `decided_by`): the step runs when the execution resumes.
    ///
    /// # Errors
    ///
    /// Unknown approval, not pending, or the rule names approvers.
    pub fn grant(&self, approval_id: Uuid) -> Result<(), DevKernelError> {
        self.decide(approval_id, Resolution::Grant, None)
    }

    /// Denies an approval: the re-submitted step gets `denied` (`approval_denied`).
    ///
    /// # Errors
    ///
    /// Unknown approval, not pending, or the rule names approvers.
    pub fn deny(&self, approval_id: Uuid) -> Result<(), DevKernelError> {
        self.decide(approval_id, Resolution::Deny, None)
    }

    /// Grants or denies as a named approver with a rationale.
    ///
    /// # Errors
    ///
    /// Unknown approval, not pending, or `decided_by` is not an allowed approver.
    pub fn decide_as(
        &self,
        approval_id: Uuid,
        grant: bool,
        decided_by: &str,
        rationale: &str,
    ) -> Result<(), DevKernelError> {
        let resolution = if grant {
            Resolution::Grant
        } else {
            Resolution::Deny
        };
        let request = DecideRequest {
            decided_by: Some(decided_by.to_owned()),
            rationale: Some(rationale.to_owned()),
        };
        self.kernel
            .decide_approval(approval_id, resolution, request)
            .map_err(|e| unknown(e, "approval", approval_id))
    }

    fn decide(
        &self,
        id: Uuid,
        resolution: Resolution,
        by: Option<String>,
    ) -> Result<(), DevKernelError> {
        let request = DecideRequest {
            decided_by: by,
            rationale: None,
        };
        self.kernel
            .decide_approval(id, resolution, request)
            .map_err(|e| unknown(e, "approval", id))
    }

    /// The registered resources of an execution (empty if unknown).
    pub fn resources(&self, id: Uuid) -> Vec<ResourceView> {
        self.kernel
            .resources(id, &Principal::Admin)
            .unwrap_or_default()
    }

    /// Fork points of an execution, like `GET /v0/executions/{id}/fork-points`.
    ///
    /// # Errors
    ///
    /// Unknown execution.
    pub fn fork_points(&self, id: Uuid) -> Result<ForkPoints, DevKernelError> {
        self.kernel
            .fork_points(id, &Principal::Admin)
            .map_err(|e| unknown(e, "execution", id))
    }

    /// Forks an execution at `at_seq`, like `POST /v0/executions/{id}/fork` without a
    /// session or policy override. The answer carries `restoration`.
    ///
    /// # Errors
    ///
    /// Unknown execution, or `at_seq` outside `[1, latest_seq]`.
    pub fn fork(&self, id: Uuid, at_seq: u64) -> Result<Execution, DevKernelError> {
        let request = ForkRequest {
            at_seq: i64::try_from(at_seq).unwrap_or(i64::MAX),
            ..ForkRequest::default()
        };
        self.kernel
            .fork(id, &Principal::Admin, request)
            .map_err(|e| unknown(e, "execution", id))
    }

    /// Creates a scoped API key, like `POST /v0/api-keys`; the token is in the answer.
    ///
    /// # Errors
    ///
    /// Empty or overlong name, no scopes, or an unknown scope name.
    pub fn create_api_key(
        &self,
        name: &str,
        scopes: &[&str],
    ) -> Result<IssuedApiKey, DevKernelError> {
        let request = CreateKeyRequest {
            name: name.to_owned(),
            scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
        };
        Ok(self.kernel.create_api_key(request)?)
    }

    /// Stops the server and all background deliveries, waiting up to 5 s for open requests.
    pub async fn shutdown(self) {
        self.kernel.shutdown_token().cancel();
        let server = lock(&self.server).take();
        if let Some(mut server) = server
            && tokio::time::timeout(Duration::from_secs(5), &mut server)
                .await
                .is_err()
        {
            server.abort();
        }
    }
}

/// An agent [`DevKernel::serve`] serves on a loopback port and registered with the kernel.
///
/// Dropping it stops the server too, without waiting; [`shutdown`](Self::shutdown) waits for
/// in-flight runs.
#[derive(Debug)]
#[must_use = "dropping a ServedAgent stops its server"]
pub struct ServedAgent {
    agent: rebuno::Agent,
    webhook_url: String,
    stop: oneshot::Sender<()>,
    done: JoinHandle<std::io::Result<()>>,
}

impl ServedAgent {
    /// The agent being served.
    pub fn agent(&self) -> &rebuno::Agent {
        &self.agent
    }

    /// Where the kernel delivers its webhooks, e.g. `http://127.0.0.1:41235/webhook`.
    pub fn webhook_url(&self) -> String {
        self.webhook_url.clone()
    }

    /// Graceful shutdown: stops accepting, then waits for the in-flight runs (up to
    /// `rebuno-hyper`'s drain timeout). A server error is logged.
    pub async fn shutdown(self) {
        let _ = self.stop.send(());
        match self.done.await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::error!(%error, "served agent failed"),
            Err(error) => tracing::error!(%error, "served agent task failed"),
        }
    }
}

impl Drop for DevKernel {
    fn drop(&mut self) {
        // Only the last handle stops the kernel.
        if Arc::strong_count(&self.server) == 1 {
            self.kernel.shutdown_token().cancel();
        }
    }
}

/// A kernel type in the SDK's wire shape, through the JSON both share.
fn as_wire<T: serde::Serialize, W: serde::de::DeserializeOwned>(value: &T) -> Option<W> {
    serde_json::to_value(value)
        .and_then(serde_json::from_value)
        .ok()
}

#[cfg(test)]
mod secret_tests {
    use super::AgentSpec;

    #[test]
    fn agent_specs_never_print_their_secret() {
        let spec = AgentSpec::new("a", "http://127.0.0.1:1/webhook", "s3cret-value");
        assert!(!format!("{spec:?}").contains("s3cret-value"));
    }
}

#[cfg(test)]
mod wait_tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use super::{DevKernel, NewExecution};

    /// `wait_until` must not hold the status watch while it reads the execution: `publish`
    /// sends to that watch under the execution's lock, so the two used to deadlock.
    #[test]
    fn waiting_never_deadlocks_with_a_publishing_kernel() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let kernel = runtime.block_on(DevKernel::start()).unwrap();
        kernel
            .register_agent(super::AgentSpec::new(
                "nobody",
                "http://127.0.0.1:9/webhook",
                "s",
            ))
            .unwrap();
        let id = runtime
            .block_on(kernel.create_execution(NewExecution::new("nobody", serde_json::json!({}))))
            .unwrap()
            .id;
        let cell = kernel.kernel.store().execution(id).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let publisher = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    cell.publish();
                }
            })
        };
        let (done, finished) = std::sync::mpsc::channel();
        let waiter = kernel.clone();
        let handle = runtime.handle().clone();
        std::thread::spawn(move || {
            for _ in 0..20_000 {
                let waited =
                    handle.block_on(waiter.wait_until(id, Duration::from_secs(5), |_| true));
                waited.unwrap();
            }
            let _ = done.send(());
        });
        let result = finished.recv_timeout(Duration::from_secs(20));
        stop.store(true, Ordering::Relaxed);
        if result.is_err() {
            // Deadlocked threads never finish: leak the runtime rather than wait on them.
            std::mem::forget(runtime);
            std::mem::forget(kernel);
            panic!("wait_until deadlocked with publish");
        }
        publisher.join().unwrap();
    }
}
