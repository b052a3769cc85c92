//! The execution context: who is running, under which lease, and what control flow it has seen.

mod ambient;
mod capture;
mod effect;
mod pending;
mod resources;
mod suspend;
mod suspension;

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use serde::Serialize;
use serde_json::Value;

pub use self::ambient::Scoped;
pub(crate) use self::effect::{Effect, missing_step_id, record_decision, replayed};
pub use self::resources::DispatchEnd;
pub(crate) use self::resources::{Registered, Registration};
pub use self::suspension::Suspension;
use crate::error::{Error, ErrorKind, Result};
use crate::kernel::{KernelClient, Lease};
use crate::rt::Deadline;

/// The execution a handler is running, reachable anywhere inside it through [`execution`].
///
/// Cheap to clone. It remembers control flow the kernel signalled (blocked, terminated,
/// superseded), so a handler that swallows one of those errors still ends the dispatch
/// correctly, and a superseded handler can no longer write; [`suspension`](Self::suspension)
/// tells the handler.
#[derive(Clone)]
pub struct ExecutionContext {
    inner: Arc<Inner>,
}

struct Inner {
    kernel: KernelClient,
    id: String,
    agent_id: String,
    session: Option<String>,
    input: Value,
    lease: Lease,
    deadline: Option<Deadline>,
    /// The execution's own deadline, as the kernel wrote it.
    deadline_at: Option<String>,
    /// The control flow signalled so far, the most final kept.
    control: Mutex<Option<Suspension>>,
    /// Whether a kernel call of this dispatch failed for want of a connection or an answer.
    kernel_lost: std::sync::atomic::AtomicBool,
    state: Mutex<Option<Value>>,
    calls: Mutex<suspend::Calls>,
    resources: Mutex<BTreeMap<String, Arc<dyn Registered>>>,
    effects: Arc<futures_util::lock::Mutex<()>>,
    pending: pending::Pending,
    /// Executions this delivery created without a key, by what they were: the occurrence
    /// part of their default idempotency keys.
    creations: Mutex<BTreeMap<String, u32>>,
}

/// The execution's effects lock: while resources are registered, tool and local step calls run
/// one at a time so each checkpoint captures exactly one step's changes.
pub(crate) type Exclusive = futures_util::lock::OwnedMutexGuard<()>;

/// The current execution.
///
/// # Errors
///
/// [`ErrorKind::Context`] outside a handler run by an [`Agent`](crate::Agent) (or a future
/// wrapped with [`ExecutionContext::scope`]).
///
/// ```no_run
/// # async fn handler(_: serde_json::Value) -> Result<String, rebuno::HandlerError> {
/// let id = rebuno::execution()?.id().to_owned();
/// # Ok(id) }
/// ```
pub fn execution() -> Result<ExecutionContext> {
    ambient::current().ok_or_else(|| Error::outside_execution("rebuno::execution()"))
}

/// The state (or output) the previous execution of the current session left; `null` when none.
/// Shorthand for `execution()?.previous().await`.
///
/// # Errors
///
/// [`ErrorKind::Context`] outside an execution; kernel errors.
pub async fn previous() -> Result<Value> {
    execution()?.previous().await
}

/// The earlier of the host's deadline and the execution's `deadline_at` (with the host's
/// margin, or the default one).
fn earliest(host: Option<Deadline>, execution: Option<&str>) -> Option<Deadline> {
    let Some(at) = execution.and_then(crate::rt::rfc3339::unix_millis) else {
        return host;
    };
    match host {
        Some(host) if host.unix_millis() <= at => Some(host),
        Some(host) => Some(host.moved_to(at)),
        None => Some(Deadline::at_unix_millis(at)),
    }
}

/// Whether `deadline` (from [`earliest`]) is the execution's `deadline_at`, not the host's.
fn is_the_executions(deadline: Option<Deadline>, execution: Option<&str>) -> bool {
    let own = execution.and_then(crate::rt::rfc3339::unix_millis);
    matches!((own, deadline), (Some(at), Some(deadline)) if deadline.unix_millis() == at)
}

