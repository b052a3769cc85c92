//! Rate limits and token budgets of policy rules (PROTOCOL.md §1.11).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use serde_json::json;
use tokio::time::Instant;

use super::step::bare;
use super::{Followups, Kernel};
use crate::backoff::jittered;
use crate::event::{EventBody, Refused, StepRef};
use crate::model::StepStatus;
use crate::policy::{Action, ApprovalConfig, BudgetScope, RateLimit, RateScope, Verdict};
use crate::store::{ExecCell, ExecState, lock};
use rebuno::wire::{Decision, StepDecision};

const RATE_LIMITED: &str = "rate_limit_exceeded";
const BUDGET_EXCEEDED: &str = "execution_token_budget_exceeded";

/// A token bucket.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    updated: Instant,
}

/// In-memory token buckets keyed `rule:scope:id`.
#[derive(Debug, Default)]
pub(super) struct Limiter {
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl Limiter {
    /// Takes one token, or says how long until one is available.
    fn take(&self, key: &str, limit: &RateLimit, at: Instant) -> Result<(), Duration> {
        let capacity = f64::from(limit.max_calls);
        let per_second = capacity / limit.window.as_secs_f64();
        let mut buckets = lock(&self.buckets);
        let bucket = buckets.entry(key.to_owned()).or_insert(Bucket {
            tokens: capacity,
            updated: at,
        });
        let elapsed = at.saturating_duration_since(bucket.updated).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * per_second).min(capacity);
        bucket.updated = at;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - bucket.tokens) / per_second))
        }
    }
}

/// Recorded LLM tokens (input + output) of an execution's steps.
pub(super) fn usage(state: &ExecState) -> u64 {
    state
        .steps
        .values()
        .filter(|s| s.status == StepStatus::Succeeded)
        .map(|s| s.usage_input.unwrap_or(0) + s.usage_output.unwrap_or(0))
        .sum()
}

impl Kernel {
    /// LLM usage of the other executions of `cell`'s session (read before taking its lock).
    pub(super) fn session_usage(&self, cell: &ExecCell) -> u64 {
        let Some(session) = cell.lock().exec.session.clone() else {
            return 0;
        };
        self.sessions()
            .members(&session)
            .into_iter()
            .filter(|id| *id != cell.id)
            .filter_map(|id| self.store().execution(id))
            .map(|other| usage(&other.lock()))
            .sum()
    }

    /// Applies the deciding rule's token budget to an allow verdict.
    pub(super) fn apply_budget(
        &self,
        state: &ExecState,
        verdict: Verdict,
        session_usage: u64,
    ) -> Verdict {
        let Some(budget) = verdict.budget.clone() else {
            return verdict;
        };
        if verdict.action != Action::Allow {
            return verdict;
        }
        let used = usage(state)
            + match budget.scope {
                BudgetScope::Execution => 0,
                BudgetScope::Session => session_usage,
            };
        if used < budget.max_tokens {
            return verdict;
        }
        let action = if budget.approve {
            Action::RequireApproval(ApprovalConfig::default())
        } else {
            Action::Deny
        };
        Verdict {
            action,
            reason: Some(BUDGET_EXCEEDED.into()),
            ..verdict
        }
    }

    /// Applies the deciding rule's rate limit. `Some` when the step is refused or the execution
    /// parks (nothing is recorded then: no step row, no occurrence advance).
    pub(super) fn apply_rate_limit(
        &self,
        state: &mut ExecState,
        step: StepRef,
        verdict: &Verdict,
    ) -> Option<(StepDecision, Followups)> {
        let limit = verdict.rate_limit.as_ref()?;
        if verdict.action == Action::Deny {
            return None;
        }
        let rule = &verdict.rule_id;
        let current = state.clock().now();
        let wait = self
            .inner
            .limiter
            .take(&bucket_key(state, rule, limit), limit, current)
            .err()?;
        state.record(EventBody::StepRateLimited(Refused {
            step,
            rule_id: Some(rule.clone()),
            error: Some(json!({"reason": RATE_LIMITED, "rule_id": rule})),
            policy_hash: None,
        }));
        let mut decision = bare(Decision::RateLimited);
        decision.reason = Some(RATE_LIMITED.into());
        let mut followups = Followups::default();
        if limit.max_wait.is_some_and(|max| wait <= max) && !state.parked {
            // Park: retire the dispatch and re-deliver after the (jittered) wait.
            state.parked = true;
            state.retire_dispatches();
            let dispatch = state.enqueue_dispatch(current + jittered(wait));
            followups.deliver.push((state.exec.id, dispatch));
            decision.decision = Decision::Blocked;
        }
        Some((decision, followups))
    }
}

/// The bucket a rule's limit draws from: `rule:scope:id`.
fn bucket_key(state: &ExecState, rule: &str, limit: &RateLimit) -> String {
    match (limit.scope, &state.exec.session) {
        (RateScope::Agent, _) => format!("{rule}:agent:{}", state.exec.agent_id),
        (RateScope::Global, _) => format!("{rule}:global"),
        (RateScope::Session, Some(session)) => format!("{rule}:session:{session}"),
        (RateScope::Execution | RateScope::Session, _) => {
            format!("{rule}:exec:{}", state.exec.id)
        }
    }
}
