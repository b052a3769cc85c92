//! The execution object.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use std::collections::BTreeMap;

use rebuno::wire::{ExecutionStatus, SpawnedBy};

use super::{Restoration, Timestamp};

/// An execution as returned by `GET /v0/executions/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ExecutionRow {
    /// UUIDv7 id.
    pub(crate) id: Uuid,
    /// The agent that runs it.
    pub(crate) agent_id: String,
    /// Session label, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) session: Option<String>,
    /// The previous completed execution of the session (or the explicit parent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) parent_execution_id: Option<Uuid>,
    /// Source execution of a fork.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) forked_from: Option<Uuid>,
    /// Event seq the fork was taken at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) fork_seq: Option<u64>,
    /// Client idempotency key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) idempotency_key: Option<String>,
    /// Parent step of a subagent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) spawned_by: Option<SpawnedBy>,
    /// End-user subject the execution acts for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) on_behalf_of: Option<String>,
    /// The input (`null` when none was given).
    pub(crate) input: Value,
    /// Current status.
    pub(crate) status: ExecutionStatus,
    /// Output of a completed execution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) output: Option<Value>,
    /// Why it failed or was cancelled.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) failure_reason: String,
    /// Creation time.
    pub(crate) created_at: Timestamp,
    /// Last status change.
    pub(crate) updated_at: Timestamp,
    /// How a fork restored each resource (only on the fork response).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) restoration: Option<BTreeMap<String, Restoration>>,
    /// When the kernel cancels it (`deadline_exceeded`) if it has not ended: creation plus the
    /// kernel's execution deadline ([`DevKernelBuilder::execution_deadline`](crate::DevKernelBuilder::execution_deadline)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) deadline_at: Option<Timestamp>,
}

impl ExecutionRow {
    /// A new, pending execution of `agent_id` created at `created` (no session, parent,
    /// key, output or failure yet).
    pub(crate) fn pending(id: Uuid, agent_id: String, input: Value, created: Timestamp) -> Self {
        Self {
            id,
            agent_id,
            session: None,
            parent_execution_id: None,
            forked_from: None,
            fork_seq: None,
            idempotency_key: None,
            spawned_by: None,
            on_behalf_of: None,
            input,
            status: ExecutionStatus::Pending,
            output: None,
            failure_reason: String::new(),
            created_at: created,
            updated_at: created,
            restoration: None,
            deadline_at: None,
        }
    }
}
