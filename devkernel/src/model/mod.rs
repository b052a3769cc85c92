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

pub(crate) use crate::event::EventKind;
pub(crate) use agent::AgentRecord;
pub(crate) use api_key::{ApiKey, IssuedApiKey};
pub(crate) use approval::{Approval, ApprovalStatus};
pub(crate) use decision::{StepDecision, StepResource};
pub(crate) use event::Event;
pub(crate) use execution::{Execution, ExecutionStatus, SpawnedBy};
pub(crate) use resource::{CheckpointView, ForkPoints, ResourceView, Restoration};
pub(crate) use step::{StepRecord, StepStatus};
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
