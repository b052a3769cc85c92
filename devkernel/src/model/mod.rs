//! The kernel's typed rows of the protocol's objects; the harness hands out `rebuno::wire` types.

mod agent;
mod approval;
mod event;
mod execution;
mod resource;
mod step;
mod time;

pub(crate) use agent::AgentRow;
pub(crate) use approval::ApprovalRow;
pub(crate) use event::LogEntry;
pub(crate) use execution::ExecutionRow;
pub(crate) use resource::Restoration;
pub(crate) use step::{StepRow, StepStatus};
pub(crate) use time::Timestamp;

/// Deserializes a present field, `null` included, as `Some` (an absent one stays `None`
/// through `#[serde(default)]`): tells `"result": null` from no result.
pub(crate) fn present<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    T::deserialize(d).map(Some)
}
