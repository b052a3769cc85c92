//! The event object (PROTOCOL.md §1.12).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::Timestamp;

/// One entry of an execution's append-only event log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Owning execution.
    pub execution_id: Uuid,
    /// 1-based position in the execution's log.
    pub event_seq: u64,
    /// Event type, e.g. `step.succeeded`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Type-specific payload.
    pub payload: Value,
    /// When it was appended.
    pub occurred_at: Timestamp,
}
