//! Payloads of the `resource.*` events.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `resource.registered` (and `resource.reconfigured` when a re-registration changes the
/// checkpoint policy).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Registered {
    pub(crate) key: String,
    pub(crate) driver_id: String,
    pub(crate) configuration: Option<Value>,
    pub(crate) coverage_reuse: bool,
    pub(crate) every_steps: u64,
    pub(crate) on_completion: bool,
}

/// `resource.initialized`: where a fork's resource starts (generation, restored checkpoint).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Initialized {
    pub(crate) key: String,
    pub(crate) generation: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) checkpoint_ref: Option<String>,
}

/// `resource.bound`: the driver's handle description.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Bound {
    pub(crate) key: String,
    pub(crate) binding: Value,
}

/// `resource.checkpointed`: a checkpoint covering from `covered_seq`. A fork's copy of a
/// source checkpoint whose coverage ended by the fork point also carries `invalidated_seq`
/// (mapped into the fork's log), an addition to the Go payload so the log alone rebuilds
/// the fork's checkpoint rows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Checkpointed {
    pub(crate) key: String,
    pub(crate) generation: u64,
    pub(crate) checkpoint_ref: String,
    pub(crate) covered_seq: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) invalidated_seq: Option<u64>,
}

/// `resource.checkpoint_failed`: a capture refused or reported failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CheckpointFailed {
    pub(crate) key: String,
    pub(crate) generation: u64,
    pub(crate) error: String,
}
