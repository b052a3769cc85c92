//! The approval object (PROTOCOL.md §1.10).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use rebuno::wire::ApprovalStatus;

use super::Timestamp;

/// A human approval gate on a step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ApprovalRow {
    /// UUIDv7 id.
    pub(crate) id: Uuid,
    /// The gated step.
    pub(crate) step_id: String,
    /// Its execution.
    pub(crate) execution_id: Uuid,
    /// Current status.
    pub(crate) status: ApprovalStatus,
    /// Who may decide (the rule's list; `null` when unrestricted).
    pub(crate) approvers: Value,
    /// Message for the approver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) message: Option<String>,
    /// When it expires.
    pub(crate) timeout_at: Timestamp,
    /// Who decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) decided_by: Option<String>,
    /// When it was decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) decided_at: Option<Timestamp>,
    /// Why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) rationale: Option<String>,
    /// Creation time.
    pub(crate) created_at: Timestamp,
}
