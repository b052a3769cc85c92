//! The harness's errors, written for the person reading a failed test: a wait that gives up
//! says where the execution stands and what it did last, and a not-found names the id.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use rebuno::wire::{Event, Execution, ExecutionStatus};
use serde_json::Value;

use crate::error::{KernelError, truncate};
use crate::policy::PolicyError;

/// How many of an execution's last events an error lists.
pub(super) const LAST_EVENTS: usize = 6;

/// Errors of the harness API.
///
/// Its `Debug` is its message, so a test that returns `Result` and fails on `?` prints what
/// went wrong (`Error: execution … ended without completing: it failed: …`), not the
/// variant's fields; match on the variants for the details.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum DevKernelError {
    /// The listener could not be bound.
    #[error("cannot bind {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
    /// A kernel operation failed (same error the HTTP API would map). A `not_found` names
    /// what was not found: `not found: agent "triage-bot" (registered: "triage"; …)`.
    #[error(transparent)]
    Kernel(#[from] KernelError),
    /// A policy bundle does not compile.
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// No such execution.
    #[error("execution {0} not found: this kernel has no execution with this id")]
    NotFound(String),
    /// The execution has no in-flight dispatch to reclaim.
    #[error("execution {0} has no in-flight dispatch")]
    NoLiveDispatch(String),
    /// The execution ended (`completed`, `failed` or `cancelled`) without what a wait, or
    /// [`DevKernel::run_completed`](crate::DevKernel::run_completed), expected. An ended
    /// execution never changes, so a wait returns this at once instead of waiting out its
    /// timeout.
    #[error(
        "execution {} of agent \"{}\" ended without {waited_for}: it {}{}",
        execution.id,
        execution.agent_id,
        state(execution),
        events(last_events)
    )]
    Ended {
        /// What the wait waited for, e.g. ``event `approval.requested` `` or `completing`.
        waited_for: String,
        /// The execution as it ended: `status`, `failure_reason`, `output`.
        execution: Box<Execution>,
        /// Its last events, oldest first, one line each (`step.denied `lookup` (…)`).
        last_events: Vec<String>,
    },
    /// A wait timed out before what it waited for happened.
    #[error(
        "timed out after {after:?} waiting on execution {} of agent \"{}\" for {waited_for}: it is still {}{}",
        execution.id,
        execution.agent_id,
        state(execution),
        events(last_events)
    )]
    Timeout {
        /// The wait's timeout.
        after: Duration,
        /// What the wait waited for.
        waited_for: String,
        /// The execution when the wait gave up.
        execution: Box<Execution>,
        /// Its last events, oldest first, one line each.
        last_events: Vec<String>,
    },
    /// [`DevKernel::advance`](crate::DevKernel::advance) on a kernel that runs on real time.
    #[error("the kernel runs on real time; build it with `manual_clock()` to advance it")]
    RealClock,
    /// The agent given to [`DevKernel::serve`](crate::DevKernel::serve) could not be built.
    #[error("agent: {0}")]
    Agent(#[from] rebuno::Error),
    /// An agent's HTTP client could not be made.
    #[error("agent transport: {0}")]
    Transport(#[from] rebuno::transport::TransportError),
}

impl fmt::Debug for DevKernelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Where an execution stands, as the end of a sentence starting with "it" or "it is still".
fn state(execution: &Execution) -> String {
    if execution.status != ExecutionStatus::Completed {
        return super::output::state(execution.status, &execution.failure_reason);
    }
    let output = execution.output.as_ref().unwrap_or(&Value::Null);
    format!(
        "completed with output {}",
        truncate(&output.to_string(), 200)
    )
}

fn events(last: &[String]) -> String {
    if last.is_empty() {
        String::new()
    } else {
        format!("; last events: {}", last.join(", "))
    }
}

/// One event as a short line: its kind, the step's target and the reason it carries, e.g.
/// ``step.denied `lookup_customer` (no explicit allow rule matched)``.
pub(super) fn summary(event: &Event) -> String {
    let text = |value: Option<&Value>| {
        value
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    let payload = &event.payload;
    let mut line = event.kind.clone();
    if let Some(target) = text(payload.get("target")) {
        line.push_str(&format!(" `{target}`"));
    }
    let why = text(payload.get("reason"))
        .or_else(|| text(payload.get("error")))
        .or_else(|| text(payload.pointer("/error/reason")))
        .or_else(|| text(payload.pointer("/error/message")));
    if let Some(why) = why {
        line.push_str(&format!(" ({})", truncate(&why, 120)));
    }
    line
}

/// A kernel `not_found` that names only the kind of thing (`agent`), retold with the agent's
/// id and the agents that are registered. Other errors pass through.
pub(super) fn unknown_agent(error: KernelError, id: &str, registered: &[String]) -> DevKernelError {
    let KernelError::NotFound(what) = &error else {
        return error.into();
    };
    // The kernel names the kind only (`agent`), or the kind and the id.
    if what != "agent" && *what != format!("agent {id:?}") {
        return error.into();
    }
    let known = if registered.is_empty() {
        "no agent is registered".to_owned()
    } else {
        let ids: Vec<String> = registered.iter().map(|id| format!("{id:?}")).collect();
        format!("registered: {}", ids.join(", "))
    };
    KernelError::NotFound(format!(
        "agent {id:?} ({known}; check the id, or register the agent first with \
         DevKernel::serve or DevKernel::register_agent)"
    ))
    .into()
}

/// A kernel `not_found` that names only the kind of thing (`execution`, `approval`), retold
/// with the id. Other errors pass through.
pub(super) fn unknown(error: KernelError, what: &str, id: &str) -> DevKernelError {
    match error {
        KernelError::NotFound(noun) if noun == what => {
            KernelError::NotFound(format!("{what} {id}")).into()
        }
        other => other.into(),
    }
}
