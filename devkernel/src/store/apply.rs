//! Folding one event into an execution's projections: the only writer of them.
//!
//! Every operation of the kernel decides which events to write; this module alone says what
//! each event does to the execution, its steps, approvals and resources. Replaying a log from
//! the start through [`apply`] rebuilds the exact projections the live kernel held.

use std::sync::Arc;

use serde_json::Value;

use super::exec::Projection;
use super::{Capture, Resource};
use crate::event::{
    ApprovalChanged, Bound, Checkpointed, Completed, EventBody, Executing, Forked, Initialized,
    Proposed, Recorded, Refused, Registered, Succeeded,
};
use crate::identity;
use crate::model::{StepStatus, Timestamp};
use crate::policy::Policy;
use rebuno::wire::ExecutionStatus;

/// The step kind whose resources never count.
const LLM_CALL: &str = "llm_call";

/// Applies `entry` to `view`. The match names every event kind, so a new kind does not
/// compile until this says what it does. Dispatch events and rate-limit refusals change no
/// projection (dispatch rows are runtime state the operations keep beside them), nor does a
/// failed checkpoint.
pub(super) fn apply(view: &mut Projection, entry: &Recorded) {
    let (seq, at) = (entry.event_seq, entry.occurred_at);
    match &entry.body {
        EventBody::ExecutionCreated(created) => {
            if let Some(exec) = &created.execution {
                view.exec = (**exec).clone();
            }
        }
        EventBody::ExecutionForked(forked) => fork(view, forked),
        EventBody::ExecutionStarted(started) => {
            view.exec.parent_execution_id = started.parent_execution_id;
            set_status(view, ExecutionStatus::Running, at);
        }
        EventBody::ExecutionBlocked(_) => set_status(view, ExecutionStatus::Blocked, at),
        EventBody::ExecutionResumed(_) => set_status(view, ExecutionStatus::Running, at),
        EventBody::ExecutionCompleted(completed) => complete(view, at, completed),
        EventBody::ExecutionFailed(ended) | EventBody::ExecutionCancelled(ended) => {
            view.exec.failure_reason.clone_from(&ended.reason);
            set_status(view, ended.status, at);
        }
        EventBody::StepProposed(proposed) => propose_step(view, proposed),
        EventBody::StepAllowed(d) => set_step_status(view, &d.step.step_id, StepStatus::Allowed),
        EventBody::StepAwaitingApproval(d) => {
            set_step_status(view, &d.step.step_id, StepStatus::AwaitingApproval);
        }
        EventBody::StepExecuting(executing) => start_step(view, seq, at, executing),
        EventBody::StepSucceeded(succeeded) => succeed_step(view, at, succeeded),
        EventBody::StepDenied(r) => settle_step(view, at, r, StepStatus::Denied),
        EventBody::StepFailed(r) => settle_step(view, at, r, StepStatus::Failed),
        EventBody::StepCancelled(r) => settle_step(view, at, r, StepStatus::Cancelled),
        EventBody::ApprovalRequested(requested) => {
            if let Some(approval) = &requested.approval {
                view.approvals.insert(approval.id, (**approval).clone());
            }
        }
        EventBody::ApprovalGranted(change)
        | EventBody::ApprovalDenied(change)
        | EventBody::ApprovalExpired(change) => close_approval(view, at, change),
        EventBody::ResourceRegistered(registered) => {
            let resource = registered_resource(registered, seq);
            view.resources.insert(resource.key.clone(), resource);
        }
        EventBody::ResourceReconfigured(registered) => reconfigure(view, registered),
        EventBody::ResourceInitialized(initialized) => initialize(view, initialized),
        EventBody::ResourceBound(bound) => bind(view, bound),
        EventBody::ResourceCheckpointed(checkpointed) => checkpoint(view, checkpointed),
        EventBody::StepRateLimited(_)
        | EventBody::DispatchQueued(_)
        | EventBody::DispatchAcked(_)
        | EventBody::DispatchFailed(_)
        | EventBody::DispatchReclaimed(_)
        | EventBody::DispatchDiscarded(_)
        | EventBody::ResourceCheckpointFailed(_) => {}
    }
}

/// A fork runs under the policy it was forked with, if any.
fn fork(view: &mut Projection, forked: &Forked) {
    view.policy = forked
        .policy_bundle
        .as_deref()
        .and_then(|yaml| Policy::parse(yaml).ok())
        .map(Arc::new);
}

fn complete(view: &mut Projection, at: Timestamp, completed: &Completed) {
    view.exec.output.clone_from(&completed.output);
    view.state.clone_from(&completed.state);
    set_status(view, ExecutionStatus::Completed, at);
}

fn propose_step(view: &mut Projection, proposed: &Proposed) {
    if let Some(record) = &proposed.record {
        view.steps
            .insert(record.step_id.clone(), (**record).clone());
    }
}

fn reconfigure(view: &mut Projection, registered: &Registered) {
    if let Some(resource) = view.resources.get_mut(&registered.key) {
        resource.every_steps = registered.every_steps;
        resource.on_completion = registered.on_completion;
    }
}

fn set_status(view: &mut Projection, status: ExecutionStatus, at: Timestamp) {
    view.exec.status = status;
    view.exec.updated_at = at;
}

