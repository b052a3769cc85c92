//! Steps: the submit decision algorithm and step outcomes (PROTOCOL.md §1.5).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use uuid::Uuid;

use super::resources::captures::{self, Capture, CaptureFailure, Captures};
use super::resources::generations;
use super::terminal::settle_step;
use super::{Followups, Kernel, Principal};
use crate::error::KernelError;
use crate::event::{Decided, EventBody, Executing, Proposed, Refused, StepRef, Succeeded, Usage};
use crate::identity;
use crate::model::{StepRow, StepStatus};
use crate::policy::{Action, Policy, StepFacts, Verdict};
use crate::store::Lease;
use crate::store::{ExecCell, ExecState};
use crate::usage;
use rebuno::wire::{Decision, ExecutionStatus, ResourceGeneration, StepDecision};

const AT_MOST_ONCE: &str = "at_most_once";
const SAFE_TO_RETRY: &str = "safe_to_retry";

/// `POST /v0/executions/{id}/steps` body.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SubmitRequest {
    #[serde(default)]
    pub(crate) kind: String,
    #[serde(default)]
    pub(crate) target: String,
    #[serde(default)]
    pub(crate) args: Option<Box<RawValue>>,
    #[serde(default)]
    pub(crate) idempotency: String,
    #[serde(default)]
    pub(crate) resources: Option<Vec<String>>,
}

/// `POST .../steps/{step_id}/complete` and `/fail` body.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OutcomeRequest {
    #[serde(default, deserialize_with = "crate::model::present")]
    pub(crate) result: Option<Value>,
    #[serde(default, deserialize_with = "crate::model::present")]
    pub(crate) error: Option<Value>,
    /// Checkpoints captured after the body ran.
    #[serde(default)]
    pub(crate) captures: Option<Vec<Capture>>,
    /// Captures the driver could not take.
    #[serde(default)]
    pub(crate) capture_failures: Option<Vec<CaptureFailure>>,
}

/// A submission after canonicalization, before the lock.
struct Proposal {
    kind: String,
    target: String,
    args: Option<Value>,
    args_hash: String,
    idempotency: String,
    resources: Vec<String>,
}

impl Proposal {
    fn new(request: SubmitRequest) -> Result<Self, KernelError> {
        let raw = request.args.as_ref().map_or("", |r| r.get());
        let canonical = identity::canonical_json(raw.as_bytes())
            .map_err(|_| KernelError::validation("invalid args"))?;
        // Absent (or null) args are hashed as `null` and omitted from the step.
        let args = request
            .args
            .as_ref()
            .and_then(|_| serde_json::from_str(&canonical).ok());
        let idempotency = if request.idempotency.is_empty() {
            SAFE_TO_RETRY.to_owned()
        } else {
            request.idempotency
        };
        Ok(Self {
            args_hash: identity::sha256_hex(canonical.as_bytes()),
            kind: request.kind,
            target: request.target,
            args,
            idempotency,
            resources: request.resources.unwrap_or_default(),
        })
    }

    fn step(&self, execution_id: Uuid, step_id: String, occurrence: u32) -> StepRow {
        StepRow {
            step_id,
            execution_id,
            kind: self.kind.clone(),
            target: self.target.clone(),
            args_hash: self.args_hash.clone(),
            occurrence,
            status: StepStatus::Proposed,
            idempotency: self.idempotency.clone(),
            args: self.args.clone(),
            result: None,
            error: None,
            started_at: None,
            completed_at: None,
            usage_input: None,
            usage_output: None,
            resources: generations::declared(&self.kind, &self.resources),
        }
    }
}

/// Starts a step live: status `executing`, generations of the affected resources bumped,
/// `step.executing` (with `resources` and `generations` when any), their checkpoints
/// invalidated at that seq. Returns the decision's `resources`.
fn start_step(state: &mut ExecState, step_id: &str) -> Vec<ResourceGeneration> {
    let Some(step) = state.steps.get(step_id) else {
        return Vec::new();
    };
    let keys = generations::affected(state, step);
    let counts = step.kind != generations::LLM_CALL;
    let bumped: BTreeMap<String, u64> = keys
        .iter()
        .filter_map(|k| {
            state
                .resources
                .get(k)
                .map(|r| (k.clone(), r.generation + 1))
        })
        .collect();
    let touched = !keys.is_empty();
    state.record(EventBody::StepExecuting(Executing {
        step: StepRef::of(step),
        resources: touched.then(|| keys.clone()),
        generations: touched.then_some(bumped),
    }));
    keys.iter()
        .filter_map(|key| state.resources.get(key))
        .map(|resource| {
            let mut generation = ResourceGeneration::default();
            generation.key.clone_from(&resource.key);
            generation.generation = resource.generation;
            generation.due = counts && resource.due();
            generation
        })
        .collect()
}