impl ExecutionContext {
    /// The context of a dispatch of `execution`, keeping what a run needs of it (the rest is
    /// dropped here, not held while the handler waits).
    pub(crate) fn new(
        kernel: KernelClient,
        execution: crate::wire::Execution,
        lease: Lease,
        deadline: Option<Deadline>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                kernel,
                deadline: earliest(deadline, execution.deadline_at.as_deref()),
                id: execution.id,
                agent_id: execution.agent_id,
                session: execution.session,
                input: execution.input,
                deadline_at: execution.deadline_at,
                lease,
                control: Mutex::new(None),
                kernel_lost: std::sync::atomic::AtomicBool::new(false),
                state: Mutex::new(None),
                calls: Mutex::new(suspend::Calls::default()),
                resources: Mutex::new(BTreeMap::new()),
                effects: Arc::new(futures_util::lock::Mutex::new(())),
                pending: pending::Pending::default(),
                creations: Mutex::new(BTreeMap::new()),
            }),
        }
    }

    /// The execution id.
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// The agent running it.
    pub fn agent_id(&self) -> &str {
        &self.inner.agent_id
    }

    /// The session label, if the execution belongs to one.
    pub fn session(&self) -> Option<&str> {
        self.inner.session.as_deref()
    }

    /// The idempotency key a creation of `agent_id` with `input` (in `session`) gets when it
    /// is made inside this execution without one: the same on every delivery that makes the
    /// same creations in the same order, so a re-delivery gets the executions the first
    /// delivery created instead of new ones.
    pub(crate) fn creation_key(
        &self,
        agent_id: &str,
        session: Option<&str>,
        input: Option<&Value>,
    ) -> String {
        use sha2::{Digest, Sha256};
        let input = input.map(Value::to_string).unwrap_or_default();
        let mut hasher = Sha256::new();
        for part in [agent_id, session.unwrap_or_default(), &input] {
            hasher.update((part.len() as u64).to_be_bytes());
            hasher.update(part.as_bytes());
        }
        let what = crate::signing::hex(&hasher.finalize()[..16]);
        let occurrence = {
            let mut creations = self
                .inner
                .creations
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let count = creations.entry(what.clone()).or_insert(0);
            *count += 1;
            *count - 1
        };
        format!("rebuno:{}:{what}:{occurrence}", self.inner.id)
    }

    /// The raw input, as created.
    pub fn input(&self) -> &Value {
        &self.inner.input
    }

    /// When the kernel cancels this execution unless it has ended (RFC 3339), if it sets
    /// execution deadlines. The run starts no step within the host deadline's margin of it,
    /// as it does before the host's own deadline: the earlier of the two counts.
    pub fn deadline_at(&self) -> Option<&str> {
        self.inner.deadline_at.as_deref()
    }

    /// The dispatch this run was delivered under.
    pub fn dispatch_id(&self) -> &str {
        &self.inner.lease.dispatch_id
    }

    /// The delivery attempt, from 1.
    pub fn dispatch_attempt(&self) -> u64 {
        self.inner.lease.attempt
    }

    /// The state (or, failing that, the output) the previous execution of this session left.
    /// `null` when there is none.
    ///
    /// # Errors
    ///
    /// When the kernel cannot be reached or refuses the request.
    pub async fn previous(&self) -> Result<Value> {
        self.inner.kernel.previous_state(&self.inner.id).await
    }

    /// Sets the state the next execution of this session reads with [`previous`](Self::previous).
    /// It is sent when the handler completes.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Serde`] when `state` does not serialize to JSON.
    pub fn set_state(&self, state: impl Serialize) -> Result<()> {
        let value =
            serde_json::to_value(state).map_err(|e| Error::serde("state is not JSON", e))?;
        *lock(&self.inner.state) = Some(value);
        Ok(())
    }

    /// Runs `future` with this context current, for work the handler moves to another task.
    pub fn scope<F: Future>(&self, future: F) -> Scoped<F> {
        Scoped::new(self.clone(), future)
    }

    pub(crate) fn kernel(&self) -> &KernelClient {
        &self.inner.kernel
    }

    pub(crate) fn lease(&self) -> &Lease {
        &self.inner.lease
    }

    pub(crate) fn state(&self) -> Option<Value> {
        lock(&self.inner.state).clone()
    }

    /// Remembers `error` if it is control flow, and hands it back.
    pub(crate) fn note(&self, error: Error) -> Error {
        if let Some(suspension) = Suspension::of(error.kind()) {
            self.suspend_with(suspension);
        } else if error.kind() == ErrorKind::Network {
            self.inner
                .kernel_lost
                .store(true, std::sync::atomic::Ordering::Release);
        }
        error
    }

    /// Whether a kernel call of this dispatch got no answer (after its retries): a failure of
    /// the run may then be the kernel's absence, not the handler's, so the run ends without
    /// failing the execution and the kernel re-delivers it.
    pub(crate) fn kernel_lost(&self) -> bool {
        self.inner
            .kernel_lost
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// The control flow seen so far, as an error to end the dispatch with.
    pub(crate) fn control_flow(&self) -> Option<Error> {
        self.suspension().map(Suspension::error)
    }

    /// The resource registered under `key` in this dispatch.
    pub(crate) fn resource(&self, key: &str) -> Option<Arc<dyn Registered>> {
        lock(&self.inner.resources).get(key).cloned()
    }

    /// Every resource registered in this dispatch.
    pub(crate) fn resources(&self) -> Vec<Arc<dyn Registered>> {
        lock(&self.inner.resources).values().cloned().collect()
    }

    pub(crate) fn add_resource(&self, resource: Arc<dyn Registered>) {
        lock(&self.inner.resources).insert(resource.key().to_owned(), resource);
    }

    /// Takes the effects lock if any resource is registered.
    pub(crate) async fn exclusive(&self) -> Option<Exclusive> {
        if lock(&self.inner.resources).is_empty() {
            return None;
        }
        Some(Arc::clone(&self.inner.effects).lock_owned().await)
    }

    /// Takes the effects lock unconditionally (registering a resource).
    pub(crate) async fn exclusive_always(&self) -> Exclusive {
        Arc::clone(&self.inner.effects).lock_owned().await
    }

    /// Refuses to write once the dispatch was superseded or the execution is terminal.
    pub(crate) fn guard(&self) -> Result<()> {
        match self.suspension() {
            Some(Suspension::LeaseSuperseded) => Err(Error::superseded()),
            Some(Suspension::Terminated) => Err(Error::terminated()),
            _ => Ok(()),
        }
    }

    /// Refuses to start a step once the host's deadline is near (or was reached before).
    pub(crate) fn guard_start(&self) -> Result<()> {
        self.guard()?;
        let now = self.kernel().runtime().unix_millis();
        let near = self.suspension() == Some(Suspension::DeadlineReached)
            || self.inner.deadline.is_some_and(|d| d.is_near(now));
        if near {
            // The run's end says it yielded, and what comes next (agent/run.rs).
            tracing::debug!("deadline near: not starting this step");
            return Err(self.note(Error::deadline_reached()));
        }
        Ok(())
    }

    /// Whether the deadline the run stops at is the execution's own `deadline_at` (the kernel
    /// then cancels the execution) rather than the host's (the kernel re-delivers): for the log.
    pub(crate) fn deadline_is_the_executions(&self) -> bool {
        is_the_executions(self.inner.deadline, self.inner.deadline_at.as_deref())
    }
}

