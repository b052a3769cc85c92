//! The typed event log (PROTOCOL.md §1.12): one variant per event kind, each with its payload.
//!
//! The log is the truth of an execution: [`crate::store::ExecState::record`] appends an event
//! and applies it, and applying is the only way an execution's projections change. A payload
//! serializes to exactly the wire JSON of its kind; facts the kernel needs to rebuild its
//! projections from a persisted log but that the wire does not show (a step's arguments and
//! result, the execution's input…) are private fields (see [`private`]).

mod approval;
mod dispatch;
mod execution;
pub(crate) mod private;
mod resource;
mod step;

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

pub(crate) use approval::ApprovalChanged;
pub(crate) use dispatch::{DeliveryOutcome, DispatchChanged, DispatchState};
pub(crate) use execution::{Completed, Created, Ended, Forked, Started, StatusChanged};
pub(crate) use resource::{Bound, CheckpointFailed, Checkpointed, Initialized, Registered};
pub(crate) use step::{Decided, Executing, Proposed, Refused, StepRef, Succeeded, Usage};

use crate::model::{LogEntry, Timestamp};

/// Declares [`EventKind`] and [`EventBody`] from one table, so a kind's name is written once.
macro_rules! event_kinds {
    ($($(#[doc = $doc:literal])* $variant:ident($payload:ty) = $name:literal,)*) => {
        /// Every event type the kernel writes.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        pub enum EventKind {
            $($(#[doc = $doc])* $variant,)*
        }

        impl EventKind {
            /// Every kind, in the order of the table.
            pub const ALL: &'static [EventKind] = &[$(EventKind::$variant,)*];

            /// The wire name, e.g. `step.succeeded`.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(EventKind::$variant => $name,)*
                }
            }
        }

        /// An event's type and typed payload.
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        #[serde(tag = "type", content = "payload")]
        pub(crate) enum EventBody {
            $($(#[doc = $doc])* #[serde(rename = $name)] $variant($payload),)*
        }

        impl EventBody {
            /// The kind of this event.
            pub(crate) fn kind(&self) -> EventKind {
                match self {
                    $(EventBody::$variant(_) => EventKind::$variant,)*
                }
            }
        }
    };
}

event_kinds! {
    /// A new execution, pending.
    ExecutionCreated(Created) = "execution.created",
    /// A fork's origin (written right after its `execution.created`).
    ExecutionForked(Forked) = "execution.forked",
    /// Admitted and running.
    ExecutionStarted(Started) = "execution.started",
    /// Waiting for an approval or a subagent.
    ExecutionBlocked(StatusChanged) = "execution.blocked",
    /// Running again after a block.
    ExecutionResumed(StatusChanged) = "execution.resumed",
    /// Completed by the agent.
    ExecutionCompleted(Completed) = "execution.completed",
    /// Failed (by the agent, or because deliveries were exhausted).
    ExecutionFailed(Ended) = "execution.failed",
    /// Cancelled by a client or because its parent ended.
    ExecutionCancelled(Ended) = "execution.cancelled",
    /// A step submitted for the first time.
    StepProposed(Proposed) = "step.proposed",
    /// Policy (or an approval) let the step run.
    StepAllowed(Decided) = "step.allowed",
    /// Refused by policy, an approval, or a cancellation.
    StepDenied(Refused) = "step.denied",
    /// Waiting for a human.
    StepAwaitingApproval(Decided) = "step.awaiting_approval",
    /// Started live.
    StepExecuting(Executing) = "step.executing",
    /// Settled with a result.
    StepSucceeded(Succeeded) = "step.succeeded",
    /// Settled with an error.
    StepFailed(Refused) = "step.failed",
    /// Cancelled while it ran.
    StepCancelled(Refused) = "step.cancelled",
    /// Refused by a rate limit (no step is recorded).
    StepRateLimited(Refused) = "step.rate_limited",
    /// An approval opened for a step.
    ApprovalRequested(ApprovalChanged) = "approval.requested",
    /// Granted by a human.
    ApprovalGranted(ApprovalChanged) = "approval.granted",
    /// Denied by a human.
    ApprovalDenied(ApprovalChanged) = "approval.denied",
    /// Expired (timeout, or the execution was cancelled).
    ApprovalExpired(ApprovalChanged) = "approval.expired",
    /// A delivery queued.
    DispatchQueued(DispatchChanged) = "dispatch.queued",
    /// The agent acknowledged a delivery.
    DispatchAcked(DispatchChanged) = "dispatch.acked",
    /// A delivery attempt failed: the agent's HTTP status or the transport error.
    DispatchFailed(DispatchChanged) = "dispatch.failed",
    /// A lease taken back from an attempt that never finished (expired, or the kernel restarted).
    DispatchReclaimed(DispatchChanged) = "dispatch.reclaimed",
    /// A queued delivery dropped because the execution ended.
    DispatchDiscarded(DispatchChanged) = "dispatch.discarded",
    /// A resource registered.
    ResourceRegistered(Registered) = "resource.registered",
    /// A re-registration changed the checkpoint policy.
    ResourceReconfigured(Registered) = "resource.reconfigured",
    /// A fork's resource restored.
    ResourceInitialized(Initialized) = "resource.initialized",
    /// A resource bound to the driver's handle.
    ResourceBound(Bound) = "resource.bound",
    /// A checkpoint recorded.
    ResourceCheckpointed(Checkpointed) = "resource.checkpointed",
    /// A checkpoint refused or reported failed.
    ResourceCheckpointFailed(CheckpointFailed) = "resource.checkpoint_failed",
}

impl EventKind {
    /// Whether an execution ends with this event.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::ExecutionCompleted | Self::ExecutionFailed | Self::ExecutionCancelled
        )
    }

    /// Whether this is a `step.*` event.
    pub fn is_step(self) -> bool {
        self.as_str().starts_with("step.")
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An event type name no kind has.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown event type {0:?}")]
pub struct UnknownEventKind(String);

impl FromStr for EventKind {
    type Err = UnknownEventKind;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .iter()
            .copied()
            .find(|kind| kind.as_str() == text)
            .ok_or_else(|| UnknownEventKind(text.to_owned()))
    }
}

impl PartialEq<&str> for EventKind {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// `value` with the keys of every object in it sorted.
fn sorted(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(String, Value)> =
                map.into_iter().map(|(k, v)| (k, sorted(v))).collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(entries.into_iter().collect())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted).collect()),
        other => other,
    }
}

