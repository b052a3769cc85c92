//! Approvals: creation by `require_approval`, grant, deny, expiry (PROTOCOL.md §1.10).

use serde::Deserialize;
use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::terminal::settle_step;
use super::{Followups, Kernel};
use crate::error::KernelError;
use crate::model::{Approval, ApprovalStatus, ExecutionStatus, StepStatus, Timestamp};
use crate::policy::ApprovalConfig;
use crate::store::ExecState;

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

fn approval_payload(approval: &Approval) -> Map<String, Value> {
    let mut payload = Map::new();
    payload.insert("approval_id".into(), json!(approval.id));
    payload.insert("step_id".into(), json!(approval.step_id));
    payload.insert("execution_id".into(), json!(approval.execution_id));
    payload.insert("status".into(), json!(approval.status.as_str()));
    if let Some(by) = &approval.decided_by {
        payload.insert("decided_by".into(), json!(by));
    }
    if let Some(rationale) = &approval.rationale {
        payload.insert("rationale".into(), json!(rationale));
    }
    payload
}

impl Kernel {
    /// Opens an approval for a step, blocks the execution and retires its dispatches.
    pub(crate) fn request_approval(
        &self,
        state: &mut ExecState,
        step_id: &str,
        config: &ApprovalConfig,
    ) -> Uuid {
        let created = Timestamp::now();
        let timeout = config.timeout.unwrap_or(self.config().approval_timeout);
        let approval = Approval {
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
        state.append(
            "approval.requested",
            Value::Object(approval_payload(&approval)),
        );
        state.approvals.insert(id, approval);
        self.store().index_approval(id, state.exec.id);
        state.set_status(ExecutionStatus::Blocked);
        let payload = state.status_payload(ExecutionStatus::Blocked);
        state.append("execution.blocked", Value::Object(payload));
        state.retire_dispatches();
        id
    }

    /// Closes a pending approval with `status` and writes `approval.<status>`.
    pub(crate) fn close_approval(
        &self,
        state: &mut ExecState,
        id: Uuid,
        status: ApprovalStatus,
        decided_by: Option<String>,
        rationale: &str,
    ) {
        let Some(approval) = state.approvals.get_mut(&id) else {
            return;
        };
        approval.status = status;
        approval.decided_by = decided_by.filter(|s| !s.is_empty());
        approval.decided_at = Some(Timestamp::now());
        approval.rationale = Some(rationale.to_owned()).filter(|s| !s.is_empty());
        let payload = approval_payload(approval);
        state.append(
            &format!("approval.{}", status.as_str()),
            Value::Object(payload),
        );
    }

    /// Pending approvals, oldest first.
    pub(crate) fn approvals(&self, status: Option<ApprovalStatus>) -> Vec<Approval> {
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
    pub(crate) fn approval(&self, id: Uuid) -> Result<Approval, KernelError> {
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
            match resolution {
                Resolution::Grant => {
                    self.close_approval(
                        &mut state,
                        id,
                        ApprovalStatus::Granted,
                        request.decided_by,
                        &rationale,
                    );
                    allow_step(&mut state, &step_id);
                }
                Resolution::Deny => {
                    self.close_approval(
                        &mut state,
                        id,
                        ApprovalStatus::Denied,
                        request.decided_by,
                        &rationale,
                    );
                    let reason = if rationale.is_empty() {
                        "approval_denied"
                    } else {
                        rationale.as_str()
                    };
                    settle_step(
                        &mut state,
                        &step_id,
                        StepStatus::Denied,
                        "step.denied",
                        json!({"reason": reason}),
                    );
                }
            }
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
        let stamp = Timestamp::now();
        let followups = {
            let mut state = cell.lock();
            let overdue: Vec<(Uuid, String)> = state
                .approvals
                .values()
                .filter(|a| a.status == ApprovalStatus::Pending && a.timeout_at <= stamp)
                .map(|a| (a.id, a.step_id.clone()))
                .collect();
            if overdue.is_empty() {
                return Followups::default();
            }
            for (id, step_id) in overdue {
                self.close_approval(&mut state, id, ApprovalStatus::Expired, None, "timeout");
                settle_step(
                    &mut state,
                    &step_id,
                    StepStatus::Denied,
                    "step.denied",
                    json!({"reason": "approval_timeout"}),
                );
            }
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

/// An approved step becomes `allowed` (`step.allowed`); the re-submit starts it.
fn allow_step(state: &mut ExecState, step_id: &str) {
    let Some(step) = state.steps.get_mut(step_id) else {
        return;
    };
    step.status = StepStatus::Allowed;
    let mut payload = Map::new();
    payload.insert("step_id".into(), json!(step.step_id));
    payload.insert("step_type".into(), json!(step.kind));
    payload.insert("target".into(), json!(step.target));
    state.append("step.allowed", Value::Object(payload));
}
