//! The event object (PROTOCOL.md §1.12).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::Timestamp;

/// One entry of an execution's append-only event log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct LogEntry {
    /// Owning execution.
    pub(crate) execution_id: Uuid,
    /// 1-based position in the execution's log.
    pub(crate) event_seq: u64,
    /// Event type, e.g. `step.succeeded`.
    #[serde(rename = "type")]
    pub(crate) kind: String,
    /// Type-specific payload.
    pub(crate) payload: Value,
    /// When it was appended.
    pub(crate) occurred_at: Timestamp,
}