/// One entry of an execution's log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Recorded {
    /// Owning execution.
    pub(crate) execution_id: Uuid,
    /// 1-based position in the log.
    pub(crate) event_seq: u64,
    /// Type and payload.
    #[serde(flatten)]
    pub(crate) body: EventBody,
    /// When it was appended.
    pub(crate) occurred_at: Timestamp,
}

impl Recorded {
    /// The kind of this event.
    pub(crate) fn kind(&self) -> EventKind {
        self.body.kind()
    }

    /// The wire form, private facts left out, every object's keys in sorted order (as Go
    /// writes a map), whichever `serde_json` features the build unifies.
    pub(crate) fn to_wire(&self) -> LogEntry {
        let payload = match serde_json::to_value(&self.body) {
            Ok(Value::Object(mut map)) => map.remove("payload"),
            Ok(_) => None,
            Err(error) => {
                tracing::error!(%error, kind = %self.kind(), "cannot serialize an event payload");
                None
            }
        };
        LogEntry {
            execution_id: self.execution_id,
            event_seq: self.event_seq,
            kind: self.kind().as_str().to_owned(),
            payload: payload.map_or(Value::Null, sorted),
            occurred_at: self.occurred_at,
        }
    }

    /// The step an event is about, for `step.*` events.
    pub(crate) fn step(&self) -> Option<&StepRef> {
        match &self.body {
            EventBody::StepProposed(p) => Some(&p.step),
            EventBody::StepAllowed(d) | EventBody::StepAwaitingApproval(d) => Some(&d.step),
            EventBody::StepDenied(r)
            | EventBody::StepFailed(r)
            | EventBody::StepCancelled(r)
            | EventBody::StepRateLimited(r) => Some(&r.step),
            EventBody::StepExecuting(e) => Some(&e.step),
            EventBody::StepSucceeded(s) => Some(&s.step),
            _ => None,
        }
    }

    /// The same event with its step renamed (for a fork's copied prefix).
    pub(crate) fn step_mut(body: &mut EventBody) -> Option<&mut StepRef> {
        match body {
            EventBody::StepProposed(p) => Some(&mut p.step),
            EventBody::StepAllowed(d) | EventBody::StepAwaitingApproval(d) => Some(&mut d.step),
            EventBody::StepDenied(r)
            | EventBody::StepFailed(r)
            | EventBody::StepCancelled(r)
            | EventBody::StepRateLimited(r) => Some(&mut r.step),
            EventBody::StepExecuting(e) => Some(&mut e.step),
            EventBody::StepSucceeded(s) => Some(&mut s.step),
            _ => None,
        }
    }
}