const INDETERMINATE_MESSAGE: &str =
    "outcome unknown: this may already have taken effect. Check the state before continuing.";

/// What a submission is checked against, read before the execution's lock.
struct Context {
    policy: Option<Arc<Policy>>,
    session_usage: u64,
}

impl Kernel {
    /// Submits a step and decides it.
    pub(crate) fn submit_step(
        &self,
        id: Uuid,
        principal: &Principal,
        lease: Lease,
        request: SubmitRequest,
    ) -> Result<StepDecision, KernelError> {
        let cell = self.cell(id, principal)?;
        let proposal = Proposal::new(request)?;
        let context = self.submit_context(&cell);
        let (decision, followups) = {
            let mut state = cell.lock();
            if state.exec.status.is_terminal() {
                return Ok(bare(Decision::ExecutionTerminal));
            }
            state.renew_lease(lease)?;
            self.decide_submission(&mut state, &cell.agent_id, lease, &proposal, &context)?
        };
        self.metrics().decision(decision.decision.as_str());
        tracing::debug!(
            execution = %id,
            step = decision.step_id.as_deref().unwrap_or(""),
            decision = decision.decision.as_str(),
            "step submitted"
        );
        cell.publish();
        self.run(followups);
        Ok(decision)
    }

    /// The policy in force and, when a budget needs it, the session's token usage.
    fn submit_context(&self, cell: &ExecCell) -> Context {
        let policy = cell
            .lock()
            .policy
            .clone()
            .or_else(|| self.store().agent(&cell.agent_id).and_then(|a| a.policy));
        let session_usage = if policy.as_ref().is_some_and(|p| p.has_session_budget()) {
            self.session_usage(cell)
        } else {
            0
        };
        Context {
            policy,
            session_usage,
        }
    }

    /// The occurrence of this submission, then replay of an existing step or a decision on
    /// a new one; the occurrence advances when a step is recorded.
    fn decide_submission(
        &self,
        state: &mut ExecState,
        agent_id: &str,
        lease: Lease,
        proposal: &Proposal,
        context: &Context,
    ) -> Result<(StepDecision, Followups), KernelError> {
        let key = (
            lease.dispatch_id,
            lease.attempt,
            proposal.kind.clone(),
            proposal.target.clone(),
            proposal.args_hash.clone(),
        );
        let occurrence = state.counters.get(&key).copied().unwrap_or(0);
        let step_id = identity::step_id(
            &state.exec.id.to_string(),
            &proposal.kind,
            &proposal.target,
            &proposal.args_hash,
            occurrence,
        );
        let (decision, followups, recorded) = if state.steps.contains_key(&step_id) {
            (existing_step(state, &step_id), Followups::default(), true)
        } else {
            let step = proposal.step(state.exec.id, step_id, occurrence);
            self.decide_new(state, agent_id, proposal, step, context)?
        };
        if recorded {
            *state.counters.entry(key).or_insert(0) += 1;
        }
        Ok((decision, followups))
    }

    /// A new step: refused while blocked or for an unknown resource; otherwise the policy
    /// verdict, then the rate limit and the budget. The flag says whether a step was recorded.
    fn decide_new(
        &self,
        state: &mut ExecState,
        agent_id: &str,
        proposal: &Proposal,
        step: StepRow,
        context: &Context,
    ) -> Result<(StepDecision, Followups, bool), KernelError> {
        if state.exec.status == ExecutionStatus::Blocked {
            return Ok((
                bare(Decision::ExecutionBlocked),
                Followups::default(),
                false,
            ));
        }
        if let Some(key) = step
            .resources
            .iter()
            .find(|k| !state.resources.contains_key(*k))
        {
            return Err(KernelError::validation(format!("unknown resource {key:?}")));
        }
        let verdict = verdict(state, agent_id, proposal, context.policy.as_deref());
        if let Some((decision, followups)) =
            self.apply_rate_limit(state, StepRef::of(&step), &verdict)
        {
            return Ok((decision, followups, false));
        }
        let verdict = self.apply_budget(state, verdict, context.session_usage);
        let (decision, followups) = self.record_new_step(state, step, &verdict);
        Ok((decision, followups, true))
    }