fn set_step_status(view: &mut Projection, step_id: &str, status: StepStatus) {
    if let Some(step) = view.steps.get_mut(step_id) {
        step.status = status;
    }
}

/// A live start: generations set, their checkpoints' coverage ended at this seq.
fn start_step(view: &mut Projection, seq: u64, at: Timestamp, executing: &Executing) {
    if let Some(step) = view.steps.get_mut(&executing.step.step_id) {
        step.status = StepStatus::Executing;
        step.started_at = Some(at);
        if let Some(keys) = executing.resources.as_ref().filter(|k| !k.is_empty()) {
            step.resources.clone_from(keys);
        }
    }
    for (key, generation) in executing.generations.iter().flatten() {
        if let Some(resource) = view.resources.get_mut(key) {
            resource.generation = *generation;
        }
    }
    for key in executing.resources.iter().flatten() {
        if let Some(resource) = view.resources.get_mut(key) {
            resource.invalidate(seq);
        }
    }
}

fn succeed_step(view: &mut Projection, at: Timestamp, succeeded: &Succeeded) {
    let step_id = &succeeded.step.step_id;
    let Some(step) = view.steps.get_mut(step_id) else {
        return;
    };
    let ran = step.status == StepStatus::Executing;
    step.status = StepStatus::Succeeded;
    step.completed_at = Some(at);
    step.result.clone_from(&succeeded.result);
    if let Some(usage) = succeeded.usage {
        step.usage_input = Some(usage.input_tokens);
        step.usage_output = Some(usage.output_tokens);
    }
    if ran {
        count_settled(view, step_id);
    }
}

/// A step ending with an error; one that ran (and was not denied) counts.
fn settle_step(view: &mut Projection, at: Timestamp, refused: &Refused, status: StepStatus) {
    let step_id = &refused.step.step_id;
    let Some(step) = view.steps.get_mut(step_id) else {
        return;
    };
    let ran = step.status == StepStatus::Executing && status != StepStatus::Denied;
    step.status = status;
    step.completed_at = Some(at);
    if let Some(error) = &refused.error {
        step.error = Some(error.clone());
    }
    if ran {
        count_settled(view, step_id);
    }
}

/// Counts a settled affecting step on each of its resources (never an `llm_call`).
fn count_settled(view: &mut Projection, step_id: &str) {
    let Some(step) = view.steps.get(step_id).filter(|s| s.kind != LLM_CALL) else {
        return;
    };
    for key in step.resources.clone() {
        if let Some(resource) = view.resources.get_mut(&key) {
            resource.count += 1;
        }
    }
}

fn close_approval(view: &mut Projection, at: Timestamp, change: &ApprovalChanged) {
    if let Some(approval) = view.approvals.get_mut(&change.approval_id) {
        approval.status = change.status;
        approval.decided_by.clone_from(&change.decided_by);
        approval.rationale.clone_from(&change.rationale);
        approval.decided_at = Some(at);
    }
}

/// Canonical JSON of a value (`null` when absent), for conflict checks: the projection and
/// a new request both compare this form of the parsed value, so a literal the parser
/// normalizes (`0.50`, `1e3`) compares equal to itself across replays and restarts.
pub(crate) fn canonical_text(value: Option<&Value>) -> String {
    let text = value.map_or_else(|| "null".to_owned(), Value::to_string);
    identity::canonical_json(text.as_bytes()).unwrap_or(text)
}

/// A fresh resource from its registration: generation and count 0, no checkpoint.
fn registered_resource(registered: &Registered, seq: u64) -> Resource {
    Resource {
        key: registered.key.clone(),
        driver_id: registered.driver_id.clone(),
        configuration: registered.configuration.clone(),
        configuration_canonical: canonical_text(registered.configuration.as_ref()),
        coverage_reuse: registered.coverage_reuse,
        every_steps: registered.every_steps,
        on_completion: registered.on_completion,
        registered_seq: seq,
        generation: 0,
        count: 0,
        binding: None,
        binding_canonical: None,
        initial_ref: None,
        checkpoints: Vec::new(),
    }
}

/// Where a fork's resource starts: the generation the fork computed and the restored
/// checkpoint. The count stays what the copied steps before this event made it (Go:
/// TestForkRestoresEachResourceFromItsNewestCheckpointByTheForkPoint).
fn initialize(view: &mut Projection, initialized: &Initialized) {
    if let Some(resource) = view.resources.get_mut(&initialized.key) {
        resource.generation = initialized.generation;
        resource.initial_ref.clone_from(&initialized.checkpoint_ref);
    }
}

fn bind(view: &mut Projection, bound: &Bound) {
    if let Some(resource) = view.resources.get_mut(&bound.key) {
        resource.binding_canonical = Some(canonical_text(Some(&bound.binding)));
        resource.binding = Some(bound.binding.clone());
    }
}

fn checkpoint(view: &mut Projection, checkpointed: &Checkpointed) {
    if let Some(resource) = view.resources.get_mut(&checkpointed.key) {
        resource.checkpoints.push(Capture {
            generation: checkpointed.generation,
            checkpoint_ref: checkpointed.checkpoint_ref.clone(),
            covered_seq: checkpointed.covered_seq,
            invalidated_seq: checkpointed.invalidated_seq,
        });
    }
}
