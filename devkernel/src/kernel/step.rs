//! Steps: the submit decision algorithm and step outcomes (PROTOCOL.md §1.5).

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::resources::captures::{self, Capture, CaptureFailure, Captures};
use super::resources::generations;
use super::terminal::settle_step;
use super::{Followups, Kernel, Lease, Principal, now};
use crate::error::KernelError;
use crate::identity;
use crate::model::{
    ExecutionStatus, StepDecision, StepRecord, StepResource, StepStatus, Timestamp,
};
use crate::policy::{Action, StepFacts, Verdict};
use crate::store::ExecState;
use crate::usage;

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
    #[serde(default, deserialize_with = "present")]
    pub(crate) result: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    pub(crate) error: Option<Value>,
    /// Checkpoints captured after the body ran.
    #[serde(default)]
    pub(crate) captures: Option<Vec<Capture>>,
    /// Captures the driver could not take.
    #[serde(default)]
    pub(crate) capture_failures: Option<Vec<CaptureFailure>>,
}

fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
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

    fn step(&self, execution_id: Uuid, step_id: String, occurrence: u32) -> StepRecord {
        StepRecord {
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

/// The common `step.*` payload.
fn step_payload(step: &StepRecord) -> Map<String, Value> {
    let mut payload = Map::new();
    payload.insert("step_id".into(), json!(step.step_id));
    payload.insert("step_type".into(), json!(step.kind));
    payload.insert("target".into(), json!(step.target));
    payload
}

fn insert_verdict(payload: &mut Map<String, Value>, verdict: &Verdict) {
    payload.insert("rule_id".into(), json!(verdict.rule_id));
    if let Some(reason) = &verdict.reason {
        payload.insert("reason".into(), json!(reason));
    }
    if let Some(hash) = &verdict.policy_hash {
        payload.insert("policy_hash".into(), json!(hash));
    }
}

/// Starts a step live: status `executing`, generations of the affected resources bumped,
/// `step.executing` (with `resources` and `generations` when any), their checkpoints
/// invalidated at that seq. Returns the decision's `resources`.
fn start_step(state: &mut ExecState, step_id: &str) -> Vec<StepResource> {
    let Some((keys, counts)) = state.steps.get(step_id).map(|step| {
        (
            generations::affected(state, step),
            step.kind != generations::LLM_CALL,
        )
    }) else {
        return Vec::new();
    };
    let (touched, bumped) = generations::bump(state, &keys, counts);
    let Some(step) = state.steps.get_mut(step_id) else {
        return Vec::new();
    };
    step.status = StepStatus::Executing;
    step.started_at = Some(Timestamp::now());
    if !keys.is_empty() {
        step.resources.clone_from(&keys);
    }
    let mut payload = step_payload(step);
    if !keys.is_empty() {
        payload.insert("resources".into(), json!(keys));
        payload.insert("generations".into(), json!(bumped));
    }
    let seq = state.append("step.executing", Value::Object(payload));
    generations::invalidate(state, &keys, seq);
    touched
}

const INDETERMINATE_MESSAGE: &str =
    "outcome unknown: this may already have taken effect. Check the state before continuing.";

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
        let policy = cell
            .lock()
            .policy
            .clone()
            .or_else(|| self.store().agent(&cell.agent_id).and_then(|a| a.policy));
        let session_usage = if policy.as_ref().is_some_and(|p| p.has_session_budget()) {
            self.session_usage(&cell)
        } else {
            0
        };
        let (decision, followups) = {
            let mut state = cell.lock();
            if state.exec.status.is_terminal() {
                return Ok(StepDecision::bare("execution_terminal"));
            }
            state.renew_lease(lease, now())?;
            let key = (
                lease.dispatch_id,
                lease.attempt,
                proposal.kind.clone(),
                proposal.target.clone(),
                proposal.args_hash.clone(),
            );
            let occurrence = state.counters.get(&key).copied().unwrap_or(0);
            let step_id = identity::step_id(
                &id.to_string(),
                &proposal.kind,
                &proposal.target,
                &proposal.args_hash,
                occurrence,
            );
            let (decision, followups, recorded) = if state.steps.contains_key(&step_id) {
                (
                    existing_step(&mut state, &step_id),
                    Followups::default(),
                    true,
                )
            } else {
                if state.exec.status == ExecutionStatus::Blocked {
                    return Ok(StepDecision::bare("execution_blocked"));
                }
                let declared = generations::declared(&proposal.kind, &proposal.resources);
                if let Some(key) = declared.iter().find(|k| !state.resources.contains_key(*k)) {
                    return Err(KernelError::validation(format!("unknown resource {key:?}")));
                }
                let verdict = if indeterminate_retry(&state, &proposal) {
                    Verdict::deny(
                        "__indeterminate_retry",
                        "prior attempt outcome unknown; retry refused",
                    )
                } else {
                    let facts = StepFacts {
                        agent_id: &cell.agent_id,
                        kind: &proposal.kind,
                        target: &proposal.target,
                        args: proposal.args.as_ref().unwrap_or(&Value::Null),
                    };
                    policy
                        .as_ref()
                        .map_or_else(Verdict::permissive, |p| p.evaluate(&facts))
                };
                let step = proposal.step(id, step_id, occurrence);
                match self.apply_rate_limit(&mut state, step_payload(&step), &verdict) {
                    Some((decision, followups)) => (decision, followups, false),
                    None => {
                        let verdict = self.apply_budget(&state, verdict, session_usage);
                        let (decision, followups) =
                            self.record_new_step(&mut state, step, &verdict);
                        (decision, followups, true)
                    }
                }
            };
            if recorded {
                *state.counters.entry(key).or_insert(0) += 1;
            }
            (decision, followups)
        };
        self.metrics().decision(&decision.decision);
        tracing::debug!(
            execution = %id,
            step = decision.step_id.as_deref().unwrap_or(""),
            decision = %decision.decision,
            "step submitted"
        );
        cell.publish();
        self.run(followups);
        Ok(decision)
    }

    /// Records a new step under a policy verdict.
    fn record_new_step(
        &self,
        state: &mut ExecState,
        step: StepRecord,
        verdict: &Verdict,
    ) -> (StepDecision, Followups) {
        let step_id = step.step_id.clone();
        let mut payload = step_payload(&step);
        state.steps.insert(step_id.clone(), step);
        state.append("step.proposed", Value::Object(payload.clone()));
        match &verdict.action {
            Action::Allow => {
                if let Some(step) = state.steps.get_mut(&step_id) {
                    step.status = StepStatus::Allowed;
                }
                insert_verdict(&mut payload, verdict);
                state.append("step.allowed", Value::Object(payload));
                let mut decision = StepDecision::for_step("proceed", &step_id);
                decision.resources = start_step(state, &step_id);
                (decision, Followups::default())
            }
            Action::Deny => {
                let reason = verdict
                    .reason
                    .clone()
                    .unwrap_or_else(|| "policy_denied".into());
                let error = json!({"reason": reason, "rule_id": verdict.rule_id});
                if let Some(step) = state.steps.get_mut(&step_id) {
                    step.status = StepStatus::Denied;
                    step.error = Some(error.clone());
                    step.completed_at = Some(Timestamp::now());
                }
                payload.insert("rule_id".into(), json!(verdict.rule_id));
                payload.insert("error".into(), error);
                if let Some(hash) = &verdict.policy_hash {
                    payload.insert("policy_hash".into(), json!(hash));
                }
                state.append("step.denied", Value::Object(payload));
                let mut decision = StepDecision::for_step("denied", &step_id);
                decision.reason = Some(reason);
                decision.rule_id = Some(verdict.rule_id.clone());
                (decision, Followups::default())
            }
            Action::RequireApproval(config) => {
                if let Some(step) = state.steps.get_mut(&step_id) {
                    step.status = StepStatus::AwaitingApproval;
                }
                insert_verdict(&mut payload, verdict);
                state.append("step.awaiting_approval", Value::Object(payload));
                let approval = self.request_approval(state, &step_id, config);
                let mut decision = StepDecision::for_step("blocked", &step_id);
                decision.approval_id = Some(approval);
                (decision, Followups::default())
            }
        }
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
                return Ok(StepDecision::bare("execution_terminal"));
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
            let records = Captures {
                captures: request.captures,
                capture_failures: request.capture_failures,
            };
            if failed {
                let error = request.error.unwrap_or(Value::Null);
                let error = if error.is_null() { json!({}) } else { error };
                settle_step(
                    &mut state,
                    step_id,
                    StepStatus::Failed,
                    "step.failed",
                    error,
                );
            } else {
                self.succeed_step(&mut state, step_id, request.result);
            }
            let outcome_seq = state.latest_seq();
            captures::commit(&mut state, records, outcome_seq);
            let followups = self.resume_if_idle(&mut state);
            (StepDecision::bare("recorded"), followups)
        };
        cell.publish();
        self.run(followups);
        Ok(decision)
    }

    /// `step.succeeded` with the result (and LLM token usage).
    fn succeed_step(&self, state: &mut ExecState, step_id: &str, result: Option<Value>) {
        let Some(step) = state.steps.get_mut(step_id) else {
            return;
        };
        step.status = StepStatus::Succeeded;
        step.completed_at = Some(Timestamp::now());
        let mut payload = step_payload(step);
        if step.kind == "llm_call"
            && let Some((input, output)) = result.as_ref().and_then(usage::parse)
        {
            step.usage_input = Some(input);
            step.usage_output = Some(output);
            payload.insert(
                "usage".into(),
                json!({"input_tokens": input, "output_tokens": output}),
            );
        }
        step.result = result;
        state.append("step.succeeded", Value::Object(payload));
        generations::count_settled(state, step_id);
    }

    /// Steps of an execution ordered by id; `terminal_only` keeps settled ones.
    pub(crate) fn steps(
        &self,
        id: Uuid,
        principal: &Principal,
        terminal_only: bool,
    ) -> Result<Vec<StepRecord>, KernelError> {
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
    ) -> Result<StepRecord, KernelError> {
        let cell = self.cell(id, principal)?;
        let state = cell.lock();
        state
            .steps
            .get(step_id)
            .cloned()
            .ok_or_else(|| KernelError::not_found("step"))
    }
}

