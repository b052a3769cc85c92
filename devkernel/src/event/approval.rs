//! Payloads of the `approval.*` events.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::private::hidden_or_none;
use crate::model::ApprovalRow;
use rebuno::wire::ApprovalStatus;

/// `approval.requested|granted|denied|expired`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ApprovalChanged {
    pub(crate) approval_id: Uuid,
    pub(crate) step_id: String,
    pub(crate) execution_id: Uuid,
    pub(crate) status: ApprovalStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) decided_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) rationale: Option<String>,
    /// The whole approval when it is requested (private).
    #[serde(default, skip_serializing_if = "hidden_or_none")]
    pub(crate) approval: Option<Box<ApprovalRow>>,
}

impl ApprovalChanged {
    /// The event for `approval` as it is now (with the whole row when `requested`).
    pub(crate) fn of(approval: &ApprovalRow) -> Self {
        Self {
            approval_id: approval.id,
            step_id: approval.step_id.clone(),
            execution_id: approval.execution_id,
            status: approval.status,
            decided_by: approval.decided_by.clone(),
            rationale: approval.rationale.clone(),
            approval: (approval.status == ApprovalStatus::Pending)
                .then(|| Box::new(approval.clone())),
        }
    }
}
