//! Terminal transitions and what follows them (PROTOCOL.md §1.2, §1.6, §1.7, §1.10).

use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::{Followups, Kernel, now};
use crate::model::{ApprovalStatus, ExecutionStatus, StepStatus, Timestamp};
use crate::store::ExecState;

impl Kernel {
    /// Moves a locked execution to a terminal `status`: event, projection, retired dispatches.
    pub(crate) fn finish(
        &self,
        state: &mut ExecState,
        status: ExecutionStatus,
        event: &str,
        payload: Map<String, Value>,
    ) -> Followups {
        state.set_status(status);
        state.append(event, Value::Object(payload));
        state.retire_dispatches();
        self.store().unmark_live(state.exec.id);
        tracing::info!(execution = %state.exec.id, status = status.as_str(), "execution finished");
        Followups {
            deliver: Vec::new(),
            terminal: vec![state.exec.id],
        }
    }

    /// Fails a locked execution with `reason`.
    pub(crate) fn fail_locked(&self, state: &mut ExecState, reason: &str) -> Followups {
        state.exec.failure_reason = reason.to_owned();
        let mut payload = state.status_payload(ExecutionStatus::Failed);
        payload.insert("reason".into(), json!(reason));
        self.finish(state, ExecutionStatus::Failed, "execution.failed", payload)
    }

    /// Cancels a locked execution: pending approvals expire, executing steps are cancelled.
    pub(crate) fn cancel_locked(&self, state: &mut ExecState, reason: &str) -> Followups {
        let error = json!({"reason": "execution_cancelled"});
        let pending: Vec<Uuid> = state
            .approvals
            .values()
            .filter(|a| a.status == ApprovalStatus::Pending)
            .map(|a| a.id)
            .collect();
        for approval in pending {
            self.close_approval(
                state,
                approval,
                ApprovalStatus::Expired,
                None,
                "execution_cancelled",
            );
            if let Some(step_id) = state.approvals.get(&approval).map(|a| a.step_id.clone()) {
                settle_step(
                    state,
                    &step_id,
                    StepStatus::Denied,
                    "step.denied",
                    error.clone(),
                );
            }
        }
        let executing: Vec<String> = state
            .steps
            .values()
            .filter(|s| s.status == StepStatus::Executing)
            .map(|s| s.step_id.clone())
            .collect();
        for step_id in executing {
            settle_step(
                state,
                &step_id,
                StepStatus::Cancelled,
                "step.cancelled",
                error.clone(),
            );
        }
        state.exec.failure_reason = reason.to_owned();
        let mut payload = state.status_payload(ExecutionStatus::Cancelled);
        payload.insert("reason".into(), json!(reason));
        self.finish(
            state,
            ExecutionStatus::Cancelled,
            "execution.cancelled",
            payload,
        )
    }

    /// After-terminal hooks: admit the session's next execution, settle the parent step of a
    /// subagent, cancel live subagents.
    pub(crate) fn after_terminal(&self, id: Uuid) -> Followups {
        let mut followups = Followups::default();
        let Some(cell) = self.store().execution(id) else {
            return followups;
        };
        let (exec, children) = {
            let state = cell.lock();
            (
                state.exec.clone(),
                state.children.values().copied().collect::<Vec<_>>(),
            )
        };
        if let Some(session) = &exec.session
            && let Some(next) = self.sessions().release(session, id)
        {
            followups.extend(self.start_execution(next));
        }
        if let Some(spawned) = &exec.spawned_by
            && let Ok(parent) = Uuid::parse_str(&spawned.execution_id)
        {
            followups.extend(self.settle_parent(parent, &spawned.step_id, &exec));
        }
        for child in children {
            followups.extend(self.cancel_child(child));
        }
        followups
    }

    /// Settles the parent's step with a child's outcome and resumes the parent if idle.
    fn settle_parent(
        &self,
        parent: Uuid,
        step_id: &str,
        child: &crate::model::Execution,
    ) -> Followups {
        let Some(cell) = self.store().execution(parent) else {
            return Followups::default();
        };
        let followups = {
            let mut state = cell.lock();
            let executing = state
                .steps
                .get(step_id)
                .is_some_and(|s| s.status == StepStatus::Executing);
            if executing && !state.exec.status.is_terminal() {
                if child.status == ExecutionStatus::Completed {
                    let result = child.output.clone().unwrap_or(Value::Null);
                    if let Some(step) = state.steps.get_mut(step_id) {
                        step.result = Some(result);
                    }
                    settle_step(
                        &mut state,
                        step_id,
                        StepStatus::Succeeded,
                        "step.succeeded",
                        Value::Null,
                    );
                } else {
                    let error = json!({
                        "reason": format!("subagent_{}", child.status.as_str()),
                        "execution_id": child.id,
                        "failure_reason": child.failure_reason,
                    });
                    settle_step(
                        &mut state,
                        step_id,
                        StepStatus::Failed,
                        "step.failed",
                        error,
                    );
                }
            }
            self.resume_if_idle(&mut state)
        };
        cell.publish();
        followups
    }

    /// Cancels a live subagent because its parent is terminal.
    fn cancel_child(&self, child: Uuid) -> Followups {
        let Some(cell) = self.store().execution(child) else {
            return Followups::default();
        };
        let followups = {
            let mut state = cell.lock();
            if state.exec.status.is_terminal() {
                return Followups::default();
            }
            self.cancel_locked(&mut state, "parent_agent_terminal")
        };
        cell.publish();
        followups
    }

    /// `blocked → running` with a new dispatch once no step waits (approval or subagent).
    pub(crate) fn resume_if_idle(&self, state: &mut ExecState) -> Followups {
        let mut followups = Followups::default();
        if state.exec.status != ExecutionStatus::Blocked || awaiting_steps(state) {
            return followups;
        }
        state.set_status(ExecutionStatus::Running);
        let payload = state.status_payload(ExecutionStatus::Running);
        state.append("execution.resumed", Value::Object(payload));
        let dispatch = state.enqueue_dispatch(now());
        followups.deliver.push((state.exec.id, dispatch));
        followups
    }
}

/// Whether a step still waits: an approval, or an executing step with a spawned subagent.
pub(crate) fn awaiting_steps(state: &ExecState) -> bool {
    state.steps.values().any(|s| {
        s.status == StepStatus::AwaitingApproval
            || (s.status == StepStatus::Executing && state.children.contains_key(&s.step_id))
    })
}

/// Moves a step to a terminal status with an event carrying `error` (unless null).
pub(crate) fn settle_step(
    state: &mut ExecState,
    step_id: &str,
    status: StepStatus,
    event: &str,
    error: Value,
) {
    let Some(step) = state.steps.get_mut(step_id) else {
        return;
    };
    let ran = step.status == StepStatus::Executing && status != StepStatus::Denied;
    step.status = status;
    step.completed_at = Some(Timestamp::now());
    let mut payload = Map::new();
    payload.insert("step_id".into(), json!(step.step_id));
    payload.insert("step_type".into(), json!(step.kind));
    payload.insert("target".into(), json!(step.target));
    if !error.is_null() {
        step.error = Some(error.clone());
        payload.insert("error".into(), error);
    }
    state.append(event, Value::Object(payload));
    if ran {
        super::resources::generations::count_settled(state, step_id);
    }
}
