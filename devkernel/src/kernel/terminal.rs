//! Terminal transitions and what follows them (PROTOCOL.md §1.2, §1.6, §1.7, §1.10).

use serde_json::{Value, json};
use uuid::Uuid;

use super::approvals::closing;
use super::{Followups, Kernel};
use crate::event::{DeliveryOutcome, Ended, EventBody, Refused, StatusChanged, StepRef, Succeeded};
use crate::model::{ExecutionRow, StepStatus};
use crate::store::ExecState;
use rebuno::wire::{ApprovalStatus, ExecutionStatus};

impl Kernel {
    /// Moves a locked execution to a terminal state: the event, retired dispatches.
    pub(crate) fn finish(&self, state: &mut ExecState, event: EventBody) -> Followups {
        state.record(event);
        state.retire_dispatches();
        self.store().unmark_live(state.exec.id);
        let status = state.exec.status.as_str();
        tracing::info!(execution = %state.exec.id, status, "execution finished");
        Followups {
            deliver: Vec::new(),
            terminal: vec![state.exec.id],
        }
    }

    /// Fails a locked execution with `reason`.
    pub(crate) fn fail_locked(&self, state: &mut ExecState, reason: &str) -> Followups {
        self.fail_after(state, reason, None)
    }

    /// Fails a locked execution with `reason` and what its last delivery met.
    pub(crate) fn fail_after(
        &self,
        state: &mut ExecState,
        reason: &str,
        last_delivery: Option<DeliveryOutcome>,
    ) -> Followups {
        let ended = ended(state, ExecutionStatus::Failed, reason, last_delivery);
        self.finish(state, EventBody::ExecutionFailed(ended))
    }

    /// Cancels a locked execution: pending approvals expire, executing steps are cancelled.
    pub(crate) fn cancel_locked(&self, state: &mut ExecState, reason: &str) -> Followups {
        let error = json!({"reason": "execution_cancelled"});
        let mut events = Vec::new();
        for approval in state
            .approvals
            .values()
            .filter(|a| a.status == ApprovalStatus::Pending)
        {
            events.push(closing(
                approval,
                ApprovalStatus::Expired,
                None,
                "execution_cancelled",
            ));
            events.extend(settling(
                state,
                &approval.step_id,
                EventBody::StepDenied,
                &error,
            ));
        }
        for step in state
            .steps
            .values()
            .filter(|s| s.status == StepStatus::Executing)
        {
            events.extend(settling(
                state,
                &step.step_id,
                EventBody::StepCancelled,
                &error,
            ));
        }
        state.record_all(events);
        let ended = ended(state, ExecutionStatus::Cancelled, reason, None);
        self.finish(state, EventBody::ExecutionCancelled(ended))
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
    fn settle_parent(&self, parent: Uuid, step_id: &str, child: &ExecutionRow) -> Followups {
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
                let event = child_outcome(&state, step_id, child);
                state.record_all(event);
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
        state.record(EventBody::ExecutionResumed(StatusChanged {
            execution_id: state.exec.id,
            status: ExecutionStatus::Running,
            reason: None,
        }));
        let dispatch = state.enqueue_dispatch(state.clock().now());
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

/// The event settling `step_id` with `error` (left out when `null`), if the step exists.
pub(crate) fn settling(
    state: &ExecState,
    step_id: &str,
    kind: fn(Refused) -> EventBody,
    error: &Value,
) -> Option<EventBody> {
    let step = state.steps.get(step_id)?;
    Some(kind(Refused::with_error(StepRef::of(step), error.clone())))
}

/// Settles `step_id` now (see [`settling`]).
pub(crate) fn settle_step(
    state: &mut ExecState,
    step_id: &str,
    kind: fn(Refused) -> EventBody,
    error: &Value,
) {
    let event = settling(state, step_id, kind, error);
    state.record_all(event);
}

/// The terminal payload of a failed or cancelled execution.
fn ended(
    state: &ExecState,
    status: ExecutionStatus,
    reason: &str,
    last_delivery: Option<DeliveryOutcome>,
) -> Ended {
    Ended {
        execution_id: state.exec.id,
        status,
        reason: reason.to_owned(),
        last_delivery,
    }
}

/// How a subagent's end settles its parent's step: its output, or why it did not complete.
fn child_outcome(state: &ExecState, step_id: &str, child: &ExecutionRow) -> Option<EventBody> {
    let step = state.steps.get(step_id)?;
    if child.status == ExecutionStatus::Completed {
        return Some(EventBody::StepSucceeded(Succeeded {
            step: StepRef::of(step),
            usage: None,
            result: Some(child.output.clone().unwrap_or(Value::Null)),
        }));
    }
    let error = json!({
        "reason": format!("subagent_{}", child.status.as_str()),
        "execution_id": child.id,
        "failure_reason": child.failure_reason,
    });
    settling(state, step_id, EventBody::StepFailed, &error)
}
