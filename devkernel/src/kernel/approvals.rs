//! Approvals: creation by `require_approval`, grant, deny, expiry (PROTOCOL.md §1.10).

use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use super::terminal::settling;
use super::{Followups, Kernel};
use crate::error::KernelError;
use crate::event::{ApprovalChanged, Decided, EventBody, Refused, StatusChanged, StepRef};
use crate::model::{ApprovalRow, StepStatus};
use crate::policy::ApprovalConfig;
use crate::store::ExecState;
use rebuno::wire::{ApprovalStatus, ExecutionStatus};

/// `POST /v0/approvals/{id}/grant|deny` body.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DecideRequest {
    #[serde(default)]
    pub(crate) decided_by: Option<String>,
    #[serde(default)]
    pub(crate) rationale: Option<String>,
}

/// The outcome a human (or the clock) gives an approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resolution {
    /// Let the step run.
    Grant,
    /// Refuse the step.
    Deny,
}

/// The event closing a pending `approval` with `status` (empty names and rationales left out).
pub(crate) fn closing(
    approval: &ApprovalRow,
    status: ApprovalStatus,
    decided_by: Option<String>,
    rationale: &str,
) -> EventBody {
    let closed = ApprovalChanged {
        status,
        decided_by: decided_by.filter(|s| !s.is_empty()),
        rationale: Some(rationale.to_owned()).filter(|s| !s.is_empty()),
        ..ApprovalChanged::of(approval)
    };
    let closed = ApprovalChanged {
        approval: None,
        ..closed
    };
    match status {
        ApprovalStatus::Granted => EventBody::ApprovalGranted(closed),
        ApprovalStatus::Denied => EventBody::ApprovalDenied(closed),
        _ => EventBody::ApprovalExpired(closed),
    }
}

impl Kernel {
    /// Opens an approval for a step, blocks the execution and retires its dispatches.
    pub(crate) fn request_approval(
        &self,
        state: &mut ExecState,
        step_id: &str,
        config: &ApprovalConfig,
    ) -> Uuid {
        let created = state.clock().timestamp();
        let timeout = config.timeout.unwrap_or(self.config().approval_timeout);
        let approval = ApprovalRow {
            id: Uuid::now_v7(),
            step_id: step_id.to_owned(),
            execution_id: state.exec.id,
            status: ApprovalStatus::Pending,
            approvers: config
                .approvers
                .as_ref()
                .map_or(Value::Null, |list| json!(list)),
            message: config.message.clone(),
            timeout_at: created.plus(timeout),
            decided_by: None,
            decided_at: None,
            rationale: None,
            created_at: created,
        };
        let id = approval.id;
        state.record(EventBody::ApprovalRequested(ApprovalChanged::of(&approval)));
        self.store().index_approval(id, state.exec.id);
        state.record(EventBody::ExecutionBlocked(StatusChanged {
            execution_id: state.exec.id,
            status: ExecutionStatus::Blocked,
            reason: None,
        }));
        state.retire_dispatches();
        id
    }

    /// Pending approvals, oldest first.
    pub(crate) fn approvals(&self, status: Option<ApprovalStatus>) -> Vec<ApprovalRow> {
        let wanted = status.unwrap_or(ApprovalStatus::Pending);
        self.store()
            .approval_ids()
            .into_iter()
            .filter_map(|(approval, exec)| {
                let cell = self.store().execution(exec)?;
                let state = cell.lock();
                state.approvals.get(&approval).cloned()
            })
            .filter(|a| a.status == wanted)
            .collect()
    }

    /// One approval.
    pub(crate) fn approval(&self, id: Uuid) -> Result<ApprovalRow, KernelError> {
        let exec = self
            .store()
            .approval_execution(id)
            .ok_or_else(|| KernelError::not_found("approval"))?;
        let cell = self
            .store()
            .execution(exec)
            .ok_or_else(|| KernelError::not_found("approval"))?;
        let state = cell.lock();
        state
            .approvals
            .get(&id)
            .cloned()
            .ok_or_else(|| KernelError::not_found("approval"))
    }

