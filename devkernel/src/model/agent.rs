//! The agent object (secret never serialized).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Timestamp;

/// A registered agent as returned by `GET /v0/agents/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct AgentRow {
    /// Agent id.
    pub(crate) id: String,
    /// Where dispatches are POSTed.
    pub(crate) webhook_url: String,
    /// Policy bundle YAML, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) policy_bundle: Option<String>,
    /// Registration time.
    pub(crate) registered_at: Timestamp,
    /// Lease period override in seconds (≥ 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) lease_timeout_seconds: Option<u64>,
    /// Description published by the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) description: Option<String>,
    /// Input JSON Schema published by the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) input_schema: Option<Value>,
    /// Output JSON Schema published by the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) output_schema: Option<Value>,
}
