//! The execution object.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use std::collections::BTreeMap;

use super::{Restoration, Timestamp};
use crate::error::{OutputError, truncate};

/// Lifecycle status of an execution (PROTOCOL.md §1.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecutionStatus {
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
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }

    /// The wire name, e.g. `running`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Running => "running",
            Self::Blocked => "blocked",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }

    /// Parses a wire name.
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "pending" => Self::Pending,
            "running" => Self::Running,
            "blocked" => Self::Blocked,
            "completed" => Self::Completed,
            "failed" => Self::Failed,
            "cancelled" => Self::Cancelled,
            _ => return None,
        })
    }
}

/// The parent step that spawned a subagent execution.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpawnedBy {
    /// The parent execution.
    pub execution_id: String,
    /// The parent's calling step.
    pub step_id: String,
}

/// An execution as returned by `GET /v0/executions/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Execution {
    /// UUIDv7 id.
    pub id: Uuid,
    /// The agent that runs it.
    pub agent_id: String,
    /// Session label, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// The previous completed execution of the session (or the explicit parent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_execution_id: Option<Uuid>,
    /// Source execution of a fork.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<Uuid>,
    /// Event seq the fork was taken at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fork_seq: Option<u64>,
    /// Client idempotency key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// Parent step of a subagent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spawned_by: Option<SpawnedBy>,
    /// End-user subject the execution acts for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_behalf_of: Option<String>,
    /// The input (`null` when none was given).
    pub input: Value,
    /// Current status.
    pub status: ExecutionStatus,
    /// Output of a completed execution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// Why it failed or was cancelled.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub failure_reason: String,
    /// Creation time.
    pub created_at: Timestamp,
    /// Last status change.
    pub updated_at: Timestamp,
    /// How a fork restored each resource (only on the fork response).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restoration: Option<BTreeMap<String, Restoration>>,
    /// When the kernel cancels it (`deadline_exceeded`) if it has not ended: creation plus the
    /// kernel's execution deadline ([`DevKernelBuilder::execution_deadline`](crate::DevKernelBuilder::execution_deadline)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_at: Option<Timestamp>,
}

impl Execution {
    /// The output of a completed execution decoded as `T`, for a typed assertion.
    ///
    /// ```no_run
    /// # fn demo(done: rebuno_devkernel::Execution) -> Result<(), rebuno_devkernel::OutputError> {
    /// #[derive(serde::Deserialize)]
    /// struct Sum { total: u32 }
    /// assert_eq!(done.output_as::<Sum>()?.total, 3);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`OutputError::NotCompleted`] with its status and failure reason when the execution
    /// did not complete (a failed one says why it failed); [`OutputError::Decode`] when the
    /// output is not a `T` (a completed execution without output decodes as `null`).
    pub fn output_as<T: serde::de::DeserializeOwned>(&self) -> Result<T, OutputError> {
        if self.status != ExecutionStatus::Completed {
            return Err(OutputError::NotCompleted {
                id: self.id,
                agent_id: self.agent_id.clone(),
                status: self.status,
                failure_reason: self.failure_reason.clone(),
            });
        }
        let output = self.output.clone().unwrap_or(Value::Null);
        serde_json::from_value(output).map_err(|source| OutputError::Decode {
            id: self.id,
            type_name: std::any::type_name::<T>(),
            output: truncate(
                &self.output.as_ref().unwrap_or(&Value::Null).to_string(),
                200,
            ),
            source,
        })
    }

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