/// `replay` with the recorded result or error.
fn replay(step: &StepRecord) -> StepDecision {
    let mut decision = StepDecision::for_step("replay", &step.step_id);
    match step.status {
        StepStatus::Succeeded => decision.result = Some(step.result.clone().unwrap_or(Value::Null)),
        _ => decision.error = Some(step.error.clone().unwrap_or(Value::Null)),
    }
    decision
}

/// The replay short-circuit: an existing step is handled without consulting policy.
fn existing_step(state: &mut ExecState, step_id: &str) -> StepDecision {
    let Some(step) = state.steps.get(step_id) else {
        return StepDecision::bare("execution_terminal");
    };
    match step.status {
        StepStatus::Succeeded | StepStatus::Failed => replay(step),
        StepStatus::AwaitingApproval => {
            let approval = state
                .approvals
                .values()
                .find(|a| a.step_id == step_id && a.status == crate::model::ApprovalStatus::Pending)
                .map(|a| a.id);
            let mut decision = StepDecision::for_step("blocked", step_id);
            decision.approval_id = approval;
            decision
        }
        StepStatus::Allowed | StepStatus::Proposed => {
            let mut decision = StepDecision::for_step("proceed", step_id);
            decision.resources = start_step(state, step_id);
            decision
        }
        StepStatus::Executing if step.idempotency == AT_MOST_ONCE => {
            let error = json!({"reason": "indeterminate", "message": INDETERMINATE_MESSAGE});
            settle_step(
                state,
                step_id,
                StepStatus::Failed,
                "step.failed",
                error.clone(),
            );
            let mut decision = StepDecision::for_step("replay", step_id);
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
            let mut decision = StepDecision::for_step("denied", step_id);
            decision.reason = Some(field("reason").unwrap_or_else(|| "policy_denied".into()));
            decision.rule_id = field("rule_id");
            decision
        }
        StepStatus::Executing => {
            let mut decision = StepDecision::for_step("proceed", step_id);
            if !generations::affected(state, step).is_empty() {
                decision.resources = start_step(state, step_id);
            }
            decision
        }
        StepStatus::Cancelled => StepDecision::for_step("proceed", step_id),
    }
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
