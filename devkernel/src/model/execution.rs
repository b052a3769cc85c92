//! The execution object.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use std::collections::BTreeMap;

use super::{Restoration, Timestamp};

/// Lifecycle status of an execution (PROTOCOL.md §1.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ExecutionStatus {
    /// Created but waiting (a busy session).
    Pending,
    /// Dispatched to the agent.
    Running,
    /// Waiting on an approval or on subagents.
    Blocked,
    /// Finished with an output.
    Completed,
    /// Failed (agent-reported or kernel reason such as `dispatch_exhausted`).
    Failed,
    /// Cancelled by a client, a deadline or a terminal parent.
    Cancelled,
}

impl ExecutionStatus {
    /// Whether this status is final (`completed`, `failed` or `cancelled`).
    pub(crate) fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }

    /// The wire name, e.g. `running`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Running => "running",
            Self::Blocked => "blocked",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }
}

/// The parent step that spawned a subagent execution.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SpawnedBy {
    /// The parent execution.
    pub(crate) execution_id: String,
    /// The parent's calling step.
    pub(crate) step_id: String,
}

/// An execution as returned by `GET /v0/executions/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Execution {
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

impl Execution {
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