impl fmt::Debug for ExecutionContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExecutionContext")
            .field("id", &self.inner.id)
            .field("agent_id", &self.inner.agent_id)
            .field("dispatch_id", &self.inner.lease.dispatch_id)
            .field("dispatch_attempt", &self.inner.lease.attempt)
            .finish_non_exhaustive()
    }
}

/// Locks a mutex whose data stays consistent even if a holder panicked.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

pub(crate) use ambient::{StepScope, current, current_step};

#[cfg(test)]
mod deadline_tests {
    use super::*;

    const AT: &str = "2026-12-02T06:33:00Z";
    const AT_MILLIS: u64 = 1_796_193_180_000;

    #[test]
    fn the_earlier_of_the_host_and_execution_deadlines_counts_with_the_hosts_margin() {
        let margin = std::time::Duration::from_secs(2);
        let late_host = Deadline::at_unix_millis(AT_MILLIS + 60_000).margin(margin);
        let chosen = earliest(Some(late_host), Some(AT)).unwrap();
        assert_eq!(chosen.unix_millis(), AT_MILLIS);
        assert!(!chosen.is_near(AT_MILLIS - 2_001) && chosen.is_near(AT_MILLIS - 2_000));
        let early_host = Deadline::at_unix_millis(AT_MILLIS - 1).margin(margin);
        assert_eq!(earliest(Some(early_host), Some(AT)), Some(early_host));
        let alone = earliest(None, Some(AT)).unwrap();
        assert!(alone.is_near(AT_MILLIS - 5_000), "the default margin");
        assert_eq!(earliest(Some(late_host), Some("soon")), Some(late_host));
        assert_eq!(earliest(None, None), None);
    }

    #[test]
    fn the_log_tells_the_executions_deadline_from_the_hosts() {
        let margin = std::time::Duration::from_secs(2);
        let late_host = Deadline::at_unix_millis(AT_MILLIS + 60_000).margin(margin);
        let early_host = Deadline::at_unix_millis(AT_MILLIS - 1).margin(margin);
        let chosen = |host| earliest(host, Some(AT));
        assert!(is_the_executions(chosen(Some(late_host)), Some(AT)));
        assert!(is_the_executions(chosen(None), Some(AT)));
        assert!(!is_the_executions(chosen(Some(early_host)), Some(AT)));
        assert!(!is_the_executions(Some(late_host), None));
        assert!(!is_the_executions(None, None));
    }
}
