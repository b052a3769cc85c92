//! Approvals: listing them and deciding as a human would.

use rebuno::wire::Approval;

use super::error::unknown;
use super::{DevKernel, DevKernelError, wire};
use crate::kernel::{DecideRequest, Resolution};

impl DevKernel {
    /// Pending approvals, oldest first.
    pub fn approvals(&self) -> Vec<Approval> {
        let rows = self.kernel.approvals(None);
        rows.into_iter().map(wire::approval).collect()
    }

    /// Grants an approval (no `decided_by`): the step runs when the execution resumes.
    ///
    /// # Errors
    ///
    /// Unknown approval, not pending, or the rule names approvers.
    pub fn grant(&self, approval_id: &str) -> Result<(), DevKernelError> {
        self.decide(approval_id, Resolution::Grant, DecideRequest::default())
    }

    /// Denies an approval: the re-submitted step gets `denied` (`approval_denied`).
    ///
    /// # Errors
    ///
    /// Unknown approval, not pending, or the rule names approvers.
    pub fn deny(&self, approval_id: &str) -> Result<(), DevKernelError> {
        self.decide(approval_id, Resolution::Deny, DecideRequest::default())
    }

    /// Grants or denies as a named approver with a rationale.
    ///
    /// # Errors
    ///
    /// Unknown approval, not pending, or `decided_by` is not an allowed approver.
    pub fn decide_as(
        &self,
        approval_id: &str,
        grant: bool,
        decided_by: &str,
        rationale: &str,
    ) -> Result<(), DevKernelError> {
        let resolution = if grant {
            Resolution::Grant
        } else {
            Resolution::Deny
        };
        let request = DecideRequest {
            decided_by: Some(decided_by.to_owned()),
            rationale: Some(rationale.to_owned()),
        };
        self.decide(approval_id, resolution, request)
    }

    fn decide(
        &self,
        id: &str,
        resolution: Resolution,
        request: DecideRequest,
    ) -> Result<(), DevKernelError> {
        let not_found = || crate::error::KernelError::not_found(format!("approval {id}"));
        let uuid = super::uuid(id).ok_or_else(not_found)?;
        self.kernel
            .decide_approval(uuid, resolution, request)
            .map_err(|e| unknown(e, "approval", id))
    }
}