    /// Records a new step under a policy verdict.
    fn record_new_step(
        &self,
        state: &mut ExecState,
        step: StepRow,
        verdict: &Verdict,
    ) -> (StepDecision, Followups) {
        let step_id = step.step_id.clone();
        let step_ref = StepRef::of(&step);
        state.record(EventBody::StepProposed(Proposed {
            step: step_ref.clone(),
            record: Some(Box::new(step)),
        }));
        let decided = Decided {
            step: step_ref.clone(),
            rule_id: Some(verdict.rule_id.clone()),
            reason: verdict.reason.clone(),
            policy_hash: verdict.policy_hash.clone(),
        };
        let decision = match &verdict.action {
            Action::Allow => {
                state.record(EventBody::StepAllowed(decided));
                let mut decision = for_step(Decision::Proceed, &step_id);
                decision.resources = start_step(state, &step_id);
                decision
            }
            Action::Deny => deny(state, step_ref, verdict),
            Action::RequireApproval(config) => {
                state.record(EventBody::StepAwaitingApproval(decided));
                let approval = self.request_approval(state, &step_id, config);
                let mut decision = for_step(Decision::Blocked, &step_id);
                decision.approval_id = Some(approval.to_string());
                decision
            }
        };
        (decision, Followups::default())
    }

    /// Records a step outcome (`complete` when `failed` is false, else `fail`).
    pub(crate) fn settle_step(
        &self,
        id: Uuid,
        principal: &Principal,
        lease: Lease,
        step_id: &str,
        request: OutcomeRequest,
        failed: bool,
    ) -> Result<StepDecision, KernelError> {
        let cell = self.cell(id, principal)?;
        let (decision, followups) = {
            let mut state = cell.lock();
            if state.exec.status.is_terminal() {
                return Ok(bare(Decision::ExecutionTerminal));
            }
            let step = state
                .steps
                .get(step_id)
                .ok_or_else(|| KernelError::not_found("step"))?;
            if step.status.is_terminal() {
                return Ok(replay(step));
            }
            state.check_lease(lease)?;
            if step.status != StepStatus::Executing {
                return Err(KernelError::conflict("step is not executing"));
            }
            let outcome = outcome(step, &request, failed);
            state.record(outcome);
            let records = Captures {
                captures: request.captures,
                capture_failures: request.capture_failures,
            };
            let outcome_seq = state.latest_seq();
            captures::commit(&mut state, records, outcome_seq);
            let followups = self.resume_if_idle(&mut state);
            (bare(Decision::Recorded), followups)
        };
        cell.publish();
        self.run(followups);
        Ok(decision)
    }

    /// Steps of an execution ordered by id; `terminal_only` keeps settled ones.
    pub(crate) fn steps(
        &self,
        id: Uuid,
        principal: &Principal,
        terminal_only: bool,
    ) -> Result<Vec<StepRow>, KernelError> {
        let cell = self.cell(id, principal)?;
        let state = cell.lock();
        Ok(state
            .steps
            .values()
            .filter(|s| !terminal_only || s.status.is_terminal())
            .cloned()
            .collect())
    }

    /// One step of an execution.
    pub(crate) fn step(
        &self,
        id: Uuid,
        principal: &Principal,
        step_id: &str,
    ) -> Result<StepRow, KernelError> {
        let cell = self.cell(id, principal)?;
        let state = cell.lock();
        state
            .steps
            .get(step_id)
            .cloned()
            .ok_or_else(|| KernelError::not_found("step"))
    }
}

/// The policy's verdict on a new step (a refused retry of an indeterminate one first).
fn verdict(
    state: &ExecState,
    agent_id: &str,
    proposal: &Proposal,
    policy: Option<&Policy>,
) -> Verdict {
    if indeterminate_retry(state, proposal) {
        return Verdict::deny(
            "__indeterminate_retry",
            "prior attempt outcome unknown; retry refused",
        );
    }
    let facts = StepFacts {
        agent_id,
        kind: &proposal.kind,
        target: &proposal.target,
        args: proposal.args.as_ref().unwrap_or(&Value::Null),
    };
    policy.map_or_else(Verdict::permissive, |p| p.evaluate(&facts))
}

