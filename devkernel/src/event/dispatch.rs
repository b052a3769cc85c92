//! Payloads of the `dispatch.*` events: every transition of a delivery, visible.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The status a `dispatch.*` event reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum DispatchState {
    /// Waiting for a claim.
    Pending,
    /// The agent acknowledged the webhook.
    Acked,
    /// The delivery failed; it will be retried.
    Failed,
    /// Retired: no more attempts.
    Exhausted,
}

/// What one delivery attempt met when it did not succeed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DeliveryOutcome {
    /// The attempt.
    pub(crate) attempt: u32,
    /// The HTTP status the agent answered, when it answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) http_status: Option<u16>,
    /// Why it failed: `http_status`, `timeout`, `connect`, `lease_expired`, `kernel_restart`…
    pub(crate) error: String,
}

/// `dispatch.queued|acked|failed|discarded|reclaimed`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DispatchChanged {
    pub(crate) dispatch_id: Uuid,
    pub(crate) execution_id: Uuid,
    pub(crate) status: DispatchState,
    pub(crate) attempt: u32,
    /// HTTP status of a refused delivery (`dispatch.failed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) http_status: Option<u16>,
    /// Why the attempt failed or was reclaimed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<String>,
}

impl DispatchChanged {
    /// A transition with no failure detail.
    pub(crate) fn new(
        dispatch_id: Uuid,
        execution_id: Uuid,
        status: DispatchState,
        attempt: u32,
    ) -> Self {
        Self {
            dispatch_id,
            execution_id,
            status,
            attempt,
            http_status: None,
            error: None,
        }
    }

    /// A transition caused by a failed (or abandoned) attempt.
    pub(crate) fn failed(
        dispatch_id: Uuid,
        execution_id: Uuid,
        status: DispatchState,
        outcome: &DeliveryOutcome,
    ) -> Self {
        Self {
            http_status: outcome.http_status,
            error: Some(outcome.error.clone()),
            ..Self::new(dispatch_id, execution_id, status, outcome.attempt)
        }
    }
}
