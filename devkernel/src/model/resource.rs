//! Resource views (PROTOCOL.md §1.9): registration responses and fork points.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A registered resource as returned by `POST /v0/executions/{id}/resources`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ResourceView {
    /// Resource key.
    pub(crate) key: String,
    /// The driver that owns it.
    pub(crate) driver_id: String,
    /// Driver configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) configuration: Option<Value>,
    /// Whether checkpoints survive steps that do not declare the resource.
    pub(crate) coverage_reuse: bool,
    /// Capture every N affecting steps (0 = never).
    pub(crate) every_steps: u64,
    /// Capture when the handler returns.
    pub(crate) on_completion: bool,
    /// Seq of its `resource.registered` event.
    pub(crate) registered_seq: u64,
    /// Current generation.
    pub(crate) generation: u64,
    /// Settled affecting steps.
    pub(crate) count: u64,
    /// The driver's binding, once bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) binding: Option<Value>,
    /// Newest checkpoint reference (or the one a fork restored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) checkpoint_ref: Option<String>,
    /// Whether a valid checkpoint of the current generation exists.
    pub(crate) covered: bool,
}

/// One checkpoint in `GET /v0/executions/{id}/fork-points`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CheckpointView {
    /// Resource key.
    pub(crate) key: String,
    /// Generation it captured.
    pub(crate) generation: u64,
    /// The driver's reference.
    pub(crate) checkpoint_ref: String,
    /// First seq it covers.
    pub(crate) covered_seq: u64,
    /// First seq it no longer covers (open when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) invalidated_seq: Option<u64>,
}

/// `GET /v0/executions/{id}/fork-points`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ForkPoints {
    /// Seq of the newest event.
    pub(crate) latest_seq: u64,
    /// Registered resources: key → registration seq.
    pub(crate) resources: BTreeMap<String, u64>,
    /// Every checkpoint, oldest first per resource.
    pub(crate) checkpoints: Vec<CheckpointView>,
}

/// How a fork restored one resource (`restoration` of the fork response).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Restoration {
    /// The checkpoint it was restored from (absent: the initial environment).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) checkpoint_ref: Option<String>,
    /// `covered_seq` of that checkpoint in the source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) checkpoint_seq: Option<u64>,
    /// Whether the checkpoint covers the fork point exactly.
    pub(crate) covered: bool,
}
