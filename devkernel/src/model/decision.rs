//! The step decision returned by submit, complete and fail.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

/// A resource affected by a `proceed` decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepResource {
    /// Resource key.
    pub key: String,
    /// Its generation after this step started.
    pub generation: u64,
    /// Whether a checkpoint is due after the step.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub due: bool,
}

/// `{"decision": ..., ...}` (PROTOCOL.md §2.4).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct StepDecision {
    /// `proceed`, `replay`, `denied`, `blocked`, `rate_limited`, `execution_blocked`,
    /// `execution_terminal` or `recorded`.
    pub decision: String,
    /// The step, when the decision was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_id: Option<String>,
    /// Recorded result (replay).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// Recorded error (replay).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
    /// Pending approval (blocked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<Uuid>,
    /// Denial or rate-limit reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Deciding policy rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_id: Option<String>,
    /// Resources touched by a `proceed`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<StepResource>,
}

impl StepDecision {
    /// A bare decision token.
    pub fn bare(decision: &str) -> Self {
        Self {
            decision: decision.to_owned(),
            ..Self::default()
        }
    }

    /// A decision token with the step id.
    pub fn for_step(decision: &str, step_id: &str) -> Self {
        Self {
            decision: decision.to_owned(),
            step_id: Some(step_id.to_owned()),
            ..Self::default()
        }
    }
}
