//! The policy language (PROTOCOL.md §1.11): per-agent YAML bundles of rules evaluated in file
//! order when a step is first submitted (never on replay).
//!
//! ```yaml
//! default_action: deny
//! rules:
//!   - id: allow-search
//!     when: { step_kind: tool_call, target: "search*" }
//!     then: { decision: allow }
//!   - id: gate-email
//!     when: { target: send_email, arguments: { to: { regex: "@example\\.com$" } } }
//!     then: { decision: require_approval, approval_config: { timeout: 5m } }
//! ```

mod bundle;
pub(crate) mod duration;
mod glob;

use std::time::Duration;

use serde_json::Value;

pub use bundle::PolicyError;
use bundle::{Bundle, Rule};

/// What a rule decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Action {
    /// Run the step.
    Allow,
    /// Refuse the step.
    Deny,
    /// Block until a human decides.
    RequireApproval(ApprovalConfig),
}

/// `approval_config` of a `require_approval` rule.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ApprovalConfig {
    /// Who may decide (`None` = anyone).
    pub(crate) approvers: Option<Vec<String>>,
    /// How long before it expires (`None` = kernel default).
    pub(crate) timeout: Option<Duration>,
    /// Message for the approver.
    pub(crate) message: Option<String>,
}

/// Whose calls a rate limit counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RateScope {
    /// Per execution (default).
    Execution,
    /// Per agent.
    Agent,
    /// Per session (falls back to the execution without one).
    Session,
    /// One bucket for everyone.
    Global,
}

/// `rate_limit` of a rule: a token bucket of `max_calls` per `window`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RateLimit {
    /// Bucket size and refill per window.
    pub(crate) max_calls: u32,
    /// Refill period.
    pub(crate) window: Duration,
    /// Bucket key scope.
    pub(crate) scope: RateScope,
    /// Park the execution instead of refusing, when the wait is at most this long.
    pub(crate) max_wait: Option<Duration>,
}

/// What a token budget counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BudgetScope {
    /// This execution's LLM usage.
    Execution,
    /// The session's LLM usage.
    Session,
}

/// `budget` of an allow rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Budget {
    /// Recorded LLM tokens (input + output) at which new steps stop being allowed.
    pub(crate) max_tokens: u64,
    /// `on_exceed: require_approval` instead of deny.
    pub(crate) approve: bool,
    /// What usage counts.
    pub(crate) scope: BudgetScope,
}

/// The outcome of evaluating a step against a bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Verdict {
    /// The decision.
    pub(crate) action: Action,
    /// Deciding rule (`permissive`, `local`, `default` or a rule id).
    pub(crate) rule_id: String,
    /// The rule's reason.
    pub(crate) reason: Option<String>,
    /// SHA-256 of the deciding bundle's YAML.
    pub(crate) policy_hash: Option<String>,
    /// The deciding rule's rate limit.
    pub(crate) rate_limit: Option<RateLimit>,
    /// The deciding rule's token budget.
    pub(crate) budget: Option<Budget>,
}

impl Verdict {
    /// Allow with no bundle.
    pub(crate) fn permissive() -> Self {
        Self {
            action: Action::Allow,
            rule_id: "permissive".into(),
            reason: None,
            policy_hash: None,
            rate_limit: None,
            budget: None,
        }
    }

    /// A kernel-made deny.
    pub(crate) fn deny(rule_id: &str, reason: &str) -> Self {
        Self {
            action: Action::Deny,
            rule_id: rule_id.into(),
            reason: Some(reason.into()),
            policy_hash: None,
            rate_limit: None,
            budget: None,
        }
    }
}

/// The facts a rule can match.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StepFacts<'a> {
    /// The execution's agent.
    pub(crate) agent_id: &'a str,
    /// Step kind.
    pub(crate) kind: &'a str,
    /// Step target.
    pub(crate) target: &'a str,
    /// Step args.
    pub(crate) args: &'a Value,
}

/// A compiled policy bundle.
#[derive(Debug, Clone)]
pub struct Policy {
    yaml: String,
    hash: String,
    bundle: Bundle,
}

impl Policy {
    /// Compiles a YAML bundle.
    ///
    /// ```
    /// use rebuno_devkernel::Policy;
    /// assert!(Policy::parse("default_action: allow").is_ok());
    /// assert!(Policy::parse("rules: [{when: {}}]").is_err()); // a rule needs an id
    /// ```
    ///
    /// # Errors
    ///
    /// [`PolicyError`] for invalid YAML, unknown keys, missing or duplicate rule ids, unknown
    /// decisions, malformed target globs, argument predicates without a non-empty constraint,
    /// invalid `judge` options, bad regexes or durations.
    pub fn parse(yaml: &str) -> Result<Self, PolicyError> {
        let bundle = Bundle::parse(yaml)?;
        Ok(Self {
            yaml: yaml.to_owned(),
            hash: crate::identity::sha256_hex(yaml.as_bytes()),
            bundle,
        })
    }

    /// The bundle's YAML source.
    pub fn yaml(&self) -> &str {
        &self.yaml
    }

    /// Rule ids in file order.
    pub(crate) fn rule_ids(&self) -> impl Iterator<Item = &str> {
        self.bundle.rules.iter().map(|r| r.id.as_str())
    }

    /// Whether any rule's budget counts the whole session's usage.
    pub(crate) fn has_session_budget(&self) -> bool {
        self.bundle.rules.iter().any(|r| {
            r.budget
                .as_ref()
                .is_some_and(|b| b.scope == BudgetScope::Session)
        })
    }

    /// Decides a new step: the first matching rule in file order, else `local` for local
    /// steps, else `default_action`.
    pub(crate) fn evaluate(&self, facts: &StepFacts<'_>) -> Verdict {
        let hash = Some(self.hash.clone());
        if let Some(rule) = self.bundle.rules.iter().find(|r| r.matches(facts)) {
            return Verdict {
                action: rule.action.clone(),
                rule_id: rule.id.clone(),
                reason: rule.reason.clone(),
                policy_hash: hash,
                rate_limit: rule.rate_limit.clone(),
                budget: rule.budget.clone(),
            };
        }
        if facts.kind == "local" {
            return Verdict {
                action: Action::Allow,
                rule_id: "local".into(),
                reason: None,
                policy_hash: hash,
                rate_limit: None,
                budget: None,
            };
        }
        let (action, reason) = if self.bundle.default_allow {
            (Action::Allow, "default allow")
        } else {
            (Action::Deny, "no explicit allow rule matched")
        };
        Verdict {
            action,
            rule_id: "default".into(),
            reason: Some(reason.into()),
            policy_hash: hash,
            rate_limit: None,
            budget: None,
        }
    }
}

impl Rule {
    fn matches(&self, facts: &StepFacts<'_>) -> bool {
        self.when.matches(facts)
    }
}

#[cfg(test)]
mod tests;
