//! Payloads of the `execution.*` events.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::private::hidden_or_none;
use crate::model::present;
use crate::model::{ExecutionRow, Restoration, Timestamp};
use rebuno::wire::{ExecutionStatus, SpawnedBy};

/// `execution.created`: the new execution, pending.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Created {
    pub(crate) execution_id: Uuid,
    pub(crate) status: ExecutionStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) session: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) spawned_by: Option<SpawnedBy>,
    /// When the kernel cancels it if it has not ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) deadline_at: Option<Timestamp>,
    /// The whole projection at creation (private).
    #[serde(default, skip_serializing_if = "hidden_or_none")]
    pub(crate) execution: Option<Box<ExecutionRow>>,
}

impl Created {
    /// The event creating `exec` (the fork variant leaves `spawned_by` out).
    pub(crate) fn of(exec: &ExecutionRow) -> Self {
        Self {
            execution_id: exec.id,
            status: ExecutionStatus::Pending,
            session: exec.session.clone(),
            spawned_by: exec.spawned_by.clone(),
            deadline_at: exec.deadline_at,
            execution: Some(Box::new(exec.clone())),
        }
    }
}

/// `execution.started`: admitted and running, with the session head it continues.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Started {
    pub(crate) execution_id: Uuid,
    pub(crate) status: ExecutionStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) session: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) parent_execution_id: Option<Uuid>,
    /// When the kernel cancels it if it has not ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) deadline_at: Option<Timestamp>,
}

/// `execution.blocked` and `execution.resumed`: a status change with an optional reason.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct StatusChanged {
    pub(crate) execution_id: Uuid,
    pub(crate) status: ExecutionStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) reason: Option<String>,
}

/// `execution.completed`: the output, and the agent's `state` (private).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Completed {
    pub(crate) execution_id: Uuid,
    pub(crate) status: ExecutionStatus,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub(crate) output: Option<Value>,
    #[serde(default, skip_serializing_if = "hidden_or_none")]
    pub(crate) state: Option<Value>,
}

/// `execution.failed` and `execution.cancelled`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Ended {
    pub(crate) execution_id: Uuid,
    pub(crate) status: ExecutionStatus,
    pub(crate) reason: String,
    /// For `dispatch_exhausted`: what the last delivery attempt met.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) last_delivery: Option<super::DeliveryOutcome>,
}

/// `execution.forked`: where the fork came from and how its resources were restored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Forked {
    pub(crate) source_execution_id: Uuid,
    pub(crate) fork_seq: u64,
    pub(crate) policy_override: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) restoration: Option<BTreeMap<String, Restoration>>,
    /// The policy bundle in effect for the fork (an override or the source's), private.
    #[serde(default, skip_serializing_if = "hidden_or_none")]
    pub(crate) policy_bundle: Option<String>,
}
