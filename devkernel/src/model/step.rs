//! The step object.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::Timestamp;

/// Status of a step (PROTOCOL.md §1.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum StepStatus {
    /// Submitted, not yet decided.
    Proposed,
    /// Allowed (or approved) but not yet running.
    Allowed,
    /// Refused by policy or by an approver.
    Denied,
    /// Waiting for a human decision.
    AwaitingApproval,
    /// Running in the agent.
    Executing,
    /// Finished with a result.
    Succeeded,
    /// Finished with an error.
    Failed,
    /// Cancelled with its execution.
    Cancelled,
}

impl StepStatus {
    /// Whether the step can no longer change (`succeeded`, `failed`, `denied`, `cancelled`).
    pub(crate) fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::Succeeded | Self::Failed | Self::Denied | Self::Cancelled
        )
    }

    /// The wire name, e.g. `awaiting_approval`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Proposed => "proposed",
            Self::Allowed => "allowed",
            Self::Denied => "denied",
            Self::AwaitingApproval => "awaiting_approval",
            Self::Executing => "executing",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }
}

/// A durable step as returned by `GET /v0/executions/{id}/steps/{step_id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct StepRow {
    /// 64-char hex identity.
    pub(crate) step_id: String,
    /// Owning execution.
    pub(crate) execution_id: Uuid,
    /// `tool_call`, `llm_call` or `local`.
    pub(crate) kind: String,
    /// Tool id, model id or step name.
    pub(crate) target: String,
    /// Hex SHA-256 of the canonical args.
    pub(crate) args_hash: String,
    /// Occurrence index within its delivery attempt.
    pub(crate) occurrence: u32,
    /// Current status.
    pub(crate) status: StepStatus,
    /// `safe_to_retry` or `at_most_once`.
    pub(crate) idempotency: String,
    /// The submitted args.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) args: Option<Value>,
    /// Recorded result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) result: Option<Value>,
    /// Recorded error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<Value>,
    /// When it started executing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) started_at: Option<Timestamp>,
    /// When it settled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) completed_at: Option<Timestamp>,
    /// LLM input tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) usage_input: Option<u64>,
    /// LLM output tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) usage_output: Option<u64>,
    /// Resource keys the step touches.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) resources: Vec<String>,
}