    /// Grants or denies a pending approval and resumes the execution when idle.
    pub(crate) fn decide_approval(
        &self,
        id: Uuid,
        resolution: Resolution,
        request: DecideRequest,
    ) -> Result<(), KernelError> {
        let exec = self
            .store()
            .approval_execution(id)
            .ok_or_else(|| KernelError::not_found("approval"))?;
        let cell = self
            .store()
            .execution(exec)
            .ok_or_else(|| KernelError::not_found("approval"))?;
        let followups = {
            let mut state = cell.lock();
            let approval = state
                .approvals
                .get(&id)
                .ok_or_else(|| KernelError::not_found("approval"))?;
            if approval.status != ApprovalStatus::Pending {
                return Err(KernelError::conflict("approval is not pending"));
            }
            if let Some(list) = approval.approvers.as_array().filter(|l| !l.is_empty()) {
                let by = request.decided_by.as_deref().unwrap_or_default();
                if !list.iter().any(|a| a.as_str() == Some(by)) {
                    return Err(KernelError::Forbidden);
                }
            }
            let step_id = approval.step_id.clone();
            let waiting = state
                .steps
                .get(&step_id)
                .is_some_and(|s| s.status == StepStatus::AwaitingApproval);
            if !waiting {
                return Err(KernelError::conflict("step is not awaiting approval"));
            }
            let rationale = request.rationale.unwrap_or_default();
            let events = resolve(&state, id, resolution, request.decided_by, &rationale);
            state.record_all(events);
            self.resume_if_idle(&mut state)
        };
        cell.publish();
        self.run(followups);
        Ok(())
    }

    /// Expires overdue approvals of one execution (`approval_timeout`).
    pub(crate) fn expire_approvals(&self, exec: Uuid) -> Followups {
        let Some(cell) = self.store().execution(exec) else {
            return Followups::default();
        };
        let followups = {
            let mut state = cell.lock();
            let stamp = state.clock().timestamp();
            let denied = json!({"reason": "approval_timeout"});
            let events: Vec<EventBody> = state
                .approvals
                .values()
                .filter(|a| a.status == ApprovalStatus::Pending && a.timeout_at <= stamp)
                .flat_map(|a| {
                    let expired = closing(a, ApprovalStatus::Expired, None, "timeout");
                    let step = settling(&state, &a.step_id, EventBody::StepDenied, &denied);
                    std::iter::once(expired).chain(step)
                })
                .collect();
            if events.is_empty() {
                return Followups::default();
            }
            state.record_all(events);
            self.resume_if_idle(&mut state)
        };
        cell.publish();
        followups
    }

    /// Executions with a pending approval (for the expiry sweep).
    pub(crate) fn executions_with_pending_approvals(&self) -> Vec<Uuid> {
        let ids: std::collections::BTreeSet<Uuid> = self
            .store()
            .approval_ids()
            .into_iter()
            .map(|(_, e)| e)
            .collect();
        let mut ids: Vec<Uuid> = ids.into_iter().collect();
        ids.retain(|id| {
            self.store().execution(*id).is_some_and(|cell| {
                cell.lock()
                    .approvals
                    .values()
                    .any(|a| a.status == ApprovalStatus::Pending)
            })
        });
        ids
    }
}

/// A human's resolution: the approval closed, then the step allowed (the re-submit starts
/// it) or denied.
fn resolve(
    state: &ExecState,
    id: Uuid,
    resolution: Resolution,
    decided_by: Option<String>,
    rationale: &str,
) -> Vec<EventBody> {
    let Some(approval) = state.approvals.get(&id) else {
        return Vec::new();
    };
    let Some(step) = state.steps.get(&approval.step_id) else {
        return Vec::new();
    };
    let step = StepRef::of(step);
    match resolution {
        Resolution::Grant => vec![
            closing(approval, ApprovalStatus::Granted, decided_by, rationale),
            EventBody::StepAllowed(Decided {
                step,
                rule_id: None,
                reason: None,
                policy_hash: None,
            }),
        ],
        Resolution::Deny => {
            let reason = if rationale.is_empty() {
                "approval_denied"
            } else {
                rationale
            };
            vec![
                closing(approval, ApprovalStatus::Denied, decided_by, rationale),
                EventBody::StepDenied(Refused::with_error(step, json!({"reason": reason}))),
            ]
        }
    }
}