/// A policy denial: `step.denied` with the rule and reason.
fn deny(state: &mut ExecState, step: StepRef, verdict: &Verdict) -> StepDecision {
    let reason = verdict
        .reason
        .clone()
        .unwrap_or_else(|| "policy_denied".into());
    let step_id = step.step_id.clone();
    state.record(EventBody::StepDenied(Refused {
        step,
        rule_id: Some(verdict.rule_id.clone()),
        error: Some(json!({"reason": reason, "rule_id": verdict.rule_id})),
        policy_hash: verdict.policy_hash.clone(),
    }));
    let mut decision = for_step(Decision::Denied, &step_id);
    decision.reason = Some(reason);
    decision.rule_id = Some(verdict.rule_id.clone());
    decision
}

/// The event settling an executing step: `step.failed` with the error, or `step.succeeded`
/// with the result (and an LLM call's token usage).
fn outcome(step: &StepRow, request: &OutcomeRequest, failed: bool) -> EventBody {
    if failed {
        let error = request.error.clone().unwrap_or(Value::Null);
        let error = if error.is_null() { json!({}) } else { error };
        return EventBody::StepFailed(Refused::with_error(StepRef::of(step), error));
    }
    let usage = if step.kind == generations::LLM_CALL {
        request.result.as_ref().and_then(usage::parse)
    } else {
        None
    };
    EventBody::StepSucceeded(Succeeded {
        step: StepRef::of(step),
        usage: usage.map(|(input_tokens, output_tokens)| Usage {
            input_tokens,
            output_tokens,
        }),
        result: request.result.clone(),
    })
}

/// `replay` with the recorded result or error.
fn replay(step: &StepRow) -> StepDecision {
    let mut decision = for_step(Decision::Replay, &step.step_id);
    match step.status {
        StepStatus::Succeeded => decision.result = Some(step.result.clone().unwrap_or(Value::Null)),
        _ => decision.error = Some(step.error.clone().unwrap_or(Value::Null)),
    }
    decision
}

/// The replay short-circuit: an existing step is handled without consulting policy.
fn existing_step(state: &mut ExecState, step_id: &str) -> StepDecision {
    let Some(step) = state.steps.get(step_id) else {
        return bare(Decision::ExecutionTerminal);
    };
    match step.status {
        StepStatus::Succeeded | StepStatus::Failed => replay(step),
        StepStatus::AwaitingApproval => {
            let approval = state
                .approvals
                .values()
                .find(|a| a.step_id == step_id && a.status == rebuno::wire::ApprovalStatus::Pending)
                .map(|a| a.id.to_string());
            let mut decision = for_step(Decision::Blocked, step_id);
            decision.approval_id = approval;
            decision
        }
        StepStatus::Allowed | StepStatus::Proposed => {
            let mut decision = for_step(Decision::Proceed, step_id);
            decision.resources = start_step(state, step_id);
            decision
        }
        StepStatus::Executing if step.idempotency == AT_MOST_ONCE => {
            let error = json!({"reason": "indeterminate", "message": INDETERMINATE_MESSAGE});
            settle_step(state, step_id, EventBody::StepFailed, &error);
            let mut decision = for_step(Decision::Replay, step_id);
            decision.error = Some(error);
            decision
        }
        StepStatus::Denied => {
            let error = step.error.as_ref();
            let field = |name: &str| {
                error
                    .and_then(|e| e.get(name))
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
            };
            let mut decision = for_step(Decision::Denied, step_id);
            decision.reason = Some(field("reason").unwrap_or_else(|| "policy_denied".into()));
            decision.rule_id = field("rule_id");
            decision
        }
        StepStatus::Executing => {
            let mut decision = for_step(Decision::Proceed, step_id);
            if !generations::affected(state, step).is_empty() {
                decision.resources = start_step(state, step_id);
            }
            decision
        }
        StepStatus::Cancelled => for_step(Decision::Proceed, step_id),
    }
}

/// A bare decision token.
pub(super) fn bare(decision: Decision) -> StepDecision {
    let mut bare = StepDecision::default();
    bare.decision = decision;
    bare
}

/// A decision token with the step id.
fn for_step(decision: Decision, step_id: &str) -> StepDecision {
    let mut token = bare(decision);
    token.step_id = Some(step_id.to_owned());
    token
}

/// An `at_most_once` step whose earlier twin failed `indeterminate` must not run again.
fn indeterminate_retry(state: &ExecState, proposal: &Proposal) -> bool {
    proposal.idempotency == AT_MOST_ONCE
        && state.steps.values().any(|s| {
            s.kind == proposal.kind
                && s.target == proposal.target
                && s.args_hash == proposal.args_hash
                && s.status == StepStatus::Failed
                && s.error
                    .as_ref()
                    .and_then(|e| e.get("reason"))
                    .and_then(Value::as_str)
                    == Some("indeterminate")
        })
}
