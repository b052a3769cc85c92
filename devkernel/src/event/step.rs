//! Payloads of the `step.*` events.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::private::hidden_or_none;
use crate::model::StepRow;
use crate::model::present;

/// The fields every `step.*` payload starts with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StepRef {
    pub(crate) step_id: String,
    pub(crate) step_type: String,
    pub(crate) target: String,
}

impl StepRef {
    /// The reference of a recorded step.
    pub(crate) fn of(step: &StepRow) -> Self {
        Self {
            step_id: step.step_id.clone(),
            step_type: step.kind.clone(),
            target: step.target.clone(),
        }
    }
}

/// `step.proposed`: a new step row (the whole row is private).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Proposed {
    #[serde(flatten)]
    pub(crate) step: StepRef,
    #[serde(default, skip_serializing_if = "hidden_or_none")]
    pub(crate) record: Option<Box<StepRow>>,
}

/// `step.allowed` and `step.awaiting_approval`: the policy verdict that decided it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Decided {
    #[serde(flatten)]
    pub(crate) step: StepRef,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) rule_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) policy_hash: Option<String>,
}

/// `step.denied`, `step.failed`, `step.cancelled` and `step.rate_limited`: a step that ends
/// (or is refused) with an error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Refused {
    #[serde(flatten)]
    pub(crate) step: StepRef,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) rule_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) policy_hash: Option<String>,
}

impl Refused {
    /// A step ending with `error` (left out when `null`).
    pub(crate) fn with_error(step: StepRef, error: Value) -> Self {
        Self {
            step,
            rule_id: None,
            error: Some(error).filter(|e| !e.is_null()),
            policy_hash: None,
        }
    }
}

/// `step.executing`: a live start, with the resources it affects and their new generations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Executing {
    #[serde(flatten)]
    pub(crate) step: StepRef,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) resources: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) generations: Option<BTreeMap<String, u64>>,
}

/// LLM token usage of a succeeded `llm_call`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Usage {
    pub(crate) input_tokens: u64,
    pub(crate) output_tokens: u64,
}

/// `step.succeeded`: token usage, and the result (private).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Succeeded {
    #[serde(flatten)]
    pub(crate) step: StepRef,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) usage: Option<Usage>,
    #[serde(
        default,
        skip_serializing_if = "hidden_or_none",
        deserialize_with = "present"
    )]
    pub(crate) result: Option<Value>,
}
