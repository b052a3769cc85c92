//! The kernel's records as the SDK's [`rebuno::wire`] types, the one public shape of the
//! protocol's records.
//!
//! The wire types are `#[non_exhaustive]`: outside `rebuno` they are made only by
//! deserializing them. A kernel record serializes to the JSON its HTTP API serves (held to the
//! Go kernel's by the golden event tests), and is read here as a client of that API reads it,
//! through a `serde_json::Value` rather than text.

use rebuno::wire::ExecutionStatus;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::DevKernelError;
use crate::error::KernelError;
use crate::model;

/// `record` (a kernel record, or a list of them) as its wire type `W`.
///
/// # Errors
///
/// `internal_error` if the kernel's JSON is not `W`'s, a bug the golden tests are there to catch.
pub(super) fn record<W: DeserializeOwned>(record: &impl Serialize) -> Result<W, DevKernelError> {
    serde_json::to_value(record)
        .and_then(serde_json::from_value)
        .map_err(|error| KernelError::Internal(format!("a record is not its wire type: {error}")))
        .map_err(DevKernelError::from)
}

/// The kernel's status as the wire's.
pub(super) fn status(status: model::ExecutionStatus) -> ExecutionStatus {
    match status {
        model::ExecutionStatus::Pending => ExecutionStatus::Pending,
        model::ExecutionStatus::Running => ExecutionStatus::Running,
        model::ExecutionStatus::Blocked => ExecutionStatus::Blocked,
        model::ExecutionStatus::Completed => ExecutionStatus::Completed,
        model::ExecutionStatus::Failed => ExecutionStatus::Failed,
        model::ExecutionStatus::Cancelled => ExecutionStatus::Cancelled,
    }
}
