//! The approval object (PROTOCOL.md §1.10).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::Timestamp;

/// Status of an approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalStatus {
    /// Waiting for a decision.
    Pending,
    /// Granted: the step may run.
    Granted,
    /// Denied: the step is refused.
    Denied,
    /// Timed out or cancelled with its execution.
    Expired,
}

impl ApprovalStatus {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Granted => "granted",
            Self::Denied => "denied",
            Self::Expired => "expired",
        }
    }
}

/// A human approval gate on a step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Approval {
    /// UUIDv7 id.
    pub id: Uuid,
    /// The gated step.
    pub step_id: String,
    /// Its execution.
    pub execution_id: Uuid,
    /// Current status.
    pub status: ApprovalStatus,
    /// Who may decide (the rule's list; `null` when unrestricted).
    pub approvers: Value,
    /// Message for the approver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When it expires.
    pub timeout_at: Timestamp,
    /// Who decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<String>,
    /// When it was decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_at: Option<Timestamp>,
    /// Why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rationale: Option<String>,
    /// Creation time.
    pub created_at: Timestamp,
}
