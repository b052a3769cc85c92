//! Cases from recorded executions: each step with the decision its first decision event
//! recorded as the expectation.

use std::collections::HashMap;

use rebuno::client::{PolicyCase, PolicyDecision};
use uuid::Uuid;

use super::{SELECT_DEFAULT, SELECT_MAX, Selector};
use crate::error::KernelError;
use crate::event::EventBody;
use crate::kernel::Kernel;
use crate::store::ExecState;

/// The rule of the kernel's own indeterminate-retry denial (not a policy decision).
const INDETERMINATE_RULE: &str = "__indeterminate_retry";

/// The policy decision an event records, with the step and the rule.
fn decision_of(body: &EventBody) -> Option<(PolicyDecision, &str, Option<&str>)> {
    let (decision, step, rule) = match body {
        EventBody::StepAllowed(d) => (PolicyDecision::Allow, &d.step, d.rule_id.as_deref()),
        EventBody::StepAwaitingApproval(d) => (
            PolicyDecision::RequireApproval,
            &d.step,
            d.rule_id.as_deref(),
        ),
        EventBody::StepDenied(r) => (PolicyDecision::Deny, &r.step, r.rule_id.as_deref()),
        _ => return None,
    };
    Some((decision, step.step_id.as_str(), rule))
}

/// Cases for the steps of one execution.
fn cases_of(state: &ExecState) -> Vec<PolicyCase> {
    let mut first: HashMap<&str, (PolicyDecision, &str)> = HashMap::new();
    for (decision, step, rule) in state.events.iter().filter_map(|e| decision_of(&e.body)) {
        let rule = rule.unwrap_or("");
        if rule != INDETERMINATE_RULE {
            first.entry(step).or_insert((decision, rule));
        }
    }
    state
        .steps
        .values()
        .map(|step| {
            let recorded = first.get(step.step_id.as_str());
            let mut case = PolicyCase::default();
            case.kind.clone_from(&step.kind);
            case.target.clone_from(&step.target);
            case.args.clone_from(&step.args);
            case.expect = recorded.map(|(decision, _)| *decision);
            case.execution_id = state.exec.id.to_string();
            case.step_id.clone_from(&step.step_id);
            case.was_rule = recorded.map_or("", |(_, rule)| rule).to_owned();
            case
        })
        .collect()
}

impl Kernel {
    /// Cases from one execution (`404` when unknown).
    pub(super) fn replay_cases(&self, id: Uuid) -> Result<Vec<PolicyCase>, KernelError> {
        let cell = self
            .store()
            .execution(id)
            .ok_or_else(|| KernelError::not_found("execution"))?;
        let state = cell.lock();
        Ok(cases_of(&state))
    }

    /// Cases from the agent's executions, newest first, filtered by the selector.
    pub(super) fn backtest_cases(&self, agent_id: &str, selector: &Selector) -> Vec<PolicyCase> {
        let limit = selector
            .limit
            .and_then(|l| usize::try_from(l).ok())
            .filter(|l| *l > 0)
            .unwrap_or(SELECT_DEFAULT)
            .min(SELECT_MAX);
        let session = selector.session.as_deref().filter(|s| !s.is_empty());
        let mut cases = Vec::new();
        let mut replayed = 0;
        for cell in self.store().executions_desc() {
            if cell.agent_id != agent_id {
                continue;
            }
            let state = cell.lock();
            if session.is_some_and(|s| state.exec.session.as_deref() != Some(s)) {
                continue;
            }
            if selector
                .since
                .is_some_and(|since| state.exec.created_at < since)
            {
                break;
            }
            cases.extend(cases_of(&state));
            replayed += 1;
            if replayed == limit {
                break;
            }
        }
        cases
    }
}
