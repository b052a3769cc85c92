//! The protocol's JSON objects (PROTOCOL.md §2.4, §1.12), public so tests can inspect them.

mod agent;
mod api_key;
mod approval;
mod decision;
mod event;
mod execution;
mod resource;
mod step;
mod time;

pub use crate::event::{EventKind, UnknownEventKind};
pub use agent::AgentRecord;
pub use api_key::{ApiKey, IssuedApiKey};
pub use approval::{Approval, ApprovalStatus};
pub use decision::{StepDecision, StepResource};
pub use event::Event;
pub use execution::{Execution, ExecutionStatus, SpawnedBy};
pub use resource::{CheckpointView, ForkPoints, ResourceView, Restoration};
pub use step::{StepRecord, StepStatus};
pub use time::Timestamp;

/// Deserializes a present field, `null` included, as `Some` (an absent one stays `None`
/// through `#[serde(default)]`): tells `"result": null` from no result.
pub(crate) fn present<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    T::deserialize(d).map(Some)
}
