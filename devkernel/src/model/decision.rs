//! The step decision returned by submit, complete and fail.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

/// A resource affected by a `proceed` decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StepResource {
    /// Resource key.
    pub(crate) key: String,
    /// Its generation after this step started.
    pub(crate) generation: u64,
    /// Whether a checkpoint is due after the step.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) due: bool,
}

/// `{"decision": ..., ...}` (PROTOCOL.md §2.4).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub(crate) struct StepDecision {
    /// `proceed`, `replay`, `denied`, `blocked`, `rate_limited`, `execution_blocked`,
    /// `execution_terminal` or `recorded`.
    pub(crate) decision: String,
    /// The step, when the decision was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) step_id: Option<String>,
    /// Recorded result (replay).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) result: Option<Value>,
    /// Recorded error (replay).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<Value>,
    /// Pending approval (blocked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) approval_id: Option<Uuid>,
    /// Denial or rate-limit reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) reason: Option<String>,
    /// Deciding policy rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) rule_id: Option<String>,
    /// Resources touched by a `proceed`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) resources: Vec<StepResource>,
}

impl StepDecision {
    /// A bare decision token.
    pub(crate) fn bare(decision: &str) -> Self {
        Self {
            decision: decision.to_owned(),
            ..Self::default()
        }
    }

    /// A decision token with the step id.
    pub(crate) fn for_step(decision: &str, step_id: &str) -> Self {
        Self {
            decision: decision.to_owned(),
            step_id: Some(step_id.to_owned()),
            ..Self::default()
        }
    }
}
